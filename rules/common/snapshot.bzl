"""Pure Starlark shared by the Bazel and Buck2 snapshot rules.

No load(), no ctx, no native.*, no type annotations. Channels, ROCm version
keys, target and config names, the stable_checksums.bzl shape and the
missing-snapshot message live here so both build systems say the same thing.
"""

# Channels in the order users see them. "dev" is built from source.
SNAPSHOT_CHANNELS = ["dev", "stable", "last_stable"]

# Channels served from prebuilt snapshots.
PREBUILT_CHANNELS = ["stable", "last_stable"]

# ROCm versions the configs of this repository know (`--config=rocm64` etc.).
ROCM_VERSIONS = ["6.2", "6.4", "7.0", "7.1"]

def check_channel(channel):
    """Fails unless `channel` is one of SNAPSHOT_CHANNELS.

    Args:
      channel: a channel name.

    Returns:
      The channel.
    """
    if channel not in SNAPSHOT_CHANNELS:
        fail("unknown snapshot channel '%s'; expected one of %s" % (channel, ", ".join(SNAPSHOT_CHANNELS)))
    return channel

def version_key(version):
    """Compact key of a ROCm version: "6.4" -> "64", "6.4.2" -> "642".

    Args:
      version: a dotted ROCm version.

    Returns:
      The digits only.
    """
    if not version:
        fail("empty ROCm version")
    for c in version.elems():
        if not (c.isdigit() or c == "."):
            fail("invalid ROCm version '%s' (digits and dots only)" % version)
    return version.replace(".", "")

def rocm_config_name(version):
    """Name of the Bazel --config / Buck2 -m alias for a ROCm version ("rocm64").

    Args:
      version: e.g. "6.4".

    Returns:
      "rocm" + version_key(version).
    """
    return "rocm" + version_key(version)

def channel_config_name(library, channel):
    """Name of the Bazel --config / Buck2 -m alias for a channel ("rcclx_stable").

    Args:
      library: the library prefix in lower case, e.g. "rcclx".
      channel: one of SNAPSHOT_CHANNELS.

    Returns:
      "<library>_<channel>".
    """
    return library + "_" + check_channel(channel)

def default_checksums_prefix(library):
    """Dict-name prefix of a library's stable_checksums.bzl: "my-lib" -> "MY_LIB".

    Args:
      library: the library name.

    Returns:
      The name upper-cased, every character other than a letter or digit
      replaced by "_".
    """
    out = ""
    for c in library.elems():
        out += c.upper() if c.isalnum() else "_"
    if not out or out[0].isdigit():
        fail("library name '%s' does not give a checksums prefix; set it explicitly" % library)
    return out

def default_artifact(library):
    """Default file name of a library's prebuilt static library: "mylib" -> "libmylib.a".

    Args:
      library: the library name.

    Returns:
      "lib<library>.a".
    """
    return "lib" + library + ".a"

def channel_dir(channel):
    """Directory of a prebuilt channel under the snapshots root (design 3.2).

    Args:
      channel: "stable" or "last_stable".

    Returns:
      "stable" or "last-stable".
    """
    if channel not in PREBUILT_CHANNELS:
        fail("channel '%s' has no snapshot directory" % channel)
    return channel.replace("_", "-")

def checksums_dict_name(prefix, channel):
    """Name of a dict in stable_checksums.bzl: ("RCCLX", "last_stable") -> "RCCLX_LAST_STABLE_CHECKSUMS".

    Args:
      prefix: the --prefix given to `snapctl gen-checksums`.
      channel: "stable" or "last_stable".

    Returns:
      The dict name.
    """
    if channel not in PREBUILT_CHANNELS:
        fail("channel '%s' has no checksums dict" % channel)
    return prefix + "_" + channel.upper() + "_CHECKSUMS"

def snapshot_target_name(name, channel, version):
    """Target of one prebuilt snapshot made by rcclx_snapshot: "rcclx_stable_rocm64".

    Args:
      name: the rcclx_snapshot name.
      channel: "stable" or "last_stable".
      version: ROCm version.

    Returns:
      "<name>_<channel>_rocm<key>".
    """
    return name + "_" + check_channel(channel) + "_" + rocm_config_name(version)

