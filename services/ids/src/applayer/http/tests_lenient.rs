//! libhtp's lenient reading of response heads (the http-evader captures): line ends made
//! of a lone CR or LF CR, folded names and values, block ends of a whitespace line, junk
//! before the status line, and bodies after 101 and 204. Every case is also fed byte by
//! byte, which must give the same buffers.

use super::tests::{assert_buf, run};
use super::*;

use Dir::{ToClient as TC, ToServer as TS};

/// The request every case answers.
const REQ: &[u8] = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n";

/// Feeds the request and `resp` (whole, then closed), and checks that feeding `resp`
/// byte by byte gives the same response body and header buffers.
fn answer(resp: &[u8]) -> HttpState {
    let s = run(&[(TS, Some(REQ)), (TC, Some(resp)), (TS, None), (TC, None)]);
    let l = HttpLimits::default();
    let mut b = HttpState::default();
    b.feed(TS, REQ, &l).expect("request");
    for byte in resp.chunks(1) {
        b.feed(TC, byte, &l).expect("response");
    }
    b.close(TS);
    b.close(TC);
    for name in ["file.data", "http.header", "http.stat_code"] {
        let get = |s: &HttpState| {
            let buf = crate::applayer::buffer::Buffer::from_sticky(name).expect("name");
            s.txs()
                .next()
                .and_then(|t| t.buffer(buf, TC).map(<[u8]>::to_vec))
        };
        assert_eq!(get(&s), get(&b), "{name}: byte by byte");
    }
    s
}

/// A chunked body of `hello world` in two chunks.
const CHUNKED: &str = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

#[test]
fn a_lone_cr_ends_header_and_status_lines() {
    // http-evader-094: the CR alone ends the line, so Transfer-Encoding is a header.
    let s = answer(
        format!(
            "HTTP/1.1 200 ok\r\nContent-Disposition: x\rTransfer-Encoding: chunked\r\n\r\n{CHUNKED}"
        )
        .as_bytes(),
    );
    assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    assert_buf(
        &s,
        0,
        "http.header",
        TC,
        Some(b"Content-Disposition: x\r\nTransfer-Encoding: chunked\r\n"),
    );
    // http-evader-378: the status line ends at a lone CR.
    let s =
        answer(format!("HTTP/1.1 200 ok\rTransfer-Encoding:chunked\r\n\r\n{CHUNKED}").as_bytes());
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"200"));
    assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    // http-evader-402: every line ends with a lone CR, the block with CRLF LF.
    let s = answer(
        format!("HTTP/1.1 200 ok\rA: b\rTransfer-Encoding: chunked\rC: d\r\n\n{CHUNKED}")
            .as_bytes(),
    );
    assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    assert_buf(
        &s,
        0,
        "http.header",
        TC,
        Some(b"A: b\r\nTransfer-Encoding: chunked\r\nC: d\r\n"),
    );
}

#[test]
fn folded_lines_join_or_start_headers_as_libhtp() {
    // http-evader-268: on HTTP/1.1 a continuation with a colon after a header with one is
    // a header of its own.
    let s = answer(
        format!(
            "HTTP/1.1 200 ok\r\nConnection: close\r\n Transfer-Encoding: chunked\r\n\r\n{CHUNKED}"
        )
        .as_bytes(),
    );
    assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    // On HTTP/1.0 it is joined to the header before it: no chunking, read until close.
    let s = answer(
        format!(
            "HTTP/1.0 200 ok\r\nConnection: close\r\n Transfer-Encoding: chunked\r\n\r\n{CHUNKED}"
        )
        .as_bytes(),
    );
    assert_buf(&s, 0, "file.data", TC, Some(CHUNKED.as_bytes()));
    assert_buf(
        &s,
        0,
        "http.header",
        TC,
        Some(b"Connection: close Transfer-Encoding: chunked\r\n"),
    );
    // http-evader-296/318/300: the name and the value on separate lines; a NUL folds too.
    for head in [
        "Transfer-Encoding\n :chunked\r\n",
        "Transfer-Encoding\r\n :\r\n chunked\r\n",
        "Transfer-Encoding:\n\0chunked\r\n",
        "Transfer-Encoding:\n\tchunked\r\n",
    ] {
        let s = answer(format!("HTTP/1.1 200 ok\r\n{head}Y: z\r\n\r\n{CHUNKED}").as_bytes());
        assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    }
}

