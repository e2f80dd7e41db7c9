//! Buffers that suricata-verify rules inspect, on the bytes of their captures (transcribed
//! from the pcaps, cut to what the rules need). Each test names the suricata-verify test
//! and the rule; the expected values were also read back from Suricata 7.0.10.

use super::tests::{assert_buf, run};
use super::*;

use Dir::{ToClient as TC, ToServer as TS};

/// `buf` contains `needle`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

fn get(s: &HttpState, id: u64, name: &str, dir: Dir) -> Vec<u8> {
    let b = crate::applayer::buffer::Buffer::from_sticky(name).expect("a buffer");
    s.txs()
        .find(|t| t.id == id)
        .and_then(|t| t.buffer(b, dir))
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

#[test]
fn http_raw_header_keeps_the_spaces_the_normalized_header_trims() {
    // http-raw-header: content:"Server|3a 20 20 20 20 20 20 20|Yx|28|"; http_raw_header;
    let s = run(&[
        (
            TS,
            Some(b"GET http://ppmter.720891.com/pptmaster/ptcuu.ini HTTP/1.1\r\nHost: ppmter.720891.com\r\nAccept: */*\r\n\r\n"),
        ),
        (
            TC,
            Some(b"HTTP/1.1 200 OK\r\nServer:       Yx(yw)        /SERVER IP:   SERverWanip\r\nContent-Length: 4\r\n\r\n\x17\xa9\xa6\xa9"),
        ),
    ]);
    assert!(contains(
        &get(&s, 0, "http.header.raw", TC),
        b"Server:       Yx("
    ));
    assert!(!contains(
        &get(&s, 0, "http.header", TC),
        b"Server:       Yx("
    ));
    assert_buf(
        &s,
        0,
        "http.server",
        TC,
        Some(b"Yx(yw)        /SERVER IP:   SERverWanip"),
    );
    assert_buf(&s, 0, "http.uri", TS, Some(b"/pptmaster/ptcuu.ini"));
    assert_buf(&s, 0, "http.host", TS, Some(b"ppmter.720891.com"));
}

#[test]
fn http_chunked_cookie_is_not_in_http_header() {
    // http-chunked: sids 21, 23-26 (http.header: Host, X-Qlik-User, User-Agent,
    // Content-Length, Transfer-Encoding) alert, 22 (http.header: Cookie) does not; 31-36
    // (http.header.raw) all do.
    let s = run(&[(
        TS,
        Some(
            b"HEAD /resources/fonts/SourceSansPro-Regular.ttf HTTP/1.1\r\nHost: localhost\r\n\
Cookie: X-Qlik-Session=13333333-3333-3333-3333-333333333337\r\n\
X-Qlik-User: UserDirectory=internal;UserId=sa_repository\r\nUser-Agent: Mozilla/5.0\r\n\
Content-Length: 0\r\nTransfer-Encoding: ,\tchunked,\r\n\r\n",
        ),
    )]);
    let header = get(&s, 0, "http.header", TS);
    let raw = get(&s, 0, "http.header.raw", TS);
    for h in [
        &b"Host"[..],
        b"X-Qlik-User",
        b"User-Agent",
        b"Content-Length",
        b"Transfer-Encoding",
    ] {
        assert!(contains(&header, h) && contains(&raw, h));
    }
    assert!(!contains(&header, b"Cookie"));
    assert!(contains(&raw, b"Cookie"));
    assert_buf(
        &s,
        0,
        "http.cookie",
        TS,
        Some(b"X-Qlik-Session=13333333-3333-3333-3333-333333333337"),
    );
}

#[test]
fn http_close_headers_are_parsed_when_the_server_closes() {
    // http-close-headers: content:"ng1nx"; nocase; http_header; from_server.
    let s = run(&[
        (
            TS,
            Some(b"GET / HTTP/1.1\r\nHost: 100.64.0.200\r\nAccept: */*\r\n\r\n"),
        ),
        (TC, Some(b"HTTP/1.0 200 OK\nServer:ng1nx\r\n")),
        (TC, None),
        (TS, None),
    ]);
    assert_buf(&s, 0, "http.header", TC, Some(b"Server: ng1nx\r\n"));
    assert_buf(&s, 0, "http.header.raw", TC, Some(b"Server:ng1nx\r\n"));
}

#[test]
fn http_connection_toclient_and_repeated_headers() {
    // http-connection-toclient: flow:to_client; http.connection; content:"close";
    let s = run(&[
        (TS, Some(b"GET / HTTP/1.1\r\nHost: www.aieov.com\r\nConnection: Keep-Alive\r\n\r\n")),
        (
            TC,
            Some(b"HTTP/1.1 200 OK\r\nserver: openresty/1.13.6.1\r\ncontent-type: application/octet-stream\r\n\
content-length: 5\r\ncontent-type: text/html\r\nconnection: close\r\n\r\nhello"),
        ),
    ]);
    assert_buf(&s, 0, "http.connection", TC, Some(b"close"));
    assert_buf(&s, 0, "http.connection", TS, Some(b"Keep-Alive"));
    assert_buf(
        &s,
        0,
        "http.content_type",
        TC,
        Some(b"application/octet-stream, text/html"),
    );
    assert_buf(&s, 0, "http.server", TC, Some(b"openresty/1.13.6.1"));
}

#[test]
fn http_request_invalid_bytes_after_a_request_are_its_body() {
    // http-request-invalid: content:"login=foo&password=bar"; http_client_body;
    let s = run(&[(
        TS,
        Some(b"POST /index.html HTTP/1.1\r\nHost: 192.168.56.3\r\nContent-Type: application/x-www-form-urlencoded\r\n\
Connection: keep-alive\r\n\r\nlogin=foo&password=bar"),
    )]);
    assert_buf(
        &s,
        0,
        "http.request_body",
        TS,
        Some(b"login=foo&password=bar"),
    );
    assert_eq!(s.txs().count(), 1);
}

#[test]
fn http_async_a_stray_line_end_after_a_response_is_body() {
    // http-async: Suricata's file.data for /1 is "Hello World!\n" (Content-Length 12).
    let s = run(&[
        (TS, Some(b"GET /1 HTTP/1.0\r\nUser-Agent: Mozilla\r\n\r\n")),
        (
            TC,
            Some(b"HTTP/1.0 200 OK\r\nServer: Apache\r\nContent-Length: 12\r\n\r\nHello World!\n"),
        ),
        (TS, Some(b"GET /2 HTTP/1.0\r\nUser-Agent: Mozilla\r\n\r\n")),
        (
            TC,
            Some(b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\nHello People"),
        ),
    ]);
    assert_buf(&s, 0, "file.data", TC, Some(b"Hello World!\n"));
    assert_buf(&s, 1, "file.data", TC, Some(b"Hello People"));
    assert_buf(&s, 1, "http.uri", TS, Some(b"/2"));
}

#[test]
fn http_uri_spaces_stay_in_the_uri() {
    // http-uri-spaces (Suricata 8): content:" afterspace"; http_uri;
    let s = run(&[(TS, Some(b"GET /uri afterspace HTTP/1.1\r\n\r\n"))]);
    assert_buf(&s, 0, "http.uri", TS, Some(b"/uri afterspace"));
    assert_buf(&s, 0, "http.protocol", TS, Some(b"HTTP/1.1"));
}

#[test]
fn http_not09_and_missing_protocol_have_headers_after_all() {
    // http-not09: a protocol-less request line followed by headers is not HTTP/0.9.
    let s = run(&[
        (
            TS,
            Some(b"GET /\nFakeHeader\nHost: localhost\nUser-Agent: myscript\n\n"),
        ),
        (TC, Some(b"<!DOCTYPE HTML>\n<html lang=\"en\">")),
        (TC, None),
    ]);
    assert_buf(
        &s,
        0,
        "http.header",
        TS,
        Some(b": FakeHeader\r\nHost: localhost\r\nUser-Agent: myscript\r\n"),
    );
    assert_buf(&s, 0, "http.user_agent", TS, Some(b"myscript"));
    assert_buf(
        &s,
        0,
        "file.data",
        TC,
        Some(b"<!DOCTYPE HTML>\n<html lang=\"en\">"),
    );
    // http-missing-protocol: content:"GET"; http_method; http_header_names; content:"User-Agent";
    let s = run(&[(
        TS,
        Some(
            b"GET /gen.php?generate=191636955/-394717567&hwid=-53127817\r\nHost: 5.8.88.25\r\n\
Connection:keep-alive\r\nUser-Agent:Mozilla/5.0\r\n\r\n",
        ),
    )]);
    assert_buf(&s, 0, "http.method", TS, Some(b"GET"));
    assert!(contains(
        &get(&s, 0, "http.header_names", TS),
        b"\r\nUser-Agent\r\n"
    ));
    assert_buf(&s, 0, "http.protocol", TS, None);
}

#[test]
fn http_mime_truncated_files_and_a_chunked_gzip_response() {
    // http-mime-truncated: a multipart body with no part; a chunked gzip response.
    let s = run(&[
        (
            TS,
            Some(b"POST /288 HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=1BEF0A57BE110FD467A\r\n\
Content-Length: 25\r\nHost: eroomia.com\r\n\r\n--1BEF0A57BE110FD467A--\r\n"),
        ),
        (
            TC,
            Some(b"HTTP/1.1 200 OK\r\nServer: nginx\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n\
24\r\n\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x033\xd41D\x81\x06@\x9e\x91\xa9\x81N^~^\xaa5\x00a\xd4\xbf,\x1d\x00\x00\x00\r\n0\r\n\r\n"),
        ),
    ]);
    assert_buf(&s, 0, "file.data", TS, None);
    assert_buf(
        &s,
        0,
        "http.request_body",
        TS,
        Some(b"--1BEF0A57BE110FD467A--\r\n"),
    );
    assert_buf(
        &s,
        0,
        "file.data",
        TC,
        Some(b"1,1,1,1,1,1,1,1,0,1,250,none;"),
    );
}

#[test]
fn http_encoding_gzip_uncompressed_body_is_inspected_as_sent() {
    // http-encoding-gzip-uncompressed: http.request_body; content:"|22|sdk_version|22 3a|"; ...
    let body = b"{\"sdk_version\":11026,\"app_package\":\"com.xcm.huasheng\",\"app_version\":\"1.7.4\",\"device_id\":\"350672920106648\"}";
    let mut req = b"POST /api/sdk/init2 HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Type: application/json\r\n\
Host: sdk.xinxiansk.com:8100\r\nContent-Length: 106\r\n\r\n"
        .to_vec();
    req.extend_from_slice(body);
    let s = run(&[(TS, Some(&req))]);
    assert_buf(&s, 0, "http.request_body", TS, Some(body));
    assert_buf(&s, 0, "http.host", TS, Some(b"sdk.xinxiansk.com"));
    assert_buf(&s, 0, "http.host.raw", TS, Some(b"sdk.xinxiansk.com:8100"));
}

#[test]
fn http_evader_two_content_codings_are_both_undone() {
    // http-evader-132, `GET /compressed/eicar.txt/ce%3Agzip,deflate;gzip;deflate`:
    // `Content-Encoding:gzip,deflate`, the body gzipped and then deflated; Suricata undoes
    // both (the last listed first) and its file_data holds the EICAR string.
    let s = run(&[
        (TS, Some(b"GET /compressed/eicar.txt/ce%3Agzip,deflate;gzip;deflate HTTP/1.1\r\nHost: evader.example.com\r\n\r\n")),
        (TC, Some(b"HTTP/1.1 200 ok\x0d\x0aContent-length: 88\x0d\x0aContent-type: application/octet-stream\x0d\x0aContent-disposition: attachment; filename=\x22eicar.txt\x22\x0d\x0aContent-Encoding:gzip,deflate\x0d\x0a\x0d\x0a\x93\xef\xe6`\x00\x03\xe6n\x83\xaf\xe1<\x01\xa5\x05<\x1df\x9d\x9c\x1d]\x06\xa6\x179:.\x9b\x94\x97]3Y\x1fZ\xf8\xb5\xa4\x8c\xe7\x12/_\xe1\x97\xe2B\x9e\xa2\x8b\xa5_\xb8?\xf2|\xe6\xe1\xe2\xbd\xc6[\xc8\xcbw\xb1\xf4\xf3\x97\xc2\xd0\x90\x8f\x17\xbe]`b\xb09\x1f\x98\xe1\x024\x0e\x00")),
    ]);
    assert!(contains(
        &get(&s, 0, "file.data", TC),
        b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE"
    ));
}

#[test]
fn http_evader_chunked_response_without_chunks_is_read_until_close() {
    // http-evader-044, `GET /chunked/eicar.txt/chunked,http10,do_clen`: an HTTP/1.0
    // response with `Transfer-Encoding: chunked` and a body sent as is; libhtp finds no
    // chunk size and reads the body until close, and Suricata's file_data holds it.
    let s = run(&[
        (TS, Some(b"GET /chunked/eicar.txt/chunked,http10,do_clen HTTP/1.1\r\nHost: evader.example.com\r\n\r\n")),
        (TC, Some(b"HTTP/1.0 200 ok\x0d\x0aContent-type: application/octet-stream\x0d\x0aContent-disposition: attachment; filename=\x22eicar.txt\x22\x0d\x0aTransfer-Encoding: chunked\x0d\x0aConnection: close\x0d\x0a\x0d\x0aX5O!P%@AP[4\x5cPZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*")),
        (TC, None),
    ]);
    let body = get(&s, 0, "file.data", TC);
    assert!(body.starts_with(b"X5O!P%@AP[4"), "{body:?}");
    assert!(contains(&body, b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE"));
}

#[test]
fn http_evader_transfer_encoding_with_a_nul_is_chunked() {
    // http-evader-290, `GET /broken/eicar.txt/te%3Achu%5C000nked;do_chunked`:
    // `Transfer-Encoding:chu\0nked`; libhtp skips the NUL, finds `chunked` and de-chunks.
    let s = run(&[
        (TS, Some(b"GET /broken/eicar.txt/te%3Achu%5C000nked;do_chunked HTTP/1.1\r\nHost: evader.example.com\r\n\r\n")),
        (TC, Some(b"HTTP/1.1 200 ok\x0d\x0aContent-type: application/octet-stream\x0d\x0aContent-disposition: attachment; filename=\x22eicar.txt\x22\x0d\x0aConnection: close\x0d\x0aTransfer-Encoding:chu\x00nked\x0d\x0aYet-another-header: foo\x0d\x0a\x0d\x0a4\x0d\x0aX5O!\x0d\x0a4\x0d\x0aP%@A\x0d\x0a4\x0d\x0aP[4\x5c\x0d\x0a4\x0d\x0aPZX5\x0d\x0a4\x0d\x0a4(P^\x0d\x0a4\x0d\x0a)7CC\x0d\x0a4\x0d\x0a)7}$\x0d\x0a4\x0d\x0aEICA\x0d\x0a4\x0d\x0aR-ST\x0d\x0a4\x0d\x0aANDA\x0d\x0a4\x0d\x0aRD-A\x0d\x0a4\x0d\x0aNTIV\x0d\x0a4\x0d\x0aIRUS\x0d\x0a4\x0d\x0a-TES\x0d\x0a4\x0d\x0aT-FI\x0d\x0a4\x0d\x0aLE!$\x0d\x0a4\x0d\x0aH+H*\x0d\x0a0\x0d\x0a\x0d\x0a")),
        (TC, None),
    ]);
    assert!(contains(
        &get(&s, 0, "file.data", TC),
        b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE"
    ));
}

#[test]
fn http_evader_header_name_with_a_nul_is_found() {
    // http-evader-293, `GET /broken/eicar.txt/te%5C000%3Achunked;do_chunked`:
    // `Transfer-Encoding\0:chunked`; libhtp's lookup skips the NUL in the name and de-chunks.
    let s = run(&[
        (TS, Some(b"GET /broken/eicar.txt/te%5C000%3Achunked;do_chunked HTTP/1.1\r\nHost: evader.example.com\r\n\r\n")),
        (TC, Some(b"HTTP/1.1 200 ok\x0d\x0aContent-type: application/octet-stream\x0d\x0aContent-disposition: attachment; filename=\x22eicar.txt\x22\x0d\x0aConnection: close\x0d\x0aTransfer-Encoding\x00:chunked\x0d\x0aYet-another-header: foo\x0d\x0a\x0d\x0a4\x0d\x0aX5O!\x0d\x0a4\x0d\x0aP%@A\x0d\x0a4\x0d\x0aP[4\x5c\x0d\x0a4\x0d\x0aPZX5\x0d\x0a4\x0d\x0a4(P^\x0d\x0a4\x0d\x0a)7CC\x0d\x0a4\x0d\x0a)7}$\x0d\x0a4\x0d\x0aEICA\x0d\x0a4\x0d\x0aR-ST\x0d\x0a4\x0d\x0aANDA\x0d\x0a4\x0d\x0aRD-A\x0d\x0a4\x0d\x0aNTIV\x0d\x0a4\x0d\x0aIRUS\x0d\x0a4\x0d\x0a-TES\x0d\x0a4\x0d\x0aT-FI\x0d\x0a4\x0d\x0aLE!$\x0d\x0a4\x0d\x0aH+H*\x0d\x0a0\x0d\x0a\x0d\x0a")),
        (TC, None),
    ]);
    assert!(contains(
        &get(&s, 0, "file.data", TC),
        b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE"
    ));
}
