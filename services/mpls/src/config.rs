//! The configuration of `mpls-encap` and `mpls-decap` (`[service.NAME]` sections), its
//! validation into the classifier and VCAN table, and the QoS class table the daemon
//! installs with tc.

use crate::classify::{Classifier, PortRange, Prefix, ProtoMatch, Rule};
use crate::lse::{FIRST_UNRESERVED_LABEL, MAX_LABEL};
use relay_core::units::parse_rate;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

/// Which encapsulation `mpls-encap` emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Encap {
    /// MPLS-in-IP (RFC 4023): outer IPv4 with protocol 137, then the label.
    #[default]
    Ip,
    /// MPLS-in-UDP (RFC 7510): outer IPv4, UDP to port 6635, then the label.
    Udp,
}

/// What happens to a packet no VCAN matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Unclassified {
    /// Forward it unchanged, as plain IP (the default).
    #[default]
    Pass,
    /// Drop it.
    Drop,
}

/// An integer, or a string (hex `"0x1d0"`, a range `"5004-5010"`, a name `"udp"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum IntOrStr {
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
}

impl std::fmt::Display for IntOrStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrStr::Int(n) => write!(f, "{n}"),
            IntOrStr::Str(s) => write!(f, "\"{s}\""),
        }
    }
}

/// A VCAN's `match = { ... }`: every field given must match; an empty match takes
/// everything (a catch-all, usually last).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// DSCP value 0..=63 (e.g. 34 for AF41, 46 for EF).
    #[serde(default)]
    pub dscp: Option<u8>,
    /// Source prefix, IPv4 or IPv6 (`"10.0.0.0/8"`, `"fd00::/16"`, or an address).
    #[serde(default)]
    pub src: Option<String>,
    /// Destination prefix, IPv4 or IPv6.
    #[serde(default)]
    pub dst: Option<String>,
    /// `"tcp"`, `"udp"`, `"icmp"` (ICMP or ICMPv6), `"sctp"`, or a protocol number.
    #[serde(default)]
    pub proto: Option<IntOrStr>,
    /// Source port or range: `5004` or `"5004-5010"`.
    #[serde(default)]
    pub sport: Option<IntOrStr>,
    /// Destination port or range.
    #[serde(default)]
    pub dport: Option<IntOrStr>,
}

/// One `[[service.NAME.vcan]]`: a virtual content-aware network, its match, its MPLS path
/// (label and remote edge) and its share of the egress link.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VcanConfig {
    /// Name, unique in the table (shown by `relayd status`).
    pub name: String,
    /// Which packets belong to the VCAN.
    #[serde(rename = "match", default)]
    pub matches: MatchConfig,
    /// The MPLS label pushed (16..=1048575).
    pub label: u32,
    /// The remote edge: outer IPv4 destination.
    pub remote: Ipv4Addr,
    /// Guaranteed rate in tc syntax (`"20mbit"`).
    pub rate: String,
    /// Most the VCAN may use by borrowing (default: its rate).
    #[serde(default)]
    pub ceil: Option<String>,
    /// HTB priority 0..=7, 0 first when spare bandwidth is shared (default 0).
    #[serde(default)]
    pub prio: u8,
    /// The tc class minor (2..=0xfffe; default: the label, if it is in that range). Two
    /// VCANs sharing a label need explicit classes.
    #[serde(default)]
    pub class: Option<IntOrStr>,
}

/// `[service.NAME]` with `kind = "mpls-encap"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncapConfig {
    /// `ip` (RFC 4023, default) or `udp` (RFC 7510).
    #[serde(default)]
    pub encap: Encap,
    /// The core-facing egress interface, where the VCAN classes live.
    pub interface: String,
    /// This edge's IPv4 address: the outer source.
    pub local: Ipv4Addr,
    /// `pass` (default) or `drop` for packets no VCAN matches.
    #[serde(default)]
    pub unclassified: Unclassified,
    /// The egress MTU: an encapsulated packet larger than this with DF set, or an IPv6
    /// one (never fragmented by routers), is dropped, counted and answered with ICMP
    /// "fragmentation needed" (ICMPv6 "packet too big") giving the MTU less the
    /// encapsulation overhead, and TCP MSS is clamped to fit (default 1500).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// Compute the outer UDP checksum (`encap = "udp"`); `false` sends zero, which
    /// RFC 7510 section 3 allows over IPv4. Default true.
    #[serde(default = "yes")]
    pub udp_checksum: bool,
    /// Rate of the egress link, the HTB root class (default: the larger of the sum of all
    /// rates and the largest ceil).
    #[serde(default)]
    pub link_rate: Option<String>,
    /// Guaranteed rate of the default class (unclassified and non-VCAN traffic on the
    /// interface); it may borrow up to the link rate. Default "1mbit".
    #[serde(default)]
    pub default_rate: Option<String>,
    /// The HTB qdisc's major handle relayd owns on `interface` (default 0x1d0); the
    /// verdict mark of a VCAN is `handle << 16 | class`.
    #[serde(default)]
    pub qdisc_handle: Option<IntOrStr>,
    /// The VCAN table, in priority order (first match wins).
    #[serde(default)]
    pub vcan: Vec<VcanConfig>,
}

