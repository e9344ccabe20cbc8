"""The private attributes through which every rule reaches the helpers."""

load("//rules/common:env.bzl", "HELPER_ENV")

def tool_attrs(kpack = False, snapctl = False):
    """Private attributes reaching the helpers: `_stage`, plus `_kpack` / `_snapctl` on request.

    A rule only depends on the helpers it runs, so e.g. a kpack change never
    rebuilds snapshot targets.

    Args:
      kpack: add `_kpack`.
      snapctl: add `_snapctl`.

    Returns:
      A dict of attribute name -> attr.
    """
    attrs = {
        "_stage": attr.label(
            default = Label("//rules/bazel/private:stage.sh"),
            executable = True,
            allow_single_file = True,
            cfg = "exec",
            doc = "Input staging wrapper.",
        ),
    }
    for helper, wanted in [("kpack", kpack), ("snapctl", snapctl)]:
        if wanted:
            attrs["_" + helper] = attr.label(
                default = Label("//rules/bazel:" + helper),
                executable = True,
                allow_files = True,
                cfg = "exec",
                doc = "The %s helper (label_flag //rules/bazel:%s)." % (helper, helper),
            )
    return attrs

# Environment of every helper action: explicit, never the user's shell env.
ACTION_ENV = dict({"PATH": "/usr/bin:/bin"}, **HELPER_ENV)

def stage_list(ctx, name, pairs):
    """Writes a staging list ("dest<TAB>src" per line) for stage.sh.

    Args:
      ctx: rule context.
      name: output file name suffix (<target>.<name>).
      pairs: list of (dest, File) pairs.

    Returns:
      The written File.
    """
    f = ctx.actions.declare_file(ctx.label.name + "." + name)
    ctx.actions.write(f, "".join(["%s\t%s\n" % (d, src.path) for d, src in pairs]))
    return f
