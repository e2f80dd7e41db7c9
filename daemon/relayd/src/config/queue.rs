//! A `[[queue]]` entry: its queue numbers, hook and table, the chain of services it
//! runs, and the kernel queue and thread settings that chain needs.

use super::error::Ctx;
use super::services::{ServiceEntry, resolve_chain};
use crate::registry::Registry;
use relay_control::{Hook, IpVersion, Table};
use relay_core::{CtMarkBits, FailPolicy, ServiceFactory, Verdict};
use relay_nfq::{QueueConfig, QueueConfigError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use toml::Spanned;

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
    /// Verdict for malformed packets (the chain's).
    pub malformed: Verdict,
    /// Spread a range by CPU rather than by flow (the NFQUEUE rule's).
    pub cpu_fanout: bool,
    /// CPUs the queue threads are pinned to: queue `first + i` on `cpus[i % len]`; empty
    /// leaves them unpinned.
    pub cpus: Vec<usize>,
    /// The kernel queue and thread settings all the entry's queues share, in the one type
    /// relay_nfq takes (fail-open, GSO, copy range, lengths, batch, conntrack and its mark
    /// bits, held packets, nice value): those of queue `first`, unpinned.
    /// [`QueueSpec::queue_config`] gives each queue's own.
    pub queue: relay_nfq::QueueConfig,
}

impl fmt::Debug for QueueSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.services.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("QueueSpec")
            .field("queues", &(self.first..=self.last))
            .field("hook", &self.hook)
            .field("table", &self.table)
            .field("services", &names)
            .field("fail_open", &self.queue.fail_open)
            .field("gso", &self.queue.gso)
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

    /// The settings of queue `num` of this entry: the shared ones with its number and CPU.
    pub fn queue_config(&self, num: u16) -> relay_nfq::QueueConfig {
        relay_nfq::QueueConfig {
            num,
            cpu: self.cpu_for(num),
            ..self.queue.clone()
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
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
    #[serde(default)]
    offload: Option<Spanned<bool>>,
}

/// The daemon's mark bits a queue entry's checks need: the conntrack mark bits and the
/// offload bits (`daemon.ct_mark_bits`, `daemon.offload_mark`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Marks {
    pub(super) ct: CtMarkBits,
    pub(super) offload: u32,
}

/// The field path of key `key` of queue entry `index` (`queue[1].num`).
pub(super) fn field(index: usize, key: &str) -> String {
    format!("queue[{index}].{key}")
}

/// Checks one `[[queue]]` entry and records every error; `None` if it has any. `taken`
/// maps the queue numbers of the entries before it to their index; `marks` are the
/// daemon's conntrack mark bits. The steps run in the order of the entry's keys, so that
/// errors come in the order of the file.
pub(super) fn check_queue(
    cx: &mut Ctx<'_>,
    index: usize,
    q: RawQueue,
    services: &BTreeMap<String, ServiceEntry<'_>>,
    registry: &Registry,
    taken: &mut BTreeMap<u16, String>,
    marks: Marks,
) -> Option<QueueSpec> {
    let Marks {
        ct: ct_bits,
        offload: offload_mark,
    } = marks;
    let errors_before = cx.errors.len();
    let (line, _) = cx.line_col(q.num.span().start);
    let (first, last) = check_numbers(cx, &format!("queue[{index}]"), &q.num, taken);
    let (hook, table) = check_hook_and_table(cx, index, &q);
    let families = check_family(cx, index, q.family.as_ref());
    if let Some(m) = &q.matches
        && let Err(e) = relay_control::split_matches(m.get_ref())
    {
        cx.err(Some(m.span()), field(index, "match"), e.to_string());
    }
    let chain = resolve_chain(
        cx,
        &format!("queue[{index}]"),
        &q.services,
        services,
        registry,
    );
    let mut queue = relay_nfq::QueueConfig::new(first);
    let malformed = check_policy(cx, index, &q, &chain, &mut queue);
    set_kernel(&q, &chain, &mut queue);
    queue.ct_mark_bits = queue.conntrack.then_some(ct_bits);
    let threads = read_threads(&q, first, last);
    queue.nice = threads.nice.unwrap_or(None);
    let mut found = check_configs(&queue, first, threads.cpus.as_deref().unwrap_or(&[]));
    report_kernel(cx, index, &q, &chain, table, &mut found);
    report_threads(cx, index, &q, &threads, first == last, &mut found);
    queue.offload = super::offload::check_offload(
        cx,
        index,
        q.offload.as_ref(),
        &chain,
        (table, hook),
        offload_mark,
    );
    if queue.offload.is_some() {
        // A one-direction offload needs the packet's conntrack direction: the mark bits
        // tell it (this kernel sends no conntrack state with queued packets).
        queue.conntrack = true;
        queue.ct_mark_bits = Some(ct_bits);
    }
    // What relayd does not set from the file (its mark bits and hold overflow are
    // valid by construction): at the entry, in relay_nfq's words.
    for e in found {
        cx.err(Some(q.num.span()), format!("queue[{index}]"), e.to_string());
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
            .map_or(line, |m| cx.line_col(m.span().start).0),
        first,
        last,
        hook,
        table,
        families,
        matches: q.matches.map(|m| m.into_inner()),
        services: chain,
        malformed,
        cpu_fanout: threads.cpu_fanout,
        cpus: threads.cpus.unwrap_or_default(),
        queue,
    })
}

