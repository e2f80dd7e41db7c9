//! The service contract: what a packet service is, how it is configured and built, and
//! what it answers for each packet.
//!
//! A service is built once per queue thread by its [`ServiceFactory`], so it may keep
//! mutable scratch state (buffers, compressors) without locks; nothing is shared between
//! queues by accident. `process` is synchronous and must not allocate in steady state.

use crate::counters::Counters;
use crate::hook::StageMark;
use crate::packet::Packet;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Instant;

/// What a service wants done with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Pass the packet to the next service (or accept it after the last one).
    Continue,
    /// Accept now; later services are skipped.
    Accept,
    /// Drop now; later services are skipped (PacketCloud 3.3).
    Drop,
    /// Give the packet back to the hook with this nfmark, to traverse it again.
    /// relayd puts its stage bits for the queue's hook on it (see
    /// [`StageMark`](crate::StageMark)) so that its own rules at this hook do not queue it
    /// again, while those at later hooks still do.
    Repeat {
        /// The mark the packet carries afterwards.
        mark: u32,
    },
    /// Hold the packet and accept it at `until` (a `delay` service). Later services are
    /// skipped: a hold ends the chain, and the verdict given at `until` is accept, with the
    /// mark set by [`Packet::set_mark`] and the packet's bytes if a service changed them.
    /// The datapath keeps at most the queue's hold capacity (see
    /// [`ServiceFactory::max_held`]); beyond it the queue's overflow policy decides at once.
    /// Verdicts of held packets go out in deadline order, so packets held with
    /// non-decreasing deadlines leave in the order they came.
    Hold {
        /// When the packet is to be accepted.
        until: Instant,
    },
}

/// What happens to traffic when the service cannot see it (relayd down, queue full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPolicy {
    /// Traffic flows unprocessed: right for services that only optimise.
    Open,
    /// Traffic stops: right for services whose point is to stop or hide traffic.
    Closed,
}

/// Per-batch facts a service may use, so that it makes no system call per packet.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// The queue number.
    pub queue: u16,
    /// The time the current batch of packets was received.
    pub now: Instant,
    /// The stage bits of this queue's hook ([`StageMark::for_hook`]): a packet a service
    /// sends itself (an ICMP error, a TCP reset, a re-sent packet) carries them
    /// (`SO_MARK`), so that relayd's rules at the hooks it has already crossed skip it and
    /// later ones still see it. Use [`Context::sent_mark`] to put them on a mark.
    pub bypass_mark: u32,
    /// Where the stage bits sit in the mark.
    pub stages: StageMark,
}

impl Context {
    /// The context of a batch on queue `queue` received at `now`, with no stage bits.
    pub fn new(queue: u16, now: Instant) -> Context {
        Context {
            queue,
            now,
            bypass_mark: 0,
            stages: StageMark::DEFAULT,
        }
    }

    /// `mark` with its stage bits replaced by this queue's: the mark a packet a service
    /// sends itself must carry.
    pub fn sent_mark(&self, mark: u32) -> u32 {
        self.stages.with(mark, self.bypass_mark)
    }
}

/// The largest TCP MSS that still fits the path after a service grew the packets, per
/// address family (IPv6 headers are 20 bytes longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MssClamp {
    /// MSS for TCP over IPv4.
    pub ipv4: u16,
    /// MSS for TCP over IPv6.
    pub ipv6: u16,
}

/// A packet service instance, owned by one queue thread.
pub trait Service: Send {
    /// Handles one packet: inspect or rewrite it (through [`Packet::data_mut`] and the wire
    /// views, fixing every checksum touched) and say what to do with it.
    fn process(&mut self, pkt: &mut Packet, cx: &Context) -> Action;
}

/// Builds a service instance per queue thread and describes the service to the datapath.
pub trait ServiceFactory: Send + Sync {
    /// The service's kind, as written in the configuration (`kind = "dump"`).
    fn kind(&self) -> &'static str;

    /// The failure policy this service wants for its queue (the queue's default).
    fn fail_policy(&self) -> FailPolicy {
        FailPolicy::Open
    }

    /// The nfmark bits this service sets to 1 (in a verdict or repeat mark, or on packets
    /// it sends), so that the configuration check can refuse a mark that overlaps relayd's
    /// stage bits (`daemon.bypass_mark`, [`StageMark`]); relayd would replace them.
    /// Default: none.
    fn mark_bits(&self) -> u32 {
        0
    }

    /// True if the service rewrites packet bytes; its queue then turns GSO off, so it
    /// sees MTU-sized packets.
    fn rewrites_payload(&self) -> bool {
        false
    }

    /// How many bytes of each packet the service needs to see: `None` (the default) for
    /// the whole packet, `Some(n)` for the first `n` bytes. A queue whose services all need
    /// only headers asks the kernel to copy only those, which is most of the cost of a
    /// large (GSO) packet. A service that rewrites packets must return `None`.
    fn needs_bytes(&self) -> Option<u32> {
        None
    }

    /// True if the service reads [`PacketMeta::ct`](crate::PacketMeta::ct), the packet's
    /// conntrack state; its queue then asks the kernel for it (NFQA_CFG_F_CONNTRACK) or
    /// decodes it from the conntrack mark bits its rules set (see
    /// [`CtMarkBits`](crate::CtMarkBits)).
    fn needs_conntrack(&self) -> bool {
        false
    }

    /// The most packets the service holds at once ([`Action::Hold`]); 0 (the default) for
    /// a service that never holds. The queue's hold capacity is the sum over its services.
    fn max_held(&self) -> u32 {
        0
    }

    /// The TCP MSS that connections crossing this service must be clamped to, because it
    /// grows packets (encapsulation): relayd then installs a TCPMSS rule before the queue
    /// rule, as a router in front of a tunnel would. `None` (the default): no clamp.
    fn clamp_mss(&self) -> Option<MssClamp> {
        None
    }

    /// The tc tree the service's marks select classes of, if any: relayd installs it on
    /// start, applies changes on reload (only the differing classes) and removes it on exit.
    fn qos(&self) -> Option<crate::QosPlan> {
        None
    }

    /// A new instance for one queue thread; `counters` is where it registers its own
    /// counters (shown by `relayd status`).
    fn build(&self, counters: &Counters) -> Box<dyn Service>;
}

/// A service's configuration section (`[service.NAME]`, less the `kind` key), parsed with
/// serde; unknown keys should be refused (`#[serde(deny_unknown_fields)]`).
pub trait ServiceConfig: DeserializeOwned {
    /// The `kind` this configuration is for.
    const KIND: &'static str;

    /// Checks the values and makes the factory for the instance called `name`. The error
    /// says which value is wrong.
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, String>;
}
