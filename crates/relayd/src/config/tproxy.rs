//! The split proxy's transparent diversion: the `tcpsplit` services in the queues, the
//! TPROXY rules and policy route that divert the connections they mark, and the
//! transparent listener those connections reach (a `tproxy` section's, or one implied).

use super::daemon::{DaemonConfig, parse_u32};
use super::error::{Ctx, line_span};
use super::listeners::{ListenerKind, ListenerSpec};
use super::queue::QueueSpec;
use super::services::{ListenerSection, ServiceEntry};
use relay_control::{Family, Hook, Table};
use relay_proxy::TransparentConfig;
use relay_proxy::tproxy::{Divert, TproxySpec};
use relay_svc_tcpsplit::TcpSplitConfig;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use toml::Spanned;
use toml::de::DeValue;

/// The transparent diversion of the split proxy: the TPROXY rules (marks, port) and the
/// policy route relayd installs, for which families, to which listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TproxySetup {
    /// Marks, port, routing table and rule preference.
    pub spec: TproxySpec,
    /// Families whose rules are installed (those of the `tcpsplit` queues).
    pub families: Vec<Family>,
    /// Name of the transparent listener.
    pub listener: String,
}

/// Default `ip rule` preference and routing table of the split proxy's local route; they
/// are how `relayd cleanup` finds them after a crash.
pub const DEFAULT_TPROXY_TABLE: u32 = TproxySpec::DEFAULT_TABLE;
/// See [`DEFAULT_TPROXY_TABLE`].
pub const DEFAULT_TPROXY_RULE_PREF: u32 = TproxySpec::DEFAULT_RULE_PREF;

/// A `tcpsplit` instance that runs in a queue.
pub(super) struct SplitUse {
    name: String,
    cfg: TcpSplitConfig,
    span: Option<Range<usize>>,
}

/// Every `tcpsplit` instance in a queue, once each, and the families of those queues
/// (sorted). A queue that runs one must be in prerouting, where TPROXY diverts, and in
/// mangle only if the service repeats its SYNs (an accepted SYN leaves the hook, past the
/// TPROXY rules).
pub(super) fn split_uses(
    cx: &mut Ctx<'_>,
    queues: &[QueueSpec],
    services: &BTreeMap<String, ServiceEntry<'_>>,
) -> (Vec<SplitUse>, Vec<Family>) {
    let default_split: TcpSplitConfig =
        toml::from_str("").expect("tcpsplit has defaults for every option");
    let mut splits: Vec<SplitUse> = Vec::new();
    let mut families: Vec<Family> = Vec::new();
    for q in queues {
        for (name, f) in &q.services {
            if f.kind() != <TcpSplitConfig as relay_core::ServiceConfig>::KIND {
                continue;
            }
            let (cfg, span) = match services.get(name).and_then(|e| e.split.as_ref()) {
                Some((c, span)) => (c, Some(span.clone())),
                None => (&default_split, None),
            };
            if q.hook != Hook::Prerouting {
                cx.err(
                    Some(line_span(cx.text, q.line)),
                    format!("queue[{}].hook", q.index),
                    format!(
                        "service `{name}` (tcpsplit) must run in prerouting: TPROXY diverts only there"
                    ),
                );
            } else if q.table == Table::Mangle && !cfg.repeat {
                cx.err(
                    Some(line_span(cx.text, q.line)),
                    format!("queue[{}].table", q.index),
                    format!(
                        "service `{name}` (tcpsplit) in mangle prerouting needs repeat = true: an accepted SYN goes on to the next hook, past the TPROXY rules; or use table = \"raw\""
                    ),
                );
            }
            for fam in &q.families {
                if !families.contains(fam) {
                    families.push(*fam);
                }
            }
            if !splits.iter().any(|s| s.name == *name) {
                splits.push(SplitUse {
                    name: name.clone(),
                    cfg: cfg.clone(),
                    span,
                });
            }
        }
    }
    families.sort();
    (splits, families)
}

/// All instances feed one transparent listener: they must agree on what it reads, and
/// their mark may not overlap relayd's own mark bits.
pub(super) fn check_split_agreement(cx: &mut Ctx<'_>, splits: &[SplitUse], daemon: &DaemonConfig) {
    let Some(first) = splits.first() else {
        return;
    };
    for other in &splits[1..] {
        let same = other.cfg.mark == first.cfg.mark
            && other.cfg.upstream == first.cfg.upstream
            && other.cfg.transparent_source == first.cfg.transparent_source;
        if !same {
            cx.err(
                other.span.clone(),
                format!("service.{}", other.name),
                format!(
                    "mark, upstream and transparent_source must equal those of service `{}`: both divert to one transparent listener",
                    first.name
                ),
            );
        }
    }
    let m = first.cfg.mark;
    let taken = [
        (daemon.bypass_mark, "daemon.bypass_mark"),
        (daemon.ct_mark_bits.mask(), "daemon.ct_mark_bits"),
    ];
    for (bits, what) in taken {
        if m & bits != 0 {
            cx.err(
                first.span.clone(),
                format!("service.{}.mark", first.name),
                format!("{m:#x} overlaps {what} ({bits:#x})"),
            );
        }
    }
}

