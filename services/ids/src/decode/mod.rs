//! The layers of a packet that the IDS inspects besides the packet itself, as Suricata's
//! decoders give them to detection: the inner packet of a tunnel (IP in IP, GRE, VXLAN,
//! Geneve, Teredo: `tunnel`) and the packet reassembled from IP fragments (`defrag`).
//! Each layer is inspected as a packet of its own (its own addresses and flow); the
//! outer packet's outcome is the strictest of its layers'.
//!
//! Where conntrack's defragmentation (`nf_defrag_ipv4` / `nf_defrag_ipv6`) is loaded in
//! the relay's namespace the kernel reassembles fragments before NFQUEUE; without it (and
//! with XDP and `relayd replay`) they come as they are, and `defrag` reassembles them as
//! the destination host will, from only the fragments relayd lets through: a fragment is
//! planned, inspected (with the datagram it completes) and committed to its train only if
//! the packet passes. Tunnels reach the queue whole either way.
//!
//! Bounds: at most [`DecodeOptions::max_layers`] layers per packet (a tunnel in a tunnel
//! in a reassembled packet ... stops there, counted as `decode_too_deep`); one buffer
//! per layer, reused from packet to packet (at most 65,535 bytes each: a reassembled
//! packet's largest size; a decapsulated packet is no larger than its outer one); the
//! fragment trains' bounds in [`DefragLimits`]. Counters: `decapsulated`, `reassembled`,
//! `defrag_refused`, `defrag_timeouts`, `defrag_overlaps`, `defrag_overlap_dropped`,
//! `defrag_invalid_dropped`, `defrag_late_dropped`, `defrag_dropped_train`,
//! `decode_too_deep`.

mod defrag;
mod tunnel;

pub(crate) use defrag::{DEFAULT_FRAG_MEMCAP, DefragLimits};
pub(crate) use tunnel::TunnelPorts;

use crate::outcome::{Outcome, stricter};
use defrag::{Counts, Defrag, Step};
use relay_core::wire::{Ipv4Packet, Ipv6Packet, ipv4};
use relay_core::{Counter, Counters, Packet, PacketMeta};
use std::time::Instant;

/// What the IDS decodes inside packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Inspect inner and reassembled packets at all (default true).
    pub enabled: bool,
    /// The UDP ports of VXLAN, Geneve and Teredo.
    pub ports: TunnelPorts,
    /// Fragment reassembly's bounds.
    pub defrag: DefragLimits,
    /// Layers inspected beyond the packet itself (default 4; Suricata's
    /// `decoder.max-layers` is 16, counting every header, not only tunnels).
    pub max_layers: usize,
    /// Inline mode (default true): drop a fragment that overlaps held bytes with other
    /// bytes, one the host would discard or that would make it drop, restart or re-length
    /// its train, one within a second of its train's deadline, and one refused by a bound,
    /// so that what the host holds is what relayd inspected.
    pub drop_invalid: bool,
}

impl Default for DecodeOptions {
    fn default() -> DecodeOptions {
        DecodeOptions {
            enabled: true,
            ports: TunnelPorts::default(),
            defrag: DefragLimits::default(),
            max_layers: 4,
            drop_invalid: true,
        }
    }
}

#[derive(Debug)]
struct Stats {
    decapsulated: Counter,
    reassembled: Counter,
    refused: Counter,
    timeouts: Counter,
    overlaps: Counter,
    overlap_dropped: Counter,
    invalid_dropped: Counter,
    late_dropped: Counter,
    dropped_train: Counter,
    too_deep: Counter,
}

/// A detector's decoder: the fragment trains and the per-layer buffers.
#[derive(Debug)]
pub(crate) struct Decoder {
    opts: DecodeOptions,
    defrag: Defrag,
    /// One buffer per layer.
    bufs: Vec<Vec<u8>>,
    /// This packet's fragments to commit (or mark) once its verdict is known: (layer,
    /// completed a datagram).
    pending: Vec<(usize, bool)>,
    /// Per layer, the strictest outcome of it and the layers inside it.
    level_out: Vec<Outcome>,
    stats: Stats,
    synced: Counts,
}

