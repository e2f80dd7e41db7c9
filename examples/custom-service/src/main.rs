//! `relayd-custom`: relayd with the built-in services plus `ttl-guard` and `pong`.
//! Same CLI as relayd; configure `[service.g] kind = "ttl-guard"  min_ttl = 5` or
//! `[service.p] kind = "pong"  address = "198.51.100.7"`.

fn main() -> std::process::ExitCode {
    let mut registry = relayd::Registry::with_builtins();
    registry.register::<relayd_example_ttl_guard::TtlGuardConfig>();
    registry.register::<relayd_example_ttl_guard::pong::PongConfig>();
    relayd::cli::main_with(registry)
}
