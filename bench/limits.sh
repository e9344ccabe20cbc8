#!/usr/bin/env bash
# Benchmark (not a test), issue 22: `kpack split` / `reassemble` on big real
# inputs against the physical limits measured in the same run, side by side:
#
#   split (zstd, default)      vs  zstd -3 -T0 of the same file   target <= 1.0x
#   split --compression none   vs  cp of the same file            target <= 1.2x
#                              (CCOB inputs: vs zstd -d of the CCOB payloads + cp)
#   reassemble (from zstd)     vs  the split above                target <= 2.0x
#   peak RSS of split and reassemble                              target <= 256 MiB
#   .kpack bytes per arch at zstd levels LEVELS (default 1 3 9 19) vs one
#   `zstd -19 --long=27` stream of that arch's code objects       target <= 1.3x
#
# Inputs (downloaded once into $ROCPACK_BENCH_CACHE, pinned by sha256):
#   rocblas    Debian unstable librocblas4 6.4.4-4 (librocblas.so.4.4, 1.05 GB,
#              plain bundles, issue 22's first row), `apt-get download` with a
#              private sources list (bench/lib.sh debian_sid_lib)
#   onnx       PyPI onnxruntime-rocm 1.22.2.post3 (cp311 manylinux_2_34,
#              libonnxruntime_providers_rocm.so, 513 MB, plain bundles)
#   jaxpjrt    PyPI jax-rocm7-pjrt 0.10.0 (xla_rocm_plugin.so, 520 MB, 41 CCOB
#              v3 holding 1.2 GB of code objects), the wheel CI's 40-pypi.sh pins
#   rocsparse  Debian bookworm librocsparse0 5.3.0+dfsg-2 (librocsparse.so.0.1,
#              1.31 GB, plain bundles), `apt-get download`
#
# Rounds alternate the tools (medians of ROUNDS, default 3); dirty pages are
# flushed before each timed run. SIZES=0 skips the archive-size rows.
# Usage: bench/limits.sh [INPUT...]   (INPUT: rocblas onnx jaxpjrt rocsparse;
# default all four)
. "$(dirname "$0")/lib.sh"

KPACK="${KPACK:-$(kpack_release)}"
ROUNDS="${ROUNDS:-3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-limits.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export KPACK

pinned() { # FILE SHA256
    echo "$2  $1" | sha256sum -c --quiet - || bdie "sha256 of $1 (pinned $2)"
}

input_rocblas() { rocblas; }

input_rocsparse() {
    local deb_sha=688878bb8cb9ec7970e7b632828d91336a6819860fb0c306372eb6a7199b3b8e
    local lib; lib="$(rocsparse)"
    pinned "$(ls "$BENCH_CACHE"/deb/librocsparse0_5.3.0+dfsg-2_amd64.deb)" "$deb_sha"
    printf '%s\n' "$lib"
}

input_jaxpjrt() {
    local whl=jax_rocm7_pjrt-0.10.0-py3-none-manylinux_2_28_x86_64.whl
    local sha=fe0a40550c60e1b9f82eebfa6243ed6a7e3de7a07369142232bf8e331de03181
    local dir="$BENCH_CACHE/pypi"
    mkdir -p "$dir"
    if [ ! -f "$dir/$whl" ]; then
        python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --python-version 3.12 --platform manylinux_2_28_x86_64 -d "$dir" \
            jax-rocm7-pjrt==0.10.0 >&2 || bdie "pip download jax-rocm7-pjrt"
    fi
    pinned "$dir/$whl" "$sha"
    if [ ! -d "$dir/jaxpjrt" ]; then
        mkdir -p "$dir/jaxpjrt" && (cd "$dir/jaxpjrt" && unzip -q "../$whl") || bdie "unzip $whl"
    fi
    find "$dir/jaxpjrt" -name '*.so' -size +100M | head -n1
}

