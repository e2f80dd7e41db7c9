//! Tests of the threshold file: each line type, each refusal, and how lines apply.

use super::*;
use crate::rules::classify::Classes;
use crate::rules::parse::parse_rule;
use crate::rules::rule::Track;
use std::collections::BTreeMap;
use std::sync::Arc;

fn rules(text: &[&str]) -> Vec<Rule> {
    let vars = BTreeMap::new();
    let classes = Classes::default();
    let ctx = Ctx {
        vars: &vars,
        classes: &classes,
    };
    text.iter()
        .map(|s| match parse_rule(s, &Arc::from("t.rules"), 1, &ctx) {
            Ok(r) => r,
            Err(e) => panic!("`{s}`: {e:?}"),
        })
        .collect()
}

/// Applies `file` to `rs` with `$SUP` defined; returns the errors and what applied.
fn run(file: &str, rs: &mut [Rule]) -> (Vec<RuleError>, Applied) {
    let mut vars = BTreeMap::new();
    vars.insert("SUP".to_string(), "[10.0.0.0/8,192.168.1.1]".to_string());
    let classes = Classes::default();
    let ctx = Ctx {
        vars: &vars,
        classes: &classes,
    };
    let mut errors = Vec::new();
    let a = apply(file, "t.config", &ctx, rs, &mut errors);
    (errors, a)
}

fn line(s: &str) -> Line {
    match parse_line(s) {
        Ok(l) => l,
        Err(e) => panic!("`{s}`: {e:?}"),
    }
}

fn key(a: std::net::IpAddr) -> u128 {
    crate::rules::rule::ip_key(a)
}

#[test]
fn each_line_type_parses() {
    let want = Threshold {
        kind: ThresholdKind::Limit,
        track: Track::Src,
        count: 3,
        seconds: 60,
    };
    let l = line("threshold gen_id 1, sig_id 10, type limit, track by_src, count 3, seconds 60");
    assert_eq!((l.gid, l.sid, l.what), (1, 10, What::Threshold(want)));
    let l = line("event_filter gen_id 1,sig_id 10,type limit,track by_src,count 3,seconds 60");
    assert_eq!(l.what, What::Threshold(want));
    let l = line("event_filter gen_id 1, sig_id 10, type both, track by_flow, count 3, seconds 6");
    assert!(
        matches!(l.what, What::Threshold(t) if t.kind == ThresholdKind::Both && t.track == Track::Flow)
    );
    assert_eq!(
        line("suppress gen_id 1, sig_id 2000328").what,
        What::SuppressAll
    );
    assert_eq!(
        line("suppress gen_id 0, sig_id 0, track by_either, ip [10.0.0.0/8, 1.2.3.4]").what,
        What::Suppress(SuppressTrack::Either, "[10.0.0.0/8, 1.2.3.4]".into())
    );
    assert_eq!(
        line("suppress gen_id 1, sig_id 7, track by_dst ,\tip  fe80::/10").what,
        What::Suppress(SuppressTrack::Dst, "fe80::/10".into())
    );
    let l = line(
        "rate_filter gen_id 1, sig_id 10000, track by_both, count 1000, seconds 60, new_action reject, timeout 21",
    );
    assert_eq!(
        l.what,
        What::Rate(RateFilter {
            track: Track::Both,
            count: 1000,
            seconds: 60,
            action: NewAction::Reject,
            timeout: 21,
        })
    );
}

#[test]
fn bad_lines_name_the_field() {
    let cases = [
        ("this is not correct", "type"),
        (
            "thresholds gen_id 1, sig_id 1, type limit, track by_src, count 1, seconds 1",
            "type",
        ),
        (
            "threshold gen_id x, sig_id 1, type limit, track by_src, count 1, seconds 1",
            "gen_id",
        ),
        (
            "threshold gen_id 1, type limit, track by_src, count 1, seconds 1",
            "sig_id",
        ),
        (
            "threshold gen_id 0, sig_id 5, type limit, track by_src, count 1, seconds 1",
            "gen_id",
        ),
        (
            "threshold gen_id 1, sig_id 1, type any, track by_src, count 1, seconds 1",
            "type",
        ),
        (
            "threshold gen_id 1, sig_id 1, type backoff, track by_flow, count 1, seconds 1",
            "type",
        ),
        (
            "threshold gen_id 1, sig_id 1, type limit, track by_ip, count 1, seconds 1",
            "track",
        ),
        (
            "threshold gen_id 1, sig_id 1, type limit, track by_src, count 0, seconds 1",
            "count",
        ),
        (
            "threshold gen_id 1, sig_id 1, type limit, track by_src, count 1",
            "seconds",
        ),
        (
            "threshold gen_id 1, sig_id 1, track by_src, type limit, count 1, seconds 1",
            "type",
        ),
        (
            "threshold gen_id 1, sig_id 1, type limit, track by_src, count 1, seconds 1, x 2",
            "line",
        ),
        (
            "rate_filter gen_id 1, sig_id 1, track by_src, count 1, seconds 1, new_action log, timeout 1",
            "new_action",
        ),
        (
            "rate_filter gen_id 1, sig_id 1, track by_src, count 1, seconds 1, new_action drop",
            "timeout",
        ),
        (
            "rate_filter gen_id 1, sig_id 1, track by_src, count 1, seconds 1, new_action drop, timeout -1",
            "timeout",
        ),
        (
            "suppress gen_id 1, sig_id 1, track by_rule, ip 1.2.3.4",
            "track",
        ),
        ("suppress gen_id 1, sig_id 1, track by_src", "ip"),
    ];
    for (s, field) in cases {
        match parse_line(s) {
            Ok(l) => panic!("`{s}` parsed as {l:?}"),
            Err((f, m)) => assert_eq!(f, field, "`{s}`: {m}"),
        }
    }
}

