//! One module per subcommand; each owns its clap `Args` and a `run`.
pub mod inspect;
pub mod unbundle;
pub mod pack;
pub mod unpack;
pub mod split;
pub mod reassemble;
pub mod recombine;
pub mod verify;
pub mod select_family;
