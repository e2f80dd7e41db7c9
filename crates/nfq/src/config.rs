//! A queue's settings ([`QueueConfig`], [`HoldConfig`]), the checks they pass before the
//! kernel sees them, and the buffer sizes they imply.

use crate::NfqError;
use crate::netlink::{QueueParams, VERDICT_HDR_MAX};
use crate::priority::NICE_RANGE;
use relay_core::{CtMarkBits, Verdict};
use relay_dataio::format_cpu_list;
use std::ops::RangeInclusive;

/// How a queue is set up in the kernel and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The queue number.
    pub num: u16,
    /// Bytes of each packet copied to us, 64 to 65535 (0xffff = whole packets, also GSO
    /// ones).
    pub copy_range: u32,
    /// Packets the kernel holds for us before the queue counts as full (at least 1, and
    /// room for `hold.max_packets` plus a batch).
    pub max_len: u32,
    /// When the queue is full, accept packets (true) or drop them (false).
    pub fail_open: bool,
    /// Take GSO super-packets unsegmented (only if no service rewrites packets).
    pub gso: bool,
    /// Socket receive buffer in bytes (at least copy range plus netlink overhead).
    pub rcvbuf: usize,
    /// Datagrams received per system call, 1 to 1024 (1 = one recv and one verdict per
    /// packet).
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
    /// Carry out the chain's flow offloads with these conntrack mark bits
    /// (docs/offload.md); `None`: the queue does not offload.
    pub offload: Option<OffloadMark>,
}

/// The conntrack mark bits of a queue's flow offload: the queue thread writes them into
/// an offloaded flow's conntrack entry, and relayd's skip rules in front of the queue rule
/// match them (docs/offload.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadMark {
    /// Set when the flow's original direction skips the queue.
    pub orig: u32,
    /// Set when its reply direction skips the queue.
    pub reply: u32,
    /// The bits of the generation field.
    pub gen_mask: u32,
    /// This queue's generation (inside `gen_mask`, never 0): a reload that changes the
    /// chain gives a new one, and the skip rules stop matching the old.
    pub generation: u32,
    /// Bits of the verdict's mark stored with the offload, which the skip rules restore
    /// onto the flow's later packets (the marks the chain's services set).
    pub restore: u32,
    /// NAT may have changed a packet's tuple before the queue's hook (every hook but
    /// PREROUTING and mangle OUTPUT): an update that finds no entry by the packet's
    /// tuple is sent once more with it turned round, for a packet whose destination NAT
    /// changed only ([`OffloadMark::nat_mark`]). Where false, a packet of a connection
    /// NAT translates is not offloaded at all.
    pub turned: bool,
}

impl OffloadMark {
    /// Every bit an offload writes in the conntrack mark.
    pub fn mask(&self) -> u32 {
        self.orig | self.reply | self.gen_mask | self.restore
    }

    /// The packet mark bit the rules in front of the queue set on a packet NAT matters
    /// to: where NAT may have run before the hook ([`OffloadMark::turned`]), one whose
    /// destination it changed; elsewhere, any packet of a connection NAT translates
    /// (its two directions' tuples are then not each other turned round, as the
    /// chain sees them). The original direction's bit, in the packet mark (relayd owns
    /// these bits there too).
    pub fn nat_mark(&self) -> u32 {
        self.orig
    }
}

pub use relay_pipeline::HoldConfig;

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
            offload: None,
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

