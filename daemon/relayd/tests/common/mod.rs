//! What the package-level tests (dist.rs, package.rs) share.

use std::process::{Command, Output};

/// Runs `cmd` and returns its output, or panics with the command, its status and both
/// outputs if it failed.
pub(crate) fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
