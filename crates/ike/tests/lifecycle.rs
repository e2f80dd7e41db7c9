//! Rekeys, deletes, dead peers, lost, duplicated and forged datagrams, in memory.

mod common;
use common::*;
use relay_ike::*;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";

fn up(esp: &str) -> Net {
    let mut n = Net::new(
        conn("c", A, B, true, IKE, esp, Mode::Transport),
        conn("c", B, A, false, IKE, esp, Mode::Transport),
    );
    n.advance(Duration::ZERO);
    assert_eq!(Net::children_up(&n.ev_a).len(), 1);
    n
}

#[test]
fn child_rekey_by_time_without_gap() {
    for esp in ["aes128gcm16", "aes128gcm16-x25519"] {
        let mut n = up(esp);
        let first = Net::children_up(&n.ev_a)[0].clone();
        n.ev_a.clear();
        n.ev_b.clear();
        n.advance(Duration::from_secs(601));
        // The rekey's initiator installs the new SA and sends on it at once, then the old
        // goes. The responder installs it inbound only and switches outbound when the
        // initiator's delete of the old SA shows it has the new one, before the old goes.
        let mut responders = 0;
        for (ev, old) in [(&n.ev_a, first.spi_in), (&n.ev_b, first.spi_out)] {
            let pos = |f: &dyn Fn(&Event) -> bool| {
                ev.iter()
                    .position(f)
                    .unwrap_or_else(|| panic!("{esp}: {ev:?}"))
            };
            let up = pos(&|e| matches!(e, Event::ChildUp(c) if c.replaces == Some(old)));
            let down = pos(&|e| matches!(e, Event::ChildDown { spi_in, .. } if *spi_in == old));
            let Event::ChildUp(new) = &ev[up] else {
                unreachable!()
            };
            if new.outbound {
                assert!(up < down);
            } else {
                responders += 1;
                let switch = pos(
                    &|e| matches!(e, Event::ChildOutbound { spi_in, .. } if *spi_in == new.spi_in),
                );
                assert!(up < switch && switch < down, "{esp}: {ev:?}");
            }
        }
        assert_eq!(responders, 1);
        let (na, nb) = (
            Net::children_up(&n.ev_a)[0].clone(),
            Net::children_up(&n.ev_b)[0].clone(),
        );
        assert_paired(&na, &nb);
        assert_ne!(na.key_out.bytes(), first.key_out.bytes());
        let st = n.a.status_at(n.now);
        assert_eq!(st[0].children.len(), 1);
        assert_eq!(st[0].children[0].rekeys, 1);
        assert_eq!(n.a.counters().child_rekeys + n.b.counters().child_rekeys, 2);
    }
}

#[test]
fn child_rekey_by_volume() {
    let mut ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    ca.child_rekey_packets = Some(1000);
    let mut n = Net::new(
        ca,
        conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport),
    );
    n.advance(Duration::ZERO);
    let c = Net::children_up(&n.ev_a)[0].clone();
    n.a.report_usage(n.now, "c", c.spi_out, 10_000, 500);
    n.run();
    assert_eq!(Net::children_up(&n.ev_a).len(), 1, "below the limit");
    n.a.report_usage(n.now, "c", c.spi_out, 20_000, 950);
    n.run();
    assert_eq!(Net::children_up(&n.ev_a)[1].replaces, Some(c.spi_in));
}

#[test]
fn child_rekey_before_the_sequence_number_wraps() {
    let mut n = up("aes128gcm16");
    let c = Net::children_up(&n.ev_a)[0].clone();
    assert!(!c.esn);
    n.a.report_usage(n.now, "c", c.spi_out, 1 << 40, SEQ_REKEY_PACKETS - 1);
    n.run();
    assert_eq!(
        Net::children_up(&n.ev_a).len(),
        1,
        "no limit configured, below 2^32"
    );
    n.a.report_usage(n.now, "c", c.spi_out, 1 << 40, SEQ_REKEY_PACKETS);
    n.run();
    assert_eq!(Net::children_up(&n.ev_a)[1].replaces, Some(c.spi_in));
}

