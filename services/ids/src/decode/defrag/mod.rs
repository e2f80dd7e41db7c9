//! IPv4 and IPv6 fragment reassembly that models the destination host: relayd holds, per
//! train, exactly the fragments it let through, and decides for each new fragment what
//! the host would do with it (hold it, drop it as a duplicate, discard it, drop its whole
//! queue, complete the datagram) before deciding its verdict.
//!
//! Each fragment is first *planned* ([`Defrag::plan`]): nothing changes, and if it would
//! complete a datagram the reassembled packet is written for inspection. Only if the
//! packet is passed is it *committed* ([`Defrag::commit`]), which makes the same decision
//! again and changes the train; if the datagram it completed is dropped, the train is
//! marked ([`Defrag::mark_dropped`]) and every later fragment of it is dropped until the
//! host would have given up on it (its creation plus the host's timeout).
//!
//! The host model (`linux`, the default) is Linux 6.x: `ip_frag_queue` /
//! `ip6_frag_queue` and `inet_frag_queue_insert` (a fragment within one run of held
//! fragments is a duplicate and is dropped, any other overlap drops the whole queue, RFC
//! 5722; a non-last IPv4 fragment is cut to a multiple of 8 bytes, a non-last IPv6 one
//! that is not is discarded; an empty fragment, a last fragment with another end, or
//! bytes past the end drop the queue; an IPv6 first fragment without the whole header
//! chain is discarded, RFC 7112; an IPv4 train that 64 other fragments of its source
//! passed since its last one is restarted, `ipfrag_max_dist`); the queue's timer runs
//! from its creation (`ipfrag_time`, 30 s, `ip6frag_time`, 60 s). The other policies of
//! [`FragPolicy`] resolve overlaps as Suricata's do and discard what they cannot place.
//!
//! Bounds (see [`DefragLimits`]): trains, fragments, and bytes charged (each fragment at
//! what the kernel would charge at most, at least relayd's own use). A fragment past a
//! bound is refused and its train kept; in inline mode it is dropped, so the host never
//! holds what relayd does not.

mod parse;
#[cfg(test)]
mod tests;
mod train;

use crate::hostos::{FragPolicy, PolicyMap};
use parse::{Frag, Parsed, parse};
use relay_core::wire::{Ipv6Packet, ipv4, ipv6};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use train::{Place, Train};

/// The bounds and host model of reassembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefragLimits {
    /// Trains held at once (Suricata: `defrag.trackers`, 65,535).
    pub trains: usize,
    /// Fragments held in all trains (Suricata: `defrag.max-frags`, 65,535).
    pub fragments: usize,
    /// Bytes charged for all trains (default 4 MiB, Linux's `ipfrag_high_thresh`).
    pub memcap: usize,
    /// Age at which an incomplete IPv4 train is gone (Linux's `ipfrag_time`, 30 s).
    pub timeout: Duration,
    /// Age at which an incomplete IPv6 train is gone (Linux's `ip6frag_time`, 60 s).
    pub timeout6: Duration,
    /// Linux's `ipfrag_max_dist` (64; 0: off): an IPv4 train whose next fragment comes
    /// after more than this many fragments of the same source is restarted by the host.
    pub max_dist: u32,
    /// The host's overlap policy per destination.
    pub policy: PolicyMap<FragPolicy>,
}

/// Default of [`DefragLimits::memcap`]: Linux's `ipfrag_high_thresh`.
pub(crate) const DEFAULT_FRAG_MEMCAP: usize = 4 << 20;

impl Default for DefragLimits {
    fn default() -> DefragLimits {
        DefragLimits {
            trains: 65_535,
            fragments: 65_535,
            memcap: DEFAULT_FRAG_MEMCAP,
            timeout: Duration::from_secs(30),
            timeout6: Duration::from_secs(60),
            max_dist: 64,
            policy: PolicyMap::default(),
        }
    }
}

