//! rocpack-snapshot: prebuilt snapshots of a library per ROCm version, kept in a
//! seed-compatible repo layout (`stable/`, `last-stable/`, `archives/`) whose
//! `metadata.txt` files point into a content-addressed blob store.
//!
//! * [`metadata`] — `metadata.txt` reader/writer (accepts the seed's era-1 files).
//! * [`store`] — `cas/sha256/<hex>` blob store: local dir, `http(s)://`, `s3://`
//!   (what a store reports: [`blob`]).
//! * [`repo`] — snapshots root: config, lock, reading channels.
//! * [`txn`] — crash-safe rotation (`create`, `rollback`) with a journal and recovery.
//! * [`ops`] — the `snapctl` commands (the binary only parses arguments).
//! * [`checksums`] — `stable_checksums.bzl` generation, Starlark validation, diff.

pub mod abi;
pub mod blob;
pub mod checksums;
pub mod error;
pub mod fsutil;
pub mod hash;
pub mod metadata;
pub mod ops;
#[cfg(feature = "remote")]
mod remote;
pub mod repo;
pub mod source;
pub mod store;
pub mod tree;
pub mod txn;

pub use error::{Error, Result};
