"""kpack_wheel_split (Buck2): one fat wheel in, the host + device wheel set out."""

load("//rules/common:env.bzl", "HELPER_ENV")
load("//rules/common:wheel.bzl", "KPACK_WHEEL_SPLIT_ATTRS", "KPACK_WHEEL_SPLIT_DOC", "KPACK_WHEEL_SPLIT_SCRIPT", "kpack_wheel_split_arg_list", "kpack_wheel_split_check", "kpack_wheel_split_expect")
load(":providers.bzl", "RocpackToolchainInfo")
load(":toolchain.bzl", "toolchain_attr")

def _impl(ctx: AnalysisContext) -> list[Provider]:
    a = ctx.attrs
    kpack_wheel_split_check(a.compression, a.gpu_targets, a.expect_targets, a.device_requires_dist, a.selector, a.selector_default, a.device_extra_names)
    kpack = ctx.attrs._rocpack_toolchain[RocpackToolchainInfo].kpack
    out_dir = ctx.actions.declare_output(ctx.label.name + ".wheels", dir = True)
    report = ctx.actions.declare_output(ctx.label.name + ".json")
    config = ["--config", a.config] if a.config else []
    ctx.actions.run(
        cmd_args(
            "/bin/sh",
            "-c",
            KPACK_WHEEL_SPLIT_SCRIPT,
            "kpack_wheel_split",
            kpack,
            report.as_output(),
            kpack_wheel_split_expect(a.expect_targets),
            a.wheel,
            "--output-dir",
            out_dir.as_output(),
            kpack_wheel_split_arg_list(a.overlay_root, a.device_package_prefix, a.device_requires_dist, a.split_databases, a.gpu_targets, a.compression, a.selector, a.selector_default, a.device_extra_names),
            config,
        ),
        category = "kpack_wheel_split",
        env = HELPER_ENV,
    )
    # One default output, so `buck2 build --show-output` prints the wheel
    # directory (with two it printed an empty path); the report is built
    # along and is the [report] sub-target.
    return [DefaultInfo(
        default_output = out_dir,
        other_outputs = [report],
        sub_targets = {
            "report": [DefaultInfo(default_output = report)],
            "wheels": [DefaultInfo(default_output = out_dir)],
        },
    )]

def _attr(kind, doc):
    if kind == "label":
        return attrs.option(attrs.source(), default = None, doc = doc)
    if kind == "string_list":
        return attrs.list(attrs.string(), default = [], doc = doc)
    if kind == "bool":
        return attrs.bool(default = False, doc = doc)
    return attrs.string(default = "", doc = doc)

def _attrs():
    d = {name: _attr(v[0], v[1]) for name, v in KPACK_WHEEL_SPLIT_ATTRS.items()}
    d["wheel"] = attrs.source(doc = KPACK_WHEEL_SPLIT_ATTRS["wheel"][1])
    return d

kpack_wheel_split = rule(
    impl = _impl,
    doc = KPACK_WHEEL_SPLIT_DOC,
    attrs = dict(_attrs(), **toolchain_attr()),
)