def checksum_sha256(entry):
    """The sha256 of one stable_checksums.bzl entry.

    Accepts a plain hex string or a dict with a "sha256" key, so both shapes
    of the generated file work.

    Args:
      entry: the value stored under a version key.

    Returns:
      64 lower-case hex digits.
    """
    if type(entry) == "dict":
        entry = entry.get("sha256", "")
    if type(entry) != "string" or len(entry) != 64:
        fail("stable_checksums entry is not a sha256: %r" % (entry,))
    for c in entry.elems():
        if c not in "0123456789abcdef":
            fail("stable_checksums entry is not a lower-case hex sha256: %s" % entry)
    if entry == "0" * 64:
        fail("stable_checksums entry is the all-zero placeholder")
    return entry

def available_versions(checksums):
    """Sorted versions that have a snapshot in one checksums dict.

    Args:
      checksums: dict version -> sha256 (or dict with "sha256").

    Returns:
      Sorted list of versions.
    """
    return sorted(checksums.keys())

def missing_snapshot_message(library, channel, version, available, snapshots_root, store, artifact, update_command = None, checksums_prefix = None, channel_hint = None, version_hint = None):
    """The analysis-time error for a channel/version without a snapshot.

    Args:
      library: e.g. "rcclx".
      channel: "stable" or "last_stable".
      version: the requested ROCm version.
      available: versions that do exist in that channel.
      snapshots_root: workspace-relative snapshots root (for the command).
      store: store URL or path (for the command).
      artifact: artifact file name, e.g. "librcclx-dev.a".
      update_command: optional command regenerating the checksums file
        (e.g. "bazel run //comms/rcclx:stable_checksums.update").
      checksums_prefix: dict-name prefix of the library's checksums file
        (e.g. "MYLIB" for MYLIB_STABLE_CHECKSUMS); added to the command as
        `--prefix`, which snapctl then records in snapctl.conf.
      channel_hint: optional text telling how the channel is selected, shown
        in place of the default "--config=<library>_<channel>" (e.g.
        "--//comms:mylib_channel=stable"); a build system whose per-library
        settings have other spellings passes its own.
      version_hint: optional text telling how the ROCm version is selected,
        shown in place of the default "--config=rocm<key>".

    Returns:
      A multi-line message naming channel, version, the available versions
      and the `snapctl create` command that fixes it.
    """
    lines = [
        "no %s snapshot of %s for ROCm %s." % (channel.replace("_", "-"), library, version),
        "  channel: %s (%s)" % (channel, channel_hint or ("--config=" + channel_config_name(library, channel))),
        "  ROCm version: %s (%s)" % (version, version_hint or ("--config=" + rocm_config_name(version))),
        "  versions with a %s snapshot: %s" % (channel.replace("_", "-"), ", ".join(available) if available else "none"),
    ]
    if channel == "stable":
        lines.append("  create it with:")
    else:
        lines.append("  a last-stable snapshot appears when a second stable snapshot is created:")
    lines.append("    snapctl create --snapshots-root %s --store %s --version %s --artifact <path to %s>%s [--header FILE ...] [--commit NAME=HASH ...]" % (
        snapshots_root,
        store,
        version,
        artifact,
        (" --prefix " + checksums_prefix) if checksums_prefix else "",
    ))
    lines.append("  then regenerate the checksums file: " + (update_command or "snapctl gen-checksums --snapshots-root %s --output <stable_checksums.bzl>%s" % (
        snapshots_root,
        (" --prefix " + checksums_prefix) if checksums_prefix else "",
    )))
    return "\n".join(lines)

def lookup_snapshot(checksums_by_channel, library, channel, version, snapshots_root, store, artifact):
    """The sha256 of (channel, version), or fail() with missing_snapshot_message.

    Args:
      checksums_by_channel: {"stable": dict, "last_stable": dict}.
      library: e.g. "rcclx".
      channel: "stable" or "last_stable".
      version: ROCm version.
      snapshots_root: for the message.
      store: for the message.
      artifact: for the message.

    Returns:
      The sha256 hex string.
    """
    checksums = checksums_by_channel.get(channel, {})
    if version not in checksums:
        fail(missing_snapshot_message(library, channel, version, available_versions(checksums), snapshots_root, store, artifact))
    return checksum_sha256(checksums[version])

def package_path(pkg, path):
    """A package-relative path as a path from the workspace/project root.

    Args:
      pkg: the package ("" at the root).
      path: a path relative to the package.

    Returns:
      "<pkg>/<path>", or `path` in the root package.
    """
    return (pkg + "/" + path) if pkg else path

