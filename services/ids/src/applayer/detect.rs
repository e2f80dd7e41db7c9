//! Protocol detection from the first bytes of each direction of a flow (and its ports), as
//! Suricata's `app-layer-detect-proto.c` does it: patterns at offset 0 that say HTTP or TLS
//! on any port, then probing parsers registered on a port (DNS on 53, SSLv2 on 443).
//!
//! What is recognised, and how it follows Suricata 7/8 with its default `suricata.yaml`:
//! - HTTP/1.x (TCP): to server, a request method of `HTPRegisterPatternsForProtocolDetection`
//!   (`GET`, `POST`, ... `BASELINE-CONTROL`) followed by a space or a tab, case-insensitive, at
//!   offset 0; to client, `HTTP/0.9`, `HTTP/1.0` or `HTTP/1.1` (case-insensitive) at offset 0.
//! - TLS (TCP): the patterns of `SSLRegisterPatternsForProtocolDetection`: to server a record
//!   header `16 03 0x` (handshake) or `01 03 0x` with `x <= 3`, or an SSLv2 ClientHello
//!   (`01 00 02` at offset 2 with the high bit of byte 0 set); to client `15|16|17 03 0x`.
//!   Suricata checks no more than these three bytes (it does not look for a ClientHello in the
//!   record), and neither does this, so the two agree on what is TLS. On server port 443 the
//!   SSLv2 probe alone (high bit of byte 0, byte 2 = 1) also says TLS, as Suricata's probing
//!   parser registered for `dp: 443` does.
//! - DNS (UDP and TCP): only when the flow's server port is 53 (Suricata's default
//!   `detection-ports: dp: 53`; the probing parser is not run on other ports). A UDP datagram,
//!   or a TCP stream after its 2-byte length prefix, is DNS when its header is plausible as
//!   Suricata's `probe_header_validity` (8.0) judges it (records counts fit the length, a
//!   request has a question, a message with no records is exactly a header) and, when the
//!   whole message is there, its questions and answers parse.
//!
//! Bounds: detection never needs more than [`DETECT_MAX_LEN`] bytes of a direction:
//! [`Detection::NeedMore`] is only returned for shorter input, so a caller that hands the
//! first bytes of a stream buffers at most that many. For UDP each datagram is judged alone:
//! `NeedMore` there means "too short to say, try the next datagram", as Suricata retries a
//! probe that did not fail. No allocation; no panic on any input (slices by `get`).

use super::dns::wire;
use super::{AppProto, Dir};

/// The most bytes of one direction detection looks at: the longest request method pattern,
/// `BASELINE-CONTROL ` (17 bytes). Past this length the answer is final.
#[cfg(test)]
pub(crate) const DETECT_MAX_LEN: usize = 17;

/// The port DNS is probed on (the flow's server port), as Suricata's default configuration.
pub(crate) const DNS_PORT: u16 = 53;

/// The port on which an SSLv2-style record header alone says TLS (Suricata's `dp: 443`).
pub(crate) const TLS_PORT: u16 = 443;

/// The outcome of [`detect`] on the bytes seen so far in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detection {
    /// The flow speaks this protocol.
    Proto(AppProto),
    /// The bytes are a prefix of something that could still be recognised: call again with
    /// more of the direction's first bytes (TCP) or with the next datagram (UDP).
    NeedMore,
    /// None of the protocols here: detection of this direction is over.
    NotThis,
}

/// HTTP request methods Suricata's HTTP pattern set knows (`app-layer-htp.c`), each of which
/// must be followed by a space or a tab.
pub(crate) const HTTP_METHODS: &[&[u8]] = &[
    b"GET",
    b"PUT",
    b"POST",
    b"HEAD",
    b"TRACE",
    b"OPTIONS",
    b"CONNECT",
    b"DELETE",
    b"PATCH",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
    b"LOCK",
    b"UNLOCK",
    b"CHECKOUT",
    b"UNCHECKOUT",
    b"CHECKIN",
    b"UPDATE",
    b"LABEL",
    b"REPORT",
    b"MKWORKSPACE",
    b"MKACTIVITY",
    b"MERGE",
    b"INVALID",
    b"VERSION-CONTROL",
    b"BASELINE-CONTROL",
];

/// The response versions Suricata's HTTP pattern set knows for the direction to the client.
const HTTP_VERSIONS: &[&[u8]] = &[b"HTTP/0.9", b"HTTP/1.0", b"HTTP/1.1"];

/// Detects the application protocol of one direction of a flow from its first bytes.
///
/// `data` is the start of the direction's byte stream (TCP: as many of its first bytes as
/// are in, at least [`DETECT_MAX_LEN`] once available) or one datagram (UDP, `udp = true`).
/// `sport` and `dport` are the ports of the packets carrying `data` (so for
/// [`Dir::ToClient`] the server's port is `sport`).
pub(crate) fn detect(dir: Dir, data: &[u8], udp: bool, sport: u16, dport: u16) -> Detection {
    let server_port = match dir {
        Dir::ToServer => dport,
        Dir::ToClient => sport,
    };
    if udp {
        return if server_port == DNS_PORT {
            dns_udp(data)
        } else {
            Detection::NotThis
        };
    }
    // Suricata runs its pattern matcher (HTTP, TLS) first and its port probes after; a
    // pattern that still needs bytes does not stop a probe that already knows.
    first_of([
        http(dir, data),
        tls(dir, data, server_port),
        if server_port == DNS_PORT {
            dns_tcp(data)
        } else {
            Detection::NotThis
        },
    ])
}

