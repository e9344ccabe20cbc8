"""kpack_split: one artifact directory in, one split tree out (Buck2)."""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:kpack.bzl", "KPACK_DIRS_SCRIPT", "kpack_declared_symlinks", "kpack_manifest_root", "kpack_package_dir_name", "kpack_path_depth", "kpack_relative_path", "kpack_split_arg_list")
load(":providers.bzl", "KpackSplitInfo", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

def kpack_split_action(actions: AnalysisActions, kpack: RunInfo, artifact_dir: Artifact, artifact_prefix: str, out_name: str, split_databases: list[str] = [], compression: str = "", exclude_archs: list[str] = [], expect_archs: list[str] | None = None, staging_roots: list = []) -> (Artifact, Artifact):
    """Registers one `kpack split` (and the arch listing); reusable by other rules.

    Args:
      actions: the rule's AnalysisActions.
      kpack: RunInfo of the kpack helper.
      artifact_dir: the artifact directory (artifact_manifest.txt at its top).
      artifact_prefix: --artifact-prefix.
      out_name: name of the declared output directory.
      split_databases: --split-databases handlers.
      compression: "zstd", "none" or "" (tool default).
      exclude_archs: --exclude-arch values.
      expect_archs: when not None (nor empty), the build fails unless exactly these archs come out.
      staging_roots: directories `artifact_dir`'s symlinks were staged from
        (`--staging-root`), e.g. from `kpack_staging_roots`.

    Returns:
      (output directory, archs file).
    """
    out_dir = actions.declare_output(out_name, dir = True)
    actions.run(
        cmd_args(
            kpack,
            "split",
            "--artifact-dir",
            artifact_dir,
            "--output-dir",
            out_dir.as_output(),
            kpack_split_arg_list(artifact_prefix, split_databases, compression, exclude_archs),
            [cmd_args("--staging-root", r) for r in staging_roots],
        ),
        category = "kpack_split",
        identifier = artifact_prefix,
        env = HELPER_ENV,
    )
    archs_file = actions.declare_output(out_name + ".archs")
    expect = " ".join(expect_archs) if expect_archs != None else ""
    actions.run(
        cmd_args("/bin/sh", "-c", KPACK_DIRS_SCRIPT, "kpack_dirs", "archs", out_dir, artifact_prefix, expect, archs_file.as_output()),
        category = "kpack_split_archs",
        identifier = artifact_prefix,
        env = HELPER_ENV,
    )
    return out_dir, archs_file

def kpack_staging_roots(srcs: dict[str, Artifact]) -> list:
    """The directories a `symlinked_dir` of `srcs` links into, one per origin.

    Each staged `<rel>` is a symlink to its input; the input's path minus
    `<rel>` is the tree it came from (the package's artifact directory for
    sources, the producing rule's output for generated files). `kpack split
    --staging-root` accepts exactly the links that mirror those trees.

    Args:
      srcs: staged path -> input, as given to `symlinked_dir`.

    Returns:
      `cmd_args` naming each origin directory once.
    """
    roots = {}
    for rel, f in srcs.items():
        depth = kpack_path_depth(rel)
        key = (f.is_source, str(f.owner), depth)
        if key not in roots:
            roots[key] = cmd_args(f, parent = depth)
    return list(roots.values())

def _kpack_split_impl(ctx: AnalysisContext) -> list[Provider]:
    toolchain = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo]
    srcs = ctx.attrs.srcs
    root = kpack_manifest_root([f.short_path for f in srcs])

    # Symlinks, not copies (a split input can be gigabytes): every staged file
    # links to its input, and `--staging-root` tells kpack which trees those
    # links mirror. The artifact's own symlinks are judged as in the original
    # tree (kept inside it, refused when they escape).
    staged = {kpack_relative_path(f.short_path, root): f for f in srcs}

    # Declared links replace the sources at their paths (see the attribute).
    links = kpack_declared_symlinks(ctx.attrs.symlinks)
    if links:
        links_dir = ctx.actions.declare_output(ctx.label.name + ".links", dir = True)
        ctx.actions.run(
            cmd_args("/bin/sh", "-c", KPACK_DIRS_SCRIPT, "kpack_dirs", "links", links_dir.as_output(), [x for pair in links for x in pair]),
            category = "kpack_split_links",
            env = HELPER_ENV,
        )
        for path, _ in links:
            staged[path] = links_dir.project(path)
    artifact_dir = ctx.actions.symlinked_dir(ctx.label.name + ".in", staged)
    prefix = ctx.attrs.artifact_prefix or ctx.label.name
    expect = sorted(ctx.attrs.archs) if ctx.attrs.archs else None
    out_dir, archs_file = kpack_split_action(
        ctx.actions,
        kpack = toolchain.kpack,
        artifact_dir = artifact_dir,
        artifact_prefix = prefix,
        out_name = ctx.label.name + ".split",
        split_databases = ctx.attrs.split_databases,
        compression = ctx.attrs.compression or "",
        exclude_archs = ctx.attrs.exclude_archs,
        expect_archs = expect,
        staging_roots = kpack_staging_roots(staged),
    )
    return [
        DefaultInfo(
            default_output = out_dir,
            # The arch listing (and with `archs`, its check) is built with the
            # split, as in Bazel, where one action makes both.
            other_outputs = [archs_file],
            sub_targets = {
                "archs": [DefaultInfo(default_output = archs_file)],
                "generic": [DefaultInfo(default_output = out_dir.project(kpack_package_dir_name(prefix, "generic")))],
            },
        ),
        KpackSplitInfo(archs = expect, archs_file = archs_file, artifact_prefix = prefix, dir = out_dir, shard = ctx.attrs.shard or ctx.label.name),
    ]

