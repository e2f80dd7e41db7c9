//! Flow offload on the XDP datapath: the `flows` map's key and value (bpf/relay_xdp.c's
//! `struct relay_flow` and `struct relay_flow_val`), the keys of an offloaded flow, and
//! the queue thread's [`Offloader`], which carries out the pipeline's offload requests
//! after each round and reads the program's per-queue offload counters once a second.
//!
//! A flow's entry is written once, by the thread whose chain offloaded it (one
//! `BPF_MAP_UPDATE_ELEM` per key, with `BPF_NOEXIST` so that a packet already on its way
//! when the entry went in does not reset it); the program refreshes and counts it on each
//! packet it then passes to the kernel, and deletes it when it has been idle too long or
//! belongs to an older generation of the chain (a reload). docs/xdp.md, "Flow offload".

use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};

use aya::Pod;
use aya::maps::{HashMap, Map, MapData, PerCpuArray};
use relay_core::wire::FiveTuple;
use relay_core::{Counter, OffloadCounters, OffloadScope};
use relay_pipeline::{MAX_OFFLOADS, OffloadRequest};

use crate::error::{XdpError, errno_of, map_error};

/// The `flows` key: a packet's 5-tuple in its own direction, as the program reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Source address, network order; IPv4 in the first 4 bytes, the rest zero.
    pub src: [u8; 16],
    /// Destination address, as `src`.
    pub dst: [u8; 16],
    /// Source port, host order; zero for protocols other than TCP and UDP (the program
    /// reads no other protocol's ports).
    pub sport: u16,
    /// Destination port, as `sport`.
    pub dport: u16,
    /// 4 or 6.
    pub family: u8,
    /// The IP protocol (IPv6: the fixed header's next header; a packet with extension
    /// headers is never looked up).
    pub proto: u8,
    /// Zero.
    pub pad: [u8; 2],
}

// SAFETY: repr(C), integers and byte arrays only, no implicit padding (40 bytes).
unsafe impl Pod for FlowKey {}
const _: () = assert!(std::mem::size_of::<FlowKey>() == 40);

/// The `flows` value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowValue {
    /// When the flow last passed (`CLOCK_MONOTONIC` nanoseconds, the program's
    /// `bpf_ktime_get_ns`); relayd writes its insertion time.
    pub last_ns: u64,
    /// Packets the entry passed to the kernel.
    pub packets: u64,
    /// Their IP bytes.
    pub bytes: u64,
    /// The generation of the chain that offloaded the flow ([`crate::program::Program::set_generation`]).
    pub generation: u32,
    /// Zero.
    pub pad: u32,
}

// SAFETY: repr(C), integers only, no implicit padding (32 bytes).
unsafe impl Pod for FlowValue {}
const _: () = assert!(std::mem::size_of::<FlowValue>() == 32);

/// One rx queue's slot of the `offload_stats` per-CPU array (`struct relay_qstat`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueOffloadStats {
    /// Packets of offloaded flows passed to the kernel.
    pub passed: u64,
    /// Their IP bytes.
    pub bytes: u64,
    /// Entries deleted because they were idle for longer than `offload_idle`.
    pub expired: u64,
    /// Entries deleted because a reload changed the chain since they were written.
    pub revoked: u64,
}

// SAFETY: repr(C), four u64.
unsafe impl Pod for QueueOffloadStats {}

impl QueueOffloadStats {
    fn add(self, o: QueueOffloadStats) -> QueueOffloadStats {
        QueueOffloadStats {
            passed: self.passed.wrapping_add(o.passed),
            bytes: self.bytes.wrapping_add(o.bytes),
            expired: self.expired.wrapping_add(o.expired),
            revoked: self.revoked.wrapping_add(o.revoked),
        }
    }
}

