"""rocpack_script_test: runs a bash script with data files, without sh_test.

Native sh_test needs @rules_cc/@rules_shell on some Bazel versions; this test
rule needs nothing (bazel-offline.md section 2.1).
"""

def _impl(ctx):
    exe = ctx.actions.declare_file(ctx.label.name + ".sh")
    args = " ".join(["'%s'" % ctx.expand_location(a, ctx.attr.data) for a in ctx.attr.args_list])
    ctx.actions.write(exe, "#!/bin/bash\nexec bash '%s' %s \"$@\"\n" % (ctx.file.script.short_path, args), is_executable = True)
    runfiles = ctx.runfiles(files = [ctx.file.script] + ctx.files.data)
    for d in ctx.attr.data:
        runfiles = runfiles.merge(d[DefaultInfo].default_runfiles)
    return [DefaultInfo(executable = exe, runfiles = runfiles), testing.TestEnvironment(ctx.attr.env)]

rocpack_script_test = rule(
    implementation = _impl,
    test = True,
    doc = "A test running `bash script args...` in the runfiles tree (paths are workspace-relative short paths).",
    attrs = {
        "script": attr.label(allow_single_file = [".sh"], mandatory = True, doc = "The bash test script."),
        "data": attr.label_list(allow_files = True, doc = "Files and targets the script reads (their runfiles included)."),
        "args_list": attr.string_list(doc = "Arguments passed to the script; $(rootpath <label>) of a `data` target expands to its runfiles path."),
        "env": attr.string_dict(doc = "Environment variables for the test."),
    },
)
