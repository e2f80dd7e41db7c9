//! relayd's TCP split proxy (issue 8): a transparent listener for connections the kernel
//! diverts with TPROXY, a SOCKS5 listener for clients configured with a proxy, one relay
//! core for both (`splice(2)`, half-close, RST propagation, idle timeout, caps, drain),
//! TCP or MPTCP upstream, and the rules and routes transparent diversion needs
//! ([`tproxy`]).
//!
//! The daemon binds a listener ([`TransparentProxy::bind`], [`Socks5Proxy::bind`]) in its
//! network namespace, [`spawn`](TransparentProxy::spawn)s it on its tokio runtime, reads
//! [`ProxyHandle::stats`] for `relayd status`, and calls [`ProxyHandle::shutdown`] on exit.
//!
//! ```no_run
//! # async fn f() -> Result<(), relay_proxy::ProxyError> {
//! use relay_proxy::{TransparentConfig, TransparentProxy, tproxy::TproxySpec};
//! let spec = TproxySpec::static_ports(9040, vec![80, 443]);
//! spec.install_routing(None)?;
//! spec.install_chain(None, "RELAYD-TPROXY")?;
//! let handle = TransparentProxy::bind(TransparentConfig::default())?.spawn()?;
//! // ... later
//! let final_stats = handle.shutdown().await;
//! spec.remove_chain(None, "RELAYD-TPROXY")?;
//! spec.remove_routing(None)?;
//! # let _ = final_stats; Ok(()) }
//! ```

mod config;
mod error;
mod policy;
mod relay;
mod server;
mod sock;
mod socks5;
mod stats;
pub mod tproxy;
mod transparent;

pub use config::{ProxyOptions, RelayMode, Socks5Config, Socks5User, TransparentConfig, Upstream};
pub use error::ProxyError;
pub use policy::DestRule;
pub use server::ProxyHandle;
pub use sock::raise_fd_limit;
pub use socks5::Socks5Proxy;
pub use stats::{Stats, StatsSnapshot};
pub use transparent::TransparentProxy;
