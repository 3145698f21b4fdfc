//! The one door to every store: [`Connection::parse`] picks the store by the scheme of
//! `--endpoints` and lets it check its own URL, TLS and credentials; [`Connection::open`] and
//! [`Connection::open_reader`] open it as an [`AnyStore`], which implements every store trait by
//! handing each call to the store inside.
//!
//! Only this file (and the `mod` lines of mod.rs) lists the stores.

use std::time::Duration;

use super::etcd::{self, Etcd};
use super::flags::{self, StoreFlags};
use super::postgres::{self, Postgres};
use super::zookeeper::{self, ZooKeeper};
use super::{
    Ahead, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    LeaseTiming, Observation, RawRecord, Read, Records, Renewal, Scope, StoreError, Turn,
};
use crate::exit::Failure;
use crate::redact::redact_password;

/// Where the run form and the subcommands look when neither `--endpoints` nor the environment
/// names a store: a local etcd.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

/// The store `--endpoints` names, checked by that store; nothing contacted yet.
#[derive(Clone, Debug)]
pub struct Connection {
    /// `--connect-timeout`: bounds the first contact.
    pub connect_timeout: Duration,
    target: Target,
}

/// The schemes `--endpoints` takes, and the store each selects.
const SCHEMES: [(&str, &str); 5] = [
    ("http", "etcd"),
    ("https", "etcd"),
    ("postgres", "PostgreSQL"),
    ("postgresql", "PostgreSQL"),
    ("zk", "ZooKeeper"),
];

/// The refusal of an endpoint whose `SCHEME://` is none of [`SCHEMES`], naming the nearest one.
/// Without it, a typo (`postgre://`, `zookeeper://`) falls through to etcd, whose message
/// suggests only the etcd form.
fn unknown_scheme(endpoint: &str) -> Option<String> {
    let (scheme, _) = endpoint.split_once("://")?;
    let lower = scheme.to_ascii_lowercase();
    if SCHEMES.iter().any(|(known, _)| *known == lower) {
        return None;
    }
    // A store's own name, or a common short form of it, means that store.
    let (nearest, store) = if lower.starts_with("zoo") || lower.starts_with("zk") {
        SCHEMES[4]
    } else if ["pg", "postg", "psql"].iter().any(|p| lower.starts_with(p)) {
        SCHEMES[2]
    } else if lower.starts_with("etcd") {
        SCHEMES[0]
    } else {
        *SCHEMES
            .iter()
            .min_by_key(|(known, _)| crate::escape::edit_distance(&lower, known))
            .expect("not empty")
    };
    Some(format!(
        "--endpoints: '{}' has the unknown scheme {}://; did you mean {nearest}:// ({store})? The schemes are http:// and https:// (etcd), postgres:// (PostgreSQL), zk:// (ZooKeeper)",
        redact_password(endpoint).escape_debug(),
        scheme.escape_debug()
    ))
}

#[derive(Clone, Debug)]
enum Target {
    /// No scheme, `http://`, `https://`.
    Etcd(Box<etcd::Target>),
    /// `postgres://` or `postgresql://`.
    Postgres(Box<postgres::Target>),
    /// `zk://HOST:PORT[,HOST:PORT…][/chroot]`.
    ZooKeeper(Box<zookeeper::Target>),
}

