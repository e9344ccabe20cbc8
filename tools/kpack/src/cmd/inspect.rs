use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InspectArgs {}

pub fn run(_args: InspectArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack inspect` is not implemented yet")
}
