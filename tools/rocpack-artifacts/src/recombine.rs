//! recombine