def under_snapshots_root(pairs, root, what = ""):
    """Files by their paths below the snapshots root.

    Args:
      pairs: [(path, file)]: each file with its path (Bazel: File.path; Buck2:
        short_path), the file an opaque value.
      root: the snapshots root, a prefix of every path.
      what: prefix of the error message (e.g. "stable_checksums: ").

    Returns:
      {path below root: file}, in the order given. Fails on a path outside root.
    """
    out = {}
    for path, f in pairs:
        if not path.startswith(root + "/"):
            fail("%s%s is not under the snapshots root %s" % (what, path, root))
        out[path[len(root) + 1:]] = f
    return out

def snapshot_dir(snapshots_root, channel, version):
    """Directory of one prebuilt snapshot (its metadata.txt and headers).

    Args:
      snapshots_root: the snapshots root (relative to whatever the caller needs).
      channel: "stable" or "last_stable".
      version: ROCm version.

    Returns:
      "<snapshots_root>/<stable|last-stable>/<version>".
    """
    return snapshots_root + "/" + channel_dir(channel) + "/" + version

def prebuilt_snapshot_plan(name, pkg, snapshots_root, stable_checksums, last_stable_checksums, library = None, artifact = None, local_store = None, store_url = None, remote_repo_prefix = None, abi_inputs = None, snapshot_artifacts = None):
    """The values the Bazel and the Buck2 prebuilt_snapshot macros derive alike.

    Fails when an ABI guard is asked for without the recorded digests.

    Args:
      name: the macro's `name`.
      pkg: the package being evaluated ("" at the root).
      snapshots_root: the macro's `snapshots_root` (package-relative).
      stable_checksums: <PREFIX>_STABLE_CHECKSUMS (version -> sha256).
      last_stable_checksums: <PREFIX>_LAST_STABLE_CHECKSUMS (version -> sha256).
      library: the macro's `library` (None: `name`).
      artifact: the macro's `artifact` (None: default_artifact(library)).
      local_store: the macro's `local_store` (package-relative), or None.
      store_url: the macro's `store_url`, or None.
      remote_repo_prefix: Bazel's `remote_repo_prefix`, or None.
      abi_inputs: the macro's `abi_inputs` (None: no ABI guard).
      snapshot_artifacts: the macro's `snapshot_artifacts`.

    Returns:
      struct(library, artifact, root_path (the snapshots root from the
      workspace/project root), store (the store the missing-snapshot message
      names), by_channel ({"stable": ..., "last_stable": ...}), abi_inputs,
      snapshot_artifacts).
    """
    if abi_inputs != None and snapshot_artifacts == None:
        fail("prebuilt_snapshot: abi_inputs needs snapshot_artifacts (<PREFIX>_SNAPSHOT_ARTIFACTS)")
    library = library or name
    return struct(
        library = library,
        artifact = artifact or default_artifact(library),
        root_path = package_path(pkg, snapshots_root),
        store = store_url or (package_path(pkg, local_store) if local_store else remote_repo_prefix),
        by_channel = {"stable": stable_checksums, "last_stable": last_stable_checksums},
        abi_inputs = abi_inputs,
        snapshot_artifacts = snapshot_artifacts,
    )

def abi_guard_args(plan, target, archive, channel, version, dev, fix):
    """Attributes of the abi_guard target `<target>_abi` of one prebuilt snapshot.

    Args:
      plan: prebuilt_snapshot_plan's struct (with abi_inputs set).
      target: the snapshot's target name (snapshot_target_name).
      archive: label of the verified archive the guard passes on (None for
        the test, which passes nothing on).
      channel: "stable" or "last_stable".
      version: ROCm version.
      dev: how the failure message tells to build from source instead (the
        build system's spelling of the library's dev channel).
      fix: the build system's spellings of the fix: struct(snapctl (how to
        run snapctl, e.g. "bazel run <label> --"), workspace (a shell word
        that expands to the workspace root from any directory in it),
        artifact (a shell word naming the archive `rebuild` makes), rebuild
        (the command that rebuilds the archive), docs (where the recovery is
        documented), metadata (label of the snapshot's metadata.txt)).

    Returns:
      Keyword arguments of abi_guard: name, archive, inputs, expect (the
      digests recorded when the snapshot was cut, empty for one cut without
      --abi-input), snapshot_metadata, library, channel, version, recut (the
      `snapctl recut` command that re-cuts this snapshot in place, with
      absolute paths, without its --abi-input arguments: the rule adds one
      per input, see abi_recut_input), rebuild, rollback (stable: the
      `snapctl rollback` command; last_stable: ""), dev, docs.
    """
    root = "%s/%s" % (fix.workspace, plan.root_path)
    args = {
        "name": target + "_abi",
        "inputs": plan.abi_inputs,
        "expect": plan.snapshot_artifacts.get(channel, {}).get(version, {}).get("abi_inputs", {}),
        "snapshot_metadata": fix.metadata,
        "library": plan.library,
        "channel": channel,
        "version": version,
        "recut": "%s recut --snapshots-root %s --channel %s --version %s --artifact %s --abi-base %s" % (fix.snapctl, root, channel_dir(channel), version, fix.artifact, fix.workspace),
        "rebuild": fix.rebuild,
        "rollback": ("%s rollback --snapshots-root %s --version %s" % (fix.snapctl, root, version)) if channel == "stable" else "",
        "dev": dev,
        "docs": fix.docs,
    }
    if archive != None:
        args["archive"] = archive
    return args