#[test]
fn ike_rekey_moves_children() {
    let mut ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    ca.ike_rekey = Duration::from_secs(100);
    let mut n = Net::new(
        ca,
        conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport),
    );
    n.advance(Duration::ZERO);
    let old = n.a.status_at(n.now)[0].clone();
    n.advance(Duration::from_secs(101));
    let (sa, sb) = (n.a.status_at(n.now), n.b.status_at(n.now));
    assert_eq!((sa.len(), sb.len()), (1, 1), "old IKE SA deleted");
    assert_ne!(sa[0].spi_i, old.spi_i);
    assert_eq!((sa[0].spi_i, sa[0].spi_r), (sb[0].spi_i, sb[0].spi_r));
    assert_eq!(
        sa[0].children,
        old.children
            .iter()
            .map(|c| ChildStatus {
                age: c.age + Duration::from_secs(101),
                ..c.clone()
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(sa[0].rekeys, 1);
    assert!(
        !n.ev_a
            .iter()
            .any(|e| matches!(e, Event::ChildDown { .. } | Event::IkeDown { .. }))
    );
    // The new IKE SA works: a child rekey over it.
    n.advance(Duration::from_secs(600));
    assert!(
        Net::children_up(&n.ev_a)
            .iter()
            .any(|c| c.replaces.is_some())
    );
    assert_eq!(n.a.status_at(n.now)[0].children.len(), 1);
}

#[test]
fn shutdown_deletes_on_both_sides() {
    let mut n = up("aes128gcm16");
    n.a.shutdown(n.now);
    n.run();
    for ev in [&n.ev_a, &n.ev_b] {
        assert!(ev.iter().any(|e| matches!(e, Event::ChildDown { .. })));
        assert!(ev.iter().any(|e| matches!(e, Event::IkeDown { .. })));
    }
    assert!(n.b.status_at(n.now).is_empty());
    n.advance(Duration::from_secs(100));
    assert!(n.a.status_at(n.now).is_empty(), "no restart after shutdown");
}

#[test]
fn dpd_detects_a_dead_peer_and_initiator_restarts() {
    let mut n = up("aes128gcm16");
    n.drop_to_a = true;
    n.drop_to_b = true;
    // 30 s DPD delay, then 4 s * 1.8^k for 5 retransmits: about 30 + 4 * (1 + ... + 1.8^5).
    n.advance(Duration::from_secs(200));
    assert!(
        n.ev_a
            .iter()
            .any(|e| matches!(e, Event::IkeDown { reason, .. } if reason.contains("retransmits")))
    );
    assert!(n.ev_a.iter().any(|e| matches!(e, Event::ChildDown { .. })));
    assert!(n.a.counters().retransmits >= 5);
    n.drop_to_a = false;
    n.drop_to_b = false;
    n.advance(Duration::from_secs(200));
    assert!(
        n.ev_a
            .iter()
            .filter(|e| matches!(e, Event::IkeUp { .. }))
            .count()
            >= 2,
        "re-established"
    );
    assert_eq!(n.a.status_at(n.now).len(), 1);
}

#[test]
fn lost_messages_are_retransmitted() {
    let mut n = Net::new(
        conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport),
        conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport),
    );
    // The first IKE_SA_INIT response is lost, then the first IKE_AUTH request.
    n.drop_to_a = true;
    n.advance(Duration::ZERO);
    n.drop_to_a = false;
    n.advance(Duration::from_secs(5));
    assert_eq!(
        n.b.counters().retransmits,
        1,
        "cached IKE_SA_INIT response resent"
    );
    assert_eq!(Net::children_up(&n.ev_a).len(), 1);
    assert_eq!(Net::children_up(&n.ev_b).len(), 1, "one child SA, not two");
}

#[test]
fn duplicated_and_replayed_datagrams_change_nothing() {
    let mut n = up("aes128gcm16");
    let wire = n.wire.clone();
    let before = (n.a.status_at(n.now), n.b.status_at(n.now));
    let (ea, eb) = (n.ev_a.len(), n.ev_b.len());
    for (to_b, bytes) in wire.iter().rev() {
        let (ep, from, to) = if *to_b {
            (&mut n.b, A, B)
        } else {
            (&mut n.a, B, A)
        };
        ep.handle(
            n.now,
            format!("{to}:500").parse().unwrap(),
            format!("{from}:500").parse().unwrap(),
            bytes,
        );
    }
    n.run();
    assert_eq!((n.ev_a.len(), n.ev_b.len()), (ea, eb), "no new events");
    assert_eq!(before, (n.a.status_at(n.now), n.b.status_at(n.now)));
}

