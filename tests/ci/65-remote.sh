#!/usr/bin/env bash
# Remote execution (issue 26): rocpack's Bazel and Buck2 actions on a real
# Remote Execution API engine, NativeLink (../shared/tools/nativelink), run
# here as a server (CAS, action cache, scheduler) plus one worker process,
# both on 127.0.0.1 with ports and directories of this run only
# (tests/remote/lib.sh). docs/remote-execution.md explains the setup.
#
# Bazel 4.2.3, helpers = release binaries pinned by sha256 (a
# rocpack_release_binaries repository over a file:// tarball built here):
#  * local reference build of //examples/... (its outputs are the oracle);
#  * cold remote build: every spawn runs on the worker (execution log), the
#    outputs are byte-identical to the local ones; `bazel test` remotely;
#  * a second client (another copy of the repository in another directory,
#    a fresh output base): build + test are 100 % remote cache hits;
#  * hermeticity: the helpers' digests are inputs of every helper action;
#    an undeclared read fails on the worker (and succeeds locally: the probe
#    can fail); the action environment is exactly the declared one; no output
#    holds an absolute path of this run or the host name;
#  * the consumer workspace e2e/bazel-workspace remotely with helpers built
#    from source: the cargo build is the one local action (no-remote by
#    design), everything else remote;
#  * faults: the worker is SIGKILLed in the middle of a build (the build
#    retries on the restarted worker or fails cleanly; the next build is
#    correct); one byte of a CAS blob is flipped on the server's disk
#    (detected by digest, never an output).
# Bazel 7.x (the Debian sid chroot stage 55 caches; tests/remote/bazel7.sh,
# in a mount namespace of its own, with a worker inside the chroot):
#  * local reference build, cold remote build (every spawn remote, outputs
#    byte-identical), `bazel test`, a second client with 100 % cache hits;
#  * the bzlmod consumer e2e/bazel-bzlmod remotely.
# Buck2 (../shared/tools/buck2) with [buck2_re_client] and the
# remote-enabled platform rocpack//rules/buck2/remote:remote, helpers fetched
# by http_file (sha256-pinned) from a loopback HTTP server:
#  * cold build of //examples/...: every action remote (buck2 log what-ran),
#    kpack packages byte-identical to Bazel's; `buck2 test` remotely;
#  * `buck2 clean` and a second copy: everything served from the cache;
#  * the undeclared-read and environment probes.
# Every step prints its time.
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

NL_BIN="$ROCPACK_SHARED_DIR/tools/nativelink"
BUCK2_BIN="$ROCPACK_SHARED_DIR/tools/buck2"
if [ ! -x "$NL_BIN" ]; then
    printf '\n%s\n%s\n%s\n\n' \
        '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!' \
        '!!! SKIPPED: no NativeLink (../shared/tools/nativelink).             !!!' \
        '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!' >&2
    exit 0
fi
need_pkgs bazel-bootstrap zstd gcc g++ libc6-dev binutils python3 bc
export LC_ALL=C
. "$ROOT/tests/remote/lib.sh"

