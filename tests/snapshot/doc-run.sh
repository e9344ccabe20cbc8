#!/usr/bin/env bash
# Runs, as written, the fenced block of FILE marked `<!-- MARKER: NAME -->`
# (tests/snapshot/doc-blocks.sh cuts the page), with `bash -euo pipefail`
# in the current directory; its output goes to stdout. Exit: the block's
# status; 2 when FILE has no such block (or more than one).
#
#   tests/snapshot/doc-run.sh FILE MARKER NAME
set -euo pipefail
FILE="$1" MARKER="$2" NAME="$3"
T="$(mktemp -d /tmp/rocpack-docrun.XXXXXX)"
trap 'rm -rf "$T"' EXIT
"$(dirname "${BASH_SOURCE[0]}")/doc-blocks.sh" "$T/b" "$FILE"
mapfile -t all < <("$(dirname "${BASH_SOURCE[0]}")/doc-select.sh" "$T/b" "$MARKER" "$NAME")
[ "${#all[@]}" -le 1 ] || { echo "doc-run: two '$MARKER: $NAME' blocks in $FILE" >&2; exit 2; }
[ "${#all[@]}" -eq 1 ] || { echo "doc-run: no '$MARKER: $NAME' block in $FILE" >&2; exit 2; }
found="${all[0]}"
echo "doc-run: $(cat "$T/b/$found.where") ($MARKER: $NAME)" >&2
rc=0
bash -euo pipefail "$T/b/$found.body" || rc=$?
exit "$rc"
