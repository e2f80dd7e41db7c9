//! The per-direction state machine of [`HttpState`]: start lines, header blocks, bodies,
//! and what libhtp does between messages.
//!
//! Between messages (libhtp's "finalize"): after a request, a line whose first word is not
//! a known method (libhtp's list), or a line of whitespace, is more body of that request;
//! after a response, a line not starting with `HTTP` is more body of that response.
//! Suricata inspects those bytes as body (`http-request-invalid` in suricata-verify), so
//! they are appended to the previous message's body (up to the limit; its progress stays
//! complete). At the start of a stream, empty lines are skipped instead.
//!
//! A request line without protocol is HTTP/0.9 only if nothing but up to 16 whitespace
//! bytes follows it before the response starts or the client closes (libhtp looks at the
//! rest of the packet, which depends on how the stream was cut); anything else makes it a
//! request with headers.
//!
//! Response lines end as in libhtp's `RES_LINE` (LF, CRLF, or a CR followed by another
//! byte). Before the first status line, empty lines are skipped, and a line that is not a
//! status line is skipped if at least two bytes follow and the next starts with `H` or the
//! line is at most two bytes; otherwise the response is a body without head. libhtp looks
//! at the rest of the packet; here the next two bytes of the stream are waited for (at
//! most two held), so the result does not depend on how the stream is cut. Such a line
//! is waited for up to `max_head` bytes, then taken as body.

use super::body::{Coding, Codings, Decoder, Framing};
use super::head::{self, Headers};
use super::{HttpError, HttpLimits, HttpState, HttpTx, tx, uri};
use crate::applayer::Progress;

/// Whitespace after a protocol-less request line that still leaves it HTTP/0.9 (libhtp's
/// `HTTP09_MAX_JUNK_LEN`).
const HTTP09_MAX_JUNK: usize = 16;

/// The URI libhtp gives the transaction of a response without request.
pub(super) const NOT_SEEN: &[u8] = b"/libhtp::request_uri_not_seen";

/// The methods libhtp knows (the same list as Suricata's HTTP detection patterns); after a
/// request, a line starting with another word is body.
const METHODS: &[&[u8]] = crate::applayer::detect::HTTP_METHODS;

/// Where a direction's parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    /// Between messages.
    #[default]
    Idle,
    /// Reading a start line (or, after a message, the line that says what comes next).
    Line,
    /// Reading a header block.
    Block,
    /// After a request line without protocol: HTTP/0.9 unless more than whitespace comes.
    Maybe09,
    /// Reading a body.
    Body,
    /// After a message, bytes up to the line end that belong to its body.
    Junk,
    /// The first response line is not a status line: the two bytes after it decide
    /// whether it is skipped (libhtp skips it if more follows that starts with `H`, or if
    /// it is at most two bytes long) or starts a body without head.
    Decide,
    /// Ignoring everything (tunnel, HTTP/0.9 client, or the direction closed).
    Ignore,
}

/// Finds the empty line ending a header or trailer block, across calls.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BlankScan {
    /// Bytes in the current line so far.
    len: usize,
    /// The current line starts with CR.
    cr: bool,
}

