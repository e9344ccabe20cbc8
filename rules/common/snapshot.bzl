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

def check_abi_inputs(abi_inputs, snapshot_artifacts):
    """Fails when an ABI guard is asked for without the recorded digests.

    Args:
      abi_inputs: the rule's `abi_inputs` (None: no guard).
      snapshot_artifacts: the rule's `snapshot_artifacts`.
    """
    if abi_inputs != None and snapshot_artifacts == None:
        fail("prebuilt_snapshot: abi_inputs needs snapshot_artifacts (<PREFIX>_SNAPSHOT_ARTIFACTS)")

def abi_guard_expect(snapshot_artifacts, channel, version):
    """The ABI inputs' digests recorded when a snapshot was cut.

    Args:
      snapshot_artifacts: the checksums file's <PREFIX>_SNAPSHOT_ARTIFACTS.
      channel: "stable" or "last_stable".
      version: ROCm version.

    Returns:
      {recorded path: sha256}, empty for a snapshot cut without --abi-input.
    """
    return snapshot_artifacts.get(channel, {}).get(version, {}).get("abi_inputs", {})

def abi_guard_recut(snapshots_root, version, artifact):
    """The command an ABI-drift failure names first: re-cut the snapshot.

    Args:
      snapshots_root: the snapshots root, relative to the workspace/project root.
      version: ROCm version.
      artifact: the snapshot's artifact file name.

    Returns:
      A shell command line (the user adds --abi-input FILE... as printed).
    """
    return "snapctl create --snapshots-root %s --version %s --artifact %s" % (snapshots_root, version, artifact)

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