impl FlowKey {
    /// The key the program builds for packets of `t`'s direction, or `None` for a tuple
    /// that must not be offloaded: anything but TCP or UDP with ports. The program reads
    /// no ports of other protocols, so their key would cover every flow of the protocol
    /// between the two hosts (one ICMP exchange or SCTP association voted would pass all
    /// the others); a later fragment has no ports.
    pub fn of(t: &FiveTuple) -> Option<FlowKey> {
        let (src, family) = addr(t.src);
        let (dst, dfamily) = addr(t.dst);
        if family != dfamily {
            return None;
        }
        let (sport, dport) = match t.proto {
            6 | 17 => t.ports?,
            _ => return None,
        };
        Some(FlowKey {
            src,
            dst,
            sport,
            dport,
            family,
            proto: t.proto,
            pad: [0; 2],
        })
    }

    /// The keys an offload of `t` with `scope` covers: `t`'s direction, and for
    /// [`OffloadScope::Both`] the reverse one.
    pub fn keys(t: &FiveTuple, scope: OffloadScope) -> Option<(FlowKey, Option<FlowKey>)> {
        let one = FlowKey::of(t)?;
        let other = match scope {
            OffloadScope::Direction => None,
            OffloadScope::Both => FlowKey::of(&t.reversed()),
        };
        Some((one, other))
    }
}

fn addr(a: IpAddr) -> ([u8; 16], u8) {
    let mut b = [0u8; 16];
    match a {
        IpAddr::V4(a) => {
            b[..4].copy_from_slice(&a.octets());
            (b, 4)
        }
        IpAddr::V6(a) => (a.octets(), 6),
    }
}

/// What the queue thread saw of one offloaded packet ([`Offloader::note`]).
#[derive(Debug, Clone, Copy)]
struct Note {
    egress: FiveTuple,
    reply_here: bool,
    refused: bool,
}

/// `CLOCK_MONOTONIC` in nanoseconds: the program's clock (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Where an [`Offloader`] writes flows and reads its queue's counters: the program's maps
/// ([`FlowMaps`]) or, in memory tests, a stand-in.
pub trait FlowSink: Send {
    /// Inserts `key` if absent: `Ok(true)` inserted, `Ok(false)` already there.
    fn insert(&mut self, key: &FlowKey, value: &FlowValue) -> Result<bool, XdpError>;
    /// The program's offload counters of this sink's rx queue, summed over CPUs.
    fn queue_stats(&self) -> Result<QueueOffloadStats, XdpError>;
}

/// A queue thread's handles on the program's `flows` and `offload_stats` maps (its own
/// file descriptors, so that no lock is shared with the control plane).
pub struct FlowMaps {
    flows: HashMap<MapData, FlowKey, FlowValue>,
    stats: PerCpuArray<MapData, QueueOffloadStats>,
    rx_queue: u32,
}

impl std::fmt::Debug for FlowMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowMaps")
            .field("rx_queue", &self.rx_queue)
            .finish()
    }
}

/// A map of the loaded program, opened anew from a duplicate of its descriptor.
pub(crate) fn reopen<T: TryFrom<Map, Error = aya::maps::MapError>>(
    fd: &OwnedFd,
    name: &'static str,
) -> Result<T, XdpError> {
    let dup = fd.as_fd().try_clone_to_owned().map_err(|e| XdpError::Map {
        map: name,
        op: "duplicating its descriptor".into(),
        detail: e.to_string(),
    })?;
    let data = MapData::from_fd(dup).map_err(|e| map_error(name, "opening".into(), e))?;
    let map = Map::from_map_data(data).map_err(|e| map_error(name, "opening".into(), e))?;
    T::try_from(map).map_err(|e| map_error(name, "opening".into(), e))
}

impl FlowMaps {
    /// Handles on `flows` (descriptor `flows`) and on rx queue `rx_queue`'s slot of
    /// `offload_stats` (descriptor `stats`).
    pub(crate) fn open(
        flows: &OwnedFd,
        stats: &OwnedFd,
        rx_queue: u32,
    ) -> Result<FlowMaps, XdpError> {
        Ok(FlowMaps {
            flows: reopen(flows, "flows")?,
            stats: reopen(stats, "offload_stats")?,
            rx_queue,
        })
    }
}

/// `BPF_NOEXIST`: insert only.
const NOEXIST: u64 = 1;