/// The first protocol found among `answers`, else `NeedMore` if any needs more bytes,
/// else `NotThis`.
fn first_of(answers: impl IntoIterator<Item = Detection>) -> Detection {
    let mut more = false;
    for a in answers {
        match a {
            Detection::Proto(p) => return Detection::Proto(p),
            Detection::NeedMore => more = true,
            Detection::NotThis => {}
        }
    }
    if more {
        Detection::NeedMore
    } else {
        Detection::NotThis
    }
}

/// Compares `data` with `pattern` case-insensitively at offset 0: `Proto` if `data` starts
/// with it, `NeedMore` if `data` is a shorter prefix of it.
fn prefix_ci(data: &[u8], pattern: &[u8]) -> Detection {
    let n = data.len().min(pattern.len());
    match (data.get(..n), pattern.get(..n)) {
        (Some(d), Some(p)) if d.eq_ignore_ascii_case(p) => {
            if n == pattern.len() {
                Detection::Proto(AppProto::Http)
            } else {
                Detection::NeedMore
            }
        }
        _ => Detection::NotThis,
    }
}

/// The HTTP patterns: a method and a space or tab to server, a version to client.
fn http(dir: Dir, data: &[u8]) -> Detection {
    match dir {
        // A method counts only when a space or a tab follows it.
        Dir::ToServer => first_of(HTTP_METHODS.iter().map(|m| match prefix_ci(data, m) {
            Detection::Proto(p) => match data.get(m.len()) {
                Some(b' ' | b'\t') => Detection::Proto(p),
                Some(_) => Detection::NotThis,
                None => Detection::NeedMore,
            },
            other => other,
        })),
        Dir::ToClient => first_of(HTTP_VERSIONS.iter().map(|v| prefix_ci(data, v))),
    }
}

/// The TLS patterns (record type, major version 3, minor version 0 to 3) and the SSLv2
/// ClientHello probe.
fn tls(dir: Dir, data: &[u8], server_port: u16) -> Detection {
    let types: &[u8] = match dir {
        Dir::ToServer => &[0x16, 0x01],
        Dir::ToClient => &[0x15, 0x16, 0x17],
    };
    // The three-byte record patterns, matched as far as `data` goes.
    let record = match (data.first(), data.get(1), data.get(2)) {
        (Some(t), _, _) if !types.contains(t) => Detection::NotThis,
        (_, Some(&v), _) if v != 3 => Detection::NotThis,
        (_, _, Some(&m)) if m > 3 => Detection::NotThis,
        (Some(_), Some(_), Some(_)) => Detection::Proto(AppProto::Tls),
        _ => Detection::NeedMore,
    };
    if record != Detection::NotThis || dir == Dir::ToClient {
        return record;
    }
    // SSLv2 ClientHello: 2-byte record length with the high bit set, message type 1 (client
    // hello), version 0x0002. The pattern `01 00 02` at offset 2 confirmed by Suricata's
    // probing parser (`input[0] & 0x80 && input[2] == 0x01`); on port 443 the probe alone.
    let sslv2 = |d: &[u8]| match (d.first(), d.get(2)) {
        (Some(b0), Some(1)) => b0 & 0x80 != 0,
        _ => false,
    };
    if data.len() < 3 {
        return if data.first().is_some_and(|b0| b0 & 0x80 != 0) {
            Detection::NeedMore
        } else {
            Detection::NotThis
        };
    }
    if !sslv2(data) {
        return Detection::NotThis;
    }
    if server_port == TLS_PORT {
        return Detection::Proto(AppProto::Tls);
    }
    match data.get(2..5) {
        Some([1, 0, 2]) => Detection::Proto(AppProto::Tls),
        Some(_) => Detection::NotThis,
        None if data.get(3).is_none_or(|&b| b == 0) => Detection::NeedMore,
        None => Detection::NotThis,
    }
}

/// DNS over UDP: one datagram, judged alone.
fn dns_udp(data: &[u8]) -> Detection {
    if data.len() < wire::HEADER_LEN {
        return Detection::NeedMore;
    }
    if wire::probe(data, data.len()) {
        return Detection::Proto(AppProto::Dns);
    }
    // Suricata masks the probe off only once it failed on more than a header's worth.
    if data.len() > wire::HEADER_LEN {
        Detection::NotThis
    } else {
        Detection::NeedMore
    }
}

/// DNS over TCP: a 2-byte length, then a message (judged on its header while incomplete).
fn dns_tcp(data: &[u8]) -> Detection {
    const MIN: usize = wire::HEADER_LEN + 2;
    let (Some(len), Some(msg)) = (data.first_chunk::<2>(), data.get(2..)) else {
        return Detection::NeedMore;
    };
    let len = usize::from(u16::from_be_bytes(*len));
    if data.len() < MIN {
        return Detection::NeedMore;
    }
    if wire::probe(msg, len) {
        return Detection::Proto(AppProto::Dns);
    }
    if data.len() > MIN {
        Detection::NotThis
    } else {
        Detection::NeedMore
    }
}

#[cfg(test)]
mod tests;
