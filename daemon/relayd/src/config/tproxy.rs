//! The split proxy's transparent diversion: the services in the queues that ask for one
//! ([`relay_core::Manifest::proxy`]; `tcpsplit` does), the TPROXY rules
//! and policy route that divert the connections they mark, and the transparent listener
//! those connections reach (a `tproxy` section's, or one implied). Nothing here knows a
//! service kind: what a diverting service needs comes from its factory.

use super::daemon::{DaemonConfig, parse_u32};
use super::error::Ctx;
use super::listener_spec::{ListenerKind, ListenerSpec};
use super::queue::QueueSpec;
use super::services::{ListenerSection, ServiceEntry};
use relay_control::{Hook, IpVersion, Table};
use relay_core::ProxyDiversion;
use relay_proxy::TransparentConfig;
use relay_proxy::tproxy::{Divert, TproxySpec};
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
    /// Families whose rules are installed (those of the diverting services' queues).
    pub families: Vec<IpVersion>,
    /// Name of the transparent listener.
    pub listener: String,
}

/// Default `ip rule` preference and routing table of the split proxy's local route; they
/// are how `relayd cleanup` finds them after a crash.
pub const DEFAULT_TPROXY_TABLE: u32 = TproxySpec::DEFAULT_TABLE;
/// See [`DEFAULT_TPROXY_TABLE`].
pub const DEFAULT_TPROXY_RULE_PREF: u32 = TproxySpec::DEFAULT_RULE_PREF;

/// A service that asks for a diversion, as it runs in a queue.
pub(super) struct Diverter {
    /// The instance's name.
    name: String,
    /// Its kind, for messages.
    kind: &'static str,
    /// What it asks for.
    div: ProxyDiversion,
    /// Its section's name (`None`: a built-in named directly in a chain).
    span: Option<Range<usize>>,
}

/// Every service in a queue that asks for a diversion, once each, and the families of
/// those queues (sorted). A queue that runs one must be in prerouting, where TPROXY
/// diverts, and in mangle only if the service repeats its SYNs (an accepted SYN leaves the
/// hook, past the TPROXY rules).
pub(super) fn diverters(
    cx: &mut Ctx<'_>,
    queues: &[QueueSpec],
    services: &BTreeMap<String, ServiceEntry<'_>>,
) -> (Vec<Diverter>, Vec<IpVersion>) {
    let mut splits: Vec<Diverter> = Vec::new();
    let mut families: Vec<IpVersion> = Vec::new();
    for q in queues {
        for (name, f) in &q.services {
            let Some(div) = f.manifest().proxy else {
                continue;
            };
            let kind = f.kind();
            if q.hook != Hook::Prerouting {
                cx.err(
                    Some(cx.lines.line_span(q.line)),
                    format!("queue[{}].hook", q.index),
                    format!(
                        "service `{name}` ({kind}) must run in prerouting: TPROXY diverts only there"
                    ),
                );
            } else if q.table == Table::Mangle && !div.repeat {
                cx.err(
                    Some(cx.lines.line_span(q.line)),
                    format!("queue[{}].table", q.index),
                    format!(
                        "service `{name}` ({kind}) in mangle prerouting needs repeat = true: an accepted SYN goes on to the next hook, past the TPROXY rules; or use table = \"raw\""
                    ),
                );
            }
            for fam in &q.families {
                if !families.contains(fam) {
                    families.push(*fam);
                }
            }
            if !splits.iter().any(|s| s.name == *name) {
                splits.push(Diverter {
                    name: name.clone(),
                    kind,
                    div,
                    span: services.get(name).map(|e| e.name_span.clone()),
                });
            }
        }
    }
    families.sort();
    (splits, families)
}

