#!/usr/bin/env bash
# Benchmark (not a test), issue 22: `kpack split` / `reassemble` on big real
# inputs against the physical limits measured in the same run, side by side:
#
#   split (zstd, default)      vs  zstd -3 -T0 of the same file   target <= 1.0x
#   split --compression none   vs  cp of the same file            target <= 1.2x
#   reassemble (from zstd)     vs  the split above                target <= 2.0x
#   peak RSS of split and reassemble                              target <= 256 MiB
#   .kpack bytes at the default and at zstd:19  vs  one `zstd -19 --long=27`
#   stream of the same code objects (per arch)                    target <= 1.3x
#
# Inputs (downloaded once into $ROCPACK_BENCH_CACHE, pinned by sha256):
#   rocsparse  Debian bookworm librocsparse0 5.3.0+dfsg-2 (librocsparse.so.0.1,
#              1.31 GB, plain bundles), `apt-get download`
#   jaxpjrt    PyPI jax-rocm7-pjrt 0.10.0 (xla_rocm_plugin.so, 520 MB, CCOB
#              v3), the wheel CI's 40-pypi.sh pins
#   onnx       PyPI onnxruntime-rocm 1.22.2.post3 (cp311 manylinux_2_34,
#              libonnxruntime_providers_rocm.so, 513 MB, plain bundles)
# (Debian's librocblas4 of the issue's table is only in trixie/sid; bookworm,
# which CI runs, has librocsparse0.)
#
# Rounds alternate the tools (medians of ROUNDS, default 3); dirty pages are
# flushed before each timed run. SIZES=0 skips the archive-size rows.
# Usage: bench/limits.sh [INPUT...]   (INPUT: rocsparse jaxpjrt onnx)
. "$(dirname "$0")/lib.sh"

KPACK="${KPACK:-$(kpack_release)}"
ROUNDS="${ROUNDS:-3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-bench-limits.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export KPACK

pinned() { # FILE SHA256
    echo "$2  $1" | sha256sum -c --quiet - || bdie "sha256 of $1 (pinned $2)"
}

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

run_input() {
    local name="$1" lib="$2"
    local w="$WORK/$name"
    mkdir -p "$w/art/$name/lib"
    ln -f "$lib" "$w/art/$name/lib/" 2>/dev/null || cp "$lib" "$w/art/$name/lib/"
    echo lib > "$w/art/$name/artifact_manifest.txt"
    local base; base="$(basename "$lib")"
    local size; size=$(stat -c %s "$lib")
    warm_large_folios "$lib"
    local i
    for i in $(seq "$ROUNDS"); do
        blog "$name round $i/$ROUNDS"
        sync; timed "$w/cp.$i" cp "$lib" "$w/cp.out"; rm -f "$w/cp.out"
        sync; timed "$w/zstd.$i" zstd -q -3 -T0 -f "$lib" -o "$w/zstd.out"; rm -f "$w/zstd.out"
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
    local cp_s zs_s none_s split_s reas_s
    cp_s=$(median_wall "$w"/cp.*); zs_s=$(median_wall "$w"/zstd.*)
    none_s=$(median_wall "$w"/none.*); split_s=$(median_wall "$w"/split.*)
    reas_s=$(median_wall "$w"/reas.*)
    # Archive size: default, zstd:19, and one zstd -19 --long=27 stream of
    # each arch's code objects (unpacked from the `none` archives).
    local kp3 kp19=0 stream=0 a
    kp3=$(find "$w/split" -name '*.kpack' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
    if [ "${SIZES:-1}" = 1 ]; then
        rm -rf "$w/s19"
        "$KPACK" split --artifact-dir "$w/art/$name" --artifact-prefix "$name" --output-dir "$w/s19" \
            --compression zstd:19 >/dev/null 2>&1 || bdie "split zstd:19"
        kp19=$(find "$w/s19" -name '*.kpack' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
        rm -rf "$w/s19"
        for a in $(find "$w/none" -name '*.kpack'); do
            rm -rf "$w/u" && "$KPACK" unpack "$a" -o "$w/u" >/dev/null 2>&1 || bdie "unpack $a"
            stream=$(( stream + $(find "$w/u" -type f ! -name '*.json' -print0 | sort -z \
                | xargs -0 cat | zstd -q -19 --long=27 -T0 -c | wc -c) ))
        done
        rm -rf "$w/u"
    fi
    cat <<ROW
$name: $base, $size bytes, $(nproc) CPUs, median of $ROUNDS, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)
  cp                      ${cp_s} s
  zstd -3 -T0             ${zs_s} s
  split (zstd)            ${split_s} s  $(ratio "$split_s" "$zs_s")x zstd -3 -T0 (target <= 1.0)  peak RSS $(max_rss "$w"/split.*) MiB
  split --compression none ${none_s} s  $(ratio "$none_s" "$cp_s")x cp (target <= 1.2)  peak RSS $(max_rss "$w"/none.*) MiB
  reassemble (zstd)       ${reas_s} s  $(ratio "$reas_s" "$split_s")x split (target <= 2.0)  peak RSS $(max_rss "$w"/reas.*) MiB  identical: $same
ROW
    if [ "${SIZES:-1}" = 1 ]; then
        echo "  .kpack bytes            default ${kp3}, zstd:19 ${kp19}; one zstd -19 --long=27 stream per arch ${stream} ($(ratio "$kp3" "$stream")x, $(ratio "$kp19" "$stream")x)"
    else
        echo "  .kpack bytes            default ${kp3} (SIZES=0: zstd:19 and the one-stream limit not measured)"
    fi
    rm -rf "$w"
}

[ $# -gt 0 ] || set -- rocsparse
for inp in "$@"; do
    lib="$(input_"$inp")" || bdie "input $inp"
    run_input "$inp" "$lib"
done
