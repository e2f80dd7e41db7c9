//! Request URI normalization as Suricata configures libhtp by default (personality `IDS`
//! with Suricata's overrides: no lowercasing, `+` left alone, no double decoding), so that
//! `http.uri` holds what Suricata's holds. Checked against Suricata 7.0.10 on crafted
//! captures; the rules, in order:
//!
//! 1. Split (libhtp 0.5): a URI not starting with `/` that has a `:` has a scheme (up to the
//!    first `:`); after a scheme, `//` (not `///`) starts an authority running to the first
//!    `/`, `?` or `#`, holding optional `userinfo@` and `host[:port]`. The path runs to the
//!    first `?` or `#`, the query from `?` to `#`, the fragment after `#`. `CONNECT`'s URI
//!    is an authority only.
//! 2. Path: `%XX` decoded (also `%2F` and `%5C`); `%uXXXX` (either case of `u`) decoded to
//!    one byte (`%u00XX` to `XX`, others by the Windows-1252 best-fit map, else `?`); an
//!    invalid `%` sequence is kept as is; `\` becomes `/`; runs of `/` become one `/`. Then
//!    the bytes are read as UTF-8 (overlong forms allowed) and each character becomes one
//!    byte by the best-fit map, invalid bytes `?`. Then `.` and `..` segments are removed
//!    (RFC 3986 5.2.4 as libhtp does it: a trailing `/.` or `/..` leaves no slash).
//! 3. Query and fragment: `%XX` and `%uXXXX` decoded the same way, nothing else.
//! 4. `http.uri` is path, then `?query` if there was a `?`, then `#fragment` if there was a
//!    `#` (scheme and authority left out). It is present, possibly empty, for every URI.
//! 5. The host of an authority is percent-decoded, lowercased, trailing dots removed; it
//!    is `http.host` and `http.host.raw` (over the Host header).
//!
//! Everything here works on borrowed input and writes into a fresh vector bounded by the
//! input's length (decoding never lengthens); no panics on any bytes.

use super::bestfit::{REPLACEMENT, bestfit};

/// A normalized request URI.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct NormUri {
    /// `http.uri`.
    pub(super) uri: Vec<u8>,
    /// The authority's host, normalized (absolute URIs and `CONNECT`).
    pub(super) host: Option<Vec<u8>>,
}

/// The raw parts of a URI.
#[derive(Debug, Default, PartialEq, Eq)]
struct Parts<'a> {
    host: Option<&'a [u8]>,
    path: &'a [u8],
    query: Option<&'a [u8]>,
    fragment: Option<&'a [u8]>,
}

/// Splits `uri` as libhtp 0.5 does (rule 1 of the module docs).
fn split(uri: &[u8], connect: bool) -> Parts<'_> {
    if connect {
        return Parts {
            host: Some(hostport(uri).0),
            ..Parts::default()
        };
    }
    let mut rest = uri;
    let mut host = None;
    if uri.first() != Some(&b'/')
        && let Some(colon) = memchr::memchr(b':', uri)
    {
        rest = uri.get(colon + 1..).unwrap_or_default();
        if rest.starts_with(b"//") && rest.get(2) != Some(&b'/') {
            let auth_all = rest.get(2..).unwrap_or_default();
            let end = auth_all
                .iter()
                .position(|&c| matches!(c, b'/' | b'?' | b'#'))
                .unwrap_or(auth_all.len());
            let (auth, after) = auth_all.split_at(end);
            let hp = match memchr::memchr(b'@', auth) {
                Some(at) => auth.get(at + 1..).unwrap_or_default(),
                None => auth,
            };
            host = Some(hostport(hp).0);
            rest = after;
        }
    }
    let end = rest
        .iter()
        .position(|&c| c == b'?' || c == b'#')
        .unwrap_or(rest.len());
    let (path, mut rest) = rest.split_at(end);
    let mut query = None;
    if let Some(q) = rest.strip_prefix(b"?") {
        let end = memchr::memchr(b'#', q).unwrap_or(q.len());
        let (qv, r) = q.split_at(end);
        query = Some(qv);
        rest = r;
    }
    let fragment = rest.strip_prefix(b"#");
    Parts {
        host,
        path,
        query,
        fragment,
    }
}

/// Splits `host[:port]` (or `[v6]:port`) into host and port; the host may be empty.
pub(super) fn hostport(s: &[u8]) -> (&[u8], Option<&[u8]>) {
    if s.first() == Some(&b'[') {
        if let Some(close) = memchr::memchr(b']', s) {
            let (h, rest) = s.split_at(close + 1);
            return (h, rest.strip_prefix(b":"));
        }
        return (s, None);
    }
    match memchr::memchr(b':', s) {
        Some(c) => (
            s.get(..c).unwrap_or_default(),
            Some(s.get(c + 1..).unwrap_or_default()),
        ),
        None => (s, None),
    }
}

