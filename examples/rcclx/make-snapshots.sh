#!/bin/bash
# Regenerates the committed snapshots of this example with the real snapctl:
# for each ROCm version, two prebuilt librcclx-dev.a (two "commits") are
# published, so the first ends in last-stable/ and the second in stable/.
# Deterministic: fixed compiler flags, `ar D`, SOURCE_DATE_EPOCH.
#
#   examples/rcclx/make-snapshots.sh [path/to/snapctl]
#   bazel run //examples/rcclx:stable_checksums.update   # or: the script runs gen-checksums itself
set -euo pipefail
cd "$(dirname "$0")"
here="$PWD"
snapctl="${1:-../../target/release/snapctl}"
snapctl="$(cd "$(dirname "$snapctl")" && pwd)/$(basename "$snapctl")"
[ -x "$snapctl" ] || { echo "snapctl not found at $snapctl (cargo build --release -p snapctl)" >&2; exit 2; }
export LC_ALL=C TZ=UTC
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

rm -rf snapshots store stable_checksums.bzl
mkdir -p snapshots store

build_lib() { # VERSION COMMIT OUT
    (cd "$here" && gcc -c -O2 -fPIC -fno-ident -Iinclude "-DRCCLX_ROCM_VERSION=$1" "-DRCCLX_COMMIT=$2" \
        src/rcclx.c -o "$work/rcclx.o")
    rm -f "$3"
    ar rcsD "$3" "$work/rcclx.o"
}

epoch=1767225600 # 2026-01-01 00:00:00 UTC
for ver in 6.2 6.4 7.0; do
    for n in 1 2; do
        commit="$(printf 'rcclx-%s-%s' "$ver" "$n" | sha1sum | cut -c1-40)"
        mkdir -p "$work/$ver-$n"
        build_lib "$ver" "$commit" "$work/$ver-$n/librcclx-dev.a"
        cp include/rcclx.h "$work/$ver-$n/rcclx.h"
        epoch=$((epoch + 86400))
        SOURCE_DATE_EPOCH=$epoch "$snapctl" create --snapshots-root snapshots --store store \
            --version "$ver" --artifact "$work/$ver-$n/librcclx-dev.a" \
            --header "$work/$ver-$n/rcclx.h" --commit "rcclx=$commit" \
            --checksums stable_checksums.bzl --prefix RCCLX
    done
done
"$snapctl" gen-checksums --snapshots-root snapshots --output stable_checksums.bzl --prefix RCCLX
"$snapctl" verify --snapshots-root snapshots --store store
echo "snapshots regenerated; commit examples/rcclx/{snapshots,store,stable_checksums.bzl}"
