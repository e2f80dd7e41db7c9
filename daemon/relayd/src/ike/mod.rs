//! The IKE daemon: a tokio task that drives `relay_ike` (the I/O-free IKEv2 core) for the
//! `[ike.NAME]` connections: UDP sockets on ports 500 and 4500 of their local addresses,
//! timers, and the child SAs it negotiates handed to the ESP datapath through an
//! [`SaSink`]. Status and counters are published for `relayd status` and the metrics.
//!
//! One `relay_ike::Endpoint` runs per connection, so that a reload replaces exactly the
//! connections that changed and keeps the SAs of the others up.

mod sink;
mod status;

pub use sink::{EspTable, NoDatapath, SaSink, cipher_of};
pub use status::{IkeChildStatus, IkeConnStatus, counter_map, render, transform_name};

use crate::config::IkeSpec;
use relay_ike::{Endpoint, Event, OsRng};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

/// The IKE port (RFC 7296 2).
pub const IKE_PORT: u16 = 500;
/// The NAT-T port (RFC 3948): IKE after a 4-byte zero non-ESP marker, else ESP in UDP.
pub const NATT_PORT: u16 = 4500;
/// How often the datapath's per-SA volume is read for rekeying by bytes and packets.
const USAGE_EVERY: Duration = Duration::from_millis(500);
/// How long an inbound SA stays after its child SA is deleted. The IKE messages overtake
/// ESP: they skip relayd's queues, while ESP the peer sent on the old SA just before its
/// DELETE may still wait in a queue (milliseconds under load) and must still decrypt.
pub const INBOUND_GRACE: Duration = Duration::from_secs(2);
/// The largest IKE message read (relay_ike's own limit is below; longer is truncated and
/// refused by the parser).
const MAX_DATAGRAM: usize = 65535;

/// The counters the shell keeps per connection (beside relay_ike's): always present in
/// the status, zero or not.
const SHELL_COUNTERS: [&str; 3] = ["send_errors", "child_install_failed", "ike_down"];

enum Cmd {
    Reload(Vec<IkeSpec>),
    Shutdown(oneshot::Sender<()>),
    Initiate(String, oneshot::Sender<Result<(), String>>),
}

/// A datagram read by a socket task.
struct Datagram {
    local: SocketAddr,
    remote: SocketAddr,
    data: Vec<u8>,
}

