//! Detection tests: the patterns and probes of Suricata's default configuration, the
//! prefixes that need more bytes, and the cap past which the answer is final.

use super::*;
use crate::testutil::Rng;

use Detection::{NeedMore, NotThis, Proto};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn tcp(dir: Dir, data: &[u8], server_port: u16) -> Detection {
    match dir {
        Dir::ToServer => detect(dir, data, false, 40000, server_port),
        Dir::ToClient => detect(dir, data, false, server_port, 40000),
    }
}

fn udp(dir: Dir, data: &[u8], server_port: u16) -> Detection {
    match dir {
        Dir::ToServer => detect(dir, data, true, 40000, server_port),
        Dir::ToClient => detect(dir, data, true, server_port, 40000),
    }
}

const HTTP: Detection = Proto(AppProto::Http);
const TLS: Detection = Proto(AppProto::Tls);
const DNS: Detection = Proto(AppProto::Dns);

#[test]
fn http_request_methods_any_port() {
    assert_eq!(tcp(Dir::ToServer, b"GET / HTTP/1.1\r\n", 8080), HTTP);
    assert_eq!(tcp(Dir::ToServer, b"get /", 1), HTTP);
    assert_eq!(tcp(Dir::ToServer, b"POST\t/x", 80), HTTP);
    assert_eq!(tcp(Dir::ToServer, b"BASELINE-CONTROL /", 80), HTTP);
    assert_eq!(tcp(Dir::ToServer, b"MKWORKSPACE ", 80), HTTP);
    // Prefixes wait; a wrong byte ends it.
    assert_eq!(tcp(Dir::ToServer, b"", 80), NeedMore);
    assert_eq!(tcp(Dir::ToServer, b"G", 80), NeedMore);
    assert_eq!(tcp(Dir::ToServer, b"GET", 80), NeedMore);
    assert_eq!(tcp(Dir::ToServer, b"BASELINE-CONTROL", 80), NeedMore);
    assert_eq!(tcp(Dir::ToServer, b"GETX /", 80), NotThis);
    assert_eq!(tcp(Dir::ToServer, b"GET/", 80), NotThis);
    assert_eq!(tcp(Dir::ToServer, b"FOO / HTTP/1.1", 80), NotThis);
    assert_eq!(tcp(Dir::ToServer, b" GET /", 80), NotThis);
    // A method is no response.
    assert_eq!(tcp(Dir::ToClient, b"GET / HTTP/1.1", 80), NotThis);
}

#[test]
fn http_responses() {
    assert_eq!(tcp(Dir::ToClient, b"HTTP/1.1 200 OK\r\n", 80), HTTP);
    assert_eq!(tcp(Dir::ToClient, b"http/1.0 404", 3128), HTTP);
    assert_eq!(tcp(Dir::ToClient, b"HTTP/0.9", 80), HTTP);
    assert_eq!(tcp(Dir::ToClient, b"HTTP/1.", 80), NeedMore);
    assert_eq!(tcp(Dir::ToClient, b"HTTP/2 200", 80), NotThis);
    assert_eq!(tcp(Dir::ToClient, b"HTTP/1.2", 80), NotThis);
    assert_eq!(tcp(Dir::ToServer, b"HTTP/1.1 200", 80), NotThis);
}

#[test]
fn tls_record_patterns_any_port() {
    // suricata-verify tls-cert-issuer: the ClientHello and ServerHello record headers.
    let ch = hex("16030100af010000ab0303942d1fef575d770207c2");
    let sh = hex("160303003d02000039030354f9fc1577e433d32da8");
    assert_eq!(tcp(Dir::ToServer, &ch, 443), TLS);
    assert_eq!(tcp(Dir::ToServer, &ch, 8443), TLS);
    assert_eq!(tcp(Dir::ToClient, &sh, 8443), TLS);
    for minor in 0..=3 {
        assert_eq!(tcp(Dir::ToServer, &[0x16, 3, minor], 1), TLS);
        assert_eq!(tcp(Dir::ToServer, &[0x01, 3, minor], 1), TLS);
        for t in [0x15, 0x16, 0x17] {
            assert_eq!(tcp(Dir::ToClient, &[t, 3, minor], 1), TLS);
        }
    }
    assert_eq!(tcp(Dir::ToServer, &[0x16], 1), NeedMore);
    assert_eq!(tcp(Dir::ToServer, &[0x16, 3], 1), NeedMore);
    assert_eq!(tcp(Dir::ToServer, &[0x16, 3, 4], 1), NotThis);
    assert_eq!(tcp(Dir::ToServer, &[0x16, 2, 0], 1), NotThis);
    // Application data and alerts only count to client.
    assert_eq!(tcp(Dir::ToServer, &[0x17, 3, 3, 0, 5], 1), NotThis);
    assert_eq!(tcp(Dir::ToServer, &[0x15, 3, 3, 0, 2], 1), NotThis);
    assert_eq!(tcp(Dir::ToClient, &[0x01, 3, 3, 0, 5], 1), NotThis);
}

