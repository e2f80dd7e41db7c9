//! DNS over UDP and TCP: per-flow state, one transaction per message, and the `dns.query`
//! buffer (each question's name, as Suricata gives it).
//!
//! Transactions follow Suricata 7 and 8 (`rust/src/dns/dns.rs`): every parsed request and
//! every parsed response is its own transaction, complete in both directions as soon as it
//! exists. A response does not join its request's transaction (the message id is kept on
//! each, [`DnsTx::dns_id`]); two requests with the same id are two transactions, as in
//! Suricata. `dns.query` ([`Buffer::DnsQuery`], direction to server) yields each question
//! name of a request: labels joined by `.`, bytes as on the wire (case kept, no trailing dot),
//! the root name skipped (Suricata returns no buffer for an empty name); a response's
//! transaction has none.
//!
//! What is a message, as Suricata: the header must be plausible (Suricata 8's
//! `probe_header_validity`: record counts that fit the length, a message without records is
//! exactly a header, a request asks a question), the questions and the answer records must
//! parse (names with compression pointers in either direction), authority and additional
//! records are not needed. A request direction message with QR set is refused
//! (`NotRequest`); a response direction message without it still makes a transaction. Over
//! UDP a bad datagram is counted and the next one is parsed; over TCP (2-byte length prefix;
//! a zero length is skipped) a bad message stops the parser for the flow, as Suricata's
//! parser error does.
//!
//! Why no crate: the issue names `dns-parser` and `hickory-proto`. `dns-parser` has had no
//! release since 2018. `hickory-proto` (0.26, default features off) still brings some 65
//! crates (`idna` and the ICU normaliser among them) for what is a 12-byte header and
//! question names, and it decodes names differently from Suricata: it refuses forward compression pointers
//! (suricata-verify `dns-forward-pointer` expects them accepted) and names over 255 bytes
//! (Suricata keeps 1025). The small decoder in `wire` does what Suricata does.
//!
//! Bounds, per flow: at most [`MAX_TXS`] transactions kept (the oldest is dropped and counted
//! when a new one would exceed it; the engine frees inspected ones with
//! [`DnsState::free_through`]); per transaction at most [`MAX_QUERIES`] names and
//! [`MAX_QUERY_BYTES`] bytes of names (the rest counted, not kept); over TCP at most one
//! partial message per direction is buffered (2 + 65,535 bytes, the protocol's limit), and
//! only when a message spans two calls. Worst case about 2 × 64 KiB + 32 × 4 KiB.

pub(crate) mod wire;

use std::collections::VecDeque;

use thiserror::Error;

use super::{Dir, Progress, Transaction};
use crate::applayer::buffer::Buffer;
pub(crate) use wire::WireError;

/// The most transactions kept per flow.
pub(crate) const MAX_TXS: usize = 32;

/// The most question names kept per transaction.
pub(crate) const MAX_QUERIES: usize = 64;

/// The most bytes of question names kept per transaction.
pub(crate) const MAX_QUERY_BYTES: usize = 4096;

/// A partial TCP message buffer above this capacity is released once the message is parsed.
const KEEP_CAPACITY: usize = 4096;

/// Why a message made no transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum DnsError {
    /// The header is not plausible for the message's length (not DNS).
    #[error("implausible DNS header")]
    Header,
    /// A message with QR set in the direction to the server.
    #[error("DNS response in the request direction")]
    NotRequest,
    /// The questions or answers do not parse.
    #[error("malformed DNS message: {0}")]
    Malformed(#[from] WireError),
}

/// What happened on a flow, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DnsStats {
    /// Messages that made a transaction.
    pub messages: u64,
    /// Messages that did not ([`DnsError`]).
    pub errors: u64,
    /// Transactions dropped unfreed because [`MAX_TXS`] were kept.
    pub txs_dropped: u64,
    /// Question names not kept because of [`MAX_QUERIES`] / [`MAX_QUERY_BYTES`].
    pub names_dropped: u64,
    /// Names cut at the name length limit, or stopped by a pointer loop or the label limit.
    pub names_truncated: u64,
}

