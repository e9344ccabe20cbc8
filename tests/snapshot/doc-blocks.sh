#!/usr/bin/env bash
# The fenced blocks of a Markdown page, each with the marker that says what
# a test does with it, so the docs' commands are run as written and a block
# nobody runs is a decision written next to it:
#   <!-- abi-step: KIND [PATH] -->      tests/bazel/abi-recovery.sh (KIND: file, file-top, run, printed)
#   <!-- consumer-file: MODE PATH -->   tests/bazel/vendored.sh appends it to PATH (MODE: workspace, bzlmod, all)
#   <!-- consumer-run: NAME -->         tests/bazel/vendored.sh runs it (doc_run PAGE NAME)
#   <!-- source-step: KIND [MODE PATH] --> tests/bazel/source-consumer.sh (KIND: file, run; MODE: workspace, bzlmod, all)
#   <!-- buck2-transcript: root|e2e --> tests/buck2/transcript.sh runs its "$ buck2" lines (tests/ci/60-buck2.sh, e2e/buck2/run.sh)
#   <!-- buck2-run: NAME -->            tests/ci/60-buck2.sh or e2e/buck2/run.sh runs it (tests/snapshot/doc-run.sh)
#   <!-- buck2-step: KIND [PATH] -->    tests/buck2/abi-recovery.sh (KIND: file, file-top, run)
#   <!-- buck2-consumer-file: PATH -->  e2e/buck2/run.sh: e2e/buck2/PATH is this block
#   <!-- doc-run: snapctl -->           tests/snapshot/doc-commands.sh runs it with bash -e
#   <!-- not-run: REASON -->            no test runs it, for REASON (e.g. a synopsis, an output, a remote)
# The marker is the last HTML comment before the opening fence (blank lines
# between are allowed); fences may be indented (list items), the indentation
# is removed from the body.
#
#   tests/snapshot/doc-blocks.sh OUT_DIR FILE [SECTION]
# Appends the blocks of FILE (of its SECTION only: the heading line that
# starts with SECTION, up to the next heading of the same or a higher level)
# to OUT_DIR, numbered after those already there: N.where (FILE:LINE),
# N.marker (the marker's name, or empty), N.args
# (the marker's words), N.body. Exit 0; the caller decides what an
# unmarked block means (tests/snapshot/doc-commands.sh: a failure).
set -euo pipefail
OUT="$1" FILE="$2" SECTION="${3:-}"
mkdir -p "$OUT"
first=$(( $(find "$OUT" -maxdepth 1 -name '*.where' | wc -l) ))
awk -v d="$OUT" -v n="$first" -v f="$FILE" -v sec="$SECTION" '
    function level(s) { match(s, /^#+/); return RLENGTH }
    BEGIN { on = (sec == "") }
    !inb && /^#+ / && sec != "" {
        if (on && level($0) <= lvl) on = 0
        if (!on && index($0, sec) == 1) { on = 1; lvl = level($0) }
    }
    !on { next }
    !inb && /^[ ]*<!-- [a-z0-9-]+: .*-->[ ]*$/ {
        s = $0; sub(/^[ ]*<!-- /, "", s); sub(/[ ]*-->[ ]*$/, "", s)
        marker = s; sub(/:.*$/, "", marker); args = s; sub(/^[a-z0-9-]+: */, "", args); next
    }
    !inb && /^[ ]*```/ { match($0, /^ */); ind = RLENGTH; n++; inb = 1
        print f ":" NR > (d "/" n ".where"); print marker > (d "/" n ".marker"); print args > (d "/" n ".args")
        printf "" > (d "/" n ".body"); marker = ""; args = ""; next }
    inb && /^[ ]*```[ ]*$/ { inb = 0; next }
    inb { print substr($0, ind + 1) >> (d "/" n ".body"); next }
    /[^ ]/ { marker = ""; args = "" }
' "$FILE"
