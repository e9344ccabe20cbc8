# Remote-execution helpers for tests/ci/65-remote.sh and bench/remote.sh. Source it.
# NativeLink on loopback:
#
# Two processes, as a real deployment has them:
#   server: CAS + action cache on disk, scheduler, frontend (CAS, AC,
#           execution, capabilities, bytestream) for instance "main" and "";
#   worker: one local worker with its own fast CAS (hard links into the work
#           directory) over the server's CAS, registered with the scheduler.
# So the worker can be killed and restarted while the server keeps its data.
# Ports are picked free at start; every path is under $NL_DIR, which the
# caller owns (nothing under /tmp/rocpack-nativelink, the handed-over
# config's fixed place, so two stages or a developer's NativeLink never
# collide). The worker's work directory holds nothing but the actions'
# inputs: an undeclared read fails there.
#
#   nl_init DIR          choose ports, write DIR/server.json5 + DIR/worker.json5
#   nl_worker_config FILE DIR
#                        write a worker config whose directories are under DIR
#   nl_start_server      start the server, wait until its port answers
#   nl_start_worker      start the worker, wait until it registered
#   nl_spawn_worker LOG CMD...
#                        start a worker by CMD (e.g. in a chroot), wait until it registered
#   nl_kill_worker       SIGKILL the worker (a crash, no goodbye)
#   nl_stop              stop both (also from an EXIT trap)
# Afterwards: NL_ADDR=grpc://127.0.0.1:PORT, NL_INSTANCE=main,
# NL_CAS_DIR (the server's CAS content directory), NL_WORK_DIR.

NL_BIN="${NL_BIN:-${ROCPACK_SHARED_DIR:-}/tools/nativelink}"
# Where $NL_BIN (a wrapper) unpacks the real nativelink binary.
NL_CACHE="${ROCPACK_NATIVELINK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocpack-nativelink-1.6.6}"
NL_SERVER_PID="" NL_WORKER_PID=""

_nl_port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A port pair below the kernel's ephemeral range (NativeLink's ports are
# fixed in its config, so the kernel cannot pick them): a port there is
# never handed to an outgoing connection between the probe and the bind.
_nl_pick_port() {
    local p lo=32768
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
    [ "$lo" -gt 12000 ] || lo=32768
    for _ in $(seq 100); do
        p=$(( 10000 + RANDOM % (lo - 10002) ))
        _nl_port_free "$p" && _nl_port_free $((p + 1)) && { echo "$p"; return 0; }
    done
    return 1
}

nl_init() {
    NL_DIR="$1"
    mkdir -p "$NL_DIR"
    NL_DIR="$(cd "$NL_DIR" && pwd)"
    NL_PORT="$(_nl_pick_port)" || { echo "nativelink: no free port" >&2; return 1; }
    NL_WORKER_PORT=$((NL_PORT + 1))
    NL_ADDR="grpc://127.0.0.1:$NL_PORT"
    NL_INSTANCE=main
    NL_CAS_DIR="$NL_DIR/server/cas"
    NL_WORK_DIR="$NL_DIR/worker/work"
    mkdir -p "$NL_DIR/server"
    cat > "$NL_DIR/server.json5" <<EOF
// rocpack's NativeLink server for tests (tests/remote/lib.sh writes it):
// CAS + action cache on disk, a simple scheduler, no worker of its own.
{
  stores: [
    { name: "AC", filesystem: { content_path: "$NL_DIR/server/ac", temp_path: "$NL_DIR/server/ac-tmp",
                                eviction_policy: { max_bytes: 2000000000 } } },
    { name: "CAS", filesystem: { content_path: "$NL_CAS_DIR", temp_path: "$NL_DIR/server/cas-tmp",
                                 eviction_policy: { max_bytes: 10000000000 } } },
  ],
  schedulers: [
    { name: "SCHED", simple: {
        supported_platform_properties: { cpu_count: "minimum", OSFamily: "priority", "container-image": "priority" },
        // A worker that stops answering is dropped after 10 s and its
        // actions go back to the queue (a retry on another, or the restarted, worker).
        worker_timeout_s: 10,
        max_job_retries: 3,
    } },
  ],
  servers: [
    { name: "frontend",
      listener: { http: { socket_address: "127.0.0.1:$NL_PORT" } },
      services: {
        cas: [{ instance_name: "main", cas_store: "CAS" }, { instance_name: "", cas_store: "CAS" }],
        ac: [{ instance_name: "main", ac_store: "AC" }, { instance_name: "", ac_store: "AC" }],
        execution: [{ instance_name: "main", cas_store: "CAS", scheduler: "SCHED" },
                    { instance_name: "", cas_store: "CAS", scheduler: "SCHED" }],
        capabilities: [{ instance_name: "main", remote_execution: { scheduler: "SCHED" } },
                       { instance_name: "", remote_execution: { scheduler: "SCHED" } }],
        bytestream: [{ instance_name: "main", cas_store: "CAS" }, { instance_name: "", cas_store: "CAS" }],
        health: {},
      } },
    { name: "workers",
      listener: { http: { socket_address: "127.0.0.1:$NL_WORKER_PORT" } },
      services: { worker_api: { scheduler: "SCHED" }, health: {} } },
  ],
  global: { max_open_files: 4096 },
}
EOF
    nl_worker_config "$NL_DIR/worker.json5" "$NL_DIR/worker"
}

