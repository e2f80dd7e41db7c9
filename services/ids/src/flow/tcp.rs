//! The TCP state of a flow, after Suricata's `stream-tcp.c` reduced to what detection
//! needs: the three-way handshake (with the acknowledgement numbers checked, so a stray
//! SYN-ACK or ACK does not establish anything), FIN and RST, and the two [`Stream`]s.
//!
//! A flow picked up without its SYN is tracked but not reassembled unless the table's
//! `midstream` flag is set (Suricata's `stream.midstream: false` default). Data carried on
//! a SYN is reassembled only when the SYN carries a TCP Fast Open option (RFC 7413: kind
//! 34, or the experimental kinds 253/254 with magic 0xF989, as Suricata's `decode-tcp.c`
//! reads them); the SYN-ACK may then acknowledge the SYN with or without its data
//! (Suricata's `StateSynSentCheckSynAckTFO`). Other receivers drop data on a SYN.
//!
//! Once established, each segment is judged as its receiver would judge it (`judge`:
//! flags, PAWS, window, acknowledgement, RFC 5961 for RST and SYN, TTL): a segment the
//! receiver would discard is neither inserted nor learnt from, and is reported
//! ([`TcpOutcome::invalid`]) so that an inline detector drops it.

use super::judge::{self, Side, Verdict};
use crate::flow::Dir;
use crate::flow::stream::{MemBudget, SegmentResult, Stream, StreamPolicy};
use crate::flow::{Invalid, TcpHeader};
use relay_core::wire::tcp::flags::{ACK, FIN, RST, SYN};

/// Where a TCP flow's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub(crate) enum TcpState {
    /// No packet processed yet (only inside the first packet's processing).
    New,
    /// Picked up without a SYN (and `midstream` off): tracked, not reassembled.
    Unsynced,
    /// The client's SYN was seen.
    SynSent,
    /// The server's SYN-ACK was seen (or picked up on it with `midstream`).
    SynRecv,
    /// The handshake completed (or picked up mid-stream with `midstream`).
    Established,
    /// One side sent a FIN.
    Closing,
    /// Both sides sent a FIN, or an RST was seen.
    Closed,
}

/// The flow table's settings a session follows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opts {
    /// Reassemble flows picked up without their handshake.
    pub(crate) midstream: bool,
    /// Inline mode: segments overlapping with different data are not inserted.
    pub(crate) reject_different: bool,
    /// Judge segments as their receiver would.
    pub(crate) normalize: bool,
}

/// What a packet did to the TCP state.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TcpOutcome {
    /// The packet's segment in its direction's stream (`ignored` if not fed).
    pub(crate) seg: SegmentResult,
    /// The packet counts as established, as Suricata's `FLOW_PKT_ESTABLISHED`: the
    /// handshake was complete before it, or it completed it and carries data.
    pub(crate) established: bool,
    /// The packet closed the connection.
    pub(crate) closed: bool,
    /// The receiver would discard the segment (nothing of it was used).
    pub(crate) invalid: Option<Invalid>,
}

/// The TCP part of a flow.
#[derive(Debug)]
pub(crate) struct TcpSession {
    state: TcpState,
    /// Initial sequence numbers, by [`Dir::index`] (the client's is `isn[0]`).
    isn: [Option<u32>; 2],
    streams: [Stream; 2],
    fin: [bool; 2],
    /// The client's SYN carried a TCP Fast Open option.
    tfo: bool,
    /// What relayd knows of each endpoint, by [`Dir::index`] of what it sends.
    sides: [Side; 2],
    /// The handshake was seen both ways (windows, scales and timestamps are known).
    synced: bool,
    /// An RST accepted as the host would accept it ended the connection.
    reset: bool,
}

fn ignored() -> SegmentResult {
    SegmentResult {
        ignored: true,
        ..SegmentResult::default()
    }
}

fn seg_of(h: &TcpHeader, len: usize) -> judge::Seg {
    judge::Seg {
        seq: h.seq,
        ack: h.ack,
        flags: h.flags,
        window: h.window,
        len: len.min(u32::MAX as usize) as u32,
        tsval: h.tsval,
        urgent: h.urgent,
        sig: h.sig,
        ttl: h.ttl,
        ttl_before_decrement: h.ttl_before_decrement,
    }
}