/// One thing wrong with a [`QueueConfig`], found by [`QueueConfig::check`]: the field and
/// the values a message about it needs. The text (`Display`) is relay_nfq's; a caller with
/// its own words for the field (relayd's configuration file) matches on the variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueConfigError {
    /// `copy_range` is outside [`QueueConfig::COPY_RANGE`].
    #[error(
        "copy_range {copy_range} is outside {}..{}",
        QueueConfig::COPY_RANGE.start(),
        QueueConfig::COPY_RANGE.end()
    )]
    CopyRange {
        /// The configured copy range.
        copy_range: u32,
    },
    /// `max_len` is 0: the kernel would queue nothing.
    #[error("max_len must be at least 1")]
    MaxLenZero,
    /// `rcvbuf` cannot take one packet of `copy_range` bytes with its netlink overhead.
    #[error("rcvbuf {rcvbuf} is smaller than copy_range plus netlink overhead ({min})")]
    Rcvbuf {
        /// The configured receive buffer.
        rcvbuf: usize,
        /// The least it may be: `copy_range` + [`QueueConfig::OVERHEAD`].
        min: usize,
    },
    /// `batch` is outside [`QueueConfig::BATCH_RANGE`].
    #[error(
        "batch {batch} is outside {}..{}",
        QueueConfig::BATCH_RANGE.start(),
        QueueConfig::BATCH_RANGE.end()
    )]
    Batch {
        /// The configured batch.
        batch: usize,
    },
    /// `max_len` leaves no room for a batch on top of the packets services may hold: the
    /// kernel counts held packets against it.
    #[error(
        "max_len {max_len} leaves no room: the kernel counts the {held} packets a service may \
         hold against it; make it at least {min}"
    )]
    MaxLenHeld {
        /// The configured queue length.
        max_len: u32,
        /// `hold.max_packets`.
        held: u32,
        /// The batch.
        batch: usize,
        /// The least `max_len` may be: `held + batch`.
        min: u64,
    },
    /// `ct_mark_bits` are not four distinct bits.
    #[error("{reason}")]
    CtMarkBits {
        /// What is wrong with them ([`CtMarkBits::validate`]).
        reason: String,
    },
    /// `ct_mark_bits` overlap the stage bits of the chain the queue runs (found when a
    /// queue starts or takes a new chain, not by [`QueueConfig::check`]).
    #[error("conntrack mark bits {bits:#x} overlap the stage bits {stages:#x}")]
    CtMarkBitsOverlap {
        /// The conntrack mark bits' mask.
        bits: u32,
        /// The chain's stage bits.
        stages: u32,
    },
    /// `hold.overflow` is neither accept nor drop.
    #[error("the hold overflow verdict must be accept or drop")]
    HoldOverflow {
        /// The configured verdict.
        overflow: Verdict,
    },
    /// `cpu` is not one relayd may run on ([`crate::available_cpus`]).
    #[error(
        "CPU {cpu} is not available to relayd (available: {})",
        format_cpu_list(available)
    )]
    Cpu {
        /// The configured CPU.
        cpu: usize,
        /// The CPUs relayd may run on.
        available: Vec<usize>,
    },
    /// The CPUs relayd may run on could not be read, so `cpu` could not be checked.
    #[error("cannot read the CPUs relayd may use: {source}")]
    CpusUnreadable {
        /// The configured CPU.
        cpu: usize,
        /// Why (`sched_getaffinity`).
        #[source]
        source: std::io::Error,
    },
    /// `nice` is outside [`NICE_RANGE`] (the kernel would clamp it silently).
    #[error("nice {nice} is outside {}..{}", NICE_RANGE.start(), NICE_RANGE.end())]
    Nice {
        /// The configured nice value.
        nice: i32,
    },
}

/// Everything wrong with one queue's [`QueueConfig`] (at least one error), in the order of
/// its fields. Shown as `queue N: first; second`.
#[derive(Debug)]
pub struct QueueConfigErrors {
    /// The queue.
    pub num: u16,
    /// What is wrong, never empty.
    pub errors: Vec<QueueConfigError>,
}

impl std::fmt::Display for QueueConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "queue {}: ", self.num)?;
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for QueueConfigErrors {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // One error: its cause is the whole's (several have no single one).
        match self.errors.as_slice() {
            [one] => std::error::Error::source(one),
            _ => None,
        }
    }
}

