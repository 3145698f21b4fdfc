#!/usr/bin/env bash
# Builds the release tarball for hosts without dpkg:
#
#   packaging/tarball.sh [--prefix DIR] [--check]
#
# writes target/dist/leader-exec-VERSION-ARCH-linux.tar.gz, one top directory holding
#
#   bin/leader-exec
#   libexec/leader-exec/run-job                      (ExecStart of leader-exec@.service)
#   lib/systemd/system/leader-exec@.service, leader-exec@.timer, leader-exec-etcd.service
#   share/man/man1/leader-exec*.1
#   share/bash-completion/completions/leader-exec, share/zsh/site-functions/_leader-exec,
#   share/fish/vendor_completions.d/leader-exec.fish
#   share/doc/leader-exec/README.md, docs/*.md, LICENSE-MIT, LICENSE-APACHE, examples/*.conf,
#   examples/*.service (the rolling-reboot units: examples, not installed as units)
#
# laid out to be unpacked into PREFIX (default /usr/local, which systemd searches for units):
#
#   tar -C /usr/local --strip-components=1 -xzf target/dist/leader-exec-0.1.0-x86_64-linux.tar.gz
#   systemctl daemon-reload
#
# The units name PREFIX's paths, so a different PREFIX needs its own tarball (--prefix DIR).
# --check also unpacks the tarball and checks its contents (CI runs it).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
check=false
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix=$2; shift ;;
        --prefix=*) prefix=${1#--prefix=} ;;
        --check) check=true ;;
        -h|--help) sed -n '2,24s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "tarball.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
case "$prefix" in
    /*) prefix=${prefix%/} ;;
    *) echo "tarball.sh: --prefix must be an absolute path" >&2; exit 2 ;;
esac

target=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
name=leader-exec-$version-$(uname -m)-linux
dist=$target/dist
stage=$dist/$name

cargo build --release --locked
rm -rf "$stage"
put() { # put MODE SOURCE DESTINATION-under-stage
    install -D -m "$1" "$2" "$stage/$3"
}
put 755 "$target/release/leader-exec" bin/leader-exec
strip "$stage/bin/leader-exec" 2>/dev/null || true
put 755 packaging/run-job libexec/leader-exec/run-job
for page in man/*.1; do put 644 "$page" "share/man/man1/$(basename "$page")"; done
put 644 completions/leader-exec.bash share/bash-completion/completions/leader-exec
put 644 completions/_leader-exec share/zsh/site-functions/_leader-exec
put 644 completions/leader-exec.fish share/fish/vendor_completions.d/leader-exec.fish
for doc in README.md docs/*.md LICENSE-MIT LICENSE-APACHE; do put 644 "$doc" "share/doc/leader-exec/$doc"; done
for conf in packaging/examples/*.conf packaging/examples/*.service; do
    put 644 "$conf" "share/doc/leader-exec/examples/$(basename "$conf")"
    sed -i -e "s|/usr/bin/leader-exec|$prefix/bin/leader-exec|g" \
        "$stage/share/doc/leader-exec/examples/$(basename "$conf")"
done
for unit in packaging/systemd/*; do
    put 644 "$unit" "lib/systemd/system/$(basename "$unit")"
    sed -i -e "s|/usr/libexec/leader-exec/|$prefix/libexec/leader-exec/|g" \
        -e "s|/usr/share/doc/leader-exec/|$prefix/share/doc/leader-exec/|g" \
        "$stage/lib/systemd/system/$(basename "$unit")"
done

tarball=$dist/$name.tar.gz
# Reproducible: sorted names, root-owned, the last commit's time.
mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
tar -C "$dist" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
    -czf "$tarball" "$name"
echo "tarball.sh: wrote $tarball ($(du -h "$tarball" | cut -f1))"

if $check; then
    fail() { echo "tarball.sh: check failed: $*" >&2; exit 1; }
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    tar -C "$unpacked" --strip-components=1 -xzf "$tarball"
    for file in bin/leader-exec libexec/leader-exec/run-job lib/systemd/system/leader-exec@.service \
        lib/systemd/system/leader-exec@.timer lib/systemd/system/leader-exec-etcd.service \
        share/man/man1/leader-exec.1 share/bash-completion/completions/leader-exec \
        share/zsh/site-functions/_leader-exec share/fish/vendor_completions.d/leader-exec.fish \
        share/doc/leader-exec/LICENSE-MIT share/doc/leader-exec/LICENSE-APACHE \
        share/doc/leader-exec/README.md share/doc/leader-exec/docs/reference.md \
        share/doc/leader-exec/examples/outbox-relay.conf \
        share/doc/leader-exec/examples/leader-exec-reboot.service \
        share/doc/leader-exec/examples/leader-exec-reboot-done.service; do
        [ -f "$unpacked/$file" ] || fail "$file missing"
    done
    [ "$("$unpacked/bin/leader-exec" --version)" = "leader-exec $version" ] || fail "--version"
    grep -qx "ExecStart=$prefix/libexec/leader-exec/run-job /etc/leader-exec/%i.conf" \
        "$unpacked/lib/systemd/system/leader-exec@.service" || fail "ExecStart does not name $prefix"
    if grep -rn '/usr/libexec\|/usr/share/doc' "$unpacked/lib/systemd/system"; then
        [ "$prefix" = /usr ] || fail "a unit names /usr paths"
    fi
    owners=$(tar -tvzf "$tarball" | awk '{print $2}' | sort -u)
    [ "$owners" = 0/0 ] || fail "entries not owned by root: $owners"
    echo "tarball.sh: check ok ($(tar -tzf "$tarball" | grep -vc '/$') files)"
fi
