"""What a Buck2 test rule of rocpack returns: one command run from the project root."""

def project_root_test_providers(cmd: typing.Any, labels: list[str], local_only: bool = False) -> list[Provider]:
    """The providers of a test that runs `cmd` from the project root.

    `buck2 run` runs the same command (RunInfo). Paths are project-relative,
    so the test also runs remotely (`--unstable-allow-compatible-tests-on-re`)
    unless `local_only`.

    Args:
      cmd: the test's command line (cmd_args).
      labels: the test's labels.
      local_only: the command reads files that are not inputs of the test
        (e.g. trees the project ignores): run it locally only.

    Returns:
      DefaultInfo, RunInfo and ExternalRunnerTestInfo.
    """
    executor = {"default_executor": CommandExecutorConfig(local_enabled = True, remote_enabled = False)} if local_only else {}
    return [
        DefaultInfo(),
        RunInfo(args = cmd),
        ExternalRunnerTestInfo(
            type = "custom",
            command = [cmd],
            labels = labels,
            run_from_project_root = True,
            use_project_relative_paths = True,
            **executor
        ),
    ]
