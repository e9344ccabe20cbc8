#!/usr/bin/env bash
# Bazel 7.x (Debian sid's bazel-bootstrap) in a debootstrap chroot, over the
# examples and the consumer workspaces (bazel-offline.md section 5):
#   * rocpack itself, bzlmod (MODULE.bazel, --config=debian7): build + test
#     //..., hello per channel, the missing-snapshot message; the source
#     snapshots of examples/rcclx_source through the bzlmod module extension
#     (source_snapshot_ext.bzl): each channel prints its own value, and the
#     freshness test turns red on an unrecorded edit (examples/rcclx_source/check.sh);
#   * rocpack itself, WORKSPACE mode (--noenable_bzlmod): the non-cc packages;
#   * e2e/bazel-bzlmod (bazel_dep + local_path_override, relative path) and
#     e2e/bazel-workspace (local_repository, --noenable_bzlmod) through
#     tests/bazel/consumer.sh;
#   * a bzlmod consumer taking the kpack/snapctl toolchain from release
#     binaries pinned by sha256 (rocpack_toolchains.prebuilt) and a snapshot
#     blob from a remote store (rocpack_snapshots).
#   * a bzlmod consumer assembled from docs/rules/consumers.md, rocpack
#     vendored at third_party/rocpack, helpers from the release script
#     (tests/bazel/vendored.sh bzlmod), with the page's source-snapshot
#     section in its bzlmod spelling (tests/bazel/source-consumer.sh).
#
#   tests/ci/55-bazel7.sh     # as root; first run ~5-10 min + 2.3 GB, then the chroot is reused
#
# Runs by default. Skipped (loudly) when not root, when debootstrap cannot be
# installed, or when the Debian registry is unreachable and no chroot is
# cached; ROCPACK_BAZEL7=0 skips it on purpose.
# The chroot is cached in $ROCPACK_SID_CHROOT (default /var/tmp/rocpack-sid);
# ROCPACK_SID_REMOVE=1 deletes it afterwards.
# `55-bazel7.sh --prepare` only makes the chroot (debootstrap, apt-get) and
# exits: tests/run-all.sh runs that in the background from the start, while
# the CPU compiles (tests/ci/prefetch.sh).
# Helpers: $KPACK_BIN / $SNAPCTL_BIN, else stage 10's dev build (ci_helpers
# in lib.sh: target/ci-helpers, debug info stripped); installed into the
# copy's rules/bazel/prebuilt/ (the copy leaves target/ out).
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
T0=$SECONDS; TS=""
step() { # prints the time of the previous step, then starts the next
    [ -z "$TS" ] || printf '    (%ds)\n' $((SECONDS - TS)) >&2
    TS=$SECONDS
    log "$*"
}
skip() { printf '\n!!! SKIPPED: the Bazel 7 stage did not run: %s !!!\n\n' "$*" >&2; exit 0; }

[ "${ROCPACK_BAZEL7:-1}" != 0 ] || skip "ROCPACK_BAZEL7=0"
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot, mounts); run as root"
CHROOT="${ROCPACK_SID_CHROOT:-/var/tmp/rocpack-sid}"
MIRROR="${ROCPACK_SID_MIRROR:-http://deb.debian.org/debian}"
# git: snapctl create --kind source (the vendored consumer's source-snapshot
# section). A cached chroot whose stamp ($READY) names other packages gets
# the missing ones by apt-get in place (--no-upgrade: those it has stay at
# their versions), never a new debootstrap.
SID_PKGS="bazel-bootstrap gcc libc6-dev binutils python3 python3-pip git"
READY="$CHROOT/.rocpack-ready"

PREPARE=0
[ "${1:-}" != --prepare ] || PREPARE=1
[ "$PREPARE" = 1 ] || prefetch_wait sid-chroot
KPACK="${KPACK_BIN:-}"; SNAPCTL="${SNAPCTL_BIN:-}"
if [ "$PREPARE" = 0 ] && [ -z "$KPACK" ]; then
    # Stage 10's dev build, without debug info, librocm_kpack beside them.
    ci_helpers
    KPACK="$CI_HELPERS_DIR/kpack" SNAPCTL="$CI_HELPERS_DIR/snapctl"
fi
for p in debug release; do
    [ -n "$KPACK" ] || { [ -x "target/$p/kpack" ] && [ -x "target/$p/snapctl" ] && KPACK="$ROOT/target/$p/kpack" && SNAPCTL="$ROOT/target/$p/snapctl"; } || true
