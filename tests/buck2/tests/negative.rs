//! Each kind of mistake the harness exists to catch, made on purpose in a
//! copy of a real file (an overlay seen only by one engine), and caught.

use std::rc::Rc;

use buck2_harness::*;
use serde_json::json;

fn engine() -> Rc<Engine> {
    Engine::new(&repo_root()).unwrap_or_else(|e| panic!("{e:#}"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap()
}

/// An engine where `rel` has `from` replaced by `to` (which must occur).
fn broken(rel: &str, from: &str, to: &str) -> Rc<Engine> {
    let text = read(rel);
    assert!(
        text.contains(from),
        "{rel} no longer contains {from:?}: update this test"
    );
    let e = engine();
    e.overlay(rel, &text.replacen(from, to, 1));
    e
}

fn label(pkg: &str, name: &str) -> Label {
    Label {
        cell: "root".into(),
        package: pkg.into(),
        name: name.into(),
    }
}

fn analyze_err(e: &Rc<Engine>, pkg: &str, name: &str) -> String {
    let l = label(pkg, name);
    let r = e.package("root", pkg).and_then(|_| {
        let cfg = e.config_for(&l, &[])?;
        e.analyze(&l, &cfg)
    });
    match r {
        Ok(_) => panic!("{l} analysed although it is broken"),
        Err(err) => format!("{err:#}"),
    }
}

#[test]
fn a_misspelled_attribute_is_rejected() {
    let e = broken(
        "examples/kpack/BUCK",
        "    artifact_prefix = \"blas_lib\",",
        "    artifact_prefx = \"blas_lib\",",
    );
    let err = format!("{:#}", e.package("root", "examples/kpack").unwrap_err());
    assert!(
        err.contains("unexpected parameter named `artifact_prefx`"),
        "{err}"
    );
}

#[test]
fn a_missing_mandatory_attribute_is_rejected() {
    let e = broken(
        "examples/kpack/BUCK",
        "    config = \"packaging-config.json\",\n",
        "",
    );
    let err = format!("{:#}", e.package("root", "examples/kpack").unwrap_err());
    assert!(
        err.contains("kpack_packages") || err.contains("config"),
        "{err}"
    );
}

#[test]
fn a_wrongly_typed_attribute_is_rejected() {
    let e = broken(
        "examples/kpack/BUCK",
        "    split_databases = [\"rocblas\"],",
        "    split_databases = \"rocblas\",",
    );
    let err = format!("{:#}", e.package("root", "examples/kpack").unwrap_err());
    assert!(
        err.contains("attribute `split_databases` expects list"),
        "{err}"
    );
}

#[test]
fn an_undefined_symbol_is_caught() {
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "kpack_split_arg_list(artifact_prefix,",
        "kpack_split_args(artifact_prefix,",
    );
    let err = format!("{:#}", e.package("root", "examples/kpack").unwrap_err());
    assert!(
        err.contains("kpack_split_args") && err.contains("not found"),
        "{err}"
    );
}

#[test]
fn bazel_only_apis_are_caught() {
    // ctx.actions.declare_directory (Bazel) instead of declare_output(dir = True).
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "actions.declare_output(out_name, dir = True)",
        "actions.declare_directory(out_name)",
    );
    let err = analyze_err(&e, "examples/kpack", "split_gfx110X-build");
    assert!(err.contains("declare_directory"), "{err}");

    // ctx.attr (Bazel) instead of ctx.attrs.
    let e = broken(
        "rules/buck2/private/kpack_recombine.bzl",
        "ctx.attrs.shards",
        "ctx.attr.shards",
    );
    let err = analyze_err(&e, "examples/kpack", "blas_lib_gfx110X");
    assert!(err.contains("attr"), "{err}");

    // native.cc_library (Bazel) in a macro.
    let e = broken(
        "rules/buck2/private/prebuilt_snapshot.bzl",
        "native.cxx_library(",
        "native.cc_library(",
    );
    let err = format!("{:#}", e.package("root", "examples/rcclx").unwrap_err());
    assert!(err.contains("cc_library"), "{err}");

    // attr.string (Bazel) instead of attrs.string.
    let e = broken(
        "rules/buck2/private/kpack_recombine.bzl",
        "\"component\": attrs.string(",
        "\"component\": attr.string(",
    );
    let err = format!("{:#}", e.package("root", "examples/kpack").unwrap_err());
    assert!(err.contains("attr") && err.contains("not found"), "{err}");

    // Bazel's mnemonic spelling is not a valid Buck2 category.
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "category = \"kpack_split\"",
        "category = \"KpackSplit\"",
    );
    let err = analyze_err(&e, "examples/kpack", "split_gfx110X-build");
    assert!(err.contains("snake_case"), "{err}");
}

