#!/usr/bin/env bash
# Times a cold CI run as on a fresh machine (README's cold runs): purges the
# Debian packages the run installs, cleans apt's cache, moves cargo's
# registry, the Bazel/pip/rocpack caches and the sid chroot into STASH, then
# runs .ci/run in a fresh clone of this checkout's HEAD with ../shared
# beside it. Root only; it changes the machine (the run installs it all
# again; STASH keeps what was moved, delete it afterwards).
#
#   tests/ci/fresh-machine.sh WORKDIR      (log: WORKDIR/ci.log)
set -u
[ "$(id -u)" -eq 0 ] || { echo "run as root" >&2; exit 1; }
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
D="${1:?WORKDIR}"; STASH="$D/stash"
mkdir -p "$STASH"
PKGS="clang-19 lld-19 llvm-19 clang-tools-19 libamdhip64-dev hipcc rocm-device-libs clang-tools-15
  gcc-mingw-w64-x86-64 patchelf elfutils debootstrap bazel-bootstrap debhelper debugedit mold cmake wine64 nginx"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $PKGS >"$STASH/purge.log" 2>&1
DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -q >>"$STASH/purge.log" 2>&1
apt-get clean
rm -f /tmp/.rocpack-apt-updated
python3 -m pip uninstall -y -q pefile zstandard >>"$STASH/purge.log" 2>&1
for p in "$HOME/.cargo/registry" "$HOME/.cargo/git" "$HOME/.cache/bazel" "$HOME/.cache/pip" \
    "$HOME"/.cache/rocpack* /var/tmp/rocpack-sid*; do
    [ -e "$p" ] && mv "$p" "$STASH/$(echo "$p" | tr / _)"
done
rm -rf "$D/main"; ln -sfn "$(cd "$SRC/../shared" && pwd)" "$D/shared"
git clone -q "$SRC" "$D/main"
s=$(date +%s)
(cd "$D/main" && ./.ci/run) >"$D/ci.log" 2>&1; rc=$?
echo "rc=$rc wall=$(( $(date +%s) - s )) s (log: $D/ci.log)"
sed -n '/stage times/,$p' "$D/ci.log"
exit "$rc"
