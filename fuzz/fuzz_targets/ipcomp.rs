//! IPComp decompression for each algorithm (services/compress `Codecs`): DEFLATE (raw,
//! RFC 2394), LZ4 block and LZO1X (the `lzo` feature, C code behind FFI), on arbitrary
//! compressed data and output room; and the round trip compress -> decompress, which must
//! give back every byte.
//!
//! Input: byte 0 chooses the algorithm (`% 3`: deflate, lz4, lzo) and, with bit 7, the
//! round-trip mode; bytes 1-2 the output room (big-endian, at most 65536); the rest is
//! the compressed data (or, round trip, the data to compress).
//!
//! The output buffer is followed by guard bytes that must be untouched afterwards: LZO is
//! C code that AddressSanitizer does not instrument, so an overrun shows this way.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_svc_compress::{Algorithm, CodecError, Codecs};
use relayd_fuzz::Input;
use std::cell::RefCell;

const GUARD: usize = 64;

thread_local! {
    static CODECS: RefCell<Codecs> = RefCell::new(Codecs::new(1));
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let ctl = input.byte();
    let room = usize::from(input.u16()) + 1;
    let src = input.rest();
    let alg = [Algorithm::Deflate, Algorithm::Lz4, Algorithm::Lzo][usize::from(ctl & 0x7f) % 3];
    assert!(alg.available(), "the fuzz build has the lzo feature");
    CODECS.with_borrow_mut(|codecs| {
        if ctl & 0x80 != 0 {
            // Round trip: what relayd compresses, it restores byte for byte.
            let mut packed = vec![0u8; Algorithm::max_output(src.len())];
            let Some(n) = codecs.compress(alg, src, &mut packed) else {
                return;
            };
            let mut out = vec![0u8; src.len() + GUARD];
            let got = codecs.decompress(alg, &packed[..n], &mut out[..src.len()]);
            assert_eq!(got, Ok(src.len()), "{alg:?}: round trip failed");
            assert_eq!(&out[..src.len()], src, "{alg:?}: round trip changed bytes");
            return;
        }
        let mut out = vec![0xa5u8; room + GUARD];
        match codecs.decompress(alg, src, &mut out[..room]) {
            Ok(n) => assert!(n <= room, "{alg:?}: {n} bytes claimed in {room}"),
            Err(CodecError::Corrupt | CodecError::TooLarge) => {}
            Err(e) => panic!("{alg:?}: {e:?}"),
        }
        assert!(
            out[room..].iter().all(|&b| b == 0xa5),
            "{alg:?}: wrote past the output buffer"
        );
    });
});