/// `num` of entry `owner` (`queue[0]`, `xdp[1]`): one queue number or a range
/// `"first-last"`, none of them used by an earlier `[[queue]]` or `[[xdp]]` entry (`taken`
/// maps the numbers used so far to their entry). `(0, 0)` after an error.
pub(super) fn check_numbers(
    cx: &mut Ctx<'_>,
    owner: &str,
    num: &Spanned<toml::Value>,
    taken: &mut BTreeMap<u16, String>,
) -> (u16, u16) {
    let parsed = match num.get_ref() {
        toml::Value::Integer(n) => u16::try_from(*n)
            .map(|n| (n, n))
            .map_err(|_| format!("{n} is not a queue number (0-65535)")),
        toml::Value::String(s) => relay_control::parse_queue_range(s),
        _ => Err("must be a number or a range like \"0-3\"".to_string()),
    };
    let (first, last) = match parsed {
        Ok(range) => range,
        Err(e) => {
            cx.err(Some(num.span()), format!("{owner}.num"), e);
            return (0, 0);
        }
    };
    for n in first..=last {
        if let Some(prev) = taken.insert(n, owner.to_string()) {
            cx.err(
                Some(num.span()),
                format!("{owner}.num"),
                format!("queue {n} is already used by {prev}"),
            );
            break;
        }
    }
    (first, last)
}

/// `hook` and `table` (default mangle), and that the table has the hook.
fn check_hook_and_table(cx: &mut Ctx<'_>, index: usize, q: &RawQueue) -> (Hook, Table) {
    let hook = q.hook.get_ref().parse::<Hook>().unwrap_or_else(|e| {
        cx.err(Some(q.hook.span()), field(index, "hook"), e);
        Hook::Forward
    });
    let table = match &q.table {
        None => Table::Mangle,
        Some(t) => t.get_ref().parse::<Table>().unwrap_or_else(|e| {
            cx.err(Some(t.span()), field(index, "table"), e);
            Table::Mangle
        }),
    };
    if !table.has_hook(hook) {
        let span = q.table.as_ref().map_or(q.hook.span(), |t| t.span());
        cx.err(
            Some(span),
            field(index, "table"),
            format!("table {table} has no {hook} hook (raw has prerouting and output)"),
        );
    }
    (hook, table)
}

/// `family`: the families the queue's rule is installed for (default IPv4).
fn check_family(
    cx: &mut Ctx<'_>,
    index: usize,
    family: Option<&Spanned<String>>,
) -> Vec<IpVersion> {
    match family.map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("ipv4", _)) => vec![IpVersion::V4],
        Some(("ipv6", _)) => vec![IpVersion::V6],
        Some(("both", _)) => vec![IpVersion::V4, IpVersion::V6],
        Some((other, span)) => {
            cx.err(
                Some(span),
                field(index, "family"),
                format!("unknown family `{other}` (ipv4, ipv6 or both)"),
            );
            vec![IpVersion::V4]
        }
    }
}

