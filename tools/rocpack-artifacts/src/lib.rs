//! TheRock artifact directories: manifests, database handlers, split,
//! recombine, reassembly, verify, packaging configs and family selection.

pub mod config;
pub mod databases;
pub mod fsutil;
pub mod jobs;
pub mod manifest;
pub mod reassemble;
pub mod recombine;
pub mod select;
pub mod split;
pub mod target;
pub mod verify;
pub mod walk;
