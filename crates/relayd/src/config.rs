//! The configuration file: TOML read with serde, then checked as a whole. Every error
//! names the file, the line and column, and the field, and says what is wrong.

use crate::registry::{BuildError, Registry};
use relay_control::{Family, Hook, Table};
use relay_core::{CtMarkBits, FailPolicy, ServiceFactory, Verdict};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 if unknown).
    pub line: usize,
    /// 1-based column (0 if unknown).
    pub column: usize,
    /// The field, as a path (`queue[1].num`, `service.dump0.kind`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.field,
            self.message
        )
    }
}

/// All that is wrong with a configuration file (at least one error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The `[daemon]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Path of the status socket.
    pub socket: PathBuf,
    /// Prefix of relayd's iptables chains.
    pub chain_prefix: String,
    /// Mark bit(s) that exempt a packet from relayd's rules (added to repeat verdicts).
    pub bypass_mark: u32,
    /// Which iptables to drive: the system's default (`auto`) or `legacy`.
    pub iptables: IptablesFlavor,
    /// The nfmark bits relayd's rules use to hand a queue's services the packet's
    /// conntrack state (only on queues whose services read it; cleared again before the
    /// packet leaves).
    pub ct_mark_bits: CtMarkBits,
}

/// Default conntrack mark bits: tracked, established, related, reply (highest first).
pub const DEFAULT_CT_MARK_BITS: u32 = 0x0f00_0000;

/// Four single bits of `mask`, highest first, as tracked, established, related, reply;
/// `None` unless `mask` has exactly four bits.
pub fn ct_bits_from_mask(mask: u32) -> Option<CtMarkBits> {
    if mask.count_ones() != 4 {
        return None;
    }
    let mut bits = (0..32).rev().map(|i| 1u32 << i).filter(|b| mask & b != 0);
    Some(CtMarkBits {
        tracked: bits.next()?,
        established: bits.next()?,
        related: bits.next()?,
        reply: bits.next()?,
    })
}

/// Which iptables tools relayd runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IptablesFlavor {
    /// `iptables-restore` as installed (nf_tables or legacy, per the system's alternative).
    Auto,
    /// `iptables-legacy-restore`.
    Legacy,
}

/// One `[[queue]]` entry, checked, with its chain resolved.
#[derive(Clone)]
pub struct QueueSpec {
    /// Index of the entry in the file (0-based).
    pub index: usize,
    /// Line of the entry's `num`.
    pub line: usize,
    /// Line of the entry's `match` (its `num` line if it has none).
    pub match_line: usize,
    /// First queue number.
    pub first: u16,
    /// Last queue number (equal to `first` for a single queue).
    pub last: u16,
    /// Hook.
    pub hook: Hook,
    /// Table.
    pub table: Table,
    /// Families the rule is installed for.
    pub families: Vec<Family>,
    /// Optional iptables match.
    pub matches: Option<String>,
    /// The chain: instance names and their factories, in order.
    pub services: Vec<(String, Arc<dyn ServiceFactory>)>,
    /// Fail open (bypass and queue fail-open flag) or closed.
    pub fail_open: bool,
    /// GSO on for this queue.
    pub gso: bool,
    /// Verdict for malformed packets.
    pub malformed: Verdict,
    /// Bytes copied per packet.
    pub copy_range: u32,
    /// Kernel queue length.
    pub max_len: u32,
    /// Receive buffer bytes.
    pub rcvbuf: usize,
    /// Packets per receive system call.
    pub batch: usize,
    /// Spread a range by CPU rather than by flow.
    pub cpu_fanout: bool,
    /// A service reads the packets' conntrack state.
    pub conntrack: bool,
    /// How many packets the queue may hold for a later verdict (services that delay).
    pub hold: relay_nfq::HoldConfig,
}

impl fmt::Debug for QueueSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.services.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("QueueSpec")
            .field("queues", &(self.first..=self.last))
            .field("hook", &self.hook)
            .field("table", &self.table)
            .field("services", &names)
            .field("fail_open", &self.fail_open)
            .field("gso", &self.gso)
            .finish()
    }
}

