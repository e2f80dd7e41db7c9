//! The transparent listener: takes connections the TPROXY target diverted to it, whose
//! accepted socket's local address is the original destination, and relays each to that
//! destination, unless that destination is the relay itself or never forwarded
//! ([`crate::policy::check_transparent`]): those are reset and counted in `refused_local`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::ProxyError;
use crate::config::TransparentConfig;
use crate::policy::{self, LogLimit, Refusal};
use crate::relay::relay;
use crate::server::{self, ConnCtx, ProxyHandle};
use crate::sock::{self, rst_on_close, unmap};
use crate::stats::Stats;

/// A bound transparent listener, not yet accepting. Needs `CAP_NET_ADMIN` (IP_TRANSPARENT)
/// and the rules and routes of [`crate::tproxy`] in the same network namespace.
#[derive(Debug)]
pub struct TransparentProxy {
    cfg: TransparentConfig,
    listener: tokio::net::TcpListener,
}

impl TransparentProxy {
    /// Checks the configuration and binds the listener with `IP_TRANSPARENT` in the calling
    /// thread's network namespace. Must run inside a tokio runtime.
    pub fn bind(cfg: TransparentConfig) -> Result<TransparentProxy, ProxyError> {
        cfg.options.check()?;
        let listener = sock::listener(cfg.listen, true).map_err(|source| ProxyError::Bind {
            what: "transparent",
            addr: cfg.listen,
            source,
        })?;
        Ok(TransparentProxy { cfg, listener })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Starts accepting on the current tokio runtime.
    pub fn spawn(self) -> Result<ProxyHandle, ProxyError> {
        let listen = self
            .listener
            .local_addr()
            .map_err(|source| ProxyError::Bind {
                what: "transparent",
                addr: self.cfg.listen,
                source,
            })?;
        let transparent_source = self.cfg.transparent_source;
        let log = Arc::new(LogLimit::default());
        server::spawn(self.listener, self.cfg.options, move |client, peer, ctx| {
            serve(
                client,
                peer,
                ctx,
                listen,
                transparent_source,
                Arc::clone(&log),
            )
        })
        .map_err(|source| ProxyError::Bind {
            what: "transparent",
            addr: listen,
            source,
        })
    }
}

/// Whether `dst` is the listener itself: a client connected to the proxy port directly,
/// not through TPROXY. Relaying it would make the proxy connect to itself, recursively.
fn is_self(dst: SocketAddr, listen: SocketAddr) -> bool {
    dst.port() == listen.port()
        && (listen.ip().is_unspecified()
            || unmap(listen).ip() == dst.ip()
            || dst.ip().is_loopback())
}

async fn serve(
    client: TcpStream,
    peer: SocketAddr,
    ctx: ConnCtx,
    listen: SocketAddr,
    transparent_source: bool,
    log: Arc<LogLimit>,
) {
    let stats: &Stats = &ctx.stats;
    let (dst, peer) = match client.local_addr() {
        Ok(a) => (unmap(a), unmap(peer)),
        Err(_) => return,
    };
    if is_self(dst, listen) {
        tracing::debug!(%peer, %dst, "connection to the proxy port itself, not diverted; reset");
        Stats::inc(&stats.upstream_failed);
        rst_on_close(&client);
        return;
    }
    if let Err(why) = policy::check_transparent(dst, ctx.opts.upstream_mark) {
        Stats::inc(&stats.refused_local);
        if let Some(suppressed) = log.ready() {
            tracing::warn!(
                %peer,
                %dst,
                reason = refusal_text(why),
                suppressed,
                "transparent connection to the relay itself or to an address never forwarded; reset"
            );
        }
        rst_on_close(&client);
        return;
    }
    if let Err(e) = sock::tune_accepted(&client, &ctx.opts) {
        tracing::debug!(error = %e, "tuning accepted socket");
    }
    let source = transparent_source.then_some(peer);
    let server = match sock::connect_upstream(dst, source, &ctx.opts, stats).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(%peer, %dst, error = %e, "upstream connect failed");
            Stats::inc(&stats.upstream_failed);
            // The client believes it talks to the server: a RST is what the server's
            // refusal would have looked like.
            rst_on_close(&client);
            return;
        }
    };
    let ending = relay(client, server, ctx.relay_params(), stats, ctx.abort.clone()).await;
    tracing::trace!(%peer, %dst, ?ending, "connection ended");
}

/// What the destination is, for the log line (no `allow` can change it here).
fn refusal_text(why: Refusal) -> &'static str {
    match why {
        Refusal::Special(what) => what,
        Refusal::Local => "one of the relay's own addresses",
        Refusal::Denied(_) | Refusal::NotAllowed => "refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_connections_to_the_listener_are_spotted() {
        let any: SocketAddr = "0.0.0.0:9040".parse().unwrap();
        assert!(is_self("10.0.1.2:9040".parse().unwrap(), any));
        assert!(!is_self("10.0.2.2:80".parse().unwrap(), any));
        let one: SocketAddr = "10.0.1.2:9040".parse().unwrap();
        assert!(is_self("10.0.1.2:9040".parse().unwrap(), one));
        assert!(!is_self("10.0.2.2:9040".parse().unwrap(), one));
    }
}
