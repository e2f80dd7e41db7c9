//! The IDS's own flow table: one per queue thread (no locks), keyed by protocol and the
//! normalized address/port pair so both directions find one flow, holding the engine's
//! per-flow state `T`, the TCP state and, for TCP, the two reassembled [`Stream`]s.
//!
//! Modelled on Suricata's flow engine (`flow.c`, `flow-hash.c`): the client is the sender
//! of the first packet, or of the SYN for TCP (with `midstream`, a first SYN-ACK is
//! reversed as Suricata does); each packet gets its [`Dir`]; a flow is *established* once
//! the TCP handshake completed, or for other protocols once packets went both ways; a SYN
//! on a closed flow, or on one picked up without a SYN, starts a new flow on the same
//! tuple (Suricata's TCP session reuse). The flow id is [`crate::eve::flow_id`]'s.
//!
//! Bounds ([`FlowLimits`], with their defaults):
//! - `max_flows` (default 65,536, Suricata's `flow.hash-size`): flows tracked. Each costs
//!   its slot (`size_of::<Flow<T>>()` and a generation: 584 bytes with the engine's state
//!   on 64-bit targets; the two streams and what normalization knows of each endpoint
//!   are inline, so a SYN flood allocates nothing per flow), a hash-table bucket (about
//!   130 bytes at the table's load) and eviction-list entries (about 64), about 780
//!   bytes, and the vectors double, so `max_flows` rounded up to a power of two counts:
//!   65,536 flows take some 49 MiB plus what `T` owns, whatever the traffic.
//! - timeouts since a flow's last packet, one set for every protocol: 30 s not
//!   established, 300 s established, 10 s closed (both FINs, or an RST). These are
//!   Suricata's built-in TCP values (the suricata.yaml it ships raises them to 60, 600 and
//!   60 s). They are checked lazily: a flow found timed out by its next packet starts
//!   over, each packet examines two more slots of the table (a sweep spread over the
//!   traffic), and a full table is swept whole at most once a second.
//! - a full table first sweeps (if it may), then evicts the oldest flow that is not
//!   established (or is closed), so a SYN flood recycles its own half-open flows and
//!   cannot push out established ones; if there is none, the new flow is not tracked
//!   ([`FlowTable::packet`] returns `None`, counted in `flow_overflow`).
//! - stream memory: the shared [`MemBudget`] (memcap 64 MiB) and the per-direction
//!   [`StreamLimits`], see [`crate::flow::stream`].

mod dir;
mod judge;
pub(crate) mod stream;
mod tcp;
#[cfg(test)]
mod tests;

pub(crate) use dir::Dir;
pub(crate) use judge::{Invalid, StreamEvent, TcpOptions};
pub(crate) use tcp::TcpState;

use crate::flow::stream::StreamLimits;
use crate::flow::stream::{
    DEFAULT_MEMCAP, MemBudget, SegmentResult, Stream, StreamCounters, StreamPolicy,
};
use crate::hostos::PolicyMap;
use relay_core::wire::proto;
use relay_core::{Counter, Counters};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tcp::TcpSession;

/// Default bound on tracked flows (Suricata's `flow.hash-size`).
pub(crate) const DEFAULT_MAX_FLOWS: usize = 65_536;
/// Default timeout of a flow not established (Suricata's TCP `new`).
pub(crate) const DEFAULT_TIMEOUT_NEW: Duration = Duration::from_secs(30);
/// Default timeout of an established flow (Suricata's TCP `established`).
pub(crate) const DEFAULT_TIMEOUT_ESTABLISHED: Duration = Duration::from_secs(300);
/// Default timeout of a closed TCP flow (Suricata's TCP `closed`).
pub(crate) const DEFAULT_TIMEOUT_CLOSED: Duration = Duration::from_secs(10);

/// Table slots examined for timeouts per packet.
const SWEEP_STEP: usize = 2;
/// Least time between two whole-table sweeps (ns).
const FULL_SWEEP_EVERY: u64 = 1_000_000_000;

