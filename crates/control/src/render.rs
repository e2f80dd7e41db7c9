//! Pure planning: from a [`RuleSet`] and (optionally) the current iptables-save state to the
//! exact iptables-restore text, with no I/O, so every edit relayd makes is unit-testable.
//!
//! Within one `*table` block the order matters and is always: declare relayd's chains
//! (in `--noflush` mode a declaration flushes an existing chain, which is what makes a
//! reinstall replace contents atomically), delete rules that reference chains about to go,
//! flush then delete those chains, then insert jumps and fill the declared chains.

use std::fmt::Write as _;

use crate::args::{for_output_copy, join_args};
use crate::error::ControlError;
use crate::model::{Hook, IpVersion, RuleSet, Table, chain_name};
use crate::saved::{Saved, SavedTable};

/// What [`RuleSet::install`](crate::RuleSet::install) did for one family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallReport {
    /// relayd's chains now installed, with their table, in rendering order.
    pub chains: Vec<(Table, String)>,
    /// Jumps from built-in chains that had to be added (0 on an unchanged reinstall).
    pub jumps_added: usize,
    /// Stale chains of the same prefix that this rule set no longer uses, now removed.
    pub removed: CleanupReport,
}

/// What a removal ([`cleanup`](crate::cleanup), [`RuleSet::remove`](crate::RuleSet::remove))
/// or the stale-chain part of an install deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Chains deleted, with their table.
    pub chains: Vec<(Table, String)>,
    /// Rules outside those chains that referenced them (jumps), deleted first.
    pub rules: usize,
}

impl CleanupReport {
    /// Whether nothing was (or needed to be) removed.
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.rules == 0
    }
}

/// relayd's chain for one (table, hook) and its full contents for one family: its owned
/// rules, then (if it has queue rules) the bypass-mark skip and the queue rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainPlan {
    pub(crate) table: Table,
    pub(crate) hook: Hook,
    pub(crate) name: String,
    /// Complete `-A NAME ...` lines: the bypass-mark skip, then one per queue rule.
    pub(crate) lines: Vec<String>,
}

/// The chains a rule set needs for `family`, in table then hook order.
///
/// A chain with queue rules starts (after the owned rules) with the stage skip: packets
/// that relayd repeated or sent itself from this hook or a later one return at once
/// ([`relay_core::StageMark`]). A packet a PREROUTING queue re-sends from a socket (a
/// decapsulated inner packet of another family) is walked through OUTPUT, not FORWARD,
/// although it is passing through the router; so relayd's OUTPUT chain of a table with
/// FORWARD queues gives such stage-1 packets to copies of those queues' rules first, and
/// returns them before its own queue rules, which are for locally generated traffic. The
/// copies leave out `-i`/`--in-interface`: the re-sent packet has no input interface, and a
/// FORWARD queue (an IDS) must rather see too much than nothing.
pub(crate) fn plan_chains(rs: &RuleSet, family: IpVersion) -> Result<Vec<ChainPlan>, ControlError> {
    rs.check()?;
    let stages = rs.stages()?;
    let copies = rs.resends_before_forward();
    let mut plans = Vec::new();
    for table in Table::ALL {
        for &hook in table.hooks() {
            let name = rs.chain_name(hook);
            let mut lines = Vec::new();
            for owned in &rs.owned {
                if owned.table == table && owned.hook == hook && owned.applies_to(family) {
                    lines.push(format!("-A {name} {}", join_args(&owned.args)));
                }
            }
            let own = queue_lines(rs, family, table, hook, &name, None)?;
            let (stage1, mask) = stages.prerouting_match();
            let guard = format!("-m mark --mark {stage1:#x}/{mask:#x}");
            let twins = if hook == Hook::Output && copies {
                queue_lines(rs, family, table, Hook::Forward, &name, Some(&guard))?
            } else {
                Vec::new()
            };
            if !own.is_empty() || !twins.is_empty() {
                let (negated, value, mask) = stages.skip_match(hook);
                let not = if negated { "! " } else { "" };
                lines.push(format!(
                    "-A {name} -m mark {not}--mark {value:#x}/{mask:#x} -j RETURN"
                ));
                if !twins.is_empty() {
                    lines.extend(twins);
                    lines.push(format!("-A {name} {guard} -j RETURN"));
                }
                lines.extend(own);
            }
            if !lines.is_empty() {
                plans.push(ChainPlan {
                    table,
                    hook,
                    name,
                    lines,
                });
            }
        }
    }
    Ok(plans)
}

