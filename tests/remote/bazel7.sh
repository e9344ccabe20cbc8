#!/usr/bin/env bash
# Bazel 7.x (Debian sid's bazel-bootstrap, the chroot stage 55 caches) on the
# NativeLink of tests/ci/65-remote.sh (issue 26). Run by that stage as
#
#   unshare --mount --propagation private bash tests/remote/bazel7.sh
#
# in a mount namespace of its own: the chroot's /proc, /dev and the bind
# mount of the run's directory ($T, same path inside) vanish with it and
# never touch another stage's use of the chroot. The stage has stopped its
# host worker; this script starts a worker INSIDE the chroot (the remote
# "image" is the client's: the local reference build and the remote one run
# the same gcc and python3), registered with the same server, and stops it
# at the end.
#
# Checks, with helpers = the stage's stripped release binaries (their
# digests are in every helper action key):
#   * local reference build of //examples/... (bzlmod, --config=debian7);
#   * cold remote build: every spawn on the worker (execution log), outputs
#     byte-identical to the local ones; `bazel test` remotely;
#   * a second client (another copy in another directory, fresh output
#     base): build + test 100 % remote cache hits;
#   * the bzlmod consumer e2e/bazel-bzlmod (bazel_dep + local_path_override)
#     remotely: build + test //... (e2e/bazel-workspace, the WORKSPACE
#     consumer, runs remotely under Bazel 4.2.3 in the stage; under 7.x in
#     WORKSPACE mode it lacks its cc rules offline, see stage 55).
# Environment in: ROOT CHROOT T NL_DIR NL_PORT NL_WORKER_PORT NL_ADDR
# NL_INSTANCE REL REL_SHA KPACK_SHA SNAPCTL_SHA.
set -euo pipefail
. "$ROOT/tests/remote/lib.sh"
log() { printf '\n==> [bazel 7] %s\n' "$*" >&2; }
die() { printf 'FAILED: [bazel 7] %s\n' "$*" >&2; exit 1; }
STEP_T0=0
step() { log "$*"; STEP_T0=$SECONDS; }
done_step() { printf '    [%ds]\n' $((SECONDS - STEP_T0)) >&2; }

B7="$T/b7"
WS_A="$B7/a/rocpack"
WS_B="$B7/elsewhere/clone-b/rocpack"
OB_LOCAL="$B7/ob-local" OB_R1="$B7/ob-remote-1" OB_R2="$B7/ob-remote-2" OB_E2E="$B7/ob-e2e"
W7="$NL_DIR/worker7"
cleanup() {
    local rc=$?
    for ob in "$OB_LOCAL" "$OB_R1" "$OB_R2" "$OB_E2E"; do
        [ -d "$ob" ] || continue
        chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME=/root bazel --output_base="$ob" shutdown >/dev/null 2>&1 || true
    done
    nl_kill_worker
    if [ $rc -ne 0 ] && [ -f "$W7.log" ]; then
        echo "--- chroot worker log (tail) ---" >&2
        sed 's/\x1b\[[0-9;]*m//g' "$W7.log" | grep -E 'ERROR|WARN' | tail -10 >&2 || true
    fi
    exit $rc
}
trap cleanup EXIT

step "chroot $CHROOT: mounts (private namespace), a NativeLink worker inside it"
mount -t proc proc "$CHROOT/proc"
mount --rbind /dev "$CHROOT/dev"
mount --rbind /sys "$CHROOT/sys"
mkdir -p "$CHROOT$T"
mount --bind "$T" "$CHROOT$T"
mkdir -p "$B7"
# The real binary (the wrapper $NL_BIN unpacked it), inside the chroot's view.
[ -x "$NL_CACHE/nativelink" ] || die "no unpacked nativelink at $NL_CACHE/nativelink"
cp "$NL_CACHE/nativelink" "$B7/nativelink"
nl_worker_config "$NL_DIR/worker7.json5" "$W7"
nl_spawn_worker "$W7.log" chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME="$W7" ROCPACK_WORKER_ENV_MARKER=leaked \
    "$B7/nativelink" "$NL_DIR/worker7.json5" || die "the chroot worker did not start"
in_chroot() { chroot "$CHROOT" env -i PATH=/usr/bin:/bin HOME=/root LC_ALL=C "$@"; }
in_chroot bazel --version >&2
done_step

step "workspace copies; helpers = the release binaries (rules/bazel/prebuilt, --config=prebuilt)"
remote_copy_ws "$ROOT" "$WS_A" "$REL"
remote_copy_ws "$ROOT" "$WS_B" "$REL"
for ws in "$WS_A" "$WS_B"; do
    install -m 0755 "$REL/stage/kpack" "$REL/stage/snapctl" "$ws/rules/bazel/prebuilt/"
done
done_step

# rb_bazel WS OUTPUT_BASE ARGS...: Bazel 7 in the chroot, in WS.
rb_bazel() { local ws="$1" ob="$2"; shift 2; in_chroot bash -c 'cd "$0" && exec bazel --output_base="$1" "${@:2}"' "$ws" "$ob" "$@"; }
rb_bin() { echo "$1/execroot/_main/bazel-out/k8-fastbuild/bin"; }
RB_LOG="$B7"
RB_FLAGS=(--config=debian7 --config=prebuilt)
# Bazel 7 downloads only top-level outputs by default (build without the
# bytes); all of them, to compare every output with the local build.
RB_REMOTE=(--config=remote --remote_executor="$NL_ADDR" --remote_instance_name="$NL_INSTANCE" --remote_download_outputs=all)
# Compiles' .d files are left out: Bazel 7 keeps those of remote actions in
# memory only (--experimental_inmemory_dotd_files, on by default).
RB_SUMS_EXCLUDE=(! -name '*.d')

step "local reference build of //examples/... (the oracle)"
rb_local_reference "$WS_A" "$OB_LOCAL"
done_step

step "cold remote build of //examples/... (every spawn on the worker)"
rb_cold_remote "$WS_A" "$OB_R1"
execlog "$B7/cold.json" helper-inputs "kpack=$KPACK_SHA" "snapctl=$SNAPCTL_SHA" >&2 \
    || die "a helper action lacks the helper's digest among its inputs"
done_step

step "bazel test //examples/... remotely"
rb_remote_test "$WS_A" "$OB_R1"
rb_bazel "$WS_A" "$OB_R1" shutdown
done_step

step "second client (another directory, fresh output base): 100 % remote cache hits"
rb_second_client "$WS_B" "$OB_R2"
done_step

# The consumers' .bazelrc has no `remote` config: its two lines, spelled out.
E2E_REMOTE=(--spawn_strategy=remote,local --remote_local_fallback=false
    --remote_executor="$NL_ADDR" --remote_instance_name="$NL_INSTANCE")
HF=(--@rocpack//rules/bazel:kpack=@rocpack//rules/bazel/prebuilt:kpack
    --@rocpack//rules/bazel:snapctl=@rocpack//rules/bazel/prebuilt:snapctl)
step "consumer e2e/bazel-bzlmod (bazel_dep + local_path_override) remotely: build + test //..."
rb_run e2e-bzlmod "e2e/bazel-bzlmod remotely" "$WS_A/e2e/bazel-bzlmod" "$OB_E2E" test --config=debian7 "${HF[@]}" "${E2E_REMOTE[@]}" //...
execlog "$B7/e2e-bzlmod.json" summary >&2
execlog "$B7/e2e-bzlmod.json" remote "${RB_LOCAL_OK[@]}" || die "e2e/bazel-bzlmod: spawns ran locally"
rb_bazel "$WS_A/e2e/bazel-bzlmod" "$OB_E2E" shutdown
done_step

