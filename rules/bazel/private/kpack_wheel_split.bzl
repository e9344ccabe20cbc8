"""kpack_wheel_split (Bazel): one fat wheel in, the host + device wheel set out."""

load("//rules/common:wheel.bzl", "KPACK_WHEEL_SPLIT_ATTRS", "KPACK_WHEEL_SPLIT_DOC", "KPACK_WHEEL_SPLIT_MNEMONIC", "KPACK_WHEEL_SPLIT_SCRIPT", "kpack_wheel_split_arg_list", "kpack_wheel_split_check", "kpack_wheel_split_expect")
load(":tools.bzl", "ACTION_ENV", "tool_attrs")

def _impl(ctx):
    a = ctx.attr
    kpack_wheel_split_check(a.compression, a.gpu_targets, a.expect_targets, a.device_requires_dist, a.selector, a.selector_default, a.device_extra_names)
    wheel = ctx.file.wheel
    out_dir = ctx.actions.declare_directory(ctx.label.name + ".wheels")
    report = ctx.actions.declare_file(ctx.label.name + ".json")
    args = ctx.actions.args()
    args.add_all([ctx.executable._kpack, report, kpack_wheel_split_expect(a.expect_targets)])
    args.add(wheel)
    args.add("--output-dir", out_dir.path)
    args.add_all(kpack_wheel_split_arg_list(a.overlay_root, a.device_package_prefix, a.device_requires_dist, a.split_databases, a.gpu_targets, a.compression, a.selector, a.selector_default, a.device_extra_names))
    inputs = [wheel]
    if ctx.file.config:
        args.add("--config", ctx.file.config)
        inputs.append(ctx.file.config)
    ctx.actions.run_shell(
        command = KPACK_WHEEL_SPLIT_SCRIPT,
        arguments = [args],
        inputs = inputs,
        tools = [ctx.executable._kpack],
        outputs = [out_dir, report],
        mnemonic = KPACK_WHEEL_SPLIT_MNEMONIC,
        progress_message = "kpack split-wheel %s (%s)" % (wheel.basename, ctx.label),
        env = ACTION_ENV,
    )
    return [
        DefaultInfo(files = depset([out_dir, report]), runfiles = ctx.runfiles(files = [out_dir, report])),
        OutputGroupInfo(wheels = depset([out_dir]), report = depset([report])),
    ]

def _attr(kind, doc):
    if kind == "label":
        return attr.label(allow_single_file = True, doc = doc)
    if kind == "string_list":
        return attr.string_list(doc = doc)
    if kind == "bool":
        return attr.bool(doc = doc)
    return attr.string(doc = doc)

def _attrs():
    d = {name: _attr(v[0], v[1]) for name, v in KPACK_WHEEL_SPLIT_ATTRS.items()}
    d["wheel"] = attr.label(allow_single_file = [".whl"], mandatory = True, doc = KPACK_WHEEL_SPLIT_ATTRS["wheel"][1])
    return d

kpack_wheel_split = rule(
    implementation = _impl,
    doc = KPACK_WHEEL_SPLIT_DOC,
    attrs = dict(_attrs(), **tool_attrs(kpack = True)),
)
