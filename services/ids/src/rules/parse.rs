//! The rule language: a Suricata subset, parsed into [`Rule`]s. Errors carry the file, the
//! line a rule starts on and the keyword at fault; one bad rule never stops the others.

use crate::applayer::AppProto;
use crate::applayer::buffer::Buffer;
use crate::rules::bytes::Bsize;
use crate::rules::classify::{Classes, DEFAULT_PRIORITY};
use crate::rules::rule::*;
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

mod keywords;
mod lists;
mod modifiers;
mod options;
mod threshold;
mod threshold_file;
mod values;

use keywords::*;
use lists::Lists;
use options::option;
use threshold::*;
use values::*;

pub(crate) use threshold_file::{NewAction, RateFilter, apply as apply_threshold_file};

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

/// The logical lines of a rules or threshold file: blank lines and `#` comments skipped,
/// a line ending in `\\` joined with the next. Each is its first physical line's number
/// (from 1) and its text; a file that ends inside a continued line gives, last, `Err` with
/// that line's number.
pub(crate) fn logical_lines(
    text: &str,
) -> impl Iterator<Item = Result<(usize, String), usize>> + '_ {
    let mut lines = text.lines().enumerate();
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let mut logical = String::new();
        let mut start = 0;
        for (i, raw) in lines.by_ref() {
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
            return Some(Ok((start, logical)));
        }
        done = true;
        (!logical.is_empty()).then_some(Err(start))
    })
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
    for line in logical_lines(text) {
        let (start, text) = match line {
            Ok(l) => l,
            Err(start) => {
                errors.push(RuleError {
                    file: file.to_string(),
                    line: start,
                    keyword: None,
                    message: "file ends inside a continued (`\\`) rule".into(),
                });
                continue;
            }
        };
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
    let action = parse_action(action)?;
    let (proto, app, pkt_only) = parse_proto(proto)?;
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
        gid: 1,
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
        lists: Vec::new(),
        pcres: Vec::new(),
        noalert: false,
        bypass: false,
        flowbits: Vec::new(),
        app,
        app_test: Vec::new(),
        dsize: None,
        stream_events: 0,
        ttl: None,
        itype: None,
        icode: None,
        flags: None,
        flow: None,
        threshold: None,
        filter: None,
        rate: None,
        global: None,
        fast: None,
    };
    if proto == RuleProto::Icmp && !(r.sport.is_any() && r.dport.is_any()) {
        return Err(kerr("icmp", "ICMP has no ports: write `any`"));
    }
    let mut sid = None;
    let mut priority = None;
    let mut ls = Lists::default();
    for (name, value) in split_options(&s[open + 1..close])? {
        option(
            &mut r,
            &name,
            value.as_deref(),
            ctx,
            &mut sid,
            &mut priority,
            &mut ls,
        )?;
    }
    (r.lists, r.pcres) = ls.finish()?;
    if pkt_only {
        let f = r.flow.get_or_insert_with(Flow::default);
        if f.stream == StreamMode::Only {
            return Err(kerr("flow", "only_stream contradicts the tcp-pkt protocol"));
        }
        f.stream = StreamMode::No;
    }
    app_and_transport(&mut r)?;
    r.sid = sid.ok_or_else(|| kerr("sid", "every rule needs a sid"))?;
    if let Some(p) = priority {
        r.priority = p;
    }
    check_combinations(&r)?;
    r.fast = fast_pattern(&r.lists);
    Ok(r)
}

/// The header's action.
fn parse_action(action: &str) -> Result<RuleAction, PErr> {
    Ok(match action {
        "alert" => RuleAction::Alert,
        "drop" => RuleAction::Drop,
        "pass" => RuleAction::Pass,
        "reject" | "rejectsrc" | "rejectboth" => RuleAction::Reject,
        "ratelimit" => RuleAction::Ratelimit,
        "rejectdst" | "sdrop" | "log" | "config" => {
            return Err(kerr(action, "action is not supported"));
        }
        _ => return Err(kerr(action, "unknown action")),
    })
}