impl QueueSpec {
    /// The queue numbers this entry covers.
    pub fn nums(&self) -> std::ops::RangeInclusive<u16> {
        self.first..=self.last
    }
}

/// A whole, checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from.
    pub path: PathBuf,
    /// `[daemon]`.
    pub daemon: DaemonConfig,
    /// `[[queue]]` entries in file order.
    pub queues: Vec<QueueSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    queue: Vec<RawQueue>,
    #[serde(default)]
    #[allow(dead_code)]
    service: Option<toml::Value>, // read separately, with positions
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    socket: Option<PathBuf>,
    chain_prefix: Option<Spanned<String>>,
    bypass_mark: Option<Spanned<toml::Value>>,
    iptables: Option<IptablesFlavor>,
    ct_mark_bits: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    num: Spanned<toml::Value>,
    hook: Spanned<String>,
    #[serde(default)]
    table: Option<Spanned<String>>,
    #[serde(default, rename = "match")]
    matches: Option<Spanned<String>>,
    #[serde(default)]
    family: Option<Spanned<String>>,
    services: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    fail_open: Option<bool>,
    #[serde(default)]
    gso: Option<Spanned<bool>>,
    #[serde(default)]
    malformed: Option<Spanned<String>>,
    #[serde(default)]
    copy_range: Option<Spanned<u32>>,
    #[serde(default)]
    max_len: Option<Spanned<u32>>,
    #[serde(default)]
    rcvbuf: Option<Spanned<usize>>,
    #[serde(default)]
    batch: Option<Spanned<usize>>,
    #[serde(default)]
    cpu_fanout: Option<bool>,
}

/// Default status socket path.
pub const DEFAULT_SOCKET: &str = "/run/relayd.sock";

/// Reads and checks a configuration file.
pub fn load(path: &Path, registry: &Registry) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            field: "(file)".into(),
            message: format!("cannot read: {e}"),
        }])
    })?;
    parse(&text, path, registry)
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    errors: Vec<ConfigError>,
}