def abi_check_message_args(attrs, recut_inputs):
    """The `snapctl abi-check` flags that only shape its failure message.

    Both build systems' abi_guard and abi_guard_test pass them after the
    `--expect` / `--input` pairs.

    Args:
      attrs: the abi_guard target's attributes (ctx.attr / ctx.attrs): library,
        channel, version, recut, rebuild, rollback, dev, docs.
      recut_inputs: one abi_recut_input per input, appended to `recut`.

    Returns:
      A list of "--flag=value" strings.
    """
    return [
        "--library=" + attrs.library,
        "--channel=" + attrs.channel,
        "--version=" + attrs.version,
        "--recut=" + " ".join([attrs.recut] + recut_inputs),
        "--rebuild=" + attrs.rebuild,
        "--rollback=" + attrs.rollback,
        "--dev=" + attrs.dev,
        "--docs=" + attrs.docs,
    ]

def abi_check_expect_args(expect):
    """The `--expect PATH=SHA256` arguments of `snapctl abi-check`, sorted by path.

    Args:
      expect: dict, recorded path -> sha256.

    Returns:
      A flat list of strings.
    """
    args = []
    for path in sorted(expect.keys()):
        args += ["--expect", "%s=%s" % (path, expect[path])]
    return args

def abi_recut_input(path, location):
    """One `--abi-input PATH=FILE` argument of the printed re-cut command.

    Args:
      path: the input's workspace-relative path (as recorded).
      location: a shell word expanding to the directory the file is under
        now (the workspace root for a source file, the output tree for a
        generated one).

    Returns:
      "--abi-input <path>=<location>/<path>".
    """
    return "--abi-input %s=%s/%s" % (path, location, path)

def store_blob_path(sha256):
    """Path of a blob inside a content-addressed store: "cas/sha256/<hex>".

    Args:
      sha256: hex digest.

    Returns:
      The store-relative path.
    """
    return "cas/sha256/" + checksum_sha256(sha256)

def _quoted(s):
    # The text between the first pair of double quotes of s, or None.
    i = s.find("\"")
    if i < 0:
        return None
    j = s.find("\"", i + 1)
    if j < 0:
        return None
    return s[i + 1:j]

def parse_checksums_bzl(text, prefix):
    """Reads the version -> sha256 dicts out of a generated stable_checksums.bzl.

    For places that cannot load() the file (module extensions, Buck2
    configuration code). Understands entries written as `"6.4": "<hex>",` and
    as nested dicts holding a `"sha256": "<hex>"` line.

    Args:
      text: contents of stable_checksums.bzl.
      prefix: dict name prefix, e.g. "RCCLX".

    Returns:
      {"stable": {version: sha256}, "last_stable": {version: sha256}}.
    """
    names = {checksums_dict_name(prefix, c): c for c in PREBUILT_CHANNELS}
    result = {c: {} for c in PREBUILT_CHANNELS}
    current = None
    key = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if current == None:
            for n, c in names.items():
                if line.startswith(n + " ") or line.startswith(n + "="):
                    current = c
                    if line.endswith("{}"):
                        current = None
            continue
        if line.startswith("}") and key == None:
            current = None
            continue
        if line.startswith("}"):
            key = None
            continue
        k = _quoted(line)
        if k == None:
            continue
        rest = line[line.find(k) + len(k) + 1:]
        v = _quoted(rest)
        if key != None:
            if k == "sha256" and v != None:
                result[current][key] = v
            continue
        if v != None:
            result[current][k] = v
        elif rest.rstrip().endswith("{"):
            key = k
    return result
