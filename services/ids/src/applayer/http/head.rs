//! Parsing of a message head: the request or status line, and the header block (also a
//! chunked body's trailer block) into the normalized forms Suricata's buffers use.
//!
//! Start lines are split as libhtp does, not by httparse: Suricata accepts what httparse
//! refuses (spaces inside a request URI, Suricata's default `allow-space-uri`; a missing
//! protocol, HTTP/0.9; leading whitespace; any status text), and the buffers are the raw
//! pieces of the line. Header blocks go to `httparse::parse_headers` with a fixed array of
//! [`FAST_HEADERS`] entries; a block httparse refuses (more headers than that, obsolete
//! line folding, a space before the colon, a line without a colon, control bytes) is parsed
//! again by [`parse_lenient`], which follows libhtp. Both give the same result on any block
//! httparse accepts (a test checks it).
//!
//! Normalization, checked against Suricata 7.0.10: names and values are trimmed of
//! whitespace; a line without a colon is a header with an empty name; a line starting with
//! a space or tab continues the previous value (joined without its line end); a repeated
//! name (case-insensitive) appends `, value` to the first (at most 64 repetitions counted
//! per message, as libhtp), except `Content-Length`, which keeps the first value.
//!
//! Response header and trailer blocks are read by libhtp 0.5's response rules instead
//! ([`ResScan`], [`response_texts`]): a lone CR and LF CR end lines too, a line of one
//! space or tab ends the block when no LF follows, a line starting with a space, tab or
//! NUL continues the header before it (on `HTTP/1.1`, one with a colon after a header
//! with one starts a new header), and only the name's trailing whitespace and the value's
//! spaces and tabs are trimmed. Folded text is bounded by [`MAX_FOLDED`] per header, the
//! block by the caller's `max_head`.

use std::ops::Range;

/// Header entries httparse parses into its fixed array; a block with more goes to the
/// lenient parser.
pub(super) const FAST_HEADERS: usize = 64;

/// Distinct header names kept per message (libhtp's default `number_headers_limit`); a
/// message with more is an error.
pub(super) const MAX_FIELDS: usize = 1024;

/// Repetitions of header names merged per message (libhtp: 64); later ones are dropped.
const MAX_REPEATS: usize = 64;

/// libhtp's whitespace (`is_space`).
pub(super) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// `s` without leading and trailing whitespace.
pub(super) fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&c| !is_space(c)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&c| !is_space(c))
        .map_or(start, |e| e + 1);
    s.get(start..end).unwrap_or_default()
}

/// `r` as a `u32` range (heads are bounded well below 4 GiB).
fn r32(r: Range<usize>) -> Range<u32> {
    let c = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    c(r.start)..c(r.end)
}

/// The pieces of a start line, as byte ranges into the line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct StartLine {
    /// Request: method; response: protocol.
    pub(super) first: Option<Range<u32>>,
    /// Request: URI; response: status code.
    pub(super) second: Option<Range<u32>>,
    /// Request: protocol; response: reason phrase.
    pub(super) third: Option<Range<u32>>,
}

/// The offset of `sub` (a subslice of `line`) in `line`.
fn offset(line: &[u8], sub: &[u8]) -> Range<u32> {
    let start = (sub.as_ptr() as usize).saturating_sub(line.as_ptr() as usize);
    r32(start..start + sub.len())
}

