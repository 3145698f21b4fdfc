//! Occurrence records' retention on ZooKeeper, judged by the servers' clock.
//!
//! ZooKeeper has no TTL a client can rely on (TTL nodes need the server's
//! `extendedTypesEnabled`, off by default), and no request that reads the servers' time. But
//! every write stamps the node it changes: a node's `mtime` is the time of the ensemble's leader
//! server when it applied the write. So a record's age is `server now − its mtime`, where
//! "server now" is the `mtime` of a write this process made (the leader mark or holder touch
//! when it began to lead, the record write itself) plus the time elapsed on this host's
//! *monotonic* clock since that write's answer arrived. The write was applied before its answer
//! arrived, so that is never later than the servers' true time: a record is never taken for
//! expired early. No host's wall clock enters: a host whose clock is ahead does not run an
//! occurrence again early.
//!
//! The data is one line `leader-exec-expires-ms=<unix ms>` (the writer's clock + retention, read
//! only by earlier versions, which judge it by the reader's clock) then the record, a JSON object
//! that also carries its retention (`retention_ms`), so each record keeps its own. A record an
//! earlier version wrote (no `retention_ms`) expires once server now passes its expiry instant.
//!
//! Retention is enforced by a sweep: after writing a record, the leader deletes the lease's
//! records whose age exceeds their retention, in the background (the command is not kept
//! waiting), at most [`SWEEP_DELETES`] a run, each delete version-checked so that a record
//! written again meanwhile stays.

use std::time::{Duration, Instant};

use super::{EXPIRES, ZooKeeper, classify, zk};

/// The JSON field that carries a record's retention.
const RETENTION: &str = "retention_ms";
/// The most records one sweep deletes, and the most it reads (sent a hundred at a time).
const SWEEP_DELETES: usize = 100;
const SWEEP_READS: usize = 1000;
/// How long a released leader lets its sweep finish before it exits (less than a release
/// attempt's own bound, run/release.rs).
pub(super) const SWEEP_GRACE: Duration = Duration::from_millis(500);

/// The servers' clock as seen in a write's answer: the `mtime` it stamped, and when (on this
/// host's monotonic clock) the answer arrived.
#[derive(Clone, Copy, Debug)]
pub(super) struct ServerTime {
    mtime: i64,
    seen: Instant,
}

impl ServerTime {
    /// `None` for a stat the server left invalid (ZOOKEEPER-4026: some servers answer a create
    /// in a multi without one).
    pub(super) fn of(stat: &zk::Stat) -> Option<ServerTime> {
        (!stat.is_invalid() && stat.mtime > 0).then(|| ServerTime {
            mtime: stat.mtime,
            seen: Instant::now(),
        })
    }

    /// A lower bound of the servers' time now, in unix ms.
    pub(super) fn now(&self) -> i64 {
        self.mtime
            .saturating_add(i64::try_from(self.seen.elapsed().as_millis()).unwrap_or(i64::MAX))
    }
}

/// A record's data: the expiry line, then the record with its retention in it.
pub(super) fn with_expiry(value: &[u8], retention: Duration) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let until = now.saturating_add(retention).as_millis();
    let mut data = format!("{EXPIRES}{until}\n").into_bytes();
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(value) {
        Ok(mut record) => {
            let ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
            record.insert(RETENTION.into(), ms.into());
            data.extend(serde_json::to_vec(&record).expect("a JSON object serializes"));
        }
        // Not a record (a handover request's token): as it is.
        Err(_) => data.extend_from_slice(value),
    }
    data
}

/// Splits a node's data into its expiry instant (unix ms) and the record; `None` for data
/// without the expiry line (written by something else), which never expires.
fn split(data: &[u8]) -> Option<(u128, &[u8])> {
    let rest = data.strip_prefix(EXPIRES.as_bytes())?;
    let newline = rest.iter().position(|&b| b == b'\n')?;
    let until = std::str::from_utf8(&rest[..newline]).ok()?.parse().ok()?;
    Some((until, &rest[newline + 1..]))
}

/// The record inside a record node's data, expiry line removed (whole without one).
pub(super) fn record_of(data: Vec<u8>) -> Vec<u8> {
    match split(&data) {
        Some((_, record)) => record.to_vec(),
        None => data,
    }
}

/// Whether a record node is past its retention at server time `now` (unix ms): its age by the
/// servers' clock against the retention it carries, or for an earlier version's record its
/// expiry instant against `now`. Data without the expiry line never expires.
pub(super) fn expired_at(data: &[u8], stat: &zk::Stat, now: i64) -> bool {
    let Some((until, record)) = split(data) else {
        return false;
    };
    let retention = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(record)
        .ok()
        .and_then(|r| r.get(RETENTION).and_then(|v| v.as_u64()));
    match retention {
        Some(ms) => i128::from(now) - i128::from(stat.mtime) >= i128::from(ms),
        None => i128::from(now) >= i128::try_from(until).unwrap_or(i128::MAX),
    }
}