/// `[service.NAME]` with `kind = "mpls-decap"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecapConfig {
    /// The labels this edge serves; any other top label is counted and dropped.
    pub labels: Vec<u32>,
    /// The outer IPv4 sources this edge decapsulates from: the `local` address of every
    /// edge that encapsulates towards this one. MPLS from any other source is counted
    /// (`dropped_unknown_peer`) and dropped before anything past its outer header is
    /// read: decapsulating for anyone would let any host hand this edge a packet to
    /// re-send past the queues and rules it was never seen by. Required: a decap with no
    /// peers is refused.
    #[serde(default)]
    pub peers: Vec<Ipv4Addr>,
}

fn default_mtu() -> u16 {
    1500
}
fn yes() -> bool {
    true
}

/// The default HTB major handle (`1d0:`) relayd uses for VCAN classes.
pub const DEFAULT_QDISC_HANDLE: u16 = 0x1d0;
/// The class minor of the HTB root class (the link).
pub const ROOT_MINOR: u16 = 1;
/// The class minor of the default class (unclassified and non-VCAN traffic).
pub const DEFAULT_MINOR: u16 = 0xffff;

/// The QoS plan of one `mpls-encap`: what the daemon installs with tc on `interface`
/// (relayd's general [`QosPlan`](relay_core::QosPlan)).
pub type QosTable = relay_core::QosPlan;

pub use relay_core::QosClass;

/// A VCAN as the datapath uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VcanPath {
    pub(crate) label: u32,
    pub(crate) remote: Ipv4Addr,
    pub(crate) mark: u32,
}

/// A checked `EncapConfig`.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) classifier: Classifier,
    pub(crate) paths: Vec<VcanPath>,
    pub(crate) qos: QosTable,
}

fn int(v: &IntOrStr, what: &str) -> Result<i64, String> {
    match v {
        IntOrStr::Int(n) => Ok(*n),
        IntOrStr::Str(s) => {
            let t = s.trim();
            let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => i64::from_str_radix(h, 16),
                None => t.parse(),
            };
            r.map_err(|_| format!("{what}: \"{s}\" is not a number"))
        }
    }
}

/// The least rate tc can shape: it counts in bytes per second, and refuses 0.
const MIN_TC_RATE: u64 = 8;

/// A rate that becomes an HTB class: [`parse_rate`], and at least [`MIN_TC_RATE`], as
/// relayd's tc plan validation and tc itself require.
fn tc_rate(s: &str) -> Result<u64, String> {
    let r = parse_rate(s).map_err(|e| e.to_string())?;
    if r < MIN_TC_RATE {
        return Err(format!(
            "\"{s}\" is below {MIN_TC_RATE} bit/s, the least tc can shape (one byte a second)"
        ));
    }
    Ok(r)
}

fn port(s: &str, field: &str) -> Result<u16, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{field}: \"{s}\" is not a port (0-65535)"))
}

fn port_range(v: &IntOrStr, field: &str) -> Result<PortRange, String> {
    let (lo, hi) = match v {
        IntOrStr::Int(n) => {
            let p =
                u16::try_from(*n).map_err(|_| format!("{field}: {n} is not a port (0-65535)"))?;
            (p, p)
        }
        IntOrStr::Str(s) => match s.split_once('-') {
            Some((a, b)) => (port(a, field)?, port(b, field)?),
            None => {
                let p = port(s, field)?;
                (p, p)
            }
        },
    };
    if lo > hi {
        return Err(format!(
            "{field}: range {v} is empty (first port above last)"
        ));
    }
    Ok(PortRange { lo, hi })
}