/// RFC 9110 `tchar`: what a method may be made of. A first line whose first word is not a
/// token is not HTTP.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Splits a request line (without its line end) as libhtp with `allow_space_uri`: method up
/// to the first whitespace; the rest, trimmed, splits at its last space into URI and
/// protocol (no space: URI only, HTTP/0.9). Returns `None` if the method is not a token.
pub(super) fn request_line(line: &[u8]) -> Option<StartLine> {
    let lead = line.iter().position(|&c| !is_space(c))?;
    let from = line.get(lead..)?;
    let mlen = from.iter().position(|&c| is_space(c)).unwrap_or(from.len());
    let method = from.get(..mlen)?;
    if !method.iter().all(|&c| is_tchar(c)) {
        return None;
    }
    let mut sl = StartLine {
        first: Some(offset(line, method)),
        ..StartLine::default()
    };
    let rest = trim(from.get(mlen..).unwrap_or_default());
    if rest.is_empty() {
        return Some(sl);
    }
    let (mut uri, mut proto) = split_last(rest, |c| c == b' ');
    if uri.len() == rest.len() && uri.iter().any(|&c| is_space(c)) {
        (uri, proto) = split_last(rest, is_space);
    }
    sl.second = Some(offset(line, uri));
    if !proto.is_empty() {
        sl.third = Some(offset(line, proto));
    }
    Some(sl)
}

/// Splits `s` at its last byte matching `sep` into trimmed halves; no such byte: all of `s`
/// first.
fn split_last(s: &[u8], sep: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
    match s.iter().rposition(|&c| sep(c)) {
        Some(i) => (
            trim(s.get(..i).unwrap_or_default()),
            trim(s.get(i + 1..).unwrap_or_default()),
        ),
        None => (s, &[]),
    }
}

/// Leading whitespace looked at before a first word; more makes the line not a start
/// line (bounds the work on a line fed byte by byte).
pub(super) const MAX_LEAD: usize = 64;

/// Whether a response's first line looks like a status line (libhtp: optional whitespace
/// or NULs, at most [`MAX_LEAD`] here, then `HTTP` in any case); if not, libhtp takes the
/// response as a body without head. `None` while `line` is too short to tell. Decided by
/// the line's first bytes only, so it gives the same answer however the line arrives.
pub(super) fn looks_like_status(line: &[u8], complete: bool) -> Option<bool> {
    let lead = line
        .iter()
        .take(MAX_LEAD)
        .take_while(|&&c| is_space(c) || c == 0)
        .count();
    if lead == MAX_LEAD {
        return Some(false);
    }
    let word = line.get(lead..).unwrap_or_default();
    let n = word.len().min(4);
    if !word.get(..n)?.eq_ignore_ascii_case(b"HTTP".get(..n)?) {
        return Some(false);
    }
    if n == 4 {
        Some(true)
    } else if complete {
        Some(false)
    } else {
        None
    }
}

/// Splits a status line (without its line end) as libhtp: protocol, status code and reason
/// phrase are separated by whitespace; the phrase keeps inner and trailing spaces and is
/// absent without whitespace after the code.
pub(super) fn status_line(line: &[u8]) -> StartLine {
    let mut sl = StartLine::default();
    let mut words = Words { s: line, pos: 0 };
    let Some(proto) = words.word(|c| is_space(c) || c == 0) else {
        return sl;
    };
    sl.first = Some(offset(line, proto));
    let Some(code) = words.word(is_space) else {
        return sl;
    };
    sl.second = Some(offset(line, code));
    let ws = words.skip(is_space);
    if ws > 0 {
        let msg = line.get(words.pos..).unwrap_or_default();
        let end = msg
            .iter()
            .rposition(|&c| c != b'\r' && c != b'\n')
            .map_or(0, |e| e + 1);
        sl.third = Some(offset(line, msg.get(..end).unwrap_or_default()));
    }
    sl
}

/// A cursor over whitespace-separated words.
struct Words<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Words<'a> {
    /// Skips bytes matching `sep`; returns how many.
    fn skip(&mut self, sep: impl Fn(u8) -> bool) -> usize {
        let rest = self.s.get(self.pos..).unwrap_or_default();
        let n = rest.iter().position(|&c| !sep(c)).unwrap_or(rest.len());
        self.pos += n;
        n
    }

    /// Skips separators, then returns the next non-empty word.
    fn word(&mut self, sep: impl Fn(u8) -> bool) -> Option<&'a [u8]> {
        self.skip(&sep);
        let rest = self.s.get(self.pos..).unwrap_or_default();
        let n = rest.iter().position(|&c| is_space(c)).unwrap_or(rest.len());
        self.pos += n;
        rest.get(..n).filter(|w| !w.is_empty())
    }
}

