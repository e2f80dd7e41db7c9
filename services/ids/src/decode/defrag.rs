//! IPv4 and IPv6 fragment reassembly for inspection (Suricata's defrag.c): fragments are
//! kept per train (addresses, identification, IPv4 protocol, tunnel layer) until the
//! train is whole, then the reassembled packet is written to the caller's buffer.
//!
//! Bounds (see [`DefragLimits`]): trains held at once, fragments held in all, bytes held
//! in all (each train's buffers count at their capacity), a train's age (a train not
//! whole within `timeout` of its first fragment is dropped), and a reassembled packet's
//! size (65,535 bytes of IPv4 total length or IPv6 payload length, as Suricata's
//! `IPV4_FRAG_PKT_TOO_LARGE` / `IPV6_FRAG_PKT_TOO_LARGE`). A fragment past a bound is
//! refused and counted; a refused train is dropped whole. Per fragment the work is linear
//! in the number of byte ranges the train has (at most its fragments).
//!
//! Overlaps are resolved first-come (Suricata's `first` policy): a byte once received is
//! not overwritten. Suricata's default policy is `bsd`, which prefers a later fragment
//! that starts before the one it overlaps; the two differ only on overlapping fragments
//! with different data (an evasion attempt, which [`Counts::overlaps`] counts).

use relay_core::wire::ipv6::{FRAGMENT_HEADER_LEN, FragmentHeader};
use relay_core::wire::{Ipv4Packet, Ipv6Packet, ipv4, ipv6};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The bounds of reassembly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefragLimits {
    /// Trains held at once (Suricata: `defrag.trackers`, 65,535).
    pub trains: usize,
    /// Fragments held in all trains (Suricata: `defrag.max-frags`, 65,535).
    pub fragments: usize,
    /// Bytes held in all trains (Suricata: `defrag.memcap`, 32 MiB).
    pub memcap: usize,
    /// Age at which an incomplete train is dropped (Suricata: `defrag.timeout`, 60 s).
    pub timeout: Duration,
}

impl Default for DefragLimits {
    fn default() -> DefragLimits {
        DefragLimits {
            trains: 65_535,
            fragments: 65_535,
            memcap: 32 << 20,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Largest reassembled IPv4 total length / IPv6 payload length.
const MAX_IP_LEN: usize = 65_535;
/// IPv6 extension headers walked to find the fragment header.
const MAX_EXT_HEADERS: usize = 8;

/// What reassembly did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not a fragment (or not parseable as one): inspect it as it is.
    Whole,
    /// A fragment, held until its train is whole.
    Held,
    /// The fragment completed its train: the reassembled packet is in the output buffer.
    Done,
    /// The fragment was refused (a bound, an impossible offset); its train is dropped.
    Refused,
}

/// What reassembly counted (the detector turns these into counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Packets reassembled.
    pub(crate) reassembled: u64,
    /// Fragments refused by a bound.
    pub(crate) refused: u64,
    /// Trains dropped incomplete at their timeout.
    pub(crate) timeouts: u64,
    /// Fragments that overlapped bytes already held.
    pub(crate) overlaps: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: u128,
    dst: u128,
    id: u32,
    /// IPv4 protocol; 0x100 | 6 for IPv6 (whose key has no protocol).
    proto: u16,
    layer: u8,
}

#[derive(Debug, Default)]
struct Train {
    /// The first fragment's header (IPv4 header; IPv6 header and the extension headers
    /// before the fragment header, with the next header that named it already fixed).
    hdr: Vec<u8>,
    /// Reassembled payload (from fragment offset 0).
    data: Vec<u8>,
    /// Received byte ranges of `data`, sorted, merged.
    ranges: Vec<(usize, usize)>,
    /// Payload length once the last fragment came.
    total: Option<usize>,
    frags: usize,
    created: Option<Instant>,
}

impl Train {
    fn mem(&self) -> usize {
        self.hdr.capacity() + self.data.capacity() + self.ranges.capacity() * 16
    }

