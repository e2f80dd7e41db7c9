//! Known answers from strongSwan: the key material two charons logged at level 4
//! (crates/ike/tests/data, see its README) recomputed with this crate's functions:
//! SKEYSEED and SK_* of IKE_SA_INIT, both AUTH values, the first child SA's KEYMAT, the
//! rekeyed child's (with PFS in the CBC run) and the rekeyed IKE SA's SKEYSEED and keys.

use super::*;
use crate::config::{EspTransform, parse_proposal};
use crate::wire::{self, Payload};

/// One hex dump of the log: the section (the payload being generated or parsed), the
/// label (the text before "=>", or the rule line before it), the bytes.
struct Dump {
    section: String,
    label: String,
    bytes: Vec<u8>,
}

/// The text after "NN[TAG] ".
fn text(line: &str) -> &str {
    line.split_once("] ").map_or("", |(_, t)| t)
}

fn dumps(log: &str) -> Vec<Dump> {
    let mut out = Vec::new();
    let (mut section, mut last) = (String::new(), String::new());
    let mut lines = log.lines().peekable();
    while let Some(line) = lines.next() {
        let t = text(line);
        // "parsing X payload, N bytes left" starts the payloads of a decrypted SK payload.
        if t.contains("generating payload of type ")
            || t.contains("starting parsing a ")
            || (t.starts_with("parsing ") && t.contains(" payload, "))
        {
            section = t.trim().to_string();
        }
        let Some((label, rest)) = t.split_once("=> ") else {
            last = t.trim().to_string();
            continue;
        };
        let Some(n) = rest
            .split(" bytes @")
            .next()
            .and_then(|n| n.trim().parse::<usize>().ok())
        else {
            last = t.trim().to_string();
            continue;
        };
        let label = if label.trim().is_empty() {
            last.clone()
        } else {
            label.trim().to_string()
        };
        let mut bytes = Vec::with_capacity(n);
        while bytes.len() < n {
            let Some(l) = lines.peek() else { break };
            let Some((_, hex)) = text(l).split_once(": ") else {
                break;
            };
            let want = (n - bytes.len()).min(16);
            let row: Vec<u8> = hex
                .split(' ')
                .take(want)
                .filter_map(|h| u8::from_str_radix(h, 16).ok())
                .collect();
            if row.len() != want {
                break;
            }
            bytes.extend(row);
            lines.next();
        }
        out.push(Dump {
            section: section.clone(),
            label,
            bytes,
        });
    }
    out
}

fn nth<'a>(d: &'a [Dump], label: &str, n: usize) -> &'a [u8] {
    d.iter()
        .filter(|x| x.label == label)
        .nth(n)
        .map(|x| &x.bytes[..])
        .unwrap_or_else(|| panic!("no {label:?} #{n} in the log"))
}

fn nonces(d: &[Dump]) -> Vec<&[u8]> {
    d.iter()
        .filter(|x| x.section.contains("NONCE") && x.label.ends_with("rule 10 CHUNK_DATA"))
        .map(|x| &x.bytes[..])
        .collect()
}

fn spi(d: &[Dump], rule: &str) -> u64 {
    let b = d
        .iter()
        .rev()
        .find(|x| x.label == format!("generating rule {rule} IKE_SPI"))
        .map(|x| &x.bytes[..])
        .unwrap_or(&[]);
    u64::from_be_bytes(b.try_into().expect("8-byte SPI"))
}