/// The status code as a number, if it is three digits (libhtp: 100 to 999).
pub(super) fn status_number(code: &[u8]) -> Option<u16> {
    let t = trim(code);
    if t.len() != 3 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t)
        .ok()?
        .parse()
        .ok()
        .filter(|n| (100..=999).contains(n))
}

/// A header as parsed from one line (or folded lines): name and value, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawField<'a> {
    /// The name as sent (may be empty).
    pub(super) name: &'a [u8],
    /// The value; folded lines are joined into `folded`.
    pub(super) value: &'a [u8],
    /// Continuation lines after the first, each without its line end.
    pub(super) folded: Vec<&'a [u8]>,
}

/// The lines of a block, each without its line end (LF, and a CR before it); stops at the
/// first empty line.
fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    block
        .split(|&c| c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
}

/// libhtp's header parsing of a block (the fallback behind httparse).
pub(super) fn parse_lenient(block: &[u8]) -> Vec<RawField<'_>> {
    let mut out: Vec<RawField<'_>> = Vec::new();
    for line in lines(block) {
        if matches!(line.first(), Some(b' ' | b'\t'))
            && let Some(last) = out.last_mut()
        {
            last.folded.push(line);
            continue;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(c) => (
                line.get(..c).unwrap_or_default(),
                line.get(c + 1..).unwrap_or_default(),
            ),
            None => (&[][..], line),
        };
        out.push(RawField {
            name: trim(name),
            value: trim(value),
            folded: Vec::new(),
        });
    }
    out
}

/// Parses a header block (ending with its empty line) with httparse, falling back to
/// [`parse_lenient`] where httparse refuses it.
pub(super) fn parse_block(block: &[u8]) -> Vec<RawField<'_>> {
    let mut arr = [httparse::EMPTY_HEADER; FAST_HEADERS];
    match httparse::parse_headers(block, &mut arr) {
        Ok(httparse::Status::Complete((_, hs))) => hs
            .iter()
            .map(|h| RawField {
                name: h.name.as_bytes(),
                value: trim(h.value),
                folded: Vec::new(),
            })
            .collect(),
        _ => parse_lenient(block),
    }
}

/// Folded response header text kept at most (libhtp's `HTP_MAX_HEADER_FOLDED`); further
/// folded lines are dropped.
const MAX_FOLDED: usize = 102_400;

/// libhtp's folding bytes (`htp_is_folding_char`): a line starting with one continues the
/// header before it.
fn is_folding(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | 0)
}

/// Splits a response header block into lines as libhtp's `htp_connp_RES_HEADERS` does,
/// across calls: LF, CRLF, a lone CR (one not followed by LF), and LF CR end a line; a
/// line of a lone CR alone is not one (it starts the next). Decisions that need the next
/// byte wait for it, so the result does not depend on how the stream is cut.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ResScan {
    /// The next byte to look at.
    pos: usize,
    /// Where the current line starts.
    start: usize,
    /// The last line ended with LF CR (libhtp's `lfcrending`).
    lfcr: bool,
}

/// A line found by [`ResScan`]: its bytes (with line end) as a range, and whether a byte
/// other than LF follows it.
type ResLine = (Range<usize>, bool);