/// One DNS message: a request (direction to server) or a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DnsTx {
    id: u64,
    dns_id: u16,
    flags: u16,
    dir: Dir,
    /// Question names, each as a 2-byte little-endian length and its bytes (one allocation
    /// per transaction instead of one per name).
    names: Vec<u8>,
}

impl DnsTx {
    /// The message id from the DNS header.
    #[cfg(test)]
    pub(crate) fn dns_id(&self) -> u16 {
        self.dns_id
    }

    /// The direction the message travelled: [`Dir::ToServer`] for a request.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> Dir {
        self.dir
    }

    /// The question names kept (empty names, the root, included), in order.
    pub(crate) fn queries(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest = self.names.as_slice();
        std::iter::from_fn(move || {
            let (len, tail) = rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let (name, tail) = tail.split_at_checked(len)?;
            rest = tail;
            Some(name)
        })
    }
}

impl Transaction for DnsTx {
    fn id(&self) -> u64 {
        self.id
    }

    /// Complete in both directions: a DNS transaction is one whole message.
    fn progress(&self, _dir: Dir) -> Progress {
        Progress::Complete
    }

    fn for_each(&self, b: Buffer, dir: Dir, f: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        if b != Buffer::DnsQuery || dir != Dir::ToServer || self.dir != Dir::ToServer {
            return false;
        }
        self.queries().filter(|n| !n.is_empty()).any(f)
    }
}

/// The DNS state of one flow (UDP or TCP).
#[derive(Debug, Default)]
pub(crate) struct DnsState {
    txs: VecDeque<DnsTx>,
    next_id: u64,
    /// Per direction, a TCP message (with its length prefix) that spans calls.
    partial: [Vec<u8>; 2],
    /// A TCP parse error stopped the parser.
    stopped: bool,
    /// Where question names are decoded before they are kept.
    scratch: Vec<u8>,
    /// Where a message's kept names are gathered before one exact-size copy into its tx.
    gathered: Vec<u8>,
    stats: DnsStats,
    /// What this state has charged to the application-layer memcap.
    pub(crate) mem: super::budget::Charge,
}

impl DnsState {
    /// A state with no transaction.
    #[cfg(test)]
    pub(crate) fn new() -> DnsState {
        DnsState::default()
    }

    /// Bytes this state holds (itself, its transactions and buffers), as charged to the
    /// application-layer memcap.
    pub(crate) fn memory(&self) -> usize {
        std::mem::size_of::<DnsState>()
            + self.txs.capacity() * std::mem::size_of::<DnsTx>()
            + self.txs.iter().map(|t| t.names.capacity()).sum::<usize>()
            + self.partial.iter().map(Vec::capacity).sum::<usize>()
            + self.scratch.capacity()
            + self.gathered.capacity()
    }

    /// Parses one UDP datagram travelling in `dir`. An error says why it made no
    /// transaction; the next datagram is parsed all the same.
    pub(crate) fn feed_datagram(&mut self, dir: Dir, data: &[u8]) -> Result<(), DnsError> {
        self.message(dir, data)
    }

    /// Parses the next bytes of the TCP stream travelling in `dir` (in order, no gap):
    /// length-prefixed messages, buffering one that is not complete yet. After an error
    /// (returned once) the flow's DNS parsing has stopped and later bytes are ignored.
    pub(crate) fn feed_stream(&mut self, dir: Dir, mut data: &[u8]) -> Result<(), DnsError> {
        if self.stopped {
            return Ok(());
        }
        let d = dir.index();
        if !self.partial[d].is_empty() {
            let mut buf = std::mem::take(&mut self.partial[d]);
            let need = |b: &[u8]| match b.first_chunk::<2>() {
                Some(l) => 2 + usize::from(u16::from_be_bytes(*l)),
                None => 2,
            };
            // The length first, then the rest of the message it announces.
            while buf.len() < need(&buf) && !data.is_empty() {
                let (head, tail) = data.split_at(data.len().min(need(&buf) - buf.len()));
                buf.extend_from_slice(head);
                data = tail;
            }
            if buf.len() < need(&buf) {
                self.partial[d] = buf;
                return Ok(());
            }
            let res = match buf.get(2..) {
                Some(msg) if !msg.is_empty() => self.message(dir, msg),
                _ => Ok(()),
            };
            buf.clear();
            if buf.capacity() <= KEEP_CAPACITY {
                self.partial[d] = buf;
            }
            self.stop_on(res)?;
        }
        while let Some((len, rest)) = data.split_first_chunk::<2>() {
            let len = usize::from(u16::from_be_bytes(*len));
            let Some((msg, tail)) = rest.split_at_checked(len) else {
                break;
            };
            // A zero length announces nothing: skipped, as Suricata does.
            if len > 0 {
                let res = self.message(dir, msg);
                self.stop_on(res)?;
            }
            data = tail;
        }
        if !data.is_empty() {
            let buf = &mut self.partial[d];
            let need = match data.first_chunk::<2>() {
                Some(l) => 2 + usize::from(u16::from_be_bytes(*l)),
                None => 2,
            };
            buf.reserve(need);
            buf.extend_from_slice(data);
        }
        Ok(())
    }

