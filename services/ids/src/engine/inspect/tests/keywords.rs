//! One test per keyword of the inspector: byte_test, byte_jump, byte_extract, isdataat,
//! bsize / urilen, and C's strtoull as the string encodings read it.

use super::*;

#[test]
fn byte_test_operators_and_encodings() {
    // 0x0102 big-endian = 258, little-endian = 513.
    let buf = b"\x01\x02abc";
    for (opts, want) in [
        ("byte_test:2,=,258,0;", true),
        ("byte_test:2,=,513,0,little;", true),
        ("byte_test:2,!=,258,0;", false),
        ("byte_test:2,!,258,0;", false),
        ("byte_test:2,<,259,0;", true),
        ("byte_test:2,<=,258,0;", true),
        ("byte_test:2,>,258,0;", false),
        ("byte_test:2,>=,0x102,0;", true),
        ("byte_test:2,&,0x100,0;", true),
        ("byte_test:2,&,0x400,0;", false),
        ("byte_test:2,^,258,0;", false),
        ("byte_test:1,=,2,1;", true),
        ("byte_test:1,=,1,0,bitmask 0x0f;", true),
        // Bitmask 0xf0 on 0x02 keeps nothing; 0xf00 on 0x0102 keeps 1 after the shift.
        ("byte_test:2,=,1,0,bitmask 0xf00;", true),
        ("byte_test:2,=,0,0,bitmask 0xf0;", true),
        // Past the end: no match, whatever the operator.
        ("byte_test:4,!=,0,3;", false),
        ("byte_test:2,=,0,-1;", false),
    ] {
        assert_eq!(run(buf, opts).0, want, "{opts}");
    }
    for (buf, opts, want) in [
        (&b"  42x"[..], "byte_test:5,=,42,0,string,dec;", true),
        (b"0x1f;", "byte_test:4,=,31,0,string,hex;", true),
        (b"ff", "byte_test:2,=,255,0,string,hex;", true),
        (b"017", "byte_test:3,=,15,0,string;", true),
        (b"017", "byte_test:3,=,17,0,string,dec;", true),
        (b"777", "byte_test:3,=,511,0,string,oct;", true),
        (b"abc", "byte_test:3,=,0,0,string,dec;", false),
        (
            b"99999999999999999999999",
            "byte_test:23,>,0,0,string,dec;",
            false,
        ),
    ] {
        assert_eq!(run(buf, opts).0, want, "{opts} on {buf:?}");
    }
    // Value and offset from variables.
    assert!(
        !run(
            b"\x02\x07\x00\x09",
            "byte_extract:1,0,off; byte_extract:1,1,val; byte_test:2,=,val,off;"
        )
        .0
    );
    assert!(
        run(
            b"\x02\x09\x00\x09",
            "byte_extract:1,0,off; byte_extract:1,1,val; byte_test:2,=,val,off;"
        )
        .0
    );
}

#[test]
fn byte_jump_options() {
    for (buf, opts, want) in [
        // multiplier: 2 * 3 = 6 bytes after the length byte.
        (
            &b"\x02XXXXXXabc"[..],
            r#"byte_jump:1,0,multiplier 3; content:"abc"; within:3;"#,
            true,
        ),
        // align: 1 rounds up to 4.
        (
            b"\x01XXXXabc",
            r#"byte_jump:1,0,align; content:"abc"; within:3;"#,
            true,
        ),
        // little-endian 2 bytes: 3.
        (
            b"\x03\x00XXXabc",
            r#"byte_jump:2,0,little; content:"abc"; within:3;"#,
            true,
        ),
        // from_end with a negative post_offset lands 3 before the end.
        (
            b"\x00XXXXXXXabc",
            r#"byte_jump:1,0,from_end,post_offset -3; content:"abc"; within:3;"#,
            true,
        ),
        // A jump past the end fails; one before the start lands on it.
        (b"\x09ab", "byte_jump:1,0;", false),
        (
            b"\x00abc",
            r#"byte_jump:1,0,from_beginning,post_offset -9; content:"ab"; within:2;"#,
            false,
        ),
        (
            b"\x00abc",
            r#"byte_jump:1,0,from_beginning,post_offset -9; content:"|00|a"; within:2;"#,
            true,
        ),
        // bitmask before the multiplier: 0x34 & 0x0f = 4.
        (
            b"\x34XXXXabc",
            r#"byte_jump:1,0,bitmask 0x0f; content:"abc"; within:3;"#,
            true,
        ),
        // Offset from a variable.
        (
            b"\x02X\x01Yabc",
            r#"byte_extract:1,0,o; byte_jump:1,o; content:"abc"; within:3;"#,
            true,
        ),
        (
            b"\x02X\x01Yabc",
            r#"byte_extract:1,0,o; byte_jump:1,o; content:"Yabc"; within:4;"#,
            false,
        ),
    ] {
        assert_eq!(run(buf, opts).0, want, "{opts} on {buf:?}");
    }
}