/// `fail_open` (default: open unless a service wants closed) and `gso` (default: on unless
/// a service rewrites packets, which needs it off), set in `queue`; and the verdict for
/// malformed packets (default: as fail_open), returned.
fn check_policy(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    queue: &mut relay_nfq::QueueConfig,
) -> Verdict {
    let wants_closed = chain
        .iter()
        .any(|(_, s)| s.manifest().fail_policy == FailPolicy::Closed);
    let fail_open = q.fail_open.unwrap_or(!wants_closed);
    let rewriter = chain
        .iter()
        .find(|(_, s)| s.manifest().rewrites_payload)
        .map(|(n, _)| n.clone());
    let gso = match (&q.gso, &rewriter) {
        (Some(g), Some(r)) if *g.get_ref() => {
            cx.err(
                Some(g.span()),
                field(index, "gso"),
                format!("service `{r}` rewrites packets, which needs GSO off"),
            );
            false
        }
        (Some(g), _) => *g.get_ref(),
        (None, r) => r.is_none(),
    };
    let malformed = malformed_policy(
        cx,
        field(index, "malformed"),
        q.malformed.as_ref(),
        fail_open,
    );
    queue.fail_open = fail_open;
    queue.gso = gso;
    malformed
}

/// `malformed` (at `field`): the verdict for packets the chain cannot parse; by default
/// the failure policy's (accept when fail-open).
pub(super) fn malformed_policy(
    cx: &mut Ctx<'_>,
    field: String,
    malformed: Option<&Spanned<String>>,
    fail_open: bool,
) -> Verdict {
    match malformed.map(|m| (m.get_ref().as_str(), m.span())) {
        None if fail_open => Verdict::Accept,
        None => Verdict::Drop,
        Some(("accept", _)) => Verdict::Accept,
        Some(("drop", _)) => Verdict::Drop,
        Some((other, span)) => {
            cx.err(
                Some(span),
                field,
                format!("unknown policy `{other}` (accept or drop)"),
            );
            Verdict::Accept
        }
    }
}

/// The kernel queue's settings, in `queue` (which holds the defaults): what the chain
/// needs of it (bytes copied, conntrack state, room for held packets) and the configured
/// values as given, for relay_nfq's `QueueConfig::check` to judge ([`check_configs`]).
fn set_kernel(q: &RawQueue, chain: &[(String, Arc<dyn ServiceFactory>)], queue: &mut QueueConfig) {
    match &q.copy_range {
        Some(c) => queue.copy_range = *c.get_ref(),
        None => {
            if let Some(c) = default_copy_range(chain) {
                queue.copy_range = c;
            }
        }
    }
    if let Some(m) = &q.max_len {
        queue.max_len = *m.get_ref();
    }
    if let Some(r) = &q.rcvbuf {
        queue.rcvbuf = *r.get_ref();
    }
    if let Some(b) = &q.batch {
        queue.batch = *b.get_ref();
    }
    queue.conntrack = chain.iter().any(|(_, s)| s.manifest().conntrack);
    let held = chain.iter().fold(0u32, |sum, (_, s)| {
        sum.saturating_add(s.manifest().max_held)
    });
    if held == 0 {
        return;
    }
    queue.hold.max_packets = held;
    // Beyond its capacity a delaying queue drops, as a full netem queue does.
    queue.hold.overflow = Verdict::Drop;
    // relayd's policy: a default queue length grows to leave room for the held packets
    // plus a batch (the kernel counts held packets against it); a configured one must.
    if q.max_len.is_none() {
        let batch = u32::try_from(queue.batch).unwrap_or(u32::MAX);
        queue.max_len = queue.max_len.max(held.saturating_add(batch));
    }
}

/// The copy range when `copy_range` is not given: only the headers relayd checks, or whole
/// packets as soon as one service wants them (`None`: the queue's default).
fn default_copy_range(chain: &[(String, Arc<dyn ServiceFactory>)]) -> Option<u32> {
    chain
        .iter()
        .try_fold(relay_core::manifest::HEADER_BYTES, |acc, (_, s)| {
            s.manifest().needs_bytes.map(|n| acc.max(n))
        })
}

/// Checks the settings of every queue of the entry with relay_nfq's `QueueConfig::check`,
/// the one check of a queue's settings, which the queue runs again when it starts: so
/// `relayd check` refuses what `run` would. The queues differ only in number and CPU, so
/// one configuration per listed CPU is checked (queue `first + i` has `cpus[i]`), or the
/// shared one if there are none. What they share is kept from the first; of the CPUs, the
/// first that is wrong.
fn check_configs(queue: &QueueConfig, first: u16, cpus: &[usize]) -> Vec<QueueConfigError> {
    let errors = |cfg: &QueueConfig| cfg.check().err().map_or_else(Vec::new, |e| e.errors);
    if cpus.is_empty() {
        return errors(queue);
    }
    let mut found = Vec::new();
    for (i, &cpu) in cpus.iter().enumerate() {
        let num = first.saturating_add(u16::try_from(i).unwrap_or(u16::MAX));
        let wrong = errors(&QueueConfig {
            num,
            cpu: Some(cpu),
            ..queue.clone()
        });
        let cpu_wrong = wrong.iter().any(is_cpu);
        found.extend(wrong.into_iter().filter(|e| i == 0 || is_cpu(e)));
        if cpu_wrong {
            break;
        }
    }
    found
}

