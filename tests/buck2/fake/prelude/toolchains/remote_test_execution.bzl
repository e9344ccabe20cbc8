# Fake of @prelude//toolchains:remote_test_execution.bzl (test-only): every
# prelude test rule depends on toolchains//:remote_test_execution.
def _impl(ctx):
    return [DefaultInfo()]

remote_test_execution_toolchain = rule(impl = _impl, attrs = {
    "default_profile": attrs.option(attrs.string(), default = None),
    "default_run_as_bundle": attrs.option(attrs.bool(), default = None),
    "profiles": attrs.dict(attrs.string(), attrs.any(), default = {}),
}, is_toolchain_rule = True)
