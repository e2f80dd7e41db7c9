//! What `relayd status` shows, the wire format of the status socket (one JSON document per
//! connection), its human rendering, and the daemon's side of the socket: a server whose
//! clients cannot starve or exhaust the daemon ([`serve`], [`ServerLimits`]).

use relay_core::ratelimit::RateLimit;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The daemon's state as the status socket reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// relayd's version.
    pub version: String,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// The configuration file in use.
    pub config: String,
    /// Reloads done since start (successful ones).
    pub reloads: u64,
    /// Reloads refused since start (a file with errors, or a reload that failed and
    /// kept the running configuration).
    #[serde(default)]
    pub reload_failures: u64,
    /// When the daemon started, in milliseconds since the Unix epoch (an integer, so
    /// that it crosses the socket's JSON exactly).
    #[serde(default)]
    pub start_time_ms: u64,
    /// Queues whose thread has ended or is stuck (see [`crate::daemon::Health`]): their
    /// traffic is no longer served.
    #[serde(default)]
    pub unhealthy_queues: Vec<u16>,
    /// One entry per queue number.
    pub queues: Vec<QueueStatus>,
    /// One entry per service instance, summed over the queues that run it.
    pub services: Vec<ServiceStatus>,
    /// The proxy listeners (`socks5`, `tproxy`), running ones and those still draining.
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
    /// The classes of the tc trees relayd installed for its services (per-VCAN QoS).
    #[serde(default)]
    pub qos: Vec<crate::qos::ClassStatus>,
    /// The XDP ports (`[[xdp]]` entries): interface, policy and the program's counters.
    /// Their queues are in `queues`, with hook `xdp`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xdp: Vec<XdpStatus>,
    /// The `[ike.NAME]` connections: IKE SA state, peer, age, rekeys, failures, child SAs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ike: Vec<crate::ike::IkeConnStatus>,
}

/// One XDP port: its interface and settings, and its program's counters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct XdpStatus {
    /// The ingress interface.
    pub interface: String,
    /// relayd's queue numbers of its rx queues.
    pub queues: Vec<u16>,
    /// Fail-open (true) or fail-closed, applied by the program while relayd is down.
    pub fail_open: bool,
    /// How the program is attached (`native` or `generic`).
    pub mode: String,
    /// The program's counters (`seen`, `redirected`, `no_socket`, `pass_unmatched`, ...),
    /// if they could be read.
    pub program: Option<BTreeMap<String, u64>>,
    /// With `offload` on (docs/xdp.md, "Flow offload"): the live entries of the program's
    /// map of offloaded flows now (`flows`, and the `packets` and `bytes` they passed),
    /// and the entries the program deleted (`expired`, `revoked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<BTreeMap<String, u64>>,
}

impl XdpStatus {
    /// The status of the port of `spec`, with its program's counters.
    pub fn new(
        spec: &crate::config::XdpSpec,
        program: Option<relay_xdp::program::ProgramStats>,
    ) -> XdpStatus {
        XdpStatus {
            interface: spec.port.interface.clone(),
            queues: spec.nums().collect(),
            fail_open: spec.port.fail_open,
            mode: spec.port.mode.name().to_string(),
            program: program.map(|p| {
                [
                    ("seen", p.seen),
                    ("redirected", p.redirected),
                    ("redirected_unresolved", p.redirected_unresolved),
                    ("no_socket", p.no_socket),
                    ("pass_unmatched", p.pass_unmatched),
                    ("pass_fib", p.pass_fib),
                    ("pass_ttl", p.pass_ttl),
                    ("pass_unparsed", p.pass_unparsed),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
            }),
            offload: None,
        }
    }
}

/// Counters of one proxy listener.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListenerStatus {
    /// The `[service.NAME]` (for the transparent listener a `tcpsplit` service implies,
    /// that service's name).
    pub name: String,
    /// `socks5` or `tproxy`.
    pub kind: String,
    /// The bound address.
    pub listen: String,
    /// Upstream transport: `tcp` or `mptcp`.
    pub upstream: String,
    /// `running`, or `draining` (replaced by a reload, finishing its connections).
    pub state: String,
    /// The proxy's counters (accepted, active, completed, bytes, failures, ...).
    pub stats: relay_proxy::StatsSnapshot,
}

