#!/usr/bin/env bash
# A console block of the docs ("$ buck2 ..." lines, each followed by the
# output it shows) run with a real buck2 in the current directory, every
# command as written:
#   * `buck2 run`: stdout must be exactly the lines shown;
#   * any other command: every shown line (buck-out paths and configuration
#     hashes normalised, "..." skipped) must be in its stdout + stderr, and it
#     must fail when its lines contain "error:" or "BUILD FAILED", else succeed.
# Used by tests/ci/60-buck2.sh (README's and docs/buck2.md's blocks marked
# `<!-- buck2-transcript: root -->`) and e2e/buck2/run.sh (`... e2e`).
#
#   tests/buck2/transcript.sh BUCK2 ISOLATION BLOCK WHERE [buck2 flags after the subcommand...]
# BLOCK: the block's text (tests/snapshot/doc-blocks.sh's N.body); WHERE:
# its FILE:LINE, for messages. Exit 0 when every command matches, 1
# otherwise (naming the command and the line).
set -euo pipefail
BUCK2="$1" ISO="$2" BLOCK="$3" WHERE="$4"; shift 4
CFG=("$@")
T="$(mktemp -d /tmp/rocpack-b2tx.XXXXXX)"
trap 'rm -rf "$T"' EXIT
die() { printf 'FAILED: [%s] %s\n' "$WHERE" "$*" >&2; exit 1; }

# Paths, hashes and isolation dir out of buck2's messages.
normalize() {
    sed -E -e "s#buck-out/$ISO/#buck-out/v2/#g" \
        -e 's#/(gen|art)/([a-z]+)/[0-9a-f]{16}/#/\1/\2/<hash>/#g' \
        -e 's/\x1b\[[0-9;]*m//g' -e 's/^\[[0-9T:.+-]+\] //' -e 's/^[[:space:]]+//' -e 's/[[:space:]]+$//'
}

check_cmd() { # CMD EXPECT_FILE N
    local cmd="$1" expect="$2" i="$3" rc=0 line sub
    local -a argv
    read -r -a argv <<< "${cmd#\$ buck2 }"
    sub="${argv[0]}"
    # </dev/null: buck2 would otherwise read the rest of the block.
    "$BUCK2" --isolation-dir "$ISO" "$sub" "${CFG[@]}" "${argv[@]:1}" </dev/null >"$T/$i.out" 2>"$T/$i.err" || rc=$?
    if grep -qE "error:|BUILD FAILED" "$expect"; then
        [ "$rc" -ne 0 ] || die "'$cmd' succeeded; the docs show it failing"
    else
        [ "$rc" -eq 0 ] || { tail -30 "$T/$i.err" >&2; die "'$cmd' failed (rc $rc)"; }
    fi
    if [ "$sub" = run ]; then
        diff -u "$expect" "$T/$i.out" >&2 || die "'$cmd': stdout differs from the docs"
    else
        cat "$T/$i.out" "$T/$i.err" | normalize > "$T/$i.all"
        normalize < "$expect" > "$expect.n"
        while IFS= read -r line; do
            [ "$line" = "..." ] && continue
            grep -qxF -- "$line" "$T/$i.all" \
                || { cat "$T/$i.all" >&2; die "'$cmd': this line of the docs is not in the output: $line"; }
        done < "$expect.n"
    fi
    printf '    ok: %s\n' "$cmd" >&2
}

n=0 cmd=""
: > "$T/expect"
while IFS= read -r line; do
    if [[ "$line" == '$ buck2 '* ]]; then
        [ -z "$cmd" ] || check_cmd "$cmd" "$T/expect" "$n"
        n=$((n + 1)); cmd="$line"; : > "$T/expect"
    elif [ -n "$cmd" ]; then
        printf '%s\n' "$line" >> "$T/expect"
    else
        die "output before the first '\$ buck2' line: $line"
    fi
done < "$BLOCK"
[ -n "$cmd" ] || die "no '\$ buck2' command"
check_cmd "$cmd" "$T/expect" "$n"
