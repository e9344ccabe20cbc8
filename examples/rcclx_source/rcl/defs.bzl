"""The library's own macro, loaded by its BUILD/BUCK files with a repository-relative label.

Works in both build systems (Bazel's cc_library, Buck2's cxx_library); headers
are included by their path from the repository root in both.
"""

def rcl_library(name, srcs = [], hdrs = [], deps = []):
    if hasattr(native, "cxx_library"):
        native.cxx_library(name = name, srcs = srcs, exported_headers = hdrs, exported_deps = deps, visibility = ["PUBLIC"])
    else:
        native.cc_library(name = name, srcs = srcs, hdrs = hdrs, deps = deps, visibility = ["//visibility:public"])