/// `BPF_MAP_LOOKUP_BATCH`.
const LOOKUP_BATCH: libc::c_long = 24;

/// The batch part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Entries read per `BPF_MAP_LOOKUP_BATCH`.
const BATCH: usize = 4096;

/// Calls `f` with every entry of the `flows` map `fd`, a few thousand per system call
/// (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6): the status walks the whole map while holding the
/// daemon's lock, which one `get_next_key` and one lookup per entry would make long.
/// Entries inserted or deleted meanwhile may be missed or seen; none twice.
pub(crate) fn walk(fd: &OwnedFd, mut f: impl FnMut(&FlowKey, &FlowValue)) -> Result<(), XdpError> {
    use std::os::fd::AsRawFd;
    let mut keys = vec![FlowKey::default(); BATCH];
    let mut values = vec![FlowValue::default(); BATCH];
    // A hash map's batch token is a bucket index (u32).
    let (mut token_in, mut token_out) = (0u32, 0u32);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &token_in as *const u32 as u64
            },
            out_batch: &mut token_out as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: attr points at buffers of `count` keys and values of the map's sizes
        // (FlowKey and FlowValue are the map's key and value), and at two u32 tokens, all
        // alive for the call; the kernel writes only within them.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>() as u32,
            )
        };
        let err = (rc < 0).then(std::io::Error::last_os_error);
        let n = (attr.count as usize).min(BATCH);
        for (k, v) in keys.iter().zip(&values).take(n) {
            f(k, v);
        }
        match err {
            None => {}
            // The end of the map.
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Some(e) => {
                return Err(XdpError::Map {
                    map: "flows",
                    op: "reading its entries".into(),
                    detail: e.to_string(),
                });
            }
        }
        token_in = token_out;
        first = false;
    }
}

impl FlowSink for FlowMaps {
    fn insert(&mut self, key: &FlowKey, value: &FlowValue) -> Result<bool, XdpError> {
        match self.flows.insert(key, value, NOEXIST) {
            Ok(()) => Ok(true),
            Err(e) if errno_of(&e) == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(map_error("flows", "inserting an offloaded flow".into(), e)),
        }
    }

    fn queue_stats(&self) -> Result<QueueOffloadStats, XdpError> {
        let per_cpu = self.stats.get(&self.rx_queue, 0).map_err(|e| {
            map_error(
                "offload_stats",
                format!("reading rx queue {}", self.rx_queue),
                e,
            )
        })?;
        Ok(per_cpu
            .iter()
            .fold(QueueOffloadStats::default(), |a, b| a.add(*b)))
    }
}

/// A queue thread's side of offload: carries out the pipeline's requests after each round
/// and keeps the queue's [`OffloadCounters`] (flows by reason, failed; skipped packets and
/// bytes, revoked, read from the program).
pub struct Offloader {
    sink: Box<dyn FlowSink>,
    counters: OffloadCounters,
    /// Entries deleted for idleness (also in `counters.revoked`), by name in the queue's
    /// datapath counters.
    expired: Counter,
    /// The generation of the chain the thread runs: its entries carry it.
    generation: u32,
    /// Keys written this round (dedup: a round often holds several packets of a flow
    /// that voted before its entry was in).
    written: Vec<FlowKey>,
    /// What the thread saw of this round's offloaded packets, in the pipeline's order
    /// ([`Offloader::note`]).
    notes: Vec<Note>,
    /// The program's counters as last read.
    seen: QueueOffloadStats,
}

impl std::fmt::Debug for Offloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offloader")
            .field("generation", &self.generation)
            .finish()
    }
}

impl Offloader {
    /// An offloader writing to `sink`, counting in `counters` and `expired`, for a chain
    /// of `generation`.
    pub fn new(
        sink: Box<dyn FlowSink>,
        counters: OffloadCounters,
        expired: Counter,
        generation: u32,
    ) -> Offloader {
        Offloader {
            sink,
            counters,
            expired,
            generation,
            written: Vec::with_capacity(2 * MAX_OFFLOADS),
            notes: Vec::with_capacity(MAX_OFFLOADS),
            seen: QueueOffloadStats::default(),
        }
    }

