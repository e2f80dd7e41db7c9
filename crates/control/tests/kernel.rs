//! Kernel tests: real iptables-restore/iptables-save against the real kernel, each inside a
//! fresh network namespace created for the test and deleted on drop (also on panic), so
//! the host's rules are never read or touched. They assert on iptables-save output.
//! They need root and panic without it, like relay-testbed: a kernel test that silently
//! passes without a kernel is worse than a red one.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use relay_control::{Backend, ControlError, Hook, IpVersion, QueueRule, RuleSet, Table, cleanup};

/// A network namespace owned by one test.
struct NetNs {
    name: String,
}

impl NetNs {
    /// A fresh namespace named `relayctl-{pid}-{counter}`.
    fn new() -> NetNs {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        assert!(
            is_root(),
            "relay-control kernel tests need root (network namespaces, iptables)"
        );
        let name = format!(
            "relayctl-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("run ip netns add");
        assert!(st.success(), "ip netns add {name} failed");
        NetNs { name }
    }

    fn backend(&self, family: IpVersion) -> Backend {
        Backend::system(family).in_netns(&self.name)
    }

    /// Runs a command in the namespace and returns stdout; panics on failure.
    fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ip netns exec");
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// iptables-save (or ip6tables-save) of the whole namespace, comment lines dropped.
    fn save(&self, family: IpVersion) -> String {
        let prog = match family {
            IpVersion::V4 => "iptables-save",
            IpVersion::V6 => "ip6tables-save",
        };
        strip_comments(&self.exec(&[prog]))
    }

    /// The `-A` lines of one table.
    fn rules(&self, family: IpVersion, table: &str) -> Vec<String> {
        let prog = match family {
            IpVersion::V4 => "iptables-save",
            IpVersion::V6 => "ip6tables-save",
        };
        self.exec(&[prog, "-t", table])
            .lines()
            .filter(|l| l.starts_with("-A "))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn strip_comments(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Removes `*table` blocks that hold only built-in chains with ACCEPT policy and no rules.
fn drop_empty_tables(save: &str) -> String {
    let mut out = String::new();
    let mut block = String::new();
    let mut empty = true;
    for line in save.lines() {
        block.push_str(line);
        block.push('\n');
        if line.starts_with("-A ") || (line.starts_with(':') && !line.contains(" ACCEPT ")) {
            empty = false;
        }
        if line == "COMMIT" {
            if !empty {
                out.push_str(&block);
            }
            block.clear();
            empty = true;
        }
    }
    out + &block
}

fn rule(hook: Hook, matches: Option<&str>, first: u16, last: u16) -> QueueRule {
    QueueRule {
        table: Table::Mangle,
        hook,
        families: vec![IpVersion::V4],
        matches: matches.map(str::to_owned),
        first_queue: first,
        last_queue: last,
        bypass: true,
        cpu_fanout: false,
        pre: Vec::new(),
    }
}

/// A forward chain with a single-queue rule and a balanced one.
fn forward_set() -> RuleSet {
    let mut balanced = rule(Hook::Forward, Some("-p tcp"), 4, 7);
    balanced.cpu_fanout = true;
    RuleSet::new(vec![
        rule(Hook::Forward, Some("-i lo -p udp --dport 5000"), 3, 3),
        balanced,
    ])
}

const FORWARD_CHAIN: [&str; 3] = [
    "-A RELAYD-FORWARD -m mark --mark 0x80000000/0x80000000 -j RETURN",
    "-A RELAYD-FORWARD -i lo -p udp -m udp --dport 5000 -j NFQUEUE --queue-num 3 --queue-bypass",
    "-A RELAYD-FORWARD -p tcp -j NFQUEUE --queue-balance 4:7 --queue-bypass --queue-cpu-fanout",
];

fn count(lines: &[String], wanted: &str) -> usize {
    lines.iter().filter(|l| *l == wanted).count()
}

#[test]
fn validate_names_the_rejected_rule() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    let mut rs = RuleSet::new(vec![
        rule(Hook::Forward, Some("-p udp --dport 5000"), 0, 0),
        rule(Hook::Forward, Some("-p udp --dport notaport"), 1, 1),
    ]);
    let err = rs.validate(&b).unwrap_err();
    match &err {
        ControlError::RuleRejected {
            index,
            family,
            stderr,
            ..
        } => {
            assert_eq!(*index, 1);
            assert_eq!(*family, IpVersion::V4);
            assert!(stderr.contains("notaport"), "{stderr}");
        }
        other => panic!("expected RuleRejected, got {other:?}"),
    }
    assert!(err.to_string().contains("queue rule 1 (ipv4)"), "{err}");

    rs.rules.truncate(1);
    rs.validate(&b).unwrap();

    // Tested in the hook's own chain, so hook-specific mistakes are caught too.
    rs.rules = vec![rule(Hook::Prerouting, Some("-o lo"), 0, 0)];
    assert!(matches!(
        rs.validate(&b),
        Err(ControlError::RuleRejected { index: 0, .. })
    ));
    // Validation never leaves anything behind.
    assert!(!ns.save(IpVersion::V4).contains("RELAYD"));
}

#[test]
fn install_is_idempotent_and_jumps_first() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    ns.exec(&[
        "iptables", "-t", "mangle", "-A", "FORWARD", "-p", "tcp", "-j", "ACCEPT",
    ]);
    let rs = forward_set();

    let first = rs.install(&b).unwrap();
    assert_eq!(first.jumps_added, 1);
    let after_one = ns.save(IpVersion::V4);
    let second = rs.install(&b).unwrap();
    assert_eq!(second.jumps_added, 0);
    let after_two = ns.save(IpVersion::V4);
    assert_eq!(after_one, after_two);

    let rules = ns.rules(IpVersion::V4, "mangle");
    assert_eq!(
        rules,
        [
            "-A FORWARD -j RELAYD-FORWARD",
            "-A FORWARD -p tcp -j ACCEPT",
            FORWARD_CHAIN[0],
            FORWARD_CHAIN[1],
            FORWARD_CHAIN[2],
        ]
    );
}

#[test]
fn install_repairs_duplicate_jumps_and_drops_stale_chains() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    let mut rs = forward_set();
    rs.rules.push(rule(Hook::Input, None, 9, 9));
    rs.install(&b).unwrap();
    // Someone (an older relayd) added a second jump.
    ns.exec(&[
        "iptables",
        "-t",
        "mangle",
        "-A",
        "FORWARD",
        "-j",
        "RELAYD-FORWARD",
    ]);
    assert!(ns.save(IpVersion::V4).contains(":RELAYD-INPUT"));

    // The input queue may re-send packets that FORWARD queues must see: copies in OUTPUT.
    assert!(ns.save(IpVersion::V4).contains(":RELAYD-OUTPUT"));

    // A reload drops the input hook (and so the copies) and changes the forward queue.
    rs.rules = vec![rule(Hook::Forward, None, 2, 2)];
    let report = rs.install(&b).unwrap();
    assert_eq!(
        report.removed.chains,
        [
            (Table::Mangle, "RELAYD-INPUT".into()),
            (Table::Mangle, "RELAYD-OUTPUT".into())
        ]
    );
    assert_eq!(report.removed.rules, 2);
    let rules = ns.rules(IpVersion::V4, "mangle");
    assert_eq!(
        rules,
        [
            "-A FORWARD -j RELAYD-FORWARD",
            FORWARD_CHAIN[0],
            "-A RELAYD-FORWARD -j NFQUEUE --queue-num 2 --queue-bypass",
        ]
    );
    assert!(!ns.save(IpVersion::V4).contains("RELAYD-INPUT"));
}

#[test]
fn remove_leaves_no_trace() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    // Nothing installed: fine.
    assert!(forward_set().remove(&b).unwrap().is_empty());