/// The upper-layer protocol and bytes of an unfragmented IP packet.
fn upper(pkt: &[u8]) -> Option<(u8, &[u8])> {
    match pkt.first()? >> 4 {
        4 => {
            // Unchecked past the fixed header: a snap length may have cut the packet, and
            // its first bytes still name the tunnel.
            if pkt.len() < ipv4::HEADER_LEN {
                return None;
            }
            let ip = Ipv4Packet::new_unchecked(pkt);
            let (hl, total) = (ip.header_len(), usize::from(ip.total_len()));
            if hl < ipv4::HEADER_LEN {
                return None;
            }
            Some((ip.protocol(), pkt.get(hl..total.min(pkt.len()))?))
        }
        6 => {
            let ip = Ipv6Packet::new_checked(pkt).ok()?;
            let (proto, off, frag) = ip.upper_layer().ok()?;
            if frag.is_some() {
                return None;
            }
            Some((proto, pkt.get(off..ip.packet_len().min(pkt.len()))?))
        }
        _ => None,
    }
}

impl Stats {
    /// Adds what reassembly counted since `synced` to the counters.
    fn sync(&self, c: Counts, synced: &mut Counts) {
        self.refused.add(c.refused.saturating_sub(synced.refused));
        self.timeouts
            .add(c.timeouts.saturating_sub(synced.timeouts));
        self.overlaps
            .add(c.overlaps.saturating_sub(synced.overlaps));
        *synced = c;
    }
}

impl Decoder {
    /// A decoder registering its counters in `counters`.
    pub(crate) fn new(opts: DecodeOptions, counters: &Counters) -> Decoder {
        let c = |n: &str| counters.counter(n);
        Decoder {
            defrag: Defrag::new(opts.defrag.clone(), opts.drop_invalid),
            bufs: (0..opts.max_layers).map(|_| Vec::new()).collect(),
            pending: Vec::with_capacity(opts.max_layers + 1),
            level_out: Vec::with_capacity(opts.max_layers + 2),
            stats: Stats {
                decapsulated: c("decapsulated"),
                reassembled: c("reassembled"),
                refused: c("defrag_refused"),
                timeouts: c("defrag_timeouts"),
                overlaps: c("defrag_overlaps"),
                overlap_dropped: c("defrag_overlap_dropped"),
                invalid_dropped: c("defrag_invalid_dropped"),
                late_dropped: c("defrag_late_dropped"),
                dropped_train: c("defrag_dropped_train"),
                too_deep: c("decode_too_deep"),
            },
            synced: Counts::default(),
            opts,
        }
    }

    /// Fragment trains held and the bytes they hold.
    pub(crate) fn defrag_usage(&self) -> (usize, usize) {
        (self.defrag.trains(), self.defrag.mem())
    }

    /// Starts decoding the IP packet `outer` at time `now`: the returned [`Layers`] gives
    /// its inner packets one at a time (a tunnel's inner packet, the datagram a fragment
    /// completes, and so on down to [`DecodeOptions::max_layers`]), and takes each one's
    /// outcome; [`Layers::finish`] then gives the strictest of them. The decoder calls no
    /// one: the caller inspects each packet between two calls of [`Layers::next`].
    pub(crate) fn layers<'d, 'o>(&'d mut self, outer: &'o [u8], now: Instant) -> Layers<'d, 'o> {
        let enabled = self.opts.enabled;
        if enabled {
            self.pending.clear();
            self.level_out.clear();
            self.level_out.resize(self.bufs.len() + 2, Outcome::Clean);
        }
        Layers {
            dec: self,
            outer,
            now,
            level: 0,
            inner: None,
            done: !enabled,
        }
    }
}

/// One packet's decoding in progress (see [`Decoder::layers`]): its inner packets, each
/// in one of the decoder's per-layer buffers, lent to the caller one at a time.
#[derive(Debug)]
#[must_use = "the fragments of a packet are committed by `Layers::finish`"]
pub(crate) struct Layers<'d, 'o> {
    dec: &'d mut Decoder,
    outer: &'o [u8],
    now: Instant,
    /// The next level to decode (0: the outer packet).
    level: usize,
    /// The inner packet lent out last, in the buffer of layer `level - 1`.
    inner: Option<Packet>,
    /// Nothing more inside.
    done: bool,
}

