"""Snapshot channel and ROCm version constraints, and their `-m` aliases.

The values come from rules/common/snapshot.bzl, so Buck2 and Bazel know the
same channels and versions: constraint values `dev`, `stable`,
`last_stable` (the global channel) and `rocm62`, `rocm64`, ... in
CONFIG_PACKAGE. Each rcclx_snapshot also declares its own channel setting
(`<name>_channel`, values `<name>_channel_<channel>`) in its package, which
overrides the global channel for that library only.
"""

load("//rules/common:snapshot.bzl", "ROCM_VERSIONS", "SNAPSHOT_CHANNELS", "channel_config_name", "rocm_config_name", "version_key")

# Where `snapshot_constraints()` is called (rules/buck2/config/BUCK). The
# cell is named `rocpack` (here an alias of root, in .buckconfig) so the
# labels mean the same when a consumer loads these rules from its own BUCK
# files with rocpack as a cell named `rocpack`.
CONFIG_PACKAGE = "rocpack//rules/buck2/config"

# Defaults applied by the root PACKAGE (`set_cfg_modifiers`).
DEFAULT_CHANNEL = "dev"
DEFAULT_ROCM_VERSION = "6.4"

def rocm_versions() -> list[str]:
    """The ROCm versions Buck2 knows: rules/common's ROCM_VERSIONS plus the project's own.

    Bazel's `rocm_version` is a string flag and takes any version; a Buck2
    modifier needs a declared constraint value. A project adds versions (a
    7.2 snapshot) in its root `.buckconfig`, with no change to rocpack:

        [rocpack]
          rocm_versions = 7.2, 7.3

    Each becomes the constraint value `rocm<key>` here and the alias
    `-m rocm<key>` of `snapshot_modifier_aliases`.

    Returns:
      ROCM_VERSIONS followed by the extra versions, each once.
    """
    out = list(ROCM_VERSIONS)
    for v in read_root_config("rocpack", "rocm_versions", "").replace(",", " ").split():
        version_key(v)  # digits and dots only
        if v not in out:
            out.append(v)
    return out

def channel_constraint(channel: str) -> str:
    """Label of the constraint value of a channel.

    Args:
      channel: one of SNAPSHOT_CHANNELS.

    Returns:
      "rocpack//rules/buck2/config:<channel>".
    """
    if channel not in SNAPSHOT_CHANNELS:
        fail("unknown snapshot channel '%s'; expected one of %s" % (channel, ", ".join(SNAPSHOT_CHANNELS)))
    return CONFIG_PACKAGE + ":" + channel

def rocm_constraint(version: str) -> str:
    """Label of the constraint value of a ROCm version.

    Args:
      version: e.g. "6.4".

    Returns:
      "rocpack//rules/buck2/config:rocm64".
    """
    return CONFIG_PACKAGE + ":" + rocm_config_name(version)

def snapshot_constraints():
    """Declares the two constraint settings and their values (call from a BUCK file)."""
    native.constraint_setting(name = "snapshot_channel", visibility = ["PUBLIC"])
    for c in SNAPSHOT_CHANNELS:
        native.constraint_value(name = c, constraint_setting = ":snapshot_channel", visibility = ["PUBLIC"])
    native.constraint_setting(name = "rocm_version", visibility = ["PUBLIC"])
    for v in rocm_versions():
        native.constraint_value(name = rocm_config_name(v), constraint_setting = ":rocm_version", visibility = ["PUBLIC"])

# Prefix of the `-m` aliases of the global channel, which every snapshot
# library follows unless its own channel is set: `-m snapshot_stable`.
GLOBAL_CHANNEL_ALIAS_PREFIX = "snapshot"

def library_channel_setting(name: str) -> str:
    """Name of the constraint setting of one snapshot library's channel.

    rcclx_snapshot(name = "fooccl") declares it in its own package, with one
    value per channel (`library_channel_value`).

    Args:
      name: the rcclx_snapshot target name.

    Returns:
      "<name>_channel".
    """
    return name + "_channel"

def library_channel_value(name: str, channel: str) -> str:
    """Name of the constraint value of a channel of one snapshot library.

    Args:
      name: the rcclx_snapshot target name.
      channel: one of SNAPSHOT_CHANNELS.

    Returns:
      "<name>_channel_<channel>" (a target in the library's package).
    """
    if channel not in SNAPSHOT_CHANNELS:
        fail("unknown snapshot channel '%s'; expected one of %s" % (channel, ", ".join(SNAPSHOT_CHANNELS)))
    return library_channel_setting(name) + "_" + channel

