//! Round trips of the message format and refusals of malformed input.

use super::*;
use crate::config::parse_proposal;

fn sample() -> Vec<Payload> {
    let p = parse_proposal("aes128gcm16-prfsha256-x25519").unwrap();
    vec![
        Payload::Sa(vec![Proposal::from_ike(1, &p, Vec::new())]),
        Payload::Ke {
            group: 31,
            data: vec![7; 32],
        },
        Payload::Nonce(vec![1; 32]),
        Payload::notify(notify::NAT_DETECTION_SOURCE_IP, vec![2; 20]),
        Payload::TsI(vec![Ts {
            protocol: 17,
            start_port: 1,
            end_port: 2,
            start: "10.0.0.1".parse().unwrap(),
            end: "10.0.0.9".parse().unwrap(),
        }]),
        Payload::Delete {
            proto: proto::ESP,
            spis: vec![1, 2],
        },
        Payload::IdI(Id {
            ty: 2,
            data: b"a.example".to_vec(),
        }),
        Payload::Auth {
            method: 2,
            data: vec![3; 32],
        },
    ]
}

#[test]
fn round_trip() {
    let h = Header {
        spi_i: 1,
        spi_r: 0,
        next: 0,
        exchange: exchange::IKE_SA_INIT,
        flags: flags::INITIATOR,
        msg_id: 0,
        length: 0,
    };
    let bytes = emit_plain(h, &sample());
    let m = parse_message(&bytes).unwrap();
    assert_eq!(m.header.spi_i, 1);
    assert_eq!(m.header.length as usize, bytes.len());
    assert_eq!(m.payloads, sample());
}

#[test]
fn refuses_malformed_without_panic() {
    let h = Header {
        spi_i: 1,
        spi_r: 0,
        next: 0,
        exchange: exchange::IKE_SA_INIT,
        flags: 0,
        msg_id: 0,
        length: 0,
    };
    let bytes = emit_plain(h, &sample());
    // Every truncation and every single-byte change either parses or is refused.
    for n in 0..bytes.len() {
        assert!(parse_message(&bytes[..n]).is_err());
        let mut b = bytes.clone();
        b[n] ^= 0xff;
        let _ = parse_message(&b);
    }
    let mut crit = emit_plain(h, &[Payload::Nonce(vec![0; 16])]);
    crit[16] = 99; // unknown payload type
    crit[29] = 0x80; // critical
    assert_eq!(parse_message(&crit).unwrap_err(), WireError::Critical(99));
    crit[29] = 0;
    assert_eq!(
        parse_message(&crit).unwrap().payloads,
        vec![Payload::Other(99)]
    );
}
