//! select