done
[ "$PREPARE" = 1 ] || { [ -n "$KPACK" ] && [ -x "$KPACK" ] && [ -x "$SNAPCTL" ]; } \
    || die "no helper binaries: run 'cargo build -p kpack -p snapctl' first or set KPACK_BIN and SNAPCTL_BIN"

# One setup of the chroot at a time (a background --prepare and this stage
# run alone, or two runs on one machine); released before any Bazel server
# starts (a daemon would inherit the descriptor).
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$CHROOT.lock"
flock -n 9 || { log "waiting for another setup of $CHROOT ($CHROOT.lock)"; flock 9; }

registry_up() {
    local host; host="$(printf '%s' "$MIRROR" | sed -E 's|^[a-z]+://([^/:]+).*|\1|')"
    timeout 20 bash -c "exec 3<>/dev/tcp/$host/80" 2>/dev/null
}
if [ "$(cat "$READY" 2>/dev/null)" != "$SID_PKGS" ]; then
    registry_up || skip "the Debian registry ($MIRROR) is unreachable and no chroot is cached in $CHROOT"
    need_pkgs debootstrap || skip "cannot install debootstrap"
fi

mounted=()
cleanup() {
    local rc=$?
    for d in /workspace /workspace/e2e/bazel-bzlmod /workspace/e2e/bazel-workspace /consumer; do
        chroot "$CHROOT" bash -c "cd $d 2>/dev/null && bazel shutdown" >/dev/null 2>&1 || true
    done
    for m in "${mounted[@]}"; do mount --make-rslave "$CHROOT$m" 2>/dev/null || true; done
    for m in "${mounted[@]}"; do umount -R "$CHROOT$m" 2>/dev/null || umount -lR "$CHROOT$m" || true; done
    if findmnt -rno TARGET | grep "^$CHROOT/" >/dev/null; then
        echo "WARNING: still mounted under $CHROOT; not removing it" >&2
    elif [ "${ROCPACK_SID_REMOVE:-0}" = 1 ] && [ "$PREPARE" = 0 ]; then
        rm -rf "$CHROOT"
    fi
    printf '    total %ds\n' $((SECONDS - T0)) >&2
    exit $rc
}
trap cleanup EXIT
# Killed (a background --prepare ended by tests/run-all.sh): unmount too.
trap 'exit 143' TERM INT HUP

if [ ! -x "$CHROOT/usr/bin/apt-get" ]; then
    step "debootstrap sid into $CHROOT (cached for later runs)"
    rm -rf "$CHROOT"; mkdir -p "$CHROOT"
    debootstrap --variant=minbase sid "$CHROOT" "$MIRROR" >"$CHROOT.debootstrap.log" 2>&1 \
        || { tail -20 "$CHROOT.debootstrap.log" >&2; rm -rf "$CHROOT"; die "debootstrap sid failed"; }
fi
mount -t proc proc "$CHROOT/proc"; mounted+=(/proc)
mount --rbind /dev "$CHROOT/dev"; mount --make-rslave "$CHROOT/dev"; mounted+=(/dev)
mount --rbind /sys "$CHROOT/sys"; mount --make-rslave "$CHROOT/sys"; mounted+=(/sys)

if [ "$(cat "$READY" 2>/dev/null)" != "$SID_PKGS" ]; then
    step "apt-get install $SID_PKGS in the chroot (Java's postinst needs /proc)"
    echo 'Acquire::Check-Valid-Until "false";' > "$CHROOT/etc/apt/apt.conf.d/99novalid"
    cp /etc/resolv.conf "$CHROOT/etc/"
    chroot "$CHROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SID_PKGS="$SID_PKGS" bash -c 'set -e
        dpkg --configure -a
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends --no-upgrade $SID_PKGS' \
        >"$CHROOT.apt.log" 2>&1 || { tail -20 "$CHROOT.apt.log" >&2; die "apt-get install in the chroot failed"; }
    echo "$SID_PKGS" > "$READY"
fi
if [ "$PREPARE" = 1 ]; then
    step "the chroot $CHROOT is ready (--prepare)"
    exit 0
fi
exec 9>&-

step "copy the workspace into the chroot; helpers from $KPACK"
rm -rf "$CHROOT/workspace"
mkdir -p "$CHROOT/workspace"
tar -C "$ROOT" --exclude='./bazel-*' --exclude='./e2e/*/bazel-*' --exclude=./target --exclude=./.git \
    --exclude=./buck-out --exclude=./tools/fuzz --exclude=./user.bazelrc -cf - . | tar -C "$CHROOT/workspace" -xf -
