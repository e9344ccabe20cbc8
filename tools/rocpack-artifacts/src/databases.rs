//! Database handlers: recognise per-architecture kernel database files that
//! libraries load at run time by name (rocBLAS / hipBLASLt Tensile libraries,
//! AOTriton kernel trees, MIOpen models) and name the architecture each one
//! belongs to.
//!
//! Unlike rocm-kpack's regex (`gfx(\d+[a-z]*)`), the architecture keeps its
//! target features and generic names: `Kernels.so-000-gfx906-xnack-.hsaco`
//! belongs to `gfx906:xnack-`, `…_gfx9-4-generic.co` to `gfx9-4-generic`
//! (not `gfx9`), and `gfx90a-sramecc+-xnack-` to `gfx90a:sramecc+:xnack-`.
//! A name with no recognisable target (`TensileLibrary_…_fallback.dat`,
//! `hipblasltTransform.hsaco`) is not a database hit and stays generic.

use std::fmt;
use std::str::FromStr;

/// A database handler, selected with `--split-databases` (§12.4 of the
/// kpack reference; first match wins, in the order given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DatabaseKind {
    /// Tensile libraries under `…/rocblas/library/`.
    Rocblas,
    /// Tensile libraries under `…/hipblaslt/library/`.
    Hipblaslt,
    /// Tensile libraries under `…/hipsparselt/library/`.
    Hipsparselt,
    /// `…/aotriton/kernels/<arch>/…` and `aotriton.images/amd-<family>/…`.
    Aotriton,
    /// MIOpen: CK libraries `(lib)MIOpenCK…_<arch>.(so|dll)` and
    /// `miopen/db/<arch[+CUs]>….{kdb,model,db.txt,fdb.txt}`.
    Miopen,
    /// composable_kernel: `(lib)device_conv_operations_<token>.(a|lib)`.
    Composablekernel,
    /// hipKernelProvider: `…/engines/{arch_content,test_arch_content}/…/<arch>/…`.
    Hipkernelprovider,
    /// RocJitsu hotswap cache:
    /// `share/rocjitsu/translations/<domain>/v1/<64 hex>.(man|obj)`.
    HotswapCache,
}

/// Named sets of handlers (`--split-databases torch-fat`).
pub const PRESETS: &[(&str, &[DatabaseKind])] = &[(
    "torch-fat",
    &[
        DatabaseKind::Rocblas,
        DatabaseKind::Hipblaslt,
        DatabaseKind::Hipsparselt,
        DatabaseKind::Aotriton,
        DatabaseKind::Miopen,
    ],
)];

/// Handlers named by `name`: one handler, or every handler of a preset.
pub fn expand(name: &str) -> Result<Vec<DatabaseKind>, UnknownDatabase> {
    if let Some((_, kinds)) = PRESETS.iter().find(|(p, _)| p.eq_ignore_ascii_case(name)) {
        return Ok(kinds.to_vec());
    }
    name.parse().map(|k| vec![k])
}

/// The handlers of several `--split-databases` values, each once, in the
/// order first named.
pub fn merge<'a>(lists: impl IntoIterator<Item = &'a [DatabaseKind]>) -> Vec<DatabaseKind> {
    let mut out: Vec<DatabaseKind> = Vec::new();
    for k in lists.into_iter().flatten() {
        if !out.contains(k) {
            out.push(*k);
        }
    }
    out
}

impl DatabaseKind {
    /// Every handler, in the order `--help` lists them.
    pub const ALL: [DatabaseKind; 8] = [
        DatabaseKind::Rocblas,
        DatabaseKind::Hipblaslt,
        DatabaseKind::Hipsparselt,
        DatabaseKind::Aotriton,
        DatabaseKind::Miopen,
        DatabaseKind::Composablekernel,
        DatabaseKind::Hipkernelprovider,
        DatabaseKind::HotswapCache,
    ];

