//! A `[[queue]]` entry: its queue numbers, hook and table, the chain of services it
//! runs, and the kernel queue and thread settings that chain needs.

use super::error::{Ctx, line_col};
use super::services::ServiceEntry;
use crate::registry::{BuildError, Registry};
use relay_control::{Family, Hook, Table};
use relay_core::{FailPolicy, ServiceFactory, Verdict};
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

pub(super) fn check_queue(
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