impl QueueConfigErrors {
    /// The errors of queue `num`, or `Ok` if there are none.
    fn from_vec(num: u16, errors: Vec<QueueConfigError>) -> Result<(), QueueConfigErrors> {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(QueueConfigErrors { num, errors })
        }
    }
}

impl QueueConfig {
    /// The copy ranges a queue takes: below 64 bytes not even the headers relayd reads
    /// arrive whole, and the kernel copies at most 65535 (`NFQNL_MAX_COPY_RANGE`).
    pub const COPY_RANGE: RangeInclusive<u32> = 64..=0xffff;

    /// The datagrams per receive call a queue takes: each is a receive slot of
    /// `copy_range` plus overhead, allocated up front.
    pub const BATCH_RANGE: RangeInclusive<usize> = 1..=1024;

    /// Refuses a configuration the kernel or the queue thread cannot serve, with every
    /// field that is wrong: [`QueueConfig::COPY_RANGE`], `max_len` at least 1 and room for
    /// `hold.max_packets` plus a batch, `rcvbuf` at least `copy_range` plus
    /// [`QueueConfig::OVERHEAD`], [`QueueConfig::BATCH_RANGE`], valid `ct_mark_bits`, a
    /// hold overflow verdict of accept or drop, a `cpu` among [`crate::available_cpus`]
    /// (one `sched_getaffinity` when `cpu` is set), `nice` within [`NICE_RANGE`].
    ///
    /// A limit computed from a field that is itself wrong (`rcvbuf` from `copy_range`, room
    /// for held packets from `batch`) is not checked: the wrong field is reported instead.
    /// [`Queue::start`](crate::Queue::start) and [`Queue::update`](crate::Queue::update)
    /// run the same check (and that the conntrack mark bits leave the chain's stage bits
    /// alone); a caller that checks first can point at its own source of each field.
    pub fn check(&self) -> Result<(), QueueConfigErrors> {
        QueueConfigErrors::from_vec(self.num, self.problems(crate::available_cpus))
    }

    /// What [`QueueConfig::check`] finds, the CPUs relayd may run on read by `available`
    /// (only if `cpu` is set).
    fn problems(
        &self,
        available: impl FnOnce() -> std::io::Result<Vec<usize>>,
    ) -> Vec<QueueConfigError> {
        let mut errors = Vec::new();
        let copy_range_ok = QueueConfig::COPY_RANGE.contains(&self.copy_range);
        if !copy_range_ok {
            errors.push(QueueConfigError::CopyRange {
                copy_range: self.copy_range,
            });
        }
        if self.max_len == 0 {
            errors.push(QueueConfigError::MaxLenZero);
        }
        let min = self.copy_range as usize + QueueConfig::OVERHEAD;
        if copy_range_ok && self.rcvbuf < min {
            errors.push(QueueConfigError::Rcvbuf {
                rcvbuf: self.rcvbuf,
                min,
            });
        }
        let batch_ok = QueueConfig::BATCH_RANGE.contains(&self.batch);
        if !batch_ok {
            errors.push(QueueConfigError::Batch { batch: self.batch });
        }
        let held = self.hold.max_packets;
        // batch <= 1024 here, so the sum cannot overflow.
        let room = u64::from(held) + self.batch as u64;
        if batch_ok && held > 0 && u64::from(self.max_len) < room {
            errors.push(QueueConfigError::MaxLenHeld {
                max_len: self.max_len,
                held,
                batch: self.batch,
                min: room,
            });
        }
        if let Some(Err(reason)) = self.ct_mark_bits.map(|b| b.validate()) {
            errors.push(QueueConfigError::CtMarkBits { reason });
        }
        if self.hold.overflow == Verdict::Repeat {
            errors.push(QueueConfigError::HoldOverflow {
                overflow: self.hold.overflow,
            });
        }
        if let Some(cpu) = self.cpu {
            match available() {
                Ok(available) if !available.contains(&cpu) => {
                    errors.push(QueueConfigError::Cpu { cpu, available });
                }
                Ok(_) => {}
                Err(source) => errors.push(QueueConfigError::CpusUnreadable { cpu, source }),
            }
        }
        if let Some(nice) = self.nice
            && !NICE_RANGE.contains(&nice)
        {
            errors.push(QueueConfigError::Nice { nice });
        }
        errors
    }
}

