"""prebuilt_snapshot: dev (source) or a pinned prebuilt stable / last-stable
snapshot, selected by the library's own channel (`-m rcclx_stable`), else the
global `snapshot_channel` (`-m snapshot_stable`; default dev), and the
`rocm_version` constraint (`-m rocm64`). Its original name, rcclx_snapshot
(exported by defs.bzl), is the same macro."""

load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "SNAPSHOT_CHANNELS", "abi_guard_args", "available_versions", "checksum_sha256", "missing_snapshot_message", "package_path", "prebuilt_snapshot_plan", "snapshot_dir", "snapshot_target_name", "store_blob_path")
load(":abi_guard.bzl", "abi_guard", "abi_guard_test")
load(":config.bzl", "channel_constraint", "library_channel_constraints", "library_channel_value", "rocm_constraint", "rocm_versions")
load(":snapshot_blob.bzl", "snapshot_blob")

def buck2_spelling(message: str) -> str:
    """rules/common's message with Buck2's spelling of the commands it names.

    `--config=<alias>` becomes `-m <alias>` and `bazel run` becomes
    `buck2 run`; the text is otherwise the same as Bazel's.

    Args:
      message: a message from rules/common.

    Returns:
      The message for Buck2 users.
    """
    return message.replace("--config=", "-m ").replace("bazel run", "buck2 run")

_MESSAGE_ARGS = ["library", "channel", "version", "available", "snapshots_root", "store", "artifact", "update_command", "checksums_prefix"]

def _missing_impl(ctx: AnalysisContext) -> list[Provider]:
    # Positional arguments of missing_snapshot_message, in its order.
    args = [getattr(ctx.attrs, a) for a in _MESSAGE_ARGS]
    args[-2] = args[-2] or None
    args[-1] = args[-1] or None
    fail(buck2_spelling(missing_snapshot_message(*args)))

def _broken_impl(ctx: AnalysisContext) -> list[Provider]:
    fail(ctx.attrs.message)

_broken_snapshot = rule(
    impl = _broken_impl,
    doc = "Selected when the checksums file pins a blob the local store does not hold: fails at analysis time naming the blob and the fixes, so the rest of the package (dev, the checksums test, `.update`) still loads.",
    attrs = {
        "message": attrs.string(doc = "The error."),
    },
)

def _missing_blob_message(library, channel, version, sha, blob, update_command):
    return "\n".join([
        "the %s snapshot of %s for ROCm %s is pinned to sha256 %s, which is not in the store:" % (channel.replace("_", "-"), library, version, sha),
        "  missing: %s" % blob,
        "  if the checksums file is stale, regenerate it: %s" % (update_command or "snapctl gen-checksums"),
        "  otherwise restore the blob (snapctl create put it there; `snapctl verify` checks a store)",
    ])

def _absolute_target(label: str | None) -> str | None:
    # ":x" -> "//<package>:x": a label printed in a message must work from the project root.
    if label and label.startswith(":"):
        return "//" + native.package_name() + label
    return label

_missing_snapshot = rule(
    impl = _missing_impl,
    doc = "Selected when the configured channel/version has no snapshot: fails at analysis time with a message that says how to create it.",
    attrs = {
        "artifact": attrs.string(doc = "Artifact file name (for the snapctl command)."),
        "available": attrs.list(attrs.string(), default = [], doc = "Versions that do have a snapshot in this channel."),
        "channel": attrs.string(doc = "The requested channel."),
        "checksums_prefix": attrs.string(default = "", doc = "Dict-name prefix of the checksums file, passed as `snapctl create --prefix` in the message (empty: none)."),
        "library": attrs.string(doc = "Library name for the message."),
        "snapshots_root": attrs.string(doc = "Repository-relative snapshots root (for the snapctl command)."),
        "store": attrs.string(doc = "Store URL/path (for the snapctl command)."),
        "update_command": attrs.string(default = "", doc = "Command regenerating the checksums file (empty: the snapctl gen-checksums form)."),
        "version": attrs.string(doc = "The requested ROCm version."),
    },
)