/// Counters of one queue.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueStatus {
    /// Queue number.
    pub num: u16,
    /// Hook it is fed from.
    pub hook: String,
    /// Table of its rule.
    pub table: String,
    /// Its services, by instance name, in order: the queue's `services` in the
    /// configuration (`chain` in what relayd before 0.2 reports, still read).
    #[serde(alias = "chain")]
    pub services: Vec<String>,
    /// Fail-open (true) or fail-closed.
    pub fail_open: bool,
    /// GSO on.
    pub gso: bool,
    /// Bytes of each packet the kernel copies to relayd.
    pub copy_range: u32,
    /// Packets received.
    pub packets: u64,
    /// Accepted (modified or not).
    pub accepted: u64,
    /// Dropped.
    pub dropped: u64,
    /// Accepted with modified bytes.
    pub modified: u64,
    /// Repeated with a mark.
    pub repeated: u64,
    /// Could not be parsed (handled by the queue's policy).
    pub malformed: u64,
    /// Datapath errors.
    pub errors: u64,
    /// Receive buffer overruns (ENOBUFS).
    pub enobufs: u64,
    /// Receive system calls that returned packets.
    pub batches: u64,
    /// The kernel's view of the queue, if it has one.
    pub kernel: Option<KernelStatus>,
    /// The datapath's own counters beyond the common ones: for an XDP queue (hook `xdp`)
    /// `transmitted`, `tx_full`, `to_kernel`, `bad_frames` and the AF_XDP sockets'
    /// statistics (`rx_dropped`, `rx_ring_full`, `fill_ring_empty`, ...); empty for
    /// NFQUEUE.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub datapath: BTreeMap<String, u64>,
    /// Flow offload (docs/offload.md): absent while nothing was offloaded, failed or
    /// skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadStatus>,
}

/// A queue's flow offload counters ([`relay_core::OffloadCounters`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffloadStatus {
    /// Flows offloaded, by reason (`decided`, `stream_depth`, `encrypted`, `pass`,
    /// `bypass`); reasons never seen are left out.
    pub flows: BTreeMap<String, u64>,
    /// Offloads the datapath could not carry out (the flow stayed inline).
    pub failed: u64,
    /// Offloaded flows taken back (a reload's new generation, or expiry).
    pub revoked: u64,
    /// Packets of offloaded flows that skipped the queue.
    pub skipped_packets: u64,
    /// Their bytes.
    pub skipped_bytes: u64,
}

impl OffloadStatus {
    /// The counters of `c`, or `None` while all are zero.
    pub fn of(c: &relay_core::OffloadCounters) -> Option<OffloadStatus> {
        let o = OffloadStatus {
            flows: relay_core::OffloadReason::ALL
                .iter()
                .map(|r| (r.as_str().to_string(), c.flows[r.index()].get()))
                .filter(|(_, n)| *n > 0)
                .collect(),
            failed: c.failed.get(),
            revoked: c.revoked.get(),
            skipped_packets: c.skipped_packets.get(),
            skipped_bytes: c.skipped_bytes.get(),
        };
        (o != OffloadStatus::default()).then_some(o)
    }

    /// All flows offloaded, whatever the reason.
    pub fn total(&self) -> u64 {
        self.flows.values().sum()
    }
}

impl QueueStatus {
    /// The status of queue `num` serving `spec`, from its counters and the kernel's view.
    pub fn new(
        num: u16,
        spec: &crate::config::QueueSpec,
        gso: bool,
        c: &relay_core::QueueCounters,
        kernel: Option<KernelStatus>,
    ) -> QueueStatus {
        QueueStatus {
            gso,
            copy_range: spec.queue.copy_range,
            enobufs: c.enobufs.get(),
            kernel,
            ..QueueStatus::counted(
                num,
                spec.hook.to_string(),
                spec.table.to_string(),
                &spec.services,
                spec.queue.fail_open,
                c,
            )
        }
    }