/// The value of an ASCII hex digit.
fn hex(c: u8) -> Option<u8> {
    char::from(c)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Decodes one `%` escape at the start of `s` (which begins after the `%`): the byte it
/// stands for and how many bytes after the `%` it used, or `None` if it is invalid.
fn escape(s: &[u8]) -> Option<(u8, usize)> {
    match s {
        [b'u' | b'U', a, b, c, d, ..] => {
            let hi = hex(*a)? << 4 | hex(*b)?;
            let lo = hex(*c)? << 4 | hex(*d)?;
            let b = if hi == 0 {
                lo
            } else {
                bestfit(u32::from(hi) << 8 | u32::from(lo))
            };
            Some((b, 5))
        }
        [b'u' | b'U', ..] => None,
        [a, b, ..] => Some((hex(*a)? << 4 | hex(*b)?, 2)),
        _ => None,
    }
}

/// Percent-decodes `s` into `out` (rule 2's first step when `path`, rule 3 otherwise).
fn decode(s: &[u8], path: bool, out: &mut Vec<u8>) {
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        let mut b = c;
        i += 1;
        if c == b'%'
            && let Some((d, used)) = escape(s.get(i..).unwrap_or_default())
        {
            b = d;
            i += used;
        }
        if path {
            if b == b'\\' {
                b = b'/';
            }
            if b == b'/' && out.last() == Some(&b'/') {
                continue;
            }
        }
        out.push(b);
    }
}

/// Character classes of Hoehrmann's UTF-8 DFA with overlong forms allowed (libhtp's
/// `utf8d_allow_overlong`). Copyright (c) 2008-2009 Bjoern Hoehrmann, MIT licence.
fn utf8_class(b: u8) -> u8 {
    match b {
        0x00..=0x7f => 0,
        0x80..=0x8f => 1,
        0x90..=0x9f => 9,
        0xa0..=0xbf => 7,
        0xc0..=0xdf => 2,
        0xed => 4,
        0xe0..=0xef => 3,
        0xf0..=0xf3 => 6,
        0xf4 => 5,
        0xf5..=0xff => 8,
    }
}

/// Transitions of the same DFA: `UTF8_NEXT[state * 16 + class]`; 0 accepts, 1 rejects.
const UTF8_NEXT: [u8; 144] = [
    0, 1, 2, 3, 5, 8, 7, 1, 1, 1, 4, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 3, 1, 3, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 3, 1, 3, 1, 1, 1, 1, 1, 1,
    1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
];

/// Replaces each UTF-8 character of `s` by one byte (rule 2's second step), as libhtp's
/// `decode_and_validate_inplace` with best-fit conversion on.
fn utf8_bestfit(s: &[u8], out: &mut Vec<u8>) {
    let (mut state, mut seq, mut cp) = (0u8, 0usize, 0u32);
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        let class = utf8_class(b);
        seq += 1;
        cp = if state != 0 {
            u32::from(b & 0x3f) | cp << 6
        } else {
            (0xffu32 >> class) & u32::from(b)
        };
        state = UTF8_NEXT
            .get(usize::from(state) * 16 + usize::from(class))
            .copied()
            .unwrap_or(1);
        match state {
            0 => {
                out.push(if seq == 1 { b } else { bestfit(cp) });
                seq = 0;
            }
            1 => {
                out.push(REPLACEMENT);
                state = 0;
                cp = 0;
                // A byte that broke a sequence may start the next character: read it again.
                if seq != 1 {
                    seq = 0;
                    continue;
                }
                seq = 0;
            }
            _ if i + 1 == s.len() => {
                out.extend(std::iter::repeat_n(REPLACEMENT, seq.saturating_sub(1)));
            }
            _ => {}
        }
        i += 1;
    }
}

/// Removes `.` and `..` segments in place, exactly as libhtp's
/// `normalize_uri_path_inplace` (a state machine over the bytes).
fn remove_dots(s: &mut Vec<u8>) {
    #[derive(Clone, Copy)]
    enum St {
        Start,
        Dot,
        TwoDot,
        Slash,
        SlashDot,
        SlashDotDot,
        SlashDotDotSlash,
        Regular,
    }
    // Pops the last segment and its slash from the output.
    fn pop_segment(out: &mut Vec<u8>) {
        while out.last().is_some_and(|&c| c != b'/') {
            out.pop();
        }
        out.pop();
    }
    let input = std::mem::take(s);
    let out = s;
    let mut st = St::Start;
    for &c in &input {
        st = match (st, c) {
            (St::Start, b'.') => St::Dot,
            (St::Start, b'/') => St::Slash,
            (St::Dot, b'.') => St::TwoDot,
            (St::Dot | St::TwoDot, b'/') => St::Start,
            (St::Slash | St::SlashDotDotSlash, b'.') => St::SlashDot,
            (St::SlashDot, b'/') => St::SlashDotDotSlash,
            (St::SlashDot, b'.') => St::SlashDotDot,
            (St::SlashDotDot, b'/') => {
                pop_segment(out);
                St::SlashDotDotSlash
            }
            (St::Regular, b'/') => St::Slash,
            (st, c) => {
                let pending: &[u8] = match st {
                    St::Dot => b".",
                    St::TwoDot => b"..",
                    St::Slash | St::SlashDotDotSlash => b"/",
                    St::SlashDot => b"/.",
                    St::SlashDotDot => b"/..",
                    St::Start | St::Regular => b"",
                };
                out.extend_from_slice(pending);
                out.push(c);
                St::Regular
            }
        };
    }
    match st {
        St::Slash => out.push(b'/'),
        St::SlashDotDot => pop_segment(out),
        _ => {}
    }
}

