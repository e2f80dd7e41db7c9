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
//! Errors stop parsing of the flow (the engine marks its application layer failed): a
//! request line whose method is not a token (bytes that are not HTTP), a head over the
//! limit, more than [`HttpLimits::max_txs`] transactions not yet retired, more than 1024
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
mod head;
mod tx;
mod uri;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use body::{Chunk, Coding, Decoder, Framing};
use head::Headers;

use crate::applayer::{Dir, Progress};

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

/// The longest chunk-size line read (libhtp's field limit is 18000).
const MAX_CHUNK_LINE: usize = 8 * 1024;

/// Where a direction's parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Phase {
    /// Between messages.
    #[default]
    Idle,
    /// Reading a head.
    Head,
    /// Reading a body.
    Body,
    /// Ignoring everything (tunnel, or the direction closed).
    Ignore,
}

/// Finds the empty line ending a header or trailer block, across calls.
#[derive(Debug, Clone, Copy, Default)]
struct BlankScan {
    /// Bytes in the current line so far.
    len: usize,
    /// The current line starts with CR.
    cr: bool,
}

impl BlankScan {
    /// Scans `data`; returns the offset just past the LF ending an empty line, if any.
    fn find(&mut self, data: &[u8]) -> Option<usize> {
        let mut i = 0;
        loop {
            let rest = data.get(i..).unwrap_or_default();
            let lf = memchr::memchr(b'\n', rest);
            let seg = rest.get(..lf.unwrap_or(rest.len())).unwrap_or_default();
            if self.len == 0 && seg.first() == Some(&b'\r') {
                self.cr = true;
            }
            self.len += seg.len();
            let lf = lf?;
            let blank = self.len == 0 || (self.len == 1 && self.cr);
            *self = BlankScan::default();
            i += lf + 1;
            if blank {
                return Some(i);
            }
        }
    }
}

/// One direction's parser.
#[derive(Default)]
struct Side {
    phase: Phase,
    /// Bytes of the line or block being read.
    buf: Vec<u8>,
    /// The start line is in (reading the header block).
    line_done: bool,
    /// The response being read is an interim 1xx one, to be skipped.
    interim: bool,
    /// Bytes of the current head so far (line and block).
    head_len: usize,
    scan: BlankScan,
    /// The transaction this direction is filling.
    tx: Option<u64>,
    framing: Option<Framing>,
    /// Decodes the body; `None` once the body passed the limit.
    decoder: Option<Decoder>,
}

/// The HTTP parser of one flow and its transactions.
#[derive(Default)]
pub(crate) struct HttpState {
    txs: VecDeque<HttpTx>,
    next_id: u64,
    /// The transaction the next response answers.
    resp_next: u64,
    sides: [Side; 2],
    failed: Option<HttpError>,
}

/// The transaction `id` in `txs` (ids are consecutive from the front).
fn tx_mut(txs: &mut VecDeque<HttpTx>, id: Option<u64>) -> Option<&mut HttpTx> {
    let front = txs.front()?.id;
    let i = usize::try_from(id?.checked_sub(front)?).ok()?;
    txs.get_mut(i)
}

/// The message of direction `d` (0 request, 1 response).
fn msg_mut(tx: &mut HttpTx, d: usize) -> &mut tx::Message {
    if d == 0 { &mut tx.req } else { &mut tx.resp }
}

/// `line` without the CR and LF bytes ending it.
fn chomp(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&c| c != b'\r' && c != b'\n')
        .map_or(0, |e| e + 1);
    line.get(..end).unwrap_or_default()
}