#[test]
fn corrupted_sk_payload_is_rejected_without_state_change() {
    let mut n = up("aes128gcm16");
    // a's DPD request, corrupted on the way: b drops it; the original works after.
    n.now += Duration::from_secs(31);
    n.a.handle_timeout(n.now);
    let sent = n.a.poll_transmit().expect("DPD request").payload;
    let before = n.b.status_at(n.now);
    let integ = n.b.counters().invalid_integrity;
    let mut bad = sent.clone();
    let l = bad.len();
    bad[l - 3] ^= 0x40;
    n.b.handle(
        n.now,
        format!("{B}:500").parse().unwrap(),
        format!("{A}:500").parse().unwrap(),
        &bad,
    );
    assert_eq!(n.b.counters().invalid_integrity, integ + 1);
    assert_eq!(before, n.b.status_at(n.now));
    assert!(n.b.poll_transmit().is_none());
    n.b.handle(
        n.now,
        format!("{B}:500").parse().unwrap(),
        format!("{A}:500").parse().unwrap(),
        &sent,
    );
    assert!(
        n.b.poll_transmit().is_some(),
        "the intact request is still answered"
    );
}

#[test]
fn spoofed_informational_is_ignored() {
    let mut n = up("aes128gcm16");
    let st = n.b.status_at(n.now)[0].clone();
    // A forged INFORMATIONAL delete with the right SPIs and the next message ID, but no
    // valid SK payload (the attacker has no keys).
    let mut h = vec![];
    h.extend_from_slice(&st.spi_i.to_be_bytes());
    h.extend_from_slice(&st.spi_r.to_be_bytes());
    h.extend_from_slice(&[46, 0x20, 37, 0x08, 0, 0, 0, 2, 0, 0, 0, 0]);
    h.extend_from_slice(&[42, 0, 0, 40]);
    h.extend_from_slice(&[0u8; 36]);
    let l = h.len() as u32;
    h[24..28].copy_from_slice(&l.to_be_bytes());
    n.b.handle(
        n.now,
        format!("{B}:500").parse().unwrap(),
        format!("{A}:500").parse().unwrap(),
        &h,
    );
    n.run();
    assert_eq!(n.b.status_at(n.now), vec![st]);
    assert!(n.b.counters().invalid_integrity >= 1);
    assert!(!n.ev_b.iter().any(|e| matches!(e, Event::IkeDown { .. })));
}

/// A responder whose ESP proposal names a PFS group refuses a child rekey without a KE
/// payload: accepting it would drop the forward secrecy its configuration asks for.
#[test]
fn a_rekey_without_ke_does_not_drop_configured_pfs() {
    let ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    let mut cb = conn("c", B, A, false, IKE, "aes128gcm16-x25519", Mode::Transport);
    cb.child_rekey = Duration::from_secs(1 << 30);
    let mut n = Net::new(ca, cb);
    n.advance(Duration::ZERO);
    assert_eq!(Net::children_up(&n.ev_b).len(), 1, "IKE_AUTH has no PFS");
    n.ev_b.clear();
    n.advance(Duration::from_secs(601));
    assert!(n.b.counters().no_proposal >= 1, "{:?}", n.ev_b);
    assert!(
        !n.ev_b
            .iter()
            .any(|e| matches!(e, Event::ChildUp(c) if c.replaces.is_some())),
        "a rekey without KE was taken: {:?}",
        n.ev_b
    );
}

/// A message in clear (IKE_SA_INIT) with an established SA's initiator SPI and the next message
/// ID is unauthenticated: sent every 10 s from the peer's address, it must not keep a
/// dead peer alive (liveness) for dead peer detection.
#[test]
fn clear_messages_do_not_keep_a_dead_peer_alive() {
    let mut n = up("aes128gcm16");
    let st = n.b.status_at(n.now)[0].clone();
    n.drop_to_a = true;
    n.drop_to_b = true;
    for _ in 0..20 {
        let mut h = vec![];
        h.extend_from_slice(&st.spi_i.to_be_bytes());
        h.extend_from_slice(&[0; 8]); // as a retransmitted IKE_SA_INIT request carries
        h.extend_from_slice(&[0, 0x20, 34, 0x08, 0, 0, 0, 2, 0, 0, 0, 28]);
        n.b.handle(
            n.now,
            format!("{B}:500").parse().unwrap(),
            format!("{A}:500").parse().unwrap(),
            &h,
        );
        n.advance(Duration::from_secs(10));
    }
    assert!(
        n.ev_b.iter().any(|e| matches!(e, Event::IkeDown { .. })),
        "the responder never noticed its peer was gone: {:?}",
        n.ev_b
    );
}

