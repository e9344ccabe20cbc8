#!/usr/bin/env bash
# make-prebuilt.sh: the prebuilt-helper release of rocpack, and the exact lines
# a consumer pastes to use it (docs/rules/consumers.md, docs/buck2.md).
#
#   tools/release/make-prebuilt.sh --out DIR [--version V] [--base-url URL]
#                                  [--bin-dir DIR | --profile PROFILE] [--lib-dir DIR]
#
# Writes into DIR (created; must be empty or absent):
#   rocpack-<V>-<platform>.tar.gz   kpack and snapctl at the top level, no
#                                   directory prefix: what Bazel's
#                                   rocpack_toolchains.prebuilt /
#                                   rocpack_register_toolchains(prebuilt = ...)
#                                   download (rocpack_release_binaries); beside
#                                   them librocm_kpack as install.sh lays it
#                                   out (the extracted directory is a prefix):
#                                   lib/librocm_kpack.so.0.<minor>.<patch> with
#                                   its .so.0 (SONAME) and .so links,
#                                   lib/librocm_kpack.a, include/rocm_kpack/,
#                                   lib/pkgconfig/, lib/cmake/ (relocatable);
#   kpack-<V>-<platform>, snapctl-<V>-<platform>
#                                   the same two binaries as single files, for
#                                   Buck2's `[rocpack] tools = prebuilt`
#                                   (http_file per binary);
#   librocm_kpack-<V>-<platform>.so, librocm_kpack-<V>-<platform>.a
#                                   the libraries as single files, for Buck2's
#                                   rocm_kpack_so_url / rocm_kpack_a_url;
#   SHA256SUMS                      sha256sum format, one line per file;
#   snippets.txt                    what this script prints on stdout.
# Upload DIR's files to URL (default: the GitHub release of V). `file://DIR`
# works offline for Bazel (tests/ci/50-bazel.sh and 55-bazel7.sh use that),
# not for Buck2, whose http_file needs http(s) (e2e/buck2/run.sh serves DIR
# on 127.0.0.1); with a file:// URL the Buck2 lines say so.
#
# Binaries: built by `cargo build --locked --profile PROFILE -p kpack -p
# snapctl -p rocpack-runtime` (default release; CARGO_TARGET_DIR is
# honoured), or taken from --bin-dir (CI reuses its own build); the
# libraries (librocm_kpack.so, librocm_kpack.a) from --lib-dir, else from
# the binaries' directory. A --bin-dir without them and no --lib-dir makes
# a helpers-only release, with a warning. Debug info is stripped. The
# archive is deterministic: sorted names, mtime 0, owner 0, gzip -n.
#
# stdout: the lines for MODULE.bazel (bzlmod), WORKSPACE and .buckconfig,
# with the sha256s filled in. stderr: progress. Exit 0 ok, 2 usage error.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
OUT="" VERSION="" BASE_URL="" BIN_DIR="" LIB_DIR="" PROFILE=release
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:?}"; shift 2 ;;
        --version) VERSION="${2:?}"; shift 2 ;;
        --base-url) BASE_URL="${2:?}"; shift 2 ;;
        --bin-dir) BIN_DIR="${2:?}"; shift 2 ;;
        --lib-dir) LIB_DIR="${2:?}"; shift 2 ;;
        --profile) PROFILE="${2:?}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "make-prebuilt.sh: unknown argument $1" >&2; usage ;;
    esac
done
[ -n "$OUT" ] || { echo "make-prebuilt.sh: --out DIR is required" >&2; usage; }
if [ -z "$VERSION" ]; then
    VERSION="$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$ROOT/tools/kpack/Cargo.toml" | head -1)"
    [ -n "$VERSION" ] || VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' "$ROOT/Cargo.toml" | head -1)"
fi
[ -n "$VERSION" ] || { echo "make-prebuilt.sh: no version in tools/kpack/Cargo.toml; pass --version" >&2; exit 2; }
BASE_URL="${BASE_URL:-https://github.com/rocpack/rocpack/releases/download/v$VERSION}"
BASE_URL="${BASE_URL%/}"
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) PLATFORM=x86_64-unknown-linux-gnu ;;
    Linux-aarch64) PLATFORM=aarch64-unknown-linux-gnu ;;
    Darwin-x86_64) PLATFORM=x86_64-apple-darwin ;;
    Darwin-arm64) PLATFORM=aarch64-apple-darwin ;;
    *) echo "make-prebuilt.sh: no release platform for $(uname -s)-$(uname -m)" >&2; exit 2 ;;
esac
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
    echo "make-prebuilt.sh: $OUT is not empty" >&2; exit 2
fi

if [ -z "$BIN_DIR" ]; then
    echo "make-prebuilt.sh: cargo build --locked --profile $PROFILE -p kpack -p snapctl -p rocpack-runtime" >&2
    (cd "$ROOT" && cargo build --locked --quiet --profile "$PROFILE" -p kpack -p snapctl -p rocpack-runtime)
    pdir="$PROFILE"; [ "$PROFILE" = dev ] && pdir=debug
    BIN_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/$pdir"