/// In inline mode, how long before and after a train's deadline its fragments are
/// dropped: relayd's clock and the host's timer (jiffies, run a little late) cannot
/// agree to the microsecond, and a fragment the host puts in a new queue must not go
/// into relayd's old train (or the reverse).
pub(crate) const DEADLINE_GUARD: Duration = Duration::from_secs(1);
/// What the kernel's buffer around a fragment costs besides its bytes (`sk_buff` and
/// `skb_shared_info`), for the charge.
const SKB_OVERHEAD: usize = 576;
/// What a queue costs the kernel (`struct ipq` / `frag_queue`, rounded up).
const QUEUE_COST: usize = 256;
/// Largest reassembled IPv4 total length / IPv6 payload length.
const MAX_IP_LEN: usize = 65_535;

/// What reassembly makes of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not a fragment: inspect it as it is.
    Whole,
    /// A fragment the host takes (holds, drops as a duplicate of the same bytes, or lets
    /// drop its queue); `complete`: it completes the datagram, which is in the output
    /// buffer. Commit it if the packet passes.
    Pass { complete: bool },
    /// The host discards it before reassembly (or, inline, it would make the host drop,
    /// restart or re-length its train); trains unchanged. Dropped in inline mode.
    Invalid,
    /// Inline: its train is within [`DEADLINE_GUARD`] of the host's deadline. Dropped.
    Late,
    /// Inline: it overlaps held bytes with other bytes. Dropped, train unchanged.
    Overlap,
    /// Its train's datagram was dropped. Dropped.
    DroppedTrain,
    /// A bound: not held. Dropped in inline mode.
    Refused,
}

/// What reassembly counted (the decoder turns these into counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Fragments refused by a bound.
    pub(crate) refused: u64,
    /// Trains gone at their timeout.
    pub(crate) timeouts: u64,
    /// Fragments that overlapped bytes already held.
    pub(crate) overlaps: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    src: u128,
    dst: u128,
    id: u32,
    /// IPv4 protocol; 0x100 | 6 for IPv6 (whose key has no protocol).
    proto: u16,
    layer: u8,
}

impl Key {
    fn v6(&self) -> bool {
        self.proto == 0x106
    }
}

/// A source's fragment count (Linux's `inet_peer.rid`), kept while it has trains.
#[derive(Debug, Default)]
struct Peer {
    rid: u32,
    trains: u32,
}

/// What the host does with a fragment, decided against a train's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Invalid,
    /// Overlap with other bytes, refused in inline mode.
    Overlap,
    /// Dropped as a duplicate; the train's length and last flag become these.
    Dup {
        len: usize,
        last_in: bool,
    },
    /// The host drops its queue.
    Kill {
        overlap: bool,
    },
    /// Inserted `[off, end)`; the train's length and last flag become these.
    Free {
        end: usize,
        len: usize,
        last_in: bool,
        overlap: bool,
    },
}

/// Fragment trains of one detector.
#[derive(Debug)]
pub(crate) struct Defrag {
    limits: DefragLimits,
    drop_invalid: bool,
    trains: HashMap<Key, Train>,
    /// Per family (IPv4, IPv6), trains by creation time (the oldest at the front);
    /// entries of trains gone or restarted are skipped.
    order: [VecDeque<(Instant, Key)>; 2],
    peers: HashMap<(u128, u8), Peer>,
    mem: usize,
    frags: usize,
    /// A copy of a train, to build a datagram a planned fragment would complete.
    scratch: Train,
    pub(crate) counts: Counts,
}

impl Defrag {
    /// No trains yet; `drop_invalid`: inline mode (see [`Step`]).
    pub(crate) fn new(limits: DefragLimits, drop_invalid: bool) -> Defrag {
        Defrag {
            limits,
            drop_invalid,
            trains: HashMap::new(),
            order: [VecDeque::new(), VecDeque::new()],
            peers: HashMap::new(),
            mem: 0,
            frags: 0,
            scratch: Train::new(FragPolicy::Linux, Instant::now()),
            counts: Counts::default(),
        }
    }

    /// Trains held now (dropped ones included).
    pub(crate) fn trains(&self) -> usize {
        self.trains.len()
    }

    /// Bytes charged now.
    pub(crate) fn mem(&self) -> usize {
        self.mem
    }

