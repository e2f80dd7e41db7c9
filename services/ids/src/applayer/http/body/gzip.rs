//! gzip read as browsers, libhtp and Suricata 8 read it: the RFC 1952 header is skipped
//! without checking its reserved flag bits or its header CRC (which a strict decoder such
//! as flate2's `GzDecoder` refuses), then the deflate stream is inflated raw; the trailer
//! (CRC-32, size) is not checked.
//!
//! libhtp 0.5 gets there by restarting: zlib refuses the header, and the restart skips the
//! header (10 bytes, 12 with FHCRC, or up to a NUL with FNAME / FCOMMENT) and inflates raw.
//! Suricata 8's `GzipBufWriter` parses the header leniently, as here.
//!
//! Memory: the flate2 raw decoder (its 32 KiB window) and a few bytes of header state; the
//! optional header fields (extra, name, comment) are skipped as they come, never kept.

use std::io::Write;

use flate2::write::DeflateDecoder;

use super::Sink;

const FHCRC: u8 = 1 << 1;
const FEXTRA: u8 = 1 << 2;
const FNAME: u8 = 1 << 3;
const FCOMMENT: u8 = 1 << 4;

/// Where the header parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hdr {
    /// In the fixed 10 bytes: this many read.
    Fixed(u8),
    /// In the 2-byte extra length: this many read, the low byte.
    Xlen(u8, u8),
    /// Skipping this many bytes of extra field.
    Extra(u16),
    /// Skipping the zero-terminated file name.
    Name,
    /// Skipping the zero-terminated comment.
    Comment,
    /// Skipping this many bytes of header CRC.
    Crc(u8),
    /// Past the header: inflating.
    Body,
}

/// A lenient gzip decoder writing into a [`Sink`].
pub(super) struct Gunzip {
    hdr: Hdr,
    flags: u8,
    inner: DeflateDecoder<Sink>,
}

impl Gunzip {
    /// A decoder writing into `sink`.
    pub(super) fn new(sink: Sink) -> Gunzip {
        Gunzip {
            hdr: Hdr::Fixed(0),
            flags: 0,
            inner: DeflateDecoder::new(sink),
        }
    }

    /// The state after the optional field `after` (the next one present, else the body).
    fn after(&self, field: Hdr) -> Hdr {
        let order = [
            (FEXTRA, Hdr::Xlen(0, 0)),
            (FNAME, Hdr::Name),
            (FCOMMENT, Hdr::Comment),
            (FHCRC, Hdr::Crc(2)),
        ];
        let start = match field {
            Hdr::Fixed(_) => 0,
            Hdr::Xlen(..) | Hdr::Extra(_) => 1,
            Hdr::Name => 2,
            Hdr::Comment => 3,
            Hdr::Crc(_) | Hdr::Body => 4,
        };
        order
            .iter()
            .skip(start)
            .find(|(bit, _)| self.flags & bit != 0)
            .map_or(Hdr::Body, |&(_, s)| s)
    }

    /// Reads header bytes from `data`; returns how many were consumed.
    fn header(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut used = 0;
        for &b in data {
            if self.hdr == Hdr::Body {
                break;
            }
            used += 1;
            self.hdr = match self.hdr {
                Hdr::Fixed(n) => {
                    let want = match n {
                        0 => Some(0x1f),
                        1 => Some(0x8b),
                        _ => None,
                    };
                    if want.is_some_and(|w| w != b) {
                        return Err(std::io::Error::other("not a gzip header"));
                    }
                    if n == 3 {
                        self.flags = b;
                    }
                    if n == 9 {
                        self.after(Hdr::Fixed(0))
                    } else {
                        Hdr::Fixed(n + 1)
                    }
                }
                Hdr::Xlen(0, _) => Hdr::Xlen(1, b),
                Hdr::Xlen(_, lo) => match u16::from_le_bytes([lo, b]) {
                    0 => self.after(Hdr::Extra(0)),
                    n => Hdr::Extra(n),
                },
                Hdr::Extra(n) if n > 1 => Hdr::Extra(n - 1),
                Hdr::Extra(_) => self.after(Hdr::Extra(0)),
                Hdr::Name if b != 0 => Hdr::Name,
                Hdr::Name => self.after(Hdr::Name),
                Hdr::Comment if b != 0 => Hdr::Comment,
                Hdr::Comment => self.after(Hdr::Comment),
                Hdr::Crc(n) if n > 1 => Hdr::Crc(n - 1),
                Hdr::Crc(_) | Hdr::Body => Hdr::Body,
            };
        }
        Ok(used)
    }

    /// Decodes from `data`: header bytes first, then the deflate stream. Returns how many
    /// bytes were consumed (0: the deflate stream has ended).
    pub(super) fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.hdr != Hdr::Body {
            return self.header(data);
        }
        self.inner.write(data)
    }

    /// Flushes what the raw decoder holds.
    pub(super) fn try_finish(&mut self) -> std::io::Result<()> {
        self.inner.try_finish()
    }

    /// The sink decoded bytes go to.
    pub(super) fn get_mut(&mut self) -> &mut Sink {
        self.inner.get_mut()
    }

    /// The sink, to size it.
    pub(super) fn get_ref(&self) -> &Sink {
        self.inner.get_ref()
    }
}