#[test]
fn buck_files_cannot_define_functions() {
    let text = read("examples/rcclx/BUCK");
    let e = engine();
    e.overlay(
        "examples/rcclx/BUCK",
        &format!("{text}\ndef helper():\n    pass\n"),
    );
    assert!(
        e.package("root", "examples/rcclx").is_err(),
        "def in a BUCK file must be rejected"
    );
}

#[test]
fn a_declared_but_unbound_output_is_caught() {
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "    archs_file = actions.declare_output(out_name + \".archs\")",
        "    actions.declare_output(out_name + \".unused\")\n    archs_file = actions.declare_output(out_name + \".archs\")",
    );
    let err = analyze_err(&e, "examples/kpack", "split_gfx110X-build");
    assert!(err.contains("not bound"), "{err}");
}

#[test]
fn a_package_without_set_cfg_constructor_is_caught() {
    // Buck2 itself would silently ignore `-m rcclx_stable` here.
    let e = broken("PACKAGE", "rocpack_cfg_constructor(\n", "struct(\n");
    let err = check_modifier_aliases(&e, "rcclx", &["rcclx_stable", "rocm64"]).unwrap_err();
    assert!(format!("{err:#}").contains("silently ignore"), "{err:#}");
    // ... and the configuration really stays the default one.
    let l = label("examples/rcclx", "hello");
    assert_eq!(
        e.config_for(&l, &["rcclx_stable"]).unwrap(),
        e.config_for(&l, &[]).unwrap()
    );
}

#[test]
fn a_missing_alias_is_caught() {
    let e = broken(
        "rules/buck2/private/config.bzl",
        "aliases[rocm_config_name(v)] = rocm_constraint(v)",
        "pass",
    );
    let err = check_modifier_aliases(&e, "rcclx", &["rcclx_stable", "rocm64"]).unwrap_err();
    assert!(format!("{err:#}").contains("rocm64"), "{err:#}");
}

#[test]
fn a_select_without_a_version_is_caught() {
    let e = broken(
        "rules/buck2/private/prebuilt_snapshot.bzl",
        "        for version in versions:",
        "        for version in versions[:-1]:",
    );
    let err = check_select_coverage(&e, &label("examples/rcclx", "rcclx"), "rcclx").unwrap_err();
    assert!(format!("{err:#}").contains("None of"), "{err:#}");
}

#[test]
fn a_command_line_the_helper_rejects_is_caught() {
    let bins = helper_bins(&repo_root()).unwrap_or_else(|err| panic!("{err:#}"));
    let action = json!({
        "kind": "run",
        "category": "kpack_split",
        "argv": [
            {"__artifact__": true, "path": "x/release/kpack", "basename": "kpack", "is_source": false, "is_dir": false},
            "split", "--artifact-directory", "in", "--output-dir", "out"
        ]
    });
    let err = check_helper_command(&bins, &repo_root(), &action).unwrap_err();
    assert!(
        format!("{err:#}").contains("rejected by kpack's argument parser"),
        "{err:#}"
    );
    // The same through the rules: a misspelled flag in kpack_split.bzl.
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "\"--artifact-dir\",",
        "\"--artifact-directory\",",
    );
    let l = label("examples/kpack", "split_gfx110X-build");
    let cfg = e.config_for(&l, &[]).unwrap();
    let a = e.analyze(&l, &cfg).unwrap();
    let acts: Vec<(Label, serde_json::Value)> =
        a.actions.iter().map(|x| (l.clone(), x.clone())).collect();
    assert!(check_helper_commands(&bins, &repo_root(), &acts).is_err());
}

#[test]
fn a_checksum_for_an_unknown_rocm_version_is_caught() {
    // The seed's `.get(ver, "0" * 64)` let typos pass silently. A version no
    // constraint selects does not stop the package from loading (issue 24),
    // but the message of the version it hides names it and the fix.
    let e = broken(
        "examples/rcclx/stable_checksums.bzl",
        "    \"6.4\": ",
        "    \"6.4.2\": ",
    );
    let l = label("examples/rcclx", "hello");
    let cfg = e.config_for(&l, &["rcclx_stable", "rocm64"]).unwrap();
    let err = match e.analyze(&l, &cfg) {
        Ok(_) => panic!("{} analysed", l),
        Err(err) => format!("{err:#}"),
    };
    assert!(err.contains("6.4.2 (not a declared ROCm version"), "{err}");
}

