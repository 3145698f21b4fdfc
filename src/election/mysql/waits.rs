//! Who holds up a renewal: when a renewal got no answer within its timer, a look (on a session
//! of its own, in a task of its own) at the lock the renewal's session waits for, and the
//! sessions that hold it, named in one warning. On InnoDB any account that may read the lease
//! rows can hold a shared lock on them (`LOCK IN SHARE MODE` in an open transaction) or the
//! whole table (`LOCK TABLES … READ`, which `mysqldump` takes by default), and every renewal
//! then waits until the leader steps down: the operator needs to know whose session to end.
//!
//! Nothing here is on the path from a missed renewal to the command's stop: the look is spawned
//! and the keeper goes on at once; at most one look runs at a time. What the server answers
//! (user names, hosts, statements) is escaped before it is logged.

use std::sync::atomic::Ordering;

use super::{MySql, take};
use crate::escape::escape_str;

impl MySql {
    /// Looks, in the background, at what the renewal's session `thread` (its connection id)
    /// waits for, unless a look is under way.
    pub(super) fn name_lock_holders(&self, thread: u32) {
        if self.shared.looking_at_waits.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let said = me.lock_holders(thread).await;
            tracing::warn!(event = "renewal-lock-wait", "{said}");
            me.shared.looking_at_waits.store(false, Ordering::SeqCst);
        });
    }

    /// What the renewal's session waits for, in words.
    async fn lock_holders(&self, thread: u32) -> String {
        let table = &self.shared.leases;
        let mut conn = match self.connect().await {
            Ok(conn) => conn,
            Err(e) => return format!("a renewal got no answer in time; no look at why: {e}"),
        };
        // The renewal's own session: the same account's, visible without PROCESS.
        let state = self
            .run(
                &mut conn,
                format!(
                    "SELECT COALESCE(STATE, '') FROM information_schema.PROCESSLIST WHERE ID = {thread}"
                ),
            )
            .await
            .ok()
            .and_then(|mut rows| rows.pop())
            .and_then(|mut row| take::<String>(&mut row, 0).ok())
            .unwrap_or_default();
        if state.contains("metadata lock") {
            return format!(
                "a renewal waits for a table lock on {table} (LOCK TABLES, a backup tool's \
                 FLUSH TABLES WITH READ LOCK, or a DDL statement): end that session"
            );
        }
        // MariaDB's view of InnoDB's lock waits; the other sessions need the PROCESS privilege.
        let holders = self
            .run(
                &mut conn,
                format!(
                    "SELECT b.trx_mysql_thread_id, COALESCE(p.USER, ''), COALESCE(p.HOST, ''),
                            COALESCE(p.COMMAND, ''), COALESCE(p.TIME, 0)
                     FROM information_schema.INNODB_LOCK_WAITS w
                     JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
                     JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
                     LEFT JOIN information_schema.PROCESSLIST p ON p.ID = b.trx_mysql_thread_id
                     WHERE r.trx_mysql_thread_id = {thread}"
                ),
            )
            .await;
        match holders {
            Ok(rows) if rows.is_empty() => format!(
                "a renewal got no answer in time, and its session waits for no lock on {table} now"
            ),
            Ok(rows) => {
                let named = rows
                    .into_iter()
                    .map(|mut row| {
                        let id: i64 = take(&mut row, 0).unwrap_or(0);
                        let user: String = take(&mut row, 1).unwrap_or_default();
                        let host: String = take(&mut row, 2).unwrap_or_default();
                        let command: String = take(&mut row, 3).unwrap_or_default();
                        let time: i64 = take(&mut row, 4).unwrap_or(0);
                        format!(
                            "session {id} (user {}, host {}, {} for {time} s)",
                            escape_str(&user),
                            escape_str(&host),
                            escape_str(&command)
                        )
                    })
                    .collect::<Vec<_>>();
                format!(
                    "a renewal waits for a lock on {table} held by {}: end that transaction (KILL the session); an account that may read the table can hold up every renewal (docs/security.md)",
                    named.join(", ")
                )
            }
            Err(e) if e.to_string().contains("PROCESS") => format!(
                "a renewal got no answer in time, likely behind a lock on {table}; leader-exec's account may not see other sessions' locks (grant it PROCESS to have them named)"
            ),
            Err(e) => {
                format!("a renewal got no answer in time; no look at the lock waits: {e}")
            }
        }
    }
}
