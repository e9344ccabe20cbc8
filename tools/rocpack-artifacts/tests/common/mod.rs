//! Helpers shared by rocpack-artifacts' integration tests (on top of
//! `rocpack-testsupport`, which cannot depend on this crate).
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::Path;

use rocpack_artifacts::verify::{verify, VerifyOptions, VerifyReport};

/// `verify` of the artifact tree `dir` without a packaging config; panics
/// when verify cannot run at all (a report with violations is returned).
pub fn verify_dir(dir: &Path) -> VerifyReport {
    verify(
        &VerifyOptions {
            artifacts_dir: dir.to_path_buf(),
            config: None,
            ..VerifyOptions::default()
        },
        &mut |_| {},
    )
    .unwrap()
}
