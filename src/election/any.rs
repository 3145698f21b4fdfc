//! The one door to every store: [`Connection::parse`] picks the store by the scheme of
//! `--endpoints` and lets it check its own URL, TLS and credentials; [`Connection::open`] and
//! [`Connection::open_reader`] open it as an [`AnyStore`], which implements every store trait by
//! handing each call to the store inside.
//!
//! Every store has one shape, [`Door`] (the store contract, contract.rs), and one line in the list
//! `with_stores!` below; the enums and every delegation in this file are generated from that list.
//! Only the list (and the `mod` lines of mod.rs) names the stores.

use std::time::Duration;

use super::flags::{self, StoreFlags};
use super::{
    Ahead, Campaign, Candidacy, Describe, Door, Election, Handover, Keeper, Leader, LeaseTime,
    LeaseTiming, MismatchProbe, Observation, Open, RawRecord, Read, Records, Renewal, Scope,
    StoreError, Turn,
};
use crate::exit::Failure;
use crate::redact::redact_password;

/// The stores, one line each: `FOLDER: TYPE`, the store's module under `src/election/` and its
/// type, which implements [`Door`] (and so every store trait). Adding a store is one line here.
///
/// The order is the order the schemes of `--endpoints` are tried in and listed in messages. The
/// first store is also the one an endpoint without a scheme means (etcd, as `etcdctl` reads
/// `--endpoints`): `--endpoints` names it unless an endpoint has a scheme of another.
///
/// `with_stores!(callback!(ARGS))` expands to `callback! { (ARGS) etcd: Etcd, … }`, the pattern
/// of the tests' store list (tests/stores.rs).
macro_rules! with_stores {
    ($callback:ident ! $args:tt) => {
        $callback! { $args
            etcd: Etcd,
            postgres: Postgres,
            zookeeper: ZooKeeper,
            mysql: MySql,
        }
    };
}

/// Where the run form and the subcommands look when neither `--endpoints` nor the environment
/// names a store: a local etcd.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:2379";

/// A store's entry in [`DOORS`]: its [`Door`] constants, and its `parse` giving its own variant
/// of [`Target`].
struct Doorway {
    name: &'static str,
    schemes: &'static [&'static str],
    spellings: &'static [&'static str],
    aliases: &'static [&'static str],
    parse: fn(Vec<String>, StoreFlags) -> Result<Target, Failure>,
}

impl Doorway {
    /// Whether `scheme` (lower case) selects this store.
    fn takes(&self, scheme: &str) -> bool {
        self.schemes
            .iter()
            .chain(self.spellings)
            .any(|s| *s == scheme)
    }
}

/// The enums of every store, the table of their doors and what opens each, from the list.
macro_rules! declare_stores {
    (() $($folder:ident: $store:ident,)*) => {
        /// What `--endpoints` names, checked by its store; nothing contacted yet.
        #[derive(Clone, Debug)]
        enum Target {
            $($store(Box<<super::$folder::$store as Door>::Target>),)*
        }

        /// An open store, whichever it is. Boxed: the stores differ in size by kilobytes.
        pub enum AnyStore {
            $($store(Box<super::$folder::$store>),)*
        }

        /// The keeper of whichever store (boxed, as the store is).
        pub enum AnyKeeper {
            $($store(Box<<super::$folder::$store as Campaign>::Keeper>),)*
        }

        /// Every store's door, in the list's order.
        const DOORS: &[Doorway] = &[$(Doorway {
            name: <super::$folder::$store as Door>::NAME,
            schemes: <super::$folder::$store as Door>::SCHEMES,
            spellings: <super::$folder::$store as Door>::SPELLINGS,
            aliases: <super::$folder::$store as Door>::ALIASES,
            parse: |endpoints, args| {
                let target = <super::$folder::$store as Door>::parse(endpoints, args)?;
                Ok(Target::$store(Box::new(target)))
            },
        },)*];

        impl Target {
            /// Opens the store this names, as a reader or for a candidate.
            async fn open(&self, open: Open, reader: bool) -> Result<AnyStore, Failure> {
                Ok(match self {
                    $(Target::$store(target) => AnyStore::$store(Box::new(if reader {
                        <super::$folder::$store as Door>::reader(target, open).await?
                    } else {
                        <super::$folder::$store as Door>::candidate(target, open).await?
                    })),)*
                })
            }

            #[cfg(test)]
            fn store_name(&self) -> &'static str {
                match self {
                    $(Target::$store(_) => <super::$folder::$store as Door>::NAME,)*
                }
            }
        }

        impl AnyStore {
            /// The keeper of `candidacy`'s claim, in the variant of this store.
            fn keeper_of(&self, candidacy: &Candidacy) -> AnyKeeper {
                match self {
                    $(AnyStore::$store(store) => {
                        AnyKeeper::$store(Box::new(store.keeper(candidacy)))
                    })*
                }
            }
        }
    };
}

