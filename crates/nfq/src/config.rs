//! A queue's settings ([`QueueConfig`], [`HoldConfig`]), the checks they pass before the
//! kernel sees them, and the buffer sizes they imply.

use crate::NfqError;
use crate::affinity::format_cpu_list;
use crate::netlink::{QueueParams, VERDICT_HDR_MAX};
use crate::priority::NICE_RANGE;
use relay_core::{CtMarkBits, Verdict};

/// How a queue is set up in the kernel and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The queue number.
    pub num: u16,
    /// Bytes of each packet copied to us (0xffff = whole packets, also GSO ones).
    pub copy_range: u32,
    /// Packets the kernel holds for us before the queue counts as full.
    pub max_len: u32,
    /// When the queue is full, accept packets (true) or drop them (false).
    pub fail_open: bool,
    /// Take GSO super-packets unsegmented (only if no service rewrites packets).
    pub gso: bool,
    /// Socket receive buffer in bytes (at least copy range plus netlink overhead).
    pub rcvbuf: usize,
    /// Datagrams received per system call (1 = one recv and one verdict per packet).
    pub batch: usize,
    /// Answer a batch of identical plain verdicts with one NFQNL_MSG_VERDICT_BATCH.
    pub batch_verdicts: bool,
    /// Ask the kernel for each packet's conntrack state (NFQA_CFG_F_CONNTRACK, set when a
    /// service [needs it](relay_core::ServiceFactory::needs_conntrack)). A kernel without
    /// CONFIG_NETFILTER_NETLINK_GLUE_CT refuses the flag: the queue then runs without it
    /// (see [`Queue::kernel_conntrack`](crate::Queue::kernel_conntrack)) and only `ct_mark_bits` can tell the state.
    pub conntrack: bool,
    /// Decode each packet's conntrack state from these nfmark bits, set by iptables rules in
    /// front of the NFQUEUE rule, and give the packet its mark back without them. The state
    /// the kernel sends with the packet (NFQA_CT_INFO), when it does, wins over the bits.
    pub ct_mark_bits: Option<CtMarkBits>,
    /// Limits on packets held for a later verdict.
    pub hold: HoldConfig,
    /// The CPU the queue's thread is pinned to (`sched_setaffinity`), or `None` to leave
    /// it where the scheduler likes (the affinity relayd was started with). Applied at
    /// start and on every update; must be one of [`crate::available_cpus`].
    pub cpu: Option<usize>,
    /// The queue thread's nice value (`setpriority`, -20 to 19: lower runs more), or
    /// `None` to leave the one it inherited from the thread that started it. On a core
    /// shared with the kernel's receive work, a negative value keeps the queue thread
    /// served under overload. Applied at start and on every update; lowering it needs
    /// CAP_SYS_NICE.
    pub nice: Option<i32>,
}

/// How many packets a queue may hold for a later verdict, and what happens beyond that.
///
/// The kernel counts held packets against the queue's `max_len` (they are queued, awaiting
/// a verdict), so `max_len` must leave room for a batch on top of `max_packets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldConfig {
    /// The most packets held at once (0: a hold is always an overflow). Set it to the sum
    /// of the queue's services' [`max_held`](relay_core::ServiceFactory::max_held).
    pub max_packets: u32,
    /// The most bytes held at once (packet lengths, copied or not).
    pub max_bytes: usize,
    /// The verdict given at once to a packet the store has no room for: `Accept` (it
    /// leaves undelayed) or `Drop` (as a full netem queue would). Counted in
    /// `hold_overflow`.
    pub overflow: Verdict,
}

impl Default for HoldConfig {
    /// No holding (services that never hold need none): 0 packets, 64 MiB, accept.
    fn default() -> HoldConfig {
        HoldConfig {
            max_packets: 0,
            max_bytes: 64 << 20,
            overflow: Verdict::Accept,
        }
    }
}

