//! The campaign's first session: its checks and the first attempt in one round trip.
//!
//! A new session is checked (a primary, the schema, `search_path`, the tables and who owns them)
//! before anything is written, and the first attempt writes. Sent one after the other they cost
//! two round trips; here they go as one simple-query message of four statements: the checks as
//! one statement that fails unless every check passes, the pin of `search_path`, the acquiring
//! `UPDATE` and the `INSERT` of a new name's row. PostgreSQL runs the statements of one such
//! message in order as one transaction, and the first that fails ends it: the statements after it
//! are skipped, not even parsed against the catalogs (a statement's names are resolved only when
//! its turn comes), and everything before it is rolled back. So no statement that names
//! leader-exec's tables is resolved, planned or run unless every check has passed, in the same
//! transaction, just before it — as when they are sent apart, one round trip after the other.
//! Any failure sends the session down the usual way (`check_new`, which refuses with the
//! reason, or makes the tables); the attempt then comes in `check_turn`, as if this had never
//! been sent.

use super::session::name_bounds;
use super::*;

/// A string as an SQL literal of type `pg_catalog.text` that means the same whatever
/// `standard_conforming_strings` says; `None` as a NULL of that type.
fn text_or_null(text: Option<&str>) -> String {
    text.map_or_else(
        || "NULL::pg_catalog.text".to_owned(),
        |text| {
            format!(
                "E'{}'::pg_catalog.text",
                text.replace('\\', "\\\\").replace('\'', "''")
            )
        },
    )
}

/// `sql` with each parameter `$n` replaced by `values[n - 1]` (SQL literals). The statements
/// given here are leader-exec's own, whose only `$` are parameters (no dollar quoting).
pub(super) fn inline(sql: &str, values: &[String]) -> String {
    let mut out = String::with_capacity(sql.len() + 64 * values.len());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 1);
        let n: usize = rest[at + 1..at + 1 + digits]
            .parse()
            .expect("a parameter number after $");
        out.push_str(&values[n - 1]);
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    out
}

/// What became of the checks sent with the first attempt.
enum Together {
    /// Checked, and the row taken with this token.
    Won(i64),
    /// Checked and pinned; the row not taken.
    Checked,
    /// Nothing of it holds: a check did not pass, a statement failed, or no answer came.
    Failed,
    /// Not sent: the usual way.
    NotSent,
}

/// What one statement of a simple-query message answered: the first column of its first row.
fn first_values(messages: &[SimpleQueryMessage]) -> Vec<Option<String>> {
    let mut values = Vec::new();
    let mut first: Option<Option<String>> = None;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => {
                first.get_or_insert_with(|| row.get(0).map(str::to_owned));
            }
            SimpleQueryMessage::CommandComplete(_) => values.push(first.take().flatten()),
            _ => {}
        }
    }
    values
}

