//! rocpack-snapshot