#[test]
fn simultaneous_child_rekey_keeps_one_pair() {
    let mut ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    let mut cb = conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport);
    ca.child_rekey_packets = Some(100);
    cb.child_rekey_packets = Some(100);
    let mut n = Net::new(ca, cb);
    n.advance(Duration::ZERO);
    let (a0, b0) = (
        Net::children_up(&n.ev_a)[0].clone(),
        Net::children_up(&n.ev_b)[0].clone(),
    );
    // Both sides start a rekey before either sees the other's request.
    n.a.report_usage(n.now, "c", a0.spi_out, 0, 100);
    n.b.report_usage(n.now, "c", b0.spi_out, 0, 100);
    n.run();
    n.advance(Duration::from_secs(1));
    let (sa, sb) = (n.a.status_at(n.now), n.b.status_at(n.now));
    // Whatever the nonces, at least one new pair survives on both sides, and they match.
    assert!(!sa[0].children.is_empty());
    let ins: Vec<u32> = sa[0].children.iter().map(|c| c.spi_in).collect();
    let outs: Vec<u32> = sb[0].children.iter().map(|c| c.spi_out).collect();
    assert!(ins.iter().any(|s| outs.contains(s)), "{sa:?} {sb:?}");
    assert!(
        !sa[0].children.iter().any(|c| c.spi_in == a0.spi_in),
        "old SA deleted"
    );
}

#[test]
fn restarted_initiator_replaces_stale_sas_with_initial_contact() {
    let mut n = up("aes128gcm16");
    let old = Net::children_up(&n.ev_b)[0].clone();
    n.advance(Duration::from_secs(5));
    // a restarts: a fresh endpoint with another seed, b still has the old SAs.
    n.a = Endpoint::new(
        vec![conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport)],
        Box::new(SeededRng::new(77)),
    );
    n.ev_b.clear();
    n.advance(Duration::ZERO);
    let st = n.b.status_at(n.now);
    assert_eq!(st.len(), 1, "{st:?}");
    assert!(
        n.ev_b
            .iter()
            .any(|e| matches!(e, Event::ChildDown { spi_in, .. } if *spi_in == old.spi_in))
    );
    assert!(!n.ev_b.iter().any(|e| matches!(e, Event::IkeDown { .. })));
    assert_eq!(Net::children_up(&n.ev_b).len(), 1);
}

#[test]
fn both_sides_initiating_stay_up() {
    let mut n = Net::new(
        conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport),
        conn("c", B, A, true, IKE, "aes128gcm16", Mode::Transport),
    );
    n.advance(Duration::from_secs(1));
    // Two IKE SAs (one each way) with a child each; neither kills the other.
    assert_eq!(n.a.status_at(n.now).len(), 2);
    assert!(n.a.status_at(n.now).iter().all(|s| s.children.len() == 1));
    assert!(
        !n.ev_a
            .iter()
            .any(|e| matches!(e, Event::IkeDown { .. } | Event::ChildDown { .. }))
    );
}

#[test]
fn unsupported_critical_payload_is_refused() {
    let mut n = up("aes128gcm16");
    let before = n.b.status_at(n.now);
    // An authenticated INFORMATIONAL request whose only payload is of unknown type 99
    // with the critical bit.
    let (peer_req, _) = n.b.fuzz_msg_ids();
    let m =
        n.b.fuzz_seal_from_peer(37, false, peer_req, 99, &[0, 0x80, 0, 4])
            .unwrap();
    n.b.handle(
        n.now,
        format!("{B}:500").parse().unwrap(),
        format!("{A}:500").parse().unwrap(),
        &m,
    );
    assert_eq!(n.b.counters().invalid_critical, 1);
    let resp = n.b.poll_transmit().expect("an answer");
    assert!(resp.payload.len() > 28);
    assert_eq!(before, n.b.status_at(n.now));
    // Not critical: ignored, the request answered normally.
    let m =
        n.b.fuzz_seal_from_peer(37, false, peer_req + 1, 99, &[0, 0, 0, 4])
            .unwrap();
    n.b.handle(
        n.now,
        format!("{B}:500").parse().unwrap(),
        format!("{A}:500").parse().unwrap(),
        &m,
    );
    assert_eq!(n.b.counters().invalid_critical, 1);
    assert!(n.b.poll_transmit().is_some());
}