fn proto(v: &IntOrStr) -> Result<ProtoMatch, String> {
    match v {
        IntOrStr::Int(n) => u8::try_from(*n)
            .map(ProtoMatch::Number)
            .map_err(|_| format!("match.proto: {n} is not a protocol number (0-255)")),
        IntOrStr::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(ProtoMatch::Number(6)),
            "udp" => Ok(ProtoMatch::Number(17)),
            "icmp" => Ok(ProtoMatch::AnyIcmp),
            "icmpv6" | "ipv6-icmp" => Ok(ProtoMatch::Number(58)),
            "sctp" => Ok(ProtoMatch::Number(132)),
            "gre" => Ok(ProtoMatch::Number(47)),
            "esp" => Ok(ProtoMatch::Number(50)),
            t => t.parse().map(ProtoMatch::Number).map_err(|_| {
                format!(
                    "match.proto: \"{s}\" is not tcp, udp, icmp, icmpv6, sctp, gre, esp or a number"
                )
            }),
        },
    }
}

impl MatchConfig {
    /// The classifier rule; the error names the field.
    pub fn rule(&self) -> Result<Rule, String> {
        if let Some(d) = self.dscp
            && d > 63
        {
            return Err(format!("match.dscp: {d} is not a DSCP (0-63)"));
        }
        let prefix = |f: &Option<String>, name: &str| {
            f.as_deref()
                .map(|s| Prefix::parse(s).map_err(|e| format!("match.{name}: {e}")))
                .transpose()
        };
        let r = Rule {
            dscp: self.dscp,
            src: prefix(&self.src, "src")?,
            dst: prefix(&self.dst, "dst")?,
            proto: self.proto.as_ref().map(proto).transpose()?,
            sport: self
                .sport
                .as_ref()
                .map(|v| port_range(v, "match.sport"))
                .transpose()?,
            dport: self
                .dport
                .as_ref()
                .map(|v| port_range(v, "match.dport"))
                .transpose()?,
        };
        if let (Some(s), Some(d)) = (r.src, r.dst)
            && std::mem::discriminant(&s) != std::mem::discriminant(&d)
        {
            return Err("match: src and dst are of different address families".into());
        }
        if (r.sport.is_some() || r.dport.is_some())
            && r.proto
                .is_some_and(|p| !matches!(p, ProtoMatch::Number(6 | 17 | 132 | 136)))
        {
            return Err("match: ports only exist for tcp, udp, sctp and udplite".into());
        }
        Ok(r)
    }
}

impl EncapConfig {
    /// The QoS class table the daemon installs with tc (also checks the whole config).
    pub fn qos(&self) -> Result<QosTable, String> {
        Ok(self.check()?.qos)
    }

