//! Support for the fuzz targets (fuzz/fuzz_targets/ike_endpoint.rs), not for production:
//! a pair of endpoints driven to a chosen point of an exchange with fixed randomness, and
//! sealing of arbitrary plaintext with an IKE SA's real keys so that fuzzing reaches the
//! handlers behind the SK payload's integrity check.

use crate::config::{ConnConfig, Identity, Mode, Retransmit, Secret, TrafficSelector};
use crate::types::SeededRng;
use crate::wire::proposal::Proposal;
use crate::wire::{Header, Notify, Payload, Ts};
use crate::{Endpoint, parse_esp_proposal, parse_proposal};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Initiator's address.
pub const A: &str = "10.0.0.1";
/// Responder's address.
pub const B: &str = "10.0.0.2";

/// A connection between `local` and `remote` with fixed keys and proposals: AES-GCM with
/// X25519 first, or (`cbc`) AES-CBC with HMAC-SHA-256 and P-256 first, and ESP with PFS.
pub fn conn(local: &str, remote: &str, initiate: bool, cbc: bool) -> ConnConfig {
    let l: IpAddr = local.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let r: IpAddr = remote.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let mut ike = ["aes128gcm16-prfsha256-x25519", "aes256-sha256-ecp256"];
    let mut esp = ["aes128gcm16", "aes256-sha256-ecp256"];
    if cbc {
        ike.reverse();
        esp.reverse();
    }
    ConnConfig {
        name: "fuzz".into(),
        local: l,
        remote: r,
        local_id: Identity::Addr(l),
        remote_id: Identity::Addr(r),
        psk: Secret::new(b"fuzz".to_vec()),
        ike_proposals: ike.iter().filter_map(|s| parse_proposal(s).ok()).collect(),
        esp_proposals: esp
            .iter()
            .filter_map(|s| parse_esp_proposal(s).ok())
            .collect(),
        local_ts: vec![TrafficSelector::subnet(l, 24)],
        remote_ts: vec![TrafficSelector::subnet(r, 24)],
        mode: Mode::Tunnel,
        initiate,
        ike_rekey: Duration::from_secs(100),
        child_rekey: Duration::from_secs(50),
        child_rekey_bytes: Some(1 << 20),
        child_rekey_packets: Some(1000),
        dpd_delay: Duration::from_secs(10),
        retransmit: Retransmit::default(),
    }
}

/// The initiator's and responder's addresses.
pub fn addrs() -> (SocketAddr, SocketAddr) {
    (
        SocketAddr::new(A.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), 500),
        SocketAddr::new(B.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), 500),
    )
}

/// Two endpoints (initiator, responder) after `steps` datagrams of their exchange were
/// delivered (0: the initiator's IKE_SA_INIT not yet delivered; 4 or more: established).
/// Every datagram delivered is returned too, as (to responder, bytes), for seeds.
#[allow(clippy::type_complexity)]
pub fn pair(steps: usize, cbc: bool) -> (Endpoint, Endpoint, Instant, Vec<(bool, Vec<u8>)>) {
    let now = Instant::now();
    let mut a = Endpoint::new(vec![conn(A, B, true, cbc)], Box::new(SeededRng::new(1)));
    let mut b = Endpoint::new(vec![conn(B, A, false, cbc)], Box::new(SeededRng::new(2)));
    a.handle_timeout(now);
    let (pa, pb) = addrs();
    let mut log = Vec::new();
    for _ in 0..steps {
        if let Some(t) = a.poll_transmit() {
            log.push((true, t.payload.clone()));
            b.handle(now, pb, pa, &t.payload);
        } else if let Some(t) = b.poll_transmit() {
            log.push((false, t.payload.clone()));
            a.handle(now, pa, pb, &t.payload);
        } else {
            break;
        }
    }
    while a.poll_event().is_some() || b.poll_event().is_some() {}
    (a, b, now, log)
}

