//! Message bodies: the framing (Content-Length, chunked with trailers, until close) and the
//! content decoding (gzip / deflate with flate2), into a body kept up to a limit.
//!
//! Decoding follows libhtp: `gzip` / `x-gzip` and `deflate` / `x-deflate` are decoded; any
//! other `Content-Encoding` value is read as libhtp's slow path does (a list of up to two
//! codings, each token naming gzip or deflate if it contains the word, undone last listed
//! first; see [`Coding::from_header`]). A stream that
//! fails before producing anything is retried as raw deflate, zlib, then gzip (three
//! restarts), then passed through as sent; one that fails after producing output stops
//! there. Data after the end of the compressed stream is ignored. The decoded size is
//! capped by the body limit: decompression stops when the limit is reached, so a
//! compression bomb costs at most `limit` bytes of output.
//!
//! Memory: the body (at most the limit), and while a compressed body is being read one
//! boxed flate2 decoder per coding (at most two; each its 32 KiB window and output buffer,
//! about 80 KiB, and up to 16 KiB of input kept for a restart) and, with two, the first
//! one's output of one write (at most the limit).

use std::io::Write;

use flate2::write::{DeflateDecoder, GzDecoder, ZlibDecoder};

/// The content coding of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    /// As sent.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
    /// Raw deflate (RFC 1951), what libhtp tries first for `deflate`.
    Deflate,
    /// zlib-wrapped deflate (RFC 1950).
    Zlib,
}

impl Coding {
    /// The codings a `Content-Encoding` value asks for, in the order they are undone.
    ///
    /// As libhtp (Suricata 8's `response.rs`): a value that is exactly `gzip`, `x-gzip`,
    /// `deflate` or `x-deflate` (any case, NUL bytes ignored) is that one coding; any other
    /// value is split at commas and spaces into at most [`MAX_LAYERS`] tokens, a token that
    /// contains `gzip` is gzip, one that contains `deflate` is deflate, any other none, and
    /// the last token listed is undone first (the layer applied last).
    pub(super) fn from_header(v: Option<&[u8]>) -> [Coding; MAX_LAYERS] {
        let mut out = [Coding::Identity; MAX_LAYERS];
        let Some(v) = v else {
            return out;
        };
        let v = super::head::trim(v);
        let is = |word: &[u8]| {
            let mut it = v.iter().filter(|&&c| c != 0);
            word.iter()
                .all(|w| it.next().is_some_and(|c| c.eq_ignore_ascii_case(w)))
                && it.next().is_none()
        };
        if is(b"gzip") || is(b"x-gzip") {
            out[0] = Coding::Gzip;
            return out;
        }
        if is(b"deflate") || is(b"x-deflate") {
            out[0] = Coding::Deflate;
            return out;
        }
        let contains = |tok: &[u8], word: &[u8]| {
            tok.windows(word.len())
                .any(|w| w.eq_ignore_ascii_case(word))
        };
        let mut listed = [Coding::Identity; MAX_LAYERS];
        let tokens = v
            .split(|&c| c == b',' || c == b' ')
            .filter(|t| !t.is_empty());
        let mut n = 0;
        for (slot, tok) in listed.iter_mut().zip(tokens) {
            *slot = if contains(tok, b"gzip") {
                Coding::Gzip
            } else if contains(tok, b"deflate") {
                Coding::Deflate
            } else {
                Coding::Identity
            };
            n += 1;
        }
        let undo = listed
            .iter()
            .take(n)
            .rev()
            .filter(|&&c| c != Coding::Identity);
        for (slot, c) in out.iter_mut().zip(undo) {
            *slot = *c;
        }
        out
    }

    /// The coding libhtp tries after this one fails.
    fn next(self) -> Coding {
        match self {
            Coding::Gzip => Coding::Deflate,
            Coding::Deflate => Coding::Zlib,
            Coding::Zlib | Coding::Identity => Coding::Gzip,
        }
    }
}

/// Content codings undone at most, one after the other (libhtp's
/// `response-body-decompress-layer-limit`, 2 in Suricata's default configuration).
pub(super) const MAX_LAYERS: usize = 2;

/// Input kept per coding tried, to be read again by the next coding if this one fails.
const MAX_REPLAY: usize = 16 * 1024;

/// Where a decoder writes: a staging vector with room for what the limit still allows.
#[derive(Debug)]
struct Sink {
    out: Vec<u8>,
    room: usize,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::other("body limit reached"));
        }
        let n = buf.len().min(self.room);
        self.out.extend_from_slice(buf.get(..n).unwrap_or_default());
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A running flate2 decoder.
enum Inflater {
    Gzip(Box<GzDecoder<Sink>>),
    Deflate(Box<DeflateDecoder<Sink>>),
    Zlib(Box<ZlibDecoder<Sink>>),
}

