//! `leader-exec watch`: one line per leadership change until INT or TERM; store outages are
//! waited out.

use std::io::Write as _;
use std::time::Duration;

use serde_json::json;

use super::{leader_json, read_once};
use crate::election::Scope;
use crate::election::{Backoff, Leader, Store};
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
    let mut shown: Option<Option<Leader>> = None;
    let mut backoff = Backoff::new();
    loop {
        if shown.as_ref() != Some(&observation.leader().cloned()) {
            if let Err(e) = print_change(scope, observation.leader(), json) {
                // Nobody reads any more (`watch | head -1`): done.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(0);
                }
                return Err(e.into());
            }
            shown = Some(observation.leader().cloned());
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

fn print_change(scope: &Scope, leader: Option<&Leader>, json: bool) -> std::io::Result<()> {
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let mut out = std::io::stdout().lock();
    if json {
        let object = json!({
            "time": time,
            "lease": scope.lease,
            "leader": leader.map(leader_json),
        });
        writeln!(out, "{object}")?;
    } else {
        match leader {
            Some(leader) => writeln!(
                out,
                "{time} leader {} token {} key {}",
                escape(&leader.identity),
                leader.token,
                escape(&leader.key)
            )?,
            None => writeln!(out, "{time} no leader")?,
        }
    }
    out.flush()
}