/// The running IKE daemon, as the rest of relayd holds it.
pub struct Ike {
    cmds: mpsc::UnboundedSender<Cmd>,
    status: Arc<Mutex<Vec<IkeConnStatus>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Ike {
    /// Starts the task for `specs` (possibly none: a later reload may add some), handing
    /// child SAs to `sink`. Must be called inside the tokio runtime.
    pub fn start(specs: Vec<IkeSpec>, sink: Box<dyn SaSink>) -> Ike {
        let (cmds, rx) = mpsc::unbounded_channel();
        // Every connection is in the status from the start (down until the task has run).
        let initial = specs
            .iter()
            .map(|s| IkeConnStatus::new(s, &[], &relay_ike::Counters::default(), None))
            .collect();
        let status = Arc::new(Mutex::new(initial));
        let mut d = Driver::new(sink, status.clone());
        let task = tokio::spawn(async move {
            d.reconfigure(specs, Instant::now()).await;
            d.run(rx).await;
        });
        Ike { cmds, status, task }
    }

    /// The connections' status, as of the task's last step.
    pub fn status(&self) -> Vec<IkeConnStatus> {
        lock(&self.status).clone()
    }

    /// Applies a reloaded configuration: removed and changed connections are deleted
    /// (DELETE sent), new and changed ones start; unchanged ones keep their SAs.
    pub fn reload(&self, specs: Vec<IkeSpec>) {
        let _ = self.cmds.send(Cmd::Reload(specs));
    }

    /// Starts connection `name` now (as `start = true` does at load).
    pub async fn initiate(&self, name: &str) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Cmd::Initiate(name.to_string(), tx))
            .map_err(|_| "the IKE daemon has stopped".to_string())?;
        rx.await
            .unwrap_or_else(|_| Err("the IKE daemon has stopped".into()))
    }

    /// Deletes every IKE SA (INFORMATIONAL DELETE to each peer) and removes its child SAs
    /// from the datapath, then ends the task; waits at most `timeout`.
    pub async fn shutdown(&self, timeout: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.cmds.send(Cmd::Shutdown(tx)).is_ok() {
            let _ = tokio::time::timeout(timeout, rx).await;
        }
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection: its configuration and its endpoint.
struct Conn {
    spec: IkeSpec,
    ep: Endpoint,
    /// IKE SAs lost (not deleted by us) since the last one came up.
    failures: u64,
    /// What the shell counted for this connection (send errors, child SAs the datapath
    /// refused).
    shell: BTreeMap<&'static str, u64>,
    /// Child SAs installed in the datapath: outbound SPI -> inbound SPI.
    installed: BTreeMap<u32, u32>,
}

/// The sockets of one local address.
struct Sockets {
    ike: Arc<UdpSocket>,
    natt: Arc<UdpSocket>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Sockets {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

struct Driver {
    conns: BTreeMap<String, Conn>,
    sockets: BTreeMap<IpAddr, Sockets>,
    /// Why a local address has no sockets (bind failed), for status.
    bind_errors: BTreeMap<IpAddr, String>,
    sink: Box<dyn SaSink>,
    status: Arc<Mutex<Vec<IkeConnStatus>>>,
    dgram_tx: mpsc::Sender<Datagram>,
    dgram_rx: Option<mpsc::Receiver<Datagram>>,
    /// Datagrams on port 4500 that are ESP, not IKE (no datapath for them here).
    esp_in_udp: u64,
    /// Datagrams no connection matched.
    unmatched: u64,
    /// Inbound SAs of deleted child SAs, removed from the datapath at their time
    /// ([`INBOUND_GRACE`]): (when, connection, inbound SPI, outbound SPI).
    retiring: std::collections::VecDeque<(Instant, String, u32, u32)>,
}

impl Driver {
    fn new(sink: Box<dyn SaSink>, status: Arc<Mutex<Vec<IkeConnStatus>>>) -> Driver {
        let (dgram_tx, dgram_rx) = mpsc::channel(1024);
        Driver {
            conns: BTreeMap::new(),
            sockets: BTreeMap::new(),
            bind_errors: BTreeMap::new(),
            sink,
            status,
            dgram_tx,
            dgram_rx: Some(dgram_rx),
            esp_in_udp: 0,
            unmatched: 0,
            retiring: std::collections::VecDeque::new(),
        }
    }

    async fn run(&mut self, mut cmds: mpsc::UnboundedReceiver<Cmd>) {
        let Some(mut dgrams) = self.dgram_rx.take() else {
            return;
        };
        let mut usage = tokio::time::interval(USAGE_EVERY);
        usage.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = self
                .conns
                .values()
                .filter_map(|c| c.ep.poll_timeout())
                .min();
            let sleep = async {
                match deadline {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    Some(Cmd::Reload(specs)) => self.reconfigure(specs, Instant::now()).await,
                    Some(Cmd::Initiate(name, reply)) => {
                        let now = Instant::now();
                        let r = match self.conns.get_mut(&name) {
                            Some(c) => c.ep.initiate(now, &name).map_err(|e| e.to_string()),
                            None => Err(format!("no connection [ike.{name}]")),
                        };
                        let _ = reply.send(r);
                        self.flush(&name).await;
                    }
                    Some(Cmd::Shutdown(done)) => {
                        self.shutdown_all().await;
                        self.retire(Instant::now() + INBOUND_GRACE);
                        self.publish();
                        let _ = done.send(());
                        return;
                    }
                    None => {
                        self.shutdown_all().await;
                        return;
                    }
                },
                Some(d) = dgrams.recv() => self.receive(d).await,
                _ = sleep => {
                    let now = Instant::now();
                    self.retire(now);
                    let names: Vec<String> = self.conns.keys().cloned().collect();
                    for name in names {
                        if let Some(c) = self.conns.get_mut(&name)
                            && c.ep.poll_timeout().is_some_and(|t| t <= now)
                        {
                            c.ep.handle_timeout(now);
                        }
                        self.flush(&name).await;
                    }
                }
                _ = usage.tick() => {
                    self.report_usage();
                    // A volume rekey queued a request: send it now.
                    let names: Vec<String> = self.conns.keys().cloned().collect();
                    for name in names {
                        self.flush(&name).await;
                    }
                }
            }
            self.publish();
        }
    }

    /// Feeds one received datagram to the connection it belongs to.
    async fn receive(&mut self, d: Datagram) {
        let mut msg = d.data.as_slice();
        if d.local.port() == NATT_PORT {
            match msg {
                // A NAT keepalive (RFC 3948 2.3).
                [0xff] => return,
                [0, 0, 0, 0, rest @ ..] => msg = rest,
                _ => {
                    // ESP in UDP: the ESP services read ESP from NFQUEUE as IP protocol 50;
                    // RFC 3948 decapsulation is not in the datapath yet.
                    self.esp_in_udp += 1;
                    return;
                }
            }
        }
        let Some(name) = self.owner(d.local.ip(), d.remote.ip()) else {
            self.unmatched += 1;
            return;
        };
        if let Some(c) = self.conns.get_mut(&name) {
            c.ep.handle(Instant::now(), d.local, d.remote, msg);
        }
        self.flush(&name).await;
    }

    /// The connection for a datagram from `remote` to `local`: the one configured between
    /// those addresses, else the only one on `local` (a peer behind a NAT comes from
    /// another address than configured).
    fn owner(&self, local: IpAddr, remote: IpAddr) -> Option<String> {
        let exact = self
            .conns
            .values()
            .find(|c| c.spec.conn.local == local && c.spec.conn.remote == remote);
        if let Some(c) = exact {
            return Some(c.spec.name.clone());
        }
        let mut on_local = self.conns.values().filter(|c| c.spec.conn.local == local);
        match (on_local.next(), on_local.next()) {
            (Some(c), None) => Some(c.spec.name.clone()),
            _ => None,
        }
    }

    /// Applies connection `name`'s events, then sends what it has to send.
    async fn flush(&mut self, name: &str) {
        let Some(c) = self.conns.get_mut(name) else {
            return;
        };
        // Events first: an answer that completes a child SA must not reach the peer
        // before its inbound SA is installed here, or the peer's first ESP packets on it
        // would be dropped (relay_ike's event-before-transmit contract).
        while let Some(ev) = c.ep.poll_event() {
            apply_event(self.sink.as_mut(), &mut self.retiring, c, ev);
        }
        while let Some(t) = c.ep.poll_transmit() {
            let sent = match self.sockets.get(&t.local.ip()) {
                Some(s) if t.local.port() == NATT_PORT => {
                    let mut buf = Vec::with_capacity(t.payload.len() + 4);
                    buf.extend_from_slice(&[0; 4]);
                    buf.extend_from_slice(&t.payload);
                    s.natt.send_to(&buf, t.remote).await.is_ok()
                }
                Some(s) => s.ike.send_to(&t.payload, t.remote).await.is_ok(),
                None => false,
            };
            if !sent {
                *c.shell.entry("send_errors").or_default() += 1;
            }
        }
    }

    /// Removes the inbound SAs whose grace is over (all of them with `now` far ahead).
    fn retire(&mut self, now: Instant) {
        while self.retiring.front().is_some_and(|r| r.0 <= now) {
            if let Some((_, conn, spi_in, spi_out)) = self.retiring.pop_front() {
                self.sink.child_down(&conn, spi_in, spi_out);
            }
        }
    }

    fn report_usage(&mut self) {
        let now = Instant::now();
        for c in self.conns.values_mut() {
            for &spi_out in c.installed.keys() {
                if let Some((bytes, packets)) = self.sink.usage(&c.spec.name, spi_out) {
                    c.ep.report_usage(now, &c.spec.name, spi_out, bytes, packets);
                }
            }
        }
    }

    /// Applies a configuration: connections removed or changed are shut down (DELETE
    /// sent, child SAs removed), new or changed ones get a fresh endpoint; sockets follow
    /// the local addresses in use.
    async fn reconfigure(&mut self, specs: Vec<IkeSpec>, now: Instant) {
        let wanted: BTreeMap<String, IkeSpec> =
            specs.into_iter().map(|s| (s.name.clone(), s)).collect();
        let gone: Vec<String> = self
            .conns
            .iter()
            .filter(|(n, c)| wanted.get(*n).is_none_or(|w| !w.same_as(&c.spec)))
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            tracing::info!(connection = %name, "ike: connection removed or changed: deleting its SAs");
            if let Some(c) = self.conns.get_mut(&name) {
                c.ep.shutdown(now);
            }
            self.flush(&name).await;
            self.conns.remove(&name);
        }
        let locals: Vec<IpAddr> = wanted.values().map(|s| s.conn.local).collect();
        self.sockets.retain(|a, _| locals.contains(a));
        self.bind_errors.retain(|a, _| locals.contains(a));
        for a in locals {
            if !self.sockets.contains_key(&a) {
                match bind(a, self.dgram_tx.clone()).await {
                    Ok(s) => {
                        self.bind_errors.remove(&a);
                        self.sockets.insert(a, s);
                    }
                    Err(e) => {
                        tracing::error!(address = %a, "ike: cannot bind UDP 500/4500: {e}");
                        self.bind_errors.insert(a, e);
                    }
                }
            }
        }
        for (name, spec) in wanted {
            if self.conns.contains_key(&name) {
                continue;
            }
            tracing::info!(connection = %name, local = %spec.conn.local, remote = %spec.conn.remote, start = spec.conn.initiate, "ike: connection loaded");
            let ep = Endpoint::new(vec![spec.conn.clone()], Box::new(OsRng));
            self.conns.insert(
                name.clone(),
                Conn {
                    spec,
                    ep,
                    failures: 0,
                    shell: BTreeMap::new(),
                    installed: BTreeMap::new(),
                },
            );
            if let Some(c) = self.conns.get_mut(&name) {
                // A connection with `start` initiates on its first timer.
                c.ep.handle_timeout(now);
            }
            self.flush(&name).await;
        }
        self.publish();
    }
}

/// Binds UDP 500 and 4500 on `a`, with a reader task each feeding `dgrams`.
async fn bind(a: IpAddr, dgrams: mpsc::Sender<Datagram>) -> Result<Sockets, String> {
    {
        let ike = UdpSocket::bind(SocketAddr::new(a, IKE_PORT))
            .await
            .map_err(|e| format!("port {IKE_PORT}: {e}"))?;
        let natt = UdpSocket::bind(SocketAddr::new(a, NATT_PORT))
            .await
            .map_err(|e| format!("port {NATT_PORT}: {e}"))?;
        let (ike, natt) = (Arc::new(ike), Arc::new(natt));
        let readers = [ike.clone(), natt.clone()]
            .into_iter()
            .map(|s| {
                let tx = dgrams.clone();
                tokio::spawn(read_loop(s, tx))
            })
            .collect();
        Ok(Sockets { ike, natt, readers })
    }
}

impl Driver {
    async fn shutdown_all(&mut self) {
        let now = Instant::now();
        let names: Vec<String> = self.conns.keys().cloned().collect();
        for name in names {
            if let Some(c) = self.conns.get_mut(&name) {
                c.ep.shutdown(now);
            }
            self.flush(&name).await;
        }
    }

    /// Publishes every connection's status for `relayd status` and the metrics.
    fn publish(&self) {
        let now = Instant::now();
        let out: Vec<IkeConnStatus> = self
            .conns
            .values()
            .map(|c| {
                let bind = self.bind_errors.get(&c.spec.conn.local).cloned();
                let mut s =
                    IkeConnStatus::new(&c.spec, &c.ep.status_at(now), c.ep.counters(), bind);
                if s.state == "down" {
                    s.failures = s.failures.max(c.failures);
                }
                for k in SHELL_COUNTERS {
                    s.counters
                        .insert(k.to_string(), c.shell.get(k).copied().unwrap_or(0));
                }
                s.counters
                    .insert("esp_in_udp_ignored".into(), self.esp_in_udp);
                s.counters.insert("unmatched".into(), self.unmatched);
                for ch in &mut s.children {
                    ch.installed = c.installed.contains_key(&ch.spi_out);
                }
                s
            })
            .collect();
        *lock(&self.status) = out;
    }
}

/// Applies one event of connection `c` to the datapath.
fn apply_event(
    sink: &mut dyn SaSink,
    retiring: &mut std::collections::VecDeque<(Instant, String, u32, u32)>,
    c: &mut Conn,
    ev: Event,
) {
    match ev {
        Event::ChildUp(sa) => {
            tracing::info!(connection = %sa.conn, spi_in = format_args!("{:08x}", sa.spi_in), spi_out = format_args!("{:08x}", sa.spi_out), rekey_of = ?sa.replaces.map(|s| format!("{s:08x}")), outbound = sa.outbound, encap = ?sa.encap, "ike: child SA up");
            match sink.child_up(&sa) {
                Ok(()) => {
                    c.installed.insert(sa.spi_out, sa.spi_in);
                }
                Err(e) => {
                    tracing::error!(connection = %sa.conn, "ike: child SA not installed: {e}");
                    *c.shell.entry("child_install_failed").or_default() += 1;
                }
            }
        }
        Event::ChildOutbound {
            conn,
            spi_in,
            spi_out,
        } => {
            tracing::debug!(connection = %conn, spi_out = format_args!("{spi_out:08x}"), "ike: sending on the new child SA");
            if let Err(e) = sink.child_outbound(&conn, spi_in, spi_out) {
                tracing::error!(connection = %conn, "ike: outbound switch failed: {e}");
                *c.shell.entry("child_install_failed").or_default() += 1;
            }
        }
        Event::ChildDown {
            conn,
            spi_in,
            spi_out,
        } => {
            tracing::info!(connection = %conn, spi_in = format_args!("{spi_in:08x}"), spi_out = format_args!("{spi_out:08x}"), "ike: child SA down");
            sink.retire_outbound(&conn, spi_out);
            retiring.push_back((Instant::now() + INBOUND_GRACE, conn, spi_in, spi_out));
            c.installed.remove(&spi_out);
        }
        Event::IkeUp { conn, remote } => {
            tracing::info!(connection = %conn, peer = %remote, "ike: IKE SA up");
            c.failures = 0;
        }
        Event::IkeDown { conn, reason } => {
            tracing::info!(connection = %conn, %reason, "ike: IKE SA down");
            sink.ike_down(&conn);
            c.installed.clear();
            if reason != "shutdown" {
                c.failures += 1;
            }
            *c.shell.entry("ike_down").or_default() += 1;
        }
        _ => {}
    }
}

/// Reads datagrams from `sock` into `tx` until the socket task is aborted.
async fn read_loop(sock: Arc<UdpSocket>, tx: mpsc::Sender<Datagram>) {
    let Ok(local) = sock.local_addr() else {
        return;
    };
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        match sock.recv_from(&mut buf).await {
            Ok((n, remote)) => {
                let data = buf.get(..n).unwrap_or_default().to_vec();
                // A full channel drops the datagram, as a full socket buffer would: IKE
                // retransmits.
                let _ = tx.try_send(Datagram {
                    local,
                    remote,
                    data,
                });
            }
            Err(e) => {
                tracing::debug!(%local, "ike: receive: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
