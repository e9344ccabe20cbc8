#!/bin/bash
# Regenerates fooccl's committed snapshots with the real snapctl: stable and
# last-stable for ROCm 6.4, stable only for 7.0 (so last-stable/7.0 shows the
# missing-snapshot message with this library's names). Deterministic: fixed
# compiler flags, `ar D`, SOURCE_DATE_EPOCH.
#
#   e2e/buck2/fooccl/make-snapshots.sh path/to/snapctl
set -euo pipefail
cd "$(dirname "$0")"
here="$PWD"
snapctl="${1:?usage: make-snapshots.sh SNAPCTL}"
snapctl="$(cd "$(dirname "$snapctl")" && pwd)/$(basename "$snapctl")"
export LC_ALL=C TZ=UTC
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

rm -rf snapshots store stable_checksums.bzl
mkdir -p snapshots store

epoch=1767225600 # 2026-01-01 00:00:00 UTC
publish() { # VERSION N
    local ver="$1" n="$2" commit
    commit="$(printf 'fooccl-%s-%s' "$ver" "$n" | sha1sum | cut -c1-40)"
    mkdir -p "$work/$ver-$n"
    gcc -c -O2 -fPIC -fno-ident -Iinclude "-DFOOCCL_ROCM_VERSION=$ver" "-DFOOCCL_COMMIT=$commit" \
        src/fooccl.c -o "$work/fooccl.o"
    ar rcsD "$work/$ver-$n/libfooccl.a" "$work/fooccl.o"
    cp include/fooccl.h "$work/$ver-$n/fooccl.h"
    epoch=$((epoch + 86400))
    SOURCE_DATE_EPOCH=$epoch "$snapctl" create --snapshots-root snapshots --store store \
        --version "$ver" --artifact "$work/$ver-$n/libfooccl.a" \
        --header "$work/$ver-$n/fooccl.h" --commit "fooccl=$commit" \
        --checksums stable_checksums.bzl --prefix FOOCCL
}
publish 6.4 1
publish 6.4 2
publish 7.0 1
"$snapctl" gen-checksums --snapshots-root snapshots --output stable_checksums.bzl --prefix FOOCCL
"$snapctl" verify --snapshots-root snapshots --store store
echo "fooccl snapshots regenerated in $here"