with_stores!(declare_stores!());

/// `$body` with `$x` bound to the store inside `$any`, an [`AnyStore`] (or after `AnyKeeper:`,
/// to the keeper inside an [`AnyKeeper`]), whichever it is.
macro_rules! each {
    (AnyKeeper: $any:expr, $x:ident => $body:expr) => {
        with_stores!(each_arm!(AnyKeeper, $any, $x => $body))
    };
    ($any:expr, $x:ident => $body:expr) => {
        with_stores!(each_arm!(AnyStore, $any, $x => $body))
    };
}

/// The `match` of `each!`, one arm a store of the list.
macro_rules! each_arm {
    (($enum:ident, $any:expr, $x:ident => $body:expr) $($folder:ident: $store:ident,)*) => {
        match $any {
            $($enum::$store($x) => $body,)*
        }
    };
}

/// The store `--endpoints` names, checked by that store; nothing contacted yet.
#[derive(Clone, Debug)]
pub struct Connection {
    /// `--connect-timeout`: bounds the first contact.
    pub connect_timeout: Duration,
    target: Target,
}

/// The scheme of an endpoint, lower case, if it has one.
fn scheme_of(endpoint: &str) -> Option<String> {
    let (scheme, _) = endpoint.split_once("://")?;
    Some(scheme.to_ascii_lowercase())
}

/// The refusal of an endpoint whose `SCHEME://` is none of any store's, naming the nearest one.
/// Without it, a typo (`postgre://`, `zookeeper://`) falls through to etcd, whose message
/// suggests only the etcd form.
fn unknown_scheme(endpoint: &str) -> Option<String> {
    let (scheme, _) = endpoint.split_once("://")?;
    let lower = scheme.to_ascii_lowercase();
    if DOORS.iter().any(|door| door.takes(&lower)) {
        return None;
    }
    // A store's own name, or a common short form of it, means that store.
    let alias = |door: &&Doorway| door.aliases.iter().any(|a| lower.starts_with(a));
    let (nearest, store) = match DOORS.iter().find(alias) {
        Some(door) => (door.schemes[0], door.name),
        None => DOORS
            .iter()
            .flat_map(|door| {
                let known = door.schemes.iter().chain(door.spellings);
                known.map(|scheme| (*scheme, door.name))
            })
            .min_by_key(|(known, _)| crate::escape::edit_distance(&lower, known))
            .expect("not empty"),
    };
    let listed: Vec<String> = DOORS
        .iter()
        .map(|door| {
            let schemes: Vec<String> = door.schemes.iter().map(|s| format!("{s}://")).collect();
            format!("{} ({})", schemes.join(" and "), door.name)
        })
        .collect();
    Some(format!(
        "--endpoints: '{}' has the unknown scheme {}://; did you mean {nearest}:// ({store})? The schemes are {}",
        redact_password(endpoint).escape_debug(),
        scheme.escape_debug(),
        listed.join(", ")
    ))
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
        // The first store after the first that takes an endpoint's scheme checks the list (and
        // refuses it if it mixes stores); a list none of them takes is the first store's.
        let takes = |door: &&Doorway| {
            let mut schemes = endpoints.iter().filter_map(|e| scheme_of(e));
            schemes.any(|scheme| door.takes(&scheme))
        };
        let door = DOORS[1..].iter().find(takes).unwrap_or(&DOORS[0]);
        let target = (door.parse)(endpoints, args)?;
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
        let open = Open {
            scope: scope.clone(),
            identity,
            timing,
            connect_timeout: self.connect_timeout,
            max_holders,
        };
        self.target.open(open, false).await
    }

    /// Opens the store for reading and administration (`status`, `watch`, `check`, `resign`):
    /// one election's (`Some(scope)`), or every election under `prefix` (`None`: `status
    /// --all`). It campaigns for nothing and holds no lease.
    pub async fn open_reader(
        &self,
        prefix: &str,
        scope: Option<&Scope>,
    ) -> Result<AnyStore, Failure> {
        let open = Open {
            scope: Scope {
                lease: scope.map_or_else(String::new, |s| s.lease.clone()),
                prefix: prefix.to_owned(),
            },
            identity: String::new(),
            timing: LeaseTiming {
                ttl: Duration::ZERO,
                retry_period: Duration::ZERO,
                needed: Duration::ZERO,
            },
            connect_timeout: self.connect_timeout,
            max_holders: 1,
        };
        self.target.open(open, true).await
    }

    #[cfg(test)]
    pub fn into_zookeeper(self) -> Option<super::zookeeper::Target> {
        match self.target {
            Target::ZooKeeper(target) => Some(*target),
            _ => None,
        }
    }
}

