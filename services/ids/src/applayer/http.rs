//! HTTP/1.x over reassembled stream bytes: requests and responses into transactions whose
//! buffers ([`crate::applayer::buffer::Buffer`]'s `http.*` and `file.data`) hold what Suricata's
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
//! [`HttpLimits::max_txs`] transactions held when none can be evicted (below), the
//! application-layer memcap refusing memory, more than 1024 distinct header names, a
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
//! and 33 MiB per flow at the very worst; [`HttpState::memory`] tells the actual figure,
//! which a state made by [`HttpState::with_budget`] charges to the queue thread's
//! application-layer memcap after every step (and credits back as it frees, and when
//! dropped), so that all flows together stay within it. Past `max_txs`, the oldest
//! transaction whose response has not started is evicted (counted); its response, when it
//! comes, gets a transaction of its own marked as libhtp marks a response without
//! request, so later responses still pair with their own requests.
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
mod tests_memcap;
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
    /// Transactions held per flow (not yet retired); one more evicts the oldest unanswered
    /// one, or is an error if every one held is answered or being filled.
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
    /// The application-layer memcap refused the memory the flow's state needed.
    #[error("application-layer memcap reached")]
    Memcap,
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
    /// What this state has charged to the application-layer memcap (detached by default).
    mem: crate::applayer::budget::Charge,
    /// A close needed memory the memcap refused (the state must be freed).
    over_cap: bool,
}

impl HttpState {
    /// A state charging what it holds to `budget`.
    pub(crate) fn with_budget(budget: &crate::applayer::budget::AppBudget) -> HttpState {
        HttpState {
            mem: crate::applayer::budget::Charge::new(budget),
            ..HttpState::default()
        }
    }

    /// Bytes charged to the application-layer memcap.
    pub(crate) fn charged(&self) -> usize {
        self.mem.charged()
    }

    /// True once a close needed memory the memcap refused: the state should be freed.
    pub(crate) fn over_cap(&self) -> bool {
        self.over_cap
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
        // Shrinking always fits.
        self.mem.set(self.memory());
    }

    /// True if transaction `id` is held (not retired nor evicted).
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.txs.binary_search_by_key(&id, |t| t.id).is_ok()
    }

    /// The error that stopped parsing of direction `dir`, if any.
    pub(crate) fn failed(&self, dir: Dir) -> Option<HttpError> {
        self.failed.get(dir.index()).copied().flatten()
    }

    /// Bytes this state holds, as charged to the application-layer memcap: itself, the
    /// transaction slots and each transaction's buffers, the partial lines and heads, and
    /// the body decoders (their fixed state estimated, see [`body::Decoder::heap_size`]).
    pub(crate) fn memory(&self) -> usize {
        std::mem::size_of::<HttpState>()
            + self.txs.capacity() * std::mem::size_of::<HttpTx>()
            + self.txs.iter().map(HttpTx::heap_size).sum::<usize>()
            + self
                .sides
                .iter()
                .map(|s| {
                    s.buf.capacity()
                        + s.line.capacity()
                        + s.decoder.as_ref().map_or(0, body::Decoder::heap_size)
                })
                .sum::<usize>()
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
            // Charge what the step made the state hold: one step grows it by at most one
            // head or one body's worth, so memory past the cap is never held beyond it.
            if !self.mem.set(self.memory()) {
                self.fail(dir, HttpError::Memcap);
                return Err(HttpError::Memcap);
            }
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
        if !self.mem.set(self.memory()) {
            self.fail(dir, HttpError::Memcap);
            self.over_cap = true;
        }
    }

    /// Makes room for one more transaction: while `max_txs` are held, drops the oldest
    /// unanswered one (its response not started) that no direction is filling, and counts
    /// it (`app_tx_evicted`). Errs if every held transaction is answered or being filled.
    fn make_room(&mut self, limits: &HttpLimits) -> Result<(), HttpError> {
        while self.txs.len() >= limits.max_txs.max(1) {
            let busy = [self.sides[0].tx, self.sides[1].tx];
            let resp_next = self.resp_next;
            let Some(i) = self
                .txs
                .iter()
                .position(|t| t.id >= resp_next && !busy.contains(&Some(t.id)))
            else {
                return Err(HttpError::TooManyTransactions(limits.max_txs));
            };
            self.txs.remove(i);
            self.mem.evicted();
        }
        Ok(())
    }

    /// Puts a transaction `id` whose request is not held (evicted unanswered) in its
    /// place, marked as libhtp marks a response without request, for its response.
    fn stand_in(&mut self, id: u64, limits: &HttpLimits) -> Result<(), HttpError> {
        self.make_room(limits)?;
        let at = self.txs.partition_point(|t| t.id < id);
        let mut t = HttpTx {
            id,
            ..HttpTx::default()
        };
        t.progress[0] = crate::applayer::Progress::Complete;
        t.req.line = conn::NOT_SEEN.to_vec();
        t.req.parts.second = Some(0..conn::NOT_SEEN.len() as u32);
        t.uri = Some(uri::NormUri {
            uri: conn::NOT_SEEN.to_vec(),
            host: None,
        });
        self.txs.insert(at, t);
        Ok(())
    }

    /// Stops parsing of direction `dir` for good.
    fn fail(&mut self, dir: Dir, e: HttpError) {
        if let Some(f) = self.failed.get_mut(dir.index()) {
            *f = Some(e);
        }
        self.sides[dir.index()] = conn::Side::ignoring();
    }
}
