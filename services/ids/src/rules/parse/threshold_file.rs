//! Suricata's global thresholding file (`threshold.config`, the service's `threshold_file`
//! key), with Suricata 7/8's grammar (src/util-threshold-config.c) and how its lines apply
//! to the loaded rules.
//!
//! Lines, settings in this order, `key value` separated by commas:
//! - `threshold gen_id G, sig_id S, type limit|threshold|both, track by_src|by_dst|by_both|by_rule|by_flow, count N, seconds T`
//!   (`event_filter` is the same line): the rule's thresholding. For one rule it replaces
//!   the rule's own `threshold` (or, without one, its `detection_filter`, or an earlier
//!   `rate_filter` line); with `sig_id 0` it applies to every rule (of `gen_id`, or all
//!   with `gen_id 0`) that has none of these, as Suricata does.
//! - `suppress gen_id G, sig_id S[, track by_src|by_dst|by_either, ip ADDRS]`: no alerts
//!   (the rule still acts) when the source, destination or either address is in `ADDRS`
//!   (an address, a CIDR block, `$VAR` or a `[list]`, as in rules); without `track`, the
//!   rule never alerts.
//! - `rate_filter gen_id G, sig_id S, track by_src|by_dst|by_both|by_rule|by_flow, count N, seconds T, new_action alert|drop|pass|reject, timeout T2`:
//!   once more than `count` matches come in `seconds` (per tracked key), the rule's
//!   action becomes `new_action` for `timeout` seconds. A rule with a `threshold`,
//!   `detection_filter` or an earlier `rate_filter` keeps those (Suricata's precedence).
//! - `#` comments, blank lines, and a `\` at the end of a line continuing it.
//!
//! `sig_id S` with `gen_id 0` is refused (Suricata refuses it too); a line naming a rule
//! that is not loaded is reported as a warning ([`Applied::unknown`]), as Suricata warns.
//! A bad line is an error naming the file, the line and the field; the other lines still
//! apply (the service refuses the whole in strict mode, as Suricata's `-T` does).
//!
//! Where relayd is stricter: `count` and `seconds` must be positive, numbers are plain
//! digits, and `new_action log` / `sdrop` (which Suricata takes but does not implement)
//! are refused.
//!
//! Memory: the file is read whole (it is the operator's); each line adds one [`FileRule`]
//! entry to the rules it names (a `suppress` line's address list is parsed once per
//! rule), and what the lines track at run time lives in the rule trackers, bounded by the
//! service's `track_max` like the rules' own keywords.

use super::threshold::{parse_track, positive};
use super::values::parse_addr;
use super::{Ctx, RuleError};
pub(crate) use crate::rules::rule::{NewAction, RateFilter, Suppress, SuppressTrack};
use crate::rules::rule::{Rule, Threshold, ThresholdKind};

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum What {
    Threshold(Threshold),
    /// Without addresses: the rule never alerts.
    SuppressAll,
    /// The address text (parsed against each rule's variables once applied).
    Suppress(SuppressTrack, String),
    Rate(RateFilter),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    gid: u32,
    sid: u32,
    what: What,
}

/// A line's error: (field, message).
type LErr = (&'static str, String);

fn num(v: &str, field: &'static str) -> Result<u32, LErr> {
    Some(v)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| (field, format!("expected a number, got `{v}`")))
}

/// Takes the next `key value` part of `parts`, which must be `key`.
fn take<'a>(parts: &mut std::slice::Iter<'_, &'a str>, key: &'static str) -> Result<&'a str, LErr> {
    let Some(part) = parts.next() else {
        return Err((key, format!("missing `{key}`")));
    };
    let mut it = part.split_whitespace();
    match (it.next(), it.next(), it.next()) {
        (Some(k), Some(v), None) if k == key => Ok(v),
        (Some(k), _, _) if k != key => {
            Err((key, format!("expected `{key}` here, got `{}`", part.trim())))
        }
        _ => Err((
            key,
            format!("expected `{key} VALUE`, got `{}`", part.trim()),
        )),
    }
}