    fn timeout(&self, v6: bool) -> Duration {
        let t = if v6 {
            self.limits.timeout6
        } else {
            self.limits.timeout
        };
        if self.drop_invalid {
            t + DEADLINE_GUARD
        } else {
            t
        }
    }

    fn remove(&mut self, key: &Key) -> Option<Train> {
        let t = self.trains.remove(key)?;
        self.mem = self.mem.saturating_sub(t.charged);
        self.frags = self.frags.saturating_sub(t.nfrags);
        if let Some(p) = self
            .peers
            .get_mut(&(key.src, key.layer))
            .filter(|_| !key.v6())
        {
            p.trains = p.trains.saturating_sub(1);
            if p.trains == 0 {
                self.peers.remove(&(key.src, key.layer));
            }
        }
        Some(t)
    }

    fn expire(&mut self, now: Instant) {
        for fam in 0..2 {
            let life = self.timeout(fam == 1);
            while let Some(&(at, key)) = self.order[fam].front() {
                if now.saturating_duration_since(at) < life {
                    break;
                }
                self.order[fam].pop_front();
                if self.trains.get(&key).is_some_and(|t| t.created == at)
                    && self.remove(&key).is_some()
                {
                    self.counts.timeouts += 1;
                }
            }
            // Entries of trains completed or dropped do not pile up past the trains held.
            if self.order[fam].len() > 2 * self.limits.trains.max(1) {
                let trains = &self.trains;
                self.order[fam].retain(|(at, k)| trains.get(k).is_some_and(|t| t.created == *at));
            }
        }
    }

    /// Decides what the host would do with `pkt` (an IP packet of tunnel layer `layer`)
    /// at `now`, changing no train. On `Pass { complete: true }` the reassembled packet
    /// is in `out` (cleared first).
    pub(crate) fn plan(&mut self, pkt: &[u8], layer: u8, now: Instant, out: &mut Vec<u8>) -> Step {
        self.run(pkt, layer, now, Some(out))
    }

    /// Applies what [`Defrag::plan`] decided for `pkt`, now that the packet is passed.
    pub(crate) fn commit(&mut self, pkt: &[u8], layer: u8, now: Instant) {
        let _ = self.run(pkt, layer, now, None);
    }

    /// The datagram `pkt` completed was dropped: its train is kept, empty and marked,
    /// until the host's deadline, and its later fragments are dropped.
    pub(crate) fn mark_dropped(&mut self, pkt: &[u8], layer: u8) {
        let Parsed::Frag(f) = parse(pkt, layer) else {
            return;
        };
        if f.off == 0 && !f.more {
            // An atomic fragment is no part of the train that shares its key.
            return;
        }
        let Some(t) = self.trains.get_mut(&f.key) else {
            return;
        };
        t.dropped = true;
        t.clear();
        let before = t.charged;
        self.frags = self.frags.saturating_sub(t.nfrags);
        t.nfrags = 0;
        t.est = QUEUE_COST;
        t.charged = t.own_mem().max(t.est);
        self.mem = self.mem.saturating_sub(before) + t.charged;
    }

    /// The policy of the host `f` is for.
    fn policy(&self, f: &Frag<'_>) -> FragPolicy {
        if f.v6 {
            self.limits.policy.get_v6(f.key.dst)
        } else {
            // The IPv4 address is in the key's low 32 bits.
            self.limits.policy.get_v4(f.key.dst as u32)
        }
    }

