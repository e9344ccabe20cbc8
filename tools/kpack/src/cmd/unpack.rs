use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct UnpackArgs {}

pub fn run(_args: UnpackArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack unpack` is not implemented yet")
}
