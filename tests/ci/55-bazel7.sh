#!/usr/bin/env bash
# Optional: the same workspace on Bazel 7.7.1 (Debian sid's bazel-bootstrap) in
# a debootstrap chroot, in bzlmod mode (MODULE.bazel, --config=debian7: all of
# //...) and in WORKSPACE mode (--noenable_bzlmod: the packages without native
# cc rules). bazel-offline.md section 5.
#
#   ROCPACK_BAZEL7=1 tests/ci/55-bazel7.sh      # as root; ~4 min + 2.2 GB the first time
#
# Skipped unless ROCPACK_BAZEL7=1 (it does not fit CI's time budget on 2 cores
# next to the other stages). The chroot is kept in $ROCPACK_SID_CHROOT
# (default /var/tmp/rocpack-sid) for reuse; ROCPACK_SID_REMOVE=1 deletes it.
# Helpers: target/release (else target/debug) {kpack,snapctl},
# or $KPACK_BIN / $SNAPCTL_BIN; copied into the chroot's rules/bazel/prebuilt/.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
if [ "${ROCPACK_BAZEL7:-0}" != 1 ]; then
    log "Bazel 7.7.1 check skipped (run with ROCPACK_BAZEL7=1 as root)"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "the Bazel 7 check needs root (debootstrap, chroot, mounts)"
need_pkgs debootstrap
CHROOT="${ROCPACK_SID_CHROOT:-/var/tmp/rocpack-sid}"
TARGETS="${BAZEL7_TARGETS:-//...}"

if [ ! -x "$CHROOT/usr/bin/apt-get" ]; then
    log "debootstrap sid into $CHROOT"
    mkdir -p "$CHROOT"
    debootstrap --variant=minbase sid "$CHROOT" http://deb.debian.org/debian
fi
mounted=()
cleanup() {
    local rc=$?
    chroot "$CHROOT" bash -c 'cd /workspace 2>/dev/null && bazel shutdown; cd /consumer 2>/dev/null && bazel shutdown' >/dev/null 2>&1 || true
    for m in "${mounted[@]}"; do mount --make-rslave "$CHROOT$m" 2>/dev/null || true; done
    for m in "${mounted[@]}"; do umount -R "$CHROOT$m" 2>/dev/null || umount -lR "$CHROOT$m" || true; done
    if findmnt -rno TARGET | grep -q "^$CHROOT/"; then
        echo "WARNING: still mounted under $CHROOT; not removing it" >&2
    elif [ "${ROCPACK_SID_REMOVE:-0}" = 1 ]; then
        rm -rf "$CHROOT"
    fi
    exit $rc
}
trap cleanup EXIT
mount -t proc proc "$CHROOT/proc"; mounted+=(/proc)
mount --rbind /dev "$CHROOT/dev"; mount --make-rslave "$CHROOT/dev"; mounted+=(/dev)
mount --rbind /sys "$CHROOT/sys"; mount --make-rslave "$CHROOT/sys"; mounted+=(/sys)

log "bazel-bootstrap 7.7.1 in the chroot (Java's postinst needs /proc, mounted above)"
echo 'Acquire::Check-Valid-Until "false";' > "$CHROOT/etc/apt/apt.conf.d/99novalid"
cp /etc/resolv.conf "$CHROOT/etc/"
chroot "$CHROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c 'set -e; dpkg --configure -a
    if ! dpkg-query -W -f="\${Status}\n" bazel-bootstrap gcc libc6-dev python3 2>/dev/null | grep -qv "install ok installed" \
        && [ "$(dpkg-query -W -f="\${Status}\n" bazel-bootstrap gcc libc6-dev python3 2>/dev/null | wc -l)" = 4 ]; then exit 0; fi
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bazel-bootstrap gcc libc6-dev python3'


log "copy the workspace into the chroot"
rm -rf "$CHROOT/workspace"
mkdir -p "$CHROOT/workspace"
tar -C "$ROOT" --exclude='./bazel-*' --exclude=./target --exclude=./.git --exclude=./buck-out --exclude=./tools/fuzz -cf - . | tar -C "$CHROOT/workspace" -xf -
"$CHROOT/workspace/rules/bazel/prebuilt/install.sh" ${KPACK_BIN:+"$KPACK_BIN"} ${SNAPCTL_BIN:+"$SNAPCTL_BIN"}

log "Bazel 7.7.1, bzlmod (MODULE.bazel): build, test, hello per channel"
chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME=/root TARGETS="$TARGETS" bash -euo pipefail -c '
cd /workspace
bazel --version
F=(--config=debian7 --config=prebuilt)
bazel build "${F[@]}" $TARGETS
bazel test "${F[@]}" $TARGETS
check() { want="$1"; shift; got="$(bazel run "${F[@]}" "$@" //examples/rcclx:hello 2>/dev/null)"; echo "  $* -> $got"
          case "$got" in "$want"*) ;; *) echo "FAILED: expected $want" >&2; exit 1 ;; esac; }