    let mut rs = forward_set();
    let mut raw = rule(Hook::Prerouting, Some("-p udp"), 0, 1);
    raw.table = Table::Raw;
    rs.rules.push(raw);
    rs.rules.push(rule(Hook::Postrouting, None, 5, 5));
    rs.install(&b).unwrap();
    let save = ns.save(IpVersion::V4);
    assert!(
        save.contains("-A PREROUTING -j RELAYD-PREROUTING"),
        "{save}"
    );
    assert!(
        save.contains("-A POSTROUTING -j RELAYD-POSTROUTING"),
        "{save}"
    );

    // A PREROUTING queue may re-send packets from a socket: the kernel walks them through
    // OUTPUT, where copies of the FORWARD queue rules see them.
    assert!(
        save.contains(
            "-A RELAYD-OUTPUT -p tcp -m mark --mark 0x40000000/0xc0000000 -j NFQUEUE --queue-balance 4:7"
        ),
        "{save}"
    );
    assert!(
        save.contains("-A RELAYD-PREROUTING -m mark ! --mark 0x0/0xc0000000 -j RETURN"),
        "{save}"
    );

    let report = rs.remove(&b).unwrap();
    assert_eq!(report.chains.len(), 4);
    assert_eq!(report.rules, 4);
    let save = ns.save(IpVersion::V4);
    assert!(!save.contains("RELAYD"), "{save}");
    let mangle = ns.exec(&["iptables-save", "-t", "mangle"]);
    assert!(!mangle.contains("RELAYD"), "{mangle}");
    assert!(rs.remove(&b).unwrap().is_empty());
}

