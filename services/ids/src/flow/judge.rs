//! TCP normalization: whether the host a segment is sent to would accept it, judged as
//! Linux's `tcp_validate_incoming`, `tcp_sequence`, `tcp_ack` and `tcp_paws_discard` judge
//! it, from what relayd saw of both directions. An inline IPS must inspect only the bytes
//! the host will read: a segment the host would discard is never inserted into the
//! reassembled stream, and (with `drop_invalid`) is dropped, so that an attacker cannot
//! feed the IPS bytes the application never sees (Ptacek and Newsham's insertion, and
//! Handley, Paxson and Kreibich's normalizations).
//!
//! What is judged, per [`Invalid`] reason, once the three-way handshake was seen (a flow
//! picked up mid-stream lacks the windows, scales and timestamps, so only the flags are
//! judged there):
//! - a segment carrying data or FIN without ACK after the handshake (Linux drops it:
//!   `TCP_FLAGS`);
//! - PAWS (RFC 7323): timestamps negotiated, and the segment's TSval older than the last
//!   one the receiver recorded (`ts_recent`, taken from in-order segments up to what the
//!   receiver acknowledged, as `tcp_replace_ts_recent`) by more than 1 (`TCP_RFC7323_PAWS`);
//! - sequence numbers outside the receive window: a segment starting past the right edge
//!   the receiver offered (its acknowledgement plus its scaled window, the largest seen:
//!   Linux never shrinks its window), or whose data runs past it (Linux 6.17 and later
//!   accept that only when the application has read everything, which relayd cannot see;
//!   an honest sender never does it) (`TCP_INVALID_SEQUENCE`);
//! - an acknowledgement of data the receiver never sent (`TCP_ACK_UNSENT_DATA`) or older
//!   than what it already had acknowledged by more than the largest window
//!   (`TCP_TOO_OLD_ACK`, RFC 5961 section 5.2);
//! - an RST outside the window (discarded by the host). RFC 5961: only an RST at the
//!   exact next sequence number (or at the right edge of the held out-of-order data, as
//!   Linux's SACK check) resets the connection; one elsewhere in the window is answered
//!   with a challenge ACK and the connection stays, so it is passed (the real peer's
//!   answer to the challenge needs it to reach the host) but does not end inspection.
//! - a SYN after the handshake is answered with a challenge ACK and discarded: passed,
//!   never inserted.
//!
//! Pure ACKs (no data, FIN, SYN or RST) that fail a check are not used to update the
//! state and are let through: they carry nothing to inspect, and dropping them could
//! only stall an honest connection if relayd's picture were wrong.

use relay_core::wire::tcp::flags::{ACK, FIN, RST, SYN, URG};

/// Why a segment is one the receiving host would discard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum Invalid {
    /// Bad TCP or UDP checksum (judged by the detector, before the flow table).
    Checksum,
    /// Data or FIN without the ACK flag after the handshake.
    NoAck,
    /// An acknowledgement of data never sent.
    AckUnsent,
    /// An acknowledgement older than the receiver's by more than its largest window.
    AckTooOld,
    /// A timestamp older than the receiver's `ts_recent` (PAWS).
    Paws,
    /// Sequence numbers outside the receive window.
    Window,
    /// An RST outside the receive window.
    Rst,
    /// Overlapping bytes already received with different data (inline mode).
    Overlap,
    /// The segment's TTL (hop limit) is too low to reach the receiver.
    Ttl,
    /// Data on a connection an RST ended (the host has no socket for it any more).
    Reset,
    /// Urgent data (URG with a pointer at or past the next byte): the host takes the
    /// urgent byte out of the stream the application reads (unless it set
    /// `SO_OOBINLINE`), depending on when the application reads; dropped inline rather
    /// than guessed (Suricata 8's `urgent-policy: drop`).
    Urgent,
    /// A TCP-MD5 (RFC 2385) or TCP-AO (RFC 5925) signature on a connection whose
    /// handshake had none (the host has no key: `TCP_MD5UNEXPECTED`), or none on one whose
    /// handshake had them (`TCP_MD5NOTFOUND`).
    Signature,
    /// An IPv6 destination option the host does not know and must discard the packet
    /// for (its two high bits not 00), or padding Linux refuses (`ip6_parse_tlv`).
    Ipv6Options,
}