/// The bounds of a flow table (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowLimits {
    /// Flows tracked at once. Default [`DEFAULT_MAX_FLOWS`].
    pub max_flows: usize,
    /// Timeout of a flow not established. Default [`DEFAULT_TIMEOUT_NEW`].
    pub timeout_new: Duration,
    /// Timeout of an established flow. Default [`DEFAULT_TIMEOUT_ESTABLISHED`].
    pub timeout_established: Duration,
    /// Timeout of a closed TCP flow. Default [`DEFAULT_TIMEOUT_CLOSED`].
    pub timeout_closed: Duration,
    /// Reassemble TCP flows picked up without their handshake (Suricata's
    /// `stream.midstream`). Default false.
    pub midstream: bool,
    /// Bytes all streams of the table may hold. Default [`DEFAULT_MEMCAP`].
    pub memcap: usize,
    /// Per-direction stream bounds.
    pub stream: StreamLimits,
    /// How overlapping segments are resolved, by the receiving host's address (the
    /// protected hosts' OS).
    pub policy: PolicyMap<StreamPolicy>,
    /// Inline mode: segments overlapping received bytes with different data are not
    /// inserted (and the detector drops them). Default false.
    pub reject_different: bool,
    /// Judge segments as their receiver would (`judge`); off, every segment of an
    /// established flow is taken. Default true.
    pub normalize: bool,
}

impl Default for FlowLimits {
    fn default() -> FlowLimits {
        FlowLimits {
            max_flows: DEFAULT_MAX_FLOWS,
            timeout_new: DEFAULT_TIMEOUT_NEW,
            timeout_established: DEFAULT_TIMEOUT_ESTABLISHED,
            timeout_closed: DEFAULT_TIMEOUT_CLOSED,
            midstream: false,
            memcap: DEFAULT_MEMCAP,
            stream: StreamLimits::default(),
            policy: PolicyMap::default(),
            reject_different: false,
            normalize: true,
        }
    }
}

/// The counters of a flow table. A fresh set (`default()`) counts without being
/// registered anywhere.
#[derive(Debug, Clone, Default)]
pub(crate) struct FlowCounters {
    /// Flows created.
    pub created: Counter,
    /// Packets whose new flow found no room (not tracked).
    pub overflow: Counter,
    /// Flows evicted to make room.
    pub evicted: Counter,
    /// Flows removed after their timeout.
    pub timed_out: Counter,
    /// Gauge: flows tracked now.
    pub active: Counter,
    /// The streams' counters.
    pub stream: StreamCounters,
}

impl FlowCounters {
    /// The counters registered in `c` as `flow_created`, `flow_overflow`, `flow_evicted`,
    /// `flow_timed_out`, the gauge `flow_active`, and the stream counters (see
    /// [`StreamCounters::register`]).
    pub(crate) fn register(c: &Counters) -> FlowCounters {
        FlowCounters {
            created: c.counter("flow_created"),
            overflow: c.counter("flow_overflow"),
            evicted: c.counter("flow_evicted"),
            timed_out: c.counter("flow_timed_out"),
            active: c.gauge("flow_active"),
            stream: StreamCounters::register(c),
        }
    }
}

/// A flow's key: the protocol and its two endpoints in a fixed order (addresses as in
/// `rule::ip_key`, IPv4 mapped into IPv6), the same for both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlowKey {
    lo: u128,
    hi: u128,
    lo_port: u16,
    hi_port: u16,
    proto: u8,
}

impl FlowKey {
    /// The key of a packet from `src`:`sport` to `dst`:`dport`, and whether its sender is
    /// the key's first endpoint.
    pub(crate) fn of(proto: u8, src: u128, sport: u16, dst: u128, dport: u16) -> (FlowKey, bool) {
        let src_lo = (src, sport) <= (dst, dport);
        let ((lo, lo_port), (hi, hi_port)) = if src_lo {
            ((src, sport), (dst, dport))
        } else {
            ((dst, dport), (src, sport))
        };
        let key = FlowKey {
            lo,
            hi,
            lo_port,
            hi_port,
            proto,
        };
        (key, src_lo)
    }

    /// The 48-bit flow id, the same as [`crate::eve::flow_id`] gives for the tuple.
    pub(crate) fn flow_id(&self) -> u64 {
        // FNV-1a over the normalised tuple, then a final mix (as eve::flow_id).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for &byte in bytes {
                h ^= u64::from(byte);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        feed(&self.lo.to_be_bytes());
        feed(&self.lo_port.to_be_bytes());
        feed(&self.hi.to_be_bytes());
        feed(&self.hi_port.to_be_bytes());
        feed(&[self.proto]);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h & 0x0000_ffff_ffff_ffff
    }
}

