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
#     source already digested once; a new compilation mode each run, so
#     exactly the split action runs again (its inputs are staged by
#     rules/bazel/private/stage.sh: hard links, no copy). Compared.
#   bazel (first): the first build of the target, which also digests the
#     1.3 GB source (reported, not compared).
#
# Usage: bench/bazel-split.sh   (BAZEL=path/to/bazel, default bazel on PATH;
#        COMPRESSION=none for --compression none)
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
bz() { local sub="$1"; shift; "$BAZEL" --output_base="$OB" "$sub" "--//rules/bazel:cargo_target_dir=$TD" "$@"; }
cleanup() {
    "$BAZEL" --output_base="$OB" shutdown >/dev/null 2>&1 || true
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

blog "bazel build //$PKG:split, warm server, a new compilation mode each run (x3)"
for m in opt dbg fastbuild; do
    [ "$m" = fastbuild ] && { bz clean >/dev/null 2>&1; bz build "//$PKG:split" >/dev/null 2>&1; bz build -c opt "//$PKG:split" >/dev/null 2>&1; }
    sync; s=$(now)
    bz build -c "$m" "//$PKG:split" > /dev/null 2> "$WORK/warm.$m.err" || { tail -30 "$WORK/warm.$m.err" >&2; bdie "bazel build -c $m"; }
    e=$(now)
    secs "$s" "$e"
done > "$WORK/bz.times"
bz_s=$(min < "$WORK/bz.times")

# Same outputs both ways.
out="$(bz info -c opt bazel-bin 2>/dev/null)/$PKG/split.split"
found=""
for d in "$out" "$out/sparse-build"; do
    if [ -d "$d" ] && diff -r --no-dereference "$WORK/cli" "$d" >/dev/null 2>&1; then found="$d"; fi
done
[ -n "$found" ] || bdie "Bazel's split differs from kpack split alone (looked in $out)"

r=$(ratio "$bz_s" "$cli_s")
cat <<REPORT
bazel split benchmark: librocsparse.so.0.1 ($SIZE bytes) ${COMPRESSION:+--compression $COMPRESSION }, $(nproc) CPUs, best of 3
  kpack split alone                      ${cli_s} s   (runs: $(tr '\n' ' ' < "$WORK/cli.times"))
  bazel build, warm server               ${bz_s} s   (runs: $(tr '\n' ' ' < "$WORK/bz.times"))  ratio ${r}x (target <= 1.3x)
  bazel build, first (helpers + digest)  ${first_s} s
REPORT
awk -v r="$r" 'BEGIN { if (r > 1.3) { print "MISSED: bazel/alone " r " > 1.3" > "/dev/stderr"; exit 1 } }'
