//! relayd's view of the egress queues, for services that adapt to congestion (adaptive
//! compression reads the expected waiting time W = backlog / rate of a packet's egress
//! interface).
//!
//! A [`QueueMonitor`] thread dumps the root qdiscs over rtnetlink every poll interval
//! (relayd uses 1 ms) and publishes each interface's backlog, drops and rate in atomics;
//! services read them per packet with no system call and no lock. The monitor is a
//! provider, not a global: relayd starts it and hands it to the services that ask for it
//! (`Manifest::queue_monitor`, found in their `Resources`); replay hands a fixed one.
//!
//! [`frame`] is the netlink framing (message and attribute iteration and building) that
//! this crate's rtnetlink dump and relay-nfq's NFQUEUE layer share; [`conntrack`] is the
//! ctnetlink mark update relay-nfq's flow offload sends; [`sock`] opens the sockets of
//! all three.

pub mod conntrack;
pub mod frame;
mod netns;
mod rtnl;
pub mod sock;

pub use netns::{ifindex, in_netns};
pub use rtnl::{ClassStats, QdiscStats, RtnlSocket};
#[doc(hidden)]
pub use rtnl::{fuzz_parse_class_dump, fuzz_parse_dump};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Interfaces are found by `ifindex % SLOTS`; two interfaces that collide take turns
/// (the loser reads as unknown), so the table is much larger than most boxes need.
const SLOTS: usize = 4096;

#[derive(Default)]
struct Slot {
    ifindex: AtomicU32,
    backlog_bytes: AtomicU32,
    qlen: AtomicU32,
    drops: AtomicU32,
    rate_bytes: AtomicU64,
    /// Nanoseconds since the monitor started, at the last update.
    updated_ns: AtomicU64,
}

/// One interface's egress queue as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkQueue {
    /// Bytes waiting in the root qdisc.
    pub backlog_bytes: u32,
    /// Packets waiting.
    pub qlen: u32,
    /// Packets dropped by the qdisc since it was created.
    pub drops: u32,
    /// The qdisc's configured rate in bytes/s (tbf), or 0 if it has none.
    pub rate_bytes: u64,
    /// How old this view is.
    pub age: Duration,
}

/// Keeps a fresh view of every interface's root qdisc.
pub struct QueueMonitor {
    /// Set for a monitor that reports fixed values (offline replay), not the kernel's.
    fixed: Option<(u32, u64)>,
    slots: Box<[Slot]>,
    start: Instant,
    interval: Duration,
    polls: AtomicU64,
    stop: AtomicBool,
}

impl std::fmt::Debug for QueueMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMonitor")
            .field("interval", &self.interval)
            .finish()
    }
}

impl QueueMonitor {
    /// A monitor without a thread or socket that reports the same egress queue for every
    /// interface: `backlog_bytes` waiting, `rate_bytes` per second (0: none). For replay.
    pub fn fixed(backlog_bytes: u32, rate_bytes: u64) -> Arc<QueueMonitor> {
        Arc::new(QueueMonitor {
            fixed: Some((backlog_bytes, rate_bytes)),
            slots: Box::new([]),
            start: Instant::now(),
            interval: Duration::ZERO,
            polls: AtomicU64::new(0),
            stop: AtomicBool::new(true),
        })
    }

    /// Starts a monitor polling every `interval` on its own thread, which ends when the
    /// last handle is dropped (or at [`QueueMonitor::stop`]). relayd starts one for the
    /// whole daemon when a service's manifest asks for it, and hands it to the services
    /// in their resources; nothing else starts one.
    pub fn start(interval: Duration) -> std::io::Result<Arc<QueueMonitor>> {
        let mut sock = RtnlSocket::open()?;
        let m = Arc::new(QueueMonitor {
            fixed: None,
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            start: Instant::now(),
            interval,
            polls: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        m.poll(&mut sock)?;
        let w = Arc::downgrade(&m);
        std::thread::Builder::new()
            .name("relayd-qmon".into())
            .spawn(move || {
                let mut errors = 0u32;
                while let Some(m) = w.upgrade() {
                    if m.stop.load(Relaxed) {
                        break;
                    }
                    if let Err(e) = m.poll(&mut sock) {
                        errors += 1;
                        if errors.is_power_of_two() {
                            tracing::warn!(
                                "queue monitor: qdisc dump failed ({errors} times): {e}"
                            );
                        }
                    }
                    let interval = m.interval;
                    drop(m);
                    std::thread::sleep(interval);
                }
            })?;
        Ok(m)
    }

    fn poll(&self, sock: &mut RtnlSocket) -> std::io::Result<()> {
        let now = self.start.elapsed().as_nanos() as u64;
        sock.dump_root_qdiscs(|q| {
            let s = &self.slots[q.ifindex as usize % SLOTS];
            s.ifindex.store(q.ifindex, Relaxed);
            s.backlog_bytes.store(q.backlog_bytes, Relaxed);
            s.qlen.store(q.qlen, Relaxed);
            s.drops.store(q.drops, Relaxed);
            s.rate_bytes.store(q.rate_bytes, Relaxed);
            s.updated_ns.store(now, Relaxed);
        })?;
        self.polls.fetch_add(1, Relaxed);
        Ok(())
    }

    /// The egress queue of interface `ifindex`, if the monitor has seen it. No system call.
    #[inline]
    pub fn get(&self, ifindex: u32) -> Option<LinkQueue> {
        if let Some((backlog_bytes, rate_bytes)) = self.fixed {
            return Some(LinkQueue {
                backlog_bytes,
                qlen: 0,
                drops: 0,
                rate_bytes,
                age: Duration::ZERO,
            });
        }
        let s = &self.slots[ifindex as usize % SLOTS];
        if ifindex == 0 || s.ifindex.load(Relaxed) != ifindex {
            return None;
        }
        let updated = s.updated_ns.load(Relaxed);
        let now = self.start.elapsed().as_nanos() as u64;
        Some(LinkQueue {
            backlog_bytes: s.backlog_bytes.load(Relaxed),
            qlen: s.qlen.load(Relaxed),
            drops: s.drops.load(Relaxed),
            rate_bytes: s.rate_bytes.load(Relaxed),
            age: Duration::from_nanos(now.saturating_sub(updated)),
        })
    }

    /// How many dumps the monitor has done.
    pub fn polls(&self) -> u64 {
        self.polls.load(Relaxed)
    }

    /// Stops the polling thread (for a monitor made with [`QueueMonitor::start`]).
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
    }
}