impl ResScan {
    /// The next line in `buf` (the block from its start), or `None` until more bytes come
    /// (`closed`: none will; the rest is not a line).
    fn next_line(&mut self, buf: &[u8], closed: bool) -> Option<ResLine> {
        loop {
            let &c = buf.get(self.pos)?;
            if c != b'\n' && c != b'\r' {
                self.lfcr = false;
                self.pos += 1;
                continue;
            }
            let mut p = self.pos + 1;
            let mut skip = 0;
            let cr = c == b'\r';
            if cr {
                match buf.get(p) {
                    None if !closed => return None,
                    Some(b'\n') => {
                        p += 1;
                        // libhtp: LF CR then CRLF CRLF is two line ends, not three.
                        let wait = |q: usize| !closed && q >= buf.len();
                        if self.lfcr && (wait(p) || (buf.get(p) == Some(&b'\r') && wait(p + 1))) {
                            return None;
                        }
                        if self.lfcr && buf.get(p) == Some(&b'\r') {
                            p += 1;
                            skip += 1;
                            if buf.get(p) == Some(&b'\n') {
                                p += 1;
                                skip += 1;
                            }
                        }
                    }
                    Some(b'\r') => {
                        self.pos = p;
                        continue;
                    }
                    _ => {}
                }
                self.lfcr = false;
            } else {
                if !closed && p >= buf.len() {
                    return None;
                }
                self.lfcr = buf.get(p) == Some(&b'\r');
                if self.lfcr {
                    p += 1;
                }
            }
            self.pos = p;
            let line = (self.start + skip).min(p)..p;
            if cr && line.len() < 2 {
                // A lone CR alone is not an empty line: it begins the next one.
                continue;
            }
            self.start = p;
            return Some((line, buf.get(p).is_some_and(|&b| b != b'\n')));
        }
    }

    /// Scans `buf` (the block so far, from its start) on from where the last call stopped;
    /// returns the block's length once its terminating line is in.
    pub(super) fn find(&mut self, buf: &[u8], closed: bool) -> Option<usize> {
        loop {
            let before = *self;
            let (line, next_no_lf) = self.next_line(buf, closed)?;
            let l = buf.get(line).unwrap_or_default();
            if l.len() == 2 && matches!(l.first(), Some(b' ' | b'\t')) && l.get(1) == Some(&b'\n') {
                if self.pos >= buf.len() && !closed {
                    // Whether this ends the block depends on the next byte.
                    *self = before;
                    return None;
                }
                if next_no_lf {
                    return Some(self.pos);
                }
            } else if matches!(l, b"\r" | b"\n" | b"\r\n") {
                return Some(self.pos);
            }
        }
    }
}

/// Parses one response header (folded lines joined) as libhtp's
/// `htp_parse_response_header_generic`: the name is everything before the first colon
/// less trailing whitespace (no colon: empty name, the line is the value); the value is
/// trimmed of spaces and tabs.
fn res_field(text: &[u8]) -> RawField<'_> {
    let (name, value) = match memchr::memchr(b':', text) {
        Some(c) => {
            let name = text.get(..c).unwrap_or_default();
            let end = name
                .iter()
                .rposition(|&b| !is_space(b))
                .map_or(0, |e| e + 1);
            (
                name.get(..end).unwrap_or_default(),
                text.get(c + 1..).unwrap_or_default(),
            )
        }
        None => (&[][..], text),
    };
    let lws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !lws(b)).unwrap_or(value.len());
    let value = value.get(start..).unwrap_or_default();
    let end = value.iter().rposition(|b| !lws(b)).map_or(0, |e| e + 1);
    RawField {
        name,
        value: value.get(..end).unwrap_or_default(),
        folded: Vec::new(),
    }
}