# nl_worker_config FILE DIR: a worker registering with this server (NL_PORT,
# NL_WORKER_PORT), its CAS and work directory under DIR.
nl_worker_config() {
    mkdir -p "$2/work"
    cat > "$1" <<EOF
// rocpack's NativeLink worker for tests: its fast CAS is local (the worker
// hard-links inputs from it into the work directory), the slow one is the
// server's CAS over gRPC; results go to the server's action cache.
{
  stores: [
    { name: "SERVER_CAS", grpc: { instance_name: "main", store_type: "cas",
                                  endpoints: [{ address: "grpc://127.0.0.1:$NL_PORT" }] } },
    { name: "SERVER_AC", grpc: { instance_name: "main", store_type: "ac",
                                 endpoints: [{ address: "grpc://127.0.0.1:$NL_PORT" }] } },
    { name: "WORKER_CAS", fast_slow: {
        fast: { filesystem: { content_path: "$2/cas", temp_path: "$2/cas-tmp",
                              eviction_policy: { max_bytes: 5000000000 } } },
        slow: { ref_store: { name: "SERVER_CAS" } } } },
  ],
  workers: [
    { local: {
        worker_api_endpoint: { uri: "grpc://127.0.0.1:$NL_WORKER_PORT" },
        cas_fast_slow_store: "WORKER_CAS",
        upload_action_result: { ac_store: "SERVER_AC" },
        // What a worker image provides: Buck2's prelude runs gcc and python3
        // without a PATH of its own (Bazel's actions declare theirs).
        additional_environment: { PATH: { value: "/usr/bin:/bin" } },
        work_directory: "$2/work",
        platform_properties: {
          cpu_count: { values: ["2"] },
          OSFamily: { values: [""] },
          "container-image": { values: [""] },
        },
    } },
  ],
  servers: [],
  global: { max_open_files: 4096 },
}
EOF
}

_nl_wait_port() { # PORT PID LOG
    local i
    for i in $(seq 200); do
        kill -0 "$2" 2>/dev/null || { tail -20 "$3" >&2; echo "nativelink exited (log $3)" >&2; return 1; }
        _nl_port_free "$1" || return 0
        sleep 0.05
    done
    echo "nativelink: port $1 not open after 10 s" >&2; return 1
}

nl_start_server() {
    [ -x "$NL_BIN" ] || { echo "nativelink: no binary at $NL_BIN" >&2; return 1; }
    "$NL_BIN" "$NL_DIR/server.json5" >>"$NL_DIR/server.log" 2>&1 &
    NL_SERVER_PID=$!
    _nl_wait_port "$NL_PORT" "$NL_SERVER_PID" "$NL_DIR/server.log"
}

nl_start_worker() {
    # The worker's environment is what actions see of the host beyond their
    # own variables: keep it to PATH (a marker variable proves no leak).
    nl_spawn_worker "$NL_DIR/worker.log" env -i PATH=/usr/bin:/bin HOME="$NL_DIR/worker" ROCPACK_WORKER_ENV_MARKER=leaked \
        ROCPACK_NATIVELINK_CACHE="$NL_CACHE" "$NL_BIN" "$NL_DIR/worker.json5"
}

# nl_spawn_worker LOG CMD...: CMD in the background, its output appended to
# LOG; returns once LOG says it registered with the scheduler (one more time
# than before), 1 when it exits or has not registered within 10 s.
nl_spawn_worker() {
    local log="$1" n0 n i
    shift
    n0="$(grep -c 'Worker registered with scheduler' "$log" 2>/dev/null || true)"; n0="${n0:-0}"
    "$@" >>"$log" 2>&1 &
    NL_WORKER_PID=$!
    for i in $(seq 200); do
        kill -0 "$NL_WORKER_PID" 2>/dev/null || { tail -20 "$log" >&2; echo "nativelink: the worker exited (log $log)" >&2; return 1; }
        n="$(grep -c 'Worker registered with scheduler' "$log" 2>/dev/null || true)"
        [ "${n:-0}" -gt "$n0" ] && return 0
        sleep 0.05
    done
    echo "nativelink: worker did not register in 10 s (logs $NL_DIR/server.log, $log)" >&2; return 1
}

