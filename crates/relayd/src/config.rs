//! The configuration file: TOML read with serde, then checked as a whole. Every error
//! names the file, the line and column, and the field, and says what is wrong.

use crate::registry::{BuildError, Registry};
use relay_control::{Hook, IpVersion, Table};
use relay_core::{CtMarkBits, FailPolicy, ServiceFactory, Verdict};
use relay_proxy::tproxy::{Divert, TproxySpec};
use relay_proxy::{Socks5Config, TransparentConfig};
use relay_svc_tcpsplit::TcpSplitConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
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
    /// The two mark bits in which packets relayd repeats or sends itself carry the stage of
    /// the hook they were handled at, so that relayd's rules at hooks they have crossed skip
    /// them (see [`relay_core::StageMark`]).
    pub bypass_mark: u32,
    /// Which iptables to drive: the system's default (`auto`) or `legacy`.
    pub iptables: IptablesFlavor,
    /// The nfmark bits relayd's rules use to hand a queue's services the packet's
    /// conntrack state (only on queues whose services read it; cleared again before the
    /// packet leaves).
    pub ct_mark_bits: CtMarkBits,
    /// Where `/metrics` (Prometheus/OpenMetrics text) is served, if anywhere
    /// (`daemon.metrics`). A non-loopback address needs `daemon.metrics_public = true`,
    /// so that counters are never exposed to a network by a typo.
    pub metrics: Option<std::net::SocketAddr>,
    /// The user relayd drops to when started as root (`daemon.user`), once its status
    /// socket is bound and its lock taken, before it binds a queue: its name as
    /// configured, uid and primary gid. `None`: relayd keeps the user it was started as.
    pub user: Option<DaemonUser>,
    /// The group that owns the status socket (`daemon.socket_group`), whose members may
    /// query and command relayd: mode 0660 then, else 0600.
    pub socket_group: Option<u32>,
}

/// `daemon.user`, resolved when the configuration is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonUser {
    /// The name (or number) as configured.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
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
    pub families: Vec<IpVersion>,
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
    /// CPUs the queue threads are pinned to: queue `first + i` on `cpus[i % len]`; empty
    /// leaves them unpinned.
    pub cpus: Vec<usize>,
    /// The nice value of every queue thread of the entry (`setpriority`, -20 to 19);
    /// `None` leaves the one relayd was started with.
    pub nice: Option<i32>,
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

    /// The CPU queue `num`'s thread is pinned to, if any: `cpus[(num - first) % len]`.
    pub fn cpu_for(&self, num: u16) -> Option<usize> {
        let i = usize::from(num.saturating_sub(self.first));
        self.cpus.get(i.checked_rem(self.cpus.len())?).copied()
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
    /// The proxy listeners the daemon runs (`socks5`, and the transparent listener of the
    /// split proxy), in name order.
    pub listeners: Vec<ListenerSpec>,
    /// The transparent diversion relayd installs for its split proxy, if any.
    pub tproxy: Option<TproxySetup>,
    /// What is valid but probably unwise (a SOCKS5 listener open to the network without
    /// authentication), in the errors' form; `relayd check` prints them, `run` logs them.
    pub warnings: Vec<ConfigError>,
}

/// A proxy listener the daemon runs on its tokio runtime: a `[service.NAME]` of kind
/// `socks5` or `tproxy` (or the transparent listener a `tcpsplit` service implies). Not a
/// chain service: it never appears in a queue's `services`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The section name (for the implied transparent listener: the `tcpsplit` service's).
    pub name: String,
    /// Line of the section's `kind` (0 for an implied listener).
    pub line: usize,
    /// What it is and its options.
    pub kind: ListenerKind,
}

/// The two listener kinds and their options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerKind {
    /// A SOCKS5 (RFC 1928, RFC 1929) listener.
    Socks5(Socks5Config),
    /// The transparent listener TPROXY diverts split connections to.
    Transparent(TransparentConfig),
}

impl ListenerKind {
    /// The kind as configured and shown: `socks5` or `tproxy`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ListenerKind::Socks5(_) => "socks5",
            ListenerKind::Transparent(_) => "tproxy",
        }
    }

    /// The configured listen address.
    pub fn listen(&self) -> SocketAddr {
        match self {
            ListenerKind::Socks5(c) => c.listen,
            ListenerKind::Transparent(c) => c.listen,
        }
    }

    /// The upstream transport.
    pub fn upstream(&self) -> relay_proxy::Upstream {
        match self {
            ListenerKind::Socks5(c) => c.options.upstream,
            ListenerKind::Transparent(c) => c.options.upstream,
        }
    }

    /// How long live connections may run on when the listener stops.
    pub fn drain_timeout(&self) -> std::time::Duration {
        match self {
            ListenerKind::Socks5(c) => c.options.drain_timeout(),
            ListenerKind::Transparent(c) => c.options.drain_timeout(),
        }
    }
}

/// The transparent diversion of the split proxy: the TPROXY rules (marks, port) and the
/// policy route relayd installs, for which families, to which listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TproxySetup {
    /// Marks, port, routing table and rule preference.
    pub spec: TproxySpec,
    /// Families whose rules are installed (those of the `tcpsplit` queues).
    pub families: Vec<IpVersion>,
    /// Name of the transparent listener.
    pub listener: String,
}

/// Default `ip rule` preference and routing table of the split proxy's local route; they
/// are how `relayd cleanup` finds them after a crash.
pub const DEFAULT_TPROXY_TABLE: u32 = TproxySpec::DEFAULT_TABLE;
/// See [`DEFAULT_TPROXY_TABLE`].
pub const DEFAULT_TPROXY_RULE_PREF: u32 = TproxySpec::DEFAULT_RULE_PREF;

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
    user: Option<Spanned<String>>,
    socket_group: Option<Spanned<String>>,
    metrics: Option<Spanned<String>>,
    metrics_public: Option<bool>,
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
    #[serde(default)]
    cpu: Option<Spanned<toml::Value>>,
    #[serde(default)]
    nice: Option<Spanned<toml::Value>>,
}

