//! The rule language: a Suricata subset, parsed into [`Rule`]s. Errors carry the file, the
//! line a rule starts on and the keyword at fault; one bad rule never stops the others.

use crate::classify::{Classes, DEFAULT_PRIORITY};
use crate::rule::*;
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

mod threshold;
mod values;

use threshold::*;
use values::*;

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
            let ported = matches!(r.proto, RuleProto::Tcp | RuleProto::Udp);
            let f = parse_detection_filter(need()?, ported).map_err(|m| kerr(name, m))?;
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

#[cfg(test)]
mod tests;