/// True for an error about the queue's CPU.
fn is_cpu(e: &QueueConfigError) -> bool {
    matches!(
        e,
        QueueConfigError::Cpu { .. } | QueueConfigError::CpusUnreadable { .. }
    )
}

/// Removes and returns the first of `found` that `want` picks.
fn take(
    found: &mut Vec<QueueConfigError>,
    want: impl Fn(&QueueConfigError) -> bool,
) -> Option<QueueConfigError> {
    let i = found.iter().position(want)?;
    Some(found.remove(i))
}

/// The span of key `key` of the entry, or of its `num` if the key is not given (a value
/// relayd chose).
fn span_of<T>(q: &RawQueue, key: Option<&Spanned<T>>) -> Option<std::ops::Range<usize>> {
    Some(key.map_or_else(|| q.num.span(), |k| k.span()))
}

/// Reports what `check_configs` found wrong with the kernel queue's settings, each at its
/// key in relayd's words, taking it from `found`, with relayd's own checks in between:
/// a service that needs more of each packet than `copy_range`, one that reads conntrack
/// state in the raw table. In the order of the keys, as relayd always has.
fn report_kernel(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    table: Table,
    found: &mut Vec<QueueConfigError>,
) {
    let copy_range = q.copy_range.as_ref();
    if take(found, |e| matches!(e, QueueConfigError::CopyRange { .. })).is_some() {
        let r = QueueConfig::COPY_RANGE;
        cx.err(
            span_of(q, copy_range),
            field(index, "copy_range"),
            format!("must be {}-{} bytes", r.start(), r.end()),
        );
    } else if let Some(c) = copy_range
        && let Some((name, _)) = chain
            .iter()
            .find(|(_, s)| s.manifest().needs_bytes.is_none_or(|n| n > *c.get_ref()))
    {
        cx.err(
            Some(c.span()),
            field(index, "copy_range"),
            format!("service `{name}` needs more of each packet"),
        );
    }
    let max_len = q.max_len.as_ref();
    if take(found, |e| matches!(e, QueueConfigError::MaxLenZero)).is_some() {
        cx.err(
            span_of(q, max_len),
            field(index, "max_len"),
            "must be at least 1",
        );
    }
    if let Some(QueueConfigError::Rcvbuf { min, .. }) =
        take(found, |e| matches!(e, QueueConfigError::Rcvbuf { .. }))
    {
        cx.err(
            span_of(q, q.rcvbuf.as_ref()),
            field(index, "rcvbuf"),
            format!("must be larger than copy_range plus netlink overhead ({min} bytes)"),
        );
    }
    if take(found, |e| matches!(e, QueueConfigError::Batch { .. })).is_some() {
        let r = QueueConfig::BATCH_RANGE;
        cx.err(
            span_of(q, q.batch.as_ref()),
            field(index, "batch"),
            format!("must be {}-{} packets", r.start(), r.end()),
        );
    }
    check_conntrack(cx, index, q, chain, table);
    if let Some(QueueConfigError::MaxLenHeld { held, min, .. }) =
        take(found, |e| matches!(e, QueueConfigError::MaxLenHeld { .. }))
    {
        cx.err(
            span_of(q, max_len),
            field(index, "max_len"),
            format!("must be at least {min}: the services hold up to {held} packets, plus a batch"),
        );
    }
}

/// Whether a service reads the packets' conntrack state, which the raw table, coming
/// before conntrack, cannot give it.
fn check_conntrack(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    table: Table,
) {
    let reader = chain.iter().find(|(_, s)| s.manifest().conntrack);
    if let (Some((name, _)), Table::Raw) = (reader, table) {
        cx.err(
            q.table.as_ref().map(|t| t.span()),
            field(index, "table"),
            format!(
                "service `{name}` reads conntrack state, which the raw table comes before: use table = \"mangle\""
            ),
        );
    }
}

