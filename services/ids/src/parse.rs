//! The rule language: a Suricata subset, parsed into [`Rule`]s. Errors carry the file, the
//! line a rule starts on and the keyword at fault; one bad rule never stops the others.

use crate::classify::{Classes, DEFAULT_PRIORITY};
use crate::rule::*;
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

/// A rule that could not be loaded: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {}{message}", keyword_prefix(.keyword))]
pub struct RuleError {
    /// The rules file.
    pub file: String,
    /// The line the rule starts on (1-based).
    pub line: usize,
    /// The keyword (or header field) at fault, if one is.
    pub keyword: Option<String>,
    /// What is wrong.
    pub message: String,
}

fn keyword_prefix(k: &Option<String>) -> String {
    match k {
        Some(k) => format!("`{k}`: "),
        None => String::new(),
    }
}

/// A parse error before it is given its place: (keyword, message).
type PErr = (Option<String>, String);

fn kerr(kw: &str, msg: impl Into<String>) -> PErr {
    (Some(kw.to_string()), msg.into())
}

/// What a rule refers to while being parsed.
pub(crate) struct Ctx<'a> {
    pub(crate) vars: &'a BTreeMap<String, String>,
    pub(crate) classes: &'a Classes,
}

impl Ctx<'_> {
    fn var(&self, name: &str) -> Result<&str, String> {
        self.vars
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("undefined variable ${name} (set it in the service's `vars`)"))
    }
}

/// Parses the rules in `text` (the contents of `file`), appending good rules to `rules` and
/// problems to `errors`. `sids` holds the sids already loaded (duplicates are errors).
pub(crate) fn parse_text(
    text: &str,
    file: &Arc<str>,
    ctx: &Ctx<'_>,
    sids: &mut HashSet<u32>,
    rules: &mut Vec<Rule>,
    errors: &mut Vec<RuleError>,
) {
    let mut logical = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if logical.is_empty() {
            start = i + 1;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
        }
        if let Some(head) = line.strip_suffix('\\') {
            logical.push_str(head);
            continue;
        }
        logical.push_str(line);
        let text = std::mem::take(&mut logical);
        match parse_rule(&text, file, start, ctx) {
            Ok(rule) => {
                if sids.insert(rule.sid) {
                    rules.push(rule);
                } else {
                    errors.push(RuleError {
                        file: file.to_string(),
                        line: start,
                        keyword: Some("sid".into()),
                        message: format!("duplicate sid {}", rule.sid),
                    });
                }
            }
            Err((keyword, message)) => errors.push(RuleError {
                file: file.to_string(),
                line: start,
                keyword,
                message,
            }),
        }
    }
    if !logical.is_empty() {
        errors.push(RuleError {
            file: file.to_string(),
            line: start,
            keyword: None,
            message: "file ends inside a continued (`\\`) rule".into(),
        });
    }
}

/// Splits `s` at `sep` outside brackets.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut from = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[from..i]);
                from = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// Splits the header at whitespace outside brackets.
fn header_tokens(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut from: Option<usize> = None;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if let Some(f) = from.take() {
                out.push(&s[f..i]);
            }
        } else if from.is_none() {
            from = Some(i);
        }
    }
    if let Some(f) = from {
        out.push(&s[f..]);
    }
    out
}