"$CHROOT/workspace/rules/bazel/prebuilt/install.sh" "$KPACK" "$SNAPCTL"
# librocm_kpack for examples/runtime: install.sh took it from beside kpack
# (stage 50 builds it); otherwise it is built here.
if [ ! -f "$CHROOT/workspace/rules/bazel/prebuilt/librocm_kpack.so" ]; then
    cargo build --locked -q -p rocpack-runtime
    install -m 0644 target/debug/librocm_kpack.so target/debug/librocm_kpack.a "$CHROOT/workspace/rules/bazel/prebuilt/"
fi

# Bazel in the chroot: no network needed from here on (everything is local).
in_chroot() { chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME=/root LC_ALL=C "$@"; }

step "Bazel 7, bzlmod (MODULE.bazel): build + test //..., hello per channel, source snapshots per channel"
in_chroot bash -euo pipefail -c '
cd /workspace
bazel --version
F=(--config=debian7 --config=prebuilt)
bazel build "${F[@]}" //...
bazel test "${F[@]}" //...
check() { want="$1"; shift; got="$(bazel run "${F[@]}" "$@" //examples/rcclx:hello 2>/dev/null)"; echo "  $* -> $got"
          case "$got" in "$want"*) ;; *) echo "FAILED: expected $want" >&2; exit 1 ;; esac; }
check "rcclx channel=dev rocm=6.4 commit=source"
check "rcclx channel=stable rocm=6.4 commit=" --config=rcclx_stable --config=rocm64
check "rcclx channel=last_stable rocm=7.0 commit=" --config=rcclx_last_stable --config=rocm70
check "rcclx channel=stable rocm=7.0 commit=" --//examples/rcclx:rcclx_channel=stable --config=rocm70
if bazel build "${F[@]}" --config=rcclx_stable --config=rocm71 //examples/rcclx:hello >/tmp/m.out 2>&1; then echo "FAILED: rocm71 built" >&2; exit 1; fi
grep -q "no stable snapshot of rcclx for ROCm 7.1" /tmp/m.out || { cat /tmp/m.out; exit 1; }
echo "  missing snapshot message OK"
echo "  source snapshots (module extension source_snapshots):"
bash examples/rcclx_source/check.sh "${F[@]}"
bazel shutdown'

step "Bazel 7, bzlmod: C consumer of librocm_kpack (examples/runtime on //:rocm_kpack{,_static}, prebuilt libraries)"
in_chroot bash /workspace/tests/ci/runtime-consumer.sh bazel --config=debian7 --config=prebuilt
in_chroot bash -c 'cd /workspace && bazel shutdown'

step "Bazel 7, WORKSPACE mode (--noenable_bzlmod): //examples/kpack/... //examples/wheel/... //tests/bazel/..."
# Native cc rules would need the real rules_java toolchains (from GitHub) on
# 7.x in WORKSPACE mode, so only the packages without them here.
in_chroot bash -euo pipefail -c '
cd /workspace
bazel build --noenable_bzlmod --config=prebuilt //examples/kpack/... //examples/wheel/... //tests/bazel/...
bazel test --noenable_bzlmod --config=prebuilt //examples/kpack/... //examples/wheel/... //tests/bazel/...
bazel shutdown'

