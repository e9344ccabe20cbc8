#!/usr/bin/env bash
# Re-cuts the stable snapshot of examples/abi_guard: liblib.a compiled against
# layout 1 of the dependency's point.h, with that header recorded as an ABI
# input. Run from anywhere; needs cc, ar and snapctl (default target/debug/snapctl).
set -euo pipefail
cd "$(dirname "$0")/../.."
SNAPCTL="${SNAPCTL:-target/debug/snapctl}"
work="$(mktemp -d)"
trap 'rm -rf "$work"; rm -f examples/abi_guard/dep/point.h; rmdir examples/abi_guard/dep 2>/dev/null || true' EXIT
# The header at the path the build uses (the genrule output, workspace-relative).
mkdir -p examples/abi_guard/dep
cp examples/abi_guard/point_v1.h examples/abi_guard/dep/point.h
cc -O1 -Iexamples/abi_guard/dep -c examples/abi_guard/lib.c -o "$work/lib.o"
ar rcsD "$work/liblib.a" "$work/lib.o"
mkdir -p examples/abi_guard/snapshots
SOURCE_DATE_EPOCH=1769508672 "$SNAPCTL" create --snapshots-root examples/abi_guard/snapshots \
    --store examples/abi_guard/store --checksums examples/abi_guard/stable_checksums.bzl --prefix ABILIB \
    --version 7.0 --artifact "$work/liblib.a" --abi-input examples/abi_guard/dep/point.h
