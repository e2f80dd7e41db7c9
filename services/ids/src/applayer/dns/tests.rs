//! DNS parser tests on messages from suricata-verify captures, every split of the TCP stream,
//! the name decoding corner cases Suricata defines, the bounds, and random input.

use super::*;
use crate::testutil::Rng;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// suricata-verify dns-detect-query-01: a TXT query for google.com over UDP.
const GOOGLE_TXT: &str = "10320100000100000000000006676f6f676c6503636f6d0000100001";

/// suricata-verify dns-forward-pointer: a request whose first question is a pointer forward
/// to the second question's name, and its response.
const FWD_REQ: &str =
    "8e0401000002000000000000c012000100010a636f64656d6f6e6b6579036e65740000010001";
const FWD_RESP: &str = concat!(
    "8e04818000010001000000000a636f64656d6f6e6b6579036e65740000010001c00c000100010000012c0004",
    "983552ef",
);

/// suricata-verify dns-tcp-www-google-com: the TCP stream each way (length-prefixed).
const TCP_REQ: &str = concat!(
    "00375f78012000010000000000010377777706676f6f676c6503636f6d0000010001000029100000000000000c",
    "000a00085a760730fb2b37d5",
);
const TCP_RESP: &str = concat!(
    "00eb5f7881800001000c000000010377777706676f6f676c6503636f6d0000010001c00c0001000100000008",
    "0004d8c5f2f4c00c00010001000000080004d8c5f2e0c00c00010001000000080004d8c5f2eec00c000100010000",
    "00080004d8c5f2d2c00c00010001000000080004d8c5f2e6c00c00010001000000080004d8c5f2dfc00c00010001",
    "000000080004d8c5f2f5c00c00010001000000080004d8c5f2e7c00c00010001000000080004d8c5f2fbc00c0001",
    "0001000000080004d8c5f2edc00c00010001000000080004d8c5f2d9c00c00010001000000080004d8c5f2d80000",
    "290200000000000000",
);

/// The `dns.query` buffers of a transaction.
fn queries(tx: &DnsTx) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    tx.for_each(Buffer::DnsQuery, Dir::ToServer, &mut |b| {
        v.push(b.to_vec());
        false
    });
    v
}

/// A request for each name (type A, class IN, RD set).
fn request(id: u16, names: &[&[u8]]) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0x01, 0x00]);
    m.extend_from_slice(&u16::try_from(names.len()).unwrap().to_be_bytes());
    m.extend_from_slice(&[0; 6]);
    for n in names {
        for label in n.split(|&b| b == b'.').filter(|l| !l.is_empty()) {
            m.push(u8::try_from(label.len()).unwrap());
            m.extend_from_slice(label);
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
    }
    m
}

fn framed(msg: &[u8]) -> Vec<u8> {
    let mut v = u16::try_from(msg.len()).unwrap().to_be_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

#[test]
fn udp_query_name_as_on_the_wire() {
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &hex(GOOGLE_TXT)).unwrap();
    let tx = s.txs().next().unwrap();
    assert_eq!(tx.id(), 0);
    assert_eq!(tx.dns_id(), 0x1032);
    assert_eq!(tx.dir(), Dir::ToServer);
    assert_eq!(tx.progress(Dir::ToServer), Progress::Complete);
    assert_eq!(queries(tx), vec![b"google.com".to_vec()]);
    // Only to server: no dns.query to client, no other buffer.
    assert!(!tx.for_each(Buffer::DnsQuery, Dir::ToClient, &mut |_| true));
    assert!(!tx.for_each(Buffer::TlsSni, Dir::ToServer, &mut |_| true));
    // for_each stops at the first true.
    assert!(tx.for_each(Buffer::DnsQuery, Dir::ToServer, &mut |b| b == b"google.com"));
}

#[test]
fn case_kept_and_no_trailing_dot() {
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &request(7, &[b"WwW.ExAmple.COM"]))
        .unwrap();
    assert_eq!(queries(s.tx(0).unwrap()), vec![b"WwW.ExAmple.COM".to_vec()]);
}

#[test]
fn forward_pointer_and_separate_response_tx() {
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &hex(FWD_REQ)).unwrap();
    s.feed_datagram(Dir::ToClient, &hex(FWD_RESP)).unwrap();
    let req = s.tx(0).unwrap();
    assert_eq!(
        queries(req),
        vec![b"codemonkey.net".to_vec(), b"codemonkey.net".to_vec()]
    );
    // The response is its own transaction (as Suricata), with the same DNS id and no
    // dns.query buffer.
    let resp = s.tx(1).unwrap();
    assert_eq!(resp.dir(), Dir::ToClient);
    assert_eq!(resp.dns_id(), req.dns_id());
    assert_eq!(resp.queries().count(), 1);
    assert!(queries(resp).is_empty());
    assert_eq!(s.next_tx_id(), 2);
    assert_eq!(s.stats().messages, 2);
}