/// How the entry's queue threads run, as read from the file.
struct Threads {
    cpu_fanout: bool,
    /// The CPUs listed (empty: not given), or why they are not a list relayd can use.
    cpus: Result<Vec<usize>, String>,
    /// The nice value (`None`: not given), or `Err` if not an integer that could be one.
    nice: Result<Option<i32>, ()>,
}

/// `cpu_fanout`, `cpu` (one CPU number, or a list of them for a range: queue `first + i`
/// on `cpus[i % len]`, at most one per queue thread) and `nice`, as given: whether the
/// CPUs are ones relayd may run on and the nice value is one is for `check_configs`.
fn read_threads(q: &RawQueue, first: u16, last: u16) -> Threads {
    let threads = usize::from(last.saturating_sub(first)) + 1;
    Threads {
        cpu_fanout: q.cpu_fanout.unwrap_or(false),
        cpus: q
            .cpu
            .as_ref()
            .map_or(Ok(Vec::new()), |c| read_cpus(c.get_ref(), threads)),
        nice: q.nice.as_ref().map_or(Ok(None), |n| {
            n.get_ref()
                .as_integer()
                .and_then(|n| i32::try_from(n).ok())
                .map(Some)
                .ok_or(())
        }),
    }
}

/// A queue's `cpu` as a list, at most one CPU per queue thread.
pub(super) fn read_cpus(v: &toml::Value, queues: usize) -> Result<Vec<usize>, String> {
    let cpus: Vec<Option<usize>> = match v {
        toml::Value::Integer(n) => vec![usize::try_from(*n).ok()],
        toml::Value::Array(a) => a
            .iter()
            .map(|x| x.as_integer().and_then(|n| usize::try_from(n).ok()))
            .collect(),
        _ => vec![None],
    };
    if cpus.is_empty() || cpus.iter().any(Option::is_none) {
        return Err(
            "must be a CPU number or a non-empty list of CPU numbers, like 1 or [2, 3]".into(),
        );
    }
    if cpus.len() > queues {
        return Err(format!(
            "lists {} CPUs for {queues} queue thread{}: give at most one per queue",
            cpus.len(),
            if queues == 1 { "" } else { "s" }
        ));
    }
    Ok(cpus.into_iter().flatten().collect())
}

/// Reports what is wrong with the threads' settings: `cpu_fanout` (only for a range),
/// `cpu` (a list relayd can use, of CPUs relayd may run on: its affinity mask, as
/// `taskset`, cpusets or systemd's `CPUAffinity=` leave it, so `relayd check` on the
/// router tells) and `nice` (an integer the kernel takes as is; it would clamp others
/// silently), taking what `check_configs` found from `found`.
fn report_threads(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    threads: &Threads,
    single: bool,
    found: &mut Vec<QueueConfigError>,
) {
    if threads.cpu_fanout && single {
        cx.err(
            Some(q.num.span()),
            field(index, "cpu_fanout"),
            "needs a queue range such as \"0-3\"",
        );
    }
    let cpu_span = span_of(q, q.cpu.as_ref());
    if let Err(e) = &threads.cpus {
        cx.err(cpu_span.clone(), field(index, "cpu"), e.as_str());
    }
    match take(found, is_cpu) {
        Some(QueueConfigError::CpusUnreadable { source, .. }) => cx.err(
            cpu_span,
            field(index, "cpu"),
            format!("cannot read the CPUs relayd may use: {source}"),
        ),
        Some(QueueConfigError::Cpu { cpu, available }) => cx.err(
            cpu_span,
            field(index, "cpu"),
            format!(
                "CPU {cpu} is not available to relayd (available: {})",
                relay_nfq::format_cpu_list(&available)
            ),
        ),
        Some(e) => cx.err(cpu_span, field(index, "cpu"), e.to_string()),
        None => {}
    }
    let nice_wrong = take(found, |e| matches!(e, QueueConfigError::Nice { .. })).is_some();
    if threads.nice.is_err() || nice_wrong {
        let r = relay_nfq::NICE_RANGE;
        cx.err(
            span_of(q, q.nice.as_ref()),
            field(index, "nice"),
            format!(
                "must be a nice value from {} to {} (lower runs more)",
                r.start(),
                r.end()
            ),
        );
    }
}

#[cfg(test)]
mod tests;