#[test]
fn byte_extract_options_and_content_variables() {
    for (buf, opts, want) in [
        // depth from a variable: "abc" within the first 5 bytes after the offset.
        (
            &b"\x06XXabcZ"[..],
            r#"byte_extract:1,0,d; content:"abc"; depth:d;"#,
            true,
        ),
        (
            b"\x05XXabcZ",
            r#"byte_extract:1,0,d; content:"abc"; depth:d;"#,
            false,
        ),
        // offset from a variable.
        (
            b"\x04abcXabc",
            r#"byte_extract:1,0,o; content:"abc"; offset:o;"#,
            true,
        ),
        (
            b"\x06abcXabc",
            r#"byte_extract:1,0,o; content:"abc"; offset:o;"#,
            false,
        ),
        // distance / within from variables, relative to the extract's end.
        (
            b"\x02\x03XXabc",
            r#"byte_extract:1,0,d; byte_extract:1,1,w; content:"abc"; distance:d; within:w;"#,
            true,
        ),
        (
            b"\x03\x03XXabc",
            r#"byte_extract:1,0,d; byte_extract:1,1,w; content:"abc"; distance:d; within:w;"#,
            false,
        ),
        // multiplier and align.
        (
            b"\x02\x04",
            "byte_extract:1,0,n,multiplier 2; byte_test:1,=,n,1;",
            true,
        ),
        (
            b"\x02\x02",
            "byte_extract:1,0,n,multiplier 2; byte_test:1,=,n,1;",
            false,
        ),
        (
            b"\x03\x04",
            "byte_extract:1,0,n,align 4; byte_test:1,=,n,1;",
            true,
        ),
        (
            b"\x01\x00",
            "byte_extract:2,0,n,little; byte_test:1,=,n,0;",
            true,
        ),
        (b"\x01\x00", "byte_extract:2,0,n; byte_test:2,=,n,0;", true),
        // string: the digits read, and the cursor after them ("12" then "ab").
        (
            b"12ab\x0c",
            "byte_extract:4,0,n,string,dec; byte_test:1,=,n,4;",
            true,
        ),
        (
            b"12ab\x0c",
            r#"byte_extract:4,0,n,string,dec; content:"ab"; distance:0; within:2;"#,
            true,
        ),
    ] {
        assert_eq!(run(buf, opts).0, want, "{opts} on {buf:?}");
    }
}

#[test]
fn isdataat_absolute_and_negated() {
    for (opts, want) in [
        ("isdataat:3;", true),
        ("isdataat:4;", false),
        ("isdataat:!4;", true),
        ("isdataat:!3;", false),
    ] {
        assert_eq!(run(b"abcd", opts).0, want, "{opts}");
    }
    // Relative: data at cursor + N - 1 (N bytes are left).
    assert!(run(b"abcd", r#"content:"a"; isdataat:3,relative;"#).0);
    assert!(!run(b"abcd", r#"content:"a"; isdataat:4,relative;"#).0);
}

#[test]
fn bsize_and_urilen_tests() {
    let b = |mode, a, b| Bsize {
        cmp: UintCmp { mode, a, b },
        urilen: false,
    };
    assert!(b(UintMode::Eq, 3, 0).test(3) && !b(UintMode::Eq, 3, 0).test(4));
    assert!(b(UintMode::Range, 2, 5).test(3) && !b(UintMode::Range, 2, 5).test(5));
    assert!(b(UintMode::NegRange, 2, 5).test(5) && !b(UintMode::NegRange, 2, 5).test(4));
    assert!(b(UintMode::Bitmask, 0xf0, 0x10).test(0x1f));
    assert!(b(UintMode::NegBitmask, 0xf0, 0x10).test(0x2f));
    let u = Bsize {
        cmp: UintCmp {
            mode: UintMode::Eq,
            a: 65535,
            b: 0,
        },
        urilen: true,
    };
    assert!(u.test(70000), "urilen counts up to 65535");
    // In a list: the size does not depend on the cursor, a failure stops the inspection.
    let r = rule(r#"http.uri; content:"a"; bsize:>3;"#);
    let mut vars = Vars::default();
    let mut budget = 10;
    assert!(inspect_list(
        &r.lists[0],
        b"aaaa",
        &[],
        &mut vars,
        &mut budget
    ));
    let mut budget = 10;
    assert!(!inspect_list(
        &r.lists[0],
        b"aaa",
        &[],
        &mut vars,
        &mut budget
    ));
    assert_eq!(budget, 8, "no retry of the content after bsize fails");
}

#[test]
fn strtoull_follows_c() {
    assert_eq!(strtoull(b"  12x", 10), Some((12, 4)));
    assert_eq!(strtoull(b"0x1F", 0), Some((31, 4)));
    assert_eq!(strtoull(b"0x1F", 16), Some((31, 4)));
    assert_eq!(strtoull(b"1F", 16), Some((31, 2)));
    assert_eq!(strtoull(b"017", 0), Some((15, 3)));
    assert_eq!(strtoull(b"09", 0), Some((0, 1)));
    assert_eq!(strtoull(b"0x", 16), Some((0, 1)));
    assert_eq!(strtoull(b"-1", 10), Some((u64::MAX, 2)));
    assert_eq!(strtoull(b"+", 10), None);
    assert_eq!(strtoull(b"", 10), None);
    assert_eq!(strtoull(b"18446744073709551616", 10), None, "overflow");
    assert_eq!(strtoull(b"18446744073709551615", 10), Some((u64::MAX, 20)));
}

#[test]
fn zero_bytes_read_nothing() {
    // Suricata's bug-4623 / detect-bytejump-05 rules: byte_jump:0 moves by post_offset.
    assert!(
        run(
            b"xxABCDyy",
            r#"content:"CD"; byte_jump:0,0,relative,post_offset -3; pcre:"/^BCD/R";"#
        )
        .0
    );
    // Before the start: lands on it.
    assert!(
        run(
            b"ABCD",
            r#"content:"CD"; byte_jump:0,0,relative,post_offset -9; pcre:"/^AB/R";"#
        )
        .0
    );
    // With string: the digits up to the end of the buffer.
    assert!(
        run(
            b"x12345",
            r#"content:"x"; byte_test:0,=,12345,0,relative,string,dec;"#
        )
        .0
    );
}
