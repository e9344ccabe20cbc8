# Fake of @prelude//cfg/modifier:cfg_constructor.bzl (test-only): the two
# stages are only passed to set_cfg_constructor, never called by the fake.

def cfg_constructor_pre_constraint_analysis(**_kwargs):
    fail("fake prelude: cfg constructors are not evaluated")

def cfg_constructor_post_constraint_analysis(**_kwargs):
    fail("fake prelude: cfg constructors are not evaluated")
