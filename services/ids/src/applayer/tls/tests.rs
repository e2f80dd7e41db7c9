//! TLS parser tests on handshakes from suricata-verify captures (TLS 1.2 with a certificate,
//! TLS 1.3 with an SNI), every split of the streams, handshake messages spanning records,
//! the bounds, record errors, and random input.

use super::*;
use crate::testutil::Rng;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// suricata-verify tls-cert-issuer, its first flow to server: ClientHello (no server_name),
/// ClientKeyExchange, ChangeCipherSpec, encrypted Finished (306 bytes).
const STAMUS_TS: &str = concat!(
    "16030100af010000ab0303942d1fef575d770207c29dbe2401ccf05dcde1d2a5869c4a3eee38db551ad9bc000024c02b",
    "c02f009ec00ac009c013c014c007c011003300320039009c002f0035000a000500040100005eff01000100000a000800",
    "06001700180019000b00020100002300003374000000100014001208737064792f332e3108687474702f312e31755000",
    "0000050005010000000000120000000d00120010040105010201040305030203040202021603030046100000424104e2",
    "445f4798648f0c2cc855ff1621f2b5d17d052ed258aab5de767446ca0a60df4cb6c59a94fe510fc2a891114f226a3d6e",
    "2dc2e68652c203f0359585237f94e314030300010116030300280000000000000000a4d9e428978bdca7c3fd67ec50a8",
    "49677368847fa075880f0905e81789c19c90",
);