/// The header's protocol: (transport, application protocol, packets only).
fn parse_proto(proto: &str) -> Result<(RuleProto, Option<AppProto>, bool), PErr> {
    Ok(match proto {
        "ip" | "pkthdr" => (RuleProto::Ip, None, false),
        "tcp" => (RuleProto::Tcp, None, false),
        "tcp-pkt" => (RuleProto::Tcp, None, true),
        "udp" => (RuleProto::Udp, None, false),
        "icmp" => (RuleProto::Icmp, None, false),
        "http" | "http1" => (RuleProto::Tcp, Some(AppProto::Http), false),
        "tls" => (RuleProto::Tcp, Some(AppProto::Tls), false),
        "dns" => (RuleProto::TcpOrUdp, Some(AppProto::Dns), false),
        "tcp-stream" | "icmpv4" | "icmpv6" | "sctp" | "ipv4" | "ipv6" | "ip4" | "ip6" => {
            return Err(kerr(
                proto,
                "protocol is not supported (use ip, tcp, tcp-pkt, udp, icmp, http, tls or dns)",
            ));
        }
        p => {
            return Err(kerr(
                p,
                "application-layer protocol not supported (relayd parses http, dns and tls)",
            ));
        }
    })
}

/// The options that need each other or a protocol: `ratelimit` with `rate` or
/// `detection_filter`, `itype` / `icode` on ICMP, `flags` on TCP.
fn check_combinations(r: &Rule) -> Result<(), PErr> {
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
    if (r.itype.is_some() || r.icode.is_some())
        && !matches!(r.proto, RuleProto::Icmp | RuleProto::Ip)
    {
        return Err(kerr("itype", "itype/icode need an icmp (or ip) rule"));
    }
    if r.flags.is_some() && !matches!(r.proto, RuleProto::Tcp | RuleProto::Ip) {
        return Err(kerr("flags", "flags needs a tcp (or ip) rule"));
    }
    Ok(())
}

/// The content a prefilter looks for: the one marked `fast_pattern`, else the longest
/// non-negated content (the first of equals, in list order).
fn fast_pattern(lists: &[MatchList]) -> Option<(usize, usize)> {
    let contents = || {
        lists.iter().enumerate().flat_map(|(l, list)| {
            list.items
                .iter()
                .enumerate()
                .filter_map(move |(i, it)| match it {
                    Item::Content(c) => Some((l, i, c)),
                    _ => None,
                })
        })
    };
    if let Some((l, i, _)) = contents().find(|(_, _, c)| c.fast_pattern) {
        return Some((l, i));
    }
    let mut best: Option<(usize, usize, usize)> = None;
    for (l, i, c) in contents() {
        if !c.negated && best.is_none_or(|b| c.pat.len() > b.2) {
            best = Some((l, i, c.pat.len()));
        }
    }
    best.map(|(l, i, _)| (l, i))
}

/// The application protocol the buffers imply (one per rule, and the header's if it names
/// one), and the transport it narrows the rule to.
fn app_and_transport(r: &mut Rule) -> Result<(), PErr> {
    for list in &r.lists {
        let Some(p) = list.buffer.info().and_then(|i| i.proto) else {
            continue;
        };
        match r.app {
            Some(a) if a != p => {
                return Err(kerr(
                    list.buffer.name(),
                    format!(
                        "a rule inspects one application protocol: this buffer is {}, the rule is {}",
                        p.name(),
                        a.name()
                    ),
                ));
            }
            _ => r.app = Some(p),
        }
    }
    let Some(app) = r.app else { return Ok(()) };
    r.proto = match (app, r.proto) {
        (AppProto::Dns, RuleProto::Udp) => RuleProto::Udp,
        (AppProto::Dns, RuleProto::Tcp) => RuleProto::Tcp,
        (AppProto::Dns, RuleProto::Ip | RuleProto::TcpOrUdp) => RuleProto::TcpOrUdp,
        (AppProto::Http | AppProto::Tls, RuleProto::Tcp | RuleProto::Ip) => RuleProto::Tcp,
        (a, _) => {
            return Err(kerr(
                a.name(),
                format!(
                    "{} runs over tcp: the rule's protocol cannot carry it",
                    a.name()
                ),
            ));
        }
    };
    Ok(())
}

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