fn end(parts: &mut std::slice::Iter<'_, &str>) -> Result<(), LErr> {
    match parts.next() {
        None => Ok(()),
        Some(p) => Err((
            "line",
            format!("unexpected `{}` after the last setting", p.trim()),
        )),
    }
}

/// Splits `..., ip ADDRS` at the first comma followed by `ip` and whitespace.
fn split_ip(rest: &str) -> Option<(&str, &str)> {
    rest.match_indices(',').find_map(|(i, _)| {
        let after = rest.get(i + 1..)?.trim_start().strip_prefix("ip")?;
        after
            .starts_with(char::is_whitespace)
            .then(|| (rest.get(..i).unwrap_or(""), after))
    })
}

fn parse_line(line: &str) -> Result<Line, LErr> {
    let line = line.trim();
    let (kind, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    if !matches!(
        kind,
        "threshold" | "event_filter" | "suppress" | "rate_filter"
    ) {
        return Err((
            "type",
            format!("a line is threshold, event_filter, suppress or rate_filter, not `{kind}`"),
        ));
    }
    // `suppress`'s address list may hold commas: it is the rest of the line after `ip`.
    let (rest, ip) = match (kind, split_ip(rest)) {
        ("suppress", Some((head, ip))) => (head, Some(ip.trim())),
        _ => (rest, None),
    };
    let parts: Vec<&str> = rest.split(',').collect();
    let mut it = parts.iter();
    let gid = num(take(&mut it, "gen_id")?, "gen_id")?;
    let sid = num(take(&mut it, "sig_id")?, "sig_id")?;
    if sid > 0 && gid == 0 {
        return Err(("gen_id", format!("sig_id {sid} needs a gen_id (not 0)")));
    }
    let what = match kind {
        "threshold" | "event_filter" => {
            let kind = match take(&mut it, "type")? {
                "limit" => ThresholdKind::Limit,
                "threshold" => ThresholdKind::Threshold,
                "both" => ThresholdKind::Both,
                t => {
                    return Err((
                        "type",
                        format!("type is limit, threshold or both, not `{t}`"),
                    ));
                }
            };
            let track = parse_track(take(&mut it, "track")?).map_err(|e| ("track", e))?;
            let count = positive(take(&mut it, "count")?, "count").map_err(|e| ("count", e))?;
            let seconds =
                positive(take(&mut it, "seconds")?, "seconds").map_err(|e| ("seconds", e))?;
            What::Threshold(Threshold {
                kind,
                track,
                count,
                seconds,
            })
        }
        "rate_filter" => {
            let track = parse_track(take(&mut it, "track")?).map_err(|e| ("track", e))?;
            let count = positive(take(&mut it, "count")?, "count").map_err(|e| ("count", e))?;
            let seconds =
                positive(take(&mut it, "seconds")?, "seconds").map_err(|e| ("seconds", e))?;
            let action = match take(&mut it, "new_action")? {
                "alert" => NewAction::Alert,
                "drop" => NewAction::Drop,
                "reject" => NewAction::Reject,
                "pass" => NewAction::Pass,
                a => {
                    return Err((
                        "new_action",
                        format!("new_action is alert, drop, reject or pass, not `{a}`"),
                    ));
                }
            };
            let timeout = num(take(&mut it, "timeout")?, "timeout")?;
            What::Rate(RateFilter {
                track,
                count,
                seconds,
                action,
                timeout,
            })
        }
        _ => match (it.next(), ip) {
            (None, None) => What::SuppressAll,
            (Some(t), Some(ip)) if it.len() == 0 => {
                let mut w = t.split_whitespace();
                let track = match (w.next(), w.next(), w.next()) {
                    (Some("track"), Some("by_src"), None) => SuppressTrack::Src,
                    (Some("track"), Some("by_dst"), None) => SuppressTrack::Dst,
                    (Some("track"), Some("by_either"), None) => SuppressTrack::Either,
                    _ => {
                        return Err((
                            "track",
                            format!(
                                "expected `track by_src`, `track by_dst` or `track by_either`, got `{}`",
                                t.trim()
                            ),
                        ));
                    }
                };
                if ip.is_empty() {
                    return Err(("ip", "missing the addresses after `ip`".into()));
                }
                What::Suppress(track, ip.to_string())
            }
            (Some(_), None) => {
                return Err(("ip", "`suppress` with `track` needs `ip ADDRESSES`".into()));
            }
            _ => {
                return Err((
                    "line",
                    "`suppress` takes gen_id, sig_id and optionally track and ip".into(),
                ));
            }
        },
    };
    if !matches!(what, What::Suppress(..) | What::SuppressAll) {
        end(&mut it)?;
    }
    Ok(Line { gid, sid, what })
}

/// What applying a threshold file did.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// Lines that applied (to one rule or more).
    pub(crate) lines: usize,
    /// Lines naming a rule that is not loaded: (line, gid, sid).
    pub(crate) unknown: Vec<(usize, u32, u32)>,
}