/// The same flow to client: ServerHello, Certificate (self-signed, `C=FR, ST=IDF, L=Paris,
/// O=Stamus, CN=SELKS`), ServerKeyExchange, ServerHelloDone, NewSessionTicket,
/// ChangeCipherSpec, encrypted Finished (1549 bytes).
const STAMUS_TC: &str = concat!(
    "160303003d02000039030354f9fc1577e433d32da82e9d38897d5a2628bfb09851dad9bd03f8afa209a4f000c02f0000",
    "11ff01000100000b0004030001020023000016030303790b00037500037200036f3082036b30820253a0030201020209",
    "0097e647098eeac9b4300d06092a864886f70d0101050500304c310b3009060355040613024652310c300a0603550408",
    "0c03494446310e300c06035504070c055061726973310f300d060355040a0c065374616d7573310e300c06035504030c",
    "0553454c4b53301e170d3135303231323138303732375a170d3235303230393138303732375a304c310b300906035504",
    "0613024652310c300a06035504080c03494446310e300c06035504070c055061726973310f300d060355040a0c065374",
    "616d7573310e300c06035504030c0553454c4b5330820122300d06092a864886f70d01010105000382010f003082010a",
    "0282010100a682bee856936d61f74fc94777cde53c7c8d0dba1534f5ae1e85a8d6da336d5ffd6253fa45f05d84742787",
    "7132643c96fff394bfbf0250a58477588e35cdf0f3246994e77b93d8357adab2f94e0f24be0109e3f2f64beee593992c",
    "770cb4edf555dfdab2ea578abdf230f392cbe3976752c2bc21392e5dc9173bf7d633ed613f085b41344a4fb690aa8e97",
    "895b7512833619800d7b7f7aae32d15fdd6b47ea5a4150041785c4c79d754587a974b326f965011df086014ebe30a576",
    "d4e845768f5e737cfe77a57e62f4043c340e4bf5eff69a9128bf02d46e02ffe5652d90707a72fda704549202e2880798",
    "275936f9983ed947eb137edafa122a1c8536460c030203010001a350304e301d0603551d0e041604146acee6879acf38",
    "97fd81a8e279958f1adeab2222301f0603551d230418301680146acee6879acf3897fd81a8e279958f1adeab2222300c",
    "0603551d13040530030101ff300d06092a864886f70d01010505000382010100568deb00d5f0323b21de5b0f20fba93e",
    "eae856215479f7bab353d1f6f659e1ca00fac523dfa698ac483023d6c346a956d10b8e4d47741e858764bdf44cb57444",
    "a0a8e16ca3c303c28099c1ce8960bda4b6f145b998d5b201d24570dc12c8175ff2ee0003c0bf0be29feb9be33c43aba9",
    "590b44a8ff92f2b238e6232bd42604899637954ec1f1bc8e6e05eff12eb7ef6a2c0fbfb0d3d2f9eee2f3130333fa52f6",
    "bcb2e594f91fdc1ed5aaacef0bc5bfecf91456693975458dd1fda46f1da260e9609460b8cc1487f1384a0cf3096ca301",
    "ce03fe0e174672b581f3d11b502498d480e6709e1d84380ffc4efc953b7690728b530b3da5b92dcd6dc4a94bd6c3a845",
    "160303014d0c0001490300174104c7762bf06c2cb7834f948d61d559364bdd45e4461d30461eff3159e6f19c0b297bfc",
    "31ff7bd08be3d80a148e6f706a455db1eb49145f2e675aefa4a657ed9e1d04010100122c126ea0965828057bea326ec8",
    "9113aea4f15ce88c94349a9813438c5252d18e0249d757e875dd38c881098ef499ace1f4ce123db2776146a53effa6d7",
    "90c571a0d71c9c0058ef389066d7546683af1a3af543b8fc51c2e2658ff8e3218897eab149acb2eacee1f9badf6b4f0a",
    "d4851817fe203f08b258e73cd43095d94a4224bb963c01152e472a03743399e6f18a1febb050cb0bb299a1145cbd8fb7",
    "0d00ca2385a1d00d6e33168c65bb368fb3fbb22797887d78e144e9f49c31258f980245fa7b19d38666f63f178157d61f",
    "23cfa636628dce4707cd4fd4041c5b1e7567393d15b1ef367788f6d6262ea3f4b8c64e5b0b8f6231074ee600b23e8283",
    "51c716030300040e00000016030300ba040000b60000012c00b0ef14f3a85ef91e3a40aa0b2b5aa0ac73912f3fd00aac",
    "67a8fb76a4aede32317bb52d8ef6a6b3c61fbbc3a9a5a5a4ca36c6d0c21b42883e5c40e02481f38f939d0c80bcceba1a",
    "f2b785c9d334c26e82c7667f7eda93639d632e1540cf902c850dd1802b6b9ab275bfe2f1ad41f83fc95e7120d5814915",
    "d5065c413d06f730f2d4f3e2b9bfb35d3a8894af0ca2f66d91cc79fd0cf5f6c1784471fe84fc1c0e8e8ab5121e7be74e",
    "1660c99dfbc41daa0da414030300010116030300287f95d76d670e41ea089316584ec468854925259fd7ca9636539fc2",
    "1368a3614ca12f6a05e6cbd7e6",
);

/// suricata-verify community-id-ipv4, a TLS 1.3 flow to server: the ClientHello record
/// (server_name ipv4.google.com).
const GOOGLE13_CH: &str = concat!(
    "1603010200010001fc03032a9008a494c5216b165f4a3ce9d9a18714d00b4866a9ff51528af98b59657881206f0ea66a",
    "bbb2f8ac25d72ab49f82d0f00a9cc58a1c75d443f26176907c30775d00481302130313011304c02cc030cca9cca8c0ad",
    "c02bc02fc0acc023c027c00ac014c009c013009dc09d009cc09c003d003c0035002f009fccaac09f009ec09e006b0067",
    "0039003300ff0100016b00000014001200000f697076342e676f6f676c652e636f6d000b000403000102000a000c000a",
    "001d0017001e00190018337400000010000e000c02683208687474702f312e31001600000017000000310000000d0026",
    "00240403050306030807080808090804080a0805080b08060401050106010303030102030201002b0005040304030300",
    "2d00020101003300260024001d002063375f136b1d8a371c27dac916258577a89e2e521dd99f421dc4c79a574e793700",
    "1500b2000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
    "00000000000000000000000000000000000000000000000000000000000000000000000000",
);

