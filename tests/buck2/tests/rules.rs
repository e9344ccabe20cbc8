//! The Buck2 side of rocpack, loaded and analysed by the fake in src/lib.rs.

use std::collections::BTreeSet;
use std::rc::Rc;

use buck2_harness::*;
use serde_json::{json, Value as Json};

const LIBRARY: &str = "rcclx";
const REQUIRED_ALIASES: [&str; 9] = [
    "rcclx_dev",
    "rcclx_stable",
    "rcclx_last_stable",
    "snapshot_dev",
    "snapshot_stable",
    "snapshot_last_stable",
    "rocm62",
    "rocm64",
    "rocm70",
];

fn engine() -> Rc<Engine> {
    Engine::new(&repo_root()).unwrap_or_else(|e| panic!("{e:#}"))
}

fn label(pkg: &str, name: &str) -> Label {
    Label {
        cell: "root".into(),
        package: pkg.into(),
        name: name.into(),
    }
}

#[test]
fn buckconfig_is_offline_and_ignores_other_build_outputs() {
    let text = std::fs::read_to_string(repo_root().join(".buckconfig")).unwrap();
    let c = parse_buckconfig(&text);
    let get = |s: &str, k: &str| {
        c.get(&(s.to_owned(), k.to_owned()))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(get("cells", "root"), ".");
    assert_eq!(get("cells", "prelude"), "prelude");
    assert_eq!(get("cells", "toolchains"), "toolchains");
    assert_eq!(get("cells", "none"), "none");
    assert_eq!(
        get("external_cells", "prelude"),
        "bundled",
        "the prelude must come from the buck2 binary (no network)"
    );
    assert!(get("parser", "target_platform_detector_spec")
        .contains("target:root//...->prelude//platforms:default"));
    assert_eq!(
        get("build", "execution_platforms"),
        "prelude//platforms:default"
    );
    let ignore: Vec<String> = get("project", "ignore")
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect();
    for want in ["bazel-*", "target"] {
        assert!(
            ignore.iter().any(|x| x == want),
            "[project] ignore lacks {want}: {ignore:?}"
        );
    }
    let e = engine();
    for d in ["bazel-out", "bazel-bin", "target", "tools/fuzz"] {
        assert!(
            !e.buck_dirs("root")
                .unwrap()
                .iter()
                .any(|x| x.starts_with(d)),
            "{d} is not ignored"
        );
    }
    let bazelignore = std::fs::read_to_string(repo_root().join(".bazelignore")).unwrap_or_default();
    assert!(
        bazelignore
            .lines()
            .any(|l| l.trim().trim_end_matches('/') == "buck-out"),
        ".bazelignore must list buck-out"
    );
}

#[test]
fn every_buck2_file_loads() {
    let e = engine();
    let mut buck_files = 0;
    for cell in ["root", "toolchains"] {
        for d in e.buck_dirs(cell).unwrap() {
            e.package(cell, &d)
                .unwrap_or_else(|err| panic!("{cell}//{d}/BUCK: {err:#}"));
            buck_files += 1;
        }
    }
    // Every .bzl of the Buck2 rules and of rules/common, loaded or not by a BUCK file.
    let mut bzl = 0;
    for dir in ["rules/buck2", "rules/common"] {
        let mut stack = vec![repo_root().join(dir)];
        while let Some(d) = stack.pop() {
            for ent in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
                let p = ent.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "bzl") {
                    let rel = p
                        .strip_prefix(repo_root())
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    e.eval_bzl("root", &rel)
                        .unwrap_or_else(|err| panic!("{rel}: {err:#}"));
                    bzl += 1;
                }
            }
        }
    }
    e.package_records("root", "").unwrap();
    assert!(
        buck_files >= 5,
        "expected the root, toolchains, config and both example BUCK files, got {buck_files}"
    );
    assert!(
        bzl >= 9,
        "expected the Buck2 rule files and rules/common, got {bzl}"
    );
    let toolchains: BTreeSet<String> = e
        .package("toolchains", "")
        .unwrap()
        .keys()
        .cloned()
        .collect();
    for t in [
        "cxx",
        "python_bootstrap",
        "python",
        "genrule",
        "test",
        "remote_test_execution",
        "rocpack",
    ] {
        assert!(
            toolchains.contains(t),
            "toolchains//:{t} is missing ({toolchains:?})"
        );
    }
}