/// The headers of a response header (or trailer) block as libhtp's
/// `htp_connp_RES_HEADERS` reads them, each as its unfolded text (borrowed unless folded).
/// A line starting with a space, tab or NUL continues the header before it, except that
/// with `http11` a continuation holding a colon after a header holding one is a header of
/// its own (less its first byte); a continuation with no header before it starts one.
pub(super) fn response_texts(block: &[u8], http11: bool) -> Vec<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    let mut out: Vec<Cow<'_, [u8]>> = Vec::new();
    let mut pending: Option<Cow<'_, [u8]>> = None;
    let mut scan = ResScan::default();
    loop {
        let (line, next_no_lf, whole) = match scan.next_line(block, true) {
            Some((r, n)) => (block.get(r).unwrap_or_default(), n, true),
            None => (block.get(scan.start..).unwrap_or_default(), false, false),
        };
        let last = !whole || scan.pos >= block.len();
        let lws_lf = line.len() == 2
            && matches!(line.first(), Some(b' ' | b'\t'))
            && line.get(1) == Some(&b'\n');
        if line.is_empty()
            || matches!(line, b"\r" | b"\n" | b"\r\n")
            || (lws_lf && (last || next_no_lf))
        {
            break;
        }
        let line = chomp_all(line);
        match line.first() {
            Some(&c) if !is_folding(c) => {
                out.extend(pending.take());
                if block.get(scan.pos).is_some_and(|&b| is_folding(b)) && whole {
                    pending = Some(Cow::Borrowed(line));
                } else {
                    out.push(Cow::Borrowed(line));
                }
            }
            _ => match pending.as_mut() {
                None => {
                    let n = line.iter().take_while(|&&b| is_folding(b)).count();
                    pending = Some(Cow::Borrowed(line.get(n..).unwrap_or_default()));
                }
                Some(p) if http11 && line.contains(&b':') && p.contains(&b':') => {
                    out.extend(pending.replace(Cow::Borrowed(line.get(1..).unwrap_or_default())));
                }
                Some(p) => {
                    if p.len() < MAX_FOLDED {
                        p.to_mut().extend_from_slice(line);
                    }
                }
            },
        }
        if !whole {
            break;
        }
    }
    out.extend(pending);
    out
}

/// libhtp's `htp_chomp`: `line` without the LF, CR and CRLF sequences ending it.
fn chomp_all(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|&c| c != b'\r' && c != b'\n')
        .map_or(0, |e| e + 1);
    line.get(..end).unwrap_or_default()
}

