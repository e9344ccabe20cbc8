#!/usr/bin/env bash
# Writes DIR/buck2: `buck2` as the docs' commands call it, running BUCK2
# with --isolation-dir ISOLATION and, for build, run and test, the -c flags
# (so the docs' commands share the caller's daemon and configuration).
# Put DIR first on PATH to run a block of the docs as written.
#
#   tests/buck2/buck2-on-path.sh BUCK2 ISOLATION DIR [buck2 -c flags...]
set -euo pipefail
BUCK2="$1" ISO="$2" DIR="$3"; shift 3
mkdir -p "$DIR"
{
    printf '#!/usr/bin/env bash\n'
    printf 'sub="$1"; shift\n'
    printf 'case "$sub" in build|run|test) exec %q --isolation-dir %q "$sub"' "$BUCK2" "$ISO"
    [ $# -eq 0 ] || printf ' %q' "$@"
    printf ' "$@" ;; *) exec %q --isolation-dir %q "$sub" "$@" ;; esac\n' "$BUCK2" "$ISO"
} > "$DIR/buck2"
chmod +x "$DIR/buck2"