impl Layers<'_, '_> {
    /// The next inner packet to inspect, or `None` once there are no more. Report its
    /// outcome with [`Layers::outcome`] before asking for the next one.
    pub(crate) fn next(&mut self) -> Option<&mut Packet> {
        self.give_back();
        if self.done {
            return None;
        }
        let level = self.level;
        match self.decode_level(level) {
            Some(p) => {
                self.level = level + 1;
                self.inner = Some(p);
                self.inner.as_mut()
            }
            None => {
                self.done = true;
                None
            }
        }
    }

    /// The outcome of the inner packet [`Layers::next`] returned last.
    pub(crate) fn outcome(&mut self, o: Outcome) {
        if let Some(l) = self.dec.level_out.get_mut(self.level) {
            *l = stricter(*l, o);
        }
    }

    /// Puts the buffer of the packet lent out last back in its layer.
    fn give_back(&mut self) {
        if let Some(p) = self.inner.take()
            && let Some(buf) = self
                .level
                .checked_sub(1)
                .and_then(|l| self.dec.bufs.get_mut(l))
        {
            *buf = p.into_buffer();
        }
    }

    /// Decodes layer `level` (fragment reassembly, else tunnel decapsulation) into the
    /// buffer of layer `level + 1`; the packet it holds if there is one to inspect.
    fn decode_level(&mut self, level: usize) -> Option<Packet> {
        let Decoder {
            opts,
            defrag,
            bufs,
            pending,
            level_out,
            stats,
            synced,
        } = &mut *self.dec;
        let n = bufs.len();
        let (done, rest) = bufs.split_at_mut(level.min(n));
        let cur: &[u8] = match level.checked_sub(1) {
            None => self.outer,
            Some(l) => done.get(l).map_or(&[], |b| &b[..]),
        };
        let step = match rest.first_mut() {
            Some(buf) => defrag.plan(cur, level as u8, self.now, buf),
            None => Step::Whole,
        };
        // `drop`: Some(counter) when reassembly drops the packet (counted there).
        let (next, drop): (bool, Option<Option<&Counter>>) = match step {
            Step::Pass { complete } => {
                pending.push((level, complete));
                if complete {
                    stats.reassembled.inc();
                }
                (complete, None)
            }
            Step::Invalid => (
                false,
                opts.drop_invalid.then_some(Some(&stats.invalid_dropped)),
            ),
            Step::Late => (false, Some(Some(&stats.late_dropped))),
            Step::Overlap => (false, Some(Some(&stats.overlap_dropped))),
            Step::DroppedTrain => (false, Some(Some(&stats.dropped_train))),
            // Counted as `defrag_refused` whatever the mode.
            Step::Refused => (false, opts.drop_invalid.then_some(None)),
            Step::Whole => (decap(cur, rest.first_mut(), opts, stats), None),
        };
        if let Some(c) = drop {
            if let Some(c) = c {
                c.inc();
            }
            if let Some(o) = level_out.get_mut(level) {
                *o = stricter(*o, Outcome::Drop);
            }
        }
        if step != Step::Whole {
            stats.sync(defrag.counts, synced);
        }
        if !next {
            return None;
        }
        let buf = rest.first_mut()?;
        let len = buf.len();
        Some(Packet::in_buffer(
            std::mem::take(buf),
            0,
            len,
            PacketMeta::default(),
        ))
    }

    /// Ends the packet's decoding: returns the strictest outcome of its layers (`Clean`
    /// when there are none), `Drop` for a fragment reassembly refuses (see
    /// [`DecodeOptions::drop_invalid`]) or that belongs to a dropped datagram.
    ///
    /// Fragment trains change only once the packet's verdict (the stricter of `outer_out`,
    /// the outer packet's own outcome, and this one) passes it: the host then holds the
    /// fragment. If it is dropped and it completed a datagram that was dropped, the train
    /// is remembered as dropped.
    pub(crate) fn finish(mut self, outer_out: Outcome) -> Outcome {
        self.give_back();
        if !self.dec.opts.enabled {
            return Outcome::Clean;
        }
        let Decoder {
            defrag,
            bufs,
            pending,
            level_out,
            ..
        } = &mut *self.dec;
        // Each layer's outcome takes in the layers inside it.
        let mut inner = Outcome::Clean;
        for o in level_out.iter_mut().rev() {
            inner = stricter(inner, *o);
            *o = inner;
        }
        let out = level_out.first().copied().unwrap_or(Outcome::Clean);
        let dropped = |o: Outcome| matches!(o, Outcome::Drop | Outcome::Reject);
        let passed = !dropped(stricter(outer_out, out));
        for &(level, complete) in pending.iter() {
            let pkt: &[u8] = match level.checked_sub(1) {
                None => self.outer,
                Some(l) => bufs.get(l).map_or(&[], |b| &b[..]),
            };
            if passed {
                defrag.commit(pkt, level as u8, self.now);
            } else if complete && level_out.get(level + 1).is_some_and(|&o| dropped(o)) {
                defrag.mark_dropped(pkt, level as u8);
            }
        }
        out
    }
}