/// The `-A` lines of the queue rules (each after its pre rules) of `table` and `hook` for
/// `family`, in chain `name`. With a `guard`, as copies for stage-1 packets in OUTPUT:
/// each line gets the guard match before its target, and input-interface matches are left
/// out.
fn queue_lines(
    rs: &RuleSet,
    family: IpVersion,
    table: Table,
    hook: Hook,
    name: &str,
    guard: Option<&str>,
) -> Result<Vec<String>, ControlError> {
    let line = |args: Vec<String>| match guard {
        Some(g) => format!("-A {name} {}", join_args(&output_copy(args, g))),
        None => format!("-A {name} {}", join_args(&args)),
    };
    let mut lines = Vec::new();
    for (index, rule) in rs.rules.iter().enumerate() {
        if rule.table != table || rule.hook != hook || !rule.applies_to(family) {
            continue;
        }
        let args = rule
            .rule_args()
            .map_err(|error| ControlError::BadMatch { index, error })?;
        for pre in &rule.pre {
            if pre.family.is_none_or(|f| f == family) {
                lines.push(line(pre.args.clone()));
            }
        }
        lines.push(line(args));
    }
    Ok(lines)
}

/// Whether `chain` is one install() creates for `prefix`: exactly `{prefix}-{HOOK}`.
/// Narrower than cleanup's `{prefix}-*` on purpose, so that a reload never deletes chains
/// of another instance whose prefix happens to extend ours (`RELAYD-B-FORWARD`).
pub(crate) fn is_install_chain(prefix: &str, chain: &str) -> bool {
    Hook::ALL.iter().any(|&h| chain == chain_name(prefix, h))
}

/// The lines of one `*table` ... `COMMIT` block, grouped in the order they must run.
#[derive(Debug, Default)]
struct TableEdit {
    declare: Vec<String>,
    delete: Vec<String>,
    remove: Vec<String>,
    body: Vec<String>,
}

impl TableEdit {
    fn is_empty(&self) -> bool {
        self.declare.is_empty()
            && self.delete.is_empty()
            && self.remove.is_empty()
            && self.body.is_empty()
    }

