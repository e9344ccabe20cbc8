#!/usr/bin/env bash
# Copies prebuilt helpers next to this script for `bazel ... --config=prebuilt`.
#
#   rules/bazel/prebuilt/install.sh                  # from target/release, else target/debug
#   rules/bazel/prebuilt/install.sh KPACK SNAPCTL     # explicit paths
# librocm_kpack.so / .a (the runtime library, //:rocm_kpack) are copied too
# when they are beside KPACK (cargo build -p rocpack-runtime).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
profile=release
[ -x "$root/target/release/kpack" ] && [ -x "$root/target/release/snapctl" ] || profile=debug
kpack="${1:-$root/target/$profile/kpack}"
snapctl="${2:-$root/target/$profile/snapctl}"
for f in "$kpack" "$snapctl"; do
    [ -x "$f" ] || { echo "install.sh: $f is missing (cargo build --release -p kpack -p snapctl)" >&2; exit 1; }
done
# Debug info is dropped (debug builds are hundreds of MB; Bazel hashes and
# copies the helpers), and a file is replaced only when it changed, so
# Bazel's digests (and caches) stay put.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for name in kpack snapctl; do
    src="$kpack"; [ "$name" = snapctl ] && src="$snapctl"
    if command -v strip >/dev/null; then
        strip --strip-debug -o "$tmp/$name" "$src"
    else
        cp "$src" "$tmp/$name"
    fi
    chmod 0755 "$tmp/$name"
    cmp -s "$tmp/$name" "$here/$name" || install -m 0755 "$tmp/$name" "$here/$name"
done
for name in librocm_kpack.so librocm_kpack.a; do
    src="$(dirname "$kpack")/$name"
    [ -f "$src" ] || continue
    strip --strip-debug -o "$tmp/$name" "$src" 2>/dev/null || cp "$src" "$tmp/$name"
    chmod 0644 "$tmp/$name"
    cmp -s "$tmp/$name" "$here/$name" || install -m 0644 "$tmp/$name" "$here/$name"
done
