# Shared helpers for tests/ci/*.sh. Source it; do not run it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# ../shared beside the checkout is optional: it only adds large corpora and a
# buck2 binary. The fixtures the tests need are built from tests/fixtures
# (HIP sources + generator, about 30 s) into target/rocpack-shared/fixtures,
# so a plain clone runs every test. Tests read $ROCPACK_SHARED/fixtures.
export ROCPACK_SHARED_DIR="${ROCPACK_SHARED_DIR:-$ROOT/../shared}"
export ROCPACK_SHARED="${ROCPACK_SHARED:-$ROOT/target/rocpack-shared}"

# One build, no incremental caches: CI builds each crate once, and the
# incremental directories would double the target directory on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

# http_serve DIR LOG: serves DIR over HTTP on 127.0.0.1, on a port the
# kernel picks when the server binds (a port probed free and bound later
# can be taken in between, e.g. as another connection's ephemeral port:
# "Address already in use"); sets HTTP_PORT and HTTP_PID. Returns 1, with
# the server's last log lines on stderr, if it does not come up in 10 s.
http_serve() {
    local pf _
    pf="$(mktemp)"
    rm -f "$pf"
    python3 -c 'import functools, http.server, os, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
open(sys.argv[2] + ".tmp", "w").write(str(s.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()' "$1" "$pf" >"$2" 2>&1 &
    HTTP_PID=$!
    for _ in $(seq 200); do
        [ -s "$pf" ] && break
        kill -0 "$HTTP_PID" 2>/dev/null || break
        sleep 0.05
    done
    HTTP_PORT="$(cat "$pf" 2>/dev/null || true)"
    rm -f "$pf"
    [ -n "$HTTP_PORT" ] || { tail -5 "$2" >&2; return 1; }
}

# need_pkgs PKG... : install Debian packages that are missing (root only).
need_pkgs() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
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

# Debian packages the fixture generator needs (clang-19 builds the HIP
# binaries; hipcc + clang-15 build the one ROCm-5.2 fixture).
FIXTURE_PKGS=(clang-19 lld-19 llvm-19 clang-tools-19 binutils coreutils
    libamdhip64-dev hipcc rocm-device-libs clang-tools-15)

# ensure_fixtures: build $ROCPACK_SHARED/fixtures from tests/fixtures unless an
# up-to-date build is there (keyed by the generator and the toolchain versions).
# A ROCPACK_SHARED that points elsewhere (set by the caller) is used as it is.
ensure_fixtures() {
    local dest="$ROOT/target/rocpack-shared"
    [ "$ROCPACK_SHARED" = "$dest" ] || return 0
    need_pkgs "${FIXTURE_PKGS[@]}"
    local key
    key=$( { sha256sum "$ROOT/tests/fixtures/make-fatbins.sh";
             (cd "$ROOT/tests/fixtures" && find kpack-golden -type f | LC_ALL=C sort | xargs sha256sum);
             dpkg-query -W "${FIXTURE_PKGS[@]}"; } | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$dest/.stamp" 2>/dev/null)" != "$key" ]; then
        log "building test fixtures from tests/fixtures into $dest/fixtures"
        rm -rf "$dest" && mkdir -p "$dest"
        WORK_DIR="$dest/.work" bash "$ROOT/tests/fixtures/make-fatbins.sh" "$dest/fixtures" \
            >"$dest/make-fatbins.log" 2>&1 || { tail -20 "$dest/make-fatbins.log" >&2; die "fixture build"; }
        rm -rf "$dest/.work"
        cp -r "$ROOT/tests/fixtures/kpack-golden" "$dest/fixtures/"
        printf '%s\n' "$key" >"$dest/.stamp"
    fi
    # Optional extras from ../shared: the buck2 binary.
    if [ -d "$ROCPACK_SHARED_DIR/tools" ] && [ ! -e "$dest/tools" ]; then
        ln -s "$(cd "$ROCPACK_SHARED_DIR/tools" && pwd)" "$dest/tools"
    fi
}
ensure_fixtures

# Windows (PE32+/COFF) fixtures: built from the same HIP sources with clang-19
# for x86_64-w64-windows-gnu and linked with lld and mingw-w64's GNU ld (about
# 5 s), into target/rocpack-win/fixtures, rebuilt when the generator, the
# sources or the toolchain change. Tests find them there (or at
# $ROCPACK_WIN_FIXTURES).
WIN_FIXTURE_PKGS=(clang-19 lld-19 llvm-19 clang-tools-19 gcc-mingw-w64-x86-64)
ensure_win_fixtures() {
    local dest="$ROOT/target/rocpack-win/fixtures" key
    export ROCPACK_WIN_FIXTURES="${ROCPACK_WIN_FIXTURES:-$dest}"
    [ "$ROCPACK_WIN_FIXTURES" = "$dest" ] || return 0
    need_pkgs "${WIN_FIXTURE_PKGS[@]}"
    key=$( { sha256sum "$ROOT/tests/fixtures/make-winfatbins.sh";
             (cd "$ROCPACK_SHARED/fixtures/src" && LC_ALL=C ls | xargs sha256sum);
             dpkg-query -W "${WIN_FIXTURE_PKGS[@]}"; } | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$dest/.stamp" 2>/dev/null)" != "$key" ]; then
        log "building Windows test fixtures into $dest"
        rm -rf "$dest" && mkdir -p "$dest"
        bash "$ROOT/tests/fixtures/make-winfatbins.sh" "$dest" "$ROCPACK_SHARED/fixtures/src" \
            >"$dest/../make-winfatbins.log" 2>&1 || { tail -20 "$dest/../make-winfatbins.log" >&2; die "Windows fixture build"; }
        printf '%s\n' "$key" >"$dest/.stamp"
    fi
}
ensure_win_fixtures