/// The same flow to client: ServerHello selecting TLS 1.3, ChangeCipherSpec, and the first 40
/// bytes of an application data record.
const GOOGLE13_SH: &str = concat!(
    "160303007a02000076030381702ce00b6c4e191f37c95ee7cb45c43e8f830f0a5c9fb6b1dbedd67b61f927206f0ea66a",
    "bbb2f8ac25d72ab49f82d0f00a9cc58a1c75d443f26176907c30775d130200002e00330024001d0020f336300f284882",
    "91bd374c81d14c334ba8b089627d528daa73995efd423be606002b0002030414030300010117030319f63b70c06cb342",
    "680a22963684be82ebfeb86ce64ee5ca9d1b2f630b3f97fb87a34821b86f76cc50ab",
);

const STAMUS_NAME: &str = "C=FR, ST=IDF, L=Paris, O=Stamus, CN=SELKS";

fn record(ctype: u8, body: &[u8]) -> Vec<u8> {
    let mut r = vec![ctype, 3, 3];
    r.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    r.extend_from_slice(body);
    r
}

fn handshake_msg(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap().to_be_bytes();
    let mut m = vec![kind, len[1], len[2], len[3]];
    m.extend_from_slice(body);
    m
}

/// The records of a stream, as (type, body).
fn records(mut s: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut v = Vec::new();
    while s.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([s[3], s[4]]));
        v.push((s[0], s[5..5 + len].to_vec()));
        s = &s[5 + len..];
    }
    v
}

/// The DER of the first certificate of the Stamus Certificate message.
fn stamus_cert() -> Vec<u8> {
    let (t, body) = records(&hex(STAMUS_TC)).swap_remove(1);
    assert_eq!((t, body[0]), (HANDSHAKE, HS_CERTIFICATE));
    // Type and length (4), certificate_list length (3), first certificate's length (3).
    let len = usize::from(body[8]) << 8 | usize::from(body[9]);
    body[10..10 + len].to_vec()
}

fn buf(tx: &TlsTx, b: Buffer, dir: Dir) -> Option<Vec<u8>> {
    let mut v = None;
    tx.for_each(b, dir, &mut |x| {
        v = Some(x.to_vec());
        true
    });
    v
}

#[test]
fn tls12_certificate_subject_and_issuer() {
    let mut s = TlsState::new();
    s.feed(Dir::ToServer, &hex(STAMUS_TS)).unwrap();
    let tx = s.tx();
    assert_eq!(tx.id(), 0);
    assert_eq!(tx.progress(Dir::ToServer), Progress::Complete);
    assert_eq!(tx.progress(Dir::ToClient), Progress::None);
    assert_eq!(tx.sni(), None);
    assert_eq!(buf(tx, Buffer::TlsSni, Dir::ToServer), None);

    s.feed(Dir::ToClient, &hex(STAMUS_TC)).unwrap();
    let tx = s.tx();
    assert_eq!(tx.progress(Dir::ToClient), Progress::Complete);
    assert_eq!(tx.cert_subject(Dir::ToClient), Some(STAMUS_NAME));
    assert_eq!(tx.cert_issuer(Dir::ToClient), Some(STAMUS_NAME));
    assert_eq!(
        buf(tx, Buffer::TlsCertSubject, Dir::ToClient),
        Some(STAMUS_NAME.as_bytes().to_vec())
    );
    assert_eq!(
        buf(tx, Buffer::TlsCertIssuer, Dir::ToClient),
        Some(STAMUS_NAME.as_bytes().to_vec())
    );
    // No client certificate; no buffer of another protocol.
    assert_eq!(buf(tx, Buffer::TlsCertSubject, Dir::ToServer), None);
    assert_eq!(buf(tx, Buffer::DnsQuery, Dir::ToServer), None);
    assert!(!tx.is_tls13());
    assert!(!s.is_stopped());
    // ClientHello and ClientKeyExchange; ServerHello, Certificate, ServerKeyExchange,
    // ServerHelloDone, NewSessionTicket: the Finished after ChangeCipherSpec is not read.
    let st = s.stats();
    assert_eq!(st.handshake_messages, 7);
    assert_eq!(st.records, 4 + 7);
    assert_eq!((st.hello_errors, st.cert_errors, st.oversized), (0, 0, 0));
    // Nothing stays buffered after the handshake.
    assert!(s.halves.iter().all(|h| h.rec.is_empty() && h.hs.is_empty()));
    assert!(s.halves.iter().all(|h| h.encrypted));
}