    /// `plan` (with `out`) or `commit` (without).
    fn run(&mut self, pkt: &[u8], layer: u8, now: Instant, out: Option<&mut Vec<u8>>) -> Step {
        let commit = out.is_none();
        let f = match parse(pkt, layer) {
            Parsed::Not => return Step::Whole,
            Parsed::Invalid => return Step::Invalid,
            Parsed::Frag(f) => f,
        };
        self.expire(now);
        if f.off == 0 && !f.more {
            // An IPv6 atomic fragment: the host takes it as a whole packet, no queue.
            if let Some(out) = out {
                alone(&f, out);
            }
            return Step::Pass { complete: true };
        }
        // Linux discards, keeping the queue, an IPv6 fragment past the largest payload.
        if f.v6 && f.off + f.payload.len() > MAX_IP_LEN {
            return Step::Invalid;
        }
        // An IPv4 datagram that cannot fit: Linux 6.6 drops the queue at reassembly, later
        // kernels at this fragment. Inline it never reaches the host, so both agree.
        if !f.v6 && self.drop_invalid && f.hdr.len() + f.off + f.payload.len() > MAX_IP_LEN {
            return Step::Invalid;
        }
        let life = if f.v6 {
            self.limits.timeout6
        } else {
            self.limits.timeout
        };
        let policy = self.policy(&f);
        let fresh = Train::new(policy, now);
        let held = self.trains.get(&f.key);
        if let Some(t) = held {
            if t.dropped {
                return Step::DroppedTrain;
            }
            if self.drop_invalid && now + DEADLINE_GUARD >= t.created + life {
                return Step::Late;
            }
        }
        // Linux's `ip_frag_too_far`: the peer's count goes up for every IPv4 fragment
        // that reaches a queue; a train with fragments whose count moved on by more than
        // `ipfrag_max_dist` since its last one is restarted. relayd counts a source's
        // fragments to every destination, so it never counts fewer than the host.
        let reinit = self.too_far(&f, layer, policy, held);
        if reinit && self.drop_invalid {
            return Step::Invalid;
        }
        let base = match held {
            Some(t) if !reinit => t,
            _ => &fresh,
        };
        let class = classify(base, &f, self.drop_invalid);
        match class {
            Class::Invalid => return Step::Invalid,
            Class::Overlap => {
                self.counts.overlaps += u64::from(!commit);
                return Step::Overlap;
            }
            Class::Dup { .. }
            | Class::Kill { overlap: true }
            | Class::Free { overlap: true, .. }
                if !commit =>
            {
                self.counts.overlaps += 1;
            }
            _ => {}
        }
        // Inline, only a fragment the host inserts, or an exact duplicate that changes
        // nothing, passes: one that would make the host drop its queue (an overlap with
        // the same bytes, an empty fragment, another end) or change a train's length
        // (a duplicate last fragment) is dropped instead, so that both sides stay as they
        // are without relying on the model of how the host tears a train down.
        if self.drop_invalid {
            match class {
                Class::Kill { .. } => return Step::Invalid,
                Class::Dup { len, last_in } if (len, last_in) != (base.len, base.last_in) => {
                    return Step::Invalid;
                }
                _ => {}
            }
        }
        if let Class::Free { end, .. } = class
            && !commit
            && self.over_bounds(base, held.is_none(), &f, end)
        {
            self.counts.refused += 1;
            return Step::Refused;
        }
        // Whether the train would be whole, and whether the datagram fits its length field
        // (Linux drops the queue at reassembly otherwise).
        let (complete, too_big) = completes(base, &f, class);
        let had = held.is_some();
        if let Some(out) = out {
            if complete {
                let mut s = std::mem::replace(&mut self.scratch, Train::new(policy, now));
                s.copy_from(base);
                take(&mut s, &f, class);
                s.build(out);
                self.scratch = s;
            }
            return Step::Pass { complete };
        }
        self.insert(&f, layer, now, policy, class, (had, reinit, too_big))
    }

