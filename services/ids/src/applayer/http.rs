//! HTTP/1.x over reassembled stream bytes: requests and responses into transactions whose
//! buffers ([`crate::buffer::Buffer`]'s `http.*` and `file.data`) hold what Suricata's
//! hold, normalized as Suricata configures libhtp by default (see `http/uri.rs` for the
//! URI, `http/head.rs` for lines and headers, `http/body.rs` for bodies).
//!
//! One [`HttpState`] per flow. The engine feeds each direction's stream bytes in order
//! ([`HttpState::feed`]), tells it when a direction ends ([`HttpState::close`]), inspects
//! [`HttpState::txs`] and drops finished transactions ([`HttpState::retire`]).
//!
//! Messages: a request ends after its head, or after its body (Content-Length or chunked;
//! a request without either has none). A response to `HEAD`, and a 1xx, 204 or 304
//! response, has no body; else chunked, Content-Length, or until the server closes. An
//! interim 1xx response (`100 Continue`) is skipped whole: the final response fills the
//! buffers. A 101 response, or a 2xx answer to `CONNECT`, ends HTTP on the flow (what
//! follows is a tunnel and is ignored). A request without a protocol is HTTP/0.9: no
//! headers, and its response is all body until close. A response whose first line does
//! not start with `HTTP` is a body without head (libhtp does the same). Empty lines
//! before a request or status line are skipped. Requests pair with responses in order
//! (pipelining); a response with no request left gets a transaction of its own.
//!
//! Errors stop parsing of the direction they happen in (the engine marks the flow's
//! application layer failed; libhtp fails its request and response parsers separately, and
//! Suricata still inspects the response to a request that is not HTTP): a request line
//! whose method is not a token (bytes that are not HTTP), a head over the limit, more than [`HttpLimits::max_txs`] transactions not yet retired, more than 1024
//! distinct header names, a chunk-size line without hex digits, a response
//! Content-Length without digits.
//!
//! Bodies are kept de-chunked and decoded, up to the direction's body limit; past it the
//! direction is marked [`Progress::Complete`] with the body cut (Suricata inspects what it
//! has) and the rest of the body is skipped.
//!
//! Memory per flow, bounded: per direction the head being read (at most
//! [`HttpLimits::max_head`]) and one decoder while a compressed body is read (about
//! 80 KiB); per transaction, not yet retired, its two heads (each at most `max_head`, plus
//! as much again for chunked trailers), the normalized headers (about the head's size),
//! the normalized URI (at most the raw URI's size) and its two bodies (at most the body
//! limits). With the defaults that is under 0.5 MiB per transaction and
//! [`HttpLimits::max_txs`] transactions per flow. No panic on any input.

// The engine wires this in (issue 17); until then only the tests use it.
#![cfg_attr(not(test), allow(dead_code))]

mod bestfit;
mod body;
mod conn;
mod framing;
mod head;
mod multipart;
mod tx;
mod uri;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sv;

use std::collections::VecDeque;

use crate::applayer::Dir;

pub(crate) use tx::HttpTx;

/// The bounds of HTTP parsing on one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HttpLimits {
    /// Request body bytes kept per transaction (decoded size); Suricata's libhtp default
    /// `request-body-limit` is 100 KiB.
    pub(crate) request_body_limit: usize,
    /// Response body bytes kept per transaction (decoded size: also the decompression
    /// limit); Suricata's `response-body-limit` default is 100 KiB.
    pub(crate) response_body_limit: usize,
    /// Longest message head (start line and headers, and separately a trailer block);
    /// longer is an error.
    pub(crate) max_head: usize,
    /// Transactions held per flow (not yet retired); one more is an error.
    pub(crate) max_txs: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            request_body_limit: 100 * 1024,
            response_body_limit: 100 * 1024,
            max_head: 64 * 1024,
            max_txs: 32,
        }
    }
}

