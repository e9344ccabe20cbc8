"""An execution platform for running rocpack's actions on a Remote Execution API service.

    # BUCK
    load("@rocpack//rules/buck2/remote:defs.bzl", "remote_execution_platform")
    remote_execution_platform(name = "remote")

and in .buckconfig (docs/remote-execution.md has the whole setup):

    [build]
      execution_platforms = root//:remote
    [buck2_re_client]
      engine_address = grpc://127.0.0.1:50051
      ...

Every action runs remotely except those marked `local_only` (the helpers'
cargo build: it needs the user's cargo registry and, with a shared target
dir, a path outside buck-out), and nothing falls back to local execution
when the service fails. Tests run with the same executor.
"""

def _impl(ctx: AnalysisContext) -> list[Provider]:
    constraints = dict()
    constraints.update(ctx.attrs.cpu_configuration[ConfigurationInfo].constraints)
    constraints.update(ctx.attrs.os_configuration[ConfigurationInfo].constraints)
    cfg = ConfigurationInfo(constraints = constraints, values = {})
    name = ctx.label.raw_target()
    platform = ExecutionPlatformInfo(
        label = name,
        configuration = cfg,
        executor_config = CommandExecutorConfig(
            # Needed for local_only actions; every other action goes remote.
            local_enabled = ctx.attrs.local_enabled,
            remote_enabled = True,
            remote_cache_enabled = True,
            allow_cache_uploads = True,
            # No local race or fallback: a remote failure fails the build.
            use_limited_hybrid = True,
            allow_limited_hybrid_fallbacks = False,
            remote_execution_properties = ctx.attrs.properties,
            remote_execution_use_case = ctx.attrs.use_case,
        ),
    )
    return [
        DefaultInfo(),
        platform,
        PlatformInfo(label = str(name), configuration = cfg),
        ExecutionPlatformRegistrationInfo(platforms = [platform]),
    ]

remote_execution_platform = rule(
    impl = _impl,
    doc = "An execution platform whose actions run on the [buck2_re_client] service (local only for `local_only` actions).",
    attrs = {
        "cpu_configuration": attrs.dep(providers = [ConfigurationInfo], default = "prelude//cpu:x86_64", doc = "CPU constraint of the workers."),
        "os_configuration": attrs.dep(providers = [ConfigurationInfo], default = "prelude//os:linux", doc = "OS constraint of the workers."),
        "local_enabled": attrs.bool(default = True, doc = "Allow local_only actions (the helpers' cargo build) to run here."),
        "properties": attrs.dict(attrs.string(), attrs.string(), default = {"OSFamily": ""}, doc = "Platform properties the scheduler matches workers by (NativeLink's default worker: OSFamily \"\")."),
        "use_case": attrs.string(default = "buck2-default", doc = "remote_execution_use_case sent to the service."),
    },
)
