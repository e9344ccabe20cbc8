# Fake of @prelude//tests:test_toolchain.bzl (test-only).
def _impl(ctx):
    return [DefaultInfo()]

noop_test_toolchain = rule(impl = _impl, attrs = {}, is_toolchain_rule = True)
