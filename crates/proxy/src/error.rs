//! The crate's error type: what can go wrong starting a proxy or changing the kernel's
//! routing for transparent diversion. Per-connection failures are counted in
//! [`crate::Stats`], never returned.

use std::net::SocketAddr;

/// Errors from starting a proxy or installing/removing the TPROXY routing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The listening socket could not be created, configured or bound.
    #[error("binding the {what} listener on {addr}: {source}")]
    Bind {
        /// Which proxy (`"transparent"`, `"socks5"`).
        what: &'static str,
        /// The configured address.
        addr: SocketAddr,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is inconsistent (the message names the field).
    #[error("invalid proxy configuration: {field}: {reason}")]
    Config {
        /// The configuration field, as spelled in the config file.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The addresses of the local interfaces could not be read (`getifaddrs`), so the
    /// SOCKS5 destination policy could not tell the relay's own addresses.
    #[error("reading the local interface addresses: {0}")]
    LocalAddresses(#[source] std::io::Error),
    /// A tool (`ip`, `iptables-restore`) could not be started.
    #[error("running `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// A tool ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Tool {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its trimmed standard error.
        stderr: String,
    },
}
