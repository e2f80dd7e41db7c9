//! The values of rule options and header fields: quoted strings, content bytes, address
//! and port expressions, comparisons, flags, flow, thresholds, rates and PCRE (with its
//! `R` and buffer flags).

use super::*;

/// `"..."` or `!"..."`: (negated, the raw text between the quotes).
pub(super) fn unquote(v: &str) -> Result<(bool, &str), String> {
    let v = v.trim();
    let (neg, v) = match v.strip_prefix('!') {
        Some(r) => (true, r.trim_start()),
        None => (false, v),
    };
    let inner = v
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .filter(|_| v.len() >= 2)
        .ok_or_else(|| format!("expected a quoted string, got `{v}`"))?;
    Ok((neg, inner))
}

/// Removes backslash escapes (`\"`, `\;`, `\\`, ...).
pub(super) fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The bytes of a content string: text with escapes and `|hex|` runs.
pub(super) fn content_bytes(raw: &str) -> Result<Vec<u8>, String> {
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut hex: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if let Some(h) = hex.as_mut() {
            if c == b'|' {
                let digits: Vec<u8> = h
                    .iter()
                    .copied()
                    .filter(|d| !d.is_ascii_whitespace())
                    .collect();
                if !digits.len().is_multiple_of(2) {
                    return Err("odd number of hex digits between `|`".into());
                }
                for pair in digits.chunks(2) {
                    let s = std::str::from_utf8(pair).map_err(|_| "bad hex byte".to_string())?;
                    out.push(
                        u8::from_str_radix(s, 16)
                            .map_err(|_| format!("`{s}` is not a hex byte"))?,
                    );
                }
                hex = None;
            } else {
                h.push(c);
            }
            i += 1;
            continue;
        }
        match c {
            b'\\' => {
                let n = *b.get(i + 1).ok_or("trailing backslash")?;
                out.push(n);
                i += 2;
            }
            b'|' => {
                hex = Some(Vec::new());
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    if hex.is_some() {
        return Err("unterminated `|hex|` run".into());
    }
    if out.is_empty() {
        return Err("empty content".into());
    }
    Ok(out)
}

/// The list grammar addresses and ports share (`any`, `!x`, `$VAR`, `[a, !b, [c]]`, nested
/// to 16 levels); `leaf` parses one address or port item, `what` names it in errors.
pub(super) fn parse_expr<T>(
    s: &str,
    ctx: &Ctx<'_>,
    depth: u32,
    what: &str,
    leaf: &dyn Fn(&str) -> Result<T, String>,
) -> Result<Expr<T>, String> {
    let s = s.trim();
    if depth > 16 {
        return Err("variables nest too deep (a cycle?)".into());
    }
    if s.is_empty() {
        return Err(format!("empty {what}"));
    }
    let sub = |x: &str| parse_expr(x, ctx, depth + 1, what, leaf);
    if let Some(rest) = s.strip_prefix('!') {
        let e = sub(rest)?;
        if e.is_any() {
            return Err("`!any` matches nothing".into());
        }
        return Ok(Expr::List(vec![(true, e)]));
    }
    if let Some(name) = s.strip_prefix('$') {
        return sub(ctx.var(name)?);
    }
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("unbalanced brackets")?;
        let mut items = Vec::new();
        for part in split_top(inner, ',') {
            let p = part.trim();
            match p.strip_prefix('!') {
                Some(rest) => items.push((true, sub(rest)?)),
                None => items.push((false, sub(p)?)),
            }
        }
        return Ok(Expr::List(items));
    }
    if s == "any" {
        return Ok(Expr::Any);
    }
    leaf(s).map(Expr::Item)
}

pub(super) fn parse_addr(s: &str, ctx: &Ctx<'_>, depth: u32) -> Result<AddrExpr, String> {
    parse_expr(s, ctx, depth, "address", &parse_net)
}

pub(super) fn parse_net(s: &str) -> Result<Net, String> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = a
        .parse()
        .map_err(|_| format!("`{a}` is not an IP address"))?;
    let (max, base) = match ip {
        IpAddr::V4(_) => (32, 96),
        IpAddr::V6(_) => (128, 0),
    };
    let plen = match p {
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("`/{p}` is not a prefix length"))?,
        None => max,
    };
    let total = base + plen;
    let mask = if total == 0 {
        0
    } else {
        u128::MAX << (128 - total)
    };
    Ok(Net {
        addr: ip_key(ip) & mask,
        mask,
    })
}

