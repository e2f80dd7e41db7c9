//! The buffers a rule's `content`, `pcre`, `byte_*`, `isdataat`, `bsize` and friends can
//! look at: the packet (or stream) payload, and the application-layer buffers Suricata
//! names with sticky-buffer keywords (`http.uri; content:...`), legacy content modifiers
//! (`content:...; http_uri;`) and pcre flags (`/.../U`).
//!
//! One table, [`BUFFERS`], says for every buffer its keywords, the application protocol
//! that fills it, which direction of the flow it comes from, and how far a transaction must
//! have progressed before the buffer is final. The parser reads the keywords from it; the
//! application-layer parsers fill the buffers; the engine uses direction and progress to
//! decide when a rule over the buffer is inspected.

use crate::applayer::{AppProto, Dir, Progress};

/// A buffer a match list inspects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub(crate) enum Buffer {
    /// The packet's payload, or for TCP (unless `flow:no_stream`) also the reassembled
    /// stream: what a rule without a sticky buffer inspects (`pkt_data` returns to it).
    Payload,
    /// `http.method`: the request method.
    HttpMethod,
    /// `http.uri`: the normalized request URI (percent-decoded, `/./` and `/../` resolved).
    HttpUri,
    /// `http.uri.raw`: the request URI as sent.
    HttpUriRaw,
    /// `http.protocol`: `HTTP/1.1` of the request line (and of the response line, to client).
    HttpProtocol,
    /// `http.request_line`: the whole request line, without its CRLF.
    HttpRequestLine,
    /// `http.host`: the Host header's host, lowercased, without the port.
    HttpHost,
    /// `http.host.raw`: the Host header's value as sent.
    HttpHostRaw,
    /// `http.user_agent`: the User-Agent header's value.
    HttpUserAgent,
    /// `http.cookie`: the Cookie (request) / Set-Cookie (response) header's value.
    HttpCookie,
    /// `http.header`: the headers of one direction, normalized as `Name: value\r\n` each,
    /// without the Cookie / Set-Cookie headers (as Suricata).
    HttpHeader,
    /// `http.header.raw`: the header block as sent.
    HttpHeaderRaw,
    /// `http.header_names`: `\r\nName1\r\nName2\r\n\r\n`.
    HttpHeaderNames,
    /// `http.content_type`: the Content-Type header's value.
    HttpContentType,
    /// `http.content_len`: the Content-Length header's value.
    HttpContentLen,
    /// `http.referer`: the Referer header's value.
    HttpReferer,
    /// `http.accept`: the Accept header's value.
    HttpAccept,
    /// `http.accept_enc`: the Accept-Encoding header's value.
    HttpAcceptEnc,
    /// `http.accept_lang`: the Accept-Language header's value.
    HttpAcceptLang,
    /// `http.connection`: the Connection header's value.
    HttpConnection,
    /// `http.server`: the Server (response) header's value.
    HttpServer,
    /// `http.location`: the Location (response) header's value.
    HttpLocation,
    /// `http.request_body`: the request body, de-chunked.
    HttpRequestBody,
    /// `http.stat_code`: the response status code (3 digits).
    HttpStatCode,
    /// `http.stat_msg`: the response reason phrase.
    HttpStatMsg,
    /// `http.response_line`: the whole status line, without its CRLF.
    HttpResponseLine,
    /// `http.response_body`: the response body, de-chunked and decompressed.
    HttpResponseBody,
    /// `file.data`: for HTTP the response body (to client) or the request body (to server),
    /// de-chunked and decompressed.
    FileData,
    /// `dns.query`: each query name of a DNS request (one buffer per question).
    DnsQuery,
    /// `tls.sni`: the server name of the ClientHello.
    TlsSni,
    /// `tls.cert_subject`: the subject of the server's first certificate (RFC 2253 form).
    TlsCertSubject,
    /// `tls.cert_issuer`: the issuer of the server's first certificate.
    TlsCertIssuer,
}