#[test]
fn tls13_sni_and_no_clear_certificate() {
    let mut s = TlsState::new();
    s.feed(Dir::ToServer, &hex(GOOGLE13_CH)).unwrap();
    assert_eq!(s.tx().sni(), Some(&b"ipv4.google.com"[..]));
    assert_eq!(
        buf(s.tx(), Buffer::TlsSni, Dir::ToServer),
        Some(b"ipv4.google.com".to_vec())
    );
    // tls.sni comes from the client only.
    assert_eq!(buf(s.tx(), Buffer::TlsSni, Dir::ToClient), None);
    assert_eq!(s.tx().progress(Dir::ToServer), Progress::Complete);

    s.feed(Dir::ToClient, &hex(GOOGLE13_SH)).unwrap();
    let tx = s.tx();
    assert!(tx.is_tls13());
    assert_eq!(tx.progress(Dir::ToClient), Progress::Complete);
    assert_eq!(tx.cert_subject(Dir::ToClient), None);
    // The rest of the application data record is skipped, not buffered.
    assert!(s.halves[1].skip > 0);
    assert!(s.halves[1].rec.is_empty());
}

/// The transaction after feeding `data` to `dir` in pieces cut at `cuts`.
fn fed_in_pieces(dir: Dir, data: &[u8], cuts: &[usize]) -> TlsState {
    let mut s = TlsState::new();
    let mut at = 0;
    for &c in cuts.iter().chain([data.len()].iter()) {
        s.feed(dir, &data[at..c]).unwrap();
        at = c;
    }
    s
}

#[test]
fn split_at_every_offset() {
    for (dir, data) in [
        (Dir::ToServer, hex(STAMUS_TS)),
        (Dir::ToClient, hex(STAMUS_TC)),
        (Dir::ToServer, hex(GOOGLE13_CH)),
        (Dir::ToClient, hex(GOOGLE13_SH)),
    ] {
        let whole = fed_in_pieces(dir, &data, &[]);
        for cut in 0..=data.len() {
            let s = fed_in_pieces(dir, &data, &[cut]);
            assert_eq!(s.tx(), whole.tx(), "cut {cut}");
            assert_eq!(s.stats(), whole.stats(), "cut {cut}");
        }
        // One byte at a time.
        let cuts: Vec<usize> = (1..data.len()).collect();
        let s = fed_in_pieces(dir, &data, &cuts);
        assert_eq!(s.tx(), whole.tx());
    }
}

