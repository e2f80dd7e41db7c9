//! relayd's IKEv2 state machine (crates/ike `Endpoint::handle`) as responder and as
//! initiator at each point of an exchange (fresh, IKE_SA_INIT sent or answered, IKE_AUTH
//! sent, established), fed raw datagrams and payload chains sealed with the IKE SA's real
//! keys (so the handlers behind the integrity check are reached), with time passing.
//!
//! Input: byte 0: bits 0-2 the number of datagrams of the exchange delivered first (0-7),
//! bit 3 which side gets the input (0 responder, 1 initiator), bit 4 the suite (0 AES-GCM
//! with X25519, 1 AES-CBC with HMAC-SHA-256 and P-256, ESP with PFS). Then records, each
//! [kind, len_hi, len_lo, bytes...]: kind % 3 == 0: a raw datagram; 1: a payload chain
//! sealed as a message from the peer (bytes[0] exchange type, bytes[1] bit 0 response,
//! bit 1 next message ID + 1, bytes[2] first payload type, the rest the chain); 2: the
//! clock advances by bytes[0] seconds and timers run.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_ike::fuzzing;
use std::time::Duration;

/// Records per input at most.
const MAX_RECORDS: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, mut rest)) = data.split_first() else {
        return;
    };
    let (a, b, mut now) = fuzzing::pair_cached(usize::from(ctl & 7), ctl & 16 != 0);
    let to_initiator = ctl & 8 != 0;
    let (mut ep, mut other) = if to_initiator { (a, b) } else { (b, a) };
    let (pa, pb) = fuzzing::addrs();
    let (local, remote) = if to_initiator { (pa, pb) } else { (pb, pa) };
    for _ in 0..MAX_RECORDS {
        let Some(h) = rest.get(..3) else { break };
        let len = usize::from(u16::from_be_bytes([h[1], h[2]]));
        let Some(body) = rest.get(3..3 + len) else { break };
        rest = &rest[3 + len..];
        match h[0] % 3 {
            0 => ep.handle(now, local, remote, body),
            1 => {
                let (Some(&exch), Some(&fl), Some(&first)) = (body.first(), body.get(1), body.get(2)) else { continue };
                let (peer_req, our_req) = ep.fuzz_msg_ids();
                let resp = fl & 1 != 0;
                let id = if resp { our_req } else { peer_req } + u32::from(fl >> 1 & 1);
                if let Some(m) = ep.fuzz_seal_from_peer(exch, resp, id, first, body.get(3..).unwrap_or(&[])) {
                    ep.handle(now, local, remote, &m);
                }
            }
            _ => {
                now += Duration::from_secs(u64::from(body.first().copied().unwrap_or(1)));
                ep.handle_timeout(now);
            }
        }
        // The other side answers what it receives, so exchanges can go on.
        while let Some(t) = ep.poll_transmit() {
            other.handle(now, remote, local, &t.payload);
        }
        while let Some(t) = other.poll_transmit() {
            ep.handle(now, local, remote, &t.payload);
        }
        while ep.poll_event().is_some() {}
        while other.poll_event().is_some() {}
    }
    let _ = ep.status_at(now);
    let _ = ep.poll_timeout();
});
