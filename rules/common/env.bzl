"""Pure Starlark shared by the Bazel and Buck2 rules: the helpers' environment.

No load(), no ctx, no native.*, no type annotations: both build systems load
this file unchanged.
"""

# Environment of every helper action (kpack, snapctl, and the small shell
# steps around them): explicit, never the user's shell environment. Bytes
# sort the same everywhere and every time stamp is UTC.
HELPER_ENV = {"LC_ALL": "C", "TZ": "UTC"}
