"""Probe actions for the remote-execution stage (tests/ci/65-remote.sh).

Each probe is one tiny action whose result tells what the executor lets an
action see: its environment, a workspace file it did not declare, the
directory it runs in. They are `manual`: only that stage builds them.
"""

_COMMANDS = {
    # Everything in the environment (one NAME=value per line, sorted).
    "env": "env | LC_ALL=C sort > \"$1\"",
    # A workspace file that is NOT an input: present in a local execroot,
    # absent from a remote worker's work directory.
    "undeclared": "cat tests/remote/undeclared.txt > \"$1\"",
    # Runs long enough to be killed in the middle (the worker-crash test).
    "slow": "sleep 4; echo done > \"$1\"",
    # What the working directory holds besides the declared inputs.
    "listing": "find . -mindepth 1 -maxdepth 3 ! -path './bazel-out/*' ! -path ./bazel-out | LC_ALL=C sort > \"$1\"",
}

def _impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.run_shell(
        command = _COMMANDS[ctx.attr.probe],
        arguments = [out.path],
        outputs = [out],
        mnemonic = "RemoteProbe",
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    return [DefaultInfo(files = depset([out]))]

remote_probe = rule(
    implementation = _impl,
    doc = "One probe action (see _COMMANDS) writing <name>.txt.",
    attrs = {"probe": attr.string(mandatory = True, values = sorted(_COMMANDS.keys()), doc = "Which probe.")},
)
