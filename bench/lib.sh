# Shared helpers for bench/*.sh. Source it; do not run it.
# Benchmarks are measurements, not tests: each prints ratios against a
# baseline tool (cp, openssl, zstd) measured in the same run.
set -euo pipefail

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Downloads and unpacked corpora are cached here across runs.
BENCH_CACHE="${ROCPACK_BENCH_CACHE:-/tmp/rocpack-bench}"

blog() { printf '==> %s\n' "$*" >&2; }
bdie() { printf 'bench FAILED: %s\n' "$*" >&2; exit 1; }

# kpack_release: build the release `kpack` once and print its path.
kpack_release() {
    (cd "$BENCH_ROOT" && cargo build --release -q -p kpack) >&2 || bdie "cargo build --release -p kpack"
    local dir
    dir="$(cd "$BENCH_ROOT" && cargo metadata --format-version 1 --no-deps 2>/dev/null \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    [ -n "$dir" ] || dir="$BENCH_ROOT/target"
    printf '%s/release/kpack\n' "$dir"
}

# debian_lib PACKAGE RELPATH: fetch a Debian package with `apt-get download`
# (no install), unpack it with `dpkg-deb -x` into the cache and print the
# path of RELPATH inside it (e.g. usr/lib/x86_64-linux-gnu/librocsparse.so.0.1).
debian_lib() {
    local pkg="$1" rel="$2" dir="$BENCH_CACHE/deb"
    local out="$dir/x/$pkg/$rel"
    if [ ! -f "$out" ]; then
        mkdir -p "$dir"
        ( cd "$dir"
          chown _apt . 2>/dev/null || true      # avoids apt's "unsandboxed" warning as root
          ls "$pkg"_*.deb >/dev/null 2>&1 || apt-get download -q "$pkg" >&2 \
              || bdie "apt-get download $pkg (run apt-get update first?)"
          mkdir -p "x/$pkg"
          dpkg-deb -x "$(ls "$pkg"_*.deb | head -n1)" "x/$pkg" ) || bdie "unpack $pkg"
    fi
    [ -f "$out" ] || bdie "$rel not found in $pkg"
    printf '%s\n' "$out"
}

# debian_sid_lib PACKAGE VERSION SHA256 RELPATH: like debian_lib, for a
# package only Debian unstable has (librocblas4: bookworm, which CI runs,
# ships rocBLAS 5.3's librocblas0). `apt-get download` runs with a private
# sources list and state under the cache (the host's apt configuration is
# not touched; the archive signature is checked with the host's keyring);
# the .deb is pinned by SHA256. When unstable has moved past VERSION the
# download fails and says so.
debian_sid_lib() {
    local pkg="$1" ver="$2" sha="$3" rel="$4" dir="$BENCH_CACHE/deb"
    local deb="${pkg}_${ver}_amd64.deb" out="$dir/x/$pkg/$rel" apt="$dir/apt-sid"
    if [ ! -f "$out" ]; then
        mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc"
        if [ ! -f "$dir/$deb" ]; then
            echo "deb http://deb.debian.org/debian sid main" > "$apt/etc/sources.list"
            local o=(-o "Dir::Etc::SourceList=$apt/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
                     -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
                     -o Dir::State::status=/dev/null)
            apt-get "${o[@]}" -q update >&2 || bdie "apt-get update (Debian unstable)"
            ( cd "$dir" && chown _apt . 2>/dev/null; apt-get "${o[@]}" -q download "$pkg=$ver" >&2 ) \
                || bdie "apt-get download $pkg=$ver: Debian unstable no longer has it? pin the new version and sha256"
        fi
        echo "$sha  $dir/$deb" | sha256sum -c --quiet - || bdie "sha256 of $deb (pinned $sha)"
        mkdir -p "$dir/x/$pkg" && dpkg-deb -x "$dir/$deb" "$dir/x/$pkg" || bdie "unpack $deb"
    fi
    [ -f "$out" ] || bdie "$rel not found in $pkg"
    printf '%s\n' "$out"
}

# rocblas: path of Debian unstable's 1.05 GB librocblas.so.4.4 (rocBLAS 6.4,
# issue 22's first row; fetched on first use).
rocblas() {
    debian_sid_lib librocblas4 6.4.4-4 05613a07d3fba2feaa8b81a86a22bc142dd4fb6630c44c416883a33bf22a1cdb \
        usr/lib/x86_64-linux-gnu/librocblas.so.4.4
}