#[test]
fn the_root_package_declares_every_modifier_alias() {
    let e = engine();
    check_modifier_aliases(&e, LIBRARY, &REQUIRED_ALIASES).unwrap_or_else(|err| panic!("{err:#}"));
    // Defaults from set_cfg_modifiers: dev channel, ROCm 6.4.
    let cfg = e
        .config_for(&label("examples/rcclx", "hello"), &[])
        .unwrap();
    let values: BTreeSet<&str> = cfg.values().map(String::as_str).collect();
    assert_eq!(
        values,
        BTreeSet::from([
            "root//rules/buck2/config:dev",
            "root//rules/buck2/config:rocm64"
        ])
    );
    // The last modifier for one setting wins; a library's own channel is a
    // setting of its own, next to the global one; unknown aliases fail like buck2.
    let cfg = e
        .config_for(
            &label("examples/rcclx", "hello"),
            &["rcclx_stable", "rcclx_last_stable", "rocm70"],
        )
        .unwrap();
    let values: BTreeSet<&str> = cfg.values().map(String::as_str).collect();
    assert_eq!(
        values,
        BTreeSet::from([
            "root//rules/buck2/config:dev",
            "root//examples/rcclx:rcclx_channel_last_stable",
            "root//rules/buck2/config:rocm70"
        ])
    );
    let cfg = e
        .config_for(
            &label("examples/rcclx", "hello"),
            &["snapshot_stable", "rcclx_dev"],
        )
        .unwrap();
    let values: BTreeSet<&str> = cfg.values().map(String::as_str).collect();
    assert_eq!(
        values,
        BTreeSet::from([
            "root//rules/buck2/config:stable",
            "root//examples/rcclx:rcclx_channel_dev",
            "root//rules/buck2/config:rocm64"
        ])
    );
    let err = e
        .config_for(&label("examples/rcclx", "hello"), &["rcclx_stabel"])
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("Found invalid modifier alias `rcclx_stabel`"),
        "{err:#}"
    );
}

#[test]
fn the_snapshot_select_covers_every_channel_and_rocm_version() {
    let e = engine();
    let covered = check_select_coverage(&e, &label("examples/rcclx", "rcclx"), LIBRARY)
        .unwrap_or_else(|err| panic!("{err:#}"));
    let matrix = modifier_matrix(&e, LIBRARY).unwrap();
    // Every (channel, version) through the library's own and the global
    // channel, then each own channel under each global channel.
    assert_eq!(covered, matrix.len() + matrix.len() / 2 * 3);
    assert!(
        matrix.len() >= 18,
        "3 channels x at least 3 ROCm versions, two ways"
    );
    // The dev source library also selects on every ROCm version.
    let src = e.package("root", "examples/rcclx").unwrap()["rcclx_source"].clone();
    let keys: BTreeSet<String> = src.attrs["preprocessor_flags"]["__select__"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.as_str() != "DEFAULT")
        .map(|k| {
            Label::parse(k, "root", "examples/rcclx", &e)
                .unwrap()
                .to_string()
        })
        .collect();
    for (_, v, _) in &matrix {
        let k = format!("root//rules/buck2/config:rocm{}", v.replace('.', ""));
        assert!(keys.contains(&k), "rcclx_source has no flags for {k}");
    }
}

#[test]
fn a_missing_snapshot_fails_at_analysis_with_the_shared_message() {
    let e = engine();
    let t = label("examples/rcclx", "hello");
    // ROCm versions that have no stable snapshot in the checked-in file.
    let checksums = e
        .eval_bzl("root", "examples/rcclx/stable_checksums.bzl")
        .unwrap();
    let stable = to_json(checksums.get("RCCLX_STABLE_CHECKSUMS").unwrap().value()).unwrap();
    let have: Vec<String> = stable.as_object().unwrap().keys().cloned().collect();
    let missing: Vec<(String, String, Vec<String>)> = modifier_matrix(&e, LIBRARY)
        .unwrap()
        .into_iter()
        .filter(|(c, v, _)| c == "stable" && !have.contains(v))
        .collect();
    assert!(
        !missing.is_empty(),
        "the example keeps one ROCm version without a stable snapshot (7.1) to show the error"
    );
    for (channel, version, mods) in missing {
        let m: Vec<&str> = mods.iter().map(String::as_str).collect();
        let cfg = e.config_for(&t, &m).unwrap();
        let err = match e.analyze(&t, &cfg) {
            Ok(_) => panic!("hello built with -m {mods:?} although there is no snapshot"),
            Err(err) => format!("{err:#}"),
        };
        let expected = e
            .call_bzl(
                "root",
                "rules/common/snapshot.bzl",
                "missing_snapshot_message",
                &[
                    json!(LIBRARY),
                    json!(channel),
                    json!(version),
                    json!(have),
                    json!("examples/rcclx/snapshots"),
                    json!("examples/rcclx/store"),
                    json!("librcclx-dev.a"),
                    json!("buck2 run //examples/rcclx:stable_checksums.update"),
                ],
            )
            .unwrap();
        let expected = expected.as_str().unwrap().replace("--config=", "-m ");
        assert!(
            err.contains(&expected),
            "error for -m {mods:?}:\n{err}\n--- expected to contain ---\n{expected}"
        );
        assert!(
            !err.contains("--config="),
            "Bazel spelling leaked into the Buck2 message: {err}"
        );
    }
}

