//! An `[[xdp]]` entry: an ingress interface whose XDP program steers matched packets to
//! relayd over AF_XDP sockets, the rx queues served, and the chain run on them
//! (docs/xdp.md).
//!
//! Its queue numbers share one space with `[[queue]]` entries: they name the XDP queues
//! in `relayd status` and the metrics. A service that needs netfilter (conntrack state,
//! held verdicts, a TPROXY diversion) is refused on an XDP queue, at its name in the list.
//! `offload = true` is refused unless every service of the chain may vote to offload
//! ([`relay_core::Manifest::offloads`]).

use super::error::Ctx;
use super::queue::check_numbers;
use super::services::{ServiceEntry, resolve_chain};
use crate::registry::Registry;
use relay_core::{FailPolicy, Prefix, ServiceFactory, Verdict};
use relay_xdp::rules::{PortValue, parse_protocol};
use relay_xdp::{Match, Mode, OffloadConfig, PortConfig, PortRange, ZeroCopy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use toml::Spanned;

/// One `[[xdp]]` entry, checked, with its chain resolved.
#[derive(Clone)]
pub struct XdpSpec {
    /// Index of the entry among the `[[xdp]]` entries (0-based).
    pub index: usize,
    /// Line of the entry's `num`.
    pub line: usize,
    /// Last relayd queue number (`port.first` is the first).
    pub last: u16,
    /// The port's settings, in the type relay_xdp takes.
    pub port: PortConfig,
    /// The chain: instance names and their factories, in order.
    pub services: Vec<(String, Arc<dyn ServiceFactory>)>,
    /// Verdict for packets the chain cannot parse.
    pub malformed: Verdict,
}

impl std::fmt::Debug for XdpSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.services.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("XdpSpec")
            .field("queues", &(self.port.first..=self.last))
            .field("interface", &self.port.interface)
            .field("services", &names)
            .field("fail_open", &self.port.fail_open)
            .finish()
    }
}

impl XdpSpec {
    /// The relayd queue numbers this entry covers.
    pub fn nums(&self) -> std::ops::RangeInclusive<u16> {
        self.port.first..=self.last
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawXdp {
    num: Spanned<toml::Value>,
    interface: Spanned<String>,
    #[serde(default)]
    queues: Option<Spanned<Vec<u32>>>,
    #[serde(default, rename = "match")]
    matches: Vec<Spanned<RawMatch>>,
    services: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    fail_open: Option<bool>,
    #[serde(default)]
    malformed: Option<Spanned<String>>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
    #[serde(default)]
    zero_copy: Option<Spanned<String>>,
    #[serde(default)]
    batch: Option<Spanned<usize>>,
    #[serde(default)]
    frames: Option<Spanned<u32>>,
    #[serde(default)]
    cpu: Option<Spanned<toml::Value>>,
    #[serde(default)]
    offload: Option<Spanned<bool>>,
    #[serde(default)]
    offload_idle: Option<Spanned<String>>,
    #[serde(default)]
    offload_flows: Option<Spanned<i64>>,
}

/// The fewest and most flow directions `offload_flows` may ask for (the map is allocated
/// whole, 136 bytes per entry on x86-64: at most 544 MiB).
const OFFLOAD_FLOWS: std::ops::RangeInclusive<i64> =
    64..=relay_xdp::program::MAX_OFFLOAD_FLOWS as i64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    #[serde(default)]
    family: Option<Spanned<String>>,
    #[serde(default)]
    protocol: Option<Spanned<toml::Value>>,
    #[serde(default)]
    ports: Option<Spanned<Vec<toml::Value>>>,
    #[serde(default)]
    source_ports: Option<Spanned<Vec<toml::Value>>>,
    #[serde(default)]
    source: Option<Spanned<String>>,
    #[serde(default)]
    destination: Option<Spanned<String>>,
}

/// Why a service cannot run on an XDP queue, if it cannot: what it needs of netfilter.
pub(crate) fn needs_netfilter(f: &dyn ServiceFactory) -> Option<&'static str> {
    if f.manifest().conntrack {
        Some("it reads conntrack state (the IDS `flow` keyword), which only a netfilter queue has")
    } else if f.manifest().max_held > 0 {
        Some("it holds packets for a later verdict, which only NFQUEUE gives")
    } else if f.manifest().proxy.is_some() {
        Some("it diverts connections with TPROXY, a netfilter target")
    } else {
        None
    }
}