impl BlankScan {
    /// Scans `data`; returns the offset just past the LF ending an empty line, if any.
    pub(super) fn find(&mut self, data: &[u8]) -> Option<usize> {
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
pub(super) struct Side {
    pub(super) phase: Phase,
    /// Bytes of the line or block being read.
    pub(super) buf: Vec<u8>,
    /// The response being read is an interim 1xx one, to be skipped.
    pub(super) interim: bool,
    /// Bytes of the current head so far (line and block).
    pub(super) head_len: usize,
    pub(super) scan: BlankScan,
    /// Finds the end of a response header or trailer block (libhtp's line ends).
    pub(super) rscan: head::ResScan,
    /// The status line of an interim response, kept until its headers say whether it is
    /// one (libhtp: a `100` with a body is the response).
    pub(super) line: Vec<u8>,
    /// The response's protocol is exactly `HTTP/1.1` (libhtp folds headers differently).
    pub(super) http11: bool,
    /// In [`Phase::Decide`]: the length of the line in `buf` (the bytes after it follow).
    pub(super) line_len: usize,
    /// The transaction this direction is filling.
    pub(super) tx: Option<u64>,
    /// The transaction of the last message completed in this direction.
    pub(super) prev: Option<u64>,
    pub(super) framing: Option<Framing>,
    /// Decodes the body; `None` once the body passed the limit.
    pub(super) decoder: Option<Decoder>,
}

impl Side {
    /// A side that ignores everything.
    pub(super) fn ignoring() -> Side {
        Side {
            phase: Phase::Ignore,
            ..Side::default()
        }
    }

    /// Appends the bytes of `data` that belong to the header or trailer block being read
    /// in direction `d`; returns how many, and whether the block is complete.
    pub(super) fn take_block(&mut self, d: usize, data: &[u8]) -> (usize, bool) {
        if d == 0 {
            let end = self.scan.find(data);
            let used = end.unwrap_or(data.len());
            self.buf
                .extend_from_slice(data.get(..used).unwrap_or_default());
            return (used, end.is_some());
        }
        // libhtp's line ends look at the byte after a line: scan the block with all of
        // `data`, then give back what follows the block.
        let old = self.buf.len();
        self.buf.extend_from_slice(data);
        match self.rscan.find(&self.buf, false) {
            Some(end) => {
                let end = end.max(old);
                self.buf.truncate(end);
                (end - old, true)
            }
            None => (data.len(), false),
        }
    }

    /// Back to idle (or still ignoring), keeping the buffer's allocation and `prev`.
    pub(super) fn reset(&mut self) {
        let phase = if self.phase == Phase::Ignore {
            Phase::Ignore
        } else {
            Phase::Idle
        };
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        *self = Side {
            phase,
            buf,
            prev: self.prev,
            ..Side::default()
        };
    }
}

/// The transaction `id` in `txs` (ids are consecutive from the front).
pub(super) fn tx_mut(
    txs: &mut std::collections::VecDeque<HttpTx>,
    id: Option<u64>,
) -> Option<&mut HttpTx> {
    // Ids ascend but may have gaps (transactions evicted unanswered): search.
    let id = id?;
    let i = txs.binary_search_by_key(&id, |t| t.id).ok()?;
    txs.get_mut(i)
}

/// The message of direction `d` (0 request, 1 response).
pub(super) fn msg_mut(tx: &mut HttpTx, d: usize) -> &mut tx::Message {
    if d == 0 { &mut tx.req } else { &mut tx.resp }
}

/// `line` without the CR and LF bytes ending it.
pub(super) fn chomp(line: &[u8]) -> &[u8] {
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

/// Where a response line ends, as libhtp's `htp_connp_RES_LINE`: at LF, CRLF, or a CR
/// followed by any other byte (which is not part of the line). `buf` holds the line so
/// far. Returns the bytes of `data` in the line and whether it ended; a CR at the end of
/// `data` waits for the next byte.
fn res_line_end(buf: &[u8], data: &[u8]) -> (usize, bool) {
    if buf.last() == Some(&b'\r') {
        return (usize::from(data.first() == Some(&b'\n')), true);
    }
    match memchr::memchr2(b'\n', b'\r', data) {
        None => (data.len(), false),
        Some(p) if data.get(p) == Some(&b'\n') => (p + 1, true),
        Some(p) => match data.get(p + 1) {
            Some(b'\n') => (p + 2, true),
            None => (p + 1, false),
            Some(_) => (p + 1, true),
        },
    }
}

/// After a message, whether the line begun in `line` starts the next one: `Some(true)` if
/// it does, `Some(false)` if it is body of the previous one, `None` while undecided.
/// Looks at the first bytes only (the leading whitespace and the first word are bounded).
fn starts_message(d: usize, line: &[u8], complete: bool) -> Option<bool> {
    if d == 1 {
        return head::looks_like_status(line, complete);
    }
    let lead = line
        .iter()
        .take(head::MAX_LEAD)
        .take_while(|&&c| head::is_space(c))
        .count();
    if lead == head::MAX_LEAD {
        return Some(false);
    }
    let word = line.get(lead..).unwrap_or_default();
    if word.is_empty() {
        // A line of whitespace is body (libhtp).
        return if complete { Some(false) } else { None };
    }
    let w: &[u8] = word.get(..word.len().min(17)).unwrap_or_default();
    let end = w.iter().position(|&c| head::is_space(c));
    let w = w.get(..end.unwrap_or(w.len())).unwrap_or_default();
    if w.len() > 16 || !w.iter().all(|&c| c.is_ascii_uppercase() || c == b'-') {
        return Some(false);
    }
    if end.is_some() || complete {
        Some(METHODS.contains(&w))
    } else {
        None
    }
}

impl HttpState {
    /// One step over `data` (non-empty) for direction `d`: the bytes used.
    pub(super) fn step(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let Some(side) = self.sides.get_mut(d) else {
            return Ok(data.len());
        };
        match side.phase {
            Phase::Ignore => Ok(data.len()),
            Phase::Idle => {
                let mut skip = 0;
                if side.prev.is_none() {
                    skip = data
                        .iter()
                        .take_while(|&&c| c == b'\r' || c == b'\n')
                        .count();
                }
                if skip == 0 {
                    self.start(d, limits)?;
                }
                Ok(skip)
            }
            Phase::Line => self.read_line(d, data, limits),
            Phase::Block => self.read_block(d, data, limits),
            Phase::Maybe09 => {
                let ws = data.iter().take_while(|&&c| head::is_space(c)).count();
                side.buf
                    .extend_from_slice(data.get(..ws).unwrap_or_default());
                if ws == data.len() && side.buf.len() <= HTTP09_MAX_JUNK {
                    return Ok(ws);
                }
                // More than whitespace: a request with headers after all.
                let pending = std::mem::take(&mut side.buf);
                side.phase = Phase::Block;
                side.head_len += pending.len();
                if let Some(end) = side.scan.find(&pending) {
                    side.buf
                        .extend_from_slice(pending.get(..end).unwrap_or_default());
                    self.head_done(d, limits)?;
                } else {
                    side.buf = pending;
                }
                Ok(ws)
            }
            Phase::Junk => {
                let lf = memchr::memchr(b'\n', data);
                let used = lf.map_or(data.len(), |p| p + 1);
                self.junk(d, data.get(..used).unwrap_or_default(), limits);
                if lf.is_some() {
                    side_mut(self, d).phase = Phase::Idle;
                }
                Ok(used)
            }
            Phase::Body => self.read_body(d, data, limits),
            Phase::Decide => {
                let need = (side.line_len + 2).saturating_sub(side.buf.len());
                let n = need.min(data.len());
                side.buf
                    .extend_from_slice(data.get(..n).unwrap_or_default());
                if n == need {
                    self.decide(limits)?;
                }
                Ok(n)
            }
        }
    }

    /// Direction `d` ended: finishes what is in progress the way libhtp does at close.
    pub(super) fn finish_side(&mut self, d: usize, limits: &HttpLimits) -> Result<(), HttpError> {
        let side = side_mut(self, d);
        match side.phase {
            Phase::Line if !side.buf.is_empty() => {
                let buf = std::mem::take(&mut side.buf);
                if side.prev.is_some() && starts_message(d, &buf, true) == Some(false) {
                    self.junk(d, &buf, limits);
                } else {
                    self.line_done(d, &buf, limits)?;
                    match side_mut(self, d).phase {
                        Phase::Block => self.head_done(d, limits)?,
                        Phase::Maybe09 => self.http09(),
                        _ => {}
                    }
                }
            }
            Phase::Block => self.head_done(d, limits)?,
            Phase::Maybe09 => self.http09(),
            Phase::Decide => self.decide(limits)?,
            _ => {}
        }
        if side_mut(self, d).tx.is_some() {
            self.complete(d);
        }
        let side = side_mut(self, d);
        side.phase = Phase::Ignore;
        side.buf = Vec::new();
        side.decoder = None;
        Ok(())
    }

    /// Starts a message on direction `d`.
    fn start(&mut self, d: usize, limits: &HttpLimits) -> Result<(), HttpError> {
        if d == 1 {
            if self.sides[0].phase == Phase::Maybe09 && self.sides[0].tx == Some(self.resp_next) {
                // The server answers: the request was HTTP/0.9.
                self.http09();
            }
            if self.get(self.resp_next).is_some_and(|t| t.http09) {
                // The answer to an HTTP/0.9 request has no head.
                return self.body_without_head(limits);
            }
        }
        let side = side_mut(self, d);
        side.reset();
        side.phase = Phase::Line;
        Ok(())
    }

    /// The request waiting in [`Phase::Maybe09`] is HTTP/0.9: complete, and the client's
    /// further bytes are ignored (libhtp).
    fn http09(&mut self) {
        let id = self.sides[0].tx;
        if let Some(t) = tx_mut(&mut self.txs, id) {
            t.http09 = true;
        }
        self.complete(0);
        self.sides[0].phase = Phase::Ignore;
    }

    /// The transaction `id`, if held.
    fn get(&self, id: u64) -> Option<&HttpTx> {
        let i = self.txs.binary_search_by_key(&id, |t| t.id).ok()?;
        self.txs.get(i)
    }

    /// Appends a new transaction, evicting the oldest unanswered one if too many are held;
    /// errs if none can go.
    fn new_tx(&mut self, limits: &HttpLimits) -> Result<u64, HttpError> {
        self.make_room(limits)?;
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
        let id = if self.resp_next < self.next_id && self.get(self.resp_next).is_none() {
            // The request was evicted unanswered: the response gets a transaction in its
            // place, so that it is parsed and inspected, and the responses after it pair
            // with their own requests.
            let id = self.resp_next;
            self.sides[1].tx = None;
            self.stand_in(id, limits)?;
            id
        } else if self.resp_next < self.next_id {
            self.resp_next
        } else {
            // libhtp: a response without a request gets a transaction of its own, with
            // this URI.
            let id = self.new_tx(limits)?;
            if let Some(t) = tx_mut(&mut self.txs, Some(id)) {
                t.progress[0] = Progress::Complete;
                t.req.line = NOT_SEEN.to_vec();
                t.req.parts.second = Some(0..NOT_SEEN.len() as u32);
                t.uri = Some(uri::NormUri {
                    uri: NOT_SEEN.to_vec(),
                    host: None,
                });
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

    /// Bytes after a message that are more of its body (libhtp's unexpected body).
    fn junk(&mut self, d: usize, bytes: &[u8], limits: &HttpLimits) {
        let limit = if d == 0 {
            limits.request_body_limit
        } else {
            limits.response_body_limit
        };
        let prev = self.sides.get(d).and_then(|s| s.prev);
        if let Some(t) = tx_mut(&mut self.txs, prev) {
            let m = msg_mut(t, d);
            let n = bytes.len().min(limit.saturating_sub(m.body.len()));
            m.body.extend_from_slice(bytes.get(..n).unwrap_or_default());
            if n < bytes.len() && !m.truncated {
                m.truncated = true;
                super::body::trim_capacity(&mut m.body);
            }
        }
    }

    /// Reads the start line of direction `d` (after a message: first decides whether the
    /// line starts one).
    fn read_line(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let side = side_mut(self, d);
        let (used, ended) = if d == 1 {
            res_line_end(&side.buf, data)
        } else {
            let lf = memchr::memchr(b'\n', data);
            (lf.map_or(data.len(), |p| p + 1), lf.is_some())
        };
        side.buf
            .extend_from_slice(data.get(..used).unwrap_or_default());
        side.head_len += used;
        let after = side.prev.is_some();
        if after && starts_message(d, &side.buf, ended) == Some(false) {
            let bytes = std::mem::take(&mut side.buf);
            side.phase = if ended { Phase::Idle } else { Phase::Junk };
            self.junk(d, &bytes, limits);
            side_mut(self, d).buf = bytes;
            side_mut(self, d).buf.clear();
            return Ok(used);
        }
        if !after && d == 1 && ended && matches!(side.buf.as_slice(), b"\r" | b"\n" | b"\r\n") {
            // libhtp ignores empty lines before a response line.
            side.buf.clear();
            side.head_len = 0;
            return Ok(used);
        }
        if !after && d == 1 && head::looks_like_status(&side.buf, ended) == Some(false) {
            // Not a status line: skipped, or the response is body (libhtp, and browsers);
            // the line end and the bytes after it decide.
            if ended {
                side.line_len = side.buf.len();
                side.phase = Phase::Decide;
                return Ok(used);
            }
            if side.head_len <= limits.max_head {
                return Ok(used);
            }
            let bytes = std::mem::take(&mut side.buf);
            self.body_without_head(limits)?;
            self.write_body(1, &bytes);
            return Ok(used);
        }
        if side.head_len > limits.max_head {
            return Err(HttpError::HeadTooLong(limits.max_head));
        }
        if ended {
            let buf = std::mem::take(&mut side.buf);
            self.line_done(d, &buf, limits)?;
            let side = side_mut(self, d);
            if side.buf.is_empty() {
                side.buf = buf;
                side.buf.clear();
            }
        }
        Ok(used)
    }

    /// The first response line (in `buf`, the bytes after it behind) is not a status
    /// line: libhtp skips it if at least two bytes follow and the next starts with `H` or
    /// the line is at most two bytes without its line end; otherwise the response is a
    /// body without head, starting with the line.
    fn decide(&mut self, limits: &HttpLimits) -> Result<(), HttpError> {
        let side = &mut self.sides[1];
        let mut buf = std::mem::take(&mut side.buf);
        let (line, next) = buf.split_at_checked(side.line_len).unwrap_or((&buf, &[]));
        let skip = next.len() >= 2 && (next.first() == Some(&b'H') || chomp(line).len() <= 2);
        if !skip {
            self.body_without_head(limits)?;
            self.write_body(1, &buf);
            return Ok(());
        }
        let mut rest = [0u8; 2];
        let n = next.len().min(2);
        rest.get_mut(..n)
            .unwrap_or_default()
            .copy_from_slice(next.get(..n).unwrap_or_default());
        buf.clear();
        side.buf = buf;
        side.head_len = 0;
        side.phase = Phase::Line;
        // The two bytes looked at are the next line's: read them as such.
        let mut rest = rest.get(..n).unwrap_or_default();
        let mut idle = 0;
        while !rest.is_empty() && idle < 3 {
            let used = self.step(1, rest, limits)?;
            idle = if used == 0 { idle + 1 } else { 0 };
            rest = rest.get(used..).unwrap_or_default();
        }
        Ok(())
    }

    /// A start line of direction `d` is in (`raw`, with its line end if any).
    fn line_done(&mut self, d: usize, raw: &[u8], limits: &HttpLimits) -> Result<(), HttpError> {
        let line = chomp(raw);
        if d == 0 {
            return self.request_line(line, limits);
        }
        if head::looks_like_status(line, true) == Some(false) {
            self.body_without_head(limits)?;
            self.write_body(1, raw);
            return Ok(());
        }
        self.status_line(line, limits)
    }

    /// A request line is in.
    fn request_line(&mut self, line: &[u8], limits: &HttpLimits) -> Result<(), HttpError> {
        let parts = head::request_line(line).ok_or(HttpError::NotHttp)?;
        let id = self.new_tx(limits)?;
        let side = &mut self.sides[0];
        side.tx = Some(id);
        side.scan = BlankScan::default();
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
        t.progress[0] = Progress::Line;
        side.phase = if t.req.parts.third.is_none() {
            Phase::Maybe09
        } else {
            Phase::Block
        };
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
        let side = &mut self.sides[1];
        side.phase = Phase::Block;
        side.scan = BlankScan::default();
        side.rscan = head::ResScan::default();
        side.http11 = parts
            .first
            .as_ref()
            .and_then(|r| line.get(r.start as usize..r.end as usize))
            == Some(b"HTTP/1.1");
        if status.is_some_and(|s| (100..200).contains(&s) && s != 101) {
            // Interim unless its headers announce a body (see `head_done`).
            side.interim = true;
            side.line.clear();
            side.line.extend_from_slice(line);
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

    /// Reads the header block of direction `d`.
    fn read_block(
        &mut self,
        d: usize,
        data: &[u8],
        limits: &HttpLimits,
    ) -> Result<usize, HttpError> {
        let side = side_mut(self, d);
        let (used, end) = side.take_block(d, data);
        side.head_len += used;
        if side.head_len > limits.max_head {
            return Err(HttpError::HeadTooLong(limits.max_head));
        }
        if end {
            self.head_done(d, limits)?;
        }
        Ok(used)
    }

    /// The header block of direction `d` is in `buf` (at close: what there is of it).
    fn head_done(&mut self, d: usize, limits: &HttpLimits) -> Result<(), HttpError> {
        let side = &mut self.sides[d];
        let block = std::mem::take(&mut side.buf);
        let headers = parse_headers(d, &block, side.http11)?;
        if side.interim {
            // libhtp: a 1xx with Transfer-Encoding or a Content-Length above 0 is the
            // response (its body follows); otherwise an interim one, and the final one
            // follows for the same transaction.
            let body = headers.value(b"transfer-encoding").is_some()
                || headers
                    .value(b"content-length")
                    .and_then(super::body::content_length)
                    .is_some_and(|n| n > 0);
            if !body {
                side.buf = block;
                side.reset();
                return Ok(());
            }
            side.interim = false;
            let line = std::mem::take(&mut side.line);
            let id = self.pair_response(limits)?;
            if let Some(t) = tx_mut(&mut self.txs, Some(id)) {
                t.resp.parts = head::status_line(&line);
                t.resp.line = line;
            }
        }
        let side = &mut self.sides[d];
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
        let coding = tx_mut(&mut self.txs, id).map_or_else(
            || Codings::from_header(None, &limits.decode),
            |t| {
                Codings::from_header(
                    msg_mut(t, d).headers.value(b"content-encoding"),
                    &limits.decode,
                )
            },
        );
        let limit = if d == 0 {
            limits.request_body_limit
        } else {
            limits.response_body_limit
        };
        match framing {
            None => self.complete(d),
            Some(f) => {
                let side = side_mut(self, d);
                side.phase = Phase::Body;
                side.framing = Some(f);
                side.decoder = Some(Decoder::with_codings(coding.as_slice(), limit));
            }
        }
        Ok(())
    }
}

/// The headers of a block of direction `d`: requests as before, responses (and their
/// trailers) as libhtp's response parser reads them (`http11`: the response is
/// `HTTP/1.1`, which changes folding).
pub(super) fn parse_headers(d: usize, block: &[u8], http11: bool) -> Result<Headers, HttpError> {
    let cookie: &[u8] = if d == 0 { b"cookie" } else { b"set-cookie" };
    let built = if d == 0 {
        Headers::build(&head::parse_block(block), cookie)
    } else {
        let texts = head::response_texts(block, http11);
        Headers::build(&head::response_fields(&texts), cookie)
    };
    built.map_err(|()| HttpError::TooManyHeaders)
}

/// Direction `d`'s parser (`d` is 0 or 1).
fn side_mut(s: &mut HttpState, d: usize) -> &mut Side {
    let [req, resp] = &mut s.sides;
    if d == 0 { req } else { resp }
}