#[test]
fn same_id_twice_is_two_transactions() {
    let mut s = DnsState::new();
    let q = request(1, &[b"a.example"]);
    s.feed_datagram(Dir::ToServer, &q).unwrap();
    s.feed_datagram(Dir::ToServer, &q).unwrap();
    assert_eq!(s.txs().count(), 2);
}

#[test]
fn response_in_request_direction_refused() {
    let mut s = DnsState::new();
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &hex(FWD_RESP)),
        Err(DnsError::NotRequest)
    );
    // A request seen to client still makes a transaction (Suricata only sets an event).
    s.feed_datagram(Dir::ToClient, &hex(GOOGLE_TXT)).unwrap();
    assert_eq!(s.txs().count(), 1);
    assert!(queries(s.tx(0).unwrap()).is_empty());
    assert_eq!(s.stats().errors, 1);
}

#[test]
fn root_name_has_no_buffer() {
    let mut s = DnsState::new();
    // One question: the root (a single zero byte), type NS.
    let m = hex("abcd010000010000000000000000020001");
    s.feed_datagram(Dir::ToServer, &m).unwrap();
    let tx = s.tx(0).unwrap();
    assert_eq!(tx.queries().collect::<Vec<_>>(), vec![&b""[..]]);
    assert!(queries(tx).is_empty());
}

#[test]
fn header_plausibility() {
    let mut s = DnsState::new();
    // A request with no question.
    let m = hex("abcd01000000000000000000");
    assert_eq!(s.feed_datagram(Dir::ToServer, &m), Err(DnsError::Header));
    // Counts that cannot fit the length.
    let m = hex("abcd0100ffff00000000000000");
    assert_eq!(s.feed_datagram(Dir::ToServer, &m), Err(DnsError::Header));
    // Shorter than a header.
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &[1, 2, 3]),
        Err(DnsError::Header)
    );
    assert_eq!(s.txs().count(), 0);
}

#[test]
fn malformed_names() {
    let mut s = DnsState::new();
    // A pointer to itself (offset 12) before any pointer: an error.
    let m = hex("abcd01000001000000000000c00c00010001");
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &m),
        Err(DnsError::Malformed(WireError::Pointer))
    );
    // A pointer past the end.
    let m = hex("abcd01000001000000000000c0ff00010001");
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &m),
        Err(DnsError::Malformed(WireError::Pointer))
    );
    // Reserved label type 0x40.
    let m = hex("abcd0100000100000000000041610000010001");
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &m),
        Err(DnsError::Malformed(WireError::LabelType))
    );
    // A label longer than the message.
    let m = hex("abcd010000010000000000000a6162");
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &m),
        Err(DnsError::Malformed(WireError::Truncated))
    );
    // The question's type and class missing.
    let m = hex("abcd01000001000000000000016100");
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &m),
        Err(DnsError::Malformed(WireError::Truncated))
    );
    // An answer whose RDATA runs past the end.
    let mut m = hex(FWD_RESP);
    m.truncate(m.len() - 1);
    assert_eq!(
        s.feed_datagram(Dir::ToClient, &m),
        Err(DnsError::Malformed(WireError::Truncated))
    );
    assert_eq!(s.stats().errors, 6);
    assert_eq!(s.txs().count(), 0);
}

#[test]
fn pointer_loop_after_a_pointer_ends_the_name() {
    // Question 1 is "a" (offsets 12 to 18); question 2 at 19 is a pointer to 21, which holds
    // a pointer to itself: Suricata ends the name there (empty), flags it, and reads the
    // type and class after the first pointer.
    let m = hex(concat!(
        "abcd01000002000000000000",
        "01610000010001",
        "c015",
        "c0150001",
    ));
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &m).unwrap();
    let tx = s.tx(0).unwrap();
    assert_eq!(tx.queries().collect::<Vec<_>>(), vec![&b"a"[..], &b""[..]]);
    assert_eq!(queries(tx), vec![b"a".to_vec()]);
    assert_eq!(s.stats().names_truncated, 1);
}

