//! The HTTP parser under the application-layer memcap: charges, refusals, credits, and the
//! eviction of unanswered transactions past the per-flow limit.

use std::io::Write;

use super::*;
use crate::applayer::Transaction;
use crate::applayer::budget::{AppBudget, AppCounters, INFLATE_STATE};
use crate::applayer::buffer::Buffer;

use Dir::{ToClient as TC, ToServer as TS};

#[test]
fn unanswered_transactions_past_the_limit_are_evicted_oldest_first() {
    let l = HttpLimits {
        max_txs: 3,
        ..HttpLimits::default()
    };
    let b = AppBudget::new(usize::MAX, AppCounters::default());
    let mut s = HttpState::with_budget(&b);
    // Five pipelined requests, none answered: the two oldest go (without this, the
    // fourth request was an error and the flow's requests were no longer parsed).
    for i in 0..5 {
        let r = format!("GET /{i} HTTP/1.1\r\n\r\n");
        assert_eq!(s.feed(TS, r.as_bytes(), &l), Ok(()), "request {i}");
    }
    assert_eq!(s.txs().map(|t| t.id()).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(b.counters().tx_evicted.get(), 2);
    let uri = |s: &HttpState, id: u64| {
        s.txs()
            .find(|t| t.id() == id)
            .and_then(|t| t.buffer(Buffer::HttpUri, TS))
            .map(<[u8]>::to_vec)
    };
    assert_eq!(uri(&s, 4), Some(b"/4".to_vec()));
    // The answer to evicted request 0 gets a transaction of its own (request not seen),
    // which evicts the oldest unanswered one left; the answers after it still pair with
    // their own requests.
    let resp = |n: &str| format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{n}", n.len());
    s.feed(TC, resp("zero").as_bytes(), &l).expect("response 0");
    assert_eq!(s.txs().map(|t| t.id()).collect::<Vec<_>>(), [0, 3, 4]);
    assert_eq!(uri(&s, 0), Some(b"/libhtp::request_uri_not_seen".to_vec()));
    let body = |s: &HttpState, id: u64| {
        s.txs()
            .find(|t| t.id() == id)
            .and_then(|t| t.buffer(Buffer::HttpResponseBody, TC))
            .map(<[u8]>::to_vec)
    };
    assert_eq!(body(&s, 0), Some(b"zero".to_vec()));
    s.retire(1);
    for (i, n) in ["one", "two", "three"].iter().enumerate() {
        s.feed(TC, resp(n).as_bytes(), &l).expect("response");
        let id = i as u64 + 1;
        assert_eq!(body(&s, id), Some(n.as_bytes().to_vec()), "response {id}");
        if id == 3 {
            assert_eq!(
                uri(&s, 3),
                Some(b"/3".to_vec()),
                "request 3 paired with its answer"
            );
        }
        // The engine retires what it has inspected both ways.
        s.retire(id + 1);
    }
    s.feed(TC, resp("four").as_bytes(), &l).expect("response 4");
    assert_eq!(uri(&s, 4), Some(b"/4".to_vec()));
    assert_eq!(body(&s, 4), Some(b"four".to_vec()));
}

#[test]
fn the_memcap_stops_the_parser_and_credits_back_what_it_frees() {
    let l = HttpLimits::default();
    let b = AppBudget::new(256 << 10, AppCounters::default());
    let mut s = HttpState::with_budget(&b);
    // A 100 KiB body fits, and is charged.
    let head = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", 100 << 10);
    s.feed(TS, head.as_bytes(), &l).expect("head");
    s.feed(TS, &vec![b'x'; 100 << 10], &l).expect("body");
    let one = b.used();
    assert!(
        one >= 100 << 10 && one == s.memory(),
        "charged {one}, holds {}",
        s.memory()
    );
    // Two more do not: the charge is refused, the parser stops on a memcap error.
    let mut r = Ok(());
    for _ in 0..2 {
        s.feed(TS, head.as_bytes(), &l).ok();
        r = s.feed(TS, &vec![b'x'; 100 << 10], &l);
    }
    assert_eq!(r, Err(HttpError::Memcap));
    assert!(b.used() <= b.cap());
    assert_eq!(b.counters().memcap.get(), 1);
    // Retiring frees and credits; dropping the state credits the rest.
    s.feed(TC, b"HTTP/1.1 204 No Content\r\n\r\n", &l).ok();
    let before = b.used();
    s.retire(1);
    assert_eq!(b.used(), s.memory());
    // (The body the refused step read is held until the state goes: now it is counted.)
    assert!(b.used() < before, "{} then {}", before, b.used());
    drop(s);
    assert_eq!((b.used(), b.counters().memuse.get()), (0, 0));
}

#[test]
fn decoders_are_charged_while_they_run() {
    let l = HttpLimits::default();
    let b = AppBudget::new(usize::MAX, AppCounters::default());
    let mut s = HttpState::with_budget(&b);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&[b'a'; 50_000]).expect("gzip");
    let gz = gz.finish().expect("gzip");
    let head = format!(
        "POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        gz.len()
    );
    s.feed(TS, head.as_bytes(), &l).expect("head");
    let half = gz.len() / 2;
    s.feed(TS, &gz[..half], &l).expect("half the body");
    assert!(
        b.used() >= INFLATE_STATE,
        "the running inflater is charged: {}",
        b.used()
    );
    s.feed(TS, &gz[half..], &l).expect("rest");
    // Done: the decoder is gone, the 50,000 decoded bytes stay.
    assert!(b.used() < INFLATE_STATE + 50_000, "{}", b.used());
    assert!(b.used() >= 50_000);
}

#[test]
fn an_lzma_decoder_is_charged_its_dictionary_and_literal_tables() {
    let l = HttpLimits {
        decode: DecodeOptions {
            lzma: true,
            ..DecodeOptions::default()
        },
        ..HttpLimits::default()
    };
    let b = AppBudget::new(usize::MAX, AppCounters::default());
    let mut s = HttpState::with_budget(&b);
    // An LZMA-alone header asking for lc 8, lp 4 (0x300 << 12 literal counters) and a
    // 1 MiB dictionary, then the first bytes of a stream that never ends.
    let mut body = vec![(4 * 9) + 8];
    body.extend_from_slice(&(1u32 << 20).to_le_bytes());
    body.extend_from_slice(&u64::MAX.to_le_bytes());
    body.extend_from_slice(&[0; 8]);
    let head = "POST / HTTP/1.1\r\nContent-Encoding: lzma\r\nContent-Length: 100000\r\n\r\n";
    s.feed(TS, head.as_bytes(), &l).expect("head");
    s.feed(TS, &body, &l).expect("body");
    let tables = (0x300 << 12) * 2;
    assert!(
        b.used() >= (1 << 20) + tables,
        "charged {} for a decoder holding over {}",
        b.used(),
        (1 << 20) + tables
    );
    drop(s);
    assert_eq!(b.used(), 0);
}
