//! `leader-exec watch`: one line per leadership change until INT or TERM; store outages are
//! waited out. With `--max-holders` N > 1 (as the store says the instances use), one line per
//! change of the holder set, naming every holder. A holder that runs `--health-cmd` records its
//! verdict ([`published`]); each line shows it, and a change of it prints a line too.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{PROVISIONAL_GRACE, leader_json, provisional, read_once};
use crate::election::Scope;
use crate::election::{Backoff, Leader, Observation, Store};
use crate::escape::escape;
use crate::records::published::{self, Health};
use crate::signals::{self, Signals};

/// How often the holders' records are read again while one records a health check, or a new
/// holder has not recorded its state yet (it does so beside its command's start).
const HEALTH_POLL: Duration = Duration::from_secs(1);

/// How long after a change of the holders a missing record is looked for again.
const RECORD_GRACE: Duration = Duration::from_secs(10);

/// The holders, their health, and the bound of each that is a held slot.
type Printed = (Vec<Leader>, Vec<Option<Health>>, Vec<Option<u64>>);

/// What was printed last: the holders (with --max-holders 1: the leader alone, or none) and
/// their health. A line is printed when the set, a holder's token, or a holder's health
/// changes, not on other changes (candidates).
struct Shown {
    last: Option<Printed>,
    /// When the holders last changed.
    holders_since: Instant,
}

/// `leader-exec watch`: one line per leadership change until INT or TERM.
pub async fn watch<B: Store>(
    backend: &B,
    scope: &Scope,
    json: bool,
    limit: Duration,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    // The first read is bounded like every command's first contact; later outages are waited out.
    let mut observation = read_once(backend, limit).await?;
    let mut shown = Shown {
        last: None,
        holders_since: Instant::now(),
    };
    let mut backoff = Backoff::new();
    let mut pending = None;
    loop {
        // A provisional leader (ZooKeeper: not marked yet) is held back until its mark comes,
        // which wakes `changed_since` and prints the leader once with the token its command is
        // given, or until PROVISIONAL_GRACE has passed since it was first seen (a Curator
        // leader, which never marks: shown with its node's czxid).
        let held = held_back(&observation, &mut pending);
        let mut poll = false;
        if held.is_none() {
            match show(
                backend,
                scope,
                &observation,
                json,
                limit,
                &mut shown,
                signals,
            )
            .await?
            {
                Some(again) => poll = again,
                None => return Ok(0),
            }
        }
        let release = tokio::time::Instant::now() + held.unwrap_or_default();
        let mut held = held.is_some();
        let next = {
            let next = async {
                loop {
                    if let Err(e) = backend.changed_since(&observation).await {
                        tracing::debug!(error = %e, "watch interrupted; reading again");
                        backoff.sleep().await;
                    }
                    match backend.read_election().await {
                        Ok(next) => return next,
                        Err(e) => {
                            tracing::debug!(error = %e, "reading the election failed; retrying");
                            backoff.sleep().await;
                        }
                    }
                }
            };
            tokio::pin!(next);
            // The wait for the next change goes on across the looks at the records.
            loop {
                tokio::select! {
                    next = &mut next => break next,
                    () = tokio::time::sleep_until(release), if held => {
                        held = false;
                        match show(backend, scope, &observation, json, limit, &mut shown, signals).await? {
                            Some(again) => poll = again,
                            None => return Ok(0),
                        }
                    }
                    () = tokio::time::sleep(HEALTH_POLL), if poll => {
                        match show(backend, scope, &observation, json, limit, &mut shown, signals).await? {
                            Some(again) => poll = again,
                            None => return Ok(0),
                        }
                    }
                    signal = signals.recv() => {
                        if signals::stops_the_child(signal) {
                            return Ok(0);
                        }
                    }
                }
            }
        };
        observation = next;
    }
}

/// How long more to hold `observation` back before showing it: `None` unless its leader is
/// provisional and was first seen (`pending`: its key, when) less than [`PROVISIONAL_GRACE`]
/// ago.
fn held_back(
    observation: &Observation,
    pending: &mut Option<(Vec<u8>, Instant)>,
) -> Option<Duration> {
    let leader = observation.leader().filter(|_| provisional(observation));
    let Some(leader) = leader else {
        *pending = None;
        return None;
    };
    let since = match pending {
        Some((key, since)) if *key == leader.key => *since,
        _ => {
            let now = Instant::now();
            *pending = Some((leader.key.clone(), now));
            now
        }
    };
    PROVISIONAL_GRACE
        .checked_sub(since.elapsed())
        .filter(|left| !left.is_zero())
}

