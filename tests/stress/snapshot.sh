#!/usr/bin/env bash
# Fault-and-race stress of snapctl, bounded to about three minutes, real clock
# (SOURCE_DATE_EPOCH unset). Usage: tests/stress/snapshot.sh [driver options]
#   --rounds N   concurrent-create rounds (default 200) of --procs P processes (default 4)
#   --kills N    kill -9 iterations (default 500)
#   --seed S     replay a run (every run prints its seed)
#   --only LIST  concurrent,kill,enospc,s3
# ENOSPC needs root (mount -t tmpfs) and is skipped loudly otherwise. The S3
# part runs when SNAPCTL_STRESS_S3_URL and AWS_ENDPOINT_URL name an S3 server
# (tests/ci/30-snapshot.sh starts moto and sets them), else it is skipped loudly.
# SNAPCTL=path/to/snapctl uses that binary instead of building one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
unset SOURCE_DATE_EPOCH SNAPCTL_FAIL_AT SNAPCTL_TRACE_STEPS
if [ -z "${SNAPCTL:-}" ]; then
    cargo build -q -p snapctl --locked
    SNAPCTL="${CARGO_TARGET_DIR:-$ROOT/target}/debug/snapctl"
fi
start=$(date +%s)
python3 "$ROOT/tests/stress/snapshot_stress.py" --snapctl "$SNAPCTL" "$@"
echo "snapshot stress: $(( $(date +%s) - start )) s"
