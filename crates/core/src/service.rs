//! The service contract: what a packet service is, how it is configured and built, and
//! what it answers for each packet.
//!
//! A service is built once per queue thread by its [`ServiceFactory`], so it may keep
//! mutable scratch state (buffers, compressors) without locks; nothing is shared between
//! queues by accident. `process` is synchronous and must not allocate in steady state.

use crate::counters::Counters;
use crate::hook::{Hook, StageMark};
use crate::manifest::Manifest;
use crate::offload::Offload;
use crate::outbox::{self, EmitError, Outbox, Route, Tally};
use crate::packet::Packet;
use crate::resources::Resources;
use serde::de::DeserializeOwned;
use std::net::IpAddr;
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
    /// [`Manifest::max_held`]); beyond it the queue's overflow policy decides at once.
    /// Verdicts of held packets go out in deadline order, so packets held with
    /// non-decreasing deadlines leave in the order they came.
    Hold {
        /// When the packet is to be accepted.
        until: Instant,
    },
}

/// Per-batch facts a service may use, so that it makes no system call per packet, and the
/// [`Outbox`] for the packets it sends of its own ([`Context::emit`], [`Context::forward`]).
///
/// The datapath keeps one per queue thread and sends what a batch emitted after the
/// batch's verdicts; a test builds one with [`Context::new`] and reads what a service
/// emitted with [`Context::outbox`].
#[derive(Debug)]
pub struct Context {
    /// The queue number.
    pub queue: u16,
    /// The time the current batch of packets was received.
    pub now: Instant,
    /// The stage bits of this queue's hook ([`StageMark::for_hook`]): a packet a service
    /// emits carries them, so that relayd's rules at the hooks it has already crossed skip
    /// it and later ones still see it. [`Context::emit`] puts them on.
    pub bypass_mark: u32,
    /// Where the stage bits sit in the mark.
    pub stages: StageMark,
    /// The box's own addresses (sorted, IPv4-mapped ones as IPv4), as the datapath last
    /// read them ([`Context::set_local_addresses`]); empty where unknown (tests, replay).
    local: Arc<[IpAddr]>,
    outbox: Outbox,
    /// The current service's offload vote on the current packet ([`Context::offload`]);
    /// the chain reads and clears it after each service.
    vote: Option<Offload>,
}

impl Context {
    /// The context of a batch on queue `queue` received at `now`, with no stage bits and
    /// an empty outbox.
    pub fn new(queue: u16, now: Instant) -> Context {
        Context {
            queue,
            now,
            bypass_mark: 0,
            stages: StageMark::DEFAULT,
            local: Arc::from([]),
            outbox: Outbox::new(),
            vote: None,
        }
    }

    /// Tells the services the box's own addresses: every address of every interface and
    /// each IPv4 broadcast address, sorted, IPv4-mapped ones as IPv4 (what
    /// `relay_inject::local_addresses` returns). The datapath renews them about once a
    /// second; a clone of the same snapshot costs no allocation.
    pub fn set_local_addresses(&mut self, addrs: Arc<[IpAddr]>) {
        self.local = addrs;
    }

    /// Votes to offload the current packet's flow: the service needs no more of its packets
    /// (in `offload.scope`), and its answer for them would not change. The flow leaves the
    /// queue only if every service of the chain votes on the same packet and the verdict
    /// is an accept (see [`crate::offload`]); the vote holds for this packet only, so a
    /// service repeats it on later packets of the flow until they stop coming. A service
    /// whose manifest does not declare [`Manifest::offloads`](crate::Manifest::offloads)
    /// is never asked.
    pub fn offload(&mut self, offload: Offload) {
        self.vote = Some(offload);
    }

    /// The current service's vote so far (for a service's own tests: the chain takes it).
    pub fn offload_vote(&self) -> Option<Offload> {
        self.vote
    }

    /// Takes the current service's vote (the chain, after each service).
    pub(crate) fn take_vote(&mut self) -> Option<Offload> {
        self.vote.take()
    }

    /// Whether `ip` is one of the box's own addresses as last set (false where unknown).
    pub fn is_local(&self, ip: IpAddr) -> bool {
        self.local.binary_search(&ip.to_canonical()).is_ok()
    }

