//! IKEv2 on the real kernel: strongSwan's charon as the reference peer (tests/support/
//! strongswan.rs), first against itself to prove the harness, then against relayd.
//! Needs root; the strongSwan tests are skipped with a message when charon is missing.

mod support;

use relay_testbed::line4;
use std::time::Duration;
use support::strongswan::{self, Charon, Conn};
use support::*;

/// Two charons, one on each relay of `src -- comp -- decomp -- dst`, protecting
/// 10.0.1.0/24 <-> 10.0.3.0/24 in tunnel mode: the CHILD_SA comes up, pings and a TCP
/// transfer arrive intact, and the middle link carries nothing but ESP in UDP.
#[test]
fn charon_to_charon_carries_traffic() {
    if !strongswan::require("charon_to_charon_carries_traffic") {
        return;
    }
    let l = line4("ike-charon-pair");
    let conn = Conn::new("10.0.2.1", "10.0.2.2", "10.0.1.0/24", "10.0.3.0/24");
    let a = Charon::start(&l.comp, &conn);
    let b = Charon::start(&l.decomp, &conn.mirror());
    a.route_via_tunnel("10.0.3.0/24");
    b.route_via_tunnel("10.0.1.0/24");
    // Plain packets from the site crossing the middle link would mean a bypass.
    count_arrivals_with("iptables", &l.decomp, "eth0", &["-s", "10.0.1.1"], "plain");
    count_arrivals_with(
        "iptables",
        &l.decomp,
        "eth0",
        &["-p", "udp", "--dport", "4500"],
        "natt",
    );

    a.initiate(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("initiate: {e}\n{}", a.log()));
    let sa_a = a.wait_established(Duration::from_secs(5));
    let sa_b = b.wait_established(Duration::from_secs(5));
    assert!(sa_a.initiator && !sa_b.initiator);
    assert_eq!(sa_a.dh_group, "CURVE_25519");
    let (ca, cb) = (&sa_a.children[0], &sa_b.children[0]);
    assert_eq!(
        (ca.spi_in, ca.spi_out),
        (cb.spi_out, cb.spi_in),
        "SPIs pair up"
    );
    assert_eq!(ca.mode, "TUNNEL");

    for _ in 0..3 {
        assert!(
            l.src.ping("10.0.3.2"),
            "ping through the tunnel\n{}",
            a.log()
        );
    }
    assert_tcp_intact(
        &l.src,
        &l.dst,
        addr("10.0.3.2:5001"),
        2 << 20,
        "charon pair",
    );
    let sa_b = b.wait_established(Duration::from_secs(1));
    assert!(sa_b.children[0].packets_in >= 3, "{sa_b:?}");
    assert_eq!(read_count_with("iptables", &l.decomp, "plain"), 0);
    assert!(read_count_with("iptables", &l.decomp, "natt") > 3);

    a.terminate_ike().unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || b.list_sas().is_empty()),
        "the responder kept its SA after DELETE:\n{}",
        b.log()
    );
}

#[test]
fn swanctl_raw_output_is_parsed() {
    let text = "list-sa event {relay {uniqueid=1 version=2 state=ESTABLISHED \
                local-host=10.0.2.1 remote-host=10.0.2.2 initiator=yes \
                initiator-spi=96ec3b0fdb468299 responder-spi=69409173fa971c34 \
                nat-remote=yes nat-fake=yes encr-alg=AES_GCM_16 encr-keysize=128 \
                prf-alg=PRF_HMAC_SHA2_256 dh-group=CURVE_25519 established=3 \
                child-sas {net-2 {name=net uniqueid=2 reqid=1 state=INSTALLED \
                mode=TUNNEL protocol=ESP encap=yes spi-in=ea45860e spi-out=d6575d04 \
                encr-alg=AES_GCM_16 bytes-in=84 packets-in=1 bytes-out=0 \
                packets-out=0 local-ts=[10.0.1.0/24] remote-ts=[10.0.3.0/24 \
                10.0.4.0/24]}}}}\nlist-sas reply {}\n";
    let sas = strongswan::parse_list_sas(text);
    assert_eq!(sas.len(), 1);
    let sa = &sas[0];
    assert_eq!(sa.name, "relay");
    assert_eq!(sa.state, "ESTABLISHED");
    assert!(sa.initiator && sa.nat_remote);
    assert_eq!(sa.dh_group, "CURVE_25519");
    assert_eq!(sa.children.len(), 1);
    let c = &sa.children[0];
    assert_eq!((c.spi_in, c.spi_out), (0xea45860e, 0xd6575d04));
    assert_eq!(c.uniqueid, 2);
    assert_eq!(c.packets_in, 1);
    assert_eq!(c.remote_ts, vec!["10.0.3.0/24", "10.0.4.0/24"]);
}