#[test]
fn cleanup_after_crash_keeps_the_users_rules() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    let ipt = |args: &[&str]| {
        let mut full = vec!["iptables"];
        full.extend_from_slice(args);
        ns.exec(&full);
    };
    ipt(&["-t", "mangle", "-A", "FORWARD", "-p", "tcp", "-j", "ACCEPT"]);
    ipt(&["-t", "mangle", "-N", "MYCHAIN"]);
    ipt(&["-t", "mangle", "-A", "MYCHAIN", "-p", "udp", "-j", "RETURN"]);
    ipt(&["-t", "mangle", "-A", "FORWARD", "-j", "MYCHAIN"]);
    ipt(&["-A", "INPUT", "-p", "icmp", "-j", "ACCEPT"]);
    let before = ns.save(IpVersion::V4);

    let mut rs = forward_set();
    let mut raw = rule(Hook::Output, None, 0, 0);
    raw.table = Table::Raw;
    rs.rules.push(raw);
    rs.install(&b).unwrap();
    // The user also pointed one of their rules at relayd's chain; relayd then crashed.
    ipt(&[
        "-t",
        "mangle",
        "-A",
        "MYCHAIN",
        "-i",
        "lo",
        "-m",
        "comment",
        "--comment",
        "to \"relayd\" 'x'",
        "-j",
        "RELAYD-FORWARD",
    ]);
    assert_ne!(ns.save(IpVersion::V4), before);

    let report = cleanup("RELAYD", &b).unwrap();
    assert_eq!(report.chains.len(), 2);
    assert_eq!(report.rules, 3);
    let after = ns.save(IpVersion::V4);
    assert!(!after.contains("RELAYD"), "{after}");
    // Everything the user had is still there, in order, and nothing else changed. The one
    // leftover is the raw table itself (empty, ACCEPT policies): iptables created it for
    // relayd's chain, and relayd never deletes a table, as it cannot know who else uses it.
    assert_eq!(drop_empty_tables(&after), before);
    assert!(cleanup("RELAYD", &b).unwrap().is_empty());
}

#[test]
fn quoted_matches_round_trip() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    let rs = RuleSet::new(vec![rule(
        Hook::Output,
        Some(r#"-p udp -m comment --comment 'say "hi" \o/'"#),
        1,
        1,
    )]);
    rs.validate(&b).unwrap();
    rs.install(&b).unwrap();
    assert_eq!(rs.install(&b).unwrap().jumps_added, 0);
    let rules = ns.rules(IpVersion::V4, "mangle");
    assert_eq!(
        rules[2],
        r#"-A RELAYD-OUTPUT -p udp -m comment --comment "say \"hi\" \\o/" -j NFQUEUE --queue-num 1 --queue-bypass"#
    );
    assert_eq!(rules.len(), 3);
}

#[test]
fn ipv6_works_too() {
    let ns = NetNs::new();
    let b6 = ns.backend(IpVersion::V6);
    let mut rs = forward_set();
    for r in &mut rs.rules {
        r.families = vec![IpVersion::V6];
    }
    rs.validate(&b6).unwrap();
    rs.install(&b6).unwrap();
    rs.install(&b6).unwrap();
    let rules = ns.rules(IpVersion::V6, "mangle");
    assert_eq!(
        rules,
        [
            "-A FORWARD -j RELAYD-FORWARD",
            FORWARD_CHAIN[0],
            FORWARD_CHAIN[1],
            FORWARD_CHAIN[2],
        ]
    );
    // The IPv4 side got nothing (and installing it is a no-op).
    assert!(!ns.save(IpVersion::V4).contains("RELAYD"));
    assert!(
        rs.install(&ns.backend(IpVersion::V4))
            .unwrap()
            .chains
            .is_empty()
    );
    assert!(!ns.save(IpVersion::V4).contains("RELAYD"));

    rs.rules[1].matches = Some("-p udp --dport notaport".into());
    assert!(matches!(
        rs.validate(&b6),
        Err(ControlError::RuleRejected {
            index: 1,
            family: IpVersion::V6,
            ..
        })
    ));

    rs.remove(&b6).unwrap();
    assert!(!ns.save(IpVersion::V6).contains("RELAYD"));
}

