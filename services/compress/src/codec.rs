//! The compression algorithms, each bound to its IPComp CPI, with per-thread state reused
//! for every packet (no allocation per packet).

use relay_core::wire::ipcomp::cpi;
use serde::Deserialize;

/// A compression algorithm relayd can put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// DEFLATE (RFC 1951) as RFC 2394 puts it in IPComp: raw deflate, CPI 2.
    Deflate,
    /// LZ4 block format, CPI 61441 (relayd's private range).
    Lz4,
    /// LZO1X-1, the paper's algorithm, CPI 61440 (relayd's private range). Needs the
    /// `lzo` cargo feature (GPL-2.0 code).
    Lzo,
}

impl Algorithm {
    /// The IPComp CPI this algorithm is sent with.
    pub fn cpi(self) -> u16 {
        match self {
            Algorithm::Deflate => cpi::DEFLATE,
            Algorithm::Lz4 => cpi::LZ4,
            Algorithm::Lzo => cpi::LZO,
        }
    }

    /// The algorithm a CPI names, if relayd knows it.
    pub fn from_cpi(c: u16) -> Option<Algorithm> {
        match c {
            cpi::DEFLATE => Some(Algorithm::Deflate),
            cpi::LZ4 => Some(Algorithm::Lz4),
            cpi::LZO => Some(Algorithm::Lzo),
            _ => None,
        }
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Deflate => "deflate",
            Algorithm::Lz4 => "lz4",
            Algorithm::Lzo => "lzo",
        }
    }

    /// True if this build can use the algorithm.
    pub fn available(self) -> bool {
        self != Algorithm::Lzo || cfg!(feature = "lzo")
    }

    /// A scratch size every algorithm accepts for `n` bytes of input: LZO's worst case is
    /// n + n/16 + 67, and lz4_flex wants room for 1.1 n + 20 before it starts.
    pub fn max_output(n: usize) -> usize {
        (n + n / 16 + 67).max(n + n / 10 + 20)
    }
}

/// Why compressed data could not be restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecError {
    /// The data is corrupt or truncated.
    Corrupt,
    /// The data would decompress to more than a packet can hold.
    TooLarge,
    /// This build lacks the algorithm.
    Unavailable,
}

impl CodecError {
    /// A short name for logs and counters.
    pub fn as_str(self) -> &'static str {
        match self {
            CodecError::Corrupt => "corrupt",
            CodecError::TooLarge => "too_large",
            CodecError::Unavailable => "unavailable",
        }
    }
}

/// Per-thread compressor and decompressor state for every algorithm.
pub struct Codecs {
    deflate: flate2::Compress,
    inflate: flate2::Decompress,
    #[cfg(feature = "lzo")]
    lzo_work: Vec<u64>,
}

impl std::fmt::Debug for Codecs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codecs")
    }
}

impl Codecs {
    /// State for DEFLATE at `level` (1-9) and the others.
    pub fn new(deflate_level: u32) -> Codecs {
        #[cfg(feature = "lzo")]
        // SAFETY: lzo_init only checks the library's ABI assumptions; safe to call repeatedly.
        let _ = unsafe { lzo_sys::lzoconf::lzo_init() };
        Codecs {
            deflate: flate2::Compress::new(flate2::Compression::new(deflate_level), false),
            inflate: flate2::Decompress::new(false),
            #[cfg(feature = "lzo")]
            // u64 elements: LZO wants its work memory aligned.
            lzo_work: vec![0u64; (lzo_sys::lzo1x::LZO1X_1_MEM_COMPRESS as usize).div_ceil(8)],
        }
    }

    /// Compresses `src` into `dst`; `None` if it does not fit in `dst` (no gain) or the
    /// algorithm is unavailable.
    pub fn compress(&mut self, alg: Algorithm, src: &[u8], dst: &mut [u8]) -> Option<usize> {
        match alg {
            Algorithm::Deflate => {
                self.deflate.reset();
                let st = self
                    .deflate
                    .compress(src, dst, flate2::FlushCompress::Finish)
                    .ok()?;
                (st == flate2::Status::StreamEnd).then_some(self.deflate.total_out() as usize)
            }
            Algorithm::Lz4 => lz4_flex::block::compress_into(src, dst).ok(),
            #[cfg(feature = "lzo")]
            Algorithm::Lzo => {
                if dst.len() < Algorithm::max_output(src.len()) {
                    return None; // LZO writes without bounds checks: give it its worst case
                }
                let mut out_len = dst.len();
                // SAFETY: src and dst are live buffers of the given lengths; dst holds the
                // worst case; the work memory has LZO1X_1_MEM_COMPRESS bytes.
                let r = unsafe {
                    lzo_sys::lzo1x::lzo1x_1_compress(
                        src.as_ptr(),
                        src.len(),
                        dst.as_mut_ptr(),
                        &mut out_len,
                        self.lzo_work.as_mut_ptr() as *mut core::ffi::c_void,
                    )
                };
                (r == lzo_sys::lzoconf::LZO_E_OK).then_some(out_len)
            }
            #[cfg(not(feature = "lzo"))]
            Algorithm::Lzo => None,
        }
    }