    /// The CLI / JSON name.
    pub fn name(self) -> &'static str {
        match self {
            DatabaseKind::Rocblas => "rocblas",
            DatabaseKind::Hipblaslt => "hipblaslt",
            DatabaseKind::Hipsparselt => "hipsparselt",
            DatabaseKind::Aotriton => "aotriton",
            DatabaseKind::Miopen => "miopen",
            DatabaseKind::Composablekernel => "composablekernel",
            DatabaseKind::Hipkernelprovider => "hipkernelprovider",
            DatabaseKind::HotswapCache => "hotswap_cache",
        }
    }

    /// The files this handler claims, in a few words (for "matched
    /// nothing" warnings).
    pub fn layout(self) -> &'static str {
        match self {
            DatabaseKind::Rocblas => {
                "`…/rocblas/[<version>/]library/*.{co,hsaco,dat}` or `…/library/<arch>/…`"
            }
            DatabaseKind::Hipblaslt => {
                "`…/hipblaslt/[<version>/]library/*.{co,hsaco,dat}` or `…/library/<arch>/…`"
            }
            DatabaseKind::Hipsparselt => {
                "`…/hipsparselt/[<version>/]library/*.{co,hsaco,dat}` or `…/library/<arch>/…`"
            }
            DatabaseKind::Aotriton => {
                "`…/aotriton/kernels/<arch>/…` or `aotriton.images/amd-<family>/…`"
            }
            DatabaseKind::Miopen => {
                "`(lib)MIOpenCK…_<arch>.so` or `miopen/db/<arch>….{kdb,model,db.txt,fdb.txt}`"
            }
            DatabaseKind::Composablekernel => "`(lib)device_conv_operations_<arch token>.(a|lib)`",
            DatabaseKind::Hipkernelprovider => {
                "`…/engines/{arch_content,test_arch_content}/…/<arch>/…`"
            }
            DatabaseKind::HotswapCache => {
                "`share/rocjitsu/translations/<arch>/v1/<sha256>.(man|obj)`"
            }
        }
    }

    /// The architecture this handler assigns to the file at `rel_path`
    /// (a `/`-separated path relative to its prefix), or `None` when the
    /// file is not one of this handler's database files.
    pub fn classify(self, rel_path: &str) -> Option<String> {
        let comps: Vec<&str> = rel_path.split('/').filter(|c| !c.is_empty()).collect();
        let (file_name, dirs) = comps.split_last()?;
        match self {
            DatabaseKind::Rocblas | DatabaseKind::Hipblaslt | DatabaseKind::Hipsparselt => {
                let lib = self.name();
                // `<lib>/library/`, or a distribution's versioned
                // `<lib>/<version>/library/` (Debian: `rocblas/4.4.1/library/`).
                let library = (0..dirs.len()).find_map(|i| {
                    if dirs[i] != lib {
                        return None;
                    }
                    match (dirs.get(i + 1), dirs.get(i + 2)) {
                        (Some(&"library"), _) => Some(i + 1),
                        (Some(v), Some(&"library")) if is_version(v) => Some(i + 2),
                        _ => None,
                    }
                })?;
                // Per-arch subdirectory layout: every file under
                // `library/<arch>/` belongs to that arch (also arch-less
                // ones: TensileManifest.txt, *_fallback.dat).
                if let Some(sub) = dirs.get(library + 1) {
                    if let Some(a) = parse_target_exact(sub) {
                        return Some(a);
                    }
                }
                let db_suffix = [".co", ".hsaco", ".dat"]
                    .iter()
                    .any(|s| file_name.ends_with(s));
                // Flat layout: the arch is in the name; arch-less files
                // (TensileLibrary.dat) stay generic.
                db_suffix.then(|| arch_from_file_name(file_name)).flatten()
            }
            DatabaseKind::Aotriton => {
                // `…/aotriton/kernels/<X>/…`: X must be a directory (not the file).
                if let Some(pos) = dirs.windows(3).position(|w| {
                    w[0] == "aotriton" && w[1] == "kernels" && w[2].starts_with("gfx")
                }) {
                    let x = dirs.get(pos + 2)?;
                    return Some(parse_target_exact(x).unwrap_or_else(|| (*x).to_string()));
                }
                // `aotriton.images/amd-<family>/…`: families and sub-families.
                let pos = dirs.iter().position(|d| *d == "aotriton.images")?;
                let fam = dirs.get(pos + 1)?.strip_prefix("amd-")?;
                aotriton_family(fam)
            }
            DatabaseKind::Miopen => {
                // CK per-arch libraries.
                let stem = file_name
                    .strip_suffix(".so")
                    .or_else(|| file_name.strip_suffix(".dll"));
                if let Some(stem) = stem {
                    let stem = stem.strip_prefix("lib").unwrap_or(stem);
                    if stem.starts_with("MIOpenCK") {
                        let (_, arch) = stem.rsplit_once('_')?;
                        return parse_target_exact(arch);
                    }
                }
                let in_db = dirs.windows(2).any(|w| w[0] == "miopen" && w[1] == "db");
                let db_suffix = [".kdb", ".model", ".db.txt", ".fdb.txt"]
                    .iter()
                    .any(|s| file_name.ends_with(s));
                if !(in_db && db_suffix) {
                    return None;
                }
                // `<arch>[CUs][_<CUs>].…` or `…_<arch>.…`.
                let head = file_name.split('.').next()?;
                miopen_arch(head)
                    .or_else(|| miopen_arch(head.split('_').next()?))
                    .or_else(|| arch_from_file_name(file_name))
            }
            DatabaseKind::Composablekernel => {
                let stem = file_name
                    .strip_suffix(".a")
                    .or_else(|| file_name.strip_suffix(".lib"))?;
                let stem = stem.strip_prefix("lib").unwrap_or(stem);
                let token = stem.strip_prefix("device_conv_operations_")?;
                ck_token(token)
            }
            DatabaseKind::Hipkernelprovider => {
                let pos = dirs
                    .iter()
                    .position(|d| *d == "arch_content" || *d == "test_arch_content")?;
                if pos == 0 || dirs[pos - 1] != "engines" {
                    return None;
                }
                // The first directory below that is exactly a target; generic
                // targets stay generic.
                let arch = dirs[pos + 1..].iter().find_map(|d| parse_target_exact(d))?;
                (!arch.ends_with("-generic")).then_some(arch)
            }
            DatabaseKind::HotswapCache => {
                // `share/rocjitsu/translations/<domain>/v1/<sha256>.(man|obj)`;
                // the domain names the target (any spelling of one); other
                // domains stay generic.
                let n = dirs.len();
                if n < 5
                    || dirs[n - 5..n - 2] != ["share", "rocjitsu", "translations"]
                    || dirs[n - 1] != "v1"
                {
                    return None;
                }
                let (hash, ext) = file_name.rsplit_once('.')?;
                if !matches!(ext, "man" | "obj")
                    || hash.len() != 64
                    || !hash.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return None;
                }
                parse_target_exact(dirs[n - 2])
            }
        }
    }
}

