//! The IKEv2 message format (RFC 7296 section 3): the header and the payload chain, parsed
//! from untrusted bytes and emitted.
//!
//! Panic guarantees: parsing never panics and never indexes out of bounds; it allocates at
//! most a bounded number of payloads ([`MAX_PAYLOADS`]), proposals, transforms, selectors
//! and SPIs per message, each no larger than the message. Malformed input is a [`WireError`].
//!
//! Why not the `ipsec-parser` crate the issue points to: it parses IKEv2 but does not emit
//! it, so the exchanges would need a second representation for what they send; and the
//! SK payload's check needs byte offsets (the associated data and the HMAC run from the
//! IKE header to the end of the SK payload's generic header), which its borrowed payload
//! list gives only through pointer arithmetic. One module parses and emits the same types
//! instead, round-trip tested, and fuzzed by `ike_message`.

mod payload;
pub mod proposal;

pub use payload::{Id, Notify, Payload, Ts, parse_chain};
pub use proposal::{Proposal, Transform};

/// Exchange types.
pub mod exchange {
    /// IKE_SA_INIT.
    pub const IKE_SA_INIT: u8 = 34;
    /// IKE_AUTH.
    pub const IKE_AUTH: u8 = 35;
    /// CREATE_CHILD_SA.
    pub const CREATE_CHILD_SA: u8 = 36;
    /// INFORMATIONAL.
    pub const INFORMATIONAL: u8 = 37;
}

/// Header flags.
pub mod flags {
    /// Set by the original initiator of the IKE SA.
    pub const INITIATOR: u8 = 0x08;
    /// A response.
    pub const RESPONSE: u8 = 0x20;
}

/// Payload types.
pub mod pt {
    /// No next payload.
    pub const NONE: u8 = 0;
    /// Security Association.
    pub const SA: u8 = 33;
    /// Key Exchange.
    pub const KE: u8 = 34;
    /// Identification - Initiator.
    pub const IDI: u8 = 35;
    /// Identification - Responder.
    pub const IDR: u8 = 36;
    /// Certificate.
    pub const CERT: u8 = 37;
    /// Certificate Request.
    pub const CERTREQ: u8 = 38;
    /// Authentication.
    pub const AUTH: u8 = 39;
    /// Nonce.
    pub const NONCE: u8 = 40;
    /// Notify.
    pub const N: u8 = 41;
    /// Delete.
    pub const D: u8 = 42;
    /// Vendor ID.
    pub const V: u8 = 43;
    /// Traffic Selector - Initiator.
    pub const TSI: u8 = 44;
    /// Traffic Selector - Responder.
    pub const TSR: u8 = 45;
    /// Encrypted and Authenticated.
    pub const SK: u8 = 46;
    /// Configuration.
    pub const CP: u8 = 47;
    /// EAP.
    pub const EAP: u8 = 48;
}

/// Notify message types.
pub mod notify {
    /// UNSUPPORTED_CRITICAL_PAYLOAD.
    pub const UNSUPPORTED_CRITICAL_PAYLOAD: u16 = 1;
    /// INVALID_SYNTAX.
    pub const INVALID_SYNTAX: u16 = 7;
    /// NO_PROPOSAL_CHOSEN.
    pub const NO_PROPOSAL_CHOSEN: u16 = 14;
    /// INVALID_KE_PAYLOAD.
    pub const INVALID_KE_PAYLOAD: u16 = 17;
    /// AUTHENTICATION_FAILED.
    pub const AUTHENTICATION_FAILED: u16 = 24;
    /// TS_UNACCEPTABLE.
    pub const TS_UNACCEPTABLE: u16 = 38;
    /// TEMPORARY_FAILURE.
    pub const TEMPORARY_FAILURE: u16 = 43;
    /// CHILD_SA_NOT_FOUND.
    pub const CHILD_SA_NOT_FOUND: u16 = 44;
    /// Error types are below this.
    pub const FIRST_STATUS: u16 = 16384;
    /// INITIAL_CONTACT.
    pub const INITIAL_CONTACT: u16 = 16384;
    /// NAT_DETECTION_SOURCE_IP.
    pub const NAT_DETECTION_SOURCE_IP: u16 = 16388;
    /// NAT_DETECTION_DESTINATION_IP.
    pub const NAT_DETECTION_DESTINATION_IP: u16 = 16389;
    /// COOKIE.
    pub const COOKIE: u16 = 16390;
    /// USE_TRANSPORT_MODE.
    pub const USE_TRANSPORT_MODE: u16 = 16391;
    /// REKEY_SA.
    pub const REKEY_SA: u16 = 16393;
    /// ESP_TFC_PADDING_NOT_SUPPORTED.
    pub const ESP_TFC_PADDING_NOT_SUPPORTED: u16 = 16394;
    /// NON_FIRST_FRAGMENTS_ALSO.
    pub const NON_FIRST_FRAGMENTS_ALSO: u16 = 16395;
}