#[test]
fn long_names_truncated_at_1025() {
    // 20 labels of 63 bytes: 1279 bytes in presentation form.
    let label = [b'x'; 63];
    let name: Vec<u8> = (0..20)
        .map(|_| label.as_slice())
        .collect::<Vec<_>>()
        .join(&b'.');
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &request(9, &[&name]))
        .unwrap();
    let q = queries(s.tx(0).unwrap());
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].len(), wire::MAX_NAME_LEN);
    assert_eq!(q[0], name[..wire::MAX_NAME_LEN]);
    assert_eq!(s.stats().names_truncated, 1);
}

#[test]
fn label_limit_without_pointer_is_an_error() {
    // 256 one-byte labels, no pointer.
    let name: Vec<u8> = (0..256).flat_map(|_| [b'a', b'.']).collect();
    let mut s = DnsState::new();
    assert_eq!(
        s.feed_datagram(Dir::ToServer, &request(9, &[&name])),
        Err(DnsError::Malformed(WireError::LabelLimit))
    );
}

#[test]
fn tcp_stream_whole_and_split_at_every_offset() {
    let req = hex(TCP_REQ);
    let resp = hex(TCP_RESP);
    for dir_data in [(Dir::ToServer, &req), (Dir::ToClient, &resp)] {
        let (dir, data) = dir_data;
        for cut in 0..=data.len() {
            let mut s = DnsState::new();
            s.feed_stream(dir, &data[..cut]).unwrap();
            assert_eq!(s.txs().count(), usize::from(cut == data.len()), "cut {cut}");
            s.feed_stream(dir, &data[cut..]).unwrap();
            assert_eq!(s.txs().count(), 1, "cut {cut}");
            let tx = s.tx(0).unwrap();
            assert_eq!(tx.dns_id(), 0x5f78);
            assert_eq!(
                tx.queries().collect::<Vec<_>>(),
                vec![&b"www.google.com"[..]]
            );
            assert!(s.partial.iter().all(Vec::is_empty));
        }
    }
    // One byte at a time.
    let mut s = DnsState::new();
    for b in &req {
        s.feed_stream(Dir::ToServer, std::slice::from_ref(b))
            .unwrap();
    }
    assert_eq!(queries(s.tx(0).unwrap()), vec![b"www.google.com".to_vec()]);
}

#[test]
fn tcp_many_messages_and_zero_lengths() {
    // suricata-verify dns-tcp-multirequest-buffer: twenty queries 0.google.com ..
    // 19.google.com back to back; the first one as captured.
    let first = hex("001e000001000001000000000000013006676f6f676c6503636f6d0000010001");
    let mut stream = Vec::new();
    for i in 0..20u16 {
        let name = format!("{i}.google.com");
        let mut m = request(i, &[name.as_bytes()]);
        m[2] = 1; // RD only, as captured
        if i == 0 {
            assert_eq!(framed(&m), first);
        }
        stream.extend_from_slice(&framed(&m));
        // A zero length between messages is skipped.
        stream.extend_from_slice(&[0, 0]);
    }
    for step in [1, 7, 31, 32, 33, 100, stream.len()] {
        let mut s = DnsState::new();
        for chunk in stream.chunks(step) {
            s.feed_stream(Dir::ToServer, chunk).unwrap();
        }
        assert_eq!(s.txs().count(), 20, "step {step}");
        for (i, tx) in s.txs().enumerate() {
            assert_eq!(queries(tx), vec![format!("{i}.google.com").into_bytes()]);
        }
    }
}

#[test]
fn tcp_error_stops_the_flow() {
    let mut s = DnsState::new();
    let mut data = framed(&hex("abcd01000000000000000000"));
    data.extend_from_slice(&hex(TCP_REQ));
    assert_eq!(s.feed_stream(Dir::ToServer, &data), Err(DnsError::Header));
    assert!(s.is_stopped());
    // Ignored from now on, in both directions.
    s.feed_stream(Dir::ToServer, &hex(TCP_REQ)).unwrap();
    s.feed_stream(Dir::ToClient, &hex(TCP_RESP)).unwrap();
    assert_eq!(s.txs().count(), 0);
}