#[test]
fn odd_block_ends_end_the_head() {
    // http-evader-410..431: LF CR then CRLF, a line of one space or tab before the body.
    for end in ["\n\r\r\n", "\n \n", "\n\t\n"] {
        let s = answer(format!("HTTP/1.1 200 ok\r\nContent-Length: 5{end}hello").as_bytes());
        assert_buf(&s, 0, "file.data", TC, Some(b"hello"));
        assert_buf(&s, 0, "http.header", TC, Some(b"Content-Length: 5\r\n"));
    }
    // A space line followed by LF does not end the block (libhtp's `next_no_lf`).
    let s = answer(b"HTTP/1.1 200 ok\r\nContent-Length: 5\n \n\nhello");
    assert_buf(&s, 0, "file.data", TC, Some(b"hello"));
}

#[test]
fn junk_before_the_status_line_is_skipped_when_http_follows() {
    // http-evader-485..488.
    for junk in ["foobar\r\n", "SIP/2.0 200 ok\r\n", " foobar\r\n", "x\n"] {
        let s =
            answer(format!("{junk}HTTP/1.1 200 ok\r\nContent-Length: 5\r\n\r\nhello").as_bytes());
        assert_buf(&s, 0, "http.stat_code", TC, Some(b"200"));
        assert_buf(&s, 0, "file.data", TC, Some(b"hello"));
    }
    // Not followed by `H` and longer than two bytes: all body.
    let s = answer(b"foobar\r\nbody\r\n");
    assert_buf(&s, 0, "http.stat_code", TC, None);
    assert_buf(&s, 0, "file.data", TC, Some(b"foobar\r\nbody\r\n"));
    // Nothing after it: body.
    let s = answer(b"foobar\r\n");
    assert_buf(&s, 0, "file.data", TC, Some(b"foobar\r\n"));
}

#[test]
fn no_body_statuses_with_a_length_have_a_body() {
    // http-evader-448: a 101 with Content-Length is no upgrade.
    let s = answer(b"HTTP/1.1 101 ok\r\nContent-Length: 5\r\n\r\nhello");
    assert_buf(&s, 0, "file.data", TC, Some(b"hello"));
    // http-evader-476: a 204 with a chunked body.
    let s = answer(
        format!("HTTP/1.1 204 ok\r\nTransfer-Encoding: chunked\r\n\r\n{CHUNKED}").as_bytes(),
    );
    assert_buf(&s, 0, "file.data", TC, Some(b"hello world"));
    // A 100 with a body is the response; without, it is interim.
    let s = answer(b"HTTP/1.1 100 ok\r\nContent-Length: 5\r\n\r\nhello");
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"100"));
    assert_buf(&s, 0, "file.data", TC, Some(b"hello"));
    let s = answer(b"HTTP/1.1 100 ok\r\n\r\nHTTP/1.1 200 ok\r\nContent-Length: 2\r\n\r\nhi");
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"200"));
    assert_buf(&s, 0, "file.data", TC, Some(b"hi"));
    // Without a length they still have none.
    let s = answer(b"HTTP/1.1 204 ok\r\n\r\n");
    assert_buf(&s, 0, "file.data", TC, None);
}

#[test]
fn response_blocks_split_as_libhtp() {
    let texts = |b: &[u8], h11| -> Vec<Vec<u8>> {
        head::response_texts(b, h11)
            .iter()
            .map(|t| t.to_vec())
            .collect()
    };
    assert_eq!(
        texts(b"A: 1\r\nB: 2\r\n\r\n", true),
        [b"A: 1".to_vec(), b"B: 2".to_vec()]
    );
    // A lone CR line is not an empty line: it starts the next one.
    assert_eq!(
        texts(b"A: 1\n\rB: 2\n\n", true),
        [b"A: 1".to_vec(), b"B: 2".to_vec()]
    );
    // A first line that is folded starts a header; bounded folding.
    assert_eq!(texts(b" A: 1\r\n\r\n", true), [b"A: 1".to_vec()]);
    let mut big = b"A: x\r\n".to_vec();
    for _ in 0..20_000 {
        big.extend_from_slice(b" yyyyyyyyyy\r\n");
    }
    big.extend_from_slice(b"\r\n");
    let t = texts(&big, false);
    assert_eq!(t.len(), 1);
    assert!(t.iter().all(|t| t.len() < 102_400 + 20), "{}", t[0].len());
    // Hostile bytes: no panic.
    for b in [
        &b"\r"[..],
        b"\n",
        b"\r\r\r",
        b"\n\r\n\r",
        b" \n",
        b":\r:\n\0",
    ] {
        let _ = texts(b, true);
        let mut scan = head::ResScan::default();
        let _ = scan.find(b, true);
    }
}