    /// Takes `bytes` at `off`, first-come; true if it overlapped bytes already held.
    fn put(&mut self, off: usize, bytes: &[u8]) -> bool {
        let end = off + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        let mut overlap = false;
        // Copy the gaps between held ranges.
        let mut at = off;
        for &(s, e) in &self.ranges {
            if e <= at {
                continue;
            }
            if s >= end {
                break;
            }
            if s > at
                && let (Some(d), Some(b)) = (self.data.get_mut(at..s), bytes.get(at - off..s - off))
            {
                d.copy_from_slice(b);
            }
            overlap = true;
            at = at.max(e);
            if at >= end {
                break;
            }
        }
        if at < end
            && let (Some(d), Some(b)) = (self.data.get_mut(at..end), bytes.get(at - off..))
        {
            d.copy_from_slice(b);
        }
        // Merge the new range in.
        let i = self.ranges.partition_point(|&(_, e)| e < off);
        let mut j = i;
        let (mut s, mut e) = (off, end);
        while let Some(&(rs, re)) = self.ranges.get(j) {
            if rs > end {
                break;
            }
            s = s.min(rs);
            e = e.max(re);
            j += 1;
        }
        self.ranges.splice(i..j, [(s, e)]);
        overlap
    }

    fn whole(&self) -> bool {
        !self.hdr.is_empty()
            && self
                .total
                .is_some_and(|t| self.ranges.first() == Some(&(0, t)) || t == 0)
    }
}

/// One fragment, parsed.
struct Frag<'a> {
    key: Key,
    /// Payload offset in the train.
    off: usize,
    more: bool,
    payload: &'a [u8],
    /// For offset 0: the header to keep (see [`Train::hdr`]) and, for IPv6, the index of
    /// the next-header byte that named the fragment header, and the value it gets.
    hdr: &'a [u8],
    nh_fix: Option<(usize, u8)>,
}

/// Where the IPv6 fixed header's next-header field is.
const NXT_HDR_AT: usize = 6;

/// The fragment facts of `pkt`, or `None` if it is not a fragment (or not well-formed).
fn parse(pkt: &[u8], layer: u8) -> Option<Frag<'_>> {
    match pkt.first()? >> 4 {
        4 => {
            let ip = Ipv4Packet::new_checked(pkt).ok()?;
            // A zero total length is the kernel's GSO marker, never a fragment's.
            if !ip.is_fragment() || ip.total_len() == 0 {
                return None;
            }
            let hl = ip.header_len();
            Some(Frag {
                key: Key {
                    src: u128::from(u32::from(ip.src_addr())),
                    dst: u128::from(u32::from(ip.dst_addr())),
                    id: u32::from(ip.ident()),
                    proto: u16::from(ip.protocol()),
                    layer,
                },
                off: usize::from(ip.frag_offset()),
                more: ip.more_frags(),
                payload: pkt.get(hl..usize::from(ip.total_len()))?,
                hdr: pkt.get(..hl)?,
                nh_fix: None,
            })
        }
        6 => {
            let ip = Ipv6Packet::new_checked(pkt).ok()?;
            // A zero payload length is a jumbogram (or the GSO marker), never a fragment's.
            if ip.payload_len() == 0 {
                return None;
            }
            let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
            // The extension headers are walked here rather than with
            // `Ipv6Packet::upper_layer`: reassembly needs the byte that names the fragment
            // header (the fixed header's next-header field, at 6, or an extension's first
            // byte) to rewrite it.
            let mut nh_at = NXT_HDR_AT;
            let mut off = ipv6::HEADER_LEN;
            for _ in 0..MAX_EXT_HEADERS {
                let nh = *pkt.get(nh_at)?;
                match nh {
                    0 | 43 | 60 => {
                        nh_at = off;
                        off += (usize::from(*pkt.get(off + 1)?) + 1) * 8;
                    }
                    51 => {
                        nh_at = off;
                        off += (usize::from(*pkt.get(off + 1)?) + 2) * 4;
                    }
                    44 => {
                        let fh = FragmentHeader::new_checked(pkt.get(off..)?).ok()?;
                        return Some(Frag {
                            key: Key {
                                src: u128::from(ip.src_addr()),
                                dst: u128::from(ip.dst_addr()),
                                id: fh.ident(),
                                proto: 0x106,
                                layer,
                            },
                            off: usize::from(fh.frag_offset()),
                            more: fh.more_frags(),
                            payload: pkt.get(off + FRAGMENT_HEADER_LEN..end)?,
                            hdr: pkt.get(..off)?,
                            nh_fix: Some((nh_at, fh.next_header())),
                        });
                    }
                    _ => return None,
                }
            }
            None
        }
        _ => None,
    }
}

/// Fragment trains of one detector.
#[derive(Debug)]
pub(crate) struct Defrag {
    limits: DefragLimits,
    trains: HashMap<Key, Train>,
    /// Trains by creation time (a train's age counts from its first fragment, so the
    /// oldest are at the front); entries of trains already gone are skipped.
    order: VecDeque<(Instant, Key)>,
    mem: usize,
    frags: usize,
    pub(crate) counts: Counts,
}