input_onnx() {
    local whl=onnxruntime_rocm-1.22.2.post3-cp311-cp311-manylinux_2_34_x86_64.whl
    local sha=705596b48933446ae6766921c5c8a46ef42f0c735bf158b6eb44a60bf7f95230
    local dir="$BENCH_CACHE/pypi"
    mkdir -p "$dir"
    if [ ! -f "$dir/$whl" ]; then
        python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --python-version 3.11 --platform manylinux_2_34_x86_64 -d "$dir" \
            onnxruntime-rocm==1.22.2.post3 >&2 || bdie "pip download onnxruntime-rocm"
    fi
    pinned "$dir/$whl" "$sha"
    if [ ! -d "$dir/onnx" ]; then
        mkdir -p "$dir/onnx" && (cd "$dir/onnx" && unzip -q "../$whl") || bdie "unzip $whl"
    fi
    find "$dir/onnx" -name 'libonnxruntime_providers_rocm.so' | head -n1
}

# median FILE...: median wall seconds of /usr/bin/time reports.
median_wall() { for f in "$@"; do wall_s "$f"; done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
max_rss() { for f in "$@"; do rss_mib "$f"; done | sort -n | tail -n1; }

# ccob_payloads LIB OUT: the zstd payloads of LIB's compressed bundles
# (CCOB v1-v3, method zstd), concatenated into OUT (one stream of frames,
# what `zstd -d` decodes in one go); prints their count. Offsets come from
# `kpack inspect --json`, header sizes from docs/formats/offload-bundle.md.
ccob_payloads() {
    "$KPACK" inspect --json "$1" | python3 -c '
import json, struct, sys
lib, out = sys.argv[1], sys.argv[2]
d = json.load(sys.stdin)
n = 0
with open(lib, "rb") as f, open(out, "wb") as o:
    for b in d.get("bundles", []):
        if b.get("format") != "ccob" or b.get("compression") != "zstd":
            continue
        hdr = {1: 20, 2: 24, 3: 32}[b["version"]]
        f.seek(b["file_offset"])
        o.write(f.read(b["size"])[hdr:])
        n += 1
print(n)' "$1" "$2"
}

run_input() {
    local name="$1" lib="$2"
    local w="$WORK/$name"
    mkdir -p "$w/art/$name/lib"
    ln -f "$lib" "$w/art/$name/lib/" 2>/dev/null || cp "$lib" "$w/art/$name/lib/"
    echo lib > "$w/art/$name/artifact_manifest.txt"
    local base; base="$(basename "$lib")"
    local size; size=$(stat -c %s "$lib")
    # CCOB inputs: the `none` split's floor is decompressing the payloads
    # and copying the host (the whole file here: at most a few % more).
    local ccobs; ccobs=$(ccob_payloads "$lib" "$w/payloads.zst")
    warm_large_folios "$lib" "$w/payloads.zst"
    local i
    for i in $(seq "$ROUNDS"); do
        blog "$name round $i/$ROUNDS"
        sync; timed "$w/cp.$i" cp "$lib" "$w/cp.out"; rm -f "$w/cp.out"
        sync; timed "$w/zstd.$i" zstd -q -3 -T0 -f "$lib" -o "$w/zstd.out"; rm -f "$w/zstd.out"
        if [ "$ccobs" -gt 0 ]; then
            sync; timed "$w/zd.$i" zstd -q -d -f "$w/payloads.zst" -o "$w/zd.out"; rm -f "$w/zd.out"
        fi
        rm -rf "$w/none"; sync
        timed "$w/none.$i" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
            --output-dir "$w/none" --compression none
        rm -rf "$w/split"; sync
        timed "$w/split.$i" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
            --output-dir "$w/split"
        rm -f "$w/back"; sync
        timed "$w/reas.$i" "$KPACK" reassemble --host "$w/split/${name}_generic/lib/$base" \
            --kpack-dir "$w/split" --output "$w/back"
    done
    local same=no
    cmp -s "$w/back" "$lib" && same=yes
    local cp_s zs_s none_s split_s reas_s floor_s
    cp_s=$(median_wall "$w"/cp.*); zs_s=$(median_wall "$w"/zstd.*)
    none_s=$(median_wall "$w"/none.*); split_s=$(median_wall "$w"/split.*)
    reas_s=$(median_wall "$w"/reas.*)
    floor_s="$cp_s"
    local floor_name=cp
    if [ "$ccobs" -gt 0 ]; then
        floor_s=$(awk -v a="$(median_wall "$w"/zd.*)" -v b="$cp_s" 'BEGIN { printf "%.3f\n", a + b }')
        floor_name="zstd -d of the $ccobs CCOB payloads ($(median_wall "$w"/zd.*) s) + cp"
    fi
    cat <<ROW
$name: $base, $size bytes, $(nproc) CPUs, median of $ROUNDS, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)
  cp                      ${cp_s} s
  zstd -3 -T0             ${zs_s} s
  split (zstd)            ${split_s} s  $(ratio "$split_s" "$zs_s")x zstd -3 -T0 (target <= 1.0)  peak RSS $(max_rss "$w"/split.*) MiB
  split --compression none ${none_s} s  $(ratio "$none_s" "$floor_s")x ${floor_name} (target <= 1.2)  peak RSS $(max_rss "$w"/none.*) MiB
  reassemble (zstd)       ${reas_s} s  $(ratio "$reas_s" "$split_s")x split (target <= 2.0)  peak RSS $(max_rss "$w"/reas.*) MiB  identical: $same
ROW
    [ "${SIZES:-1}" = 1 ] && archive_sizes "$name" "$w"
    rm -rf "$w"
}