#[test]
fn every_target_analyses_and_helpers_accept_every_command_line() {
    let e = engine();
    let res = sweep(&e, "examples", LIBRARY).unwrap_or_else(|err| panic!("{err:#}"));
    assert!(res.analysed > 50, "analysed only {} targets", res.analysed);
    // Only the deliberately missing snapshots fail, and only where selected.
    for (t, mods, msg) in &res.missing_snapshot_errors {
        assert!(
            mods.iter()
                .any(|m| m.starts_with("rcclx_") || m.starts_with("snapshot_")),
            "{t} failed without a channel modifier: {msg}"
        );
    }
    let bins = helper_bins(&repo_root()).unwrap_or_else(|err| panic!("{err:#}"));
    let before = std::fs::read(repo_root().join("examples/rcclx/stable_checksums.bzl")).unwrap();
    let checked = check_helper_commands(&bins, &repo_root(), &res.helper_actions)
        .unwrap_or_else(|err| panic!("{err:#}"));
    let after = std::fs::read(repo_root().join("examples/rcclx/stable_checksums.bzl")).unwrap();
    assert!(
        before == after,
        "running the `.update` command line must not touch the checkout"
    );
    for want in [
        "kpack split",
        "kpack recombine",
        "snapctl fetch",
        "snapctl gen-checksums",
    ] {
        assert!(
            checked.iter().any(|c| c.starts_with(want)),
            "no `{want}` command was checked: {checked:#?}"
        );
    }
    eprintln!(
        "{} helper command lines accepted:\n{}",
        checked.len(),
        checked.join("\n")
    );
}

#[test]
fn kpack_example_has_one_package_per_group() {
    let e = engine();
    let pkg = e.package("root", "examples/kpack").unwrap();
    for name in [
        "blas_lib_generic",
        "blas_lib_gfx110X",
        "blas_lib_gfx115X",
        "blas_lib_gfx120X",
    ] {
        assert_eq!(
            pkg.get(name).map(|t| t.kind.as_str()),
            Some("_kpack_package"),
            "{name}"
        );
    }
    // Issue 24 item 10: ONE recombine makes every package (it was one full
    // recombine per package, each keeping one).
    assert_eq!(
        pkg.get("blas_lib_all_packages").map(|t| t.kind.as_str()),
        Some("_kpack_recombine_all")
    );
    let t = label("examples/kpack", "blas_lib_gfx110X");
    let cfg = e.config_for(&t, &[]).unwrap();
    let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    assert!(
        a.actions.is_empty(),
        "a package target runs no action of its own"
    );
    let all = label("examples/kpack", "blas_lib_all_packages");
    let all = e
        .analyze(&all, &cfg)
        .unwrap_or_else(|err| panic!("{err:#}"));
    let out = &a.providers_json["DefaultInfo"]["default_output"];
    assert_eq!(
        out["basename"],
        json!("blas_lib_gfx110X"),
        "the package directory is named after the target"
    );
    assert_eq!(
        a.providers_json["KpackPackageInfo"]["group"],
        json!("gfx110X")
    );
    let recombine: Vec<&Json> = all
        .actions
        .iter()
        .filter(|x| x["category"] == json!("kpack_recombine"))
        .collect();
    assert_eq!(recombine.len(), 1);
    let argv = recombine[0]["argv"].to_string();
    assert!(argv.contains("packaging-config.json"), "{argv}");
    // The shards directory stages every split under its shard name.
    let staged = all
        .actions
        .iter()
        .find(|x| x["kind"] == json!("symlinked_dir"))
        .expect("shards dir");
    let names: BTreeSet<String> = staged["srcs"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "gfx110X-build".into(),
            "gfx1151-build".into(),
            "gfx120X-build".into()
        ])
    );
    let split = e
        .analyze(&label("examples/kpack", "split_gfx110X-build"), &cfg)
        .unwrap();
    assert_eq!(
        split.providers_json["KpackSplitInfo"]["shard"],
        json!("gfx110X-build")
    );
    assert_eq!(
        split.providers_json["KpackSplitInfo"]["artifact_prefix"],
        json!("blas_lib")
    );
}

