//! The attacker's tests of restarts: a new process (a fresh [`relay_core::Kept`]) never
//! sends a sequence number (an IV) again under a key, never accepts a packet again that the
//! previous one accepted, and never starts an SA whose state is lost at 1.

use super::*;
use relay_core::Kept;

/// The sequence number of what `enc` makes of a datagram (transport, IPv4).
fn seq_of(enc: &mut Box<dyn Service>) -> Option<u32> {
    let mut p = Packet::from_bytes(&udp_packet(10));
    (enc.process(&mut p, &mut cx()) == Action::Continue).then(|| esp_of(p.data()).seq_no)
}

#[test]
fn a_restarted_sender_resumes_past_every_number_it_used() {
    let cipher = Cipher::Aes128Gcm;
    let k = key_file("restart-out", cipher);
    let cfg = || enc_config(cipher, k.clone());
    let dir = state_dir_of(&k);
    // Loading (what `relayd check` does) writes nothing.
    let f = cfg().into_factory("e").unwrap();
    drop(f);
    assert!(!dir.exists(), "a configuration check wrote state");
    // A clean stop records exactly what was used: the restart goes on from there.
    let kept = Kept::new();
    let mut enc = cfg()
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&Counters::new());
    let first: Vec<_> = (0..3).map(|_| seq_of(&mut enc).unwrap()).collect();
    assert_eq!(first, [1, 2, 3]);
    drop((enc, kept));
    let kept = Kept::new();
    let mut enc = cfg()
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&Counters::new());
    assert_eq!(seq_of(&mut enc), Some(4), "after a clean stop");
    // A crash (the process gone without its stop): the next one starts past the
    // reservation, whatever was used of it.
    std::mem::forget((enc, kept));
    let kept = Kept::new();
    let mut enc = cfg()
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&Counters::new());
    assert_eq!(seq_of(&mut enc), Some(4 + 65536), "after a crash");
    drop((enc, kept));
    // The same SPI with a new key is a new SA: it starts at 1.
    let k2 = key_file("restart-out2", cipher);
    std::fs::copy(&k2, &k).unwrap();
    let mut enc = cfg()
        .into_factory("e")
        .unwrap()
        .build_started(&Counters::new());
    assert_eq!(seq_of(&mut enc), Some(1), "a new key");
}

#[test]
fn lost_state_of_a_used_sa_refuses_the_configuration() {
    let cipher = Cipher::Aes128CbcHmac;
    let k = key_file("restart-lost", cipher);
    let dir = state_dir_of(&k);
    let (enc, dec, _, _) = pair_with(enc_config(cipher, k.clone()), false);
    drop((enc, dec));
    for f in std::fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "state") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let e = enc_config(cipher, k.clone())
        .into_factory("e")
        .err()
        .unwrap();
    assert!(e.message().contains("missing"), "{e}");
    assert!(e.message().contains("relayd keygen"), "{e}");
    let e = dec_config(cipher, k, false)
        .into_factory("d")
        .err()
        .unwrap();
    assert!(e.message().contains("replays"), "{e}");
}

/// One key under two outbound SPIs would send every IV twice (the GCM nonce is the key's
/// salt and the sequence number): the second SA is refused while the first lives.
#[test]
fn one_key_is_never_used_by_two_outbound_sas() {
    let cipher = Cipher::Aes128Gcm;
    let k = key_file("one-key-two-spis", cipher);
    let kept = Kept::new();
    let first = enc_config(cipher, k.clone())
        .into_factory_kept("e1", &kept)
        .unwrap();
    let mut second = enc_config(cipher, k.clone());
    second.spi = Some(0x2002);
    let Err(e) = second.into_factory_kept("e2", &kept) else {
        panic!("a second SPI under the same key was accepted");
    };
    assert!(
        e.to_string()
            .contains("already used by the outbound SA with SPI 0x1001"),
        "{e}"
    );
    // The same SA named by two services is one SA with one counter: allowed.
    assert!(
        enc_config(cipher, k.clone())
            .into_factory_kept("e3", &kept)
            .is_ok()
    );
    drop(first);
}

#[test]
fn a_restarted_receiver_still_refuses_what_it_accepted() {
    let cipher = Cipher::Aes256Gcm;
    let k = key_file("restart-in", cipher);
    let (mut enc, mut dec, _, _) = pair_with(enc_config(cipher, k.clone()), false);
    let sent: Vec<Vec<u8>> = (0..5)
        .map(|_| {
            let mut p = Packet::from_bytes(&udp_packet(30));
            assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
            p.data().to_vec()
        })
        .collect();
    for s in &sent {
        assert_eq!(
            dec.process(&mut Packet::from_bytes(s), &mut cx()),
            Action::Continue
        );
    }
    drop(dec);
    // A clean stop writes the exact edge (the background thread may be the last holder of
    // the SA for a moment, and write it).
    let key = load_key(&k, cipher).unwrap();
    let file = crate::persist::SaFile::new(
        &state_dir_of(&k),
        crate::persist::Dir::In,
        0x1001,
        crate::persist::fingerprint(&key),
    );
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    while file.load() != Ok(Some(5)) {
        assert!(Instant::now() < deadline, "{:?}", file.load());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // A new process: every packet accepted before is refused, the next one passes.
    let dc = Counters::new();
    let mut dec = dec_config(cipher, k, false)
        .into_factory("d")
        .unwrap()
        .build_started(&dc);
    for s in &sent {
        assert_eq!(
            dec.process(&mut Packet::from_bytes(s), &mut cx()),
            Action::Drop
        );
    }
    assert_eq!(count(&dc, "dropped_replayed"), 5);
    let mut p = Packet::from_bytes(&udp_packet(30));
    enc.process(&mut p, &mut cx());
    assert_eq!(
        dec.process(&mut p, &mut cx()),
        Action::Continue,
        "new ones pass"
    );
}

/// What a reload does: the daemon's [`relay_core::Kept`] carries the SA over, so the
/// sequence counter goes on; a fresh one (another daemon) starts again at 1.
#[test]
fn a_kept_sa_keeps_its_sequence_across_a_reload() {
    let cipher = Cipher::Aes128Gcm;
    let k = key_file("reload", cipher);
    let seq_of = |enc: &mut Box<dyn Service>| {
        let mut p = Packet::from_bytes(&udp_packet(10));
        enc.process(&mut p, &mut cx());
        u32::from_be_bytes(p.data()[24..28].try_into().unwrap())
    };
    let kept = relay_core::Kept::new();
    let build = |kept: &relay_core::Kept| {
        enc_config(cipher, k.clone())
            .into_factory_kept("e", kept)
            .unwrap()
            .build_started(&Counters::new())
    };
    let mut first = build(&kept);
    assert_eq!((seq_of(&mut first), seq_of(&mut first)), (1, 2));
    let mut reloaded = build(&kept);
    assert_eq!(seq_of(&mut reloaded), 3, "the same SA goes on");
    // Another daemon (a restart) resumes after the reservation on disk, never at 1.
    let mut fresh = build(&relay_core::Kept::new());
    assert_eq!(
        seq_of(&mut fresh),
        65537,
        "a restart resumes after the reservation"
    );
}