impl Invalid {
    /// Every reason, in counter order.
    pub(crate) const ALL: [Invalid; 13] = [
        Invalid::Checksum,
        Invalid::NoAck,
        Invalid::AckUnsent,
        Invalid::AckTooOld,
        Invalid::Paws,
        Invalid::Window,
        Invalid::Rst,
        Invalid::Overlap,
        Invalid::Ttl,
        Invalid::Reset,
        Invalid::Urgent,
        Invalid::Signature,
        Invalid::Ipv6Options,
    ];

    /// The counter name (`relayd status`, docs/ids.md).
    pub(crate) fn counter(self) -> &'static str {
        match self {
            Invalid::Checksum => "invalid_checksum",
            Invalid::NoAck => "stream_invalid_no_ack",
            Invalid::AckUnsent => "stream_invalid_ack_unsent",
            Invalid::AckTooOld => "stream_invalid_ack_old",
            Invalid::Paws => "stream_invalid_paws",
            Invalid::Window => "stream_invalid_window",
            Invalid::Rst => "stream_invalid_rst",
            Invalid::Overlap => "stream_overlap_dropped",
            Invalid::Ttl => "stream_invalid_ttl",
            Invalid::Reset => "stream_invalid_after_rst",
            Invalid::Urgent => "stream_invalid_urgent",
            Invalid::Signature => "stream_invalid_signature",
            Invalid::Ipv6Options => "invalid_ipv6_options",
        }
    }

    /// The Suricata `stream-event` this reason raises, where Suricata has one with the
    /// same meaning (a bit of [`StreamEvent`]).
    pub(crate) fn event(self) -> Option<StreamEvent> {
        match self {
            Invalid::Paws => Some(StreamEvent::PktInvalidTimestamp),
            Invalid::Window => Some(StreamEvent::EstPacketOutOfWindow),
            Invalid::Rst => Some(StreamEvent::RstInvalid),
            Invalid::Overlap => Some(StreamEvent::ReassemblyOverlapDifferentData),
            _ => None,
        }
    }

    /// The index of the reason in [`Invalid::ALL`].
    pub(crate) fn index(self) -> usize {
        Invalid::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }
}

/// The Suricata `stream-event` names relayd raises (rules match them with
/// `stream-event:NAME`), as bits of a packet's event set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum StreamEvent {
    /// A segment overlapped received bytes with different data.
    ReassemblyOverlapDifferentData = 1,
    /// A timestamp older than the receiver's (PAWS).
    PktInvalidTimestamp = 2,
    /// A segment outside the receive window of an established connection.
    EstPacketOutOfWindow = 4,
    /// An RST outside the window.
    RstInvalid = 8,
}

impl StreamEvent {
    /// Every event with its Suricata name.
    pub(crate) const NAMES: [(&'static str, StreamEvent); 4] = [
        (
            "reassembly_overlap_different_data",
            StreamEvent::ReassemblyOverlapDifferentData,
        ),
        ("pkt_invalid_timestamp", StreamEvent::PktInvalidTimestamp),
        (
            "est_packet_out_of_window",
            StreamEvent::EstPacketOutOfWindow,
        ),
        ("rst_invalid", StreamEvent::RstInvalid),
    ];

    /// The event called `name` (Suricata's spelling), if relayd raises it.
    pub(crate) fn by_name(name: &str) -> Option<StreamEvent> {
        StreamEvent::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, e)| e)
    }

    /// The event's bit.
    pub(crate) fn bit(self) -> u8 {
        self as u8
    }
}

/// The TCP options of a segment that normalization and reassembly read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TcpOptions {
    /// Window scale shift (SYN only; capped at 14 as RFC 7323 asks).
    pub wscale: Option<u8>,
    /// Timestamp value (TSval).
    pub tsval: Option<u32>,
    /// Timestamp echo reply (TSecr; 0 without the option).
    pub tsecr: u32,
    /// A TCP Fast Open option (see `super::tcp::tcp_fast_open`).
    pub tfo: bool,
    /// A TCP-MD5 signature (kind 19) or TCP-AO (kind 29) option.
    pub sig: bool,
}

