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

/// A gzip member with the given header flags (and the optional fields they announce,
/// the header CRC deliberately wrong) around a raw deflate stream of `data`.
fn gzip_flags(data: &[u8], flags: u8) -> Vec<u8> {
    let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    d.write_all(data).expect("deflate");
    let raw = d.finish().expect("deflate");
    let mut out = vec![0x1f, 0x8b, 8, flags, 0, 0, 0, 0, 0, 3];
    if flags & 0x04 != 0 {
        out.extend_from_slice(&[3, 0, b'a', b'b', b'c']);
    }
    if flags & 0x08 != 0 {
        out.extend_from_slice(b"name.txt\0");
    }
    if flags & 0x10 != 0 {
        out.extend_from_slice(b"a comment\0");
    }
    if flags & 0x02 != 0 {
        out.extend_from_slice(&[0xde, 0xad]);
    }
    out.extend_from_slice(&raw);
    out.extend_from_slice(&[0; 8]);
    out
}

#[test]
fn gzip_headers_with_odd_flags_decode_as_libhtp_does() {
    let text = b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE ".repeat(20);
    // FHCRC with a wrong CRC, reserved bits 0x20 / 0x40 / 0x80, and the optional
    // fields, alone and together: flate2's GzDecoder refuses the first four.
    for flags in [0x02, 0x20, 0x40, 0x80, 0xe0, 0x04, 0x08, 0x10, 0x1e, 0xfe] {
        let gz = gzip_flags(&text, flags);
        for step in [1, 2, 11, 4096] {
            assert_eq!(
                decode(Coding::Gzip, 1 << 20, &gz, step),
                text,
                "flags {flags:#x}, step {step}"
            );
            // Declared deflate: raw deflate fails on the header, zlib too, then gzip.
            assert_eq!(decode(Coding::Deflate, 1 << 20, &gz, step), text);
        }
    }
}

fn lzma(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    lzma_rs::lzma_compress(&mut std::io::Cursor::new(data), &mut out).expect("lzma");
    out
}

#[test]
fn lzma_decodes_only_when_enabled_and_within_the_limit() {
    let text = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR".repeat(30);
    let xz = lzma(&text);
    let on = DecodeOptions {
        layers: 2,
        lzma: true,
    };
    let off = DecodeOptions::default();
    let ce = Some(&b"lzma"[..]);
    for step in [1, 5, 13, 14, 100_000] {
        let mut d = Decoder::with_codings(Codings::from_header(ce, &on).as_slice(), 1 << 20);
        let mut body = Vec::new();
        for part in xz.chunks(step) {
            d.write(part, &mut body);
        }
        d.finish(&mut body);
        assert_eq!(body, text, "step {step}");
    }
    // Off (Suricata's default): passed through as sent.
    assert_eq!(
        Codings::from_header(ce, &off).as_slice()[0],
        Coding::Identity
    );
    // A bomb stops at the limit, and garbage neither panics nor produces much.
    let bomb = lzma(&vec![b'a'; 4 << 20]);
    assert_eq!(decode(Coding::Lzma, 1000, &bomb, 512), vec![b'a'; 1000]);
    let mut junk = bomb.clone();
    for (i, b) in junk.iter_mut().enumerate().skip(13) {
        *b ^= (i * 7) as u8;
    }
    assert!(decode(Coding::Lzma, 1 << 16, &junk, 64).len() <= 1 << 16);
    let mut head = xz.get(..13).expect("header").to_vec();
    head.extend_from_slice(&[0xff; 64]);
    assert!(decode(Coding::Lzma, 1 << 16, &head, 3).len() <= 1 << 16);
}

#[test]
fn three_layers_when_configured() {
    use Coding::{Deflate as D, Gzip as G, Identity as I, Lzma as L};
    let text = b"three layers of coding".repeat(10);
    let mut d = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    d.write_all(&gzip(&text)).expect("deflate");
    let body = gzip(&d.finish().expect("deflate"));
    let three = DecodeOptions {
        layers: 3,
        lzma: false,
    };
    let ce = Some(&b"gzip,deflate,gzip"[..]);
    let c = Codings::from_header(ce, &three);
    assert_eq!(c.as_slice().get(..4), Some(&[G, D, G, I][..]));
    // Suricata's default: two layers, the third token is not read.
    let two = Codings::from_header(ce, &DecodeOptions::default());
    assert_eq!(two.as_slice().get(..3), Some(&[D, G, I][..]));
    for step in [1, 9, 100_000] {
        let mut dec = Decoder::with_codings(c.as_slice(), 1 << 20);
        let mut out = Vec::new();
        for part in body.chunks(step) {
            dec.write(part, &mut out);
        }
        dec.finish(&mut out);
        assert_eq!(out, text, "step {step}");
        // With two layers the body is still gzip after them.
        let mut dec = Decoder::with_codings(two.as_slice(), 1 << 20);
        let mut out = Vec::new();
        dec.write(&body, &mut out);
        dec.finish(&mut out);
        assert_eq!(out, gzip(&text));
    }
    // lzma in a list: only when enabled, and one lzma layer at most.
    let on = DecodeOptions {
        layers: 3,
        lzma: true,
    };
    let f = |v: &[u8], o: &DecodeOptions| Codings::from_header(Some(v), o).list;
    assert_eq!(f(b"gzip, lzma", &on)[..2], [L, G]);
    assert_eq!(f(b"gzip, lzma", &three)[..2], [G, I]);
    assert_eq!(f(b"lzma,lzma,gzip", &on)[..2], [L, I]);
    assert_eq!(f(b"LZMA", &on)[0], L);
    // 0: no limit, which is MAX_LAYERS.
    let all = DecodeOptions {
        layers: 0,
        lzma: false,
    };
    assert_eq!(f(b"gzip,gzip,gzip,gzip,gzip,gzip", &all), [G; MAX_LAYERS]);
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