/// Decapsulates the tunnel `cur` carries, if any, into `next` (the buffer of the layer
/// inside); false if there is nothing inside or no layer left (`decode_too_deep`).
fn decap(cur: &[u8], next: Option<&mut Vec<u8>>, opts: &DecodeOptions, stats: &Stats) -> bool {
    let Some((_, inner)) = upper(cur).and_then(|(p, l4)| tunnel::decap(p, l4, &opts.ports)) else {
        return false;
    };
    match next {
        Some(buf) => {
            buf.clear();
            buf.extend_from_slice(inner);
            stats.decapsulated.inc();
            true
        }
        None => {
            stats.too_deep.inc();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Decodes `outer` (whose own outcome is `outer_out`), inspecting each inner packet
    /// with `inspect`, as the detector does.
    fn run(
        d: &mut Decoder,
        outer: &[u8],
        outer_out: Outcome,
        now: Instant,
        inspect: &mut dyn FnMut(&mut Packet) -> Outcome,
    ) -> Outcome {
        let mut layers = d.layers(outer, now);
        while let Some(p) = layers.next() {
            let o = inspect(p);
            layers.outcome(o);
        }
        layers.finish(outer_out)
    }

    fn ipv4(proto: u8, id: u16, fo: u16, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut v = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        v[2..4].copy_from_slice(&total.to_be_bytes());
        v[4..6].copy_from_slice(&id.to_be_bytes());
        v[6..8].copy_from_slice(&fo.to_be_bytes());
        v.extend_from_slice(payload);
        Ipv4Packet::new_unchecked(&mut v[..]).fill_checksum();
        v
    }

    /// Inspects the layers of `pkt` (whose own outcome is `outer`) as a detector whose
    /// rules drop any packet holding "evil".
    fn verdict(d: &mut Decoder, pkt: &[u8], outer: Outcome, now: Instant) -> Outcome {
        let out = run(d, pkt, outer, now, &mut |p| {
            if p.data().windows(4).any(|w| w == b"evil") {
                Outcome::Drop
            } else {
                Outcome::Clean
            }
        });
        stricter(outer, out)
    }

    #[test]
    fn resending_the_fragment_that_completed_a_dropped_datagram_gets_nowhere() {
        let counters = Counters::new();
        let mut d = Decoder::new(DecodeOptions::default(), &counters);
        let t0 = Instant::now();
        let f1 = ipv4(17, 9, 0x2000, b"0123456789abcdef");
        let f2 = ipv4(17, 9, 2, b"evil and more");
        assert_eq!(verdict(&mut d, &f1, Outcome::Clean, t0), Outcome::Clean);
        assert_eq!(verdict(&mut d, &f2, Outcome::Clean, t0), Outcome::Drop);
        // The host still holds f1; f2 again, or anything else of the train: dropped.
        assert_eq!(verdict(&mut d, &f2, Outcome::Clean, t0), Outcome::Drop);
        let other = ipv4(17, 9, 2, b"fine and more");
        assert_eq!(verdict(&mut d, &other, Outcome::Clean, t0), Outcome::Drop);
        assert_eq!(counters.counter("defrag_dropped_train").get(), 2);
        assert_eq!(counters.counter("reassembled").get(), 1);
        // Once the host has given up on the train (30 s, and the guard), a new one.
        let later = t0 + Duration::from_secs(32);
        assert_eq!(verdict(&mut d, &f1, Outcome::Clean, later), Outcome::Clean);
        assert_eq!(d.defrag_usage().0, 1);
    }

    #[test]
    fn a_fragment_dropped_for_its_own_bytes_is_not_held() {
        let counters = Counters::new();
        let mut d = Decoder::new(DecodeOptions::default(), &counters);
        let now = Instant::now();
        let f1 = ipv4(17, 3, 0x2000, b"0123456789abcdef");
        // A rule dropped the fragment itself: the host never gets it.
        assert_eq!(verdict(&mut d, &f1, Outcome::Drop, now), Outcome::Drop);
        assert_eq!(d.defrag_usage().0, 0);
        assert_eq!(verdict(&mut d, &f1, Outcome::Clean, now), Outcome::Clean);
        assert_eq!(d.defrag_usage().0, 1);
        // An overlap with other bytes: dropped and counted, the train unchanged.
        let x = ipv4(17, 3, 0x2000, b"0123456789abcdeX");
        assert_eq!(verdict(&mut d, &x, Outcome::Clean, now), Outcome::Drop);
        assert_eq!(counters.counter("defrag_overlap_dropped").get(), 1);
        // IDS mode (no drop_invalid): passed, the host drops it as a duplicate.
        let mut ids = Decoder::new(
            DecodeOptions {
                drop_invalid: false,
                ..DecodeOptions::default()
            },
            &counters,
        );
        assert_eq!(verdict(&mut ids, &f1, Outcome::Clean, now), Outcome::Clean);
        assert_eq!(verdict(&mut ids, &x, Outcome::Clean, now), Outcome::Clean);
    }

    #[test]
    fn a_fragmented_packet_in_gre_is_reassembled_and_inspected() {
        let counters = Counters::new();
        let mut d = Decoder::new(DecodeOptions::default(), &counters);
        let udp: Vec<u8> = [&[0, 1, 0, 2, 0, 24, 0, 0][..], &[7u8; 16]].concat();
        let f1 = ipv4(17, 5, 0x2000, &udp[..16]);
        let f2 = ipv4(17, 5, 2, &udp[16..]);
        let gre = |inner: &[u8]| {
            let mut g = vec![0, 0, 0x08, 0x00];
            g.extend_from_slice(inner);
            ipv4(47, 1, 0, &g)
        };
        let mut seen = Vec::new();
        let mut inspect = |p: &mut Packet| {
            seen.push(p.data().to_vec());
            Outcome::Alert
        };
        let now = Instant::now();
        assert_eq!(
            run(&mut d, &gre(&f1), Outcome::Clean, now, &mut inspect),
            Outcome::Alert
        );
        assert_eq!(
            run(&mut d, &gre(&f2), Outcome::Clean, now, &mut inspect),
            Outcome::Alert
        );
        // The two inner fragments, then the reassembled datagram.
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], f1);
        assert_eq!(seen[1], f2);
        assert_eq!(&seen[2][20..], &udp[..]);
        assert_eq!(counters.counter("decapsulated").get(), 2);
        assert_eq!(counters.counter("reassembled").get(), 1);
    }

    #[test]
    fn nesting_stops_at_max_layers() {
        let counters = Counters::new();
        let opts = DecodeOptions {
            max_layers: 2,
            ..DecodeOptions::default()
        };
        let mut d = Decoder::new(opts, &counters);
        let mut pkt = ipv4(17, 0, 0, &[0u8; 8]);
        for _ in 0..5 {
            pkt = ipv4(4, 0, 0, &pkt);
        }
        let mut n = 0;
        let out = run(&mut d, &pkt, Outcome::Clean, Instant::now(), &mut |_| {
            n += 1;
            Outcome::Clean
        });
        assert_eq!((out, n), (Outcome::Clean, 2));
        assert_eq!(counters.counter("decode_too_deep").get(), 1);
        // Turned off: nothing.
        let mut off = Decoder::new(
            DecodeOptions {
                enabled: false,
                ..DecodeOptions::default()
            },
            &counters,
        );
        let mut n = 0;
        run(&mut off, &pkt, Outcome::Clean, Instant::now(), &mut |_| {
            n += 1;
            Outcome::Drop
        });
        assert_eq!(n, 0);
    }

    #[test]
    fn the_strictest_outcome_wins() {
        use Outcome::*;
        assert_eq!(stricter(Pass, Alert), Alert);
        assert_eq!(stricter(Drop, Alert), Drop);
        assert_eq!(stricter(Drop, Reject), Reject);
        assert_eq!(stricter(Clean, Pass), Pass);
    }
}
