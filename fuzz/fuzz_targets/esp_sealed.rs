//! ESP open for each cipher with the SA's key (services/crypto `decrypt`), so that bodies
//! that authenticate are explored, not only the ICV check that refuses everything else.
//!
//! The harness holds the same fixed keys as the `decrypt` service it runs: AES-128/256-GCM
//! and AES-128/256-CBC + HMAC-SHA-256, in transport mode without and with ESN, and in
//! tunnel mode with an IPv4 and an IPv6 peer (`relayd_fuzz::ESP_SAS`, SPI 0x1000-0x100f).
//! The input supplies the plaintext; the harness seals it with the real key and a fresh
//! sequence number, wraps it in an IPv4 or IPv6 header from the SA's peer, and hands it
//! to `decrypt`.
//!
//! Input: byte 0 = SA (bits 0-3), raw trailer (bit 4: the input's bytes are the whole
//! encrypted body, padding, pad length and next header included, cut to the cipher's
//! block; otherwise the harness pads correctly), replayed sequence number (bit 5), the
//! other outer family than the SA's peer (bit 6); byte 1 = next header (padded mode);
//! the rest = the plaintext.
//!
//! Oracle, for correctly padded packets with a fresh sequence number from the SA's peer:
//! a transport SA gives back the packet that was sealed, byte for byte, and drops a
//! tunnel body; a tunnel SA gives back the inner packet or drops it, and drops any
//! transport body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::wire::proto;
use relay_core::{Action, Context, Counters, Packet, Service, ServiceConfig};
use relay_svc_crypto::SaCrypto;
use relayd_fuzz::{CLIENT, ESP_SAS, Input, SERVER, esp_key, esp_pad, esp_seal};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

struct Harness {
    sas: Vec<SaCrypto>,
    decrypt: Box<dyn Service>,
}

fn harness() -> &'static Mutex<Harness> {
    static H: OnceLock<Mutex<Harness>> = OnceLock::new();
    H.get_or_init(|| {
        let decrypt = relayd_fuzz::decrypt_config()
            .into_factory("fuzz")
            .expect("the fuzz SAs load")
            .build(&Counters::new(), &relay_core::Resources::new());
        let sas = ESP_SAS
            .iter()
            .map(|sa| SaCrypto::new(sa.cipher, &esp_key(sa.cipher)))
            .collect();
        Mutex::new(Harness { sas, decrypt })
    })
}

/// Sequence numbers only grow, so the replay window accepts each new packet.
static SEQ: AtomicU64 = AtomicU64::new(1);

/// The IP header the harness puts in front of `len` bytes with `next`.
fn outer(v6: bool, next: u8, len: usize) -> Vec<u8> {
    let (s6, d6) = relayd_fuzz::v6_pair();
    if v6 {
        relayd_fuzz::ipv6_header(s6, d6, next, len)
    } else {
        relayd_fuzz::ipv4_header(CLIENT, SERVER, next, len)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let ctl = input.byte();
    let next = input.byte();
    let plain = input.rest();
    if plain.len() > 4000 {
        return;
    }
    let i = usize::from(ctl & 15);
    let sa = ESP_SAS[i];
    let raw = ctl & 16 != 0;
    let replayed = ctl & 32 != 0;
    let foreign = ctl & 64 != 0;
    let v6 = sa.v6 != foreign;
    let seq = if replayed {
        SEQ.load(Ordering::Relaxed).saturating_sub(1).max(1)
    } else {
        SEQ.fetch_add(1, Ordering::Relaxed)
    };
    let block = sa.cipher.block();
    let body = if raw {
        plain[..plain.len() / block * block].to_vec()
    } else {
        esp_pad(sa.cipher, plain, next)
    };
    let mut h = harness().lock().unwrap_or_else(|e| e.into_inner());
    let esp = esp_seal(&h.sas[i], i, seq, &body);
    let mut bytes = outer(v6, proto::ESP, esp.len());
    bytes.extend_from_slice(&esp);
    let mut pkt = Packet::from_bytes(&bytes);
    let action = h
        .decrypt
        .process(&mut pkt, &mut Context::new(0, Instant::now()));
    // Transport SA 0-3 accept any source; 4-7 only IPv4 ones.
    let from_peer = !foreign || (i < 4 && !sa.tunnel);
    if raw || replayed || !from_peer {
        return;
    }
    let tunnel_body = matches!(next, proto::IPV4 | proto::IPV6);
    match (sa.tunnel, tunnel_body) {
        (false, false) if next != proto::NO_NEXT_HEADER => {
            assert_eq!(action, Action::Continue, "a valid ESP packet was dropped");
            let mut want = outer(v6, next, plain.len());
            want.extend_from_slice(plain);
            assert_eq!(pkt.data(), &want[..], "decrypted bytes differ");
        }
        (true, true) => {
            if action == Action::Continue {
                assert_eq!(pkt.data(), plain, "tunnel: inner packet differs");
            }
        }
        (true, false) | (false, true) => {
            assert_eq!(
                action,
                Action::Drop,
                "a body of the other mode was let through"
            );
        }
        _ => {}
    }
});
