#!/usr/bin/env bash
# Benchmark (not a test): `kpack recombine` of the three fixture shards,
# split and replicated to >= 1 GB by bench/gen-shards.sh, against `cp -r` of
# the same input measured in the same run (page cache warm for both).
#
# Target (issue 5): recombine wall time <= 1.5x `cp -r`.
# Also reported: recombine --hardlink, and `kpack verify` of the output.
#
# Usage: bench/recombine.sh [TARGET_MIB=1100]   (env ROUNDS=5)
. "$(dirname "$0")/lib.sh"

KPACK="$(kpack_release)"
export KPACK
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-recombine.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
SHARED="${ROCPACK_SHARED:-$BENCH_ROOT/../shared}"
CONFIG="$SHARED/fixtures/artifacts/packaging-config.json"
[ -f "$CONFIG" ] || CONFIG="$BENCH_ROOT/examples/kpack/packaging-config.json"

"$BENCH_ROOT/bench/gen-shards.sh" "$WORK/shards" "${1:-1100}"
IN_BYTES=$(du -sb --apparent-size "$WORK/shards" | cut -f1)
IN_FILES=$(find "$WORK/shards" -type f | wc -l)

blog "warming the page cache"
find "$WORK/shards" -type f -exec cat {} + > /dev/null

# The disk is shared: time ROUNDS alternating runs of each (writeback of one
# run must not be billed to the next: sync first) and compare medians.
ROUNDS="${ROUNDS:-5}"
for i in $(seq 1 "$ROUNDS"); do
    sync
    blog "round $i: cp -r"
    timed "$WORK/cp.$i.time" cp -r "$WORK/shards" "$WORK/cp-out"
    rm -rf "$WORK/cp-out"; sync
    blog "round $i: kpack recombine"
    timed "$WORK/rec.$i.time" "$KPACK" recombine --input-shards-dir "$WORK/shards" --config "$CONFIG" \
        --output-dir "$WORK/rec-out" 2>/dev/null
    OUT_BYTES=$(du -sb --apparent-size "$WORK/rec-out" | cut -f1)
    [ "$i" = "$ROUNDS" ] || rm -rf "$WORK/rec-out"
    sync
    blog "round $i: kpack recombine --hardlink"
    timed "$WORK/hl.$i.time" "$KPACK" recombine --input-shards-dir "$WORK/shards" --config "$CONFIG" \
        --output-dir "$WORK/rec-hl" --hardlink 2>/dev/null
    rm -rf "$WORK/rec-hl"
done
# Median of the rounds (robust to a neighbour's I/O burst); min also shown.
median_time() {   # KIND: median round's report -> $WORK/KIND.time, fastest wall time -> $WORK/KIND.min
    local k="$1" sorted n
    sorted="$(for f in "$WORK/$k".*.time; do printf '%s %s\n' "$(wall_s "$f")" "$f"; done | sort -n)"
    n=$(printf '%s\n' "$sorted" | wc -l)
    cp "$(printf '%s\n' "$sorted" | sed -n "$(( (n + 1) / 2 ))p" | cut -d' ' -f2)" "$WORK/$k.time"
    printf '%s\n' "$sorted" | head -n1 | cut -d' ' -f1 > "$WORK/$k.min"
}
for k in cp rec hl; do median_time "$k"; done

blog "kpack verify (recombined tree)"
timed "$WORK/verify.time" "$KPACK" verify --artifacts-dir "$WORK/rec-out" 2>/dev/null

cp_s=$(wall_s "$WORK/cp.time")
rec_s=$(wall_s "$WORK/rec.time")
hl_s=$(wall_s "$WORK/hl.time")
ver_s=$(wall_s "$WORK/verify.time")
r=$(ratio "$rec_s" "$cp_s")
cat <<REPORT
recombine benchmark: ${IN_BYTES} bytes in ${IN_FILES} files (3 shards), $(nproc) CPUs, median of ${ROUNDS} alternating rounds
  cp -r (same input)              ${cp_s} s   (min $(cat "$WORK/cp.min") s)
  kpack recombine                 ${rec_s} s   ratio to cp -r: ${r}x (target <= 1.5x; min/min $(ratio "$(cat "$WORK/rec.min")" "$(cat "$WORK/cp.min")")x)   peak RSS $(rss_mib "$WORK/rec.time") MiB   output ${OUT_BYTES} bytes
  kpack recombine --hardlink      ${hl_s} s   ratio to cp -r: $(ratio "$hl_s" "$cp_s")x
  kpack verify (output)           ${ver_s} s   peak RSS $(rss_mib "$WORK/verify.time") MiB
REPORT
awk -v r="$r" 'BEGIN { if (r > 1.5) { print "MISSED: recombine/cp ratio " r " > 1.5" > "/dev/stderr"; exit 1 } }'
