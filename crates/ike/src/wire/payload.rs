//! IKEv2 payloads (RFC 7296 3.3-3.14): the generic payload header chain and each payload's
//! body, parsed with bounds on every count and emitted.

use super::proposal::{Proposal, parse_proposals};
use super::{MAX_PAYLOADS, WireError, pt};
use std::net::IpAddr;

/// Selectors accepted in one TS payload.
const MAX_TS: usize = 32;
/// SPIs accepted in one Delete payload.
const MAX_DELETE_SPIS: usize = 256;

/// An identification payload's content (RFC 7296 3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id {
    /// ID type.
    pub ty: u8,
    /// Identification data.
    pub data: Vec<u8>,
}

/// A notify payload (RFC 7296 3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// Protocol ID (0 or [`proto`](super::proto)).
    pub proto: u8,
    /// SPI (empty or 4 bytes for ESP).
    pub spi: Vec<u8>,
    /// Notify message type.
    pub ty: u16,
    /// Notification data.
    pub data: Vec<u8>,
}

/// One traffic selector (RFC 7296 3.13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ts {
    /// IP protocol (0 any).
    pub protocol: u8,
    /// Start port.
    pub start_port: u16,
    /// End port.
    pub end_port: u16,
    /// Start address.
    pub start: IpAddr,
    /// End address.
    pub end: IpAddr,
}

/// One payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payload {
    /// SA.
    Sa(Vec<Proposal>),
    /// KE: group and public value.
    Ke {
        /// DH group number.
        group: u16,
        /// Public value.
        data: Vec<u8>,
    },
    /// IDi.
    IdI(Id),
    /// IDr.
    IdR(Id),
    /// AUTH: method and data.
    Auth {
        /// Method (2: shared key MIC).
        method: u8,
        /// Authentication data.
        data: Vec<u8>,
    },
    /// Nonce.
    Nonce(Vec<u8>),
    /// Notify.
    Notify(Notify),
    /// Delete: protocol and SPIs (none for IKE; 4-byte SPIs for ESP).
    Delete {
        /// Protocol ID.
        proto: u8,
        /// SPIs (ESP).
        spis: Vec<u32>,
    },
    /// TSi.
    TsI(Vec<Ts>),
    /// TSr.
    TsR(Vec<Ts>),
    /// SK: where the payload starts in the message and the type of the first inner
    /// payload. Always the last payload of a chain.
    Sk {
        /// Offset of the SK generic payload header in the message.
        offset: usize,
        /// First inner payload type.
        inner: u8,
    },
    /// A payload that is known but ignored (vendor ID, CERTREQ, ...) or unknown and not
    /// critical.
    Other(u8),
}

impl Payload {
    /// The payload type.
    pub fn kind(&self) -> u8 {
        match self {
            Payload::Sa(_) => pt::SA,
            Payload::Ke { .. } => pt::KE,
            Payload::IdI(_) => pt::IDI,
            Payload::IdR(_) => pt::IDR,
            Payload::Auth { .. } => pt::AUTH,
            Payload::Nonce(_) => pt::NONCE,
            Payload::Notify(_) => pt::N,
            Payload::Delete { .. } => pt::D,
            Payload::TsI(_) => pt::TSI,
            Payload::TsR(_) => pt::TSR,
            Payload::Sk { .. } => pt::SK,
            Payload::Other(t) => *t,
        }
    }

    /// A notify without SPI.
    pub fn notify(ty: u16, data: Vec<u8>) -> Payload {
        Payload::Notify(Notify {
            proto: 0,
            spi: Vec::new(),
            ty,
            data,
        })
    }

