//! The values of the payload and flow keywords that came with real rulesets: `isdataat`,
//! `byte_test`, `byte_jump`, `byte_extract`, `bsize`, `urilen` (Suricata's unsigned-integer
//! forms), `flowbits` and `app-layer-protocol`, each parsed as Suricata 7/8 does (the
//! source files are named at each parser) and refused with a reason otherwise.

use super::lists::Lists;
use crate::applayer::AppProto;
use crate::rules::bytes::{
    Bitmask, ByteExtract, ByteJump, ByteOp, ByteTest, Encoding, IsDataAt, JumpFrom, UintCmp,
    UintMode, strtoull,
};
use crate::rules::rule::{FlowbitCmd, FlowbitOp, Num};

/// An unsigned number as Suricata's byte keywords read it (`strtoull` base 0: `0x` hex,
/// a leading `0` octal), the whole text.
fn c_uint(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match strtoull(t.as_bytes(), 0) {
        Some((v, n)) if n == t.len() && !t.starts_with(['-', '+']) => Ok(v),
        _ => Err(format!("`{t}` is not a number")),
    }
}

/// The comma-separated parts of a keyword's value, trimmed.
fn parts(v: &str) -> Vec<&str> {
    v.split(',').map(str::trim).collect()
}

/// A number in `lo..=hi` (decimal, or hex with `0x`, optionally signed).
fn int_in(s: &str, lo: i64, hi: i64) -> Result<i64, String> {
    let t = s.trim();
    let (neg, body) = match t.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, t),
    };
    let v = match body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        Some(h) => i64::from_str_radix(h, 16),
        None => body.parse::<i64>(),
    }
    .map_err(|_| format!("`{t}` is not a number"))?;
    let v = if neg { -v } else { v };
    if !(lo..=hi).contains(&v) {
        return Err(format!("{v} is out of range ({lo} to {hi})"));
    }
    Ok(v)
}

/// A number or a byte_extract variable (`ls.num` for variables, [`int_in`] for numbers).
fn num_or_var(ls: &Lists, s: &str, lo: i64, hi: i64) -> Result<Num, String> {
    if s.trim().starts_with(|c: char| c.is_ascii_alphabetic()) {
        ls.num(s, (lo, hi))
    } else {
        int_in(s, lo, hi).map(Num::Lit)
    }
}

/// `isdataat:[!]N[,relative][,rawbytes]` (detect-isdataat.c); N up to 65535 or a variable.
pub(super) fn parse_isdataat(v: &str, ls: &Lists) -> Result<IsDataAt, String> {
    let v = v.trim();
    let (negated, v) = match v.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, v),
    };
    let p = parts(v);
    let at = num_or_var(ls, p[0], 0, 65535)?;
    let mut relative = false;
    for f in &p[1..] {
        match *f {
            "relative" => relative = true,
            "rawbytes" => {}
            _ => {
                return Err(format!(
                    "unknown isdataat option `{f}` (relative, rawbytes)"
                ));
            }
        }
    }
    Ok(IsDataAt {
        at,
        relative,
        negated,
    })
}

/// The options byte_test and byte_jump share: (keyword, optional value).
fn flag_parts<'a>(p: &[&'a str]) -> Result<Vec<(String, Option<&'a str>)>, String> {
    p.iter()
        .map(|f| {
            let mut it = f.split_whitespace();
            let k = it.next().unwrap_or("").to_ascii_lowercase();
            let v = it.next();
            if it.next().is_some() {
                return Err(format!("cannot read option `{f}`"));
            }
            Ok((k, v))
        })
        .collect()
}

/// The base of `dec` / `hex` / `oct`.
fn base_of(k: &str) -> Option<u32> {
    match k {
        "dec" => Some(10),
        "hex" => Some(16),
        "oct" => Some(8),
        _ => None,
    }
}

fn dce() -> String {
    "`dce` (DCE/RPC byte order) is not supported: relayd does not parse DCE/RPC".into()
}

/// Checks a literal byte count against the encoding: up to 8 bytes, or 23 digits. 0 is
/// allowed as in Suricata: no bytes (the value 0; a `byte_jump` then moves by its
/// `post_offset` alone), or with `string` the digits up to the end of the buffer.
fn check_nbytes(n: Num, string: bool) -> Result<(), String> {
    if let Num::Lit(n) = n {
        let max = if string { 23 } else { 8 };
        if !(0..=max).contains(&n) {
            return Err(if string {
                format!("{n} bytes: `string` reads up to 23")
            } else {
                format!("{n} bytes: reads up to 8 (more with `string`)")
            });
        }
    }
    Ok(())
}

