//! Whole conversations through [`HttpState`]: buffers as Suricata fills them, pairing,
//! bodies, limits, errors, and robustness (every split point, random and mutated input).

use std::io::Write;

use super::*;
use crate::applayer::buffer::{BUFFERS, Buffer};
use crate::applayer::{Progress, Transaction};
use crate::testutil::Rng;

use Dir::{ToClient as TC, ToServer as TS};

/// One feed (or a close when `None`) of a conversation.
pub(super) type Seg<'a> = (Dir, Option<&'a [u8]>);

/// Everything the transactions expose: per transaction its progress and every HTTP
/// buffer in both directions.
type Dump = Vec<(u64, [Progress; 2], Vec<(&'static str, Dir, Vec<u8>)>)>;

fn dump(s: &HttpState) -> Dump {
    s.txs()
        .map(|t| {
            let mut bufs = Vec::new();
            for i in BUFFERS
                .iter()
                .filter(|i| i.proto == Some(crate::applayer::AppProto::Http))
            {
                for dir in [TS, TC] {
                    let mut got = None;
                    t.for_each(i.buffer, dir, &mut |b| {
                        got = Some(b.to_vec());
                        false
                    });
                    if let Some(b) = got {
                        bufs.push((i.sticky[0], dir, b));
                    }
                }
            }
            (t.id(), [t.progress(TS), t.progress(TC)], bufs)
        })
        .collect()
}

/// Feeds a conversation; each data segment is cut into pieces of `step` bytes (0: whole).
fn run_with(
    segs: &[Seg<'_>],
    step: usize,
    limits: &HttpLimits,
) -> (HttpState, Result<(), HttpError>) {
    let mut s = HttpState::default();
    let mut res = Ok(());
    for (dir, data) in segs {
        match data {
            Some(d) => {
                let n = if step == 0 { d.len().max(1) } else { step };
                for piece in d.chunks(n) {
                    if let Err(e) = s.feed(*dir, piece, limits) {
                        res = Err(e);
                    }
                }
            }
            None => s.close(*dir),
        }
    }
    (s, res)
}

pub(super) fn run(segs: &[Seg<'_>]) -> HttpState {
    let (s, r) = run_with(segs, 0, &HttpLimits::default());
    assert_eq!(r, Ok(()));
    s
}

/// Buffer `name` of transaction `id` in direction `dir`.
fn buf(s: &HttpState, id: u64, name: &str, dir: Dir) -> Option<Vec<u8>> {
    let b = Buffer::from_sticky(name).expect("a buffer name");
    s.txs()
        .find(|t| t.id() == id)
        .and_then(|t| t.buffer(b, dir).map(<[u8]>::to_vec))
}

pub(super) fn assert_buf(s: &HttpState, id: u64, name: &str, dir: Dir, want: Option<&[u8]>) {
    assert_eq!(
        buf(s, id, name, dir).as_deref(),
        want,
        "tx {id} {name} {dir:?}: got {:?}",
        buf(s, id, name, dir).map(|b| String::from_utf8_lossy(&b).into_owned())
    );
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

/// A conversation using most features: pipelined requests, a request body, chunked and
/// gzip responses, a HEAD and a 304, an interim 100, a close-delimited last response.
fn conversation(gz: &[u8]) -> Vec<Vec<u8>> {
    let mut chunked_gz =
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for c in gz.chunks(7) {
        chunked_gz.extend_from_slice(format!("{:x};ext=1\r\n", c.len()).as_bytes());
        chunked_gz.extend_from_slice(c);
        chunked_gz.extend_from_slice(b"\r\n");
    }
    chunked_gz.extend_from_slice(b"0\r\nX-Trailer: t1\r\n\r\n");
    vec![
        b"GET /a/../b%41?q=%41 HTTP/1.1\r\nHost: WWW.Example.com:8080\r\nUser-Agent: ua\r\n\
Cookie: c=1\r\n\r\nPOST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloHEAD /h HTTP/1.1\r\n\r\n\
GET /n HTTP/1.1\r\nHost: h\r\n\r\nGET /last HTTP/1.0\r\n\r\n"
            .to_vec(),
        chunked_gz,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\nSet-Cookie: s=2\r\n\r\nokHTTP/1.1 200 OK\r\n\
Content-Length: 10\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil close"
            .to_vec(),
    ]
}

fn conversation_segs(c: &[Vec<u8>]) -> Vec<Seg<'_>> {
    vec![
        (TS, Some(&c[0])),
        (TC, Some(&c[1])),
        (TC, Some(&c[2])),
        (TS, None),
        (TC, None),
    ]
}

#[test]
fn conversation_fills_the_buffers() {
    let text = b"<html>decompressed body</html>".repeat(20);
    let c = conversation(&gzip(&text));
    let s = run(&conversation_segs(&c));
    assert_eq!(s.txs().count(), 5);
    assert!(
        s.txs()
            .all(|t| t.progress(TS) == Progress::Complete && t.progress(TC) == Progress::Complete)
    );
    assert_buf(&s, 0, "http.uri", TS, Some(b"/bA?q=A"));
    assert_buf(&s, 0, "http.uri.raw", TS, Some(b"/a/../b%41?q=%41"));
    assert_buf(&s, 0, "http.host", TS, Some(b"www.example.com"));
    assert_buf(&s, 0, "http.host.raw", TS, Some(b"WWW.Example.com:8080"));
    assert_buf(&s, 0, "http.cookie", TS, Some(b"c=1"));
    assert_buf(
        &s,
        0,
        "http.header",
        TS,
        Some(b"Host: WWW.Example.com:8080\r\nUser-Agent: ua\r\n"),
    );
    assert_buf(&s, 0, "http.response_body", TC, Some(&text));
    assert_buf(&s, 0, "file.data", TC, Some(&text));
    assert_buf(&s, 0, "http.response_body", TS, None);
    // Trailers join the headers and the raw header buffer, as in Suricata.
    assert_buf(
        &s,
        0,
        "http.header",
        TC,
        Some(b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nX-Trailer: t1\r\n"),
    );
    assert_buf(
        &s,
        0,
        "http.header.raw",
        TC,
        Some(b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\nX-Trailer: t1\r\n\r\n"),
    );
    assert_buf(&s, 1, "http.request_body", TS, Some(b"hello"));
    assert_buf(&s, 1, "file.data", TS, Some(b"hello"));
    // The interim 100 is skipped: the final response fills the buffers.
    assert_buf(&s, 1, "http.stat_code", TC, Some(b"201"));
    assert_buf(&s, 1, "http.stat_msg", TC, Some(b"Created"));
    assert_buf(&s, 1, "http.cookie", TC, Some(b"s=2"));
    assert_buf(&s, 1, "http.response_body", TC, Some(b"ok"));
    // HEAD and 304: no body, the next response is parsed from the next byte.
    assert_buf(&s, 2, "http.method", TS, Some(b"HEAD"));
    assert_buf(&s, 2, "http.response_body", TC, None);
    assert_buf(&s, 3, "http.stat_code", TC, Some(b"304"));
    assert_buf(&s, 3, "http.response_body", TC, None);
    assert_buf(&s, 4, "http.protocol", TS, Some(b"HTTP/1.0"));
    assert_buf(&s, 4, "http.protocol", TC, Some(b"HTTP/1.0"));
    assert_buf(&s, 4, "http.response_body", TC, Some(b"until close"));
    assert_buf(&s, 4, "http.response_line", TC, Some(b"HTTP/1.0 200 OK"));
    assert_buf(&s, 4, "http.request_line", TS, Some(b"GET /last HTTP/1.0"));
    assert_buf(&s, 4, "http.request_line", TC, None);
}

#[test]
fn every_split_point_gives_the_same_buffers() {
    let c = conversation(&gzip(&b"split me ".repeat(30)));
    let segs = conversation_segs(&c);
    let limits = HttpLimits::default();
    let (whole, r) = run_with(&segs, 0, &limits);
    assert_eq!(r, Ok(()));
    let want = dump(&whole);
    for step in [1, 2, 3, 5, 13] {
        assert_eq!(dump(&run_with(&segs, step, &limits).0), want, "step {step}");
    }
    // Each segment cut once at every offset.
    for i in 0..segs.len() {
        let Some(data) = segs[i].1 else { continue };
        for k in 0..=data.len() {
            let mut cut = segs.clone();
            let (a, b) = data.split_at(k);
            cut.splice(i..=i, [(segs[i].0, Some(a)), (segs[i].0, Some(b))]);
            assert_eq!(
                dump(&run_with(&cut, 0, &limits).0),
                want,
                "segment {i} at {k}"
            );
        }
    }
}

#[test]
fn pipelined_requests_pair_with_responses_in_order() {
    let s = run(&[
        (
            TS,
            Some(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\n"),
        ),
        (
            TC,
            Some(b"HTTP/1.1 201 A\r\nContent-Length: 1\r\n\r\naHTTP/1.1 202 B\r\n"),
        ),
    ]);
    let ids: Vec<(u64, Progress, Progress)> = s
        .txs()
        .map(|t| (t.id(), t.progress(TS), t.progress(TC)))
        .collect();
    assert_eq!(
        ids,
        [
            (0, Progress::Complete, Progress::Complete),
            (1, Progress::Complete, Progress::Line),
            (2, Progress::Complete, Progress::None),
        ]
    );
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"201"));
    assert_buf(&s, 1, "http.stat_code", TC, Some(b"202"));
    assert_buf(&s, 1, "http.uri", TS, Some(b"/2"));
    assert_buf(&s, 2, "http.stat_code", TC, None);
}

#[test]
fn progress_follows_the_message() {
    let l = HttpLimits::default();
    let mut s = HttpState::default();
    s.feed(TS, b"POST /x HTTP/1.1\r\nHost: a\r\n", &l)
        .expect("feed");
    let p = |s: &HttpState| s.txs().next().map(|t| t.progress(TS));
    assert_eq!(p(&s), Some(Progress::Line));
    assert_buf(&s, 0, "http.method", TS, Some(b"POST"));
    assert_buf(&s, 0, "http.header", TS, None);
    s.feed(TS, b"Content-Length: 4\r\n\r\nab", &l)
        .expect("feed");
    assert_eq!(p(&s), Some(Progress::Headers));
    assert_buf(&s, 0, "http.host", TS, Some(b"a"));
    s.feed(TS, b"cd", &l).expect("feed");
    assert_eq!(p(&s), Some(Progress::Complete));
    assert_buf(&s, 0, "http.request_body", TS, Some(b"abcd"));
}

#[test]
fn a_body_over_the_limit_is_cut_and_complete_and_the_next_message_parses() {
    let limits = HttpLimits {
        request_body_limit: 10,
        response_body_limit: 8,
        ..HttpLimits::default()
    };
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        chunked.extend_from_slice(b"4\r\nwxyz\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nZ");
    let segs: Vec<Seg<'_>> = vec![
        (TS, Some(b"POST / HTTP/1.1\r\nContent-Length: 30\r\n\r\n")),
        (TS, Some(b"0123456789")),
    ];
    let (s, r) = run_with(&segs, 0, &limits);
    assert_eq!(r, Ok(()));
    assert_eq!(
        s.txs().next().map(|t| t.progress(TS)),
        Some(Progress::Complete)
    );
    assert_buf(&s, 0, "http.request_body", TS, Some(b"0123456789"));
    let rest = b"abcdefghijklmnopqrstGET /next HTTP/1.1\r\n\r\n";
    let mut all = segs.clone();
    all.push((TS, Some(rest)));
    all.push((TC, Some(&chunked)));
    for step in [0, 1, 7] {
        let (s, r) = run_with(&all, step, &limits);
        assert_eq!(r, Ok(()));
        assert_buf(&s, 0, "http.request_body", TS, Some(b"0123456789"));
        assert_buf(&s, 1, "http.uri", TS, Some(b"/next"));
        assert_buf(&s, 0, "http.response_body", TC, Some(b"wxyzwxyz"));
        assert_buf(&s, 1, "http.response_body", TC, Some(b"Z"));
    }
}

#[test]
fn gzip_bombs_stop_at_the_limit() {
    let limits = HttpLimits {
        response_body_limit: 1000,
        ..HttpLimits::default()
    };
    let bomb = gzip(&vec![0u8; 10 << 20]);
    let mut resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        bomb.len()
    )
    .into_bytes();
    resp.extend_from_slice(&bomb);
    let (s, r) = run_with(
        &[(TS, Some(b"GET / HTTP/1.1\r\n\r\n")), (TC, Some(&resp))],
        0,
        &limits,
    );
    assert_eq!(r, Ok(()));
    assert_buf(&s, 0, "http.response_body", TC, Some(&[0u8; 1000]));
    assert!(s.memory() < 64 * 1024, "{}", s.memory());
}

#[test]
fn request_bodies_are_decompressed() {
    // suricata-verify http-post-data-decompression: `content:"name"; http_client_body`.
    let body = gzip(b"name=value&other=1");
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let s = run(&[(TS, Some(&req))]);
    assert_buf(&s, 0, "http.request_body", TS, Some(b"name=value&other=1"));
}

#[test]
fn close_completes_bodies_and_messages() {
    let l = HttpLimits::default();
    let mut s = HttpState::default();
    s.feed(
        TS,
        b"GET / HTTP/1.1\r\n\r\nGET /cut HTTP/1.1\r\nHost: x",
        &l,
    )
    .expect("feed");
    s.feed(TC, b"HTTP/1.1 200 OK\r\n\r\npart", &l)
        .expect("feed");
    let prog = |s: &HttpState| -> Vec<[Progress; 2]> {
        s.txs().map(|t| [t.progress(TS), t.progress(TC)]).collect()
    };
    assert_eq!(
        prog(&s),
        [
            [Progress::Complete, Progress::Headers],
            [Progress::Line, Progress::None]
        ]
    );
    s.close(TS);
    s.close(TC);
    assert_eq!(
        prog(&s),
        [
            [Progress::Complete, Progress::Complete],
            [Progress::Complete, Progress::None]
        ]
    );
    assert_buf(&s, 0, "http.response_body", TC, Some(b"part"));
    // A closed direction ignores what follows.
    s.feed(TS, b"GET /late HTTP/1.1\r\n\r\n", &l).expect("feed");
    assert_eq!(s.txs().count(), 2);
}

#[test]
fn not_http_and_oversized_heads_stop_the_parser() {
    let l = HttpLimits::default();
    let mut s = HttpState::default();
    assert_eq!(
        s.feed(TS, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\n", &l),
        Err(HttpError::NotHttp)
    );
    assert_eq!(
        s.feed(TS, b"GET / HTTP/1.1\r\n\r\n", &l),
        Err(HttpError::NotHttp)
    );
    assert_eq!(s.failed(TS), Some(HttpError::NotHttp));
    assert_eq!(s.txs().count(), 0);
    // The response is still parsed (suricata-verify http-not09-file), without request.
    s.feed(
        TC,
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad",
        &l,
    )
    .expect("the response side goes on");
    assert_eq!(s.failed(TC), None);
    assert_buf(
        &s,
        0,
        "http.response_line",
        TC,
        Some(b"HTTP/1.1 400 Bad Request"),
    );
    assert_buf(&s, 0, "file.data", TC, Some(b"bad"));
    assert_buf(
        &s,
        0,
        "http.uri.raw",
        TS,
        Some(b"/libhtp::request_uri_not_seen"),
    );
    assert_buf(&s, 0, "http.method", TS, None);

    let small = HttpLimits { max_head: 100, ..l };
    let mut s = HttpState::default();
    let r = s.feed(TS, b"GET / HTTP/1.1\r\n", &small);
    assert_eq!(r, Ok(()));
    let long = [b'a'; 60];
    assert_eq!(s.feed(TS, b"X-Long: ", &small), Ok(()));
    assert_eq!(s.feed(TS, &long, &small), Ok(()));
    assert_eq!(s.feed(TS, &long, &small), Err(HttpError::HeadTooLong(100)));
    // A line without an end counts too.
    let mut s = HttpState::default();
    assert_eq!(
        s.feed(TS, &[b'G'; 101], &small),
        Err(HttpError::HeadTooLong(100))
    );
}

#[test]
fn transactions_are_bounded_and_retired() {
    let l = HttpLimits {
        max_txs: 3,
        ..HttpLimits::default()
    };
    let mut s = HttpState::default();
    let req = b"GET / HTTP/1.1\r\n\r\n";
    for _ in 0..3 {
        s.feed(TS, req, &l).expect("feed");
    }
    s.feed(TC, b"HTTP/1.1 204 No Content\r\n\r\n", &l)
        .expect("feed");
    s.retire(1);
    assert_eq!(s.txs().map(|t| t.id()).collect::<Vec<_>>(), [1, 2]);
    s.feed(TS, req, &l).expect("room for one more");
    // Answered transactions are not evicted: with nothing unanswered to drop, too many.
    let mut a = HttpState::default();
    for _ in 0..3 {
        a.feed(TS, req, &l).expect("feed");
        a.feed(TC, b"HTTP/1.1 204 No Content\r\n\r\n", &l)
            .expect("feed");
    }
    assert_eq!(a.feed(TS, req, &l), Err(HttpError::TooManyTransactions(3)));
}

#[test]
fn http09_connect_upgrade_and_orphan_responses() {
    // HTTP/0.9: no headers, the response is all body.
    let s = run(&[
        (TS, Some(b"GET /old\r\n")),
        (TC, Some(b"<html>no status line")),
        (TC, None),
    ]);
    assert_buf(&s, 0, "http.uri", TS, Some(b"/old"));
    assert_buf(&s, 0, "http.protocol", TS, None);
    assert_buf(&s, 0, "http.header.raw", TS, None);
    assert_buf(
        &s,
        0,
        "http.response_body",
        TC,
        Some(b"<html>no status line"),
    );
    assert_buf(&s, 0, "http.stat_code", TC, None);
    // CONNECT: the host is the authority, the tunnel is not parsed.
    let s = run(&[
        (TS, Some(b"CONNECT Ex.com:443 HTTP/1.1\r\nHost: b\r\n\r\n")),
        (TC, Some(b"HTTP/1.1 200 OK\r\n\r\n")),
        (TS, Some(b"\x16\x03\x01 tls bytes")),
        (TC, Some(b"\x16\x03\x03 more")),
    ]);
    assert_eq!(s.txs().count(), 1);
    assert_buf(&s, 0, "http.host", TS, Some(b"ex.com"));
    assert_buf(&s, 0, "http.uri", TS, Some(b""));
    // 101 Switching Protocols ends HTTP too.
    let s = run(&[
        (TS, Some(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n")),
        (
            TC,
            Some(b"HTTP/1.1 101 Switching\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"),
        ),
        (TS, Some(b"\x81\x85 masked")),
    ]);
    assert_eq!(s.txs().count(), 1);
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"101"));
    // More responses than requests: the extra one gets its own transaction.
    let s = run(&[
        (TS, Some(b"GET / HTTP/1.1\r\n\r\n")),
        (TC, Some(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 500 Extra\r\nContent-Length: 0\r\n\r\n")),
    ]);
    assert_eq!(s.txs().count(), 2);
    assert_buf(&s, 1, "http.stat_code", TC, Some(b"500"));
    assert_buf(
        &s,
        1,
        "http.uri",
        TS,
        Some(b"/libhtp::request_uri_not_seen"),
    );
    assert_buf(&s, 1, "http.request_line", TS, None);
    assert_eq!(
        s.txs().nth(1).map(|t| t.progress(TS)),
        Some(Progress::Complete)
    );
}

/// Bytes that steer the parser somewhere: line ends, separators, escapes, digits.
const PALETTE: &[u8] =
    b"\r\n\r\n :%/\\.?#\t0123456789abcdefHTTP/1.1 GET POST chunked\x00\xff;=\"-gzip";

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.below(8) {
        let at = rng.below(v.len() + 1);
        match rng.below(5) {
            0 if at < v.len() => v[at] = PALETTE[rng.below(PALETTE.len())],
            1 => v.insert(at, PALETTE[rng.below(PALETTE.len())]),
            2 if at < v.len() => {
                v.remove(at);
            }
            3 => {
                let len = rng.below(12).min(v.len() - at.min(v.len()));
                let piece = v[at..at + len].to_vec();
                v.splice(at..at, piece);
            }
            _ => v.insert(at, rng.next() as u8),
        }
    }
    v
}

/// What a run leaves: every buffer, every progress, and each direction's error.
fn outcome(
    segs: &[Seg<'_>],
    cuts: &dyn Fn(usize, usize) -> Vec<usize>,
    l: &HttpLimits,
) -> (Dump, [Option<HttpError>; 2]) {
    let mut s = HttpState::default();
    for (i, (dir, data)) in segs.iter().enumerate() {
        match data {
            Some(d) => {
                let mut from = 0;
                for to in cuts(i, d.len()).into_iter().chain([d.len()]) {
                    let _ = s.feed(*dir, &d[from..to], l);
                    from = to;
                }
            }
            None => s.close(*dir),
        }
    }
    (dump(&s), [s.failed(TS), s.failed(TC)])
}

#[test]
fn random_and_mutated_traffic_never_panics_and_cuts_do_not_matter() {
    let gz = gzip(b"compressed body compressed body");
    let mut gz_resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
        gz.len()
    )
    .into_bytes();
    gz_resp.extend_from_slice(&gz);
    let requests: &[&[u8]] = &[
        b"GET /a/./b/../%41%u0042?x=%2f#f HTTP/1.1\r\nHost: Ex.COM:80\r\nCookie: a=b\r\n\r\n",
        b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: 70\r\n\r\n\
--zz\r\nContent-Disposition: form-data; filename=\"f\"\r\n\r\nfile\r\n--zz--\r\n",
        b"GET /09\r\n",
        b"HEAD / HTTP/1.1\r\n\r\nGET http://h/x HTTP/1.1\r\nX: a\r\n b\r\n\r\njunk\r\n",
    ];
    let responses: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nSet-Cookie: s\r\n\r\nabc",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;e\r\nhi\r\n0\r\n\r\n",
        &gz_resp,
        b"HTTP/1.0 404 Not Found\r\n\r\nuntil close",
        b"<html>no head",
    ];
    let small = HttpLimits {
        request_body_limit: 7,
        response_body_limit: 9,
        max_head: 120,
        max_txs: 3,
        ..HttpLimits::default()
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..500 {
        let req = if case % 10 == 9 {
            (0..rng.below(200)).map(|_| rng.next() as u8).collect()
        } else {
            let first = requests[rng.below(requests.len())];
            let mut r = mutate(&mut rng, first);
            if rng.below(2) == 0 {
                let second = requests[rng.below(requests.len())];
                r.extend(mutate(&mut rng, second));
            }
            r
        };
        let template = responses[rng.below(responses.len())];
        let resp = mutate(&mut rng, template);
        let segs: Vec<Seg<'_>> = vec![(TS, Some(&req)), (TC, Some(&resp)), (TS, None), (TC, None)];
        for limits in [HttpLimits::default(), small] {
            let whole = outcome(&segs, &|_, _| Vec::new(), &limits);
            let bytewise = outcome(&segs, &|_, n| (1..n).collect(), &limits);
            assert_eq!(bytewise, whole, "case {case}: byte by byte");
            let seed = rng.next();
            let random = outcome(
                &segs,
                &|i, n| {
                    let mut r = Rng(seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9));
                    let mut cuts: Vec<usize> = (0..r.below(6)).map(|_| r.below(n + 1)).collect();
                    cuts.sort_unstable();
                    cuts
                },
                &limits,
            );
            assert_eq!(random, whole, "case {case}: random cuts");
        }
    }
}

#[test]
fn memory_stays_bounded_on_unbounded_streams() {
    let l = HttpLimits::default();
    let mut s = HttpState::default();
    s.feed(TS, b"GET /big HTTP/1.1\r\n\r\n", &l).expect("feed");
    s.feed(
        TC,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        &l,
    )
    .expect("feed");
    let chunk = [b'x'; 4096];
    for _ in 0..1000 {
        s.feed(TC, b"1000\r\n", &l).expect("feed");
        s.feed(TC, &chunk, &l).expect("feed");
        s.feed(TC, b"\r\n", &l).expect("feed");
    }
    // 4 MB of body went by; the body kept is the limit.
    assert_buf(&s, 0, "http.response_body", TC, Some(&[b'x'; 100 * 1024]));
    assert!(s.memory() < 100 * 1024 + 16 * 1024, "{}", s.memory());
    // Junk after a message is bounded by the same limit.
    let mut s = HttpState::default();
    s.feed(TS, b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\nx", &l)
        .expect("feed");
    for _ in 0..100 {
        s.feed(TS, &[b'j'; 4096], &l).expect("feed");
    }
    assert_eq!(
        s.txs().next().map(|t| t.req.body.len()),
        Some(l.request_body_limit)
    );
    assert!(s.memory() < 100 * 1024 + 16 * 1024, "{}", s.memory());
}

#[test]
fn whitespace_lines_before_a_status_line_are_ignored() {
    // http-evader-481: " \r\n" before the status line; libhtp skips the line and parses
    // the response.
    let s = run(&[
        (TS, Some(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")),
        (
            TC,
            Some(b" \r\n\t\r\nHTTP/1.1 200 ok\r\nContent-Length: 4\r\n\r\nbody"),
        ),
    ]);
    assert_buf(&s, 0, "http.stat_code", TC, Some(b"200"));
    assert_buf(&s, 0, "file.data", TC, Some(b"body"));
}