impl TcpOptions {
    /// Reads the options `opts` (the bytes after the fixed 20-byte header). Stops at an
    /// end-of-list option or a malformed length, as Linux's `tcp_parse_options` does;
    /// never reads past `opts`.
    pub(crate) fn parse(opts: &[u8]) -> TcpOptions {
        let mut o = TcpOptions::default();
        let mut i = 0;
        while let Some(&kind) = opts.get(i) {
            match kind {
                0 => break,
                1 => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let Some(&len) = opts.get(i + 1) else { break };
            let len = usize::from(len);
            if len < 2 || i + len > opts.len() {
                break;
            }
            let body = opts.get(i + 2..i + len).unwrap_or(&[]);
            match (kind, len) {
                (3, 3) => o.wscale = body.first().map(|&s| s.min(14)),
                (8, 10) => {
                    let word = |r: std::ops::Range<usize>| {
                        body.get(r)
                            .and_then(|b| b.try_into().ok())
                            .map(u32::from_be_bytes)
                    };
                    o.tsval = word(0..4);
                    o.tsecr = word(4..8).unwrap_or(0);
                }
                (19, 18) | (29, 4..) => o.sig = true,
                (34, 2) => o.tfo = true,
                (34, 4..=18) if len % 2 == 0 => o.tfo = true,
                (253 | 254, 4 | 12) if body.get(..2) == Some(&[0xf9, 0x89]) => o.tfo = true,
                _ => {}
            }
            i += len;
        }
        o
    }
}

/// `a` is after `b` in sequence space (RFC 1982 arithmetic, as the kernel's `after`).
pub(crate) fn after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

/// The larger of two sequence numbers (`None` counts as smaller than anything).
fn seq_max(a: Option<u32>, b: u32) -> u32 {
    match a {
        Some(a) if after(a, b) => a,
        _ => b,
    }
}

/// What relayd knows of one endpoint, from the segments it sent that were accepted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Side {
    /// The highest sequence number it sent, plus one (SYN and FIN count), as its
    /// `snd_nxt`: an acknowledgement from the other side past it acknowledges data
    /// never sent.
    pub(crate) snd_nxt: Option<u32>,
    /// The highest acknowledgement of its data the other side sent (its `snd_una`).
    pub(crate) snd_una: Option<u32>,
    /// Its initial sequence number plus one (its first data byte).
    pub(crate) first: Option<u32>,
    /// The right edge of the window it offers (acknowledgement plus scaled window), the
    /// largest seen.
    pub(crate) edge: Option<u32>,
    /// The window scale it announced on its SYN.
    pub(crate) wscale_syn: Option<u8>,
    /// The shift its window fields are scaled by (its announced scale once both sides
    /// announced one, else 0).
    pub(crate) shift: u8,
    /// The largest window it offered (scaled): the other side's `max_window`.
    pub(crate) max_wnd: u32,
    /// It sent a timestamp on its SYN.
    pub(crate) ts_syn: bool,
    /// It sent a TCP-MD5 or TCP-AO option on its SYN.
    pub(crate) sig_syn: bool,
    /// The timestamp value the other side records for it (`ts_recent`); 0 is "none", as
    /// in Linux (where PAWS then passes).
    pub(crate) ts_recent: u32,
    /// TTL (hop limit) of its packets as they reached relayd, the smallest seen: tells
    /// how many routers lie between it and relayd.
    pub(crate) ttl: Option<u8>,
    /// The timestamps it sent on its SYNs, the first and the largest (0, 0 without the
    /// option): an answer to its SYN must echo one of them
    /// (`tcp_rcv_synsent_state_process`'s TSecr check).
    pub(crate) syn_ts: [u32; 2],
}

impl Side {
    /// True if `tsecr`, echoed in an answer to this side's SYN, can be a timestamp it
    /// sent: Linux's SYN-SENT state discards an answer (an RST or a SYN-ACK) echoing
    /// anything else (RFC 7323; `LINUX_MIB_PAWSACTIVEREJECTED`). A TSecr of 0 is not
    /// checked, as in Linux; an answer with a timestamp to a SYN without one fails.
    pub(crate) fn echoes_syn(&self, tsecr: u32) -> bool {
        // Without a timestamp on the SYN, Linux still compares the echo with its own clock
        // at the SYN (`retrans_stamp`), which no answer can know: any echo but 0 fails.
        let [first, last] = self.syn_ts;
        tsecr == 0 || self.ts_syn && last.wrapping_sub(first) >= tsecr.wrapping_sub(first)
    }
}

/// The segment facts the judge reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u8,
    pub(crate) window: u16,
    pub(crate) len: u32,
    pub(crate) tsval: Option<u32>,
    /// The urgent pointer (meaningful with URG).
    pub(crate) urgent: u16,
    /// It carries a TCP-MD5 or TCP-AO option.
    pub(crate) sig: bool,
    pub(crate) ttl: u8,
    /// Where the TTL was read, for the reach check: `Some(false)` after the forwarding
    /// decrement (FORWARD, POSTROUTING), `Some(true)` before it (PREROUTING), `None` for
    /// packets not forwarded (INPUT, OUTPUT, replay) where no check applies.
    pub(crate) ttl_before_decrement: Option<bool>,
}

