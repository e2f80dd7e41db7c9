//! Message bodies: the framing (Content-Length, chunked with trailers, until close) and the
//! content decoding (gzip / deflate with flate2, lzma with lzma-rs), into a body kept up
//! to a limit.
//!
//! Decoding follows libhtp: `gzip` / `x-gzip`, `deflate` / `x-deflate` and (when enabled,
//! [`DecodeOptions::lzma`]) `lzma` are decoded; any other `Content-Encoding` value is read
//! as libhtp's slow path does (a list of up to [`DecodeOptions::layers`] codings, each token
//! naming gzip or deflate if it contains the word, undone last listed first; see
//! [`Codings::from_header`]). gzip headers are read leniently ([`gzip`]: reserved flag bits
//! and a wrong header CRC are ignored, as libhtp's restart and Suricata 8 do). A stream that
//! fails before producing anything is retried as raw deflate, zlib, then gzip (three
//! restarts), then passed through as sent; one that fails after producing output stops
//! there. Data after the end of the compressed stream is ignored. The decoded size is
//! capped by the body limit: decompression stops when the limit is reached, so a
//! compression bomb costs at most `limit` bytes of output per layer.
//!
//! Memory: the body (at most the limit), and while a compressed body is being read one
//! boxed decoder per coding (at most [`MAX_LAYERS`]; a flate2 one is its 32 KiB window and
//! output buffer, about 80 KiB, an lzma one its dictionary, at most 1 MiB,
//! [`lzma::MEMLIMIT`]; each up to 16 KiB of input kept for a restart) and, between layers,
//! each outer layer's output of one write (at most the limit).

mod gzip;
mod lzma;

use std::io::Write;

use flate2::write::{DeflateDecoder, ZlibDecoder};

/// The content coding of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    /// As sent.
    Identity,
    /// gzip (RFC 1952), its header read leniently.
    Gzip,
    /// Raw deflate (RFC 1951), what libhtp tries first for `deflate`.
    Deflate,
    /// zlib-wrapped deflate (RFC 1950).
    Zlib,
    /// LZMA alone format, decoded only when [`DecodeOptions::lzma`] is set.
    Lzma,
}

/// How response bodies are decoded: Suricata's `libhtp` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeOptions {
    /// Content codings undone at most (`response-body-decompress-layer-limit`; Suricata's
    /// default 2; 0 means no limit, which is [`MAX_LAYERS`] here, as is anything above it).
    pub(crate) layers: usize,
    /// Whether `lzma` is decoded (`lzma-enabled`: off by default in Suricata 7 and 8).
    pub(crate) lzma: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            layers: 2,
            lzma: false,
        }
    }
}

/// The codings a `Content-Encoding` value asks for, in the order they are undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Codings {
    list: [Coding; MAX_LAYERS],
}

