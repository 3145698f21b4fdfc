#!/usr/bin/env bash
# The tests, on a fresh Debian machine with Rust: installs the Debian packages they need that are
# not installed yet, then runs a tier.
#
#   ./test.sh           the fast tier: `cargo test --locked` (every store-independent test on every
#                       store entry, the security list, each chaos row on one store drawn by seed,
#                       a short nemesis schedule per store, the CLI, docs and completion tests)
#   ./test.sh --full    the full tier: `cargo test --locked -- --ignored` (the tests the fast tier
#                       leaves out: every chaos row on every store, the 200-waiter lines, the long
#                       nemesis schedules); CI runs it after the fast tier
#   ./test.sh --deps    only the packages
#
# Arguments after `--` go to cargo test's test binaries (`./test.sh -- etcd::` filters).
# docs/development.md, "Two tiers", has what each tier runs and how long it takes.
set -euo pipefail
cd "$(dirname "$0")"

tier=fast
while [ $# -gt 0 ]; do
    case "$1" in
        --full) tier=full ;;
        --deps) tier=none ;;
        --) shift; break ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test.sh: unknown argument $1 (see ./test.sh --help)" >&2; exit 2 ;;
    esac
    shift
done

me=test.sh
# shellcheck source=packaging/apt.sh
. packaging/apt.sh

# What the tests need, each for what:
# etcd-server/etcd-client: the tests start their own etcd on free loopback ports.
# postgresql (15): the tests start their own PostgreSQL (initdb/pg_ctl as the postgres user) on
# free loopback ports; psql comes with it.
# protobuf-compiler + libprotobuf-dev: etcd-client generates its gRPC code at build time.
# openssl: the TLS tests make their own certificates.
# python3: the benchmark runner (bench/run.py, standard library only).
# bash, zsh, fish: the completion tests (tests/completion.rs) run the generated scripts in them.
# zookeeper (3.8) + openjdk-17-jdk-headless: the tests start their own standalone ZooKeeper (java
# with zookeeper.jar) on free loopback ports; not zookeeperd, which adds a service.
# libcurator-recipes-java + libcurator-framework-java: the Curator interoperability test runs
# Curator's LeaderLatch (tests/zk/CuratorLatch.java, through java's source launcher, hence the JDK).
# bash-completion, groff-base, systemd (systemd-analyze verify, no running systemd needed):
# the package test (packaging/test-deb.sh).
# pgbouncer (Debian's, 1.18): the store-independent tests run once more through a pgbouncer in
# transaction mode that the harness starts (as the postgres user) on a free loopback port in front
# of its PostgreSQL (tests/harness/pgbouncer.rs, PgBouncer).
# faketime (libfaketime): the clock-step tests preload it into the server they start, to step its
# clock while it runs.
# mariadb-server + mariadb-client (Debian's, 10.11): the MySQL/MariaDB store's tests start their own
# server (mariadb-install-db into a temporary directory, then mariadbd, as the mysql user) on free
# loopback ports; the mariadb client runs the harness's own queries. The package's service is
# never started by the tests.
# valgrind: bench/layout.py traces runs with it to make link/order.txt (CI runs it once).
PACKAGES="etcd-server etcd-client postgresql protobuf-compiler libprotobuf-dev openssl ca-certificates python3
    bash zsh fish bash-completion groff-base systemd
    zookeeper libcurator-recipes-java libcurator-framework-java openjdk-17-jdk-headless pgbouncer faketime valgrind
    mariadb-server mariadb-client"

# shellcheck disable=SC2086
apt_install $PACKAGES

for tool in etcd etcdctl valgrind psql /usr/lib/postgresql/15/bin/initdb /usr/lib/postgresql/15/bin/pg_ctl pgbouncer protoc openssl python3 zsh fish groff systemd-analyze java javac \
    mariadb mariadb-install-db /usr/sbin/mariadbd; do
    command -v "$tool" >/dev/null || { echo "test.sh: $tool missing after install" >&2; exit 1; }
done
for file in /usr/share/java/zookeeper.jar /usr/share/java/curator-recipes.jar /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1; do
    [ -f "$file" ] || { echo "test.sh: $file missing after install" >&2; exit 1; }
done

case "$tier" in
    fast) exec cargo test --locked -- "$@" ;;
    full) exec cargo test --locked -- --ignored "$@" ;;
    none) ;;
esac
