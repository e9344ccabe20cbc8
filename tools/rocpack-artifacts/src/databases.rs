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

/// A database handler, selected with `--split-databases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DatabaseKind {
    /// `…/rocblas/library/*.{co,hsaco,dat}`, arch from the file name.
    Rocblas,
    /// `…/hipblaslt/library/*.{co,hsaco,dat}`, arch from the file name.
    Hipblaslt,
    /// `…/aotriton/kernels/<arch>/…`, arch from the directory name.
    Aotriton,
    /// `…/miopen/db/*.model`, arch from the file name.
    Miopen,
}

impl DatabaseKind {
    /// Every handler, in the order `--help` lists them.
    pub const ALL: [DatabaseKind; 4] = [
        DatabaseKind::Rocblas,
        DatabaseKind::Hipblaslt,
        DatabaseKind::Aotriton,
        DatabaseKind::Miopen,
    ];

    /// The CLI / JSON name.
    pub fn name(self) -> &'static str {
        match self {
            DatabaseKind::Rocblas => "rocblas",
            DatabaseKind::Hipblaslt => "hipblaslt",
            DatabaseKind::Aotriton => "aotriton",
            DatabaseKind::Miopen => "miopen",
        }
    }

    /// The architecture this handler assigns to the file at `rel_path`
    /// (a `/`-separated path relative to its prefix), or `None` when the
    /// file is not one of this handler's database files.
    pub fn classify(self, rel_path: &str) -> Option<String> {
        let comps: Vec<&str> = rel_path.split('/').filter(|c| !c.is_empty()).collect();
        let (file_name, dirs) = comps.split_last()?;
        match self {
            DatabaseKind::Rocblas | DatabaseKind::Hipblaslt => {
                let lib = if self == DatabaseKind::Rocblas {
                    "rocblas"
                } else {
                    "hipblaslt"
                };
                let in_library = dirs.windows(2).any(|w| w[0] == lib && w[1] == "library");
                let db_suffix = [".co", ".hsaco", ".dat"]
                    .iter()
                    .any(|s| file_name.ends_with(s));
                if in_library && db_suffix {
                    arch_from_file_name(file_name)
                } else {
                    None
                }
            }
            DatabaseKind::Aotriton => {
                // `…/aotriton/kernels/<X>/…`: X must be a directory (not the file).
                let pos = dirs.windows(3).position(|w| {
                    w[0] == "aotriton" && w[1] == "kernels" && w[2].starts_with("gfx")
                })?;
                let x = dirs.get(pos + 2)?;
                Some(parse_target_exact(x).unwrap_or_else(|| (*x).to_string()))
            }
            DatabaseKind::Miopen => {
                let in_db = dirs.windows(2).any(|w| w[0] == "miopen" && w[1] == "db");
                if in_db && file_name.ends_with(".model") {
                    arch_from_file_name(file_name)
                } else {
                    None
                }
            }
        }
    }
}

impl fmt::Display for DatabaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Unknown handler name.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown database handler `{0}` (expected one of: rocblas, hipblaslt, aotriton, miopen)")]
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

const FEATURES: [&str; 2] = ["sramecc", "xnack"];

/// Parses a target ID at the start of `s` (which starts with `gfx`), with
/// feature separators `:` or `-`. Returns the canonical text (`:`
/// separators) and the number of bytes consumed.
fn parse_target_at(s: &str) -> Option<(String, usize)> {
    let b = s.as_bytes();
    if !s.starts_with("gfx") {
        return None;
    }
    let mut i = 3;
    let digits = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        j
    };
    let d_end = digits(i);
    if d_end == i {
        return None;
    }
    i = d_end;
    let mut out;
    // Generic: gfx<N>[-<M>]-generic
    let generic = (|| {
        let mut j = i;
        if b.get(j) == Some(&b'-') {
            let k = digits(j + 1);
            if k > j + 1 {
                j = k;
            }
        }
        s.get(j..)?
            .starts_with("-generic")
            .then_some(j + "-generic".len())
    })();
    if let Some(end) = generic {
        out = s[..end].to_string();
        i = end;
    } else {
        // Processor: gfx<digits>[a-z]? (gfx90a, gfx90c); no further alnum.
        if b.get(i).is_some_and(|c| c.is_ascii_lowercase()) {
            i += 1;
        }
        if b.get(i).is_some_and(|c| c.is_ascii_alphanumeric()) {
            return None;
        }
        out = s[..i].to_string();
    }
    // Features: ([-:](sramecc|xnack)[+-])*
    while let Some(&sep) = b.get(i) {
        if sep != b':' && sep != b'-' {
            break;
        }
        let rest = &s[i + 1..];
        let Some(f) = FEATURES.iter().find(|f| rest.starts_with(**f)) else {
            break;
        };
        let sign_at = i + 1 + f.len();
        match b.get(sign_at) {
            Some(&c) if c == b'+' || c == b'-' => {
                out.push(':');
                out.push_str(f);
                out.push(c as char);
                i = sign_at + 1;
            }
            _ => break,
        }
    }
    Some((out, i))
}

/// Parses `s` as exactly one target ID (e.g. a directory name), canonicalised.
pub fn parse_target_exact(s: &str) -> Option<String> {
    match parse_target_at(s) {
        Some((t, n)) if n == s.len() => Some(t),
        _ => None,
    }
}

/// The first target ID in a file name, with features and generic names kept.
/// A match must start at the beginning of the name or after a character
/// that is not a letter or digit.
pub fn arch_from_file_name(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut from = 0;
    while let Some(rel) = name.get(from..)?.find("gfx") {
        let at = from + rel;
        let boundary = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        if boundary {
            if let Some((t, _)) = parse_target_at(&name[at..]) {
                return Some(t);
            }
        }
        from = at + 3;
    }
    None
}

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
}