# archive_sizes NAME W: for each level of LEVELS (default "1 3 9 19"), the
# split's wall time and .kpack bytes, and per arch the archive against one
# `zstd -19 --long=27` stream of that arch's code objects (the best a
# compressor does with every code object in one window; the format needs
# one frame per code object). Target: every arch <= 1.3x at some level.
archive_sizes() {
    local name="$1" w="$2" a arch
    declare -A stream=()
    for a in $(find "$w/none" -type f -name '*.kpack' | sort); do
        arch="$(basename "$a" .kpack)"; arch="${arch#"${name}"_}"
        rm -rf "$w/u"
        "$KPACK" unpack "$a" -o "$w/u" >/dev/null 2>"$w/unpack.log" \
            || { cat "$w/unpack.log" >&2; bdie "unpack $a"; }
        stream[$arch]=$(find "$w/u" -type f ! -name '*.json' -print0 | sort -z \
            | xargs -0 cat | zstd -q -19 --long=27 -T0 -c | wc -c)
    done
    rm -rf "$w/u"
    local total_stream=0
    for arch in "${!stream[@]}"; do total_stream=$(( total_stream + stream[$arch] )); done
    echo "  archives: one zstd -19 --long=27 stream per arch, all arches: ${total_stream} bytes"
    local level
    for level in ${LEVELS:-1 3 9 19}; do
        rm -rf "$w/lv"; sync
        timed "$w/lv.t" "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" \
            --output-dir "$w/lv" --compression "zstd:$level"
        local total=0 worst=0 worst_arch="" r
        for a in $(find "$w/lv" -type f -name '*.kpack'); do
            arch="$(basename "$a" .kpack)"; arch="${arch#"${name}"_}"
            local sz; sz=$(stat -c %s "$a")
            total=$(( total + sz ))
            r=$(ratio "$sz" "${stream[$arch]}")
            if awk -v a="$r" -v b="$worst" 'BEGIN { exit !(a > b) }'; then worst="$r"; worst_arch="$arch"; fi
        done
        printf '  zstd:%-2s  split %7.2f s wall %8.2f s CPU  %12d bytes = %sx the streams; worst arch %s %sx (target <= 1.3)\n' \
            "$level" "$(wall_s "$w/lv.t")" "$(cpu_s "$w/lv.t")" "$total" "$(ratio "$total" "$total_stream")" "$worst_arch" "$worst"
    done
    rm -rf "$w/lv"
}

[ $# -gt 0 ] || set -- rocblas onnx jaxpjrt rocsparse
for inp in "$@"; do
    lib="$(input_"$inp")" || bdie "input $inp"
    run_input "$inp" "$lib"
done
