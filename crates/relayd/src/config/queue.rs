//! A `[[queue]]` entry: its queue numbers, hook and table, the chain of services it
//! runs, and the kernel queue and thread settings that chain needs.

use super::error::{Ctx, line_col};
use super::services::{ServiceEntry, resolve_chain};
use crate::registry::Registry;
use relay_control::{Family, Hook, Table};
use relay_core::{CtMarkBits, FailPolicy, ServiceFactory, Verdict};
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
    pub families: Vec<Family>,
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
}

/// The field path of key `key` of queue entry `index` (`queue[1].num`).
pub(super) fn field(index: usize, key: &str) -> String {
    format!("queue[{index}].{key}")
}

/// Checks one `[[queue]]` entry and records every error; `None` if it has any. `taken`
/// maps the queue numbers of the entries before it to their index; `ct_bits` are the
/// daemon's conntrack mark bits. The steps run in the order of the entry's keys, so that
/// errors come in the order of the file.
pub(super) fn check_queue(
    cx: &mut Ctx<'_>,
    index: usize,
    q: RawQueue,
    services: &BTreeMap<String, ServiceEntry<'_>>,
    registry: &Registry,
    taken: &mut BTreeMap<u16, usize>,
    ct_bits: CtMarkBits,
) -> Option<QueueSpec> {
    let errors_before = cx.errors.len();
    let (line, _) = line_col(cx.text, q.num.span().start);
    let (first, last) = check_numbers(cx, index, &q.num, taken);
    let (hook, table) = check_hook_and_table(cx, index, &q);
    let families = check_family(cx, index, q.family.as_ref());
    if let Some(m) = &q.matches
        && let Err(e) = relay_control::split_matches(m.get_ref())
    {
        cx.err(Some(m.span()), field(index, "match"), e.to_string());
    }
    let chain = resolve_chain(cx, index, &q.services, services, registry);
    let mut queue = relay_nfq::QueueConfig::new(first);
    let malformed = check_policy(cx, index, &q, &chain, &mut queue);
    check_kernel(cx, index, &q, &chain, table, &mut queue);
    queue.ct_mark_bits = queue.conntrack.then_some(ct_bits);
    let threads = check_threads(cx, index, &q, first, last);
    queue.nice = threads.nice;
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
        malformed,
        cpu_fanout: threads.cpu_fanout,
        cpus: threads.cpus,
        queue,
    })
}

