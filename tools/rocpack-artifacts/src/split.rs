//! split
