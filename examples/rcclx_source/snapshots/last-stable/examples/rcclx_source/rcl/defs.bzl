"""The library's own macro: loaded by its BUILD files with a repository-relative label."""

def rcl_library(name, **kwargs):
    native.cc_library(name = name, visibility = ["//visibility:public"], **kwargs)