/// The TCP header fields the flow table reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TcpHeader {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags (`relay_core::wire::tcp::flags`).
    pub flags: u8,
    /// The packet carries a TCP Fast Open option (see `tcp::tcp_fast_open`): data on its SYN
    /// is reassembled, as Suricata does.
    pub tfo: bool,
    /// The window field (unscaled).
    pub window: u16,
    /// The timestamp option's TSval, if present.
    pub tsval: Option<u32>,
    /// The timestamp option's TSecr (0 without it).
    pub tsecr: u32,
    /// The window scale option's shift (SYN), if present.
    pub wscale: Option<u8>,
    /// The urgent pointer.
    pub urgent: u16,
    /// A TCP-MD5 or TCP-AO option is present.
    pub sig: bool,
    /// The IP TTL (hop limit) as read at the queue's hook.
    pub ttl: u8,
    /// Where the TTL was read: `Some(false)` after the forwarding decrement (FORWARD,
    /// POSTROUTING), `Some(true)` before it (PREROUTING), `None` where no forwarding
    /// follows (local, replay): whether a segment reaches its receiver is judged only
    /// where it is `Some`.
    pub ttl_before_decrement: Option<bool>,
}

/// What the flow table needs of a packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowPacket<'a> {
    /// IP protocol number.
    pub proto: u8,
    /// Source address (`rule::ip_key` form).
    pub src: u128,
    /// Destination address (`rule::ip_key` form).
    pub dst: u128,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port (0 for protocols without ports).
    pub dport: u16,
    /// The TCP header, for TCP packets.
    pub tcp: Option<TcpHeader>,
    /// The transport payload.
    pub payload: &'a [u8],
}

/// One tracked flow: the engine's state `T`, the flow's facts, and its TCP streams.
#[derive(Debug)]
pub(crate) struct Flow<T> {
    /// The engine's per-flow state (flowbits, application-layer parser, detection state).
    pub state: T,
    key: FlowKey,
    id: u64,
    /// The client is the key's first endpoint.
    client_lo: bool,
    pkts: [u64; 2],
    /// Last packet (ns since the table's first packet).
    last: u64,
    tcp: Option<TcpSession>,
}

impl<T> Flow<T> {
    /// The flow id (see [`FlowKey::flow_id`]).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The client's address (`rule::ip_key` form) and port.
    pub(crate) fn client(&self) -> (u128, u16) {
        if self.client_lo {
            (self.key.lo, self.key.lo_port)
        } else {
            (self.key.hi, self.key.hi_port)
        }
    }

    /// The server's address (`rule::ip_key` form) and port.
    pub(crate) fn server(&self) -> (u128, u16) {
        if self.client_lo {
            (self.key.hi, self.key.hi_port)
        } else {
            (self.key.lo, self.key.lo_port)
        }
    }

    /// TCP: the handshake completed (true also after FIN and RST); other protocols:
    /// packets went both ways. For the `flow:established` of a packet use
    /// [`FlowRef::established`], which follows Suricata for the handshake's packets.
    pub(crate) fn established(&self) -> bool {
        match &self.tcp {
            Some(t) => t.established(),
            None => self.pkts[0] > 0 && self.pkts[1] > 0,
        }
    }

    /// True for a TCP flow whose connection the table follows: it saw the SYN, or picked
    /// the flow up mid-stream with `midstream` (Suricata has a TCP session for it). Its
    /// direction and `established` are then Suricata's; for other flows a packet's
    /// conntrack state, which the kernel may have seen from the start, answers `flow`.
    pub(crate) fn synced(&self) -> bool {
        self.tcp_state()
            .is_some_and(|s| !matches!(s, TcpState::New | TcpState::Unsynced))
    }

    /// The TCP state (`None` for other protocols).
    pub(crate) fn tcp_state(&self) -> Option<TcpState> {
        self.tcp.as_ref().map(|t| t.state())
    }

    /// Packets seen in direction `dir`.
    #[cfg(test)]
    pub(crate) fn pkts(&self, dir: Dir) -> u64 {
        self.pkts[dir.index()]
    }

    /// The reassembled stream of direction `dir` (`None` unless TCP and reassembled).
    pub(crate) fn stream(&self, dir: Dir) -> Option<&Stream> {
        self.tcp.as_ref().and_then(|t| t.stream(dir))
    }