/// Protocol IDs (proposals, notifies, deletes).
pub mod proto {
    /// IKE.
    pub const IKE: u8 = 1;
    /// ESP.
    pub const ESP: u8 = 3;
}

/// Length of the IKE header.
pub const HEADER_LEN: usize = 28;
/// Payloads accepted in one message (or one SK payload's plaintext).
pub const MAX_PAYLOADS: usize = 48;
/// Largest message accepted (strongSwan's default limit is 10000; fragments are not
/// supported).
pub const MAX_MESSAGE: usize = 65535;

/// Why bytes are not an IKEv2 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than a header or a length field says.
    #[error("truncated")]
    Truncated,
    /// Major version is not 2.
    #[error("unsupported IKE version")]
    Version,
    /// A length field is inconsistent.
    #[error("bad length")]
    Length,
    /// Too many payloads or substructures.
    #[error("too many elements")]
    TooMany,
    /// A payload's content is malformed.
    #[error("malformed payload")]
    Malformed,
    /// An unknown payload has the critical bit: answer UNSUPPORTED_CRITICAL_PAYLOAD.
    #[error("unsupported critical payload {0}")]
    Critical(u8),
}

/// The fixed IKE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI (0 in the first IKE_SA_INIT request).
    pub spi_r: u64,
    /// Type of the first payload.
    pub next: u8,
    /// Exchange type.
    pub exchange: u8,
    /// Flags ([`flags`]).
    pub flags: u8,
    /// Message ID.
    pub msg_id: u32,
    /// Length of the whole message.
    pub length: u32,
}

impl Header {
    /// Parses the header of `buf`, checking that its length field matches `buf`.
    pub fn parse(buf: &[u8]) -> Result<Header, WireError> {
        let h = buf.get(..HEADER_LEN).ok_or(WireError::Truncated)?;
        let u64at = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        let u32at = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().unwrap_or([0; 4]));
        if h[17] >> 4 != 2 {
            return Err(WireError::Version);
        }
        let hdr = Header {
            spi_i: u64at(0),
            spi_r: u64at(8),
            next: h[16],
            exchange: h[18],
            flags: h[19],
            msg_id: u32at(20),
            length: u32at(24),
        };
        if hdr.length as usize != buf.len() || buf.len() > MAX_MESSAGE {
            return Err(WireError::Length);
        }
        Ok(hdr)
    }

    /// Whether the R flag is set.
    pub fn is_response(&self) -> bool {
        self.flags & flags::RESPONSE != 0
    }

    /// Whether the I flag is set (sent by the original initiator).
    pub fn from_initiator(&self) -> bool {
        self.flags & flags::INITIATOR != 0
    }

    /// Appends the header's 28 bytes (length as given, patched later by [`set_length`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spi_i.to_be_bytes());
        out.extend_from_slice(&self.spi_r.to_be_bytes());
        out.push(self.next);
        out.push(0x20);
        out.push(self.exchange);
        out.push(self.flags);
        out.extend_from_slice(&self.msg_id.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
    }
}

/// Writes `msg.len()` into the header's length field.
pub fn set_length(msg: &mut [u8]) {
    let n = (msg.len() as u32).to_be_bytes();
    if let Some(l) = msg.get_mut(24..28) {
        l.copy_from_slice(&n);
    }
}

/// A parsed message whose payloads are in clear (IKE_SA_INIT), or whose last payload is SK.
#[derive(Debug, Clone)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The payloads outside SK (for an SK message, the SK payload itself is the last one).
    pub payloads: Vec<Payload>,
}

/// Parses a whole message (header and the payloads outside any SK payload).
pub fn parse_message(buf: &[u8]) -> Result<Message, WireError> {
    let header = Header::parse(buf)?;
    let payloads = parse_chain(
        buf.get(HEADER_LEN..).ok_or(WireError::Truncated)?,
        header.next,
        HEADER_LEN,
    )?;
    Ok(Message { header, payloads })
}

/// Emits a payload chain: returns the first payload's type; appends the bytes to `out`.
pub fn emit_chain(payloads: &[Payload], out: &mut Vec<u8>) -> u8 {
    for (i, p) in payloads.iter().enumerate() {
        let next = payloads.get(i + 1).map_or(pt::NONE, Payload::kind);
        p.emit(next, out);
    }
    payloads.first().map_or(pt::NONE, Payload::kind)
}

/// A whole message in clear (no SK payload): header and payloads.
pub fn emit_plain(mut header: Header, payloads: &[Payload]) -> Vec<u8> {
    let mut body = Vec::with_capacity(512);
    header.next = emit_chain(payloads, &mut body);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    header.emit(&mut out);
    out.extend_from_slice(&body);
    set_length(&mut out);
    out
}

#[cfg(test)]
mod tests;
