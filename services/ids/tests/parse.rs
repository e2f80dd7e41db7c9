//! Parser tests over a varied rules file.

mod common;

use relay_svc_ids::{LoadOptions, RuleAction, RuleProto, RuleSet};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load() -> RuleSet {
    RuleSet::load(&LoadOptions {
        files: vec![fixture("varied.rules")],
        vars: common::vars(),
        classification: None,
        threshold_file: None,
    })
    .unwrap()
}

#[test]
fn good_rules_load_with_their_metadata() {
    let set = load();
    let sids: Vec<u32> = set.rules().iter().map(|r| r.sid).collect();
    assert_eq!(set.rules().len(), 11, "{sids:?}");
    // Evaluation order: pass, drop, reject, ratelimit, alert.
    assert_eq!(set.rules()[0].action, RuleAction::Pass);
    let actions: Vec<RuleAction> = set.rules().iter().map(|r| r.action).collect();
    let mut sorted = actions.clone();
    sorted.sort();
    assert_eq!(actions, sorted);

    let r = set.by_sid(2000001).unwrap();
    assert_eq!(r.msg, "ET WEB passwd access");
    assert_eq!((r.rev, r.priority), (3, 1));
    assert_eq!(r.classtype.as_deref(), Some("web-application-attack"));
    assert_eq!(r.category, "Web Application Attack");
    assert_eq!(r.fast_pattern(), Some(&b"/etc/passwd"[..]));
    assert_eq!(r.line, 4);
    assert!(r.file.ends_with("varied.rules"));

    let r = set.by_sid(2000004).unwrap();
    assert_eq!(r.line, 9, "a continued rule is reported at its first line");
    assert_eq!(r.proto, RuleProto::Udp);
    assert_eq!(r.fast_pattern(), Some(&b"\x04evil\x03com\x00"[..]));
    assert_eq!(r.priority, 1);

    assert_eq!(set.by_sid(2000006).unwrap().priority, 3, "default priority");
    assert_eq!(
        set.by_sid(2000011).unwrap().msg,
        "escaped \"quote\" ; semicolon"
    );
    assert_eq!(
        set.by_sid(2000011).unwrap().fast_pattern(),
        Some(&b"a;b"[..])
    );
    assert!(set.blocks());
}

#[test]
fn broken_rules_name_file_line_and_keyword() {
    let set = load();
    let errs: Vec<(usize, Option<&str>)> = set
        .errors()
        .iter()
        .map(|e| (e.line, e.keyword.as_deref()))
        .collect();
    assert_eq!(
        errs,
        [
            (21, Some("sid")),
            (22, Some("ja3.hash")),
            (23, Some("pcre")),
            (24, Some("sid")),
            (25, Some("smtp")),
            (26, Some("source address")),
            (27, Some("nocase")),
            (28, Some("distance")),
            (29, Some("classtype")),
            (30, Some("flow")),
            (31, Some("pcre")),
        ]
    );
    let text: Vec<String> = set.errors().iter().map(ToString::to_string).collect();
    assert!(text[0].contains("varied.rules:21: `sid`"), "{}", text[0]);
    assert!(text[2].contains("backreference"), "{}", text[2]);
    assert!(text[3].contains("duplicate sid 2000001"), "{}", text[3]);
    assert!(text[5].contains("undefined variable $NOPE"), "{}", text[5]);
    assert!(text[10].contains("lookahead"), "{}", text[10]);
}

#[test]
fn unreadable_file_is_an_error() {
    let e = RuleSet::load(&LoadOptions {
        files: vec![fixture("missing.rules")],
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("missing.rules"), "{e}");
}

#[test]
fn variable_cycles_and_header_errors() {
    let mut vars = common::vars();
    vars.insert("A".into(), "$B".into());
    vars.insert("B".into(), "[$A]".into());
    let set = RuleSet::parse_str(
        "alert ip $A any -> any any (sid:1;)\n\
         alert tcp any any <- any any (sid:2;)\n\
         alert tcp any any -> any (sid:3;)\n\
         alert tcp any any -> any 99999 (sid:4;)\n\
         ratelimit tcp any any -> any any (sid:5;)\n\
         alert tcp any any -> any any (sid:6; rate:5/s;)\n\
         alert icmp any 80 -> any any (sid:7;)\n\
         alert tcp any any -> any any (sid:8; content:\"ab\"; within:1;)\n",
        "x.rules",
        &vars,
    )
    .unwrap();
    assert!(set.rules().is_empty());
    let msgs: Vec<String> = set.errors().iter().map(ToString::to_string).collect();
    assert_eq!(msgs.len(), 8, "{msgs:#?}");
    assert!(msgs[0].contains("cycle"), "{}", msgs[0]);
    assert!(msgs[1].contains("`<-`"), "{}", msgs[1]);
    assert!(msgs[2].contains("7 fields"), "{}", msgs[2]);
    assert!(msgs[3].contains("99999"), "{}", msgs[3]);
    assert!(msgs[4].contains("`ratelimit`"), "{}", msgs[4]);
    assert!(msgs[5].contains("only for ratelimit"), "{}", msgs[5]);
    assert!(msgs[6].contains("no ports"), "{}", msgs[6]);
    assert!(msgs[7].contains("within is shorter"), "{}", msgs[7]);
}

#[test]
fn refused_keywords_name_file_line_and_why() {
    let set = RuleSet::parse_str(
        "alert tcp any any -> any any (tls.version:1.2; sid:1;)\n\
         alert smb any any -> any any (sid:2;)\n\
         alert tcp any any -> any any (byte_test:2,=,1,0,dce; sid:3;)\n\
         alert tcp any any -> any any (http.uri; content:\"a\"; dns.query; content:\"b\"; sid:4;)\n\
         alert tcp any any -> any any (content:\"a\"; http.uri;\\\n\
         sid:5;)\n\
         alert tcp any any -> any any (flowbits:set,a|b; sid:6;)\n\
         alert udp any any -> any any (content:\"GET\"; http_method; sid:7;)\n",
        "k.rules",
        &common::vars(),
    )
    .unwrap();
    assert!(set.rules().is_empty());
    let msgs: Vec<String> = set.errors().iter().map(ToString::to_string).collect();
    let want = [
        "k.rules:1: `tls.version`: application-layer keyword not supported (relayd parses HTTP/1, DNS and TLS",
        "k.rules:2: `smb`: application-layer protocol not supported (relayd parses http, dns and tls)",
        "k.rules:3: `byte_test`: `dce` (DCE/RPC byte order) is not supported",
        "k.rules:4: `dns.query`: a rule inspects one application protocol",
        "k.rules:5: `http.uri`: the sticky buffer has no match after it",
        "k.rules:7: `flowbits`: only isset and isnotset take several names",
        "k.rules:8: `http`: http runs over tcp",
    ];
    assert_eq!(msgs.len(), want.len(), "{msgs:#?}");
    for (m, w) in msgs.iter().zip(want) {
        assert!(m.starts_with(w), "{m}\n  does not start with\n{w}");
    }
}
