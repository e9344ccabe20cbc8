# Fake of @prelude//toolchains:python.bzl (test-only).
def _impl(ctx):
    return [DefaultInfo()]

system_python_bootstrap_toolchain = rule(
    impl = _impl,
    attrs = {"interpreter": attrs.string(default = "python3")},
    is_toolchain_rule = True,
)

system_python_toolchain = rule(
    impl = _impl,
    attrs = {
        "interpreter": attrs.string(default = "python3"),
        "package_style": attrs.string(default = "inplace"),
    },
    is_toolchain_rule = True,
)