pub(super) fn parse_ports(s: &str, ctx: &Ctx<'_>, depth: u32) -> Result<PortExpr, String> {
    parse_expr(s, ctx, depth, "port", &parse_port_range)
}

/// One port or range: `80`, `1024:`, `:1023`, `8000:8080`.
pub(super) fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map_err(|_| format!("`{p}` is not a port"))
    };
    let range = match s.split_once(':') {
        Some(("", hi)) => (0, port(hi)?),
        Some((lo, "")) => (port(lo)?, u16::MAX),
        Some((lo, hi)) => (port(lo)?, port(hi)?),
        None => {
            let p = port(s)?;
            (p, p)
        }
    };
    if range.0 > range.1 {
        return Err("empty port range".into());
    }
    Ok(range)
}

pub(super) fn parse_cmp(v: &str) -> Result<Cmp, String> {
    let v = v.trim();
    let n = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{}` is not a number", s.trim()))
    };
    if let Some((a, b)) = v.split_once("<>") {
        let (a, b) = (n(a)?, n(b)?);
        if a >= b {
            return Err("in `a<>b`, a must be below b".into());
        }
        return Ok(Cmp::Between(a, b));
    }
    Ok(if let Some(r) = v.strip_prefix("<=") {
        Cmp::Le(n(r)?)
    } else if let Some(r) = v.strip_prefix(">=") {
        Cmp::Ge(n(r)?)
    } else if let Some(r) = v.strip_prefix('<') {
        Cmp::Lt(n(r)?)
    } else if let Some(r) = v.strip_prefix('>') {
        Cmp::Gt(n(r)?)
    } else if let Some(r) = v.strip_prefix('!') {
        Cmp::Ne(n(r)?)
    } else {
        Cmp::Eq(n(v.strip_prefix('=').unwrap_or(v))?)
    })
}

pub(super) fn flag_bits(s: &str) -> Result<u8, String> {
    let mut m = 0u8;
    for c in s.trim().chars() {
        m |= match c.to_ascii_uppercase() {
            'F' => 0x01,
            'S' => 0x02,
            'R' => 0x04,
            'P' => 0x08,
            'A' => 0x10,
            'U' => 0x20,
            'E' | '2' => 0x40,
            'C' | '1' => 0x80,
            '0' => 0,
            _ => return Err(format!("unknown TCP flag `{c}` (FSRPAUCE0)")),
        };
    }
    Ok(m)
}

pub(super) fn parse_flags(v: &str) -> Result<Flags, String> {
    let (f, ignore) = match v.split_once(',') {
        Some((f, i)) => (f.trim(), flag_bits(i)?),
        None => (v.trim(), 0),
    };
    let (mode, letters) = match f.chars().next() {
        Some('!') => (FlagsMode::Not, &f[1..]),
        Some('+') => (FlagsMode::All, &f[1..]),
        Some('*') => (FlagsMode::Any, &f[1..]),
        _ => match f.chars().last() {
            Some('+') => (FlagsMode::All, &f[..f.len() - 1]),
            Some('*') => (FlagsMode::Any, &f[..f.len() - 1]),
            Some('!') => (FlagsMode::Not, &f[..f.len() - 1]),
            _ => (FlagsMode::Exact, f),
        },
    };
    if letters.is_empty() {
        return Err("no flags given".into());
    }
    Ok(Flags {
        mode,
        mask: flag_bits(letters)?,
        ignore,
    })
}

pub(super) fn parse_flow(v: &str) -> Result<Flow, String> {
    let mut f = Flow::default();
    let set = |slot: &mut Option<bool>, val: bool, k: &str| {
        if slot.is_some_and(|s| s != val) {
            return Err(format!("`{k}` contradicts an earlier flow option"));
        }
        *slot = Some(val);
        Ok(())
    };
    for k in v.split(',').map(str::trim) {
        match k {
            "established" => set(&mut f.established, true, k)?,
            "not_established" => set(&mut f.established, false, k)?,
            "to_server" | "from_client" => set(&mut f.reply, false, k)?,
            "to_client" | "from_server" => set(&mut f.reply, true, k)?,
            "only_stream" | "no_stream" => {
                let m = if k == "only_stream" {
                    StreamMode::Only
                } else {
                    StreamMode::No
                };
                if f.stream != StreamMode::Any && f.stream != m {
                    return Err(format!("`{k}` contradicts an earlier flow option"));
                }
                f.stream = m;
            }
            "stateless" => {}
            "" => {}
            _ => {
                return Err(format!(
                    "flow option `{k}` is not supported (established, not_established, stateless, to_server, to_client, from_server, from_client, only_stream, no_stream)"
                ));
            }
        }
    }
    Ok(f)
}

/// `"/pattern/flags"` (or negated) to a bytes regex. PCRE features the `regex` crate lacks
/// are refused by name rather than by a parse error deep in the pattern.
pub(super) fn parse_pcre(v: &str) -> Result<Pcre, String> {
    // Quotes are optional for pcre (Suricata's SIGMATCH_QUOTES_OPTIONAL).
    let t = v.trim();
    let bare = t.strip_prefix('!').unwrap_or(t).trim_start();
    let (negated, raw) = if bare.starts_with('"') {
        unquote(v)?
    } else {
        (t.starts_with('!'), bare)
    };
    // Only the rule language's own escapes go: the rest belongs to the pattern.
    let raw = raw.replace("\\;", ";").replace("\\\"", "\"");
    let body = raw
        .strip_prefix('/')
        .ok_or("a pcre is written \"/pattern/flags\"")?;
    let end = body
        .rfind('/')
        .ok_or("a pcre is written \"/pattern/flags\"")?;
    let (pat, flags) = (&body[..end], &body[end + 1..]);
    if flags.contains(',') {
        return Err("pcre captures into variables (`/re/,flow:name`) are not supported".into());
    }
    let (mut relative, mut buffer) = (false, None);
    let (mut nocase, mut dotall, mut multi, mut extended, mut dollar_end) =
        (false, false, false, false, false);
    for f in flags.chars() {
        match f {
            'i' => nocase = true,
            's' => dotall = true,
            'm' => multi = true,
            'x' => extended = true,
            // PCRE2_DOLLAR_ENDONLY: `$` only at the very end, the regex crate's own `$`.
            'E' => dollar_end = true,
            'R' => relative = true,
            // `B` (raw bytes) and `O` (no match limit) change nothing here: the payload is
            // not normalized, and the regex crate needs no match limit.
            'B' | 'O' => {}
            f => match Buffer::from_pcre_flag(f) {
                Some(sel) if buffer.is_some_and(|x| x != sel) => {
                    return Err(format!(
                        "pcre flag `{f}` selects a second buffer (`{}`)",
                        sel.name()
                    ));
                }
                Some(sel) => buffer = Some(sel),
                None if f.is_ascii_uppercase() && f != 'A' && f != 'G' => {
                    return Err(format!(
                        "pcre flag `{f}` (a Suricata buffer or engine modifier) is not supported"
                    ));
                }
                None => match f {
                    'A' | 'G' => {
                        return Err(format!(
                            "PCRE-specific flag `{f}` is not supported (use `^` or lazy quantifiers in the pattern)"
                        ));
                    }
                    _ => return Err(format!("unknown pcre flag `{f}`")),
                },
            },
        }
    }
    check_pcre_features(pat)?;
    if buffer == Some(Buffer::HttpHost)
        && !flags.contains('i')
        && pat.chars().any(|c| c.is_ascii_uppercase())
    {
        // Suricata refuses it too (detect-pcre.c): the buffer is lowercase.
        return Err("pcre flag `W` (http.host, a lowercase buffer) with capitals in the pattern never matches: add `i` or write it in lowercase".into());
    }
    // PCRE's `$` (without `m` or `E`) also matches before a newline ending the subject.
    let pat = if multi || dollar_end {
        pat.to_string()
    } else {
        pcre_dollar(pat)
    };
    let mut b = regex::bytes::RegexBuilder::new(&pat);
    // PCRE without the UTF flag works on bytes: `.` is any byte but newline, classes are ASCII.
    // Octal escapes are bytes as in PCRE (`\0`, `\012`, `[\1]`): the `\1`..`\9` outside a
    // class that PCRE would read as backreferences are refused first (check_pcre_features).
    b.unicode(false)
        .octal(true)
        .case_insensitive(nocase)
        .dot_matches_new_line(dotall)
        .multi_line(multi)
        .ignore_whitespace(extended)
        .size_limit(4 << 20)
        .dfa_size_limit(2 << 20);
    let re = b.build().map_err(|e| format!("cannot compile pcre: {e}"))?;
    Ok(Pcre {
        re,
        negated,
        relative,
        buffer,
    })
}

/// Rewrites each `$` outside a class as `(?:\n?\z)`: PCRE's default `$` matches at the end
/// and before a final newline, the regex crate's only at the end. (The rewritten match
/// takes the newline in; a following relative keyword then starts after it.)
fn pcre_dollar(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = String::with_capacity(p.len() + 8);
    let (mut i, mut from, mut in_class) = (0, 0, false);
    while i < b.len() {
        match b[i] {
            b'\\' => {
                i += 2;
                continue;
            }
            b'[' if !in_class => {
                in_class = true;
                i += 1;
                if b.get(i) == Some(&b'^') {
                    i += 1;
                }
                if b.get(i) == Some(&b']') {
                    i += 1;
                }
                continue;
            }
            b']' if in_class => in_class = false,
            b'$' if !in_class => {
                out.push_str(p.get(from..i).unwrap_or(""));
                out.push_str("(?:\\n?\\z)");
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push_str(p.get(from..).unwrap_or(""));
    out
}

/// Refuses the PCRE constructs the `regex` crate does not have (it guarantees linear time
/// by leaving them out), each with its name.
pub(super) fn check_pcre_features(p: &str) -> Result<(), String> {
    let b = p.as_bytes();
    let mut i = 0;
    let mut in_class = false;
    let refuse = |what: &str| {
        Err(format!(
            "pcre: {what} is not supported (the regex crate matches in linear time without it)"
        ))
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'\\' {
            match next {
                Some(b'1'..=b'9') if !in_class => return refuse("a backreference"),
                Some(b'k' | b'g') => return refuse("a backreference"),
                Some(b'K') => return refuse("\\K (match reset)"),
                Some(b'Q' | b'E') => return refuse("\\Q...\\E quoting"),
                Some(b'G') => return refuse("\\G"),
                Some(b'Z') => return refuse("\\Z (use \\z)"),
                Some(b'C' | b'X' | b'R') => return refuse("this escape"),
                _ => {}
            }
            i += 2;
            continue;
        }
        if in_class {
            if c == b']' {
                in_class = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'[' => {
                in_class = true;
                i += 1;
                if b.get(i) == Some(&b'^') {
                    i += 1;
                }
                if b.get(i) == Some(&b']') {
                    i += 1;
                }
                continue;
            }
            b'(' if next == Some(b'?') => match b.get(i + 2).copied() {
                Some(b'=' | b'!') => return refuse("lookahead"),
                Some(b'<') if matches!(b.get(i + 3), Some(b'=' | b'!')) => {
                    return refuse("lookbehind");
                }
                Some(b'>') => return refuse("an atomic group"),
                Some(b'(') => return refuse("a conditional group"),
                Some(b'R' | b'0'..=b'9' | b'+' | b'&') => return refuse("recursion"),
                Some(b'|') => return refuse("a branch reset group"),
                Some(b'#') => return refuse("an inline comment"),
                Some(b'-') if matches!(b.get(i + 3), Some(b'0'..=b'9')) => {
                    return refuse("recursion");
                }
                _ => {}
            },
            b'(' if next == Some(b'*') => return refuse("a backtracking verb"),
            b'*' | b'+' | b'?' | b'}' if next == Some(b'+') => {
                return refuse("a possessive quantifier");
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}
