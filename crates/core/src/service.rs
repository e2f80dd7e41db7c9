//! The service contract: what a packet service is, how it is configured and built, and
//! what it answers for each packet.
//!
//! A service is built once per queue thread by its [`ServiceFactory`], so it may keep
//! mutable scratch state (buffers, compressors) without locks; nothing is shared between
//! queues by accident. `process` is synchronous and must not allocate in steady state.

use crate::counters::Counters;
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
    /// relayd adds its bypass bit so that its own rules do not queue it again.
    Repeat {
        /// The mark the packet carries afterwards.
        mark: u32,
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
    /// The mark bit(s) relayd's own rules skip: a packet a service sends itself (an ICMP
    /// error, a TCP reset) carries it (`SO_MARK`), so that relayd does not queue it again.
    pub bypass_mark: u32,
}

impl Context {
    /// The context of a batch on queue `queue` received at `now`, with no bypass mark.
    pub fn new(queue: u16, now: Instant) -> Context {
        Context {
            queue,
            now,
            bypass_mark: 0,
        }
    }
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
