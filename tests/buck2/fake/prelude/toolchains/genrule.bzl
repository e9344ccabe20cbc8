# Fake of @prelude//toolchains:genrule.bzl (test-only).
def _impl(ctx):
    return [DefaultInfo()]

system_genrule_toolchain = rule(impl = _impl, attrs = {}, is_toolchain_rule = True)
