#!/usr/bin/env bash
# Exercises install.sh in a scratch directory, with its etcd, PostgreSQL, ZooKeeper and MariaDB on
# free loopback ports (never 2379, 5432, 2181 or 3306): a relative --prefix resolves against the
# caller's directory, an empty one is refused, the PATH warning, the installed files are the
# package's (Cargo.toml's assets, usr/ mapped to the prefix), --with-etcd's pid, pid file and
# warnings, the README's first command against that etcd and the demo against the PostgreSQL,
# ZooKeeper and MariaDB of --with-postgres, --with-zookeeper and --with-mysql, and --uninstall
# removing every file and directory it made, stopping that etcd and no other one, and stopping
# PostgreSQL, ZooKeeper and MariaDB and removing their data.
# Run by .ci/run after a release build (install.sh's own `cargo build --release` is then quick).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
started=$(date +%s)
fail() {
    echo "test-install: FAIL: $*" >&2
    exit 1
}
say() { echo "test-install: $*"; }

work=$(mktemp -d)
decoy=""
cleanup() {
    status=$?
    # (Under set -e, a failing command here would replace the script's status: the decoy's 143.)
    if [ -n "$decoy" ]; then kill "$decoy" 2>/dev/null && wait "$decoy" 2>/dev/null || true; fi
    if [ -r "$work/caller/rel/var/lib/leader-exec-etcd/etcd.pid" ]; then
        kill "$(cat "$work/caller/rel/var/lib/leader-exec-etcd/etcd.pid")" 2>/dev/null || true
    fi
    if [ -r "$work/caller/rel/var/lib/leader-exec-zookeeper/zookeeper.pid" ]; then
        kill "$(cat "$work/caller/rel/var/lib/leader-exec-zookeeper/zookeeper.pid")" 2>/dev/null || true
    fi
    if [ -r "$work/caller/rel/var/lib/leader-exec-mysql/mariadbd.pid" ]; then
        kill "$(cat "$work/caller/rel/var/lib/leader-exec-mysql/mariadbd.pid")" 2>/dev/null || true
    fi
    if [ -r "$work/caller/rel/var/lib/leader-exec-postgres/data/postmaster.pid" ]; then
        kill -INT "$(head -n 1 "$work/caller/rel/var/lib/leader-exec-postgres/data/postmaster.pid")" 2>/dev/null || true
        sleep 1
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
# As root, install.sh runs PostgreSQL and MariaDB as the postgres and mysql users, which must
# reach the prefix.
chmod 755 "$work"
mkdir "$work/caller"
cd "$work/caller"

set +e
"$repo/install.sh" --prefix= >/dev/null 2>"$work/err"
code=$?
set -e
[ $code -eq 2 ] && grep -q empty "$work/err" || fail "--prefix= was not refused ($code)"

read -r client peer pg_port zk_port my_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(5)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
export ETCD_CLIENT_PORT=$client ETCD_PEER_PORT=$peer POSTGRES_PORT=$pg_port ZOOKEEPER_PORT=$zk_port MYSQL_PORT=$my_port
"$repo/install.sh" --prefix rel --with-etcd --with-postgres --with-zookeeper --with-mysql \
    >"$work/out" 2>&1 || fail "install.sh: $(cat "$work/out")"
prefix=$work/caller/rel
[ -x "$prefix/bin/leader-exec" ] || fail "not installed under the caller's directory: $(cat "$work/out")"
[ ! -e "$repo/rel" ] || fail "installed into the checkout"
for file in share/man/man1/leader-exec.1 share/bash-completion/completions/leader-exec \
    share/zsh/site-functions/_leader-exec share/fish/vendor_completions.d/leader-exec.fish \
    libexec/leader-exec/run-job lib/systemd/system/leader-exec@.service share/doc/leader-exec/README.md \
    share/doc/leader-exec/docs/reference.md; do
    [ -f "$prefix/$file" ] || fail "$prefix/$file missing"
done
grep -qx "ExecStart=$prefix/libexec/leader-exec/run-job /etc/leader-exec/%i.conf" \
    "$prefix/lib/systemd/system/leader-exec@.service" || fail "the unit does not name $prefix"
grep -q "warning: $prefix/bin is not on PATH" "$work/out" || fail "no PATH warning"
pid_file=$prefix/var/lib/leader-exec-etcd/etcd.pid
[ -r "$pid_file" ] || fail "no pid file under PREFIX: $(cat "$work/out")"
pid=$(cat "$pid_file")
grep -q "pid $pid" "$work/out" && grep -q "kill $pid" "$work/out" || fail "pid not printed"
for words in "no authentication" "no TLS" "runs as $(id -un)" "gone after a reboot"; do
    grep -q "$words" "$work/out" || fail "output does not say '$words'"
done
say "relative prefix, PATH warning, etcd pid $pid with its warnings: ok"

# The same files, with the same modes, as the package: Cargo.toml's assets with usr/ mapped to
# the prefix (and zsh's vendor-completions to site-functions, which zsh searches under
# /usr/local).
python3 - "$repo/Cargo.toml" >"$work/package-files" <<'PY'
import os, sys, tomllib
with open(sys.argv[1], "rb") as f:
    assets = tomllib.load(f)["package"]["metadata"]["deb"]["assets"]
for source, destination, mode in assets:
    if destination.endswith("/"):
        destination += os.path.basename(source)
    destination = destination.removeprefix("usr/")
    destination = destination.replace("share/zsh/vendor-completions/", "share/zsh/site-functions/")
    print(destination, mode)
PY
sort -o "$work/package-files" "$work/package-files"
(cd "$prefix" && find . -path ./var -prune -o -type f -printf '%P %m\n' | sort) >"$work/installed-files"
diff -u "$work/package-files" "$work/installed-files" >"$work/files.diff" \
    || fail "install.sh installs other files than the package (- package, + install.sh): $(cat "$work/files.diff")"
say "the same $(wc -l <"$work/installed-files") files as the package: ok"

# --with-postgres, --with-zookeeper and --with-mysql: each prints the exact --endpoints, and the
# demo elects and runs on it with the installed binary.
for endpoint in "postgres://leader_exec@127.0.0.1:$pg_port/leader_exec" "zk://127.0.0.1:$zk_port" \
    "mysql://leader_exec@127.0.0.1:$my_port/leader_exec"; do
    grep -qF "use it with: leader-exec --endpoints $endpoint --lease demo" "$work/out" \
        || fail "no --endpoints $endpoint printed: $(cat "$work/out")"
    out=$(PATH="$prefix/bin:$PATH" leader-exec --endpoints "$endpoint" --lease demo \
        -- sh -c 'echo leader, token $LEADER_TOKEN' 2>"$work/demo.err") \
        || fail "demo on $endpoint: $(cat "$work/demo.err")"
    [[ $out =~ ^leader,\ token\ [0-9]+$ ]] || fail "demo on $endpoint printed '$out'"
done
pg_pid=$(head -n 1 "$prefix/var/lib/leader-exec-postgres/data/postmaster.pid")
zk_pid=$(cat "$prefix/var/lib/leader-exec-zookeeper/zookeeper.pid")
my_pid=$(cat "$prefix/var/lib/leader-exec-mysql/mariadbd.pid")
grep -q "PostgreSQL is up, pid $pg_pid" "$work/out" && grep -q "ZooKeeper is up, pid $zk_pid" "$work/out" \
    && grep -q "MariaDB is up, pid $my_pid" "$work/out" || fail "pids not printed: $(cat "$work/out")"
for words in "no password" "no TLS" "not started after a reboot"; do
    grep -q "$words" "$work/out" || fail "output does not say '$words'"
done
# Over TCP the superuser is refused: only the role leader_exec, on its database.
if psql -X -At -d "postgres://postgres@127.0.0.1:$pg_port/postgres" -c 'SELECT 1' >/dev/null 2>&1; then
    fail "the superuser can connect over TCP without a password"
fi
# MariaDB's administrators (root, and the user that set it up) only on the Unix socket, as that
# operating system user: over TCP only leader_exec, which sees its own database alone.
for user in root mysql "$(id -un)"; do
    if mariadb --no-defaults -h 127.0.0.1 -P "$my_port" -u "$user" -e 'SELECT 1' >/dev/null 2>&1; then
        fail "MariaDB's $user can connect over TCP without a password"
    fi
done
databases=$(mariadb --no-defaults -h 127.0.0.1 -P "$my_port" -u leader_exec -N -B -e 'SHOW DATABASES' | grep -vx information_schema)
[ "$databases" = leader_exec ] || fail "MariaDB's leader_exec sees other databases: $databases"
say "PostgreSQL (pid $pg_pid), ZooKeeper (pid $zk_pid) and MariaDB (pid $my_pid) elect and run the demo: ok"

# The README's first command, with the installed binary and this etcd.
out=$(PATH="$prefix/bin:$PATH" LEADER_EXEC_ENDPOINTS=http://127.0.0.1:$client \
    leader-exec --lease demo -- sh -c 'echo leader, token $LEADER_TOKEN')
[[ $out =~ ^leader,\ token\ [0-9]+$ ]] || fail "README command printed '$out'"

# A second run leaves the etcd alone and names it.
"$repo/install.sh" --prefix rel --with-etcd --with-postgres --with-zookeeper --with-mysql \
    >"$work/out2" 2>&1 || fail "second run: $(cat "$work/out2")"
grep -q "already answers.*pid $pid" "$work/out2" || fail "second run: $(cat "$work/out2")"
grep -q "PostgreSQL already runs.*pid $pg_pid" "$work/out2" || fail "second run: $(cat "$work/out2")"
grep -q "ZooKeeper already runs.*pid $zk_pid" "$work/out2" || fail "second run: $(cat "$work/out2")"
grep -q "MariaDB already runs.*pid $my_pid" "$work/out2" || fail "second run: $(cat "$work/out2")"

# --uninstall stops only the etcd whose pid file it wrote: a pid file pointing at another
# process (a reused pid) is not acted on.
sleep 300 &
decoy=$!
cp "$pid_file" "$work/real.pid"
echo "$decoy" >"$pid_file"
"$repo/install.sh" --prefix rel --uninstall >"$work/out3" 2>&1
kill -0 "$decoy" || fail "--uninstall killed a process that was not its etcd"
kill -0 "$pid" || fail "etcd gone although the pid file did not name it"
for server in "PostgreSQL $pg_pid" "ZooKeeper $zk_pid" "MariaDB $my_pid"; do
    set -- $server
    for _ in $(seq 100); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$2" 2>/dev/null && fail "--uninstall left $1 (pid $2) running"
    grep -q "stopped the $1 this script started (pid $2)" "$work/out3" || fail "$(cat "$work/out3")"
done
for data in leader-exec-postgres leader-exec-zookeeper leader-exec-mysql; do
    [ ! -e "$prefix/var/lib/$data" ] || fail "--uninstall left $prefix/var/lib/$data"
done
cp "$work/real.pid" "$pid_file"
"$repo/install.sh" --prefix rel --uninstall >"$work/out4" 2>&1
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "--uninstall left its etcd (pid $pid) running"
grep -q "stopped the etcd this script started (pid $pid)" "$work/out4" || fail "$(cat "$work/out4")"
left=$(find "$prefix" -mindepth 1 ! -path "$prefix/var" ! -path "$prefix/var/*")
[ -z "$left" ] || fail "left after --uninstall: $left"
say "--uninstall removed every file and directory, stopped PostgreSQL, ZooKeeper and MariaDB and removed their data, stopped only its etcd: ok"
say "ok in $(($(date +%s) - started)) s"
