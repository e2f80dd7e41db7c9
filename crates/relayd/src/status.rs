//! What `relayd status` shows, the wire format of the status socket (one JSON document per
//! connection), and its human rendering.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

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
    /// Its chain, by instance name.
    pub chain: Vec<String>,
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
            num,
            hook: spec.hook.to_string(),
            table: spec.table.to_string(),
            chain: spec.services.iter().map(|(n, _)| n.clone()).collect(),
            fail_open: spec.fail_open,
            gso,
            copy_range: spec.copy_range,
            packets: c.packets.get(),
            accepted: c.accepted.get(),
            dropped: c.dropped.get(),
            modified: c.modified.get(),
            repeated: c.repeated.get(),
            malformed: c.malformed.get(),
            errors: c.errors.get(),
            enobufs: c.enobufs.get(),
            batches: c.batches.get(),
            kernel,
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
}

/// Asks the daemon behind `socket` for its status.
pub fn query(socket: &Path) -> std::io::Result<Status> {
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    s.write_all(b"status\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    serde_json::from_str(&body).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

impl Status {
    /// The human table `relayd status` prints.
    pub fn render(&self) -> String {
        let mut o = format!(
            "relayd {}  up {:.0}s  config {}  reloads {}\n\n",
            self.version, self.uptime_s, self.config, self.reloads
        );
        o.push_str(&format!(
            "{:>5} {:<18} {:<6} {:>12} {:>12} {:>10} {:>10} {:>9} {:>7} {:>7} {:>8} {:>8}  chain\n",
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
                q.chain.join(" -> ")
            ));
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
