//! The database handlers of kpack-reference §12.4, table-driven: path →
//! (handler, arch) for each handler and each target spelling, and where each
//! file of a realistic tree lands after a split.

use std::fs;

use rocpack_artifacts::databases::{classify, expand, DatabaseKind};
use rocpack_artifacts::split::{split_artifact, CountingProgress, SplitOptions};

use DatabaseKind::*;

/// (path below a prefix, expected (handler, arch) with every handler on).
const TABLE: &[(&str, Option<(DatabaseKind, &str)>)] = &[
    // Tensile, flat layout: arch in the name, in every spelling.
    (
        "lib/rocblas/library/TensileLibrary_lazy_gfx90a-xnack-.hsaco",
        Some((Rocblas, "gfx90a:xnack-")),
    ),
    (
        "lib/rocblas/library/Kernels.so-000-gfx942-xnack-.hsaco",
        Some((Rocblas, "gfx942:xnack-")),
    ),
    (
        "lib/rocblas/library/TensileLibrary_Type_HH_gfx942-sramecc+-xnack-.co",
        Some((Rocblas, "gfx942:sramecc+:xnack-")),
    ),
    (
        "lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat",
        Some((Rocblas, "gfx1100")),
    ),
    ("lib/rocblas/library/TensileLibrary.dat", None),
    (
        "lib/rocblas/library/TensileLibrary_Type_HH_Contraction_fallback.dat",
        None,
    ),
    (
        "lib/hipblaslt/library/extop_gfx1250_strict.co",
        Some((Hipblaslt, "gfx1250-strict")),
    ),
    (
        "lib/hipblaslt/library/extop_gfx1250.co",
        Some((Hipblaslt, "gfx1250")),
    ),
    (
        "lib/hipsparselt/library/SPMM_gfx950.co",
        Some((Hipsparselt, "gfx950")),
    ),
    (
        "lib/rocblas/library/TensileLibrary_lazy_gfx1250-strict.hsaco",
        Some((Rocblas, "gfx1250-strict")),
    ),
    // Tensile, per-arch subdirectories: arch-less files belong to the arch.
    (
        "lib/rocblas/library/gfx1201/TensileManifest.txt",
        Some((Rocblas, "gfx1201")),
    ),
    (
        "lib/rocblas/library/gfx1201/TensileLibrary_Type_SS_fallback.dat",
        Some((Rocblas, "gfx1201")),
    ),
    (
        "lib/hipblaslt/library/gfx90a-xnack+/TensileLibrary.dat",
        Some((Hipblaslt, "gfx90a:xnack+")),
    ),
    (
        "lib/hipsparselt/library/gfx1250_strict/TensileManifest.txt",
        Some((Hipsparselt, "gfx1250-strict")),
    ),
    // AOTriton: kernel trees and image families.
    (
        "lib/aotriton/kernels/gfx1100/flash/attn_fwd/a-Gpu-gfx1100.hsaco",
        Some((Aotriton, "gfx1100")),
    ),
    (
        "lib/aotriton.images/amd-gfx11xx/flash/attn_fwd/x.aks2",
        Some((Aotriton, "gfx11")),
    ),
    (
        "lib/aotriton.images/amd-gfx120x/flash/attn_fwd/x.aks2",
        Some((Aotriton, "gfx12_0")),
    ),
    (
        "lib/aotriton.images/amd-gfx110x/flash/x.aks2",
        Some((Aotriton, "gfx110x")),
    ),
    (
        "lib/aotriton.images/amd-gfx942/flash/x.aks2",
        Some((Aotriton, "gfx942")),
    ),
    (
        "lib/aotriton.images/amd-gfx115x/flash/x.aks2",
        Some((Aotriton, "gfx115x")),
    ),
    (
        "lib/aotriton.images/amd-gfx950/flash/x.aks2",
        Some((Aotriton, "gfx950")),
    ),
    (
        "lib/aotriton.images/amd-gfx90a/flash/x.aks2",
        Some((Aotriton, "gfx90a")),
    ),
    ("lib/aotriton.images/README", None),
    // MIOpen: CK libraries and databases with arch+CU names.
    (
        "lib/libMIOpenCKGroupedConv_gfx942.so",
        Some((Miopen, "gfx942")),
    ),
    (
        "bin/MIOpenCKGroupedConv_gfx1100.dll",
        Some((Miopen, "gfx1100")),
    ),
    ("share/miopen/db/gfx90878.kdb", Some((Miopen, "gfx908"))),
    (
        "share/miopen/db/gfx942130.HIP.fdb.txt",
        Some((Miopen, "gfx942")),
    ),
    (
        "share/miopen/db/gfx1030_36.HIP.db.txt",
        Some((Miopen, "gfx1030")),
    ),
    ("share/miopen/db/gfx942.tn.model", Some((Miopen, "gfx942"))),
    ("share/miopen/db/readme.txt", None),
    // composable_kernel.
    (
        "lib/libdevice_conv_operations_gfx942_srameccp_xnack_.a",
        Some((Composablekernel, "gfx942:sramecc+:xnack-")),
    ),
    (
        "lib/libdevice_conv_operations_gfx1250_strict.a",
        Some((Composablekernel, "gfx1250-strict")),
    ),
    (
        "lib/device_conv_operations_gfx90a.lib",
        Some((Composablekernel, "gfx90a")),
    ),
    (
        "lib/libdevice_conv_operations_gfx90a_xnackp.a",
        Some((Composablekernel, "gfx90a:xnack+")),
    ),
    ("lib/libdevice_conv_operations.a", None),
    // hipKernelProvider.
    (
        "share/hkp/engines/arch_content/gemm/gfx942/k.co",
        Some((Hipkernelprovider, "gfx942")),
    ),
    (
        "share/hkp/engines/test_arch_content/gfx90a:xnack-/t.co",
        Some((Hipkernelprovider, "gfx90a:xnack-")),
    ),
    ("share/hkp/engines/arch_content/gfx11-generic/k.co", None),
    ("share/hkp/arch_content/gfx942/k.co", None),
    // RocJitsu hotswap cache: the domain names the target.
    (
        "share/rocjitsu/translations/gfx942/v1/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.man",
        Some((HotswapCache, "gfx942")),
    ),
    (
        "share/rocjitsu/translations/gfx90a-xnack-/v1/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.obj",
        Some((HotswapCache, "gfx90a:xnack-")),
    ),
    ("share/rocjitsu/translations/gfx942/v1/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.txt", None),
    ("share/rocjitsu/translations/gfx942/v1/abc.obj", None),
    ("share/rocjitsu/translations/gfx942/v2/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.obj", None),
    ("share/rocjitsu/translations/cpu/v1/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.obj", None),
    // Not databases.
    ("lib/librocblas.so.5", None),
    ("include/rocblas/gfx1100.h", None),
];

