"""Pure Starlark shared by the Bazel and Buck2 stable_checksums macros.

No load(), no ctx, no native.*, no type annotations: both build systems load
this file unchanged. The `prefix` check and the freshness test's script are
written once here, so both say the same thing.
"""

def stable_checksums_check_prefix(name, prefix):
    """Fails unless the stable_checksums macro was given a dict-name prefix.

    Args:
      name: the macro's `name`.
      prefix: its `prefix` (None or "" when unset).

    Returns:
      The prefix.
    """
    if not prefix:
        fail("stable_checksums(name = \"%s\"): set `prefix`, the dict-name prefix of the generated file (e.g. prefix = \"MYLIB\" for MYLIB_STABLE_CHECKSUMS)" % name)
    return prefix

def stable_checksums_test_script(checked_in, generated, fix):
    """Shell text of the freshness test: a diff of the checked-in file against the generated one.

    Passes (saying the file is up to date) when they are equal; otherwise
    shows the diff and names the fix, never a command with an internal
    output path.

    Args:
      checked_in: shell word for the checked-in file's path, used inside
        double quotes (a literal path, or a variable such as "$checked_in").
      generated: the same for the generated file.
      fix: the command that regenerates the checked-in file (e.g.
        "bazel run //pkg:stable_checksums.update"); may name a variable.

    Returns:
      The script body (no interpreter line).
    """
    return """if diff -u "%s" "%s"; then
    echo "%s is up to date"
    exit 0
fi
echo >&2
echo "%s is stale (diff above: checked-in vs generated). Fix with:" >&2
echo "    %s" >&2
exit 1
""" % (checked_in, generated, checked_in, checked_in, fix)