/// Writes test vectors for crates/ike (`RELAYD_IKE_VECTORS=DIR cargo test -p relayd --test
/// ike -- --ignored write_strongswan_vectors`): for each suite, the middle link's capture
/// of IKE and ESP-in-UDP (`strongswan-SUITE.pcap`) and both charons' logs at level 4, with
/// nonces, DH secrets, SKEYSEED, SK_* and every message's plaintext
/// (`strongswan-SUITE-{initiator,responder}.log`). Scenario: IKE_SA_INIT + IKE_AUTH with a
/// PSK, three pings through the child SA, a child rekey, an IKE rekey, a ping, delete.
#[test]
#[ignore]
fn write_strongswan_vectors() {
    let Ok(out) = std::env::var("RELAYD_IKE_VECTORS") else {
        eprintln!("set RELAYD_IKE_VECTORS to the directory to write the vectors into");
        return;
    };
    if !strongswan::require("write_strongswan_vectors") {
        return;
    }
    let out = std::path::PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    for (suite, ike, esp) in [
        ("gcm", "aes128gcm16-prfsha256-x25519", "aes128gcm16"),
        ("cbc", "aes256-sha256-ecp256", "aes256-sha256-ecp256"),
    ] {
        let l = line4("ike-vectors");
        let mut conn = Conn::new("10.0.2.1", "10.0.2.2", "10.0.1.0/24", "10.0.3.0/24");
        conn.proposals = ike.into();
        conn.esp_proposals = esp.into();
        let pcap = out.join(format!("strongswan-{suite}.pcap"));
        let cap =
            strongswan::Capture::start(&l.comp, "eth1", &pcap, "udp port 500 or udp port 4500");
        let a = Charon::start_with(&l.comp, &conn, strongswan::LogLevel::Keys);
        let b = Charon::start_with(&l.decomp, &conn.mirror(), strongswan::LogLevel::Keys);
        a.route_via_tunnel("10.0.3.0/24");
        b.route_via_tunnel("10.0.1.0/24");
        a.initiate(Duration::from_secs(10)).unwrap();
        a.wait_established(Duration::from_secs(5));
        for _ in 0..3 {
            assert!(l.src.ping("10.0.3.2"));
        }
        a.rekey_child().unwrap();
        let rekeyed = wait_for(Duration::from_secs(5), || a.children_established() == 2);
        assert!(rekeyed, "no child rekey:\n{}", grep(&a.log(), "CHILD_SA"));
        a.rekey_ike().unwrap();
        let rekeyed = wait_for(Duration::from_secs(5), || a.log().contains("] rekeyed between"));
        assert!(rekeyed, "no IKE rekey:\n{}", grep(&a.log(), "IKE"));
        std::thread::sleep(Duration::from_millis(500));
        assert!(l.src.ping("10.0.3.2"));
        a.terminate_ike().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        cap.finish();
        std::fs::write(
            out.join(format!("strongswan-{suite}-initiator.log")),
            a.log(),
        )
        .unwrap();
        std::fs::write(
            out.join(format!("strongswan-{suite}-responder.log")),
            b.log(),
        )
        .unwrap();
    }
}

/// The lines of `text` containing `what`, for messages.
fn grep(text: &str, what: &str) -> String {
    text.lines()
        .filter(|l| l.contains(what))
        .collect::<Vec<_>>()
        .join("\n")
}