    /// Decompresses `src` into `dst`, returning the restored length.
    pub fn decompress(
        &mut self,
        alg: Algorithm,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<usize, CodecError> {
        match alg {
            Algorithm::Deflate => {
                self.inflate.reset(false);
                match self
                    .inflate
                    .decompress(src, dst, flate2::FlushDecompress::Finish)
                {
                    Ok(flate2::Status::StreamEnd) => Ok(self.inflate.total_out() as usize),
                    Ok(_) if self.inflate.total_out() as usize == dst.len() => {
                        Err(CodecError::TooLarge)
                    }
                    _ => Err(CodecError::Corrupt),
                }
            }
            Algorithm::Lz4 => lz4_flex::block::decompress_into(src, dst).map_err(|e| match e {
                lz4_flex::block::DecompressError::OutputTooSmall { .. } => CodecError::TooLarge,
                _ => CodecError::Corrupt,
            }),
            #[cfg(feature = "lzo")]
            Algorithm::Lzo => {
                let mut out_len = dst.len();
                // SAFETY: the _safe decompressor checks input and output bounds itself.
                let r = unsafe {
                    lzo_sys::lzo1x::lzo1x_decompress_safe(
                        src.as_ptr(),
                        src.len(),
                        dst.as_mut_ptr(),
                        &mut out_len,
                        std::ptr::null_mut(),
                    )
                };
                match r {
                    lzo_sys::lzoconf::LZO_E_OK => Ok(out_len),
                    lzo_sys::lzoconf::LZO_E_OUTPUT_OVERRUN => Err(CodecError::TooLarge),
                    _ => Err(CodecError::Corrupt),
                }
            }
            #[cfg(not(feature = "lzo"))]
            Algorithm::Lzo => Err(CodecError::Unavailable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        let text = b"GET /index.html HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n";
        (0..n)
            .map(|i| {
                if i % 7 == 0 {
                    (i * 31 % 251) as u8
                } else {
                    text[i % text.len()]
                }
            })
            .collect()
    }

    #[test]
    fn every_algorithm_round_trips_and_rejects_garbage() {
        let mut c = Codecs::new(1);
        let src = sample(1400);
        for alg in [Algorithm::Deflate, Algorithm::Lz4, Algorithm::Lzo] {
            if !alg.available() {
                continue;
            }
            let mut z = vec![0u8; Algorithm::max_output(src.len())];
            let n = c
                .compress(alg, &src, &mut z)
                .unwrap_or_else(|| panic!("{alg:?} failed"));
            assert!(n < src.len(), "{alg:?} did not compress text");
            let mut out = vec![0u8; 2000];
            let m = c.decompress(alg, &z[..n], &mut out).unwrap();
            assert_eq!(&out[..m], &src[..], "{alg:?}");
            // Truncated and corrupted input is an error, never a panic or garbage output.
            for cut in [0, 1, n / 2, n - 1] {
                let r = c.decompress(alg, &z[..cut], &mut out);
                assert!(
                    r.is_err() || r.unwrap() != src.len() || out[..src.len()] != src[..],
                    "{alg:?} cut {cut}"
                );
            }
            let mut bad = z[..n].to_vec();
            for i in (0..n).step_by(7) {
                bad[i] ^= 0x5a;
            }
            let _ = c.decompress(alg, &bad, &mut out);
            // Too small an output buffer is reported as such.
            assert!(c.decompress(alg, &z[..n], &mut out[..100]).is_err());
        }
    }

    #[test]
    fn incompressible_data_does_not_fit_a_smaller_buffer() {
        let mut c = Codecs::new(1);
        let mut x = 0x12345678u32;
        let src: Vec<u8> = (0..1400)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let mut small = vec![0u8; src.len() - 1];
        assert_eq!(c.compress(Algorithm::Deflate, &src, &mut small), None);
        assert_eq!(c.compress(Algorithm::Lz4, &src, &mut small), None);
    }
}