impl Endpoint {
    /// A copy of this endpoint in its current state, drawing from a fresh seeded
    /// generator (fuzzing starts every input from the same prepared state this way,
    /// without redoing the exchange's Diffie-Hellman work).
    #[doc(hidden)]
    pub fn fuzz_clone(&self) -> Endpoint {
        Endpoint {
            conns: self.conns.clone(),
            sas: self.sas.clone(),
            io: crate::endpoint::Io {
                rng: Box::new(SeededRng::new(99)),
                transmits: self.io.transmits.clone(),
                events: self.io.events.clone(),
                counters: self.io.counters.clone(),
            },
            cookie_secret: self.cookie_secret,
        }
    }

    /// A message from the peer of this endpoint's first keyed IKE SA: `plain` (an encoded
    /// payload chain starting with type `first`) sealed with the SA's keys in the peer's
    /// direction, with the given exchange, response flag and message ID.
    #[doc(hidden)]
    pub fn fuzz_seal_from_peer(
        &mut self,
        exchange: u8,
        response: bool,
        msg_id: u32,
        first: u8,
        plain: &[u8],
    ) -> Option<Vec<u8>> {
        let sa = self.sas.iter().find(|s| s.keys.is_some())?;
        let k = sa.keys.as_ref()?;
        let mut flags = if sa.initiator {
            0
        } else {
            crate::wire::flags::INITIATOR
        };
        if response {
            flags |= crate::wire::flags::RESPONSE;
        }
        let h = Header {
            spi_i: sa.spi_i,
            spi_r: sa.spi_r,
            next: 0,
            exchange,
            flags,
            msg_id,
            length: 0,
        };
        Some(k.seal_raw(
            !sa.initiator,
            h,
            first,
            zeroize::Zeroizing::new(plain.to_vec()),
            self.io.rng.as_mut(),
        ))
    }

    /// The next message ID the first keyed IKE SA expects from its peer (requests) and
    /// the ID of its own outstanding request (responses).
    #[doc(hidden)]
    pub fn fuzz_msg_ids(&self) -> (u32, u32) {
        self.sas
            .iter()
            .find(|s| s.keys.is_some())
            .map_or((0, 0), |s| {
                (
                    s.peer_msg_id,
                    s.out.as_ref().map_or(s.next_msg_id, |o| o.msg_id),
                )
            })
    }
}

thread_local! {
    static PAIRS: std::cell::RefCell<Vec<Option<(Endpoint, Endpoint, Instant)>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`pair`] without the delivered datagrams, prepared once per thread, step count and
/// suite, and copied for each call.
pub fn pair_cached(steps: usize, cbc: bool) -> (Endpoint, Endpoint, Instant) {
    let i = steps * 2 + usize::from(cbc);
    PAIRS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() <= i {
            p.resize_with(i + 1, || None);
        }
        let slot = &mut p[i];
        let (a, b, now) = slot.get_or_insert_with(|| {
            let (a, b, now, _) = pair(steps, cbc);
            (a, b, now)
        });
        (a.fuzz_clone(), b.fuzz_clone(), *now)
    })
}