/// `byte_test:bytes, [!]op, value, offset[, flags]` (detect-bytetest.c).
pub(super) fn parse_byte_test(v: &str, ls: &Lists) -> Result<ByteTest, String> {
    let p = parts(v);
    if p.len() < 4 {
        return Err("needs bytes, operator, value and offset".into());
    }
    let nbytes = num_or_var(ls, p[0], 0, 23)?;
    let (negated, op) = match p[1].strip_prefix('!') {
        Some(r) => (true, r.trim()),
        None => (false, p[1]),
    };
    let op = match op {
        "=" => ByteOp::Eq,
        "" if negated => ByteOp::Eq,
        "<" => ByteOp::Lt,
        ">" => ByteOp::Gt,
        "&" => ByteOp::And,
        "^" => ByteOp::Xor,
        ">=" => ByteOp::Ge,
        "<=" => ByteOp::Le,
        o => {
            return Err(format!(
                "unknown operator `{o}` (=, <, >, <=, >=, &, ^, ! before)"
            ));
        }
    };
    let value = if p[2].starts_with(|c: char| c.is_ascii_alphabetic()) {
        ls.num(p[2], (0, 0))?
    } else {
        Num::Lit(c_uint(p[2])? as i64)
    };
    let offset = num_or_var(ls, p[3], i64::from(i32::MIN), i64::from(i32::MAX))?;
    let (mut relative, mut string, mut base, mut little, mut bitmask) =
        (false, false, None, false, None);
    for (k, val) in flag_parts(&p[4..])? {
        match (k.as_str(), val) {
            ("relative", None) => relative = true,
            ("string", None) => string = true,
            ("big", None) => little = false,
            ("little", None) => little = true,
            ("dce", None) => return Err(dce()),
            ("bitmask", Some(m)) => bitmask = Some(Bitmask::new(u64::from(mask32(m)?))),
            (b, None) if base_of(b).is_some() => base = base_of(b),
            _ => {
                return Err(format!(
                    "unknown byte_test option `{k}` (relative, big, little, string, hex, dec, oct, bitmask N)"
                ));
            }
        }
    }
    if base.is_some() && !string {
        return Err("a base (hex, dec, oct) needs `string`".into());
    }
    check_nbytes(nbytes, string)?;
    Ok(ByteTest {
        nbytes,
        op,
        negated,
        value,
        offset,
        relative,
        enc: encoding(string, base.unwrap_or(0), little),
        bitmask,
    })
}

fn encoding(string: bool, base: u32, little: bool) -> Encoding {
    if string {
        Encoding::String(base)
    } else if little {
        Encoding::Little
    } else {
        Encoding::Big
    }
}

fn mask32(m: &str) -> Result<u32, String> {
    let v = c_uint(m)?;
    u32::try_from(v).map_err(|_| format!("bitmask `{m}` is wider than 32 bits"))
}

/// `byte_jump:bytes, offset[, flags]` (detect-bytejump.c).
pub(super) fn parse_byte_jump(v: &str, ls: &Lists) -> Result<ByteJump, String> {
    let p = parts(v);
    if p.len() < 2 {
        return Err("needs bytes and offset".into());
    }
    let nbytes = num_or_var(ls, p[0], 0, 23)?;
    let offset = num_or_var(ls, p[1], -65535, 65535)?;
    let mut j = ByteJump {
        nbytes,
        offset,
        relative: false,
        enc: Encoding::Big,
        multiplier: 1,
        align: false,
        from: JumpFrom::Read,
        post_offset: 0,
        bitmask: None,
    };
    let (mut string, mut base, mut little, mut from_set) = (false, None, false, false);
    for (k, val) in flag_parts(&p[2..])? {
        match (k.as_str(), val) {
            ("relative", None) => j.relative = true,
            ("string", None) => string = true,
            ("big", None) => little = false,
            ("little", None) => little = true,
            ("align", None) => j.align = true,
            ("from_beginning" | "from_end", None) => {
                if from_set {
                    return Err("from_beginning and from_end exclude each other".into());
                }
                from_set = true;
                j.from = if k == "from_end" {
                    JumpFrom::End
                } else {
                    JumpFrom::Beginning
                };
            }
            ("multiplier", Some(m)) => j.multiplier = int_in(m, 1, 65535)? as u64,
            ("post_offset", Some(o)) => j.post_offset = int_in(o, -65535, 65535)?,
            ("bitmask", Some(m)) => {
                let m = mask32(m)?;
                if m == 0 {
                    return Err("bitmask 0 keeps nothing".into());
                }
                j.bitmask = Some(Bitmask::new(u64::from(m)));
            }
            ("dce", None) => return Err(dce()),
            (b, None) if base_of(b).is_some() => base = base_of(b),
            _ => {
                return Err(format!(
                    "unknown byte_jump option `{k}` (relative, multiplier N, big, little, string, hex, dec, oct, align, from_beginning, from_end, post_offset N, bitmask N)"
                ));
            }
        }
    }
    if base.is_some() && !string {
        return Err("a base (hex, dec, oct) needs `string`".into());
    }
    check_nbytes(nbytes, string)?;
    j.enc = encoding(string, base.unwrap_or(0), little);
    Ok(j)
}

