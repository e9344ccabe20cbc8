#!/usr/bin/env bash
# Benchmark (not a test): a split of the Debian librocsparse example tree
# (bench/split.sh's artifact: Debian's 1.3 GB librocsparse.so.0.1, 111
# bundles, 777 code objects) through the real buck2 and its kpack_split rule,
# against the very same kpack binary run alone on the same tree, in the same
# run.
#
# Target (issue 12): through buck2 <= 1.3x the helper alone.
#
# Both sides use the kpack that buck2's toolchain built (rocpack//:rocpack_helpers,
# release profile). The tree is a temporary package of this repository
# (bench/buck2-split.PID.tmp, the library hard-linked, removed at exit), built
# with a buck2 daemon and buck-out of its own (--isolation-dir bench-split).
#
#   buck2 (warm): whole `buck2 build` command, daemon running and the 1.3 GB
#     source already hashed once; a new configuration (-m rocmXX) each run,
#     so exactly the split action runs again. This is the number compared.
#   buck2 (first): the first build of the target, which also hashes the
#     1.3 GB source (reported, not compared).
#
# Usage: bench/buck2-split.sh   (BUCK2=path/to/buck2; default ../shared/tools/buck2
#        or buck2 on PATH; REPS=3; COMPRESSION=none for --compression none)
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"

BUCK2="${BUCK2:-}"
if [ -z "$BUCK2" ]; then
    if [ -x "$BENCH_ROOT/../shared/tools/buck2" ]; then BUCK2="$BENCH_ROOT/../shared/tools/buck2"
    elif [ -x /work/shared/tools/buck2 ]; then BUCK2=/work/shared/tools/buck2
    else BUCK2="$(command -v buck2 || true)"; fi
fi
[ -n "$BUCK2" ] && [ -x "$BUCK2" ] || bdie "no buck2 (set BUCK2=)"
REPS="${REPS:-3}"
COMPRESSION="${COMPRESSION:-}"
LIB="$(rocsparse)"
SIZE=$(stat -c %s "$LIB")
ISO=bench-split
TD="${ROCPACK_CARGO_TARGET_DIR:-$BENCH_ROOT/target}"
CFG=(-c rocpack.cargo_profile=release -c "rocpack.cargo_target_dir=$TD")
PKG="bench/buck2-split.$$.tmp"   # *.tmp: ignored by git
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-buck2-split.XXXXXX")"
b2() { local sub="$1"; shift; "$BUCK2" --isolation-dir "$ISO" "$sub" "${CFG[@]}" "$@"; }
cleanup() {
    "$BUCK2" --isolation-dir "$ISO" kill >/dev/null 2>&1 || true
    rm -rf "$BENCH_ROOT/$PKG" "$WORK" "$BENCH_ROOT/buck-out/$ISO"
}
trap cleanup EXIT

ART="$PKG/art/sparse_lib_gfxall"
split_package "$PKG" BUCK buck2

blog "buck2: helpers (release, cargo target dir $TD)"
b2 build "rocpack//:rocpack_helpers[kpack]" --show-full-output > "$WORK/helpers.out" 2> "$WORK/helpers.err" \
    || { tail -30 "$WORK/helpers.err" >&2; bdie "buck2 build rocpack//:rocpack_helpers[kpack]"; }
KPACK="$(awk '{print $2; exit}' "$WORK/helpers.out")"
[ -x "$KPACK" ] || bdie "no kpack in buck2's helper output: $(cat "$WORK/helpers.out")"

blog "warming the page cache ($SIZE bytes)"
cat "$LIB" > /dev/null


blog "kpack split alone (x$REPS)"
flags=()
[ -n "$COMPRESSION" ] && flags+=(--compression "$COMPRESSION")
split_alone "$KPACK" "$ART" "$WORK/cli" "$REPS" "${flags[@]}" > "$WORK/cli.times"
cli_s=$(min < "$WORK/cli.times")

blog "buck2 build //$PKG:split, first (hashes the source)"
sync; s=$(now)
b2 build "//$PKG:split" > /dev/null 2> "$WORK/first.err" || { tail -30 "$WORK/first.err" >&2; bdie "buck2 build"; }
first_s=$(secs "$s" "$(now)")

blog "buck2 build //$PKG:split, warm daemon, new configuration each run (x$REPS)"
versions=(rocm62 rocm70 rocm71)
for i in $(seq "$REPS"); do
    m="${versions[$(( (i - 1) % ${#versions[@]} ))]}"
    [ "$i" -gt "${#versions[@]}" ] && { "$BUCK2" --isolation-dir "$ISO" kill >/dev/null 2>&1; rm -rf "buck-out/$ISO"; b2 build "//$PKG:split" >/dev/null 2>&1; }
    sync; s=$(now)
    b2 build -m "$m" "//$PKG:split" > /dev/null 2> "$WORK/warm.$i.err" || { tail -30 "$WORK/warm.$i.err" >&2; bdie "buck2 build -m $m"; }
    e=$(now)
    "$BUCK2" --isolation-dir "$ISO" log what-ran > "$WORK/ran.$i" 2>/dev/null || true
    grep -q kpack_split "$WORK/ran.$i" || bdie "run $i did not run the split action: $(cat "$WORK/ran.$i")"
    secs "$s" "$e"
done > "$WORK/b2.times"
b2_s=$(min < "$WORK/b2.times")

# Same outputs both ways.
out="$(b2 build -m rocm62 "//$PKG:split" --show-full-output 2>/dev/null | awk '{print $2}')"
diff -r --no-dereference "$WORK/cli" "$out/sparse-build" >/dev/null 2>&1 || diff -r --no-dereference "$WORK/cli" "$out" >/dev/null \
    || bdie "buck2's split differs from kpack split alone"

r=$(ratio "$b2_s" "$cli_s")
cat <<REPORT
buck2 split benchmark: librocsparse.so.0.1 ($SIZE bytes) ${COMPRESSION:+--compression $COMPRESSION }, $(nproc) CPUs, best of $REPS
  kpack split alone                     ${cli_s} s   (runs: $(tr '\n' ' ' < "$WORK/cli.times"))
  buck2 build, warm daemon              ${b2_s} s   (runs: $(tr '\n' ' ' < "$WORK/b2.times"))  ratio ${r}x (target <= 1.3x)
  buck2 build, first (hashes the input) ${first_s} s   ratio $(ratio "$first_s" "$cli_s")x
REPORT
awk -v r="$r" 'BEGIN { if (r > 1.3) { print "MISSED: buck2/alone " r " > 1.3" > "/dev/stderr"; exit 1 } }'
