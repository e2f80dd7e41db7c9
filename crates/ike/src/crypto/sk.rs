//! The Encrypted and Authenticated payload (RFC 7296 3.14): AES-GCM-16 (RFC 5282: 8-byte
//! explicit IV, salt from the key material, AAD = IKE header to the SK payload header) and
//! AES-CBC with HMAC-SHA-256-128 (RFC 3602, RFC 4868: ICV over the whole message).

use super::{HmacSha256, IkeKeys};
use crate::types::RngSource;
use crate::wire::{self, Header, Payload, WireError, pt};
use aes::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit, array::Array};
use aes_gcm::aead::AeadInOut;
use hmac::{KeyInit, Mac};

const ICV: usize = 16;

/// Why an SK payload was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SkError {
    /// Integrity check failed (or the ciphertext cannot be one).
    Integrity,
    /// The plaintext's payloads do not parse.
    Wire(WireError),
}

impl IkeKeys {
    fn dir(&self, from_initiator: bool) -> (&[u8], &[u8]) {
        if from_initiator {
            (self.sk_ei.bytes(), self.sk_ai.bytes())
        } else {
            (self.sk_er.bytes(), self.sk_ar.bytes())
        }
    }

    /// A whole message: `header` and an SK payload holding `inner`, sent by the original
    /// initiator if `from_initiator`.
    pub(crate) fn seal(
        &self,
        from_initiator: bool,
        header: Header,
        inner: &[Payload],
        rng: &mut dyn RngSource,
    ) -> Vec<u8> {
        let mut plain = zeroize::Zeroizing::new(Vec::with_capacity(256));
        let first = wire::emit_chain(inner, &mut plain);
        self.seal_raw(from_initiator, header, first, plain, rng)
    }

    /// [`seal`](Self::seal) of an already encoded payload chain starting with type `first`.
    pub(crate) fn seal_raw(
        &self,
        from_initiator: bool,
        mut header: Header,
        first: u8,
        mut plain: zeroize::Zeroizing<Vec<u8>>,
        rng: &mut dyn RngSource,
    ) -> Vec<u8> {
        let (ek, ak) = self.dir(from_initiator);
        let gcm = self.suite.encr.is_aead();
        let (iv_len, block) = if gcm { (8, 4) } else { (16, 16) };
        // Pad so that plaintext ‖ padding ‖ pad length fills whole blocks.
        let pad = (block - (plain.len() + 1) % block) % block;
        plain.extend(std::iter::repeat_n(0u8, pad));
        plain.push(pad as u8);
        header.next = pt::SK;
        let mut out = Vec::with_capacity(wire::HEADER_LEN + 4 + iv_len + plain.len() + ICV);
        header.emit(&mut out);
        let sk_len = (4 + iv_len + plain.len() + ICV) as u16;
        out.push(first);
        out.push(0);
        out.extend_from_slice(&sk_len.to_be_bytes());
        let aad_end = out.len();
        let mut iv = [0u8; 16];
        rng.fill(&mut iv[..iv_len]);
        out.extend_from_slice(&iv[..iv_len]);
        let body_start = out.len();
        out.extend_from_slice(&plain);
        out.extend_from_slice(&[0u8; ICV]);
        wire::set_length(&mut out);
        let n = out.len();
        if gcm {
            let (key, salt) = ek.split_at(ek.len() - 4);
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            nonce[4..].copy_from_slice(&iv[..8]);
            let (aad, rest) = out.split_at_mut(aad_end);
            let (body, icv) = rest[iv_len..].split_at_mut(n - body_start - ICV);
            let tag = match key.len() {
                16 => aes_gcm::Aes128Gcm::new_from_slice(key).ok().and_then(|g| {
                    g.encrypt_inout_detached(&nonce.into(), aad, body.into())
                        .ok()
                }),
                _ => aes_gcm::Aes256Gcm::new_from_slice(key).ok().and_then(|g| {
                    g.encrypt_inout_detached(&nonce.into(), aad, body.into())
                        .ok()
                }),
            };
            if let Some(t) = tag {
                icv.copy_from_slice(&t);
            }
        } else {
            let ivb = Array::<u8, aes::cipher::consts::U16>::from(iv);
            let body = &mut out[body_start..n - ICV];
            let (blocks, _) = Array::slice_as_chunks_mut(body);
            match ek.len() {
                16 => {
                    if let Ok(mut e) = cbc::Encryptor::<aes::Aes128>::new_from_slices(ek, &ivb) {
                        e.encrypt_blocks(blocks);
                    }
                }
                _ => {
                    if let Ok(mut e) = cbc::Encryptor::<aes::Aes256>::new_from_slices(ek, &ivb) {
                        e.encrypt_blocks(blocks);
                    }
                }
            }
            let mut m =
                <HmacSha256 as KeyInit>::new_from_slice(ak).expect("HMAC takes any key length");
            m.update(&out[..n - ICV]);
            let full = m.finalize().into_bytes();
            out[n - ICV..].copy_from_slice(&full[..ICV]);
        }
        out
    }