def library_channel_constraints(name: str, visibility: list[str] = ["PUBLIC"]):
    """Declares one library's channel setting and its values (called by rcclx_snapshot).

    Unset (the default), the library follows the global `snapshot_channel`;
    set (`-m <library>_stable`), it overrides it for this library only.

    Args:
      name: the rcclx_snapshot target name.
      visibility: of the setting and the values (the root PACKAGE's
        aliases name them).
    """
    native.constraint_setting(name = library_channel_setting(name), visibility = visibility)
    for c in SNAPSHOT_CHANNELS:
        native.constraint_value(name = library_channel_value(name, c), constraint_setting = ":" + library_channel_setting(name), visibility = visibility)

def snapshot_modifier_aliases(libraries: dict[str, str] = {}) -> struct:
    """The `-m` aliases: channels per library and globally, and ROCm versions.

    * `<library>_<channel>` for each entry of `libraries` (e.g.
      `-m fooccl_stable`): that library's own channel, whatever the global one;
    * `snapshot_<channel>` (`-m snapshot_stable`): the global channel, used by
      every library whose own channel is not set (default: dev);
    * `rocm<key>` (`-m rocm64`): the ROCm version.

    Args:
      libraries: library name (the alias prefix, as in its messages) -> the
        cell-qualified label of its rcclx_snapshot target, e.g.
        {"rcclx": "rocpack//examples/rcclx:rcclx"}.

    Returns:
      A struct for `native.set_cfg_constructor(aliases = ...)`, e.g.
      rcclx_stable = "rocpack//examples/rcclx:rcclx_channel_stable",
      snapshot_stable = "rocpack//rules/buck2/config:stable",
      rocm64 = "rocpack//rules/buck2/config:rocm64".
    """
    if type(libraries) != type({}):
        fail("snapshot_modifier_aliases: pass {library: \"cell//pkg:name\"} (the label of each rcclx_snapshot), not %r" % (libraries,))
    aliases = {}
    for c in SNAPSHOT_CHANNELS:
        aliases[channel_config_name(GLOBAL_CHANNEL_ALIAS_PREFIX, c)] = channel_constraint(c)
    for library, target in libraries.items():
        if "//" not in target or target.startswith("//") or ":" not in target.split("//", 1)[1]:
            fail("snapshot_modifier_aliases: '%s' for library %s is not a cell-qualified target label (cell//pkg:name)" % (target, library))
        for c in SNAPSHOT_CHANNELS:
            alias = channel_config_name(library, c)
            if alias in aliases:
                fail("snapshot_modifier_aliases: alias -m %s is defined twice (library name %s)" % (alias, library))
            aliases[alias] = target.rsplit(":", 1)[0] + ":" + library_channel_value(target.rsplit(":", 1)[1], c)
    for v in rocm_versions():
        aliases[rocm_config_name(v)] = rocm_constraint(v)
    return struct(**aliases)

def default_modifiers() -> list[str]:
    """Modifiers the root PACKAGE sets: the dev channel and the default ROCm version.

    Returns:
      Fully qualified constraint value labels.
    """
    return [channel_constraint(DEFAULT_CHANNEL), rocm_constraint(DEFAULT_ROCM_VERSION)]

def rocpack_cfg_constructor(stage0, stage1, key, aliases):
    """`native.set_cfg_constructor` when rocpack is the project's root cell.

    Buck2 accepts the call only in the project's root PACKAGE. The project's
    .buckconfig says whether that is this one (`[rocpack] project = true`
    in rocpack's own); when rocpack is a cell of another project, that
    project's root PACKAGE makes the call and this does nothing.

    Args:
      stage0: the prelude's cfg_constructor_pre_constraint_analysis.
      stage1: the prelude's cfg_constructor_post_constraint_analysis.
      key: the prelude's MODIFIER_METADATA_KEY.
      aliases: from snapshot_modifier_aliases().
    """
    if read_root_config("rocpack", "project", "") == "true":
        native.set_cfg_constructor(stage0 = stage0, stage1 = stage1, key = key, aliases = aliases, extra_data = struct())