#[test]
fn initiator_reestablishes_after_the_peer_deletes() {
    let mut n = up("aes128gcm16");
    n.b.shutdown(n.now);
    n.run();
    assert!(
        n.ev_a.iter().any(
            |e| matches!(e, Event::IkeDown { reason, .. } if reason.contains("deleted by peer"))
        )
    );
    assert!(n.a.status_at(n.now).is_empty());
    n.advance(Duration::from_secs(2));
    assert_eq!(
        Net::children_up(&n.ev_a).len(),
        2,
        "a new child SA after the restart"
    );
    assert_eq!(n.a.status_at(n.now).len(), 1);
    assert_eq!(n.b.status_at(n.now).len(), 1);
}

#[test]
fn child_rekey_due_during_an_ike_rekey_happens_on_the_new_ike_sa() {
    let mut ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    ca.ike_rekey = Duration::from_secs(100);
    ca.child_rekey_packets = Some(100);
    let mut n = Net::new(
        ca,
        conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport),
    );
    n.advance(Duration::ZERO);
    let c = Net::children_up(&n.ev_a)[0].clone();
    // The IKE rekey request is in flight when the child's volume limit is reported.
    n.now += Duration::from_secs(101);
    n.a.handle_timeout(n.now);
    n.a.report_usage(n.now, "c", c.spi_out, 0, 100);
    n.run();
    n.advance(Duration::from_secs(1));
    assert_eq!(n.a.status_at(n.now)[0].rekeys, 1, "IKE SA rekeyed");
    let up = Net::children_up(&n.ev_a);
    assert_eq!(up.len(), 2, "the child SA rekeyed too");
    assert_eq!(up[1].replaces, Some(c.spi_in));
    assert_eq!(n.a.status_at(n.now)[0].children.len(), 1);
    assert_eq!(n.b.status_at(n.now)[0].children.len(), 1);
}

#[test]
fn old_child_is_deleted_even_when_an_ike_rekey_comes_between() {
    let mut ca = conn("c", A, B, true, IKE, "aes128gcm16", Mode::Transport);
    ca.ike_rekey = Duration::from_secs(100);
    ca.child_rekey_packets = Some(100);
    let mut n = Net::new(
        ca,
        conn("c", B, A, false, IKE, "aes128gcm16", Mode::Transport),
    );
    n.advance(Duration::ZERO);
    let c = Net::children_up(&n.ev_a)[0].clone();
    // The child rekey goes out first, the IKE rekey queues behind it, then the old
    // child's delete queues behind the IKE rekey.
    n.now += Duration::from_secs(101);
    n.a.report_usage(n.now, "c", c.spi_out, 0, 100);
    n.a.handle_timeout(n.now);
    n.run();
    n.advance(Duration::from_secs(1));
    let (sa, sb) = (n.a.status_at(n.now), n.b.status_at(n.now));
    assert_eq!((sa.len(), sb.len()), (1, 1));
    assert_eq!(sa[0].rekeys, 1);
    assert_eq!(
        (sa[0].children.len(), sb[0].children.len()),
        (1, 1),
        "{sa:?} {sb:?}"
    );
    assert!(
        n.ev_a
            .iter()
            .any(|e| matches!(e, Event::ChildDown { spi_in, .. } if *spi_in == c.spi_in))
    );
    assert!(
        n.ev_b
            .iter()
            .any(|e| matches!(e, Event::ChildDown { spi_out, .. } if *spi_out == c.spi_in))
    );
}

#[test]
fn child_rekey_retries_with_the_pfs_group_the_peer_wants() {
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            IKE,
            "aes128gcm16-x25519,aes128gcm16-ecp256",
            Mode::Transport,
        ),
        conn("c", B, A, false, IKE, "aes128gcm16-ecp256", Mode::Transport),
    );
    n.advance(Duration::ZERO);
    let c = Net::children_up(&n.ev_a)[0].clone();
    n.a.report_usage(n.now, "c", c.spi_out, 0, SEQ_REKEY_PACKETS);
    n.run();
    let up = Net::children_up(&n.ev_a);
    assert_eq!(
        up.len(),
        2,
        "rekeyed after INVALID_KE_PAYLOAD, without waiting"
    );
    assert_eq!(up[1].replaces, Some(c.spi_in));
    assert_paired(up[1], Net::children_up(&n.ev_b)[1]);
}
