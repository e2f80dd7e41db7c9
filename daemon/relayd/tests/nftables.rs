//! relayd beside a native nftables ruleset on the real kernel (issue 14, item 5).
//!
//! relayd installs its rules with `iptables-restore` (on nftables systems through the
//! kernel's compat layer, in the `ip mangle` table at priority -150). A native nftables
//! table of the operator's registers its own base chains on the same hooks at their own
//! priorities, and the kernel runs them in priority order: a chain below -150 sees a packet
//! before relayd's queue, a chain above it after relayd's verdict. This test shows both on
//! one forwarded UDP stream per port, and that relayd neither bypasses the operator's
//! drops nor touches the operator's table, running or stopping.
//! Needs root (as CI runs it).

#[path = "../../../tests/support/mod.rs"]
mod support;

use relay_testbed::{Node, line3};
use support::*;

/// The operator's table: a late forward chain (priority 0, the usual filter priority)
/// that counts port 7001 and drops port 7002, and an early one (priority -200, before
/// mangle) that drops port 7003.
const OPERATOR: &str = r#"
table inet operator {
    counter late_seen {}
    counter early_seen {}
    chain early {
        type filter hook forward priority -200; policy accept;
        udp dport 7001 counter name early_seen
        udp dport 7003 drop
    }
    chain late {
        type filter hook forward priority 0; policy accept;
        udp dport 7001 counter name late_seen
        udp dport 7002 drop
    }
}
"#;

const QUEUE: &str = r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp"
services = ["accept"]
"#;

fn nft(node: &Node, args: &str) -> String {
    let out = node.sh(&format!("nft {args}"));
    assert!(
        out.status.success(),
        "nft {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Packets counted by named counter `name` of the operator's table.
fn counted(node: &Node, name: &str) -> u64 {
    let text = nft(node, &format!("list counter inet operator {name}"));
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in:\n{text}"))
}

/// Packets relayd's queue 0 has handled so far.
fn queued(r: &Relayd) -> u64 {
    r.status().queues[0].packets
}

#[test]
fn coexists_with_a_native_nftables_ruleset() {
    let l = line3("nftables");
    let file = TempDir::new("nft");
    let rules = file.file("operator.nft", OPERATOR);
    nft(&l.relay, &format!("-f {}", rules.display()));
    let before = nft(&l.relay, "list table inet operator");

    let mut r = Relayd::start(&l.relay, QUEUE);
    const N: u64 = 200;

    // Port 7001: the early chain sees it, relayd queues and accepts it, the late chain
    // sees it after relayd's verdict, and it arrives.
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:7001"), N, 2000, 100);
    assert_eq!((sent, got), (N, N), "port 7001 through both\n{}", r.log());
    assert_eq!(counted(&l.relay, "early_seen"), N);
    assert_eq!(
        counted(&l.relay, "late_seen"),
        N,
        "the priority-0 chain must see what relayd accepted"
    );
    assert_eq!(queued(&r), N);

    // Port 7002: relayd accepts it, the operator's later chain still drops it. An
    // accept verdict ends only relayd's hook entry, not the operator's.
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:7002"), N, 2000, 100);
    assert_eq!((sent, got), (N, 0), "the operator's drop after relayd");
    assert_eq!(queued(&r), 2 * N, "relayd saw port 7002 before the drop");

    // Port 7003: dropped before mangle, so relayd never sees it.
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:7003"), N, 2000, 100);
    assert_eq!((sent, got), (N, 0), "the operator's drop before relayd");
    assert_eq!(
        queued(&r),
        2 * N,
        "relayd must not see what an earlier chain drops"
    );

    // relayd's rules and the operator's table side by side; stopping relayd removes its
    // own and leaves the operator's as it was.
    assert!(iptables_save(&l.relay).contains("RELAYD-FORWARD"));
    assert!(r.stop(libc::SIGTERM), "relayd exit\n{}", r.log());
    assert!(
        !iptables_save(&l.relay).contains("RELAYD"),
        "relayd left rules behind"
    );
    let after = nft(&l.relay, "list table inet operator");
    // The counters moved; everything else must be as the operator wrote it.
    let strip = |t: &str| {
        t.lines()
            .filter(|l| !l.trim_start().starts_with("packets "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        strip(&after),
        strip(&before),
        "relayd changed the operator's table"
    );
}
