//! SA payload substructures (RFC 7296 3.3): proposals, transforms and their key-length
//! attribute, with the mapping to and from the configured algorithms.

use super::WireError;
use crate::config::{DhGroup, Encr, EspProposal, EspTransform, IkeProposal, Integ, Prf};

/// Proposals accepted in one SA payload.
const MAX_PROPOSALS: usize = 16;
/// Transforms accepted in one proposal.
const MAX_TRANSFORMS: usize = 64;

/// Transform types.
pub mod tt {
    /// Encryption.
    pub const ENCR: u8 = 1;
    /// PRF.
    pub const PRF: u8 = 2;
    /// Integrity.
    pub const INTEG: u8 = 3;
    /// Diffie-Hellman group (key exchange method).
    pub const DH: u8 = 4;
    /// Extended sequence numbers.
    pub const ESN: u8 = 5;
}

const ENCR_AES_CBC: u16 = 12;
const ENCR_AES_GCM_16: u16 = 20;
const PRF_HMAC_SHA2_256: u16 = 5;
const AUTH_HMAC_SHA2_256_128: u16 = 12;
const KEY_LENGTH_ATTR: u16 = 14;

/// One transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transform {
    /// Transform type.
    pub ty: u8,
    /// Transform ID.
    pub id: u16,
    /// Key length attribute in bits, if present.
    pub key_bits: Option<u16>,
    /// Whether it carries an attribute this implementation does not know (then it is
    /// never chosen, RFC 7296 3.3.6).
    pub unknown_attr: bool,
}

/// One proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Proposal number (1-based; the responder echoes it).
    pub num: u8,
    /// Protocol ID.
    pub proto: u8,
    /// SPI (8 bytes for an IKE rekey, 4 for ESP, empty in IKE_SA_INIT).
    pub spi: Vec<u8>,
    /// Transforms.
    pub transforms: Vec<Transform>,
}

pub(super) fn parse_proposals(b: &[u8]) -> Result<Vec<Proposal>, WireError> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        if out.len() >= MAX_PROPOSALS {
            return Err(WireError::TooMany);
        }
        let h = b.get(pos..pos + 8).ok_or(WireError::Truncated)?;
        let last = h[0] == 0;
        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let p = b.get(pos + 8..pos + len).ok_or(WireError::Truncated)?;
        let spi_len = usize::from(h[6]);
        let spi = p.get(..spi_len).ok_or(WireError::Truncated)?.to_vec();
        let n = usize::from(h[7]);
        if n > MAX_TRANSFORMS || len < 8 {
            return Err(WireError::TooMany);
        }
        let mut transforms = Vec::with_capacity(n);
        let mut tp = spi_len;
        for _ in 0..n {
            let t = p.get(tp..tp + 8).ok_or(WireError::Truncated)?;
            let tlen = usize::from(u16::from_be_bytes([t[2], t[3]]));
            let attrs = p.get(tp + 8..tp + tlen).ok_or(WireError::Truncated)?;
            let (key_bits, unknown_attr) = parse_attrs(attrs)?;
            transforms.push(Transform {
                ty: t[4],
                id: u16::from_be_bytes([t[6], t[7]]),
                key_bits,
                unknown_attr,
            });
            tp += tlen.max(8);
        }
        if tp != p.len() {
            return Err(WireError::Length);
        }
        out.push(Proposal {
            num: h[4],
            proto: h[5],
            spi,
            transforms,
        });
        pos += len;
        if last {
            break;
        }
    }
    if pos != b.len() {
        return Err(WireError::Length);
    }
    Ok(out)
}

fn parse_attrs(mut a: &[u8]) -> Result<(Option<u16>, bool), WireError> {
    let (mut key, mut unknown) = (None, false);
    while !a.is_empty() {
        let h = a.get(..4).ok_or(WireError::Truncated)?;
        let ty = u16::from_be_bytes([h[0], h[1]]);
        let val = u16::from_be_bytes([h[2], h[3]]);
        if ty & 0x8000 != 0 {
            if ty & 0x7fff == KEY_LENGTH_ATTR {
                key = Some(val);
            } else {
                unknown = true;
            }
            a = a.get(4..).unwrap_or(&[]);
        } else {
            unknown = true;
            a = a.get(4 + usize::from(val)..).ok_or(WireError::Truncated)?;
        }
    }
    Ok((key, unknown))
}

