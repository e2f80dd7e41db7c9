//! Running `ip`/`tc` with errors that show the command line and its stderr.

use std::process::Command;

/// `prog arg arg ...` for messages, so a failing step can be replayed by hand.
pub(crate) fn cmdline(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion; `Ok(stdout)` on exit status 0, else a message with stderr.
pub(crate) fn run_quiet(cmd: &mut Command) -> Result<String, String> {
    let line = cmdline(cmd);
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(format!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("`{line}` could not be run: {e}")),
    }
}

/// Runs `cmd` and returns its stdout; panics with the command line and stderr on failure.
pub(crate) fn run_checked(cmd: &mut Command) -> String {
    run_quiet(cmd).unwrap_or_else(|e| panic!("relay-testbed: {e}"))
}
