# Shared helpers for tests/ci/*.sh. Source it; do not run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Fixtures (real fat binaries, golden files) live beside the checkout.
export ROCPACK_SHARED="${ROCPACK_SHARED:-$ROOT/../shared}"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

# need_pkgs PKG... : install Debian packages that are missing (root only).
need_pkgs() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        die "missing Debian packages: ${missing[*]} (run as root or install them)"
    fi
    log "apt-get install ${missing[*]}"
    if [ ! -f /tmp/.rocpack-apt-updated ]; then
        apt-get update -q && touch /tmp/.rocpack-apt-updated
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "${missing[@]}" \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "${missing[@]}"
}