    /// Appends the payload (generic header with `next`, then the body). SK and Other are
    /// not emitted this way (SK is built by the crypto layer).
    pub fn emit(&self, next: u8, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[next, 0, 0, 0]);
        match self {
            Payload::Sa(props) => super::proposal::emit_proposals(props, out),
            Payload::Ke { group, data } => {
                out.extend_from_slice(&group.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(data);
            }
            Payload::IdI(id) | Payload::IdR(id) => {
                out.extend_from_slice(&[id.ty, 0, 0, 0]);
                out.extend_from_slice(&id.data);
            }
            Payload::Auth { method, data } => {
                out.extend_from_slice(&[*method, 0, 0, 0]);
                out.extend_from_slice(data);
            }
            Payload::Nonce(n) => out.extend_from_slice(n),
            Payload::Notify(n) => {
                out.push(n.proto);
                out.push(n.spi.len() as u8);
                out.extend_from_slice(&n.ty.to_be_bytes());
                out.extend_from_slice(&n.spi);
                out.extend_from_slice(&n.data);
            }
            Payload::Delete { proto, spis } => {
                out.push(*proto);
                out.push(if *proto == super::proto::IKE { 0 } else { 4 });
                out.extend_from_slice(&(spis.len() as u16).to_be_bytes());
                for s in spis {
                    out.extend_from_slice(&s.to_be_bytes());
                }
            }
            Payload::TsI(ts) | Payload::TsR(ts) => emit_ts(ts, out),
            Payload::Sk { .. } | Payload::Other(_) => {}
        }
        let len = ((out.len() - start) as u16).to_be_bytes();
        out[start + 2..start + 4].copy_from_slice(&len);
    }

    /// The body of `Id` payloads as signed by AUTH (RFC 7296 2.15: ID type, reserved, data).
    pub fn id_body(id: &Id) -> Vec<u8> {
        let mut v = vec![id.ty, 0, 0, 0];
        v.extend_from_slice(&id.data);
        v
    }
}

fn emit_ts(ts: &[Ts], out: &mut Vec<u8>) {
    out.extend_from_slice(&[ts.len() as u8, 0, 0, 0]);
    for t in ts {
        let (ty, len) = match t.start {
            IpAddr::V4(_) => (7u8, 16u16),
            IpAddr::V6(_) => (8u8, 40u16),
        };
        out.push(ty);
        out.push(t.protocol);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&t.start_port.to_be_bytes());
        out.extend_from_slice(&t.end_port.to_be_bytes());
        for a in [t.start, t.end] {
            match a {
                IpAddr::V4(v) => out.extend_from_slice(&v.octets()),
                IpAddr::V6(v) => out.extend_from_slice(&v.octets()),
            }
        }
    }
}

fn be16(b: &[u8], i: usize) -> Result<u16, WireError> {
    let s = b.get(i..i + 2).ok_or(WireError::Truncated)?;
    Ok(u16::from_be_bytes([s[0], s[1]]))
}

/// Parses a payload chain starting with type `first` in `buf`, which sits at offset `base`
/// of its message (for the SK payload's offset). Stops after an SK payload.
pub fn parse_chain(buf: &[u8], first: u8, base: usize) -> Result<Vec<Payload>, WireError> {
    let mut out = Vec::new();
    let (mut next, mut pos) = (first, 0usize);
    while next != pt::NONE {
        if out.len() >= MAX_PAYLOADS {
            return Err(WireError::TooMany);
        }
        let hdr = buf.get(pos..pos + 4).ok_or(WireError::Truncated)?;
        let (this, critical) = (next, hdr[1] & 0x80 != 0);
        next = hdr[0];
        let len = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
        if len < 4 {
            return Err(WireError::Length);
        }
        let body = buf.get(pos + 4..pos + len).ok_or(WireError::Truncated)?;
        if this == pt::SK {
            out.push(Payload::Sk {
                offset: base + pos,
                inner: next,
            });
            // SK is last (RFC 7296 3.14): its body runs to the end of the message.
            if pos + len != buf.len() {
                return Err(WireError::Length);
            }
            return Ok(out);
        }
        out.push(parse_body(this, critical, body)?);
        pos += len;
    }
    if pos != buf.len() {
        return Err(WireError::Length);
    }
    Ok(out)
}

