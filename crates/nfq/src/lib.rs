//! relayd's NFQUEUE datapath: binds queues over a thin netlink layer and serves each with
//! a dedicated thread that receives packets several per system call, runs the queue's
//! chain in place, and answers a whole batch of verdicts in one system call.
//!
//! Services may hold packets for a later verdict (`Action::Hold`, for the `delay` service)
//! and read each packet's conntrack state, sent by the kernel or decoded from mark bits.
//!
//! Packets the services emit of their own ([`relay_core::Context::emit`]) leave after the
//! batch's verdicts through an [`Emitter`] (from `relay-dataio`, shared with AF_XDP): one `sendmmsg` per socket (IPv4, IPv6, ICMPv6),
//! so at most three system calls per batch, one more for each packet the kernel refuses.
//!
//! Each queue thread is a pure engine (decode a batch, run the chain, plan the verdicts;
//! unit-tested in memory) inside a thin shell that makes the system calls; the netlink
//! framing is [`relay_netlink::frame`], shared with the rtnetlink code.
//!
//! Failure behaviour: ENOBUFS (our receive buffer overran) is counted and survived;
//! a malformed netlink message or packet is counted and never panics the thread.

mod config;
mod engine;
mod netlink;
mod offload;
mod priority;
pub mod procfs;
mod queue;
mod socket;
mod worker;

pub use config::{HoldConfig, OffloadMark, QueueConfig, QueueConfigError, QueueConfigErrors};
#[doc(hidden)]
pub use netlink::fuzz_decode_datagram;
pub use priority::NICE_RANGE;
pub use procfs::KernelQueueStats;
pub use queue::{IDLE_WAKE, Queue};
// Shared with the AF_XDP datapath; re-exported where callers have always found them.
pub use relay_dataio::{Emitter, Flushed, MAX_CPU, available_cpus, format_cpu_list, pin_thread};

/// Why a queue could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NfqError {
    /// A socket operation failed.
    #[error("{0}: {1}")]
    Socket(&'static str, #[source] std::io::Error),
    /// Another program (another relayd?) has the queue bound.
    #[error("queue {0} is already bound by another program (is another relayd running?)")]
    QueueBusy(u16),
    /// Binding needs CAP_NET_ADMIN.
    #[error("queue {0}: permission denied (relayd needs CAP_NET_ADMIN; run as root)")]
    Permission(u16),
    /// The kernel refused a configuration step.
    #[error("queue {0}: {1} refused by the kernel: {2}")]
    Config(u16, &'static str, #[source] std::io::Error),
    /// The queue's configuration is wrong ([`QueueConfig::check`]), or its conntrack mark
    /// bits overlap the chain's stage bits.
    #[error("{0}")]
    Invalid(#[from] QueueConfigErrors),
    /// The kernel refused to pin the queue's thread (`pthread_setaffinity_np`).
    #[error("queue {0}: pinning its thread to {1} failed: {2}")]
    Affinity(u16, String, #[source] std::io::Error),
    /// The kernel refused the queue thread's nice value (`setpriority`), or relayd could
    /// not read the one it inherited (`getpriority`).
    #[error("queue {num}: {what} failed: {source}{hint}")]
    Priority {
        /// The queue.
        num: u16,
        /// What was attempted, with the value ("setting its thread's nice value to -5").
        what: String,
        /// What the operator can do about it (empty if nothing is known).
        hint: &'static str,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
}
