#!/usr/bin/env bash
# Copies prebuilt helpers next to this script for `bazel ... --config=prebuilt`.
#
#   rules/bazel/prebuilt/install.sh                  # from target/release (after cargo build --release -p kpack -p snapctl)
#   rules/bazel/prebuilt/install.sh KPACK SNAPCTL     # explicit paths
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
kpack="${1:-$root/target/release/kpack}"
snapctl="${2:-$root/target/release/snapctl}"
for f in "$kpack" "$snapctl"; do
    [ -x "$f" ] || { echo "install.sh: $f is missing (cargo build --release -p kpack -p snapctl)" >&2; exit 1; }
done
# Replace only when different, so Bazel's digests (and caches) stay put.
cmp -s "$kpack" "$here/kpack" || install -m 0755 "$kpack" "$here/kpack"
cmp -s "$snapctl" "$here/snapctl" || install -m 0755 "$snapctl" "$here/snapctl"