check "rcclx channel=dev rocm=6.4 commit=source"
check "rcclx channel=stable rocm=6.4 commit=" --config=rcclx_stable --config=rocm64
check "rcclx channel=last_stable rocm=7.0 commit=" --config=rcclx_last_stable --config=rocm70
if bazel build "${F[@]}" --config=rcclx_stable --config=rocm71 //examples/rcclx:hello >/tmp/m.out 2>&1; then echo "FAILED: rocm71 built" >&2; exit 1; fi
grep -q "no stable snapshot of rcclx for ROCm 7.1" /tmp/m.out || { cat /tmp/m.out; exit 1; }
echo "  missing snapshot message OK"
bazel shutdown
# WORKSPACE mode: native cc rules would need the real rules_java toolchains
# (bazel_skylib from GitHub) on 7.x, so only the non-cc packages here.
echo "== Bazel 7.7.1, WORKSPACE mode (--noenable_bzlmod): //examples/kpack/... //tests/bazel/..."
bazel build --noenable_bzlmod --config=prebuilt //examples/kpack/... //tests/bazel/...
bazel test --noenable_bzlmod --config=prebuilt //examples/kpack/... //tests/bazel/...
bazel shutdown

echo "== Bazel 7.7.1, a bzlmod consumer module: release binaries + remote snapshot store via module extensions"
rm -rf /release /consumer && mkdir -p /release /consumer/pkg /consumer/snap
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C /workspace/rules/bazel/prebuilt \
    -czf /release/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz kpack snapctl
sha="$(sha256sum /release/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz | cut -c1-64)"
cp -R /workspace/examples/kpack/shards /workspace/examples/kpack/packaging-config.json /consumer/pkg/
cat > /consumer/MODULE.bazel <<EOF
module(name = "consumer")
bazel_dep(name = "rocpack", version = "0.1.0")
local_path_override(module_name = "rocpack", path = "/workspace")
bin = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_binaries")
bin.release(repo = "rocpack_bin", version = "0.1.0", base_urls = ["file:///release"], sha256 = {"x86_64-unknown-linux-gnu": "$sha"})
use_repo(bin, "rocpack_bin")
snaps = use_extension("@rocpack//rules/bazel:extensions.bzl", "rocpack_snapshots")
snaps.store(prefix = "rcclx_snapshots", url = "file:///workspace/examples/rcclx/store", checksums = "@rocpack//examples/rcclx:stable_checksums.bzl")
use_repo(snaps, "rcclx_snapshots_stable_rocm64")
EOF
: > /consumer/WORKSPACE.bzlmod
cat > /consumer/.bazelrc <<EOF
common --override_module=zlib=/workspace/rules/bazel/offline/modules/zlib
common --override_module=buildozer=/workspace/rules/bazel/offline/modules/buildozer
common --override_module=protobuf=/workspace/rules/bazel/offline/modules/protobuf
common --override_module=apple_support=/workspace/rules/bazel/offline/modules/apple_support
common --lockfile_mode=off
build --nosandbox_debug
build --@rocpack//rules/bazel:kpack=@rocpack_bin//:kpack
build --@rocpack//rules/bazel:snapctl=@rocpack_bin//:snapctl
EOF
cat > /consumer/pkg/BUILD.bazel <<EOF
load("@rocpack//rules/bazel:defs.bzl", "kpack_packages", "kpack_split")
SHARDS = {"gfx110X-build": "blas_lib_gfx110X-dgpu", "gfx1151-build": "blas_lib_gfx1151", "gfx120X-build": "blas_lib_gfx120X-all"}
[kpack_split(name = "split_" + s, srcs = glob(["shards/%s/%s/**" % (s, a)]), artifact_prefix = "blas_lib", shard = s, split_databases = ["rocblas"]) for s, a in SHARDS.items()]
kpack_packages(component = "blas_lib", config = "packaging-config.json", groups = ["gfx110X", "gfx115X", "gfx120X"], shards = [":split_" + s for s in SHARDS])
EOF
cat > /consumer/snap/BUILD.bazel <<EOF
load("@rocpack//examples/rcclx:stable_checksums.bzl", "RCCLX_STABLE_CHECKSUMS")
load("@rocpack//rules/bazel:defs.bzl", "snapshot_blob")
snapshot_blob(name = "stable_rocm64", blob = "@rcclx_snapshots_stable_rocm64//file", sha256 = RCCLX_STABLE_CHECKSUMS["6.4"], out = "librcclx-dev.a", channel = "stable", version = "6.4")
EOF
cd /consumer
bazel build //pkg:blas_lib_gfx110X //snap:stable_rocm64
diff <(cd bazel-bin/pkg/blas_lib_gfx110X && find -L . -type f | sort | xargs sha256sum) \
     <(cd /workspace/bazel-bin/examples/kpack/blas_lib_gfx110X && find -L . -type f | sort | xargs sha256sum)
cmp bazel-bin/snap/stable_rocm64/librcclx-dev.a /workspace/examples/rcclx/store/cas/sha256/$(awk "/sha256:/ {print \$2; exit}" /workspace/examples/rcclx/snapshots/stable/6.4/metadata.txt)
echo "  consumer module OK: downloaded helpers give identical blas_lib_gfx110X; stable 6.4 blob fetched and verified"
bazel shutdown
'
log "Bazel 7.7.1 check passed"
