//! From a configuration to the iptables rules relayd owns: the rule set, the backends
//! (iptables / ip6tables, system or legacy), and errors mapped back to the file.

use crate::config::{Config, ConfigError, ConfigErrors, IptablesFlavor, QueueSpec};
use relay_control::{
    Backend, ControlError, Hook, IpVersion, OwnedRule, PreRule, QueueRule, RuleSet, Table,
};
use relay_core::{CtMarkBits, MssClamp};

/// The rule set a configuration implies: one rule per `[[queue]]` entry in file order,
/// and the split proxy's TPROXY rules at the top of relayd's mangle PREROUTING chain.
pub fn ruleset(cfg: &Config) -> RuleSet {
    let ct = cfg.daemon.ct_mark_bits;
    RuleSet {
        prefix: cfg.daemon.chain_prefix.clone(),
        bypass_mark: cfg.daemon.bypass_mark,
        rules: cfg
            .queues
            .iter()
            .map(|q| QueueRule {
                table: q.table,
                hook: q.hook,
                families: q.families.clone(),
                matches: q.matches.clone(),
                first_queue: q.first,
                last_queue: q.last,
                bypass: q.queue.fail_open,
                cpu_fanout: q.cpu_fanout,
                pre: pre_rules(q, ct),
            })
            .collect(),
        owned: {
            let mut owned = tproxy_rules(cfg);
            owned.extend(ike_rules(cfg));
            owned
        },
    }
}

/// IKE and NAT-T traffic of relayd's own IKE daemon (`[ike.NAME]`) is never queued: an
/// encrypting queue whose match covers the peer would otherwise turn the IKE messages that
/// negotiate its SA into ESP under that SA, or drop them while it has none. In every
/// chain that has queue rules, UDP to (PREROUTING, INPUT) or from (OUTPUT, POSTROUTING)
/// port 500 of a local IKE address returns before them, and so does port 4500 when the
/// datagram starts with the non-ESP marker (four zero bytes, RFC 3948 2.2): ESP in UDP
/// on 4500 stays queueable for a decrypting service.
fn ike_rules(cfg: &Config) -> Vec<OwnedRule> {
    let mut hooks: Vec<(Table, Hook)> = cfg.queues.iter().map(|q| (q.table, q.hook)).collect();
    hooks.sort_by_key(|(t, h)| (t.as_str(), h.as_str()));
    hooks.dedup();
    let mut locals: Vec<std::net::IpAddr> = cfg.ike.iter().map(|c| c.conn.local).collect();
    locals.sort();
    locals.dedup();
    let mut out = Vec::new();
    for (table, hook) in hooks {
        let (addr, port) = match hook {
            Hook::Prerouting | Hook::Input => ("-d", "--dport"),
            Hook::Output | Hook::Postrouting => ("-s", "--sport"),
            _ => continue,
        };
        for a in &locals {
            let family = if a.is_ipv4() {
                IpVersion::V4
            } else {
                IpVersion::V6
            };
            let a = a.to_string();
            // The UDP payload's first word: after the IPv4 header (its length from IHL),
            // or after the fixed 40-byte IPv6 header (extension headers are not expected
            // on IKE).
            let marker = if family == IpVersion::V4 {
                "0>>22&0x3C@8=0"
            } else {
                "48=0"
            };
            let rules: [Vec<&str>; 2] = [
                vec![addr, &a, "-p", "udp", port, "500"],
                vec![
                    addr, &a, "-p", "udp", port, "4500", "-m", "u32", "--u32", marker,
                ],
            ];
            for r in rules {
                out.push(OwnedRule {
                    table,
                    hook,
                    family: Some(family),
                    args: r
                        .into_iter()
                        .chain(["-m", "comment", "--comment", "relayd-ike", "-j", "RETURN"])
                        .map(String::from)
                        .collect(),
                });
            }
        }
    }
    out
}

/// The rules left in place while the daemon drains its proxy on exit: the TPROXY rules
/// only, so that split connections still reach the proxy while new SYNs are no longer
/// queued (they pass natively).
pub fn drain_ruleset(cfg: &Config) -> RuleSet {
    let mut rs = ruleset(cfg);
    rs.rules.clear();
    rs
}