/// Checks one `[[xdp]]` entry and records every error; `None` if it has any. `taken` holds
/// the queue numbers used so far, `interfaces` the interfaces served so far (one XDP
/// program per interface: one entry serves several rx queues and match entries).
pub(super) fn check_xdp(
    cx: &mut Ctx<'_>,
    index: usize,
    x: RawXdp,
    services: &BTreeMap<String, ServiceEntry<'_>>,
    registry: &Registry,
    taken: &mut BTreeMap<u16, String>,
    interfaces: &mut BTreeMap<String, usize>,
) -> Option<XdpSpec> {
    let errors_before = cx.errors.len();
    let owner = format!("xdp[{index}]");
    let field = |key: &str| format!("{owner}.{key}");
    let (line, _) = cx.line_col(x.num.span().start);
    let (first, last) = check_numbers(cx, &owner, &x.num, taken);
    let count = usize::from(last - first) + 1;
    let interface = x.interface.get_ref().clone();
    if let Err(e) = relay_core::ifname::check(&interface) {
        cx.err(Some(x.interface.span()), field("interface"), e.to_string());
    } else if let Some(prev) = interfaces.insert(interface.clone(), index) {
        cx.err(
            Some(x.interface.span()),
            field("interface"),
            format!(
                "{interface} is already served by xdp[{prev}]: one [[xdp]] entry per interface"
            ),
        );
    }
    let rx_queues = match &x.queues {
        None => (0..u32::from(last - first) + 1).collect(),
        Some(q) => {
            let list = q.get_ref().clone();
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if list.len() != count || sorted.len() != list.len() {
                cx.err(
                    Some(q.span()),
                    field("queues"),
                    format!(
                        "lists {} rx queues for {count} queue number{} in `num`: give one distinct rx queue per number",
                        list.len(),
                        if count == 1 { "" } else { "s" }
                    ),
                );
            } else if let Some(big) = list.iter().find(|&&q| q >= relay_xdp::program::MAX_QUEUES) {
                cx.err(
                    Some(q.span()),
                    field("queues"),
                    format!(
                        "rx queue {big}: the XDP program serves rx queues 0-{}",
                        relay_xdp::program::MAX_QUEUES - 1
                    ),
                );
            }
            list
        }
    };
    let mut matches = Vec::new();
    for (i, m) in x.matches.iter().enumerate() {
        let at = format!("{owner}.match[{i}]");
        match read_match(m.get_ref()) {
            Ok(mut parsed) => match parsed.check() {
                Ok(()) => matches.push(parsed),
                Err(e) => cx.err(Some(m.span()), format!("{at}.{}", e.field), e.message),
            },
            Err((key, span, message)) => {
                cx.err(
                    Some(span.unwrap_or(m.span())),
                    format!("{at}.{key}"),
                    message,
                );
            }
        }
    }
    let rules: usize = matches.iter().map(Match::rule_count).sum();
    if rules > relay_xdp::program::MAX_RULES {
        let span = x.matches.first().map(|m| m.span());
        cx.err(
            span,
            field("match"),
            format!(
                "needs {rules} program rules (one per pair of port ranges of an entry); the XDP program has room for {}",
                relay_xdp::program::MAX_RULES
            ),
        );
    }
    let chain = resolve_chain(cx, &owner, &x.services, services, registry);
    for (i, s) in x.services.get_ref().iter().enumerate() {
        if let Some((_, f)) = chain.iter().find(|(n, _)| n == s.get_ref())
            && let Some(why) = needs_netfilter(f.as_ref())
        {
            cx.err(
                Some(s.span()),
                format!("{owner}.services[{i}]"),
                format!(
                    "`{}` cannot run on an XDP queue: {why}; serve it from a [[queue]]",
                    s.get_ref()
                ),
            );
        }
    }
    let wants_closed = chain
        .iter()
        .any(|(_, s)| s.manifest().fail_policy == FailPolicy::Closed);
    let fail_open = x.fail_open.unwrap_or(!wants_closed);
    let malformed =
        super::queue::malformed_policy(cx, field("malformed"), x.malformed.as_ref(), fail_open);
    let mode = match x.mode.as_ref().map(|m| (m.get_ref().as_str(), m.span())) {
        None | Some(("native", _)) => Mode::Native,
        Some(("generic", _)) => Mode::Generic,
        Some((other, span)) => {
            cx.err(
                Some(span),
                field("mode"),
                format!("unknown mode `{other}` (native or generic)"),
            );
            Mode::Native
        }
    };
    let zero_copy = match x
        .zero_copy
        .as_ref()
        .map(|m| (m.get_ref().as_str(), m.span()))
    {
        None | Some(("auto", _)) => ZeroCopy::Auto,
        Some(("on", _)) => ZeroCopy::On,
        Some(("off", _)) => ZeroCopy::Off,
        Some((other, span)) => {
            cx.err(
                Some(span),
                field("zero_copy"),
                format!("unknown setting `{other}` (auto, on or off)"),
            );
            ZeroCopy::Auto
        }
    };
    let batch = x
        .batch
        .as_ref()
        .map_or(PortConfig::DEFAULT_BATCH, |b| *b.get_ref());
    if let Some(b) = &x.batch
        && !(1..=PortConfig::MAX_BATCH).contains(b.get_ref())
    {
        cx.err(
            Some(b.span()),
            field("batch"),
            format!("must be 1-{}", PortConfig::MAX_BATCH),
        );
    }
    let frames = x
        .frames
        .as_ref()
        .map_or(PortConfig::DEFAULT_FRAMES, |f| *f.get_ref());
    if let Some(f) = &x.frames
        && !(64..=65536).contains(f.get_ref())
    {
        cx.err(Some(f.span()), field("frames"), "must be 64-65536");
    }
    let cpus = match &x.cpu {
        None => Vec::new(),
        Some(c) => super::queue::read_cpus(c.get_ref(), count).unwrap_or_else(|e| {
            cx.err(Some(c.span()), field("cpu"), e);
            Vec::new()
        }),
    };
    let offload = read_offload(cx, &owner, &x, &chain);
    if cx.errors.len() > errors_before {
        return None;
    }
    Some(XdpSpec {
        index,
        line,
        last,
        port: PortConfig {
            interface,
            rx_queues,
            first,
            matches,
            fail_open,
            mode,
            zero_copy,
            batch,
            frames,
            cpus,
            offload,
        },
        services: chain,
        malformed,
    })
}

