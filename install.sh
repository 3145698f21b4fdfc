#!/bin/sh
# Builds leader-exec in release mode and installs it under PREFIX (default /usr/local).
#
#   ./install.sh                 build and install (installs protoc and the protobuf headers the
#                                etcd client needs to build, from Debian's packages)
#   ./install.sh --with-etcd     also install Debian's etcd-server and make sure an etcd answers on
#                                127.0.0.1:2379 (starting one in the background if none does)
#   ./install.sh --prefix DIR    install under DIR instead (same as PREFIX=DIR)
#   ./install.sh --uninstall     remove what this script installed under PREFIX (not etcd)
#
# Installs PREFIX/bin/leader-exec, its man pages under PREFIX/share/man/man1, and completions
# for bash, zsh and fish where each shell looks under PREFIX/share.
#
# Running it again is harmless: packages already present are not reinstalled, the binary is
# replaced, and a running etcd is left alone.
set -eu

PREFIX=${PREFIX:-/usr/local}
WITH_ETCD=false
UNINSTALL=false
ETCD_ENDPOINT=http://127.0.0.1:2379

usage() {
    sed -n '2,17s/^# \{0,1\}//p' "$0"
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
"

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
    echo "install.sh: installed $PREFIX/$destination"
done

if $WITH_ETCD; then
    apt_install etcd-server etcd-client
    healthy() {
        ETCDCTL_API=3 etcdctl --endpoints="$ETCD_ENDPOINT" --command-timeout=1s endpoint health >/dev/null 2>&1
    }
    if healthy; then
        echo "install.sh: etcd already answers on $ETCD_ENDPOINT"
    else
        if [ "$(id -u)" -eq 0 ]; then
            data=/var/lib/leader-exec-etcd
        else
            data=${XDG_DATA_HOME:-$HOME/.local/share}/leader-exec-etcd
        fi
        mkdir -p "$data" && chmod 700 "$data"
        echo "install.sh: starting etcd on $ETCD_ENDPOINT (data in $data, log in $data/etcd.log)"
        nohup etcd --name leader-exec --data-dir "$data/data" \
            --listen-client-urls "$ETCD_ENDPOINT" --advertise-client-urls "$ETCD_ENDPOINT" \
            --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
            --initial-cluster leader-exec=http://127.0.0.1:2380 \
            >"$data/etcd.log" 2>&1 </dev/null &
        tries=0
        until healthy; do
            tries=$((tries + 1))
            if [ $tries -gt 100 ]; then
                echo "install.sh: etcd did not come up; see $data/etcd.log" >&2
                exit 1
            fi
            sleep 0.1
        done
        echo "install.sh: etcd is up"
    fi
fi