impl QueueConfig {
    /// Defaults for queue `num`: whole packets, 1024 queued, fail-open, no GSO, 8 MiB buffer,
    /// 64 packets per system call, batch verdicts on, no conntrack state, no holding, no
    /// CPU pin, the inherited nice value.
    pub fn new(num: u16) -> QueueConfig {
        QueueConfig {
            num,
            copy_range: 0xffff,
            max_len: 1024,
            fail_open: true,
            gso: false,
            rcvbuf: 8 << 20,
            batch: 64,
            batch_verdicts: true,
            conntrack: false,
            ct_mark_bits: None,
            hold: HoldConfig::default(),
            cpu: None,
            nice: None,
        }
    }

    pub(crate) fn params(&self) -> QueueParams {
        QueueParams {
            copy_range: self.copy_range,
            max_len: self.max_len,
            fail_open: self.fail_open,
            gso: self.gso,
            conntrack: self.conntrack,
        }
    }

    /// Netlink and attribute overhead per received packet, on top of the copy range.
    pub const OVERHEAD: usize = 512;

    /// Spare bytes after each packet so that a service can grow it in place.
    pub const TAILROOM: usize = 512;
}

/// Refuses a configuration the kernel or the worker cannot serve; `stage_mask` is the chain's
/// stage bits, which the conntrack mark bits must not overlap.
pub(crate) fn check_config(cfg: &QueueConfig, stage_mask: u32) -> Result<(), NfqError> {
    let invalid = |what: String| Err(NfqError::Invalid(format!("queue {}: {what}", cfg.num)));
    if let Some(bits) = cfg.ct_mark_bits {
        if let Err(e) = bits.validate() {
            return invalid(e);
        }
        if bits.mask() & stage_mask != 0 {
            return invalid(format!(
                "conntrack mark bits {:#x} overlap the stage bits {stage_mask:#x}",
                bits.mask()
            ));
        }
    }
    if cfg.hold.overflow == Verdict::Repeat {
        return invalid("the hold overflow verdict must be accept or drop".into());
    }
    let h = cfg.hold.max_packets as usize;
    if h > 0 && (cfg.max_len as usize) < h + cfg.batch.clamp(1, 1024) {
        return invalid(format!(
            "max_len {} leaves no room: the kernel counts the {h} packets a service may hold \
             against it; make it at least {}",
            cfg.max_len,
            h + cfg.batch.clamp(1, 1024)
        ));
    }
    if let Some(nice) = cfg.nice
        && !NICE_RANGE.contains(&nice)
    {
        return invalid(format!(
            "nice {nice} is outside {}..{}",
            NICE_RANGE.start(),
            NICE_RANGE.end()
        ));
    }
    if let Some(cpu) = cfg.cpu {
        let available = crate::available_cpus()
            .map_err(|e| NfqError::Affinity(cfg.num, format!("CPU {cpu}"), e))?;
        if !available.contains(&cpu) {
            return invalid(format!(
                "CPU {cpu} is not available to relayd (available: {})",
                format_cpu_list(&available)
            ));
        }
    }
    let min = cfg.copy_range as usize + QueueConfig::OVERHEAD;
    if cfg.rcvbuf < min {
        return Err(NfqError::Invalid(format!(
            "queue {}: rcvbuf {} is smaller than copy_range plus netlink overhead ({min})",
            cfg.num, cfg.rcvbuf
        )));
    }
    Ok(())
}

/// Receive slot size for a copy range: the packet, netlink overhead, room to grow.
pub(crate) fn slot_len(cfg: &QueueConfig) -> usize {
    cfg.copy_range as usize + QueueConfig::OVERHEAD + QueueConfig::TAILROOM
}

/// Send buffer wanted so that the verdicts of a whole batch fit in one sendmsg.
pub(crate) fn sndbuf_for(cfg: &QueueConfig) -> usize {
    (cfg.batch.clamp(1, 1024) * (slot_len(cfg) + VERDICT_HDR_MAX)).max(1 << 20)
}