#[test]
fn errors_carry_file_and_line_and_good_lines_still_apply() {
    let mut rs = rules(&["alert tcp any any -> any any (sid:1;)"]);
    let file = "# comment\n\nthis is not correct\nsuppress gen_id 1, \\\n  sig_id 1\nsuppress gen_id 1, sig_id 1, track by_src, ip $NOPE\n";
    let (errors, a) = run(file, &mut rs);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!((errors[0].file.as_str(), errors[0].line), ("t.config", 3));
    assert_eq!(errors[0].keyword.as_deref(), Some("type"));
    assert_eq!(
        (errors[1].line, errors[1].keyword.as_deref()),
        (6, Some("ip"))
    );
    // The continued line (lines 4-5) applied: the rule no longer alerts.
    assert_eq!(a.lines, 1);
    assert!(rs[0].noalert);
    let (errors, _) = run("suppress gen_id 1, \\", &mut rs);
    assert_eq!(
        errors.first().and_then(|e| e.keyword.as_deref()),
        Some("line")
    );
}

#[test]
fn threshold_lines_replace_or_fill_in() {
    let mut rs = rules(&[
        "alert tcp any any -> any any (sid:1;)",
        "alert tcp any any -> any any (threshold: type limit, track by_dst, count 9, seconds 9; sid:2;)",
        "alert tcp any any -> any any (detection_filter: track by_dst, count 9, seconds 9; sid:3;)",
        "alert tcp any any -> any any (gid:2; sid:4;)",
    ]);
    let (errors, a) = run(
        "threshold gen_id 1, sig_id 2, type both, track by_src, count 2, seconds 5\n\
         event_filter gen_id 1, sig_id 3, type limit, track by_rule, count 1, seconds 5\n\
         threshold gen_id 1, sig_id 0, type threshold, track by_flow, count 4, seconds 7\n\
         threshold gen_id 1, sig_id 99, type limit, track by_src, count 1, seconds 1\n",
        &mut rs,
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(a.lines, 3);
    assert_eq!(a.unknown, [(4, 1, 99)]);
    // sid 2: its own threshold replaced.
    assert_eq!(
        rs[1].threshold.map(|t| (t.kind, t.count)),
        Some((ThresholdKind::Both, 2))
    );
    // sid 3: the detection_filter replaced by the line's threshold.
    assert!(rs[2].filter.is_none());
    assert_eq!(rs[2].threshold.map(|t| t.track), Some(Track::Rule));
    // sig_id 0, gen_id 1: only sid 1 had nothing of its own; gid 2 is not named.
    assert_eq!(
        rs[0].threshold.map(|t| t.kind),
        Some(ThresholdKind::Threshold)
    );
    assert!(rs[3].threshold.is_none());
}

#[test]
fn rate_filters_keep_the_rules_own_thresholding() {
    let mut rs = rules(&[
        "drop tcp any any -> any any (sid:1;)",
        "alert tcp any any -> any any (threshold: type limit, track by_dst, count 9, seconds 9; sid:2;)",
    ]);
    let file = "rate_filter gen_id 1, sig_id 0, track by_rule, count 2, seconds 60, new_action alert, timeout 10\n\
                rate_filter gen_id 1, sig_id 1, track by_src, count 5, seconds 60, new_action pass, timeout 10\n";
    let (errors, _) = run(file, &mut rs);
    assert!(errors.is_empty(), "{errors:?}");
    let rate = rs[0].global.as_ref().and_then(|g| g.rate);
    assert_eq!(
        rate.map(|r| (r.count, r.action)),
        Some((2, NewAction::Alert))
    );
    assert!(rs[1].global.is_none());
}

#[test]
fn suppress_matches_by_track() {
    let mut rs = rules(&["alert tcp any any -> any any (sid:1;)"]);
    let file = "suppress gen_id 1, sig_id 1, track by_src, ip 10.1.2.3\n\
                suppress gen_id 0, sig_id 0, track by_dst, ip $SUP\n\
                suppress gen_id 1, sig_id 1, track by_either, ip [2001:db8::/32]\n";
    let (errors, a) = run(file, &mut rs);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(a.lines, 3);
    let g = rs[0].global.as_ref().expect("suppressions");
    let hit = |src: &str, dst: &str| {
        let (s, d) = (key(src.parse().unwrap()), key(dst.parse().unwrap()));
        g.suppress.iter().any(|x| x.hits(s, d))
    };
    assert!(hit("10.1.2.3", "8.8.8.8"));
    assert!(!hit("10.1.2.4", "8.8.8.8"));
    assert!(hit("8.8.8.8", "10.9.9.9"));
    assert!(hit("8.8.8.8", "192.168.1.1"));
    assert!(!hit("192.168.1.1", "8.8.8.8"));
    assert!(hit("2001:db8::1", "::1"));
    assert!(hit("::1", "2001:db8::1"));
    assert!(!hit("2001:db9::1", "::1"));
    assert!(!rs[0].noalert);
}
