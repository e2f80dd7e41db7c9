//! Which iptables tools to run and how; [`crate::cmd`] starts them.
//! iptables-restore always runs with `-w` (wait for the xtables lock) and `--noflush`
//! (never flush a table relayd does not own), reading its text from stdin.

use std::process::Output;

use tracing::debug;

use crate::cmd;
use crate::error::ControlError;
use relay_core::IpVersion;

/// The name of an address family's iptables program, which relay-control (and the split
/// proxy's diversion) run. An extension of [`IpVersion`] rather than a method of it: the
/// hot path's type has no business knowing tool names.
pub trait IptablesName {
    /// The iptables program: `iptables` or `ip6tables`.
    fn iptables(self) -> &'static str;
}

impl IptablesName for IpVersion {
    fn iptables(self) -> &'static str {
        match self {
            IpVersion::V4 => "iptables",
            IpVersion::V6 => "ip6tables",
        }
    }
}

/// The iptables tools for one address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The family these tools manage.
    pub family: IpVersion,
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
    pub fn system(family: IpVersion) -> Self {
        let t = family.iptables();
        Backend {
            family,
            restore: format!("{t}-restore"),
            save: format!("{t}-save"),
            netns: None,
        }
    }

    /// The legacy (x_tables) tools, for hosts whose other rules live there.
    pub fn legacy(family: IpVersion) -> Self {
        let t = family.iptables();
        Backend {
            family,
            restore: format!("{t}-legacy-restore"),
            save: format!("{t}-legacy-save"),
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

    /// Runs `iptables-save -c`: the rules with their packet and byte counters.
    pub(crate) fn run_save_counters(&self) -> Result<String, ControlError> {
        let out = self.run(&self.save, &["-c"], None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<Output, ControlError> {
        debug!(netns = ?self.netns, program, ?args, "running");
        if let Some(text) = stdin {
            debug!(program, "stdin:\n{text}");
        }
        cmd::run(self.netns.as_deref(), program, args, stdin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names() {
        assert_eq!(Backend::system(IpVersion::V6).restore, "ip6tables-restore");
        assert_eq!(Backend::system(IpVersion::V4).save, "iptables-save");
        assert_eq!(Backend::system(IpVersion::V6).save, "ip6tables-save");
        assert_eq!(Backend::system(IpVersion::V4).restore, "iptables-restore");
        assert_eq!(Backend::legacy(IpVersion::V6).save, "ip6tables-legacy-save");
        assert_eq!(IpVersion::V6.iptables(), "ip6tables");
        assert_eq!(
            Backend::legacy(IpVersion::V4).restore,
            "iptables-legacy-restore"
        );
        assert_eq!(
            Backend::legacy(IpVersion::V6)
                .in_netns("x")
                .netns
                .as_deref(),
            Some("x")
        );
    }

    #[test]
    fn missing_tool_is_named() {
        let mut b = Backend::system(IpVersion::V4);
        b.save = "relayd-no-such-iptables-save".into();
        let err = b.run_save().unwrap_err();
        assert!(
            matches!(&err, ControlError::ToolMissing { program } if program == &b.save),
            "{err}"
        );
    }
}
