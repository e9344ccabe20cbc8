"""Buck2 counterpart of probe.bzl: one tiny action per probe (tests/ci/65-remote.sh)."""

_COMMANDS = {
    "env": "env | LC_ALL=C sort > \"$1\"",
    "undeclared": "cat tests/remote/undeclared.txt > \"$1\"",
    "listing": "find . -mindepth 1 -maxdepth 3 ! -path './buck-out/*' ! -path ./buck-out | LC_ALL=C sort > \"$1\"",
}

def _impl(ctx: AnalysisContext) -> list[Provider]:
    out = ctx.actions.declare_output(ctx.label.name + ".txt")
    ctx.actions.run(
        cmd_args("/bin/sh", "-c", _COMMANDS[ctx.attrs.probe], "probe", out.as_output()),
        category = "remote_probe",
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    return [DefaultInfo(default_output = out)]

remote_probe = rule(
    impl = _impl,
    doc = "One probe action (see _COMMANDS) writing <name>.txt.",
    attrs = {"probe": attrs.enum(["env", "listing", "undeclared"], doc = "Which probe.")},
)
