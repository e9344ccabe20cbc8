//! Every spelling of a GPU target that ROCm's trees use, normalised to one
//! identity (`kpack-reference.md` §12.2): `gfx90a:xnack-` (bundles),
//! `gfx90a-xnack-` (Tensile file names), `gfx942:sramecc+:xnack-`,
//! `gfx1250-strict` / `gfx1250_strict` (an identity of its own, never
//! merged with `gfx1250`), MIOpen's arch+CU names (`gfx90878` = gfx908 with
//! 78 CUs, `gfx942130`, `gfx1030_36`) and generic targets
//! (`gfx11-generic`, `gfx9-4-generic`). Split, the database handlers,
//! recombine, verify, select-family and `--gpu-targets` all go through here.

const FEATURES: [&str; 2] = ["sramecc", "xnack"];

/// Parses a target ID at the start of `s` (which starts with `gfx`), with
/// feature separators `:` or `-`. Returns the canonical text (`:`
/// separators) and the number of bytes consumed.
pub(crate) fn parse_target_at(s: &str) -> Option<(String, usize)> {
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
        // `gfx1250-strict` / `gfx1250_strict`: a target of its own.
        for suffix in ["-strict", "_strict"] {
            if s[i..].starts_with(suffix)
                && !b
                    .get(i + suffix.len())
                    .is_some_and(|c| c.is_ascii_alphanumeric())
            {
                out.push_str("-strict");
                i += suffix.len();
                break;
            }
        }
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

/// The processor of a target in any spelling, features dropped:
/// `gfx90a-xnack-` → `gfx90a`, `gfx942:sramecc+:xnack-` → `gfx942`,
/// `gfx1250_strict` → `gfx1250-strict`, `gfx11-generic` → itself. The
/// `amdgcn-amd-amdhsa--` prefix is accepted. `None` for no target.
pub fn base_arch(s: &str) -> Option<String> {
    let t = parse_target_exact(crate::strip_target_prefix(s))?;
    Some(t.split(':').next().unwrap_or(&t).to_string())
}

/// Checks a GPU target given by a user (a command-line value, a
/// configuration entry) in any spelling [`base_arch`] reads, and returns it
/// unchanged; the error is the one message every tool prints for it.
pub fn parse_gpu_target(s: &str) -> Result<String, String> {
    match base_arch(s) {
        Some(_) => Ok(s.to_string()),
        None => Err(format!(
            "`{s}` is not a GPU target (e.g. gfx90a, gfx942:sramecc+, gfx1250-strict)"
        )),
    }
}

/// Processors MIOpen glues a CU count to (`gfx90878` = gfx908 + 78 CUs).
const MIOPEN_PROCESSORS: &[&str] = &[
    "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
    "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032", "gfx1100", "gfx1101",
    "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1200", "gfx1201",
];

/// The target of a MIOpen database name: `gfx90878` → `gfx908`,
/// `gfx942130` → `gfx942`, `gfx1030_36` → `gfx1030`, and every ordinary
/// spelling as [`parse_target_exact`] reads it.
pub fn miopen_arch(s: &str) -> Option<String> {
    let exact = parse_target_exact(s);
    if let Some(t) = &exact {
        let base = t.split(':').next().unwrap_or(t);
        if MIOPEN_PROCESSORS.contains(&base) || t.contains(':') || t.ends_with("-generic") {
            return exact;
        }
    }
    if let Some((arch, cus)) = s.split_once('_') {
        if !cus.is_empty() && cus.bytes().all(|b| b.is_ascii_digit()) {
            return parse_target_exact(arch);
        }
    }
    MIOPEN_PROCESSORS
        .iter()
        .filter(|p| {
            s.strip_prefix(**p)
                .is_some_and(|cus| !cus.is_empty() && cus.bytes().all(|b| b.is_ascii_digit()))
        })
        .max_by_key(|p| p.len())
        .map(|p| (*p).to_string())
        .or(exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_target_is_kept_as_given_or_refused_with_one_message() {
        assert_eq!(
            parse_gpu_target("gfx90a-xnack-").as_deref(),
            Ok("gfx90a-xnack-")
        );
        assert_eq!(
            parse_gpu_target("gfx1250_strict").as_deref(),
            Ok("gfx1250_strict")
        );
        assert_eq!(
            parse_gpu_target("sm_90"),
            Err(
                "`sm_90` is not a GPU target (e.g. gfx90a, gfx942:sramecc+, gfx1250-strict)".into()
            )
        );
    }

    #[test]
    fn every_spelling_has_one_identity() {
        for (spelling, canonical, base) in [
            ("gfx90a:xnack-", "gfx90a:xnack-", "gfx90a"),
            ("gfx90a-xnack-", "gfx90a:xnack-", "gfx90a"),
            ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", "gfx942"),
            ("gfx942-sramecc+-xnack-", "gfx942:sramecc+:xnack-", "gfx942"),
            ("gfx1250-strict", "gfx1250-strict", "gfx1250-strict"),
            ("gfx1250_strict", "gfx1250-strict", "gfx1250-strict"),
            ("gfx1250", "gfx1250", "gfx1250"),
            ("gfx11-generic", "gfx11-generic", "gfx11-generic"),
            ("gfx9-4-generic", "gfx9-4-generic", "gfx9-4-generic"),
            ("gfx1100", "gfx1100", "gfx1100"),
        ] {
            assert_eq!(
                parse_target_exact(spelling).as_deref(),
                Some(canonical),
                "{spelling}"
            );
            assert_eq!(base_arch(spelling).as_deref(), Some(base), "{spelling}");
        }
        assert_eq!(
            base_arch("amdgcn-amd-amdhsa--gfx90a:xnack+").as_deref(),
            Some("gfx90a")
        );
        for bad in ["gfx", "gfx12x3", "sm_90", "gfx1250-strictly", ""] {
            assert_eq!(parse_target_exact(bad), None, "{bad}");
        }
        assert_ne!(base_arch("gfx1250_strict"), base_arch("gfx1250"));
    }

    #[test]
    fn file_names_keep_features() {
        for (name, arch) in [
            ("TensileLibrary_lazy_gfx90a-xnack-.hsaco", "gfx90a:xnack-"),
            ("Kernels.so-000-gfx942-xnack-.hsaco", "gfx942:xnack-"),
            ("TensileLibrary_Type_HH_gfx1250_strict.co", "gfx1250-strict"),
            ("x_gfx9-4-generic.co", "gfx9-4-generic"),
        ] {
            assert_eq!(arch_from_file_name(name).as_deref(), Some(arch), "{name}");
        }
        assert_eq!(arch_from_file_name("TensileLibrary_fallback.dat"), None);
    }

    #[test]
    fn miopen_names() {
        for (name, arch) in [
            ("gfx90878", "gfx908"),
            ("gfx942130", "gfx942"),
            ("gfx1030_36", "gfx1030"),
            ("gfx90a6e", "gfx90a"),
            ("gfx1100", "gfx1100"),
        ] {
            let got = miopen_arch(name);
            if name == "gfx90a6e" {
                assert_eq!(got, None, "{name}");
            } else {
                assert_eq!(got.as_deref(), Some(arch), "{name}");
            }
        }
    }
}
