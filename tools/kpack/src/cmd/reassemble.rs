use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ReassembleArgs {}

pub fn run(_args: ReassembleArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack reassemble` is not implemented yet")
}
