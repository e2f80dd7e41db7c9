//! A compiled rule set: the rules in Suricata's evaluation order, split into packet rules
//! (payload and header tests, one prefilter over their payload fast patterns) and
//! transaction rules (`set::tx`), with flowbit names interned. Built once per service.

pub(crate) mod later;
pub(crate) mod tx;

use crate::applayer::buffer::Buffer;
use crate::prefilter::Prefilter;
use crate::rules::classify::Classes;
use crate::rules::flowbits::{self, BitOp};
use crate::rules::parse::{Ctx, RuleError, apply_threshold_file, parse_text};
use crate::rules::rule::{Rule, RuleAction, RuleProto, StreamMode, Track};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use tx::TxRules;

/// Packet classes rules are grouped by: TCP, UDP, ICMP (v4 and v6), anything else
/// (including non-first fragments, which have no transport header).
pub(crate) const CLASSES: usize = 4;

/// What to load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Rules files, loaded in order.
    pub files: Vec<PathBuf>,
    /// Address and port variables (`HOME_NET = "[10.0.0.0/8]"`), without the `$`.
    pub vars: BTreeMap<String, String>,
    /// A `classification.config` adding to (or overriding) the built-in classtypes.
    pub classification: Option<PathBuf>,
    /// A Suricata `threshold.config` (threshold, event_filter, suppress, rate_filter lines)
    /// applied to the rules after they load; its bad lines are listed with the rules'
    /// errors ([`RuleSet::errors`]).
    pub threshold_file: Option<PathBuf>,
}

/// Why a rule set could not be built at all (bad rules are not this: see
/// [`RuleSet::errors`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A rules or classification file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A classification file line is wrong.
    #[error("{}:{line}: {message}", path.display())]
    Classification {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The content prefilter could not be built (kept for compatibility: the hashed-anchor
    /// prefilter cannot fail to build).
    #[error("cannot build the content prefilter: {0}")]
    Prefilter(String),
}

/// A compiled rule set: the rules in evaluation order and the prefilter over them.
#[derive(Debug)]
pub struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    pub(crate) errors: Vec<RuleError>,
    pub(crate) prefilter: Option<Prefilter>,
    /// Prefilter pattern id to the rules (indices, ascending) whose fast pattern it is.
    pub(crate) pat_rules: Vec<Vec<u32>>,
    /// Per packet class, the rules without a fast pattern that may apply (ascending).
    pub(crate) header_only: [Vec<u32>; CLASSES],
    /// Per packet class, whether any content rule may apply.
    pub(crate) class_has_content: [bool; CLASSES],
    /// Per rule, the index of its first pcre in the flattened pcre list.
    pub(crate) pcre_base: Vec<u32>,
    /// Per rule, its `flowbits` with the names interned.
    pub(crate) bitops: Vec<Vec<BitOp>>,
    /// Per rule, whether it is IP-only (checked once per flow direction, see
    /// `tx::is_ip_only`).
    pub(crate) ip_only: Vec<bool>,
    /// The rules an offload check reads (`set::later`): those that may apply to a TCP
    /// flow and do more than pass (ascending).
    pub(crate) tcp_later: Vec<u32>,
    /// The rules that inspect application-layer transactions.
    pub(crate) tx: TxRules,
    /// Some rule needs the flow table: flowbits, an application protocol, stream
    /// inspection of a TCP payload, `track by_flow`.
    pub(crate) needs_flows: bool,
    /// Some rule needs the application layer parsed (an application protocol, or
    /// `app-layer-protocol`).
    pub(crate) needs_app: bool,
    /// Threshold-file lines that named no loaded rule.
    pub(crate) warnings: Vec<String>,
}

impl RuleSet {
    /// Matched rule `i` and the action it takes: its own, or the one `over` gives it (a
    /// threshold's or rate filter's); `None` for an index no rule has.
    pub(crate) fn acting(&self, i: u32, over: &[(u32, RuleAction)]) -> Option<(&Rule, RuleAction)> {
        let r = self.rules.get(i as usize)?;
        let act = over
            .iter()
            .find(|(x, _)| *x == i)
            .map_or(r.action, |(_, a)| *a);
        Some((r, act))
    }

    /// Loads the rules files. A file that cannot be read is an error; rules that cannot be
    /// parsed are left out and listed in [`RuleSet::errors`].
    pub fn load(opts: &LoadOptions) -> Result<RuleSet, LoadError> {
        let mut classes = Classes::default();
        if let Some(path) = &opts.classification {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            classes
                .load_text(&text)
                .map_err(|(line, message)| LoadError::Classification {
                    path: path.clone(),
                    line,
                    message,
                })?;
        }
        let ctx = Ctx {
            vars: &opts.vars,
            classes: &classes,
        };
        let (mut rules, mut errors, mut sids) = (Vec::new(), Vec::new(), HashSet::new());
        for path in &opts.files {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            let name: Arc<str> = Arc::from(path.display().to_string());
            parse_text(&text, &name, &ctx, &mut sids, &mut rules, &mut errors);
        }
        let mut warnings = Vec::new();
        if let Some(path) = &opts.threshold_file {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            let name = path.display().to_string();
            let applied = apply_threshold_file(&text, &name, &ctx, &mut rules, &mut errors);
            for (line, gid, sid) in applied.unknown {
                warnings.push(format!(
                    "{name}:{line}: no loaded rule has gen_id {gid}, sig_id {sid}"
                ));
            }
        }
        let mut set = RuleSet::build(rules, errors)?;
        set.warnings = warnings;
        Ok(set)
    }

