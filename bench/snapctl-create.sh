#!/usr/bin/env bash
# Benchmark (not a test): `snapctl create` of a 150 MiB artifact vs `openssl dgst -sha256` + `cp`
# of the same file, measured in the same run (best of N, wall clock and CPU time).
# Target: wall ratio <= 1.3. snapctl also fsyncs the blob (durability before metadata
# moves) and computes sha1 (seed metadata format) and a byte comparison with the source
# (verify-after-write), so a ratio against `sha256 + cp + sync FILE` is printed too.
#   usage: [SNAPCTL=path/to/snapctl] bench/snapctl-create.sh [SIZE_MIB=150] [RUNS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB="${1:-150}"
RUNS="${2:-5}"
if [ -z "${SNAPCTL:-}" ]; then # SNAPCTL=path/to/snapctl skips the build
    cargo build -q --release -p snapctl
    SNAPCTL="$PWD/target/release/snapctl"
fi
W="$(mktemp -d "${TMPDIR:-/tmp}/snapctl-bench.XXXXXX")"
trap 'chmod -R u+w "$W"; rm -rf "$W"' EXIT
head -c "$((SIZE_MIB * 1024 * 1024))" /dev/urandom >"$W/librcclx-dev.a"
cat "$W/librcclx-dev.a" >/dev/null # warm the page cache for every contender
export W SNAPCTL

# measure NAME CMD: appends "wall cpu" to $W/NAME
measure() {
    /usr/bin/time -f "%e %U %S" -o "$W/t" bash -c "$2" >/dev/null
    awk '{printf "%s %.3f\n", $1, $2 + $3}' "$W/t" >>"$W/$1"
}
for _ in $(seq 1 "$RUNS"); do
    rm -f "$W/copy.a"; sync
    measure base 'openssl dgst -sha256 "$W/librcclx-dev.a"; cp "$W/librcclx-dev.a" "$W/copy.a"'
    rm -f "$W/copy.a"; sync
    measure base_sync 'openssl dgst -sha256 "$W/librcclx-dev.a"; cp "$W/librcclx-dev.a" "$W/copy.a"; sync "$W/copy.a"'
    rm -f "$W/copy.a"
    chmod -R u+w "$W/root" 2>/dev/null || true; rm -rf "$W/root"; mkdir "$W/root"; sync
    measure snap 'SOURCE_DATE_EPOCH=0 "$SNAPCTL" create --snapshots-root "$W/root" --version 6.4 --artifact "$W/librcclx-dev.a"'
done
best() { sort -g -k"$2" "$W/$1" | head -1 | awk -v k="$2" '{print $k}'; }
B=$(best base 1); BS=$(best base_sync 1); S=$(best snap 1)
BC=$(best base 2); SC=$(best snap 2)
printf 'artifact: %s MiB, best of %s runs; load average: %s\n' "$SIZE_MIB" "$RUNS" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-36s wall %6.3f s   cpu %6.3f s\n' "openssl dgst -sha256 + cp" "$B" "$BC"
printf '%-36s wall %6.3f s\n' "openssl dgst -sha256 + cp + sync" "$BS"
printf '%-36s wall %6.3f s   cpu %6.3f s\n' "snapctl create" "$S" "$SC"
printf 'ratio snapctl / (sha256 + cp):        wall %.2fx (target <= 1.3x), cpu %.2fx\n' "$(echo "$S / $B" | bc -l)" "$(echo "$SC / $BC" | bc -l)"
printf 'ratio snapctl / (sha256 + cp + sync): wall %.2fx\n' "$(echo "$S / $BS" | bc -l)"
