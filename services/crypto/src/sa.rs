//! A security association's keyed transforms: seal (encrypt and compute the ICV) and open
//! (check the ICV in constant time, then decrypt), in place, with no allocation.

use crate::keys::{Cipher, ICV_LEN};
use aes::cipher::{
    BlockCipherEncrypt, BlockModeDecrypt, BlockModeEncrypt, InnerIvInit, KeyInit, array::Array,
};
use aes_gcm::aead::AeadInOut;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

enum Transform {
    Gcm128(Box<aes_gcm::Aes128Gcm>, [u8; 4]),
    Gcm256(Box<aes_gcm::Aes256Gcm>, [u8; 4]),
    Cbc128 {
        aes: Box<aes::Aes128>,
        mac: Box<HmacSha256>,
        iv_seed: [u8; 16],
    },
    Cbc256 {
        aes: Box<aes::Aes256>,
        mac: Box<HmacSha256>,
        iv_seed: [u8; 16],
    },
}

/// The keyed transforms of one SA.
pub struct SaCrypto {
    cipher: Cipher,
    t: Transform,
}

impl std::fmt::Debug for SaCrypto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaCrypto")
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

/// The ICV did not verify (or the data cannot be a valid ciphertext).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthFailed;

/// [`SaCrypto::seal`] was given a buffer that cannot be an ESP packet of its suite: shorter
/// than SPI, sequence number, IV and ICV, or whose body is not a whole number of cipher
/// blocks (CBC would leave the tail in clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLength;

impl SaCrypto {
    /// Keys the SA from a key of `cipher.key_len()` bytes (checked by the caller).
    pub fn new(cipher: Cipher, key: &[u8]) -> SaCrypto {
        let a = cipher.aes_len();
        let mut iv_seed = [0u8; 16];
        // CBC IVs must be unpredictable (RFC 3602 2.3): each is the AES encryption of this
        // random per-SA seed mixed with the sequence number, so no system call per packet.
        let _ = getrandom::fill(&mut iv_seed);
        let mac = || {
            Box::new(
                <HmacSha256 as KeyInit>::new_from_slice(&key[a..])
                    .expect("HMAC takes any key length"),
            )
        };
        let t = match cipher {
            Cipher::Aes128Gcm => Transform::Gcm128(
                Box::new(aes_gcm::Aes128Gcm::new_from_slice(&key[..a]).expect("length checked")),
                key[a..a + 4].try_into().expect("length checked"),
            ),
            Cipher::Aes256Gcm => Transform::Gcm256(
                Box::new(aes_gcm::Aes256Gcm::new_from_slice(&key[..a]).expect("length checked")),
                key[a..a + 4].try_into().expect("length checked"),
            ),
            Cipher::Aes128CbcHmac => Transform::Cbc128 {
                aes: Box::new(aes::Aes128::new_from_slice(&key[..a]).expect("length checked")),
                mac: mac(),
                iv_seed,
            },
            Cipher::Aes256CbcHmac => Transform::Cbc256 {
                aes: Box::new(aes::Aes256::new_from_slice(&key[..a]).expect("length checked")),
                mac: mac(),
                iv_seed,
            },
        };
        SaCrypto { cipher, t }
    }

    /// The suite.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Encrypts `esp[8 + iv ..len - ICV]` in place (already padded), writes the IV after
    /// the SPI and sequence number, and the ICV at the end. `esp` starts at the SPI.
    /// With extended sequence numbers (`esn`), the high 32 bits of `seq`, which are not
    /// sent, are covered by the ICV (RFC 4303 2.2.1, RFC 4106 5). A buffer that cannot be
    /// such a packet ([`BadLength`]) is left as it is.
    pub fn seal(&self, seq: u64, esn: bool, esp: &mut [u8]) -> Result<(), BadLength> {
        if !self.body_fits(esp.len()) {
            return Err(BadLength);
        }
        self.seal_unchecked(seq, esn, esp);
        Ok(())
    }

    /// Whether an ESP packet of `len` bytes (SPI to ICV) has room for the header, IV and
    /// ICV, and a body of whole cipher blocks (possibly none).
    fn body_fits(&self, len: usize) -> bool {
        len.checked_sub(8 + self.cipher.iv_len() + ICV_LEN)
            .is_some_and(|body| body.is_multiple_of(self.cipher.block()))
    }

    /// [`seal`](Self::seal) without its length checks, for tests that forge malformed
    /// packets with a valid ICV (the caller guarantees room for header, IV and ICV).
    pub(crate) fn seal_unchecked(&self, seq: u64, esn: bool, esp: &mut [u8]) {
        let hi = esn.then_some((seq >> 32) as u32);
        let iv_len = self.cipher.iv_len();
        let (head, rest) = esp.split_at_mut(8 + iv_len);
        let (body, icv) = rest.split_at_mut(rest.len() - ICV_LEN);
        match &self.t {
            Transform::Gcm128(g, salt) => gcm_seal(&**g, salt, seq, hi, head, body, icv),
            Transform::Gcm256(g, salt) => gcm_seal(&**g, salt, seq, hi, head, body, icv),
            Transform::Cbc128 { aes, mac, iv_seed } => {
                cbc_seal::<aes::Aes128>(aes, mac, iv_seed, seq, hi, esp)
            }
            Transform::Cbc256 { aes, mac, iv_seed } => {
                cbc_seal::<aes::Aes256>(aes, mac, iv_seed, seq, hi, esp)
            }
        }
    }

