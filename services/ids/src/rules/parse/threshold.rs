//! The values of the thresholding keywords, with Suricata 8's grammar
//! (src/detect-threshold.c, src/detect-detection-filter.c): `threshold`,
//! `detection_filter` (with `unique_on`) and relayd's own `rate`.
//!
//! What is accepted, as Suricata accepts it:
//! - `threshold`: the four settings `type`, `track`, `count` and either `seconds` (types
//!   `limit`, `threshold`, `both`) or `multiplier` (type `backoff`), each once, in any
//!   order, `key value` separated by commas (a trailing comma is allowed, as Suricata's
//!   unanchored pattern allows it). `backoff` needs `track by_flow`, `count` 1..=65535 and
//!   `multiplier` 2..=65535, and refuses `seconds`.
//! - `detection_filter`: `track`, `count` and `seconds`, each once, in any order, then
//!   optionally `unique_on src_port|dst_port`, which must come last; only on `tcp` or `udp`
//!   rules (rules with ports).
//! - `track` is `by_src`, `by_dst`, `by_both`, `by_rule` or `by_flow` for all three keywords
//!   (Suricata documents all five for `detection_filter`).
//!
//! Where relayd is stricter: `count` and `seconds` must be positive (Suricata takes 0 for
//! `threshold`, with degenerate results), numbers are plain digits, and settings after the
//! fourth (which Suricata's unanchored pattern ignores) are refused rather than ignored.

use super::*;

/// Splits `k v, k v, ...` into its pairs, each key one of `keys` and given once. One empty
/// part at the end (a trailing comma) is skipped if `trailing_comma`.
fn key_values<'a>(
    v: &'a str,
    keys: &[&str],
    trailing_comma: bool,
) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut parts: Vec<&str> = v.split(',').collect();
    if trailing_comma && parts.len() > 1 && parts.last().is_some_and(|p| p.trim().is_empty()) {
        parts.pop();
    }
    let mut out: Vec<(&str, &str)> = Vec::with_capacity(parts.len());
    for part in parts {
        let mut it = part.split_whitespace();
        let (Some(k), Some(val), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("expected `key value`, got `{}`", part.trim()));
        };
        if !keys.contains(&k) {
            return Err(format!(
                "unknown setting `{k}` (expected {})",
                keys.join(", ")
            ));
        }
        if out.iter().any(|(x, _)| *x == k) {
            return Err(format!("`{k}` given twice"));
        }
        out.push((k, val));
    }
    Ok(out)
}

/// The value of `key` among `kv`, if given.
fn get<'a>(kv: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    kv.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The value of `key` among `kv`, which must be given.
fn need<'a>(kv: &[(&str, &'a str)], key: &str) -> Result<&'a str, String> {
    get(kv, key).ok_or_else(|| format!("missing `{key}`"))
}

/// A number of plain digits, at least 1.
pub(super) fn positive(v: &str, what: &str) -> Result<u32, String> {
    Some(v)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{what} must be a positive number, got `{v}`"))
}

/// `by_src`, `by_dst`, `by_both`, `by_rule` or `by_flow`.
pub(super) fn parse_track(v: &str) -> Result<Track, String> {
    Ok(match v {
        "by_src" => Track::Src,
        "by_dst" => Track::Dst,
        "by_both" => Track::Both,
        "by_rule" => Track::Rule,
        "by_flow" => Track::Flow,
        _ => {
            return Err(format!(
                "track is by_src, by_dst, by_both, by_rule or by_flow, not `{v}`"
            ));
        }
    })
}

/// `threshold: type T, track K, count C, seconds S` or
/// `threshold: type backoff, track by_flow, count C, multiplier M`, in any order.
pub(super) fn parse_threshold(v: &str) -> Result<Threshold, String> {
    let kv = key_values(
        v,
        &["type", "track", "count", "seconds", "multiplier"],
        true,
    )?;
    let ty = need(&kv, "type")?;
    let track = parse_track(need(&kv, "track")?)?;
    let count = positive(need(&kv, "count")?, "count")?;
    if ty == "backoff" {
        if get(&kv, "seconds").is_some() {
            return Err(
                "`seconds` does not go with `type backoff` (it counts a flow's matches, with no interval): use `multiplier`"
                    .into(),
            );
        }
        let m = positive(need(&kv, "multiplier")?, "multiplier")?;
        if count > 65535 {
            return Err(format!("`count` of type backoff is 1..65535, not {count}"));
        }
        if !(2..=65535).contains(&m) {
            return Err(format!("`multiplier` is 2..65535, not {m}"));
        }
        if track != Track::Flow {
            return Err("`type backoff` needs `track by_flow`".into());
        }
        return Ok(Threshold {
            kind: ThresholdKind::Backoff { multiplier: m },
            track,
            count,
            seconds: 0,
        });
    }
    let kind = match ty {
        "limit" => ThresholdKind::Limit,
        "threshold" => ThresholdKind::Threshold,
        "both" => ThresholdKind::Both,
        t => {
            return Err(format!(
                "threshold type is limit, threshold, both or backoff, not `{t}`"
            ));
        }
    };
    if get(&kv, "multiplier").is_some() {
        return Err(format!(
            "`multiplier` goes only with `type backoff`, not `type {ty}`"
        ));
    }
    Ok(Threshold {
        kind,
        track,
        count,
        seconds: positive(need(&kv, "seconds")?, "seconds")?,
    })
}