    /// From now on, entries are written for a chain of `generation`.
    pub fn set_generation(&mut self, generation: u32) {
        self.generation = generation;
    }

    /// Notes what the thread knows of an offloaded packet that the pipeline does not,
    /// for its request (matched by `egress`, the tuple it left with, in order):
    /// - `reply_here`: the flow's replies may arrive on this port's interface (the packet
    ///   leaves by it, or its egress is unknown). Else a reply's entry would never be
    ///   looked up: the replies arrive on the egress interface, which another program (or
    ///   none) serves, so only the packet's own direction is written;
    /// - `refused`: a service changed its addresses, ports or protocol, which the kernel
    ///   would not do for the flow's later packets, or the program never looks such a
    ///   packet up (IPv4 options, IPv6 extension headers): the request is refused.
    ///
    /// A request without a note (a held packet's) gets both directions, if voted.
    pub fn note(&mut self, egress: FiveTuple, reply_here: bool, refused: bool) {
        if self.notes.len() < MAX_OFFLOADS {
            self.notes.push(Note {
                egress,
                reply_here,
                refused,
            });
        }
    }

    /// Carries out one round's offload requests at `now_ns` (the program's clock): one
    /// insert per key not written already this round, each flow counted once by reason
    /// when one of its keys went in, `failed` when the map refused one (or the flow was
    /// rewritten).
    pub fn carry_out(&mut self, requests: impl Iterator<Item = OffloadRequest>, now_ns: u64) {
        self.written.clear();
        let value = FlowValue {
            last_ns: now_ns,
            generation: self.generation,
            ..FlowValue::default()
        };
        let mut next = 0;
        for r in requests {
            let note = self
                .notes
                .get(next)
                .filter(|n| n.egress == r.tuple)
                .copied();
            if note.is_some() {
                next += 1;
            }
            if note.is_some_and(|n| n.refused) {
                self.counters.failed.inc();
                continue;
            }
            let Some((one, mut other)) = FlowKey::keys(&r.tuple, r.offload.scope) else {
                // Nothing the program would look up (a later fragment): stays inline.
                continue;
            };
            if note.is_some_and(|n| !n.reply_here) {
                other = None;
            }
            let (mut inserted, mut failed) = (false, false);
            for key in std::iter::once(one).chain(other) {
                if self.written.contains(&key) {
                    continue;
                }
                match self.sink.insert(&key, &value) {
                    Ok(new) => {
                        inserted |= new;
                        self.written.push(key);
                    }
                    Err(e) => {
                        failed = true;
                        tracing::debug!("offloading a flow: {e}");
                    }
                }
            }
            if failed {
                self.counters.failed.inc();
            } else if inserted {
                self.counters.offloaded(r.offload.reason);
            }
        }
        self.notes.clear();
    }

