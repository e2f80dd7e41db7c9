//! IKEv2 cryptography (RFC 7296 2.13-2.17): the PRF (HMAC-SHA-256), prf+, SKEYSEED and the
//! IKE SA's keys, child SA keying material, PSK authentication; DH in [`dh`], the SK
//! payload in [`sk`].

pub(crate) mod dh;
pub(crate) mod sk;
#[cfg(test)]
mod vectors;

use crate::config::{EspTransform, IkeProposal, Secret};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

type HmacSha256 = Hmac<Sha256>;

/// Output length of the PRF (and its preferred key length).
pub(crate) const PRF_LEN: usize = 32;

/// prf(key, data[0] | data[1] | ...).
pub(crate) fn prf(key: &[u8], data: &[&[u8]]) -> Zeroizing<[u8; PRF_LEN]> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for d in data {
        m.update(d);
    }
    let mut out = Zeroizing::new([0u8; PRF_LEN]);
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

/// prf+(key, seed) truncated to `len` bytes (RFC 7296 2.13): T1 = prf(K, S | 0x01),
/// Tn = prf(K, Tn-1 | S | n). `len` is at most 255 blocks by construction of the callers.
pub(crate) fn prf_plus(key: &[u8], seed: &[&[u8]], len: usize) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::with_capacity(len + PRF_LEN));
    let mut t: Zeroizing<[u8; PRF_LEN]> = Zeroizing::new([0; PRF_LEN]);
    let mut n = 1u8;
    while out.len() < len {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(seed.len() + 2);
        if n > 1 {
            parts.push(&t[..]);
        }
        parts.extend_from_slice(seed);
        let c = [n];
        parts.push(&c);
        t = prf(key, &parts);
        out.extend_from_slice(&t[..]);
        n = n.wrapping_add(1);
    }
    out.truncate(len);
    out
}

/// An IKE SA's keys (RFC 7296 2.14).
#[derive(Clone)]
pub(crate) struct IkeKeys {
    pub(crate) suite: IkeProposal,
    pub(crate) sk_d: Secret,
    pub(crate) sk_ai: Secret,
    pub(crate) sk_ar: Secret,
    pub(crate) sk_ei: Secret,
    pub(crate) sk_er: Secret,
    pub(crate) sk_pi: Secret,
    pub(crate) sk_pr: Secret,
}

impl IkeKeys {
    /// {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr |
    /// SPIi | SPIr). Encryption keys of AES-GCM carry their 4-byte salt (RFC 5282 7.1).
    pub(crate) fn derive(
        suite: IkeProposal,
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> IkeKeys {
        let integ = if suite.integ.is_some() { 32 } else { 0 };
        let encr = suite.encr.key_len() + if suite.encr.is_aead() { 4 } else { 0 };
        let total = 3 * PRF_LEN + 2 * integ + 2 * encr;
        let km = prf_plus(
            skeyseed,
            &[ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()],
            total,
        );
        let mut pos = 0;
        let mut take = |n: usize| {
            let s = Secret::from(&km[pos..pos + n]);
            pos += n;
            s
        };
        IkeKeys {
            suite,
            sk_d: take(PRF_LEN),
            sk_ai: take(integ),
            sk_ar: take(integ),
            sk_ei: take(encr),
            sk_er: take(encr),
            sk_pi: take(PRF_LEN),
            sk_pr: take(PRF_LEN),
        }
    }
}

/// SKEYSEED of a new IKE SA: prf(Ni | Nr, g^ir).
pub(crate) fn skeyseed(ni: &[u8], nr: &[u8], gir: &[u8]) -> Zeroizing<[u8; PRF_LEN]> {
    let mut key = Zeroizing::new(Vec::with_capacity(ni.len() + nr.len()));
    key.extend_from_slice(ni);
    key.extend_from_slice(nr);
    prf(&key, &[gir])
}

/// SKEYSEED of a rekeyed IKE SA: prf(SK_d (old), g^ir (new) | Ni | Nr).
pub(crate) fn skeyseed_rekey(
    old_sk_d: &[u8],
    gir: &[u8],
    ni: &[u8],
    nr: &[u8],
) -> Zeroizing<[u8; PRF_LEN]> {
    prf(old_sk_d, &[gir, ni, nr])
}

/// A child SA's keys (RFC 7296 2.17): KEYMAT = prf+(SK_d, [g^ir |] Ni | Nr); the
/// initiator-to-responder key comes first. Returned as (i->r, r->i) in relayd's layout.
pub(crate) fn child_keys(
    sk_d: &[u8],
    gir: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    t: EspTransform,
) -> (Secret, Secret) {
    let n = t.key_len();
    let km = match gir {
        Some(g) => prf_plus(sk_d, &[g, ni, nr], 2 * n),
        None => prf_plus(sk_d, &[ni, nr], 2 * n),
    };
    (Secret::from(&km[..n]), Secret::from(&km[n..]))
}

/// The AUTH value for a pre-shared key (RFC 7296 2.15): prf(prf(PSK, "Key Pad for
/// IKEv2"), <message> | <peer's nonce> | prf(SK_p, <ID body>)).
pub(crate) fn psk_auth(
    psk: &[u8],
    sk_p: &[u8],
    message: &[u8],
    nonce: &[u8],
    id_body: &[u8],
) -> Zeroizing<[u8; PRF_LEN]> {
    let maced_id = prf(sk_p, &[id_body]);
    let key = prf(psk, &[b"Key Pad for IKEv2"]);
    prf(&key[..], &[message, nonce, &maced_id[..]])
}

/// Constant-time comparison of MACs.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc4231_hmac_sha256() {
        // RFC 4231 test cases 1 and 2.
        let out = prf(&[0x0b; 20], &[b"Hi There"]);
        assert_eq!(
            out.to_vec(),
            hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        );
        let out = prf(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            out.to_vec(),
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
    }

    #[test]
    fn prf_plus_is_the_rfc_chain() {
        let k = [7u8; 32];
        let out = prf_plus(&k, &[b"ab", b"c"], 70);
        let t1 = prf(&k, &[b"abc", &[1]]);
        let t2 = prf(&k, &[&t1[..], b"abc", &[2]]);
        let t3 = prf(&k, &[&t2[..], b"abc", &[3]]);
        assert_eq!(&out[..32], &t1[..]);
        assert_eq!(&out[32..64], &t2[..]);
        assert_eq!(&out[64..], &t3[..6]);
    }

    #[test]
    fn key_layout() {
        let s = crate::config::parse_proposal("aes128gcm16-prfsha256-x25519").unwrap();
        let k = IkeKeys::derive(s, &[1; 32], &[2; 32], &[3; 32], 1, 2);
        assert_eq!((k.sk_ai.len(), k.sk_ei.len(), k.sk_pi.len()), (0, 20, 32));
        let s = crate::config::parse_proposal("aes256-sha256-ecp256").unwrap();
        let k = IkeKeys::derive(s, &[1; 32], &[2; 32], &[3; 32], 1, 2);
        assert_eq!((k.sk_ai.len(), k.sk_ei.len(), k.sk_d.len()), (32, 32, 32));
        let (a, b) = child_keys(
            &[1; 32],
            None,
            &[2; 32],
            &[3; 32],
            EspTransform::Aes128CbcHmacSha256,
        );
        let all = prf_plus(&[1; 32], &[&[2; 32], &[3; 32]], 96);
        assert_eq!((a.bytes(), b.bytes()), (&all[..48], &all[48..]));
    }
}
