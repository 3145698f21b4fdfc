#!/usr/bin/env bash
# Exercises install.sh in a scratch directory, with its etcd on free loopback ports (never 2379):
# a relative --prefix resolves against the caller's directory, an empty one is refused, the PATH
# warning, --with-etcd's pid, pid file and warnings, the README's first command against that
# etcd, and --uninstall removing every file and stopping that etcd and no other one.
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
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
mkdir "$work/caller"
cd "$work/caller"

set +e
"$repo/install.sh" --prefix= >/dev/null 2>"$work/err"
code=$?
set -e
[ $code -eq 2 ] && grep -q empty "$work/err" || fail "--prefix= was not refused ($code)"

read -r client peer < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
ETCD_CLIENT_PORT=$client ETCD_PEER_PORT=$peer "$repo/install.sh" --prefix rel --with-etcd \
    >"$work/out" 2>&1 || fail "install.sh: $(cat "$work/out")"
prefix=$work/caller/rel
[ -x "$prefix/bin/leader-exec" ] || fail "not installed under the caller's directory: $(cat "$work/out")"
[ ! -e "$repo/rel" ] || fail "installed into the checkout"
for file in share/man/man1/leader-exec.1 share/bash-completion/completions/leader-exec \
    share/zsh/site-functions/_leader-exec share/fish/vendor_completions.d/leader-exec.fish \
    libexec/leader-exec/run-job lib/systemd/system/leader-exec@.service share/doc/leader-exec/README.md; do
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

# The README's first command, with the installed binary and this etcd.
out=$(PATH="$prefix/bin:$PATH" LEADER_EXEC_ENDPOINTS=http://127.0.0.1:$client \
    leader-exec --lease demo -- sh -c 'echo leader, token $LEADER_TOKEN')
[[ $out =~ ^leader,\ token\ [0-9]+$ ]] || fail "README command printed '$out'"

# A second run leaves the etcd alone and names it.
ETCD_CLIENT_PORT=$client ETCD_PEER_PORT=$peer "$repo/install.sh" --prefix rel --with-etcd \
    >"$work/out2" 2>&1 || fail "second run: $(cat "$work/out2")"
grep -q "already answers.*pid $pid" "$work/out2" || fail "second run: $(cat "$work/out2")"

# --uninstall stops only the etcd whose pid file it wrote: a pid file pointing at another
# process (a reused pid) is not acted on.
sleep 300 &
decoy=$!
cp "$pid_file" "$work/real.pid"
echo "$decoy" >"$pid_file"
"$repo/install.sh" --prefix rel --uninstall >"$work/out3" 2>&1
kill -0 "$decoy" || fail "--uninstall killed a process that was not its etcd"
kill -0 "$pid" || fail "etcd gone although the pid file did not name it"
cp "$work/real.pid" "$pid_file"
"$repo/install.sh" --prefix rel --uninstall >"$work/out4" 2>&1
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "--uninstall left its etcd (pid $pid) running"
grep -q "stopped the etcd this script started (pid $pid)" "$work/out4" || fail "$(cat "$work/out4")"
left=$(find "$prefix" -type f ! -path "$prefix/var/*")
[ -z "$left" ] || fail "left after --uninstall: $left"
say "README command ($out), --uninstall removed every file and stopped only its etcd: ok"
say "ok in $(($(date +%s) - started)) s"