    /// Adds what the program counted for the queue since the last call: packets and bytes
    /// that skipped it, entries expired and revoked. Between rounds, at most once a second.
    pub fn read_stats(&mut self) {
        let Ok(now) = self.sink.queue_stats() else {
            return;
        };
        let d = |new: u64, old: u64| new.wrapping_sub(old);
        let c = &self.counters;
        c.skipped_packets.add(d(now.passed, self.seen.passed));
        c.skipped_bytes.add(d(now.bytes, self.seen.bytes));
        let expired = d(now.expired, self.seen.expired);
        self.expired.add(expired);
        c.revoked
            .add(expired.wrapping_add(d(now.revoked, self.seen.revoked)));
        self.seen = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::{Offload, OffloadReason};
    use std::sync::{Arc, Mutex};

    fn tuple(src: &str, dst: &str, proto: u8, ports: Option<(u16, u16)>) -> FiveTuple {
        FiveTuple {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto,
            ports,
        }
    }

    #[test]
    fn keys_are_the_programs_in_both_directions_for_v4_and_v6() {
        let t = tuple("10.0.1.1", "10.0.2.2", 17, Some((40000, 5000)));
        let (k, back) = FlowKey::keys(&t, OffloadScope::Both).unwrap();
        assert_eq!(&k.src[..4], &[10, 0, 1, 1]);
        assert_eq!(&k.src[4..], &[0; 12]);
        assert_eq!(&k.dst[..4], &[10, 0, 2, 2]);
        assert_eq!((k.sport, k.dport, k.family, k.proto), (40000, 5000, 4, 17));
        let back = back.unwrap();
        assert_eq!((back.src, back.dst), (k.dst, k.src));
        assert_eq!((back.sport, back.dport), (5000, 40000));
        assert_eq!(
            FlowKey::keys(&t, OffloadScope::Direction).unwrap(),
            (k, None)
        );

        let t6 = tuple("fd00:1::1", "fd00:2::2", 6, Some((1, 443)));
        let (k6, back6) = FlowKey::keys(&t6, OffloadScope::Both).unwrap();
        assert_eq!(k6.family, 6);
        assert_eq!(
            k6.src,
            "fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(back6.unwrap().dport, 1);
        // The key's bytes as the program lays out struct relay_flow.
        // SAFETY: FlowKey is Pod (repr(C), no padding).
        let raw: [u8; 40] = unsafe { std::mem::transmute(k) };
        assert_eq!(&raw[32..34], &40000u16.to_ne_bytes());
        assert_eq!(&raw[36..40], &[4, 17, 0, 0]);
    }

    #[test]
    fn ports_only_for_tcp_and_udp_and_none_without_them() {
        // ICMP, SCTP: the program reads no ports, so a key would cover every flow of the
        // protocol between the two hosts: none.
        let icmp = tuple("10.0.1.1", "10.0.2.2", 1, None);
        assert_eq!(FlowKey::of(&icmp), None);
        let sctp = tuple("10.0.1.1", "10.0.2.2", 132, Some((1, 2)));
        assert_eq!(FlowKey::of(&sctp), None);
        // A later UDP fragment: nothing the program looks up.
        assert_eq!(FlowKey::of(&tuple("10.0.1.1", "10.0.2.2", 17, None)), None);
    }

    /// A map in memory: what was inserted, what fails, and counters to hand out.
    #[derive(Default)]
    struct Fake {
        map: Vec<(FlowKey, FlowValue)>,
        fail: bool,
        stats: QueueOffloadStats,
    }

    struct Sink(Arc<Mutex<Fake>>);

    impl FlowSink for Sink {
        fn insert(&mut self, key: &FlowKey, value: &FlowValue) -> Result<bool, XdpError> {
            let mut f = self.0.lock().unwrap();
            if f.fail {
                return Err(XdpError::Map {
                    map: "flows",
                    op: "inserting".into(),
                    detail: "ENOMEM".into(),
                });
            }
            if f.map.iter().any(|(k, _)| k == key) {
                return Ok(false);
            }
            f.map.push((*key, *value));
            Ok(true)
        }
        fn queue_stats(&self) -> Result<QueueOffloadStats, XdpError> {
            Ok(self.0.lock().unwrap().stats)
        }
    }

    fn offloader() -> (Offloader, Arc<Mutex<Fake>>, OffloadCounters, Counter) {
        let fake = Arc::new(Mutex::new(Fake::default()));
        let c = OffloadCounters::default();
        let expired = Counter::new();
        let o = Offloader::new(Box::new(Sink(fake.clone())), c.clone(), expired.clone(), 7);
        (o, fake, c, expired)
    }

    fn req(t: FiveTuple, offload: Offload) -> OffloadRequest {
        OffloadRequest {
            tuple: t,
            offload,
            mark: None,
            reply: None,
            state: None,
            nat: false,
        }
    }

    #[test]
    fn each_flow_is_written_once_and_counted_once_by_reason() {
        let (mut o, fake, c, _) = offloader();
        let a = tuple("10.0.1.1", "10.0.2.2", 17, Some((1, 2)));
        let b = tuple("fd00:1::1", "fd00:2::2", 6, Some((3, 4)));
        let both = Offload::both(OffloadReason::Decided);
        let one = Offload::direction(OffloadReason::StreamDepth);
        // Three packets of `a` in one round, the reply of `a`, and one direction of `b`.
        let reqs = [
            req(a, both),
            req(a, both),
            req(a.reversed(), both),
            req(b, one),
        ];
        o.carry_out(reqs.into_iter(), 1000);
        let f = fake.lock().unwrap();
        assert_eq!(f.map.len(), 3, "a both ways, b one way: {:?}", f.map);
        assert!(
            f.map
                .iter()
                .all(|(_, v)| v.generation == 7 && v.last_ns == 1000 && v.packets == 0)
        );
        drop(f);
        assert_eq!(c.flows[OffloadReason::Decided.index()].get(), 1);
        assert_eq!(c.flows[OffloadReason::StreamDepth.index()].get(), 1);
        assert_eq!(c.failed.get(), 0);
        // A straggler of `a` in a later round finds its entry: not counted again.
        o.carry_out([req(a, both)].into_iter(), 2000);
        assert_eq!(c.total(), 2);
        assert_eq!(fake.lock().unwrap().map.len(), 3);
    }

    #[test]
    fn refused_inserts_and_rewritten_flows_count_failed() {
        let (mut o, fake, c, _) = offloader();
        let a = tuple("10.0.1.1", "10.0.2.2", 17, Some((1, 2)));
        fake.lock().unwrap().fail = true;
        o.carry_out([req(a, Offload::both(OffloadReason::Pass))].into_iter(), 1);
        assert_eq!((c.failed.get(), c.total()), (1, 0));
        fake.lock().unwrap().fail = false;
        o.note(a, true, true);
        o.carry_out([req(a, Offload::both(OffloadReason::Pass))].into_iter(), 1);
        assert_eq!((c.failed.get(), c.total()), (2, 0));
        assert!(fake.lock().unwrap().map.is_empty());
        // A note lasts one round.
        o.carry_out([req(a, Offload::both(OffloadReason::Pass))].into_iter(), 1);
        assert_eq!(c.total(), 1);
    }

    #[test]
    fn a_replys_entry_is_written_only_where_replies_can_arrive() {
        let (mut o, fake, c, _) = offloader();
        let a = tuple("10.0.1.1", "10.0.2.2", 17, Some((1, 2)));
        let b = tuple("10.0.1.1", "10.0.2.3", 17, Some((1, 2)));
        let h = tuple("10.0.1.1", "10.0.2.4", 17, Some((1, 2)));
        let both = Offload::both(OffloadReason::Decided);
        // a leaves by another interface: its replies arrive there. b leaves by this one
        // (or to an unknown next hop). h has no note (a held packet's request).
        o.note(a, false, false);
        o.note(a, false, false);
        o.note(b, true, false);
        let reqs = [req(a, both), req(a, both), req(h, both), req(b, both)];
        o.carry_out(reqs.into_iter(), 1);
        let keys: Vec<FlowKey> = fake.lock().unwrap().map.iter().map(|e| e.0).collect();
        let want = [
            FlowKey::of(&a),
            FlowKey::of(&h),
            FlowKey::of(&h.reversed()),
            FlowKey::of(&b),
            FlowKey::of(&b.reversed()),
        ];
        assert_eq!(keys, want.map(Option::unwrap));
        assert_eq!(c.total(), 3);
    }

    #[test]
    fn program_counters_are_added_as_deltas() {
        let (mut o, fake, c, expired) = offloader();
        fake.lock().unwrap().stats = QueueOffloadStats {
            passed: 10,
            bytes: 1000,
            expired: 1,
            revoked: 2,
        };
        o.read_stats();
        o.read_stats();
        assert_eq!(
            (
                c.skipped_packets.get(),
                c.skipped_bytes.get(),
                c.revoked.get()
            ),
            (10, 1000, 3)
        );
        assert_eq!(expired.get(), 1);
        fake.lock().unwrap().stats.passed = 15;
        o.read_stats();
        assert_eq!(c.skipped_packets.get(), 15);
    }
}
