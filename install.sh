#!/bin/sh
# Builds leader-exec in release mode and installs it under PREFIX (default /usr/local).
#
#   ./install.sh                 build and install (installs protoc and the protobuf headers the
#                                etcd client needs to build, from Debian's packages)
#   ./install.sh --with-etcd     also install Debian's etcd-server and make sure an etcd answers on
#                                127.0.0.1:2379 (starting one in the background if none does: for
#                                trying leader-exec on one host only, see its output)
#   ./install.sh --with-postgres also install Debian's postgresql and start a PostgreSQL of its
#                                own on 127.0.0.1:25432 (role and database leader_exec; for trying
#                                leader-exec on one host only, see its output)
#   ./install.sh --with-zookeeper  also install Debian's zookeeper and start a standalone
#                                ZooKeeper of its own on 127.0.0.1:22181 (the same)
#   ./install.sh --with-mysql    also install Debian's mariadb-server and start a MariaDB of its
#                                own on 127.0.0.1:23306 (user and database leader_exec; the same)
#   ./install.sh --prefix DIR    install under DIR instead (same as PREFIX=DIR); a relative DIR is
#                                taken from the current directory
#   ./install.sh --uninstall     remove what this script installed under PREFIX and the
#                                directories left empty; stop the etcd it started (only that one;
#                                its data stays) and the PostgreSQL, ZooKeeper and MariaDB it
#                                started (their data is removed)
#
# Installs the files the Debian package installs, under PREFIX instead of /usr: bin/leader-exec,
# the man pages under share/man/man1, completions for bash, zsh and fish where each shell looks
# under PREFIX/share (zsh: share/zsh/site-functions), the README with the docs/ pages, the licences
# and the example job files under share/doc/leader-exec, and the systemd units
# (lib/systemd/system, with libexec/leader-exec/run-job; see docs/operations.md).
#
# Running it again is harmless: packages already present are not reinstalled, the binary is
# replaced, and a running server is left alone.
# (ETCD_CLIENT_PORT and ETCD_PEER_PORT, 2379 and 2380 by default, move the etcd it starts;
# POSTGRES_PORT, ZOOKEEPER_PORT and MYSQL_PORT, 25432, 22181 and 23306 by default, the other
# three. CARGO_TARGET_DIR is honoured.)
set -eu

PREFIX=${PREFIX-/usr/local}
WITH_ETCD=false
WITH_POSTGRES=false
WITH_ZOOKEEPER=false
WITH_MYSQL=false
UNINSTALL=false
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-2379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-2380}
ETCD_ENDPOINT=http://127.0.0.1:$ETCD_CLIENT_PORT
# Not PostgreSQL's 5432, ZooKeeper's 2181 nor MySQL's 3306: a real server of the host may use
# those (Debian's postgresql and mariadb-server packages start one on 5432 and 3306), and the
# ports are below Linux's ephemeral range.
POSTGRES_PORT=${POSTGRES_PORT:-25432}
ZOOKEEPER_PORT=${ZOOKEEPER_PORT:-22181}
MYSQL_PORT=${MYSQL_PORT:-23306}
POSTGRES_ENDPOINT=postgres://leader_exec@127.0.0.1:$POSTGRES_PORT/leader_exec
ZOOKEEPER_ENDPOINT=zk://127.0.0.1:$ZOOKEEPER_PORT
MYSQL_ENDPOINT=mysql://leader_exec@127.0.0.1:$MYSQL_PORT/leader_exec
TARGET_DIR=${CARGO_TARGET_DIR:-target}