impl Postgres {
    /// The campaign's session: the shared one if open; otherwise a new one, checked (with the
    /// tables) and, where this instance is a newcomer with a single holder, with its first
    /// attempt in the same round trip (see the module's text). A win is kept for the first
    /// `check_turn` (`early`): the lease is proven from the instant the campaign began (its
    /// candidacy's deadline counts from there), before this message was sent.
    pub(super) async fn check_and_try(&self) -> Result<(), StoreError> {
        let shared = &self.shared;
        shared.early.store(0, Ordering::SeqCst);
        let mut slot = shared.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(());
        }
        *slot = None;
        let client = self.open_unchecked(false).await?;
        let ready = *shared.schema_ready.lock().expect("not poisoned");
        let newcomer = shared.waiter.load(Ordering::SeqCst) == 0
            && shared.sightings.ripe(BootClock.now()).is_none();
        let together = !shared.unchecked && !ready && shared.max_holders == 1 && newcomer;
        let outcome = match together {
            true => self.checks_with_attempt(&client).await,
            false => Together::NotSent,
        };
        match outcome {
            Together::Won(token) => {
                shared.held.store(token, Ordering::SeqCst);
                shared.early.store(token, Ordering::SeqCst);
            }
            // Checked and pinned; the row is someone else's, or was not found: the attempt
            // comes in `check_turn`.
            Together::Checked => {}
            // Nothing of the message holds (its transaction rolled back, the pin with it):
            // the usual checks (which refuse with the reason, or make the tables).
            Together::Failed if client.is_closed() => {
                return Err(StoreError::Transient(format!(
                    "PostgreSQL at {} closed the session",
                    shared.target.shown
                )));
            }
            Together::Failed | Together::NotSent if !shared.unchecked => {
                self.check_new(&client).await?
            }
            Together::Failed | Together::NotSent => {}
        }
        *slot = Some(Arc::new(client));
        Ok(())
    }

    /// The checks and the first attempt as one message (see the module's text).
    async fn checks_with_attempt(&self, client: &Client) -> Together {
        let shared = &self.shared;
        // The acquiring statements as `attempt` sends them for a newcomer, built before the
        // schema is known to this process: their table names are bare, resolved through the
        // pin that the statement before them made in the same transaction (`qualified`).
        let values = [
            text_or_null(Some(&shared.name)),
            text_or_null(Some(&shared.identity)),
            int8(shared.ttl_ms),
            text_or_null(Some(&shared.channel)),
        ];
        let message = format!(
            "{gate};\n{pin};\n{update};\n{insert}",
            gate = self.gate_sql(),
            pin = self.pin_sql(),
            update = inline(&self.acquire_sql(0, false), &values),
            insert = inline(&self.insert_sql(0), &values),
        );
        let limit = shared.request_timeout * 4 + Duration::from_secs(1);
        let messages = match tokio::time::timeout(limit, client.simple_query(&message)).await {
            Ok(Ok(messages)) => messages,
            Ok(Err(e)) => {
                tracing::debug!(error = %error_text(&e), "the start's checks with its attempt did not all pass");
                return Together::Failed;
            }
            Err(_) => return Together::Failed,
        };
        // Every statement ran and committed: every check passed.
        let values = first_values(&messages);
        let [Some(schema), _pin, updated, inserted] = values.as_slice() else {
            return Together::Failed;
        };
        shared.schema.get_or_init(|| schema.clone());
        *shared.schema_ready.lock().expect("not poisoned") = true;
        match updated.as_deref().or(inserted.as_deref()) {
            Some(token) => match token.parse::<i64>() {
                Ok(token) => {
                    shared.sightings.forget_one();
                    Together::Won(token)
                }
                Err(_) => Together::Failed,
            },
            None => Together::Checked,
        }
    }

    /// The start's checks as one statement that fails unless every one passes, answering the
    /// schema: the session check (`check_session`: a primary, writes allowed where libpq's
    /// `read-write` is folded in, the table not found through `search_path` in another schema
    /// than its first) and the look at the schema and the tables (`look_at_tables`, [`GATE`]).
    /// The failure is a cast of a text to a number, reached only when a check fails (or could
    /// not be answered: a NULL counts as failed); a CASE branch that no row reaches is not
    /// evaluated, and this one cannot be folded at planning, its condition being read from the
    /// catalogs. Every name in it is qualified, as in the session check: it runs before the pin.
    fn gate_sql(&self) -> String {
        let shared = &self.shared;
        let prefix = self.prefix();
        let (low, high) = name_bounds(&prefix);
        let schema = shared.schema.get().cloned();
        let values = [
            text_or_null(schema.as_deref()),
            text_or_null(Some(&shared.leases)),
            text_or_null(Some(&shared.records)),
            text_or_null(Some(&shared.tokens)),
            text_or_null(Some(&shared.guard)),
            text_or_null(Some(&shared.waiters)),
            text_or_null(Some(&prefix)),
            text_or_null(Some(&low)),
            text_or_null(high.as_deref()),
            text_or_null(Some(&self.fence_index())),
        ];
        let read_only = if shared.read_write_in_check {
            "
                 AND pg_catalog.current_setting('transaction_read_only'::pg_catalog.text)
                     OPERATOR(pg_catalog.=) 'off'::pg_catalog.text"
        } else {
            ""
        };
        // Only the first session of a process looks for the table elsewhere on search_path
        // (`check_session`); later ones pin the schema found then. Found elsewhere: another
        // table than the one in the first schema (or that one missing).
        let elsewhere = match schema {
            Some(_) => String::new(),
            None => format!(
                "
                 AND COALESCE(pg_catalog.to_regclass({table})::pg_catalog.oid OPERATOR(pg_catalog.=) k.l,
                              pg_catalog.to_regclass({table}) IS NULL)",
                table = text_or_null(Some(&quote_ident(&shared.leases))),
            ),
        };
        let checks = GATE
            .replace("{read_only}", read_only)
            .replace("{elsewhere}", &elsewhere);
        inline(&checks, &values)
    }
}