/// The TPROXY, CONNMARK and socket rules of the split proxy (see `relay_proxy::tproxy`),
/// per family. They sit before the bypass-mark skip: a SYN a `tcpsplit` queue repeats
/// with the divert mark also carries relayd's bypass mark.
fn tproxy_rules(cfg: &Config) -> Vec<OwnedRule> {
    let Some(t) = &cfg.tproxy else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &family in &t.families {
        for line in t.spec.mangle_rules("C", family) {
            let args: Vec<String> = line
                .strip_prefix("-A C ")
                .unwrap_or(&line)
                .split_whitespace()
                .map(String::from)
                .collect();
            out.push(OwnedRule {
                table: Table::Mangle,
                hook: Hook::Prerouting,
                family: Some(family),
                args,
            });
        }
    }
    out
}

/// What the queue's services need the kernel to do before the queue rule: the packet's
/// conntrack state in the mark bits `ct` (if a service reads it), and the smallest TCP
/// MSS clamp any of them asks for, per family.
fn pre_rules(q: &QueueSpec, ct: CtMarkBits) -> Vec<PreRule> {
    let mut out = offload_rules(q);
    if q.queue.conntrack {
        for (what, bit) in [
            (["--ctstate", "NEW,ESTABLISHED,RELATED"], ct.tracked),
            (["--ctstate", "ESTABLISHED"], ct.established),
            (["--ctstate", "RELATED"], ct.related),
            (["--ctdir", "REPLY"], ct.reply),
        ] {
            let mut args = [
                "-m",
                "conntrack",
                what[0],
                what[1],
                "-j",
                "MARK",
                "--or-mark",
            ]
            .map(String::from)
            .to_vec();
            args.push(format!("{bit:#x}"));
            out.extend(PreRule::with_match(None, q.matches.as_deref(), args));
        }
    }
    let clamps: Vec<MssClamp> = q
        .services
        .iter()
        .filter_map(|(_, s)| s.manifest().clamp_mss)
        .collect();
    for (family, mss) in [
        (IpVersion::V4, clamps.iter().map(|c| c.ipv4).min()),
        (IpVersion::V6, clamps.iter().map(|c| c.ipv6).min()),
    ] {
        if let Some(mss) = mss.filter(|_| q.families.contains(&family)) {
            out.extend(PreRule::clamp_mss(family, q.matches.as_deref(), mss));
        }
    }
    out
}

/// The comment on the skip rules of the queue entry whose first queue is `first`, by which
/// their counters are read (`offload.skipped_packets`).
pub fn offload_comment(first: u16) -> String {
    format!("relayd-offload-{first}")
}