#[test]
fn handshake_message_spanning_records() {
    // The TLS 1.3 ClientHello message re-framed over records of 1, 50, 3 and the rest.
    let ch = &hex(GOOGLE13_CH)[5..];
    let mut stream = Vec::new();
    let mut at = 0;
    for n in [1, 50, 3, ch.len()] {
        let end = (at + n).min(ch.len());
        stream.extend_from_slice(&record(HANDSHAKE, &ch[at..end]));
        at = end;
    }
    for cut in 0..=stream.len() {
        let s = fed_in_pieces(Dir::ToServer, &stream, &[cut]);
        assert_eq!(s.tx().sni(), Some(&b"ipv4.google.com"[..]), "cut {cut}");
        assert_eq!(s.stats().handshake_messages, 1);
    }
    // Two messages in one record, the second continued in the next.
    let sh = records(&hex(STAMUS_TC)).swap_remove(0).1;
    let cert = records(&hex(STAMUS_TC)).swap_remove(1).1;
    let mut both = sh.clone();
    both.extend_from_slice(&cert[..100]);
    let mut stream = record(HANDSHAKE, &both);
    stream.extend_from_slice(&record(HANDSHAKE, &cert[100..]));
    let mut s = TlsState::new();
    s.feed(Dir::ToClient, &stream).unwrap();
    assert_eq!(s.tx().cert_subject(Dir::ToClient), Some(STAMUS_NAME));
    assert_eq!(s.stats().handshake_messages, 2);
}

#[test]
fn oversized_certificate_message_is_cut_and_skipped() {
    // A client Certificate message of about 100 KiB: the Stamus certificate first, then a
    // large second one; then a ClientHello, which must still be framed right.
    let der = stamus_cert();
    let filler = vec![0x30; 100 * 1024];
    let mut list = Vec::new();
    for c in [&der, &filler] {
        let l = u32::try_from(c.len()).unwrap().to_be_bytes();
        list.extend_from_slice(&l[1..]);
        list.extend_from_slice(c);
    }
    let l = u32::try_from(list.len()).unwrap().to_be_bytes();
    let mut body = l[1..].to_vec();
    body.extend_from_slice(&list);
    let msg = handshake_msg(HS_CERTIFICATE, &body);
    assert!(msg.len() > MAX_HANDSHAKE_LEN);
    let mut stream = Vec::new();
    for chunk in msg.chunks(1 << 14) {
        stream.extend_from_slice(&record(HANDSHAKE, chunk));
    }
    stream.extend_from_slice(&hex(GOOGLE13_CH));
    for step in [1000, 4096, 16389, stream.len()] {
        let mut s = TlsState::new();
        for chunk in stream.chunks(step) {
            s.feed(Dir::ToServer, chunk).unwrap();
            assert!(s.halves[0].hs.len() <= MAX_HANDSHAKE_LEN);
            assert!(s.halves[0].rec.len() <= RECORD_HDR + MAX_RECORD_LEN);
        }
        let tx = s.tx();
        assert_eq!(tx.cert_subject(Dir::ToServer), Some(STAMUS_NAME), "{step}");
        assert_eq!(
            buf(tx, Buffer::TlsCertIssuer, Dir::ToServer),
            Some(STAMUS_NAME.as_bytes().to_vec())
        );
        assert_eq!(tx.sni(), Some(&b"ipv4.google.com"[..]), "{step}");
        assert_eq!(s.stats().oversized, 1);
        // The large buffers were released.
        assert!(s.halves[0].hs.capacity() <= KEEP_CAPACITY);
    }
}

#[test]
fn encrypted_after_change_cipher_spec() {
    // A Certificate after the server's ChangeCipherSpec is encrypted: not read.
    let cert = records(&hex(STAMUS_TC)).swap_remove(1).1;
    let mut stream = record(CHANGE_CIPHER_SPEC, &[1]);
    stream.extend_from_slice(&record(HANDSHAKE, &cert));
    let mut s = TlsState::new();
    s.feed(Dir::ToClient, &stream).unwrap();
    assert_eq!(s.tx().cert_subject(Dir::ToClient), None);
    assert_eq!(s.tx().progress(Dir::ToClient), Progress::Complete);
    assert_eq!(s.stats().handshake_messages, 0);
    // The other direction is still in the clear.
    s.feed(Dir::ToServer, &hex(GOOGLE13_CH)).unwrap();
    assert_eq!(s.tx().sni(), Some(&b"ipv4.google.com"[..]));
    // Application data to server also ends its clear part.
    let mut s = TlsState::new();
    s.feed(Dir::ToServer, &record(APPLICATION_DATA, &[0xaa; 40]))
        .unwrap();
    s.feed(Dir::ToServer, &hex(GOOGLE13_CH)).unwrap();
    assert_eq!(s.tx().sni(), None);
}