    /// Commits fragment `f` of class `class` to its train (`had`: a train was held;
    /// `reinit`: it restarts; `too_big`: the datagram it completes cannot fit, so the
    /// host drops the train). Counts the source's IPv4 fragments.
    fn insert(
        &mut self,
        f: &Frag<'_>,
        layer: u8,
        now: Instant,
        policy: FragPolicy,
        class: Class,
        (had, reinit, too_big): (bool, bool, bool),
    ) -> Step {
        if !f.v6 {
            let (src, layer) = (f.key.src, layer);
            if let Some(p) = self.peers.get_mut(&(src, layer)) {
                p.rid = p.rid.wrapping_add(1);
            }
        }
        if matches!(class, Class::Kill { .. }) || too_big {
            self.remove(&f.key);
            return Step::Pass { complete: false };
        }
        if !had || reinit {
            if reinit {
                self.remove(&f.key);
            }
            let fam = usize::from(f.key.v6());
            self.order[fam].push_back((now, f.key));
            if !f.v6 {
                self.peers.entry((f.key.src, layer)).or_default().trains += 1;
            }
            let mut t = Train::new(policy, now);
            t.est = QUEUE_COST;
            t.charged = t.est;
            self.mem += t.charged;
            self.trains.insert(f.key, t);
        }
        let rid = match f.v6 {
            true => 0,
            false => self.peers.get(&(f.key.src, layer)).map_or(0, |p| p.rid),
        };
        let Some(t) = self.trains.get_mut(&f.key) else {
            return Step::Pass { complete: false };
        };
        t.rid = rid;
        let (before, nfrags) = (t.charged, t.nfrags);
        take(t, f, class);
        t.charged = t.own_mem().max(t.est);
        // Linux reassembles only after an insertion, not after a duplicate.
        let whole = matches!(class, Class::Free { .. }) && t.whole();
        self.mem = self.mem.saturating_sub(before) + t.charged;
        self.frags = self.frags + t.nfrags - nfrags.min(t.nfrags);
        if whole {
            self.remove(&f.key);
        }
        Step::Pass { complete: whole }
    }

    /// Linux's `ip_frag_too_far` for IPv4 fragment `f`: the train `held` restarts when its
    /// source's fragment count moved on by more than `ipfrag_max_dist` since its last one.
    fn too_far(&self, f: &Frag<'_>, layer: u8, policy: FragPolicy, held: Option<&Train>) -> bool {
        let rid = self
            .peers
            .get(&(f.key.src, layer))
            .map_or(0, |p| p.rid.wrapping_add(1));
        !f.v6
            && policy == FragPolicy::Linux
            && self.limits.max_dist > 0
            && held.is_some_and(|t| t.nfrags > 0 && rid.wrapping_sub(t.rid) > self.limits.max_dist)
    }

    /// Whether inserting `[f.off, end)` into `t` (`new`: a train not yet held) would pass
    /// a bound.
    fn over_bounds(&self, t: &Train, new: bool, f: &Frag<'_>, end: usize) -> bool {
        if new && self.trains.len() >= self.limits.trains {
            return true;
        }
        if self.frags >= self.limits.fragments {
            return true;
        }
        // What this fragment can add to relayd's own use (the payload buffer at most
        // doubles) and to the kernel's charge.
        let cap = t.data.capacity();
        let own = if end > cap { end.max(2 * cap) - cap } else { 0 }
            + f.hdr.len()
            + 4 * std::mem::size_of::<train::Seg>()
            + 16;
        let est = charge(f) + if new { QUEUE_COST } else { 0 };
        let grow = (t.own_mem() + own)
            .max(t.est + est)
            .saturating_sub(t.charged);
        self.mem + grow > self.limits.memcap
    }
}

/// Whether inserting `f` (of class `class`) into `base` makes the train whole, and
/// whether the datagram then fails to fit its length field (Linux drops the queue at
/// reassembly then): (complete, too big).
fn completes(base: &Train, f: &Frag<'_>, class: Class) -> (bool, bool) {
    match class {
        Class::Free {
            end, len, last_in, ..
        } => {
            let new = end - f.off - overlap_len(base, f.off, end);
            let hdr = if f.off == 0 {
                f.hdr.len()
            } else {
                base.hdr.len()
            };
            let whole = last_in && base.meat + new == len && hdr > 0;
            let fit = fits(f.v6, hdr, len);
            (whole && fit, whole && !fit)
        }
        _ => (false, false),
    }
}

/// What the kernel charges for a fragment at most: its length and the buffer around it,
/// rounded up to a power of two (the sizes its allocators hand out).
fn charge(f: &Frag<'_>) -> usize {
    (f.hdr.len() + f.payload.len() + SKB_OVERHEAD)
        .next_power_of_two()
        .max(1024)
}

