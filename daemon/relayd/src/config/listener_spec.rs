//! What a proxy listener is once checked ([`ListenerSpec`], [`ListenerKind`]): the
//! listener sections (`listeners`) and the split proxy's implied transparent listener
//! (`tproxy`) both make them.

use relay_proxy::{Socks5Config, TransparentConfig};
use std::net::SocketAddr;

/// A proxy listener the daemon runs on its tokio runtime: a `[service.NAME]` of kind
/// `socks5` or `tproxy` (or the transparent listener a diverting service implies). Not a
/// chain service: it never appears in a queue's `services`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The section name (for the implied transparent listener: the diverting service's).
    pub name: String,
    /// Line of the section's `kind` (0 for an implied listener).
    pub line: usize,
    /// What it is and its options.
    pub kind: ListenerKind,
}

/// The two listener kinds and their options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerKind {
    /// A SOCKS5 (RFC 1928, RFC 1929) listener.
    Socks5(Socks5Config),
    /// The transparent listener TPROXY diverts split connections to.
    Transparent(TransparentConfig),
}

impl ListenerKind {
    /// The kind as configured and shown: `socks5` or `tproxy`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ListenerKind::Socks5(_) => "socks5",
            ListenerKind::Transparent(_) => "tproxy",
        }
    }

    /// The configured listen address.
    pub fn listen(&self) -> SocketAddr {
        match self {
            ListenerKind::Socks5(c) => c.listen,
            ListenerKind::Transparent(c) => c.listen,
        }
    }

    /// The upstream transport.
    pub fn upstream(&self) -> relay_proxy::Upstream {
        match self {
            ListenerKind::Socks5(c) => c.options.upstream,
            ListenerKind::Transparent(c) => c.options.upstream,
        }
    }

    /// How long live connections may run on when the listener stops.
    pub fn drain_timeout(&self) -> std::time::Duration {
        match self {
            ListenerKind::Socks5(c) => c.options.drain_timeout(),
            ListenerKind::Transparent(c) => c.options.drain_timeout(),
        }
    }
}
