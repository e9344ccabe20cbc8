//! The `ROCM_KPACK_*` environment, read once when a cache is created.

use rocpack_kpack::LoaderEnv;

/// `ROCM_KPACK_DISABLE` / `ROCM_KPACK_DEBUG` truthiness, exactly as ROCm's
/// `kpack_cache_create` (shared/kpack/runtime/src/loader.cpp): only the
/// first character counts; a value that is empty or starts with `0` is off
/// (`0`, `00`, `0x`, `0abc`), anything else is on (`1`, `true`, `false`,
/// `no`, `" "`).
pub fn flag_is_on(value: Option<&str>) -> bool {
    matches!(value.and_then(|v| v.bytes().next()), Some(c) if c != b'0')
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
            (Some("00"), false),
            (Some("0x"), false),
            (Some("0abc"), false),
            (Some("0 "), false),
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