fn check(log: &str, ike: &str, esp: EspTransform, pfs_rekey: bool) {
    let d = dumps(log);
    let suite = parse_proposal(ike).unwrap();
    let psk = tests::hex("5ce1e7a5ecf1c6d1d4e95d26b6c42c1b");
    let octets = "octets = message + nonce + prf(Sk_px, IDx')";
    // The initiator's signed octets: its IKE_SA_INIT request ‖ Nr ‖ prf(SK_pi, IDi').
    let oi = nth(&d, octets, 0);
    let len = u32::from_be_bytes(oi[24..28].try_into().unwrap()) as usize;
    let init_req = &oi[..len];
    let nr = &oi[len..oi.len() - 32];
    let req = wire::parse_message(init_req).unwrap();
    let ni = req
        .payloads
        .iter()
        .find_map(|p| {
            if let Payload::Nonce(n) = p {
                Some(n.clone())
            } else {
                None
            }
        })
        .unwrap();
    let or = nth(&d, octets, 1);
    let rlen = u32::from_be_bytes(or[24..28].try_into().unwrap()) as usize;
    let init_resp = &or[..rlen];
    assert_eq!(&or[rlen..or.len() - 32], &ni[..]);
    let resp = wire::parse_message(init_resp).unwrap();
    assert_eq!(
        crate::wire::proposal::ike_from_chosen(
            resp.payloads
                .iter()
                .find_map(|p| if let Payload::Sa(s) = p {
                    s.first()
                } else {
                    None
                })
                .unwrap()
        ),
        Some(suite)
    );
    let (spi_i, spi_r) = (req.header.spi_i, resp.header.spi_r);
    let ns = nonces(&d);
    assert_eq!((ns[0], ns[1]), (&ni[..], nr), "nonce dumps in order");

    let gir = nth(&d, "shared Diffie Hellman secret", 0);
    let seed = skeyseed(&ni, nr, gir);
    assert_eq!(&seed[..], nth(&d, "SKEYSEED", 0));
    let k = IkeKeys::derive(suite, &seed[..], &ni, nr, spi_i, spi_r);
    let keys = |k: &IkeKeys, n: usize| {
        assert_eq!(k.sk_d.bytes(), nth(&d, "Sk_d secret", n));
        assert_eq!(k.sk_ei.bytes(), nth(&d, "Sk_ei secret", n));
        assert_eq!(k.sk_er.bytes(), nth(&d, "Sk_er secret", n));
        assert_eq!(k.sk_pi.bytes(), nth(&d, "Sk_pi secret", n));
        assert_eq!(k.sk_pr.bytes(), nth(&d, "Sk_pr secret", n));
        if suite.integ.is_some() {
            assert_eq!(k.sk_ai.bytes(), nth(&d, "Sk_ai secret", n));
            assert_eq!(k.sk_ar.bytes(), nth(&d, "Sk_ar secret", n));
        }
    };
    keys(&k, 0);

    // AUTH of both sides.
    let auth = "AUTH = prf(prf(secret, keypad), octets)";
    let idi = nth(&d, "IDx'", 0);
    assert_eq!(&oi[len + nr.len()..], &prf(k.sk_pi.bytes(), &[idi])[..]);
    assert_eq!(
        &psk_auth(&psk, k.sk_pi.bytes(), init_req, nr, idi)[..],
        nth(&d, auth, 0)
    );
    let idr = nth(&d, "IDx'", 1);
    assert_eq!(
        &psk_auth(&psk, k.sk_pr.bytes(), init_resp, &ni, idr)[..],
        nth(&d, auth, 1)
    );

    // Child SA keys: relayd's layout per direction is encryption key ‖ integrity key.
    let child = |n: usize, ir: &Secret, ri: &Secret| {
        let mut want_ir = nth(&d, "encryption initiator key", n).to_vec();
        let mut want_ri = nth(&d, "encryption responder key", n).to_vec();
        if matches!(
            esp,
            EspTransform::Aes128CbcHmacSha256 | EspTransform::Aes256CbcHmacSha256
        ) {
            want_ir.extend_from_slice(nth(&d, "integrity initiator key", n));
            want_ri.extend_from_slice(nth(&d, "integrity responder key", n));
        }
        assert_eq!(
            (ir.bytes(), ri.bytes()),
            (&want_ir[..], &want_ri[..]),
            "child #{n}"
        );
    };
    assert_eq!(nth(&d, "seed", 0), [&ni[..], nr].concat());
    let (ir, ri) = child_keys(k.sk_d.bytes(), None, &ni, nr, esp);
    child(0, &ir, &ri);

    // The child rekey (this charon initiated it), with PFS in the CBC run.
    let (ni2, nr2) = (ns[2], ns[3]);
    let g2 = pfs_rekey.then(|| nth(&d, "DH secret", 0));
    let want_seed: Vec<u8> = [g2.unwrap_or(&[]), ni2, nr2].concat();
    assert_eq!(nth(&d, "seed", 1), &want_seed[..]);
    let (ir, ri) = child_keys(k.sk_d.bytes(), g2, ni2, nr2, esp);
    child(1, &ir, &ri);

    // The IKE rekey (initiated here too): SKEYSEED = prf(SK_d old, g^ir new | Ni | Nr),
    // the new SPIs are those of the final DELETE's header.
    let (ni3, nr3) = (ns[4], ns[5]);
    let g3 = nth(&d, "shared Diffie Hellman secret", 1);
    let seed3 = skeyseed_rekey(k.sk_d.bytes(), g3, ni3, nr3);
    assert_eq!(&seed3[..], nth(&d, "SKEYSEED", 1));
    let k3 = IkeKeys::derive(suite, &seed3[..], ni3, nr3, spi(&d, "0"), spi(&d, "1"));
    keys(&k3, 1);

    // NAT detection hashes: SHA-1(SPIi | SPIr | IP | port), as charon computed them.
    let chunks: Vec<&Dump> = d.iter().filter(|x| x.label == "natd_chunk").collect();
    let hashes: Vec<&Dump> = d.iter().filter(|x| x.label == "natd_hash").collect();
    assert!(!chunks.is_empty() && chunks.len() == hashes.len());
    for (c, h) in chunks.iter().zip(&hashes) {
        let b = &c.bytes;
        let spi = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().unwrap());
        let addr = std::net::SocketAddr::from((
            [b[16], b[17], b[18], b[19]],
            u16::from_be_bytes([b[20], b[21]]),
        ));
        assert_eq!(
            crate::sa::auth::nat_hash(spi(0..8), spi(8..16), addr),
            h.bytes
        );
    }
}

#[test]
fn strongswan_gcm_x25519() {
    let log = include_str!("../../tests/data/strongswan-gcm-initiator.log");
    check(
        log,
        "aes128gcm16-prfsha256-x25519",
        EspTransform::Aes128Gcm16,
        false,
    );
}

#[test]
fn strongswan_cbc_ecp256_pfs() {
    let log = include_str!("../../tests/data/strongswan-cbc-initiator.log");
    check(
        log,
        "aes256-sha256-ecp256",
        EspTransform::Aes256CbcHmacSha256,
        true,
    );
}
