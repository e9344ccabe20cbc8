#!/bin/bash
# Regenerates the committed snapshots of fooccl and barccl with the real
# snapctl: for ROCm 6.4 and 7.0, two prebuilt lib<name>.a ("commits") each,
# so the first ends in last-stable/ and the second in stable/. Deterministic.
#
#   e2e/bazel-workspace/make-snapshots.sh path/to/snapctl
set -euo pipefail
snapctl="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
cd "$(dirname "$0")"
[ -x "$snapctl" ] || { echo "snapctl not found at $snapctl" >&2; exit 2; }
export LC_ALL=C TZ=UTC
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
epoch=1767225600 # 2026-01-01 00:00:00 UTC
for lib in fooccl barccl; do
    up="$(echo "$lib" | tr a-z A-Z)"
    d="libs/$lib"
    rm -rf "$d/snapshots" "$d/store" "$d/stable_checksums.bzl"
    mkdir -p "$d/snapshots" "$d/store"
    for ver in 6.4 7.0; do
        for n in 1 2; do
            commit="$(printf '%s-%s-%s' "$lib" "$ver" "$n" | sha1sum | cut -c1-40)"
            o="$work/$lib-$ver-$n"
            mkdir -p "$o"
            gcc -c -O2 -fPIC -fno-ident "-I$d/include" "-D${up}_ROCM_VERSION=$ver" "-D${up}_COMMIT=$commit" \
                "$d/src/$lib.c" -o "$o/$lib.o"
            ar rcsD "$o/lib$lib.a" "$o/$lib.o"
            cp "$d/include/$lib.h" "$o/$lib.h"
            epoch=$((epoch + 86400))
            SOURCE_DATE_EPOCH=$epoch "$snapctl" create --snapshots-root "$d/snapshots" --store "$d/store" \
                --version "$ver" --artifact "$o/lib$lib.a" --header "$o/$lib.h" --commit "$lib=$commit" \
                --checksums "$d/stable_checksums.bzl" --prefix "$up"
        done
    done
    "$snapctl" gen-checksums --snapshots-root "$d/snapshots" --output "$d/stable_checksums.bzl" --prefix "$up"
    "$snapctl" verify --snapshots-root "$d/snapshots" --store "$d/store"
done
echo "snapshots regenerated; commit e2e/bazel-workspace/libs/*/{snapshots,store,stable_checksums.bzl}"