#[test]
fn the_toolchain_builds_helpers_with_cargo_or_fetches_pinned_binaries() {
    let e = engine();
    let t = Label {
        cell: "toolchains".into(),
        package: String::new(),
        name: "rocpack".into(),
    };
    let cfg = e.config_for(&t, &[]).unwrap();
    let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let kpack = a.providers_json["RocpackToolchainInfo"]["kpack"]["args"].to_string();
    // The cargo action's output directory holds one binary per package.
    assert!(kpack.contains("__rocpack_helpers__/bin/kpack"), "{kpack}");
    let cargo = e.analyze(&label("", "rocpack_helpers"), &cfg).unwrap();
    let act = &cargo.actions[0];
    assert_eq!(act["category"], json!("cargo_build"));
    let argv = act["argv"].to_string();
    assert!(argv.contains("\"release\""), "default profile: {argv}");
    assert_eq!(
        act["local_only"],
        json!(true),
        "cargo needs the local registry cache"
    );

    let e = engine();
    e.set_config("rocpack", "tools", "prebuilt");
    e.set_config("rocpack", "kpack_url", "https://example.invalid/kpack");
    e.set_config("rocpack", "kpack_sha256", &"a".repeat(64));
    e.set_config("rocpack", "snapctl_url", "https://example.invalid/snapctl");
    e.set_config("rocpack", "snapctl_sha256", &"b".repeat(64));
    let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let kpack = a.providers_json["RocpackToolchainInfo"]["kpack"]["args"].to_string();
    assert!(kpack.contains("rocpack_kpack_prebuilt"), "{kpack}");
    let dl = e
        .analyze(
            &Label {
                cell: "toolchains".into(),
                package: String::new(),
                name: "rocpack_kpack_prebuilt".into(),
            },
            &cfg,
        )
        .unwrap();
    assert_eq!(dl.actions[0]["kind"], json!("download_file"));
    assert_eq!(dl.actions[0]["sha256"], json!("a".repeat(64)));

    let e = engine();
    e.set_config("rocpack", "tools", "prebuilt");
    let err = e.package("toolchains", "").unwrap_err();
    assert!(format!("{err:#}").contains("kpack_sha256"), "{err:#}");
}

#[test]
fn every_rule_attribute_is_documented() {
    let e = engine();
    e.eval_bzl("root", "rules/buck2/defs.bzl").unwrap();
    let docs = e.rule_attr_docs("rules/buck2");
    for r in [
        "kpack_split",
        "kpack_recombine",
        "snapshot_blob",
        "rocpack_toolchain",
        "rocpack_cargo_build",
    ] {
        assert!(
            docs.contains_key(r),
            "rule {r} not found: {:?}",
            docs.keys().collect::<Vec<_>>()
        );
    }
    for (rule, attrs) in &docs {
        for (a, doc) in attrs {
            assert!(
                !doc.trim().is_empty(),
                "attribute `{a}` of `{rule}` has no doc"
            );
        }
    }
}

