//! The TCP state of a flow, after Suricata's `stream-tcp.c` reduced to what detection
//! needs: the three-way handshake (with the acknowledgement numbers checked, so a stray
//! SYN-ACK or ACK does not establish anything), FIN and RST, and the two [`Stream`]s.
//!
//! A flow picked up without its SYN is tracked but not reassembled unless the table's
//! `midstream` flag is set (Suricata's `stream.midstream: false` default). Data carried on
//! a SYN is reassembled only when the SYN carries a TCP Fast Open option (RFC 7413: kind
//! 34, or the experimental kinds 253/254 with magic 0xF989, as Suricata's `decode-tcp.c`
//! reads them); the SYN-ACK may then acknowledge the SYN with or without its data
//! (Suricata's `StateSynSentCheckSynAckTFO`). Other receivers drop data on a SYN. An
//! RST is believed if its sequence number is not behind the data already seen in its
//! direction (RFC 5961 asks the receiver for an exact match or a challenge ACK, which a
//! passive observer cannot send).

use crate::applayer::Dir;
use crate::flow::TcpHeader;
use crate::stream::{MemBudget, SegmentResult, Stream};
use relay_core::wire::tcp::flags::{ACK, FIN, RST, SYN};

/// An RST this far (or less) ahead of the next expected sequence number is believed: the
/// largest TCP window (RFC 7323, 2^30).
const RST_WINDOW: u32 = 1 << 30;

/// Where a TCP flow's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum TcpState {
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
}

fn ignored() -> SegmentResult {
    SegmentResult {
        ignored: true,
        ..SegmentResult::default()
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
        }
    }

    pub(crate) fn state(&self) -> TcpState {
        self.state
    }

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
        midstream: bool,
        budget: &mut MemBudget,
    ) -> TcpOutcome {
        let was_established = self.established();
        let was_closed = self.state == TcpState::Closed;
        let mut out = TcpOutcome {
            seg: ignored(),
            ..TcpOutcome::default()
        };
        let f = h.flags;
        let (syn, ack, rst, fin) = (f & SYN != 0, f & ACK != 0, f & RST != 0, f & FIN != 0);
        let i = dir.index();
        let o = dir.reverse().index();
        match self.state {
            TcpState::New => {
                if syn && !ack && !rst {
                    self.state = TcpState::SynSent;
                    self.syn(i, h.seq);
                    self.tfo_data(dir, h, payload, budget, &mut out);
                } else if syn && ack && !rst && midstream {
                    self.state = TcpState::SynRecv;
                    self.syn(i, h.seq);
                    self.streams[o].start(h.ack);
                } else if !syn && !rst && midstream {
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
                // With TCP Fast Open the SYN-ACK may acknowledge the SYN's data too.
                let acks_tfo = self.tfo && self.streams[0].next_seq() == h.ack;
                if dir == Dir::ToClient && syn && ack && !rst && (acks_syn || acks_tfo) {
                    self.state = TcpState::SynRecv;
                    self.syn(i, h.seq);
                } else if dir == Dir::ToServer && syn && !ack && !rst {
                    // A new SYN with another ISN replaces the first (nothing received yet);
                    // a retransmitted TCP Fast Open SYN adds nothing new.
                    self.syn(i, h.seq);
                    self.tfo_data(dir, h, payload, budget, &mut out);
                } else if dir == Dir::ToClient && rst && ack && acks_syn {
                    self.state = TcpState::Closed;
                }
            }
            TcpState::SynRecv => {
                let acks_syn = self.isn[1].map(|s| s.wrapping_add(1)) == Some(h.ack);
                if rst && self.rst_valid(i, h.seq) {
                    self.state = TcpState::Closed;
                } else if dir == Dir::ToServer && ack && !syn && !rst && acks_syn {
                    // Data on the handshake's last ACK (the plain ACK may have been lost).
                    self.state = TcpState::Established;
                    out.established = !payload.is_empty();
                    self.data(dir, h, payload, budget, &mut out);
                }
            }
            TcpState::Established | TcpState::Closing => {
                if rst {
                    if self.rst_valid(i, h.seq) {
                        self.state = TcpState::Closed;
                    }
                } else if !syn {
                    // Picked up mid-stream on a packet without ACK: the other direction
                    // starts at its first packet.
                    if let Some(s) = self.streams.get_mut(i)
                        && !s.is_started()
                    {
                        s.start(h.seq);
                    }
                    self.data(dir, h, payload, budget, &mut out);
                    if fin {
                        self.fin[i] = true;
                        self.state = if self.fin[o] {
                            TcpState::Closed
                        } else {
                            TcpState::Closing
                        };
                    }
                }
            }
            TcpState::Closed => {}
        }
        out.established |= was_established;
        out.closed = self.state == TcpState::Closed && !was_closed;
        out
    }

    fn syn(&mut self, i: usize, seq: u32) {
        if let Some(isn) = self.isn.get_mut(i) {
            *isn = Some(seq);
        }
        if let Some(s) = self.streams.get_mut(i) {
            s.start(seq.wrapping_add(1));
        }
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

    fn rst_valid(&self, i: usize, seq: u32) -> bool {
        match self.streams.get(i) {
            Some(s) if s.is_started() => seq.wrapping_sub(s.next_seq()) < RST_WINDOW,
            _ => true,
        }
    }
}

/// True if the TCP options `opts` (the bytes after the fixed 20-byte header) hold a TCP
/// Fast Open option as Suricata's `decode-tcp.c` accepts it: kind 34 with length 2 (a
/// cookie request) or an even length of 4 to 18, or experimental kind 253 or 254 of length
/// 4 or 12 whose first two bytes are the magic 0xF989. Stops at an end-of-list option or a
/// malformed length; never reads past `opts`.
pub fn tcp_fast_open(opts: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&kind) = opts.get(i) {
        match kind {
            0 => return false,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(&len) = opts.get(i + 1) else {
            return false;
        };
        let len = usize::from(len);
        if len < 2 || i + len > opts.len() {
            return false;
        }
        match kind {
            34 if len == 2 || ((4..=18).contains(&len) && len % 2 == 0) => return true,
            253 | 254
                if (len == 4 || len == 12) && opts.get(i + 2..i + 4) == Some(&[0xf9, 0x89]) =>
            {
                return true;
            }
            _ => {}
        }
        i += len;
    }
    false
}
