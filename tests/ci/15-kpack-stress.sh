#!/usr/bin/env bash
# kpack under kill -9: random kills of `kpack split` / `kpack recombine` into
# new and existing output directories, and aborts inside the commit; after
# each, the output is the complete old or new state (tests/stress/kpack.sh).
# Uses the helper stage 10 built (ci_helpers: target/debug/kpack) so nothing
# is rebuilt; bounded by STRESS_SECONDS (default here 90).
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
ci_helpers
KPACK="$KPACK_BIN" STRESS_SECONDS="${STRESS_SECONDS:-90}" \
    bash tests/stress/kpack.sh
