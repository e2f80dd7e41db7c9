//! Which iptables tools to run and how: the only place this crate starts processes.
//! iptables-restore always runs with `-w` (wait for the xtables lock) and `--noflush`
//! (never flush a table relayd does not own), reading its text from stdin.

use std::io::{ErrorKind, Write as _};
use std::process::{Command, Output, Stdio};

use tracing::debug;

use crate::error::ControlError;
use crate::model::Family;

/// The iptables tools for one address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The family these tools manage.
    pub family: Family,
    /// The restore program, e.g. `iptables-restore`.
    pub restore: String,
    /// The save program, e.g. `iptables-save`.
    pub save: String,
    /// Run the tools inside this named network namespace (`ip netns exec NAME ...`);
    /// `None` for the current one. Lets tests and testbeds manage a namespace's rules
    /// without touching the host's.
    pub netns: Option<String>,
}

impl Backend {
    /// The system's default tools (`iptables-restore`/`iptables-save` or the `ip6tables`
    /// ones), whichever backend (nf_tables or legacy) they are built for.
    pub fn system(family: Family) -> Self {
        let (restore, save) = match family {
            Family::Ipv4 => ("iptables-restore", "iptables-save"),
            Family::Ipv6 => ("ip6tables-restore", "ip6tables-save"),
        };
        Backend {
            family,
            restore: restore.to_owned(),
            save: save.to_owned(),
            netns: None,
        }
    }

    /// The legacy (x_tables) tools, for hosts whose other rules live there.
    pub fn legacy(family: Family) -> Self {
        let (restore, save) = match family {
            Family::Ipv4 => ("iptables-legacy-restore", "iptables-legacy-save"),
            Family::Ipv6 => ("ip6tables-legacy-restore", "ip6tables-legacy-save"),
        };
        Backend {
            family,
            restore: restore.to_owned(),
            save: save.to_owned(),
            netns: None,
        }
    }

    /// The same tools, run inside the named network namespace.
    pub fn in_netns(mut self, name: impl Into<String>) -> Self {
        self.netns = Some(name.into());
        self
    }

    /// Runs `iptables-restore -w --noflush [--test]` with `text` on stdin.
    pub(crate) fn run_restore(&self, text: &str, test: bool) -> Result<(), ControlError> {
        let mut args = vec!["-w", "--noflush"];
        if test {
            args.push("--test");
        }
        self.run(&self.restore, &args, Some(text)).map(|_| ())
    }

    /// Runs `iptables-save` and returns its output. No `-t`: with the legacy tools
    /// `-t raw` would load (create) the raw table; without it only existing tables print.
    pub(crate) fn run_save(&self) -> Result<String, ControlError> {
        let out = self.run(&self.save, &[], None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<Output, ControlError> {
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        debug!(netns = ?self.netns, program, ?args, "running");
        if let Some(text) = stdin {
            debug!(program, "stdin:\n{text}");
        }
        let launcher = if self.netns.is_some() { "ip" } else { program };
        let mut child = cmd.spawn().map_err(|e| spawn_error(launcher, e))?;
        let out = std::thread::scope(|s| {
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
        .map_err(|source| ControlError::Io {
            program: program.to_owned(),
            source,
        })?;
        if out.status.success() {
            return Ok(out);
        }
        Err(failure(program, self.netns.is_some(), &out))
    }
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
pub(crate) fn clean_stderr(s: &str) -> String {
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
    fn tool_names() {
        assert_eq!(Backend::system(Family::Ipv6).restore, "ip6tables-restore");
        assert_eq!(Backend::system(Family::Ipv4).save, "iptables-save");
        assert_eq!(
            Backend::legacy(Family::Ipv4).restore,
            "iptables-legacy-restore"
        );
        assert_eq!(
            Backend::legacy(Family::Ipv6).in_netns("x").netns.as_deref(),
            Some("x")
        );
    }

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
    fn missing_tool_is_named() {
        let mut b = Backend::system(Family::Ipv4);
        b.save = "relayd-no-such-iptables-save".into();
        let err = b.run_save().unwrap_err();
        assert!(
            matches!(&err, ControlError::ToolMissing { program } if program == &b.save),
            "{err}"
        );
    }
}
