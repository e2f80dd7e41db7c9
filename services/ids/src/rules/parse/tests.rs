//! Tests of the rule parser: every keyword, every refusal, the variables.

use super::*;
use crate::rules::bytes::{ByteOp, Encoding, JumpFrom, UintMode};

fn ctx_rule(s: &str) -> Result<Rule, PErr> {
    let mut vars = BTreeMap::new();
    vars.insert(
        "HOME_NET".to_string(),
        "[10.0.0.0/8,192.168.0.0/16]".to_string(),
    );
    vars.insert("EXTERNAL_NET".to_string(), "!$HOME_NET".to_string());
    vars.insert("HTTP_PORTS".to_string(), "[80,8080:8090]".to_string());
    let classes = Classes::default();
    parse_rule(
        s,
        &Arc::from("t.rules"),
        1,
        &Ctx {
            vars: &vars,
            classes: &classes,
        },
    )
}

#[test]
fn content_hex_and_escapes() {
    assert_eq!(content_bytes("a|0d 0A|b").unwrap(), b"a\r\nb");
    assert_eq!(content_bytes("|00|").unwrap(), b"\0");
    assert_eq!(content_bytes(r#"a\"b\;c\\"#).unwrap(), b"a\"b;c\\");
    assert!(content_bytes("|0|").is_err());
    assert!(content_bytes("|00").is_err());
    assert!(content_bytes("|zz|").is_err());
}

#[test]
fn addresses_with_vars_and_negation() {
    let r = ctx_rule("alert ip $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS (sid:1;)").unwrap();
    let k = |s: &str| ip_key(s.parse().unwrap());
    assert!(r.src.eval(&|n| n.contains(k("8.8.8.8"))));
    assert!(!r.src.eval(&|n| n.contains(k("10.1.2.3"))));
    assert!(r.dst.eval(&|n| n.contains(k("192.168.1.1"))));
    assert!(!r.dst.eval(&|n| n.contains(k("2001:db8::1"))));
    assert!(port_match(&r.dport, Some(8085)));
    assert!(!port_match(&r.dport, Some(81)));
    let r = ctx_rule("alert ip [10.0.0.0/8,!10.1.0.0/16] any -> [2001:db8::/32] !1:1023 (sid:1;)")
        .unwrap();
    assert!(r.src.eval(&|n| n.contains(k("10.2.0.1"))));
    assert!(!r.src.eval(&|n| n.contains(k("10.1.0.1"))));
    assert!(r.dst.eval(&|n| n.contains(k("2001:db8::5"))));
    assert!(port_match(&r.dport, Some(1024)));
    assert!(!port_match(&r.dport, Some(22)));
}

#[test]
fn pcre_translation_and_refusals() {
    assert!(parse_pcre(r#""/^GET \/admin/i""#).is_ok());
    // R (relative), buffer flags, B (raw bytes) and O (match limit) are understood.
    let p = parse_pcre(r#""/abc/RU""#).unwrap();
    assert!(p.relative && p.buffer == Some(Buffer::HttpUri));
    let p = parse_pcre(r#""/abc/BO""#).unwrap();
    assert!(!p.relative && p.buffer.is_none());
    assert!(parse_pcre(r#""/Host/Wi""#).is_ok());
    // PCRE's `$` also matches before a final newline (not with E, not inside a class).
    let p = parse_pcre(r#""/abc$/""#).unwrap();
    assert!(p.re.is_match(b"abc\n") && p.re.is_match(b"abc") && !p.re.is_match(b"abc\nx"));
    assert!(!parse_pcre(r#""/abc$/E""#).unwrap().re.is_match(b"abc\n"));
    assert!(parse_pcre(r#""/a[$]b\$/""#).unwrap().re.is_match(b"a$b$"));
    // Quotes are optional, as in Suricata.
    let p = parse_pcre("/one/U").unwrap();
    assert!(p.re.is_match(b"xoney") && p.buffer == Some(Buffer::HttpUri));
    assert!(parse_pcre("!/one/").unwrap().negated);
    assert!(parse_pcre(r#"!"/a.b/smx""#).unwrap().negated);
    for (p, why) in [
        (r#""/(a)\1/""#, "backreference"),
        (r#""/a(?=b)/""#, "lookahead"),
        (r#""/(?<!a)b/""#, "lookbehind"),
        (r#""/(?>ab)/""#, "atomic"),
        (r#""/a++/""#, "possessive"),
        (r#""/abc/A""#, "`A`"),
        (r#""/abc/L""#, "`L`"),
        (r#""/abc/G""#, "`G`"),
        (r#""/abc/UH""#, "second buffer"),
        (r#""/Host/W""#, "lowercase"),
        (r#""/(a+)/,flow:x""#, "captures"),
    ] {
        let e = parse_pcre(p).unwrap_err();
        assert!(e.contains(why), "{p}: {e}");
    }
    // A class may hold what would be a backreference outside it: PCRE reads `[\1]` as
    // the octal escape of byte 1, and so does the translation.
    let p = parse_pcre(r#""/[\1]/""#).unwrap();
    assert!(p.re.is_match(b"a\x01b") && !p.re.is_match(b"1"));
    // Octal escapes outside a class too (`\0`, `\012`); `\1` there stays refused above.
    let p = parse_pcre(r#""/a\0b\012/""#).unwrap();
    assert!(p.re.is_match(b"a\0b\n") && !p.re.is_match(b"a0b12"));
}

#[test]
fn cmp_and_flags() {
    assert_eq!(parse_cmp("<5").unwrap(), Cmp::Lt(5));
    assert_eq!(parse_cmp(">=5").unwrap(), Cmp::Ge(5));
    assert_eq!(parse_cmp("3<>9").unwrap(), Cmp::Between(3, 9));
    assert_eq!(parse_cmp("!7").unwrap(), Cmp::Ne(7));
    assert_eq!(parse_cmp("64").unwrap(), Cmp::Eq(64));
    let f = parse_flags("S,CE").unwrap();
    assert!(f.test(0x02) && f.test(0xc2) && !f.test(0x12));
    assert!(parse_flags("+SA").unwrap().test(0x1a));
    assert!(parse_flags("*SF").unwrap().test(0x01));
    assert!(!parse_flags("!R").unwrap().test(0x14));
    assert!(parse_flags("0").unwrap().test(0));
}

/// The error a rule gives: (keyword, message).
fn err(s: &str) -> (String, String) {
    match ctx_rule(s) {
        Ok(_) => panic!("accepted: {s}"),
        Err((k, m)) => (k.unwrap_or_default(), m),
    }
}

/// `alert tcp any any -> any any (OPTS sid:1;)`.
fn opts(o: &str) -> Rule {
    ctx_rule(&format!("alert tcp any any -> any any ({o} sid:1;)"))
        .unwrap_or_else(|e| panic!("{o}: {e:?}"))
}

fn opts_err(o: &str) -> (String, String) {
    err(&format!("alert tcp any any -> any any ({o} sid:1;)"))
}

/// The lists as (buffer, contents' patterns) for compact assertions.
fn shape(r: &Rule) -> Vec<(Buffer, Vec<String>)> {
    r.lists
        .iter()
        .map(|l| {
            let items = l
                .items
                .iter()
                .map(|it| match it {
                    Item::Content(c) => String::from_utf8_lossy(&c.pat).into_owned(),
                    Item::Pcre(p) => format!("pcre{}", p.index),
                    Item::IsDataAt(_) => "isdataat".into(),
                    Item::ByteTest(_) => "byte_test".into(),
                    Item::ByteJump(_) => "byte_jump".into(),
                    Item::ByteExtract(_) => "byte_extract".into(),
                    Item::Bsize(b) if b.urilen => "urilen".into(),
                    Item::Bsize(_) => "bsize".into(),
                })
                .collect();
            (l.buffer, items)
        })
        .collect()
}

fn content(r: &Rule, list: usize, item: usize) -> &Content {
    match &r.lists[list].items[item] {
        Item::Content(c) => c,
        other => panic!("not a content: {other:?}"),
    }
}

fn v(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn sticky_buffers_select_lists() {
    let r = opts(
        r#"content:"a"; http.uri; content:"b"; pkt_data; content:"c"; http.uri; content:"d";"#,
    );
    assert_eq!(
        shape(&r),
        [
            (Buffer::Payload, v(&["a", "c"])),
            (Buffer::HttpUri, v(&["b", "d"])),
        ]
    );
    assert_eq!(r.app, Some(AppProto::Http));
    // Aliases from the buffer table.
    let r = opts(r#"file_data; content:"x"; file.data; content:"y";"#);
    assert_eq!(shape(&r), [(Buffer::FileData, v(&["x", "y"]))]);
    // A sticky buffer must be followed by a match.
    assert_eq!(
        opts_err(r#"http.uri; http.host; content:"x";"#).0,
        "http.host"
    );
    assert_eq!(opts_err(r#"content:"x"; http.uri;"#).0, "http.uri");
    assert_eq!(opts_err(r#"http.uri:1; content:"x";"#).1, "takes no value");
}

#[test]
fn legacy_modifiers_move_the_content_with_its_modifiers() {
    let r = opts(
        r#"content:"GET"; http_method; content:"/x"; nocase; http_uri; distance:0; content:"p"; uricontent:"q"; depth:4;"#,
    );
    assert_eq!(
        shape(&r),
        [
            (Buffer::HttpMethod, v(&["GET"])),
            (Buffer::HttpUri, v(&["/x", "q"])),
            (Buffer::Payload, v(&["p"])),
        ]
    );
    // The moved content keeps nocase and takes the distance given after the move.
    let c = content(&r, 1, 0);
    assert!(c.nocase && c.distance == Some(Num::Lit(0)));
    assert_eq!(content(&r, 1, 1).depth, Some(Num::Lit(4)));
    // http_client_body is the legacy modifier (Suricata), not a sticky buffer.
    let r = opts(r#"content:"a"; http_client_body;"#);
    assert_eq!(shape(&r), [(Buffer::HttpRequestBody, v(&["a"]))]);
    // Refusals: after a sticky buffer, and without a content.
    assert!(
        opts_err(r#"http.uri; content:"a"; http_header;"#)
            .1
            .contains("pkt_data")
    );
    assert_eq!(opts_err("http_uri;").0, "http_uri");
}

#[test]
fn relative_keywords_follow_the_previous_keyword_into_its_buffer() {
    let r = opts(
        r#"content:"a"; http_uri; isdataat:2,relative; byte_test:1,=,1,0,relative; byte_jump:1,0; isdataat:5;"#,
    );
    assert_eq!(
        shape(&r),
        [
            (Buffer::HttpUri, v(&["a", "isdataat", "byte_test"])),
            (Buffer::Payload, v(&["byte_jump", "isdataat"])),
        ]
    );
    // pcre R goes where the flag or sticky buffer says, and needs a match before it.
    let r = opts(r#"content:"a"; http_uri; pcre:"/b/UR"; pcre:"/c/H";"#);
    assert_eq!(
        shape(&r),
        [
            (Buffer::HttpUri, v(&["a", "pcre0"])),
            (Buffer::HttpHeader, v(&["pcre1"])),
        ]
    );
    assert!(
        opts_err(r#"pcre:"/b/R";"#)
            .1
            .contains("needs a content or pcre")
    );
    assert!(
        opts_err(r#"http.uri; content:"a"; pcre:"/b/H";"#)
            .1
            .contains("sticky buffer")
    );
    // With a sticky buffer, R may start the list (Suricata allows it).
    assert!(ctx_rule(r#"alert http any any -> any any (http.uri; pcre:"/b/R"; sid:1;)"#).is_ok());
}

#[test]
fn content_modifiers_and_flags() {
    let r = opts(
        r#"content:"ab"; startswith; content:"cd"; endswith; content:"x"; isdataat:!1,relative;"#,
    );
    let (a, b, c) = (content(&r, 0, 0), content(&r, 0, 1), content(&r, 0, 2));
    assert!(a.startswith && a.depth == Some(Num::Lit(2)));
    assert!(
        b.endswith && c.endswith,
        "isdataat:!1,relative after a content is endswith"
    );
    assert_eq!(r.lists[0].items.len(), 3);
    // Backtracking flags: within (or a relative keyword) after a content makes it retry.
    let r = opts(
        r#"content:"a"; content:"b"; within:5; content:"c"; distance:0; content:"d"; byte_test:1,=,1,0,relative;"#,
    );
    let flags: Vec<(bool, bool)> = (0..4)
        .map(|i| (content(&r, 0, i).retry, content(&r, 0, i).rel_next))
        .collect();
    assert_eq!(
        flags,
        [(true, true), (false, true), (false, false), (true, true)]
    );
    for (o, why) in [
        (r#"content:"a"; startswith; offset:1;"#, "startswith"),
        (r#"content:"a"; offset:1; startswith;"#, "offset"),
        (r#"content:"a"; startswith; depth:3;"#, "startswith"),
        (r#"content:"a"; distance:1; startswith;"#, "mixed"),
        (r#"content:"a"; nocase; nocase;"#, "twice"),
        (r#"content:"a"; offset:70000;"#, "out of range"),
        (r#"content:"a"; offset:x;"#, "byte_extract variable"),
        ("endswith;", "needs a `content`"),
    ] {
        let e = opts_err(o);
        assert!(e.1.contains(why), "{o}: {e:?}");
    }
}

#[test]
fn byte_keywords_parse_as_suricata() {
    let r = opts(
        "byte_test:2,!>=,0x10,-3,relative,little,bitmask 0xf0; byte_jump:4,2,relative,multiplier 2,align,from_end,post_offset -4,string,hex; byte_extract:3,1,len,relative,string,oct,multiplier 3,align 4; isdataat:!len,relative;",
    );
    let items = &r.lists[0].items;
    let Item::ByteTest(t) = &items[0] else {
        panic!()
    };
    assert_eq!(
        (
            t.nbytes, t.op, t.negated, t.value, t.offset, t.relative, t.enc
        ),
        (
            Num::Lit(2),
            ByteOp::Ge,
            true,
            Num::Lit(16),
            Num::Lit(-3),
            true,
            Encoding::Little
        )
    );
    assert_eq!(t.bitmask.map(|b| (b.mask, b.shift)), Some((0xf0, 4)));
    let Item::ByteJump(j) = &items[1] else {
        panic!()
    };
    assert_eq!(
        (j.multiplier, j.align, j.from, j.post_offset, j.enc),
        (2, true, JumpFrom::End, -4, Encoding::String(16))
    );
    let Item::ByteExtract(e) = &items[2] else {
        panic!()
    };
    assert_eq!(
        (e.nbytes, e.offset, e.var, e.enc, e.multiplier, e.align),
        (3, 1, 0, Encoding::String(8), 3, 4)
    );
    let Item::IsDataAt(d) = &items[3] else {
        panic!()
    };
    assert_eq!((d.at, d.negated, d.relative), (Num::Var(0), true, true));
    // Defaults: byte_test string is base 0 (auto), byte_extract string is decimal.
    let r = opts("byte_test:2,=,1,0,string; byte_extract:2,0,n,string;");
    assert!(matches!(&r.lists[0].items[0], Item::ByteTest(t) if t.enc == Encoding::String(0)));
    assert!(matches!(&r.lists[0].items[1], Item::ByteExtract(e) if e.enc == Encoding::String(10)));
    for (o, why) in [
        ("byte_test:2,=,1;", "needs bytes"),
        ("byte_test:9,=,1,0;", "up to 8"),
        ("byte_test:24,=,1,0,string;", "out of range"),
        ("byte_test:2,~,1,0;", "unknown operator"),
        ("byte_test:2,=,1,0,hex;", "needs `string`"),
        ("byte_test:2,=,1,0,dce;", "DCE/RPC"),
        ("byte_test:2,=,1,0,sideways;", "unknown byte_test option"),
        ("byte_test:2,=,nope,0;", "byte_extract variable"),
        ("byte_jump:2,70000;", "out of range"),
        ("byte_jump:2,0,from_end,from_beginning;", "exclude"),
        ("byte_jump:2,0,multiplier 0;", "out of range"),
        ("byte_jump:2,0,bitmask 0;", "keeps nothing"),
        ("byte_extract:2,0;", "variable name"),
        ("byte_extract:9,0,n;", "at most 8"),
        ("byte_extract:21,0,n,string;", "at most 20"),
        ("byte_extract:2,0,n,align 3;", "align is 2 or 4"),
        ("byte_extract:2,0,n,slice;", "slice"),
        ("byte_extract:2,0,n,hex;", "needs `string`"),
        ("byte_extract:2,0,n,string,big;", "exclude"),
        ("byte_extract:2,0,n,big,little;", "twice"),
        ("byte_extract:2,0,9n;", "start with a letter"),
        ("byte_extract:1,0,n; byte_extract:1,1,n;", "defined twice"),
        ("isdataat:70000;", "out of range"),
        ("isdataat:1,sideways;", "unknown isdataat option"),
    ] {
        let e = opts_err(o);
        assert!(e.1.contains(why), "{o}: {e:?}");
    }
    // A variable is read only in the buffer that extracts it, after the extraction.
    let e = opts_err(r#"byte_extract:1,0,n; http.uri; content:"a"; isdataat:n,relative;"#);
    assert_eq!(e.0, "n");
}

#[test]
fn bsize_and_urilen() {
    let r = opts(r#"http.uri; content:"abc"; bsize:3<>10; urilen:>5, raw;"#);
    assert_eq!(
        shape(&r),
        [
            (Buffer::HttpUri, v(&["abc", "bsize"])),
            (Buffer::HttpUriRaw, v(&["urilen"])),
        ]
    );
    assert!(opts_err("bsize:3;").1.contains("sticky buffer"));
    // The contents do not fit: Suricata refuses the rule.
    assert_eq!(opts_err(r#"http.uri; content:"abcd"; bsize:3;"#).0, "bsize");
    assert_eq!(
        opts_err(r#"http.uri; content:"ab"; offset:3; bsize:<4;"#).0,
        "bsize"
    );
    assert!(
        ctx_rule(r#"alert http any any -> any any (http.uri; content:"ab"; bsize:>4; sid:1;)"#)
            .is_ok()
    );
    assert!(opts_err("urilen:5,sideways;").1.contains("raw"));
}

#[test]
fn uint_forms() {
    let c = |s: &str| parse_uint(s, u64::MAX).map(|c| (c.mode, c.a, c.b));
    assert_eq!(c("5"), Ok((UintMode::Eq, 5, 0)));
    assert_eq!(c("=5"), Ok((UintMode::Eq, 5, 0)));
    assert_eq!(c("<5"), Ok((UintMode::Lt, 5, 0)));
    assert_eq!(c("<=5"), Ok((UintMode::Le, 5, 0)));
    assert_eq!(c("> 5"), Ok((UintMode::Gt, 5, 0)));
    assert_eq!(c(">=5"), Ok((UintMode::Ge, 5, 0)));
    assert_eq!(c("!5"), Ok((UintMode::Ne, 5, 0)));
    assert_eq!(c("!=5"), Ok((UintMode::Ne, 5, 0)));
    assert_eq!(c("2-8"), Ok((UintMode::Range, 2, 8)));
    assert_eq!(c("2<>8"), Ok((UintMode::Range, 2, 8)));
    assert_eq!(c("!2-8"), Ok((UintMode::NegRange, 2, 8)));
    assert_eq!(c("&0xf0=0x10"), Ok((UintMode::Bitmask, 0xf0, 0x10)));
    assert_eq!(c("&0xf0!=0x10"), Ok((UintMode::NegBitmask, 0xf0, 0x10)));
    assert_eq!(c("2kb"), Ok((UintMode::Eq, 2048, 0)));
    assert_eq!(c("1MiB"), Ok((UintMode::Eq, 1 << 20, 0)));
    for bad in ["", "x", "5-6", "8-2", "<0", ">=0", "&0x0f=0x10", "5 x"] {
        assert!(c(bad).is_err(), "{bad}");
    }
    assert!(parse_uint("70000", 65535).is_err());
    assert!(!parse_urilen("<10, norm").unwrap().1);
}

#[test]
fn applayer_protocols_from_header_and_buffers() {
    let r = ctx_rule(r#"alert http any any -> any any (content:"GET"; sid:1;)"#).unwrap();
    assert_eq!((r.app, r.proto), (Some(AppProto::Http), RuleProto::Tcp));
    let r = ctx_rule(r#"alert dns any any -> any any (dns.query; content:"x"; sid:1;)"#).unwrap();
    assert_eq!((r.app, r.proto), (Some(AppProto::Dns), RuleProto::TcpOrUdp));
    let r = ctx_rule(r#"alert udp any any -> any 53 (dns.query; content:"x"; sid:1;)"#).unwrap();
    assert_eq!((r.app, r.proto), (Some(AppProto::Dns), RuleProto::Udp));
    let r = ctx_rule(r#"alert ip any any -> any any (tls.sni; content:"x"; sid:1;)"#).unwrap();
    assert_eq!((r.app, r.proto), (Some(AppProto::Tls), RuleProto::Tcp));
    let r = ctx_rule(r#"alert tls any any -> any any (sid:1;)"#).unwrap();
    assert_eq!(r.app, Some(AppProto::Tls));
    let r = ctx_rule(r#"alert tcp any any -> any any (urilen:5; sid:1;)"#).unwrap();
    assert_eq!(r.app, Some(AppProto::Http));
    for (s, kw, why) in [
        (
            r#"alert udp any any -> any any (http.uri; content:"x"; sid:1;)"#,
            "http",
            "tcp",
        ),
        (
            r#"alert tcp any any -> any any (http.uri; content:"x"; dns.query; content:"y"; sid:1;)"#,
            "dns.query",
            "one application protocol",
        ),
        (
            r#"alert http any any -> any any (tls.sni; content:"x"; sid:1;)"#,
            "tls.sni",
            "one application protocol",
        ),
        (
            r#"alert http2 any any -> any any (sid:1;)"#,
            "http2",
            "relayd parses http, dns and tls",
        ),
        (
            r#"alert tcp-stream any any -> any any (sid:1;)"#,
            "tcp-stream",
            "not supported",
        ),
        (
            r#"alert tcp any any -> any any (http.start; content:"x"; sid:1;)"#,
            "http.start",
            "HTTP/1, DNS and TLS",
        ),
        (
            r#"alert tcp any any -> any any (tls.version:1.2; sid:1;)"#,
            "tls.version",
            "HTTP/1, DNS and TLS",
        ),
        (
            r#"alert tcp any any -> any any (http.host; content:"Host"; sid:1;)"#,
            "http.host",
            "lowercase",
        ),
    ] {
        let (k, m) = err(s);
        assert!(k == kw && m.contains(why), "{s}: {k}: {m}");
    }
    assert!(
        ctx_rule(r#"alert tcp any any -> any any (http.host; content:"Host"; nocase; sid:1;)"#)
            .is_ok()
    );
}

#[test]
fn app_layer_protocol_keyword() {
    let t = |s: &str| opts(&format!("app-layer-protocol:{s};")).app_test;
    assert_eq!(t("http"), [(false, AppProto::Http)]);
    assert_eq!(t("!tls"), [(true, AppProto::Tls)]);
    assert_eq!(t("http1,to_server"), [(false, AppProto::Http)]);
    assert_eq!(t("!dns, final"), [(true, AppProto::Dns)]);
    assert_eq!(t("dns,exact"), [(false, AppProto::Dns)]);
    // Several tests must all hold: "neither http nor tls".
    assert_eq!(
        t("!http; app-layer-protocol:!tls"),
        [(true, AppProto::Http), (true, AppProto::Tls)]
    );
    for (s, why) in [
        ("failed", "detection state"),
        ("unknown", "detection state"),
        ("ssh", "not detected"),
        ("tls|dns", "list"),
        ("http1,original", "original"),
        ("http,exact", "never matches"),
        ("tls,sideways", "unknown mode"),
    ] {
        let e = opts_err(&format!("app-layer-protocol:{s};"));
        assert!(e.1.contains(why), "{s}: {e:?}");
    }
    assert!(
        opts_err("app-layer-protocol:!http; app-layer-protocol:!http;")
            .1
            .contains("twice")
    );
}

#[test]
fn flowbits_noalert_and_stream() {
    let r = opts(
        "flowbits:set,a; flowbits:isset,b|c; flowbits: isnotset, d & e; flowbits:toggle,f; flowbits:unset,g; flowbits:noalert;",
    );
    let ops: Vec<(FlowbitCmd, Vec<String>, bool)> = r
        .flowbits
        .iter()
        .map(|o| (o.cmd, o.names.clone(), o.all))
        .collect();
    assert_eq!(
        ops,
        [
            (FlowbitCmd::Set, v(&["a"]), false),
            (FlowbitCmd::IsSet, v(&["b", "c"]), false),
            (FlowbitCmd::IsNotSet, v(&["d", "e"]), true),
            (FlowbitCmd::Toggle, v(&["f"]), false),
            (FlowbitCmd::Unset, v(&["g"]), false),
        ]
    );
    assert!(r.noalert);
    assert!(opts("noalert;").noalert && !opts("flowbits:set,a;").noalert);
    for (o, why) in [
        ("flowbits:set;", "needs a name"),
        ("flowbits:noalert,x;", "takes no name"),
        ("flowbits:flip,x;", "unknown flowbits command"),
        ("flowbits:set,a|b;", "only isset and isnotset"),
        ("flowbits:isset,a|b&c;", "not both"),
        ("flowbits:isset,a b;", "spaces"),
        ("flowbits:isset,a; flowbits:isnotset,a;", "never both"),
        ("noalert:1;", "takes no value"),
    ] {
        let e = opts_err(o);
        assert!(e.1.contains(why), "{o}: {e:?}");
    }
    let f = |o: &str| opts(o).flow.map(|f| f.stream);
    assert_eq!(f("flow:established,only_stream;"), Some(StreamMode::Only));
    assert_eq!(f("flow:no_stream;"), Some(StreamMode::No));
    assert!(
        opts_err("flow:only_stream,no_stream;")
            .1
            .contains("contradicts")
    );
    let r = ctx_rule("alert tcp-pkt any any -> any any (flow:to_server; sid:1;)").unwrap();
    let fl = r.flow.unwrap();
    assert_eq!(
        (fl.stream, fl.reply, r.proto),
        (StreamMode::No, Some(false), RuleProto::Tcp)
    );
    assert!(
        err("alert tcp-pkt any any -> any any (flow:only_stream; sid:1;)")
            .1
            .contains("tcp-pkt")
    );
}

#[test]
fn fast_pattern_names_list_and_item() {
    let r = opts(r#"content:"ab"; http.uri; content:"longer"; pkt_data; content:"abc";"#);
    // The longest content is in the URI: no payload pattern for the packet prefilter.
    let (b, c) = r.fast_content().unwrap();
    assert_eq!((b, c.pat.as_slice()), (Buffer::HttpUri, &b"longer"[..]));
    assert_eq!(r.fast_pattern(), None);
    let r = opts(r#"content:"ab"; fast_pattern; http.uri; content:"longer";"#);
    assert_eq!(r.fast_pattern(), Some(&b"ab"[..]));
    assert_eq!(r.fast, Some((0, 0)));
    assert_eq!(r.content_count(), 2);
    assert!(
        opts_err(r#"content:"a"; fast_pattern; http.uri; content:"b"; fast_pattern;"#)
            .1
            .contains("only one")
    );
}