    /// Hands on `pkt`, the inner packet a service decapsulated or decrypted in place of
    /// the queued one (tunnel-mode ESP, MPLS), without ever delivering it to this box: a
    /// peer holding the tunnel's key (or a compromised one) chooses the inner header, and
    /// must not reach the relay's own sockets past the rules the outer packet met.
    ///
    /// - An inner packet addressed to an address no router forwards to
    ///   ([`outbox::forwardable`]: loopback, unspecified, multicast, broadcast,
    ///   link-local, IPv4-mapped) or to one of the box's own addresses
    ///   ([`Context::is_local`]) is dropped on every hook, counted in
    ///   `dropped_local_destination`. (On PREROUTING the kernel routes the accepted
    ///   packet by its new header, and IPv6's loopback check ran before the hook; on
    ///   OUTPUT it routes it again; on FORWARD it would leave by the outer packet's route.)
    /// - On INPUT an accepted packet is delivered locally whatever its destination (the
    ///   kernel does not route it again), and a verdict cannot change the address family:
    ///   there the packet is forwarded anew ([`Context::forward_packet`], which the datapath
    ///   again refuses for the box's own addresses) and the queued original dropped.
    /// - Otherwise the verdict carries it on: [`Action::Continue`].
    pub fn pass_inner(&mut self, pkt: &mut Packet, tally: &Tally) -> Action {
        let Some((version, to)) = outbox::destination(pkt.data()) else {
            tally.failed();
            return Action::Drop;
        };
        if !outbox::forwardable(to) || self.is_local(to) {
            tally.local_destination();
            return Action::Drop;
        }
        if pkt.meta.hook == Some(Hook::Input) || !pkt.meta.verdict_carries(version) {
            // What became of it is counted in the tally.
            let _ = self.forward_packet(pkt, tally);
            return Action::Drop;
        }
        Action::Continue
    }

    /// `mark` with its stage bits replaced by this queue's: the mark a packet a service
    /// sends itself carries.
    pub fn sent_mark(&self, mark: u32) -> u32 {
        self.stages.with(mark, self.bypass_mark)
    }

    /// Sends `packet` (a whole IPv4 or IPv6 packet this relay originates: a new outer
    /// header, an ICMP error, a reset) to the destination in its header, with `mark` and
    /// this queue's stage bits, after the batch's verdicts. What becomes of it is counted
    /// in `tally`, a refusal here included.
    pub fn emit(&mut self, packet: &[u8], mark: u32, tally: &Tally) -> Result<(), EmitError> {
        let mark = self.sent_mark(mark);
        self.outbox.push(packet, mark, Route::Originate, tally)
    }

    /// Sends `message`, an ICMPv6 message without IP header (type, code, checksum 0, body),
    /// to `to`: the kernel writes the IPv6 header with the source address its route
    /// chooses, as for an error a router sends, and the checksum. Otherwise as
    /// [`Context::emit`].
    pub fn emit_icmpv6(
        &mut self,
        message: &[u8],
        to: std::net::Ipv6Addr,
        mark: u32,
        tally: &Tally,
    ) -> Result<(), EmitError> {
        let mark = self.sent_mark(mark);
        self.outbox
            .push_to(message, mark, to.into(), Route::Icmpv6, tally)
    }

    /// Forwards `packet`, a packet passing through (a decapsulated inner packet), as a
    /// router would: its TTL or hop limit is decreased here, and one that runs out
    /// (`dropped_hop_limit`), or is addressed to an address no router forwards to or to
    /// the box itself (`dropped_local_destination`), is not sent. Otherwise as
    /// [`Context::emit`].
    pub fn forward(
        &mut self,
        packet: &mut [u8],
        mark: u32,
        tally: &Tally,
    ) -> Result<(), EmitError> {
        let Some((_, to)) = outbox::destination(packet) else {
            tally.failed();
            return Err(EmitError::NotIp);
        };
        if !outbox::forwardable(to) {
            tally.local_destination();
            return Err(EmitError::NotForwardable);
        }
        if !outbox::decrement_hop(packet) {
            tally.hop_limit();
            return Err(EmitError::HopLimit);
        }
        let mark = self.sent_mark(mark);
        // The destination read above: the header's addresses are unchanged.
        self.outbox.push_to(packet, mark, to, Route::Forward, tally)
    }

    /// [`Context::emit`] for a queued packet a service turned into one its verdict cannot
    /// carry (a tunnel packet of another address family), with the mark the service gave
    /// it ([`Packet::set_mark`]). The caller then drops the queued original.
    pub fn emit_packet(&mut self, pkt: &Packet, tally: &Tally) -> Result<(), EmitError> {
        self.emit(pkt.data(), pkt.verdict_mark().unwrap_or(0), tally)
    }

