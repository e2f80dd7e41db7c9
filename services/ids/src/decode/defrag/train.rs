//! One fragment train as the destination host holds it: Linux's queue of fragment runs
//! (`inet_frag_queue_insert`), or, for the other policies, the bytes held with the
//! fragment that owns each range so that an overlap is resolved as the policy says.

use crate::hostos::FragPolicy;
use std::time::Instant;

/// Where a fragment goes among the held bytes (Linux's `inet_frag_queue_insert`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Overlaps nothing: inserted.
    Free,
    /// Lies within one run of fragments already held: Linux drops it and keeps the queue
    /// (`IPFRAG_DUP`).
    Dup,
    /// Overlaps held bytes otherwise: Linux drops the whole queue (`IPFRAG_OVERLAP`,
    /// RFC 5722).
    Overlap,
}

/// A range of held payload bytes, `[start, end)`, and (other policies) the index in
/// [`Train::frags`] of the fragment whose bytes they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seg {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) owner: u32,
}

/// One train.
#[derive(Debug)]
pub(super) struct Train {
    pub(super) policy: FragPolicy,
    /// When the host created its queue (or last restarted it), which its timer counts from.
    pub(super) created: Instant,
    /// The datagram this train completed was dropped: every later fragment is dropped
    /// until the host gives up on the train. Nothing else is held then.
    pub(super) dropped: bool,
    /// The header of the first fragment (see `Frag::hdr`), next header already fixed.
    pub(super) hdr: Vec<u8>,
    /// Payload bytes from offset 0 (zero where nothing is held).
    pub(super) data: Vec<u8>,
    /// Linux: the runs of fragments, sorted, disjoint (adjacent runs stay apart, as in the
    /// kernel). Other policies: the held ranges by owner, sorted, disjoint.
    pub(super) segs: Vec<Seg>,
    /// Other policies: each held fragment's `[off, end)`, in arrival order.
    pub(super) frags: Vec<(usize, usize)>,
    /// Other policies: the previous `segs`, reused for the next insertion.
    scratch: Vec<Seg>,
    /// The datagram's payload length as known so far (Linux's `q.len`).
    pub(super) len: usize,
    /// The last fragment came (Linux's `INET_FRAG_LAST_IN`).
    pub(super) last_in: bool,
    /// Payload bytes held (Linux's `q.meat`).
    pub(super) meat: usize,
    /// Fragments held (for the bounds).
    pub(super) nfrags: usize,
    /// What the kernel would charge for the train at most (see `charge`).
    pub(super) est: usize,
    /// Bytes charged to the memcap for this train: the larger of `est` and relayd's own.
    pub(super) charged: usize,
    /// Linux `ipfrag_max_dist`: the source's fragment count when this train last got one.
    pub(super) rid: u32,
}

impl Train {
    pub(super) fn new(policy: FragPolicy, created: Instant) -> Train {
        Train {
            policy,
            created,
            dropped: false,
            hdr: Vec::new(),
            data: Vec::new(),
            segs: Vec::new(),
            frags: Vec::new(),
            scratch: Vec::new(),
            len: 0,
            last_in: false,
            meat: 0,
            nfrags: 0,
            est: 0,
            charged: 0,
            rid: 0,
        }
    }

    /// Forgets every fragment (Linux's `ip_frag_reinit`, or a dropped datagram).
    pub(super) fn clear(&mut self) {
        self.hdr = Vec::new();
        self.data = Vec::new();
        self.segs = Vec::new();
        self.frags = Vec::new();
        self.scratch = Vec::new();
        self.len = 0;
        self.last_in = false;
        self.meat = 0;
        self.nfrags = 0;
    }

    /// Makes this train a copy of `other`, reusing this one's buffers.
    pub(super) fn copy_from(&mut self, other: &Train) {
        self.policy = other.policy;
        self.created = other.created;
        self.dropped = other.dropped;
        self.hdr.clone_from(&other.hdr);
        self.data.clone_from(&other.data);
        self.segs.clone_from(&other.segs);
        self.frags.clone_from(&other.frags);
        self.len = other.len;
        self.last_in = other.last_in;
        self.meat = other.meat;
        self.nfrags = other.nfrags;
        self.est = other.est;
        self.charged = other.charged;
        self.rid = other.rid;
    }

    /// Bytes relayd itself holds for the train.
    pub(super) fn own_mem(&self) -> usize {
        self.hdr.capacity()
            + self.data.capacity()
            + (self.segs.capacity() + self.scratch.capacity()) * std::mem::size_of::<Seg>()
            + self.frags.capacity() * 16
    }

    /// Linux: where `[off, end)` goes among the runs.
    pub(super) fn place(&self, off: usize, end: usize) -> Place {
        match self.segs.last() {
            None => return Place::Free,
            // The tail case: past the last run's end, overlapping it or not.
            Some(t) if t.end < end => {
                return if off < t.end {
                    Place::Overlap
                } else {
                    Place::Free
                };
            }
            Some(_) => {}
        }
        let i = self.segs.partition_point(|s| s.end <= off);
        match self.segs.get(i) {
            Some(s) if s.start < end => {
                if s.start <= off && end <= s.end {
                    Place::Dup
                } else {
                    Place::Overlap
                }
            }
            _ => Place::Free,
        }
    }