impl Connection {
    /// Resolves the endpoints (flag, then `LEADER_EXEC_ENDPOINTS`, then `ETCDCTL_ENDPOINTS`, then
    /// [`DEFAULT_ENDPOINT`]) and lets the store they name check the rest.
    pub fn parse(mut args: StoreFlags) -> Result<Connection, Failure> {
        // Warned about once the endpoints are accepted (a refusal stays one line), for every
        // store alike: `args.user` is the flag's (ETCDCTL_USER, read by etcd's target, is not
        // on the command line).
        let password_on_command_line = args.endpoints.iter().any(|e| redact_password(e) != *e);
        let user_password_on_command_line = args.user.as_deref().is_some_and(|u| u.contains(':'));
        let warn = |connection: Connection| {
            if password_on_command_line {
                tracing::warn!(
                    event = "password-on-command-line",
                    "a password in --endpoints shows it to every local user (ps, /proc); use --password-file FILE, LEADER_EXEC_PASSWORD or LEADER_EXEC_ENDPOINTS"
                );
            }
            if user_password_on_command_line {
                tracing::warn!(
                    event = "password-on-command-line",
                    "--user NAME:PASS shows the password to every local user (ps, /proc); use --password-file FILE or LEADER_EXEC_PASSWORD"
                );
            }
            connection
        };
        let endpoints: Vec<String> = if !args.endpoints.is_empty() {
            std::mem::take(&mut args.endpoints)
        } else if let Some(list) = flags::env_nonempty("LEADER_EXEC_ENDPOINTS")
            .or_else(|| flags::env_nonempty("ETCDCTL_ENDPOINTS"))
        {
            list.split(',').map(str::to_owned).collect()
        } else {
            vec![DEFAULT_ENDPOINT.to_owned()]
        };
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(Failure::usage("--endpoints is empty"));
        }
        if let Some(refusal) = endpoints.iter().find_map(|e| unknown_scheme(e)) {
            return Err(Failure::usage(refusal));
        }
        let connect_timeout = args.connect_timeout;
        let target = if endpoints
            .iter()
            .any(|e| postgres::target::is_postgres_url(e))
        {
            Target::Postgres(Box::new(postgres::target::parse(endpoints, args)?))
        } else if endpoints
            .iter()
            .any(|e| zookeeper::target::is_zookeeper_url(e))
        {
            Target::ZooKeeper(Box::new(zookeeper::target::parse(endpoints, args)?))
        } else {
            Target::Etcd(Box::new(etcd::Target::parse(endpoints, args)?))
        };
        Ok(warn(Connection {
            connect_timeout,
            target,
        }))
    }

    /// Opens the store for a candidate of `scope`'s election, whose lease must cover `timing`.
    pub async fn open(
        &self,
        scope: &Scope,
        identity: String,
        timing: LeaseTiming,
        max_holders: u32,
    ) -> Result<AnyStore, Failure> {
        let connect_timeout = self.connect_timeout;
        let usage = |e: StoreError| Failure::usage(e.to_string());
        Ok(match &self.target {
            Target::Etcd(target) => AnyStore::Etcd(Box::new(
                Etcd::new(
                    etcd::target::open(target).await?,
                    &target.endpoints,
                    scope.election_prefix(),
                    identity,
                    timing.ttl,
                    max_holders,
                )
                .over_tls(target.tls.is_some()),
            )),
            Target::Postgres(target) => AnyStore::Postgres(
                Postgres::new(
                    (**target).clone(),
                    &scope.prefix,
                    &scope.lease,
                    identity,
                    postgres::PgTiming {
                        ttl: timing.ttl,
                        retry_period: timing.retry_period,
                        connect_timeout,
                    },
                    max_holders,
                )
                .map_err(usage)?,
            ),
            Target::ZooKeeper(target) => AnyStore::ZooKeeper(Box::new(
                ZooKeeper::new(
                    (**target).clone(),
                    &scope.prefix,
                    &scope.lease,
                    identity,
                    zookeeper::ZkTiming {
                        ttl: timing.ttl,
                        needed: timing.needed,
                        connect_timeout,
                    },
                    max_holders,
                )
                .map_err(usage)?,
            )),
        })
    }

    /// Opens the store for reading and administration (`status`, `watch`, `check`, `resign`):
    /// one election's (`Some(scope)`), or every election under `prefix` (`None`: `status
    /// --all`). It campaigns for nothing and holds no lease.
    pub async fn open_reader(
        &self,
        prefix: &str,
        scope: Option<&Scope>,
    ) -> Result<AnyStore, Failure> {
        let lease = scope.map_or("", |s| s.lease.as_str());
        let usage = |e: StoreError| Failure::usage(e.to_string());
        Ok(match &self.target {
            Target::Etcd(target) => AnyStore::Etcd(Box::new(
                Etcd::reader(
                    etcd::target::open(target).await?,
                    &target.endpoints,
                    scope.map_or_else(|| prefix.to_owned(), Scope::election_prefix),
                )
                .over_tls(target.tls.is_some()),
            )),
            Target::Postgres(target) => AnyStore::Postgres(
                Postgres::reader((**target).clone(), prefix, lease, self.connect_timeout)
                    .map_err(usage)?,
            ),
            Target::ZooKeeper(target) => AnyStore::ZooKeeper(Box::new(
                ZooKeeper::reader((**target).clone(), prefix, lease, self.connect_timeout)
                    .map_err(usage)?,
            )),
        })
    }

    #[cfg(test)]
    pub fn into_zookeeper(self) -> Option<zookeeper::Target> {
        match self.target {
            Target::ZooKeeper(target) => Some(*target),
            _ => None,
        }
    }
}