fi
for b in kpack snapctl; do
    [ -f "$BIN_DIR/$b" ] && [ -x "$BIN_DIR/$b" ] || { echo "make-prebuilt.sh: no executable $BIN_DIR/$b" >&2; exit 2; }
done
LIBS=1
if [ -n "$LIB_DIR" ]; then
    for f in librocm_kpack.so librocm_kpack.a; do
        [ -f "$LIB_DIR/$f" ] || { echo "make-prebuilt.sh: no $LIB_DIR/$f" >&2; exit 2; }
    done
elif [ -f "$BIN_DIR/librocm_kpack.so" ] && [ -f "$BIN_DIR/librocm_kpack.a" ]; then
    LIB_DIR="$BIN_DIR"
else
    LIBS=0
    echo "make-prebuilt.sh: WARNING: no librocm_kpack.so/.a in $BIN_DIR and no --lib-dir: the release carries only kpack and snapctl" >&2
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
stage="$(mktemp -d "${TMPDIR:-/tmp}/rocpack-release.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
for b in kpack snapctl; do
    strip --strip-debug -o "$stage/$b" "$BIN_DIR/$b" 2>/dev/null || cp "$BIN_DIR/$b" "$stage/$b"
    chmod 0755 "$stage/$b"
    cp "$stage/$b" "$OUT/$b-$VERSION-$PLATFORM"
done
members=(kpack snapctl) files=("kpack-$VERSION-$PLATFORM" "snapctl-$VERSION-$PLATFORM")
if [ "$LIBS" = 1 ]; then
    # librocm_kpack in ROCm's install layout, the staging directory as prefix.
    libs="$stage/.libs"; mkdir -p "$libs"
    for f in librocm_kpack.so librocm_kpack.a; do
        strip --strip-debug -o "$libs/$f" "$LIB_DIR/$f" 2>/dev/null || cp "$LIB_DIR/$f" "$libs/$f"
    done
    bash "$ROOT/tools/rocpack-runtime/install.sh" --no-build --build-dir "$libs" --prefix "$stage" >/dev/null
    cp "$libs/librocm_kpack.so" "$OUT/librocm_kpack-$VERSION-$PLATFORM.so"
    cp "$libs/librocm_kpack.a" "$OUT/librocm_kpack-$VERSION-$PLATFORM.a"
    rm -rf "$libs"
    members+=(include lib) files+=("librocm_kpack-$VERSION-$PLATFORM.so" "librocm_kpack-$VERSION-$PLATFORM.a")
fi
archive="rocpack-$VERSION-$PLATFORM.tar.gz"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" -cf - "${members[@]}" \
    | gzip -n > "$OUT/$archive"
(cd "$OUT" && sha256sum "$archive" "${files[@]}" > SHA256SUMS)
sha_of() { awk -v f="$1" '$2 == f {print $1}' "$OUT/SHA256SUMS"; }
A="$(sha_of "$archive")" K="$(sha_of "kpack-$VERSION-$PLATFORM")" S="$(sha_of "snapctl-$VERSION-$PLATFORM")"
BUCK2_LIBS=""
if [ "$LIBS" = 1 ]; then
    BUCK2_LIBS="  rocm_kpack_so_url = $BASE_URL/librocm_kpack-$VERSION-$PLATFORM.so
  rocm_kpack_so_sha256 = $(sha_of "librocm_kpack-$VERSION-$PLATFORM.so")
  rocm_kpack_a_url = $BASE_URL/librocm_kpack-$VERSION-$PLATFORM.a
  rocm_kpack_a_sha256 = $(sha_of "librocm_kpack-$VERSION-$PLATFORM.a")
"
fi

BUCK2_NOTE=""
case "$BASE_URL" in
    file://*) BUCK2_NOTE="# buck2's http_file cannot read file:// URLs: serve $OUT over http(s) (e.g. python3 -m http.server --bind 127.0.0.1) and use that URL here.
" ;;
esac
cat > "$OUT/snippets.txt" <<SNIP
# rocpack $VERSION prebuilt helpers ($PLATFORM), from $BASE_URL

# --- Bazel 7+ (bzlmod): MODULE.bazel ---
tc = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_toolchains")
tc.prebuilt(
    version = "$VERSION",
    base_urls = ["$BASE_URL"],
    sha256 = {"$PLATFORM": "$A"},
)

# --- Bazel 4.2+ (WORKSPACE) ---
rocpack_register_toolchains(prebuilt = {
    "version": "$VERSION",
    "base_urls": ["$BASE_URL"],
    "sha256": {"$PLATFORM": "$A"},
})

# --- Buck2: .buckconfig ---
${BUCK2_NOTE}[rocpack]
  tools = prebuilt
  kpack_url = $BASE_URL/kpack-$VERSION-$PLATFORM
  kpack_sha256 = $K
  snapctl_url = $BASE_URL/snapctl-$VERSION-$PLATFORM
  snapctl_sha256 = $S
SNIP
# (the [rocpack] section is the file's last: the library keys follow it)
printf '%s' "$BUCK2_LIBS" >> "$OUT/snippets.txt"
cat "$OUT/snippets.txt"
echo "make-prebuilt.sh: wrote $(ls "$OUT" | tr '\n' ' ')into $OUT" >&2
