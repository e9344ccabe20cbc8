"""A skylib-free string build setting (bazel-offline.md section 2.3)."""

load(":providers.bzl", "FlagValueInfo")

def _string_flag_impl(ctx):
    value = ctx.build_setting_value
    if ctx.attr.values and value not in ctx.attr.values:
        fail("%s: invalid value '%s', allowed: %s" % (ctx.label, value, ", ".join([v or "\"\" (empty)" for v in ctx.attr.values])))
    return [FlagValueInfo(value = value)]

string_flag = rule(
    implementation = _string_flag_impl,
    build_setting = config.string(flag = True),
    doc = "A string command-line flag (`--//pkg:name=value`) usable in config_setting(flag_values).",
    attrs = {
        "values": attr.string_list(doc = "Allowed values; empty allows any string."),
    },
)