pub(super) fn emit_proposals(props: &[Proposal], out: &mut Vec<u8>) {
    for (i, p) in props.iter().enumerate() {
        let start = out.len();
        let last = if i + 1 == props.len() { 0 } else { 2 };
        out.extend_from_slice(&[
            last,
            0,
            0,
            0,
            p.num,
            p.proto,
            p.spi.len() as u8,
            p.transforms.len() as u8,
        ]);
        out.extend_from_slice(&p.spi);
        for (j, t) in p.transforms.iter().enumerate() {
            let tlast = if j + 1 == p.transforms.len() { 0 } else { 3 };
            let tlen: u16 = if t.key_bits.is_some() { 12 } else { 8 };
            out.extend_from_slice(&[tlast, 0]);
            out.extend_from_slice(&tlen.to_be_bytes());
            out.extend_from_slice(&[t.ty, 0]);
            out.extend_from_slice(&t.id.to_be_bytes());
            if let Some(k) = t.key_bits {
                out.extend_from_slice(&(0x8000 | KEY_LENGTH_ATTR).to_be_bytes());
                out.extend_from_slice(&k.to_be_bytes());
            }
        }
        let len = ((out.len() - start) as u16).to_be_bytes();
        out[start + 2..start + 4].copy_from_slice(&len);
    }
}

fn tr(ty: u8, id: u16, key_bits: Option<u16>) -> Transform {
    Transform {
        ty,
        id,
        key_bits,
        unknown_attr: false,
    }
}

fn encr_transform(gcm: bool, key_len: usize) -> Transform {
    let id = if gcm { ENCR_AES_GCM_16 } else { ENCR_AES_CBC };
    tr(tt::ENCR, id, Some((key_len * 8) as u16))
}

impl Proposal {
    /// The proposal for an IKE SA (`spi` empty in IKE_SA_INIT, 8 bytes in a rekey).
    pub fn from_ike(num: u8, p: &IkeProposal, spi: Vec<u8>) -> Proposal {
        let mut t = vec![encr_transform(p.encr.is_aead(), p.encr.key_len())];
        let Prf::HmacSha256 = p.prf;
        t.push(tr(tt::PRF, PRF_HMAC_SHA2_256, None));
        if let Some(Integ::HmacSha256_128) = p.integ {
            t.push(tr(tt::INTEG, AUTH_HMAC_SHA2_256_128, None));
        }
        t.push(tr(tt::DH, p.dh.id(), None));
        Proposal {
            num,
            proto: super::proto::IKE,
            spi,
            transforms: t,
        }
    }

    /// The proposal for an ESP SA with inbound SPI `spi`; `dh` for PFS in CREATE_CHILD_SA.
    pub fn from_esp(num: u8, p: &EspProposal, spi: u32, dh: Option<DhGroup>) -> Proposal {
        let (gcm, key) = match p.encr {
            EspTransform::Aes128Gcm16 => (true, 16),
            EspTransform::Aes256Gcm16 => (true, 32),
            EspTransform::Aes128CbcHmacSha256 => (false, 16),
            EspTransform::Aes256CbcHmacSha256 => (false, 32),
        };
        let mut t = vec![encr_transform(gcm, key)];
        if !gcm {
            t.push(tr(tt::INTEG, AUTH_HMAC_SHA2_256_128, None));
        }
        if let Some(g) = dh {
            t.push(tr(tt::DH, g.id(), None));
        }
        t.push(tr(tt::ESN, u16::from(p.esn), None));
        Proposal {
            num,
            proto: super::proto::ESP,
            spi: spi.to_be_bytes().to_vec(),
            transforms: t,
        }
    }

    /// Whether this proposal offers exactly the algorithms of `want` (among possibly
    /// several of each type; unknown transforms of a type we need do not matter).
    pub fn offers_ike(&self, want: &IkeProposal) -> bool {
        self.proto == super::proto::IKE
            && Proposal::from_ike(0, want, Vec::new())
                .transforms
                .iter()
                .all(|w| self.offers(w))
            && (want.integ.is_some()
                || !self
                    .transforms
                    .iter()
                    .any(|t| t.ty == tt::INTEG && t.id != 0))
    }

