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