impl Seg {
    /// Carries something the receiver would act on besides an acknowledgement.
    fn carries(&self) -> bool {
        self.len > 0 || self.flags & (FIN | SYN | RST) != 0
    }
}

/// What judging a segment in the established states decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The host accepts it.
    Accept,
    /// The host discards it without acting on it (a pure ACK failing a check, an RST
    /// or SYN answered with a challenge ACK): not inserted, not dropped.
    Ignore,
    /// The host discards it: not inserted, dropped in inline mode.
    Invalid(Invalid),
}

/// True if a packet read at relayd's hook with `ttl_seen` hops left reaches a host whose
/// own packets were read at the same hook with `peer_ttl` (Ptacek and Newsham's TTL
/// insertion: a segment that expires between relayd and the host). Each router on the
/// way decrements the TTL and drops the packet when it would forward it with 1 left;
/// the host's initial TTL is guessed as the usual ones (64, 128, 255) and the path taken
/// to be as long both ways. `before_decrement`: the hook runs before relayd's own
/// forwarding decrements it (PREROUTING), which drops a packet arriving with 1.
pub(crate) fn reaches(ttl_seen: u8, peer_ttl: u8, before_decrement: bool) -> bool {
    let initial: i32 = match peer_ttl {
        0..=64 => 64,
        65..=128 => 128,
        _ => 255,
    };
    // Routers between relayd and the host: the host's packets lost that many before
    // relayd, plus relayd's own decrement when read after it.
    let after = i32::from(!before_decrement);
    let routers = (initial - i32::from(peer_ttl) - after).max(0);
    // relayd forwards it with ttl - 1 left when read before its decrement.
    let left = i32::from(ttl_seen) - 1 + after;
    left - routers >= 1
}

/// Judges segment `s`, sent by `me` to `peer`, in the established states (both
/// directions' handshake seen when `synced`). `next` is the receiver's next expected
/// sequence number as relayd's reassembly has it, `ooo_end` the end of the out-of-order
/// data it holds (Linux's largest SACK right edge).
pub(crate) fn judge(
    me: &Side,
    peer: &Side,
    s: &Seg,
    synced: bool,
    next: Option<u32>,
    ooo_end: Option<u32>,
) -> Verdict {
    let (ack, rst, syn) = (s.flags & ACK != 0, s.flags & RST != 0, s.flags & SYN != 0);
    let invalid = |r| {
        if s.carries() {
            Verdict::Invalid(r)
        } else {
            Verdict::Ignore
        }
    };
    // tcp_rcv_established's slow path: data without ACK is dropped.
    if !ack && !rst && !syn {
        return invalid(Invalid::NoAck);
    }
    if let (Some(before), Some(peer_ttl)) = (s.ttl_before_decrement, peer.ttl)
        && !reaches(s.ttl, peer_ttl, before)
    {
        return invalid(Invalid::Ttl);
    }
    // tcp_check_urg: a pointer at or past the next byte makes the host take a byte out
    // of the stream (`ptr - 1` with BSD semantics, Linux's default), even one carried by
    // a later segment; a pointer behind it is ignored.
    if !rst && !syn && s.flags & URG != 0 && s.urgent != 0 {
        let byte = s.seq.wrapping_add(u32::from(s.urgent)).wrapping_sub(1);
        if next.is_none_or(|n| !after(n, byte)) {
            return Verdict::Invalid(Invalid::Urgent);
        }
    }
    if !synced {
        // Mid-stream: no windows, scales or timestamps known. RFC 5961 still applies to
        // an RST at the next expected byte; elsewhere it is held as a challenge would be.
        if rst && next.is_some_and(|n| n != s.seq) {
            return Verdict::Ignore;
        }
        if syn {
            return Verdict::Ignore;
        }
        return Verdict::Accept;
    }
    // tcp_inbound_hash: a signature where the handshake had none (no key), or none where
    // both SYNs had one.
    if s.sig != (me.sig_syn && peer.sig_syn) {
        return Verdict::Invalid(Invalid::Signature);
    }
    // RFC 7323 H1: PAWS first (an RST is exempt).
    if !rst
        && let Some(tsval) = s.tsval
        && me.ts_syn
        && peer.ts_syn
        && me.ts_recent != 0
        && (me.ts_recent.wrapping_sub(tsval) as i32) > 1
    {
        return invalid(Invalid::Paws);
    }
    // tcp_sequence: the segment must start within the window the receiver offered.
    if let Some(edge) = peer.edge {
        let data_end = s.seq.wrapping_add(s.len);
        if after(s.seq, edge) || after(data_end, edge) {
            return if rst {
                Verdict::Invalid(Invalid::Rst)
            } else if syn {
                Verdict::Ignore
            } else {
                invalid(Invalid::Window)
            };
        }
    }
    if rst {
        let exact = next == Some(s.seq) || ooo_end == Some(s.seq);
        return if exact {
            Verdict::Accept
        } else {
            Verdict::Ignore
        };
    }
    if syn {
        return Verdict::Ignore;
    }
    // tcp_ack: an ACK of unsent data, or one too old.
    if let Some(nxt) = peer.snd_nxt
        && after(s.ack, nxt)
    {
        return invalid(Invalid::AckUnsent);
    }
    if let (Some(una), Some(first)) = (peer.snd_una, peer.first) {
        let acked = una.wrapping_sub(first);
        let max_window = me.max_wnd.min(acked);
        if after(una.wrapping_sub(max_window), s.ack) {
            return invalid(Invalid::AckTooOld);
        }
    }
    Verdict::Accept
}

