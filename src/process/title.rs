//! The supervisor's name: `comm` and the command line it shows in `ps`.

use nix::sys::prctl;
use nix::unistd::Pid;

/// The supervisor's name in `ps`, `top` and /proc/PID/comm: it must not match `leader-exec`.
pub const PROCESS_NAME: &str = "lx-supervisor";

/// Renames the forked supervisor: `comm` (what `pkill` and `killall` match) by PR_SET_NAME, and
/// the command line (what `pkill -f` and `ps` show) by overwriting the argv area in place, which
/// also removes a `--user NAME:PASS` from the supervisor's command line. The new command line is
/// `lx-supervisor PARENT_PID`.
pub fn rename_process(parent: Pid) {
    rewrite_argv(parent);
    // The name last: whoever finds the process by its new name sees its new command line too.
    let _ = prctl::set_name(c"lx-supervisor");
}

fn rewrite_argv(parent: Pid) {
    let Some((start, end)) = argv_area() else {
        return;
    };
    let title = format!("{PROCESS_NAME} {parent}");
    let length = end - start;
    if length == 0 {
        return;
    }
    let mut bytes = vec![0u8; length];
    let shown = title.len().min(length - 1);
    bytes[..shown].copy_from_slice(&title.as_bytes()[..shown]);
    // SAFETY: [start, end) is this process's own argv area as the kernel reports it (the
    // strings the initial stack holds, writable); nothing in the supervisor reads argv again
    // (the command was copied before the fork), and the last byte written is a NUL, so the
    // kernel does not read on into the environment.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), start as *mut u8, length) };
}

/// `arg_start` and `arg_end` from /proc/self/stat (fields 48 and 49, counted after the
/// parenthesised `comm`, which may itself hold spaces and parentheses).
fn argv_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // The first field after `comm` is field 3 (state).
    let start: usize = fields.get(48 - 3)?.parse().ok()?;
    let end: usize = fields.get(49 - 3)?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}
