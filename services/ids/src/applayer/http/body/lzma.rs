//! `Content-Encoding: lzma`: the LZMA "alone" format (13-byte header: properties,
//! dictionary size, unpacked size; then the range-coded stream), as libhtp 0.5 decodes it
//! when Suricata's `lzma-enabled` is set, with `lzma-rs`.
//!
//! Memory: libhtp's `lzma-memlimit` (1 MiB, [`MEMLIMIT`]) bounds the dictionary: the
//! header's dictionary size is lowered to it before `lzma-rs` sees it, so the history
//! buffer never passes it (a match reaching further back is an error, as libhtp's
//! memory-limit error). `lzma-rs` passes output on when its history buffer wraps and at the
//! end, so up to [`MEMLIMIT`] decoded bytes wait there. Input is fed [`STEP`] bytes at a
//! time and decoding stops once the body limit is reached, which bounds the work one call
//! does on a decompression bomb.
//!
//! Unlike libhtp, a stream that turns corrupt after producing output loses what `lzma-rs`
//! still held (at most [`MEMLIMIT`] bytes): `lzma-rs` drops its state on an error.

use std::io::Write;

use lzma_rs::decompress::{Options, Stream, UnpackedSize};

use super::Sink;

/// libhtp's and Suricata's default `lzma-memlimit`: the largest dictionary used.
pub(super) const MEMLIMIT: usize = 1 << 20;

/// Input bytes fed to the decoder per call, between checks of the body limit.
const STEP: usize = 1024;

/// Length of the LZMA alone header.
const HEADER: usize = 13;

/// An LZMA decoder writing into a [`Sink`].
pub(super) struct Unlzma {
    head: [u8; HEADER],
    have: usize,
    stream: Option<Box<Stream<Sink>>>,
    /// The sink while no stream holds it (before the header, after the end).
    idle: Sink,
}

impl Unlzma {
    /// A decoder writing into `sink` (which must not refuse writes: `lzma-rs` drops its
    /// output on a write error).
    pub(super) fn new(sink: Sink) -> Unlzma {
        Unlzma {
            head: [0; HEADER],
            have: 0,
            stream: None,
            idle: sink,
        }
    }

    /// Decodes from `data`; returns how many bytes were consumed. An error once the sink
    /// is full, or when the stream is corrupt.
    pub(super) fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.get_mut().room == 0 {
            return Err(std::io::Error::other("body limit reached"));
        }
        if self.have < HEADER {
            let n = (HEADER - self.have).min(data.len());
            let (dst, src) = (self.head.get_mut(self.have..self.have + n), data.get(..n));
            if let (Some(dst), Some(src)) = (dst, src) {
                dst.copy_from_slice(src);
            }
            self.have += n;
            if self.have == HEADER {
                self.start()?;
            }
            return Ok(n);
        }
        let Some(stream) = &mut self.stream else {
            return Err(std::io::Error::other("lzma stream ended"));
        };
        let part = data.get(..data.len().min(STEP)).unwrap_or_default();
        match stream.write(part) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }

    /// Starts the stream on the complete header, its dictionary bounded by [`MEMLIMIT`].
    fn start(&mut self) -> std::io::Result<()> {
        let mut head = self.head;
        if let Some(dict) = head.get_mut(1..5)
            && let Ok(size) = <[u8; 4]>::try_from(&*dict)
        {
            let bounded = u32::from_le_bytes(size).min(MEMLIMIT as u32);
            dict.copy_from_slice(&bounded.to_le_bytes());
        }
        let options = Options {
            unpacked_size: UnpackedSize::ReadFromHeader,
            memlimit: Some(MEMLIMIT),
            allow_incomplete: true,
        };
        let sink = std::mem::replace(&mut self.idle, Sink::full());
        let mut stream = Box::new(Stream::new_with_options(&options, sink));
        stream.write_all(&head)?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Ends the stream: what `lzma-rs` still holds goes to the sink.
    pub(super) fn finish(&mut self) {
        if let Some(stream) = self.stream.take()
            && let Ok(sink) = stream.finish()
        {
            self.idle = sink;
        }
    }

    /// The sink decoded bytes go to (an empty, full one if the stream broke).
    pub(super) fn get_mut(&mut self) -> &mut Sink {
        match &mut self.stream {
            Some(s) => s.get_output_mut().unwrap_or(&mut self.idle),
            None => &mut self.idle,
        }
    }

    /// Bytes the decoder holds, as charged to the application-layer memcap. Once the
    /// header is in: the dictionary the header asks for (bounded by [`MEMLIMIT`]; `lzma-rs`
    /// grows its buffer up to it, charged whole from the start) and the literal
    /// probabilities (`0x300 << (lc + lp)` 16-bit counters, up to 6 MiB for `lc` 8 and `lp`
    /// 4, which the header chooses), plus the decoder's other tables (a few KiB) and the
    /// sink's staging vector.
    pub(super) fn heap_size(&self) -> usize {
        let sink = match &self.stream {
            Some(s) => s.get_output().unwrap_or(&self.idle),
            None => &self.idle,
        };
        let staged = sink.out.capacity();
        if self.stream.is_none() {
            return staged;
        }
        let props = usize::from(self.head[0]);
        let (lc, lp) = (props % 9, (props / 9) % 5);
        let dict = <[u8; 4]>::try_from(self.head.get(1..5).unwrap_or_default())
            .map_or(MEMLIMIT, |b| u32::from_le_bytes(b) as usize)
            .clamp(4096, MEMLIMIT);
        dict + (0x300usize << (lc + lp)) * 2 + (16 << 10) + staged
    }
}