impl Defrag {
    /// No trains yet.
    pub(crate) fn new(limits: DefragLimits) -> Defrag {
        Defrag {
            limits,
            trains: HashMap::new(),
            order: VecDeque::new(),
            mem: 0,
            frags: 0,
            counts: Counts::default(),
        }
    }

    /// Trains held now.
    pub(crate) fn trains(&self) -> usize {
        self.trains.len()
    }

    /// Bytes held now.
    pub(crate) fn mem(&self) -> usize {
        self.mem
    }

    fn remove(&mut self, key: &Key) -> Option<Train> {
        let t = self.trains.remove(key)?;
        self.mem = self.mem.saturating_sub(t.mem());
        self.frags = self.frags.saturating_sub(t.frags);
        Some(t)
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(at, key)) = self.order.front() {
            if now.saturating_duration_since(at) < self.limits.timeout {
                break;
            }
            self.order.pop_front();
            if self.trains.get(&key).is_some_and(|t| t.created == Some(at))
                && self.remove(&key).is_some()
            {
                self.counts.timeouts += 1;
            }
        }
        // Entries of trains completed or refused do not pile up past the trains held.
        if self.order.len() > 2 * self.limits.trains.max(1) {
            let trains = &self.trains;
            self.order
                .retain(|(at, k)| trains.get(k).is_some_and(|t| t.created == Some(*at)));
        }
    }

    /// Takes `pkt` (an IP packet of tunnel layer `layer`) at time `now`. On
    /// [`Step::Done`] the reassembled packet is in `out` (cleared first).
    pub(crate) fn insert(
        &mut self,
        pkt: &[u8],
        layer: u8,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Step {
        let Some(f) = parse(pkt, layer) else {
            return Step::Whole;
        };
        self.expire(now);
        let end = f.off + f.payload.len();
        let hdr_len = if f.off == 0 { f.hdr.len() } else { 0 };
        // The reassembled length must fit its field (IPv6: the payload length counts the
        // extension headers before the fragment header too).
        let limit = match f.nh_fix {
            None => MAX_IP_LEN.saturating_sub(f.hdr.len()),
            Some(_) => MAX_IP_LEN.saturating_sub(f.hdr.len().saturating_sub(40)),
        };
        // A fragment that is not the last must carry a multiple of 8 bytes.
        let refuse = end > limit || (f.more && f.payload.len() % 8 != 0);
        if refuse {
            self.counts.refused += 1;
            self.remove(&f.key);
            return Step::Refused;
        }
        if !self.trains.contains_key(&f.key) {
            if self.trains.len() >= self.limits.trains {
                self.counts.refused += 1;
                return Step::Refused;
            }
            let t = Train {
                created: Some(now),
                ..Train::default()
            };
            self.order.push_back((now, f.key));
            self.trains.insert(f.key, t);
        }
        let over = self.frags >= self.limits.fragments;
        let Some(t) = self.trains.get_mut(&f.key) else {
            return Step::Refused;
        };
        let before = t.mem();
        // Growth this fragment would cause, checked before it is made.
        let grow = end.saturating_sub(t.data.capacity()) + hdr_len + 16;
        if over || self.mem + grow > self.limits.memcap {
            self.counts.refused += 1;
            self.remove(&f.key);
            return Step::Refused;
        }
        if t.total.is_some_and(|total| end > total) || (!f.more && t.data.len() > end) {
            // Data past the end the last fragment set: not a packet that can be whole.
            self.counts.refused += 1;
            self.remove(&f.key);
            return Step::Refused;
        }
        if !f.more {
            t.total = Some(end);
        }
        if f.off == 0 && t.hdr.is_empty() {
            t.hdr.extend_from_slice(f.hdr);
            if let Some((at, nh)) = f.nh_fix
                && let Some(b) = t.hdr.get_mut(at)
            {
                *b = nh;
            }
        }
        if t.put(f.off, f.payload) {
            self.counts.overlaps += 1;
        }
        t.frags += 1;
        self.frags += 1;
        self.mem = self.mem + t.mem() - before.min(t.mem());
        if !t.whole() {
            return Step::Held;
        }
        let Some(t) = self.remove(&f.key) else {
            return Step::Refused;
        };
        let total = t.total.unwrap_or(0);
        out.clear();
        out.extend_from_slice(&t.hdr);
        out.extend_from_slice(t.data.get(..total).unwrap_or(&[]));
        // The kept header is at least the fixed header (checked when it was parsed).
        if f.nh_fix.is_some() {
            let plen = (out.len().saturating_sub(ipv6::HEADER_LEN)).min(MAX_IP_LEN) as u16;
            if out.len() >= ipv6::HEADER_LEN {
                Ipv6Packet::new_unchecked(&mut out[..]).set_payload_len(plen);
            }
        } else if out.len() >= ipv4::HEADER_LEN {
            let len = out.len().min(MAX_IP_LEN) as u16;
            let mut ip = Ipv4Packet::new_unchecked(&mut out[..]);
            ip.set_total_len(len);
            // No more fragments, offset 0; the checksum is left as it is (rules do not
            // check it, as with `-k none`).
            ip.set_more_frags(false);
            ip.set_frag_offset(0);
        }
        self.counts.reassembled += 1;
        Step::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 fragment of a UDP datagram: payload `data`, offset in bytes, MF flag.
    fn v4frag(id: u16, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
        let total = (20 + data.len()) as u16;
        let fo = (off / 8) as u16 | if more { 0x2000 } else { 0 };
        let mut v = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        v[2..4].copy_from_slice(&total.to_be_bytes());
        v[4..6].copy_from_slice(&id.to_be_bytes());
        v[6..8].copy_from_slice(&fo.to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    /// IPv6 fragment (with a hop-by-hop header before the fragment header).
    fn v6frag(id: u32, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
        v.extend_from_slice(&[0u8; 15]);
        v.push(1);
        v.extend_from_slice(&[0u8; 15]);
        v.push(1);
        v.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, PadN
        let fo = off as u16 | u16::from(more);
        v.extend_from_slice(&[6, 0]);
        v.extend_from_slice(&fo.to_be_bytes());
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(data);
        let plen = (v.len() - 40) as u16;
        v[4..6].copy_from_slice(&plen.to_be_bytes());
        v
    }

    fn body(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn ipv4_out_of_order_with_overlap() {
        let mut d = Defrag::new(DefragLimits::default());
        let now = Instant::now();
        let b = body(40);
        let mut out = Vec::new();
        // Offset 0 without more fragments: a whole packet, not held.
        assert_eq!(
            d.insert(&v4frag(7, 0, false, &b), 0, now, &mut out),
            Step::Whole
        );
        assert_eq!(
            d.insert(&v4frag(7, 32, false, &b[32..]), 0, now, &mut out),
            Step::Held
        );
        // An overlapping fragment with other bytes: the first bytes stay.
        assert_eq!(
            d.insert(&v4frag(7, 8, true, &[0xee; 16]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(
            d.insert(&v4frag(7, 16, true, &b[16..32]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(d.counts.overlaps, 1);
        assert_eq!(
            d.insert(&v4frag(7, 0, true, &b[..16]), 0, now, &mut out),
            Step::Done
        );
        assert_eq!(out.len(), 60);
        assert_eq!(&out[2..4], &60u16.to_be_bytes());
        assert_eq!(&out[6..8], &[0, 0]);
        // First come: 8..24 keeps the 0xee that came before the original bytes.
        assert_eq!(&out[20..28], &b[..8]);
        assert_eq!(&out[28..44], &[0xee; 16]);
        assert_eq!(&out[44..], &b[24..]);
        assert_eq!(d.counts.overlaps, 2);
        assert_eq!((d.trains(), d.mem(), d.counts.reassembled), (0, 0, 1));
    }

    #[test]
    fn ipv6_fixes_the_next_header_and_length() {
        let mut d = Defrag::new(DefragLimits::default());
        let now = Instant::now();
        let b = body(1000);
        let mut out = Vec::new();
        assert_eq!(
            d.insert(&v6frag(9, 0, true, &b[..464]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(
            d.insert(&v6frag(9, 928, false, &b[928..]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(
            d.insert(&v6frag(9, 464, true, &b[464..928]), 0, now, &mut out),
            Step::Done
        );
        assert_eq!(out.len(), 48 + 1000);
        assert_eq!(&out[4..6], &1008u16.to_be_bytes());
        assert_eq!(out[6], 0, "hop-by-hop first");
        assert_eq!(out[40], 6, "the hop-by-hop header now names TCP");
        assert_eq!(&out[48..], &b[..]);
    }

    #[test]
    fn not_fragments_and_layers() {
        let mut d = Defrag::new(DefragLimits::default());
        let now = Instant::now();
        let mut out = Vec::new();
        let mut whole = v4frag(1, 0, false, &[1, 2, 3, 4]);
        assert_eq!(d.insert(&whole, 0, now, &mut out), Step::Whole);
        whole.truncate(3);
        assert_eq!(d.insert(&whole, 0, now, &mut out), Step::Whole);
        // The same ids in two tunnel layers are two trains.
        assert_eq!(
            d.insert(&v4frag(1, 0, true, &[0; 8]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(
            d.insert(&v4frag(1, 8, false, &[0; 8]), 1, now, &mut out),
            Step::Held
        );
        assert_eq!(d.trains(), 2);
    }

    #[test]
    fn bounds_refuse_and_timeouts_drop() {
        let limits = DefragLimits {
            trains: 2,
            fragments: 3,
            memcap: 1 << 20,
            timeout: Duration::from_secs(60),
        };
        let mut d = Defrag::new(limits);
        let now = Instant::now();
        let mut out = Vec::new();
        for id in 0..2 {
            assert_eq!(
                d.insert(&v4frag(id, 0, true, &[0; 8]), 0, now, &mut out),
                Step::Held
            );
        }
        // A third train: refused.
        assert_eq!(
            d.insert(&v4frag(5, 0, true, &[0; 8]), 0, now, &mut out),
            Step::Refused
        );
        assert_eq!(
            d.insert(&v4frag(0, 8, true, &[0; 8]), 0, now, &mut out),
            Step::Held
        );
        // A fourth fragment in all: refused, its train dropped.
        assert_eq!(
            d.insert(&v4frag(1, 8, true, &[0; 8]), 0, now, &mut out),
            Step::Refused
        );
        assert_eq!(d.trains(), 1);
        // Past the offset limit, or an odd-sized middle fragment: refused.
        assert_eq!(
            d.insert(&v4frag(6, 65_528, false, &[0; 16]), 0, now, &mut out),
            Step::Refused
        );
        assert_eq!(
            d.insert(&v4frag(6, 0, true, &[0; 9]), 0, now, &mut out),
            Step::Refused
        );
        // Past the timeout the old train is gone.
        let later = now + Duration::from_secs(61);
        assert_eq!(
            d.insert(&v4frag(9, 0, true, &[0; 8]), 0, later, &mut out),
            Step::Held
        );
        assert_eq!(d.counts.timeouts, 1);
        assert_eq!(d.trains(), 1);
        assert_eq!(d.counts.refused, 4);
    }

    #[test]
    fn memcap_refuses() {
        let limits = DefragLimits {
            memcap: 1000,
            ..DefragLimits::default()
        };
        let mut d = Defrag::new(limits);
        let mut out = Vec::new();
        let now = Instant::now();
        assert_eq!(
            d.insert(&v4frag(1, 0, true, &[0; 800]), 0, now, &mut out),
            Step::Held
        );
        assert_eq!(
            d.insert(&v4frag(2, 0, true, &[0; 800]), 0, now, &mut out),
            Step::Refused
        );
        assert!(d.mem() <= 1000);
    }

    #[test]
    fn the_largest_packet_reassembles() {
        let mut d = Defrag::new(DefragLimits::default());
        let now = Instant::now();
        let b = body(65_535 - 20);
        let mut out = Vec::new();
        let mut last = Step::Held;
        for (i, c) in b.chunks(64).enumerate() {
            let more = (i + 1) * 64 < b.len();
            last = d.insert(&v4frag(3, i * 64, more, c), 0, now, &mut out);
        }
        assert_eq!(last, Step::Done);
        assert_eq!(out.len(), 65_535);
        assert_eq!(&out[20..], &b[..]);
    }

    #[test]
    fn hostile_fragments_never_panic() {
        let mut rng = crate::testutil::Rng(0x5eed_f00d);
        let mut d = Defrag::new(DefragLimits {
            trains: 8,
            fragments: 64,
            memcap: 1 << 16,
            timeout: Duration::from_secs(1),
        });
        let mut out = Vec::new();
        let t0 = Instant::now();
        for i in 0..20_000u64 {
            let mut p = if rng.below(2) == 0 {
                v4frag(
                    rng.below(4) as u16,
                    rng.below(64) * 8,
                    rng.below(2) == 0,
                    &[1; 24],
                )
            } else {
                v6frag(
                    rng.below(4) as u32,
                    rng.below(64) * 8,
                    rng.below(2) == 0,
                    &[1; 24],
                )
            };
            for _ in 0..rng.below(3) {
                let at = rng.below(p.len());
                p[at] = rng.byte();
            }
            p.truncate(rng.below(p.len() + 1).max(p.len() / 2));
            let now = t0 + Duration::from_millis(i / 4);
            let _ = d.insert(&p, 0, now, &mut out);
            assert!(d.trains() <= 8 && d.mem() <= 1 << 16);
        }
    }
}
