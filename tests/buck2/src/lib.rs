//! Test-only harness that evaluates the Buck2 rules with the starlark crate.