/// Normalizes a request URI (all rules of the module docs). `connect` says the method is
/// `CONNECT`.
pub(super) fn normalize(raw: &[u8], connect: bool) -> NormUri {
    let parts = split(raw, connect);
    let mut tmp = Vec::with_capacity(parts.path.len());
    decode(parts.path, true, &mut tmp);
    let mut uri = Vec::with_capacity(raw.len());
    utf8_bestfit(&tmp, &mut uri);
    remove_dots(&mut uri);
    if let Some(q) = parts.query {
        uri.push(b'?');
        decode(q, false, &mut uri);
    }
    if let Some(f) = parts.fragment {
        uri.push(b'#');
        decode(f, false, &mut uri);
    }
    let host = parts.host.map(|h| {
        let mut v = Vec::with_capacity(h.len());
        decode(h, false, &mut v);
        v.make_ascii_lowercase();
        while v.last() == Some(&b'.') {
            v.pop();
        }
        v
    });
    NormUri { uri, host }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &[u8]) -> Vec<u8> {
        normalize(s, false).uri
    }

    #[test]
    fn matches_suricata_on_crafted_uris() {
        // Each pair was read back from Suricata 7.0.10 (pcre capture of http.uri).
        let cases: &[(&[u8], &[u8])] = &[
            (
                b"/Foo/Bar%41/./x/../y\\z//w?Q=%41+b#Fr",
                b"/Foo/BarA/y/z/w?Q=A+b#Fr",
            ),
            (
                b"/%u0041b/caf\xc3\xa9/%uff41/%2fa%5cb/%zz/%4",
                b"/Ab/caf\xe9/a/a/b/%zz/%4",
            ),
            (
                b"/a\xffb/%c3%a9/%u00e9/%u0100/%uD83D/x/../../../up/./",
                b"/a?b/\xe9/?/up",
            ),
            (b"http://Host.A", b""),
            (b"*", b"*"),
            (b"index.php?a=b:c", b"c"),
            (b"http://u@h.c:8/p%41?e=a@b#f%41%2f", b"/pA?e=a@b#fA/"),
            (b"/a/..%2f..%2fb/%2e%2e/c/.../d?", b"/c/.../d?"),
            (b"../x/./y", b"x/y"),
            (b"/sp%20a%00b%u002f%U0041", b"/sp a\0b/A"),
            (b"//etc//passwd", b"/etc/passwd"),
        ];
        for (raw, want) in cases {
            assert_eq!(norm(raw), want.to_vec(), "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn authority_host_is_decoded_lowercased_without_trailing_dots() {
        let n = normalize(b"HTTP://us:pw@Ex%41mple.ORG..:81/x", false);
        assert_eq!(n.host.as_deref(), Some(&b"example.org"[..]));
        assert_eq!(n.uri, b"/x");
        assert_eq!(
            normalize(b"Ex.com:443", true).host.as_deref(),
            Some(&b"ex.com"[..])
        );
        assert_eq!(
            normalize(b"[::1]:8080", true).host.as_deref(),
            Some(&b"[::1]"[..])
        );
        assert_eq!(normalize(b"/x", false).host, None);
    }

    #[test]
    fn dot_segments_follow_libhtp() {
        for (i, o) in [
            (&b"/a/b/../c"[..], &b"/a/c"[..]),
            (b"/a/./b/.", b"/a/b"),
            (b"/a/b/..", b"/a"),
            (b"/..", b""),
            (b"./a", b"a"),
            (b".", b""),
            (b"/a/", b"/a/"),
            (b"/.a/..b/", b"/.a/..b/"),
        ] {
            let mut v = i.to_vec();
            remove_dots(&mut v);
            assert_eq!(v, o, "{}", String::from_utf8_lossy(i));
        }
    }

    #[test]
    fn utf8_invalid_and_truncated_sequences_become_replacements() {
        let mut out = Vec::new();
        utf8_bestfit(b"\xf1.\xf1\xef\xbd\x9dabcd", &mut out);
        assert_eq!(out, b"?.?}abcd");
        for (i, o) in [
            (&b"\xf0\x90\x8d\xff"[..], &b"??"[..]),
            (b"\xe2\x82", b"?"),
            (b"\xc2\xff\xf0", b"??"),
            (b"\xc0\xaf", b"/"),
        ] {
            out.clear();
            utf8_bestfit(i, &mut out);
            assert_eq!(out, o);
        }
    }
}