nl_kill_worker() {
    [ -n "$NL_WORKER_PID" ] || return 0
    kill -9 "$NL_WORKER_PID" 2>/dev/null || true
    wait "$NL_WORKER_PID" 2>/dev/null || true
    NL_WORKER_PID=""
}

nl_stop() {
    nl_kill_worker
    if [ -n "$NL_SERVER_PID" ]; then
        kill "$NL_SERVER_PID" 2>/dev/null || true
        wait "$NL_SERVER_PID" 2>/dev/null || true
        NL_SERVER_PID=""
    fi
}

# --- helpers as a release, workspace copies --------------------------------
# remote_release DIR KPACK SNAPCTL: stripped helpers in DIR/stage and the
# release tarball DIR/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz (bytes
# independent of time and owner). Sets REL_SHA, KPACK_SHA, SNAPCTL_SHA.
remote_release() {
    local dir="$1"
    mkdir -p "$dir/stage"
    strip --strip-debug -o "$dir/stage/kpack" "$2"
    strip --strip-debug -o "$dir/stage/snapctl" "$3"
    chmod 0755 "$dir/stage/kpack" "$dir/stage/snapctl"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$dir/stage" \
        -czf "$dir/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz" kpack snapctl
    REL_SHA="$(sha256sum "$dir/rocpack-0.1.0-x86_64-unknown-linux-gnu.tar.gz" | cut -c1-64)"
    KPACK_SHA="$(sha256sum "$dir/stage/kpack" | cut -c1-64)"
    SNAPCTL_SHA="$(sha256sum "$dir/stage/snapctl" | cut -c1-64)"
}

