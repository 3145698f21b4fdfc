//! The one list of stores, read by the integration tests (`store_independent!` in tests.rs), the
//! fault-injection suite (`every_store!` in chaos/main.rs) and the benchmarks' server launcher
//! (bench/servers.rs, whose `--list` the runner reads). Adding a store is one `harness::Store`
//! impl and one entry here.
//!
//! Each entry is `MODULE: HARNESS_TYPE [chaos "ROW_PREFIX"] [bench];`:
//! - MODULE names the tests (`etcd::NAME`, …: CI filters and RELIABILITY.md rows use these names);
//! - HARNESS_TYPE is the `harness::Store` that starts the server;
//! - `[chaos "P"]`: the chaos suite runs every store-neutral row on it, as row `P` + id; `[]`: not;
//! - `[bench]`: the benchmarks measure it (`bench/run.py --store MODULE`); `[]`: not.

/// Calls `$callback! { $args ENTRIES }`, where `$args` is one token tree (usually `{ … }`) passed
/// through unchanged, followed by the list's entries.
macro_rules! with_stores {
    ($callback:ident ! $args:tt) => {
        $callback! { $args
            etcd: Etcd [chaos ""] [bench];
            postgres: Postgres [chaos "p"] [bench];
            zookeeper: ZooKeeper [chaos "z"] [bench];
            // MySQL's store on Debian's MariaDB 10.11 (`harness::MariaDb`).
            mysql: MariaDb [chaos "m"] [bench];
            // PostgreSQL behind pgbouncer in transaction mode (`harness::PgBouncer`). The chaos
            // suite's rows are PostgreSQL's with a pooler in between: it does not run them.
            pgbouncer: PgBouncer [] [bench];
            // PostgreSQL where another role owns overloads of every operator and function name
            // leader-exec's SQL uses, each recording that it ran (`harness::PgHostile`): every
            // test asserts none ran. Neither chaos rows nor benchmarks: the server is the same.
            postgres_hostile: PgHostile [] [];
        }
    };
}
