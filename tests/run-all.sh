#!/usr/bin/env bash
# The test command (README): installs what it needs, then runs every test.
# Each stage is a script in tests/ci/, run in name order; any failure stops
# the run with a non-zero exit, naming the stage.
#
# Budget: a cold run (fresh machine: empty ~/.cargo registry and target/,
# no /var/tmp caches) must finish in 40 minutes on a quiet 2-core machine.
# Every stage has a share of it (BUDGET below, seconds); each stage prints
# its wall time, CPU time (user+sys) and its share used, and a stage over
# its share prints a WARNING (the run goes on), so a slow new test is seen
# when it lands. A new stage needs a line in BUDGET (else it is warned
# about); keep the sum within TOTAL_BUDGET.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_T0=$SECONDS
ROCPACK_DEFER_FIXTURES=1 . tests/ci/lib.sh
. tests/ci/prefetch.sh

TOTAL_BUDGET=2400
# Shares: the measured time of a quiet run (README) plus a margin; their
# sum leaves room for the stages to come.
declare -A BUDGET=(
    [05-fixtures]=90    # Debian packages (one apt-get run) + fixtures
    [10-rust]=690       # fmt, clippy, the dev build, cargo test
    [20-fuzz]=340       # fuzz build (ASan, release) + 11 targets x 20 s, 2 at a time
    [25-kpack-stress]=130
    [30-snapshot]=100
    [40-pypi]=90
    [45-wheel]=60
    [47-python]=60     # pip wheel . from stage 10's helpers, venv installs, selector installs
    [50-bazel]=220
    [55-bazel7]=120     # the chroot itself is made in the background
    [60-buck2]=120
    [65-remote]=150
)

# Disk is the resource a CI machine runs short of first; say what there is
# before and after each stage so a "No space left on device" can be placed.
disk() { df -h --output=avail,target "$ROOT" /tmp 2>/dev/null | tail -n +2 | awk '{printf "%s free on %s; ", $1, $2}'; }
# cpu_now: CPU=the CPU seconds (user + sys) of the finished children so far
# (`times` in this shell: in a subshell it would count the subshell's).
CPU_F="$(mktemp)"
cpu_now() {
    times >"$CPU_F"
    CPU=$(tail -1 "$CPU_F" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%.0f", n }')
}
log "disk: $(disk)"

# Every stage's Debian packages in one apt-get run (a no-op when installed;
# not root: each stage checks its own, and skips or fails as it did alone).
[ "$(id -u)" -ne 0 ] || need_pkgs "${CI_PKGS[@]}" "${FIXTURE_PKGS[@]}" "${WIN_FIXTURE_PKGS[@]}"
trap 'prefetch_stop; rm -f "$CPU_F"' EXIT
prefetch_start
log "background fetches started ($ROCPACK_PREFETCH_DIR/*.log): crates, PyPI wheels, moto, sid chroot"
ensure_fixtures
ensure_win_fixtures

over=()
summary=()
stages=(tests/ci/[0-9][0-9]-*.sh)
for s in "${stages[@]}"; do
    name="$(basename "$s" .sh)"
    log "stage $name"
    start=$SECONDS; cpu_now; c0=$CPU
    bash "$s" || die "stage $name (tests/ci/$name.sh) failed after $((SECONDS - start)) s"
    # The fixtures were built when lib.sh was sourced, before the first stage.
    [ "$name" != 05-fixtures ] || start=$RUN_T0
    cpu_now
    wall=$((SECONDS - start)) c=$((CPU - c0))
    b="${BUDGET[$name]:-0}"
    share="no share set"
    [ "$b" -eq 0 ] || share="$((wall * 100 / b)) % of its ${b} s share"
    log "stage $name ok: ${wall} s wall, ${c} s CPU; $share ($(disk)target $(du -sh "$ROOT/target" 2>/dev/null | cut -f1))"
    summary+=("$(printf '%-16s %5d s %5d s CPU  %s' "$name" "$wall" "$c" "$share")")
    if [ "$b" -eq 0 ]; then
        over+=("$name: ${wall} s, no share in tests/run-all.sh's BUDGET")
    elif [ "$wall" -gt "$b" ]; then
        over+=("$name: ${wall} s, over its ${b} s share")
        printf '\n!!! WARNING: stage %s took %d s, over its %d s share of the %d-minute budget (tests/run-all.sh) !!!\n' \
            "$name" "$wall" "$b" $((TOTAL_BUDGET / 60)) >&2
    fi
done
total=$((SECONDS - RUN_T0))
log "stage times (wall, CPU of the stage's processes, share of the budget):"
printf '    %s\n' "${summary[@]}" >&2
printf '    %-16s %5d s of the %d s budget\n' total "$total" "$TOTAL_BUDGET" >&2
for o in ${over[@]+"${over[@]}"}; do printf '!!! WARNING: %s\n' "$o" >&2; done
[ "$total" -le "$TOTAL_BUDGET" ] || printf '!!! WARNING: the run took %d s, over the %d s budget\n' "$total" "$TOTAL_BUDGET" >&2
log "all stages passed"