    /// Checks the ICV of `esp` (from the SPI to the end) in constant time and, only if it
    /// holds, decrypts the body in place. `seq_hi` is the inferred high half of an extended
    /// sequence number (`None` without ESN).
    pub fn open(&self, seq_hi: Option<u32>, esp: &mut [u8]) -> Result<(), AuthFailed> {
        let iv_len = self.cipher.iv_len();
        if !self.body_fits(esp.len()) {
            return Err(AuthFailed);
        }
        let (head, rest) = esp.split_at_mut(8 + iv_len);
        let (body, icv) = rest.split_at_mut(rest.len() - ICV_LEN);
        match &self.t {
            Transform::Gcm128(g, salt) => gcm_open(&**g, salt, seq_hi, head, body, icv),
            Transform::Gcm256(g, salt) => gcm_open(&**g, salt, seq_hi, head, body, icv),
            Transform::Cbc128 { aes, mac, .. } => cbc_open::<aes::Aes128>(aes, mac, seq_hi, esp),
            Transform::Cbc256 { aes, mac, .. } => cbc_open::<aes::Aes256>(aes, mac, seq_hi, esp),
        }
    }
}

/// The GCM AAD (RFC 4106 5): SPI and sequence number, with the ESN's high half between
/// them when in use. Returns the buffer and its length.
fn gcm_aad(head: &[u8], seq_hi: Option<u32>) -> ([u8; 12], usize) {
    let mut aad = [0u8; 12];
    aad[..4].copy_from_slice(&head[..4]);
    match seq_hi {
        Some(hi) => {
            aad[4..8].copy_from_slice(&hi.to_be_bytes());
            aad[8..12].copy_from_slice(&head[4..8]);
            (aad, 12)
        }
        None => {
            aad[4..8].copy_from_slice(&head[4..8]);
            (aad, 8)
        }
    }
}

fn gcm_seal<A>(
    g: &A,
    salt: &[u8; 4],
    seq: u64,
    seq_hi: Option<u32>,
    head: &mut [u8],
    body: &mut [u8],
    icv: &mut [u8],
) where
    A: AeadInOut
        + aes_gcm::aead::AeadCore<
            NonceSize = aes_gcm::aead::consts::U12,
            TagSize = aes_gcm::aead::consts::U16,
        >,
{
    // RFC 4106 3.1: the explicit IV only has to be unique per key; the sequence number is.
    head[8..16].copy_from_slice(&seq.to_be_bytes());
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(salt);
    nonce[4..].copy_from_slice(&head[8..16]);
    let (aad, n) = gcm_aad(head, seq_hi);
    let tag = g
        .encrypt_inout_detached(&nonce.into(), &aad[..n], body.into())
        .expect("ESP payloads are far below GCM's length limit");
    icv.copy_from_slice(&tag);
}

fn gcm_open<A>(
    g: &A,
    salt: &[u8; 4],
    seq_hi: Option<u32>,
    head: &[u8],
    body: &mut [u8],
    icv: &[u8],
) -> Result<(), AuthFailed>
where
    A: AeadInOut
        + aes_gcm::aead::AeadCore<
            NonceSize = aes_gcm::aead::consts::U12,
            TagSize = aes_gcm::aead::consts::U16,
        >,
{
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(salt);
    nonce[4..].copy_from_slice(&head[8..16]);
    let tag: [u8; 16] = icv.try_into().map_err(|_| AuthFailed)?;
    let (aad, n) = gcm_aad(head, seq_hi);
    g.decrypt_inout_detached(&nonce.into(), &aad[..n], body.into(), &tag.into())
        .map_err(|_| AuthFailed)
}

fn cbc_seal<C>(
    aes: &C,
    mac: &HmacSha256,
    seed: &[u8; 16],
    seq: u64,
    seq_hi: Option<u32>,
    esp: &mut [u8],
) where
    C: BlockCipherEncrypt
        + aes::cipher::BlockCipherDecrypt
        + Clone
        + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let n = esp.len();
    let mut iv = Array::from(*seed);
    for (b, s) in iv[8..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    aes.encrypt_block(&mut iv);
    esp[8..24].copy_from_slice(&iv);
    let mut enc = cbc::Encryptor::<C>::inner_iv_init(aes.clone(), &iv);
    let (blocks, _) = Array::slice_as_chunks_mut(&mut esp[24..n - ICV_LEN]);
    enc.encrypt_blocks(blocks);
    // RFC 4303 2.8 / RFC 4868: the ICV covers SPI, sequence number, IV and ciphertext,
    // then the ESN's high half (2.2.1), which is not sent.
    let mut m = mac.clone();
    m.update(&esp[..n - ICV_LEN]);
    if let Some(hi) = seq_hi {
        m.update(&hi.to_be_bytes());
    }
    let full = m.finalize().into_bytes();
    esp[n - ICV_LEN..].copy_from_slice(&full[..ICV_LEN]);
}

