use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {}

pub fn run(_args: VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack verify` is not implemented yet")
}