impl Inflater {
    fn new(c: Coding, room: usize) -> Option<Inflater> {
        let s = Sink {
            out: Vec::new(),
            room,
        };
        match c {
            Coding::Identity => None,
            Coding::Gzip => Some(Inflater::Gzip(Box::new(GzDecoder::new(s)))),
            Coding::Deflate => Some(Inflater::Deflate(Box::new(DeflateDecoder::new(s)))),
            Coding::Zlib => Some(Inflater::Zlib(Box::new(ZlibDecoder::new(s)))),
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Inflater::Gzip(d) => d.write(data),
            Inflater::Deflate(d) => d.write(data),
            Inflater::Zlib(d) => d.write(data),
        }
    }

    fn finish(&mut self) {
        // Errors here are a truncated or corrupt end: keep what was decoded.
        let _ = match self {
            Inflater::Gzip(d) => d.try_finish(),
            Inflater::Deflate(d) => d.try_finish(),
            Inflater::Zlib(d) => d.try_finish(),
        };
    }

    fn sink(&mut self) -> &mut Sink {
        match self {
            Inflater::Gzip(d) => d.get_mut(),
            Inflater::Deflate(d) => d.get_mut(),
            Inflater::Zlib(d) => d.get_mut(),
        }
    }
}

/// What a decoder does with the bytes it gets.
enum Mode {
    /// Keeps them as they are.
    Pass,
    /// Inflates them.
    Inflate(Box<Attempt>),
    /// Drops them (the stream ended, broke after producing output, or filled the limit).
    Stopped,
}

/// One coding being tried on a body.
struct Attempt {
    inflater: Inflater,
    coding: Coding,
    /// How many codings were tried before this one (0: the declared one).
    restarts: u8,
    /// The body's length when this attempt started.
    start: usize,
    /// The input this attempt consumed, to read again with the next coding if it fails.
    seen: Vec<u8>,
    /// `seen` passed [`MAX_REPLAY`] and was dropped.
    overflow: bool,
}

/// Undoes one content coding: turns bytes into decoded bytes, appending to a vector up
/// to `limit` bytes.
///
/// Restarts as libhtp, made independent of how the input is cut: the declared coding keeps
/// what it decoded before an error (libhtp flushes it, then stops); a later coding that
/// fails has its output dropped and the input it consumed is read again by the next one
/// (libhtp reads again only the current chunk); after three restarts the input passes
/// through as sent.
struct Layer {
    mode: Mode,
    limit: usize,
}

impl Layer {
    /// A decoder for coding `c` and a body limit.
    fn new(c: Coding, limit: usize) -> Layer {
        Layer {
            mode: Layer::attempt(c, 0, 0, limit),
            limit,
        }
    }

    /// Mode for trying coding `c` after `restarts` others, the body holding `start` bytes.
    fn attempt(c: Coding, restarts: u8, start: usize, limit: usize) -> Mode {
        match Inflater::new(c, limit.saturating_sub(start)) {
            Some(inflater) if restarts <= 3 => Mode::Inflate(Box::new(Attempt {
                inflater,
                coding: c,
                restarts,
                start,
                seen: Vec::new(),
                overflow: false,
            })),
            _ => Mode::Pass,
        }
    }

    /// Decodes `data` onto `body`. Returns true once `body` holds `limit` bytes.
    fn write(&mut self, data: &[u8], body: &mut Vec<u8>) -> bool {
        let mut replay: Vec<u8>;
        let mut rest = data;
        loop {
            match &mut self.mode {
                Mode::Pass => {
                    let n = rest.len().min(self.limit.saturating_sub(body.len()));
                    body.extend_from_slice(rest.get(..n).unwrap_or_default());
                    break;
                }
                Mode::Stopped => break,
                Mode::Inflate(a) => {
                    if rest.is_empty() {
                        break;
                    }
                    let r = a.inflater.write(rest);
                    if r.is_err() && a.restarts == 0 {
                        // flate2 keeps what it decoded before the error in its buffer.
                        a.inflater.finish();
                    }
                    let sink = a.inflater.sink();
                    body.append(&mut sink.out);
                    let full = sink.room == 0;
                    match r {
                        Ok(0) => self.mode = Mode::Stopped,
                        Ok(n) => {
                            let (used, left) = rest.split_at(n.min(rest.len()));
                            if !a.overflow && a.seen.len() + used.len() <= MAX_REPLAY {
                                a.seen.extend_from_slice(used);
                            } else {
                                a.overflow = true;
                                a.seen = Vec::new();
                            }
                            rest = left;
                        }
                        Err(_)
                            if full || a.overflow || (a.restarts == 0 && body.len() > a.start) =>
                        {
                            self.mode = Mode::Stopped;
                        }
                        Err(_) => {
                            body.truncate(a.start);
                            let mut again = std::mem::take(&mut a.seen);
                            again.extend_from_slice(rest);
                            replay = again;
                            self.mode = Layer::attempt(
                                a.coding.next(),
                                a.restarts + 1,
                                a.start,
                                self.limit,
                            );
                            rest = &replay;
                        }
                    }
                }
            }
        }
        body.len() >= self.limit
    }

