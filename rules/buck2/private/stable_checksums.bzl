"""stable_checksums: snapshot metadata in, stable_checksums.bzl out (Buck2).

Plus `<name>.update` (`buck2 run`: regenerates the checked-in file in place)
and `<name>_test` (`buck2 test`: fails when the checked-in copy is stale).
"""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:snapshot.bzl", "under_snapshots_root")
load("//rules/common:stable_checksums.bzl", "stable_checksums_check_prefix", "stable_checksums_test_script")
load(":project_test.bzl", "project_root_test_providers")
load(":providers.bzl", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

_StableChecksumsInfo = provider(
    doc = "The staged snapshots root and the generated file of a stable_checksums target.",
    fields = {
        # The generated stable_checksums.bzl.
        "generated": provider_field(typing.Any),
        # Dict name prefix (--prefix).
        "prefix": provider_field(str),
        # Directory: copy of the snapshots root (metadata files).
        "root": provider_field(typing.Any),
    },
)

def stage_snapshots_root(actions: AnalysisActions, name: str, srcs: list[Artifact], root: str) -> Artifact:
    """Copies the files under the package-relative `root` into one directory.

    Args:
      actions: the rule's AnalysisActions.
      name: name of the declared directory.
      srcs: files under the snapshots root (metadata.txt, headers, ...).
      root: the snapshots root, relative to the package.

    Returns:
      The staged directory.
    """
    return actions.copied_dir(name, under_snapshots_root([(f.short_path, f) for f in srcs], root, "stable_checksums: "))

def stable_checksums_action(actions: AnalysisActions, snapctl: RunInfo, root: Artifact, prefix: str, out: str) -> Artifact:
    """Registers `snapctl gen-checksums` on a staged snapshots root.

    Args:
      actions: the rule's AnalysisActions.
      snapctl: RunInfo of the snapctl helper.
      root: the staged snapshots root.
      prefix: dict name prefix (--prefix).
      out: name of the generated file.

    Returns:
      The generated file.
    """
    generated = actions.declare_output(out)
    actions.run(
        cmd_args(snapctl, "gen-checksums", "--snapshots-root", root, "--output", generated.as_output(), "--prefix", prefix),
        category = "snapctl_gen_checksums",
        env = HELPER_ENV,
    )
    return generated

def _gen_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    root = stage_snapshots_root(ctx.actions, "snapshots_root", ctx.attrs.srcs, ctx.attrs.snapshots_root)
    generated = stable_checksums_action(ctx.actions, toolchain.snapctl, root, ctx.attrs.prefix, ctx.attrs.out)
    return [
        DefaultInfo(default_output = generated),
        _StableChecksumsInfo(root = root, prefix = ctx.attrs.prefix, generated = generated),
    ]

_stable_checksums_gen = rule(
    impl = _gen_impl,
    doc = "Generates stable_checksums.bzl from snapshot metadata with `snapctl gen-checksums`.",
    attrs = dict({
        "out": attrs.string(default = "stable_checksums.bzl", doc = "Name of the checked-in file in the package."),
        "prefix": attrs.string(doc = "Prefix of the generated dict names (<PREFIX>_STABLE_CHECKSUMS, <PREFIX>_LAST_STABLE_CHECKSUMS)."),
        "snapshots_root": attrs.string(default = "snapshots", doc = "The snapshots root, relative to the package."),
        "srcs": attrs.list(attrs.source(), doc = "Files of the snapshots root: every stable/<ver>/metadata.txt and last-stable/<ver>/metadata.txt (a glob of snapshots/**/metadata.txt)."),
    }, **toolchain_attr()),
)

# The .update and _test targets: the checked-in file and its generator.
_CHECKED_IN_ATTRS = dict({
    "checked_in": attrs.source(doc = "The checked-in stable_checksums.bzl."),
    "generated": attrs.dep(providers = [_StableChecksumsInfo], doc = "The stable_checksums generating target."),
}, **toolchain_attr())

def _update_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    info = ctx.attrs.generated[_StableChecksumsInfo]

    # `buck2 run` passes absolute paths: snapctl rewrites the checked-in file
    # in place (temp file + rename), reading the same staged metadata.
    cmd = cmd_args(toolchain.snapctl, "gen-checksums", "--snapshots-root", info.root, "--output", ctx.attrs.checked_in, "--prefix", info.prefix)
    return [DefaultInfo(), RunInfo(args = cmd)]

_stable_checksums_update = rule(
    impl = _update_impl,
    doc = "`buck2 run` target regenerating the checked-in stable_checksums.bzl.",
    attrs = _CHECKED_IN_ATTRS,
)

# The freshness test, as Bazel's: a diff of the checked-in file against the
# generated one, and the `.update` target to run (not a snapctl command with
# a buck-out path, which only works from inside buck-out).
_TEST = "checked_in=$1; generated=$2; update=$3\n" + stable_checksums_test_script("$checked_in", "$generated", "buck2 run $update")

def _test_impl(ctx: AnalysisContext) -> list[Provider]:
    generated = ctx.attrs.generated[_StableChecksumsInfo].generated
    cmd = cmd_args("/bin/sh", "-c", _TEST, "stable_checksums_test", ctx.attrs.checked_in, generated, ctx.attrs.update_target)
    return project_root_test_providers(cmd, ctx.attrs.labels)

_stable_checksums_test = rule(
    impl = _test_impl,
    doc = "Fails (exit 1, with a diff and the `buck2 run <name>.update` command) when the checked-in file differs from the one generated from the metadata.",
    attrs = dict(
        _CHECKED_IN_ATTRS,
        labels = attrs.list(attrs.string(), default = [], doc = "Test labels."),
        update_target = attrs.string(doc = "Label of the `.update` target, named in the failure message."),
    ),
)

def stable_checksums(name: str, srcs: list[str], prefix: str | None = None, snapshots_root: str = "snapshots", out: str = "stable_checksums.bzl", **kwargs):
    """Three targets around one checked-in stable_checksums.bzl.

    * `<name>`: `buck2 build` writes the file from the snapshot metadata.
    * `<name>.update`: `buck2 run` rewrites `<package>/<out>` in place.
    * `<name>_test`: `buck2 test` fails while `<out>` is stale.

    Args:
      name: name of the generating target.
      srcs: the metadata files, e.g. glob(["snapshots/**/metadata.txt"]).
      snapshots_root: directory of the snapshots, relative to the package.
      prefix: dict names start with it ("MYLIB" -> MYLIB_STABLE_CHECKSUMS);
        required, as in Bazel (nothing defaults to rcclx). Must match the
        prefix `snapctl create --prefix` recorded in snapshots/snapctl.conf.
      out: the checked-in file, in this package.
      **kwargs: attributes for the three targets (visibility, ...).
    """
    stable_checksums_check_prefix(name, prefix)
    pkg = native.package_name()
    _stable_checksums_gen(name = name, srcs = srcs, snapshots_root = snapshots_root, prefix = prefix, out = out, **kwargs)
    _stable_checksums_update(name = name + ".update", generated = ":" + name, checked_in = out, **kwargs)
    _stable_checksums_test(name = name + "_test", generated = ":" + name, checked_in = out, update_target = "//%s:%s.update" % (pkg, name), **kwargs)