/// `http.host` from a Host header value as libhtp: the host part (up to `:`, `/`, `?`
/// or `#`; a bracketed IPv6 address whole), lowercased; `None` if empty.
fn host_of(value: &[u8]) -> Option<Vec<u8>> {
    let (h, _) = uri::hostport(value);
    let end = if h.first() == Some(&b'[') {
        h.len()
    } else {
        h.iter()
            .position(|c| matches!(c, b'/' | b'?' | b'#'))
            .unwrap_or(h.len())
    };
    let h = head::trim(h.get(..end).unwrap_or_default());
    (!h.is_empty()).then(|| h.to_ascii_lowercase())
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

    /// The error that stopped parsing, if any.
    pub(crate) fn failed(&self) -> Option<HttpError> {
        self.failed
    }

    /// Heap bytes held by the transactions and the partial heads.
    pub(crate) fn memory(&self) -> usize {
        self.txs.iter().map(HttpTx::heap_size).sum::<usize>()
            + self.sides.iter().map(|s| s.buf.capacity()).sum::<usize>()
    }

    /// Parses the next bytes of direction `dir` (all of them; partial lines and heads are
    /// kept). After an error, every call returns it and parses nothing.
    pub(crate) fn feed(
        &mut self,
        dir: Dir,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<(), HttpError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut rest = data;
        let mut idle_steps = 0;
        while !rest.is_empty() {
            let used = match self.step(dir.index(), rest, limits) {
                Ok(n) => n,
                Err(e) => {
                    self.failed = Some(e);
                    return Err(e);
                }
            };
            // A step may change state without consuming; never twice in a row.
            idle_steps = if used == 0 { idle_steps + 1 } else { 0 };
            debug_assert!(idle_steps < 3, "HTTP parser made no progress");
            if idle_steps >= 3 {
                break;
            }
            rest = rest.get(used..).unwrap_or_default();
        }
        Ok(())
    }

    /// Direction `dir` ended (FIN, RST or flow end): a body delimited by close, and any
    /// message in progress, completes; later bytes of `dir` are ignored.
    pub(crate) fn close(&mut self, dir: Dir) {
        let d = dir.index();
        let Some(side) = self.sides.get_mut(d) else {
            return;
        };
        if side.phase != Phase::Ignore && side.tx.is_some() {
            self.complete(d);
        }
        if let Some(side) = self.sides.get_mut(d) {
            side.phase = Phase::Ignore;
            side.buf = Vec::new();
        }
    }

    /// One step over `data` (non-empty) for direction `d`: the bytes used.
    fn step(&mut self, d: usize, data: &[u8], limits: &HttpLimits) -> Result<usize, HttpError> {
        let Some(side) = self.sides.get_mut(d) else {
            return Ok(data.len());
        };
        match side.phase {
            Phase::Ignore => Ok(data.len()),
            Phase::Idle => {
                let skip = data
                    .iter()
                    .take_while(|&&c| c == b'\r' || c == b'\n')
                    .count();
                if skip == 0 {
                    self.start(d, limits)?;
                }
                Ok(skip)
            }
            Phase::Head if !side.line_done => self.read_line(d, data, limits),
            Phase::Head => {
                let end = side.scan.find(data);
                let used = end.unwrap_or(data.len());
                side.buf
                    .extend_from_slice(data.get(..used).unwrap_or_default());
                side.head_len += used;
                if side.head_len > limits.max_head {
                    return Err(HttpError::HeadTooLong(limits.max_head));
                }
                if end.is_some() {
                    self.head_done(d, limits)?;
                }
                Ok(used)
            }
            Phase::Body => self.read_body(d, data, limits),
        }
    }

    /// Starts a message on direction `d` (at its first byte that is not a line end).
    fn start(&mut self, d: usize, limits: &HttpLimits) -> Result<(), HttpError> {
        if d == 1 && self.get(self.resp_next).is_some_and(|t| t.http09) {
            // The answer to an HTTP/0.9 request has no head.
            return self.body_without_head(limits);
        }
        if let Some(side) = self.sides.get_mut(d) {
            *side = Side {
                phase: Phase::Head,
                buf: std::mem::take(&mut side.buf),
                ..Side::default()
            };
            side.buf.clear();
        }
        Ok(())
    }

    /// The transaction `id`, if held.
    fn get(&self, id: u64) -> Option<&HttpTx> {
        let front = self.txs.front()?.id;
        self.txs.get(usize::try_from(id.checked_sub(front)?).ok()?)
    }

    /// Appends a new transaction; errs if too many are held.
    fn new_tx(&mut self, limits: &HttpLimits) -> Result<u64, HttpError> {
        if self.txs.len() >= limits.max_txs {
            return Err(HttpError::TooManyTransactions(limits.max_txs));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.txs.push_back(HttpTx {
            id,
            ..HttpTx::default()
        });
        Ok(id)
    }

    /// The transaction the response starting now answers (a new one if no request is
    /// waiting); sets the response side's transaction.
    fn pair_response(&mut self, limits: &HttpLimits) -> Result<u64, HttpError> {
        let id = if self.resp_next < self.next_id {
            self.resp_next
        } else {
            // libhtp: a response without a request gets a transaction of its own.
            let id = self.new_tx(limits)?;
            if let Some(t) = tx_mut(&mut self.txs, Some(id)) {
                t.progress[0] = Progress::Complete;
            }
            id
        };
        self.resp_next = id + 1;
        self.sides[1].tx = Some(id);
        Ok(id)
    }

    /// The response is all body until close (no head).
    fn body_without_head(&mut self, limits: &HttpLimits) -> Result<(), HttpError> {
        let id = self.pair_response(limits)?;
        if let Some(t) = tx_mut(&mut self.txs, Some(id)) {
            t.progress[1] = Progress::Headers;
        }
        let side = &mut self.sides[1];
        side.phase = Phase::Body;
        side.framing = Some(Framing::Close);
        side.decoder = Some(Decoder::new(Coding::Identity, limits.response_body_limit));
        Ok(())
    }

    /// Reads the start line of direction `d`.
    fn read_line(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let side = &mut self.sides[d];
        let lf = memchr::memchr(b'\n', data);
        let used = lf.map_or(data.len(), |p| p + 1);
        side.buf
            .extend_from_slice(data.get(..used).unwrap_or_default());
        side.head_len += used;
        if d == 1 && side.buf.len() < 16 {
            let seen = side.buf.as_slice();
            if head::looks_like_status(seen, lf.is_some()) == Some(false) {
                // Not a status line: the bytes are body (libhtp, and browsers).
                let bytes = std::mem::take(&mut side.buf);
                self.body_without_head(limits)?;
                self.write_body(1, &bytes);
                return Ok(used);
            }
        }
        if side.head_len > limits.max_head {
            return Err(HttpError::HeadTooLong(limits.max_head));
        }
        if lf.is_none() {
            return Ok(used);
        }
        let buf = std::mem::take(&mut self.sides[d].buf);
        let line = chomp(&buf);
        if d == 0 {
            self.request_line(line, limits)?;
        } else if head::looks_like_status(line, true) == Some(false) {
            self.body_without_head(limits)?;
            self.write_body(1, &buf);
        } else {
            self.status_line(line, limits)?;
        }
        let side = &mut self.sides[d];
        side.buf = buf;
        side.buf.clear();
        Ok(used)
    }

    /// A request line is in.
    fn request_line(&mut self, line: &[u8], limits: &HttpLimits) -> Result<(), HttpError> {
        let parts = head::request_line(line).ok_or(HttpError::NotHttp)?;
        let id = self.new_tx(limits)?;
        let Some(t) = tx_mut(&mut self.txs, Some(id)) else {
            return Ok(());
        };
        t.req.line = line.to_vec();
        t.req.parts = parts;
        let connect = t.method() == Some(b"CONNECT");
        let raw_uri = t
            .req
            .parts
            .second
            .as_ref()
            .and_then(|r| line.get(r.start as usize..r.end as usize));
        t.uri = raw_uri.map(|u| uri::normalize(u, connect));
        t.host = t.uri.as_ref().and_then(|u| u.host.clone());
        let side = &mut self.sides[0];
        side.tx = Some(id);
        if t.req.parts.third.is_none() {
            t.http09 = true;
            t.progress[0] = Progress::Complete;
            side.tx = None;
            side.phase = Phase::Idle;
        } else {
            t.progress[0] = Progress::Line;
            side.line_done = true;
        }
        Ok(())
    }

    /// A status line is in (and looks like one).
    fn status_line(&mut self, line: &[u8], limits: &HttpLimits) -> Result<(), HttpError> {
        let parts = head::status_line(line);
        let status = parts
            .second
            .as_ref()
            .and_then(|r| line.get(r.start as usize..r.end as usize))
            .and_then(head::status_number);
        self.sides[1].line_done = true;
        if status.is_some_and(|s| (100..200).contains(&s) && s != 101) {
            self.sides[1].interim = true;
            return Ok(());
        }
        let id = self.pair_response(limits)?;
        if let Some(t) = tx_mut(&mut self.txs, Some(id)) {
            t.resp.line = line.to_vec();
            t.resp.parts = parts;
            t.progress[1] = Progress::Line;
        }
        Ok(())
    }

    /// The header block of direction `d` is in `buf`.
    fn head_done(&mut self, d: usize, limits: &HttpLimits) -> Result<(), HttpError> {
        let side = &mut self.sides[d];
        let block = std::mem::take(&mut side.buf);
        if side.interim {
            // An interim response: the final one follows for the same transaction.
            *side = Side {
                buf: block,
                ..Side::default()
            };
            side.buf.clear();
            return Ok(());
        }
        let cookie: &[u8] = if d == 0 { b"cookie" } else { b"set-cookie" };
        let headers = Headers::build(&head::parse_block(&block), cookie)
            .map_err(|()| HttpError::TooManyHeaders)?;
        let id = side.tx;
        let Some(t) = tx_mut(&mut self.txs, id) else {
            // Retired meanwhile: read on without keeping anything.
            side.phase = Phase::Ignore;
            return Ok(());
        };
        if d == 0 && t.host.is_none() {
            t.host = headers.value(b"host").and_then(host_of);
        }
        let m = msg_mut(t, d);
        m.raw = block;
        m.has_head = true;
        m.headers = headers;
        t.progress[d] = Progress::Headers;
        let framing = self.framing(d, id)?;
        let limit = if d == 0 {
            limits.request_body_limit
        } else {
            limits.response_body_limit
        };
        let t = tx_mut(&mut self.txs, id);
        let coding = t.as_ref().map_or(Coding::Identity, |t| {
            let m = if d == 0 { &t.req } else { &t.resp };
            Coding::from_header(m.headers.value(b"content-encoding"))
        });
        let side = &mut self.sides[d];
        match framing {
            None => self.complete(d),
            Some(f) => {
                side.phase = Phase::Body;
                side.framing = Some(f);
                side.decoder = Some(Decoder::new(coding, limit));
            }
        }
        Ok(())
    }

    /// How the body of direction `d` of transaction `id` ends (`None`: no body). Also
    /// switches the flow to ignoring everything after a 101 or an accepted `CONNECT`.
    fn framing(&mut self, d: usize, id: Option<u64>) -> Result<Option<Framing>, HttpError> {
        let Some(t) = tx_mut(&mut self.txs, id) else {
            return Ok(None);
        };
        let m = if d == 0 { &t.req } else { &t.resp };
        let te = m.headers.value(b"transfer-encoding");
        let chunked =
            te.is_some_and(|v| v.to_ascii_lowercase().windows(7).any(|w| w == b"chunked"));
        let cl = m.headers.value(b"content-length");
        if d == 0 {
            return Ok(if chunked {
                Some(Framing::Chunked(Chunk::Size))
            } else if te.is_some() {
                None
            } else {
                cl.and_then(body::content_length)
                    .filter(|&n| n > 0)
                    .map(Framing::Length)
            });
        }
        let status = m
            .parts
            .second
            .as_ref()
            .and_then(|r| m.line.get(r.start as usize..r.end as usize))
            .and_then(head::status_number);
        let method = t.method();
        let tunnel = status == Some(101)
            || (method == Some(b"CONNECT") && status.is_some_and(|s| (200..300).contains(&s)));
        if tunnel {
            for s in &mut self.sides {
                s.phase = Phase::Ignore;
            }
            return Ok(None);
        }
        if method == Some(b"HEAD") || matches!(status, Some(100..=199 | 204 | 304)) {
            return Ok(None);
        }
        if chunked {
            return Ok(Some(Framing::Chunked(Chunk::Size)));
        }
        match cl {
            Some(v) => match body::content_length(v) {
                Some(0) => Ok(None),
                Some(n) => Ok(Some(Framing::Length(n))),
                None => Err(HttpError::BadContentLength),
            },
            None => Ok(Some(Framing::Close)),
        }
    }

    /// Body bytes of direction `d`, decoded onto its message's body.
    fn write_body(&mut self, d: usize, bytes: &[u8]) {
        let side = &mut self.sides[d];
        let (Some(dec), Some(t)) = (side.decoder.as_mut(), tx_mut(&mut self.txs, side.tx)) else {
            return;
        };
        let m = msg_mut(t, d);
        if dec.write(bytes, &mut m.body) {
            m.truncated = true;
            t.progress[d] = Progress::Complete;
            side.decoder = None;
        }
    }

    /// The message of direction `d` is complete: the side goes back to idle (unless it
    /// ignores everything).
    fn complete(&mut self, d: usize) {
        let side = &mut self.sides[d];
        if let Some(t) = tx_mut(&mut self.txs, side.tx) {
            if let Some(dec) = side.decoder.as_mut() {
                dec.finish(&mut msg_mut(t, d).body);
            }
            t.progress[d] = Progress::Complete;
        }
        let phase = if side.phase == Phase::Ignore {
            Phase::Ignore
        } else {
            Phase::Idle
        };
        *side = Side {
            phase,
            buf: std::mem::take(&mut side.buf),
            ..Side::default()
        };
        side.buf.clear();
    }

    /// Reads body bytes of direction `d` per its framing.
    fn read_body(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let side = &mut self.sides[d];
        let Some(framing) = side.framing else {
            self.complete(d);
            return Ok(0);
        };
        match framing {
            Framing::Close => {
                self.write_body(d, data);
                Ok(data.len())
            }
            Framing::Length(left) => {
                let n = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.write_body(d, data.get(..n).unwrap_or_default());
                let left = left - n as u64;
                self.sides[d].framing = Some(Framing::Length(left));
                if left == 0 {
                    self.complete(d);
                }
                Ok(n)
            }
            Framing::Chunked(Chunk::Data(left)) => {
                let n = data.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.write_body(d, data.get(..n).unwrap_or_default());
                let left = left - n as u64;
                self.sides[d].framing = Some(Framing::Chunked(if left == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left)
                }));
                Ok(n)
            }
            Framing::Chunked(Chunk::DataEnd) => {
                // libhtp skips anything up to the line end after the data.
                Ok(match memchr::memchr(b'\n', data) {
                    Some(p) => {
                        side.framing = Some(Framing::Chunked(Chunk::Size));
                        p + 1
                    }
                    None => data.len(),
                })
            }
            Framing::Chunked(Chunk::Size) => {
                let lf = memchr::memchr(b'\n', data);
                let used = lf.map_or(data.len(), |p| p + 1);
                side.buf
                    .extend_from_slice(data.get(..used).unwrap_or_default());
                if side.buf.len() > MAX_CHUNK_LINE {
                    return Err(HttpError::BadChunk);
                }
                if lf.is_some() {
                    let size =
                        body::chunk_size(chomp(&side.buf)).map_err(|()| HttpError::BadChunk)?;
                    side.buf.clear();
                    side.framing = match size {
                        None => Some(Framing::Chunked(Chunk::Size)),
                        Some(0) => {
                            side.scan = BlankScan::default();
                            side.head_len = 0;
                            Some(Framing::Chunked(Chunk::Trailer))
                        }
                        Some(n) => Some(Framing::Chunked(Chunk::Data(n))),
                    };
                }
                Ok(used)
            }
            Framing::Chunked(Chunk::Trailer) => {
                let end = side.scan.find(data);
                let used = end.unwrap_or(data.len());
                side.buf
                    .extend_from_slice(data.get(..used).unwrap_or_default());
                if side.buf.len() > limits.max_head {
                    return Err(HttpError::HeadTooLong(limits.max_head));
                }
                if end.is_some() {
                    self.trailers_done(d)?;
                    self.complete(d);
                }
                Ok(used)
            }
        }
    }

    /// The trailer block of direction `d` is in `buf`: Suricata adds it to the raw header
    /// buffer and its fields to the headers.
    fn trailers_done(&mut self, d: usize) -> Result<(), HttpError> {
        let side = &mut self.sides[d];
        let Some(t) = tx_mut(&mut self.txs, side.tx) else {
            return Ok(());
        };
        let m = msg_mut(t, d);
        let head_len = m.raw.len();
        m.raw.extend_from_slice(&side.buf);
        side.buf.clear();
        let Some((hb, tb)) = m.raw.split_at_checked(head_len) else {
            return Ok(());
        };
        let trailer = head::parse_block(tb);
        if trailer.is_empty() {
            return Ok(());
        }
        let mut fields = head::parse_block(hb);
        fields.extend(trailer);
        let cookie: &[u8] = if d == 0 { b"cookie" } else { b"set-cookie" };
        m.headers = Headers::build(&fields, cookie).map_err(|()| HttpError::TooManyHeaders)?;
        Ok(())
    }
}
