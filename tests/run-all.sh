#!/usr/bin/env bash
# The test command (README): installs what it needs, then runs every test.
# Each stage is a script in tests/ci/, run in name order; any failure stops
# the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/ci/lib.sh

# Disk is the resource a CI machine runs short of first; say what there is
# before and after each stage so a "No space left on device" can be placed.
disk() { df -h --output=avail,target "$ROOT" /tmp 2>/dev/null | tail -n +2 | awk '{printf "%s free on %s; ", $1, $2}'; }
log "disk: $(disk)"

stages=(tests/ci/[0-9][0-9]-*.sh)
for s in "${stages[@]}"; do
    log "stage $s"
    start=$(date +%s)
    bash "$s" || die "stage $s"
    log "stage $s ok ($(( $(date +%s) - start )) s; $(disk)target $(du -sh "$ROOT/target" 2>/dev/null | cut -f1))"
done
log "all stages passed"
