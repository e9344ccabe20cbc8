"""prebuilt_snapshot: dev (source) or a prebuilt stable / last-stable
snapshot, selected per library by its own channel flag (default: the global
channel flag) and the ROCm version flag. Its original name, rcclx_snapshot
(exported by defs.bzl), is the same macro."""

load("//rules/common:snapshot.bzl", "PREBUILT_CHANNELS", "SNAPSHOT_CHANNELS", "abi_guard_args", "available_versions", "checksum_sha256", "default_checksums_prefix", "missing_snapshot_message", "prebuilt_snapshot_plan", "rocm_config_name", "snapshot_dir", "snapshot_target_name", "store_blob_path")
load(":abi_guard.bzl", "abi_guard", "abi_guard_test")
load(":providers.bzl", "FlagValueInfo")
load(":snapshot_blob.bzl", "snapshot_blob")
load(":string_flag.bzl", "string_flag")

def _flag(name):
    # Resolved against this repository, so the macro works from other repos too.
    return str(Label("//rules/bazel:" + name))

def _rocpack_flag_spelling(name, pkg = "rules/bazel"):
    # How a user types a target of rocpack on the command line: inside
    # rocpack itself "//rules/bazel:<name>", elsewhere "@rocpack//rules/bazel:<name>"
    # (the repository name docs/rules/consumers.md tells users to use).
    if Label("//rules/bazel:BUILD.bazel").workspace_name == "":
        return "//%s:%s" % (pkg, name)
    return "@rocpack//%s:%s" % (pkg, name)

def _dev_fix(pkg, dev):
    # The command rebuilding the dev library, and the shell word naming the
    # archive it makes (bazel-bin/<pkg>/lib<name>.a for a cc_library of this
    # workspace).
    label = _own_label(pkg, dev[1:]) if dev.startswith(":") else dev
    archive = "<the static archive of %s>" % label
    if label.startswith("//") and ":" in label:
        dpkg, dname = label[2:].split(":")
        archive = '"$(bazel info bazel-bin)"/%slib%s.a' % (dpkg + "/" if dpkg else "", dname)
    return "bazel build " + label, archive

def _with_manual(kwargs):
    # kwargs with "manual" added to its tags: left out of `//...`.
    return dict(kwargs, tags = kwargs.get("tags", []) + ["manual"])

def _own_label(pkg, name):
    # The spelling of a target of the package being evaluated, as typed on the
    # command line of the workspace that holds it.
    repo = native.repository_name()
    return "%s//%s:%s" % ("" if repo == "@" else repo, pkg, name)

def _missing_impl(ctx):
    own = ctx.attr.channel_setting[FlagValueInfo].value
    channel = own or ctx.attr._channel[FlagValueInfo].value
    version = ctx.attr._version[FlagValueInfo].value
    if channel not in PREBUILT_CHANNELS:
        fail("%s: no %s target for channel '%s'" % (ctx.label, ctx.attr.library, channel))
    fail(missing_snapshot_message(
        ctx.attr.library,
        channel,
        version,
        ctx.attr.available.get(channel, []),
        ctx.attr.snapshots_root,
        ctx.attr.store,
        ctx.attr.artifact,
        ctx.attr.update_command or None,
        ctx.attr.checksums_prefix or None,
"this library: --%s=%s; every library: --%s=%s" % (
            ctx.attr.channel_flag_spelling,
            channel,
            ctx.attr.global_channel_spelling,
            channel,
        ),
        "--%s=%s" % (ctx.attr.version_flag_spelling, version),
    ))

_missing_snapshot = rule(
    implementation = _missing_impl,
    doc = "Selected when the configured channel/version has no snapshot: fails at analysis time with a message that says how to create it.",
    attrs = {
        "library": attr.string(mandatory = True, doc = "Library name for the message."),
        "available": attr.string_list_dict(doc = "channel -> versions that do have a snapshot."),
        "snapshots_root": attr.string(doc = "Workspace-relative snapshots root (for the snapctl command)."),
        "store": attr.string(doc = "Store URL/path (for the snapctl command)."),
        "artifact": attr.string(doc = "Artifact file name (for the snapctl command)."),
        "update_command": attr.string(doc = "Command that regenerates the checksums file (for the message)."),
        "checksums_prefix": attr.string(doc = "Dict-name prefix of the checksums file, passed as `snapctl create --prefix` in the message."),
        "channel_setting": attr.label(mandatory = True, doc = "The library's own channel flag (<name>_channel)."),
        "channel_flag_spelling": attr.string(doc = "How the library's channel flag is typed (for the message)."),
        "global_channel_spelling": attr.string(doc = "How the global channel flag is typed (for the message)."),
        "version_flag_spelling": attr.string(doc = "How the ROCm version flag is typed (for the message)."),
        "_channel": attr.label(default = Label("//rules/bazel:snapshot_channel"), doc = "Global channel flag."),
        "_version": attr.label(default = Label("//rules/bazel:rocm_version"), doc = "ROCm version flag."),
    },
)