/// The `tproxy` section, if any, as the diversion reads it: relayd's own keys (marks,
/// route, ports) and the listener's keys that the `tcpsplit` services also set.
struct Section<'s, 'a> {
    section: Option<&'s (String, &'s ListenerSection<'a>)>,
}

impl Section<'_, '_> {
    /// The span of `key` and its value, if the section has it.
    fn get(&self, key: &str) -> Option<(Range<usize>, Spanned<DeValue<'_>>)> {
        self.section.and_then(|(_, l)| {
            l.options
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == key)
                .map(|(k, v)| (k.span(), v.clone()))
        })
    }

    /// The span of `key`'s value, if the section has it.
    fn span(&self, key: &str) -> Option<Range<usize>> {
        self.get(key).map(|(_, v)| v.span())
    }

    /// The field path of `key` (`service.?.key` without a section: the diversion is
    /// implied by the `tcpsplit` services).
    fn field(&self, key: &str) -> String {
        let name = self.section.map_or("?", |(n, _)| n.as_str());
        format!("service.{name}.{key}")
    }
}

/// A section value as a plain TOML value.
fn as_value(v: &Spanned<DeValue<'_>>) -> Option<toml::Value> {
    <toml::Value as serde::Deserialize>::deserialize(toml::de::ValueDeserializer::from(v.clone()))
        .ok()
}

