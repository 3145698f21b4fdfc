//! Held slots (`leader-exec hold`) on etcd: the candidate key moved to a lease nobody renews.

use super::*;

impl Etcd {
    /// The candidate key (and its marker with N > 1) moves to a lease of its own with TTL
    /// `bound` that nobody keeps alive, in one transaction fenced by the key's create-revision
    /// and its old lease; then the old lease is revoked. The key keeps its create-revision (its
    /// place in line and its token), and with N > 1 stays taken (the put raises its
    /// mod-revision again). etcd times the new lease on its own monotonic clock from the grant,
    /// which follows the take: the slot goes `bound` after it was held (an etcd restart or a
    /// new raft leader gives every lease its full TTL again, as for any holder).
    pub(super) async fn hold_slot(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        let Some(old) = candidacy.lease_id else {
            return Ok(None);
        };
        // Whole seconds, rounded up: never shorter than asked.
        let seconds = i64::try_from(bound.as_secs() + u64::from(bound.subsec_nanos() > 0))
            .unwrap_or(i64::MAX)
            .max(1);
        let grant = self
            .client
            .lease_client()
            .grant(seconds, None)
            .await
            .map_err(classify)?;
        let held = grant.id();
        let on_held = || Some(PutOptions::new().with_lease(held));
        let mut puts = vec![TxnOp::put(
            candidacy.key.as_str(),
            self.identity.as_str(),
            on_held(),
        )];
        if self.max_holders > 1 {
            let id = candidacy
                .key
                .strip_prefix(&self.election_prefix)
                .unwrap_or_default();
            puts.push(TxnOp::put(
                format!("{}{id}", self.marker_prefix),
                self.max_holders.to_string(),
                on_held(),
            ));
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(candidacy.key.as_str(), CompareOp::Equal, candidacy.place),
                Compare::lease(candidacy.key.as_str(), CompareOp::Equal, old),
            ])
            .and_then(puts);
        let moved = match self.client.kv_client().txn(txn).await {
            Ok(response) => response.succeeded(),
            Err(e) => {
                let _ = self.client.lease_client().revoke(held).await;
                return Err(classify(e));
            }
        };
        if !moved {
            let _ = self.client.lease_client().revoke(held).await;
            return Ok(None);
        }
        // Nothing is left on the old lease; revoking it only spares etcd the wait.
        let _ = self.client.lease_client().revoke(old).await;
        Ok(Some(Candidacy {
            lease_id: Some(held),
            ..candidacy.clone()
        }))
    }

    /// `remove_claim`'s transaction: the candidate key, only while it has `leader`'s token, and
    /// its marker with it (with N = 1 there is none: that delete does nothing). A marker left
    /// behind would be the oldest, and readers take the election's N from the oldest: a held
    /// slot's lease, unlike a running holder's, is revoked by nobody.
    pub(super) fn removal(&self, leader: &Leader) -> Txn {
        let (key, token) = (leader.key.as_slice(), leader.token);
        let mut ops = vec![TxnOp::delete(key, None)];
        if let Some(id) = key.strip_prefix(self.election_prefix.as_bytes()) {
            ops.push(TxnOp::delete(
                [self.marker_prefix.as_bytes(), id].concat(),
                None,
            ));
        }
        Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, token)])
            .and_then(ops)
    }
}