/// Parses one (logical) rule line.
pub(crate) fn parse_rule(
    s: &str,
    file: &Arc<str>,
    line: usize,
    ctx: &Ctx<'_>,
) -> Result<Rule, PErr> {
    let open = s
        .find('(')
        .ok_or_else(|| (None, "no options: a rule ends with `(...)`".to_string()))?;
    let close = s
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| (None, "options are not closed with `)`".to_string()))?;
    if !s[close + 1..].trim().is_empty() {
        return Err((None, "text after the closing `)`".into()));
    }
    let head = header_tokens(&s[..open]);
    let [action, proto, src, sport, dir, dst, dport] = head[..] else {
        return Err((
            None,
            format!(
                "the header needs 7 fields (action proto src sport -> dst dport), found {}",
                head.len()
            ),
        ));
    };
    let action = match action {
        "alert" => RuleAction::Alert,
        "drop" => RuleAction::Drop,
        "pass" => RuleAction::Pass,
        "reject" | "rejectsrc" | "rejectboth" => RuleAction::Reject,
        "ratelimit" => RuleAction::Ratelimit,
        "rejectdst" | "sdrop" | "log" | "config" => {
            return Err(kerr(action, "action is not supported"));
        }
        _ => return Err(kerr(action, "unknown action")),
    };
    let proto = match proto {
        "ip" | "pkthdr" => RuleProto::Ip,
        "tcp" | "tcp-pkt" => RuleProto::Tcp,
        "udp" => RuleProto::Udp,
        "icmp" => RuleProto::Icmp,
        "tcp-stream" | "icmpv4" | "icmpv6" | "sctp" | "ipv4" | "ipv6" | "ip4" | "ip6" => {
            return Err(kerr(
                proto,
                "protocol is not supported (use ip, tcp, udp or icmp)",
            ));
        }
        p => {
            return Err(kerr(
                p,
                "application-layer protocols are not supported: relayd inspects packets (use tcp/udp and ports)",
            ));
        }
    };
    let bidir = match dir {
        "->" => false,
        "<>" => true,
        d => return Err(kerr(d, "the direction is `->` or `<>`")),
    };
    let addr = |v: &str, what: &str| {
        parse_addr(v, ctx, 0).map_err(|m| kerr(what, format!("{m} in `{v}`")))
    };
    let port = |v: &str, what: &str| {
        parse_ports(v, ctx, 0).map_err(|m| kerr(what, format!("{m} in `{v}`")))
    };
    let mut r = Rule {
        action,
        proto,
        sid: 0,
        rev: 0,
        msg: String::new(),
        classtype: None,
        category: String::new(),
        priority: DEFAULT_PRIORITY,
        file: file.clone(),
        line,
        src: addr(src, "source address")?,
        sport: port(sport, "source port")?,
        dst: addr(dst, "destination address")?,
        dport: port(dport, "destination port")?,
        bidir,
        contents: Vec::new(),
        pcres: Vec::new(),
        dsize: None,
        ttl: None,
        itype: None,
        icode: None,
        flags: None,
        flow: None,
        threshold: None,
        filter: None,
        rate: None,
        fast: None,
    };
    if proto == RuleProto::Icmp && !(r.sport.is_any() && r.dport.is_any()) {
        return Err(kerr("icmp", "ICMP has no ports: write `any`"));
    }
    let mut sid = None;
    let mut priority = None;
    for (name, value) in split_options(&s[open + 1..close])? {
        option(
            &mut r,
            &name,
            value.as_deref(),
            ctx,
            &mut sid,
            &mut priority,
        )?;
    }
    r.sid = sid.ok_or_else(|| kerr("sid", "every rule needs a sid"))?;
    if let Some(p) = priority {
        r.priority = p;
    }
    match (r.action, r.rate.is_some(), r.filter.is_some()) {
        (RuleAction::Ratelimit, false, false) => {
            return Err(kerr(
                "ratelimit",
                "a ratelimit rule needs `rate` or `detection_filter`",
            ));
        }
        (RuleAction::Ratelimit, true, true) => {
            return Err(kerr(
                "rate",
                "use either `rate` or `detection_filter`, not both",
            ));
        }
        (a, true, _) if a != RuleAction::Ratelimit => {
            return Err(kerr("rate", "`rate` is only for ratelimit rules"));
        }
        _ => {}
    }
    if (r.itype.is_some() || r.icode.is_some()) && !matches!(proto, RuleProto::Icmp | RuleProto::Ip)
    {
        return Err(kerr("itype", "itype/icode need an icmp (or ip) rule"));
    }
    if r.flags.is_some() && !matches!(proto, RuleProto::Tcp | RuleProto::Ip) {
        return Err(kerr("flags", "flags needs a tcp (or ip) rule"));
    }
    r.fast = r.contents.iter().position(|c| c.fast_pattern).or_else(|| {
        // The longest non-negated content; the first of equals.
        let mut best: Option<usize> = None;
        for (i, c) in r.contents.iter().enumerate() {
            if !c.negated && best.is_none_or(|b| c.pat.len() > r.contents[b].pat.len()) {
                best = Some(i);
            }
        }
        best
    });
    Ok(r)
}