/// The start's checks ([`Postgres::gate_sql`]): true only where the session check and the look
/// at the tables (`look_at_tables`) would both pass; where unsure, false (the usual way then
/// says why, or finds that all is well). Parameters as the look's (`session::LOOK`). Narrower than it,
/// and cheaper to plan on a new backend's cold caches (every catalog a statement reads there
/// is looked up and planned from scratch):
///
/// - owned by the connecting role itself, not by a role it is a member of (no walk of
///   `pg_auth_members`): every relation and function of the prefix's names, and the schema
///   (or `pg_database_owner`'s, in a database the connecting role owns), which no other role
///   may create in (every `CREATE` in its ACL is its owner's);
/// - the columns of the current layout asked of the catalog caches by name
///   (`has_column_privilege`, which fails for a column that is not there: failed either way);
/// - no trigger on any of those relations but the guard on the leases table, calling the
///   guard function of the schema (named with the prefix, so owned by the connecting role):
///   another relation with `relhastriggers` set fails, and so does a trigger on the leases
///   table calling any other function.
const GATE: &str = "SELECT g.name,
        (CASE WHEN g.ok IS TRUE THEN NULL::pg_catalog.text
              ELSE 'leader-exec: a start check did not pass'::pg_catalog.text END)::pg_catalog.int4
 FROM (
     SELECT k.name,
            NOT pg_catalog.pg_is_in_recovery(){read_only}{elsewhere}
            AND k.l IS NOT NULL AND k.w IS NOT NULL AND k.f IS NOT NULL AND k.g IS NOT NULL
            AND k.me IS NOT NULL AND k.rest
            AND pg_catalog.has_column_privilege(k.l, 'renewals'::pg_catalog.text, 'SELECT'::pg_catalog.text) IS NOT NULL
            AND pg_catalog.has_column_privilege(k.l, 'max_holders'::pg_catalog.text, 'SELECT'::pg_catalog.text) IS NOT NULL
            AND pg_catalog.has_column_privilege(k.l, 'top_token'::pg_catalog.text, 'SELECT'::pg_catalog.text) IS NOT NULL
            AND pg_catalog.has_column_privilege(k.w, 'max_holders'::pg_catalog.text, 'SELECT'::pg_catalog.text) IS NOT NULL
            AND EXISTS (SELECT FROM pg_catalog.pg_index i
                        WHERE i.indexrelid OPERATOR(pg_catalog.=) k.f
                          AND i.indrelid OPERATOR(pg_catalog.=) k.l AND i.indisunique)
            AND EXISTS (SELECT FROM pg_catalog.pg_trigger t
                        WHERE t.tgrelid OPERATOR(pg_catalog.=) k.l
                          AND t.tgname OPERATOR(pg_catalog.=) $5::pg_catalog.name)
            AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t
                            WHERE t.tgrelid OPERATOR(pg_catalog.=) k.l AND NOT t.tgisinternal
                              AND t.tgfoid OPERATOR(pg_catalog.<>) k.g)
            AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c
                            WHERE c.relnamespace OPERATOR(pg_catalog.=) k.ns
                              AND c.relname OPERATOR(pg_catalog.>=) $8::pg_catalog.name
                              AND ($9::pg_catalog.text IS NULL OR c.relname OPERATOR(pg_catalog.<) $9::pg_catalog.name)
                              AND pg_catalog.starts_with(c.relname::pg_catalog.text, $7)
                              AND (c.relowner OPERATOR(pg_catalog.<>) k.me
                                   OR (c.relhastriggers AND c.oid OPERATOR(pg_catalog.<>) k.l)))
            AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc p
                            WHERE p.pronamespace OPERATOR(pg_catalog.=) k.ns
                              AND p.proname OPERATOR(pg_catalog.>=) $8::pg_catalog.name
                              AND ($9::pg_catalog.text IS NULL OR p.proname OPERATOR(pg_catalog.<) $9::pg_catalog.name)
                              AND pg_catalog.starts_with(p.proname::pg_catalog.text, $7)
                              AND p.proowner OPERATOR(pg_catalog.<>) k.me)
            AND EXISTS (SELECT FROM pg_catalog.pg_namespace n
                        WHERE n.oid OPERATOR(pg_catalog.=) k.ns
                          AND (n.nspowner OPERATOR(pg_catalog.=) k.me
                               OR (n.nspowner OPERATOR(pg_catalog.=)
                                       pg_catalog.to_regrole('pg_database_owner'::pg_catalog.text)::pg_catalog.oid
                                   AND (SELECT d.datdba FROM pg_catalog.pg_database d
                                        WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                                       OPERATOR(pg_catalog.=) k.me))
                          AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) a
                                          WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
                                            AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner))
            AS ok
     FROM (SELECT s.name, pg_catalog.to_regnamespace(q)::pg_catalog.oid AS ns,
                  pg_catalog.to_regrole(pg_catalog.quote_ident(CURRENT_USER::pg_catalog.text))::pg_catalog.oid AS me,
                  pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident($2))::pg_catalog.oid AS l,
                  pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident($6))::pg_catalog.oid AS w,
                  pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident($10))::pg_catalog.oid AS f,
                  pg_catalog.to_regprocedure(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident($5)
                      OPERATOR(pg_catalog.||) '()'::pg_catalog.text)::pg_catalog.oid AS g,
                  pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident($3)) IS NOT NULL
                      AND pg_catalog.to_regclass(q OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                          OPERATOR(pg_catalog.||) pg_catalog.quote_ident($4)) IS NOT NULL AS rest
           FROM (SELECT COALESCE($1, pg_catalog.current_schema()::pg_catalog.text) AS name) AS s,
                LATERAL (SELECT pg_catalog.quote_ident(s.name) AS q) AS quoted) AS k
 ) AS g";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_puts_each_parameter_in_its_place_and_ten_is_not_one() {
        let values: Vec<String> = (1..=10).map(|n| format!("v{n}")).collect();
        assert_eq!(
            inline("a = $1 AND b = $10 OR $2::t, ($9)", &values),
            "a = v1 AND b = v10 OR v2::t, (v9)"
        );
        assert_eq!(inline("no parameters", &values), "no parameters");
    }

    #[test]
    fn a_literal_means_the_same_whatever_standard_conforming_strings_says() {
        assert_eq!(
            text_or_null(Some(r"it's a \ back")),
            r"E'it''s a \\ back'::pg_catalog.text"
        );
        assert_eq!(text_or_null(None), "NULL::pg_catalog.text");
    }
}