/// The skip rules of an offloading queue, first before its queue rule (docs/offload.md).
///
/// First, for a connection carrying this queue's generation, two rules clear its
/// offload bits (all of `offload_mark`) so that the packet and the connection's next
/// ones are queued again: a TCP SYN (a new connection on a tuple whose old entry
/// conntrack kept: after the server's RST it lets the SYN through on it), and the
/// packets of an expected connection before its first reply (`--ctstate RELATED
/// --ctstatus EXPECTED`: the entry a helper's expectation made, which inherited its
/// master's mark). Then per direction, a packet whose connection carries this queue's
/// generation and that direction's bit, and which belongs to the connection itself
/// (NEW or ESTABLISHED: not an ICMP error RELATED to it, which conntrack gives the
/// flow's entry and which must be inspected), leaves relayd's chain with an accept, as
/// the queue's accept verdict would have let it go; first its mark gets back the bits
/// the chain's services set.
fn offload_rules(q: &QueueSpec) -> Vec<PreRule> {
    let Some(m) = q.queue.offload else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let ours = [
        "-m".to_string(),
        "connmark".into(),
        "--mark".into(),
        format!("{:#x}/{:#x}", m.generation, m.gen_mask),
        "-j".into(),
        "CONNMARK".into(),
        "--and-mark".into(),
        format!("{:#x}", !(m.orig | m.reply | m.gen_mask)),
    ];
    // Not narrowed by the queue's match: the generation is this queue's alone, and a
    // match that cannot be narrowed to TCP as written (`-p all`, `-p TCP`) must not
    // leave a reused tuple's SYN passing on the old entry.
    let mut args: Vec<String> = ["-p", "tcp", "--tcp-flags", "SYN", "SYN"]
        .map(String::from)
        .to_vec();
    args.extend(ours.iter().cloned());
    out.push(PreRule { family: None, args });
    let mut args: Vec<String> = [
        "-m",
        "conntrack",
        "--ctstate",
        "RELATED",
        "--ctstatus",
        "EXPECTED",
    ]
    .map(String::from)
    .to_vec();
    args.extend(ours.iter().cloned());
    out.extend(PreRule::with_match(None, q.matches.as_deref(), args));
    for (dir, bit) in [("ORIGINAL", m.orig), ("REPLY", m.reply)] {
        let matched = [
            "-m".to_string(),
            "conntrack".into(),
            "--ctstate".into(),
            "NEW,ESTABLISHED".into(),
            "--ctdir".into(),
            dir.into(),
            "-m".into(),
            "connmark".into(),
            "--mark".into(),
            format!("{:#x}/{:#x}", m.generation | bit, m.gen_mask | bit),
        ];
        if m.restore != 0 {
            let mut args = matched.to_vec();
            args.extend(
                [
                    "-j",
                    "CONNMARK",
                    "--restore-mark",
                    "--nfmask",
                    &format!("{:#x}", m.restore),
                    "--ctmask",
                    &format!("{:#x}", m.restore),
                ]
                .map(String::from),
            );
            out.extend(PreRule::with_match(None, q.matches.as_deref(), args));
        }
        let mut args = matched.to_vec();
        args.extend(
            [
                "-m",
                "comment",
                "--comment",
                &offload_comment(q.first),
                "-j",
                "ACCEPT",
            ]
            .map(String::from),
        );
        out.extend(PreRule::with_match(None, q.matches.as_deref(), args));
    }
    // Where NAT may have run before the hook: the packets whose destination it changed
    // (DNAT in the original direction, a de-SNAT in the reply) get the NAT bit, the
    // only ones whose update may be retried with the tuple turned round. Before NAT
    // (PREROUTING, mangle OUTPUT), every packet of a translated connection gets it: its
    // two directions are not each other's tuple turned round there, and it is never
    // offloaded.
    let nat: &[&[&str]] = if m.turned {
        &[
            &["--ctdir", "ORIGINAL", "--ctstate", "DNAT"],
            &["--ctdir", "REPLY", "--ctstate", "SNAT"],
        ]
    } else {
        &[&["--ctstate", "SNAT,DNAT"]]
    };
    for matched in nat {
        let mut args = vec!["-m".to_string(), "conntrack".into()];
        args.extend(matched.iter().map(|a| a.to_string()));
        args.extend(["-j".into(), "MARK".into(), "--or-mark".into()]);
        args.push(format!("{:#x}", m.nat_mark()));
        out.extend(PreRule::with_match(None, q.matches.as_deref(), args));
    }
    out
}

/// The backend for `family` in the configured flavour.
pub fn backend(flavor: IptablesFlavor, family: IpVersion) -> Backend {
    match flavor {
        IptablesFlavor::Auto => Backend::system(family),
        IptablesFlavor::Legacy => Backend::legacy(family),
    }
}

/// The families any queue (or the split proxy's diversion) uses.
pub fn families(cfg: &Config) -> Vec<IpVersion> {
    [IpVersion::V4, IpVersion::V6]
        .into_iter()
        .filter(|f| {
            cfg.queues.iter().any(|q| q.families.contains(f))
                || cfg.tproxy.as_ref().is_some_and(|t| t.families.contains(f))
        })
        .collect()
}

/// The exact iptables-restore input `relayd run` installs, per family, each preceded by
/// a comment line naming the command it is fed to.
pub fn restore_text(cfg: &Config) -> Result<String, ControlError> {
    let rs = ruleset(cfg);
    let mut out = String::new();
    for f in families(cfg) {
        let b = backend(cfg.daemon.iptables, f);
        out.push_str(&format!("# {} -w --noflush\n", b.restore));
        out.push_str(&rs.restore_text(f)?);
    }
    if let Some(t) = &cfg.tproxy {
        out.push_str("# the split proxy's local delivery (ip rule and route), both families\n");
        for f in IpVersion::ALL {
            for c in t.spec.routing_commands(f) {
                out.push_str(&format!("# ip {}\n", c.join(" ")));
            }
        }
    }
    Ok(out)
}

