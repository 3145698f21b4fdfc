//! What /proc says of processes and process groups, read from leader-exec's side.

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::Pid;

/// The children of `pid`, from /proc/PID/task/PID/children.
pub fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// (state, process group) of a process, from /proc/PID/stat.
pub fn stat_of(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

pub fn process_group_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|(_, group)| group)
}

/// The live (not zombie) processes whose process group is `group`. Cheap enough for a few polls
/// a second: one small read per process on the machine.
pub fn members_of(group: i32) -> Vec<i32> {
    // The quick answer first: no process at all in the group.
    if killpg(Pid::from_raw(group), None) == Err(Errno::ESRCH) {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![group];
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| matches!(stat_of(pid), Some((state, g)) if g == group && state != 'Z' && state != 'X'))
        .collect()
}
