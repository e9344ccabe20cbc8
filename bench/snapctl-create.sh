#!/usr/bin/env bash
# Benchmark (not a test): `snapctl create` of a 150 MiB artifact vs `openssl dgst -sha256` + `cp`
# of the same file, measured in the same run (best of N). Target: ratio <= 1.3.
# snapctl also fsyncs the blob (durability before metadata moves), so a second ratio against
# `openssl dgst -sha256` + `cp` + `sync FILE` is printed too.
#   usage: [SNAPCTL=path] bench/snapctl-create.sh [SIZE_MIB=150] [RUNS=5]
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

now() { date +%s.%N; }
best() { sort -g | head -1; }

base=(); base_sync=(); snap=()
for i in $(seq 1 "$RUNS"); do
    rm -f "$W/copy.a"
    t0=$(now); openssl dgst -sha256 "$W/librcclx-dev.a" >/dev/null; cp "$W/librcclx-dev.a" "$W/copy.a"; t1=$(now)
    base+=("$(echo "$t1 - $t0" | bc -l)")
    rm -f "$W/copy.a"; sync
    t0=$(now); openssl dgst -sha256 "$W/librcclx-dev.a" >/dev/null; cp "$W/librcclx-dev.a" "$W/copy.a"; sync "$W/copy.a"; t1=$(now)
    base_sync+=("$(echo "$t1 - $t0" | bc -l)")
    rm -f "$W/copy.a"
    chmod -R u+w "$W/root" 2>/dev/null || true; rm -rf "$W/root"; mkdir "$W/root"; sync
    t0=$(now)
    SOURCE_DATE_EPOCH=0 "$SNAPCTL" create --snapshots-root "$W/root" --version 6.4 --artifact "$W/librcclx-dev.a" >/dev/null
    t1=$(now)
    snap+=("$(echo "$t1 - $t0" | bc -l)")
done
B=$(printf '%s\n' "${base[@]}" | best)
BS=$(printf '%s\n' "${base_sync[@]}" | best)
S=$(printf '%s\n' "${snap[@]}" | best)
printf 'artifact:                        %s MiB, best of %s runs\n' "$SIZE_MIB" "$RUNS"
printf 'openssl dgst -sha256 + cp:       %.3f s\n' "$B"
printf 'openssl dgst -sha256 + cp + sync: %.3f s\n' "$BS"
printf 'snapctl create:                  %.3f s\n' "$S"
printf 'ratio snapctl / (sha256 + cp):        %.2fx (target <= 1.3x)\n' "$(echo "$S / $B" | bc -l)"
printf 'ratio snapctl / (sha256 + cp + sync): %.2fx\n' "$(echo "$S / $BS" | bc -l)"
