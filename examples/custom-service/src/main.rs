//! `relayd-custom`: relayd with the built-in services plus `ttl-guard`, `pong` and
//! `port-class`. Same CLI as relayd; configure `[service.g] kind = "ttl-guard"  min_ttl = 5`,
//! `[service.p] kind = "pong"  address = "198.51.100.7"`, or a `port-class` as in its file.

fn main() -> std::process::ExitCode {
    let mut registry = relayd::Registry::with_builtins();
    registry.register::<relayd_example_ttl_guard::TtlGuardConfig>();
    registry.register::<relayd_example_ttl_guard::pong::PongConfig>();
    registry.register::<relayd_example_ttl_guard::port_class::PortClassConfig>();
    relayd::cli::main_with(registry)
}
