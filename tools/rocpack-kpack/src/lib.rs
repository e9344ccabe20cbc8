//! rocpack-kpack