/// What the parser, the application-layer parsers and the engine know about a buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufferInfo {
    /// The buffer.
    pub buffer: Buffer,
    /// The sticky-buffer keywords selecting it (the dotted name first).
    pub sticky: &'static [&'static str],
    /// The legacy content modifiers moving the previous `content` into it.
    pub modifiers: &'static [&'static str],
    /// The pcre flag selecting it (`/.../U`), if any.
    pub pcre_flag: Option<char>,
    /// The application protocol that fills it (`None`: the payload).
    pub proto: Option<AppProto>,
    /// The direction it comes from (`None`: either, e.g. `file.data`, `http.protocol`).
    pub dir: Option<Dir>,
    /// How far the transaction must have got in that direction before the buffer is final.
    pub ready: Progress,
}

const fn http(
    buffer: Buffer,
    sticky: &'static [&'static str],
    modifiers: &'static [&'static str],
    pcre_flag: Option<char>,
    dir: Option<Dir>,
    ready: Progress,
) -> BufferInfo {
    BufferInfo {
        buffer,
        sticky,
        modifiers,
        pcre_flag,
        proto: Some(AppProto::Http),
        dir,
        ready,
    }
}

use Buffer as B;
use Dir::{ToClient as TC, ToServer as TS};
use Progress as P;

/// Every buffer but [`Buffer::Payload`], with its keywords.
pub(crate) const BUFFERS: &[BufferInfo] = &[
    http(
        B::HttpMethod,
        &["http.method"],
        &["http_method"],
        Some('M'),
        Some(TS),
        P::Line,
    ),
    http(
        B::HttpUri,
        &["http.uri"],
        &["http_uri"],
        Some('U'),
        Some(TS),
        P::Line,
    ),
    http(
        B::HttpUriRaw,
        &["http.uri.raw"],
        &["http_raw_uri"],
        Some('I'),
        Some(TS),
        P::Line,
    ),
    http(
        B::HttpProtocol,
        &["http.protocol", "http_protocol"],
        &[],
        None,
        None,
        P::Line,
    ),
    http(
        B::HttpRequestLine,
        &["http.request_line", "http_request_line"],
        &[],
        None,
        Some(TS),
        P::Line,
    ),
    http(
        B::HttpHost,
        &["http.host"],
        &["http_host"],
        Some('W'),
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpHostRaw,
        &["http.host.raw"],
        &["http_raw_host"],
        Some('Z'),
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpUserAgent,
        &["http.user_agent"],
        &["http_user_agent"],
        Some('V'),
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpCookie,
        &["http.cookie"],
        &["http_cookie"],
        Some('C'),
        None,
        P::Headers,
    ),
    http(
        B::HttpHeader,
        &["http.header"],
        &["http_header"],
        Some('H'),
        None,
        P::Headers,
    ),
    http(
        B::HttpHeaderRaw,
        &["http.header.raw"],
        &["http_raw_header"],
        Some('D'),
        None,
        P::Headers,
    ),
    http(
        B::HttpHeaderNames,
        &["http.header_names"],
        &[],
        None,
        None,
        P::Headers,
    ),
    http(
        B::HttpContentType,
        &["http.content_type"],
        &[],
        None,
        None,
        P::Headers,
    ),
    http(
        B::HttpContentLen,
        &["http.content_len"],
        &[],
        None,
        None,
        P::Headers,
    ),
    http(
        B::HttpReferer,
        &["http.referer"],
        &[],
        None,
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpAccept,
        &["http.accept"],
        &[],
        None,
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpAcceptEnc,
        &["http.accept_enc"],
        &[],
        None,
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpAcceptLang,
        &["http.accept_lang"],
        &[],
        None,
        Some(TS),
        P::Headers,
    ),
    http(
        B::HttpConnection,
        &["http.connection"],
        &[],
        None,
        None,
        P::Headers,
    ),
    http(
        B::HttpServer,
        &["http.server"],
        &[],
        None,
        Some(TC),
        P::Headers,
    ),
    http(
        B::HttpLocation,
        &["http.location"],
        &[],
        None,
        Some(TC),
        P::Headers,
    ),
    http(
        B::HttpRequestBody,
        &["http.request_body", "http_client_body"],
        &["http_client_body"],
        Some('P'),
        Some(TS),
        P::Complete,
    ),
    http(
        B::HttpStatCode,
        &["http.stat_code"],
        &["http_stat_code"],
        Some('S'),
        Some(TC),
        P::Line,
    ),
    http(
        B::HttpStatMsg,
        &["http.stat_msg"],
        &["http_stat_msg"],
        Some('Y'),
        Some(TC),
        P::Line,
    ),
    http(
        B::HttpResponseLine,
        &["http.response_line", "http_response_line"],
        &[],
        None,
        Some(TC),
        P::Line,
    ),
    http(
        B::HttpResponseBody,
        &["http.response_body"],
        &["http_server_body"],
        None,
        Some(TC),
        P::Complete,
    ),
    http(
        B::FileData,
        &["file.data", "file_data"],
        &[],
        Some('Q'),
        None,
        P::Complete,
    ),
    BufferInfo {
        buffer: B::DnsQuery,
        sticky: &["dns.query", "dns_query"],
        modifiers: &[],
        pcre_flag: None,
        proto: Some(AppProto::Dns),
        dir: Some(TS),
        ready: P::Complete,
    },
    BufferInfo {
        buffer: B::TlsSni,
        sticky: &["tls.sni", "tls_sni"],
        modifiers: &[],
        pcre_flag: None,
        proto: Some(AppProto::Tls),
        dir: Some(TS),
        ready: P::Complete,
    },
    BufferInfo {
        buffer: B::TlsCertSubject,
        sticky: &["tls.cert_subject", "tls_cert_subject"],
        modifiers: &[],
        pcre_flag: None,
        proto: Some(AppProto::Tls),
        dir: Some(TC),
        ready: P::Complete,
    },
    BufferInfo {
        buffer: B::TlsCertIssuer,
        sticky: &["tls.cert_issuer", "tls_cert_issuer"],
        modifiers: &[],
        pcre_flag: None,
        proto: Some(AppProto::Tls),
        dir: Some(TC),
        ready: P::Complete,
    },
];

