//! Developer tool: `elfsplit analyze FILE`, `elfsplit split IN OUT [MARKER]`,
//! `elfsplit roundtrip IN SPLIT OUT` (reassemble from IN's own bundles).
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let r = run(&args);
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("elfsplit: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    match args.get(1).map(String::as_str) {
        Some("analyze") => {
            let d = std::fs::read(&args[2])?;
            println!("{:#?}", rocpack_elf::analyze(&d)?);
        }
        Some("split") => {
            let d = std::fs::read(&args[2])?;
            let marker = args.get(4).cloned().unwrap_or_else(|| "test-marker".into());
            let out = rocpack_elf::split_file(&d, &mut |name, _| {
                Ok(format!("{marker}:{name}").into_bytes())
            })?;
            std::fs::write(&args[3], out)?;
        }
        Some("roundtrip") => {
            let d = std::fs::read(&args[2])?;
            let bundles_of = |data: &[u8]| -> rocpack_elf::Result<Vec<Vec<u8>>> {
                let info = rocpack_elf::analyze(data)?;
                (0..info.bundles.len())
                    .map(|i| rocpack_elf::bundle_bytes(data, &info, i).map(<[u8]>::to_vec))
                    .collect()
            };
            let s = std::fs::read(&args[3])?;
            let out = rocpack_elf::reassemble_file(&s, &mut |name, _| {
                if rocpack_elf::is_archive(&d) {
                    let m = rocpack_elf::archive_members(&d)?;
                    match m.iter().find(|m| m.name == name) {
                        Some(m) => bundles_of(m.data),
                        None => Err(rocpack_elf::Error::Archive {
                            offset: 0,
                            what: format!("member {name} not in the original archive"),
                        }),
                    }
                } else {
                    bundles_of(&d)
                }
            })?;
            std::fs::write(&args[4], out)?;
        }
        _ => return Err("usage: elfsplit analyze|split|roundtrip".into()),
    }
    Ok(())
}
