use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct SplitArgs {}

pub fn run(_args: SplitArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack split` is not implemented yet")
}