/// [`QueueConfig::check`], and that the conntrack mark bits leave alone `stage_mask`, the
/// stage bits of the chain the queue is to run.
pub(crate) fn check_config(cfg: &QueueConfig, stage_mask: u32) -> Result<(), NfqError> {
    check_with(cfg, stage_mask, crate::available_cpus)
}

fn check_with(
    cfg: &QueueConfig,
    stage_mask: u32,
    available: impl FnOnce() -> std::io::Result<Vec<usize>>,
) -> Result<(), NfqError> {
    let mut errors = cfg.problems(available);
    if let Some(bits) = cfg.ct_mark_bits
        && bits.mask() & stage_mask != 0
    {
        errors.push(QueueConfigError::CtMarkBitsOverlap {
            bits: bits.mask(),
            stages: stage_mask,
        });
    }
    QueueConfigErrors::from_vec(cfg.num, errors).map_err(NfqError::Invalid)
}

/// Receive slot size for a copy range: the packet, netlink overhead, room to grow.
pub(crate) fn slot_len(cfg: &QueueConfig) -> usize {
    cfg.copy_range as usize + QueueConfig::OVERHEAD + QueueConfig::TAILROOM
}

/// Send buffer wanted so that the verdicts of a whole batch fit in one sendmsg (a checked
/// `batch`, at most 1024; saturating for any other).
pub(crate) fn sndbuf_for(cfg: &QueueConfig) -> usize {
    cfg.batch
        .saturating_mul(slot_len(cfg) + VERDICT_HDR_MAX)
        .max(1 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// What `cfg` has wrong, with relayd running on CPUs 0 and 1.
    fn problems(cfg: &QueueConfig) -> Vec<QueueConfigError> {
        cfg.problems(|| Ok(vec![0, 1]))
    }

    /// `cfg` with one change.
    fn with(change: impl FnOnce(&mut QueueConfig)) -> QueueConfig {
        let mut cfg = QueueConfig::new(7);
        change(&mut cfg);
        cfg
    }

    /// The one error of `cfg` and its text.
    fn only(cfg: &QueueConfig) -> (QueueConfigError, String) {
        let mut e = problems(cfg);
        assert_eq!(e.len(), 1, "{e:?}");
        let e = e.remove(0);
        let text = e.to_string();
        (e, text)
    }

    const BITS: CtMarkBits = CtMarkBits {
        tracked: 0x80,
        established: 0x40,
        related: 0x20,
        reply: 0x10,
    };

    #[test]
    fn defaults_and_every_limit_itself_pass() {
        assert!(QueueConfig::new(0).check().is_ok());
        let edges = [
            with(|c| (c.copy_range, c.rcvbuf) = (64, 64 + QueueConfig::OVERHEAD)),
            with(|c| c.copy_range = 0xffff),
            with(|c| c.max_len = 1),
            with(|c| c.batch = 1),
            with(|c| c.batch = 1024),
            with(|c| (c.hold.max_packets, c.batch, c.max_len) = (100, 8, 108)),
            with(|c| c.hold.overflow = Verdict::Drop),
            with(|c| c.ct_mark_bits = Some(BITS)),
            with(|c| c.cpu = Some(1)),
            with(|c| c.nice = Some(-20)),
            with(|c| c.nice = Some(19)),
        ];
        for cfg in &edges {
            assert!(problems(cfg).is_empty(), "{cfg:?}: {:?}", problems(cfg));
        }
    }

    #[test]
    fn copy_range_outside_its_range() {
        for bad in [0, 63, 0x10000] {
            let (e, text) = only(&with(|c| c.copy_range = bad));
            assert!(
                matches!(e, QueueConfigError::CopyRange { copy_range } if copy_range == bad),
                "{e:?}"
            );
            assert_eq!(text, format!("copy_range {bad} is outside 64..65535"));
        }
    }

    #[test]
    fn max_len_zero() {
        let (e, text) = only(&with(|c| c.max_len = 0));
        assert!(matches!(e, QueueConfigError::MaxLenZero), "{e:?}");
        assert_eq!(text, "max_len must be at least 1");
    }

    #[test]
    fn rcvbuf_below_copy_range_and_overhead() {
        let (e, text) = only(&with(|c| (c.copy_range, c.rcvbuf) = (2048, 2559)));
        assert!(
            matches!(
                e,
                QueueConfigError::Rcvbuf {
                    rcvbuf: 2559,
                    min: 2560
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            text,
            "rcvbuf 2559 is smaller than copy_range plus netlink overhead (2560)"
        );
    }

    #[test]
    fn batch_outside_its_range_is_an_error_not_a_clamp() {
        for bad in [0, 1025, usize::MAX] {
            let (e, text) = only(&with(|c| c.batch = bad));
            assert!(
                matches!(e, QueueConfigError::Batch { batch } if batch == bad),
                "{e:?}"
            );
            assert_eq!(text, format!("batch {bad} is outside 1..1024"));
        }
    }

    #[test]
    fn max_len_without_room_for_held_packets_and_a_batch() {
        let (e, text) = only(&with(|c| {
            (c.hold.max_packets, c.batch, c.max_len) = (100, 8, 107)
        }));
        assert!(
            matches!(
                e,
                QueueConfigError::MaxLenHeld {
                    max_len: 107,
                    held: 100,
                    batch: 8,
                    min: 108
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            text,
            "max_len 107 leaves no room: the kernel counts the 100 packets a service may hold \
             against it; make it at least 108"
        );
        // The largest hold and batch do not overflow.
        let (e, _) = only(&with(|c| {
            (c.hold.max_packets, c.batch, c.max_len) = (u32::MAX, 1024, u32::MAX)
        }));
        assert!(
            matches!(e, QueueConfigError::MaxLenHeld { min, .. } if min == u64::from(u32::MAX) + 1024),
            "{e:?}"
        );
    }

    #[test]
    fn ct_mark_bits_that_are_not_four_bits() {
        let bits = CtMarkBits { reply: 0, ..BITS };
        let (e, text) = only(&with(|c| c.ct_mark_bits = Some(bits)));
        assert!(matches!(e, QueueConfigError::CtMarkBits { .. }), "{e:?}");
        assert_eq!(text, "conntrack mark bit `reply` is zero");
    }

    #[test]
    fn ct_mark_bits_over_the_chains_stage_bits() {
        let cfg = with(|c| c.ct_mark_bits = Some(BITS));
        assert!(cfg.check().is_ok());
        assert!(check_with(&cfg, 0xc000_0000, || Ok(vec![0])).is_ok());
        let Err(NfqError::Invalid(e)) = check_with(&cfg, 0x30, || Ok(vec![0])) else {
            panic!("overlap not refused");
        };
        assert!(
            matches!(
                e.errors[..],
                [QueueConfigError::CtMarkBitsOverlap {
                    bits: 0xf0,
                    stages: 0x30
                }]
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "queue 7: conntrack mark bits 0xf0 overlap the stage bits 0x30"
        );
    }

    #[test]
    fn hold_overflow_neither_accept_nor_drop() {
        let (e, text) = only(&with(|c| c.hold.overflow = Verdict::Repeat));
        assert!(
            matches!(
                e,
                QueueConfigError::HoldOverflow {
                    overflow: Verdict::Repeat
                }
            ),
            "{e:?}"
        );
        assert_eq!(text, "the hold overflow verdict must be accept or drop");
    }

    #[test]
    fn cpu_relayd_may_not_run_on() {
        let (e, text) = only(&with(|c| c.cpu = Some(5)));
        assert!(
            matches!(&e, QueueConfigError::Cpu { cpu: 5, available } if available == &[0, 1]),
            "{e:?}"
        );
        assert_eq!(text, "CPU 5 is not available to relayd (available: 0-1)");
        // On the machine the test runs on: one past the last CPU is refused.
        let last = *crate::available_cpus().unwrap().last().unwrap();
        let e = with(|c| c.cpu = Some(crate::MAX_CPU + 1))
            .check()
            .unwrap_err();
        assert!(
            matches!(e.errors[..], [QueueConfigError::Cpu { .. }]),
            "{e}"
        );
        assert!(with(|c| c.cpu = Some(last)).check().is_ok());
    }

    #[test]
    fn cpus_that_cannot_be_read() {
        let cfg = with(|c| c.cpu = Some(1));
        let e = cfg.problems(|| Err(std::io::Error::from_raw_os_error(libc::EPERM)));
        assert!(
            matches!(e[..], [QueueConfigError::CpusUnreadable { cpu: 1, .. }]),
            "{e:?}"
        );
        assert!(
            e[0].to_string()
                .starts_with("cannot read the CPUs relayd may use: "),
            "{}",
            e[0]
        );
        // Without a CPU to check, the CPUs are not read at all.
        let read = Cell::new(false);
        let e = QueueConfig::new(7).problems(|| {
            read.set(true);
            Ok(Vec::new())
        });
        assert!(e.is_empty() && !read.get(), "{e:?}");
    }

    #[test]
    fn nice_outside_its_range() {
        for bad in [-21, 20, i32::MIN] {
            let (e, text) = only(&with(|c| c.nice = Some(bad)));
            assert!(
                matches!(e, QueueConfigError::Nice { nice } if nice == bad),
                "{e:?}"
            );
            assert_eq!(text, format!("nice {bad} is outside -20..19"));
        }
    }

    #[test]
    fn every_wrong_field_in_field_order_and_none_that_follows_from_another() {
        let cfg = with(|c| {
            c.copy_range = 10;
            c.rcvbuf = 1; // not checked against a wrong copy_range
            c.max_len = 0;
            c.batch = 0;
            c.hold.max_packets = 10; // room not checked against a wrong batch
            c.nice = Some(99);
        });
        let e = cfg.check().unwrap_err();
        assert!(
            matches!(
                e.errors[..],
                [
                    QueueConfigError::CopyRange { copy_range: 10 },
                    QueueConfigError::MaxLenZero,
                    QueueConfigError::Batch { batch: 0 },
                    QueueConfigError::Nice { nice: 99 },
                ]
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "queue 7: copy_range 10 is outside 64..65535; max_len must be at least 1; \
             batch 0 is outside 1..1024; nice 99 is outside -20..19"
        );
        // A zero max_len leaves no room for held packets either.
        let e = problems(&with(|c| (c.max_len, c.hold.max_packets) = (0, 10)));
        assert!(
            matches!(
                e[..],
                [
                    QueueConfigError::MaxLenZero,
                    QueueConfigError::MaxLenHeld { min: 74, .. }
                ]
            ),
            "{e:?}"
        );
    }

    #[test]
    fn one_error_keeps_its_cause() {
        use std::error::Error;
        let e = QueueConfigErrors {
            num: 3,
            errors: vec![QueueConfigError::CpusUnreadable {
                cpu: 1,
                source: std::io::Error::from_raw_os_error(libc::EPERM),
            }],
        };
        assert!(e.source().is_some());
        let e = QueueConfigErrors {
            num: 3,
            errors: vec![QueueConfigError::MaxLenZero],
        };
        assert!(e.source().is_none());
    }
}
