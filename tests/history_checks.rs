//! The checks of the safety property read only complete records: a history or a `$pids` file
//! read while a job is still appending to it (a record half written, a pid the kernel has since
//! handed to another process) counts as no overlap, while a real overlap still fails.

use std::panic::catch_unwind;
use std::process::Command;

use crate::harness::*;
use crate::holders::{assert_at_most_running, holder_job};

/// Complete records: a ran from 1000 to 2000, b from 3000 to 4000, one at a time.
const TWO_TURNS: &str = "start a 1 101 1 1000\nend a 2000\nstart b 2 102 1 3000\nend b 4000\n";

fn history_of(text: &str) -> Vec<Record> {
    let scratch = Scratch::new();
    std::fs::write(scratch.history_path(), text).unwrap();
    scratch.history()
}

fn fails(check: impl FnOnce() + std::panic::UnwindSafe) -> bool {
    catch_unwind(check).is_err()
}

#[test]
fn a_torn_trailing_record_is_no_overlap_and_a_real_overlap_still_fails() {
    // c's start caught half written: `start c 3 103 1 5000` cut after its time's first digit.
    let torn = history_of(&format!("{TWO_TURNS}start c 3 103 1 5"));
    assert_eq!(torn.len(), 4, "{torn:#?}");
    assert_one_at_a_time(&torn);
    assert_at_most_running(&torn, 1);

    // The same start written whole, inside b's run: an overlap, by either check.
    let overlap = history_of(&format!("{TWO_TURNS}start c 3 103 1 3500\n"));
    assert!(fails(|| assert_one_at_a_time(&overlap)));
    assert!(fails(|| assert_at_most_running(&overlap, 1)));
    // With two holders, two at once is no overlap; a third is.
    let two = "start a 1 101 2 1000\nstart b 2 102 2 1100\nend a 2000\nend b 2100\n";
    assert_at_most_running(&history_of(&format!("{two}start c 3 103 2 2")), 2);
    let three = history_of(&format!("{two}start c 3 103 2 1200\nend c 2200\n"));
    assert!(fails(|| assert_at_most_running(&three, 2)));
}

/// The start time of `pid` as `/proc/PID/stat` gives it (field 22, clock ticks since boot).
fn start_of(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().to_owned()
}

/// Runs `job` as leader-exec would start it, with token 3 and `--max-holders 1`, and returns
/// the overlap records it wrote.
fn overlaps_found(scratch: &Scratch, job: &[String]) -> Vec<Record> {
    let status = Command::new(&job[0])
        .args(&job[1..])
        .env("LEADER_TOKEN", "3")
        .env("LEADER_MAX_HOLDERS", "1")
        .status()
        .unwrap();
    assert!(status.success());
    scratch
        .history()
        .into_iter()
        .filter(|r| r.kind == "overlap")
        .collect()
}

#[test]
fn a_jobs_own_check_counts_no_reused_pid_or_torn_line_but_a_live_job_process() {
    let me = std::process::id();
    // Two entries that name no live job process: a pid the kernel has since handed to another
    // process (this test's, started at another tick than the one recorded), and a line cut
    // short by a write still under way (`b 1…` of, say, `b 123 456`: pid 1 is live).
    let stale = format!("a {me} 1\nb 1");
    for job in [
        |s: &Scratch| s.job("c", "true"),
        |s: &Scratch| holder_job(s, "c", "true"),
    ] {
        let scratch = Scratch::new();
        std::fs::write(scratch.path("pids"), &stale).unwrap();
        let found = overlaps_found(&scratch, &job(&scratch));
        assert!(found.is_empty(), "{found:#?}");
    }

    // A live process of an earlier job, listed whole: an overlap.
    let mut earlier = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = earlier.0.id();
    let live = format!("{stale}\nd {pid} {}\n", start_of(pid));
    for job in [
        |s: &Scratch| s.job("c", "true"),
        |s: &Scratch| holder_job(s, "c", "true"),
    ] {
        let scratch = Scratch::new();
        std::fs::write(scratch.path("pids"), &live).unwrap();
        let found = overlaps_found(&scratch, &job(&scratch));
        assert_eq!(found.len(), 1, "{found:#?}");
    }
    let _ = earlier.0.kill();
}