/// An open store, whichever it is.
pub enum AnyStore {
    /// Boxed, as ZooKeeper is: the stores differ in size by kilobytes.
    Etcd(Box<Etcd>),
    Postgres(Postgres),
    ZooKeeper(Box<ZooKeeper>),
}

/// The keeper of whichever store.
pub enum AnyKeeper {
    /// Boxed, as the store is.
    Etcd(Box<<Etcd as Campaign>::Keeper>),
    Postgres(<Postgres as Campaign>::Keeper),
    ZooKeeper(<ZooKeeper as Campaign>::Keeper),
}

/// `$body` with `$store` bound to the store inside `$any`, whichever it is.
macro_rules! each {
    ($any:expr, $store:ident => $body:expr) => {
        match $any {
            AnyStore::Etcd($store) => $body,
            AnyStore::Postgres($store) => $body,
            AnyStore::ZooKeeper($store) => $body,
        }
    };
}

impl Keeper for AnyKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        match self {
            AnyKeeper::Etcd(keeper) => keeper.renew().await,
            AnyKeeper::Postgres(keeper) => keeper.renew().await,
            AnyKeeper::ZooKeeper(keeper) => keeper.renew().await,
        }
    }

    fn reset(&mut self) {
        match self {
            AnyKeeper::Etcd(keeper) => keeper.reset(),
            AnyKeeper::Postgres(keeper) => keeper.reset(),
            AnyKeeper::ZooKeeper(keeper) => keeper.reset(),
        }
    }
}

impl Campaign for AnyStore {
    type Keeper = AnyKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        each!(self, store => store.campaign().await)
    }

    fn keeper(&self, candidacy: &Candidacy) -> AnyKeeper {
        match self {
            AnyStore::Etcd(store) => AnyKeeper::Etcd(Box::new(store.keeper(candidacy))),
            AnyStore::Postgres(store) => AnyKeeper::Postgres(store.keeper(candidacy)),
            AnyStore::ZooKeeper(store) => AnyKeeper::ZooKeeper(store.keeper(candidacy)),
        }
    }

    async fn check_turn(&self, candidacy: &Candidacy) -> Result<Turn, StoreError> {
        each!(self, store => store.check_turn(candidacy).await)
    }

    async fn predecessor_gone(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Result<(), StoreError> {
        each!(self, store => store.predecessor_gone(candidacy, ahead).await)
    }

    async fn turn_on_wake(
        &self,
        candidacy: &Candidacy,
        ahead: &Ahead,
    ) -> Option<Result<Turn, StoreError>> {
        each!(self, store => store.turn_on_wake(candidacy, ahead).await)
    }

    async fn key_gone(&self, candidacy: &Candidacy) {
        each!(self, store => store.key_gone(candidacy).await)
    }

    async fn release_claim(&self, candidacy: &Candidacy) -> Result<(), StoreError> {
        each!(self, store => store.release_claim(candidacy).await)
    }

    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        each!(self, store => store.hold_claim(candidacy, bound).await)
    }

    fn lease_length(&self) -> Option<Duration> {
        each!(self, store => store.lease_length())
    }
}

impl Read for AnyStore {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        each!(self, store => store.read_election().await)
    }

    async fn changed_since(&self, seen: &Observation) -> Result<(), StoreError> {
        each!(self, store => store.changed_since(seen).await)
    }

    async fn list_elections(&self, prefix: &str) -> Result<Vec<Election>, StoreError> {
        each!(self, store => store.list_elections(prefix).await)
    }

    async fn lease_time(&self, leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        each!(self, store => store.lease_time(leader).await)
    }
}

impl Records for AnyStore {
    async fn read_record(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        each!(self, store => store.read_record(key).await)
    }

    async fn write_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        each!(self, store => store.write_fenced(candidacy, key, value, retention).await)
    }

    async fn list_records(&self, prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        each!(self, store => store.list_records(prefix).await)
    }

    async fn put_on_lease_fenced(
        &self,
        candidacy: &Candidacy,
        key: &str,
        value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        each!(self, store => store.put_on_lease_fenced(candidacy, key, value).await)
    }
}

impl Handover for AnyStore {
    async fn request_handover(
        &self,
        leader: &Leader,
        key: &str,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        each!(self, store => store.request_handover(leader, key, retention).await)
    }

    async fn handover_requested(&self, candidacy: &Candidacy, key: &str, poll: Duration) {
        each!(self, store => store.handover_requested(candidacy, key, poll).await)
    }

