//! Tests of the rule parser: every keyword, every refusal, the variables.

use super::*;

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
    assert!(parse_pcre(r#"!"/a.b/smx""#).unwrap().negated);
    for (p, why) in [
        (r#""/(a)\1/""#, "backreference"),
        (r#""/a(?=b)/""#, "lookahead"),
        (r#""/(?<!a)b/""#, "lookbehind"),
        (r#""/(?>ab)/""#, "atomic"),
        (r#""/a++/""#, "possessive"),
        (r#""/abc/R""#, "`R`"),
        (r#""/abc/U""#, "`U`"),
        (r#""/abc/B""#, "`B`"),
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
