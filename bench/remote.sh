#!/usr/bin/env bash
# Benchmark (not a test): rocpack's examples through Bazel 4.2.3 on a real
# Remote Execution API service (NativeLink, ../shared/tools/nativelink, a
# server + one worker on 127.0.0.1: tests/remote/lib.sh) against the same
# build local, on the same machine in one run. Helpers: release binaries
# pinned by sha256 (as tests/ci/65-remote.sh), stripped dev builds by default
# (PROFILE=release for release ones).
#
#   local cold   fresh output base, linux-sandbox, the whole `bazel build
#                //examples/...` command (server start included);
#   remote cold  fresh output base, empty CAS and action cache: every action
#                executes on the worker;
#   remote warm  a second client (another copy in another directory, fresh
#                output base): every action is a remote cache hit.
# Ratios are against local cold. Then the bytes uploaded per split: a byte
# counter (bench/remote_proxy.py) between Bazel and NativeLink, one split
# after another against the same service: the first uploads the kpack
# helper, the next ones only their inputs.
#
# Usage: bench/remote.sh   (ROCPACK_SHARED_DIR: the directory holding
#        tools/nativelink, default ../shared beside the checkout)
. "$(dirname "$0")/lib.sh"
cd "$BENCH_ROOT"
export ROCPACK_SHARED_DIR="${ROCPACK_SHARED_DIR:-$BENCH_ROOT/../shared}"
export LC_ALL=C
. tests/remote/lib.sh
[ -x "$NL_BIN" ] || bdie "no NativeLink at $NL_BIN (set ROCPACK_SHARED_DIR)"
command -v bazel >/dev/null || bdie "no bazel (tests/ci/50-bazel.sh installs Debian's bazel-bootstrap)"