    /// The status of XDP queue `num` of `spec` (hook `xdp`, table: its interface), from
    /// its counters; the caller adds the datapath's own.
    pub fn xdp(
        num: u16,
        spec: &crate::config::XdpSpec,
        c: &relay_core::QueueCounters,
    ) -> QueueStatus {
        QueueStatus::counted(
            num,
            "xdp".into(),
            spec.port.interface.clone(),
            &spec.services,
            spec.port.fail_open,
            c,
        )
    }

    /// What every datapath's queue shows: where it is, its chain and policy, and the
    /// counters all datapaths keep.
    fn counted(
        num: u16,
        hook: String,
        table: String,
        services: &[(String, std::sync::Arc<dyn relay_core::ServiceFactory>)],
        fail_open: bool,
        c: &relay_core::QueueCounters,
    ) -> QueueStatus {
        QueueStatus {
            num,
            hook,
            table,
            services: services.iter().map(|(n, _)| n.clone()).collect(),
            fail_open,
            gso: false,
            copy_range: 0,
            packets: c.packets.get(),
            accepted: c.accepted.get(),
            dropped: c.dropped.get(),
            modified: c.modified.get(),
            repeated: c.repeated.get(),
            malformed: c.malformed.get(),
            errors: c.errors.get(),
            enobufs: 0,
            batches: c.batches.get(),
            kernel: None,
            datapath: BTreeMap::new(),
            offload: OffloadStatus::of(&c.offload),
        }
    }
}

/// The kernel's counters for a queue (/proc/net/netfilter/nfnetlink_queue).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelStatus {
    /// Packets waiting for a verdict now.
    pub waiting: u32,
    /// Dropped because the queue was full.
    pub queue_dropped: u64,
    /// Dropped because they could not be delivered to relayd.
    pub user_dropped: u64,
}

/// Counters of one service instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServiceStatus {
    /// Instance name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// Queues running it.
    pub queues: Vec<u16>,
    /// Packets it saw.
    pub packets: u64,
    /// Its own counters.
    pub counters: BTreeMap<String, u64>,
    /// Which of `counters` are gauges (a current value, not a running total).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gauges: Vec<String>,
}

/// The largest reply [`query`] reads (a status of thousands of queues and services is a
/// few MiB).
const MAX_REPLY: u64 = 64 << 20;

/// Asks the daemon behind `socket` for its status. A reply `{"error": "..."}` (the
/// daemon is busy, say) is returned as an error with that message.
pub fn query(socket: &Path) -> std::io::Result<Status> {
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    // A daemon that refuses the connection may close it before reading the request:
    // its reply still says why, so read it whatever the write did.
    let sent = s.write_all(b"status\n");
    let mut body = Vec::new();
    let read = (&mut s).take(MAX_REPLY).read_to_end(&mut body);
    if body.is_empty() {
        sent?;
        read?;
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection without a reply",
        ));
    }
    let invalid = |e| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        // A reply cut short by an error: report the error, not the JSON.
        Err(e) => return Err(read.err().unwrap_or_else(|| invalid(e))),
    };
    if let Some(msg) = v.get("error").and_then(serde_json::Value::as_str) {
        return Err(std::io::Error::other(msg.to_string()));
    }
    serde_json::from_value(v).map_err(invalid)
}

/// Binds the status socket at `path` for [`serve`] (see [`crate::lock::claim_socket`]:
/// only a stale socket is replaced). Needs a tokio runtime.
pub fn bind(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    let l = crate::lock::claim_socket(path)?;
    l.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(l)?)
}

/// [`bind`], the socket owned by group `group` (`daemon.socket_group`) with mode 0660
/// when given, so that the group's members may query and command relayd; others may not.
pub fn bind_group(path: &Path, group: Option<u32>) -> anyhow::Result<tokio::net::UnixListener> {
    let l = crate::lock::claim_group_socket(path, group)?;
    l.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(l)?)
}

