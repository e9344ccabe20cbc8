# Fake of @prelude//cfg/modifier:common.bzl (test-only).
MODIFIER_METADATA_KEY = "buck.cfg_modifiers"