#[test]
fn staging_the_split_input_with_copied_dir_is_caught_by_the_executor() {
    // Buck2's copied_dir stages a symlinked source (librocblas.so.5) as a
    // link to the resolved file outside the staged tree: the split must
    // fail, as it did under the real buck2 before the rule used
    // symlinked_dir + --staging-root.
    let e = broken(
        "rules/buck2/private/kpack_split.bzl",
        "ctx.actions.symlinked_dir(ctx.label.name + \".in\", staged)",
        "ctx.actions.copied_dir(ctx.label.name + \".in\", staged)",
    );
    // The example declares its link (kpack_split's `symlinks`); the source
    // symlink itself is staged only when it is not declared.
    let buck = read("examples/kpack/BUCK");
    let declared = "    symlinks = {\"math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5\": \"librocblas.so.5.2\"},\n";
    assert!(
        buck.contains(declared),
        "examples/kpack/BUCK: update this test"
    );
    e.overlay("examples/kpack/BUCK", &buck.replacen(declared, "", 1));
    let tmp = tempfile::tempdir().unwrap();
    let bins = helper_bins(&repo_root()).unwrap_or_else(|err| panic!("{err:#}"));
    let l = label("examples/kpack", "split_gfx110X-build");
    let cfg = e.config_for(&l, &[]).unwrap();
    let a = e.analyze(&l, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let mut x = Executor::new(&e, &bins, tmp.path());
    let err = format!(
        "{:#}",
        x.build(&a.providers_json["DefaultInfo"]["default_output"])
            .expect_err("copied_dir staging must fail the split")
    );
    assert!(err.contains("points outside the tree"), "{err}");
    assert!(err.contains("librocblas.so.5"), "{err}");
}

#[test]
fn a_test_rule_without_the_remote_test_execution_toolchain_is_caught() {
    // Every prelude test rule depends on toolchains//:remote_test_execution.
    let e = broken(
        "toolchains/BUCK",
        "remote_test_execution_toolchain(\n    name = \"remote_test_execution\",",
        "remote_test_execution_toolchain(\n    name = \"remote_test_execution_gone\",",
    );
    let err = analyze_err(&e, "examples/kpack", "packages_test");
    assert!(err.contains("remote_test_execution"), "{err}");
}

#[test]
fn a_library_channel_that_does_not_override_the_global_one_is_caught() {
    // rcclx_snapshot's alias must follow the library's own channel first
    // (-m rcclx_stable) and the global one (-m snapshot_stable) only when
    // the library's is unset.
    let e = broken(
        "rules/buck2/private/prebuilt_snapshot.bzl",
        "    branches = _flavours(_own)\n",
        "    branches = {}\n",
    );
    let err = check_select_coverage(&e, &label("examples/rcclx", "rcclx"), "rcclx").unwrap_err();
    assert!(format!("{err:#}").contains("select picks"), "{err:#}");
}

#[test]
fn a_missing_snapshot_compatible_outside_its_configuration_is_caught() {
    // A failing missing-snapshot target must be incompatible unless its
    // channel and version are selected (or `buck2 build //...` fails).
    let e = broken(
        "rules/buck2/private/prebuilt_snapshot.bzl",
        "target_compatible_with = _compatible(channel, version),",
        "target_compatible_with = [rocm_constraint(version)],",
    );
    let err = match sweep(&e, "examples/rcclx", "rcclx") {
        Ok(res) => res
            .missing_snapshot_errors
            .iter()
            .find(|(_, mods, _)| !mods.iter().any(|m| m.ends_with("_stable")))
            .map(|(t, mods, _)| format!("{t} failed with -m {mods:?}"))
            .expect("a missing snapshot was analysed without its channel selected"),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        err.contains("rcclx_stable_rocm71") || err.contains("rcclx_last_stable_rocm"),
        "{err}"
    );
}

#[test]
fn shell_command_substitution_in_a_genrule_is_caught() {
    // buck2 parses `$(...)` in a genrule's cmd as a macro: `$(mktemp -d)`
    // failed `buck2 build //...` at coercion under the real buck2.
    let e = broken("examples/wheel/BUCK", "tmp=`mktemp -d`", "tmp=$(mktemp -d)");
    let err = analyze_err(&e, "examples/wheel", "fat_wheel");
    assert!(err.contains("as a macro"), "{err}");
}