    /// Ends the body: flushes what the decoder still holds onto `body`.
    fn finish(&mut self, body: &mut Vec<u8>) {
        if let Mode::Inflate(a) = &mut self.mode {
            a.inflater.finish();
            body.append(&mut a.inflater.sink().out);
        }
        self.mode = Mode::Stopped;
    }
}

/// Turns the (de-chunked) bytes of a body into the body Suricata inspects, appending to a
/// body vector up to `limit` bytes: up to [`MAX_LAYERS`] codings undone one after the
/// other, each as one [`Layer`].
pub(super) struct Decoder {
    /// The coding undone first, and its output not yet passed on, when there are two.
    outer: Option<(Layer, Vec<u8>)>,
    /// The coding undone last, writing the body.
    inner: Layer,
}

impl Decoder {
    /// A decoder for one coding `c` and a body limit.
    pub(super) fn new(c: Coding, limit: usize) -> Decoder {
        Decoder {
            outer: None,
            inner: Layer::new(c, limit),
        }
    }

    /// A decoder for codings in the order they are undone ([`Coding::from_header`]).
    pub(super) fn layered(c: [Coding; MAX_LAYERS], limit: usize) -> Decoder {
        match c {
            [first, Coding::Identity] => Decoder::new(first, limit),
            [first, second] => Decoder {
                outer: Some((Layer::new(first, limit), Vec::new())),
                inner: Layer::new(second, limit),
            },
        }
    }

    /// Decodes `data` onto `body`. Returns true once `body` holds `limit` bytes.
    pub(super) fn write(&mut self, data: &[u8], body: &mut Vec<u8>) -> bool {
        match &mut self.outer {
            None => self.inner.write(data, body),
            Some((outer, stage)) => {
                outer.write(data, stage);
                let full = self.inner.write(stage, body);
                stage.clear();
                full
            }
        }
    }

    /// Ends the body: flushes what the decoders still hold onto `body`.
    pub(super) fn finish(&mut self, body: &mut Vec<u8>) {
        if let Some((outer, stage)) = &mut self.outer {
            outer.finish(stage);
            self.inner.write(stage, body);
            *stage = Vec::new();
        }
        self.inner.finish(body);
    }
}

/// How the end of a body is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes are left.
    Length(u64),
    /// Chunked transfer coding, in the given state.
    Chunked(Chunk),
    /// Until the connection closes (responses without length).
    Close,
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// This many bytes of chunk data are left.
    Data(u64),
    /// Skipping to the end of the line after the chunk data.
    DataEnd,
    /// Reading the trailer block after the last chunk.
    Trailer,
}

/// Parses a chunk-size line (without its line end): `httparse::parse_chunk_size` first,
/// then libhtp's leniency (leading whitespace, junk after the hex digits). `Ok(None)` for a
/// blank line, which libhtp skips; `Err` for a line without hex digits or a size over
/// `i32::MAX` (libhtp's bound).
pub(super) fn chunk_size(line: &[u8]) -> Result<Option<u64>, ()> {
    let t = super::head::trim(line);
    if t.is_empty() {
        return Ok(None);
    }
    let mut crlf = [0u8; 64];
    if let Some(dst) = crlf.get_mut(..line.len() + 2) {
        let (l, e) = dst.split_at_mut(line.len());
        l.copy_from_slice(line);
        e.copy_from_slice(b"\r\n");
        if let Ok(httparse::Status::Complete((_, n))) = httparse::parse_chunk_size(dst) {
            return if n > i32::MAX as u64 {
                Err(())
            } else {
                Ok(Some(n))
            };
        }
    }
    let digits = t.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    let hex = std::str::from_utf8(t.get(..digits).unwrap_or_default()).map_err(|_| ())?;
    match u64::from_str_radix(hex, 16) {
        Ok(n) if n <= i32::MAX as u64 => Ok(Some(n)),
        _ => Err(()),
    }
}

