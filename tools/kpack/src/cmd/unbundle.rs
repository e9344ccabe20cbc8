use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct UnbundleArgs {}

pub fn run(_args: UnbundleArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack unbundle` is not implemented yet")
}