impl Buffer {
    /// The table entry of a buffer (`None` for [`Buffer::Payload`]).
    pub(crate) fn info(self) -> Option<&'static BufferInfo> {
        BUFFERS.iter().find(|i| i.buffer == self)
    }

    /// The buffer a sticky-buffer keyword selects.
    pub(crate) fn from_sticky(kw: &str) -> Option<Buffer> {
        if kw == "pkt_data" {
            return Some(Buffer::Payload);
        }
        BUFFERS
            .iter()
            .find(|i| i.sticky.contains(&kw))
            .map(|i| i.buffer)
    }

    /// The buffer a legacy content modifier moves its content into.
    pub(crate) fn from_modifier(kw: &str) -> Option<Buffer> {
        BUFFERS
            .iter()
            .find(|i| i.modifiers.contains(&kw))
            .map(|i| i.buffer)
    }

    /// The buffer a pcre flag selects.
    pub(crate) fn from_pcre_flag(f: char) -> Option<Buffer> {
        BUFFERS
            .iter()
            .find(|i| i.pcre_flag == Some(f))
            .map(|i| i.buffer)
    }

    /// The dotted keyword naming the buffer (`pkt_data` for the payload).
    pub(crate) fn name(self) -> &'static str {
        self.info().map_or("pkt_data", |i| i.sticky[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for i in BUFFERS {
            for k in i.sticky {
                assert!(seen.insert(*k), "{k} twice");
                assert_eq!(Buffer::from_sticky(k), Some(i.buffer));
            }
            for k in i.modifiers {
                assert_eq!(Buffer::from_modifier(k), Some(i.buffer));
            }
            if let Some(f) = i.pcre_flag {
                assert_eq!(Buffer::from_pcre_flag(f), Some(i.buffer));
            }
        }
        assert_eq!(Buffer::from_sticky("pkt_data"), Some(Buffer::Payload));
    }
}