    /// Verifies and decrypts the SK payload at `offset` of `msg` (sent by the original
    /// initiator if `from_initiator`), whose first inner payload has type `inner`, and
    /// parses the inner payloads.
    pub(crate) fn open(
        &self,
        from_initiator: bool,
        msg: &[u8],
        offset: usize,
        inner: u8,
    ) -> Result<Vec<Payload>, SkError> {
        let (ek, ak) = self.dir(from_initiator);
        let gcm = self.suite.encr.is_aead();
        let (iv_len, block) = if gcm { (8, 1) } else { (16, 16) };
        let body_start = offset + 4 + iv_len;
        let ct_len = msg
            .len()
            .checked_sub(body_start + ICV)
            .ok_or(SkError::Integrity)?;
        if ct_len == 0 || ct_len % block != 0 {
            return Err(SkError::Integrity);
        }
        let iv = msg.get(offset + 4..body_start).ok_or(SkError::Integrity)?;
        let mut body = zeroize::Zeroizing::new(
            msg.get(body_start..body_start + ct_len)
                .ok_or(SkError::Integrity)?
                .to_vec(),
        );
        let icv = msg.get(msg.len() - ICV..).ok_or(SkError::Integrity)?;
        if gcm {
            let (key, salt) = ek.split_at(ek.len().saturating_sub(4));
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(salt);
            nonce[4..].copy_from_slice(iv);
            let aad = msg.get(..offset + 4).ok_or(SkError::Integrity)?;
            let tag: [u8; 16] = icv.try_into().map_err(|_| SkError::Integrity)?;
            let ok = match key.len() {
                16 => aes_gcm::Aes128Gcm::new_from_slice(key).ok().map(|g| {
                    g.decrypt_inout_detached(
                        &nonce.into(),
                        aad,
                        body.as_mut_slice().into(),
                        &tag.into(),
                    )
                    .is_ok()
                }),
                _ => aes_gcm::Aes256Gcm::new_from_slice(key).ok().map(|g| {
                    g.decrypt_inout_detached(
                        &nonce.into(),
                        aad,
                        body.as_mut_slice().into(),
                        &tag.into(),
                    )
                    .is_ok()
                }),
            };
            if ok != Some(true) {
                return Err(SkError::Integrity);
            }
        } else {
            let mut m =
                <HmacSha256 as KeyInit>::new_from_slice(ak).expect("HMAC takes any key length");
            m.update(&msg[..msg.len() - ICV]);
            m.verify_truncated_left(icv)
                .map_err(|_| SkError::Integrity)?;
            let ivb = Array::<u8, aes::cipher::consts::U16>::try_from(iv)
                .map_err(|_| SkError::Integrity)?;
            let (blocks, _) = Array::slice_as_chunks_mut(body.as_mut_slice());
            match ek.len() {
                16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(ek, &ivb)
                    .map_err(|_| SkError::Integrity)?
                    .decrypt_blocks(blocks),
                _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(ek, &ivb)
                    .map_err(|_| SkError::Integrity)?
                    .decrypt_blocks(blocks),
            }
        }
        let pad = usize::from(*body.last().ok_or(SkError::Integrity)?);
        let end = body
            .len()
            .checked_sub(pad + 1)
            .ok_or(SkError::Wire(WireError::Length))?;
        wire::parse_chain(&body[..end], inner, 0).map_err(SkError::Wire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_proposal;
    use crate::types::SeededRng;

    #[test]
    fn seal_open_both_suites_and_tamper() {
        let mut rng = SeededRng::new(3);
        for s in [
            "aes128gcm16-prfsha256-x25519",
            "aes256gcm16-prfsha256-x25519",
            "aes128-sha256-ecp256",
            "aes256-sha256-ecp256",
        ] {
            let keys = IkeKeys::derive(
                parse_proposal(s).unwrap(),
                &[9; 32],
                &[1; 32],
                &[2; 32],
                5,
                6,
            );
            let h = Header {
                spi_i: 5,
                spi_r: 6,
                next: 0,
                exchange: 37,
                flags: 0x08,
                msg_id: 2,
                length: 0,
            };
            let inner = vec![
                Payload::Delete {
                    proto: 3,
                    spis: vec![0x1234],
                },
                Payload::Nonce(vec![4; 20]),
            ];
            let msg = keys.seal(true, h, &inner, &mut rng);
            let m = wire::parse_message(&msg).unwrap();
            let Some(Payload::Sk {
                offset,
                inner: first,
            }) = m.payloads.last().cloned()
            else {
                panic!()
            };
            assert_eq!(keys.open(true, &msg, offset, first).unwrap(), inner, "{s}");
            assert_eq!(
                keys.open(false, &msg, offset, first).unwrap_err(),
                SkError::Integrity,
                "other direction's keys"
            );
            for i in [0, 20, offset + 2, offset + 5, msg.len() - 20, msg.len() - 1] {
                let mut t = msg.clone();
                t[i] ^= 1;
                assert_eq!(
                    keys.open(true, &t, offset, first).unwrap_err(),
                    SkError::Integrity,
                    "{s} byte {i}"
                );
            }
        }
    }
}