#[test]
fn sslv2_client_hello() {
    // SSLv2 ClientHello of version 2: the `01 00 02` pattern confirmed by the probe.
    let v2 = [0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15];
    assert_eq!(tcp(Dir::ToServer, &v2, 1234), TLS);
    assert_eq!(tcp(Dir::ToServer, &v2[..1], 1234), NeedMore);
    assert_eq!(tcp(Dir::ToServer, &v2[..4], 1234), NeedMore);
    // An SSLv2-framed ClientHello offering TLS 1.0: only the port 443 probe knows it.
    let compat = [0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15];
    assert_eq!(tcp(Dir::ToServer, &compat, 443), TLS);
    assert_eq!(tcp(Dir::ToServer, &compat, 1234), NotThis);
    // The high bit of the length is needed.
    assert_eq!(
        tcp(Dir::ToServer, &[0x00, 0x2e, 0x01, 0x00, 0x02], 443),
        NotThis
    );
}

/// suricata-verify dns-detect-query-01 (a UDP query) and dns-forward-pointer's response.
const UDP_QUERY: &str = "10320100000100000000000006676f6f676c6503636f6d0000100001";
const UDP_RESPONSE: &str = concat!(
    "8e04818000010001000000000a636f64656d6f6e6b6579036e65740000010001c00c000100010000012c0004",
    "983552ef",
);

#[test]
fn dns_udp_on_port_53_only() {
    let q = hex(UDP_QUERY);
    let r = hex(UDP_RESPONSE);
    assert_eq!(udp(Dir::ToServer, &q, 53), DNS);
    assert_eq!(udp(Dir::ToClient, &r, 53), DNS);
    // Suricata runs the DNS probe on the server port 53 only.
    assert_eq!(udp(Dir::ToServer, &q, 5353), NotThis);
    assert_eq!(udp(Dir::ToServer, &q, 40000), NotThis);
    // Not on TCP without the length prefix.
    assert_eq!(tcp(Dir::ToServer, &q, 53), NotThis);
    // No pattern protocol on UDP.
    assert_eq!(udp(Dir::ToServer, b"GET / HTTP/1.1\r\n", 53), NotThis);
    // Too short to say: the next datagram is tried.
    assert_eq!(udp(Dir::ToServer, &q[..11], 53), NeedMore);
    // Junk longer than a header: not DNS; a request without a question: not DNS.
    assert_eq!(udp(Dir::ToServer, &[0xaa; 40], 53), NotThis);
    assert_eq!(
        udp(Dir::ToServer, &hex("abcd01000000000000000000ff"), 53),
        NotThis
    );
    // A truncated message whose counts still fit its length does not parse: not DNS.
    assert_eq!(udp(Dir::ToServer, &q[..20], 53), NotThis);
}

#[test]
fn dns_tcp_length_prefixed() {
    // suricata-verify dns-tcp-www-google-com: the first bytes of the query stream.
    let q = hex(concat!(
        "00375f78012000010000000000010377777706676f6f676c6503636f6d0000010001000029100000000000000c",
        "000a00085a760730fb2b37d5",
    ));
    assert_eq!(tcp(Dir::ToServer, &q, 53), DNS);
    // Incomplete: the header decides.
    assert_eq!(tcp(Dir::ToServer, &q[..14], 53), DNS);
    assert_eq!(tcp(Dir::ToServer, &q[..13], 53), NeedMore);
    assert_eq!(tcp(Dir::ToServer, &q[..1], 53), NeedMore);
    assert_eq!(tcp(Dir::ToServer, &q, 8053), NotThis);
    // A header whose counts cannot fit the announced length.
    let bad = hex("000c5f780120ffff0000000000000000");
    assert_eq!(tcp(Dir::ToServer, &bad, 53), NotThis);
}

#[test]
fn final_answer_past_the_cap_and_no_panic() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut found = 0;
    for round in 0..50_000usize {
        let len = usize::from(rng.byte()) % 40;
        let mut data: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        // Bias towards the interesting first bytes.
        let prefixes: [&[u8]; 8] = [
            &[0x16, 3, 1],
            &[0x17, 3, 3],
            &[0x80, 0x20, 1, 0, 2],
            b"GET ",
            b"HTTP/1.1",
            &[0, 0x20],
            &[0x01],
            &[],
        ];
        let prefix = prefixes[round % prefixes.len()];
        let n = prefix.len().min(data.len());
        data[..n].copy_from_slice(&prefix[..n]);
        for (dir, udp_, port) in [
            (Dir::ToServer, false, 53),
            (Dir::ToServer, false, 443),
            (Dir::ToClient, false, 80),
            (Dir::ToServer, true, 53),
            (Dir::ToClient, true, 53),
        ] {
            let r = detect(dir, &data, udp_, port, port);
            if !udp_ && data.len() >= DETECT_MAX_LEN {
                assert_ne!(r, NeedMore, "{data:02x?}");
            }
            if matches!(r, Proto(_)) {
                found += 1;
                // More bytes never change a pattern's answer (a DNS answer on an incomplete
                // message is the header's alone, as Suricata's).
                if !udp_ && r != DNS {
                    let mut more = data.clone();
                    more.extend_from_slice(b"more");
                    assert_eq!(detect(dir, &more, udp_, port, port), r);
                }
            }
        }
    }
    assert!(found > 1000, "{found}");
}
