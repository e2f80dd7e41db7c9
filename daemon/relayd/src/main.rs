//! The `relayd` binary: the CLI with the built-in services.

fn main() -> std::process::ExitCode {
    relayd::cli::main()
}
