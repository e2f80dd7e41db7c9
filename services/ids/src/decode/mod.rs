//! The layers of a packet that the IDS inspects besides the packet itself, as Suricata's
//! decoders give them to detection: the inner packet of a tunnel (IP in IP, GRE, VXLAN,
//! Geneve, Teredo: `tunnel`) and the packet reassembled from IP fragments (`defrag`).
//! Each layer is inspected as a packet of its own (its own addresses and flow); the
//! outer packet's outcome is the strictest of its layers'.
//!
//! Live, the kernel's conntrack reassembles fragments before NFQUEUE, but XDP and
//! `relayd replay` see them as they come, and tunnels reach the queue whole either way.
//!
//! Bounds: at most [`DecodeOptions::max_layers`] layers per packet (a tunnel in a tunnel
//! in a reassembled packet ... stops there, counted as `decode_too_deep`); one buffer
//! per layer, reused from packet to packet (at most 65,535 bytes each: a reassembled
//! packet's largest size; a decapsulated packet is no larger than its outer one); the
//! fragment trains' bounds in [`DefragLimits`]. Counters: `decapsulated`, `reassembled`,
//! `defrag_refused`, `defrag_timeouts`, `defrag_overlaps`, `decode_too_deep`.

mod defrag;
mod tunnel;

pub use defrag::DefragLimits;
pub use tunnel::TunnelPorts;

use crate::engine::Outcome;
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
}

impl Default for DecodeOptions {
    fn default() -> DecodeOptions {
        DecodeOptions {
            enabled: true,
            ports: TunnelPorts::default(),
            defrag: DefragLimits::default(),
            max_layers: 4,
        }
    }
}

/// The strictness of an outcome: the outer packet gets the strictest of its layers'.
fn rank(o: Outcome) -> u8 {
    match o {
        Outcome::Clean => 0,
        Outcome::Pass => 1,
        Outcome::Alert => 2,
        Outcome::Drop => 3,
        Outcome::Reject => 4,
    }
}

/// The stricter of two outcomes.
pub(crate) fn stricter(a: Outcome, b: Outcome) -> Outcome {
    if rank(b) > rank(a) { b } else { a }
}

#[derive(Debug)]
struct Stats {
    decapsulated: Counter,
    reassembled: Counter,
    refused: Counter,
    timeouts: Counter,
    overlaps: Counter,
    too_deep: Counter,
}

/// A detector's decoder: the fragment trains and the per-layer buffers.
#[derive(Debug)]
pub(crate) struct Decoder {
    opts: DecodeOptions,
    defrag: Defrag,
    /// One buffer per layer.
    bufs: Vec<Vec<u8>>,
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
            defrag: Defrag::new(opts.defrag.clone()),
            bufs: (0..opts.max_layers).map(|_| Vec::new()).collect(),
            stats: Stats {
                decapsulated: c("decapsulated"),
                reassembled: c("reassembled"),
                refused: c("defrag_refused"),
                timeouts: c("defrag_timeouts"),
                overlaps: c("defrag_overlaps"),
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

    /// Inspects the layers of the IP packet `outer` (already inspected itself) with
    /// `inspect`, at time `now`; returns the strictest of their outcomes (`Clean` when
    /// there are none).
    pub(crate) fn layers(
        &mut self,
        outer: &[u8],
        now: Instant,
        inspect: &mut dyn FnMut(&mut Packet) -> Outcome,
    ) -> Outcome {
        let mut out = Outcome::Clean;
        let Decoder {
            opts,
            defrag,
            bufs,
            stats,
            synced,
        } = self;
        if !opts.enabled {
            return out;
        }
        for level in 0..=bufs.len() {
            let (done, rest) = bufs.split_at_mut(level);
            let cur: &[u8] = match level.checked_sub(1) {
                None => outer,
                Some(l) => done.get(l).map_or(&[], |b| &b[..]),
            };
            let step = match rest.first_mut() {
                Some(buf) => defrag.insert(cur, level as u8, now, buf),
                None => Step::Whole,
            };
            let next = match step {
                Step::Done => {
                    stats.reassembled.inc();
                    true
                }
                Step::Held | Step::Refused => false,
                Step::Whole => {
                    match upper(cur).and_then(|(p, l4)| tunnel::decap(p, l4, &opts.ports)) {
                        Some((_, inner)) => match rest.first_mut() {
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
                        },
                        None => false,
                    }
                }
            };
            if step != Step::Whole {
                stats.sync(defrag.counts, synced);
            }
            if !next {
                break;
            }
            let Some(buf) = rest.first_mut() else { break };
            let len = buf.len();
            let mut p = Packet::in_buffer(std::mem::take(buf), 0, len, PacketMeta::default());
            out = stricter(out, inspect(&mut p));
            *buf = p.into_buffer();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(proto: u8, id: u16, fo: u16, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut v = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        v[2..4].copy_from_slice(&total.to_be_bytes());
        v[4..6].copy_from_slice(&id.to_be_bytes());
        v[6..8].copy_from_slice(&fo.to_be_bytes());
        v.extend_from_slice(payload);
        v
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
        assert_eq!(d.layers(&gre(&f1), now, &mut inspect), Outcome::Alert);
        assert_eq!(d.layers(&gre(&f2), now, &mut inspect), Outcome::Alert);
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
        let out = d.layers(&pkt, Instant::now(), &mut |_| {
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
        off.layers(&pkt, Instant::now(), &mut |_| {
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
