//! `leader-exec watch`: one line per leadership change until INT or TERM; store outages are
//! waited out. With `--max-holders` N > 1 (as the store says the instances use), one line per
//! change of the holder set, naming every holder.

use std::io::Write as _;
use std::time::Duration;

use serde_json::json;

use super::{leader_json, read_once};
use crate::election::Scope;
use crate::election::{Backoff, Leader, Observation, Store};
use crate::escape::escape;
use crate::signals::{self, Signals};

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
    // The holders last shown (with --max-holders 1: the leader alone, or none): a line is
    // printed when the set, or a holder's token, changes, not on other changes (candidates).
    let mut shown: Option<Vec<Leader>> = None;
    let mut backoff = Backoff::new();
    loop {
        if shown.as_ref() != Some(&observation.holders) {
            if let Err(e) = print_change(scope, &observation, json) {
                // Nobody reads any more (`watch | head -1`): done.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(0);
                }
                return Err(e.into());
            }
            shown = Some(observation.holders.clone());
        }
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
        tokio::select! {
            next = next => observation = next,
            signal = signals.recv() => {
                if signals::stops_the_child(signal) {
                    return Ok(0);
                }
            }
        }
    }
}

fn print_change(scope: &Scope, observation: &Observation, json: bool) -> std::io::Result<()> {
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let mut out = std::io::stdout().lock();
    out.write_all(render(scope, observation, json, &time).as_bytes())?;
    out.flush()
}

/// One change as a line. JSON: `time`, `lease`, `leader` (the oldest holder, or null),
/// `max_holders`, `holders` (oldest first). Text with `--max-holders` 1 as it always was;
/// above 1, `holders K of N` and each holder's identity, token and key.
fn render(scope: &Scope, observation: &Observation, json: bool, time: &str) -> String {
    let leader = observation.leader();
    if json {
        let holders: Vec<_> = observation.holders.iter().map(leader_json).collect();
        let object = json!({
            "time": time,
            "lease": scope.lease,
            "leader": leader.map(leader_json),
            "max_holders": observation.max_holders,
            "holders": holders,
        });
        return format!("{object}\n");
    }
    if observation.max_holders > 1 {
        let mut line = format!(
            "{time} holders {} of {}",
            observation.holders.len(),
            observation.max_holders
        );
        for (i, holder) in observation.holders.iter().enumerate() {
            line.push_str(if i == 0 { ": " } else { ", " });
            line.push_str(&format!(
                "{} token {} key {}",
                escape(&holder.identity),
                holder.token,
                escape(&holder.key)
            ));
        }
        line.push('\n');
        return line;
    }
    match leader {
        Some(leader) => format!(
            "{time} leader {} token {} key {}\n",
            escape(&leader.identity),
            leader.token,
            escape(&leader.key)
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
    fn one_holder_prints_as_it_always_did() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        assert_eq!(
            render(&scope, &seen(vec![holder(10, b"a:1")], 1), false, T),
            "2026-01-01T00:00:00.000Z leader a:1 token 10 key /p/x/a\n"
        );
        assert_eq!(
            render(&scope, &seen(vec![], 1), false, T),
            "2026-01-01T00:00:00.000Z no leader\n"
        );
    }

    #[test]
    fn several_holders_are_named_each_on_one_line() {
        let scope = Scope {
            lease: "x".into(),
            prefix: "/p/".into(),
        };
        let two = seen(vec![holder(10, b"a:1"), holder(17, b"b\n:2")], 3);
        assert_eq!(
            render(&scope, &two, false, T),
            "2026-01-01T00:00:00.000Z holders 2 of 3: a:1 token 10 key /p/x/a, b\\n:2 token 17 key /p/x/11\n"
        );
        assert_eq!(
            render(&scope, &seen(vec![], 3), false, T),
            "2026-01-01T00:00:00.000Z holders 0 of 3\n"
        );
        let line = render(&scope, &two, true, T);
        assert_eq!(line.lines().count(), 1);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["leader"]["token"], 10);
        assert_eq!(value["max_holders"], 3);
        assert_eq!(value["holders"][1]["token"], 17);
        assert_eq!(value["holders"][1]["identity"], "b\n:2");
    }
}