def _dev_static(pkg: str, dev: str) -> str:
    # The dev library's static archive (cxx_library's [static] sub-target).
    label = ("//%s%s" % (pkg, dev)) if dev.startswith(":") else dev
    return label + "[static]"

def prebuilt_snapshot(
        name: str,
        dev: str,
        stable_checksums: dict[str, typing.Any],
        last_stable_checksums: dict[str, typing.Any],
        snapshots_root: str = "snapshots",
        local_store: str | None = None,
        remote_repo_prefix: str | None = None,
        store_url: str | None = None,
        artifact: str | None = None,
        library: str | None = None,
        channel_define: str | None = None,
        header_patterns: list[str] = ["**/*.h"],
        verify_with_snapctl: bool = True,
        checksums_target: str | None = None,
        checksums_prefix: str | None = None,
        abi_inputs: list[str] | None = None,
        snapshot_artifacts: dict[str, typing.Any] | None = None,
        visibility: list[str] = [],
        **kwargs):
    """A library built from source (dev) or taken from a pinned prebuilt snapshot.

    Selection: this library's own channel setting, declared here
    (`<name>_channel`; `-m <library>_dev|_stable|_last_stable` once the root
    PACKAGE lists the library in snapshot_modifier_aliases), else the global
    channel of rules/buck2/config (`-m snapshot_dev|_stable|_last_stable`;
    default dev), and the ROCm version (`-m rocm62`, `-m rocm64`, ...;
    default in the root PACKAGE). So one build can take library A from
    stable and B from dev. The select covers every channel x ROCm version: a
    pair without a snapshot resolves to a target that fails at analysis time
    naming channel, version, the versions that exist and the `snapctl
    create` command that adds one.

    Targets (same names as the Bazel macro):
      <name>: alias to depend on; resolves to the selected flavour.
      <name>_channel, <name>_channel_<channel>: this library's channel
        constraint setting and values (the targets of its `-m` aliases).
      <name>_dev: `dev` plus the channel define.
      <name>_<channel>_rocm<key>: prebuilt_cxx_library of a snapshot (static
        library verified by `snapctl fetch` + the snapshot's own headers), or
        the failing target when that snapshot does not exist (only compatible
        with its own channel and version, so `//...` skips it otherwise).
      <name>_<channel>_rocm<key>_blob: the verified static library.
      <name>_<channel>_rocm<key>_abi: with abi_inputs, that library once
        `snapctl abi-check` passed (what the prebuilt_cxx_library links).
        With abi_inputs, it and the prebuilt_cxx_library are compatible with
        their own channel and version only: `buck2 build //...` skips them
        unless the configuration selects them, so a drifted channel nobody
        selects does not fail it.
      <name>_<channel>_rocm<key>_abi_test: with abi_inputs, the same check
        as a test (`buck2 test //...`): red naming the library, channel,
        version, each changed file and the ways out.

    Args:
      name: the alias users depend on, e.g. "rcclx".
      dev: the cxx_library built from source.
      stable_checksums: <PREFIX>_STABLE_CHECKSUMS of stable_checksums.bzl (version -> sha256).
      last_stable_checksums: <PREFIX>_LAST_STABLE_CHECKSUMS (version -> sha256).
      snapshots_root: where the snapshots are, relative to the package; the
        headers of a snapshot are in <root>/stable/<ver>/ or <root>/last-stable/<ver>/.
      local_store: a content-addressed store in the repository, relative to
        the package (blobs at <local_store>/cas/sha256/<hex>).
      store_url: instead of local_store: an http(s) store; blobs are fetched
        with http_file from <store_url>/cas/sha256/<hex>, pinned by sha256.
      artifact: file name of the prebuilt static library; defaults to
        "lib<library>.a".
      library: library name in messages; defaults to `name`.
      channel_define: preprocessor macro defined for dependents as the
        channel name, a C string literal (`-DRCCLX_SNAPSHOT_CHANNEL="stable"`);
        None for none.
      header_patterns: globs (relative to each snapshot dir) of snapshotted headers.
      remote_repo_prefix: Bazel only (http_file repositories); fails on Buck2,
        where `store_url` fetches blobs with http_file directly.
      verify_with_snapctl: as in Bazel (default True there too); on Buck2
        every blob is always verified by `snapctl fetch` (sha256, size,
        metadata.txt), so False is refused.
      checksums_target: label of the stable_checksums target, named in the
        missing-snapshot message (`buck2 run <label>.update`).
      checksums_prefix: dict-name prefix of the checksums file (e.g. "MYLIB"
        for MYLIB_STABLE_CHECKSUMS), shown as `snapctl create --prefix` in the
        missing-snapshot message; defaults to the upper-cased library name
        for libraries other than rcclx.
      abi_inputs: ABI-drift guard: labels of the dependency headers/libraries
        the prebuilt archive was compiled against (recorded by `snapctl create
        --abi-input`, project-relative). Before an archive can be linked,
        `snapctl abi-check` compares them with these files and fails the build
        naming each changed file and the two ways out (re-cut; `-m` the dev
        channel). Needs `snapshot_artifacts`. As in Bazel.
      snapshot_artifacts: the checksums file's <PREFIX>_SNAPSHOT_ARTIFACTS
        dict (its `abi_inputs` entries are the recorded digests).
      visibility: visibility of <name>.
      **kwargs: common attributes for every target.
    """
    if remote_repo_prefix != None:
        fail("prebuilt_snapshot: remote_repo_prefix is for Bazel's http_file repositories; on Buck2 set store_url")
    if (local_store == None) == (store_url == None):
        fail("prebuilt_snapshot: set exactly one of local_store and store_url")
    if not verify_with_snapctl:
        fail("prebuilt_snapshot: on Buck2 blobs are always verified by snapctl fetch; leave verify_with_snapctl at True")
    pkg = native.package_name()
    plan = prebuilt_snapshot_plan(name, pkg, snapshots_root, stable_checksums, last_stable_checksums, library = library, artifact = artifact, local_store = local_store, store_url = store_url, abi_inputs = abi_inputs, snapshot_artifacts = snapshot_artifacts)
    versions = rocm_versions()
    checksums_target = _absolute_target(checksums_target)
    update_command = ("buck2 run %s.update" % checksums_target) if checksums_target else ""

    def _available(checksums):
        # A version no constraint value can select (a typo, or a new ROCm
        # release the project has not declared) does not stop the library
        # from loading; every missing-snapshot message names it and the fix.
        out = []
        for v in available_versions(checksums):
            if v in versions:
                out.append(v)
            else:
                out.append("%s (not a declared ROCm version: add it to `rocm_versions` under [rocpack] in the project's .buckconfig)" % v)
        return out

    def _flags(channel):
        # A C string literal ("stable"): C code uses it as it is, no stringizing.
        return ["-D" + channel_define + "=\"" + channel + "\""] if channel_define else []

    # This library's own channel (unset: the global channel decides).
    library_channel_constraints(name)

    def _own(channel):
        return ":" + library_channel_value(name, channel)

    def _compatible(channel, version):
        # Selected only by (own channel, version), or by (global channel,
        # version) when the own channel is unset: anything else is
        # incompatible, so `buck2 build //...` skips a missing snapshot.
        branches = {_own(channel): [rocm_constraint(version)]}
        for other in SNAPSHOT_CHANNELS:
            if other != channel:
                branches[_own(other)] = [_own(channel)]
        branches["DEFAULT"] = [channel_constraint(channel), rocm_constraint(version)]
        return select(branches)

    native.cxx_library(name = name + "_dev", exported_deps = [dev], exported_preprocessor_flags = _flags("dev"), **kwargs)
    by_version = {}

    for channel in PREBUILT_CHANNELS:
        checksums = plan.by_channel[channel]
        by_version[channel] = {}
        for version in versions:
            target = snapshot_target_name(name, channel, version)
            by_version[channel][rocm_constraint(version)] = ":" + target
            if version not in checksums:
                _missing_snapshot(
                    name = target,
                    library = plan.library,
                    channel = channel,
                    version = version,
                    available = _available(checksums),
                    snapshots_root = plan.root_path,
                    store = plan.store,
                    artifact = plan.artifact,
                    update_command = update_command,
                    checksums_prefix = checksums_prefix or ("" if plan.library == "rcclx" else plan.library.upper()),
                    target_compatible_with = _compatible(channel, version),
                    **kwargs
                )
                continue
            sha = checksum_sha256(checksums[version])
            snap_dir = snapshot_dir(snapshots_root, channel, version)
            if local_store != None:
                blob = local_store + "/" + store_blob_path(sha)
                if not native.glob([blob]):
                    _broken_snapshot(
                        name = target,
                        message = _missing_blob_message(plan.library, channel, version, sha, package_path(pkg, blob), update_command),
                        target_compatible_with = _compatible(channel, version),
                        **kwargs
                    )
                    continue
            else:
                blob = ":" + target + "_download"
                native.http_file(
                    name = target + "_download",
                    urls = [store_url.rstrip("/") + "/" + store_blob_path(sha)],
                    sha256 = sha,
                    out = plan.artifact,
                )
            files = native.glob([snap_dir + "/**"])
            snapshot_blob(name = target + "_blob", blob = blob, sha256 = sha, channel = channel, version = version, out = plan.artifact, metadata_files = files, snapshots_root_path = snapshots_root, **kwargs)
            archive = ":" + target + "_blob"
            linked = {}
            if abi_inputs != None:
                # What links the archive is compatible with its own channel
                # and version only, so `buck2 build //...` skips it unless
                # selected (then the guard runs first); the test reports a
                # drift of every channel in `buck2 test //...`.
                linked = {"target_compatible_with": _compatible(channel, version)}
                fix = struct(
                    snapctl = "buck2 run toolchains//:rocpack_snapctl --",
                    workspace = '"$(buck2 root --kind project)"',
                    artifact = '"$(buck2 build --show-full-simple-output %s)"' % _dev_static(pkg, dev),
                    rebuild = "buck2 build " + _dev_static(pkg, dev),
                    docs = "docs/buck2.md, \"When the ABI guard fires\"",
                    metadata = (native.glob([snap_dir + "/metadata.txt"]) or [None])[0],
                )
                guard = abi_guard_args(plan, target, archive, channel, version, "-m //%s:%s" % (pkg, library_channel_value(name, "dev")), fix)
                abi_guard(**dict(dict(guard, **linked), **kwargs))
                guard.pop("archive")
                abi_guard_test(**dict(dict(guard, name = target + "_abi_test"), **kwargs))
                archive = ":" + target + "_abi"
            headers = native.glob([snap_dir + "/" + p for p in header_patterns])
            native.prebuilt_cxx_library(
                name = target,
                static_lib = archive,
                exported_headers = {h[len(snap_dir) + 1:]: h for h in headers},
                header_namespace = "",
                exported_preprocessor_flags = _flags(channel),
                preferred_linkage = "static",
                **dict(linked, **kwargs)
            )

    # Own channel first; DEFAULT (own channel unset): the global channel.
    # Nested selects, no intermediate alias: an alias pointing at a missing
    # snapshot would make `buck2 build //...` fail on its incompatible dep.
    def _flavours(key):
        out = {key("dev"): ":" + name + "_dev"}
        for channel in PREBUILT_CHANNELS:
            out[key(channel)] = select(by_version[channel])
        return out

    branches = _flavours(_own)
    branches["DEFAULT"] = select(_flavours(channel_constraint))
    native.alias(name = name, actual = select(branches), visibility = visibility, **kwargs)