    /// [`Context::forward`] for a queued packet a service turned into one passing through
    /// (a decapsulated inner packet of another address family), with the mark the service
    /// gave it. The caller then drops the queued original.
    pub fn forward_packet(&mut self, pkt: &mut Packet, tally: &Tally) -> Result<(), EmitError> {
        let mark = pkt.verdict_mark().unwrap_or(0);
        self.forward(pkt.data_mut(), mark, tally)
    }

    /// The packets emitted since the outbox was last cleared.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The outbox, for the datapath that sends and clears it.
    pub fn outbox_mut(&mut self) -> &mut Outbox {
        &mut self.outbox
    }
}

/// A packet service instance, owned by one queue thread.
pub trait Service: Send {
    /// Handles one packet: inspect or rewrite it (through [`Packet::data_mut`] and the wire
    /// views, fixing every checksum touched), emit any packet of its own into `cx`
    /// ([`Context::emit`]), and say what to do with it.
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action;
}

/// Builds a service instance per queue thread and says, in its [`Manifest`], what the
/// service needs from the daemon. The daemon reads nothing else of a service.
pub trait ServiceFactory: Send + Sync {
    /// The service's kind, as written in the configuration (`kind = "dump"`).
    fn kind(&self) -> &'static str;

    /// What the service needs from the daemon: tc trees, proxy diversion, MSS clamp, mark
    /// bits, conntrack, copy range, held packets, capabilities, the files it writes. Made
    /// once, when the factory is (a factory keeps it and returns a reference). Default:
    /// nothing ([`Manifest::new`]).
    fn manifest(&self) -> &Manifest {
        &crate::manifest::NOTHING
    }

    /// A new instance for one queue thread; `counters` is where it registers its own
    /// counters (shown by `relayd status`), `res` what the daemon made from the manifest
    /// for it (the queue monitor, its log writers, the clock). Does no I/O: it opens no
    /// file and starts no thread.
    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service>;
}

/// Why [`ServiceConfig::into_factory`] refused a service's configuration: values that
/// parse but make no sense (together), a key file that cannot be read. relayd prints it
/// after the section's position (`relayd.toml:11:1: service.pm: MESSAGE`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(String);

impl InvalidConfig {
    /// A refusal saying `message` (which value is wrong, and why).
    pub fn new(message: impl Into<String>) -> InvalidConfig {
        InvalidConfig(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl From<String> for InvalidConfig {
    fn from(message: String) -> InvalidConfig {
        InvalidConfig(message)
    }
}

impl From<&str> for InvalidConfig {
    fn from(message: &str) -> InvalidConfig {
        InvalidConfig(message.to_string())
    }
}

/// State a service kind keeps from one configuration to the next: the daemon owns one set
/// for its whole life and hands it to every [`ServiceConfig::into_factory_kept`], so that
/// a reload can carry over what must not start again (an ESP SA's sequence counter and
/// replay window), without a process-wide static. One value per type, made on first use;
/// taken only while a configuration is loaded, never per packet.
#[derive(Debug, Default)]
pub struct Kept {
    slots: std::sync::Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl Kept {
    /// An empty set (a fresh daemon, or a test).
    pub fn new() -> Kept {
        Kept::default()
    }

    /// The kept value of type `T`, made with `T::default()` the first time.
    pub fn get_or_default<T: std::any::Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for s in slots.iter() {
            if let Ok(t) = Arc::clone(s).downcast::<T>() {
                return t;
            }
        }
        let t = Arc::new(T::default());
        slots.push(t.clone());
        t
    }
}

/// A service's configuration section (`[service.NAME]`, less the `kind` key), parsed with
/// serde; unknown keys should be refused (`#[serde(deny_unknown_fields)]`).
pub trait ServiceConfig: DeserializeOwned {
    /// The `kind` this configuration is for.
    const KIND: &'static str;

    /// Checks the values and makes the factory for the instance called `name`. The error
    /// says which value is wrong.
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig>;

    /// Like [`ServiceConfig::into_factory`], with the state the daemon keeps across
    /// reloads ([`Kept`]); relayd calls this one. Override it (and make `into_factory`
    /// use a fresh [`Kept`]) only if a reload must carry state over; the default ignores
    /// `kept`.
    fn into_factory_kept(
        self,
        name: &str,
        kept: &Kept,
    ) -> Result<Arc<dyn ServiceFactory>, InvalidConfig>
    where
        Self: Sized,
    {
        let _ = kept;
        self.into_factory(name)
    }
}
