use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct SelectFamilyArgs {}

pub fn run(_args: SelectFamilyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kpack select_family` is not implemented yet")
}