impl Side {
    /// Learns from an accepted segment `s` sent by this side; `other` is the receiver;
    /// `syn_phase`: a SYN or SYN-ACK, whose window is never scaled. Its timestamp is
    /// recorded if it starts at or before what the receiver acknowledged (its `rcv_wup`).
    pub(crate) fn learn(&mut self, other: &mut Side, s: &Seg, syn_phase: bool) {
        let fin_syn = u32::from(s.flags & (FIN | SYN) != 0);
        let end = s.seq.wrapping_add(s.len).wrapping_add(fin_syn);
        self.snd_nxt = Some(seq_max(self.snd_nxt, end));
        self.ttl = Some(self.ttl.map_or(s.ttl, |t| t.min(s.ttl)));
        if s.flags & ACK != 0 {
            other.snd_una = Some(seq_max(other.snd_una, s.ack));
            // Windows on SYN segments are never scaled (RFC 7323 section 2.2).
            let shift = if syn_phase { 0 } else { self.shift };
            let wnd = u32::from(s.window) << shift;
            self.max_wnd = self.max_wnd.max(wnd);
            self.edge = Some(seq_max(self.edge, s.ack.wrapping_add(wnd)));
        }
        if let Some(tsval) = s.tsval {
            // tcp_replace_ts_recent: from segments at or before the receiver's last ACK,
            // never backwards.
            let in_order = self.snd_una.is_none_or(|una| !after(s.seq, una));
            if in_order && (tsval.wrapping_sub(self.ts_recent) as i32) >= 0 {
                self.ts_recent = tsval;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_read_and_bad_lengths_stop_the_walk() {
        // NOP NOP TS(10) WS(3) MSS(4)
        let opts = [1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9, 3, 3, 20, 2, 4, 5, 0xb4];
        let o = TcpOptions::parse(&opts);
        assert_eq!((o.tsval, o.wscale, o.tfo), (Some(7), Some(14), false));
        assert_eq!(TcpOptions::parse(&[8, 40, 0, 0]), TcpOptions::default());
        assert_eq!(TcpOptions::parse(&[8]), TcpOptions::default());
        assert!(TcpOptions::parse(&[34, 2]).tfo);
        for n in 0..opts.len() {
            let _ = TcpOptions::parse(&opts[..n]);
        }
    }

    #[test]
    fn ttl_reach_follows_the_hosts_distance() {
        // FORWARD: a directly attached Linux host's packets arrive with 63 (relayd's
        // decrement): any segment relayd forwards reaches it.
        assert!(reaches(1, 63, false));
        // Two routers beyond relayd: its packets arrive with 61; a segment needs 3.
        assert!(!reaches(2, 61, false));
        assert!(reaches(3, 61, false));
        assert!(reaches(100, 125, false));
        // PREROUTING: read before relayd's decrement. A direct host's packets come with
        // 64; a segment with 1 is dropped by relayd's own forwarding, 2 reaches.
        assert!(!reaches(1, 64, true));
        assert!(reaches(2, 64, true));
        // One router beyond: host's packets come with 63; a segment needs 3.
        assert!(!reaches(2, 63, true));
        assert!(reaches(3, 63, true));
    }
}
