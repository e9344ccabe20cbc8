"""librocm_kpack (rocpack's runtime library, ROCm's kpack C ABI) for C/C++ consumers.

rocpack's root BUILD.bazel calls `rocm_kpack_targets()` once, which gives

    @rocpack//:rocm_kpack         shared library (SONAME librocm_kpack.so.0) + headers
    @rocpack//:rocm_kpack_static  static library + headers + its system libraries
    @rocpack//:rocm_kpack_libs    label_flag: where librocm_kpack.so / .a come from

so a C or C++ target depends on it as on any cc_library:

    cc_binary(name = "app", srcs = ["app.c"], deps = ["@rocpack//:rocm_kpack"])

    #include <rocm_kpack/kpack.h>

The libraries come from the target named by the `rocm_kpack_libs` flag: by
default `@rocpack//:rocm_kpack_from_source`, one `cargo build -p
rocpack-runtime` (offline, locked, the same cargo action, target dir and
profile flags as the helpers' from-source build). Any target whose files
include `librocm_kpack.so` and `librocm_kpack.a` may replace it, e.g. libraries
installed by `tools/rocpack-runtime/install.sh` or downloaded pinned by sha256:

    --@rocpack//:rocm_kpack_libs=@my_rocm_kpack//:libs

(rocpack's own `--config=prebuilt` points it at //rules/bazel/prebuilt, where
rules/bazel/prebuilt/install.sh copies them.)

The shared library is handed to cc_import under its SONAME,
`librocm_kpack.so.0`: the name the dynamic loader looks for, so a `bazel run`
or `bazel test` of a consumer finds it in its runfiles' solib directory.
Works on Bazel 4.2.3 and 7.x (WORKSPACE and bzlmod).
"""

load("//rules/bazel/private:cargo_binary.bzl", "cargo_binaries")

RUNTIME_LIBS = ["librocm_kpack.so", "librocm_kpack.a"]

# What a static link of the Rust staticlib needs from the system (the same
# list as tools/rocpack-runtime/cmake/rocm_kpack.pc.in's Libs.private).
STATIC_LINKOPTS = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"]

def _rocm_kpack_files_impl(ctx):
    by_name = {}
    for f in ctx.files.libs:
        by_name[f.basename] = f
    for want in RUNTIME_LIBS:
        if want not in by_name:
            fail("%s: %s has no %s (it holds: %s); build it with `cargo build -p rocpack-runtime` (or point --@rocpack//:rocm_kpack_libs at a target holding %s)" % (
                ctx.label,
                ctx.attr.libs.label,
                want,
                ", ".join(sorted(by_name.keys())) or "nothing",
                " and ".join(RUNTIME_LIBS),
            ))
    shared = ctx.actions.declare_file(ctx.label.name + "/librocm_kpack.so.0")
    ctx.actions.symlink(output = shared, target_file = by_name["librocm_kpack.so"])
    static = ctx.actions.declare_file(ctx.label.name + "/librocm_kpack.a")
    ctx.actions.symlink(output = static, target_file = by_name["librocm_kpack.a"])
    return [
        DefaultInfo(files = depset([shared, static])),
        OutputGroupInfo(shared = depset([shared]), static = depset([static])),
    ]

rocm_kpack_files = rule(
    implementation = _rocm_kpack_files_impl,
    doc = "librocm_kpack.so.0 (the shared library under its SONAME) and librocm_kpack.a, from any target holding librocm_kpack.so and librocm_kpack.a. Output groups: shared, static.",
    attrs = {
        "libs": attr.label(mandatory = True, allow_files = True, doc = "A target whose files include librocm_kpack.so and librocm_kpack.a."),
    },
)

def rocm_kpack_targets(
        headers = "tools/rocpack-runtime/include",
        cargo_sources = ":cargo_sources",
        visibility = ["//visibility:public"]):
    """Declares rocm_kpack, rocm_kpack_static, the rocm_kpack_libs flag and rocm_kpack_from_source.

    Call once, from rocpack's root BUILD.bazel (the package holding the
    headers and the cargo workspace).

    Args:
      headers: directory holding rocm_kpack/*.h, relative to the package.
      cargo_sources: filegroup of every file cargo reads.
      visibility: visibility of the cc targets and the flag.
    """

    # One cargo invocation builds both libraries (crate-type cdylib + staticlib).
    cargo_binaries(
        name = "rocm_kpack_from_source",
        srcs = [cargo_sources],
        binaries = RUNTIME_LIBS,
        manifest = "Cargo.toml",
        packages = ["rocpack-runtime"],
        tags = ["manual"],
        visibility = visibility,
    )
    native.label_flag(
        name = "rocm_kpack_libs",
        build_setting_default = ":rocm_kpack_from_source",
        tags = ["manual"],
        visibility = visibility,
    )
    rocm_kpack_files(
        name = "rocm_kpack_files",
        libs = ":rocm_kpack_libs",
        tags = ["manual"],
        visibility = visibility,
    )
    for kind in ["shared", "static"]:
        native.filegroup(
            name = "rocm_kpack_files_" + kind,
            srcs = [":rocm_kpack_files"],
            output_group = kind,
            tags = ["manual"],
        )
    native.cc_import(
        name = "rocm_kpack_shared_import",
        shared_library = ":rocm_kpack_files_shared",
        tags = ["manual"],
    )
    native.cc_import(
        name = "rocm_kpack_static_import",
        static_library = ":rocm_kpack_files_static",
        tags = ["manual"],
    )
    hdrs = native.glob([headers + "/rocm_kpack/*.h"])

    # All manual: `bazel build //...` does not build the library unless
    # something depends on it (the from-source default needs cargo and
    # ~/.cargo).
    native.cc_library(
        name = "rocm_kpack",
        hdrs = hdrs,
        strip_include_prefix = headers,
        deps = [":rocm_kpack_shared_import"],
        tags = ["manual"],
        visibility = visibility,
    )
    native.cc_library(
        name = "rocm_kpack_static",
        hdrs = hdrs,
        strip_include_prefix = headers,
        linkopts = STATIC_LINKOPTS,
        deps = [":rocm_kpack_static_import"],
        tags = ["manual"],
        visibility = visibility,
    )