#[test]
fn sni_rules() {
    // The first server_name extension only; a name of another type, or empty, is no SNI.
    let sni_ext = |kind: u8, name: &[u8]| {
        let mut entry = vec![kind];
        entry.extend_from_slice(&u16::try_from(name.len()).unwrap().to_be_bytes());
        entry.extend_from_slice(name);
        let mut data = u16::try_from(entry.len()).unwrap().to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        let mut e = vec![0, 0];
        e.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
        e.extend_from_slice(&data);
        e
    };
    let mut two = sni_ext(0, b"first.example");
    two.extend_from_slice(&sni_ext(0, b"second.example"));
    assert_eq!(sni(&two), Some(b"first.example".to_vec()));
    // Unrelated extensions before it are skipped by their length.
    let mut after = vec![0xff, 0x01, 0x00, 0x01, 0x00];
    after.extend_from_slice(&sni_ext(0, b"Mixed.Case.example"));
    assert_eq!(sni(&after), Some(b"Mixed.Case.example".to_vec()));
    assert_eq!(sni(&sni_ext(1, b"x.example")), None);
    assert_eq!(sni(&sni_ext(0, b"")), None);
    assert_eq!(sni(&sni_ext(0, &[b'a'; 256])), None);
    assert_eq!(sni(&sni_ext(0, &[b'a'; 255])), Some(vec![b'a'; 255]));
    // A ClientHello keeps the first SNI of the flow.
    let mut s = TlsState::new();
    s.feed(Dir::ToServer, &hex(GOOGLE13_CH)).unwrap();
    let ch = &hex(GOOGLE13_CH)[5..];
    let other: Vec<u8> = ch
        .windows(15)
        .position(|w| w == b"ipv4.google.com")
        .map(|i| [&ch[..i], b"ipv6", &ch[i + 4..]].concat())
        .unwrap();
    s.feed(Dir::ToServer, &record(HANDSHAKE, &other)).unwrap();
    assert_eq!(s.tx().sni(), Some(&b"ipv4.google.com"[..]));
    assert_eq!(s.stats().handshake_messages, 2);
}

#[test]
fn record_errors_stop_the_flow() {
    for (bad, err) in [
        (&[0x3f, 3, 1, 0, 5][..], TlsError::RecordType(0x3f)),
        (&[0x16, 2, 0, 0, 5], TlsError::RecordVersion(0x0200)),
        (&[0x16, 3, 5, 0, 5], TlsError::RecordVersion(0x0305)),
        (&[0x16, 3, 3, 0, 0], TlsError::RecordLength(0)),
        (&[0x17, 3, 3, 0x44, 0x01], TlsError::RecordLength(0x4401)),
        (&[0x13, 3, 3, 0, 1], TlsError::RecordType(0x13)),
        (&[0x80, 0x00, 0x01], TlsError::RecordLength(0)),
    ] {
        let mut s = TlsState::new();
        assert_eq!(s.feed(Dir::ToServer, bad), Err(err));
        assert!(s.is_stopped());
        assert_eq!(s.tx().progress(Dir::ToServer), Progress::Complete);
        assert_eq!(s.tx().progress(Dir::ToClient), Progress::Complete);
        s.feed(Dir::ToServer, &hex(GOOGLE13_CH)).unwrap();
        assert_eq!(s.tx().sni(), None);
    }
    // The largest record allowed is accepted.
    let mut s = TlsState::new();
    s.feed(
        Dir::ToClient,
        &record(APPLICATION_DATA, &vec![0; MAX_RECORD_LEN]),
    )
    .unwrap();
    assert!(!s.is_stopped());
}