usage() {
    sed -n '2,36s/^# \{0,1\}//p' "$0"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --with-etcd) WITH_ETCD=true ;;
        --with-postgres) WITH_POSTGRES=true ;;
        --with-zookeeper) WITH_ZOOKEEPER=true ;;
        --with-mysql) WITH_MYSQL=true ;;
        --uninstall) UNINSTALL=true ;;
        --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; PREFIX=$2; shift ;;
        --prefix=*) PREFIX=${1#--prefix=} ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# A relative PREFIX means the caller's directory, not this checkout: resolve it before the cd.
case "$PREFIX" in
    "") echo "install.sh: --prefix (or PREFIX) is empty; give a directory, e.g. /usr/local" >&2; exit 2 ;;
    /*) ;;
    *) PREFIX=$(pwd)/$PREFIX ;;
esac
while [ "${PREFIX%/}" != "$PREFIX" ] && [ "$PREFIX" != / ]; do PREFIX=${PREFIX%/}; done

cd "$(dirname "$0")"

me=install.sh
# shellcheck source=packaging/apt.sh
. packaging/apt.sh

# Where each file goes: source in this repository, then destination under PREFIX. The same
# files as the package's `assets` in Cargo.toml, with usr/ replaced by PREFIX; the one
# difference is zsh's directory, site-functions (searched under /usr/local) where the package
# uses Debian's vendor-completions. packaging/test-install.sh compares the two lists.
FILES="
$TARGET_DIR/release/leader-exec bin/leader-exec 755
man/leader-exec.1 share/man/man1/leader-exec.1 644
man/leader-exec-status.1 share/man/man1/leader-exec-status.1 644
man/leader-exec-watch.1 share/man/man1/leader-exec-watch.1 644
man/leader-exec-check.1 share/man/man1/leader-exec-check.1 644
man/leader-exec-resign.1 share/man/man1/leader-exec-resign.1 644
man/leader-exec-hold.1 share/man/man1/leader-exec-hold.1 644
man/leader-exec-release.1 share/man/man1/leader-exec-release.1 644
completions/leader-exec.bash share/bash-completion/completions/leader-exec 644
completions/_leader-exec share/zsh/site-functions/_leader-exec 644
completions/leader-exec.fish share/fish/vendor_completions.d/leader-exec.fish 644
README.md share/doc/leader-exec/README.md 644
docs/reference.md share/doc/leader-exec/docs/reference.md 644
docs/safety.md share/doc/leader-exec/docs/safety.md 644
docs/etcd.md share/doc/leader-exec/docs/etcd.md 644
docs/postgresql.md share/doc/leader-exec/docs/postgresql.md 644
docs/mysql.md share/doc/leader-exec/docs/mysql.md 644
docs/zookeeper.md share/doc/leader-exec/docs/zookeeper.md 644
docs/operations.md share/doc/leader-exec/docs/operations.md 644
docs/security.md share/doc/leader-exec/docs/security.md 644
docs/development.md share/doc/leader-exec/docs/development.md 644
LICENSE-MIT share/doc/leader-exec/LICENSE-MIT 644
LICENSE-APACHE share/doc/leader-exec/LICENSE-APACHE 644
packaging/examples/outbox-relay.conf share/doc/leader-exec/examples/outbox-relay.conf 644
packaging/examples/statements.conf share/doc/leader-exec/examples/statements.conf 644
packaging/examples/leader-exec-reboot.service share/doc/leader-exec/examples/leader-exec-reboot.service 644
packaging/examples/leader-exec-reboot-done.service share/doc/leader-exec/examples/leader-exec-reboot-done.service 644
packaging/run-job libexec/leader-exec/run-job 755
packaging/systemd/leader-exec@.service lib/systemd/system/leader-exec@.service 644
packaging/systemd/leader-exec@.timer lib/systemd/system/leader-exec@.timer 644
packaging/systemd/leader-exec-etcd.service lib/systemd/system/leader-exec-etcd.service 644
"

# Where a server this script starts keeps its data, log and pid file: under PREFIX unless
# PREFIX is the system's, where it goes where a system's data goes.
case "$PREFIX" in
    /usr/local|/usr)
        SYSTEM_PREFIX=true
        if [ "$(id -u)" -eq 0 ]; then
            DATA_HOME=/var/lib
        else
            DATA_HOME=${XDG_DATA_HOME:-$HOME/.local/share}
        fi
        ;;
    *)
        SYSTEM_PREFIX=false
        DATA_HOME=$PREFIX/var/lib
        ;;
esac
ETCD_HOME=$DATA_HOME/leader-exec-etcd
ETCD_PID_FILE=$ETCD_HOME/etcd.pid
POSTGRES_HOME=$DATA_HOME/leader-exec-postgres
ZOOKEEPER_HOME=$DATA_HOME/leader-exec-zookeeper
ZOOKEEPER_PID_FILE=$ZOOKEEPER_HOME/zookeeper.pid
MYSQL_HOME=$DATA_HOME/leader-exec-mysql
MYSQL_PID_FILE=$MYSQL_HOME/mariadbd.pid

# Prints the pid in the pid file when it is a live etcd that this script started on this data
# directory (a pid reused by another process does not count); fails otherwise.
our_etcd_pid() {
    [ -r "$ETCD_PID_FILE" ] || return 1
    pid=$(cat "$ETCD_PID_FILE")
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$ETCD_HOME/data" || return 1
    echo "$pid"
}

# Prints the postmaster's pid when the PostgreSQL this script set up runs on its data directory.
our_postgres_pid() {
    [ -r "$POSTGRES_HOME/data/postmaster.pid" ] || return 1
    pid=$(head -n 1 "$POSTGRES_HOME/data/postmaster.pid")
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$POSTGRES_HOME/data" || return 1
    echo "$pid"
}

# Prints the pid of the ZooKeeper this script started on its configuration, if it runs.
our_zookeeper_pid() {
    [ -r "$ZOOKEEPER_PID_FILE" ] || return 1
    pid=$(cat "$ZOOKEEPER_PID_FILE")
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "$ZOOKEEPER_HOME/zoo.cfg" || return 1
    echo "$pid"
}

# Prints the pid of the MariaDB server this script started on its data directory, if it runs.
our_mysql_pid() {
    [ -r "$MYSQL_PID_FILE" ] || return 1
    pid=$(cat "$MYSQL_PID_FILE")
    case "$pid" in ''|*[!0-9]*) return 1 ;; esac
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- "--datadir=$MYSQL_HOME/data" || return 1
    echo "$pid"
}

# Sends signal $2 to pid $1 and waits up to 30 s for it to end; fails if it does not.
stop_pid() {
    kill "-$2" "$1" 2>/dev/null || true
    tries=0
    while kill -0 "$1" 2>/dev/null && [ $tries -lt 300 ]; do
        tries=$((tries + 1))
        sleep 0.1
    done
    ! kill -0 "$1" 2>/dev/null
}

# own_dir DIR UID...: refuses DIR when it is a symbolic link, not a directory, or belongs to
# anyone but the users named. This script writes into DIR, as root too, and another user's
# directory can hold links to anywhere: a file written through one would be root's to clobber.
own_dir() {
    dir=$1
    shift
    [ -e "$dir" ] || [ -L "$dir" ] || return 0
    if [ -L "$dir" ] || [ ! -d "$dir" ]; then
        echo "install.sh: $dir is not a directory (a symbolic link?); remove it or choose another --prefix" >&2
        exit 1
    fi
    owner=$(stat -c %u -- "$dir")
    for uid in "$@"; do
        [ "$owner" -ne "$uid" ] || return 0
    done
    echo "install.sh: $dir belongs to uid $owner, not to this script's user; remove it or choose another --prefix" >&2
    exit 1
}

# Runs a command directly when PREFIX is writable, else as root.
in_prefix() {
    if [ -w "$PREFIX" ] || { [ ! -e "$PREFIX" ] && [ -w "$(dirname "$PREFIX")" ]; }; then
        "$@"
    else
        as_root "$@"
    fi
}

if $UNINSTALL; then
    echo "$FILES" | while read -r _source destination _mode; do
        [ -n "$destination" ] || continue
        if [ -e "$PREFIX/$destination" ]; then
            in_prefix rm -f "$PREFIX/$destination"
            echo "install.sh: removed $PREFIX/$destination"
        fi
    done
    # The directories left empty, deepest first. Under a system PREFIX only leader-exec's own:
    # the others (share/man/man1, lib/systemd/system, ...) belong to the system.
    if $SYSTEM_PREFIX; then
        dirs="share/doc/leader-exec/examples share/doc/leader-exec/docs share/doc/leader-exec libexec/leader-exec"
    else
        dirs=$(echo "$FILES" | while read -r _source destination _mode; do
            [ -n "$destination" ] || continue
            dir=$(dirname "$destination")
            while [ "$dir" != . ]; do
                echo "$dir"
                dir=$(dirname "$dir")
            done
        done | sort -u | awk -F/ '{ print NF " " $0 }' | sort -rn | cut -d' ' -f2-)
    fi
    for dir in $dirs; do
        [ ! -d "$PREFIX/$dir" ] || in_prefix rmdir "$PREFIX/$dir" 2>/dev/null || true
    done
    if pid=$(our_postgres_pid); then
        # SIGINT: PostgreSQL's fast shutdown (sessions are ended, nothing is lost).
        if ! stop_pid "$pid" INT; then
            echo "install.sh: PostgreSQL (pid $pid) did not stop within 30s" >&2
            exit 1
        fi
        echo "install.sh: stopped the PostgreSQL this script started (pid $pid)"
    fi
    if [ -d "$POSTGRES_HOME" ]; then
        rm -rf "$POSTGRES_HOME"
        echo "install.sh: removed its data, $POSTGRES_HOME"
    fi
    if pid=$(our_zookeeper_pid); then
        if ! stop_pid "$pid" TERM; then
            echo "install.sh: ZooKeeper (pid $pid) did not stop within 30s" >&2
            exit 1
        fi
        echo "install.sh: stopped the ZooKeeper this script started (pid $pid)"
    fi
    if [ -d "$ZOOKEEPER_HOME" ]; then
        rm -rf "$ZOOKEEPER_HOME"
        echo "install.sh: removed its data, $ZOOKEEPER_HOME"
    fi
    if pid=$(our_mysql_pid); then
        # SIGTERM: MariaDB's normal shutdown.
        if ! stop_pid "$pid" TERM; then
            echo "install.sh: MariaDB (pid $pid) did not stop within 30s" >&2
            exit 1
        fi
        echo "install.sh: stopped the MariaDB this script started (pid $pid)"
    fi
    if [ -d "$MYSQL_HOME" ]; then
        rm -rf "$MYSQL_HOME"
        echo "install.sh: removed its data, $MYSQL_HOME"
    fi
    if pid=$(our_etcd_pid); then
        kill "$pid"
        tries=0
        while kill -0 "$pid" 2>/dev/null && [ $tries -lt 100 ]; do
            tries=$((tries + 1))
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "install.sh: etcd (pid $pid) did not stop within 10s" >&2
            exit 1
        fi
        rm -f "$ETCD_PID_FILE"
        echo "install.sh: stopped the etcd this script started (pid $pid); its data stays in $ETCD_HOME"
    elif [ -e "$ETCD_PID_FILE" ]; then
        rm -f "$ETCD_PID_FILE"
        echo "install.sh: the etcd this script started is no longer running"
    fi
    if ! $SYSTEM_PREFIX; then
        for dir in var/lib var; do
            [ ! -d "$PREFIX/$dir" ] || rmdir "$PREFIX/$dir" 2>/dev/null || true
        done
    fi
    exit 0
fi

# etcd-client builds its gRPC code with protoc and needs the well-known .proto files.
apt_install protobuf-compiler libprotobuf-dev

if ! command -v cargo >/dev/null 2>&1; then
    echo "install.sh: cargo not found; install Rust from https://rustup.rs and run this again" >&2
    exit 1
fi
cargo build --release --locked

echo "$FILES" | while read -r source destination mode; do
    [ -n "$destination" ] || continue
    in_prefix install -D -m "$mode" "$source" "$PREFIX/$destination"
    case "$destination" in
        lib/systemd/system/*)
            # The units name the package's paths (/usr); point them at PREFIX.
            in_prefix sed -i -e "s|/usr/libexec/leader-exec/|$PREFIX/libexec/leader-exec/|g" \
                -e "s|/usr/share/doc/leader-exec/|$PREFIX/share/doc/leader-exec/|g" "$PREFIX/$destination"
            ;;
    esac
    echo "install.sh: installed $PREFIX/$destination"
done

case ":$PATH:" in
    *":$PREFIX/bin:"*) ;;
    *) echo "install.sh: warning: $PREFIX/bin is not on PATH; add it (export PATH=\"$PREFIX/bin:\$PATH\") or run $PREFIX/bin/leader-exec" >&2 ;;
esac

if $WITH_ETCD; then
    apt_install etcd-server etcd-client
    healthy() {
        ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINT" --command-timeout=1s endpoint health >/dev/null 2>&1
    }
    if healthy; then
        if pid=$(our_etcd_pid); then
            echo "install.sh: etcd already answers on $ETCD_ENDPOINT (pid $pid, started by this script earlier; stop it with: kill $pid)"
        else
            echo "install.sh: etcd already answers on $ETCD_ENDPOINT"
        fi
    else
        data=$ETCD_HOME
        own_dir "$data" "$(id -u)"
        mkdir -p "$data" && chmod 700 "$data"
        echo "install.sh: starting etcd on $ETCD_ENDPOINT (data in $data, log in $data/etcd.log)"
        nohup etcd --name leader-exec --data-dir "$data/data" \
            --listen-client-urls "$ETCD_ENDPOINT" --advertise-client-urls "$ETCD_ENDPOINT" \
            --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
            --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
            --initial-cluster "leader-exec=http://127.0.0.1:$ETCD_PEER_PORT" \
            >"$data/etcd.log" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$ETCD_PID_FILE"
        tries=0
        until healthy; do
            tries=$((tries + 1))
            if [ $tries -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "install.sh: etcd did not come up; see $data/etcd.log" >&2
                exit 1
            fi
            sleep 0.1
        done
        uninstall="./install.sh --uninstall"
        [ "$PREFIX" = /usr/local ] || uninstall="$uninstall --prefix $PREFIX"
        echo "install.sh: etcd is up, pid $pid (recorded in $ETCD_PID_FILE); stop it with: kill $pid"
        echo "install.sh:   ($uninstall stops it too, with the rest)"
        echo "install.sh: this etcd is for trying leader-exec on this host only: it has no authentication,"
        echo "install.sh:   no TLS, runs as $(id -un), is a single member, and is gone after a reboot"
        if [ -d /run/systemd/system ]; then
            echo "install.sh: systemd runs here: for an etcd that survives reboots, use a unit instead:"
            echo "install.sh:   kill $pid && systemctl enable --now etcd.service     (Debian's etcd-server unit)"
            echo "install.sh:   or leader-exec-etcd.service from $PREFIX/lib/systemd/system (not both)"
        fi
    fi
fi

uninstall="./install.sh --uninstall"
[ "$PREFIX" = /usr/local ] || uninstall="$uninstall --prefix $PREFIX"

if $WITH_POSTGRES; then
    apt_install postgresql
    # The newest server Debian installed (postgresql depends on postgresql-15 on Debian 12).
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -x "$pg_bin/initdb" ] || { echo "install.sh: no PostgreSQL server programs under /usr/lib/postgresql" >&2; exit 1; }
    # initdb and the server refuse to run as root: as root they run as Debian's postgres user,
    # which must own the data directory and reach it.
    as_owner() {
        if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
    }
    data=$POSTGRES_HOME/data
    if pid=$(our_postgres_pid); then
        echo "install.sh: PostgreSQL already runs on $data (pid $pid, started by this script earlier)"
    else
        # As root, POSTGRES_HOME and the data directory are the postgres user's: everything
        # written into them is written by that user (as_owner), so a link it planted there is
        # followed with its rights, never root's. POSTGRES_HOME itself must be root's or the
        # postgres user's, and no link.
        if [ "$(id -u)" -eq 0 ]; then
            own_dir "$POSTGRES_HOME" 0 "$(id -u postgres)"
        else
            own_dir "$POSTGRES_HOME" "$(id -u)"
        fi
        fresh=false
        if [ ! -f "$data/PG_VERSION" ]; then
            mkdir -p "$POSTGRES_HOME"
            [ "$(id -u)" -ne 0 ] || chown -h postgres:postgres "$POSTGRES_HOME"
            if ! as_owner chmod 700 "$POSTGRES_HOME" || ! as_owner test -w "$POSTGRES_HOME"; then
                echo "install.sh: the postgres user cannot reach $POSTGRES_HOME (a directory above it is not searchable by others); choose another --prefix" >&2
                exit 1
            fi
            # A log left by an earlier attempt (or a link in its place) goes first.
            as_owner rm -f "$POSTGRES_HOME/initdb.log"
            as_owner sh -c 'exec "$1" -D "$2" -A trust -U postgres --no-sync >"$3" 2>&1' sh \
                "$pg_bin/initdb" "$data" "$POSTGRES_HOME/initdb.log" \
                || { echo "install.sh: initdb failed; see $POSTGRES_HOME/initdb.log" >&2; exit 1; }
            # The superuser only over the Unix socket, which lives in the data directory (mode
            # 0700: its owner and root only); over TCP only the role leader_exec, on its own
            # database, without a password.
            printf '%s\n' "local all postgres trust" \
                "host leader_exec leader_exec 127.0.0.1/32 trust" \
                | as_owner sh -c 'cat >"$1"' sh "$data/pg_hba.conf"
            fresh=true
        fi
        echo "install.sh: starting PostgreSQL on 127.0.0.1:$POSTGRES_PORT (data in $data, log in $POSTGRES_HOME/postgres.log)"
        if ! as_owner "$pg_bin/pg_ctl" -D "$data" -l "$POSTGRES_HOME/postgres.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $POSTGRES_PORT -k $data" start >/dev/null; then
            echo "install.sh: PostgreSQL did not start; see $POSTGRES_HOME/postgres.log (a port in use? set POSTGRES_PORT)" >&2
            exit 1
        fi
        if $fresh; then
            as_owner "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$data" -p "$POSTGRES_PORT" -U postgres -d postgres \
                -c "CREATE ROLE leader_exec LOGIN" -c "CREATE DATABASE leader_exec OWNER leader_exec" >/dev/null
        fi
        pid=$(our_postgres_pid) || { echo "install.sh: PostgreSQL is not running; see $POSTGRES_HOME/postgres.log" >&2; exit 1; }
        echo "install.sh: PostgreSQL is up, pid $pid; stop it with: $uninstall (which also removes its data)"
        echo "install.sh: this PostgreSQL is for trying leader-exec on this host only: no password (any local"
        echo "install.sh:   user may connect as leader_exec), no TLS, runs as $(if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi), is not started after a reboot"
    fi
    echo "install.sh: use it with: leader-exec --endpoints $POSTGRES_ENDPOINT --lease demo -- sh -c 'echo leader, token \$LEADER_TOKEN'"
fi

if $WITH_ZOOKEEPER; then
    # Not zookeeperd: that adds a system service.
    apt_install zookeeper
    command -v java >/dev/null 2>&1 || { echo "install.sh: java not found (Debian's zookeeper depends on default-jre)" >&2; exit 1; }
    # Answers (exit 0: a leader, 3: none) once the server serves.
    zk_serves() {
        "$PREFIX/bin/leader-exec" status --endpoints "$ZOOKEEPER_ENDPOINT" --lease install-check \
            --connect-timeout 1s -q >/dev/null 2>&1 && return 0
        [ $? -eq 3 ]
    }
    if pid=$(our_zookeeper_pid); then
        echo "install.sh: ZooKeeper already runs on $ZOOKEEPER_HOME/zoo.cfg (pid $pid, started by this script earlier)"
    else
        own_dir "$ZOOKEEPER_HOME" "$(id -u)"
        own_dir "$ZOOKEEPER_HOME/data" "$(id -u)"
        mkdir -p "$ZOOKEEPER_HOME/data" && chmod 700 "$ZOOKEEPER_HOME"
        # admin.enableServer=false: else its Jetty binds *:8080. Sessions of 1 s to 60 s cover
        # every --ttl leader-exec accepts by default.
        printf '%s\n' "tickTime=500" "dataDir=$ZOOKEEPER_HOME/data" "clientPort=$ZOOKEEPER_PORT" \
            "clientPortAddress=127.0.0.1" "admin.enableServer=false" "4lw.commands.whitelist=ruok,srvr" \
            "minSessionTimeout=1000" "maxSessionTimeout=60000" >"$ZOOKEEPER_HOME/zoo.cfg"
        printf '%s\n' "log4j.rootLogger=WARN, FILE" "log4j.appender.FILE=org.apache.log4j.FileAppender" \
            "log4j.appender.FILE.File=$ZOOKEEPER_HOME/zookeeper.log" \
            "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout" \
            "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n" \
            >"$ZOOKEEPER_HOME/log4j.properties"
        echo "install.sh: starting ZooKeeper on 127.0.0.1:$ZOOKEEPER_PORT (data in $ZOOKEEPER_HOME/data, log in $ZOOKEEPER_HOME/zookeeper.log)"
        nohup java -XX:+UseSerialGC -Xmx256m \
            -cp "$ZOOKEEPER_HOME:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
            org.apache.zookeeper.server.ZooKeeperServerMain "$ZOOKEEPER_HOME/zoo.cfg" \
            >"$ZOOKEEPER_HOME/zookeeper.out" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$ZOOKEEPER_PID_FILE"
        tries=0
        until zk_serves; do
            tries=$((tries + 1))
            if [ $tries -gt 120 ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "install.sh: ZooKeeper did not come up within 60s; see $ZOOKEEPER_HOME/zookeeper.out and zookeeper.log (a port in use? set ZOOKEEPER_PORT)" >&2
                exit 1
            fi
            sleep 0.5
        done
        echo "install.sh: ZooKeeper is up, pid $pid (recorded in $ZOOKEEPER_PID_FILE); stop it with: $uninstall (which also removes its data)"
        echo "install.sh: this ZooKeeper is for trying leader-exec on this host only: no authentication,"
        echo "install.sh:   no TLS, runs as $(id -un), is a single server, and is not started after a reboot"
    fi
    echo "install.sh: use it with: leader-exec --endpoints $ZOOKEEPER_ENDPOINT --lease demo -- sh -c 'echo leader, token \$LEADER_TOKEN'"
fi

if $WITH_MYSQL; then
    # Debian's MariaDB (10.11 on Debian 12): the server programs and the client this script uses
    # to set it up. The package's own server (mariadb.service, on 3306) is left alone.
    apt_install mariadb-server mariadb-client
    mariadbd=/usr/sbin/mariadbd
    [ -x "$mariadbd" ] || { echo "install.sh: no MariaDB server program at $mariadbd" >&2; exit 1; }
    # mariadbd refuses to run as root: as root the server and its set-up run as Debian's mysql
    # user, which must own the data directory and reach it.
    as_mysql() {
        if [ "$(id -u)" -eq 0 ]; then runuser -u mysql -- "$@"; else "$@"; fi
    }
    data=$MYSQL_HOME/data
    socket=$MYSQL_HOME/mysqld.sock
    # The server's own administrator, over the Unix socket only (in MYSQL_HOME, mode 0700): the
    # account mariadb-install-db made for the user that ran it, which only that operating system
    # user may use (unix_socket authentication).
    mysql_admin() {
        as_mysql mariadb --no-defaults --socket="$socket" -N -B "$@"
    }
    if pid=$(our_mysql_pid); then
        echo "install.sh: MariaDB already runs on $data (pid $pid, started by this script earlier)"
    else
        # As root, MYSQL_HOME and everything in it are the mysql user's, and everything written
        # there is written by that user (as_mysql), so a link it planted there is followed with
        # its rights, never root's. MYSQL_HOME itself must be root's or the mysql user's, and no
        # link.
        if [ "$(id -u)" -eq 0 ]; then
            own_dir "$MYSQL_HOME" 0 "$(id -u mysql)"
        else
            own_dir "$MYSQL_HOME" "$(id -u)"
        fi
        fresh=false
        if [ ! -d "$data/mysql" ]; then
            mkdir -p "$MYSQL_HOME"
            [ "$(id -u)" -ne 0 ] || chown -h mysql:mysql "$MYSQL_HOME"
            if ! as_mysql chmod 700 "$MYSQL_HOME" || ! as_mysql test -w "$MYSQL_HOME"; then
                echo "install.sh: the mysql user cannot reach $MYSQL_HOME (a directory above it is not searchable by others); choose another --prefix" >&2
                exit 1
            fi
            # What an earlier attempt left (or a link in its place) goes first.
            as_mysql rm -rf "$data" "$MYSQL_HOME/install-db.log"
            # unix_socket authentication (the default): the only accounts it makes are root's and
            # this user's, each for that operating system user on the socket; no account over TCP.
            as_mysql sh -c 'exec mariadb-install-db --no-defaults --datadir="$1" --skip-test-db >"$2" 2>&1' sh \
                "$data" "$MYSQL_HOME/install-db.log" \
                || { echo "install.sh: mariadb-install-db failed; see $MYSQL_HOME/install-db.log" >&2; exit 1; }
            as_mysql mkdir -p "$MYSQL_HOME/tmp"
            fresh=true
        fi
        echo "install.sh: starting MariaDB on 127.0.0.1:$MYSQL_PORT (data in $data, log in $MYSQL_HOME/mariadb.log)"
        # A log an earlier start left (or a link in its place) goes first: what is read below is
        # this start's.
        as_mysql rm -f "$MYSQL_HOME/mariadb.log"
        # In a session of its own (setsid), so that closing the terminal does not end it; its own
        # temporary directory (a shared /tmp gets cleaned under a long-running server).
        setsid sh -c 'if [ "$(id -u)" -eq 0 ]; then set -- runuser -u mysql -- "$@"; fi; exec "$@"' sh \
            "$mariadbd" --no-defaults --datadir="$data" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
            --socket="$socket" --pid-file="$MYSQL_PID_FILE" --log-error="$MYSQL_HOME/mariadb.log" \
            --tmpdir="$MYSQL_HOME/tmp" --skip-name-resolve --skip-log-bin \
            </dev/null >/dev/null 2>&1 &
        tries=0
        until mysql_admin -e 'SELECT 1' >/dev/null 2>&1 && our_mysql_pid >/dev/null; do
            tries=$((tries + 1))
            # A server that cannot start (its port taken, say) says so in its log and exits.
            if [ $tries -gt 600 ] || grep -q 'ERROR.*Aborting' "$MYSQL_HOME/mariadb.log" 2>/dev/null; then
                echo "install.sh: MariaDB did not come up within 60s; see $MYSQL_HOME/mariadb.log (a port in use? set MYSQL_PORT)" >&2
                exit 1
            fi
            sleep 0.1
        done
        if $fresh; then
            # The user leader_exec, without a password, over TCP from 127.0.0.1 only, with every
            # right on its database and none elsewhere.
            mysql_admin -e "CREATE DATABASE IF NOT EXISTS leader_exec;
                CREATE USER IF NOT EXISTS 'leader_exec'@'127.0.0.1';
                GRANT ALL ON leader_exec.* TO 'leader_exec'@'127.0.0.1'" \
                || { echo "install.sh: could not create the user and database leader_exec" >&2; exit 1; }
        fi
        pid=$(our_mysql_pid) || { echo "install.sh: MariaDB is not running; see $MYSQL_HOME/mariadb.log" >&2; exit 1; }
        echo "install.sh: MariaDB is up, pid $pid; stop it with: $uninstall (which also removes its data)"
        echo "install.sh: this MariaDB is for trying leader-exec on this host only: no password (any local"
        echo "install.sh:   user may connect as leader_exec), no TLS, runs as $(if [ "$(id -u)" -eq 0 ]; then echo mysql; else id -un; fi), is not started after a reboot"
    fi
    echo "install.sh: use it with: leader-exec --endpoints $MYSQL_ENDPOINT --lease demo -- sh -c 'echo leader, token \$LEADER_TOKEN'"
fi