impl Keeper for AnyKeeper {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        each!(AnyKeeper: self, keeper => keeper.renew().await)
    }

    fn reset(&mut self) {
        each!(AnyKeeper: self, keeper => keeper.reset())
    }
}

impl Campaign for AnyStore {
    type Keeper = AnyKeeper;

    async fn campaign(&self) -> Result<Candidacy, StoreError> {
        each!(self, store => store.campaign().await)
    }

    fn keeper(&self, candidacy: &Candidacy) -> AnyKeeper {
        self.keeper_of(candidacy)
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

    fn probe_mismatch(&self) -> Option<Box<dyn MismatchProbe>> {
        each!(self, store => store.probe_mismatch())
    }
}

#[cfg(test)]
mod tests {
    use super::super::flags::tests::flags;
    use super::*;

    fn store_of(endpoints: &str) -> Result<&'static str, String> {
        match Connection::parse(flags(&["--endpoints", endpoints])) {
            Ok(connection) => Ok(connection.target.store_name()),
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
            ("mysq://u:hunter2@db1/ops", "mysql:// (MySQL)"),
            ("MariaDb10://db1/ops", "mysql:// (MySQL)"),
            ("myslq://db1/ops", "mysql:// (MySQL)"),
        ] {
            let refused = store_of(endpoints).unwrap_err();
            assert!(
                refused.contains(&format!("did you mean {meant}?"))
                    && refused.contains("unknown scheme"),
                "{endpoints}: {refused}"
            );
            assert!(!refused.contains("hunter2"), "{refused}");
        }
        // The list of schemes, from the store list, in its order.
        assert_eq!(
            store_of("postgre://db/ops").unwrap_err(),
            "--endpoints: 'postgre://db/ops' has the unknown scheme postgre://; did you mean \
             postgres:// (PostgreSQL)? The schemes are http:// and https:// (etcd), postgres:// \
             (PostgreSQL), zk:// (ZooKeeper), mysql:// and mariadb:// (MySQL)"
        );
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
            ("mysql://jobs@db1:3306,db2/ops", "MySQL"),
            ("MariaDB://jobs@db1/ops", "MySQL"),
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
            "mysql://u:hunter2@db/ops,http://a:2379",
            "http://a:2379,mysql://u:hunter2@db/ops",
            "zk://b:2181,mariadb://u:hunter2@db/ops",
            "mysql://u:hunter2@db/ops,postgres://u:hunter2@db/ops",
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
        for endpoints in [
            "http://a:2379",
            "postgres://db/ops",
            "zk://a:2181",
            "mysql://u@db/ops",
        ] {
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