/// A version directory as distributions name them: `4.4.1`, `1.1`, `6`.
fn is_version(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && !s.ends_with('.')
        && !s.contains("..")
}

/// AOTriton image directory (`amd-` stripped) → the arch or family its
/// package is named after: `gfx11xx` → `gfx11`, `gfx120x` → `gfx12_0`,
/// `gfx110x`, `gfx115x`, `gfx942`, `gfx90a`, `gfx950` as they are.
fn aotriton_family(dir: &str) -> Option<String> {
    let rest = dir.strip_prefix("gfx")?;
    if !rest.bytes().all(|b| b.is_ascii_alphanumeric()) || rest.is_empty() {
        return None;
    }
    if let Some(major) = rest.strip_suffix("xx") {
        return major
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| format!("gfx{major}"));
    }
    if let Some(sub) = rest.strip_suffix('x') {
        // gfx120x → gfx12_0 (major 12, minor 0); gfx110x and gfx115x keep
        // their names (AOTriton's own sub-families).
        if sub.len() == 3 && sub.starts_with("12") {
            return Some(format!("gfx{}_{}", &sub[..2], &sub[2..]));
        }
        return Some(dir.to_string());
    }
    parse_target_exact(dir)
}

/// composable_kernel library token → target: `:` was written `_`, `+` `p`
/// and `-` `_` (`gfx942_srameccp_xnack_` → `gfx942:sramecc+:xnack-`,
/// `gfx1250_strict` → `gfx1250-strict`).
fn ck_token(token: &str) -> Option<String> {
    let mut parts = token.split('_');
    let mut out = parts.next()?.to_string();
    parse_target_exact(&out)?;
    let rest: Vec<&str> = parts.collect();
    let mut i = 0;
    while i < rest.len() {
        let p = rest[i];
        if p == "strict" {
            out.push_str("-strict");
        } else if let Some(f) = p.strip_suffix('p') {
            out.push(':');
            out.push_str(f);
            out.push('+');
        } else if !p.is_empty() && rest.get(i + 1) == Some(&"") {
            // `xnack_` at the end: `xnack-` (its `-` became `_`).
            out.push(':');
            out.push_str(p);
            out.push('-');
            i += 1;
        } else if !p.is_empty() {
            return None;
        }
        i += 1;
    }
    parse_target_exact(&out)
}

impl fmt::Display for DatabaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Unknown handler name.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown database handler `{0}` (known: rocblas, hipblaslt, hipsparselt, aotriton, miopen, composablekernel, hipkernelprovider, hotswap_cache; presets: torch-fat)")]
pub struct UnknownDatabase(pub String);

impl FromStr for DatabaseKind {
    type Err = UnknownDatabase;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DatabaseKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownDatabase(s.to_string()))
    }
}

/// Runs the handlers in order; the first that names an architecture wins.
pub fn classify(kinds: &[DatabaseKind], rel_path: &str) -> Option<(DatabaseKind, String)> {
    kinds
        .iter()
        .find_map(|k| k.classify(rel_path).map(|arch| (*k, arch)))
}

