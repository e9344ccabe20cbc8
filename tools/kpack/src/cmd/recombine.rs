use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct RecombineArgs {}

pub fn run(_args: RecombineArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack recombine` is not implemented yet")
}
