//! Running the external tools relayd drives (`iptables-restore`, `tc`, `ip`), optionally
//! inside a named network namespace (`ip netns exec NAME ...`): the one place relayd
//! starts processes, and the one reading of a failed run as "not installed", "not
//! permitted" or "failed".
//!
//! [`run`] is the whole path with [`ControlError`]s; [`command`] and [`output`] are its
//! two halves for callers (the proxy's TPROXY setup) that report failures their own way.

use std::io::{ErrorKind, Write as _};
use std::process::{Command, Output, Stdio};

use crate::error::ControlError;

/// Builds the command that runs `program ARGS`, inside `ip netns exec NETNS` when `netns`
/// is given. Stdout and stderr are piped; stdin is piped when `stdin` is true and null
/// otherwise (so a tool never waits on the caller's terminal).
pub fn command(netns: Option<&str>, program: &str, args: &[&str], stdin: bool) -> Command {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Why [`output`] has no [`Output`] to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The process could not be started (its launcher, `ip` for a namespaced run, is
    /// missing or not executable, ...).
    #[error("starting the process: {0}")]
    Spawn(#[source] std::io::Error),
    /// The process started but waiting for it or reading its output failed.
    #[error("waiting for the process: {0}")]
    Wait(#[source] std::io::Error),
}

impl RunError {
    /// The system error behind either kind of failure.
    pub fn into_io(self) -> std::io::Error {
        match self {
            RunError::Spawn(e) | RunError::Wait(e) => e,
        }
    }
}

/// Spawns `cmd` (from [`command`]), writes `stdin` to it, and collects its output,
/// whatever its exit status.
pub fn output(cmd: &mut Command, stdin: Option<&str>) -> Result<Output, RunError> {
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    std::thread::scope(|s| {
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // Written from a second thread so a chatty child can never block us on a
            // full stdout pipe while we block on its full stdin pipe.
            s.spawn(move || {
                // A write error means the child exited early; its status says why.
                let _ = pipe.write_all(text.as_bytes());
            });
        }
        child.wait_with_output()
    })
    .map_err(RunError::Wait)
}

/// Runs `program ARGS` (inside `ip netns exec NETNS` when `netns` is given) with `stdin`
/// and returns its output if it exits successfully.
///
/// Errors name `program`, except that a launcher which cannot be started is named itself
/// (`ip` for a namespaced run): [`ControlError::ToolMissing`] if it is not installed
/// (or `ip netns exec` cannot find `program`), [`ControlError::NotPermitted`] if the OS
/// or the tool refuses for lack of privilege, [`ControlError::ToolFailed`] with the
/// tool's cleaned stderr otherwise, and [`ControlError::Io`] for any other I/O failure.
pub fn run(
    netns: Option<&str>,
    program: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<Output, ControlError> {
    let launcher = if netns.is_some() { "ip" } else { program };
    let out =
        output(&mut command(netns, program, args, stdin.is_some()), stdin).map_err(
            |e| match e {
                RunError::Spawn(e) => spawn_error(launcher, e),
                RunError::Wait(source) => ControlError::Io {
                    program: program.to_owned(),
                    source,
                },
            },
        )?;
    if out.status.success() {
        return Ok(out);
    }
    Err(failure(program, netns.is_some(), &out))
}

fn spawn_error(program: &str, e: std::io::Error) -> ControlError {
    match e.kind() {
        ErrorKind::NotFound => ControlError::ToolMissing {
            program: program.to_owned(),
        },
        ErrorKind::PermissionDenied => ControlError::NotPermitted {
            program: program.to_owned(),
            detail: e.to_string(),
        },
        _ => ControlError::Io {
            program: program.to_owned(),
            source: e,
        },
    }
}

/// Classifies a failed run by its stderr, so "not installed" and "not root" read as such
/// rather than as a generic failure.
fn failure(program: &str, via_netns: bool, out: &Output) -> ControlError {
    let stderr = clean_stderr(&String::from_utf8_lossy(&out.stderr));
    if via_netns && stderr.contains("exec of") && stderr.contains("No such file or directory") {
        return ControlError::ToolMissing {
            program: program.to_owned(),
        };
    }
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("permission denied")
        || lower.contains("must be root")
        || lower.contains("operation not permitted")
    {
        return ControlError::NotPermitted {
            program: program.to_owned(),
            detail: stderr,
        };
    }
    ControlError::ToolFailed {
        program: program.to_owned(),
        status: out.status.to_string(),
        stderr,
    }
}

/// Drops iptables' "Try `iptables-restore -h' ..." hint and blank lines.
fn clean_stderr(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Try `"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_trimmed() {
        let raw = "iptables-restore v1.8.9 (nf_tables): Port \"x\" does not resolve to anything.\n\n\
                   Error occurred at line: 3\n\
                   Try `iptables-restore -h' or 'iptables-restore --help' for more information.\n";
        assert_eq!(
            clean_stderr(raw),
            "iptables-restore v1.8.9 (nf_tables): Port \"x\" does not resolve to anything.; \
             Error occurred at line: 3"
        );
    }

    #[test]
    fn namespaced_command_line() {
        let cmd = command(Some("ns1"), "tc", &["-batch", "-"], true);
        assert_eq!(cmd.get_program(), "ip");
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["netns", "exec", "ns1", "tc", "-batch", "-"]);
        let cmd = command(None, "tc", &["qdisc"], false);
        assert_eq!(cmd.get_program(), "tc");
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["qdisc"]);
    }

    #[test]
    fn stdin_reaches_the_tool_and_failures_are_classified() {
        let out = run(None, "cat", &[], Some("hello\n")).unwrap();
        assert_eq!(out.stdout, b"hello\n");
        let err = run(None, "relayd-no-such-tool", &[], None).unwrap_err();
        assert!(
            matches!(&err, ControlError::ToolMissing { program } if program == "relayd-no-such-tool"),
            "{err}"
        );
        let err = run(None, "sh", &["-c", "echo boom >&2; echo >&2; exit 3"], None).unwrap_err();
        assert!(
            matches!(&err, ControlError::ToolFailed { program, stderr, .. }
                if program == "sh" && stderr == "boom"),
            "{err}"
        );
    }
}