/// `detection_filter: track K, count N, seconds S[, unique_on src_port|dst_port]`, the
/// first three in any order. `ported` says whether the rule's protocol has ports (tcp or
/// udp), which `unique_on` needs.
pub(super) fn parse_detection_filter(v: &str, ported: bool) -> Result<DetectionFilter, String> {
    let kv = key_values(v, &["track", "count", "seconds", "unique_on"], false)?;
    let unique_on = match kv.iter().position(|(k, _)| *k == "unique_on") {
        None => None,
        Some(i) if i + 1 != kv.len() => {
            return Err("`unique_on` comes last, after track, count and seconds".into());
        }
        Some(i) => {
            let u = match kv.get(i).map(|(_, v)| *v) {
                Some("src_port") => UniqueOn::SrcPort,
                Some("dst_port") => UniqueOn::DstPort,
                u => {
                    return Err(format!(
                        "`unique_on` is src_port or dst_port, not `{}`",
                        u.unwrap_or("")
                    ));
                }
            };
            if !ported {
                return Err("`unique_on` needs a tcp or udp rule (a protocol with ports)".into());
            }
            Some(u)
        }
    };
    Ok(DetectionFilter {
        track: parse_track(need(&kv, "track")?)?,
        count: positive(need(&kv, "count")?, "count")?,
        seconds: positive(need(&kv, "seconds")?, "seconds")?,
        unique_on,
    })
}

