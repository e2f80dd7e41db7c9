//! The payload keywords real rulesets use (`isdataat`, `byte_test`, `byte_jump`,
//! `byte_extract` and its variables, `startswith`, `endswith`, pcre `R`), driven through
//! the [`relay_svc_ids::Detector`] on TCP and UDP packets.

mod common;

use common::*;
use relay_svc_ids::Outcome;
use std::time::Instant;

#[test]
fn isdataat_absolute_relative_and_negated() {
    let p: &[&[u8]] = &[b"USER x", b"USER xxxxxxxxxx", b"USER"];
    // At least 5 bytes after "USER" (an overlong argument).
    assert_eq!(
        hits(r#"content:"USER"; isdataat:5,relative;"#, p),
        [false, true, false]
    );
    // Nothing after "USER": its `!1,relative` form is `endswith`.
    assert_eq!(
        hits(r#"content:"USER"; isdataat:!1,relative;"#, p),
        [false, false, true]
    );
    assert_eq!(hits("isdataat:10;", p), [false, true, false]);
    assert_eq!(hits("isdataat:!10;", p), [true, false, true]);
}

#[test]
fn byte_test_on_a_length_field() {
    // A 2-byte big-endian length after a 2-byte magic, compared with 0x100.
    let p: &[&[u8]] = &[b"MG\x01\x01rest", b"MG\x00\xffrest", b"MG\x01"];
    let r = r#"content:"MG"; startswith; byte_test:2,>,0x100,0,relative;"#;
    assert_eq!(hits(r, p), [true, false, false]);
    // Little-endian, a bitmask, negation.
    let r = r#"content:"MG"; byte_test:2,!&,0x01,0,relative,little,bitmask 0x0001;"#;
    assert_eq!(hits(r, p), [false, true, false]);
    // ASCII digits.
    let p: &[&[u8]] = &[b"Content-Length: 99999", b"Content-Length: 12"];
    let r = r#"content:"Content-Length|3a 20|"; byte_test:5,>,65535,0,relative,string,dec;"#;
    assert_eq!(hits(r, p), [true, false]);
}

#[test]
fn byte_jump_over_a_length_prefixed_field() {
    // [len][len bytes][marker]: the marker must follow the field exactly.
    let p: &[&[u8]] = &[b"\x03abcEND", b"\x02abcEND", b"\x03abEND!"];
    let r = r#"byte_jump:1,0; content:"END"; within:3;"#;
    assert_eq!(hits(r, p), [true, false, false]);
    // from_beginning with a post_offset.
    let r = r#"byte_jump:1,0,from_beginning,post_offset -1; content:"bcEND"; within:5;"#;
    assert_eq!(hits(r, p), [true, false, false]);
}

#[test]
fn byte_extract_feeds_later_keywords() {
    // [len][payload of len][tag]: the tag sits `len` bytes after the length byte.
    let p: &[&[u8]] = &[b"\x04xxxxTAG", b"\x02xxxxTAG", b"\x04xxTAGxx"];
    let r = r#"byte_extract:1,0,len; content:"TAG"; distance:len; within:3;"#;
    assert_eq!(hits(r, p), [true, false, false]);
    // As an offset and in byte_test.
    let r = r#"byte_extract:1,0,off; byte_test:1,=,0x54,off,relative;"#;
    assert_eq!(hits(r, p), [true, false, false]);
    // Fewer than `len` bytes after the length byte (a truncated field).
    let r = r#"byte_extract:1,0,len; isdataat:!len,relative;"#;
    assert_eq!(hits(r, &[b"\x05abc", b"\x03abc"]), [true, false]);
}

#[test]
fn startswith_and_endswith() {
    let p: &[&[u8]] = &[b"GET /index.html", b" GET /index.html", b"GET /index.htm"];
    assert_eq!(
        hits(r#"content:"GET"; startswith;"#, p),
        [true, false, true]
    );
    assert_eq!(
        hits(r#"content:".html"; endswith;"#, p),
        [true, true, false]
    );
    assert_eq!(
        hits(
            r#"content:"GET"; startswith; content:".html"; endswith;"#,
            p
        ),
        [true, false, false]
    );
}

#[test]
fn pcre_relative_and_its_cursor() {
    let p: &[&[u8]] = &[b"id=42;", b"id=x;42", b"42 id="];
    assert_eq!(
        hits(r#"content:"id="; pcre:"/^\d+/R";"#, p),
        [true, false, false]
    );
    // As in Suricata, a pcre moves the cursor: "b" must follow the "x" the pcre found,
    // not the "a".
    let q: &[&[u8]] = &[b"ab x", b"a xb"];
    assert_eq!(
        hits(
            r#"content:"a"; pcre:"/x/"; content:"b"; distance:0; within:1;"#,
            q
        ),
        [false, true]
    );
}

#[test]
fn udp_payload_keywords() {
    // A DNS-like header: flags at offset 2, QR bit clear (a query), one question.
    let (mut d, _) =
        detector("alert udp any any -> any 53 (byte_test:1,!&,0x80,2; byte_test:2,=,1,4; sid:7;)");
    let query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00";
    let answer = b"\x12\x34\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00";
    let mut q = udp4(CLIENT, SERVER, 5353, 53, query);
    assert_eq!(d.inspect(&mut q, Instant::now()), Outcome::Alert);
    let mut a = udp4(CLIENT, SERVER, 5353, 53, answer);
    assert_eq!(d.inspect(&mut a, Instant::now()), Outcome::Clean);
}

#[test]
fn hostile_payload_is_bounded_by_the_budget() {
    // Every "a" is a candidate and each is followed by another "a", never "ab" within 1:
    // the inspector gives up after INSPECT_BUDGET steps instead of trying all of them.
    let payload = vec![b'a'; 60_000];
    let r = r#"content:"a"; content:"a"; distance:0; within:1; content:"b"; distance:0; within:1;"#;
    let t = Instant::now();
    assert_eq!(hits(r, &[&payload]), [false]);
    assert!(t.elapsed().as_secs() < 5);
    // The same rule matches where the pattern is, within the budget.
    let mut ok = vec![b'a'; 100];
    ok.push(b'b');
    assert_eq!(hits(r, &[&ok]), [true]);
}

#[test]
fn new_keywords_load_with_their_rules() {
    // Rules using the application-layer buffers, flowbits, noalert and app-layer-protocol
    // load (the engine evaluates the application layer separately).
    let (d, _) = detector(
        r#"alert http any any -> any any (http.uri; content:"/admin"; startswith; bsize:<100; sid:1;)
alert tcp any any -> any 80 (content:"POST"; http_method; uricontent:"/login"; flowbits:set,login; noalert; sid:2;)
alert tcp any any -> any 80 (flowbits:isset,login; content:"pass="; http_client_body; sid:3;)
alert dns any any -> any any (dns.query; content:"evil"; nocase; endswith; sid:4;)
alert tls any any -> any any (tls.sni; content:".example"; app-layer-protocol:tls; sid:5;)
alert tcp any any -> any any (content:"x"; app-layer-protocol:!http; flow:established,no_stream; sid:6;)
"#,
    );
    assert_eq!(d.rule_set().rules().len(), 6);
    let r = d.rule_set().by_sid(2).unwrap();
    assert_eq!(r.content_count(), 2);
    assert_eq!(r.fast_pattern(), None, "both contents are in HTTP buffers");
}