/// Maps a control error about rule `index` back to the queue entry and field it came from.
pub fn to_config_error(cfg: &Config, e: &ControlError) -> Option<ConfigError> {
    let (index, message, field) = match e {
        ControlError::RuleRejected {
            index,
            family,
            program,
            stderr,
            ..
        } => (
            *index,
            format!("rejected by {program} ({family}): {stderr}"),
            "match",
        ),
        ControlError::BadMatch { index, error } => (*index, error.to_string(), "match"),
        ControlError::InvalidRule { index, reason } => (*index, reason.clone(), "num"),
        _ => return None,
    };
    let q = cfg.queues.get(index)?;
    Some(ConfigError {
        file: cfg.path.clone(),
        line: if field == "match" {
            q.match_line
        } else {
            q.line
        },
        column: 1,
        field: format!("queue[{}].{field}", q.index),
        message,
    })
}

/// Checks the rules with `iptables-restore --test`. `Ok(Some(warning))` if the check
/// could not run (tool missing, not root): the configuration may still be fine.
pub fn validate(cfg: &Config) -> Result<Option<String>, ConfigErrors> {
    let rs = ruleset(cfg);
    let fail = |e: ControlError| match to_config_error(cfg, &e) {
        Some(ce) => Err(ConfigErrors(vec![ce])),
        None => Ok(Some(e.to_string())),
    };
    if let Err(e) = rs.check() {
        return fail(e);
    }
    for f in families(cfg) {
        if let Err(e) = rs.validate(&backend(cfg.daemon.iptables, f)) {
            return fail(e);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offloading_queue_skips_its_offloaded_flows_first() {
        let cfg = crate::config::test_util::parsed(
            "[service.m]\nkind = \"mark\"\nmark = \"0x20\"\nmask = \"0xff\"\n\
             [[queue]]\nnum = 3\nhook = \"forward\"\nmatch = \"-p udp\"\n\
             services = [\"m\", \"accept\"]\noffload = true\n\
             [[queue]]\nnum = 4\nhook = \"forward\"\nservices = [\"accept\"]\n",
        );
        let text = ruleset(&cfg).restore_text(IpVersion::V4).unwrap();
        let want = "-A RELAYD-FORWARD -p udp -m conntrack --ctstate RELATED --ctstatus \
                    EXPECTED -m connmark --mark 0x40000/0xfc0000 -j CONNMARK --and-mark \
                    0xff00ffff\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctstate NEW,ESTABLISHED --ctdir \
                    ORIGINAL -m connmark --mark 0x50000/0xfd0000 -j CONNMARK --restore-mark \
                    --nfmask 0x20 --ctmask 0x20\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctstate NEW,ESTABLISHED --ctdir \
                    ORIGINAL -m connmark --mark 0x50000/0xfd0000 -m comment --comment \
                    relayd-offload-3 -j ACCEPT\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctstate NEW,ESTABLISHED --ctdir \
                    REPLY -m connmark --mark 0x60000/0xfe0000 -j CONNMARK --restore-mark \
                    --nfmask 0x20 --ctmask 0x20\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctstate NEW,ESTABLISHED --ctdir \
                    REPLY -m connmark --mark 0x60000/0xfe0000 -m comment --comment \
                    relayd-offload-3 -j ACCEPT\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctdir ORIGINAL --ctstate DNAT -j \
                    MARK --or-mark 0x10000\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctdir REPLY --ctstate SNAT -j MARK \
                    --or-mark 0x10000\n\
                    -A RELAYD-FORWARD -p udp -m conntrack --ctstate NEW,ESTABLISHED,RELATED";
        assert!(text.contains(want), "{text}");
        // A queue without offload has no skip rule; every offloading queue a SYN rule.
        assert_eq!(text.matches("connmark").count(), 6, "{text}");
    }

    /// A TCP SYN on a connection of the queue's generation loses its offload bits
    /// first, whatever the queue's match says of the protocol (`-p all`, `-p TCP`, a UDP
    /// match: the generation is the queue's alone, and a match relayd cannot narrow must
    /// not leave a reused tuple's SYN passing on the old entry).
    #[test]
    fn a_tcp_syn_clears_the_offload_bits_before_the_skip_rules() {
        let w = "-A RELAYD-FORWARD -p tcp --tcp-flags SYN SYN";
        for (matches, want) in [
            ("", Some(w)),
            ("match = \"-p tcp --dport 80\"\n", Some(w)),
            ("match = \"! -p udp\"\n", Some(w)),
            ("match = \"-p all\"\n", Some(w)),
            ("match = \"-p TCP\"\n", Some(w)),
            ("match = \"-p udp\"\n", Some(w)),
        ] {
            let cfg = crate::config::test_util::parsed(&format!(
                "[[queue]]\nnum = 3\nhook = \"forward\"\n{matches}services = [\"accept\"]\n\
                 family = \"both\"\noffload = true\n"
            ));
            // IPv6 alike (ip6tables).
            let text = ruleset(&cfg).restore_text(IpVersion::V6).unwrap();
            let syn = text.lines().find(|l| l.contains("--tcp-flags SYN SYN"));
            match want {
                Some(w) => {
                    let syn = syn.unwrap_or_else(|| panic!("no SYN rule in {text}"));
                    assert_eq!(
                        syn,
                        format!(
                            "{w} -m connmark --mark 0x40000/0xfc0000 -j CONNMARK --and-mark \
                             0xff00ffff"
                        ),
                        "{text}"
                    );
                    // Before the skip rules.
                    let at = text.find(syn).unwrap();
                    assert!(at < text.find("relayd-offload-3").unwrap(), "{text}");
                }
                None => assert_eq!(syn, None, "{text}"),
            }
        }
    }

    /// Before NAT every packet of a translated connection gets the NAT bit; after it,
    /// only those whose destination it changed.
    #[test]
    fn the_nat_bit_rules_depend_on_the_hook() {
        for (hook, table, want) in [
            (
                "prerouting",
                "mangle",
                &["-m conntrack --ctstate SNAT,DNAT -j MARK --or-mark 0x10000"][..],
            ),
            (
                "output",
                "mangle",
                &["-m conntrack --ctstate SNAT,DNAT -j MARK --or-mark 0x10000"][..],
            ),
            (
                "postrouting",
                "mangle",
                &[
                    "-m conntrack --ctdir ORIGINAL --ctstate DNAT -j MARK --or-mark 0x10000",
                    "-m conntrack --ctdir REPLY --ctstate SNAT -j MARK --or-mark 0x10000",
                ][..],
            ),
            (
                "forward",
                "mangle",
                &[
                    "-m conntrack --ctdir ORIGINAL --ctstate DNAT -j MARK --or-mark 0x10000",
                    "-m conntrack --ctdir REPLY --ctstate SNAT -j MARK --or-mark 0x10000",
                ][..],
            ),
        ] {
            let cfg = crate::config::test_util::parsed(&format!(
                "[[queue]]\nnum = 3\nhook = \"{hook}\"\ntable = \"{table}\"\n\
                 services = [\"accept\"]\noffload = true\n"
            ));
            let text = ruleset(&cfg).restore_text(IpVersion::V4).unwrap();
            let got: Vec<&str> = text
                .lines()
                .filter(|l| l.ends_with("--or-mark 0x10000"))
                .map(|l| l.split_once(' ').unwrap().1.split_once(' ').unwrap().1)
                .collect();
            assert_eq!(got, want, "{hook} {table}: {text}");
        }
    }

    #[test]
    fn ike_traffic_returns_before_the_queues() {
        let psk = crate::config::test_util::psk_file("rules", "0x5ce1e7a5ecf1c6d1d4e95d26b6c42c1b");
        let cfg = crate::config::test_util::parsed(&format!(
            "[[queue]]\nnum = 0\ntable = \"raw\"\nhook = \"prerouting\"\nservices = [\"accept\"]\n\
             [[queue]]\nnum = 1\nhook = \"output\"\nservices = [\"accept\"]\n\
             [ike.b]\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.7\"\npsk_file = \"{}\"\n",
            psk.display()
        ));
        let _ = std::fs::remove_file(&psk);
        let rs = ruleset(&cfg);
        let lines: Vec<String> = rs
            .owned
            .iter()
            .map(|r| format!("{:?} {:?} {}", r.table, r.hook, r.args.join(" ")))
            .collect();
        let comment = "-m comment --comment relayd-ike -j RETURN";
        for want in [
            format!("Raw Prerouting -d 192.0.2.1 -p udp --dport 500 {comment}"),
            format!(
                "Raw Prerouting -d 192.0.2.1 -p udp --dport 4500 -m u32 --u32 0>>22&0x3C@8=0 {comment}"
            ),
            format!("Mangle Output -s 192.0.2.1 -p udp --sport 500 {comment}"),
        ] {
            assert!(lines.contains(&want), "no {want:?} in {lines:#?}");
        }
        // Only in chains that queue: nothing in, say, mangle FORWARD.
        assert_eq!(lines.len(), 4, "{lines:#?}");
    }
}
