# Fake of @prelude//cfg/modifier:set_cfg_modifiers.bzl (test-only), with the
# checks of the real one: PACKAGE files only, fully qualified targets.

def set_cfg_modifiers(cfg_modifiers = None, extra_cfg_modifiers_per_rule = None):
    if __ctx_info()["kind"] != "package":
        fail("set_cfg_modifiers is only allowed to be used from a PACKAGE or BUCK_TREE file, not a bzl file.")
    cfg_modifiers = cfg_modifiers or []
    for m in cfg_modifiers:
        if type(m) != "string" or "//" not in m or m.startswith("//") or ":" not in m:
            fail("Must specify fully qualified target (ex. `cell//foo:bar`). Found `%s`" % (m,))
    __record(struct(record = "set_cfg_modifiers", modifiers = cfg_modifiers))
