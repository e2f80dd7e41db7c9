//! Tests of the list inspector: Suricata's own content-inspection unit tests
//! (src/tests/detect-engine-content-inspection.c: buffer, keywords, result and the number
//! of inspection steps), its byte_jump packet tests, and one test per keyword.

use super::*;
use crate::applayer::buffer::Buffer;
use crate::rules::bytes::*;
use crate::rules::classify::Classes;
use crate::rules::parse::{Ctx, parse_rule};
use crate::rules::rule::Rule;
use std::collections::BTreeMap;
use std::sync::Arc;

mod keywords;

fn rule(opts: &str) -> Rule {
    let vars = BTreeMap::new();
    let classes = Classes::default();
    let text = format!("alert tcp any any -> any any ({opts} sid:1;)");
    parse_rule(
        &text,
        &Arc::from("t.rules"),
        1,
        &Ctx {
            vars: &vars,
            classes: &classes,
        },
    )
    .unwrap_or_else(|e| panic!("{opts}: {e:?}"))
}

/// Inspects `buf` with the payload list of a rule made of `opts`: (matched, steps taken).
fn run(buf: &[u8], opts: &str) -> (bool, u32) {
    let r = rule(opts);
    let list = r
        .lists
        .iter()
        .find(|l| l.buffer == Buffer::Payload)
        .expect("a payload list");
    let regexes: Vec<Regex> = r.pcres.iter().map(|p| p.re.clone()).collect();
    let mut vars = Vars::default();
    let mut budget = 3000;
    let m = inspect_list(list, buf, &regexes, &mut vars, &mut budget);
    (m, 3000 - budget)
}

/// Runs Suricata's cases: (buffer, keywords, match, steps).
fn cases(cases: &[(&str, &str, bool, u32)]) {
    for &(buf, opts, want, steps) in cases {
        assert_eq!(
            run(buf.as_bytes(), opts),
            (want, steps),
            "{buf:?} with {opts}"
        );
    }
}

