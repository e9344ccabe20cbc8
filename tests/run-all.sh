#!/usr/bin/env bash
# The test command (README): installs what it needs, then runs every test.
# Each stage is a script in tests/ci/, run in name order; any failure stops
# the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/ci/lib.sh

stages=(tests/ci/[0-9][0-9]-*.sh)
for s in "${stages[@]}"; do
    log "stage $s"
    start=$(date +%s)
    bash "$s" || die "stage $s"
    log "stage $s ok ($(( $(date +%s) - start )) s)"
done
log "all stages passed"