HF=(--@rocpack//rules/bazel:kpack=@rocpack//rules/bazel/prebuilt:kpack
    --@rocpack//rules/bazel:snapctl=@rocpack//rules/bazel/prebuilt:snapctl)
step "consumer e2e/bazel-bzlmod (bazel_dep + local_path_override ../..): every rule, per-library channels, the fix"
in_chroot SNAPCTL_BIN=/workspace/rules/bazel/prebuilt/snapctl \
    bash /workspace/tests/bazel/consumer.sh /workspace/e2e/bazel-bzlmod --config=debian7 "${HF[@]}"

step "consumer e2e/bazel-workspace in WORKSPACE mode (local_repository ../..; no cc rules on 7.x)"
in_chroot CC_RULES=0 bash /workspace/tests/bazel/consumer.sh /workspace/e2e/bazel-workspace --noenable_bzlmod "${HF[@]}"

step "bzlmod consumer: toolchain from release binaries (rocpack_toolchains.prebuilt) + a remote snapshot blob"
in_chroot bash -euo pipefail -c '
rm -rf /release /consumer && mkdir -p /release /consumer/pkg /consumer/snap
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C /workspace/rules/bazel/prebuilt \
    -czf /release/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz kpack snapctl
sha="$(sha256sum /release/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz | cut -c1-64)"
cp -R /workspace/examples/kpack/shards /workspace/examples/kpack/packaging-config.json /consumer/pkg/
# Regression (issue 13, bug 2): the commented examples of rocpack/MODULE.bazel
# (rocpack_toolchains.prebuilt, rocpack_binaries.release), uncommented, are
# what this module uses, so Bazel 7 checks their attribute names for real.
example="$(sed -n "s/^#   //p" /workspace/MODULE.bazel | sed "s|\[\"https://[^\"]*\"\]|[\"file:///release\"]|; s|<hex>|$sha|")"
echo "$example" | grep "tc.prebuilt(" >/dev/null && echo "$example" | grep "rocpack_bin.release(" >/dev/null \
    || { echo "FAILED: MODULE.bazel lacks the commented examples" >&2; exit 1; }
cat > /consumer/MODULE.bazel <<EOF
module(name = "consumer")
bazel_dep(name = "rocpack", version = "0.1.0")
local_path_override(module_name = "rocpack", path = "../workspace")
$example
snaps = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_snapshots")
snaps.store(prefix = "rcclx_snapshots", url = "file:///workspace/examples/rcclx/store", checksums = "@rocpack//examples/rcclx:stable_checksums.bzl", dict_prefix = "RCCLX")
use_repo(snaps, "rcclx_snapshots_stable_rocm64")
EOF
: > /consumer/WORKSPACE.bzlmod
cat > /consumer/.bazelrc <<EOF
common --override_module=zlib=../workspace/rules/bazel/offline/modules/zlib
common --override_module=buildozer=../workspace/rules/bazel/offline/modules/buildozer
common --override_module=protobuf=../workspace/rules/bazel/offline/modules/protobuf
common --override_module=apple_support=../workspace/rules/bazel/offline/modules/apple_support
common --lockfile_mode=off
build --nosandbox_debug
EOF
cat > /consumer/pkg/BUILD.bazel <<EOF
load("@rocpack//rules/bazel:defs.bzl", "kpack_packages", "kpack_split")
SHARDS = {"gfx110X-build": "blas_lib_gfx110X-dgpu", "gfx1151-build": "blas_lib_gfx1151", "gfx120X-build": "blas_lib_gfx120X-all"}
[kpack_split(name = "split_" + s, srcs = glob(["shards/%s/%s/**" % (s, a)]), artifact_prefix = "blas_lib", shard = s, split_databases = ["rocblas"], symlinks = {"math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5": "librocblas.so.5.2"}) for s, a in SHARDS.items()]
kpack_packages(component = "blas_lib", config = "packaging-config.json", groups = ["gfx110X", "gfx115X", "gfx120X"], shards = [":split_" + s for s in SHARDS])
EOF
cat > /consumer/snap/BUILD.bazel <<EOF
load("@rocpack//examples/rcclx:stable_checksums.bzl", "RCCLX_STABLE_CHECKSUMS")
load("@rocpack//rules/bazel:defs.bzl", "snapshot_blob")
snapshot_blob(name = "stable_rocm64", blob = "@rcclx_snapshots_stable_rocm64//file", sha256 = RCCLX_STABLE_CHECKSUMS["6.4"], out = "librcclx-dev.a", channel = "stable", version = "6.4")
EOF
cd /consumer
# No cargo in the chroot: a from-source toolchain would fail, so this proves
# the prebuilt toolchain was resolved.
bazel build --execution_log_json_file=/tmp/consumer.json //pkg:blas_lib_gfx110X //snap:stable_rocm64 @rocpack_bin//:kpack
! grep -q "\"CargoBuild\"" /tmp/consumer.json || { echo "FAILED: cargo ran despite the prebuilt toolchain" >&2; exit 1; }
diff <(cd bazel-bin/pkg/blas_lib_gfx110X && find -L . -type f | sort | xargs sha256sum) \
     <(cd /workspace/bazel-bin/examples/kpack/blas_lib_gfx110X && find -L . -type f | sort | xargs sha256sum)
cmp bazel-bin/snap/stable_rocm64/librcclx-dev.a /workspace/examples/rcclx/store/cas/sha256/$(awk "/sha256:/ {print \$2; exit}" /workspace/examples/rcclx/snapshots/stable/6.4/metadata.txt)
echo "  consumer module OK: prebuilt toolchain gives identical blas_lib_gfx110X; stable 6.4 blob fetched and verified"
bazel shutdown
'
step "vendored consumer (bzlmod): third_party/rocpack, docs/rules/consumers.md's files, release-script helpers, ROCm 7.2, PATH change, kpack verify, the source-snapshot section"
in_chroot bash /workspace/tests/bazel/vendored.sh bzlmod /workspace/rules/bazel/prebuilt/kpack /workspace/rules/bazel/prebuilt/snapctl --config=debian7

step "Bazel 7 check passed"
