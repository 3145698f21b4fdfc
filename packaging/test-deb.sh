#!/usr/bin/env bash
# Builds the .deb, installs it with dpkg, exercises what it installed against a test etcd of its
# own (free loopback ports, never 2379), checks that every file landed where the package says,
# verifies the shipped systemd units, then removes and purges the package and checks nothing is
# left. Run by .ci/run; needs root, cargo-deb, etcd, etcdctl, python3, bash, groff,
# systemd-analyze (Debian's systemd package), bash-completion.
#
#   packaging/test-deb.sh            # builds with `cargo deb` (reuses an up-to-date release build)
#   packaging/test-deb.sh FILE.deb   # tests an existing package
#
# It refuses to run where leader-exec is already installed as a package, since it removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

say() { echo "test-deb: $*"; }
fail() {
    echo "test-deb: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i)"
if dpkg-query -W -f='${Status}' leader-exec 2>/dev/null | grep -q installed; then
    fail "leader-exec is already installed as a package here; not touching it"
fi

work=$(mktemp -d)
etcd_pid=""
installed=false
cleanup() {
    status=$?
    # (Under set -e, a failing command here would replace the script's status: etcd's 143.)
    if [ -n "$etcd_pid" ]; then kill "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null || true; fi
    if $installed; then dpkg -P leader-exec >/dev/null 2>&1 || true; fi
    rm -rf "$work"
    [ $status -eq 0 ] || echo "test-deb: failed after $(($(date +%s) - started)) s" >&2
    exit "$status"
}
trap cleanup EXIT

# --- build -----------------------------------------------------------------------------------
if [ $# -ge 1 ]; then
    deb=$1
else
    say "building the package (cargo deb --locked)"
    deb=$(cargo deb --locked | tail -n 1)
fi
[ -f "$deb" ] || fail "no package at '$deb'"
say "package: $deb ($(du -h "$deb" | cut -f1))"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
[ "$(dpkg-deb -f "$deb" Package)" = leader-exec ] || fail "package name"
case "$(dpkg-deb -f "$deb" Version)" in "$version"*) ;; *) fail "package version is not $version" ;; esac

# --- install ---------------------------------------------------------------------------------
dpkg -i "$deb" >/dev/null
installed=true
dpkg-query -W -f='${Status}' leader-exec | grep -q 'install ok installed' || fail "not installed"
dpkg -L leader-exec >"$work/listed"

# Every file dpkg lists exists; and the package lists each file the README promises.
while read -r path; do
    [ -e "$path" ] || fail "dpkg lists $path, which does not exist"
done <"$work/listed"
expected="
/usr/bin/leader-exec
/usr/share/man/man1/leader-exec.1.gz
/usr/share/man/man1/leader-exec-status.1.gz
/usr/share/man/man1/leader-exec-watch.1.gz
/usr/share/man/man1/leader-exec-check.1.gz
/usr/share/man/man1/leader-exec-resign.1.gz
/usr/share/man/man1/leader-exec-hold.1.gz
/usr/share/man/man1/leader-exec-release.1.gz
/usr/share/bash-completion/completions/leader-exec
/usr/share/zsh/vendor-completions/_leader-exec
/usr/share/fish/vendor_completions.d/leader-exec.fish
/usr/libexec/leader-exec/run-job
/usr/lib/systemd/system/leader-exec@.service
/usr/lib/systemd/system/leader-exec@.timer
/usr/lib/systemd/system/leader-exec-etcd.service
/usr/share/doc/leader-exec/README.md
/usr/share/doc/leader-exec/docs/reference.md
/usr/share/doc/leader-exec/docs/safety.md
/usr/share/doc/leader-exec/docs/etcd.md
/usr/share/doc/leader-exec/docs/postgresql.md
/usr/share/doc/leader-exec/docs/zookeeper.md
/usr/share/doc/leader-exec/docs/operations.md
/usr/share/doc/leader-exec/docs/security.md
/usr/share/doc/leader-exec/docs/development.md
/usr/share/doc/leader-exec/LICENSE-MIT
/usr/share/doc/leader-exec/LICENSE-APACHE
/usr/share/doc/leader-exec/copyright
/usr/share/doc/leader-exec/examples/outbox-relay.conf
/usr/share/doc/leader-exec/examples/statements.conf
/usr/share/doc/leader-exec/examples/leader-exec-reboot.service
/usr/share/doc/leader-exec/examples/leader-exec-reboot-done.service
"
for path in $expected; do
    grep -qx "$path" "$work/listed" || fail "the package does not list $path"
    [ -f "$path" ] || fail "$path is not a file"
done
[ -x /usr/bin/leader-exec ] && [ -x /usr/libexec/leader-exec/run-job ] || fail "not executable"
say "$(grep -c . "$work/listed") paths listed, all present; the $(echo "$expected" | grep -c .) expected files among them"

# --- the installed binary --------------------------------------------------------------------
[ "$(command -v leader-exec)" = /usr/bin/leader-exec ] || fail "leader-exec on PATH is $(command -v leader-exec)"
[ "$(leader-exec --version)" = "leader-exec $version" ] || fail "--version: $(leader-exec --version)"
zcat /usr/share/man/man1/leader-exec.1.gz | groff -man -Tutf8 2>/dev/null | grep -q 'date +\\%F' \
    || fail "the man page's crontab example does not escape % as \\%"

read -r client peer < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
endpoint=http://127.0.0.1:$client
mkdir -m 700 "$work/etcd"
etcd --name pkg --data-dir "$work/etcd/data" \
    --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "pkg=http://127.0.0.1:$peer" --logger zap --log-outputs stderr --log-level error \
    2>"$work/etcd.log" &