    pub(crate) fn check(&self) -> Result<Checked, String> {
        // The same rule relayd's tc plan applies before the name reaches `tc -batch`.
        relay_core::ifname::check_msg(&self.interface).map_err(|e| format!("interface: {e}"))?;
        if self.local.is_unspecified() || self.local.is_multicast() || self.local.is_broadcast() {
            return Err(format!("local: {} is not a unicast address", self.local));
        }
        if self.mtu < 576 {
            return Err(format!(
                "mtu: {} is below the IPv4 minimum of 576",
                self.mtu
            ));
        }
        let handle = match &self.qdisc_handle {
            None => DEFAULT_QDISC_HANDLE,
            Some(v) => {
                let n = int(v, "qdisc_handle")?;
                // Bit 30 of the mark is relayd's bypass bit: keep the handle below 0x4000.
                if !(1..0x4000).contains(&n) {
                    return Err(format!(
                        "qdisc_handle: {v} must be 0x1-0x3fff (the mark's top bits are relayd's)"
                    ));
                }
                n as u16
            }
        };
        let mut rules = Vec::with_capacity(self.vcan.len());
        let mut paths = Vec::with_capacity(self.vcan.len());
        let mut classes = Vec::with_capacity(self.vcan.len());
        let mut names = HashSet::new();
        let mut minors: HashMap<u16, usize> = HashMap::new();
        let mut sum_rate: u64 = 0;
        let mut max_ceil: u64 = 0;
        for (i, v) in self.vcan.iter().enumerate() {
            let at = |e: String| format!("vcan[{i}] (\"{}\"): {e}", v.name);
            if v.name.is_empty() {
                return Err(at("name: must not be empty".into()));
            }
            if !names.insert(v.name.as_str()) {
                return Err(at("name: used by an earlier VCAN".into()));
            }
            if !(FIRST_UNRESERVED_LABEL..=MAX_LABEL).contains(&v.label) {
                return Err(at(format!(
                    "label: {} is not a usable label ({FIRST_UNRESERVED_LABEL}..={MAX_LABEL}; 0-15 are reserved)",
                    v.label
                )));
            }
            if v.remote.is_unspecified() || v.remote.is_multicast() || v.remote.is_broadcast() {
                return Err(at(format!("remote: {} is not a unicast address", v.remote)));
            }
            if v.prio > 7 {
                return Err(at(format!("prio: {} is not 0..=7", v.prio)));
            }
            let rate = tc_rate(&v.rate).map_err(|e| at(format!("rate: {e}")))?;
            let ceil = match &v.ceil {
                Some(c) => tc_rate(c).map_err(|e| at(format!("ceil: {e}")))?,
                None => rate,
            };
            if ceil < rate {
                return Err(at(format!("ceil: {} is below rate {}", ceil, rate)));
            }
            let minor = match &v.class {
                Some(c) => {
                    let n = int(c, "class").map_err(at)?;
                    if !(2..=0xfffe).contains(&n) {
                        return Err(at(format!(
                            "class: {c} must be 2..=0xfffe (1 is the link, 0xffff the default class)"
                        )));
                    }
                    n as u16
                }
                None if v.label <= 0xfffe => v.label as u16,
                None => {
                    return Err(at(format!(
                        "class: label {} does not fit a tc class minor; give the VCAN a `class` (2..=0xfffe)",
                        v.label
                    )));
                }
            };
            if let Some(j) = minors.insert(minor, i) {
                return Err(at(format!(
                    "class: {minor:#x} is also vcan[{j}]'s class (from its label or `class`); set `class` on one of them"
                )));
            }
            let rule = v.matches.rule().map_err(at)?;
            let mark = (u32::from(handle) << 16) | u32::from(minor);
            rules.push(rule);
            paths.push(VcanPath {
                label: v.label,
                remote: v.remote,
                mark,
            });
            sum_rate = sum_rate.saturating_add(rate);
            max_ceil = max_ceil.max(ceil);
            classes.push(QosClass {
                name: v.name.clone(),
                minor,
                mark,
                label: v.label,
                rate_bps: rate,
                ceil_bps: ceil,
                prio: v.prio,
            });
        }
        let default_rate_bps = match &self.default_rate {
            Some(r) => tc_rate(r).map_err(|e| format!("default_rate: {e}"))?,
            None => 1_000_000,
        };
        let link_rate_bps = match &self.link_rate {
            Some(r) => {
                let l = tc_rate(r).map_err(|e| format!("link_rate: {e}"))?;
                if let Some(c) = classes.iter().find(|c| c.ceil_bps > l) {
                    return Err(format!(
                        "link_rate: {l} bit/s is below vcan \"{}\"'s ceil {} bit/s",
                        c.name, c.ceil_bps
                    ));
                }
                l
            }
            None => sum_rate.saturating_add(default_rate_bps).max(max_ceil),
        };
        if default_rate_bps > link_rate_bps {
            return Err("default_rate: above link_rate".into());
        }
        Ok(Checked {
            classifier: Classifier::new(rules),
            paths,
            qos: QosTable {
                interface: self.interface.clone(),
                handle,
                link_rate_bps,
                default_rate_bps,
                classes,
            },
        })
    }
}

/// A checked `DecapConfig`: labels and peers sorted, without duplicates.
#[derive(Debug, Clone)]
pub(crate) struct DecapChecked {
    pub(crate) labels: Vec<u32>,
    pub(crate) peers: Vec<Ipv4Addr>,
}

impl DecapConfig {
    pub(crate) fn check(&self) -> Result<DecapChecked, String> {
        if self.labels.is_empty() {
            return Err("labels: empty; list the labels this edge serves".into());
        }
        let mut v = self.labels.clone();
        for &l in &v {
            if l > MAX_LABEL {
                return Err(format!(
                    "labels: {l} is above the largest label {MAX_LABEL}"
                ));
            }
        }
        v.sort_unstable();
        v.dedup();
        if self.peers.is_empty() {
            return Err(
                "peers: missing or empty; list the outer source address (`local`) of \
                 every edge that encapsulates towards this one: MPLS from any other source \
                 is dropped"
                    .into(),
            );
        }
        let mut peers = self.peers.clone();
        if let Some(p) = peers
            .iter()
            .find(|p| p.is_unspecified() || p.is_multicast() || p.is_broadcast())
        {
            return Err(format!("peers: {p} is not a unicast address"));
        }
        peers.sort_unstable();
        peers.dedup();
        Ok(DecapChecked { labels: v, peers })
    }
}
