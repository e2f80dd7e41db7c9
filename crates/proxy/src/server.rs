//! The accept loop both listeners share: connection cap, per-connection tasks, and the
//! [`ProxyHandle`] through which the daemon reads counters and drains on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::config::ProxyOptions;
use crate::policy::DestPolicy;
use crate::relay::{RelayParams, flag_set};
use crate::sock::rst_on_close;
use crate::stats::{Stats, StatsSnapshot};

/// After the drain deadline has reset every connection, how long to wait for their tasks.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Pause after an `accept` error (EMFILE, ENFILE, ENOBUFS) so the loop does not spin
/// while descriptors are short.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What a connection task gets besides its socket.
#[derive(Clone)]
pub(crate) struct ConnCtx {
    pub(crate) stats: Arc<Stats>,
    pub(crate) opts: Arc<ProxyOptions>,
    /// Turns true at the drain deadline: reset and end.
    pub(crate) abort: watch::Receiver<bool>,
}

impl ConnCtx {
    pub(crate) fn relay_params(&self) -> RelayParams {
        RelayParams {
            mode: self.opts.relay,
            buffer_size: self.opts.buffer_size,
            idle_timeout: self.opts.idle_timeout(),
        }
    }
}

/// Decrements `active` when a connection task ends, however it ends.
struct ActiveGuard {
    stats: Arc<Stats>,
    idle: Arc<Notify>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        if self.stats.active.fetch_sub(1, Relaxed) == 1 {
            self.idle.notify_waiters();
        }
    }
}

/// A running proxy listener. Dropping it stops accepting and resets live connections at
/// once; [`ProxyHandle::shutdown`] drains them gracefully instead.
#[derive(Debug)]
pub struct ProxyHandle {
    local_addr: SocketAddr,
    stats: Arc<Stats>,
    idle: Arc<Notify>,
    stop: watch::Sender<bool>,
    abort: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    drain_timeout: Duration,
    /// The SOCKS5 destination policy, whose snapshot of local addresses
    /// [`ProxyHandle::refresh_local_addresses`] renews.
    pub(crate) policy: Option<Arc<DestPolicy>>,
}

impl ProxyHandle {
    /// The address the listener is bound to (with the real port if 0 was configured).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live counters, for a status task that outlives this handle's borrow.
    pub fn stats_handle(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Reads the relay's interface addresses again for the SOCKS5 destination policy
    /// (which refuses them unless allowed); the daemon calls it on reload. Returns how
    /// many addresses there are; `Ok(0)` for the transparent listener, which keeps no
    /// snapshot (it asks the kernel's routing for each connection's destination).
    pub fn refresh_local_addresses(&self) -> std::io::Result<usize> {
        match &self.policy {
            Some(p) => p.refresh(),
            None => Ok(0),
        }
    }

    /// Graceful drain with the configured `drain_timeout_secs`; see
    /// [`ProxyHandle::shutdown_within`].
    pub async fn shutdown(self) -> StatsSnapshot {
        let d = self.drain_timeout;
        self.shutdown_within(d).await
    }

    /// Stops accepting (the listening socket is closed, so new connections are refused by
    /// the kernel), lets live connections run until they end or `deadline` passes, then
    /// resets those left. Returns the final counters.
    pub async fn shutdown_within(mut self, deadline: Duration) -> StatsSnapshot {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if !self.wait_idle(deadline).await {
            tracing::info!(
                active = self.stats.active.load(Relaxed),
                "drain deadline passed; resetting live connections"
            );
            let _ = self.abort.send(true);
            self.wait_idle(ABORT_GRACE).await;
        }
        self.stats.snapshot()
    }

    /// Waits until no connection is active or `limit` passes; true if none is active.
    async fn wait_idle(&self, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.stats.active.load(Relaxed) == 0 {
                return true;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(end) => {
                    return self.stats.active.load(Relaxed) == 0;
                }
            }
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = self.abort.send(true);
    }
}

/// Spawns the accept loop on the current tokio runtime; `handle` runs once per accepted
/// connection (within the cap) on its own task.
pub(crate) fn spawn<F, Fut>(
    listener: TcpListener,
    opts: ProxyOptions,
    handle: F,
) -> std::io::Result<ProxyHandle>
where
    F: Fn(TcpStream, SocketAddr, ConnCtx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let local_addr = listener.local_addr()?;
    let stats = Arc::new(Stats::default());
    let idle = Arc::new(Notify::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let drain_timeout = opts.drain_timeout();
    let ctx = ConnCtx {
        stats: Arc::clone(&stats),
        opts: Arc::new(opts),
        abort: abort_rx,
    };
    let task = tokio::spawn(accept_loop(
        listener,
        ctx,
        Arc::clone(&idle),
        stop_rx,
        handle,
    ));
    Ok(ProxyHandle {
        local_addr,
        stats,
        idle,
        stop: stop_tx,
        abort: abort_tx,
        task: Some(task),
        drain_timeout,
        policy: None,
    })
}

async fn accept_loop<F, Fut>(
    listener: TcpListener,
    ctx: ConnCtx,
    idle: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
    handle: F,
) where
    F: Fn(TcpStream, SocketAddr, ConnCtx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let stats = &ctx.stats;
    let max = ctx.opts.max_connections as u64;
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = flag_set(&mut stop) => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    Stats::inc(&stats.accept_errors);
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        Stats::inc(&stats.accepted);
        if stats.active.load(Relaxed) >= max {
            // Over the cap: RST now rather than letting the client hang in a queue.
            Stats::inc(&stats.refused_cap);
            rst_on_close(&stream);
            drop(stream);
            continue;
        }
        let now = stats.active.fetch_add(1, Relaxed) + 1;
        stats.peak_active.fetch_max(now, Relaxed);
        let guard = ActiveGuard {
            stats: Arc::clone(stats),
            idle: Arc::clone(&idle),
        };
        let fut = handle(stream, peer, ctx.clone());
        tokio::spawn(async move {
            let _guard = guard;
            fut.await;
        });
    }
    // Dropping the listener closes it: the kernel refuses (RST) new connections from now.
    drop(listener);
}