    /// The reassembled stream of direction `dir`, to consume from.
    #[cfg(test)]
    pub(crate) fn stream_mut(&mut self, dir: Dir) -> Option<&mut Stream> {
        self.tcp.as_mut().and_then(|t| t.stream_mut(dir))
    }

    /// The engine's state and the stream of direction `dir` at once (a parser in `state`
    /// fed from the stream).
    pub(crate) fn split_mut(&mut self, dir: Dir) -> (&mut T, Option<&mut Stream>) {
        let Flow { state, tcp, .. } = self;
        (state, tcp.as_mut().and_then(|t| t.stream_mut(dir)))
    }

    fn dir_of(&self, src_lo: bool) -> Dir {
        if src_lo == self.client_lo {
            Dir::ToServer
        } else {
            Dir::ToClient
        }
    }

    fn evictable(&self) -> bool {
        match &self.tcp {
            Some(t) => t.evictable(),
            None => !self.established(),
        }
    }

    fn expired(&self, now: u64, l: &FlowLimits) -> bool {
        let timeout = match self.tcp_state() {
            Some(TcpState::Closed) => l.timeout_closed,
            _ if self.established() => l.timeout_established,
            _ => l.timeout_new,
        };
        now.saturating_sub(self.last) > timeout.as_nanos().min(u128::from(u64::MAX)) as u64
    }
}

/// A packet's flow, as [`FlowTable::packet`] returns it.
#[derive(Debug)]
pub(crate) struct FlowRef<'a, T> {
    /// The flow.
    pub flow: &'a mut Flow<T>,
    /// The packet's direction.
    pub dir: Dir,
    /// The flow was created by this packet (also when it replaced a timed-out or reused
    /// flow: `flow.state` is fresh).
    #[cfg_attr(not(test), allow(dead_code, reason = "read by the flow table's tests"))]
    pub new: bool,
    /// The packet counts as established (Suricata's `FLOW_PKT_ESTABLISHED`): TCP, the
    /// handshake completed before it, or it completed it carrying data; other protocols,
    /// packets have gone both ways, this one included.
    pub established: bool,
    /// What the packet's TCP payload did to its direction's stream (`ignored` if not
    /// reassembled: not TCP, no payload, not established, or the stream stopped).
    pub seg: SegmentResult,
    /// The segment is one its receiver would discard (see [`Invalid`]): nothing of it
    /// was inserted or learnt; an inline detector drops it.
    pub invalid: Option<Invalid>,
    /// The table's stream memory, for [`FlowRef::abandon_streams`].
    budget: &'a mut MemBudget,
}

impl<T> FlowRef<'_, T> {
    /// Stops reassembling the flow's streams for good and frees what they hold: the flow
    /// was decided (a `pass` or `drop` rule, an exception policy) and nothing of it will
    /// be inspected again, so its memory must not stay charged until it times out.
    pub(crate) fn abandon_streams(&mut self) {
        if let Some(t) = &mut self.flow.tcp {
            t.abandon(self.budget);
        }
    }
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    flow: Option<Flow<T>>,
}

/// The flow table of one queue thread (see the module docs).
#[derive(Debug)]
pub(crate) struct FlowTable<T> {
    map: HashMap<FlowKey, u32>,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Eviction candidates (slot, generation), oldest first: every flow at creation, and
    /// again when it closes; stale entries are skipped when met.
    candidates: VecDeque<(u32, u32)>,
    limits: FlowLimits,
    budget: MemBudget,
    counters: FlowCounters,
    base: Option<Instant>,
    cursor: usize,
    last_sweep: Option<u64>,
}

impl<T: Default> FlowTable<T> {
    /// An empty table bounded by `limits`, counting in `counters`.
    pub(crate) fn new(limits: FlowLimits, counters: FlowCounters) -> FlowTable<T> {
        let budget = MemBudget::new(limits.memcap, limits.stream, counters.stream.clone());
        FlowTable {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            candidates: VecDeque::new(),
            limits,
            budget,
            counters,
            base: None,
            cursor: 0,
            last_sweep: None,
        }
    }