fn cbc_open<C>(
    aes: &C,
    mac: &HmacSha256,
    seq_hi: Option<u32>,
    esp: &mut [u8],
) -> Result<(), AuthFailed>
where
    C: aes::cipher::BlockCipherDecrypt
        + Clone
        + aes::cipher::BlockSizeUser<BlockSize = aes::cipher::consts::U16>,
{
    let n = esp.len();
    let mut m = mac.clone();
    m.update(&esp[..n - ICV_LEN]);
    if let Some(hi) = seq_hi {
        m.update(&hi.to_be_bytes());
    }
    m.verify_truncated_left(&esp[n - ICV_LEN..])
        .map_err(|_| AuthFailed)?;
    let iv =
        Array::<u8, aes::cipher::consts::U16>::try_from(&esp[8..24]).map_err(|_| AuthFailed)?;
    let mut dec = cbc::Decryptor::<C>::inner_iv_init(aes.clone(), &iv);
    let (blocks, _) = Array::slice_as_chunks_mut(&mut esp[24..n - ICV_LEN]);
    dec.decrypt_blocks(blocks);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn aes_cbc_rfc3602_case_1() {
        let key = hex("06a9214036b8a15b512e03d534120006");
        let iv = hex("3dafba429d9eb430b422da802c9fac41");
        let aes = aes::Aes128::new_from_slice(&key).unwrap();
        let mut enc = cbc::Encryptor::<aes::Aes128>::inner_iv_slice_init(aes, &iv).unwrap();
        let mut buf = *b"Single block msg";
        let (blocks, _) = Array::slice_as_chunks_mut(&mut buf);
        enc.encrypt_blocks(blocks);
        assert_eq!(buf.to_vec(), hex("e353779c1079aeb82708942dbe77181a"));
    }

    #[test]
    fn aes_gcm_test_case_2() {
        // McGrew & Viega, GCM spec test case 2: K = 0^128, P = 0^128, IV = 0^96.
        let g = aes_gcm::Aes128Gcm::new_from_slice(&[0u8; 16]).unwrap();
        let mut buf = [0u8; 16];
        let tag = g
            .encrypt_inout_detached(&[0u8; 12].into(), &[], (&mut buf[..]).into())
            .unwrap();
        assert_eq!(buf.to_vec(), hex("0388dace60b6a392f328c2b971b2fe78"));
        assert_eq!(tag.to_vec(), hex("ab6e47d42cec13bdf53a67b21257bddf"));
    }

    #[test]
    fn hmac_sha256_rfc4231_case_1_and_4868_truncation() {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&[0x0b; 20]).unwrap();
        m.update(b"Hi There");
        let full = m.clone().finalize().into_bytes();
        assert_eq!(
            full.to_vec(),
            hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        );
        // HMAC-SHA-256-128 keeps the leftmost 128 bits.
        assert!(m.verify_truncated_left(&full[..16]).is_ok());
    }

    #[test]
    fn seal_open_round_trip_and_tamper_for_every_suite() {
        for (_, c) in Cipher::ALL {
            let key: Vec<u8> = (0..c.key_len() as u8).collect();
            let sa = SaCrypto::new(c, &key);
            let body = 32;
            let mut esp = vec![0u8; 8 + c.iv_len() + body + ICV_LEN];
            esp[..8].copy_from_slice(&[0, 0, 0x10, 1, 0, 0, 0, 7]);
            for (i, b) in esp[8 + c.iv_len()..8 + c.iv_len() + body]
                .iter_mut()
                .enumerate()
            {
                *b = i as u8;
            }
            let plain = esp.clone();
            sa.seal(7, false, &mut esp).unwrap();
            assert_ne!(esp[8 + c.iv_len()..], plain[8 + c.iv_len()..], "{c:?}");
            let mut ok = esp.clone();
            sa.open(None, &mut ok).unwrap();
            assert_eq!(
                ok[8 + c.iv_len()..ok.len() - ICV_LEN],
                plain[8 + c.iv_len()..plain.len() - ICV_LEN],
                "{c:?}"
            );
            for i in 0..esp.len() {
                let mut bad = esp.clone();
                bad[i] ^= 1;
                assert_eq!(
                    sa.open(None, &mut bad),
                    Err(AuthFailed),
                    "{c:?}: flipped byte {i} accepted"
                );
            }
            // With ESN the unsent high half is authenticated: the wrong one fails.
            let mut e = plain.clone();
            sa.seal((5 << 32) | 7, true, &mut e).unwrap();
            assert_eq!(sa.open(Some(4), &mut e.clone()), Err(AuthFailed), "{c:?}");
            assert_eq!(sa.open(None, &mut e.clone()), Err(AuthFailed), "{c:?}");
            sa.open(Some(5), &mut e).unwrap();
            assert_eq!(
                e[8 + c.iv_len()..e.len() - ICV_LEN],
                plain[8 + c.iv_len()..plain.len() - ICV_LEN]
            );
        }
    }
}