/// Why parsing of a flow's HTTP stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum HttpError {
    /// The bytes where a request line belongs are not one.
    #[error("not HTTP: the request line does not start with a method")]
    NotHttp,
    /// A message head (or trailer block) passed the limit.
    #[error("HTTP head longer than {0} bytes")]
    HeadTooLong(usize),
    /// Too many transactions held.
    #[error("more than {0} HTTP transactions pending on the flow")]
    TooManyTransactions(usize),
    /// More distinct header names than libhtp allows.
    #[error("more than {} distinct HTTP header names", head::MAX_FIELDS)]
    TooManyHeaders,
    /// A chunk-size line without a size.
    #[error("invalid HTTP chunk size line")]
    BadChunk,
    /// A response Content-Length without a number.
    #[error("invalid Content-Length in an HTTP response")]
    BadContentLength,
}

/// The HTTP parser of one flow and its transactions.
#[derive(Default)]
pub(crate) struct HttpState {
    txs: VecDeque<HttpTx>,
    next_id: u64,
    /// The transaction the next response answers.
    resp_next: u64,
    sides: [conn::Side; 2],
    /// Per direction, the error that stopped its parsing (libhtp too fails the request
    /// and the response parser separately).
    failed: [Option<HttpError>; 2],
    /// The limits of the last [`HttpState::feed`], for [`HttpState::close`].
    limits: HttpLimits,
}

impl HttpState {
    /// A parser for a new flow.
    pub(crate) fn new() -> HttpState {
        HttpState::default()
    }

    /// The transactions held, oldest first.
    pub(crate) fn txs(&self) -> impl Iterator<Item = &HttpTx> {
        self.txs.iter()
    }

    /// Drops the transactions with an id below `below_id` (the engine is done with them).
    pub(crate) fn retire(&mut self, below_id: u64) {
        while self.txs.front().is_some_and(|t| t.id < below_id) {
            self.txs.pop_front();
        }
    }

    /// The error that stopped parsing of direction `dir`, if any.
    pub(crate) fn failed(&self, dir: Dir) -> Option<HttpError> {
        self.failed.get(dir.index()).copied().flatten()
    }

    /// Heap bytes held by the transactions and the partial heads (not counting a body
    /// decoder's fixed state).
    pub(crate) fn memory(&self) -> usize {
        self.txs.iter().map(HttpTx::heap_size).sum::<usize>()
            + self.sides.iter().map(|s| s.buf.capacity()).sum::<usize>()
    }

    /// Parses the next bytes of direction `dir` (all of them; partial lines and heads are
    /// kept). After an error, every call for `dir` returns it and parses nothing; the other
    /// direction goes on (Suricata parses the response to a request that is not HTTP).
    pub(crate) fn feed(
        &mut self,
        dir: Dir,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<(), HttpError> {
        if let Some(e) = self.failed(dir) {
            return Err(e);
        }
        self.limits = *limits;
        let mut rest = data;
        let mut idle_steps = 0;
        while !rest.is_empty() {
            let used = match self.step(dir.index(), rest, limits) {
                Ok(n) => n,
                Err(e) => {
                    self.fail(dir, e);
                    return Err(e);
                }
            };
            // A step may change state without consuming, never twice in a row.
            idle_steps = if used == 0 { idle_steps + 1 } else { 0 };
            debug_assert!(idle_steps < 3, "HTTP parser made no progress");
            if idle_steps >= 3 {
                break;
            }
            rest = rest.get(used..).unwrap_or_default();
        }
        Ok(())
    }

    /// Direction `dir` ended (FIN, RST or flow end): what is in progress completes as in
    /// libhtp (a partial head is parsed as far as it goes, a body delimited by close or cut
    /// short ends); later bytes of `dir` are ignored.
    pub(crate) fn close(&mut self, dir: Dir) {
        if self.failed(dir).is_some() {
            return;
        }
        let limits = self.limits;
        if let Err(e) = self.finish_side(dir.index(), &limits) {
            self.fail(dir, e);
        }
    }

    /// Stops parsing of direction `dir` for good.
    fn fail(&mut self, dir: Dir, e: HttpError) {
        if let Some(f) = self.failed.get_mut(dir.index()) {
            *f = Some(e);
        }
        self.sides[dir.index()] = conn::Side::ignoring();
    }
}
