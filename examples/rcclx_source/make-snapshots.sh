#!/usr/bin/env bash
# Re-cuts snapshots/: a throwaway git repository holds rcl at two versions
# (the library's path kept, so labels stay the same), `snapctl create --kind
# source` cuts version 1 and then version 2 (which rotates 1 to last-stable).
set -euo pipefail
cd "$(dirname "$0")/../.."
SNAPCTL="$(realpath "${SNAPCTL:-target/debug/snapctl}")"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
mkdir -p "$src/examples/rcclx_source"
cp -R examples/rcclx_source/rcl "$src/examples/rcclx_source/"
git -C "$src" init -q -b main
for v in 1 2; do
    printf '#define RCL_VERSION "%s"\n' "$v" >"$src/examples/rcclx_source/rcl/core/version.h"
    git -C "$src" add -A
    GIT_AUTHOR_DATE="2026-0$v-01T00:00:00Z" GIT_COMMITTER_DATE="2026-0$v-01T00:00:00Z" \
        git -C "$src" -c user.name=rocpack -c user.email=rocpack@example.com commit -q -m "rcl $v"
done
rm -rf examples/rcclx_source/snapshots
for rev in HEAD~1 HEAD; do
    "$SNAPCTL" create --kind source --snapshots-root examples/rcclx_source/snapshots \
        --repo "$src" --rev "$rev" --subtree examples/rcclx_source/rcl --no-archive
done