#[test]
fn legacy_backend_works() {
    let ns = NetNs::new();
    let b = Backend::legacy(IpVersion::V4).in_netns(&ns.name);
    let rs = forward_set();
    rs.install(&b).unwrap();
    rs.install(&b).unwrap();
    let save = strip_comments(&ns.exec(&["iptables-legacy-save", "-t", "mangle"]));
    let rules: Vec<String> = save
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(str::to_owned)
        .collect();
    assert_eq!(count(&rules, "-A FORWARD -j RELAYD-FORWARD"), 1);
    assert_eq!(rules.len(), 4, "{save}");
    let report = cleanup("RELAYD", &b).unwrap();
    assert_eq!(report.chains.len(), 1);
    assert!(!ns.exec(&["iptables-legacy-save"]).contains("RELAYD"));
}

#[test]
fn output_copies_of_input_only_matches_install_on_both_backends() {
    // A FORWARD queue matching on the input side (`-m mac`, `-i`, `-m policy --dir in`)
    // beside a PREROUTING queue: its copy in OUTPUT leaves those matches out, so validation
    // (what `relayd check` runs) and installation both succeed on nft and legacy.
    let ns = NetNs::new();
    let mut raw = rule(Hook::Prerouting, Some("-p 137"), 0, 0);
    raw.table = Table::Raw;
    let rs = RuleSet::new(vec![
        raw,
        rule(
            Hook::Forward,
            Some(
                "-i lo -m mac --mac-source 00:11:22:33:44:55 -p udp -m policy --dir in --pol none",
            ),
            1,
            1,
        ),
    ]);
    for b in [
        ns.backend(IpVersion::V4),
        Backend::legacy(IpVersion::V4).in_netns(&ns.name),
    ] {
        rs.validate(&b).unwrap();
        rs.install(&b).unwrap();
        rs.remove(&b).unwrap();
    }
    assert!(!ns.save(IpVersion::V4).contains("RELAYD"));
}

#[test]
fn missing_and_unprivileged_tools_are_reported() {
    let ns = NetNs::new();
    let mut b = ns.backend(IpVersion::V4);
    b.save = "relayd-no-such-iptables-save".into();
    let err = forward_set().install(&b).unwrap_err();
    assert!(matches!(err, ControlError::ToolMissing { .. }), "{err:?}");

    let has_setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_setpriv {
        eprintln!("setpriv not installed: skipping the unprivileged part");
        return;
    }
    let dir = std::env::temp_dir().join(format!("relayctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("iptables-restore-as-nobody");
    std::fs::write(
        &script,
        "#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups iptables-restore \"$@\"\n",
    )
    .unwrap();
    Command::new("chmod")
        .arg("755")
        .arg(&script)
        .status()
        .unwrap();
    let mut b = ns.backend(IpVersion::V4);
    b.restore = script.to_string_lossy().into_owned();
    let err = forward_set().validate(&b).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(err, ControlError::NotPermitted { .. }), "{err:?}");
    assert!(err.to_string().contains("not permitted"), "{err}");
}

#[test]
fn cleanup_leaves_another_instance_with_a_longer_prefix_alone() {
    let ns = NetNs::new();
    let b = ns.backend(IpVersion::V4);
    forward_set().install(&b).unwrap();
    let mut other = forward_set();
    other.prefix = "RELAYD-B".into();
    other.install(&b).unwrap();
    let report = cleanup("RELAYD", &b).unwrap();
    assert_eq!(report.chains.len(), 1, "{report:?}");
    let save = ns.exec(&["iptables-save", "-t", "mangle"]);
    assert!(save.contains("-A FORWARD -j RELAYD-B-FORWARD"), "{save}");
    assert!(save.contains(":RELAYD-B-FORWARD"), "{save}");
    assert!(
        !save.contains("-j RELAYD-FORWARD") && !save.contains(":RELAYD-FORWARD "),
        "{save}"
    );
}