    fn token_is_place(&self) -> bool {
        each!(self, store => store.token_is_place())
    }

    async fn remove_claim(&self, leader: &Leader) -> Result<bool, StoreError> {
        each!(self, store => store.remove_claim(leader).await)
    }
}

impl Describe for AnyStore {
    fn store_name(&self) -> &'static str {
        each!(self, store => store.store_name())
    }

    fn shown(&self) -> String {
        each!(self, store => store.shown())
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        each!(self, store => store.addresses())
    }

    fn restart_resets_leases(&self) -> bool {
        each!(self, store => store.restart_resets_leases())
    }

    fn delete_record_hint(&self, key: &str) -> String {
        each!(self, store => store.delete_record_hint(key))
    }

    fn etcd_tls(&self) -> Option<bool> {
        each!(self, store => store.etcd_tls())
    }
}

#[cfg(test)]
mod tests {
    use super::super::flags::tests::flags;
    use super::*;

    fn store_of(endpoints: &str) -> Result<&'static str, String> {
        match Connection::parse(flags(&["--endpoints", endpoints])) {
            Ok(connection) => Ok(match connection.target {
                Target::Etcd(_) => "etcd",
                Target::Postgres(_) => "PostgreSQL",
                Target::ZooKeeper(_) => "ZooKeeper",
            }),
            Err(failure) => Err(failure.to_string()),
        }
    }

    /// A scheme that is none of the stores' is refused, naming the nearest scheme and its store
    /// (not only etcd's form), without showing a password.
    #[test]
    fn a_scheme_typo_names_the_nearest_scheme() {
        for (endpoints, meant) in [
            ("postgre://u@db1:5432/ops", "postgres:// (PostgreSQL)"),
            ("pgsql://u:hunter2@db1/ops", "postgres:// (PostgreSQL)"),
            ("postgress://db1/ops", "postgres:// (PostgreSQL)"),
            ("zookeeper://a:2181", "zk:// (ZooKeeper)"),
            ("ZooKeeper://a:2181/ops", "zk:// (ZooKeeper)"),
            ("htp://a:2379", "http:// (etcd)"),
            ("htps://a:2379", "https:// (etcd)"),
            ("etcd://a:2379", "http:// (etcd)"),
            ("http://a:2379,zookeper://b:2181", "zk:// (ZooKeeper)"),
        ] {
            let refused = store_of(endpoints).unwrap_err();
            assert!(
                refused.contains(&format!("did you mean {meant}?"))
                    && refused.contains("unknown scheme"),
                "{endpoints}: {refused}"
            );
            assert!(!refused.contains("hunter2"), "{refused}");
        }
    }

    /// The scheme of `--endpoints` picks the store; what no other store claims is etcd's.
    #[test]
    fn the_scheme_picks_the_store() {
        for (endpoints, store) in [
            ("127.0.0.1:2379", "etcd"),
            ("http://a:2379,b:2379", "etcd"),
            ("https://a:2379", "etcd"),
            ("postgres://db1,db2/ops?sslmode=disable", "PostgreSQL"),
            ("postgresql://db1/ops?sslmode=disable", "PostgreSQL"),
            ("zk://a:2181,b:2181/ops", "ZooKeeper"),
            ("ZK://a:2181", "ZooKeeper"),
        ] {
            assert_eq!(store_of(endpoints), Ok(store), "{endpoints}");
        }
    }

    /// A list that names two stores is refused, whichever comes first, and never echoes a
    /// password.
    #[test]
    fn a_mix_of_stores_is_refused() {
        for endpoints in [
            "http://a:2379,zk://b:2181",
            "zk://b:2181,http://a:2379",
            "zk://b:2181,postgres://u:hunter2@db/ops",
            "http://a:2379,postgres://u:hunter2@db/ops",
        ] {
            let message = store_of(endpoints).unwrap_err();
            assert!(
                message.contains("not a mix of stores"),
                "{endpoints}: {message}"
            );
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    /// Every store refuses a zero `--connect-timeout` with the same words.
    #[test]
    fn every_store_refuses_a_zero_connect_timeout() {
        for endpoints in ["http://a:2379", "postgres://db/ops", "zk://a:2181"] {
            let mut args = flags(&["--endpoints", endpoints]);
            args.connect_timeout = Duration::ZERO;
            let message = Connection::parse(args).unwrap_err().to_string();
            assert_eq!(
                message, "--connect-timeout must be greater than 0",
                "{endpoints}"
            );
        }
    }
}
