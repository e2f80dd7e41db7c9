//! HTTP/1.x over reassembled stream bytes: requests and responses into transactions whose
//! buffers ([`crate::buffer::Buffer`]'s `http.*` and `file.data`) hold what Suricata's
//! hold, parsed and normalized as Suricata configures libhtp by default (personality IDS)
//! and checked against Suricata 7.0.10 on the suricata-verify HTTP/1 captures; where
//! Suricata 7 and 8 differ, this follows 8.
//!
//! One [`HttpState`] per flow (its `Default`). The engine feeds each direction's stream bytes in order
//! ([`HttpState::feed`]), says when a direction ends ([`HttpState::close`]), inspects
//! [`HttpState::txs`] (each an [`HttpTx`], a [`crate::applayer::Transaction`]) and drops
//! the transactions it is done with ([`HttpState::retire`]). Cutting the bytes anywhere
//! gives the same transactions (a test feeds mutated traffic whole, byte by byte and at
//! random cuts).
//!
//! Where the details live: `http/head.rs` start lines and headers (httparse for header
//! blocks, with a libhtp-like fallback), `http/uri.rs` the URI, `http/body.rs` decoding,
//! `http/framing.rs` body framing, `http/conn.rs` the per-direction state machine and
//! what comes between messages, `http/multipart.rs` uploaded files, `http/tx.rs` which
//! bytes each buffer is.
//!
//! Messages: a request ends after its head, or after its body (Content-Length or chunked;
//! a request without either has none). A response to `HEAD`, and a 1xx, 204 or 304
//! response, has no body; else chunked, Content-Length, or until the server closes. An
//! interim 1xx response (`100 Continue`) is skipped whole: the final response fills the
//! buffers. A 101 response, or a 2xx answer to `CONNECT`, ends HTTP on the flow (the
//! tunnel is ignored). A request line without protocol followed by nothing but up to 16
//! whitespace bytes is HTTP/0.9 (no headers; its response is all body until close). A
//! response whose first line does not start with `HTTP` is a body without head. After a
//! message, lines that do not start the next one are more body of it (libhtp). Requests
//! pair with responses in order (pipelining); a response with no request left gets a
//! transaction of its own (URI `/libhtp::request_uri_not_seen`, as libhtp).
//!
//! Errors stop parsing of the direction they happen in (libhtp too fails its request and
//! response parsers separately, and Suricata still inspects the response to a request
//! that is not HTTP); the engine may stop the whole flow: a request line whose method is
//! not a token (bytes that are not HTTP), a head over [`HttpLimits::max_head`], more than
//! [`HttpLimits::max_txs`] transactions held, more than 1024 distinct header names, a
//! request chunk-size line without hex digits (a response's is read, as by libhtp, as the
//! start of a body until close), a response Content-Length without digits.
//!
//! Bodies are kept de-chunked and decoded (gzip, deflate), up to the direction's body
//! limit, which also bounds decompression; past it the direction is marked
//! [`crate::applayer::Progress::Complete`] with the body cut (Suricata inspects what it
//! has) and the rest of the body is skipped. `file.data` is the response body to the
//! client; to the server, each file of a multipart upload, else the body of a POST or PUT
//! (Suricata 8's file tracking).
//!
//! Memory per flow, bounded: per direction the head being read (at most `max_head`) and,
//! while a compressed body is read, one flate2 decoder (its 32 KiB window and 32 KiB output
//! buffer, about 80 KiB) and up to 16 KiB of input kept for a restart; per transaction held,
//! its two heads (each at most `max_head`, and as much again for chunked trailers), the
//! normalized headers (about the head's size again), the start lines and the normalized URI
//! (within the head's size) and its two bodies (at most the body limits). With the defaults
//! (64 KiB heads, 100 KiB bodies, 32 transactions) that is under 1 MiB per transaction
//! and 33 MiB per flow at the very worst; [`HttpState::memory`] tells the actual figure.
//! No panic on any input.

mod bestfit;
mod body;
pub(crate) use body::DecodeOptions;
mod conn;
mod framing;
mod head;
mod multipart;
mod tx;
mod uri;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lenient;
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
    /// Which content codings of a body are undone, and how many layers
    /// (`response-body-decompress-layer-limit`, `lzma-enabled`).
    pub(crate) decode: body::DecodeOptions,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            request_body_limit: 100 * 1024,
            response_body_limit: 100 * 1024,
            max_head: 64 * 1024,
            max_txs: 32,
            decode: body::DecodeOptions::default(),
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
    #[allow(
        dead_code,
        reason = "for the engine's memory accounting; the tests check the bound"
    )]
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
