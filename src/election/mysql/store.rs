//! [`Campaign`] and [`Describe`] on MySQL, and the keeper that renews the held row ([`Read`] is
//! read.rs, [`Records`] and [`Handover`] records.rs, the line of waiters line.rs).
//!
//! [`Read`]: super::super::Read
//! [`Records`]: super::super::Records
//! [`Handover`]: super::super::Handover

use std::sync::atomic::Ordering;
use std::time::Duration;

use mysql_async::Conn;

use super::super::rows::line::wait_turn;
use super::super::{Ahead, Campaign, Candidacy, Describe, Keeper, Renewal, StoreError, Turn};
use super::{Attempt, MySql, hex, take};

impl Campaign for MySql {
    type Keeper = MySqlKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        // A new candidacy holds nothing, whatever an earlier one of this process held: a claim
        // it could not release is left to expire, never renewed by the new keeper.
        self.shared.held.store(0, Ordering::SeqCst);
        self.ready().await?;
        Ok(self.candidacy())
    }

    fn keeper(&self, _candidacy: &Candidacy) -> MySqlKeeper {
        MySqlKeeper {
            backend: self.clone(),
            conn: None,
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        let held = self.shared.held.load(Ordering::SeqCst);
        if candidacy.token != 0 && held == candidacy.token {
            return Ok(Turn::Leading { token: held });
        }
        if self.shared.waiter.load(Ordering::SeqCst) == 0 {
            // Not in line yet (a new candidacy, or one taken for dead by the waiter behind):
            // one attempt first, which takes a free row when nobody waits. Lost: it joins the
            // line and tries again from its place before it waits.
            match self.attempt().await? {
                Attempt::Won(token) => return Ok(Turn::Leading { token }),
                Attempt::Mismatch(theirs) => return Ok(Turn::Mismatch { theirs }),
                Attempt::Held { .. } => {}
            }
            self.join_line().await?;
        }
        match self.attempt().await? {
            Attempt::Won(token) => Ok(Turn::Leading { token }),
            Attempt::Mismatch(theirs) => Ok(Turn::Mismatch { theirs }),
            Attempt::Held { holder, wait } => Ok(Turn::Behind(Ahead {
                key: holder.unwrap_or_default(),
                revision: 0,
                expires_in: Some(wait),
                holders: Vec::new(),
            })),
        }
    }

    /// The wait for a turn is every row store's (`rows/line.rs`); what this waiter reads,
    /// MySQL's (`impl Waiter`, line.rs). Until the first look at the line this waiter may be
    /// first: the lease row's own wait.
    async fn predecessor_gone(
        &self,
        _candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        wait_turn(self, ahead.revision, ahead.expires_in.unwrap_or_default()).await
    }

    async fn key_gone(&self, _candidacy: &Candidacy) {
        // A row taken away shows up as a renewal that answers "expired".
        std::future::pending::<()>().await;
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        if candidacy.token == 0 {
            // A waiter holds no lease, only its place in line, which it leaves.
            return self.leave_line().await;
        }
        self.release_row(candidacy.token).await?;
        let _ = self.shared.held.compare_exchange(
            candidacy.token,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        Ok(())
    }

    /// The row stays as it is, held by this identity with this token, with `ttl_ms` = `bound`
    /// (and `renewals` raised, so that every waiter starts its sighting again from here): no
    /// renewal changes it again, so a waiter takes it over once it has seen it unchanged for
    /// `bound` (or its own --ttl, if longer) on its own CLOCK_BOOTTIME, the rule for a holder
    /// that crashed. `expires_at` (the server's clock) stays a display.
    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
        let sql = format!(
            "{}; SELECT ROW_COUNT()",
            self.extension_sql(candidacy.token, bound_ms)
        );
        let mut rows = self.query(sql).await?;
        let held: i64 = match rows.pop() {
            Some(mut row) => take(&mut row, 0)?,
            None => 0,
        };
        // Nothing renews it from here.
        let _ = self.shared.held.compare_exchange(
            candidacy.token,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        Ok((held == 1).then(|| candidacy.clone()))
    }
}

impl Describe for MySql {
    fn store_name(&self) -> &'static str {
        "MySQL"
    }

    fn shown(&self) -> String {
        self.shared.target.shown.clone()
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        self.shared.target.hosts.clone()
    }

    /// The row keeps `expires_at` and its sighting through a restart: a waiter's count goes on.
    fn restart_resets_leases(&self) -> bool {
        false
    }

    /// A `mariadb` (or `mysql`) client command: the first host of the URL over TCP (as
    /// leader-exec reaches it, also for `localhost`), its user and database; `-p` (the client
    /// then asks for the password) where leader-exec was given one. The key as hex, like every
    /// value leader-exec writes.
    fn delete_record_hint(&self, key: &str) -> String {
        let t = &self.shared.target;
        let (host, port) = t.hosts.first().cloned().unwrap_or_default();
        format!(
            "mariadb --protocol=TCP -h {} -P {port} -u {}{} {} -e {}",
            crate::escape::shell_quote(&host),
            crate::escape::shell_quote(&t.user),
            if t.password.is_some() { " -p" } else { "" },
            crate::escape::shell_quote(&t.database),
            crate::escape::shell_quote(&format!(
                "DELETE FROM {} WHERE `key` = {}",
                self.records(),
                hex(key.as_bytes())
            ))
        )
    }
}

/// Renews the row this instance holds, on a session of its own (a renewal never queues behind
/// another request), whose tables were checked when it opened, as every session's. A waiter holds no row: its renewal answers "alive" without a request.
pub struct MySqlKeeper {
    backend: MySql,
    conn: Option<Conn>,
}

impl Keeper for MySqlKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        let token = self.backend.shared.held.load(Ordering::SeqCst);
        if token == 0 {
            return Ok(Renewal::Alive);
        }
        if let Some(refusal) = self.backend.refusal() {
            return Err(refusal);
        }
        if self.conn.is_none() {
            self.conn = Some(self.backend.open_session(true).await?);
        }
        let conn = self.conn.as_mut().expect("just opened");
        let sql = self
            .backend
            .extension_sql(token, self.backend.shared.ttl_ms);
        match self.backend.run(conn, sql).await {
            Ok(_) => {
                // Matched rows (CLIENT_FOUND_ROWS): 1 while the row holds our identity and
                // token, 0 once it was taken over, released by `resign` or deleted.
                match conn.affected_rows() {
                    1 => Ok(Renewal::Alive),
                    _ => Ok(Renewal::Expired),
                }
            }
            // The table was dropped: as certain a loss as a deleted row.
            Err(e) if e.to_string().contains(super::session::NO_TABLE_TEXT) => {
                self.conn = None;
                Ok(Renewal::Expired)
            }
            Err(e) => {
                // No answer in time: most often a lock someone else holds on the row or the
                // table. Who holds it is looked at aside (`waits.rs`), never waited for here.
                if e.to_string().contains("no answer within") {
                    self.backend.name_lock_holders(conn.id());
                }
                self.conn = None;
                Err(e)
            }
        }
    }

    /// After a renewal its caller gave up on (no answer within its timer): the session is
    /// dropped, and what held it up looked at aside, as for the request's own timer.
    fn reset(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.backend.name_lock_holders(conn.id());
        }
    }
}