    /// Whether this proposal offers `want` with DH group `dh` (PFS) or none.
    pub fn offers_esp(&self, want: &EspProposal, dh: Option<DhGroup>) -> bool {
        if self.proto != super::proto::ESP || self.spi.len() != 4 {
            return false;
        }
        let w = Proposal::from_esp(0, want, 0, dh);
        // Without PFS, DH transforms offered are ignored (IKE_AUTH, RFC 7296 1.2; a
        // CREATE_CHILD_SA without KE payload).
        w.transforms.iter().all(|t| self.offers(t))
    }

    fn offers(&self, w: &Transform) -> bool {
        self.transforms
            .iter()
            .any(|t| !t.unknown_attr && t.ty == w.ty && t.id == w.id && t.key_bits == w.key_bits)
    }

    /// The DH groups offered, in order.
    pub fn dh_groups(&self) -> impl Iterator<Item = u16> + '_ {
        self.transforms
            .iter()
            .filter(|t| t.ty == tt::DH)
            .map(|t| t.id)
    }

    /// The ESP SPI, if 4 bytes.
    pub fn esp_spi(&self) -> Option<u32> {
        let s: [u8; 4] = self.spi.as_slice().try_into().ok()?;
        Some(u32::from_be_bytes(s))
    }

    /// The IKE SPI (rekey), if 8 bytes.
    pub fn ike_spi(&self) -> Option<u64> {
        let s: [u8; 8] = self.spi.as_slice().try_into().ok()?;
        Some(u64::from_be_bytes(s))
    }
}

/// Picks the first of our IKE proposals that one of `offered` contains: (our proposal,
/// the offer's number). Our order wins, as strongSwan's default.
pub fn choose_ike(ours: &[IkeProposal], offered: &[Proposal]) -> Option<(IkeProposal, u8)> {
    ours.iter().find_map(|o| {
        offered
            .iter()
            .find(|p| p.offers_ike(o))
            .map(|p| (*o, p.num))
    })
}

/// Picks an ESP proposal: (ours, the offer); with `pfs` the DH group must match too.
pub fn choose_esp<'a>(
    ours: &[EspProposal],
    offered: &'a [Proposal],
    with_pfs: bool,
) -> Option<(EspProposal, &'a Proposal)> {
    ours.iter().find_map(|o| {
        let dh = if with_pfs { o.pfs } else { None };
        offered
            .iter()
            .find(|p| p.offers_esp(o, dh))
            .map(|p| (*o, p))
    })
}

/// The IKE proposal the responder chose (one proposal with one transform of each type).
pub fn ike_from_chosen(p: &Proposal) -> Option<IkeProposal> {
    let one = |ty| {
        let mut it = p.transforms.iter().filter(move |t| t.ty == ty);
        let t = it.next();
        if it.next().is_some() {
            None
        } else {
            t.copied()
        }
    };
    let e = one(tt::ENCR)?;
    let encr = match (e.id, e.key_bits) {
        (ENCR_AES_GCM_16, Some(128)) => Encr::Aes128Gcm16,
        (ENCR_AES_GCM_16, Some(256)) => Encr::Aes256Gcm16,
        (ENCR_AES_CBC, Some(128)) => Encr::Aes128Cbc,
        (ENCR_AES_CBC, Some(256)) => Encr::Aes256Cbc,
        _ => return None,
    };
    if one(tt::PRF)?.id != PRF_HMAC_SHA2_256 {
        return None;
    }
    let integ = match p
        .transforms
        .iter()
        .find(|t| t.ty == tt::INTEG)
        .map(|t| t.id)
    {
        None | Some(0) => None,
        Some(AUTH_HMAC_SHA2_256_128) => Some(Integ::HmacSha256_128),
        Some(_) => return None,
    };
    if encr.is_aead() != integ.is_none() {
        return None;
    }
    let dh = DhGroup::from_id(one(tt::DH)?.id)?;
    Some(IkeProposal {
        encr,
        prf: Prf::HmacSha256,
        integ,
        dh,
    })
}