    fn render(&self, table: Table, out: &mut String) {
        if self.is_empty() {
            return;
        }
        let _ = writeln!(out, "*{table}");
        for c in &self.declare {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        for d in &self.delete {
            let _ = writeln!(out, "-D {d}");
        }
        for c in &self.remove {
            let _ = writeln!(out, "-F {c}");
        }
        for c in &self.remove {
            let _ = writeln!(out, "-X {c}");
        }
        for b in &self.body {
            let _ = writeln!(out, "{b}");
        }
        out.push_str("COMMIT\n");
    }

    /// Plans the removal of `remove` (chains that exist in `saved`): every rule elsewhere
    /// that references one is deleted by its exact saved spec, except in chains this block
    /// flushes anyway (`flushed`), where a `-D` would then find nothing and fail.
    fn remove_chains(
        &mut self,
        table: Table,
        saved: &SavedTable,
        remove: Vec<String>,
        report: &mut CleanupReport,
    ) {
        for rule in &saved.rules {
            let flushed = remove.contains(&rule.chain) || self.declare.contains(&rule.chain);
            if flushed {
                continue;
            }
            if rule.target().is_some_and(|t| remove.iter().any(|c| c == t)) {
                self.delete.push(rule.spec.clone());
                report.rules += 1;
            }
        }
        report
            .chains
            .extend(remove.iter().map(|c| (table, c.clone())));
        self.remove.extend(remove);
    }
}

/// The iptables-restore text for an install, and what it will do.
#[derive(Debug)]
pub(crate) struct InstallPlan {
    pub(crate) text: String,
    pub(crate) report: InstallReport,
}

/// Plans an install for `family`. With `saved = None` (no knowledge of the current state)
/// this is the text for a clean box: every jump is inserted and nothing stale is removed.
pub(crate) fn plan_install(
    rs: &RuleSet,
    family: IpVersion,
    saved: Option<&Saved>,
) -> Result<InstallPlan, ControlError> {
    let chains = plan_chains(rs, family)?;
    let mut text = String::new();
    let mut report = InstallReport::default();
    for table in Table::ALL {
        let current = saved.and_then(|s| s.table(table.as_str()));
        let wanted: Vec<&ChainPlan> = chains.iter().filter(|c| c.table == table).collect();
        let mut edit = TableEdit {
            declare: wanted.iter().map(|c| c.name.clone()).collect(),
            ..TableEdit::default()
        };
        if let Some(current) = current {
            let stale: Vec<String> = current
                .chains
                .iter()
                .filter(|c| is_install_chain(&rs.prefix, c) && !edit.declare.contains(c))
                .cloned()
                .collect();
            if !stale.is_empty() {
                edit.remove_chains(table, current, stale, &mut report.removed);
            }
        }
        for chain in wanted {
            let builtin = chain.hook.chain();
            let jumps = current.map_or(0, |t| {
                t.rules
                    .iter()
                    .filter(|r| r.is_plain_jump(builtin, &chain.name))
                    .count()
            });
            if jumps == 0 {
                edit.body.push(format!("-I {builtin} 1 -j {}", chain.name));
                report.jumps_added += 1;
            }
            // A duplicate would make every packet traverse the chain twice.
            for _ in 1..jumps {
                edit.delete.push(format!("{builtin} -j {}", chain.name));
            }
            edit.body.extend(chain.lines.iter().cloned());
            report.chains.push((table, chain.name.clone()));
        }
        edit.render(table, &mut text);
    }
    Ok(InstallPlan { text, report })
}

/// Plans removing every chain `owned` says is relayd's, in both tables, and every rule
/// elsewhere that references one.
pub(crate) fn plan_removal(saved: &Saved, owned: impl Fn(&str) -> bool) -> (String, CleanupReport) {
    let mut text = String::new();
    let mut report = CleanupReport::default();
    for table in Table::ALL {
        let Some(current) = saved.table(table.as_str()) else {
            continue;
        };
        let remove: Vec<String> = current
            .chains
            .iter()
            .filter(|c| owned(c))
            .cloned()
            .collect();
        if remove.is_empty() {
            continue;
        }
        let mut edit = TableEdit::default();
        edit.remove_chains(table, current, remove, &mut report);
        edit.render(table, &mut text);
    }
    (text, report)
}

/// A FORWARD rule's `args` as its copy in OUTPUT for stage-1 packets: input-only matches
/// left out ([`for_output_copy`]) and the `guard` match right before the target, where
/// iptables-save prints it too (it puts `-p` and the other built-in matches first), so
/// `relayd rules` shows what is installed.
fn output_copy(args: Vec<String>, guard: &str) -> Vec<String> {
    let mut args = for_output_copy(args);
    let at = args.iter().position(|a| a == "-j").unwrap_or(args.len());
    args.splice(at..at, guard.split(' ').map(String::from));
    args
}

/// The texts `iptables-restore --test` checks for one rule: the rule placed directly in
/// the built-in chain, so that hook-specific errors (`-o` in PREROUTING) show up too, and,
/// for a FORWARD rule that gets a copy in OUTPUT, that copy in OUTPUT. Each with its line.
pub(crate) fn test_texts(
    rs: &RuleSet,
    index: usize,
) -> Result<Vec<(String, String)>, ControlError> {
    let rule = &rs.rules[index];
    let args = rule
        .rule_args()
        .map_err(|error| ControlError::BadMatch { index, error })?;
    let mut lines = Vec::new();
    if rule.hook == Hook::Forward && rs.resends_before_forward() {
        let (stage1, mask) = rs.stages()?.prerouting_match();
        let guard = format!("-m mark --mark {stage1:#x}/{mask:#x}");
        let copy = output_copy(args.clone(), &guard);
        lines.push(format!("-A {} {}", Hook::Output.chain(), join_args(&copy)));
    }
    lines.insert(0, format!("-A {} {}", rule.hook.chain(), join_args(&args)));
    Ok(lines
        .into_iter()
        .map(|line| (format!("*{}\n{line}\nCOMMIT\n", rule.table), line))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::QueueRule;

    fn rule(table: Table, hook: Hook, matches: Option<&str>, q: (u16, u16)) -> QueueRule {
        QueueRule {
            table,
            hook,
            families: vec![IpVersion::V4],
            matches: matches.map(str::to_owned),
            first_queue: q.0,
            last_queue: q.1,
            bypass: true,
            cpu_fanout: false,
            pre: Vec::new(),
        }
    }

    fn sample() -> RuleSet {
        let mut balanced = rule(Table::Mangle, Hook::Forward, Some("-p tcp"), (4, 7));
        balanced.cpu_fanout = true;
        let mut closed = rule(Table::Mangle, Hook::Postrouting, None, (9, 9));
        closed.bypass = false;
        closed.families = vec![IpVersion::V4, IpVersion::V6];
        RuleSet::new(vec![
            rule(
                Table::Mangle,
                Hook::Forward,
                Some("-i eth0 -p udp --dport 5000"),
                (3, 3),
            ),
            balanced,
            closed,
        ])
    }

    #[test]
    fn restore_text_for_a_fresh_box() {
        let text = sample().restore_text(IpVersion::V4).unwrap();
        assert_eq!(
            text,
            "*mangle\n\
             :RELAYD-FORWARD - [0:0]\n\
             :RELAYD-POSTROUTING - [0:0]\n\
             -I FORWARD 1 -j RELAYD-FORWARD\n\
             -A RELAYD-FORWARD -m mark --mark 0x80000000/0x80000000 -j RETURN\n\
             -A RELAYD-FORWARD -i eth0 -p udp --dport 5000 -j NFQUEUE --queue-num 3 --queue-bypass\n\
             -A RELAYD-FORWARD -p tcp -j NFQUEUE --queue-balance 4:7 --queue-bypass --queue-cpu-fanout\n\
             -I POSTROUTING 1 -j RELAYD-POSTROUTING\n\
             -A RELAYD-POSTROUTING -m mark --mark 0xc0000000/0xc0000000 -j RETURN\n\
             -A RELAYD-POSTROUTING -j NFQUEUE --queue-num 9\n\
             COMMIT\n"
        );
    }

    #[test]
    fn pre_rules_share_the_queue_match_and_precede_it() {
        use crate::model::PreRule;
        let mut r = rule(
            Table::Mangle,
            Hook::Prerouting,
            Some("-s 10.0.1.0/24"),
            (1, 1),
        );
        r.families = vec![IpVersion::V4, IpVersion::V6];
        r.pre = vec![
            PreRule::clamp_mss(IpVersion::V4, r.matches.as_deref(), 1400).unwrap(),
            PreRule::clamp_mss(IpVersion::V6, r.matches.as_deref(), 1380).unwrap(),
        ];
        let rs = RuleSet::new(vec![r]);
        let v4 = rs.restore_text(IpVersion::V4).unwrap();
        assert!(v4.contains(
            "-A RELAYD-PREROUTING -s 10.0.1.0/24 -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --set-mss 1400\n\
             -A RELAYD-PREROUTING -s 10.0.1.0/24 -j NFQUEUE --queue-num 1 --queue-bypass\n"
        ), "{v4}");
        assert!(!v4.contains("1380"));
        assert!(
            rs.restore_text(IpVersion::V6)
                .unwrap()
                .contains("--set-mss 1380")
        );
        // A queue that selects TCP already gets no second -p; one that cannot see TCP, no clamp.
        let tcp = PreRule::clamp_mss(IpVersion::V4, Some("-p tcp --dport 80"), 1400).unwrap();
        assert_eq!(tcp.args[..4], ["-p", "tcp", "--dport", "80"]);
        assert_eq!(tcp.args[4], "--tcp-flags");
        let not_esp = PreRule::clamp_mss(IpVersion::V4, Some("-d 10.0.3.0/24 ! -p esp"), 1400);
        assert_eq!(
            not_esp.unwrap().args[..4],
            ["-d", "10.0.3.0/24", "-p", "tcp"]
        );
        assert!(PreRule::clamp_mss(IpVersion::V4, Some("-p udp"), 1400).is_none());
        assert!(PreRule::clamp_mss(IpVersion::V4, Some("! -p tcp"), 1400).is_none());
    }

    #[test]
    fn owned_rules_come_before_the_bypass_skip() {
        use crate::model::OwnedRule;
        let mut rs = RuleSet::new(vec![rule(
            Table::Raw,
            Hook::Prerouting,
            Some("-p tcp --syn"),
            (0, 0),
        )]);
        let owned = |args: &str, family| OwnedRule {
            table: Table::Mangle,
            hook: Hook::Prerouting,
            family,
            args: args.split(' ').map(String::from).collect(),
        };
        rs.owned = vec![
            owned("-p tcp -m mark --mark 0x1/0x1 -j ACCEPT", None),
            owned("-p tcp -j MARK --set-mark 0x2", Some(IpVersion::V6)),
        ];
        assert_eq!(
            rs.restore_text(IpVersion::V4).unwrap(),
            "*mangle\n\
             :RELAYD-PREROUTING - [0:0]\n\
             -I PREROUTING 1 -j RELAYD-PREROUTING\n\
             -A RELAYD-PREROUTING -p tcp -m mark --mark 0x1/0x1 -j ACCEPT\n\
             COMMIT\n\
             *raw\n\
             :RELAYD-PREROUTING - [0:0]\n\
             -I PREROUTING 1 -j RELAYD-PREROUTING\n\
             -A RELAYD-PREROUTING -m mark ! --mark 0x0/0xc0000000 -j RETURN\n\
             -A RELAYD-PREROUTING -p tcp --syn -j NFQUEUE --queue-num 0 --queue-bypass\n\
             COMMIT\n"
        );
        // Owned rules of one family only; none for the other means no chain there.
        rs.rules.clear();
        assert!(
            rs.restore_text(IpVersion::V6)
                .unwrap()
                .contains("-A RELAYD-PREROUTING -p tcp -j MARK --set-mark 0x2\n")
        );
    }

    #[test]
    fn restore_text_per_family_and_table() {
        let mut rs = sample();
        assert_eq!(
            rs.restore_text(IpVersion::V6).unwrap(),
            "*mangle\n\
             :RELAYD-POSTROUTING - [0:0]\n\
             -I POSTROUTING 1 -j RELAYD-POSTROUTING\n\
             -A RELAYD-POSTROUTING -m mark --mark 0xc0000000/0xc0000000 -j RETURN\n\
             -A RELAYD-POSTROUTING -j NFQUEUE --queue-num 9\n\
             COMMIT\n"
        );
        rs.rules.truncate(1);
        assert_eq!(rs.restore_text(IpVersion::V6).unwrap(), "");
        rs.rules = vec![rule(Table::Raw, Hook::Prerouting, Some("-p udp"), (0, 1))];
        rs.prefix = "R2".into();
        rs.bypass_mark = 0x3;
        assert_eq!(
            rs.restore_text(IpVersion::V4).unwrap(),
            "*raw\n\
             :R2-PREROUTING - [0:0]\n\
             -I PREROUTING 1 -j R2-PREROUTING\n\
             -A R2-PREROUTING -m mark ! --mark 0x0/0x3 -j RETURN\n\
             -A R2-PREROUTING -p udp -j NFQUEUE --queue-balance 0:1 --queue-bypass\n\
             COMMIT\n"
        );
    }

    #[test]
    fn forward_queues_see_what_a_prerouting_queue_resends() {
        let mut ids = rule(Table::Mangle, Hook::Forward, Some("-i eth0 -p udp"), (3, 3));
        ids.families = vec![IpVersion::V6];
        let mut local = rule(Table::Mangle, Hook::Output, Some("-p tcp"), (4, 4));
        local.families = vec![IpVersion::V6];
        let decap = rule(Table::Raw, Hook::Prerouting, Some("-p 137"), (1, 1));
        let rs = RuleSet::new(vec![decap, ids.clone(), local]);
        let v6 = rs.restore_text(IpVersion::V6).unwrap();
        assert_eq!(
            v6,
            "*mangle\n\
             :RELAYD-FORWARD - [0:0]\n\
             :RELAYD-OUTPUT - [0:0]\n\
             -I FORWARD 1 -j RELAYD-FORWARD\n\
             -A RELAYD-FORWARD -m mark --mark 0x80000000/0x80000000 -j RETURN\n\
             -A RELAYD-FORWARD -i eth0 -p udp -j NFQUEUE --queue-num 3 --queue-bypass\n\
             -I OUTPUT 1 -j RELAYD-OUTPUT\n\
             -A RELAYD-OUTPUT -m mark --mark 0x80000000/0x80000000 -j RETURN\n\
             -A RELAYD-OUTPUT -p udp -m mark --mark 0x40000000/0xc0000000 -j NFQUEUE --queue-num 3 --queue-bypass\n\
             -A RELAYD-OUTPUT -m mark --mark 0x40000000/0xc0000000 -j RETURN\n\
             -A RELAYD-OUTPUT -p tcp -j NFQUEUE --queue-num 4 --queue-bypass\n\
             COMMIT\n",
            "{v6}"
        );
        // Without a PREROUTING queue nothing is re-sent from there: no copies.
        let rs = RuleSet::new(vec![ids]);
        assert!(!rs.restore_text(IpVersion::V6).unwrap().contains("OUTPUT"));
    }

    #[test]
    fn restore_text_quotes_args() {
        let rs = RuleSet::new(vec![rule(
            Table::Mangle,
            Hook::Input,
            Some(r#"-m comment --comment 'say "hi" \o/' -p udp"#),
            (1, 1),
        )]);
        let text = rs.restore_text(IpVersion::V4).unwrap();
        assert!(
            text.contains(
                r#"-A RELAYD-INPUT -m comment --comment "say \"hi\" \\o/" -p udp -j NFQUEUE"#
            ),
            "{text}"
        );
    }

    #[test]
    fn rejects_bad_rules() {
        let rs = RuleSet::new(vec![
            rule(Table::Mangle, Hook::Forward, None, (1, 1)),
            rule(Table::Raw, Hook::Forward, None, (1, 1)),
        ]);
        let err = rs.restore_text(IpVersion::V4).unwrap_err();
        assert!(
            matches!(err, ControlError::InvalidRule { index: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("raw has no forward hook"), "{err}");

        let rs = RuleSet::new(vec![rule(
            Table::Mangle,
            Hook::Forward,
            Some("-p udp -j ACCEPT"),
            (1, 1),
        )]);
        let err = rs.restore_text(IpVersion::V4).unwrap_err();
        assert!(
            matches!(err, ControlError::BadMatch { index: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("`-j`"), "{err}");

        let mut bad = rule(Table::Mangle, Hook::Forward, None, (5, 4));
        assert!(RuleSet::new(vec![bad.clone()]).check().is_err());
        bad.last_queue = 5;
        bad.cpu_fanout = true;
        assert!(RuleSet::new(vec![bad.clone()]).check().is_err());
        bad.cpu_fanout = false;
        bad.families.clear();
        assert!(RuleSet::new(vec![bad]).check().is_err());

        let mut rs = sample();
        rs.bypass_mark = 0;
        assert!(matches!(rs.check(), Err(ControlError::InvalidRuleSet(_))));
        rs.bypass_mark = 0x4000_0000;
        assert!(matches!(rs.check(), Err(ControlError::InvalidRuleSet(_))));
    }

    const STATE: &str = "\
*mangle
:PREROUTING ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:RELAYD-FORWARD - [0:0]
:RELAYD-INPUT - [0:0]
:RELAYD-B-INPUT - [0:0]
:MYCHAIN - [0:0]
-A FORWARD -j RELAYD-FORWARD
-A FORWARD -j RELAYD-FORWARD
-A FORWARD -p tcp -j ACCEPT
-A INPUT -j RELAYD-INPUT
-A INPUT -j RELAYD-B-INPUT
-A MYCHAIN -i lo -j RELAYD-INPUT
-A RELAYD-FORWARD -j RELAYD-INPUT
-A RELAYD-INPUT -j NFQUEUE --queue-num 1
COMMIT
";

    #[test]
    fn install_over_existing_state() {
        let rs = RuleSet::new(vec![rule(Table::Mangle, Hook::Forward, None, (2, 2))]);
        let plan = plan_install(&rs, IpVersion::V4, Some(&Saved::parse(STATE))).unwrap();
        assert_eq!(
            plan.text,
            "*mangle\n\
             :RELAYD-FORWARD - [0:0]\n\
             -D INPUT -j RELAYD-INPUT\n\
             -D MYCHAIN -i lo -j RELAYD-INPUT\n\
             -D FORWARD -j RELAYD-FORWARD\n\
             -F RELAYD-INPUT\n\
             -X RELAYD-INPUT\n\
             -A RELAYD-FORWARD -m mark --mark 0x80000000/0x80000000 -j RETURN\n\
             -A RELAYD-FORWARD -j NFQUEUE --queue-num 2 --queue-bypass\n\
             COMMIT\n"
        );
        assert_eq!(plan.report.jumps_added, 0);
        assert_eq!(
            plan.report.removed,
            CleanupReport {
                chains: vec![(Table::Mangle, "RELAYD-INPUT".into())],
                rules: 2
            }
        );
    }

    #[test]
    fn removal_by_prefix() {
        let saved = Saved::parse(STATE);
        let (text, report) = plan_removal(&saved, |c| c.starts_with("RELAYD-"));
        assert_eq!(
            text,
            "*mangle\n\
             -D FORWARD -j RELAYD-FORWARD\n\
             -D FORWARD -j RELAYD-FORWARD\n\
             -D INPUT -j RELAYD-INPUT\n\
             -D INPUT -j RELAYD-B-INPUT\n\
             -D MYCHAIN -i lo -j RELAYD-INPUT\n\
             -F RELAYD-FORWARD\n\
             -F RELAYD-INPUT\n\
             -F RELAYD-B-INPUT\n\
             -X RELAYD-FORWARD\n\
             -X RELAYD-INPUT\n\
             -X RELAYD-B-INPUT\n\
             COMMIT\n"
        );
        assert_eq!(report.rules, 5);
        assert_eq!(report.chains.len(), 3);
        let (text, report) = plan_removal(&saved, |c| c.starts_with("NOPE-"));
        assert_eq!(text, "");
        assert!(report.is_empty());
    }
}