# remote_copy_ws SRC DEST RELDIR [keep-symlinks]: a copy of the checkout SRC
# at DEST (a second copy in another directory stands for a fresh clone
# elsewhere: its paths differ, its action keys must not) whose WORKSPACE
# declares @rocpack_remote_bin, the release of RELDIR pinned by REL_SHA. The
# rules take it through REMOTE_HELPERS (the kpack/snapctl label_flags).
# Symlinks are copied as the files they point to unless "keep-symlinks" is
# given: Bazel digests a source symlink's target, so whether an input is a
# link is not part of any action key, and a remote worker gets a regular
# file. Actions that look at it (kpack split through stage.sh --link-inputs
# keeps librocblas.so.5 -> librocblas.so.5.2 locally) cannot give the same
# output remotely; tests/ci/65-remote.sh shows that gap on its own.
REMOTE_HELPERS=(--//rules/bazel:kpack=@rocpack_remote_bin//:kpack --//rules/bazel:snapctl=@rocpack_remote_bin//:snapctl)
remote_copy_ws() {
    local deref=(--dereference)
    [ "${4:-}" = keep-symlinks ] && deref=()
    mkdir -p "$2"
    # Bazel's convenience links (bazel-bin, bazel-<dir>, …) anywhere in the
    # tree, e.g. those stage 50 leaves in e2e/bazel-workspace: dereferenced,
    # they lead back into the checkout through external/rocpack, endlessly.
    local links
    links="$(mktemp)"
    (cd "$1" && find . -path ./.git -prune -o -type l -name 'bazel-*' -print) >"$links"
    tar -C "$1" "${deref[@]}" --exclude-from="$links" --exclude='./bazel-*' --exclude=./target --exclude=./.git --exclude=./buck-out \
        --exclude=./tools/fuzz --exclude='./bench/*.tmp' -cf - . | tar -C "$2" -xf -
    rm -f "$links"
    cat >> "$2/WORKSPACE" <<EOT

# Added by tests/remote/lib.sh: kpack + snapctl release binaries pinned by sha256.
load("//rules/bazel:repositories.bzl", "rocpack_release_binaries")

rocpack_release_binaries(
    name = "rocpack_remote_bin",
    base_urls = ["file://$3"],
    sha256 = {"x86_64-unknown-linux-gnu": "$REL_SHA"},
    version = "0.1.0",
)
EOT
}

# --- Bazel on the engine: the checks of stage 65 (Bazel 4.2.3) and of
# tests/remote/bazel7.sh (Bazel 7) ------------------------------------------
# The caller defines rb_bazel WS OUTPUT_BASE ARGS... (its Bazel, run in WS),
# rb_bin OUTPUT_BASE (that output base's bazel-bin) and die, and sets RB_LOG
# (directory of the execution logs, stderr files and sums), RB_FLAGS (flags
# of every build: the helpers), RB_REMOTE (the remote-execution flags) and
# RB_SUMS_EXCLUDE (more `find` tests for outputs not compared, may be empty).
# Each function is one step; sums.local is the oracle of the others.
_RB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RB_FLAGS=() RB_REMOTE=() RB_SUMS_EXCLUDE=()
execlog() { python3 "$_RB_DIR/execlog.py" "$@"; }
# Spawns that run locally by design (tagged local), with the reason.
RB_LOCAL_OK=(--local-ok "TestRunner:_check_test=source_snapshot's check test is tagged local: it reads the snapshot trees, which are not declared inputs")

# rb_outputs_sums BIN: sha256 of every regular file under BIN/examples,
# runfiles trees and manifests left out (they name the output base by design).
rb_outputs_sums() {
    (cd "$1" && find -L examples -type f ! -path '*.runfiles/*' ! -name '*.runfiles_manifest' \
        ! -name 'MANIFEST' ! -name '*.repo_mapping' "${RB_SUMS_EXCLUDE[@]}" -print0 | sort -z | xargs -0 sha256sum)
}

# rb_run NAME WHAT WS OUTPUT_BASE ARGS...: rb_bazel with its execution log in
# $RB_LOG/NAME.json and stderr in $RB_LOG/NAME.err; dies with WHAT (after the
# tail of stderr) when it fails.
rb_run() {
    local name="$1" what="$2" ws="$3" ob="$4"
    shift 4
    rb_bazel "$ws" "$ob" "$@" --execution_log_json_file="$RB_LOG/$name.json" 2>"$RB_LOG/$name.err" \
        || { tail -30 "$RB_LOG/$name.err" >&2; die "$what"; }
}

# rb_local_reference WS OUTPUT_BASE: the local build of //examples/...; its
# outputs ($RB_LOG/sums.local) are the oracle.
rb_local_reference() {
    rb_run local "local build" "$1" "$2" build "${RB_FLAGS[@]}" //examples/...
    execlog "$RB_LOG/local.json" summary | tail -1 >&2
    rb_outputs_sums "$(rb_bin "$2")" > "$RB_LOG/sums.local"
    rb_bazel "$1" "$2" shutdown
    [ "$(wc -l < "$RB_LOG/sums.local")" -gt 20 ] || die "local build: only $(wc -l < "$RB_LOG/sums.local") output files"
}

# rb_cold_remote WS OUTPUT_BASE: every spawn of a cold build of //examples/...
# on the worker, the outputs byte-identical to the local ones.
rb_cold_remote() {
    rb_run cold "remote build" "$1" "$2" build "${RB_FLAGS[@]}" "${RB_REMOTE[@]}" //examples/...
    grep -E '^INFO: [0-9]+ processes' "$RB_LOG/cold.err" >&2 || true
    execlog "$RB_LOG/cold.json" summary >&2
    execlog "$RB_LOG/cold.json" remote || die "cold remote build: spawns ran locally"
    rb_outputs_sums "$(rb_bin "$2")" > "$RB_LOG/sums.r1"
    diff -u "$RB_LOG/sums.local" "$RB_LOG/sums.r1" >&2 || die "remote outputs differ from the local build"
    echo "    $(wc -l < "$RB_LOG/sums.r1") output files byte-identical to the local build" >&2
}

# rb_remote_test WS OUTPUT_BASE: `bazel test //examples/...`, every spawn but
# RB_LOCAL_OK's on the worker, at least one test among them.
rb_remote_test() {
    local n
    rb_run test "remote bazel test" "$1" "$2" test "${RB_FLAGS[@]}" "${RB_REMOTE[@]}" //examples/...
    execlog "$RB_LOG/test.json" summary >&2
    execlog "$RB_LOG/test.json" remote "${RB_LOCAL_OK[@]}" || die "remote test: spawns ran locally"
    n="$(execlog "$RB_LOG/test.json" summary | awk '$2 == "TestRunner" && $3 == "remote" {print $1}')"
    [ "${n:-0}" -gt 0 ] || die "no TestRunner spawn ran remotely"
    grep -E 'Executed [0-9]+ out of' "$RB_LOG/test.err" >&2 || true
    echo "    $n test actions ran on the worker" >&2
}

# rb_second_client WS OUTPUT_BASE: another copy, a fresh output base: build +
# test of //examples/... are 100 % remote cache hits with the same outputs.
rb_second_client() {
    rb_run second "second client" "$1" "$2" test "${RB_FLAGS[@]}" "${RB_REMOTE[@]}" //examples/...
    execlog "$RB_LOG/second.json" summary >&2
    execlog "$RB_LOG/second.json" hits "${RB_LOCAL_OK[@]}" || die "second client: not every spawn was a remote cache hit"
    rb_outputs_sums "$(rb_bin "$2")" > "$RB_LOG/sums.r2"
    diff -u "$RB_LOG/sums.local" "$RB_LOG/sums.r2" >&2 || die "second client's outputs differ from the local build"
    rb_bazel "$1" "$2" shutdown
}