/// `rate:N/unit[, burst B][, track by_x]`; unit s, m or h. The burst defaults to N.
pub(super) fn parse_rate(v: &str) -> Result<Rate, String> {
    let mut parts = v.split(',');
    let head = parts.next().unwrap_or("").trim();
    let (n, unit) = head
        .split_once('/')
        .ok_or_else(|| format!("expected `N/s`, `N/m` or `N/h`, got `{head}`"))?;
    let n = positive(n.trim(), "rate")?;
    let secs = match unit.trim() {
        "s" | "sec" | "second" => 1.0,
        "m" | "min" | "minute" => 60.0,
        "h" | "hour" => 3600.0,
        u => return Err(format!("rate unit is s, m or h, not `{u}`")),
    };
    let mut rate = Rate {
        track: Track::Rule,
        per_sec: n as f64 / secs,
        burst: n as f64,
    };
    for p in parts {
        let mut it = p.split_whitespace();
        match (it.next(), it.next(), it.next()) {
            (Some("burst"), Some(b), None) => rate.burst = positive(b, "burst")? as f64,
            (Some("track"), Some(t), None) => rate.track = parse_track(t)?,
            _ => {
                return Err(format!(
                    "expected `burst N` or `track by_x`, got `{}`",
                    p.trim()
                ));
            }
        }
    }
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn th(v: &str) -> Threshold {
        match parse_threshold(v) {
            Ok(t) => t,
            Err(e) => panic!("`{v}`: {e}"),
        }
    }

    fn th_err(v: &str) -> String {
        match parse_threshold(v) {
            Ok(t) => panic!("`{v}` parsed as {t:?}"),
            Err(e) => e,
        }
    }

    fn df(v: &str) -> DetectionFilter {
        match parse_detection_filter(v, true) {
            Ok(f) => f,
            Err(e) => panic!("`{v}`: {e}"),
        }
    }

    fn df_err(v: &str, ported: bool) -> String {
        match parse_detection_filter(v, ported) {
            Ok(f) => panic!("`{v}` parsed as {f:?}"),
            Err(e) => e,
        }
    }

    /// A whole rule through the parser, as a rules file would give it.
    fn rule(s: &str) -> Result<Rule, PErr> {
        let vars = BTreeMap::new();
        let classes = Classes::default();
        parse_rule(
            s,
            &Arc::from("t.rules"),
            1,
            &Ctx {
                vars: &vars,
                classes: &classes,
            },
        )
    }

    #[test]
    fn threshold_forms_in_any_order() {
        let want = Threshold {
            kind: ThresholdKind::Limit,
            track: Track::Dst,
            count: 10,
            seconds: 60,
        };
        // Suricata's ThresholdTestParse01 and 03.
        assert_eq!(th("type limit,track by_dst,count 10,seconds 60"), want);
        assert_eq!(th("track by_dst, type limit, seconds 60, count 10"), want);
        assert_eq!(
            th("  seconds 60 ,count   10, track by_dst,type limit,"),
            want
        );
        for (ty, kind) in [
            ("threshold", ThresholdKind::Threshold),
            ("both", ThresholdKind::Both),
        ] {
            assert_eq!(
                th(&format!("count 10, track by_dst, seconds 60, type {ty}")).kind,
                kind
            );
        }
        for (tr, track) in [
            ("by_src", Track::Src),
            ("by_both", Track::Both),
            ("by_rule", Track::Rule),
            ("by_flow", Track::Flow),
        ] {
            assert_eq!(
                th(&format!("type limit, track {tr}, count 1, seconds 3600")).track,
                track
            );
        }
    }

    #[test]
    fn backoff_forms() {
        // Suricata's ThresholdTestParse08.
        assert_eq!(
            th("count 10, track by_flow, multiplier 2, type backoff"),
            Threshold {
                kind: ThresholdKind::Backoff { multiplier: 2 },
                track: Track::Flow,
                count: 10,
                seconds: 0,
            }
        );
        let t = th("type backoff, track by_flow, count 1, multiplier 10000");
        assert_eq!(t.kind, ThresholdKind::Backoff { multiplier: 10000 });
        assert_eq!(t.count, 1);
        assert_eq!(
            th("type backoff, track by_flow, count 65535, multiplier 65535").count,
            65535
        );
    }

    #[test]
    fn threshold_refusals_name_the_key() {
        let cases = [
            // Suricata's ThresholdTestParse02 and 04.
            (
                "type any,track by_dst,count 10,seconds 60",
                "threshold type",
            ),
            (
                "count 10, track by_dst, seconds 60, type both, count 10",
                "`count` given twice",
            ),
            ("type limit, track by_src, count 1", "missing `seconds`"),
            ("type limit, track by_src, seconds 1", "missing `count`"),
            ("track by_src, count 1, seconds 1", "missing `type`"),
            ("type limit, count 1, seconds 1", "missing `track`"),
            ("type limit, track by_ip, count 1, seconds 1", "track is"),
            ("type limit, track by_src, count 0, seconds 1", "count must"),
            (
                "type limit, track by_src, count +1, seconds 1",
                "count must",
            ),
            (
                "type limit, track by_src, count 1, seconds 0",
                "seconds must",
            ),
            (
                "type limit, track by_src, count 1, seconds 1, rate 3",
                "`rate`",
            ),
            ("type limit track by_src, count 1, seconds 1", "key value"),
            ("type limit, , count 1, seconds 1", "key value"),
            (
                "type limit, track by_src, count 1, multiplier 2",
                "`multiplier` goes only with `type backoff`",
            ),
            (
                "type limit, track by_src, count 1, seconds 5, multiplier 2",
                "`multiplier` goes only",
            ),
            (
                "type backoff, track by_flow, count 1, seconds 60",
                "`seconds` does not go with `type backoff`",
            ),
            (
                "type backoff, track by_flow, count 1, multiplier 2, seconds 60",
                "`seconds` does not go",
            ),
            (
                "type backoff, track by_flow, count 1",
                "missing `multiplier`",
            ),
            (
                "type backoff, track by_src, count 1, multiplier 2",
                "needs `track by_flow`",
            ),
            (
                "type backoff, track by_flow, count 1, multiplier 1",
                "`multiplier` is 2..65535",
            ),
            (
                "type backoff, track by_flow, count 1, multiplier 65536",
                "`multiplier` is 2..65535",
            ),
            (
                "type backoff, track by_flow, count 65536, multiplier 2",
                "`count` of type backoff is 1..65535",
            ),
            (
                "type backoff, track by_flow, count 0, multiplier 2",
                "count must",
            ),
        ];
        for (v, want) in cases {
            let e = th_err(v);
            assert!(e.contains(want), "`{v}`: `{e}` lacks `{want}`");
        }
    }

    #[test]
    fn detection_filter_forms() {
        // Suricata's DetectDetectionFilterTestParse01, and the keys in any order.
        let want = DetectionFilter {
            track: Track::Dst,
            count: 10,
            seconds: 60,
            unique_on: None,
        };
        assert_eq!(df("track by_dst,count 10,seconds 60"), want);
        assert_eq!(df(" seconds 60 , count 10 , track by_dst "), want);
        assert_eq!(
            df("track by_src, count 3, seconds 60, unique_on src_port").unique_on,
            Some(UniqueOn::SrcPort)
        );
        assert_eq!(
            df("count 3, seconds 60, track by_dst, unique_on dst_port").unique_on,
            Some(UniqueOn::DstPort)
        );
        for (tr, track) in [
            ("by_src", Track::Src),
            ("by_both", Track::Both),
            ("by_rule", Track::Rule),
            ("by_flow", Track::Flow),
        ] {
            assert_eq!(
                df(&format!("track {tr}, count 1, seconds 3600")).track,
                track
            );
        }
    }

    #[test]
    fn detection_filter_refusals_name_the_key() {
        let cases = [
            ("track by_src, count 3", true, "missing `seconds`"),
            ("track by_src, seconds 3", true, "missing `count`"),
            ("count 3, seconds 3", true, "missing `track`"),
            ("track by_src, count 0, seconds 3", true, "count must"),
            ("track by_src, count 3, seconds 0", true, "seconds must"),
            (
                "track by_src, count 3, seconds 3, count 4",
                true,
                "`count` given twice",
            ),
            (
                "track by_src, count 3, seconds 3, type limit",
                true,
                "unknown setting `type`",
            ),
            // Suricata's pattern ends with `$`: no trailing comma.
            ("track by_src, count 3, seconds 3,", true, "key value"),
            (
                "track by_src, unique_on src_port, count 3, seconds 3",
                true,
                "`unique_on` comes last",
            ),
            (
                "track by_src, count 3, seconds 3, unique_on proto",
                true,
                "`unique_on` is src_port or dst_port",
            ),
            (
                "track by_src, count 3, seconds 3, unique_on dst_port",
                false,
                "`unique_on` needs a tcp or udp rule",
            ),
        ];
        for (v, ported, want) in cases {
            let e = df_err(v, ported);
            assert!(e.contains(want), "`{v}`: `{e}` lacks `{want}`");
        }
    }

    #[test]
    fn rate_forms() {
        let r = parse_rate("10/s, burst 20, track by_flow").unwrap();
        assert_eq!((r.per_sec, r.burst, r.track), (10.0, 20.0, Track::Flow));
        let r = parse_rate("60/m").unwrap();
        assert_eq!((r.per_sec, r.burst, r.track), (1.0, 60.0, Track::Rule));
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("5/d").is_err());
        assert!(parse_rate("5/s, track by_port").is_err());
    }

    #[test]
    fn rules_carry_the_keywords() {
        let r = rule(
            "alert tcp any any -> any any (threshold:type backoff, track by_flow, count 3, multiplier 2; sid:1;)",
        )
        .unwrap();
        assert_eq!(
            r.threshold.map(|t| t.kind),
            Some(ThresholdKind::Backoff { multiplier: 2 })
        );
        let r = rule(
            "alert udp any any -> any any (detection_filter: track by_dst, count 3, seconds 60, unique_on dst_port; sid:2;)",
        )
        .unwrap();
        assert_eq!(r.filter.and_then(|f| f.unique_on), Some(UniqueOn::DstPort));
        // `unique_on` needs ports: refused on ip and icmp rules, naming the keyword.
        for proto in ["ip", "icmp"] {
            let e = rule(&format!(
                "alert {proto} any any -> any any (detection_filter: track by_src, count 1, seconds 60, unique_on src_port; sid:3;)"
            ))
            .unwrap_err();
            assert_eq!(e.0.as_deref(), Some("detection_filter"));
            assert!(e.1.contains("unique_on"), "{}", e.1);
        }
        let e = rule(
            "alert tcp any any -> any any (threshold: type backoff, track by_src, count 1, multiplier 2; sid:4;)",
        )
        .unwrap_err();
        assert_eq!(e.0.as_deref(), Some("threshold"));
        let r =
            rule("ratelimit tcp any any -> any any (rate: 5/s, track by_flow; sid:5;)").unwrap();
        assert_eq!(r.rate.map(|r| r.track), Some(Track::Flow));
    }
}