/// Removes the status socket at `path` on the way out, if a socket is still there: a
/// file that replaced it meanwhile is not relayd's to delete.
pub fn remove_socket(path: &Path) {
    crate::lock::remove_if_socket(path);
}

/// What the status server allows its clients, so that a local client can neither grow
/// the daemon's memory, hold its file descriptors, nor make it spin. The defaults are
/// what `relayd run` uses (documented in docs/cli.md, "The status socket").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// The longest request line, newline included; a longer one is answered with an
    /// error and the connection closed. Requests are one word (`status`).
    pub max_request: usize,
    /// Time a client has, from the connection being accepted, to send its request line.
    pub request_timeout: Duration,
    /// Time a client has to read the whole reply (a client that does not read is dropped).
    pub reply_timeout: Duration,
    /// Clients served at once; beyond, a connection is answered `busy` and closed at once.
    pub max_clients: usize,
    /// File descriptors kept free for the rest of relayd (a reload opens the
    /// configuration, iptables-restore pipes, netlink sockets): a connection accepted
    /// with fewer free than this below the soft RLIMIT_NOFILE is answered `busy` and
    /// closed at once.
    pub fd_reserve: u64,
    /// How long accepting pauses after an error such as EMFILE or ENFILE (the connection
    /// stays in the listen backlog), instead of retrying at once.
    pub accept_backoff: Duration,
    /// The shortest interval between two log lines about refused connections or failed
    /// accepts (the lines carry the counts in between).
    pub log_interval: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_request: 4096,
            request_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(5),
            max_clients: 64,
            fd_reserve: 32,
            accept_backoff: Duration::from_millis(100),
            log_interval: Duration::from_secs(10),
        }
    }
}

/// One client being served: decrements the count when its task ends, however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// True if `fd` is so close to the soft RLIMIT_NOFILE that fewer than `reserve`
/// descriptors are left: the kernel hands out the lowest free number, so every
/// descriptor below `fd` is in use.
fn short_of_fds(fd: std::os::fd::RawFd, reserve: u64) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return false;
    }
    let used = u64::try_from(fd).unwrap_or(0).saturating_add(1);
    lim.rlim_cur != libc::RLIM_INFINITY && used.saturating_add(reserve) > lim.rlim_cur
}

/// An error reply, as the socket's clients expect it: `{"error": "..."}`.
fn error_reply(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

/// Serves the status socket until the task is dropped: each connection sends one request
/// line (`status`, or nothing) and gets one JSON document, `status()` serialized (`null`
/// while the daemon is stopping). `status` runs on tokio's blocking pool, so a daemon
/// busy reloading does not hold up the runtime. Within `limits`: bounded request lines,
/// timeouts for the request and the reply, a cap on concurrent clients and a reserve of
/// file descriptors (a connection beyond either is answered `busy` and closed), and a
/// pause after a failed accept (EMFILE) instead of a busy loop.
pub async fn serve<F>(listener: tokio::net::UnixListener, limits: ServerLimits, status: F)
where
    F: Fn() -> Option<Status> + Send + Sync + 'static,
{
    use std::os::fd::AsRawFd;
    let status = Arc::new(status);
    let active = Arc::new(AtomicUsize::new(0));
    // Log lines about refused connections and failed accepts: at most one of each per
    // log_interval, with the count since the previous line and the total.
    let mut refused_log = RateLimit::every(limits.log_interval);
    let mut failed_log = RateLimit::every(limits.log_interval);
    let (mut refused_total, mut failed_total) = (0u64, 0u64);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // The client gave up before it was accepted: nothing wrong here.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR)) => {
                continue;
            }
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection stays in the backlog
                // and the listener stays readable; retrying at once would spin.
                failed_total += 1;
                if let Some(held) = failed_log.allow(Instant::now()) {
                    tracing::warn!(
                        errors = held + 1,
                        total = failed_total,
                        "status socket: accept failed: {e}; pausing {} ms",
                        limits.accept_backoff.as_millis()
                    );
                }
                tokio::time::sleep(limits.accept_backoff).await;
                continue;
            }
        };
        let busy = active.load(Ordering::Relaxed) >= limits.max_clients;
        if busy || short_of_fds(stream.as_raw_fd(), limits.fd_reserve) {
            // The reply fits in an empty socket buffer; never wait for this client.
            let why = if busy {
                format!("busy: {} clients are being served", limits.max_clients)
            } else {
                "busy: relayd is short of file descriptors".to_string()
            };
            let _ = stream.try_write(error_reply(&why).as_bytes());
            drop(stream);
            refused_total += 1;
            if let Some(held) = refused_log.allow(Instant::now()) {
                tracing::warn!(
                    refused = held + 1,
                    total = refused_total,
                    "status socket: connections refused ({why})"
                );
            }
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let slot = Slot(active.clone());
        let status = status.clone();
        tokio::spawn(async move {
            let _slot = slot;
            serve_one(stream, limits, status).await;
        });
    }
}

