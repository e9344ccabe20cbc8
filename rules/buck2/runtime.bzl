"""librocm_kpack (rocpack's runtime library, ROCm's kpack C ABI) for C/C++ consumers.

rocpack's root BUCK calls `rocm_kpack_targets()` once, which gives

    rocpack//:rocm_kpack         prebuilt_cxx_library: shared (SONAME librocm_kpack.so.0) + headers
    rocpack//:rocm_kpack_static  prebuilt_cxx_library: static + headers + its system libraries

so a C or C++ target depends on it as on any C++ library:

    cxx_binary(name = "app", srcs = ["app.c"], deps = ["rocpack//:rocm_kpack"])

    #include <rocm_kpack/kpack.h>

Where the libraries come from follows `[rocpack] tools` in the project's root
.buckconfig, as for the helpers:

  * `cargo` (default): one local-only `cargo build -p rocpack-runtime`
    (`rocpack//:rocm_kpack_libs`) with the helpers' `cargo_profile` and
    `cargo_target_dir`;
  * `prebuilt`: `rocm_kpack_so_url` + `rocm_kpack_so_sha256` and
    `rocm_kpack_a_url` + `rocm_kpack_a_sha256` (http_file, checked against the
    digests; buck2 refuses file:// URLs). Without them the two targets are not declared
    (`rocm_kpack_available()` is False), so a prebuilt-helpers project that
    does not use the library needs nothing more.
"""

load("//rules/buck2/private:cargo_build.bzl", "rocpack_cargo_build_action")

RUNTIME_LIBS = ["librocm_kpack.so", "librocm_kpack.a"]
SONAME = "librocm_kpack.so.0"

# What a static link of the Rust staticlib needs from the system (the same
# list as tools/rocpack-runtime/cmake/rocm_kpack.pc.in's Libs.private).
STATIC_LINKER_FLAGS = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"]

_PREBUILT_KEYS = ["rocm_kpack_so_url", "rocm_kpack_so_sha256", "rocm_kpack_a_url", "rocm_kpack_a_sha256"]

def _mode():
    return read_root_config("rocpack", "tools", "cargo")

def rocm_kpack_available():
    """Whether rocm_kpack_targets() declares the library targets in this project.

    Returns:
      True with `[rocpack] tools = cargo`, or `prebuilt` with every
      rocm_kpack_*_url / _sha256 set.
    """
    if _mode() == "cargo":
        return True
    return all([read_root_config("rocpack", k, "") for k in _PREBUILT_KEYS])

def _rocm_kpack_cargo_libs_impl(ctx: AnalysisContext) -> list[Provider]:
    out = rocpack_cargo_build_action(ctx.actions, ctx.attrs.manifest, ctx.attrs.srcs, ["rocpack-runtime"], ctx.attrs.profile, ctx.attrs.target_dir, files = RUNTIME_LIBS)
    shared = out.project("librocm_kpack.so")
    static = out.project("librocm_kpack.a")
    return [DefaultInfo(default_outputs = [shared, static], sub_targets = {
        "shared": [DefaultInfo(default_output = shared)],
        "static": [DefaultInfo(default_output = static)],
    })]

rocm_kpack_cargo_libs = rule(
    impl = _rocm_kpack_cargo_libs_impl,
    doc = "librocm_kpack.so and librocm_kpack.a built by one local-only `cargo build -p rocpack-runtime`; sub-targets [shared], [static].",
    attrs = {
        "manifest": attrs.source(doc = "The workspace Cargo.toml."),
        "profile": attrs.string(default = "release", doc = "Cargo profile."),
        "srcs": attrs.list(attrs.source(), doc = "Every file cargo reads."),
        "target_dir": attrs.string(default = "", doc = "cargo --target-dir (see rocpack_cargo_build)."),
    },
)

def rocm_kpack_targets(srcs, profile, target_dir, headers = "tools/rocpack-runtime/include", visibility = ["PUBLIC"]):
    """Declares rocm_kpack and rocm_kpack_static (and where their libraries come from).

    Call once, from rocpack's root BUCK. Nothing is declared when
    rocm_kpack_available() is False.

    Args:
      srcs: every file cargo reads (as for rocpack_cargo_build).
      profile: cargo profile (tools = cargo).
      target_dir: cargo --target-dir (tools = cargo).
      headers: directory holding rocm_kpack/*.h, relative to the package.
      visibility: visibility of the two library targets.
    """
    if not rocm_kpack_available():
        return
    if _mode() == "cargo":
        rocm_kpack_cargo_libs(
            name = "rocm_kpack_libs",
            manifest = "Cargo.toml",
            profile = profile,
            target_dir = target_dir,
            srcs = srcs,
        )
        shared = ":rocm_kpack_libs[shared]"
        static = ":rocm_kpack_libs[static]"
    else:
        for kind, out in [("so", "librocm_kpack.so"), ("a", "librocm_kpack.a")]:
            native.http_file(
                name = "rocm_kpack_prebuilt_" + kind,
                urls = [read_root_config("rocpack", "rocm_kpack_%s_url" % kind)],
                sha256 = read_root_config("rocpack", "rocm_kpack_%s_sha256" % kind),
                out = out,
            )
        shared = ":rocm_kpack_prebuilt_so"
        static = ":rocm_kpack_prebuilt_a"
    hdrs = {h[len(headers) + 1:]: h for h in native.glob([headers + "/rocm_kpack/*.h"])}
    for lib, linkage in [
        ("rocm_kpack", {"preferred_linkage": "shared", "shared_lib": shared, "soname": SONAME}),
        ("rocm_kpack_static", {"exported_linker_flags": STATIC_LINKER_FLAGS, "preferred_linkage": "static", "static_lib": static}),
    ]:
        native.prebuilt_cxx_library(name = lib, exported_headers = hdrs, header_namespace = "", visibility = visibility, **linkage)
