//! `relayd-custom`: relayd with the built-in services plus `ttl-guard`.
//! Same CLI as relayd; configure `[service.g] kind = "ttl-guard"  min_ttl = 5`.

fn main() -> std::process::ExitCode {
    let mut registry = relayd::Registry::with_builtins();
    registry.register::<relayd_example_ttl_guard::TtlGuardConfig>();
    relayd::cli::main_with(registry)
}
