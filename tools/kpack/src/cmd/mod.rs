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