impl TcpSession {
    pub(crate) fn new() -> TcpSession {
        TcpSession {
            state: TcpState::New,
            isn: [None; 2],
            streams: [Stream::new(), Stream::new()],
            fin: [false; 2],
            tfo: false,
            sides: [Side::default(); 2],
            synced: false,
            reset: false,
        }
    }

    pub(crate) fn state(&self) -> TcpState {
        self.state
    }

    /// The stream of direction `dir`, once started.
    pub(crate) fn stream(&self, dir: Dir) -> Option<&Stream> {
        self.streams.get(dir.index()).filter(|s| s.is_started())
    }

    pub(crate) fn stream_mut(&mut self, dir: Dir) -> Option<&mut Stream> {
        self.streams.get_mut(dir.index()).filter(|s| s.is_started())
    }

    /// True from the completed handshake on (also after FIN and RST, as Suricata's
    /// `ssn->state >= TCP_ESTABLISHED`).
    pub(crate) fn established(&self) -> bool {
        self.state >= TcpState::Established
    }

    /// True if the flow table may evict the flow to make room: not past the handshake, or
    /// closed.
    pub(crate) fn evictable(&self) -> bool {
        self.state < TcpState::Established || self.state == TcpState::Closed
    }

    /// True if a packet starting a new connection on this tuple should replace the flow
    /// (Suricata's `TcpSessionPacketSsnReuse`): a SYN without ACK on a flow picked up
    /// without one or closed, unless it repeats the client's ISN (a retransmission).
    pub(crate) fn reuse(&self, dir: Dir, h: &TcpHeader) -> bool {
        if h.flags & (SYN | ACK | RST | FIN) != SYN {
            return false;
        }
        match self.state {
            TcpState::Unsynced => true,
            TcpState::Closed => !(dir == Dir::ToServer && self.isn[0] == Some(h.seq)),
            _ => false,
        }
    }

    /// Sets each direction's overlap policy (by [`Dir::index`]: that of the direction's
    /// receiving host) and whether overlaps with different data are rejected.
    pub(crate) fn configure(&mut self, policies: [StreamPolicy; 2], reject_different: bool) {
        for (s, p) in self.streams.iter_mut().zip(policies) {
            s.configure(p, reject_different);
        }
    }

    /// Stops both streams for good and frees their memory (the flow was decided).
    pub(crate) fn abandon(&mut self, budget: &mut MemBudget) {
        for s in &mut self.streams {
            s.abandon(budget);
        }
    }

    /// Frees both streams' memory (the flow ends).
    pub(crate) fn release(&mut self, budget: &mut MemBudget) {
        for s in &mut self.streams {
            s.release(budget);
        }
    }

