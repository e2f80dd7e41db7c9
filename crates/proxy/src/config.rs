//! Configuration of the two listeners, as the daemon reads it from TOML (serde). Field names
//! are the config keys; every field has a default so a service table may name only what it
//! changes (`listen`, `upstream`, ...). Unknown keys are not rejected here because the
//! daemon's service tables carry keys of their own (`kind`, `ports`).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{DestRule, ProxyError};

/// How the proxy connects to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Upstream {
    /// Plain TCP.
    #[default]
    Tcp,
    /// Multipath TCP (`IPPROTO_MPTCP`). If the kernel refuses the socket the proxy uses
    /// TCP; if the server does not speak MPTCP the kernel falls back to TCP by itself.
    /// Both are counted in `mptcp_fallbacks`.
    Mptcp,
}

/// How bytes move between the two sockets of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RelayMode {
    /// `splice(2)` through one pipe per direction: payload never enters user space.
    #[default]
    Splice,
    /// `read`/`write` through one user-space buffer per direction.
    Copy,
}

/// Options shared by both listeners: upstream, relay core and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProxyOptions {
    /// Upstream transport (`"tcp"` or `"mptcp"`).
    pub upstream: Upstream,
    /// Relay core (`"splice"` or `"copy"`).
    pub relay: RelayMode,
    /// Connections relayed at once at most; beyond it new ones are reset (counted in
    /// `refused_cap`). Each costs two sockets and, with splice, two pipes (six fds).
    pub max_connections: usize,
    /// Bytes held in flight per direction inside the proxy: the pipe size with splice
    /// (rounded up by the kernel to a power-of-two number of pages), the buffer size with
    /// copy. Together with the socket buffers this bounds memory per connection.
    pub buffer_size: usize,
    /// `SO_RCVBUF`/`SO_SNDBUF` for both legs of every connection; 0 leaves the kernel's
    /// autotuning (`tcp_rmem`/`tcp_wmem`) in charge.
    pub socket_buffer: usize,
    /// Close (with RST both ways) a connection that moved no byte for this many seconds;
    /// 0 disables the timeout.
    pub idle_timeout_secs: u64,
    /// Give up connecting upstream after this many seconds.
    pub connect_timeout_secs: u64,
    /// On shutdown, how long live connections may run on before they are reset.
    pub drain_timeout_secs: u64,
    /// `SO_MARK` for upstream sockets (policy routing, or exempting the proxy's own traffic
    /// from relayd's queues); 0 sets none.
    pub upstream_mark: u32,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            upstream: Upstream::Tcp,
            relay: RelayMode::Splice,
            max_connections: 10_000,
            buffer_size: 64 * 1024,
            socket_buffer: 0,
            idle_timeout_secs: 600,
            connect_timeout_secs: 10,
            drain_timeout_secs: 30,
            upstream_mark: 0,
        }
    }
}

impl ProxyOptions {
    /// The idle timeout, `None` when disabled.
    pub fn idle_timeout(&self) -> Option<Duration> {
        (self.idle_timeout_secs > 0).then(|| Duration::from_secs(self.idle_timeout_secs))
    }

    /// The upstream connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs.max(1))
    }

    /// The drain deadline used by [`crate::ProxyHandle::shutdown`].
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout_secs)
    }

    pub(crate) fn check(&self) -> Result<(), ProxyError> {
        if self.max_connections == 0 {
            return Err(ProxyError::Config {
                field: "max_connections",
                reason: "must be at least 1".into(),
            });
        }
        if !(4096..=64 << 20).contains(&self.buffer_size) {
            return Err(ProxyError::Config {
                field: "buffer_size",
                reason: format!("{} is outside 4096..=64 MiB", self.buffer_size),
            });
        }
        Ok(())
    }
}

/// The transparent (TPROXY) listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TransparentConfig {
    /// Where the listener binds; the TPROXY rule's `--on-port` (and `--on-ip`) point here.
    /// `0.0.0.0:P` takes diverted IPv4 connections; `[::]:P` takes both families.
    pub listen: SocketAddr,
    /// Upstream connections keep the client's address as their source (`IP_TRANSPARENT`
    /// bind), so the server (or the next relay on the path) sees the client.
    pub transparent_source: bool,
    /// Upstream, relay and limits.
    #[serde(flatten)]
    pub options: ProxyOptions,
}

