#!/usr/bin/env bash
# Benchmark (not a test): a split of the Debian librocsparse example tree
# (bench/split.sh's artifact: Debian's 1.3 GB librocsparse.so.0.1, 111
# bundles, 777 code objects) through real Bazel and its kpack_split rule,
# against the very same kpack binary run alone on the same tree, in the same
# run. The Bazel side of bench/buck2-split.sh.
#
# Target (issue 12): through Bazel <= 1.3x the helper alone.
#
# Both sides use the kpack the rocpack toolchain built (release profile,
# cargo target dir shared through //rules/bazel:cargo_target_dir). The tree
# is a temporary package of this repository (bench/bazel-split.PID.tmp, the
# library hard-linked, removed at exit) built with an output base of its own.
#
#   bazel (warm): whole `bazel build` command, server running and the 1.3 GB
#     source already digested once; a new output directory each run
#     (--platform_suffix), so exactly the split action runs again. Its inputs
#     are staged by rules/bazel/private/stage.sh as symlinks to where they
#     really are, which kpack reads through --staging-root (a copy would cost
#     a pass over 1.3 GB; a hard link would change the source's ctime and
#     make Bazel digest the 1.3 GB again on the next build), and its outputs
#     are renamed into place; the rest of the difference is the sandbox and
#     Bazel's digest of the outputs (SHA-256 by default, printed below;
#     BAZEL_STARTUP=--digest_function=blake3 where the Bazel build supports
#     it, which Debian's 7.7.1 does not). Compared.
#   bazel (first): the first build of the target, which also digests the
#     1.3 GB source (reported, not compared).
#
# Usage: bench/bazel-split.sh   (BAZEL=path/to/bazel, default bazel on PATH;
#        COMPRESSION=none for --compression none; BAZEL_STARTUP, BAZEL_FLAGS)
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"

BAZEL="${BAZEL:-$(command -v bazel || true)}"
[ -n "$BAZEL" ] && [ -x "$BAZEL" ] || bdie "no bazel (set BAZEL=; tests/ci/50-bazel.sh installs Debian's bazel-bootstrap)"
COMPRESSION="${COMPRESSION:-}"
LIB="$(rocsparse)"
SIZE=$(stat -c %s "$LIB")
TD="${ROCPACK_CARGO_TARGET_DIR:-$BENCH_ROOT/target}"
PKG="bench/bazel-split.$$.tmp"   # *.tmp: ignored by git
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-bazel-split.XXXXXX")"
OB="$WORK/ob"
# BAZEL_STARTUP: startup options (e.g. --digest_function=blake3 on Bazel 7);
# BAZEL_FLAGS: build options (e.g. --spawn_strategy=standalone).
read -r -a startup <<< "${BAZEL_STARTUP:-}"
read -r -a bflags <<< "${BAZEL_FLAGS:-}"
bz() { local sub="$1"; shift; "$BAZEL" --output_base="$OB" "${startup[@]}" "$sub" "--//rules/bazel:cargo_target_dir=$TD" "${bflags[@]}" "$@"; }
cleanup() {
    "$BAZEL" --output_base="$OB" "${startup[@]}" shutdown >/dev/null 2>&1 || true
    chmod -R u+w "$OB" 2>/dev/null || true
    rm -rf "$BENCH_ROOT/$PKG" "$WORK"
}
trap cleanup EXIT

ART="$PKG/art/sparse_lib_gfxall"
split_package "$PKG" BUILD.bazel bazel

blog "bazel: first build of //$PKG:split (builds the helpers into $TD, digests the source)"
sync; s=$(date +%s.%N)
bz build "//$PKG:split" > /dev/null 2> "$WORK/first.err" || { tail -30 "$WORK/first.err" >&2; bdie "bazel build"; }
first_s=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
KPACK="$TD/release/kpack"
[ -x "$KPACK" ] || bdie "no release kpack in $TD"

blog "warming the page cache ($SIZE bytes)"
cat "$LIB" > /dev/null


blog "kpack split alone (x3)"
flags=()
[ -n "$COMPRESSION" ] && flags+=(--compression "$COMPRESSION")
split_alone "$KPACK" "$ART" "$WORK/cli" 3 "${flags[@]}" > "$WORK/cli.times"
cli_s=$(min < "$WORK/cli.times")

blog "bazel build //$PKG:split, warm server, a new output directory each run (x3)"
for i in 1 2 3; do
    sync; s=$(now)
    bz build --platform_suffix="bench$i" "//$PKG:split" > /dev/null 2> "$WORK/warm.$i.err" \
        || { tail -30 "$WORK/warm.$i.err" >&2; bdie "bazel build (run $i)"; }
    e=$(now)
    grep -q "1 linux-sandbox\|1 local\|1 processwrapper-sandbox" "$WORK/warm.$i.err" \
        || bdie "run $i did not run exactly the split action: $(grep -i process "$WORK/warm.$i.err")"
    secs "$s" "$e"
done > "$WORK/bz.times"
bz_s=$(min < "$WORK/bz.times")

# Same outputs both ways.
out="$(bz info --platform_suffix=bench1 bazel-bin 2>/dev/null)/$PKG/split.split"
found=""
for d in "$out" "$out/sparse-build"; do
    if [ -d "$d" ] && diff -r --no-dereference "$WORK/cli" "$d" >/dev/null 2>&1; then found="$d"; fi
done
[ -n "$found" ] || bdie "Bazel's split differs from kpack split alone (looked in $out)"

# Bazel digests every output (SHA-256 unless --digest_function says
# otherwise): the part of the difference no rule can avoid.
s=$(now); find "$WORK/cli" -type f -exec cat {} + | sha256sum > /dev/null; dig_s=$(secs "$s" "$(now)")
out_bytes=$(du -sb "$WORK/cli" | cut -f1)
r=$(ratio "$bz_s" "$cli_s")
cat <<REPORT
bazel split benchmark: librocsparse.so.0.1 ($SIZE bytes) ${COMPRESSION:+--compression $COMPRESSION }, $(nproc) CPUs, best of 3
  kpack split alone                      ${cli_s} s   (runs: $(tr '\n' ' ' < "$WORK/cli.times"))
  bazel build, warm server               ${bz_s} s   (runs: $(tr '\n' ' ' < "$WORK/bz.times"))  ratio ${r}x (target <= 1.3x)
  bazel build, first (helpers + digest)  ${first_s} s
  sha256 of the outputs ($out_bytes bytes) ${dig_s} s   (Bazel's output digest; alone + it = $(awk -v a="$cli_s" -v b="$dig_s" 'BEGIN { printf "%.3f", a + b }') s, ratio $(ratio "$(awk -v a="$cli_s" -v b="$dig_s" 'BEGIN { print a + b }')" "$cli_s")x)
REPORT
awk -v r="$r" 'BEGIN { if (r > 1.3) { print "MISSED: bazel/alone " r " > 1.3" > "/dev/stderr"; exit 1 } }'