#[test]
fn sslv2_records_are_skipped() {
    // An SSLv2-framed ClientHello (2-byte header, 0x2e bytes), one with the 3-byte header,
    // then TLS records: framed right, the TLS ClientHello read.
    let mut stream = vec![0x80, 0x2e];
    stream.extend_from_slice(&[0x01; 0x2e]);
    stream.extend_from_slice(&[0x40, 0x05, 0x00]);
    stream.extend_from_slice(&[0x02; 5]);
    stream.extend_from_slice(&hex(GOOGLE13_CH));
    for cut in 0..=stream.len() {
        let s = fed_in_pieces(Dir::ToServer, &stream, &[cut]);
        assert_eq!(s.tx().sni(), Some(&b"ipv4.google.com"[..]), "cut {cut}");
        assert_eq!(s.stats().records, 3);
    }
}

#[test]
fn malformed_hello_and_certificate_are_counted() {
    let mut s = TlsState::new();
    // A ClientHello cut short inside its own length.
    s.feed(
        Dir::ToServer,
        &record(HANDSHAKE, &handshake_msg(1, &[3, 3, 0])),
    )
    .unwrap();
    assert_eq!(s.stats().hello_errors, 1);
    assert_eq!(s.tx().progress(Dir::ToServer), Progress::None);
    // A Certificate whose DER is garbage still completes the server side.
    let mut body = vec![0, 0, 7, 0, 0, 4];
    body.extend_from_slice(&[0x30, 0x02, 0x01, 0x01]);
    s.feed(Dir::ToClient, &record(HANDSHAKE, &handshake_msg(11, &body)))
        .unwrap();
    assert_eq!(s.stats().cert_errors, 1);
    assert_eq!(s.tx().cert_subject(Dir::ToClient), None);
    assert_eq!(s.tx().progress(Dir::ToClient), Progress::Complete);
    assert!(!s.is_stopped());
}

#[test]
fn random_and_mutated_input_never_panics() {
    let seeds = [
        (Dir::ToServer, hex(STAMUS_TS)),
        (Dir::ToClient, hex(STAMUS_TC)),
        (Dir::ToServer, hex(GOOGLE13_CH)),
        (Dir::ToClient, hex(GOOGLE13_SH)),
    ];
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    let (mut snis, mut certs) = (0, 0);
    for round in 0..4000 {
        let (dir, seed) = &seeds[round % seeds.len()];
        let mut m = seed.clone();
        match rng.below(3) {
            0 => {
                for _ in 0..=rng.below(4) {
                    let i = rng.below(m.len());
                    m[i] = u8::try_from(rng.below(256)).unwrap();
                }
            }
            1 => m.truncate(rng.below(m.len() + 1)),
            _ => {
                let n = rng.below(300);
                let mut junk: Vec<u8> = (0..n)
                    .map(|_| u8::try_from(rng.below(256)).unwrap())
                    .collect();
                // Often a plausible record header in front.
                if rng.below(2) == 0 {
                    junk.splice(0..0, [0x16, 3, 3, 0, u8::try_from(n).unwrap_or(255)]);
                }
                m = junk;
            }
        }
        let mut s = TlsState::new();
        let mut rest = &m[..];
        while !rest.is_empty() {
            let (a, b) = rest.split_at(1 + rng.below(rest.len()));
            let _ = s.feed(*dir, a);
            rest = b;
            for h in &s.halves {
                assert!(h.rec.len() <= RECORD_HDR + MAX_RECORD_LEN);
                assert!(h.hs.len() <= MAX_HANDSHAKE_LEN);
            }
        }
        if let Some(n) = s.tx().sni() {
            assert!((1..=255).contains(&n.len()));
            snis += 1;
        }
        certs += usize::from(s.tx().cert_subject(Dir::ToClient).is_some());
    }
    // The mutations leave many handshakes readable: the parsers were exercised.
    assert!(snis > 50 && certs > 50, "{snis} {certs}");
}