    /// Finds or creates the flow of packet `p` at time `now`, updates its counts and TCP
    /// state, and feeds a TCP payload to its direction's stream. `None` if the packet's
    /// flow is new and the table has no room for it (counted in `flow_overflow`).
    pub(crate) fn packet(&mut self, p: &FlowPacket<'_>, now: Instant) -> Option<FlowRef<'_, T>> {
        let now = self.ns(now);
        self.sweep_step(now);
        let (key, src_lo) = FlowKey::of(p.proto, p.src, p.sport, p.dst, p.dport);
        let mut slot = None;
        if let Some(&s) = self.map.get(&key) {
            let (expired, reuse) = match self.flow_at(s) {
                Some(f) => {
                    let reuse = match (&f.tcp, &p.tcp) {
                        (Some(t), Some(h)) => t.reuse(f.dir_of(src_lo), h),
                        _ => false,
                    };
                    (f.expired(now, &self.limits), reuse)
                }
                None => (true, false),
            };
            if expired {
                self.counters.timed_out.inc();
                self.remove(s);
            } else if reuse {
                self.remove(s);
            } else {
                slot = Some(s);
            }
        }
        let new = slot.is_none();
        let s = match slot {
            Some(s) => s,
            None => self.create(key, src_lo, p, now)?,
        };
        let opts = tcp::Opts {
            midstream: self.limits.midstream,
            reject_different: self.limits.reject_different,
            normalize: self.limits.normalize,
        };
        let policy = &self.limits.policy;
        let slot = self.slots.get_mut(s as usize)?;
        let generation = slot.generation;
        let flow = slot.flow.as_mut()?;
        let dir = flow.dir_of(src_lo);
        if new {
            // Each direction's receiver decides how its overlaps resolve.
            let (client, server) = (flow.client().0, flow.server().0);
            if let Some(t) = &mut flow.tcp {
                let policies = [policy.get_key(server), policy.get_key(client)];
                t.configure(policies, opts.reject_different);
            }
        }
        flow.pkts[dir.index()] += 1;
        flow.last = now;
        let (seg, established, invalid) = match (&mut flow.tcp, &p.tcp) {
            (Some(t), Some(h)) => {
                let o = t.packet(dir, h, p.payload, &opts, &mut self.budget);
                if o.closed {
                    self.candidates.push_back((s, generation));
                }
                (o.seg, o.established, o.invalid)
            }
            (Some(t), None) => (ignored(), t.established(), None),
            (None, _) => (ignored(), flow.pkts[0] > 0 && flow.pkts[1] > 0, None),
        };
        Some(FlowRef {
            flow,
            dir,
            new,
            established,
            seg,
            invalid,
            budget: &mut self.budget,
        })
    }
}

fn ignored() -> SegmentResult {
    SegmentResult {
        ignored: true,
        ..SegmentResult::default()
    }
}

impl<T> FlowTable<T> {
    /// Flows tracked.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// True if no flow is tracked.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Stream memory in use (bytes charged to the memcap).
    pub(crate) fn mem(&self) -> usize {
        self.budget.used()
    }

    /// Abandons the streams of every flow whose state `decided` says was decided (see
    /// [`FlowRef::abandon_streams`]), for decisions taken away from a packet of the flow.
    pub(crate) fn abandon_streams_where(&mut self, mut decided: impl FnMut(&T) -> bool) {
        let budget = &mut self.budget;
        for f in self.slots.iter_mut().filter_map(|s| s.flow.as_mut()) {
            if let Some(t) = &mut f.tcp
                && decided(&f.state)
            {
                t.abandon(budget);
            }
        }
    }

    /// The tracked flows, in no particular order.
    #[cfg(test)]
    pub(crate) fn flows(&self) -> impl Iterator<Item = &Flow<T>> {
        self.slots.iter().filter_map(|s| s.flow.as_ref())
    }

    /// Removes every flow timed out at `now`, returning how many (for an idle tick; the
    /// table also sweeps by itself, see the module docs).
    #[cfg(test)]
    pub(crate) fn sweep(&mut self, now: Instant) -> usize {
        let now = self.ns(now);
        self.sweep_all(now)
    }

    /// Each tracked flow's state with the time since its last packet, at `now` (for a
    /// pass over the table that frees memory, such as the application layer's reclaim).
    pub(crate) fn idle_states_mut(
        &mut self,
        now: Instant,
    ) -> impl Iterator<Item = (Duration, &mut T)> {
        let now = self.ns(now);
        self.slots.iter_mut().filter_map(move |s| {
            let f = s.flow.as_mut()?;
            Some((
                Duration::from_nanos(now.saturating_sub(f.last)),
                &mut f.state,
            ))
        })
    }

