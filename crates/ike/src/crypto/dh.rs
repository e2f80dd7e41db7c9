//! Diffie-Hellman for IKE: group 19 (P-256, RFC 5903: public value x ‖ y, shared secret x)
//! and group 31 (X25519, RFC 8031), with the peer's public value checked.

use crate::config::DhGroup;
use crate::types::RngSource;
use p256::elliptic_curve::sec1::ToSec1Point;
use zeroize::Zeroizing;

/// Our private value for one exchange.
#[derive(Clone)]
pub(crate) enum DhSecret {
    X25519(Zeroizing<[u8; 32]>),
    P256(Box<p256::SecretKey>),
}

impl DhSecret {
    /// A fresh private value and its public value as sent in a KE payload.
    pub(crate) fn generate(group: DhGroup, rng: &mut dyn RngSource) -> (DhSecret, Vec<u8>) {
        match group {
            DhGroup::Curve25519 => {
                let mut k = Zeroizing::new([0u8; 32]);
                rng.fill(&mut k[..]);
                let public = x25519_dalek::x25519(*k, x25519_dalek::X25519_BASEPOINT_BYTES);
                (DhSecret::X25519(k), public.to_vec())
            }
            DhGroup::Ecp256 => loop {
                let mut k = Zeroizing::new([0u8; 32]);
                rng.fill(&mut k[..]);
                // Out of range (probability 2^-32) or zero: draw again.
                if let Ok(sk) = p256::SecretKey::from_slice(&k[..]) {
                    let p = sk.public_key().to_sec1_point(false);
                    let public = p.as_bytes().get(1..).unwrap_or(&[]).to_vec();
                    break (DhSecret::P256(Box::new(sk)), public);
                }
            },
        }
    }

    /// The shared secret g^ir from the peer's public value, or `None` if it is not a valid
    /// public value of the group (wrong length, not on the curve, low order).
    pub(crate) fn shared(&self, peer: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        match self {
            DhSecret::X25519(k) => {
                let u: [u8; 32] = peer.try_into().ok()?;
                let s = Zeroizing::new(x25519_dalek::x25519(**k, u));
                // An all-zero result means a low-order point (RFC 7748 6.1).
                if s.iter().all(|&b| b == 0) {
                    return None;
                }
                Some(Zeroizing::new(s.to_vec()))
            }
            DhSecret::P256(sk) => {
                if peer.len() != 64 {
                    return None;
                }
                let mut enc = [0u8; 65];
                enc[0] = 4;
                enc[1..].copy_from_slice(peer);
                let pk = p256::PublicKey::from_sec1_bytes(&enc).ok()?;
                let s = p256::ecdh::diffie_hellman(sk.to_nonzero_scalar(), pk.as_affine());
                Some(Zeroizing::new(s.raw_secret_bytes().to_vec()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::tests::hex;

    #[test]
    fn rfc7748_x25519() {
        // RFC 7748 6.1: Alice's and Bob's keys and their shared secret.
        let a: [u8; 32] = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
            .try_into()
            .unwrap();
        let b_pub = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
        let s = DhSecret::X25519(Zeroizing::new(a)).shared(&b_pub).unwrap();
        assert_eq!(
            *s,
            hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
        );
        assert!(
            DhSecret::X25519(Zeroizing::new(a))
                .shared(&[0u8; 32])
                .is_none(),
            "low order"
        );
        assert!(
            DhSecret::X25519(Zeroizing::new(a))
                .shared(&[9u8; 31])
                .is_none()
        );
    }

    #[test]
    fn rfc5903_p256() {
        // RFC 5903 8.1: i, g^r (x ‖ y) and g^ir.
        let i = hex("C88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433");
        let gr = hex(
            "D12DFB5289C8D4F81208B70270398C342296970A0BCCB74C736FC7554494BF63\
                      56FBF3CA366CC23E8157854C13C58D6AAC23F046ADA30F8353E74F33039872AB",
        );
        let sk = DhSecret::P256(Box::new(p256::SecretKey::from_slice(&i).unwrap()));
        let s = sk.shared(&gr).unwrap();
        assert_eq!(
            *s,
            hex("D6840F6B42F6EDAFD13116E0E12565202FEF8E9ECE7DCE03812464D04B9442DE")
        );
        let mut bad = gr.clone();
        bad[63] ^= 1;
        assert!(sk.shared(&bad).is_none(), "not on the curve");
    }

    #[test]
    fn both_groups_agree() {
        let mut rng = crate::types::SeededRng::new(1);
        for g in [DhGroup::Curve25519, DhGroup::Ecp256] {
            let (a, pa) = DhSecret::generate(g, &mut rng);
            let (b, pb) = DhSecret::generate(g, &mut rng);
            assert_eq!(*a.shared(&pb).unwrap(), *b.shared(&pa).unwrap());
        }
    }
}