/// The transparent diversion, if a `tproxy` section or a `tcpsplit` service asks for one:
/// its rules and route, and the transparent listener (the section's, given the services'
/// proxy options, or one they imply) put in `listeners`.
pub(super) fn check_tproxy(
    cx: &mut Ctx<'_>,
    listeners: &mut Vec<ListenerSpec>,
    section: Option<&(String, &ListenerSection<'_>)>,
    splits: &[SplitUse],
    families: Vec<Family>,
    daemon: &DaemonConfig,
) -> Option<TproxySetup> {
    let tp_index = listeners
        .iter()
        .position(|l| matches!(l.kind, ListenerKind::Transparent(_)));
    if tp_index.is_none() && splits.is_empty() {
        return None;
    }
    let keys = Section { section };
    let mut spec = TproxySpec::default();
    check_marks_and_route(cx, &keys, &mut spec);
    check_divert(cx, &keys, splits, &mut spec);
    let mut tcfg = match tp_index.map(|i| &listeners[i].kind) {
        Some(ListenerKind::Transparent(c)) => c.clone(),
        _ => TransparentConfig::default(),
    };
    if let Some(s) = splits.first() {
        take_split_options(cx, &keys, s, &mut tcfg);
    }
    // Diverted by port, the listener's address says which families reach it.
    let families = match (keys.get("ports"), tcfg.listen) {
        (None, _) => families,
        (Some(_), SocketAddr::V6(a)) if a.ip().is_unspecified() => {
            vec![Family::Ipv4, Family::Ipv6]
        }
        (Some(_), SocketAddr::V6(_)) => vec![Family::Ipv6],
        (Some(_), SocketAddr::V4(_)) => vec![Family::Ipv4],
    };
    check_listen(cx, &keys, &mut tcfg, &families, &mut spec);
    let tm = spec.tproxy_mask;
    for (bits, what) in [
        (daemon.bypass_mark, "daemon.bypass_mark"),
        (daemon.ct_mark_bits.mask(), "daemon.ct_mark_bits"),
        (spec.divert_mask, "the divert mark"),
    ] {
        if tm & bits != 0 {
            cx.err(
                keys.span("tproxy_mark"),
                keys.field("tproxy_mark"),
                format!("{tm:#x} overlaps {what} ({bits:#x})"),
            );
        }
    }
    if let Err(e) = spec.check()
        && cx.errors.is_empty()
    {
        cx.err(None, keys.field("(tproxy)"), e.to_string());
    }
    let name = section
        .map(|(n, _)| n.clone())
        .or_else(|| splits.first().map(|s| s.name.clone()))
        .unwrap_or_default();
    let implied = ListenerSpec {
        name: name.clone(),
        line: tp_index.map_or(0, |i| listeners[i].line),
        kind: ListenerKind::Transparent(tcfg),
    };
    match tp_index {
        Some(i) => listeners[i] = implied,
        None => listeners.push(implied),
    }
    Some(TproxySetup {
        spec,
        families,
        listener: name,
    })
}

/// `tproxy_mark` (the mark TPROXY sets), `table` and `rule_pref` (the local route).
fn check_marks_and_route(cx: &mut Ctx<'_>, keys: &Section<'_, '_>, spec: &mut TproxySpec) {
    if let Some((_, v)) = keys.get("tproxy_mark") {
        match as_value(&v).as_ref().and_then(parse_u32) {
            Some(m) if m != 0 => (spec.tproxy_mark, spec.tproxy_mask) = (m, m),
            _ => cx.err(
                Some(v.span()),
                keys.field("tproxy_mark"),
                "must be a non-zero 32-bit mark, e.g. \"0x10000000\"",
            ),
        }
    }
    for (key, slot) in [
        ("table", &mut spec.table),
        ("rule_pref", &mut spec.rule_pref),
    ] {
        if let Some((_, v)) = keys.get(key) {
            match as_value(&v).as_ref().and_then(parse_u32) {
                Some(n) if n > 0 => *slot = n,
                _ => cx.err(
                    Some(v.span()),
                    keys.field(key),
                    "must be a positive integer",
                ),
            }
        }
    }
}

/// What is diverted: the connections the `tcpsplit` services mark, or those to the
/// section's `ports`; one or the other.
fn check_divert(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    splits: &[SplitUse],
    spec: &mut TproxySpec,
) {
    match (keys.get("ports"), splits.first()) {
        (Some((_, v)), Some(s)) => cx.err(
            Some(v.span()),
            keys.field("ports"),
            format!(
                "not with a tcpsplit service (`{}` decides which connections to divert)",
                s.name
            ),
        ),
        (Some((_, v)), None) => {
            let list: Option<Vec<u16>> = as_value(&v).and_then(|v| match v {
                toml::Value::Array(a) => a
                    .iter()
                    .map(|p| p.as_integer().and_then(|i| u16::try_from(i).ok()))
                    .collect(),
                _ => None,
            });
            match list {
                Some(p) if !p.is_empty() && p.len() <= 15 && !p.contains(&0) => {
                    spec.divert = Divert::Ports(p)
                }
                _ => cx.err(
                    Some(v.span()),
                    keys.field("ports"),
                    "must be a list of 1 to 15 destination ports, e.g. [80, 443]",
                ),
            }
        }
        (None, Some(s)) => {
            spec.divert_mark = s.cfg.mark;
            spec.divert_mask = s.cfg.mark;
        }
        (None, None) => {
            if let Some((_, l)) = keys.section {
                cx.err(
                    Some(l.kind_span.clone()),
                    keys.field("kind"),
                    "nothing diverts connections to this listener: put a tcpsplit service in a prerouting queue, or give `ports`",
                );
            }
        }
    }
}

/// The proxy options the `tcpsplit` services carry (`upstream`, `transparent_source`),
/// which a `tproxy` section may repeat but not contradict.
fn take_split_options(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    s: &SplitUse,
    tcfg: &mut TransparentConfig,
) {
    let upstream = match s.cfg.upstream.as_deref() {
        Some("mptcp") => relay_proxy::Upstream::Mptcp,
        _ => relay_proxy::Upstream::Tcp,
    };
    for (key, conflict) in [
        ("upstream", tcfg.options.upstream != upstream),
        (
            "transparent_source",
            tcfg.transparent_source != s.cfg.transparent_source,
        ),
    ] {
        if let Some((kspan, _)) = keys.get(key)
            && conflict
        {
            cx.err(
                Some(kspan),
                keys.field(key),
                format!(
                    "differs from service `{}`: set it there (the tcpsplit service carries the proxy's options)",
                    s.name
                ),
            );
        }
    }
    tcfg.options.upstream = upstream;
    tcfg.transparent_source = s.cfg.transparent_source;
}

/// The transparent listener's address: `[::]:9040` by default when IPv6 is diverted, one
/// that takes every diverted family, and a fixed port (TPROXY's `--on-port`).
fn check_listen(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    tcfg: &mut TransparentConfig,
    families: &[Family],
    spec: &mut TproxySpec,
) {
    let listen_span = keys.span("listen");
    if listen_span.is_none() && families.contains(&Family::Ipv6) {
        tcfg.listen = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 9040));
    }
    match tcfg.listen {
        SocketAddr::V4(_) if families.contains(&Family::Ipv6) => cx.err(
            listen_span.clone(),
            keys.field("listen"),
            "an IPv4 listener cannot take diverted IPv6 connections: listen on \"[::]:PORT\"",
        ),
        SocketAddr::V6(a) if !a.ip().is_unspecified() && families.contains(&Family::Ipv4) => cx
            .err(
                listen_span.clone(),
                keys.field("listen"),
                "a listener on one IPv6 address cannot take diverted IPv4 connections: listen on \"[::]:PORT\" or an IPv4 address",
            ),
        _ => {}
    }
    spec.port = tcfg.listen.port();
    if !tcfg.listen.ip().is_unspecified() {
        spec.on_ip = Some(tcfg.listen.ip());
    }
    if spec.port == 0 {
        cx.err(
            listen_span,
            keys.field("listen"),
            "the transparent listener needs a fixed port (TPROXY --on-port)",
        );
    }
}