/// `byte_extract:bytes, offset, name[, flags]` (rust/src/detect/byte_extract.rs): defines
/// the variable in `ls`.
pub(super) fn parse_byte_extract(v: &str, ls: &mut Lists) -> Result<ByteExtract, String> {
    let p = parts(v);
    if !(3..=10).contains(&p.len()) {
        return Err("needs bytes, offset and a variable name (and at most 7 options)".into());
    }
    let nbytes: u8 = p[0]
        .parse()
        .map_err(|_| format!("`{}` is not a byte count", p[0]))?;
    let offset = int_in(p[1], i64::from(i16::MIN), i64::from(i16::MAX))?;
    let name = p[2];
    let (mut relative, mut string, mut base, mut endian) = (false, false, None, None);
    let (mut multiplier, mut align) = (None, None);
    let twice = |k: &str| format!("`{k}` given twice");
    for (k, val) in flag_parts(&p[3..])? {
        match (k.as_str(), val) {
            ("relative", None) if relative => return Err(twice(&k)),
            ("relative", None) => relative = true,
            ("string", None) if string => return Err(twice(&k)),
            ("string", None) if base.is_some() => {
                return Err("write `string` before its base".into());
            }
            ("string", None) => string = true,
            ("big" | "little", None) if endian.is_some() => {
                return Err("the byte order is given twice".into());
            }
            ("big" | "little", None) => endian = Some(k == "little"),
            ("dce", None) => return Err(dce()),
            ("slice", None) => {
                return Err("`slice` is not supported (Suricata refuses it too)".into());
            }
            ("multiplier", Some(_)) if multiplier.is_some() => return Err(twice(&k)),
            ("multiplier", Some(m)) => multiplier = Some(int_in(m, 1, 65535)? as u64),
            ("align", Some(_)) if align.is_some() => return Err(twice(&k)),
            ("align", Some(a)) => match a {
                "2" | "4" => align = Some(if a == "2" { 2 } else { 4 }),
                _ => return Err(format!("align is 2 or 4, not `{a}`")),
            },
            (b, None) if base_of(b).is_some() => {
                if !string {
                    return Err("a base (hex, dec, oct) needs `string` before it".into());
                }
                if base.is_some() {
                    return Err("the base is given twice".into());
                }
                base = base_of(b);
            }
            _ => {
                return Err(format!(
                    "unknown byte_extract option `{k}` (relative, multiplier N, big, little, string, hex, dec, oct, align 2|4)"
                ));
            }
        }
    }
    if string && endian.is_some() {
        return Err("`string` and a byte order exclude each other".into());
    }
    let base = base.unwrap_or(10);
    let max = match (string, base) {
        (false, _) => 8,
        (true, 8) => 23,
        (true, 16) => 14,
        (true, _) => 20,
    };
    // 0 with `string`: the digits up to the end of the buffer (Suricata reads them all).
    if u8::from(!string) > nbytes || nbytes > max {
        return Err(format!("{nbytes} bytes: this encoding reads at most {max}"));
    }
    let var = ls.define_var(name)?;
    Ok(ByteExtract {
        nbytes,
        offset,
        var,
        relative,
        enc: encoding(string, base, endian == Some(true)),
        multiplier: multiplier.unwrap_or(1),
        align: align.unwrap_or(0),
    })
}