/// Parses a Content-Length value as libhtp: the first run of digits, junk around it
/// tolerated; `None` without digits or on overflow.
pub(super) fn content_length(v: &[u8]) -> Option<u64> {
    let start = v.iter().position(u8::is_ascii_digit)?;
    let digits = v.get(start..)?;
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(digits.get(..end)?).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).expect("gzip");
        e.finish().expect("gzip")
    }

    fn decode(c: Coding, limit: usize, input: &[u8], step: usize) -> Vec<u8> {
        let mut d = Decoder::new(c, limit);
        let mut body = Vec::new();
        for part in input.chunks(step.max(1)) {
            d.write(part, &mut body);
        }
        d.finish(&mut body);
        body
    }

    #[test]
    fn gzip_deflate_and_zlib_decode_in_any_split() {
        let text = b"hello hello hello hello world".repeat(50);
        let gz = gzip(&text);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(&text).expect("zlib");
        let zl = z.finish().expect("zlib");
        let mut r = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        r.write_all(&text).expect("deflate");
        let raw = r.finish().expect("deflate");
        for step in [1, 3, 7, 100, 10_000] {
            assert_eq!(decode(Coding::Gzip, 1 << 20, &gz, step), text);
            // `deflate` with a zlib header: raw deflate fails at once, zlib takes over.
            assert_eq!(decode(Coding::Deflate, 1 << 20, &zl, step), text);
            assert_eq!(decode(Coding::Deflate, 1 << 20, &raw, step), text);
        }
    }

    #[test]
    fn not_compressed_passes_through_and_limits_hold() {
        let plain = b"{\"sdk_version\":1} not gzip at all";
        assert_eq!(decode(Coding::Gzip, 1 << 20, plain, 1000), plain);
        let bomb = gzip(&vec![b'a'; 1 << 20]);
        let out = decode(Coding::Gzip, 1000, &bomb, 4096);
        assert_eq!(out, vec![b'a'; 1000]);
        let mut d = Decoder::new(Coding::Identity, 4);
        let mut body = Vec::new();
        assert!(!d.write(b"ab", &mut body));
        assert!(d.write(b"cdef", &mut body));
        assert_eq!(body, b"abcd");
    }

    #[test]
    fn trailing_garbage_after_the_stream_is_ignored() {
        let mut gz = gzip(b"payload");
        gz.extend_from_slice(b"garbage after the end");
        assert_eq!(decode(Coding::Gzip, 1 << 20, &gz, 5), b"payload");
    }

    #[test]
    fn content_encoding_values_as_libhtp_reads_them() {
        use Coding::{Deflate as D, Gzip as G, Identity as I};
        let f = |v: &[u8]| Coding::from_header(Some(v));
        assert_eq!(Coding::from_header(None), [I, I]);
        assert_eq!(f(b" GZip "), [G, I]);
        assert_eq!(f(b"gz\0ip"), [G, I]);
        assert_eq!(f(b"x-deflate"), [D, I]);
        assert_eq!(f(b"gzip,deflate"), [D, G]);
        assert_eq!(f(b"deflate, gzip"), [G, D]);
        assert_eq!(f(b"gzip_x"), [G, I]);
        assert_eq!(f(b"deflate,"), [D, I]);
        assert_eq!(f(b"identity,gzip"), [G, I]);
        // Two layers at most: the third token is not read.
        assert_eq!(f(b"identity,gzip,deflate"), [G, I]);
        assert_eq!(f(b"br"), [I, I]);
        let gz = gzip(&gzip(b"twice"));
        let mut d = Decoder::layered(f(b"gzip, gzip"), 1 << 20);
        let mut out = Vec::new();
        for c in gz.chunks(3) {
            d.write(c, &mut out);
        }
        d.finish(&mut out);
        assert_eq!(out, b"twice");
    }

    #[test]
    fn chunk_sizes_and_content_lengths() {
        assert_eq!(chunk_size(b"1a"), Ok(Some(26)));
        assert_eq!(chunk_size(b"3;x=y"), Ok(Some(3)));
        assert_eq!(chunk_size(b"  3  "), Ok(Some(3)));
        assert_eq!(chunk_size(b"3 junk"), Ok(Some(3)));
        assert_eq!(chunk_size(b""), Ok(None));
        assert_eq!(chunk_size(b"zz"), Err(()));
        assert_eq!(chunk_size(b"ffffffffff"), Err(()));
        assert_eq!(chunk_size(&[b'1'; 200]), Err(()));
        assert_eq!(content_length(b" 12 "), Some(12));
        assert_eq!(content_length(b"x12y"), Some(12));
        assert_eq!(content_length(b"abc"), None);
        assert_eq!(content_length(b"99999999999999999999999"), None);
    }
}