/// Default status socket path.
pub const DEFAULT_SOCKET: &str = "/run/relayd/relayd.sock";

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
    warnings: Vec<ConfigError>,
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

    /// Records a warning: valid, but probably not what is wanted.
    fn warn(
        &mut self,
        span: Option<Range<usize>>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        let w = self.at(span, field, message);
        self.warnings.push(w);
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

/// Records the error of deserializing the options of section `field` (`service.NAME`):
/// the key it is about appended to `field` where it can be told, at the error's position
/// or else at the section's `body` span.
fn section_error(cx: &mut Ctx<'_>, field: &str, e: &toml::de::Error, body: Range<usize>) {
    let msg = e.message().trim().to_string();
    let sub = guess_field(&msg, cx.text, e.span());
    let f = if sub == "(syntax)" {
        field.to_string()
    } else {
        format!("{field}.{sub}")
    };
    cx.err(e.span().or(Some(body)), f, msg);
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
        warnings: Vec::new(),
    };
    if let Err(e) = toml::de::DeTable::parse(text) {
        return Err(ConfigErrors(vec![toml_error(&cx, &e, "(syntax)")]));
    }
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => return Err(ConfigErrors(vec![toml_error(&cx, &e, "")])),
    };
    let daemon = check_daemon(&mut cx, raw.daemon);
    let services = read_services(&mut cx, registry, daemon.bypass_mark);
    let mut queues = Vec::new();
    let mut taken: BTreeMap<u16, usize> = BTreeMap::new();
    for (index, q) in raw.queue.into_iter().enumerate() {
        if let Some(spec) = check_queue(&mut cx, index, q, &services, registry, &mut taken) {
            queues.push(spec);
        }
    }
    let (listeners, tproxy) = check_listeners(&mut cx, &queues, &services, &daemon);
    if let Some(u) = &daemon.user {
        // Reloads read the file again as that user, and the key files and EVE log with it.
        let rereads: Vec<String> = queues
            .iter()
            .flat_map(|q| q.services.iter())
            .filter(|(_, f)| matches!(f.kind(), "encrypt" | "decrypt" | "ids"))
            .map(|(name, f)| format!("{name} ({})", f.kind()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !rereads.is_empty() {
            cx.warn(
                None,
                "daemon.user",
                format!(
                    "reloads re-read key files and reopen EVE logs as `{}`, which cannot read \
                     root's 0600 keys: with {} a reload will be refused; restart instead, or run \
                     relayd as that user from the start (docs/operations.md, Least privilege)",
                    u.name,
                    rereads.join(", ")
                ),
            );
        }
    }
    if queues.is_empty() && listeners.is_empty() && cx.errors.is_empty() {
        cx.err(
            None,
            "queue",
            "no [[queue]] entries and no listeners: nothing to do",
        );
    }
    if !cx.errors.is_empty() {
        return Err(ConfigErrors(cx.errors));
    }
    let config = Config {
        path: path.to_path_buf(),
        daemon,
        queues,
        listeners,
        tproxy,
        warnings: std::mem::take(&mut cx.warnings),
    };
    // The tc trees `run` installs: two services that want different trees on one
    // interface, or a tree tc would refuse, are errors `check` reports too.
    if let Err(e) = crate::qos::plans(&config) {
        return Err(ConfigErrors(vec![cx.at(None, "service", e)]));
    }
    Ok(config)
}

fn check_daemon(cx: &mut Ctx<'_>, d: RawDaemon) -> DaemonConfig {
    let mut out = DaemonConfig {
        socket: d.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
        chain_prefix: "RELAYD".into(),
        bypass_mark: relay_core::StageMark::DEFAULT_MASK,
        iptables: d.iptables.unwrap_or(IptablesFlavor::Auto),
        ct_mark_bits: ct_bits_from_mask(DEFAULT_CT_MARK_BITS).expect("four bits"),
        metrics: None,
        user: None,
        socket_group: None,
    };
    if let Some(u) = d.user {
        match crate::privilege::lookup_user(u.get_ref()) {
            Ok((0, _)) => cx.err(
                Some(u.span()),
                "daemon.user",
                format!(
                    "`{}` is root (uid 0): there is nothing to drop to; remove daemon.user \
                     or name an unprivileged user",
                    u.get_ref()
                ),
            ),
            Ok((uid, gid)) => {
                out.user = Some(DaemonUser {
                    name: u.get_ref().clone(),
                    uid,
                    gid,
                })
            }
            Err(e) => cx.err(Some(u.span()), "daemon.user", e),
        }
    }
    if let Some(g) = d.socket_group {
        match crate::privilege::lookup_group(g.get_ref()) {
            Ok(gid) => out.socket_group = Some(gid),
            Err(e) => cx.err(Some(g.span()), "daemon.socket_group", e),
        }
    }
    if let Some(m) = d.metrics {
        match m.get_ref().trim().parse::<std::net::SocketAddr>() {
            Ok(a) if a.ip().is_loopback() || d.metrics_public == Some(true) => {
                out.metrics = Some(a);
            }
            Ok(a) => cx.err(
                Some(m.span()),
                "daemon.metrics",
                format!(
                    "{a} is not a loopback address: anyone who can reach it reads relayd's \
                     counters; set daemon.metrics_public = true to serve it anyway"
                ),
            ),
            Err(_) => cx.err(
                Some(m.span()),
                "daemon.metrics",
                "must be an IP address and port, e.g. \"127.0.0.1:9477\" or \"[::1]:9477\"",
            ),
        }
    }
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
            Some(v) if v.count_ones() == 2 => out.bypass_mark = v,
            _ => cx.err(
                Some(m.span()),
                "daemon.bypass_mark",
                "must be a 32-bit mask with exactly two bits set, e.g. \"0xc0000000\": relayd \
                 keeps in them which hooks a packet it sent or repeated has crossed",
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

struct ServiceEntry<'a> {
    /// `None` if the section has errors (already reported).
    factory: Option<Arc<dyn ServiceFactory>>,
    /// A `tcpsplit` section's options (the proxy and the rules read them too), and the
    /// span of its name.
    split: Option<(TcpSplitConfig, Range<usize>)>,
    /// A listener section (`socks5`, `tproxy`): not a chain service.
    listener: Option<ListenerSection<'a>>,
}

/// A `[service.NAME]` of a listener kind, kept for [`check_listeners`].
struct ListenerSection<'a> {
    kind: &'static str,
    kind_span: Range<usize>,
    body_span: Range<usize>,
    options: toml::de::DeTable<'a>,
}

/// Kinds that are listeners the daemon runs, not chain services.
pub const LISTENER_KINDS: [&str; 2] = ["socks5", "tproxy"];

/// Reads every `[service.NAME]` with positions, builds each factory.
fn read_services<'a>(
    cx: &mut Ctx<'a>,
    registry: &Registry,
    stage_mask: u32,
) -> BTreeMap<String, ServiceEntry<'a>> {
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
        out.insert(
            name_s.clone(),
            ServiceEntry {
                factory: None,
                split: None,
                listener: None,
            },
        );
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
        if let Some(k) = LISTENER_KINDS.iter().find(|k| **k == kind.as_ref()) {
            out.insert(
                name_s,
                ServiceEntry {
                    factory: None,
                    split: None,
                    listener: Some(ListenerSection {
                        kind: k,
                        kind_span: kind_val.span(),
                        body_span: body.span(),
                        options,
                    }),
                },
            );
            continue;
        }
        let split = if kind.as_ref() == <TcpSplitConfig as relay_core::ServiceConfig>::KIND {
            let de = toml::de::ValueDeserializer::from(Spanned::new(
                body.span(),
                DeValue::Table(options.clone()),
            ));
            <TcpSplitConfig as serde::Deserialize>::deserialize(de)
                .ok()
                .map(|c| (c, name.span()))
        } else {
            None
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
            Some(Err(BuildError::Options(e))) => section_error(cx, &field, &e, body.span()),
            Some(Err(BuildError::Invalid(msg))) => cx.err(Some(body.span()), field, msg),
            Some(Ok(factory)) => {
                let bits = factory.mark_bits() & stage_mask;
                if bits != 0 {
                    cx.err(
                        Some(body.span()),
                        field.clone(),
                        format!(
                            "sets mark bits {bits:#x}, which are relayd's stage bits \
                             (daemon.bypass_mark {stage_mask:#x}): choose other bits"
                        ),
                    );
                }
                out.insert(
                    name_s,
                    ServiceEntry {
                        factory: Some(factory),
                        split,
                        listener: None,
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
    services: &BTreeMap<String, ServiceEntry<'_>>,
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
        None | Some(("ipv4", _)) => vec![IpVersion::V4],
        Some(("ipv6", _)) => vec![IpVersion::V6],
        Some(("both", _)) => vec![IpVersion::V4, IpVersion::V6],
        Some((other, span)) => {
            cx.err(
                Some(span),
                f("family"),
                format!("unknown family `{other}` (ipv4, ipv6 or both)"),
            );
            vec![IpVersion::V4]
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
        if let Some(ServiceEntry {
            listener: Some(l), ..
        }) = services.get(name)
        {
            cx.err(
                Some(s.span()),
                format!("queue[{index}].services[{i}]"),
                format!(
                    "`{name}` is a {} listener the daemon runs, not a chain service",
                    l.kind
                ),
            );
            continue;
        }
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
    let cpus = q
        .cpu
        .as_ref()
        .map(|c| {
            check_cpus(
                cx,
                c,
                &f("cpu"),
                usize::from(last.saturating_sub(first)) + 1,
            )
        })
        .unwrap_or_default();
    let nice = q.nice.as_ref().and_then(|n| check_nice(cx, n, &f("nice")));
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
        cpus,
        nice,
        conntrack,
        hold,
    })
}

/// A queue's `nice`: an integer the kernel takes as is (it would clamp others silently).
fn check_nice(cx: &mut Ctx<'_>, v: &Spanned<toml::Value>, field: &str) -> Option<i32> {
    let range = relay_nfq::NICE_RANGE;
    let nice = v
        .get_ref()
        .as_integer()
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| range.contains(n));
    if nice.is_none() {
        cx.err(
            Some(v.span()),
            field,
            format!(
                "must be a nice value from {} to {} (lower runs more)",
                range.start(),
                range.end()
            ),
        );
    }
    nice
}

/// A queue's `cpu`: one CPU number, or a list of them for a range (queue `first + i` on
/// `cpus[i % len]`). Each must be one relayd may run on (its affinity mask, as `taskset`,
/// cpusets or systemd's `CPUAffinity=` leave it), so `relayd check` on the router tells.
fn check_cpus(
    cx: &mut Ctx<'_>,
    v: &Spanned<toml::Value>,
    field: &str,
    queues: usize,
) -> Vec<usize> {
    let cpus: Vec<Option<usize>> = match v.get_ref() {
        toml::Value::Integer(n) => vec![usize::try_from(*n).ok()],
        toml::Value::Array(a) => a
            .iter()
            .map(|x| x.as_integer().and_then(|n| usize::try_from(n).ok()))
            .collect(),
        _ => vec![None],
    };
    if cpus.is_empty() || cpus.iter().any(Option::is_none) {
        cx.err(
            Some(v.span()),
            field,
            "must be a CPU number or a non-empty list of CPU numbers, like 1 or [2, 3]",
        );
        return Vec::new();
    }
    let cpus: Vec<usize> = cpus.into_iter().flatten().collect();
    if cpus.len() > queues {
        cx.err(
            Some(v.span()),
            field,
            format!(
                "lists {} CPUs for {queues} queue thread{}: give at most one per queue",
                cpus.len(),
                if queues == 1 { "" } else { "s" }
            ),
        );
        return Vec::new();
    }
    let available = match relay_nfq::available_cpus() {
        Ok(a) => a,
        Err(e) => {
            cx.err(
                Some(v.span()),
                field,
                format!("cannot read the CPUs relayd may use: {e}"),
            );
            return Vec::new();
        }
    };
    if let Some(bad) = cpus.iter().find(|c| !available.contains(c)) {
        cx.err(
            Some(v.span()),
            field,
            format!(
                "CPU {bad} is not available to relayd (available: {})",
                relay_nfq::format_cpu_list(&available)
            ),
        );
        return Vec::new();
    }
    cpus
}

/// Keys of a listener section besides `kind`: the proxy's own (read from its defaults, so
/// a key the proxy crate adds is known here at once) and relayd's extras.
fn listener_keys(kind: &str) -> Vec<String> {
    let value = match kind {
        "socks5" => serde_json::to_value(Socks5Config::default()),
        _ => serde_json::to_value(TransparentConfig::default()),
    };
    let mut keys: Vec<String> = match value {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    if kind == "tproxy" {
        keys.extend(TPROXY_EXTRA_KEYS.map(String::from));
    }
    keys.sort();
    keys
}

/// `tproxy` keys that are relayd's (rules and routes), not the listener's.
const TPROXY_EXTRA_KEYS: [&str; 4] = ["tproxy_mark", "table", "rule_pref", "ports"];

/// A `tcpsplit` instance that runs in a queue.
struct SplitUse<'c> {
    name: String,
    cfg: &'c TcpSplitConfig,
    span: Option<Range<usize>>,
}

/// Checks the listener sections and the split proxy as a whole: the listeners to run,
/// and the transparent diversion (TPROXY rules and route) the `tcpsplit` services need.
fn check_listeners(
    cx: &mut Ctx<'_>,
    queues: &[QueueSpec],
    services: &BTreeMap<String, ServiceEntry<'_>>,
    daemon: &DaemonConfig,
) -> (Vec<ListenerSpec>, Option<TproxySetup>) {
    use toml::de::DeValue;
    let default_split: TcpSplitConfig =
        toml::from_str("").expect("tcpsplit has defaults for every option");
    // Every tcpsplit instance in a queue, and the families of those queues.
    let mut splits: Vec<SplitUse<'_>> = Vec::new();
    let mut families: Vec<IpVersion> = Vec::new();
    for q in queues {
        for (name, f) in &q.services {
            if f.kind() != <TcpSplitConfig as relay_core::ServiceConfig>::KIND {
                continue;
            }
            let (cfg, span) = match services.get(name).and_then(|e| e.split.as_ref()) {
                Some((c, span)) => (c, Some(span.clone())),
                None => (&default_split, None),
            };
            let field = format!("queue[{}].hook", q.index);
            if q.hook != Hook::Prerouting {
                cx.err(
                    Some(line_span(cx.text, q.line)),
                    field,
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
                    cfg,
                    span,
                });
            }
        }
    }
    families.sort();
    // All instances feed one transparent listener: they must agree on what it reads.
    if let Some(first) = splits.first() {
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

    let mut listeners = Vec::new();
    let mut tproxy_section: Option<(String, &ListenerSection<'_>)> = None;
    for (name, e) in services {
        let Some(l) = &e.listener else { continue };
        let field = format!("service.{name}");
        let errors_before = cx.errors.len();
        // Unknown keys are refused here: the proxy's own config types accept any.
        let known = listener_keys(l.kind);
        for (k, _) in l.options.iter() {
            if !known.iter().any(|x| x == k.get_ref().as_ref()) {
                cx.err(
                    Some(k.span()),
                    format!("{field}.{}", k.get_ref()),
                    format!(
                        "unknown field `{}`, expected one of {}",
                        k.get_ref(),
                        known.join(", ")
                    ),
                );
            }
        }
        if l.kind == "socks5" {
            check_dest_lists(cx, &field, l);
        }
        if cx.errors.len() > errors_before {
            continue;
        }
        let mut proxy_opts = l.options.clone();
        // relayd's own keys are read below, from the section itself.
        let extra: Vec<_> = proxy_opts
            .keys()
            .filter(|k| TPROXY_EXTRA_KEYS.contains(&k.get_ref().as_ref()))
            .cloned()
            .collect();
        for k in extra {
            proxy_opts.remove(&k);
        }
        let de = || {
            toml::de::ValueDeserializer::from(Spanned::new(
                l.body_span.clone(),
                DeValue::Table(proxy_opts.clone()),
            ))
        };
        let deser_err = |cx: &mut Ctx<'_>, e: toml::de::Error| {
            section_error(cx, &field, &e, l.body_span.clone())
        };
        let kind = if l.kind == "socks5" {
            match <Socks5Config as serde::Deserialize>::deserialize(de()) {
                Ok(c) => ListenerKind::Socks5(c),
                Err(e) => {
                    deser_err(cx, e);
                    continue;
                }
            }
        } else {
            match <TransparentConfig as serde::Deserialize>::deserialize(de()) {
                Ok(c) => ListenerKind::Transparent(c),
                Err(e) => {
                    deser_err(cx, e);
                    continue;
                }
            }
        };
        check_proxy_options(cx, &field, l, &kind);
        if l.kind == "tproxy" {
            if let Some((prev, _)) = &tproxy_section {
                cx.err(
                    Some(l.kind_span.clone()),
                    format!("{field}.kind"),
                    format!(
                        "a second tproxy listener (service `{prev}` is the first): relayd runs one"
                    ),
                );
                continue;
            }
            tproxy_section = Some((name.clone(), l));
        }
        listeners.push(ListenerSpec {
            name: name.clone(),
            line: line_col(cx.text, l.kind_span.start).0,
            kind,
        });
    }

    // The transparent listener: the tproxy section's, or one the tcpsplit services imply.
    let mut tproxy = None;
    let tp_index = listeners
        .iter()
        .position(|l| matches!(l.kind, ListenerKind::Transparent(_)));
    if tp_index.is_some() || !splits.is_empty() {
        let extras_of = |key: &str| {
            tproxy_section.as_ref().and_then(|(_, l)| {
                l.options
                    .iter()
                    .find(|(k, _)| k.get_ref().as_ref() == key)
                    .map(|(k, v)| (k.span(), v.clone()))
            })
        };
        let mut spec = TproxySpec::default();
        let section_name = tproxy_section.as_ref().map(|(n, _)| n.clone());
        let f = |key: &str| format!("service.{}.{key}", section_name.as_deref().unwrap_or("?"));
        let as_value = |v: &Spanned<DeValue<'_>>| {
            <toml::Value as serde::Deserialize>::deserialize(toml::de::ValueDeserializer::from(
                v.clone(),
            ))
            .ok()
        };
        if let Some((_, v)) = extras_of("tproxy_mark") {
            match as_value(&v).as_ref().and_then(parse_u32) {
                Some(m) if m != 0 => (spec.tproxy_mark, spec.tproxy_mask) = (m, m),
                _ => cx.err(
                    Some(v.span()),
                    f("tproxy_mark"),
                    "must be a non-zero 32-bit mark, e.g. \"0x10000000\"",
                ),
            }
        }
        for (key, slot) in [
            ("table", &mut spec.table),
            ("rule_pref", &mut spec.rule_pref),
        ] {
            if let Some((_, v)) = extras_of(key) {
                match as_value(&v).as_ref().and_then(parse_u32) {
                    Some(n) if n > 0 => *slot = n,
                    _ => cx.err(Some(v.span()), f(key), "must be a positive integer"),
                }
            }
        }
        let ports = extras_of("ports");
        let mut fams = families.clone();
        match (&ports, splits.first()) {
            (Some((_, v)), Some(s)) => cx.err(
                Some(v.span()),
                f("ports"),
                format!(
                    "not with a tcpsplit service (`{}` decides which connections to divert)",
                    s.name
                ),
            ),
            (Some((_, v)), None) => {
                let list: Option<Vec<u16>> = as_value(v).and_then(|v| match v {
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
                        f("ports"),
                        "must be a list of 1 to 15 destination ports, e.g. [80, 443]",
                    ),
                }
            }
            (None, Some(s)) => {
                spec.divert_mark = s.cfg.mark;
                spec.divert_mask = s.cfg.mark;
            }
            (None, None) => {
                let (_, l) = tproxy_section.as_ref().expect("a tproxy section");
                cx.err(
                    Some(l.kind_span.clone()),
                    f("kind"),
                    "nothing diverts connections to this listener: put a tcpsplit service in a prerouting queue, or give `ports`",
                );
            }
        }
        // The implied or configured transparent listener, with the tcpsplit options.
        let mut tcfg = match tp_index.map(|i| &listeners[i].kind) {
            Some(ListenerKind::Transparent(c)) => c.clone(),
            _ => TransparentConfig::default(),
        };
        if let Some(s) = splits.first() {
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
                if let Some((kspan, _)) = extras_of(key)
                    && conflict
                {
                    cx.err(
                        Some(kspan),
                        f(key),
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
        if ports.is_some() {
            fams = match tcfg.listen {
                SocketAddr::V6(a) if a.ip().is_unspecified() => vec![IpVersion::V4, IpVersion::V6],
                SocketAddr::V6(_) => vec![IpVersion::V6],
                SocketAddr::V4(_) => vec![IpVersion::V4],
            };
        }
        let listen_given = extras_of("listen").is_some();
        if !listen_given && fams.contains(&IpVersion::V6) {
            tcfg.listen = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 9040));
        }
        let listen_span = extras_of("listen").map(|(_, v)| v.span());
        match tcfg.listen {
            SocketAddr::V4(_) if fams.contains(&IpVersion::V6) => cx.err(
                listen_span.clone(),
                f("listen"),
                "an IPv4 listener cannot take diverted IPv6 connections: listen on \"[::]:PORT\"",
            ),
            SocketAddr::V6(a) if !a.ip().is_unspecified() && fams.contains(&IpVersion::V4) => cx
                .err(
                    listen_span.clone(),
                    f("listen"),
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
                listen_span.clone(),
                f("listen"),
                "the transparent listener needs a fixed port (TPROXY --on-port)",
            );
        }
        let tm = spec.tproxy_mask;
        for (bits, what) in [
            (daemon.bypass_mark, "daemon.bypass_mark"),
            (daemon.ct_mark_bits.mask(), "daemon.ct_mark_bits"),
            (spec.divert_mask, "the divert mark"),
        ] {
            if tm & bits != 0 {
                cx.err(
                    extras_of("tproxy_mark").map(|(_, v)| v.span()),
                    f("tproxy_mark"),
                    format!("{tm:#x} overlaps {what} ({bits:#x})"),
                );
            }
        }
        if let Err(e) = spec.check()
            && cx.errors.is_empty()
        {
            cx.err(None, f("(tproxy)"), e.to_string());
        }
        let name = section_name
            .clone()
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
        tproxy = Some(TproxySetup {
            spec,
            families: fams,
            listener: name,
        });
    }
    // Two listeners on one address would fail at bind time: say so now, with the line.
    for (i, a) in listeners.iter().enumerate() {
        if let Some(b) = listeners[..i]
            .iter()
            .find(|b| b.kind.listen() == a.kind.listen() && a.kind.listen().port() != 0)
        {
            cx.err(
                Some(line_span(cx.text, a.line)),
                format!("service.{}.listen", a.name),
                format!("{} is also service `{}`'s address", a.kind.listen(), b.name),
            );
        }
    }
    (listeners, tproxy)
}

/// A `socks5` section's `allow` and `deny` lists, each entry parsed here so that an error
/// names its line and index (deserializing would refuse it too, less precisely).
fn check_dest_lists(cx: &mut Ctx<'_>, field: &str, l: &ListenerSection<'_>) {
    use toml::de::DeValue;
    for key in ["allow", "deny"] {
        let Some((_, v)) = l.options.iter().find(|(k, _)| k.get_ref().as_ref() == key) else {
            continue;
        };
        let DeValue::Array(items) = v.get_ref() else {
            cx.err(
                Some(v.span()),
                format!("{field}.{key}"),
                "must be a list of strings, e.g. [\"10.0.0.0/8\", \"192.0.2.1:443\"]",
            );
            continue;
        };
        for (i, item) in items.iter().enumerate() {
            let f = format!("{field}.{key}[{i}]");
            match item.get_ref() {
                DeValue::String(s) => {
                    if let Err(e) = s.parse::<relay_proxy::DestRule>() {
                        cx.err(Some(item.span()), f, e);
                    }
                }
                _ => cx.err(
                    Some(item.span()),
                    f,
                    "must be a string: ADDR[/LEN][:PORT[-PORT]], \"[IPV6]/LEN:PORTS\" or \"*:PORTS\"",
                ),
            }
        }
    }
}

/// The proxy crate's own limits, checked here so that they name the line.
fn check_proxy_options(
    cx: &mut Ctx<'_>,
    field: &str,
    l: &ListenerSection<'_>,
    kind: &ListenerKind,
) {
    let span_of = |key: &str| {
        l.options
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v.span())
            .or(Some(l.body_span.clone()))
    };
    let opts = match kind {
        ListenerKind::Socks5(c) => &c.options,
        ListenerKind::Transparent(c) => &c.options,
    };
    if opts.max_connections == 0 {
        cx.err(
            span_of("max_connections"),
            format!("{field}.max_connections"),
            "must be at least 1",
        );
    }
    if !(4096..=64 << 20).contains(&opts.buffer_size) {
        cx.err(
            span_of("buffer_size"),
            format!("{field}.buffer_size"),
            "must be 4096 bytes to 64 MiB",
        );
    }
    if let ListenerKind::Socks5(c) = kind
        && c.users.is_empty()
        && !c.listen.ip().to_canonical().is_loopback()
    {
        let listen = l
            .options
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == "listen")
            .map_or(l.kind_span.clone(), |(_, v)| v.span());
        cx.warn(
            Some(listen),
            format!("{field}.listen"),
            format!(
                "{} is not a loopback address and `users` is empty: any host that reaches it may use the proxy without authentication (add `users`, or listen on 127.0.0.1)",
                c.listen
            ),
        );
    }
    if let ListenerKind::Socks5(c) = kind {
        for u in &c.users {
            let ok = |s: &str| (1..=255).contains(&s.len());
            if !ok(&u.username) || !ok(&u.password) {
                cx.err(
                    span_of("users"),
                    format!("{field}.users"),
                    format!(
                        "user {:?}: name and password must be 1 to 255 bytes (RFC 1929)",
                        u.username
                    ),
                );
            }
        }
    }
}

