//! The kernel-facing operations: validate, install, remove and cleanup. Each reads the
//! current state with iptables-save, plans the edit in [`crate::render`], and applies it in
//! one iptables-restore run per family.

use tracing::{debug, info};

use crate::backend::Backend;
use crate::error::ControlError;
use crate::model::{IpVersion, RuleSet, check_prefix};
use crate::render::{
    CleanupReport, InstallReport, is_install_chain, plan_install, plan_removal, test_texts,
};
use crate::saved::Saved;

impl RuleSet {
    /// Exactly the text `iptables-restore --noflush` gets for `family` on a box where none
    /// of relayd's chains exist yet (what `relayd rules` prints); empty if no rule is for
    /// this family. [`install`](Self::install) sends the same text minus jumps that are
    /// already there, plus the removal of stale chains.
    ///
    /// Per table: `*mangle`, a `:{prefix}-{HOOK} - [0:0]` declaration per chain (which
    /// flushes an existing chain in `--noflush` mode), then per chain the jump
    /// `-I HOOK 1 -j {prefix}-{HOOK}`, the bypass-mark `RETURN` rule and one
    /// `-j NFQUEUE` rule per queue rule in configuration order; `COMMIT`.
    ///
    /// Fails (rather than printing something iptables would refuse or, worse, accept with
    /// another meaning) if the rule set does not pass [`check`](Self::check).
    pub fn restore_text(&self, family: IpVersion) -> Result<String, ControlError> {
        Ok(plan_install(self, family, None)?.text)
    }

    /// Validates every rule for the backend's family with `iptables-restore --test`: all
    /// of them in one run, and only if that fails one run per rule, so that an error names
    /// the rule (index) and carries iptables' stderr. (A run per rule always cost about
    /// 8 ms per rule and family: `relayd check` of 8,000 queue entries took 130 s.)
    ///
    /// Each rule is tested in the built-in chain of its hook, which also catches matches
    /// the hook cannot use (`-o` in PREROUTING). Nothing is committed. Fails with
    /// [`ControlError::ToolMissing`] / [`ControlError::NotPermitted`] if iptables cannot
    /// be run at all.
    pub fn validate(&self, backend: &Backend) -> Result<(), ControlError> {
        self.check()?;
        // Every rule's test lines, grouped by table: (table, lines).
        let mut tables: Vec<(String, String)> = Vec::new();
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.applies_to(backend.family) {
                continue;
            }
            let table = rule.table.to_string();
            let at = match tables.iter().position(|(t, _)| *t == table) {
                Some(at) => at,
                None => {
                    tables.push((table, String::new()));
                    tables.len() - 1
                }
            };
            for (_, line) in test_texts(self, index)? {
                let body = &mut tables[at].1;
                body.push_str(&line);
                body.push('\n');
            }
        }
        if tables.is_empty() {
            return Ok(());
        }
        let all: String = tables
            .iter()
            .map(|(table, body)| format!("*{table}\n{body}COMMIT\n"))
            .collect();
        let together = match backend.run_restore(&all, true) {
            Ok(()) => return Ok(()),
            Err(e @ ControlError::ToolFailed { .. }) => e,
            Err(e) => return Err(e),
        };
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.applies_to(backend.family) {
                continue;
            }
            for (text, line) in test_texts(self, index)? {
                match backend.run_restore(&text, true) {
                    Ok(()) => {}
                    Err(ControlError::ToolFailed {
                        program, stderr, ..
                    }) => {
                        return Err(ControlError::RuleRejected {
                            index,
                            family: backend.family,
                            program,
                            line,
                            stderr,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        // Each rule passes alone but not all together: iptables' own message.
        Err(together)
    }

    /// Installs the rule set for the backend's family, atomically and idempotently.
    ///
    /// Reads the current state with iptables-save, then in one `iptables-restore -w
    /// --noflush` run declares (flushes) and fills relayd's chains, inserts each jump at
    /// position 1 only if that exact jump is not already there (and deletes duplicates),
    /// and removes this prefix's chains that the rule set no longer uses (after a reload
    /// dropped a hook or a family). Each table's block commits atomically. If iptables
    /// refuses the text, the rules are validated one by one so the error names the rule.
    pub fn install(&self, backend: &Backend) -> Result<InstallReport, ControlError> {
        self.check()?;
        let saved = Saved::parse(&backend.run_save()?);
        let plan = plan_install(self, backend.family, Some(&saved))?;
        if plan.text.is_empty() {
            debug!(family = %backend.family, "no rules and nothing stale: nothing to install");
            return Ok(plan.report);
        }
        if let Err(err) = backend.run_restore(&plan.text, false) {
            if matches!(err, ControlError::ToolFailed { .. }) {
                self.validate(backend)?;
            }
            return Err(err);
        }
        info!(
            family = %backend.family,
            chains = plan.report.chains.len(),
            jumps_added = plan.report.jumps_added,
            stale_removed = plan.report.removed.chains.len(),
            "iptables rules installed"
        );
        Ok(plan.report)
    }

    /// Removes everything install() adds for this prefix and the backend's family: every
    /// `{prefix}-{HOOK}` chain in mangle and raw, after deleting the rules that jump to
    /// them. One atomic block per table; nothing installed is not an error.
    pub fn remove(&self, backend: &Backend) -> Result<CleanupReport, ControlError> {
        cleanup(&self.prefix, backend)
    }
}

/// Removes every chain named `{prefix}-{HOOK}` (HOOK one of the five built-in hooks) in
/// tables raw and mangle, and
/// every rule anywhere in those tables that jumps (or goes) to one, for the backend's
/// family. For `relayd cleanup` after a crash, and at startup before install.
///
/// Works from iptables-save output and deletes rules by their exact saved text, so it
/// never flushes a table or a chain relayd does not own. Names match exactly, so another
/// instance with prefix `{prefix}-X` keeps its chains.
pub fn cleanup(prefix: &str, backend: &Backend) -> Result<CleanupReport, ControlError> {
    check_prefix(prefix)?;
    let saved = Saved::parse(&backend.run_save()?);
    let (text, report) = plan_removal(&saved, |c| is_install_chain(prefix, c));
    apply_removal(backend, &text, &report)?;
    Ok(report)
}

fn apply_removal(
    backend: &Backend,
    text: &str,
    report: &CleanupReport,
) -> Result<(), ControlError> {
    if text.is_empty() {
        debug!(family = %backend.family, "no relayd chains: nothing to remove");
        return Ok(());
    }
    backend.run_restore(text, false)?;
    info!(
        family = %backend.family,
        chains = report.chains.len(),
        rules = report.rules,
        "iptables rules removed"
    );
    Ok(())
}

/// The packet and byte counters of the backend family's rules whose comment starts with
/// `prefix`, summed by comment (relayd's offload skip rules: `offload.skipped_packets`).
/// One iptables-save run: for the control plane, never the datapath.
pub fn commented_counters(
    backend: &Backend,
    prefix: &str,
) -> Result<Vec<(String, u64, u64)>, ControlError> {
    Ok(crate::saved::commented_counters(
        &backend.run_save_counters()?,
        prefix,
    ))
}