    fn ns(&mut self, now: Instant) -> u64 {
        let base = *self.base.get_or_insert(now);
        now.saturating_duration_since(base)
            .as_nanos()
            .min(u128::from(u64::MAX)) as u64
    }

    fn flow_at(&self, s: u32) -> Option<&Flow<T>> {
        self.slots.get(s as usize).and_then(|x| x.flow.as_ref())
    }

    fn sweep_step(&mut self, now: u64) {
        for _ in 0..SWEEP_STEP {
            if self.slots.is_empty() {
                return;
            }
            if self.cursor >= self.slots.len() {
                self.cursor = 0;
            }
            let s = self.cursor as u32;
            self.cursor += 1;
            if self
                .flow_at(s)
                .is_some_and(|f| f.expired(now, &self.limits))
            {
                self.counters.timed_out.inc();
                self.remove(s);
            }
        }
    }

    fn sweep_all(&mut self, now: u64) -> usize {
        let mut n = 0;
        for s in 0..self.slots.len() as u32 {
            if self
                .flow_at(s)
                .is_some_and(|f| f.expired(now, &self.limits))
            {
                self.counters.timed_out.inc();
                self.remove(s);
                n += 1;
            }
        }
        n
    }

    /// Makes room for one flow in a full table: a sweep (at most once a second), else the
    /// eviction of the oldest evictable flow. False if neither freed a slot.
    fn make_room(&mut self, now: u64) -> bool {
        if self
            .last_sweep
            .is_none_or(|t| now.saturating_sub(t) >= FULL_SWEEP_EVERY)
        {
            self.last_sweep = Some(now);
            self.sweep_all(now);
            if self.map.len() < self.limits.max_flows {
                return true;
            }
        }
        while let Some((s, generation)) = self.candidates.pop_front() {
            let Some(slot) = self.slots.get(s as usize) else {
                continue;
            };
            if slot.generation == generation && slot.flow.as_ref().is_some_and(Flow::evictable) {
                self.remove(s);
                self.counters.evicted.inc();
                return true;
            }
        }
        false
    }

    fn remove(&mut self, s: u32) {
        let Some(slot) = self.slots.get_mut(s as usize) else {
            return;
        };
        let Some(mut f) = slot.flow.take() else {
            return;
        };
        slot.generation = slot.generation.wrapping_add(1);
        if let Some(t) = &mut f.tcp {
            t.release(&mut self.budget);
        }
        self.map.remove(&f.key);
        self.free.push(s);
        self.counters.active.set(self.map.len() as u64);
    }
}

impl<T: Default> FlowTable<T> {
    fn create(&mut self, key: FlowKey, src_lo: bool, p: &FlowPacket<'_>, now: u64) -> Option<u32> {
        if self.map.len() >= self.limits.max_flows && !self.make_room(now) {
            self.counters.overflow.inc();
            return None;
        }
        // With midstream, a first SYN-ACK comes from the server (Suricata's FlowSwap).
        use relay_core::wire::tcp::flags::{ACK, SYN};
        let synack = p.tcp.is_some_and(|h| h.flags & (SYN | ACK) == SYN | ACK);
        let client_lo = if self.limits.midstream && synack {
            !src_lo
        } else {
            src_lo
        };
        let flow = Flow {
            state: T::default(),
            key,
            id: key.flow_id(),
            client_lo,
            pkts: [0; 2],
            last: now,
            tcp: (key.proto == proto::TCP).then(TcpSession::new),
        };
        let s = match self.free.pop() {
            Some(s) => {
                let slot = self.slots.get_mut(s as usize)?;
                slot.flow = Some(flow);
                s
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    flow: Some(flow),
                });
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots.get(s as usize).map_or(0, |x| x.generation);
        self.map.insert(key, s);
        self.candidates.push_back((s, generation));
        if self.candidates.len() > 4 * self.limits.max_flows + 64 {
            // Drop stale entries; amortised over as many creations as entries kept.
            let slots = &self.slots;
            self.candidates.retain(|&(s, g)| {
                slots.get(s as usize).is_some_and(|x| {
                    x.generation == g && x.flow.as_ref().is_some_and(Flow::evictable)
                })
            });
        }
        self.counters.created.inc();
        self.counters.active.set(self.map.len() as u64);
        Some(s)
    }
}
