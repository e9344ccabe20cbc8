//! Which targets a split keeps (`--exclude-arch`, `--gpu-targets`): one
//! rule, used by the scan (to skip work on code objects that will be
//! dropped) and by the plan (which decides).

use std::collections::BTreeSet;

use super::{is_excluded, SplitOptions};

/// The targets `--gpu-targets` keeps, as base architectures (`None`: all).
pub(super) fn wanted(opts: &SplitOptions) -> Option<BTreeSet<String>> {
    (!opts.gpu_targets.is_empty()).then(|| {
        opts.gpu_targets
            .iter()
            .filter_map(|t| rocpack_bundle::base_arch(t))
            .collect()
    })
}

/// Whether `--exclude-arch` / `--gpu-targets` (`wanted`) drop target `a`.
pub(super) fn drops(opts: &SplitOptions, wanted: Option<&BTreeSet<String>>, a: &str) -> bool {
    is_excluded(a, &opts.exclude_arch)
        || wanted.is_some_and(|w| !rocpack_bundle::base_arch(a).is_some_and(|b| w.contains(&b)))
}

/// The architectures a split keeps (what [`plan`](super::plan) decides), for the scan
/// to skip work on code objects that will be dropped.
pub(super) struct ArchFilter<'a> {
    opts: &'a SplitOptions,
    wanted: Option<BTreeSet<String>>,
}

impl<'a> ArchFilter<'a> {
    pub(super) fn new(opts: &'a SplitOptions) -> Self {
        ArchFilter {
            opts,
            wanted: wanted(opts),
        }
    }

    /// Whether target `a` is dropped.
    pub(super) fn drops(&self, a: &str) -> bool {
        drops(self.opts, self.wanted.as_ref(), a)
    }
}