/// Reads the holders' records and prints a line if the holders or their health changed.
/// `None`: asked to stop (or nobody reads any more); else whether to look at the records again
/// in [`HEALTH_POLL`]: only while a holder records a health check, or shortly after a change
/// while a holder has recorded nothing yet. Without --health-cmd, watch stays idle.
async fn show<B: Store>(
    backend: &B,
    scope: &Scope,
    observation: &Observation,
    json: bool,
    limit: Duration,
    shown: &mut Shown,
    signals: &mut Signals,
) -> anyhow::Result<Option<bool>> {
    let same_holders = shown
        .last
        .as_ref()
        .is_some_and(|(holders, _, _)| holders == &observation.holders);
    if !same_holders {
        shown.holders_since = Instant::now();
    }
    // Bounded; when the records cannot be read, the health last shown stands (a store outage
    // prints no line of its own).
    let read = published::read_each(
        backend,
        scope,
        observation.max_holders,
        &observation.holders,
        limit,
    );
    let states = tokio::select! {
        states = read => states.ok(),
        signal = signals.recv() => {
            if signals::stops_the_child(signal) {
                return Ok(None);
            }
            None
        }
    };
    let health: Vec<Option<Health>> = match (&states, &shown.last) {
        (Some(states), _) => states
            .iter()
            .map(|s| s.as_ref().and_then(|s| s.health))
            .collect(),
        (None, Some((_, health, _))) if same_holders => health.clone(),
        (None, _) => vec![None; observation.holders.len()],
    };
    // A slot `hold` took: its bound (`--for`), shown after the holder.
    let held: Vec<Option<u64>> = match (&states, &shown.last) {
        (Some(states), _) => states
            .iter()
            .map(|s| s.as_ref().and_then(|s| s.held_for_ms))
            .collect(),
        (None, Some((_, _, held))) if same_holders => held.clone(),
        (None, _) => vec![None; observation.holders.len()],
    };
    let now = (observation.holders.clone(), health, held);
    if shown.last.as_ref() != Some(&now) {
        if let Err(e) = print_change(scope, observation, &now.1, &now.2, json) {
            // Nobody reads any more (`watch | head -1`): done.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(None);
            }
            return Err(e.into());
        }
        shown.last = Some(now);
    }
    Ok(Some(match &states {
        Some(states) => states.iter().any(|s| match s {
            Some(state) => state.health.is_some(),
            None => shown.holders_since.elapsed() < RECORD_GRACE,
        }),
        None => true,
    }))
}

fn print_change(
    scope: &Scope,
    observation: &Observation,
    health: &[Option<Health>],
    held: &[Option<u64>],
    json: bool,
) -> std::io::Result<()> {
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let mut out = std::io::stdout().lock();
    out.write_all(render_held(scope, observation, health, held, json, &time).as_bytes())?;
    out.flush()
}

/// One change as a line. JSON: `time`, `lease`, `leader` (the oldest holder, or null),
/// `max_holders`, `holders` (oldest first); each holder with `health` as it recorded it (null
/// without `--health-cmd`, or before it recorded its state). Text with `--max-holders` 1 as it
/// always was; above 1, `holders K of N` and each holder's identity, token and key; either adds
/// `health …` after a holder that records a health check.
#[cfg(test)]
fn render(
    scope: &Scope,
    observation: &Observation,
    health: &[Option<Health>],
    json: bool,
    time: &str,
) -> String {
    render_held(scope, observation, health, &[], json, time)
}