T="$(mktemp -d /tmp/rocpack-bench-remote.XXXXXX)"
BASES=() PROXY_PID=""
cleanup() {
    for b in "${BASES[@]}"; do bazel --output_base="$b" shutdown >/dev/null 2>&1 || true; done
    [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null || true
    nl_stop
    chmod -R u+w "$T" 2>/dev/null || true
    rm -rf "$T"
}
trap cleanup EXIT

PROFILE="${PROFILE:-dev}"
pdir=debug; [ "$PROFILE" = dev ] || pdir="$PROFILE"
blog "cargo build --profile $PROFILE -p kpack -p snapctl"
cargo build --locked -q --profile "$PROFILE" -p kpack -p snapctl || bdie "cargo build"
remote_release "$T/rel" "target/$pdir/kpack" "target/$pdir/snapctl"
remote_copy_ws "$BENCH_ROOT" "$T/a/rocpack" "$T/rel"
remote_copy_ws "$BENCH_ROOT" "$T/b/elsewhere/rocpack" "$T/rel"
remote_copy_ws "$BENCH_ROOT" "$T/c/rocpack" "$T/rel"

now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
build() { # WS OUTPUT_BASE LOG bazel-args...
    local ws="$1" ob="$2" log="$3"; shift 3
    BASES+=("$ob")
    (cd "$ws" && bazel --output_base="$ob" build "${REMOTE_HELPERS[@]}" "$@" \
        --execution_log_json_file="$log" //examples/... >/dev/null 2>"$log.err") \
        || { tail -20 "$log.err" >&2; bdie "bazel build $*"; }
}
spawns() { python3 tests/remote/execlog.py "$1" summary | tail -1; }

# Repositories (the pinned release tarball) are fetched in every output
# base; do it once per copy before timing, so both sides time the build.
nl_init "$T/nl"
nl_start_server
nl_start_worker
REMOTE=(--config=remote --remote_executor="$NL_ADDR" --remote_instance_name="$NL_INSTANCE")

blog "local cold: bazel build //examples/... (fresh output base)"
s=$(now); build "$T/a/rocpack" "$T/ob-local" "$T/local.json"; t_local=$(elapsed "$s")
blog "remote cold: empty CAS and action cache, fresh output base"
s=$(now); build "$T/a/rocpack" "$T/ob-remote" "$T/remote.json" "${REMOTE[@]}"; t_remote=$(elapsed "$s")
blog "remote warm: second client in another directory, fresh output base"
s=$(now); build "$T/b/elsewhere/rocpack" "$T/ob-warm" "$T/warm.json" "${REMOTE[@]}"; t_warm=$(elapsed "$s")
for b in "${BASES[@]}"; do bazel --output_base="$b" shutdown >/dev/null 2>&1 || true; done

printf '\n%-13s %9s %7s  %s\n' "build" "wall (s)" "ratio" "spawns" >&2
printf '%-13s %9.1f %7.2f  %s\n' "local cold" "$t_local" 1 "$(spawns "$T/local.json")" >&2
printf '%-13s %9.1f %7.2f  %s\n' "remote cold" "$t_remote" "$(echo "$t_remote / $t_local" | bc -l)" "$(spawns "$T/remote.json")" >&2
printf '%-13s %9.1f %7.2f  %s\n' "remote warm" "$t_warm" "$(echo "$t_warm / $t_local" | bc -l)" "$(spawns "$T/warm.json")" >&2

# ---------------------------------------------------------------------------
blog "bytes uploaded per split (fresh NativeLink, Bazel through a byte counter)"
nl_stop
rm -rf "$T/nl"
nl_init "$T/nl"
nl_start_server
nl_start_worker
PROXY_PORT="$(_nl_pick_port)"
python3 bench/remote_proxy.py "$PROXY_PORT" "$NL_PORT" "$T/counts" &
PROXY_PID=$!
for _ in $(seq 100); do _nl_port_free "$PROXY_PORT" || break; sleep 0.05; done
PR=(--config=remote --remote_executor="grpc://127.0.0.1:$PROXY_PORT" --remote_instance_name="$NL_INSTANCE")
OB="$T/ob-bytes"; BASES+=("$OB")
cd "$T/c/rocpack"
# Analysis and repository fetches first (no upload), then one split at a time.
bazel --output_base="$OB" build "${REMOTE_HELPERS[@]}" "${PR[@]}" --nobuild //examples/kpack:all >/dev/null 2>&1
kpack_size=$(stat -c %s "$T/rel/stage/kpack")
printf '\n%-26s %12s %12s %s\n' "split (in order)" "uploaded B" "inputs B" "" >&2
for s in gfx110X-build gfx1151-build gfx120X-build; do
    read -r up0 _ < "$T/counts"
    bazel --output_base="$OB" build "${REMOTE_HELPERS[@]}" "${PR[@]}" --execution_log_json_file="$T/split.json" \
        "//examples/kpack:split_$s" >/dev/null 2>"$T/split.err" || { tail -20 "$T/split.err" >&2; bdie "split $s"; }
    read -r up1 _ < "$T/counts"
    # The split's own inputs (shard files + staging list), helper and stage.sh excluded.
    inputs=$(python3 - "$T/split.json" <<'EOF'
import json, sys
sys.path.insert(0, "tests/remote")
import execlog
tot = 0
for s in execlog.spawns(sys.argv[1]):
    if s.get("mnemonic") != "KpackSplit":
        continue
    for i in s.get("inputs", []):
        p = i.get("path", "")
        if p.endswith("/kpack") or p.endswith("/stage.sh"):
            continue
        tot += int(i.get("digest", {}).get("sizeBytes", 0))
print(tot)
EOF
)
    printf '%-26s %12d %12d\n' "split_$s" $((up1 - up0)) "$inputs" >&2
done
printf 'kpack helper (stripped %s build): %d B. The first split uploads it (with stage.sh), the others only their inputs.\n' "$PROFILE" "$kpack_size" >&2
bazel --output_base="$OB" shutdown >/dev/null 2>&1 || true