    /// Processes one packet of direction `dir` (as the flow table decided it: for the first
    /// packet, a SYN-ACK picked up with `midstream` travels to the client).
    pub(crate) fn packet(
        &mut self,
        dir: Dir,
        h: &TcpHeader,
        payload: &[u8],
        opts: &Opts,
        budget: &mut MemBudget,
    ) -> TcpOutcome {
        let was_established = self.established();
        let was_closed = self.state == TcpState::Closed;
        let mut out = TcpOutcome {
            seg: ignored(),
            ..TcpOutcome::default()
        };
        let f = h.flags;
        let (syn, ack, rst) = (f & SYN != 0, f & ACK != 0, f & RST != 0);
        let i = dir.index();
        let o = dir.reverse().index();
        let seg = seg_of(h, payload.len());
        match self.state {
            TcpState::New => {
                if syn && !ack && !rst {
                    self.state = TcpState::SynSent;
                    self.syn(i, h);
                    self.tfo_data(dir, h, payload, budget, &mut out);
                } else if syn && ack && !rst && opts.midstream {
                    self.state = TcpState::SynRecv;
                    self.syn(i, h);
                    self.streams[o].start(h.ack);
                } else if !syn && !rst && opts.midstream {
                    // Not established itself: Suricata decides a packet's
                    // `FLOW_PKT_ESTABLISHED` before the stream engine creates the session.
                    self.state = TcpState::Established;
                    self.streams[i].start(h.seq);
                    if ack {
                        self.streams[o].start(h.ack);
                    }
                    self.data(dir, h, payload, budget, &mut out);
                } else {
                    // An RST without a session creates none (Suricata's
                    // `STREAM_RST_BUT_NO_SESSION`): the flow stays unsynced.
                    self.state = TcpState::Unsynced;
                }
            }
            TcpState::Unsynced => {}
            TcpState::SynSent => {
                let acks_syn = self.isn[0].map(|s| s.wrapping_add(1)) == Some(h.ack);
                // An answer to the SYN that echoes a timestamp the client never sent is
                // discarded by it (an RST or SYN-ACK that would end or open nothing).
                if dir == Dir::ToClient
                    && ack
                    && opts.normalize
                    && h.tsval.is_some()
                    && !self.sides[0].echoes_syn(h.tsecr)
                {
                    out.invalid = Some(Invalid::Paws);
                    return out;
                }
                // With TCP Fast Open the SYN-ACK may acknowledge the SYN's data too.
                let acks_tfo = self.tfo && self.streams[0].next_seq() == h.ack;
                if dir == Dir::ToClient && syn && ack && !rst && (acks_syn || acks_tfo) {
                    self.state = TcpState::SynRecv;
                    self.syn(i, h);
                    // Both SYNs seen: the window scales apply from now on.
                    if let (Some(a), Some(b)) = (self.sides[0].wscale_syn, self.sides[1].wscale_syn)
                    {
                        self.sides[0].shift = a;
                        self.sides[1].shift = b;
                    }
                    self.synced = self.isn[0].is_some();
                } else if dir == Dir::ToServer && syn && !ack && !rst {
                    // A new SYN with another ISN replaces the first (nothing received yet);
                    // a retransmitted TCP Fast Open SYN adds nothing new.
                    self.syn(i, h);
                    self.tfo_data(dir, h, payload, budget, &mut out);
                } else if dir == Dir::ToClient && rst && ack && acks_syn {
                    self.state = TcpState::Closed;
                }
            }
            TcpState::SynRecv => {
                let acks_syn = self.isn[1].map(|s| s.wrapping_add(1)) == Some(h.ack);
                if rst && self.rst_exact(i, h.seq) {
                    self.state = TcpState::Closed;
                } else if dir == Dir::ToServer && ack && !syn && !rst && acks_syn {
                    // Data on the handshake's last ACK (the plain ACK may have been lost).
                    self.state = TcpState::Established;
                    out.established = !payload.is_empty();
                    let (me, peer) = self.pair(i);
                    me.learn(peer, &seg, false);
                    self.data(dir, h, payload, budget, &mut out);
                }
            }
            TcpState::Established | TcpState::Closing => {
                self.established_packet(dir, h, payload, &seg, opts.normalize, budget, &mut out);
            }
            TcpState::Closed => {
                // The host reset the connection: it delivers nothing more. Should relayd
                // have judged the RST wrongly (the host's idea of the next byte differs),
                // data let through uninspected would reach the application, so data is
                // refused instead (fail closed).
                if self.reset && opts.normalize && (!payload.is_empty() || f & FIN != 0) {
                    out.invalid = Some(Invalid::Reset);
                }
            }
        }
        out.established |= was_established;
        out.closed = self.state == TcpState::Closed && !was_closed;
        out
    }

    /// A segment after the handshake: judged as its receiver would (module docs), then
    /// inserted and learnt from if accepted.
    #[allow(clippy::too_many_arguments)]
    fn established_packet(
        &mut self,
        dir: Dir,
        h: &TcpHeader,
        payload: &[u8],
        seg: &judge::Seg,
        normalize: bool,
        budget: &mut MemBudget,
        out: &mut TcpOutcome,
    ) {
        let (i, o) = (dir.index(), dir.reverse().index());
        let stream = &self.streams[i];
        // The receiver's next expected sequence number: relayd's reassembly while it
        // runs (past the FIN once that was received), else the highest the sender sent.
        let next = if stream.reassembling() {
            Some(stream.next_seq().wrapping_add(u32::from(self.fin[i])))
        } else {
            self.sides[i].snd_nxt
        };
        let verdict = if normalize {
            judge::judge(
                &self.sides[i],
                &self.sides[o],
                seg,
                self.synced,
                next,
                stream.ooo_end_seq(),
            )
        } else if h.flags & (RST | SYN) != 0 && next != Some(h.seq) {
            // RFC 5961 even so: an RST elsewhere than the next byte does not end it.
            Verdict::Ignore
        } else {
            Verdict::Accept
        };
        match verdict {
            Verdict::Invalid(why) => {
                out.invalid = Some(why);
                return;
            }
            Verdict::Ignore => return,
            Verdict::Accept => {}
        }
        let f = h.flags;
        if f & RST != 0 {
            self.state = TcpState::Closed;
            self.reset = true;
            return;
        }
        // Picked up mid-stream on a packet without ACK: the other direction starts at
        // its first packet.
        if let Some(s) = self.streams.get_mut(i)
            && !s.is_started()
        {
            s.start(h.seq);
        }
        self.data(dir, h, payload, budget, out);
        if out.seg.rejected {
            out.invalid = Some(Invalid::Overlap);
            return;
        }
        let (me, peer) = self.pair(i);
        me.learn(peer, seg, false);
        if f & FIN != 0 {
            self.fin[i] = true;
            self.state = if self.fin[o] {
                TcpState::Closed
            } else {
                TcpState::Closing
            };
        }
    }