/// The byte range of 1-based line `line` (for errors known only by line).
fn line_span(text: &str, line: usize) -> Range<usize> {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    start..start
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text`, which must be a valid configuration.
    fn parsed(text: &str) -> Config {
        parse(text, Path::new("t.toml"), &Registry::with_builtins()).unwrap()
    }

    fn errs(text: &str) -> Vec<ConfigError> {
        parse(text, Path::new("t.toml"), &Registry::with_builtins())
            .unwrap_err()
            .0
    }

    /// Parses `text`, which must fail, checks that the first error points at `line` and
    /// `field`, and returns all the errors.
    #[track_caller]
    fn first_err(text: &str, line: usize, field: &str) -> Vec<ConfigError> {
        let e = errs(text);
        assert_eq!((e[0].line, e[0].field.as_str()), (line, field), "{e:?}");
        e
    }

    #[test]
    fn metrics_must_be_loopback_unless_public() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"a\"]\n[service.a]\nkind = \"accept\"\n";
        let c = parsed(&format!("[daemon]\nmetrics = \"127.0.0.1:9477\"\n{q}"));
        assert_eq!(c.daemon.metrics, Some("127.0.0.1:9477".parse().unwrap()));
        let c = parsed(&format!("[daemon]\nmetrics = \"[::1]:9477\"\n{q}"));
        assert_eq!(c.daemon.metrics, Some("[::1]:9477".parse().unwrap()));
        assert_eq!(parsed(q).daemon.metrics, None);
        let e = first_err(
            &format!("[daemon]\nsocket = \"/tmp/x\"\nmetrics = \"0.0.0.0:9477\"\n{q}"),
            3,
            "daemon.metrics",
        );
        assert!(e[0].message.contains("metrics_public"), "{e:?}");
        first_err(
            &format!("[daemon]\nmetrics = \"localhost:9477\"\n{q}"),
            2,
            "daemon.metrics",
        );
        let c = parsed(&format!(
            "[daemon]\nmetrics = \"0.0.0.0:9477\"\nmetrics_public = true\n{q}"
        ));
        assert_eq!(c.daemon.metrics, Some("0.0.0.0:9477".parse().unwrap()));
    }

    #[test]
    fn service_marks_may_not_set_the_stage_bits() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"m\"]\n";
        let e = first_err(
            &format!("{q}[service.m]\nkind = \"mark\"\nmark = \"0x40000001\"\n"),
            5,
            "service.m",
        );
        assert!(e[0].message.contains("stage bits"), "{e:?}");
        // The default mask covers every bit, the stage bits included: only set bits count.
        parsed(&format!(
            "{q}[service.m]\nkind = \"mark\"\nmark = \"0x1\"\n"
        ));
    }

    #[test]
    fn check_refuses_tc_trees_run_would_refuse() {
        let encap = |name: &str, rate: &str| {
            format!(
                "[service.{name}]\nkind = \"mpls-encap\"\ninterface = \"core0\"\nlocal = \"192.0.2.1\"\nlink_rate = \"{rate}\"\n"
            )
        };
        let queue = "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nservices = [\"a\", \"b\"]\n";
        let e = errs(&format!(
            "{queue}{}{}",
            encap("a", "10mbit"),
            encap("b", "20mbit")
        ));
        assert!(
            e[0].message.contains("both want the tc tree of core0"),
            "{e:?}"
        );
        // The same tree twice is one tree.
        parsed(&format!(
            "{queue}{}{}",
            encap("a", "10mbit"),
            encap("b", "10mbit")
        ));
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
        let c = parsed(text);
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
        first_err(
            "[daemon]\nct_mark_bits = \"0x3\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
            2,
            "daemon.ct_mark_bits",
        );
        let e = errs(
            "[daemon]\nbypass_mark = \"0x03000000\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
        );
        assert_eq!(e[0].field, "daemon.ct_mark_bits", "{e:?}");
        // A delaying queue holds packets: its kernel queue is made long enough, or refused.
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n";
        let svc = "[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 5000\n";
        let cfg = parsed(&format!("{q}{svc}"));
        assert_eq!(cfg.queues[0].hold.max_packets, 5000);
        assert!(cfg.queues[0].max_len >= 5000 + cfg.queues[0].batch as u32);
        let e = errs(&format!("{q}max_len = 100\n{svc}"));
        assert_eq!(e[0].field, "queue[0].max_len", "{e:?}");
    }

    #[test]
    fn split_proxy_and_listeners() {
        let split = "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nmatch = \"-p tcp --syn\"\nservices = [\"split\"]\n[service.split]\nkind = \"tcpsplit\"\nports = [80]\nupstream = \"mptcp\"\n";
        let socks = "[service.socks]\nkind = \"socks5\"\nlisten = \"127.0.0.1:1080\"\n";
        let c = parsed(&format!("{split}{socks}"));
        assert_eq!(c.listeners.len(), 2);
        let t = c.tproxy.as_ref().unwrap();
        assert_eq!((t.spec.divert_mark, t.spec.port), (0x1, 9040));
        assert_eq!(t.listener, "split");
        match &c.listeners.iter().find(|l| l.name == "split").unwrap().kind {
            ListenerKind::Transparent(tc) => {
                assert_eq!(tc.options.upstream, relay_proxy::Upstream::Mptcp)
            }
            other => panic!("{other:?}"),
        }
        let rules = crate::rules::restore_text(&c).unwrap();
        assert!(
            rules.contains(
                "-A RELAYD-PREROUTING -p tcp -m mark --mark 0x1/0x1 -m addrtype ! --dst-type LOCAL -j TPROXY --on-port 9040"
            ),
            "{rules}"
        );
        // Unknown keys in a listener, a listener in a chain, tcpsplit in the wrong place.
        first_err(
            &format!(
                "{split}[service.socks]\nkind = \"socks5\"\nlisten = \"0.0.0.0:1080\"\nlisen = 1\n"
            ),
            14,
            "service.socks.lisen",
        );
        first_err(
            &format!("{socks}[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"socks\"]\n"),
            7,
            "queue[0].services[0]",
        );
        let e = errs(&split.replace("table = \"raw\"\n", ""));
        assert_eq!(e[0].field, "queue[0].table", "{e:?}");
        let e = errs(&split.replace("\"prerouting\"\ntable = \"raw\"", "\"forward\""));
        assert_eq!(e[0].field, "queue[0].hook", "{e:?}");
        first_err(
            &format!("{split}[service.tp]\nkind = \"tproxy\"\nupstream = \"tcp\"\n"),
            13,
            "service.tp.upstream",
        );
        let e = errs(&format!(
            "{socks}[service.s2]\nkind = \"socks5\"\nlisten = \"127.0.0.1:1080\"\nbuffer_size = 10\n"
        ));
        assert!(
            e.iter()
                .any(|e| e.field == "service.s2.buffer_size" && e.line == 7),
            "{e:?}"
        );
        assert!(e.iter().any(|e| e.field.ends_with(".listen")), "{e:?}");
        // A socks5 listener alone is a whole configuration.
        parsed(socks);
    }

    #[test]
    fn socks5_defaults_lists_and_open_listener_warning() {
        // No `listen`: loopback, and nothing to warn about.
        let c = parsed("[service.s]\nkind = \"socks5\"\n");
        match &c.listeners[0].kind {
            ListenerKind::Socks5(s) => {
                assert_eq!(s.listen, "127.0.0.1:1080".parse().unwrap());
                assert!(s.allow.is_empty() && s.deny.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Open to the network without users: a warning at the `listen` line, no error.
        let c = parsed("[service.s]\nkind = \"socks5\"\nlisten = \"0.0.0.0:1080\"\n");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let w = &c.warnings[0];
        assert_eq!((w.line, w.field.as_str()), (3, "service.s.listen"), "{w:?}");
        assert!(w.to_string().starts_with("t.toml:3:"), "{w}");
        assert!(w.message.contains("without authentication"), "{w}");
        for quiet in [
            "listen = \"[::1]:1080\"\n",
            "listen = \"[::ffff:127.0.0.1]:1080\"\n",
            "listen = \"10.0.1.2:1080\"\nusers = [{ username = \"a\", password = \"b\" }]\n",
        ] {
            let c = parsed(&format!("[service.s]\nkind = \"socks5\"\n{quiet}"));
            assert!(c.warnings.is_empty(), "{quiet}: {:?}", c.warnings);
        }
        // allow and deny: read, and every bad entry named by file, line, field and index.
        let c = parsed(
            "[service.s]\nkind = \"socks5\"\nallow = [\"127.0.0.1:8080\", \"10.0.0.0/8\"]\ndeny = [\"[2001:db8::]/32:80-90\"]\n",
        );
        match &c.listeners[0].kind {
            ListenerKind::Socks5(s) => {
                assert_eq!(s.allow.len(), 2);
                assert_eq!(s.deny[0].to_string(), "[2001:db8::]/32:80-90");
            }
            other => panic!("{other:?}"),
        }
        let e = first_err(
            "[service.s]\nkind = \"socks5\"\nallow = [\n  \"10.0.0.0/8\",\n  \"10.0.0.1/8\",\n]\ndeny = [\"2001:db8::/32:80\", 5]\n",
            5,
            "service.s.allow[1]",
        );
        assert!(e[0].message.contains("host bits"), "{e:?}");
        assert!(
            e[0].to_string()
                .starts_with("t.toml:5:3: service.s.allow[1]:"),
            "{}",
            e[0]
        );
        assert_eq!(
            (e[1].line, e[1].field.as_str()),
            (7, "service.s.deny[0]"),
            "{e:?}"
        );
        assert!(e[1].message.contains("brackets"), "{e:?}");
        assert_eq!(e[2].field, "service.s.deny[1]", "{e:?}");
        assert_eq!(e.len(), 3, "{e:?}");
        first_err(
            "[service.s]\nkind = \"socks5\"\ndeny = \"10.0.0.0/8\"\n",
            3,
            "service.s.deny",
        );
        // The transparent listener has no destination lists.
        first_err(
            "[service.t]\nkind = \"tproxy\"\nports = [80]\nallow = [\"10.0.0.0/8\"]\n",
            4,
            "service.t.allow",
        );
    }

    #[test]
    fn bad_option_type_and_unknown_option() {
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nrate = \"x\"\n",
            7,
            "service.d.rate",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n[service.d]\nkind = \"dump\"\nratee = 1\n",
            7,
            "service.d.ratee",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"sideways\"\nservices = [\"accept\"]\n",
            3,
            "queue[0].hook",
        );
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\ntable = \"raw\"\nservices = [\"accept\"]\n",
            4,
            "queue[0].table",
        );
        let e = errs("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"mark\"]\n");
        assert!(e[0].message.contains("needs options"), "{e:?}");
        first_err(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\nmatch = \"-p udp -j ACCEPT\"\n",
            5,
            "queue[0].match",
        );
        first_err("[daemon]\nsokcet = 1\n", 2, "sokcet");
        first_err("[[queue]\nnum = 0\n", 1, "(syntax)");
    }
    #[test]
    fn queue_cpu_pins_threads_and_refuses_missing_cpus() {
        let avail = relay_nfq::available_cpus().unwrap();
        let (a, b) = (avail[0], *avail.last().unwrap());
        let q = |num: &str, cpu: &str| {
            format!(
                "[[queue]]\nnum = {num}\nhook = \"forward\"\nservices = [\"accept\"]\ncpu = {cpu}\n"
            )
        };
        // One queue, one CPU.
        let c = parsed(&q("0", &a.to_string()));
        assert_eq!(c.queues[0].cpus, vec![a]);
        assert_eq!(c.queues[0].cpu_for(0), Some(a));
        // A range over a list: thread i on cpus[i % len].
        let c = parsed(&q("\"4-7\"", &format!("[{a}, {b}]")));
        let on: Vec<Option<usize>> = (4..=7).map(|n| c.queues[0].cpu_for(n)).collect();
        assert_eq!(on, vec![Some(a), Some(b), Some(a), Some(b)]);
        // No `cpu`: not pinned.
        let c = parsed("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert_eq!(c.queues[0].cpu_for(0), None);
        // A CPU relayd may not run on, with file:line and what is available.
        let e = first_err(&q("0", "1023"), 5, "queue[0].cpu");
        let text = e[0].to_string();
        assert!(text.starts_with("t.toml:5:"), "{text}");
        assert!(
            text.contains("CPU 1023 is not available to relayd (available: "),
            "{text}"
        );
        first_err(&q("\"0-1\"", &format!("[{a}, 1023]")), 5, "queue[0].cpu");
        // Not a CPU number, an empty list, more CPUs than threads.
        first_err(&q("0", "-1"), 5, "queue[0].cpu");
        first_err(&q("0", "\"1\""), 5, "queue[0].cpu");
        first_err(&q("0", "[]"), 5, "queue[0].cpu");
        let e = first_err(&q("0", &format!("[{a}, {a}]")), 5, "queue[0].cpu");
        assert!(
            e[0].message.contains("lists 2 CPUs for 1 queue thread"),
            "{e:?}"
        );
    }

    #[test]
    fn queue_nice_is_checked_and_shared_by_a_range() {
        let q = |num: &str, nice: &str| {
            format!(
                "[[queue]]\nnum = {num}\nhook = \"forward\"\nservices = [\"accept\"]\nnice = {nice}\n"
            )
        };
        assert_eq!(parsed(&q("0", "-5")).queues[0].nice, Some(-5));
        assert_eq!(parsed(&q("0", "-20")).queues[0].nice, Some(-20));
        assert_eq!(parsed(&q("0", "19")).queues[0].nice, Some(19));
        // A range: every thread gets the same value.
        let c = parsed(&q("\"4-7\"", "-10"));
        let cfgs: Vec<Option<i32>> = c.queues[0]
            .nums()
            .map(|n| crate::daemon::queue_config(&c.queues[0], n, c.daemon.ct_mark_bits).nice)
            .collect();
        assert_eq!(cfgs, vec![Some(-10); 4]);
        // No `nice`: inherited.
        let c = parsed("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert_eq!(c.queues[0].nice, None);
        // Out of range, not an integer: the file, line and field.
        let e = first_err(&q("0", "20"), 5, "queue[0].nice");
        let text = e[0].to_string();
        assert!(text.starts_with("t.toml:5:"), "{text}");
        assert!(
            text.contains("must be a nice value from -20 to 19"),
            "{text}"
        );
        first_err(&q("0", "-21"), 5, "queue[0].nice");
        first_err(&q("0", "4294967296"), 5, "queue[0].nice");
        first_err(&q("0", "\"-5\""), 5, "queue[0].nice");
        first_err(&q("0", "-5.0"), 5, "queue[0].nice");
        first_err(&q("0", "[-5]"), 5, "queue[0].nice");
    }
}