impl Codings {
    /// The codings of a `Content-Encoding` value, in the order they are undone.
    ///
    /// As libhtp (Suricata 8's `response.rs`): a value that is exactly `gzip`, `x-gzip`,
    /// `deflate`, `x-deflate` or `lzma` (any case, NUL bytes ignored) is that one coding;
    /// any other value is split at commas and spaces into at most `opts.layers` tokens, a
    /// token that contains `gzip` is gzip, one that contains `deflate` is deflate, one that
    /// is `lzma` is lzma (the list ends at an lzma token when lzma is off, and at a second
    /// one), any other none, and the last token listed is undone first (the layer applied
    /// last). `lzma` when lzma is off is passed through as sent.
    pub(super) fn from_header(v: Option<&[u8]>, opts: &DecodeOptions) -> Codings {
        let mut out = Codings {
            list: [Coding::Identity; MAX_LAYERS],
        };
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
        let single = if is(b"gzip") || is(b"x-gzip") {
            Some(Coding::Gzip)
        } else if is(b"deflate") || is(b"x-deflate") {
            Some(Coding::Deflate)
        } else if is(b"lzma") {
            Some(if opts.lzma {
                Coding::Lzma
            } else {
                Coding::Identity
            })
        } else {
            None
        };
        if let Some(c) = single {
            out.list[0] = c;
            return out;
        }
        let contains = |tok: &[u8], word: &[u8]| {
            tok.windows(word.len())
                .any(|w| w.eq_ignore_ascii_case(word))
        };
        let layers = match opts.layers {
            0 => MAX_LAYERS,
            n => n.min(MAX_LAYERS),
        };
        let mut listed = [Coding::Identity; MAX_LAYERS];
        let tokens = v
            .split(|&c| c == b',' || c == b' ')
            .filter(|t| !t.is_empty());
        let mut n = 0;
        let mut lzmas = 0;
        for (slot, tok) in listed.iter_mut().take(layers).zip(tokens) {
            *slot = if contains(tok, b"gzip") {
                Coding::Gzip
            } else if contains(tok, b"deflate") {
                Coding::Deflate
            } else if tok == b"lzma" {
                lzmas += 1;
                if !opts.lzma || lzmas > 1 {
                    break;
                }
                Coding::Lzma
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
        for (slot, c) in out.list.iter_mut().zip(undo) {
            *slot = *c;
        }
        out
    }

    /// The codings, undone first to last (`Identity` where there are fewer).
    pub(super) fn as_slice(&self) -> &[Coding] {
        &self.list
    }
}

impl Coding {
    /// The codings a `Content-Encoding` value asks for with Suricata's default settings
    /// (two layers, no lzma), in the order they are undone: [`Codings::from_header`].
    #[cfg(test)]
    pub(super) fn from_header(v: Option<&[u8]>) -> [Coding; 2] {
        let mut out = [Coding::Identity; 2];
        let c = Codings::from_header(v, &DecodeOptions::default());
        for (o, c) in out.iter_mut().zip(c.as_slice()) {
            *o = *c;
        }
        out
    }

    /// The coding libhtp (Suricata 8) tries after this one fails.
    fn next(self) -> Coding {
        match self {
            Coding::Gzip | Coding::Lzma => Coding::Deflate,
            Coding::Deflate => Coding::Zlib,
            Coding::Zlib | Coding::Identity => Coding::Gzip,
        }
    }
}

/// Content codings undone at most, one after the other, whatever
/// [`DecodeOptions::layers`] says (libhtp's `response-body-decompress-layer-limit`, 2 in
/// Suricata's default configuration; the http-evader tests use 3).
pub(super) const MAX_LAYERS: usize = 4;

/// Input kept per coding tried, to be read again by the next coding if this one fails.
const MAX_REPLAY: usize = 16 * 1024;

/// Where a decoder writes: a staging vector with room for what the limit still allows.
#[derive(Debug)]
struct Sink {
    out: Vec<u8>,
    room: usize,
    /// Refuse writes once full (flate2: stops a bomb at once); otherwise drop what does
    /// not fit (lzma-rs drops its output on a write error).
    strict: bool,
}

impl Sink {
    /// A sink with no room.
    fn full() -> Sink {
        Sink {
            out: Vec::new(),
            room: 0,
            strict: false,
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            if self.strict {
                return Err(std::io::Error::other("body limit reached"));
            }
            return Ok(buf.len());
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

/// A running decoder.
enum Inflater {
    Gzip(Box<gzip::Gunzip>),
    Deflate(Box<DeflateDecoder<Sink>>),
    Zlib(Box<ZlibDecoder<Sink>>),
    Lzma(Box<lzma::Unlzma>),
}

impl Inflater {
    fn new(c: Coding, room: usize) -> Option<Inflater> {
        let s = Sink {
            out: Vec::new(),
            room,
            strict: c != Coding::Lzma,
        };
        match c {
            Coding::Identity => None,
            Coding::Gzip => Some(Inflater::Gzip(Box::new(gzip::Gunzip::new(s)))),
            Coding::Deflate => Some(Inflater::Deflate(Box::new(DeflateDecoder::new(s)))),
            Coding::Zlib => Some(Inflater::Zlib(Box::new(ZlibDecoder::new(s)))),
            Coding::Lzma => Some(Inflater::Lzma(Box::new(lzma::Unlzma::new(s)))),
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Inflater::Gzip(d) => d.write(data),
            Inflater::Deflate(d) => d.write(data),
            Inflater::Zlib(d) => d.write(data),
            Inflater::Lzma(d) => d.write(data),
        }
    }

    fn finish(&mut self) {
        // Errors here are a truncated or corrupt end: keep what was decoded.
        let _ = match self {
            Inflater::Gzip(d) => d.try_finish(),
            Inflater::Deflate(d) => d.try_finish(),
            Inflater::Zlib(d) => d.try_finish(),
            Inflater::Lzma(d) => {
                d.finish();
                Ok(())
            }
        };
    }

    /// Bytes held: the decoder's fixed state (estimated, see
    /// [`crate::applayer::budget::INFLATE_STATE`], and [`lzma::Unlzma::heap_size`]) and
    /// the sink's staging vector.
    fn heap_size(&self) -> usize {
        let flate = |s: &Sink| crate::applayer::budget::INFLATE_STATE + s.out.capacity();
        match self {
            Inflater::Gzip(d) => flate(d.get_ref()),
            Inflater::Deflate(d) => flate(d.get_ref()),
            Inflater::Zlib(d) => flate(d.get_ref()),
            Inflater::Lzma(d) => d.heap_size(),
        }
    }

    fn sink(&mut self) -> &mut Sink {
        match self {
            Inflater::Gzip(d) => d.get_mut(),
            Inflater::Deflate(d) => d.get_mut(),
            Inflater::Zlib(d) => d.get_mut(),
            Inflater::Lzma(d) => d.get_mut(),
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

    /// Bytes held while decoding (the body it writes to is not counted here).
    fn heap_size(&self) -> usize {
        match &self.mode {
            Mode::Inflate(a) => {
                std::mem::size_of::<Attempt>() + a.inflater.heap_size() + a.seen.capacity()
            }
            Mode::Pass | Mode::Stopped => 0,
        }
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
    /// The codings undone before the last, in order, each with its output of the current
    /// write (the next one's input).
    outer: Vec<(Layer, Vec<u8>)>,
    /// The coding undone last, writing the body.
    inner: Layer,
}

impl Decoder {
    /// A decoder for one coding `c` and a body limit.
    pub(super) fn new(c: Coding, limit: usize) -> Decoder {
        Decoder {
            outer: Vec::new(),
            inner: Layer::new(c, limit),
        }
    }

    /// A decoder for two codings in the order they are undone ([`Coding::from_header`]).
    #[cfg(test)]
    pub(super) fn layered(c: [Coding; 2], limit: usize) -> Decoder {
        Decoder::with_codings(c.as_slice(), limit)
    }

    /// A decoder for codings in the order they are undone ([`Codings::from_header`];
    /// `Identity` entries are skipped).
    pub(super) fn with_codings(c: &[Coding], limit: usize) -> Decoder {
        let mut layers = c
            .iter()
            .filter(|&&c| c != Coding::Identity)
            .map(|&c| Layer::new(c, limit))
            .collect::<Vec<_>>();
        let Some(inner) = layers.pop() else {
            return Decoder::new(Coding::Identity, limit);
        };
        Decoder {
            outer: layers.into_iter().map(|l| (l, Vec::new())).collect(),
            inner,
        }
    }

    /// Runs `data` through the outer layers; their last one's output is left in its stage.
    fn run_outer(&mut self, data: &[u8], finish: bool) {
        for i in 0..self.outer.len() {
            let (done, rest) = self.outer.split_at_mut(i);
            let Some((layer, stage)) = rest.first_mut() else {
                break;
            };
            stage.clear();
            let input = done.last().map_or(data, |(_, s)| s.as_slice());
            layer.write(input, stage);
            if finish {
                layer.finish(stage);
            }
        }
    }

    /// Bytes held while decoding, for the application-layer memcap: each layer's decoder
    /// state and staging vectors, and the outer layers' outputs between them.
    pub(crate) fn heap_size(&self) -> usize {
        std::mem::size_of::<Decoder>()
            + self.inner.heap_size()
            + self.outer.capacity() * std::mem::size_of::<(Layer, Vec<u8>)>()
            + self
                .outer
                .iter()
                .map(|(l, s)| l.heap_size() + s.capacity())
                .sum::<usize>()
    }

    /// Decodes `data` onto `body`. Returns true once `body` holds `limit` bytes.
    pub(super) fn write(&mut self, data: &[u8], body: &mut Vec<u8>) -> bool {
        if self.outer.is_empty() {
            return self.inner.write(data, body);
        }
        self.run_outer(data, false);
        let input = self.outer.last().map_or(&[][..], |(_, s)| s.as_slice());
        self.inner.write(input, body)
    }

    /// Ends the body: flushes what the decoders still hold onto `body`.
    pub(super) fn finish(&mut self, body: &mut Vec<u8>) {
        if !self.outer.is_empty() {
            self.run_outer(&[], true);
            let input = self.outer.last().map_or(&[][..], |(_, s)| s.as_slice());
            self.inner.write(input, body);
            for (_, stage) in &mut self.outer {
                *stage = Vec::new();
            }
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

/// Gives back a finished body's spare capacity (growth by doubling leaves up to half of
/// it unused), so that the memory held is the body's size.
pub(super) fn trim_capacity(body: &mut Vec<u8>) {
    if body.capacity() - body.len() > 4096 {
        body.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests;