/// `num`: one queue number or a range `"first-last"`, none of them used by an earlier
/// entry. `(0, 0)` after an error.
fn check_numbers(
    cx: &mut Ctx<'_>,
    index: usize,
    num: &Spanned<toml::Value>,
    taken: &mut BTreeMap<u16, usize>,
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
            cx.err(Some(num.span()), field(index, "num"), e);
            return (0, 0);
        }
    };
    for n in first..=last {
        if let Some(prev) = taken.insert(n, index) {
            cx.err(
                Some(num.span()),
                field(index, "num"),
                format!("queue {n} is already used by queue[{prev}]"),
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
fn check_family(cx: &mut Ctx<'_>, index: usize, family: Option<&Spanned<String>>) -> Vec<Family> {
    match family.map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("ipv4", _)) => vec![Family::Ipv4],
        Some(("ipv6", _)) => vec![Family::Ipv6],
        Some(("both", _)) => vec![Family::Ipv4, Family::Ipv6],
        Some((other, span)) => {
            cx.err(
                Some(span),
                field(index, "family"),
                format!("unknown family `{other}` (ipv4, ipv6 or both)"),
            );
            vec![Family::Ipv4]
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
                field(index, "gso"),
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
        None if fail_open => Verdict::Accept,
        None => Verdict::Drop,
        Some(("accept", _)) => Verdict::Accept,
        Some(("drop", _)) => Verdict::Drop,
        Some((other, span)) => {
            cx.err(
                Some(span),
                field(index, "malformed"),
                format!("unknown policy `{other}` (accept or drop)"),
            );
            Verdict::Accept
        }
    };
    queue.fail_open = fail_open;
    queue.gso = gso;
    malformed
}

/// The kernel queue's settings, in `queue` (which holds the defaults): what the chain
/// needs of it (bytes copied, conntrack state, room for held packets) and the configured
/// sizes, each within the kernel's limits.
///
/// relay_nfq checks the same limits again when a queue starts (its `check_config`, not
/// public): relayd checks them here so that each error names its line and field.
fn check_kernel(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    table: Table,
    queue: &mut relay_nfq::QueueConfig,
) {
    if let Some(c) = check_copy_range(cx, index, q.copy_range.as_ref(), chain) {
        queue.copy_range = c;
    }
    match &q.max_len {
        Some(m) if *m.get_ref() == 0 => cx.err(
            Some(m.span()),
            field(index, "max_len"),
            "must be at least 1",
        ),
        Some(m) => queue.max_len = *m.get_ref(),
        None => {}
    }
    let min_rcvbuf = queue.copy_range as usize + relay_nfq::QueueConfig::OVERHEAD;
    match &q.rcvbuf {
        Some(r) if *r.get_ref() < min_rcvbuf => cx.err(
            Some(r.span()),
            field(index, "rcvbuf"),
            format!("must be larger than copy_range plus netlink overhead ({min_rcvbuf} bytes)"),
        ),
        Some(r) => queue.rcvbuf = *r.get_ref(),
        None => {}
    }
    match &q.batch {
        Some(b) if !(1..=1024).contains(b.get_ref()) => cx.err(
            Some(b.span()),
            field(index, "batch"),
            "must be 1-1024 packets",
        ),
        Some(b) => queue.batch = *b.get_ref(),
        None => {}
    }
    queue.conntrack = check_conntrack(cx, index, q, chain, table);
    check_hold(cx, index, q.max_len.as_ref(), chain, queue);
}

/// `copy_range`: 64-65535 bytes, and at least what every service needs. Not given: only
/// the headers relayd checks, or whole packets as soon as one service wants them (`None`:
/// the queue's default).
fn check_copy_range(
    cx: &mut Ctx<'_>,
    index: usize,
    copy_range: Option<&Spanned<u32>>,
    chain: &[(String, Arc<dyn ServiceFactory>)],
) -> Option<u32> {
    let Some(c) = copy_range else {
        return chain
            .iter()
            .try_fold(relay_core::builtin::HEADER_BYTES, |acc, (_, s)| {
                s.needs_bytes().map(|n| acc.max(n))
            });
    };
    let c_val = *c.get_ref();
    if !(64..=0xffff).contains(&c_val) {
        cx.err(
            Some(c.span()),
            field(index, "copy_range"),
            "must be 64-65535 bytes",
        );
        return None;
    }
    if let Some((name, _)) = chain
        .iter()
        .find(|(_, s)| s.needs_bytes().is_none_or(|n| n > c_val))
    {
        cx.err(
            Some(c.span()),
            field(index, "copy_range"),
            format!("service `{name}` needs more of each packet"),
        );
    }
    Some(c_val)
}

/// Whether a service reads the packets' conntrack state, which the raw table, coming
/// before conntrack, cannot give it.
fn check_conntrack(
    cx: &mut Ctx<'_>,
    index: usize,
    q: &RawQueue,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    table: Table,
) -> bool {
    let reader = chain.iter().find(|(_, s)| s.needs_conntrack());
    if let (Some((name, _)), Table::Raw) = (reader, table) {
        cx.err(
            q.table.as_ref().map(|t| t.span()),
            field(index, "table"),
            format!(
                "service `{name}` reads conntrack state, which the raw table comes before: use table = \"mangle\""
            ),
        );
    }
    reader.is_some()
}

/// How many packets the services may hold, and a queue length that leaves room for them
/// plus a batch (the kernel counts held packets against it): a configured `max_len` must,
/// a default one grows.
fn check_hold(
    cx: &mut Ctx<'_>,
    index: usize,
    configured: Option<&Spanned<u32>>,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    queue: &mut relay_nfq::QueueConfig,
) {
    let held: u32 = chain.iter().map(|(_, s)| s.max_held()).sum();
    if held == 0 {
        return;
    }
    queue.hold.max_packets = held;
    // Beyond its capacity a delaying queue drops, as a full netem queue does.
    queue.hold.overflow = Verdict::Drop;
    let need = held.saturating_add(queue.batch as u32);
    match configured {
        Some(m) if *m.get_ref() < need => cx.err(
            Some(m.span()),
            field(index, "max_len"),
            format!(
                "must be at least {need}: the services hold up to {held} packets, plus a batch"
            ),
        ),
        Some(_) => {}
        None => queue.max_len = queue.max_len.max(need),
    }
}

/// How the entry's queue threads run.
struct Threads {
    cpu_fanout: bool,
    cpus: Vec<usize>,
    nice: Option<i32>,
}

/// `cpu_fanout` (only for a range), `cpu` and `nice`.
fn check_threads(cx: &mut Ctx<'_>, index: usize, q: &RawQueue, first: u16, last: u16) -> Threads {
    let cpu_fanout = q.cpu_fanout.unwrap_or(false);
    if cpu_fanout && first == last {
        cx.err(
            Some(q.num.span()),
            field(index, "cpu_fanout"),
            "needs a queue range such as \"0-3\"",
        );
    }
    let threads = usize::from(last.saturating_sub(first)) + 1;
    let cpus = q
        .cpu
        .as_ref()
        .map(|c| check_cpus(cx, c, &field(index, "cpu"), threads))
        .unwrap_or_default();
    let nice = q
        .nice
        .as_ref()
        .and_then(|n| check_nice(cx, n, &field(index, "nice")));
    Threads {
        cpu_fanout,
        cpus,
        nice,
    }
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

#[cfg(test)]
mod tests {
    use crate::config::test_util::{errs, first_err, parsed};

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
        assert_eq!(parsed(&q("0", "-5")).queues[0].queue.nice, Some(-5));
        assert_eq!(parsed(&q("0", "-20")).queues[0].queue.nice, Some(-20));
        assert_eq!(parsed(&q("0", "19")).queues[0].queue.nice, Some(19));
        // A range: every thread gets the same value.
        let c = parsed(&q("\"4-7\"", "-10"));
        let cfgs: Vec<Option<i32>> = c.queues[0]
            .nums()
            .map(|n| c.queues[0].queue_config(n).nice)
            .collect();
        assert_eq!(cfgs, vec![Some(-10); 4]);
        // No `nice`: inherited.
        let c = parsed("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert_eq!(c.queues[0].queue.nice, None);
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

    /// The kernel queue's limits (relay_nfq's `QueueConfig::check`) each name their key
    /// with relayd's own message; several come in the order of the entry's keys.
    #[test]
    fn kernel_limits_name_their_key() {
        let q = |keys: &str| {
            format!("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n{keys}")
        };
        // The key is on the entry's last line.
        let only = |keys: &str, field: &str, message: &str| {
            let line = 4 + keys.lines().count();
            let e = first_err(&q(keys), line, field);
            assert_eq!(e.len(), 1, "{e:?}");
            assert_eq!(e[0].message, message, "{e:?}");
            assert!(
                e[0].to_string().starts_with(&format!("t.toml:{line}:")),
                "{e:?}"
            );
        };
        only(
            "copy_range = 63\n",
            "queue[0].copy_range",
            "must be 64-65535 bytes",
        );
        only(
            "copy_range = 65536\n",
            "queue[0].copy_range",
            "must be 64-65535 bytes",
        );
        only("max_len = 0\n", "queue[0].max_len", "must be at least 1");
        only(
            "copy_range = 2048\nrcvbuf = 2559\n",
            "queue[0].rcvbuf",
            "must be larger than copy_range plus netlink overhead (2560 bytes)",
        );
        only("batch = 0\n", "queue[0].batch", "must be 1-1024 packets");
        only("batch = 1025\n", "queue[0].batch", "must be 1-1024 packets");
        only(
            "nice = 20\n",
            "queue[0].nice",
            "must be a nice value from -20 to 19 (lower runs more)",
        );
        // The limits themselves pass.
        let c = parsed(&q(
            "copy_range = 64\nmax_len = 1\nrcvbuf = 576\nbatch = 1024\n",
        ));
        let s = &c.queues[0].queue;
        assert_eq!(
            (s.copy_range, s.max_len, s.rcvbuf, s.batch),
            (64, 1, 576, 1024)
        );
        let c = parsed(&q("copy_range = 65535\nbatch = 1\n"));
        assert_eq!(
            (c.queues[0].queue.copy_range, c.queues[0].queue.batch),
            (65535, 1)
        );
        // Several at once: one error per key, in the order of the keys.
        let e = errs(&q(
            "copy_range = 10\nmax_len = 0\nbatch = 5000\nnice = -21\n",
        ));
        let f: Vec<(usize, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(
            f,
            vec![
                (5, "queue[0].copy_range"),
                (6, "queue[0].max_len"),
                (7, "queue[0].batch"),
                (8, "queue[0].nice")
            ],
            "{e:#?}"
        );
        let e = errs(&q(
            "copy_range = 1024\nrcvbuf = 1\ncpu_fanout = true\nnice = 1.5\n",
        ));
        let f: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            f,
            vec!["queue[0].rcvbuf", "queue[0].cpu_fanout", "queue[0].nice"],
            "{e:#?}"
        );
        assert!(e[0].message.ends_with("(1536 bytes)"), "{e:?}");
        // Held packets: a configured max_len leaves room for them plus a batch, a default
        // one grows to.
        let d = |keys: &str| {
            format!(
                "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n{keys}[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 100\n"
            )
        };
        let e = first_err(&d("batch = 8\nmax_len = 107\n"), 6, "queue[0].max_len");
        assert_eq!(
            e[0].message,
            "must be at least 108: the services hold up to 100 packets, plus a batch"
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            parsed(&d("batch = 8\nmax_len = 108\n")).queues[0]
                .queue
                .max_len,
            108
        );
        assert_eq!(parsed(&d("")).queues[0].queue.max_len, 1024);
        let c = parsed(&d("batch = 1000\n"));
        assert_eq!(c.queues[0].queue.max_len, 1100);
        // A zero max_len is both too short and leaves no room.
        let e = errs(&d("max_len = 0\n"));
        let m: Vec<&str> = e.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            m,
            vec![
                "must be at least 1",
                "must be at least 164: the services hold up to 100 packets, plus a batch"
            ]
        );
    }

    /// A service that reads the packets' conntrack state.
    #[derive(serde::Deserialize)]
    struct CtConfig {}

    struct CtFactory;

    impl relay_core::ServiceFactory for CtFactory {
        fn kind(&self) -> &'static str {
            "ct-test"
        }

        fn needs_conntrack(&self) -> bool {
            true
        }

        fn build(&self, _: &relay_core::Counters) -> Box<dyn relay_core::Service> {
            Box::new(Pass)
        }
    }

    struct Pass;

    impl relay_core::Service for Pass {
        fn process(
            &mut self,
            _: &mut relay_core::Packet,
            _: &mut relay_core::Context,
        ) -> relay_core::Action {
            relay_core::Action::Continue
        }
    }

    impl relay_core::ServiceConfig for CtConfig {
        const KIND: &'static str = "ct-test";

        fn into_factory(
            self,
            _name: &str,
        ) -> Result<std::sync::Arc<dyn relay_core::ServiceFactory>, relay_core::InvalidConfig>
        {
            Ok(std::sync::Arc::new(CtFactory))
        }
    }

    #[test]
    fn each_queue_of_an_entry_gets_its_number_and_cpu_and_the_shared_settings() {
        let a = relay_nfq::available_cpus().unwrap()[0];
        let entry = format!(
            "[[queue]]\nnum = \"4-5\"\nhook = \"forward\"\nservices = [\"accept\"]\ncpu = [{a}]\nmax_len = 300\nbatch = 8\n"
        );
        let c = parsed(&entry);
        let s = &c.queues[0];
        let q5 = s.queue_config(5);
        assert_eq!((q5.num, q5.cpu, q5.max_len, q5.batch), (5, Some(a), 300, 8));
        assert_eq!(
            q5,
            relay_nfq::QueueConfig {
                num: 5,
                cpu: Some(a),
                ..s.queue.clone()
            }
        );
        // What the file does not set is relay_nfq's default; no conntrack, no mark bits.
        let defaults = relay_nfq::QueueConfig::new(4);
        assert_eq!(
            (s.queue.rcvbuf, s.queue.hold),
            (defaults.rcvbuf, defaults.hold)
        );
        assert_eq!((s.queue.conntrack, s.queue.ct_mark_bits), (false, None));
        // A service that reads conntrack state: the daemon's mark bits go with the queue.
        let mut r = crate::Registry::with_builtins();
        r.register::<CtConfig>();
        let text = "[daemon]\nct_mark_bits = \"0xf0\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"c\"]\n[service.c]\nkind = \"ct-test\"\n";
        let c = crate::config::parse(text, std::path::Path::new("t.toml"), &r).unwrap();
        let q0 = c.queues[0].queue_config(0);
        assert!(q0.conntrack);
        assert_eq!(q0.ct_mark_bits.map(|b| b.mask()), Some(0xf0));
    }
}
