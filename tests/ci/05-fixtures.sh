#!/usr/bin/env bash
# Fixtures: lib.sh builds them from tests/fixtures (HIP sources + generator).
# When ../shared is beside the checkout, its corpus is an independent record
# of the same generator run elsewhere: report whether ours is byte-identical.
. "$(dirname "$0")/lib.sh"
fx="$ROCPACK_SHARED/fixtures"
[ -f "$fx/expected-unbundle.tsv" ] || die "no fixtures at $fx"
log "fixtures: $(find "$fx/fatbins" -type f | wc -l) fat binaries, $(($(wc -l <"$fx/expected-unbundle.tsv") - 1)) unbundle rows in $fx"
ref="$ROCPACK_SHARED_DIR/fixtures/SHA256SUMS"
if [ -f "$ref" ] && [ "$fx" != "$ROCPACK_SHARED_DIR/fixtures" ]; then
    bad=$(cd "$fx" && sha256sum -c "$ref" 2>/dev/null | grep -vc ': OK$' || true)
    total=$(wc -l <"$ref")
    if [ "$bad" -eq 0 ]; then
        log "fixtures: all $total files byte-identical to ../shared/fixtures"
    else
        # Not fatal: a Debian point release of clang changes bytes, not meaning.
        log "WARNING: $bad of $total generated fixture files differ from ../shared/fixtures (toolchain versions?)"
    fi
fi
log "Windows fixtures: $(find "$ROCPACK_WIN_FIXTURES/fatbins-win" -type f | wc -l) files, $(($(wc -l <"$ROCPACK_WIN_FIXTURES/expected-unbundle-win.tsv") - 1)) code objects in $ROCPACK_WIN_FIXTURES"