/// All instances feed one transparent listener: they must agree on what it reads, and
/// their mark may not overlap relayd's own mark bits.
pub(super) fn check_diverters_agree(cx: &mut Ctx<'_>, splits: &[Diverter], daemon: &DaemonConfig) {
    let Some(first) = splits.first() else {
        return;
    };
    for other in &splits[1..] {
        // `repeat` is the queue's business, not the listener's.
        let same = other.div.mark == first.div.mark
            && other.div.mptcp == first.div.mptcp
            && other.div.transparent_source == first.div.transparent_source;
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
    let m = first.div.mark;
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
/// route, ports) and the listener's keys that the diverting services also set.
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
    /// implied by the diverting services).
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

/// The transparent diversion, if a `tproxy` section or a service asks for one:
/// its rules and route, and the transparent listener (the section's, given the services'
/// proxy options, or one they imply) put in `listeners`.
pub(super) fn check_tproxy(
    cx: &mut Ctx<'_>,
    listeners: &mut Vec<ListenerSpec>,
    section: Option<&(String, &ListenerSection<'_>)>,
    splits: &[Diverter],
    families: Vec<IpVersion>,
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
        take_proxy_options(cx, &keys, s, &mut tcfg);
    }
    // Diverted by port, the listener's address says which families reach it.
    let families = match (keys.get("ports"), tcfg.listen) {
        (None, _) => families,
        (Some(_), SocketAddr::V6(a)) if a.ip().is_unspecified() => {
            vec![IpVersion::V4, IpVersion::V6]
        }
        (Some(_), SocketAddr::V6(_)) => vec![IpVersion::V6],
        (Some(_), SocketAddr::V4(_)) => vec![IpVersion::V4],
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

/// What is diverted: the connections the diverting services mark, or those to the
/// section's `ports`; one or the other.
fn check_divert(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    splits: &[Diverter],
    spec: &mut TproxySpec,
) {
    match (keys.get("ports"), splits.first()) {
        (Some((_, v)), Some(s)) => cx.err(
            Some(v.span()),
            keys.field("ports"),
            format!(
                "not with a {} service (`{}` decides which connections to divert)",
                s.kind, s.name
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
            spec.divert_mark = s.div.mark;
            spec.divert_mask = s.div.mark;
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

/// The proxy options the diverting services carry (`upstream`, `transparent_source`),
/// which a `tproxy` section may repeat but not contradict.
fn take_proxy_options(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    s: &Diverter,
    tcfg: &mut TransparentConfig,
) {
    let upstream = if s.div.mptcp {
        relay_proxy::Upstream::Mptcp
    } else {
        relay_proxy::Upstream::Tcp
    };
    for (key, conflict) in [
        ("upstream", tcfg.options.upstream != upstream),
        (
            "transparent_source",
            tcfg.transparent_source != s.div.transparent_source,
        ),
    ] {
        if let Some((kspan, _)) = keys.get(key)
            && conflict
        {
            cx.err(
                Some(kspan),
                keys.field(key),
                format!(
                    "differs from service `{}`: set it there (the {} service carries the proxy's options)",
                    s.name, s.kind
                ),
            );
        }
    }
    tcfg.options.upstream = upstream;
    tcfg.transparent_source = s.div.transparent_source;
}

/// The transparent listener's address: `[::]:9040` by default when IPv6 is diverted, one
/// that takes every diverted family, and a fixed port (TPROXY's `--on-port`).
fn check_listen(
    cx: &mut Ctx<'_>,
    keys: &Section<'_, '_>,
    tcfg: &mut TransparentConfig,
    families: &[IpVersion],
    spec: &mut TproxySpec,
) {
    let listen_span = keys.span("listen");
    if listen_span.is_none() && families.contains(&IpVersion::V6) {
        tcfg.listen = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 9040));
    }
    match tcfg.listen {
        SocketAddr::V4(_) if families.contains(&IpVersion::V6) => cx.err(
            listen_span.clone(),
            keys.field("listen"),
            "an IPv4 listener cannot take diverted IPv6 connections: listen on \"[::]:PORT\"",
        ),
        SocketAddr::V6(a) if !a.ip().is_unspecified() && families.contains(&IpVersion::V4) => cx
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

#[cfg(test)]
mod tests {
    use crate::config::{ConfigError, ListenerKind, parse};
    use crate::registry::Registry;
    use relay_core::{
        Action, Context, Counters, Manifest, Packet, ProxyDiversion, Resources, Service,
        ServiceConfig, ServiceFactory,
    };
    use std::path::Path;
    use std::sync::Arc;

    /// A kind relayd knows nothing of, registered by a custom build, that asks for a
    /// diversion with the mark of its options.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct DivertConfig {
        mark: u32,
        #[serde(default)]
        repeat: bool,
    }

    struct DivertFactory(Manifest);

    struct Pass;

    impl Service for Pass {
        fn process(&mut self, _: &mut Packet, _: &mut Context) -> Action {
            Action::Continue
        }
    }

    impl ServiceFactory for DivertFactory {
        fn kind(&self) -> &'static str {
            "divert-test"
        }

        fn manifest(&self) -> &Manifest {
            &self.0
        }

        fn build(&self, _: &Counters, _: &Resources) -> Box<dyn Service> {
            Box::new(Pass)
        }
    }

    impl ServiceConfig for DivertConfig {
        const KIND: &'static str = "divert-test";

        fn into_factory(
            self,
            _name: &str,
        ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
            Ok(Arc::new(DivertFactory(Manifest {
                proxy: Some(ProxyDiversion {
                    mark: self.mark,
                    repeat: self.repeat,
                    mptcp: true,
                    transparent_source: false,
                }),
                ..Manifest::new()
            })))
        }
    }

    fn parse_with_divert(text: &str) -> Result<crate::config::Config, Vec<ConfigError>> {
        let mut r = Registry::with_builtins();
        r.register::<DivertConfig>();
        parse(text, Path::new("t.toml"), &r).map_err(|e| e.0)
    }

    /// A queue of `place` running service `d` of kind `divert-test`, then `more`.
    fn queue(place: &str, options: &str, more: &str) -> String {
        format!(
            "[[queue]]\nnum = 0\n{place}services = [\"d\"]\n[service.d]\nkind = \"divert-test\"\n{options}{more}"
        )
    }

    const RAW: &str = "hook = \"prerouting\"\ntable = \"raw\"\n";

    #[test]
    fn any_service_that_asks_for_a_diversion_gets_it_and_its_checks() {
        let c = parse_with_divert(&queue(RAW, "mark = 32\n", "")).unwrap();
        let t = c.tproxy.as_ref().expect("a diversion");
        assert_eq!((t.spec.divert_mark, t.spec.divert_mask), (0x20, 0x20));
        assert_eq!(t.listener, "d");
        match &c.listeners[0].kind {
            ListenerKind::Transparent(tc) => {
                assert_eq!(tc.options.upstream, relay_proxy::Upstream::Mptcp)
            }
            other => panic!("{other:?}"),
        }
        // Its queue must reach the TPROXY rules: the message names its kind.
        let e = parse_with_divert(&queue("hook = \"forward\"\n", "mark = 32\n", "")).unwrap_err();
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (2, "queue[0].hook"),
            "{e:?}"
        );
        assert!(
            e[0].message
                .starts_with("service `d` (divert-test) must run in prerouting"),
            "{e:?}"
        );
        let mangle = "hook = \"prerouting\"\n";
        let e = parse_with_divert(&queue(mangle, "mark = 32\n", "")).unwrap_err();
        assert_eq!(e[0].field, "queue[0].table", "{e:?}");
        assert!(e[0].message.contains("needs repeat = true"), "{e:?}");
        parse_with_divert(&queue(mangle, "mark = 32\nrepeat = true\n", "")).unwrap();
        // Its mark may not be relayd's, and a tproxy section may not give ports too.
        let e = parse_with_divert(&queue(RAW, "mark = 0x40000000\n", "")).unwrap_err();
        assert_eq!(e[0].field, "service.d.mark", "{e:?}");
        assert!(
            e[0].message.contains("overlaps daemon.bypass_mark"),
            "{e:?}"
        );
        let e = parse_with_divert(&queue(
            RAW,
            "mark = 32\n",
            "[service.tp]\nkind = \"tproxy\"\nports = [80]\n",
        ))
        .unwrap_err();
        assert_eq!(e[0].field, "service.tp.ports", "{e:?}");
        assert!(
            e[0].message
                .starts_with("not with a divert-test service (`d` decides"),
            "{e:?}"
        );
    }

    #[test]
    fn diverting_services_must_agree_on_the_listener() {
        let two = "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nservices = [\"a\", \"b\"]\n[service.a]\nkind = \"divert-test\"\nmark = 32\n[service.b]\nkind = \"tcpsplit\"\nmark = ";
        let e = parse_with_divert(&format!("{two}32\n")).unwrap_err();
        assert_eq!((e[0].line, e[0].field.as_str()), (9, "service.b"), "{e:?}");
        assert!(
            e[0].message.starts_with(
                "mark, upstream and transparent_source must equal those of service `a`"
            ),
            "{e:?}"
        );
        let with_mptcp = format!("{two}32\nupstream = \"mptcp\"\n");
        let c = parse_with_divert(&with_mptcp).unwrap();
        assert_eq!(c.tproxy.map(|t| t.listener).as_deref(), Some("a"));
    }
}