/// One value of an unsigned-integer keyword: `0x` hex, or decimal with an optional unit
/// (`kb`/`kib`, `mb`/`mib`, `gb`/`gib`, powers of 1024). Returns it and the rest.
fn uint_value(s: &str, max: u64) -> Option<(u64, &str)> {
    let (v, rest) = if let Some(h) = s.strip_prefix("0x") {
        let end = h.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(h.len());
        (u64::from_str_radix(h.get(..end)?, 16).ok()?, &h[end..])
    } else {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let v: u64 = s.get(..end)?.parse().ok()?;
        let rest = &s[end..];
        let lower = rest.to_ascii_lowercase();
        let unit = [
            ("kib", 10),
            ("kb", 10),
            ("mib", 20),
            ("mb", 20),
            ("gib", 30),
            ("gb", 30),
        ]
        .iter()
        .find(|(u, _)| lower.starts_with(u));
        match unit {
            Some((u, shift)) if v >= 1 => (v.checked_mul(1 << shift)?, &rest[u.len()..]),
            _ => (v, rest),
        }
    };
    (v <= max).then_some((v, rest))
}

/// Suricata's unsigned-integer forms (rust/src/detect/uint.rs, `detect_parse_uint`):
/// `N`, `=N`, `<N`, `<=N`, `>N`, `>=N`, `!N`, `!=N`, `A-B` or `A<>B` (strictly between),
/// `!A-B` (outside), `&M=V` and `&M!=V` (bits). Returns the test and the unparsed rest.
pub(super) fn parse_uint_prefix(v: &str, max: u64) -> Result<(UintCmp, &str), String> {
    let bad = || {
        format!(
            "`{}` is not a number test (N, <N, >N, <=N, >=N, !N, A-B, &M=V)",
            v.trim()
        )
    };
    let s = v.trim_start_matches(' ');
    let cmp = |mode, a, b| UintCmp { mode, a, b };
    // &M=V / &M!=V
    if let Some(r) = s.strip_prefix('&') {
        let (m, r) = uint_value(r.trim_start_matches(' '), max).ok_or_else(bad)?;
        let r = r.trim_start_matches(' ');
        let (neg, r) = match r.strip_prefix("!=") {
            Some(r) => (true, r),
            None => (false, r.strip_prefix('=').ok_or_else(bad)?),
        };
        let (val, r) = uint_value(r.trim_start_matches(' '), max).ok_or_else(bad)?;
        if val & m != val {
            return Err(format!("`&{m}={val}` can never match"));
        }
        let mode = if neg {
            UintMode::NegBitmask
        } else {
            UintMode::Bitmask
        };
        return Ok((cmp(mode, m, val), r));
    }
    // [!]A-B / [!]A<>B
    let (neg, body) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if let Some((a, r)) = uint_value(body, max) {
        let r2 = r.trim_start_matches(' ');
        if let Some(r3) = r2.strip_prefix('-').or_else(|| r2.strip_prefix("<>")) {
            let (b, rest) = uint_value(r3.trim_start_matches(' '), max).ok_or_else(bad)?;
            if b <= a || b - a <= 1 {
                return Err(format!("in `{a}-{b}`, nothing lies strictly between"));
            }
            let mode = if neg {
                UintMode::NegRange
            } else {
                UintMode::Range
            };
            return Ok((cmp(mode, a, b), rest));
        }
        if !neg {
            return Ok((cmp(UintMode::Eq, a, 0), r));
        }
    }
    // =N, <N, ...
    let ops = [
        (">=", UintMode::Ge),
        ("<=", UintMode::Le),
        (">", UintMode::Gt),
        ("<", UintMode::Lt),
        ("!=", UintMode::Ne),
        ("!", UintMode::Ne),
        ("=", UintMode::Eq),
    ];
    let (op, mode) = ops.iter().find(|(o, _)| s.starts_with(o)).ok_or_else(bad)?;
    let (a, rest) = uint_value(s[op.len()..].trim_start_matches(' '), max).ok_or_else(bad)?;
    let never = match mode {
        UintMode::Lt | UintMode::Ge => a == 0,
        UintMode::Le | UintMode::Gt => a == max,
        _ => false,
    };
    if never {
        return Err(format!("`{}` is always or never true", v.trim()));
    }
    Ok((cmp(*mode, a, 0), rest))
}