    /// The side sending in direction index `i` and the other, mutably.
    fn pair(&mut self, i: usize) -> (&mut Side, &mut Side) {
        let [a, b] = &mut self.sides;
        if i == 0 { (a, b) } else { (b, a) }
    }

    fn syn(&mut self, i: usize, h: &TcpHeader) {
        if let Some(isn) = self.isn.get_mut(i) {
            *isn = Some(h.seq);
        }
        if let Some(s) = self.streams.get_mut(i) {
            s.start(h.seq.wrapping_add(1));
        }
        let (me, peer) = self.pair(i);
        // A retransmitted SYN keeps the first one's timestamp (Linux's `retrans_stamp`).
        let syn_ts = match h.tsval {
            Some(t) if me.ts_syn && me.first == Some(h.seq.wrapping_add(1)) => [me.syn_ts[0], t],
            Some(t) => [t, t],
            None => [0, 0],
        };
        *me = Side {
            first: Some(h.seq.wrapping_add(1)),
            syn_ts,
            wscale_syn: h.wscale,
            ts_syn: h.tsval.is_some(),
            sig_syn: h.sig,
            // The other side records the SYN's timestamp (tcp_openreq_init).
            ts_recent: h.tsval.unwrap_or(0),
            ..Side::default()
        };
        me.learn(peer, &seg_of(h, 0), true);
    }

    /// Reassembles the data of a client SYN carrying a TCP Fast Open option (its first
    /// byte follows the SYN's sequence number).
    fn tfo_data(
        &mut self,
        dir: Dir,
        h: &TcpHeader,
        payload: &[u8],
        budget: &mut MemBudget,
        out: &mut TcpOutcome,
    ) {
        if !h.tfo || dir != Dir::ToServer {
            return;
        }
        self.tfo = true;
        if let Some(s) = self.streams.get_mut(dir.index())
            && s.is_started()
            && !payload.is_empty()
        {
            out.seg = s.segment(h.seq.wrapping_add(1), payload, false, budget);
            // The SYN's data counts as sent.
            let end = h.seq.wrapping_add(1).wrapping_add(payload.len() as u32);
            let me = &mut self.sides[dir.index()];
            if me.snd_nxt.is_none_or(|n| judge::after(end, n)) {
                me.snd_nxt = Some(end);
            }
        }
    }

    fn data(
        &mut self,
        dir: Dir,
        h: &TcpHeader,
        payload: &[u8],
        budget: &mut MemBudget,
        out: &mut TcpOutcome,
    ) {
        let fin = h.flags & FIN != 0;
        if let Some(s) = self.streams.get_mut(dir.index())
            && s.is_started()
            && (!payload.is_empty() || fin)
        {
            out.seg = s.segment(h.seq, payload, fin, budget);
        }
    }

    /// RFC 5961 during the handshake: an RST ends it only at the exact next sequence
    /// number of its direction.
    fn rst_exact(&self, i: usize, seq: u32) -> bool {
        match self.streams.get(i) {
            Some(s) if s.is_started() => seq == s.next_seq(),
            _ => true,
        }
    }
}

/// True if the TCP options `opts` (the bytes after the fixed 20-byte header) hold a TCP
/// Fast Open option as Suricata's `decode-tcp.c` accepts it: kind 34 with length 2 (a
/// cookie request) or an even length of 4 to 18, or experimental kind 253 or 254 of length
/// 4 or 12 whose first two bytes are the magic 0xF989. Stops at an end-of-list option or a
/// malformed length; never reads past `opts`.
#[cfg(test)]
pub(crate) fn tcp_fast_open(opts: &[u8]) -> bool {
    crate::flow::TcpOptions::parse(opts).tfo
}