#[test]
fn suricata_01_02_distance_and_pcre_r() {
    cases(&[
        ("ab", r#"content:"a"; content:"b";"#, true, 2),
        ("ab", r#"content:"a"; content:"b"; distance:0;"#, true, 2),
        ("ba", r#"content:"a"; content:"b"; distance:0;"#, false, 2),
        ("ab", r#"content:"a"; pcre:"/b/";"#, true, 2),
        ("ab", r#"content:"a"; pcre:"/b/R";"#, true, 2),
        ("ba", r#"content:"a"; pcre:"/b/R";"#, false, 2),
    ]);
}

#[test]
fn suricata_03_recursion() {
    let abc =
        r#"content:"a"; content:"b"; distance:0; within:1; content:"c"; distance:0; within:1;"#;
    cases(&[
        (
            "ababc",
            r#"content:"a"; content:"b"; content:"c";"#,
            true,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; content:"d";"#,
            false,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0;"#,
            true,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; content:"d"; distance:0;"#,
            false,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; content:"d"; distance:0; within:1;"#,
            false,
            5,
        ),
        ("ababc", abc, true, 5),
        ("ababc", &format!(r#"{abc} content:"bab";"#), true, 6),
        ("ababc", &format!(r#"{abc} content:"no";"#), false, 6),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; pcre:"/^c$/R";"#,
            true,
            5,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; pcre:"/^c$/R"; content:"bab";"#,
            true,
            6,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; pcre:"/^c$/R"; content:"no";"#,
            false,
            6,
        ),
    ]);
}

#[test]
fn suricata_04_05_pcre_chains_and_blocks() {
    cases(&[
        (
            "ababc",
            r#"pcre:"/^a/"; pcre:"/^b/R"; pcre:"/c/R";"#,
            true,
            3,
        ),
        (
            "ababc",
            r#"pcre:"/a/"; pcre:"/^b/R"; pcre:"/^c/R";"#,
            true,
            5,
        ),
        (
            "ababc",
            r#"pcre:"/^a/"; pcre:"/^b/R"; pcre:"/d/R";"#,
            false,
            3,
        ),
        (
            "ababc",
            r#"pcre:"/^a/"; pcre:"/^b/R"; pcre:"/c/R"; pcre:"/d/";"#,
            false,
            4,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; content:"b"; content:"c"; distance:0; within:1;"#,
            true,
            5,
        ),
    ]);
}

#[test]
fn suricata_06_12_isdataat_and_endswith() {
    let abc =
        r#"content:"a"; content:"b"; distance:0; within:1; content:"c"; distance:0; within:1;"#;
    cases(&[
        ("ababc", &format!("{abc} isdataat:!1,relative;"), true, 5),
        ("ababc", &format!("{abc} isdataat:1,relative;"), false, 6),
        ("abcabc", &format!("{abc} isdataat:10,relative;"), false, 4),
        ("ababcabc", &format!("{abc} isdataat:!1,relative;"), true, 7),
        ("ababcabc", &format!("{abc} isdataat:1,relative;"), true, 6),
        (
            "abcXYZ",
            r#"content:"abc"; content:"XYZ"; distance:0; within:3; isdataat:!1,relative;"#,
            true,
            2,
        ),
        (
            "abcXYZ",
            r#"content:"XYZ"; distance:3; within:3; isdataat:!1,relative;"#,
            true,
            1,
        ),
        (
            "abcXYZ",
            r#"content:"cXY"; distance:2; within:3; isdataat:!1,relative;"#,
            false,
            1,
        ),
        (
            "xxxxxxxxxxxxxxxxxyYYYYYYYYYYYYYYYY",
            r#"content:"yYYYYYYYYYYYYYYYY"; distance:9; within:29; isdataat:!1,relative;"#,
            true,
            1,
        ),
        ("ababc", &format!("{abc} endswith;"), true, 5),
        ("ababcabc", &format!("{abc} endswith;"), true, 7),
        (
            "abcXYZ",
            r#"content:"abc"; content:"XYZ"; distance:0; within:3; endswith;"#,
            true,
            2,
        ),
        (
            "abcXYZ",
            r#"content:"XYZ"; distance:3; within:3; endswith;"#,
            true,
            1,
        ),
        (
            "abcXYZ",
            r#"content:"cXY"; distance:2; within:3; endswith;"#,
            false,
            1,
        ),
        ("abcXYZ", r#"content:!"cXY"; endswith;"#, true, 1),
        ("abcXYZ", r#"content:!"XYZ"; endswith;"#, false, 1),
    ]);
}

#[test]
fn suricata_07_extreme_recursion() {
    let a = "abcabcabcabcabcabcabcabcabcabcd";
    let x = "abcabcabcabcabcabcabcabcabcabcx";
    let y = "abcdabcdabcdabcdabcdabcdabcdabcdabcdabcdx";
    let ab_c =
        r#"content:"a"; content:"b"; within:1; distance:0; content:"c"; distance:0; within:1;"#;
    cases(&[
        (a, &format!(r#"{ab_c} content:"d";"#), true, 4),
        (
            a,
            &format!(r#"{ab_c} content:"d"; within:1; distance:0;"#),
            true,
            31,
        ),
        (
            x,
            &format!(r#"{ab_c} content:"d"; within:1; distance:0;"#),
            false,
            31,
        ),
        (
            x,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; content:"d"; distance:0;"#,
            false,
            4,
        ),
        (
            x,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; pcre:"/^d/R";"#,
            false,
            13,
        ),
        (
            x,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; isdataat:!1,relative;"#,
            false,
            3,
        ),
        (
            y,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; content:"d"; distance:0; content:"e"; distance:0;"#,
            false,
            5,
        ),
        (
            y,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; content:"d"; distance:0; pcre:"/^e/R";"#,
            false,
            14,
        ),
        (
            y,
            r#"content:"a"; content:"b"; distance:0; content:"c"; distance:0; content:"d"; distance:0; isdataat:!1,relative;"#,
            false,
            4,
        ),
        (a, &format!(r#"{ab_c} pcre:"/d/";"#), true, 4),
        (a, &format!(r#"{ab_c} pcre:"/d/R";"#), true, 4),
        (a, &format!(r#"{ab_c} pcre:"/^d/R";"#), true, 31),
        (x, &format!(r#"{ab_c} pcre:"/d/";"#), false, 4),
        (x, &format!(r#"{ab_c} pcre:"/d/R";"#), false, 31),
        (x, &format!(r#"{ab_c} pcre:"/^d/R";"#), false, 31),
    ]);
}

#[test]
fn suricata_08_negation() {
    cases(&[
        (
            "ababc",
            r#"content:"a"; content:"b"; content:!"d";"#,
            true,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; content:!"c";"#,
            false,
            3,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; content:!"a"; distance:0; within:1;"#,
            true,
            5,
        ),
        (
            "ababc",
            r#"content:"a"; content:"b"; distance:0; within:1; content:!"a"; distance:0;"#,
            true,
            5,
        ),
        (
            "abcdefghy",
            r#"content:"a"; content:!"x"; content:"c"; distance:0; within:2;"#,
            true,
            3,
        ),
        (
            "abcdefghx",
            r#"content:"a"; content:!"x"; content:"c"; distance:0; within:2;"#,
            false,
            2,
        ),
        (
            "abcdefghy",
            r#"content:"a"; content:!"x"; content:!"c"; distance:2; within:1;"#,
            true,
            3,
        ),
        (
            "aaabbbccc",
            r#"content:"ccc"; endswith; content:!"bccc"; endswith;"#,
            false,
            2,
        ),
        (
            "aaabbbccc",
            r#"content:"ccc"; endswith; content:!"accc"; endswith;"#,
            true,
            2,
        ),
        (
            "aaabbbccc",
            r#"content:"ccc"; endswith; content:!"bccc"; endswith; depth:4;"#,
            true,
            2,
        ),
        (
            "aaabbbccc",
            r#"content:"ccc"; endswith; content:!"bccc"; endswith; depth:9;"#,
            false,
            2,
        ),
    ]);
}

#[test]
fn suricata_09_byte_jump_in_chains() {
    let j = r#"content:"abc"; byte_jump:2,0,relative,string,dec; content:"xyz"; within:3;"#;
    cases(&[
        ("abc03abcxyz", j, true, 3),
        ("abc03abc03abcxyz", j, true, 5),
        (
            "abc03abc03abcxyz",
            &format!("{j} isdataat:!1,relative;"),
            true,
            5,
        ),
        (
            "abc03abc03abcxyz",
            &format!(r#"{j} pcre:"/klm$/R";"#),
            false,
            7,
        ),
        (
            "abc03abc03abcxyzklm",
            &format!(r#"{j} pcre:"/klm$/R";"#),
            true,
            6,
        ),
        (
            "abc03abc03abcxyzklx",
            &format!(r#"{j} pcre:"/^klm$/R";"#),
            false,
            7,
        ),
        (
            "abc03abc03abc03abcxyzklm",
            &format!(r#"{j} pcre:"/^klm$/R";"#),
            true,
            8,
        ),
    ]);
}

#[test]
fn suricata_10_byte_extract_variables() {
    cases(&[
        (
            "9abcdefghi",
            "byte_extract:1,0,data_size,string; isdataat:data_size;",
            true,
            2,
        ),
        (
            "9abcdefgh",
            "byte_extract:1,0,data_size,string; isdataat:!data_size;",
            true,
            2,
        ),
        (
            "x9x9abcdefghi",
            r#"content:"x"; byte_extract:1,0,data_size,string,relative; isdataat:data_size,relative;"#,
            true,
            3,
        ),
        (
            "x9x9abcdefgh",
            r#"content:"x"; byte_extract:1,0,data_size,string,relative; isdataat:!data_size,relative;"#,
            true,
            5,
        ),
        (
            "x9x9abcdefgh",
            r#"content:"x"; depth:1; byte_extract:1,0,data_size,string,relative; isdataat:!data_size,relative;"#,
            false,
            3,
        ),
        (
            "x9x5abcdef",
            r#"content:"x"; byte_extract:1,0,data_size,string,relative; isdataat:data_size,relative;"#,
            true,
            5,
        ),
        // Extracted offsets of 10^8 and more never have data.
        (
            "100000000abcdefghi",
            "byte_extract:0,0,data_size,string; isdataat:data_size;",
            false,
            2,
        ),
        (
            "100000000abcdefghi",
            "byte_extract:0,0,data_size,string; isdataat:!data_size;",
            true,
            2,
        ),
    ]);
}

#[test]
fn suricata_11_13_startswith_endswith() {
    cases(&[
        ("ab", r#"content:"a"; startswith; content:"b";"#, true, 2),
        (
            "ab",
            r#"content:"a"; startswith; content:"b"; within:1; distance:0;"#,
            true,
            2,
        ),
        ("ab", r#"content:"ab"; startswith;"#, true, 1),
        ("ab", r#"content:"a"; startswith;"#, true, 1),
        ("ab", r#"content:"b"; startswith;"#, false, 1),
        (
            "ab",
            r#"content:"a"; startswith; content:"b"; endswith;"#,
            true,
            2,
        ),
        (
            "ab",
            r#"content:"a"; startswith; content:"b"; within:1; distance:0; endswith;"#,
            true,
            2,
        ),
        ("ab", r#"content:"ab"; startswith; endswith;"#, true, 1),
        ("ab", r#"content:"a"; startswith; endswith;"#, false, 1),
        ("ab", r#"content:"b"; startswith; endswith;"#, false, 1),
    ]);
}

#[test]
fn suricata_14_17_byte_test_negative_offset_and_distance() {
    let buf = "XYZ_klm_1234abcd_XYZ_klm_5678abcd";
    let pre = r#"content:"XYZ"; content:"_klm_"; distance:0; content:"abcd"; distance:4;"#;
    cases(&[
        (
            buf,
            &format!("{pre} byte_test:4,=,1234,-8,relative,string;"),
            true,
            4,
        ),
        (
            buf,
            &format!("{pre} byte_test:4,=,5678,-8,relative,string;"),
            true,
            5,
        ),
        (
            "aaabbbcccdddee",
            r#"content:"aaa"; content:"ee"; within:2; distance:9; content:"bbb"; within:3; distance:-11; content:"ccc"; within:3; distance:0;"#,
            true,
            4,
        ),
    ]);
}

#[test]
fn suricata_byte_jump_packets() {
    let get = "GET /AllWorkAndNoPlayMakesWillADullBoy HTTP/1.0User-Agent: Wget/1.11.4";
    assert!(run(get.as_bytes(), r#"pcre:"/AllWorkAndNoPlayMakesWillADullBoy/"; byte_jump:1,6,relative,string,dec; content:"0";"#).0);
    let smb = [
        0x00, 0x00, 0x00, 0x77, 0xff, 0x53, 0x4d, 0x42, 0x2f, 0x00, 0x00, 0x00, 0x00, 0x18, 0x01,
        0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08,
        0x92, 0xa4, 0x01, 0x08, 0x17, 0x5c, 0x0e, 0xff, 0x00, 0x00, 0x00, 0x01, 0x40, 0x48, 0x00,
        0x00, 0x00, 0xff,
    ];
    assert!(
        run(
            &smb,
            r#"byte_jump:1,13; byte_jump:4,0,relative; content:"|48 00 00|"; within:3;"#
        )
        .0
    );
    let x = r#"content:"XYZ"; byte_jump:2,0,relative,string,dec;"#;
    assert!(
        run(
            b"XYZ04abcdABCD",
            &format!(r#"{x} content:"ABCD"; distance:0; within:4;"#)
        )
        .0
    );
    assert!(
        !run(
            b"XYZ04abcdABCD",
            &format!(r#"{x} content:"cdABCD"; within:6;"#)
        )
        .0
    );
    let xx = r#"content:"XX"; byte_jump:2,0,relative,string,dec,from_beginning;"#;
    assert!(
        run(
            b"XX04abcdABCD",
            &format!(r#"{xx} content:"ABCD"; distance:4; within:4;"#)
        )
        .0
    );
    assert!(
        run(
            b"XX04abcdABCD",
            &format!(r#"{xx} content:"abcdABCD"; distance:0; within:8;"#)
        )
        .0
    );
    let end = r#"content:"XX"; byte_jump:2,0,relative,string,dec,from_end, post_offset -8; content:"ABCD"; distance:0; within:4;"#;
    assert!(run(b"XX04abcdABCD", end).0);
}

#[test]
fn negative_distance_reaches_back() {
    // Moved from the engine: "B" one byte back from the end of "AB".
    let r = rule(r#"content:"AB"; content:"B"; distance:-1; within:1;"#);
    let Item::Content(c) = &r.lists[0].items[1] else {
        panic!("a content")
    };
    assert_eq!(c.window(3, 4, &Vars::default()), Some((2, 3)));
    assert!(
        run(
            b"xABx",
            r#"content:"AB"; content:"B"; distance:-1; within:1;"#
        )
        .0
    );
}

#[test]
fn budget_bounds_backtracking() {
    // Every "a" is tried, each failing at "b": one step per "a" and per "b" test.
    let buf = "a".repeat(5000);
    let r = rule(r#"content:"a"; content:"b"; distance:0; within:1;"#);
    let mut vars = Vars::default();
    let mut budget = 100;
    assert!(!inspect_list(
        &r.lists[0],
        buf.as_bytes(),
        &[],
        &mut vars,
        &mut budget
    ));
    assert_eq!(budget, 0, "the budget ran out");
    // With enough budget the same list matches when the pattern is there.
    let buf = format!("{}ab", "a".repeat(40));
    let mut budget = 100;
    assert!(inspect_list(
        &r.lists[0],
        buf.as_bytes(),
        &[],
        &mut vars,
        &mut budget
    ));
}