#[test]
fn bounded_transactions_and_names() {
    let mut s = DnsState::new();
    for i in 0..(MAX_TXS as u16 + 5) {
        s.feed_datagram(Dir::ToServer, &request(i, &[b"x.example"]))
            .unwrap();
    }
    assert_eq!(s.txs().count(), MAX_TXS);
    assert_eq!(s.stats().txs_dropped, 5);
    assert_eq!(s.txs().next().unwrap().id(), 5);
    assert!(s.tx(4).is_none());
    assert_eq!(s.tx(6).unwrap().id(), 6);
    s.free_through(30);
    assert_eq!(s.txs().next().unwrap().id(), 31);
    s.free_through(u64::MAX);
    assert_eq!(s.txs().count(), 0);

    // Many questions: at most MAX_QUERIES names kept.
    let names: Vec<&[u8]> = (0..MAX_QUERIES + 3).map(|_| &b"q.example"[..]).collect();
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &request(1, &names)).unwrap();
    assert_eq!(queries(s.tx(0).unwrap()).len(), MAX_QUERIES);
    assert_eq!(s.stats().names_dropped, 3);

    // Long names: at most MAX_QUERY_BYTES of them.
    // Two labels of 60: 121 bytes, 123 with their length.
    let long = [vec![b'z'; 60], vec![b'z'; 60]].join(&b'.');
    let names: Vec<&[u8]> = (0..MAX_QUERIES).map(|_| long.as_slice()).collect();
    let mut s = DnsState::new();
    s.feed_datagram(Dir::ToServer, &request(1, &names)).unwrap();
    let kept = queries(s.tx(0).unwrap());
    assert_eq!(kept.len(), MAX_QUERY_BYTES / 123);
    assert!(kept.iter().all(|k| *k == long));
    assert_eq!(
        s.stats().names_dropped,
        u64::try_from(MAX_QUERIES - MAX_QUERY_BYTES / 123).unwrap()
    );
}

#[test]
fn tcp_buffer_is_one_message_at_most() {
    let mut s = DnsState::new();
    // A length of 65535 announced, then the message arriving slowly: one buffer, reserved
    // once for the announced length.
    s.feed_stream(Dir::ToServer, &[0xff, 0xff]).unwrap();
    let cap = s.partial[0].capacity();
    assert!(cap >= 2 + 65535);
    for _ in 0..65 {
        s.feed_stream(Dir::ToServer, &[0u8; 1000]).unwrap();
    }
    assert_eq!(s.partial[0].len(), 2 + 65000);
    assert_eq!(s.partial[0].capacity(), cap);
    // The rest (all zeros: an implausible header) completes it; the large buffer is freed.
    assert_eq!(
        s.feed_stream(Dir::ToServer, &[0u8; 1000]),
        Err(DnsError::Header)
    );
    assert_eq!(s.partial[0].capacity(), 0);
}

#[test]
fn random_and_mutated_input_never_panics() {
    let seeds = [
        hex(GOOGLE_TXT),
        hex(FWD_REQ),
        hex(FWD_RESP),
        hex(TCP_REQ),
        hex(TCP_RESP),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut made = 0usize;
    for round in 0..20_000 {
        let mut m = seeds[round % seeds.len()].clone();
        match rng.below(4) {
            0 => {
                for _ in 0..=rng.below(4) {
                    let i = rng.below(m.len());
                    m[i] = u8::try_from(rng.below(256)).unwrap();
                }
            }
            1 => m.truncate(rng.below(m.len() + 1)),
            2 => {
                let n = rng.below(64);
                m = (0..n)
                    .map(|_| u8::try_from(rng.below(256)).unwrap())
                    .collect();
            }
            _ => {
                // Pointers everywhere.
                for _ in 0..=rng.below(3) {
                    let i = rng.below(m.len().saturating_sub(1));
                    m[i] = 0xc0;
                    m[i + 1] = u8::try_from(rng.below(m.len())).unwrap();
                }
            }
        }
        let dir = if rng.below(2) == 0 {
            Dir::ToServer
        } else {
            Dir::ToClient
        };
        let mut s = DnsState::new();
        if s.feed_datagram(dir, &m).is_ok() {
            made += 1;
            let tx = s.tx(0).unwrap();
            tx.for_each(Buffer::DnsQuery, Dir::ToServer, &mut |b| {
                assert!(b.len() <= wire::MAX_NAME_LEN);
                false
            });
        }
        let _ = wire::probe(&m, m.len());
        // The same bytes as a TCP stream, cut at random points.
        let mut s = DnsState::new();
        let mut rest = &m[..];
        while !rest.is_empty() {
            let (a, b) = rest.split_at(1 + rng.below(rest.len()));
            let _ = s.feed_stream(dir, a);
            rest = b;
        }
        assert!(s.partial.iter().all(|p| p.len() <= 2 + 65535));
    }
    // The mutations keep a good share of valid messages: the parser was exercised.
    assert!(made > 1000, "{made}");
}