/// Reads `offload`, `offload_idle` and `offload_flows` (errors recorded in `cx`): `Some`
/// if offload is on and every service of `chain` may vote for it.
fn read_offload(
    cx: &mut Ctx<'_>,
    owner: &str,
    x: &RawXdp,
    chain: &[(String, Arc<dyn ServiceFactory>)],
) -> Option<OffloadConfig> {
    let mut cfg = OffloadConfig::default();
    if let Some(t) = &x.offload_idle {
        match relay_core::units::parse_duration(t.get_ref()) {
            Ok(d) if !d.is_zero() => cfg.idle = d,
            Ok(_) => cx.err(
                Some(t.span()),
                format!("{owner}.offload_idle"),
                "must be more than 0 (at most 3600s)",
            ),
            Err(e) => cx.err(Some(t.span()), format!("{owner}.offload_idle"), e),
        }
    }
    if let Some(n) = &x.offload_flows {
        match u32::try_from(*n.get_ref()) {
            Ok(v) if OFFLOAD_FLOWS.contains(n.get_ref()) => cfg.flows = v,
            _ => cx.err(
                Some(n.span()),
                format!("{owner}.offload_flows"),
                format!(
                    "must be {}-{} (flow directions the map holds; it is allocated whole)",
                    OFFLOAD_FLOWS.start(),
                    OFFLOAD_FLOWS.end()
                ),
            ),
        }
    }
    let on = x.offload.as_ref()?;
    if !*on.get_ref() {
        return None;
    }
    if let Some((name, f)) = chain.iter().find(|(_, f)| !f.manifest().offloads) {
        cx.err(
            Some(on.span()),
            format!("{owner}.offload"),
            format!(
                "service `{name}` ({}) never offloads a flow, so the chain cannot: a flow \
                 leaves the queue only when every service of its chain votes for it",
                f.kind()
            ),
        );
        return None;
    }
    Some(cfg)
}

