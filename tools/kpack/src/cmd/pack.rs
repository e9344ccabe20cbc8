use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct PackArgs {}

pub fn run(_args: PackArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack pack` is not implemented yet")
}