    /// Parses rules from a string (tests, benches, tools); `source` names it in errors.
    pub fn parse_str(
        text: &str,
        source: &str,
        vars: &BTreeMap<String, String>,
    ) -> Result<RuleSet, LoadError> {
        let classes = Classes::default();
        let ctx = Ctx {
            vars,
            classes: &classes,
        };
        let (mut rules, mut errors, mut sids) = (Vec::new(), Vec::new(), HashSet::new());
        parse_text(
            text,
            &Arc::from(source),
            &ctx,
            &mut sids,
            &mut rules,
            &mut errors,
        );
        RuleSet::build(rules, errors)
    }

    fn build(mut rules: Vec<Rule>, errors: Vec<RuleError>) -> Result<RuleSet, LoadError> {
        // Suricata's order: by action (pass, drop, reject, alert), then the rules that set
        // flowbits before those that only read them, then priority.
        rules.sort_by_key(|r| {
            let bits = if flowbits::sets(&r.flowbits) {
                0
            } else if r.flowbits.is_empty() {
                2
            } else {
                1
            };
            (r.action, bits, r.priority, r.sid)
        });
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut by_pat: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut pat_rules: Vec<Vec<u32>> = Vec::new();
        let mut header_only: [Vec<u32>; CLASSES] = Default::default();
        let mut class_has_content = [false; CLASSES];
        let mut pcre_base = Vec::with_capacity(rules.len());
        let mut names = flowbits::Names::default();
        let mut bitops = Vec::with_capacity(rules.len());
        let mut npcre = 0u32;
        let (mut needs_flows, mut needs_app) = (false, false);
        for (i, r) in rules.iter().enumerate() {
            pcre_base.push(npcre);
            npcre += r.pcres.len() as u32;
            bitops.push(names.compile(&r.flowbits));
            needs_app |= r.app.is_some() || !r.app_test.is_empty();
            needs_flows |= needs_app
                || !r.flowbits.is_empty()
                || [
                    r.threshold.map(|t| t.track),
                    r.filter.map(|f| f.track),
                    r.rate.map(|x| x.track),
                    r.global.as_ref().and_then(|g| g.rate).map(|x| x.track),
                ]
                .contains(&Some(Track::Flow))
                // A TCP connection's direction and `established` are the flow table's.
                || r.flow.is_some_and(|f| f.needs_ct())
                // Stream events come from the flow table's normalization.
                || r.stream_events != 0;
            if tx::is_tx_rule(r) {
                continue;
            }
            let classes: &[usize] = match r.proto {
                RuleProto::Ip => &[0, 1, 2, 3],
                RuleProto::Tcp => &[0],
                RuleProto::Udp => &[1],
                RuleProto::Icmp => &[2],
                RuleProto::TcpOrUdp => &[0, 1],
            };
            match r.fast_content() {
                Some((Buffer::Payload, c)) => {
                    // One case-insensitive prefilter serves every pattern; a candidate's
                    // case is checked when the rule is verified.
                    let key = c.pat.to_ascii_lowercase();
                    let id = *by_pat.entry(key.clone()).or_insert_with(|| {
                        patterns.push(key);
                        pat_rules.push(Vec::new());
                        patterns.len() - 1
                    });
                    pat_rules[id].push(i as u32);
                    for &c in classes {
                        class_has_content[c] = true;
                    }
                }
                _ => {
                    for &c in classes {
                        header_only[c].push(i as u32);
                    }
                }
            }
        }
        // A TCP payload rule inspects the reassembled stream too (unless `no_stream`).
        needs_flows |= rules.iter().any(|r| {
            !tx::is_tx_rule(r)
                && matches!(
                    r.proto,
                    RuleProto::Tcp | RuleProto::Ip | RuleProto::TcpOrUdp
                )
                && r.lists.iter().any(|l| l.buffer == Buffer::Payload)
                && r.flow.is_none_or(|f| f.stream != StreamMode::No)
        });
        let prefilter = (!patterns.is_empty()).then(|| Prefilter::new(&patterns));
        let tx = TxRules::build(&rules);
        let ip_only: Vec<bool> = rules.iter().map(tx::is_ip_only).collect();
        // IP-only rules are checked once per flow direction: that needs the flows.
        needs_flows |= ip_only.contains(&true);
        let tcp_later = later::candidates(&rules);
        Ok(RuleSet {
            rules,
            errors,
            prefilter,
            pat_rules,
            header_only,
            class_has_content,
            pcre_base,
            bitops,
            ip_only,
            tcp_later,
            tx,
            needs_flows,
            needs_app,
            warnings: Vec::new(),
        })
    }

    /// The rules, in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rules that could not be loaded.
    pub fn errors(&self) -> &[RuleError] {
        &self.errors
    }

    /// Threshold-file lines that named no loaded rule (Suricata warns about them too).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The rule with signature id `sid`.
    pub fn by_sid(&self, sid: u32) -> Option<&Rule> {
        self.rules.iter().find(|r| r.sid == sid)
    }

    /// True if some rule can stop traffic (drop, reject, ratelimit).
    pub fn blocks(&self) -> bool {
        self.rules.iter().any(|r| r.action.blocks())
    }

    /// True if any rule asks about the flow (`flow:`), which needs conntrack state.
    pub fn reads_flow_state(&self) -> bool {
        self.rules.iter().any(|r| r.flow.is_some())
    }

    /// True if the rules need relayd's own flow table (flowbits, stream inspection,
    /// application-layer buffers, `track by_flow`, `flow:` state or direction tests).
    pub fn needs_flows(&self) -> bool {
        self.needs_flows
    }

    /// Number of distinct patterns in the prefilter.
    pub fn prefilter_patterns(&self) -> usize {
        self.pat_rules.len()
    }
}