/// Parameter names of `def name(...)` in a Starlark file (text scan).
fn def_params(text: &str, name: &str) -> BTreeSet<String> {
    let start = text
        .find(&format!("def {name}("))
        .unwrap_or_else(|| panic!("no def {name}"))
        + name.len()
        + 5;
    let mut depth = 1;
    let mut end = start;
    for (i, ch) in text[start..].char_indices() {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            end = start + i;
            break;
        }
    }
    let mut params = BTreeSet::new();
    let mut depth = 0;
    let mut cur = String::new();
    for ch in text[start..end].chars().chain(std::iter::once(',')) {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                let p = cur.split([':', '=']).next().unwrap().trim().to_owned();
                if !p.is_empty() && !p.starts_with('*') {
                    params.insert(p);
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    params
}

/// Attribute names of a Bazel `rule(attrs = {...})` in a file (text scan of `"x": attr.`).
fn bazel_attrs(text: &str) -> BTreeSet<String> {
    text.match_indices("\": attr.")
        .map(|(i, _)| {
            let before = &text[..i];
            let q = before.rfind('"').unwrap();
            before[q + 1..].to_owned()
        })
        .filter(|a| !a.starts_with('_'))
        .collect()
}

#[test]
fn rules_and_macros_have_the_bazel_names_and_attributes() {
    let e = engine();
    e.eval_bzl("root", "rules/buck2/defs.bzl").unwrap();
    let docs = e.rule_attr_docs("rules/buck2");
    let read = |p: &str| std::fs::read_to_string(repo_root().join(p)).unwrap();
    let buck_attrs = |r: &str| -> BTreeSet<String> {
        docs[r]
            .keys()
            .filter(|a| !a.starts_with('_'))
            .cloned()
            .collect()
    };
    for (rule, file) in [
        ("kpack_split", "rules/bazel/private/kpack_split.bzl"),
        ("kpack_recombine", "rules/bazel/private/kpack_recombine.bzl"),
    ] {
        assert_eq!(
            buck_attrs(rule),
            bazel_attrs(&read(file)),
            "attributes of {rule}"
        );
    }
    for (mac, bazel, buck) in [
        (
            "kpack_packages",
            "rules/bazel/private/kpack_packages.bzl",
            "rules/buck2/private/kpack_packages.bzl",
        ),
        (
            "stable_checksums",
            "rules/bazel/private/stable_checksums.bzl",
            "rules/buck2/private/stable_checksums.bzl",
        ),
        (
            "prebuilt_snapshot",
            "rules/bazel/private/prebuilt_snapshot.bzl",
            "rules/buck2/private/prebuilt_snapshot.bzl",
        ),
    ] {
        assert_eq!(
            def_params(&read(buck), mac),
            def_params(&read(bazel), mac),
            "parameters of {mac}"
        );
    }
    let defs = e.eval_bzl("root", "rules/buck2/defs.bzl").unwrap();
    for name in [
        "kpack_split",
        "kpack_recombine",
        "kpack_packages",
        "stable_checksums",
        "prebuilt_snapshot",
        "rcclx_snapshot",
    ] {
        defs.get(name)
            .unwrap_or_else(|err| panic!("defs.bzl does not export {name}: {err}"));
    }
}

#[test]
fn every_kpack_split_option_reaches_the_helper_in_a_form_it_accepts() {
    // The example uses few options; set them all on a copy of its BUCK file.
    let e = engine();
    let text = std::fs::read_to_string(repo_root().join("examples/kpack/BUCK")).unwrap();
    let from = "    split_databases = [\"rocblas\"],\n";
    assert!(text.contains(from));
    e.overlay(
        "examples/kpack/BUCK",
        &text.replace(
            from,
            "    split_databases = [\"rocblas\", \"hipblaslt\"],\n    compression = \"none\",\n    exclude_archs = [\"gfx1101\", \"gfx1102\"],\n",
        ),
    );
    let t = label("examples/kpack", "split_gfx110X-build");
    let cfg = e.config_for(&t, &[]).unwrap();
    let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let acts: Vec<(Label, Json)> = a.actions.iter().map(|x| (t.clone(), x.clone())).collect();
    let bins = helper_bins(&repo_root()).unwrap_or_else(|err| panic!("{err:#}"));
    let checked =
        check_helper_commands(&bins, &repo_root(), &acts).unwrap_or_else(|err| panic!("{err:#}"));
    assert_eq!(checked.len(), 1, "{checked:?}");
    for want in [
        "--compression none",
        "--exclude-arch gfx1101 --exclude-arch gfx1102",
        "--split-databases rocblas hipblaslt",
    ] {
        assert!(
            checked[0].contains(want),
            "{want} missing from {}",
            checked[0]
        );
    }
}

/// Builds `targets` of the kpack example through the executor (Buck2's
/// staging, the real helpers) and returns each default output's path.
fn execute_kpack(
    e: &Rc<Engine>,
    out: &std::path::Path,
    targets: &[&str],
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let bins = helper_bins(&repo_root())?;
    let mut analyses = Vec::new();
    for t in targets {
        let l = label("examples/kpack", t);
        let cfg = e.config_for(&l, &[])?;
        analyses.push(e.analyze(&l, &cfg)?);
    }
    let mut x = Executor::new(e, &bins, out);
    analyses
        .iter()
        .map(|a| x.build(&a.providers_json["DefaultInfo"]["default_output"]))
        .collect()
}

#[test]
fn a_group_missing_from_the_config_fails_with_the_rocpack_message() {
    // Issue 24 item 10: a typo in `groups` fails the recombine with
    // rules/common's message (target, group, config, fix), not with buck2's
    // missing-path error; run through the executor with the real kpack.
    let e = engine();
    let text = std::fs::read_to_string(repo_root().join("examples/kpack/BUCK")).unwrap();
    let from = "    \"gfx120X\",\n]";
    assert!(text.contains(from));
    e.overlay(
        "examples/kpack/BUCK",
        &text.replace(from, "    \"gfx120X\",\n    \"gfx120x\",\n]"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let err = execute_kpack(&e, &tmp.path().join("buck-out"), &["blas_lib_gfx110X"])
        .expect_err("a recombine with a group missing from the config succeeded");
    let err = format!("{err:#}");
    for want in [
        "rocpack: root//examples/kpack:blas_lib_all_packages: no package blas_lib_gfx120x: the group is not an architecture group of the packaging config ",
        "examples/kpack/packaging-config.json, or no shard has code for it.",
        "kpack recombine wrote: blas_lib_generic blas_lib_gfx110X blas_lib_gfx115X blas_lib_gfx120X",
        "fix: name in `groups` only keys of \"architecture_groups\" in ",
    ] {
        assert!(err.contains(want), "lacks `{want}`:\n{err}");
    }
}

#[test]
fn a_split_with_other_archs_fails_its_build_and_every_recombine_over_it() {
    // kpack_split's `archs` check is built with the split (an output of its
    // DefaultInfo) and is an input of the recombines over it, as in Bazel,
    // where one action makes both; it used to run only for the [archs]
    // sub-target, so a wrong list built green.
    let e = engine();
    let text = std::fs::read_to_string(repo_root().join("examples/kpack/BUCK")).unwrap();
    let from = "    shard = shard,\n";
    assert!(text.contains(from));
    e.overlay(
        "examples/kpack/BUCK",
        &text.replace(from, "    shard = shard,\n    archs = [\"gfx9999\"],\n"),
    );
    let t = label("examples/kpack", "split_gfx110X-build");
    let cfg = e.config_for(&t, &[]).unwrap();
    let split = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let info = &split.providers_json["DefaultInfo"];
    let archs = &split.providers_json["KpackSplitInfo"]["archs_file"];
    assert!(
        info["other_outputs"]
            .as_array()
            .is_some_and(|v| v.iter().any(|o| o["path"] == archs["path"])),
        "the archs file is not built with the split: {info}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let err = execute_kpack(&e, &tmp.path().join("buck-out"), &["blas_lib_gfx110X"])
        .expect_err("a package built over splits whose archs are not the declared ones");
    let err = format!("{err:#}");
    assert!(
        err.contains("kpack_split: expected archs [gfx9999], the split produced [gfx1"),
        "{err}"
    );
}

#[test]
fn the_kpack_example_builds_as_buck2_stages_it_and_matches_the_cli() {
    let e = engine();
    let tmp = tempfile::tempdir().unwrap();
    let targets = ["blas_lib_generic", "blas_lib_gfx110X", "blas_lib_gfx120X"];
    let built = execute_kpack(&e, &tmp.path().join("buck-out"), &targets)
        .unwrap_or_else(|err| panic!("{err:#}"));

    // The same inputs through the kpack CLI, on the checkout itself.
    let bins = helper_bins(&repo_root()).unwrap();
    let ex = repo_root().join("examples/kpack");
    let cli = tmp.path().join("cli");
    for (shard, artifact) in [
        ("gfx110X-build", "blas_lib_gfx110X-dgpu"),
        ("gfx1151-build", "blas_lib_gfx1151"),
        ("gfx120X-build", "blas_lib_gfx120X-all"),
    ] {
        let st = std::process::Command::new(&bins.kpack)
            .arg("split")
            .arg("--artifact-dir")
            .arg(ex.join("shards").join(shard).join(artifact))
            .arg("--output-dir")
            .arg(cli.join("shards").join(shard))
            .args([
                "--artifact-prefix",
                "blas_lib",
                "--split-databases",
                "rocblas",
            ])
            .env("TZ", "UTC")
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let st = std::process::Command::new(&bins.kpack)
        .arg("recombine")
        .arg("--input-shards-dir")
        .arg(cli.join("shards"))
        .arg("--config")
        .arg(ex.join("packaging-config.json"))
        .arg("--output-dir")
        .arg(cli.join("out"))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    for (t, dir) in targets.iter().zip(&built) {
        let want = tree_listing(&cli.join("out").join(t)).unwrap();
        let got = tree_listing(dir).unwrap();
        assert!(!want.is_empty(), "{t}: the CLI wrote nothing");
        assert_eq!(got, want, "{t}: the Buck2 staging changes the package");
    }
    // The in-tree symlink of the artifact survives the staging.
    let listing = tree_listing(&built[0]).unwrap();
    assert!(
        listing
            .iter()
            .any(|l| l.ends_with("librocblas.so.5 -> librocblas.so.5.2")),
        "{listing:?}"
    );
}

#[test]
fn every_stable_checksums_command_names_the_prefix() {
    // The staged snapshots root holds only metadata files (no snapctl.conf):
    // without --prefix, `snapctl check` compares against RCCLX_ names, which
    // failed e2e/buck2's FOOCCL file under the real buck2.
    let e = engine();
    let text = std::fs::read_to_string(repo_root().join("examples/rcclx/BUCK")).unwrap();
    let from = "    prefix = \"RCCLX\",\n";
    assert!(text.contains(from));
    e.overlay(
        "examples/rcclx/BUCK",
        &text.replace(from, "    prefix = \"FOOX\",\n"),
    );
    let mut seen = BTreeSet::new();
    for name in [
        "stable_checksums",
        "stable_checksums.update",
        "stable_checksums_test",
    ] {
        let t = label("examples/rcclx", name);
        let cfg = e.config_for(&t, &[]).unwrap();
        let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
        for act in a.actions.iter().cloned().chain(runnable_commands(&a)) {
            if helper_of(&act) != Some("snapctl") {
                continue;
            }
            let argv: Vec<String> = act["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().map(str::to_owned).unwrap_or_default())
                .collect();
            let sub = argv.get(1).cloned().unwrap_or_default();
            let i = argv.iter().position(|x| x == "--prefix");
            assert!(
                i.is_some_and(|i| argv.get(i + 1).map(String::as_str) == Some("FOOX")),
                "{name}: `snapctl {sub}` without --prefix FOOX: {argv:?}"
            );
            seen.insert(sub);
        }
    }
    // The test diffs the checked-in file against the generated one (as in
    // Bazel), so only gen-checksums runs snapctl.
    assert_eq!(
        seen,
        BTreeSet::from(["gen-checksums".to_owned()]),
        "snapctl commands of the three targets"
    );
}

/// `examples/rcclx/stable_checksums.bzl` with `edit` applied (the text must be there).
fn with_checksums(e: &Rc<Engine>, from: &str, to: &str) {
    let rel = "examples/rcclx/stable_checksums.bzl";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    assert!(
        text.contains(from),
        "{rel} lacks {from:?}: update this test"
    );
    e.overlay(rel, &text.replacen(from, to, 1));
}

const STABLE_64: &str =
    "    \"6.4\": \"4fcbcec6e41e13b0c43444452bc6f94ff42c82eac44cf6e6a34fb00ab05292a5\",\n";

#[test]
fn a_rocm_version_outside_the_list_loads_and_is_selectable_once_declared() {
    // Issue 24 item 5: a 7.2 snapshot made the whole library fail to load
    // (dev included), while Bazel takes any version.
    let new = format!("{STABLE_64}{}", STABLE_64.replace("6.4", "7.2"));
    let e = engine();
    with_checksums(&e, STABLE_64, &new);
    let hello = label("examples/rcclx", "hello");
    let cfg = e.config_for(&hello, &[]).unwrap();
    e.analyze(&hello, &cfg)
        .unwrap_or_else(|err| panic!("dev build with a 7.2 checksum: {err:#}"));
    // Undeclared, the version is named (with the fix) by the message of a
    // channel/version that is missing.
    let cfg = e.config_for(&hello, &["rcclx_stable", "rocm71"]).unwrap();
    let err = match e.analyze(&hello, &cfg) {
        Ok(_) => panic!("{} analysed", hello),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        err.contains("7.2 (not a declared ROCm version: add it to `rocm_versions` under [rocpack]"),
        "{err}"
    );
    // Declared by the project's .buckconfig: -m rocm72 selects the snapshot.
    let e = engine();
    e.set_config("rocpack", "rocm_versions", "7.2");
    with_checksums(&e, STABLE_64, &new);
    let lib = label("examples/rcclx", "rcclx");
    let cfg = e.config_for(&lib, &["rcclx_stable", "rocm72"]).unwrap();
    let a = e
        .analyze(&lib, &cfg)
        .unwrap_or_else(|err| panic!("-m rcclx_stable -m rocm72: {err:#}"));
    let text = format!("{}", a.providers_json);
    assert!(text.contains("rcclx_stable_rocm72"), "{text}");
}

#[test]
fn a_blob_missing_from_the_store_fails_only_where_selected() {
    // Issue 24 item 6: a checksums file naming a blob the store lacks made
    // the package fail to load, so neither `.update` nor the test could run.
    let e = engine();
    let gone = STABLE_64.replace("4fcbcec6", "00000001");
    with_checksums(&e, STABLE_64, &gone);
    for name in ["stable_checksums.update", "stable_checksums_test", "hello"] {
        let t = label("examples/rcclx", name);
        let cfg = e.config_for(&t, &[]).unwrap();
        e.analyze(&t, &cfg)
            .unwrap_or_else(|err| panic!("{name} with a missing blob: {err:#}"));
    }
    let t = label("examples/rcclx", "hello");
    let cfg = e.config_for(&t, &["rcclx_stable", "rocm64"]).unwrap();
    let err = match e.analyze(&t, &cfg) {
        Ok(_) => panic!("{} analysed", t),
        Err(err) => format!("{err:#}"),
    };
    for want in [
        "the stable snapshot of rcclx for ROCm 6.4 is pinned to sha256 00000001",
        "missing: examples/rcclx/store/cas/sha256/00000001",
        "buck2 run //examples/rcclx:stable_checksums.update",
    ] {
        assert!(err.contains(want), "lacks {want:?}: {err}");
    }
}

#[test]
fn messages_name_labels_that_work_from_the_project_root() {
    // Issue 24 item 6: `checksums_target = ":stable_checksums"` printed
    // `buck2 run :stable_checksums.update`, which fails from the root.
    let e = engine();
    let rel = "examples/rcclx/BUCK";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let from = "checksums_target = \"//examples/rcclx:stable_checksums\",";
    assert!(text.contains(from));
    e.overlay(
        rel,
        &text.replace(from, "checksums_target = \":stable_checksums\","),
    );
    let t = label("examples/rcclx", "hello");
    let cfg = e.config_for(&t, &["rcclx_stable", "rocm71"]).unwrap();
    let err = match e.analyze(&t, &cfg) {
        Ok(_) => panic!("{} analysed", t),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        err.contains("buck2 run //examples/rcclx:stable_checksums.update"),
        "{err}"
    );
    // The freshness test names the .update target, not a buck-out path.
    let t = label("examples/rcclx", "stable_checksums_test");
    let cfg = e.config_for(&t, &[]).unwrap();
    let a = e.analyze(&t, &cfg).unwrap();
    let cmds = format!("{:?}", runnable_commands(&a));
    assert!(
        cmds.contains("//examples/rcclx:stable_checksums.update"),
        "{cmds}"
    );
    assert!(!cmds.contains("\"check\""), "{cmds}");
}

#[test]
fn stable_checksums_requires_a_prefix_as_in_bazel() {
    // Issue 24 item 6: Buck2 defaulted `prefix` to RCCLX silently.
    let e = engine();
    let rel = "examples/rcclx/BUCK";
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let from = "    prefix = \"RCCLX\",\n";
    assert!(text.contains(from));
    e.overlay(rel, &text.replace(from, ""));
    let err = format!("{:#}", e.package("root", "examples/rcclx").unwrap_err());
    assert!(err.contains("set `prefix`"), "{err}");
}

#[test]
fn the_abi_guard_names_a_generated_input_by_its_owner_as_buck2_does() {
    // buck2: a declared output's `owner` is the Label of the target that
    // declared it (package, raw_target()); a source's is None. The guard's
    // recorded path and printed re-cut command come from it.
    let e = engine();
    let t = label("examples/abi_guard", "lib_stable_rocm70_abi_test");
    let cfg = e.config_for(&t, &[]).unwrap();
    let a = e.analyze(&t, &cfg).unwrap_or_else(|err| panic!("{err:#}"));
    let check = a
        .actions
        .iter()
        .find(|act| act["category"] == json!("snapshot_abi_report"))
        .unwrap_or_else(|| panic!("no snapshot_abi_report action: {:#?}", a.actions));
    let argv = check["argv"].as_array().unwrap();
    let at = |i: usize| argv.get(i).cloned().unwrap_or(Json::Null);
    let pair = argv
        .iter()
        .position(|x| x == "--input-pair")
        .unwrap_or_else(|| panic!("no --input-pair: {argv:#?}"));
    // The path as `snapctl create --abi-input` recorded it (project-relative).
    assert_eq!(at(pair + 1), json!("examples/abi_guard/dep/point.h"));
    assert_eq!(
        at(pair + 2)["owner"]["package"],
        json!("examples/abi_guard")
    );
    assert_eq!(at(pair + 2)["owner"]["name"], json!("point_h"));
    let recut = argv
        .iter()
        .filter_map(Json::as_str)
        .find(|x| x.starts_with("--recut="))
        .unwrap_or_else(|| panic!("no --recut=: {argv:#?}"));
    assert!(
        recut.ends_with(
            " --abi-input examples/abi_guard/dep/point.h=\"$(buck2 build --show-full-simple-output root//examples/abi_guard:point_h)\""
        ),
        "{recut}"
    );
    // The snapshot's metadata.txt is a source file: no owner.
    let meta = argv
        .iter()
        .position(|x| x == "--metadata")
        .unwrap_or_else(|| panic!("no --metadata: {argv:#?}"));
    assert_eq!(at(meta + 1)["is_source"], json!(true));
    assert_eq!(at(meta + 1)["owner"], Json::Null);
}
