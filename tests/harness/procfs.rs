//! What /proc says about a process: alive (zombies not counted), its children, its name and
//! command line as `pkill` sees them, its state, leader-exec's supervisor, a group's live members.

use nix::sys::signal::kill;
use nix::unistd::Pid;

pub fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state too.
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The children of `pid` (from /proc/PID/task/PID/children).
pub fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A process's name as `pkill` and `killall` see it (/proc/PID/comm).
pub fn comm_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// A process's command line as `pkill -f` sees it (NULs shown as spaces).
pub fn cmdline_of(pid: i32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
        .trim_end()
        .to_owned()
}

/// A process's state letter (R, S, T for stopped, Z…), from /proc/PID/stat.
pub fn state_of(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// leader-exec's supervisor process: its child named `lx-supervisor`.
pub fn supervisor_of(leader_exec: i32) -> Option<i32> {
    children_of(leader_exec)
        .into_iter()
        .find(|&pid| comm_of(pid) == "lx-supervisor")
}

/// Whether any process of group `pgid` is alive, zombies not counted (a stopped parent leaves its
/// dead children as zombies, which still count as group members for `kill`).
pub fn group_has_live_member(pgid: i32) -> bool {
    if !group_alive(pgid) {
        return false;
    }
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    let mut fields = rest.split_whitespace();
                    let state = fields.next()?.to_owned();
                    let group: i32 = fields.nth(1)?.parse().ok()?;
                    Some(group == pgid && state != "Z" && state != "X")
                })
                .unwrap_or(false)
        })
}

pub fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(Pid::from_raw(pgid), None).is_ok()
}
