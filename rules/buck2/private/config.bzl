"""Snapshot channel and ROCm version constraints, and their `-m` aliases.

The values come from rules/common/snapshot.bzl, so Buck2 and Bazel know the
same channels and versions: constraint values `dev`, `stable`,
`last_stable` and `rocm62`, `rocm64`, ... in CONFIG_PACKAGE.
"""

load("//rules/common:snapshot.bzl", "ROCM_VERSIONS", "SNAPSHOT_CHANNELS", "channel_config_name", "rocm_config_name")

# Where `snapshot_constraints()` is called (rules/buck2/config/BUCK). The
# cell is named `rocpack` (here an alias of root, in .buckconfig) so the
# labels mean the same when a consumer loads these rules from its own BUCK
# files with rocpack as a cell named `rocpack`.
CONFIG_PACKAGE = "rocpack//rules/buck2/config"

# Defaults applied by the root PACKAGE (`set_cfg_modifiers`).
DEFAULT_CHANNEL = "dev"
DEFAULT_ROCM_VERSION = "6.4"

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
    for v in ROCM_VERSIONS:
        native.constraint_value(name = rocm_config_name(v), constraint_setting = ":rocm_version", visibility = ["PUBLIC"])

def snapshot_modifier_aliases(library: str) -> struct:
    """The `-m` aliases: <library>_<channel> and rocm<key> for every value.

    Args:
      library: library prefix of the channel aliases, e.g. "rcclx".

    Returns:
      A struct for `native.set_cfg_constructor(aliases = ...)`, e.g.
      rcclx_stable = "rocpack//rules/buck2/config:stable", rocm64 = "rocpack//rules/buck2/config:rocm64".
    """
    aliases = {}
    for c in SNAPSHOT_CHANNELS:
        aliases[channel_config_name(library, c)] = channel_constraint(c)
    for v in ROCM_VERSIONS:
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
