//! One module per subcommand; each owns its clap `Args` and a `run`.
pub mod inspect;
pub mod pack;
pub mod reassemble;
pub mod recombine;
pub mod select_family;
pub mod split;
pub mod split_wheel;
pub mod unbundle;
pub mod unpack;
pub mod verify;

/// `--jobs N` as the pool will get it: capped at what this machine can run
/// (`rocpack_artifacts::jobs`), with a note on stderr when reduced.
pub fn capped_jobs(cmd: &str, jobs: Option<usize>) -> Option<usize> {
    jobs.map(|n| {
        let (n, note) = rocpack_artifacts::jobs::cap(n);
        if let Some(note) = note {
            eprintln!("kpack {cmd}: note: {note}");
        }
        n
    })
}

/// One `--split-databases` value: a handler or a preset's handlers.
#[derive(Debug, Clone)]
pub struct Handlers(Vec<rocpack_artifacts::databases::DatabaseKind>);

/// The handlers of all `--split-databases` values, each once.
pub fn databases(values: &[Handlers]) -> Vec<rocpack_artifacts::databases::DatabaseKind> {
    rocpack_artifacts::databases::merge(values.iter().map(|h| &h.0[..]))
}

fn parse_db(s: &str) -> Result<Handlers, String> {
    rocpack_artifacts::databases::expand(s)
        .map(Handlers)
        .map_err(|e| e.to_string())
}

fn parse_compression(s: &str) -> Result<rocpack_kpack::Compression, String> {
    s.parse()
}