/// What a client asked.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// The line, without its newline (at end of file, what came before it).
    Line(Vec<u8>),
    /// No newline within the limit.
    TooLong,
}

/// Reads one request line of at most `max` bytes (newline included) from `r`.
async fn read_request<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Request> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    while len < buf.len() {
        let Some(free) = buf.get_mut(len..) else {
            break;
        };
        let n = r.read(free).await?;
        if n == 0 {
            buf.truncate(len);
            return Ok(Request::Line(buf));
        }
        let new = buf.get(len..len + n).unwrap_or_default();
        if let Some(i) = new.iter().position(|&b| b == b'\n') {
            buf.truncate(len + i);
            return Ok(Request::Line(buf));
        }
        len += n;
    }
    Ok(Request::TooLong)
}

/// Serves one connection: its request within `request_timeout`, its reply within
/// `reply_timeout`; the connection is closed on return either way.
async fn serve_one<F>(mut stream: tokio::net::UnixStream, limits: ServerLimits, status: Arc<F>)
where
    F: Fn() -> Option<Status> + Send + Sync + 'static,
{
    let req = tokio::time::timeout(
        limits.request_timeout,
        read_request(&mut stream, limits.max_request),
    )
    .await;
    let body = match req {
        Err(_) => {
            tracing::debug!(
                "status socket: no request within {:?}; closed",
                limits.request_timeout
            );
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!("status socket: reading the request: {e}");
            return;
        }
        Ok(Ok(Request::TooLong)) => {
            tracing::debug!(
                "status socket: request longer than {} bytes; closed",
                limits.max_request
            );
            error_reply(&format!("request longer than {} bytes", limits.max_request))
        }
        Ok(Ok(Request::Line(line))) => match String::from_utf8_lossy(&line).trim() {
            "status" | "" => {
                let s = tokio::task::spawn_blocking(move || status())
                    .await
                    .ok()
                    .flatten();
                serde_json::to_string(&s).unwrap_or_default()
            }
            other => error_reply(&format!("unknown request `{other}`")),
        },
    };
    let reply = async {
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(limits.reply_timeout, reply).await {
        Ok(_) => {}
        Err(_) => tracing::debug!(
            "status socket: reply not read within {:?}; closed",
            limits.reply_timeout
        ),
    }
}

impl Status {
    /// The human table `relayd status` prints.
    pub fn render(&self) -> String {
        let mut o = format!(
            "relayd {}  up {:.0}s  config {}  reloads {}\n\n",
            self.version, self.uptime_s, self.config, self.reloads
        );
        o.push_str(&format!(
            "{:>5} {:<18} {:<6} {:>12} {:>12} {:>10} {:>10} {:>9} {:>7} {:>7} {:>8} {:>8}  services\n",
            "queue",
            "hook",
            "policy",
            "packets",
            "accepted",
            "dropped",
            "modified",
            "malformed",
            "errors",
            "enobufs",
            "k.drop",
            "k.wait"
        ));
        for q in &self.queues {
            let (kd, kw) = q
                .kernel
                .as_ref()
                .map_or(("-".to_string(), "-".to_string()), |k| {
                    (
                        (k.queue_dropped + k.user_dropped).to_string(),
                        k.waiting.to_string(),
                    )
                });
            o.push_str(&format!(
                "{:>5} {:<18} {:<6} {:>12} {:>12} {:>10} {:>10} {:>9} {:>7} {:>7} {:>8} {:>8}  {}\n",
                q.num,
                format!("{}/{}", q.table, q.hook),
                if q.fail_open { "open" } else { "closed" },
                q.packets,
                q.accepted,
                q.dropped,
                q.modified,
                q.malformed,
                q.errors,
                q.enobufs,
                kd,
                kw,
                q.services.join(" -> ")
            ));
        }
        let offloads: Vec<_> = self
            .queues
            .iter()
            .filter_map(|q| q.offload.as_ref().map(|o| (q.num, o)))
            .collect();
        if !offloads.is_empty() {
            o.push_str(&format!(
                "\n{:>5} {:>10} {:>8} {:>8} {:>14} {:>16}  by reason\n",
                "queue", "offloaded", "failed", "revoked", "skipped", "skipped_bytes"
            ));
            for (num, f) in offloads {
                let reasons: Vec<String> =
                    f.flows.iter().map(|(k, v)| format!("{k}={v}")).collect();
                o.push_str(&format!(
                    "{:>5} {:>10} {:>8} {:>8} {:>14} {:>16}  {}\n",
                    num,
                    f.total(),
                    f.failed,
                    f.revoked,
                    f.skipped_packets,
                    f.skipped_bytes,
                    reasons.join(" ")
                ));
            }
        }
        o.push_str(&format!(
            "\n{:<16} {:<10} {:<10} {:>12}  counters\n",
            "service", "kind", "queues", "packets"
        ));
        for s in &self.services {
            let qs: Vec<String> = s.queues.iter().map(u16::to_string).collect();
            let cs: Vec<String> = s.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            o.push_str(&format!(
                "{:<16} {:<10} {:<10} {:>12}  {}\n",
                s.name,
                s.kind,
                qs.join(","),
                s.packets,
                cs.join(" ")
            ));
        }
        if !self.listeners.is_empty() {
            o.push_str(&format!(
                "\n{:<16} {:<7} {:<22} {:<6} {:<9} {:>9} {:>7} {:>9} {:>12} {:>12} {:>8} {:>7} {:>7}\n",
                "listener",
                "kind",
                "listen",
                "up",
                "state",
                "accepted",
                "active",
                "completed",
                "bytes_up",
                "bytes_down",
                "up_fail",
                "resets",
                "refused"
            ));
            for l in &self.listeners {
                let s = &l.stats;
                o.push_str(&format!(
                    "{:<16} {:<7} {:<22} {:<6} {:<9} {:>9} {:>7} {:>9} {:>12} {:>12} {:>8} {:>7} {:>7}\n",
                    l.name,
                    l.kind,
                    l.listen,
                    l.upstream,
                    l.state,
                    s.accepted,
                    s.active,
                    s.completed,
                    s.bytes_up,
                    s.bytes_down,
                    s.upstream_failed,
                    s.resets,
                    s.refused_cap
                ));
            }
        }
        if !self.ike.is_empty() {
            o.push_str(&crate::ike::render(&self.ike));
        }
        if !self.qos.is_empty() {
            o.push_str(&format!(
                "\n{:<12} {:<10} {:<16} {:>14} {:>12} {:>10}\n",
                "interface", "class", "name", "bytes", "packets", "drops"
            ));
            for c in &self.qos {
                o.push_str(&format!(
                    "{:<12} {:<10} {:<16} {:>14} {:>12} {:>10}\n",
                    c.interface, c.class, c.name, c.bytes, c.packets, c.drops
                ));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests;
