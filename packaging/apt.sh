# Sourced by install.sh and test.sh: root for a command, and Debian packages installed where
# missing. `$me` names the caller in messages.

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "$me: need root (or sudo) to run: $*" >&2
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
        echo "$me: please install:$missing" >&2
        exit 1
    fi
    echo "$me: installing$missing" >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