/// The fields of unfolded response header texts (see [`response_texts`]).
pub(super) fn response_fields<'a>(texts: &'a [std::borrow::Cow<'_, [u8]>]) -> Vec<RawField<'a>> {
    texts.iter().map(|t| res_field(t)).collect()
}

/// Appends one field's value (its folded lines joined on, as Suricata shows them) to
/// `store`, trimmed.
fn push_value(store: &mut Vec<u8>, f: &RawField<'_>) {
    let v0 = store.len();
    store.extend_from_slice(f.value);
    for l in &f.folded {
        store.extend_from_slice(l);
    }
    let joined = store.get(v0..).unwrap_or_default();
    let value = trim(joined);
    let (from, len) = (v0 + offset(joined, value).start as usize, value.len());
    store.copy_within(from..from + len, v0);
    store.truncate(v0 + len);
}

/// One merged header: name and value as ranges into [`Headers::store`].
#[derive(Debug, Clone)]
struct Field {
    name: Range<u32>,
    value: Range<u32>,
}

/// The normalized headers of one message (plus its trailers), and the buffers built from
/// them: `http.header` (every header but the cookie one, `Name: value\r\n` each) and
/// `http.header_names` (`\r\nName1\r\nName2\r\n\r\n`).
#[derive(Debug, Default, Clone)]
pub(super) struct Headers {
    /// `http.header`, then the cookie header's line, then `http.header_names`.
    store: Vec<u8>,
    /// The merged headers in order of first appearance.
    fields: Vec<Field>,
    /// End of `http.header` in `store`.
    header_end: u32,
    /// Start of `http.header_names` in `store`.
    names_start: u32,
}

impl Headers {
    /// Builds the headers from parsed fields (head then trailers), merging repeated names.
    /// `cookie` is the name left out of `http.header` (`Cookie` or `Set-Cookie`). Errs if
    /// there are more than [`MAX_FIELDS`] distinct names.
    pub(super) fn build(raw: &[RawField<'_>], cookie: &[u8]) -> Result<Headers, ()> {
        let name = |i: usize| raw.get(i).map_or(&[][..], |f| f.name);
        // Merge: the first field of each name, and a chain through the later ones.
        let mut first: Vec<usize> = Vec::new();
        let mut last: Vec<usize> = Vec::new();
        let mut repeated: Vec<bool> = Vec::new();
        let mut next: Vec<Option<usize>> = vec![None; raw.len()];
        let mut repeats = 0;
        for (i, f) in raw.iter().enumerate() {
            match first
                .iter()
                .position(|&j| name(j).eq_ignore_ascii_case(f.name))
            {
                Some(k) => {
                    // libhtp: a second occurrence always merges, later ones while fewer
                    // than 64 repetitions were counted; Content-Length keeps the first.
                    let again = repeated.get(k).copied().unwrap_or(true);
                    if again {
                        if repeats >= MAX_REPEATS {
                            continue;
                        }
                        repeats += 1;
                    }
                    if let Some(r) = repeated.get_mut(k) {
                        *r = true;
                    }
                    if f.name.eq_ignore_ascii_case(b"content-length") {
                        continue;
                    }
                    if let Some(l) = last.get_mut(k) {
                        if let Some(n) = next.get_mut(*l) {
                            *n = Some(i);
                        }
                        *l = i;
                    }
                }
                None => {
                    if first.len() >= MAX_FIELDS {
                        return Err(());
                    }
                    first.push(i);
                    last.push(i);
                    repeated.push(false);
                }
            }
        }
        let mut h = Headers {
            fields: Vec::with_capacity(first.len()),
            ..Headers::default()
        };
        let len: usize = raw
            .iter()
            .map(|f| {
                2 * f.name.len()
                    + f.value.len()
                    + f.folded.iter().map(|l| l.len()).sum::<usize>()
                    + 8
            })
            .sum();
        h.store.reserve(len + 4);
        // Regular headers first, the cookie header after them.
        for pass in [false, true] {
            for &i0 in first
                .iter()
                .filter(|&&j| name(j).eq_ignore_ascii_case(cookie) == pass)
            {
                let n0 = h.store.len();
                h.store.extend_from_slice(name(i0));
                let n1 = h.store.len();
                h.store.extend_from_slice(b": ");
                let v0 = h.store.len();
                let mut at = Some(i0);
                while let Some(f) = at.and_then(|i| raw.get(i)) {
                    if at != Some(i0) {
                        h.store.extend_from_slice(b", ");
                    }
                    push_value(&mut h.store, f);
                    at = at.and_then(|i| next.get(i).copied().flatten());
                }
                let v1 = h.store.len();
                h.store.extend_from_slice(b"\r\n");
                h.fields.push(Field {
                    name: r32(n0..n1),
                    value: r32(v0..v1),
                });
            }
            if !pass {
                h.header_end = r32(0..h.store.len()).end;
            }
        }
        h.names_start = r32(0..h.store.len()).end;
        if !first.is_empty() {
            h.store.extend_from_slice(b"\r\n");
            for &i in &first {
                h.store.extend_from_slice(name(i));
                h.store.extend_from_slice(b"\r\n");
            }
            h.store.extend_from_slice(b"\r\n");
        }
        Ok(h)
    }

    /// The bytes of `r` in the store.
    fn get(&self, r: &Range<u32>) -> &[u8] {
        self.store
            .get(r.start as usize..r.end as usize)
            .unwrap_or_default()
    }

    /// The value of header `name` (case-insensitive), if present.
    pub(super) fn value(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| {
                // libhtp's `get_nocase_nozero`: NUL bytes in the stored name are skipped.
                let mut it = self.get(&f.name).iter().filter(|&&c| c != 0);
                name.iter()
                    .all(|n| it.next().is_some_and(|c| c.eq_ignore_ascii_case(n)))
                    && it.next().is_none()
            })
            .map(|f| self.get(&f.value))
    }

    /// `http.header`: absent when empty, as in Suricata.
    pub(super) fn header(&self) -> Option<&[u8]> {
        self.store
            .get(..self.header_end as usize)
            .filter(|b| !b.is_empty())
    }

    /// `http.header_names`: absent without headers.
    pub(super) fn names(&self) -> Option<&[u8]> {
        self.store
            .get(self.names_start as usize..)
            .filter(|b| !b.is_empty())
    }

    /// Bytes held.
    pub(super) fn heap_size(&self) -> usize {
        self.store.capacity() + self.fields.capacity() * std::mem::size_of::<Field>()
    }
}

#[cfg(test)]
mod tests;