/// The record inside a record node's data by the *reader's* clock, `None` once it has expired
/// by it. For what decides nothing: `status` listings, and handover requests (whose writer and
/// reader are the same kind of host, and whose retention only bounds a stale request's life).
/// Data without the expiry line is returned whole and never expires.
pub(super) fn unexpired(data: Vec<u8>) -> Option<Vec<u8>> {
    let Some((until, record)) = split(&data) else {
        return Some(data);
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    (now < until).then(|| record.to_vec())
}

/// Deletes the records under `parent` that are past their retention (see the module comment).
/// `written` is the record this leader just wrote under it: its answer's server time, or when
/// the server left that stat invalid, the node's `mtime` read back.
pub(super) async fn sweep(
    client: zk::Client,
    parent: String,
    written: String,
    at: Option<ServerTime>,
) {
    let clock = match at {
        Some(at) => at,
        None => match client.check_stat(&written).await {
            Ok(Some(stat)) => match ServerTime::of(&stat) {
                Some(at) => at,
                None => return,
            },
            _ => return,
        },
    };
    let mut names = match client.list_children(&parent).await {
        Ok(names) => names,
        Err(e) => {
            tracing::debug!(error = %classify(e), "listing occurrence records to sweep failed");
            return;
        }
    };
    // Beyond SWEEP_READS children a sweep reads only some of them: it starts at an offset
    // that changes from run to run (the write's millisecond), so that every record is read
    // by some run, not only those the server happens to list first.
    if !names.is_empty() {
        let offset = clock.mtime.unsigned_abs() % names.len() as u64;
        names.rotate_left(usize::try_from(offset).unwrap_or(0));
    }
    let mut deleted = 0;
    for chunk in names
        .chunks(SWEEP_DELETES)
        .take(SWEEP_READS / SWEEP_DELETES)
    {
        // Sent together (the library sends in call order), answered in order.
        let paths: Vec<String> = chunk.iter().map(|n| format!("{parent}/{n}")).collect();
        let reads: Vec<_> = paths.iter().map(|p| client.get_data(p)).collect();
        let mut expired = Vec::new();
        for (path, read) in paths.iter().zip(reads) {
            if let Ok((data, stat)) = read.await
                && expired_at(&data, &stat, clock.now())
            {
                expired.push((path, stat.version));
            }
        }
        for (path, version) in expired {
            if deleted >= SWEEP_DELETES {
                break;
            }
            // Version-checked: a record written again since it was read is not expired.
            if client.delete(path, Some(version)).await.is_ok() {
                deleted += 1;
            }
        }
        if deleted >= SWEEP_DELETES {
            break;
        }
    }
    if deleted > 0 {
        tracing::debug!(
            event = "occurrences-swept",
            deleted,
            "deleted {deleted} occurrence records past their retention"
        );
    }
}

impl ZooKeeper {
    /// Stops a sweep still running: its client clone would keep a released session open.
    pub(super) fn stop_sweep(&self) {
        if let Some(sweep) = self.sweep.lock().expect("not poisoned").take() {
            sweep.abort();
        }
    }

    /// Lets a sweep still running finish, for at most `SWEEP_GRACE`, then stops it. Called
    /// once the claim is released (the next leader waits for nothing here): a quick command
    /// would otherwise end every sweep before it deleted anything.
    pub(super) async fn finish_sweep(&self) {
        let Some(mut sweep) = self.sweep.lock().expect("not poisoned").take() else {
            return;
        };
        if tokio::time::timeout(SWEEP_GRACE, &mut sweep).await.is_err() {
            sweep.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime: i64) -> zk::Stat {
        zk::Stat {
            czxid: 1,
            mzxid: 1,
            pzxid: 1,
            ctime: mtime,
            mtime,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children: 0,
        }
    }

    #[test]
    fn age_by_the_servers_clock_against_the_records_own_retention() {
        let data = with_expiry(br#"{"state":"done","token":3}"#, Duration::from_secs(30));
        let text = String::from_utf8(data.clone()).unwrap();
        assert!(text.contains(r#""retention_ms":30000"#), "{text}");
        // The writer's clock in the expiry line does not matter: only mtime and now do.
        assert!(!expired_at(&data, &stat(1_000_000), 1_029_999));
        assert!(expired_at(&data, &stat(1_000_000), 1_030_000));
        // The record read back parses, the extra field ignored.
        let record = record_of(data);
        let value: serde_json::Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(value["state"], "done");
    }

    #[test]
    fn earlier_versions_records_expire_at_their_instant_by_the_servers_clock() {
        let data = b"leader-exec-expires-ms=5000\n{\"state\":\"done\"}".to_vec();
        assert!(!expired_at(&data, &stat(1), 4999));
        assert!(expired_at(&data, &stat(1), 5000));
        // Not a record of ours: never expires.
        assert!(!expired_at(b"{\"state\":\"done\"}", &stat(1), i64::MAX));
        // A handover request's token stays as it is.
        let token = with_expiry(b"42", Duration::from_secs(1));
        assert_eq!(record_of(token), b"42");
    }
}