/// Whether a datagram of `len` payload bytes after a header of `hdr` bytes fits its
/// length field.
fn fits(v6: bool, hdr: usize, len: usize) -> bool {
    let unfrag = if v6 {
        hdr.saturating_sub(ipv6::HEADER_LEN)
    } else {
        hdr.max(ipv4::HEADER_LEN)
    };
    unfrag + len <= MAX_IP_LEN
}

/// Bytes of `[off, end)` that `t` already holds.
fn overlap_len(t: &Train, off: usize, end: usize) -> usize {
    let i = t.segs.partition_point(|s| s.end <= off);
    t.segs
        .get(i..)
        .unwrap_or(&[])
        .iter()
        .take_while(|s| s.start < end)
        .map(|s| s.end.min(end) - s.start.max(off))
        .sum()
}

/// What the host makes of `f` given train `t` (Linux's `ip_frag_queue` /
/// `ip6_frag_queue` for `linux`; the policy's overlap rule otherwise).
fn classify(t: &Train, f: &Frag<'_>, drop_invalid: bool) -> Class {
    let linux = t.policy == FragPolicy::Linux;
    // The checks on the end come before the overlap checks, and stay even when the
    // fragment then turns out to be a duplicate.
    let (mut len, mut last_in) = (t.len, t.last_in);
    let mut end = f.off + f.payload.len();
    let kill = if linux {
        Class::Kill { overlap: false }
    } else {
        Class::Invalid
    };
    if !f.more {
        if end < len || (last_in && end != len) {
            return kill;
        }
        last_in = true;
        len = end;
    } else {
        if end & 7 != 0 {
            if f.v6 || !linux {
                // Linux sends a parameter problem for IPv6 (RFC 8200); BSD drops it too.
                return Class::Invalid;
            }
            // Linux cuts a non-last IPv4 fragment to a multiple of 8 bytes.
            end &= !7;
        }
        if end > len {
            if last_in {
                return kill;
            }
            len = end;
        }
    }
    if end <= f.off {
        return kill;
    }
    let bytes = f.payload.get(..end - f.off).unwrap_or(&[]);
    let overlap = t.overlaps(f.off, end);
    if overlap && drop_invalid && t.differs(f.off, bytes) {
        return Class::Overlap;
    }
    if !linux {
        return Class::Free {
            end,
            len,
            last_in,
            overlap,
        };
    }
    match t.place(f.off, end) {
        Place::Dup => Class::Dup { len, last_in },
        Place::Overlap => Class::Kill { overlap: true },
        Place::Free => Class::Free {
            end,
            len,
            last_in,
            overlap: false,
        },
    }
}

/// Changes `t` as the host does for `f` classified `class` (only `Dup` and `Free` keep
/// the train).
fn take(t: &mut Train, f: &Frag<'_>, class: Class) {
    match class {
        Class::Dup { len, last_in } => {
            t.len = len;
            t.last_in = last_in;
        }
        Class::Free {
            end, len, last_in, ..
        } => {
            t.len = len;
            t.last_in = last_in;
            let bytes = f.payload.get(..end - f.off).unwrap_or(&[]);
            let hdr_wins = if t.policy == FragPolicy::Linux {
                t.insert_linux(f.off, bytes);
                f.off == 0
            } else {
                t.insert_policy(f.off, bytes)
            };
            if hdr_wins && f.off == 0 {
                t.hdr.clear();
                t.hdr.extend_from_slice(f.hdr);
                if let Some((at, nh)) = f.nh_fix
                    && let Some(b) = t.hdr.get_mut(at)
                {
                    *b = nh;
                }
            }
            t.nfrags += 1;
            t.est += charge(f);
        }
        _ => {}
    }
}

/// An IPv6 atomic fragment as the packet the host takes: without its fragment header.
fn alone(f: &Frag<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(f.hdr);
    if let Some((at, nh)) = f.nh_fix
        && let Some(b) = out.get_mut(at)
    {
        *b = nh;
    }
    out.extend_from_slice(f.payload);
    if out.len() >= ipv6::HEADER_LEN {
        let plen = (out.len() - ipv6::HEADER_LEN).min(MAX_IP_LEN) as u16;
        Ipv6Packet::new_unchecked(&mut out[..]).set_payload_len(plen);
    }
}
