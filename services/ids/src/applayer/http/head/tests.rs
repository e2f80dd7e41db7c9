use super::*;

fn part<'a>(line: &'a [u8], r: &Option<Range<u32>>) -> Option<&'a [u8]> {
    r.as_ref()
        .and_then(|r| line.get(r.start as usize..r.end as usize))
}

fn req(line: &[u8]) -> [Option<&[u8]>; 3] {
    let sl = request_line(line).expect("a request line");
    [
        part(line, &sl.first),
        part(line, &sl.second),
        part(line, &sl.third),
    ]
}

#[test]
fn request_lines_split_as_libhtp() {
    assert_eq!(
        req(b"GET /a HTTP/1.1"),
        [Some(&b"GET"[..]), Some(b"/a"), Some(b"HTTP/1.1")]
    );
    assert_eq!(
        req(b"GET /uri afterspace HTTP/1.1"),
        [
            Some(&b"GET"[..]),
            Some(b"/uri afterspace"),
            Some(b"HTTP/1.1")
        ]
    );
    assert_eq!(
        req(b"  POST \t /x   HTTP/1.0  "),
        [Some(&b"POST"[..]), Some(b"/x"), Some(b"HTTP/1.0")]
    );
    assert_eq!(req(b"GET /"), [Some(&b"GET"[..]), Some(b"/"), None]);
    assert_eq!(req(b"GET"), [Some(&b"GET"[..]), None, None]);
    assert_eq!(
        req(b"GET /a\tHTTP/1.1"),
        [Some(&b"GET"[..]), Some(b"/a"), Some(b"HTTP/1.1")]
    );
    assert!(request_line(b"\x16\x03\x01 x").is_none());
    assert!(request_line(b"").is_none());
    assert!(request_line(b"   ").is_none());
}

#[test]
fn status_lines_split_as_libhtp() {
    let l = b"HTTP/1.1  404   Not  Found ";
    let sl = status_line(l);
    assert_eq!(part(l, &sl.first), Some(&b"HTTP/1.1"[..]));
    assert_eq!(part(l, &sl.second), Some(&b"404"[..]));
    assert_eq!(part(l, &sl.third), Some(&b"Not  Found "[..]));
    let l = b"HTTP/1.1 200";
    let sl = status_line(l);
    assert_eq!(part(l, &sl.second), Some(&b"200"[..]));
    assert_eq!(sl.third, None);
    assert_eq!(status_number(b"200"), Some(200));
    assert_eq!(status_number(b"20x"), None);
    assert_eq!(status_number(b"099"), None);
    assert_eq!(looks_like_status(b" http/1.0", true), Some(true));
    assert_eq!(looks_like_status(b"HT", false), None);
    assert_eq!(looks_like_status(b"HT", true), Some(false));
    assert_eq!(looks_like_status(b"<html>", false), Some(false));
}

#[test]
fn headers_merge_fold_and_trim_as_suricata() {
    // Read back from Suricata 7.0.10 (http.header, http.header_names, http.cookie).
    let block = b"Host: Example.COM.\r\nCookie: a=b\r\nX-Dup: 1\r\nx-dup:  2  \r\n\
X-Fold: a\r\n  b\r\nUser-Agent:\tUA 1 \r\nNoColon\r\nSp ace : v\r\nEmpty:\r\n\
Content-Length: 3\r\ncontent-length: 4\r\n\r\n";
    let h = Headers::build(&parse_block(block), b"cookie").expect("headers");
    assert_eq!(
        h.header().expect("header"),
        &b"Host: Example.COM.\r\nX-Dup: 1, 2\r\nX-Fold: a  b\r\nUser-Agent: UA 1\r\n\
: NoColon\r\nSp ace: v\r\nEmpty: \r\nContent-Length: 3\r\n"[..]
    );
    assert_eq!(
        h.names().expect("names"),
        &b"\r\nHost\r\nCookie\r\nX-Dup\r\nX-Fold\r\nUser-Agent\r\n\r\nSp ace\r\nEmpty\r\nContent-Length\r\n\r\n"[..]
    );
    assert_eq!(h.value(b"COOKIE"), Some(&b"a=b"[..]));
    assert_eq!(h.value(b"user-agent"), Some(&b"UA 1"[..]));
    assert_eq!(h.value(b"content-length"), Some(&b"3"[..]));
    assert_eq!(h.value(b"absent"), None);
    let folded = Headers::build(&parse_block(b"A:\r\n  x y \r\n\r\n"), b"cookie").expect("ok");
    assert_eq!(folded.header(), Some(&b"A: x y\r\n"[..]));
    let none = Headers::build(&parse_block(b"\r\n"), b"cookie").expect("empty");
    assert_eq!((none.header(), none.names()), (None, None));
}

#[test]
fn httparse_and_lenient_agree_on_valid_blocks() {
    let blocks: &[&[u8]] = &[
        b"Host: a\r\nAccept: */*\r\nX:   spaced value  \r\n\r\n",
        b"A: 1\nB: 2\n\n",
        b"Set-Cookie: x\r\nset-cookie: y\r\nServer: s\xc3\xa9\r\n\r\n",
        b"\r\n",
    ];
    for b in blocks {
        let mut arr = [httparse::EMPTY_HEADER; FAST_HEADERS];
        assert!(
            matches!(
                httparse::parse_headers(b, &mut arr),
                Ok(httparse::Status::Complete(_))
            ),
            "httparse takes {b:?}"
        );
        assert_eq!(parse_block(b), parse_lenient(b));
    }
    // More than FAST_HEADERS entries fall back, losing nothing.
    let mut big = Vec::new();
    for i in 0..FAST_HEADERS + 10 {
        big.extend_from_slice(format!("H{i}: {i}\r\n").as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    assert_eq!(parse_block(&big).len(), FAST_HEADERS + 10);
}

#[test]
fn too_many_distinct_names_is_an_error_repeats_are_capped() {
    let mut big = Vec::new();
    for i in 0..=MAX_FIELDS {
        big.extend_from_slice(format!("H{i}: x\r\n").as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    assert!(Headers::build(&parse_block(&big), b"cookie").is_err());
    let mut rep = Vec::new();
    for _ in 0..200 {
        rep.extend_from_slice(b"A: x\r\n");
    }
    rep.extend_from_slice(b"\r\n");
    let h = Headers::build(&parse_block(&rep), b"cookie").expect("ok");
    assert_eq!(
        h.value(b"a").map(<[u8]>::len),
        Some(1 + 3 * (MAX_REPEATS + 1))
    );
}