fn err(file: &str, line: usize, field: &str, message: String) -> RuleError {
    RuleError {
        file: file.to_string(),
        line,
        keyword: Some(field.to_string()),
        message,
    }
}

/// Parses the threshold file `text` (named `file` in errors) and applies its lines to
/// `rules` in file order; bad lines go to `errors` and are skipped.
pub(crate) fn apply(
    text: &str,
    file: &str,
    ctx: &Ctx<'_>,
    rules: &mut [Rule],
    errors: &mut Vec<RuleError>,
) -> Applied {
    let mut out = Applied::default();
    for line in super::logical_lines(text) {
        let (start, text) = match line {
            Ok(l) => l,
            Err(start) => {
                errors.push(err(
                    file,
                    start,
                    "line",
                    "the file ends inside a continued (`\\`) line".into(),
                ));
                continue;
            }
        };
        let parsed = match parse_line(&text) {
            Ok(l) => l,
            Err((field, m)) => {
                errors.push(err(file, start, field, m));
                continue;
            }
        };
        match apply_line(&parsed, ctx, rules) {
            Ok(0) => out.unknown.push((start, parsed.gid, parsed.sid)),
            Ok(_) => out.lines += 1,
            Err(m) => errors.push(err(file, start, "ip", m)),
        }
    }
    out
}

/// Applies one line; returns how many rules it names.
fn apply_line(l: &Line, ctx: &Ctx<'_>, rules: &mut [Rule]) -> Result<usize, String> {
    let one = l.sid != 0;
    let mut n = 0;
    for r in rules.iter_mut() {
        let named = if one {
            r.sid == l.sid && r.gid == l.gid
        } else {
            l.gid == 0 || r.gid == l.gid
        };
        if !named {
            continue;
        }
        n += 1;
        let has_own = r.threshold.is_some()
            || r.filter.is_some()
            || r.global.as_ref().is_some_and(|g| g.rate.is_some());
        match &l.what {
            What::Threshold(t) => {
                if one {
                    // Replaces the rule's thresholding: Suricata removes the last
                    // threshold or detection_filter (a rate_filter line is one).
                    if r.threshold.is_some() {
                        r.threshold = None;
                    } else if let Some(g) = r.global.as_mut().filter(|g| g.rate.is_some()) {
                        g.rate = None;
                    } else {
                        r.filter = None;
                    }
                    r.threshold = Some(*t);
                } else if !has_own {
                    r.threshold = Some(*t);
                }
            }
            What::Rate(rf) => {
                if !has_own {
                    r.global.get_or_insert_with(Default::default).rate = Some(*rf);
                }
            }
            What::SuppressAll => r.noalert = true,
            What::Suppress(track, ip) => {
                let addrs = parse_addr(ip, ctx, 0)?;
                r.global
                    .get_or_insert_with(Default::default)
                    .suppress
                    .push(Suppress {
                        track: *track,
                        addrs,
                    });
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "threshold_file_tests.rs"]
mod tests;
