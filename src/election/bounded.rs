//! One request of a subcommand, bounded by the connect timeout.

use std::time::Duration;

use super::{Reach, Store, StoreError};
use crate::exit::Failure;

/// Bounds one request by the connect timeout: these commands run from scripts and must not hang.
/// A timeout names the store and the endpoint, as at first contact.
pub async fn bounded<B: Store, T>(
    backend: &B,
    limit: Duration,
    what: &str,
    request: impl Future<Output = Result<T, StoreError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Failure::usage(format!("{what}: {e}")).into()),
        Err(_) => Err(Failure::usage(format!(
            "{what}: {}",
            Reach::of(backend).no_answer(limit, None)
        ))
        .into()),
    }
}