#[test]
fn path_to_handler_and_arch() {
    for (path, want) in TABLE {
        let got = classify(&DatabaseKind::ALL, path);
        let got = got.as_ref().map(|(k, a)| (*k, a.as_str()));
        assert_eq!(got, *want, "{path}");
    }
}

#[test]
fn names_presets_and_errors() {
    assert_eq!(
        expand("torch-fat").unwrap(),
        [Rocblas, Hipblaslt, Hipsparselt, Aotriton, Miopen]
    );
    assert_eq!(expand("MIOPEN").unwrap(), [Miopen]);
    let e = expand("tensile").unwrap_err().to_string();
    for k in DatabaseKind::ALL {
        assert!(e.contains(k.name()), "{e}");
    }
    assert!(e.contains("torch-fat"), "{e}");
}

/// A realistic tree per handler, split: each database file lands in its
/// arch artifact at the same relative path, everything else stays generic.
#[test]
fn files_land_where_their_arch_is() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("torch_gfxall");
    for (path, _) in TABLE {
        let p = art.join("pfx").join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, format!("data of {path}")).unwrap();
    }
    fs::write(art.join("artifact_manifest.txt"), "pfx\n").unwrap();
    let out = tmp.path().join("out");
    let opts = SplitOptions {
        databases: DatabaseKind::ALL.to_vec(),
        compression: rocpack_kpack::Compression::None,
        jobs: Some(1),
        ..SplitOptions::new(art, "torch", out.clone())
    };
    split_artifact(&opts, &CountingProgress::default()).unwrap();
    for (path, want) in TABLE {
        let generic = out.join("torch_generic/pfx").join(path);
        match want {
            Some((_, arch)) => {
                let dst = out.join(format!("torch_{arch}/pfx")).join(path);
                assert_eq!(
                    fs::read_to_string(&dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display())),
                    format!("data of {path}")
                );
                assert!(!generic.exists(), "{path} also in generic");
            }
            None => assert!(generic.is_file(), "{path} not in generic"),
        }
    }
}