kpack_split = rule(
    impl = _kpack_split_impl,
    doc = """`kpack split` of one TheRock artifact directory.

The output directory `<name>.split/` has `<artifact_prefix>_generic/` (the
host code, with markers, the generic files and artifact_manifest.txt) and, for
each arch found, `<artifact_prefix>_<arch>/` (its `.kpack` files and database
files only). `<name>.archs` (sub-target `[archs]`: the archs, one per line) is
built with it, so `archs` is checked whenever the split is built or used.
Sub-targets: `[archs]`, `[generic]`.
""",
    attrs = dict({
        "archs": attrs.list(attrs.string(), default = [], doc = "Archs the split must produce (e.g. [\"gfx1100\", \"gfx906\"]). When given, the build fails unless exactly these come out, and the provider carries the list."),
        "artifact_prefix": attrs.string(default = "", doc = "Component name for --artifact-prefix (e.g. \"blas_lib\"); defaults to the target name."),
        "compression": attrs.option(attrs.enum(["zstd", "none"]), default = None, doc = "--compression of the .kpack archives (zstd or none); unset uses the tool's default."),
        "exclude_archs": attrs.list(attrs.string(), default = [], doc = "Archs passed to --exclude-arch (kept in the host code, not split out)."),
        "shard": attrs.string(default = "", doc = "Name of the CI shard this split belongs to (e.g. \"gfx110X-build\"); kpack_recombine stages it under this name, which the packaging config's primary_shard refers to. Defaults to the target name."),
        "split_databases": attrs.list(attrs.string(), default = [], doc = "Database handlers for --split-databases: rocblas, hipblaslt, aotriton, miopen."),
        "srcs": attrs.list(attrs.source(), doc = "The artifact directory as a file set (glob) that contains exactly one artifact_manifest.txt; paths are taken relative to that manifest's directory."),
        "symlinks": attrs.dict(attrs.string(), attrs.string(), default = {}, doc = "The artifact's symlinks: path below the artifact directory -> link target text, e.g. {\"lib/librocblas.so.5\": \"librocblas.so.5.2\"}. Made by an action, so the split keeps them as links locally and on a remote worker alike; a file of `srcs` at such a path is left out. (Buck2 also sends an undeclared source symlink to a worker as a link, so here the attribute makes the BUCK file say what the Bazel one must; docs/remote-execution.md.)"),
    }, **toolchain_attr()),
)
