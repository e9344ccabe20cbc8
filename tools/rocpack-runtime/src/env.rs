//! The `ROCM_KPACK_*` environment, read once when a cache is created.

use rocpack_kpack::LoaderEnv;

/// `ROCM_KPACK_DISABLE` / `ROCM_KPACK_DEBUG` truthiness, as ROCm's current
/// runtime (`kpack-reference.md` §12.1): any non-empty value other than
/// exactly `"0"` means on; unset, `""` and `"0"` mean off (so `"00"`,
/// `"false"` and `"no"` are on: the value is not interpreted).
pub fn flag_is_on(value: Option<&str>) -> bool {
    matches!(value, Some(v) if !v.is_empty() && v != "0")
}

/// What a cache reads from the environment.
#[derive(Debug, Clone, Default)]
pub struct RuntimeEnv {
    /// `ROCM_KPACK_PATH`: replaces the marker's search paths.
    pub kpack_path: Option<String>,
    /// `ROCM_KPACK_PATH_PREFIX`: searched first (ignored when `kpack_path` is set).
    pub kpack_path_prefix: Option<String>,
    /// `ROCM_KPACK_DISABLE`: every load returns `KPACK_ERROR_NOT_IMPLEMENTED`.
    pub disable: bool,
    /// `ROCM_KPACK_DEBUG`: `kpack: …` lines on stderr.
    pub debug: bool,
}

impl RuntimeEnv {
    /// Read the process environment.
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        RuntimeEnv {
            kpack_path: var("ROCM_KPACK_PATH"),
            kpack_path_prefix: var("ROCM_KPACK_PATH_PREFIX"),
            disable: flag_is_on(var("ROCM_KPACK_DISABLE").as_deref()),
            debug: flag_is_on(var("ROCM_KPACK_DEBUG").as_deref()),
        }
    }

    /// The search-path part, for the shared loader.
    pub fn loader_env(&self) -> LoaderEnv {
        LoaderEnv::from_values(
            self.kpack_path.as_deref(),
            self.kpack_path_prefix.as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::flag_is_on;

    #[test]
    fn truthiness() {
        for (v, on) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("00"), true),
            (Some("0 "), true),
            (Some(" "), true),
            (Some("1"), true),
            (Some("true"), true),
            (Some("false"), true),
            (Some("no"), true),
        ] {
            assert_eq!(flag_is_on(v), on, "{v:?}");
        }
    }
}
