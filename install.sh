#!/bin/sh
# Builds leader-exec in release mode and installs it under PREFIX (default /usr/local).
#
#   ./install.sh                 build and install (installs protoc and the protobuf headers the
#                                etcd client needs to build, from Debian's packages)
#   ./install.sh --with-etcd     also install Debian's etcd-server and make sure an etcd answers on
#                                127.0.0.1:2379 (starting one in the background if none does: for
#                                trying leader-exec on one host only, see its output)
#   ./install.sh --prefix DIR    install under DIR instead (same as PREFIX=DIR); a relative DIR is
#                                taken from the current directory
#   ./install.sh --uninstall     remove what this script installed under PREFIX, and stop the etcd
#                                it started (only that one; its data stays)
#
# Installs PREFIX/bin/leader-exec, its man pages under PREFIX/share/man/man1, completions for
# bash, zsh and fish where each shell looks under PREFIX/share, the README under
# PREFIX/share/doc/leader-exec, and the systemd units (PREFIX/lib/systemd/system, with
# PREFIX/libexec/leader-exec/run-job; see the README).
#
# Running it again is harmless: packages already present are not reinstalled, the binary is
# replaced, and a running etcd is left alone.
# (ETCD_CLIENT_PORT and ETCD_PEER_PORT, 2379 and 2380 by default, move the etcd it starts.)
set -eu

PREFIX=${PREFIX-/usr/local}
WITH_ETCD=false
UNINSTALL=false
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-2379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-2380}
ETCD_ENDPOINT=http://127.0.0.1:$ETCD_CLIENT_PORT

usage() {
    sed -n '2,22s/^# \{0,1\}//p' "$0"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --with-etcd) WITH_ETCD=true ;;
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

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "install.sh: need root (or sudo) to run: $*" >&2
        exit 1
    fi
}

# Installs the Debian packages given that are not installed yet.
apt_install() {
    missing=""
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $package"
    done
    [ -z "$missing" ] && return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install.sh: please install:$missing" >&2
        exit 1
    fi
    echo "install.sh: installing$missing"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
}

# Where each file goes: source in this repository, then destination under PREFIX.
FILES="
target/release/leader-exec bin/leader-exec 755
man/leader-exec.1 share/man/man1/leader-exec.1 644
man/leader-exec-status.1 share/man/man1/leader-exec-status.1 644
man/leader-exec-watch.1 share/man/man1/leader-exec-watch.1 644
man/leader-exec-check.1 share/man/man1/leader-exec-check.1 644
completions/leader-exec.bash share/bash-completion/completions/leader-exec 644
completions/_leader-exec share/zsh/site-functions/_leader-exec 644
completions/leader-exec.fish share/fish/vendor_completions.d/leader-exec.fish 644
README.md share/doc/leader-exec/README.md 644
packaging/run-job libexec/leader-exec/run-job 755
packaging/systemd/leader-exec@.service lib/systemd/system/leader-exec@.service 644
packaging/systemd/leader-exec@.timer lib/systemd/system/leader-exec@.timer 644
packaging/systemd/leader-exec-etcd.service lib/systemd/system/leader-exec-etcd.service 644
"

# The etcd --with-etcd starts: its data, log and pid file. Under PREFIX unless PREFIX is the
# system's, where it goes where a system's data goes.
case "$PREFIX" in
    /usr/local|/usr)
        if [ "$(id -u)" -eq 0 ]; then
            ETCD_HOME=/var/lib/leader-exec-etcd
        else
            ETCD_HOME=${XDG_DATA_HOME:-$HOME/.local/share}/leader-exec-etcd
        fi
        ;;
    *) ETCD_HOME=$PREFIX/var/lib/leader-exec-etcd ;;
esac
ETCD_PID_FILE=$ETCD_HOME/etcd.pid

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
    for dir in libexec/leader-exec share/doc/leader-exec; do
        [ ! -d "$PREFIX/$dir" ] || in_prefix rmdir "$PREFIX/$dir" 2>/dev/null || true
    done
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