/// [`render`], with each holder's bound where it is a slot `hold` took (`held_for_seconds` in
/// JSON, null otherwise; `held for DUR` in text).
fn render_held(
    scope: &Scope,
    observation: &Observation,
    health: &[Option<Health>],
    held: &[Option<u64>],
    json: bool,
    time: &str,
) -> String {
    let health_of = |i: usize| health.get(i).copied().flatten();
    let held_of = |i: usize| held.get(i).copied().flatten();
    let leader = observation.leader();
    if json {
        let holders: Vec<_> = observation
            .holders
            .iter()
            .enumerate()
            .map(|(i, holder)| {
                let mut object = leader_json(holder);
                object["health"] = json!(health_of(i));
                object["held_for_seconds"] = json!(held_of(i).map(|ms| ms / 1000));
                object
            })
            .collect();
        let object = json!({
            "time": time,
            "lease": scope.lease,
            "leader": holders.first(),
            "max_holders": observation.max_holders,
            "holders": holders,
        });
        return format!("{object}\n");
    }
    let shown = |i: usize| {
        let mut text = match health_of(i) {
            Some(health) => format!(" health {}", health.short()),
            None => String::new(),
        };
        if let Some(ms) = held_of(i) {
            text.push_str(&format!(
                " held for {}",
                humantime::format_duration(Duration::from_millis(ms))
            ));
        }
        text
    };
    if observation.max_holders > 1 {
        let mut line = format!(
            "{time} holders {} of {}",
            observation.holders.len(),
            observation.max_holders
        );
        for (i, holder) in observation.holders.iter().enumerate() {
            line.push_str(if i == 0 { ": " } else { ", " });
            line.push_str(&format!(
                "{} token {} key {}{}",
                escape(&holder.identity),
                holder.token,
                escape(&holder.key),
                shown(i)
            ));
        }
        line.push('\n');
        return line;
    }
    match leader {
        Some(leader) => format!(
            "{time} leader {} token {} key {}{}\n",
            escape(&leader.identity),
            leader.token,
            escape(&leader.key),
            shown(0)
        ),
        None => format!("{time} no leader\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(token: i64, identity: &[u8]) -> Leader {
        Leader {
            key: format!("/p/x/{token:x}").into_bytes(),
            identity: identity.to_vec(),
            token,
            lease_id: Some(token),
            provisional: false,
        }
    }

    fn seen(holders: Vec<Leader>, max_holders: u32) -> Observation {
        Observation {
            holders,
            max_holders,
            candidates: 4,
            revision: 0,
        }
    }

    const T: &str = "2026-01-01T00:00:00.000Z";

    #[test]
    fn a_provisional_leader_is_held_back_for_the_grace_only() {
        let mut pending = None;
        let mut leader = holder(12, b"a:1");
        leader.provisional = true;
        let first = seen(vec![leader.clone()], 1);
        let left = held_back(&first, &mut pending).expect("held back");
        assert!(left <= PROVISIONAL_GRACE);
        // Seen again (a change of candidates): the grace runs from the first sight.
        pending.as_mut().unwrap().1 -= PROVISIONAL_GRACE;
        assert_eq!(held_back(&first, &mut pending), None);
        // Marked: shown at once, and the next provisional leader waits anew.
        assert_eq!(
            held_back(&seen(vec![holder(13, b"a:1")], 1), &mut pending),
            None
        );
        assert_eq!(pending, None);
        assert!(held_back(&first, &mut pending).is_some());
        // Other stores never set it; with N > 1 it is never set either.
        assert_eq!(held_back(&seen(vec![leader], 3), &mut None), None);
    }

    #[test]
    fn one_holder_prints_as_it_always_did() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        assert_eq!(
            render(&scope, &seen(vec![holder(10, b"a:1")], 1), &[], false, T),
            "2026-01-01T00:00:00.000Z leader a:1 token 10 key /p/x/a\n"
        );
        assert_eq!(
            render(&scope, &seen(vec![], 1), &[], false, T),
            "2026-01-01T00:00:00.000Z no leader\n"
        );
    }

    #[test]
    fn a_held_slot_shows_its_bound() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        let two = seen(vec![holder(10, b"a:1"), holder(17, b"host-b")], 2);
        assert_eq!(
            render_held(&scope, &two, &[], &[None, Some(3_600_000)], false, T),
            "2026-01-01T00:00:00.000Z holders 2 of 2: a:1 token 10 key /p/x/a, host-b token 17 key /p/x/11 held for 1h\n"
        );
        let value: serde_json::Value = serde_json::from_str(&render_held(
            &scope,
            &two,
            &[],
            &[None, Some(3_600_000)],
            true,
            T,
        ))
        .unwrap();
        assert!(value["holders"][0]["held_for_seconds"].is_null());
        assert_eq!(value["holders"][1]["held_for_seconds"], 3600);
    }

    #[test]
    fn several_holders_are_named_each_on_one_line() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        let two = seen(vec![holder(10, b"a:1"), holder(17, b"b\n:2")], 3);
        assert_eq!(
            render(&scope, &two, &[], false, T),
            "2026-01-01T00:00:00.000Z holders 2 of 3: a:1 token 10 key /p/x/a, b\\n:2 token 17 key /p/x/11\n"
        );
        assert_eq!(
            render(&scope, &seen(vec![], 3), &[], false, T),
            "2026-01-01T00:00:00.000Z holders 0 of 3\n"
        );
        let line = render(&scope, &two, &[], true, T);
        assert_eq!(line.lines().count(), 1);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["leader"]["token"], 10);
        assert_eq!(value["max_holders"], 3);
        assert_eq!(value["holders"][1]["token"], 17);
        assert_eq!(value["holders"][1]["identity"], "b\n:2");
        assert!(value["holders"][1]["health"].is_null());
    }

    #[test]
    fn a_holder_with_a_health_check_shows_it() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        let failing = Health {
            healthy: true,
            failures: 2,
            retries: 3,
        };
        let one = seen(vec![holder(10, b"a:1")], 1);
        assert_eq!(
            render(&scope, &one, &[Some(failing)], false, T),
            "2026-01-01T00:00:00.000Z leader a:1 token 10 key /p/x/a health failing 2 of 3\n"
        );
        let two = seen(vec![holder(10, b"a:1"), holder(17, b"b:2")], 3);
        let healthy = Health {
            failures: 0,
            ..failing
        };
        assert_eq!(
            render(&scope, &two, &[None, Some(healthy)], false, T),
            "2026-01-01T00:00:00.000Z holders 2 of 3: a:1 token 10 key /p/x/a, b:2 token 17 key /p/x/11 health healthy\n"
        );
        let value: serde_json::Value =
            serde_json::from_str(&render(&scope, &two, &[None, Some(healthy)], true, T)).unwrap();
        assert!(value["leader"]["health"].is_null());
        assert_eq!(value["holders"][1]["health"]["healthy"], true);
        assert_eq!(value["holders"][1]["health"]["retries"], 3);
    }
}