fn parse_body(ty: u8, critical: bool, b: &[u8]) -> Result<Payload, WireError> {
    let rest = |n: usize| b.get(n..).ok_or(WireError::Truncated);
    Ok(match ty {
        pt::SA => Payload::Sa(parse_proposals(b)?),
        pt::KE => Payload::Ke {
            group: be16(b, 0)?,
            data: rest(4)?.to_vec(),
        },
        pt::IDI | pt::IDR => {
            let id = Id {
                ty: *b.first().ok_or(WireError::Truncated)?,
                data: rest(4)?.to_vec(),
            };
            if ty == pt::IDI {
                Payload::IdI(id)
            } else {
                Payload::IdR(id)
            }
        }
        pt::AUTH => Payload::Auth {
            method: *b.first().ok_or(WireError::Truncated)?,
            data: rest(4)?.to_vec(),
        },
        pt::NONCE => {
            // RFC 7296 3.9: 16 to 256 bytes.
            if b.len() < 16 || b.len() > 256 {
                return Err(WireError::Malformed);
            }
            Payload::Nonce(b.to_vec())
        }
        pt::N => {
            let h = b.get(..4).ok_or(WireError::Truncated)?;
            let spi_len = usize::from(h[1]);
            let spi = b.get(4..4 + spi_len).ok_or(WireError::Truncated)?.to_vec();
            Payload::Notify(Notify {
                proto: h[0],
                spi,
                ty: u16::from_be_bytes([h[2], h[3]]),
                data: rest(4 + spi_len)?.to_vec(),
            })
        }
        pt::D => {
            let h = b.get(..4).ok_or(WireError::Truncated)?;
            let n = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let spis = match (h[0], h[1]) {
                (super::proto::IKE, 0) if n == 0 => Vec::new(),
                (super::proto::ESP, 4) if n <= MAX_DELETE_SPIS && b.len() == 4 + 4 * n => b
                    .get(4..)
                    .unwrap_or(&[])
                    .chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                _ => return Err(WireError::Malformed),
            };
            Payload::Delete { proto: h[0], spis }
        }
        pt::TSI | pt::TSR => {
            let ts = parse_ts(b)?;
            if ty == pt::TSI {
                Payload::TsI(ts)
            } else {
                Payload::TsR(ts)
            }
        }
        pt::V | pt::CERT | pt::CERTREQ | pt::CP | pt::EAP => Payload::Other(ty),
        _ if critical => return Err(WireError::Critical(ty)),
        _ => Payload::Other(ty),
    })
}

fn parse_ts(b: &[u8]) -> Result<Vec<Ts>, WireError> {
    let n = usize::from(*b.first().ok_or(WireError::Truncated)?);
    if n == 0 || n > MAX_TS {
        return Err(WireError::Malformed);
    }
    let mut out = Vec::with_capacity(n);
    let mut pos = 4;
    for _ in 0..n {
        let h = b.get(pos..pos + 8).ok_or(WireError::Truncated)?;
        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let alen = match (h[0], len) {
            (7, 16) => 4,
            (8, 40) => 16,
            _ => return Err(WireError::Malformed),
        };
        let a = b.get(pos + 8..pos + len).ok_or(WireError::Truncated)?;
        let addr = |s: &[u8]| -> IpAddr {
            if alen == 4 {
                IpAddr::from([s[0], s[1], s[2], s[3]])
            } else {
                let mut x = [0u8; 16];
                x.copy_from_slice(s);
                IpAddr::from(x)
            }
        };
        out.push(Ts {
            protocol: h[1],
            start_port: u16::from_be_bytes([h[4], h[5]]),
            end_port: u16::from_be_bytes([h[6], h[7]]),
            start: addr(&a[..alen]),
            end: addr(&a[alen..]),
        });
        pos += len;
    }
    if pos != b.len() {
        return Err(WireError::Length);
    }
    Ok(out)
}