/// Seeds for the fuzz targets: (target, name, input). `ike_message` gets every datagram
/// of an exchange; `ike_endpoint` gets, for each point of the exchange and each side,
/// the datagram that side receives next, plus sealed requests and a clock advance.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for cbc in [false, true] {
        let (_, _, _, log) = pair(16, cbc);
        let suite = if cbc { "cbc" } else { "gcm" };
        for (i, (to_b, m)) in log.iter().enumerate() {
            let dir = if *to_b { "request" } else { "response" };
            out.push((
                "ike_message",
                format!("{suite}-exchange-{i}-{dir}"),
                m.clone(),
            ));
        }
    }
    let rec = |kind: u8, body: &[u8]| {
        let mut v = vec![kind];
        v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        v.extend_from_slice(body);
        v
    };
    for cbc in [false, true] {
        let (_, _, _, log) = pair(16, cbc);
        for steps in 0..7u8 {
            for to_initiator in [false, true] {
                let ctl = steps | if to_initiator { 8 } else { 0 } | if cbc { 16 } else { 0 };
                let mut v = vec![ctl];
                if let Some((_, m)) = log
                    .iter()
                    .skip(usize::from(steps))
                    .find(|(to_b, _)| *to_b != to_initiator)
                {
                    v.extend(rec(0, m));
                }
                v.extend(rec(2, &[11]));
                let side = if to_initiator {
                    "initiator"
                } else {
                    "responder"
                };
                let suite = if cbc { "cbc" } else { "gcm" };
                out.push(("ike_endpoint", format!("{suite}-steps-{steps}-{side}"), v));
            }
        }
    }
    // Established (4 datagrams): an empty INFORMATIONAL, a Delete of the IKE SA, a child
    // rekey request naming no SA, each sealed as from the peer.
    let sealed = |exch: u8, first: u8, chain: &[u8]| {
        let mut b = vec![exch, 0, first];
        b.extend_from_slice(chain);
        rec(1, &b)
    };
    let delete_ike = [0u8, 0, 0, 8, 1, 0, 0, 0];
    let rekey = [
        40u8, 0, 0, 12, 3, 4, 0x40, 0x09, 0, 0, 1, 0, 0, 0, 0, 20, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1,
    ];
    // Real rekey requests to the responder: its child SA (named by the initiator's
    // inbound SPI) and the IKE SA.
    let (a, _, _) = pair_cached(4, false);
    let spi = a
        .sas
        .first()
        .and_then(|s| s.children.first())
        .map_or(0, |c| c.spi_in);
    let local: Vec<Ts> = conn(A, B, true, false)
        .local_ts
        .iter()
        .map(|t| Ts {
            protocol: 0,
            start_port: 0,
            end_port: 65535,
            start: t.start,
            end: t.end,
        })
        .collect();
    let remote: Vec<Ts> = conn(A, B, true, false)
        .remote_ts
        .iter()
        .map(|t| Ts {
            protocol: 0,
            start_port: 0,
            end_port: 65535,
            start: t.start,
            end: t.end,
        })
        .collect();
    let esp =
        parse_esp_proposal("aes128gcm16").map(|e| Proposal::from_esp(1, &e, 0x1234_5678, None));
    let child_rekey = [
        Payload::Notify(Notify {
            proto: 3,
            spi: spi.to_be_bytes().to_vec(),
            ty: 16393,
            data: Vec::new(),
        }),
        Payload::Sa(esp.into_iter().collect()),
        Payload::Nonce(vec![7; 32]),
        Payload::TsI(local),
        Payload::TsR(remote),
    ];
    let ike = parse_proposal("aes128gcm16-prfsha256-x25519")
        .map(|p| Proposal::from_ike(1, &p, 0x0102_0304_0506_0708u64.to_be_bytes().to_vec()));
    let mut basepoint = vec![0u8; 32];
    basepoint[0] = 9;
    let ike_rekey = [
        Payload::Sa(ike.into_iter().collect()),
        Payload::Nonce(vec![8; 32]),
        Payload::Ke {
            group: 31,
            data: basepoint,
        },
    ];
    let chain = |p: &[Payload]| {
        let mut v = Vec::new();
        let first = crate::wire::emit_chain(p, &mut v);
        (first, v)
    };
    let (c1, c1b) = chain(&child_rekey);
    let (c2, c2b) = chain(&ike_rekey);
    for (name, s) in [
        ("dpd", sealed(37, 0, &[])),
        ("delete-ike", sealed(37, 42, &delete_ike)),
        ("rekey-unknown", sealed(36, 41, &rekey)),
        ("rekey-child", sealed(36, c1, &c1b)),
        ("rekey-ike", sealed(36, c2, &c2b)),
    ] {
        for side in [4u8, 12] {
            let mut v = vec![side];
            v.extend_from_slice(&s);
            out.push(("ike_endpoint", format!("established-{name}-{side}"), v));
        }
    }
    out
}