# rocsparse: path of Debian's 1.3 GB librocsparse.so.0.1 (fetched on first use).
rocsparse() {
    debian_lib librocsparse0 usr/lib/x86_64-linux-gnu/librocsparse.so.0.1
}

# timed OUTFILE CMD...: run CMD under /usr/bin/time -v, keep its report in
# OUTFILE; fail if CMD fails.
timed() {
    local rep="$1"; shift
    /usr/bin/time -v -o "$rep" "$@" >/dev/null || bdie "command failed: $*"
}

# wall_s REPORT: elapsed wall-clock seconds from a /usr/bin/time -v report.
wall_s() {
    awk -F': ' '/Elapsed \(wall clock\)/ {
        n = split($2, p, ":"); s = 0
        for (i = 1; i <= n; i++) s = s * 60 + p[i]
        printf "%.3f\n", s }' "$1"
}

# cpu_s REPORT: user + system CPU seconds (less sensitive to other load on
# the machine than wall time).
cpu_s() {
    awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { printf "%.2f\n", s }' "$1"
}

# rss_mib REPORT: peak resident set size in MiB.
rss_mib() {
    awk -F': ' '/Maximum resident set size/ { printf "%.1f\n", $2 / 1024 }' "$1"
}

# ratio A B: A / B with 2 decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b <= 0) b = 0.001; printf "%.2f\n", a / b }'; }

# warm_large_folios FILE...: bring FILE into the page cache the way a fresh
# read does, through readahead, which builds large page-cache folios (up to
# 2 MiB). A fault on a mapping of such a folio maps all of it, so this is the
# worst case for a tool that maps its input. Dropping the caches first needs
# root; otherwise the files are only read.
warm_large_folios() {
    if [ -w /proc/sys/vm/drop_caches ]; then
        blog "dropping the page cache (large folios on re-read)"
        sync; echo 1 > /proc/sys/vm/drop_caches
    fi
    blog "warming the page cache: $*"
    cat "$@" > /dev/null
}

# now / secs START END / min: wall-clock arithmetic for the build-system
# benches (best of several runs, one per line, on stdin for min).
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
min() { sort -n | head -n1; }

# rocsparse_artifact DIR: DIR becomes an artifact directory whose one prefix
# `lib` holds Debian's librocsparse.so.0.1 (hard-linked, copied across file
# systems), the example tree of bench/buck2-split.sh and bench/bazel-split.sh.
rocsparse_artifact() {
    local lib; lib="$(rocsparse)"
    mkdir -p "$1/lib"
    ln "$lib" "$1/lib/librocsparse.so.0.1" 2>/dev/null || cp "$lib" "$1/lib/librocsparse.so.0.1"
    printf 'lib\n' > "$1/artifact_manifest.txt"
}

# split_package PKG BUILD_FILE RULES: the package of the build-system split
# benches: PKG/art/sparse_lib_gfxall (rocsparse_artifact) and a BUILD_FILE
# (BUILD.bazel or BUCK) with one kpack_split `split` loaded from
# //rules/RULES:defs.bzl; $COMPRESSION, when set, becomes its compression.
split_package() {
    local pkg="$1" build="$2" rules="$3" extra=""
    rocsparse_artifact "$pkg/art/sparse_lib_gfxall"
    [ -n "${COMPRESSION:-}" ] && extra="    compression = \"$COMPRESSION\","
    cat > "$pkg/$build" <<EOF
load("//rules/$rules:defs.bzl", "kpack_split")

kpack_split(
    name = "split",
    srcs = glob(["art/**"]),
    artifact_prefix = "sparse_lib",
    shard = "sparse-build",
$extra
)
EOF
}

# split_alone KPACK ART OUT REPS [FLAGS...]: `kpack split` of ART into OUT
# REPS times (OUT removed before each), one wall time per line on stdout.
split_alone() {
    local kp="$1" art="$2" out="$3" reps="$4"; shift 4
    local i s e
    for i in $(seq "$reps"); do
        rm -rf "$out"; sync
        s=$(now)
        TZ=UTC LC_ALL=C "$kp" split --artifact-dir "$art" --artifact-prefix sparse_lib \
            --output-dir "$out" "$@" >/dev/null || bdie "kpack split"
        e=$(now)
        secs "$s" "$e"
    done
}
