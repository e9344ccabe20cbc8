"""stable_checksums: snapshot metadata in, stable_checksums.bzl out.

Plus `<name>.update` (bazel run: writes the file into the source tree) and
`<name>_test` (fails with a diff when the checked-in copy is stale).
"""

load("//rules/common:snapshot.bzl", "package_path", "under_snapshots_root")
load("//rules/common:stable_checksums.bzl", "stable_checksums_check_prefix", "stable_checksums_test_script")
load(":tools.bzl", "ACTION_ENV", "stage_list", "tool_attrs")

def stable_checksums_action(ctx, snapctl, stage, metadata, root, prefix, out):
    """Registers `snapctl gen-checksums` on a staged copy of the snapshots root.

    Args:
      ctx: rule context.
      snapctl: snapctl executable File.
      stage: stage.sh executable File.
      metadata: Files under the snapshots root (metadata.txt, headers, ...).
      root: the snapshots root path (prefix of every metadata path).
      prefix: dict name prefix (--prefix).
      out: declared output File.
    """
    files = under_snapshots_root([(f.path, f) for f in metadata], root, "stable_checksums: ")
    lst = stage_list(ctx, "stage.txt", [("root/" + rel, f) for rel, f in files.items()])
    args = ctx.actions.args()
    args.add("--stage", lst)
    args.add("--")
    args.add(snapctl)
    args.add("gen-checksums")
    args.add("--snapshots-root", "@STAGE@/root")
    args.add("--output", out)
    args.add("--prefix", prefix)
    ctx.actions.run(
        executable = stage,
        arguments = [args],
        inputs = [lst] + metadata,
        tools = [snapctl],
        outputs = [out],
        mnemonic = "SnapctlGenChecksums",
        progress_message = "snapctl gen-checksums %s" % ctx.label,
        env = ACTION_ENV,
    )

def _root(ctx):
    root = package_path(ctx.label.package, ctx.attr.snapshots_root)
    if ctx.label.workspace_root:
        root = ctx.label.workspace_root + "/" + root
    return root

def _gen_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + "/" + ctx.attr.out)
    stable_checksums_action(ctx, ctx.executable._snapctl, ctx.executable._stage, ctx.files.srcs, _root(ctx), ctx.attr.prefix, out)
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

_GEN_ATTRS = dict({
    "srcs": attr.label_list(allow_files = True, mandatory = True, doc = "Files of the snapshots root: every stable/<ver>/metadata.txt and last-stable/<ver>/metadata.txt (a glob of snapshots/**/metadata.txt)."),
    "snapshots_root": attr.string(default = "snapshots", doc = "The snapshots root, relative to the package."),
    "prefix": attr.string(mandatory = True, doc = "Prefix of the generated dict names (<PREFIX>_STABLE_CHECKSUMS, <PREFIX>_LAST_STABLE_CHECKSUMS)."),
    "out": attr.string(default = "stable_checksums.bzl", doc = "Name of the checked-in file in the package."),
}, **tool_attrs(snapctl = True))

_stable_checksums_gen = rule(
    implementation = _gen_impl,
    doc = "Generates stable_checksums.bzl from snapshot metadata with `snapctl gen-checksums`.",
    attrs = _GEN_ATTRS,
)

def _update_impl(ctx):
    gen = ctx.file.generated
    dest = ctx.attr.dest
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, """#!/bin/bash
set -euo pipefail
if [ -z "${BUILD_WORKSPACE_DIRECTORY:-}" ]; then
    echo "run me with: bazel run %s" >&2
    exit 2
fi
src="%s"
dest="$BUILD_WORKSPACE_DIRECTORY/%s"
if cmp -s "$src" "$dest"; then
    echo "%s is up to date"
else
    cp -f "$src" "$dest.tmp.$$"
    chmod 0644 "$dest.tmp.$$"
    mv -f "$dest.tmp.$$" "$dest"
    echo "wrote %s"
fi
""" % (ctx.label, gen.short_path, dest, dest, dest), is_executable = True)
    return [DefaultInfo(executable = script, runfiles = ctx.runfiles(files = [gen]))]

_stable_checksums_update = rule(
    implementation = _update_impl,
    executable = True,
    doc = "`bazel run` target copying the generated file over the checked-in one.",
    attrs = {
        "generated": attr.label(allow_single_file = True, mandatory = True, doc = "The generated file."),
        "dest": attr.string(mandatory = True, doc = "Workspace-relative path of the checked-in file."),
    },
)

def _test_impl(ctx):
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    body = stable_checksums_test_script(ctx.file.checked_in.short_path, ctx.file.generated.short_path, "bazel run " + ctx.attr.update_target)
    ctx.actions.write(script, "#!/bin/bash\nset -uo pipefail\n" + body, is_executable = True)
    return [DefaultInfo(executable = script, runfiles = ctx.runfiles(files = [ctx.file.checked_in, ctx.file.generated]))]

_stable_checksums_test = rule(
    implementation = _test_impl,
    test = True,
    doc = "Fails with a diff when the checked-in file differs from the generated one.",
    attrs = {
        "checked_in": attr.label(allow_single_file = True, mandatory = True, doc = "The checked-in file."),
        "generated": attr.label(allow_single_file = True, mandatory = True, doc = "The generated file."),
        "update_target": attr.string(mandatory = True, doc = "Label of the update target, named in the failure message."),
    },
)

def stable_checksums(name, srcs, prefix = None, snapshots_root = "snapshots", out = "stable_checksums.bzl", **kwargs):
    """Generates stable_checksums.bzl; adds `<name>.update` and `<name>_test`.

    Targets:
      <name>: the generated file (`bazel build`).
      <name>.update: `bazel run` writes it to <package>/<out> in the source tree.
      <name>_test: fails with a diff (and the update command) when <out> is stale.

    Args:
      name: target name.
      srcs: snapshot metadata files (glob(["snapshots/**/metadata.txt"])).
      snapshots_root: snapshots root relative to the package.
      prefix: dict name prefix, e.g. "MYLIB" (MYLIB_STABLE_CHECKSUMS); required.
        Must match the prefix in <snapshots_root>/snapctl.conf (`snapctl
        create --prefix` records it there).
      out: name of the checked-in file in this package.
      **kwargs: common attributes (visibility, tags) for all three targets;
        `size` goes to the test only (default "small").
    """
    stable_checksums_check_prefix(name, prefix)
    # "small": a diff of two files; the default "medium" made every
    # `bazel test` warn that the size is too big.
    test_size = kwargs.pop("size", "small")
    _stable_checksums_gen(name = name, srcs = srcs, snapshots_root = snapshots_root, prefix = prefix, out = out, **kwargs)
    pkg = native.package_name()
    dest = package_path(pkg, out)
    update = name + ".update"
    _stable_checksums_update(name = update, generated = ":" + name, dest = dest, **kwargs)
    _stable_checksums_test(
        name = name + "_test",
        size = test_size,
        checked_in = out,
        generated = ":" + name,
        update_target = "//%s:%s" % (pkg, update),
        **kwargs
    )