    /// True if `bytes` at `off` differ from held bytes anywhere they overlap.
    pub(super) fn differs(&self, off: usize, bytes: &[u8]) -> bool {
        let end = off + bytes.len();
        let i = self.segs.partition_point(|s| s.end <= off);
        for s in self.segs.get(i..).unwrap_or(&[]) {
            if s.start >= end {
                break;
            }
            let (a, b) = (s.start.max(off), s.end.min(end));
            if self.data.get(a..b) != bytes.get(a - off..b - off) {
                return true;
            }
        }
        false
    }

    /// True if `[off, end)` overlaps any held byte.
    pub(super) fn overlaps(&self, off: usize, end: usize) -> bool {
        let i = self.segs.partition_point(|s| s.end <= off);
        self.segs.get(i).is_some_and(|s| s.start < end)
    }

    fn put(&mut self, off: usize, bytes: &[u8]) {
        let end = off + bytes.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        if let Some(d) = self.data.get_mut(off..end) {
            d.copy_from_slice(bytes);
        }
    }

    /// Linux: inserts a fragment that [`Train::place`] found free, as a run of its own
    /// or appended to the last run.
    pub(super) fn insert_linux(&mut self, off: usize, bytes: &[u8]) {
        let end = off + bytes.len();
        self.put(off, bytes);
        match self.segs.last_mut() {
            Some(t) if t.end == off => t.end = end,
            _ => {
                let i = self.segs.partition_point(|s| s.end <= off);
                self.segs.insert(
                    i,
                    Seg {
                        start: off,
                        end,
                        owner: 0,
                    },
                );
            }
        }
        self.meat += bytes.len();
    }

    /// Other policies: takes `bytes` at `off` where the policy lets the new fragment win
    /// (and wherever nothing is held). Returns true if the payload's first byte is now
    /// the new fragment's (so an offset-0 fragment's header goes with it).
    pub(super) fn insert_policy(&mut self, off: usize, bytes: &[u8]) -> bool {
        let end = off + bytes.len();
        let me = self.frags.len() as u32;
        self.frags.push((off, end));
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        let old = std::mem::take(&mut self.segs);
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let data = &mut self.data;
        let mut take = |a: usize, b: usize, out: &mut Vec<Seg>| {
            if a >= b {
                return;
            }
            if let (Some(d), Some(s)) = (data.get_mut(a..b), bytes.get(a - off..b - off)) {
                d.copy_from_slice(s);
            }
            out.push(Seg {
                start: a,
                end: b,
                owner: me,
            });
        };
        let mut at = off;
        for &s in &old {
            if s.end <= off || s.start >= end {
                if s.start >= end && at < end {
                    take(at, end, &mut out);
                    at = end;
                }
                out.push(s);
                continue;
            }
            // The gap before this held range is the new fragment's.
            take(at, s.start.max(at), &mut out);
            let (a, b) = (s.start.max(off), s.end.min(end));
            let (o_off, o_end) = self
                .frags
                .get(s.owner as usize)
                .copied()
                .unwrap_or((s.start, s.end));
            if s.start < a {
                out.push(Seg { end: a, ..s });
            }
            if self.policy.new_wins(off, end, o_off, o_end) {
                take(a, b, &mut out);
            } else {
                out.push(Seg {
                    start: a,
                    end: b,
                    owner: s.owner,
                });
            }
            if b < s.end {
                out.push(Seg { start: b, ..s });
            }
            at = b;
        }
        take(at, end, &mut out);
        // Adjacent ranges of one owner merge, so the list stays as short as the fragments.
        out.dedup_by(|b, a| {
            if a.owner == b.owner && a.end == b.start {
                a.end = b.end;
                true
            } else {
                false
            }
        });
        self.segs = out;
        self.scratch = old;
        self.meat = self.segs.iter().map(|s| s.end - s.start).sum();
        self.segs
            .first()
            .is_some_and(|s| s.start == 0 && s.owner == me)
    }

    /// Whether the train is whole: the host has its first and last fragment and every
    /// byte between.
    pub(super) fn whole(&self) -> bool {
        self.last_in && !self.hdr.is_empty() && self.meat == self.len
    }

    /// Writes the reassembled packet: the first fragment's header, then the payload, with
    /// the IPv4 total length and fragment fields or the IPv6 payload length fixed.
    pub(super) fn build(&self, out: &mut Vec<u8>) {
        use relay_core::wire::{Ipv4Packet, Ipv6Packet, ipv4, ipv6};
        out.clear();
        out.extend_from_slice(&self.hdr);
        out.extend_from_slice(self.data.get(..self.len).unwrap_or(&[]));
        if self.hdr.first().map(|b| b >> 4) == Some(6) {
            let plen = out.len().saturating_sub(ipv6::HEADER_LEN).min(65_535) as u16;
            if out.len() >= ipv6::HEADER_LEN {
                Ipv6Packet::new_unchecked(&mut out[..]).set_payload_len(plen);
            }
        } else if out.len() >= ipv4::HEADER_LEN {
            let len = out.len().min(65_535) as u16;
            let mut ip = Ipv4Packet::new_unchecked(&mut out[..]);
            ip.set_total_len(len);
            // No more fragments, offset 0; the checksum is left as it is (rules do not
            // check it, as with `-k none`).
            ip.set_more_frags(false);
            ip.set_frag_offset(0);
        }
    }
}