/// A whole unsigned-integer test (`bsize`).
pub(super) fn parse_uint(v: &str, max: u64) -> Result<UintCmp, String> {
    let (c, rest) = parse_uint_prefix(v, max)?;
    if !rest.trim().is_empty() {
        return Err(format!(
            "unexpected `{}` after the number test",
            rest.trim()
        ));
    }
    Ok(c)
}

/// `urilen:TEST[, raw|norm]` (rust/src/detect/uri.rs): the test over a u16 and whether it
/// is on the raw URI.
pub(super) fn parse_urilen(v: &str) -> Result<(UintCmp, bool), String> {
    let (c, rest) = parse_uint_prefix(v, u64::from(u16::MAX))?;
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok((c, false));
    }
    match rest.strip_prefix(',').map(str::trim) {
        Some("raw") => Ok((c, true)),
        Some("norm") => Ok((c, false)),
        _ => Err(format!("expected `, raw` or `, norm`, got `{rest}`")),
    }
}

/// `flowbits:CMD[, NAME]` (detect-flowbits.c): `None` for `noalert`. `isset` and
/// `isnotset` take `a|b` (one suffices) or `a&b` (all must hold).
pub(super) fn parse_flowbits(v: &str) -> Result<Option<FlowbitOp>, String> {
    let (cmd, name) = match v.split_once(',') {
        Some((c, n)) => (c.trim(), n.trim()),
        None => (v.trim(), ""),
    };
    let cmd = match cmd {
        "noalert" if name.is_empty() => return Ok(None),
        "noalert" => return Err("`noalert` takes no name".into()),
        "set" => FlowbitCmd::Set,
        "unset" => FlowbitCmd::Unset,
        "toggle" => FlowbitCmd::Toggle,
        "isset" => FlowbitCmd::IsSet,
        "isnotset" => FlowbitCmd::IsNotSet,
        c => {
            return Err(format!(
                "unknown flowbits command `{c}` (set, unset, toggle, isset, isnotset, noalert)"
            ));
        }
    };
    if name.is_empty() {
        return Err("needs a name (`flowbits:set,NAME`)".into());
    }
    let (sep, all) = match (name.contains('|'), name.contains('&')) {
        (true, true) => return Err("mix `|` or `&`, not both".into()),
        (true, false) => ('|', false),
        (false, true) => ('&', true),
        (false, false) => (',', false),
    };
    let names: Vec<String> = name
        .split(sep)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    if names.is_empty() {
        return Err("needs a name".into());
    }
    if names.iter().any(|n| n.contains(char::is_whitespace)) {
        return Err("flowbit names cannot contain spaces".into());
    }
    if names.len() > 1 && !matches!(cmd, FlowbitCmd::IsSet | FlowbitCmd::IsNotSet) {
        return Err("only isset and isnotset take several names".into());
    }
    Ok(Some(FlowbitOp { cmd, names, all }))
}

/// `app-layer-protocol:[!]NAME[, mode]`: (negated, protocol). relayd detects one protocol
/// per flow, so the modes that read the flow's protocol (`direction`, `final`, `either`,
/// `to_server`, `to_client`) coincide; `original` and protocol lists are refused.
pub(super) fn parse_app_test(v: &str) -> Result<(bool, AppProto), String> {
    let p = parts(v);
    let (neg, name) = match p[0].strip_prefix('!') {
        Some(r) => (true, r.trim()),
        None => (false, p[0]),
    };
    let mut exact = false;
    for q in &p[1..] {
        match *q {
            "direction" | "final" | "either" | "to_server" | "to_client" => {}
            "exact" => exact = true,
            "original" => {
                return Err(
                    "mode `original` is not supported: relayd does not follow protocol changes"
                        .into(),
                );
            }
            _ => return Err(format!("unknown mode `{q}`")),
        }
    }
    if name.contains('|') {
        return Err("a list of protocols is not supported: name one".into());
    }
    let proto = match name {
        "http" if exact => {
            return Err("`http,exact` never matches (Suricata refuses it): use http1".into());
        }
        "http" | "http1" => AppProto::Http,
        "tls" => AppProto::Tls,
        "dns" => AppProto::Dns,
        "failed" | "unknown" => {
            return Err(format!(
                "`{name}` is not supported: relayd does not report protocol detection state"
            ));
        }
        n => {
            return Err(format!(
                "protocol `{n}` is not detected by relayd (http, http1, tls, dns)"
            ));
        }
    };
    Ok((neg, proto))
}