impl Ctx<'_> {
    fn at(
        &self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = span.map(|s| line_col(self.text, s.start)).unwrap_or((0, 0));
        ConfigError {
            file: self.path.to_path_buf(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    fn err(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let e = self.at(span, field, message);
        self.errors.push(e);
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rfind('\n')
        .map_or(before.len(), |i| before.len() - i - 1)
        + 1;
    (line, col)
}

/// Turns a toml error into ours, keeping its position; `field` names what was being read.
fn toml_error(cx: &Ctx<'_>, e: &toml::de::Error, field: &str) -> ConfigError {
    let msg = e.message().trim().to_string();
    let field = if field.is_empty() {
        guess_field(&msg, cx.text, e.span())
    } else {
        field.to_string()
    };
    cx.at(e.span(), field, msg)
}

/// The key an error is about: serde names it in "unknown field `x`" and "missing field
/// `x`"; otherwise it is the key on the line the error points at (`key = value`).
fn guess_field(msg: &str, text: &str, span: Option<Range<usize>>) -> String {
    if (msg.starts_with("unknown field") || msg.starts_with("missing field"))
        && let Some(name) = msg.split('`').nth(1)
    {
        return name.to_string();
    }
    let line = span.and_then(|s| {
        let start = text[..s.start.min(text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        text[start..].lines().next()
    });
    match line.and_then(|l| l.split_once('=')) {
        Some((key, _)) if !key.trim().starts_with('[') => key.trim().trim_matches('"').to_string(),
        _ => "(syntax)".into(),
    }
}

/// Parses and checks configuration text (`path` is used in error messages).
pub fn parse(text: &str, path: &Path, registry: &Registry) -> Result<Config, ConfigErrors> {
    let mut cx = Ctx {
        path,
        text,
        errors: Vec::new(),
    };
    if let Err(e) = toml::de::DeTable::parse(text) {
        return Err(ConfigErrors(vec![toml_error(&cx, &e, "(syntax)")]));
    }
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => return Err(ConfigErrors(vec![toml_error(&cx, &e, "")])),
    };
    let daemon = check_daemon(&mut cx, raw.daemon);
    let services = read_services(&mut cx, registry);
    let mut queues = Vec::new();
    let mut taken: BTreeMap<u16, usize> = BTreeMap::new();
    for (index, q) in raw.queue.into_iter().enumerate() {
        if let Some(spec) = check_queue(&mut cx, index, q, &services, registry, &mut taken) {
            queues.push(spec);
        }
    }
    if queues.is_empty() && cx.errors.is_empty() {
        cx.err(None, "queue", "no [[queue]] entries: nothing to do");
    }
    if !cx.errors.is_empty() {
        return Err(ConfigErrors(cx.errors));
    }
    Ok(Config {
        path: path.to_path_buf(),
        daemon,
        queues,
    })
}

fn check_daemon(cx: &mut Ctx<'_>, d: RawDaemon) -> DaemonConfig {
    let mut out = DaemonConfig {
        socket: d.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
        chain_prefix: "RELAYD".into(),
        bypass_mark: relay_control::RuleSet::DEFAULT_BYPASS_MARK,
        iptables: d.iptables.unwrap_or(IptablesFlavor::Auto),
        ct_mark_bits: ct_bits_from_mask(DEFAULT_CT_MARK_BITS).expect("four bits"),
    };
    if let Some(p) = d.chain_prefix {
        let ok = p.get_ref().len() <= 16
            && p.get_ref().starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.get_ref()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if ok {
            out.chain_prefix = p.get_ref().clone();
        } else {
            cx.err(
                Some(p.span()),
                "daemon.chain_prefix",
                "must be 1-16 characters of A-Z, a-z, 0-9, _ or -, starting with a letter or digit",
            );
        }
    }
    if let Some(m) = d.bypass_mark {
        match parse_u32(m.get_ref()) {
            Some(v) if v != 0 => out.bypass_mark = v,
            _ => cx.err(
                Some(m.span()),
                "daemon.bypass_mark",
                "must be a non-zero 32-bit mark, e.g. \"0x40000000\"",
            ),
        }
    }
    if let Some(m) = d.ct_mark_bits {
        match parse_u32(m.get_ref()).and_then(ct_bits_from_mask) {
            Some(b) if b.mask() & out.bypass_mark == 0 => out.ct_mark_bits = b,
            Some(_) => cx.err(
                Some(m.span()),
                "daemon.ct_mark_bits",
                "overlaps daemon.bypass_mark",
            ),
            None => cx.err(
                Some(m.span()),
                "daemon.ct_mark_bits",
                "must be a 32-bit mask with exactly four bits set, e.g. \"0x0f000000\"",
            ),
        }
    } else if out.ct_mark_bits.mask() & out.bypass_mark != 0 {
        cx.err(
            None,
            "daemon.ct_mark_bits",
            "the default bits 0x0f000000 overlap daemon.bypass_mark: choose other ones",
        );
    }
    out
}

fn parse_u32(v: &toml::Value) -> Option<u32> {
    match v {
        toml::Value::Integer(i) => u32::try_from(*i).ok(),
        toml::Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
        _ => None,
    }
}

struct ServiceEntry {
    /// `None` if the section has errors (already reported).
    factory: Option<Arc<dyn ServiceFactory>>,
}

/// Reads every `[service.NAME]` with positions, builds each factory.
fn read_services(cx: &mut Ctx<'_>, registry: &Registry) -> BTreeMap<String, ServiceEntry> {
    use toml::de::{DeTable, DeValue};
    let mut out = BTreeMap::new();
    let doc = match DeTable::parse(cx.text) {
        Ok(d) => d,
        Err(e) => {
            let err = toml_error(cx, &e, "");
            cx.errors.push(err);
            return out;
        }
    };
    let Some((_, section)) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == "service") else {
        return out;
    };
    let DeValue::Table(section) = section.get_ref() else {
        cx.err(
            Some(section.span()),
            "service",
            "must be a table of [service.NAME] sections",
        );
        return out;
    };
    for (name, body) in section.iter() {
        let name_s = name.get_ref().to_string();
        let field = format!("service.{name_s}");
        // Until it builds, the section counts as present but broken (errors said once).
        out.insert(name_s.clone(), ServiceEntry { factory: None });
        if !valid_name(&name_s) {
            cx.err(
                Some(name.span()),
                field.clone(),
                "service names use A-Z, a-z, 0-9, _ and -",
            );
            continue;
        }
        let DeValue::Table(table) = body.get_ref() else {
            cx.err(
                Some(body.span()),
                field,
                "must be a table with at least `kind`",
            );
            continue;
        };
        let mut options = table.clone();
        let kind = options
            .iter()
            .find(|(k, _)| k.get_ref() == "kind")
            .map(|(k, v)| (k.clone(), v.clone()));
        let Some((kind_key, kind_val)) = kind else {
            cx.err(
                Some(name.span()),
                format!("{field}.kind"),
                "missing: every service needs a `kind`",
            );
            continue;
        };
        options.remove(&kind_key);
        let DeValue::String(kind) = kind_val.get_ref() else {
            cx.err(
                Some(kind_val.span()),
                format!("{field}.kind"),
                "must be a string",
            );
            continue;
        };
        let de =
            toml::de::ValueDeserializer::from(Spanned::new(body.span(), DeValue::Table(options)));
        match registry.build(kind, &name_s, de) {
            None => {
                let known: Vec<&str> = registry.kinds().collect();
                cx.err(
                    Some(kind_val.span()),
                    format!("{field}.kind"),
                    format!(
                        "unknown service kind `{kind}` (known: {})",
                        known.join(", ")
                    ),
                );
            }
            Some(Err(BuildError::Options(e))) => {
                let msg = e.message().trim().to_string();
                let sub = guess_field(&msg, cx.text, e.span());
                let f = if sub == "(syntax)" {
                    field.clone()
                } else {
                    format!("{field}.{sub}")
                };
                let span = e.span().or(Some(body.span()));
                cx.err(span, f, msg);
            }
            Some(Err(BuildError::Invalid(msg))) => cx.err(Some(body.span()), field, msg),
            Some(Ok(factory)) => {
                out.insert(
                    name_s,
                    ServiceEntry {
                        factory: Some(factory),
                    },
                );
            }
        }
    }
    out
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_queue(
    cx: &mut Ctx<'_>,
    index: usize,
    q: RawQueue,
    services: &BTreeMap<String, ServiceEntry>,
    registry: &Registry,
    taken: &mut BTreeMap<u16, usize>,
) -> Option<QueueSpec> {
    let f = |name: &str| format!("queue[{index}].{name}");
    let errors_before = cx.errors.len();
    let (line, _) = line_col(cx.text, q.num.span().start);
    let (first, last) = match q.num.get_ref() {
        toml::Value::Integer(n) => match u16::try_from(*n) {
            Ok(n) => (n, n),
            Err(_) => {
                cx.err(
                    Some(q.num.span()),
                    f("num"),
                    format!("{n} is not a queue number (0-65535)"),
                );
                (0, 0)
            }
        },
        toml::Value::String(s) => relay_control::parse_queue_range(s).unwrap_or_else(|e| {
            cx.err(Some(q.num.span()), f("num"), e);
            (0, 0)
        }),
        _ => {
            cx.err(
                Some(q.num.span()),
                f("num"),
                "must be a number or a range like \"0-3\"",
            );
            (0, 0)
        }
    };
    if cx.errors.len() == errors_before {
        for n in first..=last {
            if let Some(prev) = taken.insert(n, index) {
                cx.err(
                    Some(q.num.span()),
                    f("num"),
                    format!("queue {n} is already used by queue[{prev}]"),
                );
                break;
            }
        }
    }
    let hook = q.hook.get_ref().parse::<Hook>().unwrap_or_else(|e| {
        cx.err(Some(q.hook.span()), f("hook"), e);
        Hook::Forward
    });
    let table = match &q.table {
        None => Table::Mangle,
        Some(t) => t.get_ref().parse::<Table>().unwrap_or_else(|e| {
            cx.err(Some(t.span()), f("table"), e);
            Table::Mangle
        }),
    };
    if !table.has_hook(hook) {
        let span = q.table.as_ref().map_or(q.hook.span(), |t| t.span());
        cx.err(
            Some(span),
            f("table"),
            format!("table {table} has no {hook} hook (raw has prerouting and output)"),
        );
    }
    let families = match q.family.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("ipv4", _)) => vec![Family::Ipv4],
        Some(("ipv6", _)) => vec![Family::Ipv6],
        Some(("both", _)) => vec![Family::Ipv4, Family::Ipv6],
        Some((other, span)) => {
            cx.err(
                Some(span),
                f("family"),
                format!("unknown family `{other}` (ipv4, ipv6 or both)"),
            );
            vec![Family::Ipv4]
        }
    };
    if let Some(m) = &q.matches
        && let Err(e) = relay_control::split_matches(m.get_ref())
    {
        cx.err(Some(m.span()), f("match"), e.to_string());
    }
    let mut chain = Vec::new();
    if q.services.get_ref().is_empty() {
        cx.err(
            Some(q.services.span()),
            f("services"),
            "empty: name at least one service",
        );
    }
    for (i, s) in q.services.get_ref().iter().enumerate() {
        let name = s.get_ref();
        if let Some(e) = services.get(name) {
            // A section with errors was reported already; don't report it again here.
            if let Some(factory) = &e.factory {
                chain.push((name.clone(), factory.clone()));
            }
            continue;
        }
        match registry.build_default(name) {
            Some(Ok(factory)) => chain.push((name.clone(), factory)),
            Some(Err(BuildError::Options(e))) => cx.err(
                Some(s.span()),
                format!("queue[{index}].services[{i}]"),
                format!(
                    "built-in `{name}` needs options ({}); add a [service.NAME] section",
                    e.message().trim()
                ),
            ),
            Some(Err(BuildError::Invalid(m))) => {
                cx.err(Some(s.span()), format!("queue[{index}].services[{i}]"), m)
            }
            None => cx.err(
                Some(s.span()),
                format!("queue[{index}].services[{i}]"),
                format!(
                    "unknown service `{name}`: not a [service.{name}] section nor a built-in kind"
                ),
            ),
        }
    }
    let wants_closed = chain
        .iter()
        .any(|(_, s)| s.fail_policy() == FailPolicy::Closed);
    let fail_open = q.fail_open.unwrap_or(!wants_closed);
    let rewriter = chain
        .iter()
        .find(|(_, s)| s.rewrites_payload())
        .map(|(n, _)| n.clone());
    let gso = match (&q.gso, &rewriter) {
        (Some(g), Some(r)) if *g.get_ref() => {
            cx.err(
                Some(g.span()),
                f("gso"),
                format!("service `{r}` rewrites packets, which needs GSO off"),
            );
            false
        }
        (Some(g), _) => *g.get_ref(),
        (None, r) => r.is_none(),
    };
    let malformed = match q
        .malformed
        .as_ref()
        .map(|m| (m.get_ref().as_str(), m.span()))
    {
        None => {
            if fail_open {
                Verdict::Accept
            } else {
                Verdict::Drop
            }
        }
        Some(("accept", _)) => Verdict::Accept,
        Some(("drop", _)) => Verdict::Drop,
        Some((other, span)) => {
            cx.err(
                Some(span),
                f("malformed"),
                format!("unknown policy `{other}` (accept or drop)"),
            );
            Verdict::Accept
        }
    };
    let defaults = relay_nfq::QueueConfig::new(first);
    // Copy only what the chain needs: the headers relayd checks, or whole packets as
    // soon as one service wants them.
    let needed = chain
        .iter()
        .try_fold(relay_core::builtin::HEADER_BYTES, |acc, (_, s)| {
            s.needs_bytes().map(|n| acc.max(n))
        });
    let copy_range = match &q.copy_range {
        Some(c) if *c.get_ref() < 64 || *c.get_ref() > 0xffff => {
            cx.err(Some(c.span()), f("copy_range"), "must be 64-65535 bytes");
            defaults.copy_range
        }
        Some(c) => {
            if let Some((name, _)) = chain
                .iter()
                .find(|(_, s)| s.needs_bytes().is_none_or(|n| n > *c.get_ref()))
            {
                cx.err(
                    Some(c.span()),
                    f("copy_range"),
                    format!("service `{name}` needs more of each packet"),
                );
            }
            *c.get_ref()
        }
        None => needed.unwrap_or(defaults.copy_range),
    };
    let max_len = match &q.max_len {
        Some(m) if *m.get_ref() == 0 => {
            cx.err(Some(m.span()), f("max_len"), "must be at least 1");
            defaults.max_len
        }
        Some(m) => *m.get_ref(),
        None => defaults.max_len,
    };
    let min_rcvbuf = copy_range as usize + relay_nfq::QueueConfig::OVERHEAD;
    let rcvbuf = match &q.rcvbuf {
        Some(r) if *r.get_ref() < min_rcvbuf => {
            cx.err(
                Some(r.span()),
                f("rcvbuf"),
                format!(
                    "must be larger than copy_range plus netlink overhead ({min_rcvbuf} bytes)"
                ),
            );
            defaults.rcvbuf
        }
        Some(r) => *r.get_ref(),
        None => defaults.rcvbuf,
    };
    let batch = match &q.batch {
        Some(b) if !(1..=1024).contains(b.get_ref()) => {
            cx.err(Some(b.span()), f("batch"), "must be 1-1024 packets");
            defaults.batch
        }
        Some(b) => *b.get_ref(),
        None => defaults.batch,
    };
    let conntrack = chain.iter().find(|(_, s)| s.needs_conntrack());
    if let (Some((name, _)), Table::Raw) = (conntrack, table) {
        let span = q.table.as_ref().map(|t| t.span());
        cx.err(
            span,
            f("table"),
            format!(
                "service `{name}` reads conntrack state, which the raw table comes before: use table = \"mangle\""
            ),
        );
    }
    let conntrack = conntrack.is_some();
    let held: u32 = chain.iter().map(|(_, s)| s.max_held()).sum();
    let mut hold = relay_nfq::HoldConfig::default();
    let mut max_len = max_len;
    if held > 0 {
        hold.max_packets = held;
        // Beyond its capacity a delaying queue drops, as a full netem queue does.
        hold.overflow = Verdict::Drop;
        // The kernel counts held packets against the queue length.
        let need = held.saturating_add(batch as u32);
        match &q.max_len {
            Some(m) if *m.get_ref() < need => cx.err(
                Some(m.span()),
                f("max_len"),
                format!(
                    "must be at least {need}: the services hold up to {held} packets, plus a batch"
                ),
            ),
            Some(_) => {}
            None => max_len = max_len.max(need),
        }
    }
    let cpu_fanout = q.cpu_fanout.unwrap_or(false);
    if cpu_fanout && first == last {
        cx.err(
            Some(q.num.span()),
            f("cpu_fanout"),
            "needs a queue range such as \"0-3\"",
        );
    }
    if cx.errors.len() > errors_before {
        return None;
    }
    Some(QueueSpec {
        index,
        line,
        match_line: q
            .matches
            .as_ref()
            .map_or(line, |m| line_col(cx.text, m.span().start).0),
        first,
        last,
        hook,
        table,
        families,
        matches: q.matches.map(|m| m.into_inner()),
        services: chain,
        fail_open,
        gso,
        malformed,
        copy_range,
        max_len,
        rcvbuf,
        batch,
        cpu_fanout,
        conntrack,
        hold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(text: &str) -> Vec<ConfigError> {
        parse(text, Path::new("t.toml"), &Registry::with_builtins())
            .unwrap_err()
            .0
    }

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
[daemon]
socket = "/tmp/r.sock"

[[queue]]
num = 0
hook = "forward"
match = "-i eth0 -p udp"
services = ["dump0", "accept"]

[[queue]]
num = "2-3"
hook = "output"
table = "raw"
services = ["drop"]

[service.dump0]
kind = "dump"
rate = 5
"#;
        let c = parse(text, Path::new("t.toml"), &Registry::with_builtins()).unwrap();
        assert_eq!(c.queues.len(), 2);
        assert_eq!(c.queues[0].services.len(), 2);
        assert_eq!(c.queues[0].line, 6);
        assert!(c.queues[0].fail_open && c.queues[0].gso);
        assert_eq!((c.queues[1].first, c.queues[1].last), (2, 3));
        assert_eq!(c.daemon.socket, PathBuf::from("/tmp/r.sock"));
    }

    #[test]
    fn unknown_kind_names_line_and_field() {
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"x\"]\n[service.x]\nkind = \"nope\"\n",
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!((e[0].line, e[0].field.as_str()), (6, "service.x.kind"));
        assert!(
            e[0].message.contains("unknown service kind `nope`"),
            "{}",
            e[0].message
        );
        assert!(e[0].to_string().starts_with("t.toml:6:"));
    }

    #[test]
    fn bad_range_duplicate_and_unknown_service() {
        let e = errs(
            "[[queue]]\nnum = \"3-1\"\nhook = \"forward\"\nservices = [\"accept\"]\n\
             [[queue]]\nnum = 5\nhook = \"input\"\nservices = [\"accept\"]\n\
             [[queue]]\nnum = \"4-6\"\nhook = \"input\"\nservices = [\"ghost\"]\n\
             [[queue]]\nnum = \"4-6\"\nhook = \"input\"\nservices = [\"accept\"]\n",
        );
        let f: Vec<(usize, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(
            f,
            vec![
                (2, "queue[0].num"),
                (10, "queue[2].num"),
                (12, "queue[2].services[0]"),
                (14, "queue[3].num")
            ],
            "{e:#?}"
        );
    }

    #[test]
    fn conntrack_mark_bits_and_held_packets() {
        assert_eq!(
            ct_bits_from_mask(0x0f00_0000),
            Some(CtMarkBits {
                tracked: 0x0800_0000,
                established: 0x0400_0000,
                related: 0x0200_0000,
                reply: 0x0100_0000,
            })
        );
        assert_eq!(ct_bits_from_mask(0x7), None);
        let e = errs(
            "[daemon]\nct_mark_bits = \"0x3\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
        );
        assert_eq!((e[0].line, e[0].field.as_str()), (2, "daemon.ct_mark_bits"));
        let e = errs(
            "[daemon]\nbypass_mark = \"0x01000000\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
        );
        assert_eq!(e[0].field, "daemon.ct_mark_bits", "{e:?}");
        // A delaying queue holds packets: its kernel queue is made long enough, or refused.
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n";
        let svc = "[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 5000\n";
        let cfg = parse(
            &format!("{q}{svc}"),
            Path::new("t.toml"),
            &Registry::with_builtins(),
        )
        .unwrap();
        assert_eq!(cfg.queues[0].hold.max_packets, 5000);
        assert!(cfg.queues[0].max_len >= 5000 + cfg.queues[0].batch as u32);
        let e = errs(&format!("{q}max_len = 100\n{svc}"));
        assert_eq!(e[0].field, "queue[0].max_len", "{e:?}");
    }

    #[test]
    fn bad_option_type_and_unknown_option() {
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nrate = \"x\"\n",
        );
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (7, "service.d.rate"),
            "{e:?}"
        );
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nratee = 1\n",
        );
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (7, "service.d.ratee"),
            "{e:?}"
        );
        let e = errs("[[queue]]\nnum = 0\nhook = \"sideways\"\nservices = [\"accept\"]\n");
        assert_eq!((e[0].line, e[0].field.as_str()), (3, "queue[0].hook"));
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\ntable = \"raw\"\nservices = [\"accept\"]\n",
        );
        assert_eq!((e[0].line, e[0].field.as_str()), (4, "queue[0].table"));
        let e = errs("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"mark\"]\n");
        assert!(e[0].message.contains("needs options"), "{e:?}");
        let e = errs(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\nmatch = \"-p udp -j ACCEPT\"\n",
        );
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (5, "queue[0].match"),
            "{e:?}"
        );
        let e = errs("[daemon]\nsokcet = 1\n");
        assert_eq!((e[0].line, e[0].field.as_str()), (2, "sokcet"), "{e:?}");
        let e = errs("[[queue]\nnum = 0\n");
        assert_eq!((e[0].line, e[0].field.as_str()), (1, "(syntax)"), "{e:?}");
    }
}