type FieldError = (&'static str, Option<std::ops::Range<usize>>, String);

/// Reads one `[[xdp.match]]` table.
fn read_match(m: &RawMatch) -> Result<Match, FieldError> {
    let family = match m.family.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
        None => None,
        Some(("ipv4", _)) => Some(relay_core::IpVersion::V4),
        Some(("ipv6", _)) => Some(relay_core::IpVersion::V6),
        Some((other, span)) => {
            return Err((
                "family",
                Some(span),
                format!("unknown family `{other}` (ipv4 or ipv6)"),
            ));
        }
    };
    let protocol = match &m.protocol {
        None => None,
        Some(p) => Some(
            match p.get_ref() {
                toml::Value::String(s) => parse_protocol(s),
                toml::Value::Integer(n) => {
                    u8::try_from(*n).map_err(|_| format!("{n} is not a protocol number (0-255)"))
                }
                _ => Err("must be a protocol name or number".to_string()),
            }
            .map_err(|e| ("protocol", Some(p.span()), e))?,
        ),
    };
    let ports = |key: &'static str, v: &Option<Spanned<Vec<toml::Value>>>| {
        let Some(v) = v else { return Ok(Vec::new()) };
        if v.get_ref().is_empty() {
            return Err((
                key,
                Some(v.span()),
                "empty: leave it out to match any port".into(),
            ));
        }
        v.get_ref()
            .iter()
            .map(|p| {
                let pv = match p {
                    toml::Value::Integer(n) => PortValue::Number(*n),
                    toml::Value::String(s) => PortValue::Text(s),
                    _ => return Err("a port is a number or a range like \"6000-6100\"".into()),
                };
                PortRange::parse(&pv)
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| (key, Some(v.span()), e))
    };
    let prefix =
        |key: &'static str, v: &Option<Spanned<String>>| -> Result<Option<Prefix>, FieldError> {
            let Some(v) = v else { return Ok(None) };
            v.get_ref()
                .parse::<Prefix>()
                .map(Some)
                .map_err(|e| (key, Some(v.span()), format!("`{}`: {e}", v.get_ref())))
        };
    Ok(Match {
        family,
        protocol,
        ports: ports("ports", &m.ports)?,
        source_ports: ports("source_ports", &m.source_ports)?,
        source: prefix("source", &m.source)?,
        destination: prefix("destination", &m.destination)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{first_err, parsed};
    use relay_core::Verdict;

    const XDP: &str = "[[xdp]]\nnum = \"10-11\"\ninterface = \"veth0\"\nservices = [\"accept\"]\n";

    #[test]
    fn reads_an_entry_with_matches() {
        let c = parsed(&format!(
            "{XDP}fail_open = false\ncpu = 1\n[[xdp.match]]\nprotocol = \"udp\"\nports = [5000, \"6000-6100\"]\ndestination = \"10.0.2.0/24\"\n[[xdp.match]]\nprotocol = \"esp\"\n"
        ));
        let x = &c.xdp[0];
        assert_eq!((x.port.first, x.last, x.line), (10, 11, 2));
        assert_eq!(x.port.rx_queues, vec![0, 1]);
        assert_eq!(x.port.interface, "veth0");
        assert!(!x.port.fail_open);
        assert_eq!(x.malformed, Verdict::Drop);
        assert_eq!(x.port.cpus, vec![1]);
        assert_eq!(x.port.matches.len(), 2);
        let m = &x.port.matches[0];
        assert_eq!(
            (m.protocol, m.ports.len(), m.family),
            (Some(17), 2, Some(relay_core::IpVersion::V4))
        );
        assert_eq!(x.port.matches[1].protocol, Some(50));
        assert!(c.queues.is_empty());
    }

    #[test]
    fn refuses_services_that_need_netfilter() {
        let e = first_err(
            "[[xdp]]\nnum = 1\ninterface = \"veth0\"\nservices = [\"accept\", \"d\"]\n[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 100\n",
            4,
            "xdp[0].services[1]",
        );
        assert!(
            e[0].message.contains("held verdicts") || e[0].message.contains("later verdict"),
            "{e:?}"
        );
    }

    #[test]
    fn numbers_are_shared_with_queues() {
        let e = first_err(
            &format!("[[queue]]\nnum = 11\nhook = \"forward\"\nservices = [\"accept\"]\n{XDP}"),
            6,
            "xdp[0].num",
        );
        assert!(e[0].message.contains("already used by queue[0]"), "{e:?}");
    }

    #[test]
    fn refuses_bad_matches_queues_and_a_second_entry_per_interface() {
        first_err(
            &format!("{XDP}[[xdp.match]]\nprotocol = \"icmp\"\nports = [1]\n"),
            5,
            "xdp[0].match[0].ports",
        );
        first_err(
            &format!("{XDP}[[xdp.match]]\nsource = \"10.0.0.0/33\"\n"),
            6,
            "xdp[0].match[0].source",
        );
        first_err(&format!("{XDP}queues = [3]\n"), 5, "xdp[0].queues");
        first_err(&format!("{XDP}mode = \"fast\"\n"), 5, "xdp[0].mode");
        first_err(
            &format!("{XDP}[[xdp]]\nnum = 12\ninterface = \"veth0\"\nservices = [\"accept\"]\n"),
            7,
            "xdp[1].interface",
        );
    }

    #[test]
    fn reads_offload_keys_with_their_defaults() {
        let c = parsed(XDP);
        assert_eq!(c.xdp[0].port.offload, None, "off by default");
        let c = parsed(&format!("{XDP}offload = true\n"));
        assert_eq!(
            c.xdp[0].port.offload,
            Some(relay_xdp::OffloadConfig::default())
        );
        let c = parsed(&format!(
            "{XDP}offload = true\noffload_idle = \"2.5s\"\noffload_flows = 4096\n"
        ));
        let o = c.xdp[0].port.offload.unwrap();
        assert_eq!(
            (o.idle, o.flows),
            (std::time::Duration::from_millis(2500), 4096)
        );
        // Sizes checked even while offload is off.
        let c = parsed(&format!("{XDP}offload = false\noffload_flows = 1024\n"));
        assert_eq!(c.xdp[0].port.offload, None);
    }

    #[test]
    fn refuses_offload_on_a_chain_that_cannot_vote_and_bad_sizes() {
        let e = first_err(
            "[[xdp]]\nnum = 1\ninterface = \"veth0\"\nservices = [\"accept\", \"d\"]\noffload = true\n[service.d]\nkind = \"dump\"\n",
            5,
            "xdp[0].offload",
        );
        assert!(e[0].message.contains("`d` (dump)"), "{e:?}");
        first_err(
            &format!("{XDP}offload = true\noffload_idle = \"0s\"\n"),
            6,
            "xdp[0].offload_idle",
        );
        first_err(
            &format!("{XDP}offload = true\noffload_idle = \"30\"\n"),
            6,
            "xdp[0].offload_idle",
        );
        for bad in ["0", "63", "4194305", "-1"] {
            let e = first_err(
                &format!("{XDP}offload = true\noffload_flows = {bad}\n"),
                6,
                "xdp[0].offload_flows",
            );
            assert!(e[0].message.contains("64-4194304"), "{e:?}");
        }
        first_err(&format!("{XDP}offload = 1\n"), 5, "offload");
    }
}