/// Applies one option to the rule under construction.
fn option(
    r: &mut Rule,
    name: &str,
    value: Option<&str>,
    ctx: &Ctx<'_>,
    sid: &mut Option<u32>,
    priority: &mut Option<u8>,
) -> Result<(), PErr> {
    let need = || value.ok_or_else(|| kerr(name, "needs a value (`keyword:value;`)"));
    let num = |v: &str| -> Result<u32, PErr> {
        v.trim()
            .parse::<u32>()
            .map_err(|_| kerr(name, format!("`{v}` is not a number")))
    };
    let flag = || match value {
        None => Ok(()),
        Some(_) => Err(kerr(name, "takes no value")),
    };
    match name {
        "msg" => r.msg = unescape(unquote(need()?).map_err(|m| kerr(name, m))?.1),
        "sid" => {
            let v = num(need()?)?;
            if v == 0 {
                return Err(kerr(name, "sid 0 is reserved"));
            }
            *sid = Some(v);
        }
        "rev" => r.rev = num(need()?)?,
        "gid" => {
            if num(need()?)? != 1 {
                return Err(kerr(name, "only gid 1 (rules) is supported"));
            }
        }
        "priority" => {
            let p = num(need()?)?;
            if !(1..=255).contains(&p) {
                return Err(kerr(name, "priority is 1..255"));
            }
            *priority = Some(p as u8);
        }
        "classtype" => {
            let c = need()?.trim();
            let (desc, prio) = ctx
                .classes
                .get(c)
                .ok_or_else(|| kerr(name, format!("unknown classtype `{c}`")))?;
            r.classtype = Some(c.to_string());
            r.category = desc.clone();
            r.priority = *prio;
        }
        "reference" | "metadata" | "target" | "rawbytes" => {}
        "content" => {
            let (neg, raw) = unquote(need()?).map_err(|m| kerr(name, m))?;
            let bytes = content_bytes(raw).map_err(|m| kerr(name, m))?;
            r.contents.push(Content::new(bytes, neg));
        }
        "nocase" | "offset" | "depth" | "distance" | "within" | "fast_pattern" | "startswith"
        | "endswith" => {
            let c = r
                .contents
                .last_mut()
                .ok_or_else(|| kerr(name, "a content modifier needs a `content` before it"))?;
            let absolute = |c: &Content| c.offset.is_some() || c.depth.is_some();
            let mixed = || {
                kerr(
                    name,
                    "offset/depth and distance/within cannot be mixed on one content",
                )
            };
            let dup = || kerr(name, "given twice for one content");
            match name {
                "nocase" => {
                    flag()?;
                    c.set_nocase();
                }
                "offset" | "depth" => {
                    if c.relative() {
                        return Err(mixed());
                    }
                    let v = num(need()?)?;
                    let slot = if name == "offset" {
                        &mut c.offset
                    } else {
                        &mut c.depth
                    };
                    if slot.replace(v).is_some() {
                        return Err(dup());
                    }
                    if name == "depth" && (v as usize) < c.pat.len() {
                        return Err(kerr(name, "depth is shorter than the content"));
                    }
                }
                "distance" => {
                    if absolute(c) {
                        return Err(mixed());
                    }
                    let v = need()?.trim();
                    let v: i32 = v
                        .parse()
                        .map_err(|_| kerr(name, format!("`{v}` is not a number")))?;
                    if c.distance.replace(v).is_some() {
                        return Err(dup());
                    }
                }
                "within" => {
                    if absolute(c) {
                        return Err(mixed());
                    }
                    let v = num(need()?)?;
                    if (v as usize) < c.pat.len() {
                        return Err(kerr(name, "within is shorter than the content"));
                    }
                    if c.within.replace(v).is_some() {
                        return Err(dup());
                    }
                }
                "fast_pattern" => {
                    match value.map(str::trim) {
                        None | Some("only") => {}
                        Some(_) => {
                            return Err(kerr(
                                name,
                                "fast_pattern chopping (`fast_pattern:o,l`) is not supported",
                            ));
                        }
                    }
                    if c.negated {
                        return Err(kerr(name, "a negated content cannot be the fast pattern"));
                    }
                    c.fast_pattern = true;
                }
                _ => {
                    return Err(kerr(
                        name,
                        "unsupported keyword (write offset:0 with depth, or a pcre, instead)",
                    ));
                }
            }
            if name == "fast_pattern" && r.contents.iter().filter(|c| c.fast_pattern).count() > 1 {
                return Err(kerr(name, "only one content may be the fast pattern"));
            }
        }
        "pcre" => {
            let p = parse_pcre(need()?).map_err(|m| kerr(name, m))?;
            r.pcres.push(p);
        }
        "dsize" => set_once(
            &mut r.dsize,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "ttl" => set_once(
            &mut r.ttl,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "itype" => set_once(
            &mut r.itype,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "icode" => set_once(
            &mut r.icode,
            parse_cmp(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "flags" => set_once(
            &mut r.flags,
            parse_flags(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "flow" => set_once(
            &mut r.flow,
            parse_flow(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        "threshold" => {
            let t = parse_threshold(need()?).map_err(|m| kerr(name, m))?;
            set_once(&mut r.threshold, t, name)?
        }
        "detection_filter" => {
            let kv =
                key_values(need()?, &["track", "count", "seconds"]).map_err(|m| kerr(name, m))?;
            let f = DetectionFilter {
                track: parse_track(kv[0]).map_err(|m| kerr(name, m))?,
                count: positive(kv[1], "count").map_err(|m| kerr(name, m))?,
                seconds: positive(kv[2], "seconds").map_err(|m| kerr(name, m))?,
            };
            set_once(&mut r.filter, f, name)?
        }
        "rate" => set_once(
            &mut r.rate,
            parse_rate(need()?).map_err(|m| kerr(name, m))?,
            name,
        )?,
        n if n.contains('.')
            || n.starts_with("http")
            || n.starts_with("dns")
            || n.starts_with("tls")
            || n.starts_with("file")
            || n.starts_with("ja3")
            || n.starts_with("ssh")
            || n.starts_with("smb")
            || n.starts_with("app-layer") =>
        {
            return Err(kerr(
                n,
                "application-layer keywords are not supported: relayd inspects single packets",
            ));
        }
        n => return Err(kerr(n, "unsupported keyword")),
    }
    Ok(())
}

fn set_once<T>(slot: &mut Option<T>, v: T, name: &str) -> Result<(), PErr> {
    if slot.replace(v).is_some() {
        return Err(kerr(name, "given twice"));
    }
    Ok(())
}

/// Splits the option list at `;` outside quotes (`\;` stays escaped).
fn split_options(s: &str) -> Result<Vec<(String, Option<String>)>, PErr> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = s.chars();
    let mut push = |cur: &str| {
        let t = cur.trim();
        if t.is_empty() {
            return;
        }
        match t.split_once(':') {
            Some((n, v)) => out.push((n.trim().to_string(), Some(v.trim().to_string()))),
            None => out.push((t.to_string(), None)),
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ';' if !quoted => {
                push(&cur);
                cur.clear();
            }
            _ => cur.push(c),
        }
    }
    if quoted {
        return Err((None, "unterminated quoted string in the options".into()));
    }
    push(&cur);
    Ok(out)
}

/// `"..."` or `!"..."`: (negated, the raw text between the quotes).
fn unquote(v: &str) -> Result<(bool, &str), String> {
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
fn unescape(s: &str) -> String {
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
fn content_bytes(raw: &str) -> Result<Vec<u8>, String> {
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
fn parse_expr<T>(
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

fn parse_addr(s: &str, ctx: &Ctx<'_>, depth: u32) -> Result<AddrExpr, String> {
    parse_expr(s, ctx, depth, "address", &parse_net)
}

fn parse_net(s: &str) -> Result<Net, String> {
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

fn parse_ports(s: &str, ctx: &Ctx<'_>, depth: u32) -> Result<PortExpr, String> {
    parse_expr(s, ctx, depth, "port", &parse_port_range)
}

/// One port or range: `80`, `1024:`, `:1023`, `8000:8080`.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
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

fn parse_cmp(v: &str) -> Result<Cmp, String> {
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

fn flag_bits(s: &str) -> Result<u8, String> {
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

fn parse_flags(v: &str) -> Result<Flags, String> {
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

fn parse_flow(v: &str) -> Result<Flow, String> {
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
            "stateless" => {}
            "" => {}
            _ => {
                return Err(format!(
                    "flow option `{k}` is not supported (established, not_established, stateless, to_server, to_client, from_server, from_client)"
                ));
            }
        }
    }
    Ok(f)
}

/// Parses `k v, k v, ...` requiring exactly the `keys` (any order); returns values in `keys` order.
fn key_values<'a>(v: &'a str, keys: &[&str]) -> Result<Vec<&'a str>, String> {
    let mut vals: Vec<Option<&str>> = vec![None; keys.len()];
    for part in v.split(',') {
        let mut it = part.split_whitespace();
        let (Some(k), Some(val), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("expected `key value`, got `{}`", part.trim()));
        };
        let i = keys
            .iter()
            .position(|x| *x == k)
            .ok_or_else(|| format!("unknown setting `{k}` (expected {})", keys.join(", ")))?;
        if vals[i].replace(val).is_some() {
            return Err(format!("`{k}` given twice"));
        }
    }
    vals.iter()
        .zip(keys)
        .map(|(v, k)| v.ok_or_else(|| format!("missing `{k}`")))
        .collect()
}

fn positive(v: &str, what: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{what} must be a positive number, got `{v}`"))
}

fn parse_track(v: &str) -> Result<Track, String> {
    Ok(match v {
        "by_src" => Track::Src,
        "by_dst" => Track::Dst,
        "by_both" => Track::Both,
        "by_rule" => Track::Rule,
        _ => {
            return Err(format!(
                "track is by_src, by_dst, by_both or by_rule, not `{v}`"
            ));
        }
    })
}

fn parse_threshold(v: &str) -> Result<Threshold, String> {
    let kv = key_values(v, &["type", "track", "count", "seconds"])?;
    let kind = match kv[0] {
        "limit" => ThresholdKind::Limit,
        "threshold" => ThresholdKind::Threshold,
        "both" => ThresholdKind::Both,
        t => {
            return Err(format!(
                "threshold type is limit, threshold or both, not `{t}`"
            ));
        }
    };
    Ok(Threshold {
        kind,
        track: parse_track(kv[1])?,
        count: positive(kv[2], "count")?,
        seconds: positive(kv[3], "seconds")?,
    })
}

/// `rate:N/unit[, burst B][, track by_x]`; unit s, m or h. The burst defaults to N.
fn parse_rate(v: &str) -> Result<Rate, String> {
    let mut parts = v.split(',');
    let head = parts.next().unwrap_or("").trim();
    let (n, unit) = head
        .split_once('/')
        .ok_or_else(|| format!("expected `N/s`, `N/m` or `N/h`, got `{head}`"))?;
    let n = positive(n.trim(), "rate")?;
    let secs = match unit.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        u => return Err(format!("rate unit is s, m or h, not `{u}`")),
    };
    let mut rate = Rate {
        track: Track::Rule,
        per_sec: n as f64 / secs,
        burst: n as f64,
    };
    for p in parts {
        let mut it = p.split_whitespace();
        match (it.next(), it.next(), it.next()) {
            (Some("burst"), Some(b), None) => rate.burst = positive(b, "burst")? as f64,
            (Some("track"), Some(t), None) => rate.track = parse_track(t)?,
            _ => {
                return Err(format!(
                    "expected `burst N` or `track by_x`, got `{}`",
                    p.trim()
                ));
            }
        }
    }
    Ok(rate)
}

/// `"/pattern/flags"` (or negated) to a bytes regex. PCRE features the `regex` crate lacks
/// are refused by name rather than by a parse error deep in the pattern.
fn parse_pcre(v: &str) -> Result<Pcre, String> {
    let (negated, raw) = unquote(v)?;
    // Only the rule language's own escapes go: the rest belongs to the pattern.
    let raw = raw.replace("\\;", ";").replace("\\\"", "\"");
    let body = raw
        .strip_prefix('/')
        .ok_or("a pcre is written \"/pattern/flags\"")?;
    let end = body
        .rfind('/')
        .ok_or("a pcre is written \"/pattern/flags\"")?;
    let (pat, flags) = (&body[..end], &body[end + 1..]);
    let mut b = regex::bytes::RegexBuilder::new(pat);
    // PCRE without the UTF flag works on bytes: `.` is any byte but newline, classes are ASCII.
    // Octal escapes are bytes as in PCRE (`\0`, `\012`, `[\1]`): the `\1`..`\9` outside a
    // class that PCRE would read as backreferences are refused first (check_pcre_features).
    b.unicode(false)
        .octal(true)
        .size_limit(4 << 20)
        .dfa_size_limit(2 << 20);
    for f in flags.chars() {
        match f {
            'i' => {
                b.case_insensitive(true);
            }
            's' => {
                b.dot_matches_new_line(true);
            }
            'm' => {
                b.multi_line(true);
            }
            'x' => {
                b.ignore_whitespace(true);
            }
            'R' => {
                return Err(
                    "pcre flag `R` (relative to the previous match) is not supported".into(),
                );
            }
            'U' | 'I' | 'P' | 'Q' | 'H' | 'D' | 'M' | 'C' | 'S' | 'Y' | 'B' | 'O' | 'V' | 'W' => {
                return Err(format!(
                    "pcre flag `{f}` (a Suricata buffer or engine modifier) is not supported: relayd matches the packet payload"
                ));
            }
            'A' | 'E' | 'G' => {
                return Err(format!(
                    "PCRE-specific flag `{f}` is not supported (use `^`, `\\z` or lazy quantifiers in the pattern)"
                ));
            }
            _ => return Err(format!("unknown pcre flag `{f}`")),
        }
    }
    check_pcre_features(pat)?;
    let re = b.build().map_err(|e| format!("cannot compile pcre: {e}"))?;
    Ok(Pcre { re, negated })
}

/// Refuses the PCRE constructs the `regex` crate does not have (it guarantees linear time
/// by leaving them out), each with its name.
fn check_pcre_features(p: &str) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
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
        let r =
            ctx_rule("alert ip [10.0.0.0/8,!10.1.0.0/16] any -> [2001:db8::/32] !1:1023 (sid:1;)")
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
}