T="$(mktemp -d /tmp/rocpack-remote.XXXXXX)"
BASES=() HTTP_PID="" B2_DIRS=()
ISO=rocpack-remote
cleanup() {
    local rc=$?
    for b in "${BASES[@]}"; do bazel --output_base="$b" shutdown >/dev/null 2>&1 || true; done
    for d in "${B2_DIRS[@]}"; do (cd "$d" && "$BUCK2_BIN" --isolation-dir "$ISO" kill >/dev/null 2>&1; "$BUCK2_BIN" --isolation-dir "$ISO-local" kill >/dev/null 2>&1) || true; done
    [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null || true
    nl_stop
    if [ $rc -ne 0 ] && [ -n "${NL_DIR:-}" ]; then
        echo "--- nativelink worker log (tail) ---" >&2
        sed 's/\x1b\[[0-9;]*m//g' "$NL_DIR/worker.log" 2>/dev/null | grep -E 'ERROR|WARN' | tail -10 >&2 || true
    fi
    chmod -R u+w "$T" 2>/dev/null || true
    [ -n "${KEEP:-}" ] && echo "kept $T" >&2 || rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

STEP_T0=0
step() { STEP_NAME="$*"; log "$*"; STEP_T0=$(date +%s.%N); }
done_step() { printf '    [%s: %.1f s]\n' "$STEP_NAME" "$(echo "$(date +%s.%N) - $STEP_T0" | bc)" >&2; }
STAGE_T0=$(date +%s.%N)
# Bazel 4.2.3 in a workspace copy, one output base (server) per client.
rb_bazel() { local ws="$1" ob="$2"; shift 2; (cd "$ws" && bazel --output_base="$ob" "$@"); }
rb_bin() { echo "$1/execroot/rocpack/bazel-out/k8-fastbuild/bin"; }
RB_LOG="$T"
# add_split_undeclared BUILD_FILE: appends (Bazel and Buck2 alike) a second
# split of the example's gfx1151 shard that does not declare its symlink.
add_split_undeclared() {
    cat >> "$1" <<'EOB'

# Added by tests/ci/65-remote.sh: the same shard, its link not declared.
kpack_split(
    name = "split_undeclared",
    srcs = glob(["shards/gfx1151-build/blas_lib_gfx1151/**"]),
    artifact_prefix = "blas_lib",
    split_databases = ["rocblas"],
)
EOB
}

# ---------------------------------------------------------------------------
step "helpers: cargo build -p kpack -p snapctl (dev), release tarball pinned by sha256"
cargo fetch --locked
ci_helpers
REL="$T/release"
remote_release "$REL" "$KPACK_BIN" "$SNAPCTL_BIN"
echo "    tarball $REL_SHA; kpack $KPACK_SHA; snapctl $SNAPCTL_SHA" >&2
done_step

HELPERS=("${REMOTE_HELPERS[@]}")
RB_FLAGS=("${HELPERS[@]}")
WS_A="$T/a/rocpack"
WS_B="$T/elsewhere/clone-b/rocpack"
remote_copy_ws "$ROOT" "$WS_A" "$REL"
remote_copy_ws "$ROOT" "$WS_B" "$REL"
# One output base (one Bazel server) per client. (The local reference build
# cannot share the remote one under another --platform_suffix: the staging
# lists and .d files name the output directory.)
OB_LOCAL="$T/ob-local" OB_R1="$T/ob-remote-1" OB_R2="$T/ob-remote-2"
BASES+=("$OB_LOCAL" "$OB_R1" "$OB_R2")
LOCAL=(--platform_suffix=-local)

step "NativeLink server + worker on 127.0.0.1"
nl_init "$T/nativelink"
nl_start_server
nl_start_worker
echo "    $NL_ADDR (instance $NL_INSTANCE), worker API 127.0.0.1:$NL_WORKER_PORT, work dir $NL_WORK_DIR" >&2
REMOTE=(--config=remote --remote_executor="$NL_ADDR" --remote_instance_name="$NL_INSTANCE")
RB_REMOTE=("${REMOTE[@]}")
done_step

# ROCPACK_REMOTE_ONLY=buck2 runs only the Buck2 part (with the local Bazel
# reference below as its oracle), =bazel only the Bazel 4.2.3 + 7 parts,
# =bazel7 only the Bazel 7 part.
only="${ROCPACK_REMOTE_ONLY:-}"
# ---------------------------------------------------------------------------
if [ "$only" != bazel7 ]; then
step "Bazel: local reference build of //examples/... (the oracle)"
rb_local_reference "$WS_A" "$OB_LOCAL"
done_step
fi

if [ "$only" != buck2 ] && [ "$only" != bazel7 ]; then
step "Bazel: cold remote build of //examples/... (every spawn on the worker)"
rb_cold_remote "$WS_A" "$OB_R1"
BIN_R1="$(rb_bin "$OB_R1")"
done_step

step "Bazel: bazel test //examples/... remotely"
rb_remote_test "$WS_A" "$OB_R1"
done_step

step "Bazel: second client (another directory, fresh output base): 100 % remote cache hits"
rb_second_client "$WS_B" "$OB_R2"
done_step

# ---------------------------------------------------------------------------
step "hermeticity: helper digests in every helper action, probes on the worker, no paths in outputs"
# Every spawn whose command line runs kpack or snapctl.
execlog "$T/cold.json" helper-inputs "kpack=$KPACK_SHA" "snapctl=$SNAPCTL_SHA" >&2 \
    || die "a helper action lacks the helper's digest among its inputs"
probe() { # NAME strategy-args... ; prints the probe's output
    (cd "$WS_A" && bazel --output_base="$OB_R1" build "$@" "//tests/remote:probe_$1" >/dev/null 2>"$T/probe.err") || return 1
    cat "$BIN_R1/tests/remote/probe_$1.txt"
}
probe_remote() { local p="$1"; shift; (cd "$WS_A" && bazel --output_base="$OB_R1" build "${REMOTE[@]}" "$@" "//tests/remote:probe_$p" >/dev/null 2>"$T/probe.err") && cat "$BIN_R1/tests/remote/probe_$p.txt"; }
# Environment: exactly what the action declares (+ what bash sets itself).
env_out="$(probe_remote env)" || { cat "$T/probe.err" >&2; die "env probe"; }
names="$(printf '%s\n' "$env_out" | cut -d= -f1 | paste -sd' ' -)"
[ "$names" = "LC_ALL PATH PWD SHLVL _" ] || { printf '%s\n' "$env_out" >&2; die "remote action environment is not the declared one: $names"; }
echo "    remote action environment: $names (the worker's own variables do not leak)" >&2
# Working directory: nothing but the declared inputs (none here).
listing="$(probe_remote listing)" || { cat "$T/probe.err" >&2; die "listing probe"; }
[ -z "$listing" ] || { printf '%s\n' "$listing" >&2; die "the remote work directory holds undeclared files"; }
# An undeclared read: works locally (the execroot shows the workspace), fails remotely.
probe_remote undeclared >/dev/null && die "an undeclared read succeeded on the worker"
grep -q 'undeclared.txt: No such file' "$T/probe.err" || { cat "$T/probe.err" >&2; die "undeclared read failed otherwise"; }
(cd "$WS_A" && bazel --output_base="$OB_R1" build --spawn_strategy=local //tests/remote:probe_undeclared >/dev/null 2>"$T/probe.err") \
    || { cat "$T/probe.err" >&2; die "the undeclared-read probe fails locally too: it proves nothing"; }
echo "    undeclared read: fails on the worker, succeeds in a local unsandboxed execroot" >&2
# No absolute path of this run, no host name in any output.
host="$(hostname)"
for needle in "$T" "$WS_A" "$WS_B" "$NL_WORK_DIR" "$ROOT" "$HOME/" "$host"; do
    [ "${#needle}" -ge 4 ] || continue
    if (cd "$BIN_R1" && find -L examples -type f ! -path '*.runfiles/*' ! -name '*.runfiles_manifest' \
            ! -name MANIFEST -print0 | xargs -0 grep -l -F -- "$needle"); then
        die "outputs contain '$needle'"
    fi
done
echo "    no output names this run's directories, the worker's work dir, \$HOME or the host ($host)" >&2
done_step

# ---------------------------------------------------------------------------
step "source symlinks (librocblas.so.5 -> librocblas.so.5.2): local == remote, declared links stay links"
# The copies above hold the files symlinks point to. Here the checkout as it
# is, links and all. Bazel digests a source symlink as its target: that an
# input is a link is in no action key, and the worker only gets the bytes.
# So kpack_split stages only *declared* links as links (`symlinks`, made by
# the action from a list that is an input); an undeclared source link is
# staged as the file it points to, locally as remotely (with a note
# locally). Both kinds, built locally and remotely, must give the same tree.
WS_S="$T/symlinks/rocpack"; OB_S="$T/ob-symlinks"; BASES+=("$OB_S")
remote_copy_ws "$ROOT" "$WS_S" "$REL" keep-symlinks
[ -L "$WS_S/examples/kpack/shards/gfx1151-build/blas_lib_gfx1151/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5" ] \
    || die "the copy lost the example's symlink"
add_split_undeclared "$WS_S/examples/kpack/BUILD.bazel"
link_targets=(//examples/kpack:split_gfx1151-build //examples/kpack:split_undeclared)
(cd "$WS_S" && bazel --output_base="$OB_S" build "${HELPERS[@]}" "${LOCAL[@]}" "${link_targets[@]}" 2>"$T/links.err" \
    && bazel --output_base="$OB_S" build "${HELPERS[@]}" "${REMOTE[@]}" --execution_log_json_file="$T/links.json" \
        "${link_targets[@]}" 2>>"$T/links.err") \
    || { tail -20 "$T/links.err" >&2; die "builds of ${link_targets[*]}"; }
execlog "$T/links.json" remote >/dev/null || die "the link builds did not run remotely"
grep -q 'rocpack: note: .*librocblas.so.5 is a symlink in the source tree' "$T/links.err" \
    || { tail -20 "$T/links.err" >&2; die "no note for the undeclared link in the local build"; }
tree_list() { (cd "$OB_S/execroot/rocpack/bazel-out/$1/bin/examples/kpack/$2.split" \
    && find . -printf '%y %s %p %l\n' | sort -k3; find . -type f -print0 | sort -z | xargs -0 sha256sum); }
lib=./blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5
for t in split_gfx1151-build split_undeclared; do
    diff <(tree_list k8-fastbuild-local "$t") <(tree_list k8-fastbuild "$t") >&2 \
        || die "$t: the local (<) and the remote (>) split differ"
done
tree_list k8-fastbuild split_gfx1151-build | grep -x "l [0-9]* $lib librocblas.so.5.2" >/dev/null \
    || { tree_list k8-fastbuild split_gfx1151-build | grep 'librocblas' >&2; die "the declared link is not a link in the split"; }
tree_list k8-fastbuild split_undeclared | grep "^f [0-9]* $lib \$" >/dev/null \
    || { tree_list k8-fastbuild split_undeclared | grep 'librocblas' >&2; die "the undeclared link is not a regular file in the split"; }
k_decl="$(stat -c %s "$OB_S/execroot/rocpack/bazel-out/k8-fastbuild/bin/examples/kpack/split_gfx1151-build.split/blas_lib_gfx1151/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1151.kpack")"
k_undecl="$(stat -c %s "$OB_S/execroot/rocpack/bazel-out/k8-fastbuild/bin/examples/kpack/split_undeclared.split/blas_lib_gfx1151/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1151.kpack")"
echo "    declared link: a link locally and remotely (.kpack $k_decl B); undeclared: a copy both ways (.kpack $k_undecl B), noted locally" >&2
(cd "$WS_S" && bazel --output_base="$OB_S" shutdown)
done_step

# ---------------------------------------------------------------------------
step "faults: the worker is killed in the middle of a build, then restarted"
# --noremote_accept_cached: everything executes again (a build that is all
# cache hits has nothing to kill). probe_slow runs 4 s, so the kill lands
# while an action is on the worker.
(cd "$WS_A" && timeout 300 bazel --output_base="$OB_R1" build "${HELPERS[@]}" "${REMOTE[@]}" --noremote_accept_cached \
    --execution_log_json_file="$T/kill.json" //examples/... //tests/remote:probe_slow >"$T/kill.out" 2>&1) &
BUILD_PID=$!
for _ in $(seq 600); do
    [ -n "$(ls -A "$NL_WORK_DIR" 2>/dev/null)" ] && break
    sleep 0.05
done
running="$(ls -A "$NL_WORK_DIR" | wc -l)"
[ "$running" -gt 0 ] || die "no action reached the worker within 30 s"
nl_kill_worker
echo "    worker SIGKILLed with $running action(s) in its work directory" >&2
sleep 2
nl_start_worker
kill_rc=0; wait "$BUILD_PID" || kill_rc=$?
if [ "$kill_rc" = 0 ]; then
    echo "    the build completed: the scheduler re-queued the lost action(s) on the restarted worker" >&2
elif [ "$kill_rc" = 124 ]; then
    tail -20 "$T/kill.out" >&2; die "the build hung after the worker died"
else
    grep -E '^ERROR' "$T/kill.out" | head -3 >&2
    echo "    the build failed cleanly (rc $kill_rc)" >&2
fi
(cd "$WS_A" && bazel --output_base="$OB_R1" build "${HELPERS[@]}" "${REMOTE[@]}" //examples/... //tests/remote:probe_slow 2>"$T/after.err") \
    || { tail -20 "$T/after.err" >&2; die "the build after the worker restart failed"; }
rb_outputs_sums "$BIN_R1" > "$T/sums.after"
diff -u "$T/sums.local" "$T/sums.after" >&2 || die "outputs after the worker crash differ"
[ "$(cat "$BIN_R1/tests/remote/probe_slow.txt")" = done ] || die "probe_slow output wrong"
echo "    next build: outputs identical to the local build" >&2
done_step

step "faults: one byte of a CAS blob flipped on the server's disk"
# The blob of a .kpack output (its sha256 from the local build); a third
# client with a fresh output base must download it.
victim_line="$(grep '\.kpack$' "$T/sums.local" | head -1)"
victim_sha="${victim_line%% *}"; victim_path="${victim_line##* }"
blob="$(find "$NL_CAS_DIR" -type f -name "*$victim_sha*" | head -1)"
[ -n "$blob" ] || { ls "$NL_CAS_DIR" | head >&2; die "blob $victim_sha ($victim_path) not in the server's CAS"; }
cp "$blob" "$T/blob.orig"
python3 - "$blob" <<'EOF'
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(0, 2); n = f.tell(); f.seek(n // 2); b = f.read(1); f.seek(n // 2)
    f.write(bytes([b[0] ^ 0x01]))
EOF
cmp -s "$blob" "$T/blob.orig" && die "the byte flip did not change the blob"
c_rc=0
# The first client's outputs go (bazel clean): they must come back from the cache.
(cd "$WS_A" && bazel --output_base="$OB_R1" clean)
(cd "$WS_A" && timeout 300 bazel --output_base="$OB_R1" build "${HELPERS[@]}" "${REMOTE[@]}" //examples/... >"$T/corrupt.out" 2>&1) || c_rc=$?
[ "$c_rc" != 124 ] || die "the build hung on a corrupted blob"
BIN_R3="$BIN_R1"
if [ "$c_rc" = 0 ]; then
    echo "    the build succeeded (the corrupted blob was re-made or refetched)" >&2
else
    grep -iE 'digest|hash|mismatch|corrupt' "$T/corrupt.out" | head -3 >&2
    grep -qiE 'digest|hash|mismatch|corrupt' "$T/corrupt.out" || { tail -20 "$T/corrupt.out" >&2; die "failed without naming the digest"; }
    echo "    detected: the build failed on the digest mismatch (rc $c_rc)" >&2
fi
# Whatever exists in the third client's output tree must be correct bytes.
if [ -d "$BIN_R3/examples" ]; then
    rb_outputs_sums "$BIN_R3" > "$T/sums.r3"
    bad="$(join -1 2 -2 2 <(sort -k2 "$T/sums.local") <(sort -k2 "$T/sums.r3") | awk '$2 != $3 {print $1}')"
    [ -z "$bad" ] || die "corrupted bytes became outputs: $bad"
    ! grep -q " $victim_path\$" "$T/sums.r3" || grep -q "^$victim_sha  $victim_path\$" "$T/sums.r3" \
        || die "the corrupted blob became $victim_path"
    echo "    $(wc -l < "$T/sums.r3") outputs present, all with the right bytes" >&2
fi
cp "$T/blob.orig" "$blob"
done_step

# ---------------------------------------------------------------------------
step "e2e/bazel-workspace remotely, helpers built from source (the cargo build is the one local action)"
E2E_WS="$WS_A/e2e/bazel-workspace"
(cd "$E2E_WS" && bazel test --spawn_strategy=remote,local --remote_local_fallback=false \
    --remote_executor="$NL_ADDR" --remote_instance_name="$NL_INSTANCE" \
    --@rocpack//rules/bazel:cargo_target_dir="$ROOT/target" --@rocpack//rules/bazel:cargo_profile=dev \
    --execution_log_json_file="$T/e2e.json" //... 2>"$T/e2e.err") \
    || { tail -30 "$T/e2e.err" >&2; die "e2e/bazel-workspace remotely"; }
execlog "$T/e2e.json" summary >&2
execlog "$T/e2e.json" remote "${RB_LOCAL_OK[@]}" --local-ok "CargoBuild=cargo needs the host's ~/.cargo registry and toolchain (no-remote by design)" \
    || die "e2e/bazel-workspace: spawns other than CargoBuild ran locally"
(cd "$E2E_WS" && bazel shutdown)
done_step

fi  # Bazel 4.2.3 part

# ---------------------------------------------------------------------------
if [ "$only" = "" ] || [ "$only" = bazel ] || [ "$only" = bazel7 ]; then
SID_CHROOT="${ROCPACK_SID_CHROOT:-/var/tmp/rocpack-sid}"
if [ "${ROCPACK_BAZEL7:-1}" = 0 ] || [ "$(id -u)" -ne 0 ] || [ ! -f "$SID_CHROOT/.rocpack-ready" ] \
        || [ ! -x "$SID_CHROOT/usr/bin/bazel" ]; then
    printf '\n!!! SKIPPED: Bazel 7 remote part: needs root and the sid chroot of stage 55 (%s) !!!\n\n' "$SID_CHROOT" >&2
else
step "Bazel 7.x remotely (tests/remote/bazel7.sh: sid chroot, its own worker)"
# The chroot gets a worker of its own (the remote image = the client's, as
# for the local reference build); the host worker pauses meanwhile.
nl_kill_worker
ROOT="$ROOT" CHROOT="$SID_CHROOT" T="$T" NL_DIR="$NL_DIR" NL_PORT="$NL_PORT" NL_WORKER_PORT="$NL_WORKER_PORT" \
    NL_ADDR="$NL_ADDR" NL_INSTANCE="$NL_INSTANCE" REL="$REL" REL_SHA="$REL_SHA" KPACK_SHA="$KPACK_SHA" SNAPCTL_SHA="$SNAPCTL_SHA" \
    unshare --mount --propagation private bash "$ROOT/tests/remote/bazel7.sh" || die "Bazel 7 remote part"
nl_start_worker
done_step
fi
fi

# ---------------------------------------------------------------------------
if [ "$only" = bazel ] || [ "$only" = bazel7 ]; then
    log "Buck2 part not run (ROCPACK_REMOTE_ONLY=bazel)"
elif [ ! -x "$BUCK2_BIN" ]; then
    log "SKIPPED Buck2 part: no ../shared/tools/buck2"
else
step "Buck2: cold remote build of //examples/... (helpers by http_file, sha256-pinned, from a loopback server)"
http_serve "$REL/stage" "$T/http.log" || die "the loopback HTTP server did not start"
b2_config() { # WS
    cp "$1/tests/remote/buck2-probes.BUCK" "$1/tests/remote/BUCK"
    # Appended to the copy's .buckconfig: the RE client is set up when the
    # daemon starts, from the project's config (not from --config-file).
    # SHA256, not the project's BLAKE3: NativeLink 1.6.6 answers an action
    # whose output is a directory with a Tree buck2 rejects under BLAKE3
    # ("Converting RE::Tree to Directory, dir \`root directory\` has child
    # \`blas_lib_generic\` not in tree.children").
    cat >> "$1/.buckconfig" <<EOF

[buck2]
  digest_algorithms = SHA256

[buck2_re_client]
  engine_address = $NL_ADDR
  action_cache_address = $NL_ADDR
  cas_address = $NL_ADDR
  tls = false
  instance_name = $NL_INSTANCE
EOF
    B2_DIRS+=("$1")
}
# Per-command settings (-c reaches every cell; the toolchains cell does not
# read the root .buckconfig): the remote platform, the pinned helpers.
B2CFG=(-c build.execution_platforms=rocpack//rules/buck2/remote:remote -c rocpack.tools=prebuilt
    -c "rocpack.kpack_url=http://127.0.0.1:$HTTP_PORT/kpack" -c "rocpack.kpack_sha256=$KPACK_SHA"
    -c "rocpack.snapctl_url=http://127.0.0.1:$HTTP_PORT/snapctl" -c "rocpack.snapctl_sha256=$SNAPCTL_SHA")
b2() { "$BUCK2_BIN" --isolation-dir "$ISO" "$@"; }
b2c() { local sub="$1"; shift; b2 "$sub" "${B2CFG[@]}" "$@"; }
# "executor count" of the last command (build, test): re, cache, local, ...
what_ran() { # OUT
    local i
    for i in 1 2 3 4 5; do
        b2 log what-ran --format json >"$1" 2>/dev/null && return 0
        sleep 1
    done
    return 1
}
# Counts per executor; local actions are "local-ok" when they are links of
# the prelude's system_cxx_toolchain (link_binaries_locally and
# link_libraries_locally are hard-coded True there), else "local".
executors() { python3 -c '
import json, sys
c = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line: continue
    o = json.loads(line)
    r = o.get("reproducer", {}).get("executor", "?").lower()
    if r == "local" and "(cxx_link" in o.get("identity", ""):
        r = "local-ok"
    # The prelude sh_test takes its executor from its own remote_execution
    # attribute, not from the platform: examples/kpack:packages_test runs
    # locally. (rocpack'"'"'s stable_checksums_test goes to RE.) source_snapshot'"'"'s
    # rcl_check_test is local only by design (it reads trees that are not inputs).
    if r == "local" and o.get("reason") == "test.run" and o.get("identity") in ("packages_test", "rcl_check_test"):
        r = "local-ok"
    if r.startswith("local"):
        print("      " + r + ": " + o.get("reason", "") + " " + o.get("identity", ""), file=sys.stderr)
    c[r] = c.get(r, 0) + 1
print(" ".join(f"{k}={v}" for k, v in sorted(c.items())))' "$1"; }
# b2_ran NAME WHAT ARGS...: `b2c ARGS...`, its stdout and stderr in
# $T/NAME.out and .err (dies with WHAT when it fails); then ex = the
# executor counts of what it ran.
b2_ran() {
    local name="$1" what="$2"
    shift 2
    b2c "$@" >"$T/$name.out" 2>"$T/$name.err" || { tail -30 "$T/$name.err" >&2; die "$what"; }
    what_ran "$T/$name.ran" || die "buck2 log what-ran ($what)"
    ex="$(executors "$T/$name.ran")"
}
b2_config "$WS_A"
b2_config "$WS_B"
cd "$WS_A"
b2_ran b2-cold "buck2 remote build" build //examples/...
grep -E '^(\[.*\] )?(Commands|Cache hits):' "$T/b2-cold.err" >&2 || true
echo "    executors: $ex" >&2
case " $ex " in *" re="*) ;; *) die "no action ran remotely: $ex" ;; esac
case " $ex " in *" local="*) die "actions ran locally: $ex" ;; esac
done_step

step "Buck2: kpack packages byte-identical to Bazel's local ones"
b2c build //examples/kpack:blas_lib_generic //examples/kpack:blas_lib_gfx110X \
    //examples/kpack:blas_lib_gfx115X //examples/kpack:blas_lib_gfx120X --show-full-output >"$T/b2-out.out" 2>"$T/b2-out.err" \
    || { tail -20 "$T/b2-out.err" >&2; die "buck2 build of the kpack packages"; }
listing() { (cd "$1" && find . -mindepth 1 -printf '%P %y %l\n' | sort; find -L . -type f -print0 | sort -z | xargs -0 -r sha256sum); }
compared=0
while read -r target path; do
    name="${target##*:}"
    diff <(listing "$OB_LOCAL/execroot/rocpack/bazel-out/k8-fastbuild/bin/examples/kpack/$name") <(listing "$path") >&2 \
        || die "$target (remote, Buck2) differs from Bazel's local $name"
    compared=$((compared + 1))
done < <(grep '^rocpack//examples/kpack:' "$T/b2-out.out")
[ "$compared" = 4 ] || die "compared $compared packages, expected 4"
echo "    4 packages identical" >&2
done_step

step "Buck2: buck2 test //examples/... remotely"
# Without this flag buck2 runs every test locally. rocpack's
# stable_checksums_test is RE-compatible as it is (runs from the project
# root, relative paths: --unstable-allow-compatible-tests-on-re suffices);
# the prelude's sh_test (examples/kpack:packages_test) is not marked so, and
# --unstable-allow-all-tests-on-re runs it from the root too.
# examples/rcclx_source:rcl_check_test (source_snapshot's check test) reads
# the snapshot trees, which are not inputs (the snapshots root is ignored,
# each channel a cell): its executor is local only, as Bazel tags it local.
b2_ran b2-test "buck2 test remotely" test //examples/kpack:packages_test //examples/rcclx:stable_checksums_test \
    //examples/rcclx_source:rcl_check_test --unstable-allow-all-tests-on-re
grep -E 'Pass [0-9]+|Tests finished' "$T/b2-test.err" >&2 || true
grep -q 'Fail 0' "$T/b2-test.err" || die "buck2 test reported failures"
echo "    executors: $ex" >&2
case " $ex " in *" local="*) die "test actions ran locally: $ex" ;; esac
case " $ex " in *" re="*) ;; *) die "no test ran remotely: $ex" ;; esac
done_step

step "Buck2: buck2 clean, then a second copy: everything from the cache"
b2 clean >/dev/null 2>&1
b2_ran b2-warm "buck2 build after clean" build //examples/...
echo "    after buck2 clean: $ex (local-ok: the prelude's links, never sent to RE nor cached)" >&2
case " $ex " in *" re="*|*" local="*) die "after buck2 clean, actions executed: $ex" ;; esac
b2 kill >/dev/null 2>&1 || true
cd "$WS_B"
b2_ran b2-b "buck2 build in the second copy" build //examples/...
echo "    second copy ($WS_B): $ex" >&2
case " $ex " in *" re="*|*" local="*) die "second copy: actions executed: $ex" ;; esac
done_step

step "Buck2: probes (environment, undeclared read) on the worker"
b2c build //tests/remote:probe_env //tests/remote:probe_listing --show-full-output \
    >"$T/b2-probe.out" 2>"$T/b2-probe.err" || { tail -20 "$T/b2-probe.err" >&2; die "buck2 probes"; }
env_file="$(awk '$1 == "rocpack//tests/remote:probe_env" {print $2}' "$T/b2-probe.out")"
names="$(cut -d= -f1 "$env_file" | paste -sd' ' -)"
[ "$names" = "BUCK_SCRATCH_PATH LC_ALL PATH PWD" ] || { cat "$env_file" >&2; die "buck2 remote environment: $names"; }
list_file="$(awk '$1 == "rocpack//tests/remote:probe_listing" {print $2}' "$T/b2-probe.out")"
[ ! -s "$list_file" ] || { cat "$list_file" >&2; die "buck2: the remote work directory holds undeclared files"; }
if b2c build //tests/remote:probe_undeclared >/dev/null 2>"$T/b2-und.err"; then
    die "buck2: an undeclared read succeeded on the worker"
fi
grep -q 'undeclared.txt: No such file' "$T/b2-und.err" || { tail -20 "$T/b2-und.err" >&2; die "buck2 undeclared read failed otherwise"; }
echo "    environment: $names; work dir empty; undeclared read fails remotely" >&2
b2 kill >/dev/null 2>&1 || true
done_step

step "Buck2: source symlinks on the real tree, declared and undeclared, local and remote"
# As for Bazel: the example's kpack_split declares librocblas.so.5 ->
# librocblas.so.5.2 (a kpack_split_links action makes it); a second split of
# the same shard does not. Each built locally (its own isolation dir, the
# default platform) and remotely must give the same tree.
WS_S2="$T/symlinks-b2/rocpack"
remote_copy_ws "$ROOT" "$WS_S2" "$REL" keep-symlinks
b2_config "$WS_S2"
add_split_undeclared "$WS_S2/examples/kpack/BUCK"
cd "$WS_S2"
B2TOOLS=("${B2CFG[@]:2}")
link_targets=(//examples/kpack:split_gfx1151-build //examples/kpack:split_undeclared)
"$BUCK2_BIN" --isolation-dir "$ISO-local" build "${B2TOOLS[@]}" "${link_targets[@]}" --show-full-output \
    >"$T/b2-links-local.out" 2>"$T/b2-links-local.err" || { tail -20 "$T/b2-links-local.err" >&2; die "buck2 local build of the link targets"; }
b2c build "${link_targets[@]}" --show-full-output >"$T/b2-links-remote.out" 2>"$T/b2-links-remote.err" \
    || { tail -20 "$T/b2-links-remote.err" >&2; die "buck2 remote build of the link targets"; }
"$BUCK2_BIN" --isolation-dir "$ISO-local" kill >/dev/null 2>&1 || true
tree_of() { awk -v t="rocpack$2" '$1 == t {print $2}' "$1"; }
b2_links_diff=""
for t in "${link_targets[@]}"; do
    l="$(tree_of "$T/b2-links-local.out" "$t")" r="$(tree_of "$T/b2-links-remote.out" "$t")"
    [ -d "$l" ] && [ -d "$r" ] || die "no output tree for $t (local '$l', remote '$r')"
    find "$l" "$r" -name librocblas.so.5 -printf "    $t: %y %p %l\n" | sed "s|$T/||" >&2
    diff <(listing "$l") <(listing "$r") >"$T/b2-links.diff" || b2_links_diff="$b2_links_diff $t"
done
[ -z "$b2_links_diff" ] || { cat "$T/b2-links.diff" >&2; die "buck2: local and remote splits differ:$b2_links_diff"; }
echo "    local == remote for the declared and the undeclared link" >&2
b2 kill >/dev/null 2>&1 || true
cd "$ROOT"
done_step
fi

printf '\n==> remote stage passed in %.0f s\n' "$(echo "$(date +%s.%N) - $STAGE_T0" | bc)" >&2
