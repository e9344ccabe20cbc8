#!/usr/bin/env bash
# Benchmark: `kpack split --jobs 2` and `kpack inspect --json` of a
# compressed fat binary (a relocatable object: the first fat member of the
# fixture libfx_static.a, whose .hip_fatbin can grow) whose one CCOB holds a >= 1 GiB payload (PAYLOAD_MIB,
# default 1088 MiB, across TARGETS=96 GPU targets), built from a fixture's
# code objects by our own bundle writer (tools/kpack/examples/mkfat.rs).
# Baseline in the same run: `zstd -d` of the CCOB's compressed payload (the
# very zstd frame inside the CCOB) to a file, and to /dev/null.
# Targets: peak RSS <= 256 MiB each; time <= 1.5x `zstd -d`.
# inspect (the default) decompresses, size-checks and SHA-256es every code
# object, the SHA-256 on the second core. `inspect --check-hash` also checks
# the CCOB's stored MD5, a sequential hash of the whole payload (LLVM's
# stored hash, which clang-offload-bundler computes only with -verbose): it
# runs on its own thread, so that row's floor is one MD5 of the payload
# (the `md5sum` row).
#
#   bench/ccob-large.sh               # PAYLOAD_MIB=1088 TARGETS=96 REPS=1
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
export ROCPACK_SHARED="${ROCPACK_SHARED:-$BENCH_ROOT/target/rocpack-shared}"
BASE="$ROCPACK_SHARED/fixtures/fatbins/libfx_static.a"
[ -f "$BASE" ] || bdie "$BASE missing (source tests/ci/lib.sh to build the fixtures)"
PAYLOAD_MIB="${PAYLOAD_MIB:-1088}"
TARGETS="${TARGETS:-96}"
REPS="${REPS:-1}"
command -v zstd >/dev/null || bdie "zstd not installed"
[ -x /usr/bin/time ] || bdie "/usr/bin/time not installed (Debian package time)"

KPACK="$(kpack_release)"
(cargo build --release -q -p kpack --example mkfat) >&2 || bdie "build mkfat"
MKFAT="$(dirname "$KPACK")/examples/mkfat"

W="$(mktemp -d "${TMPDIR:-/tmp}/ccob-large.XXXXXX")"
trap 'rm -rf "$W"' EXIT
ART="$W/big_lib"
mkdir -p "$ART/lib"
echo lib >"$ART/artifact_manifest.txt"
blog "building a fat binary with a ${PAYLOAD_MIB} MiB CCOB payload, ${TARGETS} targets"
"$MKFAT" "$BASE" "$ART/lib/big.o" "$PAYLOAD_MIB" "$TARGETS" "$W/payload.zst" || bdie mkfat
fat_bytes=$(stat -c %s "$ART/lib/big.o")
cat "$ART/lib/big.o" "$W/payload.zst" >/dev/null   # warm the page cache

best() { sort -n | head -n1; }
zfile=(); znull=(); md5=(); sha=(); zc=(); split_t=(); split_r=(); insp_t=(); insp_r=(); fast_t=(); fast_r=()
for rep in $(seq 1 "$REPS"); do
    timed "$W/z1" zstd -q -d -f "$W/payload.zst" -o "$W/payload.bin"
    zfile+=("$(wall_s "$W/z1")")
    # Floors of inspect, which checks the CCOB's MD5 and hashes every code
    # object with SHA-256: the same two hashes of the payload.
    timed "$W/h1" md5sum "$W/payload.bin"; md5+=("$(wall_s "$W/h1")")
    timed "$W/h2" sha256sum "$W/payload.bin"; sha+=("$(wall_s "$W/h2")")
    # Floor of split with its default compression: every code object is
    # compressed again (zstd level 3, two threads as --jobs 2).
    timed "$W/h3" sh -c "zstd -q -3 -T2 -c '$W/payload.bin' >/dev/null"; zc+=("$(wall_s "$W/h3")")
    rm -f "$W/payload.bin"
    timed "$W/z2" sh -c "zstd -q -d -c '$W/payload.zst' >/dev/null"
    znull+=("$(wall_s "$W/z2")")
    rm -rf "$W/out"
    timed "$W/s" "$KPACK" split --artifact-dir "$ART" --artifact-prefix big_lib \
        --output-dir "$W/out" --jobs 2
    split_t+=("$(wall_s "$W/s")"); split_r+=("$(rss_mib "$W/s")")
    timed "$W/i" "$KPACK" inspect --json --check-hash "$ART/lib/big.o"
    insp_t+=("$(wall_s "$W/i")"); insp_r+=("$(rss_mib "$W/i")")
    timed "$W/f" "$KPACK" inspect --json "$ART/lib/big.o"
    fast_t+=("$(wall_s "$W/f")"); fast_r+=("$(rss_mib "$W/f")")
done
zf=$(printf '%s\n' "${zfile[@]}" | best); zn=$(printf '%s\n' "${znull[@]}" | best)
m5=$(printf '%s\n' "${md5[@]}" | best); s2=$(printf '%s\n' "${sha[@]}" | best)
z3=$(printf '%s\n' "${zc[@]}" | best)
st=$(printf '%s\n' "${split_t[@]}" | best); sr=$(printf '%s\n' "${split_r[@]}" | sort -n | tail -n1)
it=$(printf '%s\n' "${insp_t[@]}" | best); ir=$(printf '%s\n' "${insp_r[@]}" | sort -n | tail -n1)
ft=$(printf '%s\n' "${fast_t[@]}" | best); fr=$(printf '%s\n' "${fast_r[@]}" | sort -n | tail -n1)
archs=$(find "$W/out" -mindepth 1 -maxdepth 1 -type d | wc -l)

printf '\nccob-large: fat binary %s bytes, CCOB payload %s MiB, %s targets, best of %s\n' \
    "$fat_bytes" "$PAYLOAD_MIB" "$TARGETS" "$REPS"
printf '%-34s %9s %9s %10s\n' "" "time s" "RSS MiB" "x zstd -d"
printf '%-34s %9s %9s %10s\n' "zstd -d payload -> file" "$zf" "-" "1.00"
printf '%-34s %9s %9s %10s\n' "zstd -d payload -> /dev/null" "$zn" "-" "$(ratio "$zn" "$zf")"
printf '%-34s %9s %9s %10s\n' "md5sum payload (inspect's check)" "$m5" "-" "$(ratio "$m5" "$zf")"
printf '%-34s %9s %9s %10s\n' "sha256sum payload" "$s2" "-" "$(ratio "$s2" "$zf")"
printf '%-34s %9s %9s %10s\n' "zstd -3 -T2 payload (split's floor)" "$z3" "-" "$(ratio "$z3" "$zf")"
printf '%-34s %9s %9s %10s\n' "kpack split --jobs 2 ($archs pkgs)" "$st" "$sr" "$(ratio "$st" "$zf")"
printf '%-34s %9s %9s %10s\n' "kpack inspect --json" "$ft" "$fr" "$(ratio "$ft" "$zf")"
printf '%-34s %9s %9s %10s\n' "kpack inspect --json --check-hash" "$it" "$ir" "$(ratio "$it" "$zf")"
printf 'kpack inspect --check-hash / md5sum of the payload (its floor): %s\n' "$(ratio "$it" "$m5")"
printf 'targets: RSS <= 256 MiB, time <= 1.50x zstd -d (to a file)\n'
printf 'load average during the run: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
