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
# timed LABEL CMD...: logs LABEL, runs CMD, prints its wall time (its
# status is CMD's).
timed() {
    local label="$1" t=$SECONDS rc=0
    shift
    log "$label"
    "$@" || rc=$?
    printf '    (%s: %d s)\n' "$label" $((SECONDS - t)) >&2
    return "$rc"
}

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
    local missing=() installed p
    # One dpkg-query for all of them (one per package took a second each
    # on a loaded machine).
    # dpkg-query exits 1 when a package was never installed (a fresh
    # machine): that is an answer here, not a failure.
    installed=" $({ dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null || true; } \
        | awk '$2 == "install" && $3 == "ok" && $4 == "installed" { print $1 }' | tr '\n' ' ') "
    for p in "$@"; do
        [[ "$installed" == *" $p "* ]] || missing+=("$p")
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

# Every Debian package the stages ask for (each stage still asks for its
# own with need_pkgs): tests/run-all.sh installs them in one apt-get run at
# the start, so a fresh machine pays for one dependency resolution and the
# background fetches (debootstrap, pip) have their tools.
CI_PKGS=(clang-tools-19 llvm-19 lld-19 elfutils binutils zstd openssl gcc g++ libc6-dev
    debhelper debugedit patchelf mold cmake pkgconf git unzip gcc-mingw-w64-x86-64 wine64
    python3 python3-pip python3-venv bazel-bootstrap nginx curl bc debootstrap)

# Fetches started by tests/run-all.sh at the start of the run, in the
# background while the CPU compiles (tests/ci/prefetch.sh). A stage that
# uses one calls `prefetch_wait NAME` first, which waits until that fetch
# has ended (it leaves $ROCPACK_PREFETCH_DIR/NAME.pending while it runs);
# run alone, a stage finds no prefetch and fetches what it needs itself.
prefetch_wait() {
    local f="${ROCPACK_PREFETCH_DIR:-/nonexistent}/$1" t=$SECONDS
    [ -e "$f.pending" ] || return 0
    log "waiting for the background fetch of $1 (log: $f.log)"
    while [ -e "$f.pending" ]; do sleep 1; done
    log "background fetch of $1 ended ($((SECONDS - t)) s waited): $(tail -1 "$f.log" 2>/dev/null)"
}

# Real ROCm wheels from PyPI (stages 40 and 45), pinned by version and
# sha256, cached in $PYPI_CACHE: one line each, "name==version python
# wheel-file sha256".
PYPI_CACHE="$ROOT/target/rocpack-pypi-cache"
PYPI_WHEELS_FILE="$ROOT/tests/pypi/wheels.txt"
# pypi_fetch PY LINE LOG: downloads LINE's wheel into $PYPI_CACHE unless it
# is there; checks its sha256. Returns 2 when PyPI is unreachable (LOG says
# why), 1 on any other failure.
pypi_fetch() {
    local py="$1" req pyver whl want platform
    read -r req pyver whl want <<<"$2"
    platform="${whl%.whl}"; platform="${platform##*-}"   # the wheel's platform tag
    mkdir -p "$PYPI_CACHE"
    if [ ! -f "$PYPI_CACHE/$whl" ]; then
        # Into a directory of its own, then renamed: a fetch cut short
        # leaves no partial wheel under the cached name.
        local part="$PYPI_CACHE/.part.$$"
        rm -rf "$part"
        if ! $py -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
                --python-version "$pyver" --platform "$platform" -d "$part" "$req" >"$3" 2>&1; then
            rm -rf "$part"
            grep -qiE "connection|resolve|network|timed out|unreachable" "$3" && return 2
            return 1
        fi
        mv "$part/$whl" "$PYPI_CACHE/$whl" && rm -rf "$part"
    fi
    echo "$want  $PYPI_CACHE/$whl" | sha256sum -c --quiet - >"$3" 2>&1 \
        || { echo "sha256 of $whl is not the pinned $want" >>"$3"; return 1; }
}

# moto's S3-compatible server (stage 30) in a venv of its own.
MOTO_VENV="${ROCPACK_MOTO_VENV:-/tmp/rocpack-moto-venv}"
ensure_moto_venv() {
    [ ! -x "$MOTO_VENV/bin/moto_server" ] || return 0
    log "installing moto[server] into $MOTO_VENV (PyPI)"
    if ! python3 -m venv "$MOTO_VENV" 2>/dev/null; then
        need_pkgs python3-venv python3-pip
        /usr/bin/python3 -m venv "$MOTO_VENV"
    fi
    "$MOTO_VENV/bin/pip" install -q --disable-pip-version-check 'moto[server]>=5,<6'
}

# ci_helpers: the helpers every stage after 10 uses, from the one dev build
# of stage 10 (a no-op cargo run then; run alone, a stage builds them):
#   KPACK_BIN, SNAPCTL_BIN   target/debug/{kpack,snapctl}
#   LIBROCM_KPACK_SO, LIBROCM_KPACK_A   target/debug/librocm_kpack.{so,a}
#   CI_HELPERS_DIR           target/ci-helpers: kpack and snapctl without
#                            debug info (what Bazel hashes, copies, ships to
#                            a remote worker) and both librocm_kpack files,
#                            the layout rules/bazel/prebuilt/install.sh takes.
# A new check that runs a helper takes it from here, not from a build of its own.
ci_helpers() {
    # kpack + snapctl in one cargo run: the feature set of the Bazel and
    # Buck2 toolchains' cargo action, which then finds everything built.
    (cd "$ROOT" && cargo build --locked -q -p kpack -p snapctl && cargo build --locked -q -p rocpack-runtime)
    local d="$ROOT/target/debug" h="$ROOT/target/ci-helpers" f
    export KPACK_BIN="$d/kpack" SNAPCTL_BIN="$d/snapctl" CI_HELPERS_DIR="$h"
    export LIBROCM_KPACK_SO="$d/librocm_kpack.so" LIBROCM_KPACK_A="$d/librocm_kpack.a"
    mkdir -p "$h"
    for f in kpack snapctl; do
        if [ ! "$h/$f" -nt "$d/$f" ]; then
            strip --strip-debug -o "$h/$f.tmp" "$d/$f"
            mv -f "$h/$f.tmp" "$h/$f"
        fi
    done
    for f in librocm_kpack.so librocm_kpack.a; do
        [ "$h/$f" -nt "$d/$f" ] || cp -f "$d/$f" "$h/$f"
    done
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
# tests/run-all.sh builds them itself, after starting its background fetches.
[ -n "${ROCPACK_DEFER_FIXTURES:-}" ] || ensure_fixtures

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
[ -n "${ROCPACK_DEFER_FIXTURES:-}" ] || ensure_win_fixtures