    /// On a TCP error: stop, drop the buffers, pass the error on.
    fn stop_on(&mut self, res: Result<(), DnsError>) -> Result<(), DnsError> {
        if res.is_err() {
            self.stopped = true;
            self.partial = Default::default();
        }
        res
    }

    /// Parses one whole message into a transaction.
    fn message(&mut self, dir: Dir, msg: &[u8]) -> Result<(), DnsError> {
        let res = self.parse(dir, msg);
        match res {
            Ok(()) => self.stats.messages += 1,
            Err(_) => self.stats.errors += 1,
        }
        res
    }

    fn parse(&mut self, dir: Dir, msg: &[u8]) -> Result<(), DnsError> {
        let h = wire::Header::parse(msg)
            .filter(|h| h.plausible(msg.len()))
            .ok_or(DnsError::Header)?;
        let names = &mut self.gathered;
        names.clear();
        let mut kept = 0usize;
        let mut dropped = 0u64;
        let flags = wire::walk(msg, &h, Some(&mut self.scratch), |name| {
            if kept < MAX_QUERIES && names.len() + 2 + name.len() <= MAX_QUERY_BYTES {
                // A name is at most MAX_NAME_LEN (1025) bytes: its length fits in u16.
                let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
                names.extend_from_slice(&len.to_le_bytes());
                names.extend_from_slice(name);
                kept += 1;
            } else {
                dropped += 1;
            }
        })?;
        if dir == Dir::ToServer && h.is_response() {
            return Err(DnsError::NotRequest);
        }
        self.stats.names_dropped += dropped;
        if flags.truncated || flags.infinite_loop || flags.label_limit {
            self.stats.names_truncated += 1;
        }
        if self.txs.len() >= MAX_TXS {
            self.txs.pop_front();
            self.stats.txs_dropped += 1;
        }
        self.txs.push_back(DnsTx {
            id: self.next_id,
            dns_id: h.id,
            flags: h.flags,
            dir,
            names: self.gathered.as_slice().to_vec(),
        });
        self.next_id += 1;
        Ok(())
    }

    /// The transactions kept, oldest first.
    pub(crate) fn txs(&self) -> impl Iterator<Item = &DnsTx> {
        self.txs.iter()
    }

    /// The transaction numbered `id`, if still kept.
    pub(crate) fn tx(&self, id: u64) -> Option<&DnsTx> {
        let first = self.txs.front()?.id;
        self.txs.get(usize::try_from(id.checked_sub(first)?).ok()?)
    }

    /// The id the next transaction will get (the number of transactions made so far).
    #[cfg(test)]
    pub(crate) fn next_tx_id(&self) -> u64 {
        self.next_id
    }

    /// Frees the transactions numbered up to and including `id` (inspected by the engine).
    pub(crate) fn free_through(&mut self, id: u64) {
        while self.txs.front().is_some_and(|t| t.id <= id) {
            self.txs.pop_front();
        }
    }

    /// True once a TCP parse error stopped the parser.
    #[cfg(test)]
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The flow's counters.
    #[cfg(test)]
    pub(crate) fn stats(&self) -> &DnsStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests;