pub use rocpack_bundle::{arch_from_file_name, base_arch, miopen_arch, parse_target_exact};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_name_arches() {
        for (name, want) in [
            ("TensileLibrary_lazy_gfx1100.dat", Some("gfx1100")),
            ("Kernels.so-000-gfx906-xnack-.hsaco", Some("gfx906:xnack-")),
            ("Kernels.so-000-gfx90a-xnack+.hsaco", Some("gfx90a:xnack+")),
            (
                "Kernels.so-000-gfx942-sramecc+-xnack-.hsaco",
                Some("gfx942:sramecc+:xnack-"),
            ),
            (
                "TensileLibrary_Type_HH_gfx9-4-generic.co",
                Some("gfx9-4-generic"),
            ),
            ("gfx9-4-generic_x.ktn.model", Some("gfx9-4-generic")),
            ("x_gfx11-generic.hsaco", Some("gfx11-generic")),
            ("gfx942.tn.model", Some("gfx942")),
            ("gfx908_ConvAsm1x1U_decoder.ktn.model", Some("gfx908")),
            (
                "TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
                None,
            ),
            ("hipblasltTransform.hsaco", None),
            ("extop_gfx1151.co", Some("gfx1151")),
            ("libgfx1100.co", None),
        ] {
            assert_eq!(arch_from_file_name(name).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn handlers() {
        let p = "lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat";
        assert_eq!(
            DatabaseKind::Rocblas.classify(p).as_deref(),
            Some("gfx1100")
        );
        assert_eq!(DatabaseKind::Hipblaslt.classify(p), None);
        assert_eq!(
            DatabaseKind::Rocblas.classify("lib/rocblas/library/x_gfx1100.json"),
            None
        );
        // Debian's versioned layout.
        for (path, want) in [
            (
                "lib/x86_64-linux-gnu/rocblas/4.4.1/library/TensileLibrary_lazy_gfx1100.dat",
                Some("gfx1100"),
            ),
            (
                "lib/rocblas/4.4.1/library/gfx90a/TensileManifest.txt",
                Some("gfx90a"),
            ),
            ("lib/rocblas/4.4.1/library/TensileLibrary.dat", None),
            (
                "lib/rocblas/v4/library/TensileLibrary_lazy_gfx1100.dat",
                None,
            ),
            (
                "lib/rocblas/4.4.1/x/library/TensileLibrary_lazy_gfx1100.dat",
                None,
            ),
        ] {
            assert_eq!(
                DatabaseKind::Rocblas.classify(path).as_deref(),
                want,
                "{path}"
            );
        }
        let h = "lib/hipblaslt/library/extop_gfx906.co";
        assert_eq!(
            DatabaseKind::Hipblaslt.classify(h).as_deref(),
            Some("gfx906")
        );
        let a = "lib/aotriton/kernels/gfx1100/flash/attn_fwd/a-Gpu-gfx1100.json";
        assert_eq!(
            DatabaseKind::Aotriton.classify(a).as_deref(),
            Some("gfx1100")
        );
        assert_eq!(
            DatabaseKind::Aotriton.classify("lib/aotriton/kernels/gfx1100"),
            None
        );
        assert_eq!(
            DatabaseKind::Aotriton
                .classify("lib/aotriton/kernels/gfx942-sramecc+/x")
                .as_deref(),
            Some("gfx942:sramecc+")
        );
        assert_eq!(
            DatabaseKind::Miopen
                .classify("share/miopen/db/gfx9-4-generic_x.ktn.model")
                .as_deref(),
            Some("gfx9-4-generic")
        );
        let kinds = [DatabaseKind::Hipblaslt, DatabaseKind::Rocblas];
        assert_eq!(
            classify(&kinds, p),
            Some((DatabaseKind::Rocblas, "gfx1100".into()))
        );
        assert_eq!(classify(&[], p), None);
    }

    #[test]
    fn parse_names() {
        assert_eq!(
            "ROCBLAS".parse::<DatabaseKind>().unwrap(),
            DatabaseKind::Rocblas
        );
        assert!("x".parse::<DatabaseKind>().is_err());
    }

    #[test]
    fn merge_keeps_first_order_once() {
        let torch = expand("torch-fat").unwrap();
        let miopen = expand("miopen").unwrap();
        let rocblas = expand("rocblas").unwrap();
        let got = merge([&miopen[..], &torch[..], &rocblas[..]]);
        assert_eq!(got[0], DatabaseKind::Miopen);
        assert_eq!(got[1], DatabaseKind::Rocblas);
        assert_eq!(got.len(), torch.len());
        assert!(merge([]).is_empty());
    }
}
