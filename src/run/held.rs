//! `leader_exec_held_slot`: the slots `leader-exec hold` keeps in this instance's lease, for
//! /metrics. A held slot has no process, hence no /metrics of its own; every instance of the
//! lease that serves metrics shows the held slots it last read.
//!
//! # Never in the way of the safety path
//! [`export`] runs beside [`super::Runner::run`] in one `select!` that polls the run first and
//! drops this future the moment the run ends: nothing the run does waits for it, and the stop
//! path never reaches it. Its reads are the ones `watch` makes (the holders, then their published
//! records), each bounded by `--retry-period`, once per `--ttl`: a few small requests on the
//! store's connection, which a renewal at most queues behind for their round trip.

use crate::election::Store;
use crate::records::published;

use super::{Event, Reporter, Settings};

/// Reads the holders once per `--ttl` and reports the held ones ([`Event::HeldSlots`], which
/// the metrics show); never returns. A read that fails or times out reports nothing, which leaves
/// the last set shown (a store outage must not make a held slot look released).
pub async fn export<B: Store>(backend: &B, settings: &Settings, report: &Reporter) {
    let scope = settings.scope();
    let limit = settings.timing.retry_period;
    loop {
        if let Ok(Ok(observation)) = tokio::time::timeout(limit, backend.read_election()).await {
            let read = published::read_each(
                backend,
                &scope,
                observation.max_holders,
                &observation.holders,
                limit,
            );
            if let Ok(Ok(states)) = tokio::time::timeout(limit, read).await {
                let held = observation
                    .holders
                    .iter()
                    .zip(states)
                    .filter_map(|(holder, state)| {
                        let ms = state?.held_for_ms?;
                        let identity = String::from_utf8_lossy(&holder.identity).into_owned();
                        Some((identity, holder.token, ms))
                    })
                    .collect();
                report.emit(Event::HeldSlots { held });
            }
        }
        tokio::time::sleep(settings.timing.ttl).await;
    }
}
