"""kpack_split: one artifact directory in, one split tree out."""

load("//rules/common:kpack.bzl", "KPACK_DIRS_SCRIPT", "KPACK_SPLIT_MNEMONIC", "kpack_declared_symlinks", "kpack_manifest_root", "kpack_relative_path", "kpack_split_arg_list")
load(":providers.bzl", "KpackSplitInfo")
load(":tools.bzl", "ACTION_ENV", "stage_list", "tool_attrs")

def kpack_split_action(ctx, kpack, stage, artifact_files, out_dir, archs_file, artifact_prefix, split_databases = [], compression = "", exclude_archs = [], expect_archs = None, symlinks = {}):
    """Registers one `kpack split` action (reusable by other rules).

    Args:
      ctx: rule context (for actions and label).
      kpack: the kpack executable (File).
      stage: the stage.sh executable (File).
      artifact_files: list of (relative path, File) pairs making the artifact
        directory (artifact_manifest.txt among them), or [("", tree)] for a
        directory input.
      out_dir: declared tree artifact receiving <prefix>_generic/, <prefix>_<arch>/.
      archs_file: declared File listing the produced archs.
      artifact_prefix: --artifact-prefix.
      split_databases: --split-databases handlers.
      compression: "zstd", "none" or "" (tool default).
      exclude_archs: --exclude-arch values.
      expect_archs: when not None (nor empty), the action fails unless exactly these archs come out.
      symlinks: path below the artifact directory -> link target text: staged
        as links (see kpack_declared_symlinks); a file of artifact_files at
        such a path is left out.
    """
    links = kpack_declared_symlinks(symlinks)
    artifact_files = [(rel, f) for rel, f in artifact_files if rel not in symlinks]
    lst = stage_list(ctx, "stage.txt", [("a/" + rel if rel else "a", f) for rel, f in artifact_files])
    args = ctx.actions.args()
    args.add("--stage", lst)
    args.add("--kpack-dirs", KPACK_DIRS_SCRIPT)
    if links:
        # The link list is an input (in the action key), the links are made
        # by the action: identical wherever it runs.
        link_list = ctx.actions.declare_file(ctx.label.name + ".links.txt")
        ctx.actions.write(link_list, "".join(["a/%s\t%s\n" % (p, t) for p, t in links]))
        args.add("--links", link_list)
    args.add("--link-inputs")
    args.add("--collect-all", out_dir.path)
    args.add("--archs", archs_file)
    args.add(artifact_prefix)
    args.add(" ".join(expect_archs or []))
    args.add("--")
    args.add(kpack)
    args.add("split")
    args.add("--artifact-dir", "@STAGE@/a")
    args.add("--output-dir", "@OUT@")
    args.add("@STAGING_ROOTS@")
    args.add_all(kpack_split_arg_list(artifact_prefix, split_databases, compression, exclude_archs))
    ctx.actions.run(
        executable = stage,
        arguments = [args],
        inputs = [lst] + ([link_list] if links else []) + [f for _, f in artifact_files],
        tools = [kpack],
        outputs = [out_dir, archs_file],
        mnemonic = KPACK_SPLIT_MNEMONIC,
        progress_message = "kpack split %s (%s)" % (artifact_prefix, ctx.label),
        env = ACTION_ENV,
    )

def _kpack_split_impl(ctx):
    files = ctx.files.srcs
    dirs = [f for f in files if f.is_directory]
    if dirs:
        if len(files) != 1:
            fail("kpack_split: give either one directory target or a file set, not both")
        if ctx.attr.symlinks:
            fail("kpack_split: `symlinks` applies to a file set; a directory target keeps its own links")
        artifact_files = [("", dirs[0])]
    else:
        # Paths relative to the package keep user-visible names in messages.
        root = kpack_manifest_root([f.path for f in files])
        artifact_files = [(kpack_relative_path(f.path, root), f) for f in files]
    prefix = ctx.attr.artifact_prefix or ctx.label.name
    out_dir = ctx.actions.declare_directory(ctx.label.name + ".split")
    archs_file = ctx.actions.declare_file(ctx.label.name + ".archs")
    expect = sorted(ctx.attr.archs) if ctx.attr.archs else None
    kpack_split_action(
        ctx,
        kpack = ctx.executable._kpack,
        stage = ctx.executable._stage,
        artifact_files = artifact_files,
        out_dir = out_dir,
        archs_file = archs_file,
        artifact_prefix = prefix,
        split_databases = ctx.attr.split_databases,
        compression = ctx.attr.compression,
        exclude_archs = ctx.attr.exclude_archs,
        expect_archs = expect,
        symlinks = ctx.attr.symlinks,
    )
    return [
        DefaultInfo(files = depset([out_dir]), runfiles = ctx.runfiles(files = [out_dir, archs_file])),
        KpackSplitInfo(
            dir = out_dir,
            artifact_prefix = prefix,
            shard = ctx.attr.shard or ctx.label.name,
            archs = expect,
            archs_file = archs_file,
        ),
        OutputGroupInfo(archs = depset([archs_file])),
    ]

kpack_split = rule(
    implementation = _kpack_split_impl,
    doc = """Splits one TheRock artifact directory with `kpack split`.

Output: a directory `<name>.split/` holding `<artifact_prefix>_generic/` (host
code with markers, generic files, artifact_manifest.txt) and one
`<artifact_prefix>_<arch>/` per discovered arch (only `.kpack` files and arch
database files); the file `<name>.archs` (output group `archs`) lists the archs.
""",
    attrs = dict({
        "srcs": attr.label_list(
            allow_files = True,
            mandatory = True,
            doc = "The artifact directory: either one directory (tree artifact) target, or a file set (glob) that contains exactly one artifact_manifest.txt; paths are taken relative to that manifest's directory.",
        ),
        "artifact_prefix": attr.string(doc = "Component name for --artifact-prefix (e.g. \"blas_lib\"); defaults to the target name."),
        "shard": attr.string(doc = "Name of the CI shard this split belongs to (e.g. \"gfx110X-build\"); kpack_recombine stages it under this name, which the packaging config's primary_shard refers to. Defaults to the target name."),
        "archs": attr.string_list(doc = "Archs the split must produce (e.g. [\"gfx1100\", \"gfx906\"]). When given, the action fails unless exactly these come out, and the provider carries the list."),
        "split_databases": attr.string_list(doc = "Database handlers for --split-databases: rocblas, hipblaslt, aotriton, miopen."),
        "compression": attr.string(default = "", values = ["", "zstd", "none"], doc = "--compression of the .kpack archives; empty uses the tool's default."),
        "exclude_archs": attr.string_list(doc = "Archs passed to --exclude-arch (kept in the host code, not split out)."),
        "symlinks": attr.string_dict(doc = "The artifact's symlinks: path below the artifact directory (the manifest's) -> link target text, e.g. {\"lib/librocblas.so.5\": \"librocblas.so.5.2\"}. Staged as links, so the split keeps them, locally and remotely alike; a file of `srcs` at such a path is left out. A source symlink that is not declared is packaged as the file it points to (Bazel's view of a source: its content), with a note when the action runs locally (docs/remote-execution.md)."),
    }, **tool_attrs(kpack = True)),
)