impl Default for TransparentConfig {
    fn default() -> Self {
        TransparentConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9040)),
            transparent_source: false,
            options: ProxyOptions::default(),
        }
    }
}

/// One RFC 1929 user.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Socks5User {
    /// User name (1 to 255 bytes).
    pub username: String,
    /// Password (1 to 255 bytes).
    pub password: String,
}

impl std::fmt::Debug for Socks5User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socks5User")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The SOCKS5 listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Socks5Config {
    /// Where the listener binds: loopback (`127.0.0.1:1080`) unless given, so that a
    /// listener nobody configured for the network is not an open proxy.
    pub listen: SocketAddr,
    /// With users, clients must authenticate with RFC 1929 user/password and "no
    /// authentication" is refused; without, only "no authentication" is offered.
    pub users: Vec<Socks5User>,
    /// Destinations clients may CONNECT to. Empty: any destination that is not special
    /// (loopback, link-local, unspecified, multicast, broadcast) nor the relay's own
    /// address. Not empty: only destinations an entry matches; an entry lying wholly
    /// inside a special range (`127.0.0.1:8080`), or naming one of the relay's
    /// addresses exactly, re-allows it. See [`DestRule`] for the grammar.
    pub allow: Vec<DestRule>,
    /// Destinations refused whatever `allow` says (evaluated first).
    pub deny: Vec<DestRule>,
    /// Upstream, relay and limits.
    #[serde(flatten)]
    pub options: ProxyOptions,
}

impl Default for Socks5Config {
    fn default() -> Self {
        Socks5Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 1080)),
            users: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            options: ProxyOptions::default(),
        }
    }
}

impl Socks5Config {
    pub(crate) fn check(&self) -> Result<(), ProxyError> {
        self.options.check()?;
        for u in &self.users {
            let ok = |s: &str| (1..=255).contains(&s.len());
            if !ok(&u.username) || !ok(&u.password) {
                return Err(ProxyError::Config {
                    field: "users",
                    reason: format!(
                        "user {:?}: name and password must be 1 to 255 bytes (RFC 1929)",
                        u.username
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keys_as_in_the_issue() {
        let c: Socks5Config = serde_json::from_str(
            r#"{"listen":"0.0.0.0:1080","upstream":"mptcp","kind":"socks5",
                "users":[{"username":"u","password":"p"}],"idle_timeout_secs":5}"#,
        )
        .unwrap();
        assert_eq!(c.options.upstream, Upstream::Mptcp);
        assert_eq!(c.options.idle_timeout(), Some(Duration::from_secs(5)));
        assert_eq!(c.options.relay, RelayMode::Splice);
        assert!(c.check().is_ok());
        assert!(!format!("{:?}", c.users[0]).contains("\"p\""));
        assert!(c.allow.is_empty() && c.deny.is_empty());
        let c: Socks5Config = serde_json::from_str(
            r#"{"allow":["127.0.0.1:8080","10.0.0.0/8"],"deny":["[2001:db8::]/32:80-90"]}"#,
        )
        .unwrap();
        assert_eq!(c.allow.len(), 2);
        assert!(c.deny[0].matches("[2001:db8::5]:85".parse().unwrap()));
        assert!(serde_json::from_str::<Socks5Config>(r#"{"allow":["10.0.0.1/8"]}"#).is_err());
        let t: TransparentConfig = serde_json::from_str(r#"{"transparent_source":true}"#).unwrap();
        assert_eq!(t.listen.port(), 9040);
        assert!(t.transparent_source);
    }

    #[test]
    fn socks5_listens_on_loopback_by_default() {
        let c: Socks5Config = serde_json::from_str("{}").unwrap();
        assert_eq!(c.listen, SocketAddr::from(([127, 0, 0, 1], 1080)));
        assert_eq!(Socks5Config::default().listen, c.listen);
        assert!(c.listen.ip().is_loopback());
    }

    #[test]
    fn bad_values_name_the_field() {
        let mut o = ProxyOptions {
            buffer_size: 10,
            ..ProxyOptions::default()
        };
        assert!(o.check().unwrap_err().to_string().contains("buffer_size"));
        o.buffer_size = 65536;
        o.max_connections = 0;
        assert!(
            o.check()
                .unwrap_err()
                .to_string()
                .contains("max_connections")
        );
    }
}
