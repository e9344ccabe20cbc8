#!/usr/bin/env bash
# The blocks tests/snapshot/doc-blocks.sh cut into DIR whose marker is
# MARKER (and, given ARGS, whose marker words are exactly ARGS): their
# numbers, one per line, in page order. The one way every doc-driven test
# picks its blocks.
#
#   tests/snapshot/doc-select.sh DIR MARKER [ARGS]
set -euo pipefail
DIR="$1" MARKER="$2"
n=$(find "$DIR" -maxdepth 1 -name '*.where' | wc -l)
for i in $(seq 1 "$n"); do
    [ "$(cat "$DIR/$i.marker")" = "$MARKER" ] || continue
    [ $# -lt 3 ] || [ "$(cat "$DIR/$i.args")" = "$3" ] || continue
    echo "$i"
done
