//! rocpack-bundle
