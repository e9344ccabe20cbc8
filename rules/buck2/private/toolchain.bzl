"""The one place where Buck2 actions get the helper binaries.

`toolchains//:rocpack` is a `rocpack_toolchain`; every rocpack rule reaches it
through a hidden `attrs.toolchain_dep`. Its `kpack` / `snapctl` are exec deps:
by default the cargo build of this repository (`rocpack//:rocpack_helpers`), or
release binaries fetched by `http_file` with a pinned sha256 when
`.buckconfig` says `[rocpack] tools = prebuilt` (see `rocpack_helper_tools`).
"""

load(":providers.bzl", "RocpackToolchainInfo")

TOOLCHAIN = "toolchains//:rocpack"

def toolchain_attr():
    """The hidden attribute through which a rule reaches the helpers.

    Returns:
      A dict {"_rocpack_toolchain": attrs.toolchain_dep(...)}.
    """
    return {
        "_rocpack_toolchain": attrs.toolchain_dep(
            default = TOOLCHAIN,
            providers = [RocpackToolchainInfo],
            doc = "The rocpack toolchain (kpack and snapctl).",
        ),
    }

def _rocpack_toolchain_impl(ctx: AnalysisContext) -> list[Provider]:
    return [
        DefaultInfo(),
        RocpackToolchainInfo(
            kpack = ctx.attrs.kpack[RunInfo],
            snapctl = ctx.attrs.snapctl[RunInfo],
        ),
    ]

rocpack_toolchain = rule(
    impl = _rocpack_toolchain_impl,
    doc = "Toolchain carrying the kpack and snapctl helpers for rocpack actions.",
    attrs = {
        "kpack": attrs.exec_dep(providers = [RunInfo], doc = "Runnable kpack helper (built for the execution platform)."),
        "snapctl": attrs.exec_dep(providers = [RunInfo], doc = "Runnable snapctl helper (built for the execution platform)."),
    },
    is_toolchain_rule = True,
)

def rocpack_helper_tools(name, cargo_build = "rocpack//:rocpack_helpers", visibility = ["PUBLIC"]):
    """Declares `name` (a rocpack_toolchain) from `[rocpack]` in .buckconfig.

    Also `<name>_kpack` and `<name>_snapctl`: the two binaries as runnable
    targets (`buck2 run toolchains//:rocpack_kpack -- verify ...`).

    `tools = cargo` (default): the helpers are `<cargo_build>[kpack]` and
    `<cargo_build>[snapctl]`. `tools = prebuilt`: `kpack_url` + `kpack_sha256`
    and `snapctl_url` + `snapctl_sha256` must all be set; the binaries are
    fetched with `http_file` and checked against the digests.

    Args:
      name: name of the toolchain target (rules expect "rocpack").
      cargo_build: the rocpack_cargo_build target.
      visibility: visibility of the toolchain target.
    """
    # The project's root .buckconfig decides (read_root_config): the
    # toolchains cell of a consumer project has no .buckconfig of its own, so
    # read_config there never saw `tools = prebuilt` (issue 24).
    mode = read_root_config("rocpack", "tools", "cargo")
    if mode == "cargo":
        kpack = cargo_build + "[kpack]"
        snapctl = cargo_build + "[snapctl]"
    elif mode == "prebuilt":
        for tool in ["kpack", "snapctl"]:
            url = read_root_config("rocpack", tool + "_url", "")
            sha256 = read_root_config("rocpack", tool + "_sha256", "")
            if not url or not sha256:
                fail("[rocpack] tools = prebuilt needs both %s_url and %s_sha256 in .buckconfig (got url '%s', sha256 '%s')" % (tool, tool, url, sha256))
            native.http_file(
                name = name + "_" + tool + "_prebuilt",
                urls = [url],
                sha256 = sha256,
                executable = True,
                out = tool,
            )
        kpack = ":" + name + "_kpack_prebuilt"
        snapctl = ":" + name + "_snapctl_prebuilt"
    else:
        fail("[rocpack] tools must be 'cargo' or 'prebuilt', got '%s'" % mode)
    rocpack_toolchain(name = name, kpack = kpack, snapctl = snapctl, visibility = visibility)

    # The same binaries for people: `buck2 run toolchains//:rocpack_snapctl --
    # create ...` (kpack verify, snapctl create), whichever `tools` is set.
    for tool, actual in [("kpack", kpack), ("snapctl", snapctl)]:
        native.alias(name = name + "_" + tool, actual = actual, visibility = visibility)