etcd_pid=$!
for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints="$endpoint" --command-timeout=1s endpoint health >/dev/null 2>&1 && break
    kill -0 "$etcd_pid" 2>/dev/null || fail "etcd exited: $(cat "$work/etcd.log")"
    sleep 0.1
done
say "test etcd on $endpoint (pid $etcd_pid)"
export LEADER_EXEC_ENDPOINTS=$endpoint

out=$(leader-exec --lease pkg-test -- sh -c 'echo "token=$LEADER_TOKEN lease=$LEADER_LEASE"')
[[ $out =~ ^token=[0-9]+\ lease=pkg-test$ ]] || fail "run form printed '$out'"
set +e
leader-exec status --lease pkg-test >/dev/null
code=$?
set -e
[ $code -eq 3 ] || fail "status after the job exited $code, expected 3 (no leader)"
say "installed binary ran a job as leader ($out) and status saw the lease released"

# run-job, as leader-exec@pkg-job.service runs it: the conf file's settings, LEADER_EXEC_OPTIONS
# evaluated as shell words at each start, LEADER_EXEC_COMMAND run by sh as leader.
cat >"$work/pkg-job.conf" <<EOF
# like /etc/leader-exec/pkg-job.conf
LEADER_EXEC_OPTIONS='--occurrence "pkg-job:\$(echo evaluated)"'
LEADER_EXEC_COMMAND='echo "ran with token \$LEADER_TOKEN, occurrence \$LEADER_OCCURRENCE" >> $work/job.out'
EOF
LEADER_EXEC_LEASE=pkg-job /usr/libexec/leader-exec/run-job "$work/pkg-job.conf"
LEADER_EXEC_LEASE=pkg-job /usr/libexec/leader-exec/run-job "$work/pkg-job.conf"
[ "$(grep -c . "$work/job.out")" -eq 1 ] || fail "run-job: expected one run, got: $(cat "$work/job.out")"
grep -qE '^ran with token [0-9]+, occurrence pkg-job:evaluated$' "$work/job.out" \
    || fail "run-job: $(cat "$work/job.out")"
echo 'LEADER_EXEC_OPTIONS=' >"$work/empty.conf"
set +e
LEADER_EXEC_LEASE=x /usr/libexec/leader-exec/run-job "$work/empty.conf" 2>"$work/err"
code=$?
set -e
[ $code -eq 125 ] && grep -q LEADER_EXEC_COMMAND "$work/err" || fail "run-job without a command: $code"
say "run-job ran its conf's command once per occurrence, and refused a conf without a command"

# The installed bash completion, loaded on demand by bash-completion as in an interactive shell.
reply=$(bash --norc --noprofile -c '
    source /usr/share/bash-completion/bash_completion
    _completion_loader leader-exec
    function=$(complete -p leader-exec | sed -n "s/.*-F \([^ ]*\) .*/\1/p")
    COMP_WORDS=(leader-exec status --js); COMP_CWORD=2
    COMP_LINE="leader-exec status --js"; COMP_POINT=${#COMP_LINE}
    "$function" leader-exec --js status
    echo "${COMPREPLY[*]}"')
[ "$reply" = --json ] || fail "installed bash completion offered '$reply' for 'status --js'"
say "bash-completion loads the installed completion (status --js -> $reply)"

# --- the units -------------------------------------------------------------------------------
# systemd-analyze verify loads units in a private manager: it needs no running systemd. A
# template is verified through an instance. It checks syntax, that the executables exist and
# that referenced units resolve.
units=/usr/lib/systemd/system
mkdir "$work/units"
cp "$units/leader-exec@.service" "$units/leader-exec@.timer" "$units/leader-exec-etcd.service" "$work/units/"
ln -s "leader-exec@.service" "$work/units/leader-exec@pkg-job.service"
ln -s "leader-exec@.timer" "$work/units/leader-exec@pkg-job.timer"
verify() {
    (cd "$work/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$@") 2>&1 \
        | grep -v -e 'Cannot add dependency job' -e 'ignoring: Operation not permitted' || true
}
messages=$(verify leader-exec@pkg-job.service leader-exec@pkg-job.timer leader-exec-etcd.service)
[ -z "$messages" ] || fail "systemd-analyze verify: $messages"
# The check has teeth: a unit with an unknown setting and a missing executable is reported.
printf '[Service]\nExecStart=/nonexistent/x\nBogusSetting=1\n' >"$work/units/broken.service"
messages=$(verify broken.service)
grep -q BogusSetting <<<"$messages" && grep -q /nonexistent/x <<<"$messages" \
    || fail "systemd-analyze verify did not catch a broken unit: $messages"
say "systemd-analyze verify: leader-exec@.service, leader-exec@.timer, leader-exec-etcd.service clean"

# --- removal ---------------------------------------------------------------------------------
dpkg -r leader-exec >/dev/null
while read -r path; do
    if [ -f "$path" ] || [ -L "$path" ]; then fail "$path is left after dpkg -r"; fi
done <"$work/listed"
for dir in /usr/libexec/leader-exec /usr/share/doc/leader-exec; do
    [ ! -e "$dir" ] || fail "$dir is left after dpkg -r"
done
dpkg -P leader-exec >/dev/null
installed=false
if dpkg-query -W -f='${Status}' leader-exec 2>/dev/null | grep -q 'ok'; then
    status=$(dpkg-query -W -f='${Status}' leader-exec)
    [ "$status" = "unknown ok not-installed" ] || fail "dpkg still knows leader-exec: $status"
fi
hash -r
if command -v leader-exec >/dev/null; then fail "leader-exec still on PATH: $(command -v leader-exec)"; fi
say "dpkg -r removed every file and directory; purged"
say "ok in $(($(date +%s) - started)) s"