def _settings(own_flag, setting, channel, extra):
    # Two config_settings, mutually exclusive on the library's own flag: its
    # own choice of `channel`, and "empty: follow the global flag".
    native.config_setting(name = setting, flag_values = dict({":" + own_flag: channel}, **extra))
    native.config_setting(name = setting + "_global", flag_values = dict({":" + own_flag: "", _flag("snapshot_channel"): channel}, **extra))
    return [":" + setting, ":" + setting + "_global"]

def _defines(channel_define, channel):
    # A C string literal ("stable"): C code uses it as it is, no stringizing.
    # `defines` are shell-tokenized, hence the escaped quotes.
    return [channel_define + "=\\\"" + channel + "\\\""] if channel_define else []

def prebuilt_snapshot(
        name,
        dev,
        stable_checksums,
        last_stable_checksums,
        snapshots_root = "snapshots",
        local_store = None,
        remote_repo_prefix = None,
        store_url = None,
        artifact = None,
        library = None,
        channel_define = None,
        header_patterns = ["**/*.h"],
        verify_with_snapctl = True,
        checksums_target = None,
        checksums_prefix = None,
        abi_inputs = None,
        snapshot_artifacts = None,
        visibility = None,
        **kwargs):
    """A library that is built from source (dev) or a pinned prebuilt snapshot.

    Selection, per library: the flag `//<pkg>:<name>_channel` (made by this
    macro: "" | dev | stable | last_stable). Empty (the default) follows the
    global `@rocpack//rules/bazel:snapshot_channel` (default dev), so one
    invocation can take library A from stable and B from dev:

        bazel build --//libs:a_channel=stable --//libs:b_channel=dev //app
        bazel build --@rocpack//rules/bazel:snapshot_channel=stable //app   # every library

    The ROCm version is global: `@rocpack//rules/bazel:rocm_version`.

    Targets:
      <name>: alias to use as a cc dependency; resolves to the selected flavour.
      <name>_channel: this library's channel flag (string_flag).
      <name>_dev: `dev` plus the channel define.
      <name>_<channel>_rocm<key>: cc_library of a prebuilt snapshot (static
        library verified by digest + the snapshot's own headers), one per
        entry of the checksums dicts.
      <name>_<channel>_rocm<key>_abi: with abi_inputs, the archive once
        `snapctl abi-check` passed (what the cc_library links). With
        abi_inputs, these three targets are tagged "manual": `bazel build
        //...` builds a snapshot (and its guard) only through <name>, i.e.
        when the configuration selects it, so a drifted channel nobody
        selects does not fail it.
      <name>_<channel>_rocm<key>_abi_test: with abi_inputs, the same check
        as a test (`bazel test //...`): red naming the library, channel,
        version, each changed file and the ways out.
      <name>_missing: selected when no snapshot matches; fails at analysis
        time naming channel, version, the available versions and the
        `snapctl create` command (with this library's store, artifact and
        --prefix).

    Args:
      name: target name, e.g. "mylib".
      dev: label of the source-built cc_library.
      stable_checksums: dict ROCm version -> sha256 (<PREFIX>_STABLE_CHECKSUMS).
      last_stable_checksums: dict ROCm version -> sha256 (<PREFIX>_LAST_STABLE_CHECKSUMS).
      snapshots_root: snapshots root relative to the package (headers live in
        <root>/stable/<ver>/ and <root>/last-stable/<ver>/).
      local_store: directory of a local content-addressed store relative to
        the package; blobs are <local_store>/cas/sha256/<hex>.
      remote_repo_prefix: instead of local_store: prefix of the http_file
        repositories made by rocpack_snapshot_blobs (WORKSPACE) or the
        rocpack_snapshots module extension; blob of (channel, version) is
        @<prefix>_<channel>_rocm<key>//file.
      store_url: store shown in the missing-snapshot message (defaults to
        local_store).
      artifact: file name of the prebuilt static library; defaults to
        "lib<library>.a".
      library: library name in messages; defaults to `name`.
      channel_define: preprocessor macro defined for dependents as the
        channel name, a C string literal (`-DMYLIB_SNAPSHOT_CHANNEL="stable"`);
        None for none.
      header_patterns: globs (relative to each snapshot dir) of snapshotted headers.
      checksums_target: label of the stable_checksums target, named in the
        missing-snapshot message ("bazel run <label>.update"); ":name" is
        made absolute.
      checksums_prefix: dict-name prefix of the checksums file (e.g. "MYLIB"
        for MYLIB_STABLE_CHECKSUMS); the message's `snapctl create` command
        carries it as `--prefix`. Defaults to `library` upper-cased.
      verify_with_snapctl: also verify each blob with `snapctl fetch` against
        the snapshot's metadata.txt (default True, as in Buck2, where it is
        always on); False checks the pinned sha256 only.
      abi_inputs: ABI-drift guard: labels of the dependency headers/libraries
        the prebuilt archives were compiled against (`snapctl create
        --abi-input`). Before an archive can be linked, `snapctl abi-check`
        compares them with the digests recorded for that snapshot and fails
        naming each changed file and the ways out (re-cut with `snapctl
        recut`, after rebuilding `dev`'s archive; the dev channel; for
        stable, `snapctl rollback`), with absolute paths. Needs
        `snapshot_artifacts`.
      snapshot_artifacts: the checksums file's <PREFIX>_SNAPSHOT_ARTIFACTS
        dict (its `abi_inputs` entries are the recorded digests).
      visibility: visibility of <name> and <name>_channel.
      **kwargs: common attributes (tags, ...) for every target.
    """
    if (local_store == None) == (remote_repo_prefix == None):
        fail("prebuilt_snapshot: set exactly one of local_store and remote_repo_prefix")
    pkg = native.package_name()
    plan = prebuilt_snapshot_plan(name, pkg, snapshots_root, stable_checksums, last_stable_checksums, library = library, artifact = artifact, local_store = local_store, store_url = store_url, remote_repo_prefix = remote_repo_prefix, abi_inputs = abi_inputs, snapshot_artifacts = snapshot_artifacts)
    if checksums_target and checksums_target.startswith(":"):
        checksums_target = _own_label(pkg, checksums_target[1:])

    # This library's channel: "" follows the global flag.
    own_flag = name + "_channel"
    string_flag(
        name = own_flag,
        build_setting_default = "",
        values = [""] + SNAPSHOT_CHANNELS,
        visibility = visibility,
    )

    native.cc_library(name = name + "_dev", deps = [dev], defines = _defines(channel_define, "dev"), **kwargs)
    branches = {s: ":" + name + "_dev" for s in _settings(own_flag, name + "_dev_config", "dev", {})}

    for channel in PREBUILT_CHANNELS:
        for version in available_versions(plan.by_channel[channel]):
            sha = checksum_sha256(plan.by_channel[channel][version])
            target = snapshot_target_name(name, channel, version)
            snap_dir = snapshot_dir(snapshots_root, channel, version)
            if local_store != None:
                blob = local_store + "/" + store_blob_path(sha)
            else:
                blob = "@%s_%s_%s//file" % (remote_repo_prefix, channel, rocm_config_name(version))
            metadata = []
            if verify_with_snapctl:
                metadata = native.glob([snap_dir + "/**"])
            snapshot_blob(
                name = target + "_blob",
                blob = blob,
                sha256 = sha,
                out = plan.artifact,
                channel = channel,
                version = version,
                metadata = metadata,
                snapshots_root_path = plan.root_path if verify_with_snapctl else "",
                snapctl = _flag("snapctl") if verify_with_snapctl else None,
                **kwargs
            )
            archive = ":" + target + "_blob"
            linked_kwargs = kwargs
            if abi_inputs != None:
                # What links the archive is left out of `//...` (the alias
                # `name` still builds it, guard first, when selected); the
                # test reports a drift of every channel in `bazel test //...`.
                linked_kwargs = _with_manual(kwargs)
                rebuild, dev_archive = _dev_fix(pkg, dev)
                fix = struct(
                    snapctl = "bazel run %s --" % _rocpack_flag_spelling("resolved_snapctl", "rules/bazel/toolchain"),
                    workspace = '"$(bazel info workspace)"',
                    artifact = dev_archive,
                    rebuild = rebuild,
                    docs = "docs/rules/consumers.md, \"When the ABI guard fires\"",
                    metadata = (native.glob([snap_dir + "/metadata.txt"]) or [None])[0],
                )
                guard = abi_guard_args(plan, target, archive, channel, version, "--%s=dev" % _own_label(pkg, own_flag), fix)
                abi_guard(**dict(guard, **linked_kwargs))
                guard.pop("archive")
                abi_guard_test(**dict(dict(guard, name = target + "_abi_test", size = "small"), **kwargs))
                archive = ":" + target + "_abi"
            native.cc_import(name = target + "_import", static_library = archive, **linked_kwargs)
            native.cc_library(
                name = target,
                hdrs = native.glob([snap_dir + "/" + p for p in header_patterns]),
                strip_include_prefix = snap_dir,
                deps = [":" + target + "_import"],
                defines = _defines(channel_define, channel),
                **linked_kwargs
            )
            for s in _settings(own_flag, target + "_config", channel, {_flag("rocm_version"): version}):
                branches[s] = ":" + target

    _missing_snapshot(
        name = name + "_missing",
        library = plan.library,
        available = {c: available_versions(plan.by_channel[c]) for c in PREBUILT_CHANNELS},
        snapshots_root = plan.root_path,
        store = plan.store,
        artifact = plan.artifact,
        update_command = ("bazel run %s.update" % checksums_target) if checksums_target else "",
        checksums_prefix = checksums_prefix or default_checksums_prefix(plan.library),
        channel_setting = ":" + own_flag,
        channel_flag_spelling = _own_label(pkg, own_flag),
        global_channel_spelling = _rocpack_flag_spelling("snapshot_channel"),
        version_flag_spelling = _rocpack_flag_spelling("rocm_version"),
        tags = kwargs.get("tags", []) + ["manual"],
        **{k: v for k, v in kwargs.items() if k != "tags"}
    )
    branches["//conditions:default"] = ":" + name + "_missing"
    native.alias(name = name, actual = select(branches), visibility = visibility, **kwargs)
