//! A connection's configuration (what to negotiate with one peer) and the algorithm names,
//! with strongSwan's proposal syntax ("aes128gcm16-prfsha256-x25519") so that a relayd and
//! a swanctl.conf can be written from the same strings.

use std::net::IpAddr;
use std::time::Duration;
use zeroize::Zeroize;

/// An IKE identity (RFC 7296 3.5), compared byte for byte with the peer's IDi/IDr.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Identity {
    /// ID_IPV4_ADDR or ID_IPV6_ADDR.
    Addr(IpAddr),
    /// ID_FQDN.
    Fqdn(String),
    /// ID_RFC822_ADDR.
    Email(String),
    /// ID_KEY_ID (opaque bytes).
    KeyId(Vec<u8>),
}

/// Secret bytes (a pre-shared key or keying material): zeroized when dropped, and
/// `Debug` prints only the length.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Takes ownership of the bytes.
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// Their number.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&[u8]> for Secret {
    fn from(b: &[u8]) -> Secret {
        Secret(b.to_vec())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// IKE SA encryption algorithm (transform type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Encr {
    /// ENCR_AES_GCM_16 with a 128-bit key (RFC 5282), no separate integrity.
    Aes128Gcm16,
    /// ENCR_AES_GCM_16 with a 256-bit key.
    Aes256Gcm16,
    /// ENCR_AES_CBC with a 128-bit key; needs an integrity algorithm.
    Aes128Cbc,
    /// ENCR_AES_CBC with a 256-bit key.
    Aes256Cbc,
}

impl Encr {
    /// Whether it is an AEAD (no integrity transform then).
    pub fn is_aead(self) -> bool {
        matches!(self, Encr::Aes128Gcm16 | Encr::Aes256Gcm16)
    }
    /// AES key length in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Encr::Aes128Gcm16 | Encr::Aes128Cbc => 16,
            Encr::Aes256Gcm16 | Encr::Aes256Cbc => 32,
        }
    }
}

/// Pseudo-random function (transform type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Prf {
    /// PRF_HMAC_SHA2_256 (RFC 4868).
    HmacSha256,
}

/// Integrity algorithm (transform type 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Integ {
    /// AUTH_HMAC_SHA2_256_128 (RFC 4868).
    HmacSha256_128,
}

/// Diffie-Hellman group (transform type 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DhGroup {
    /// Group 19, 256-bit random ECP (NIST P-256, RFC 5903).
    Ecp256,
    /// Group 31, Curve25519 (RFC 8031).
    Curve25519,
}

impl DhGroup {
    /// The IANA number.
    pub fn id(self) -> u16 {
        match self {
            DhGroup::Ecp256 => 19,
            DhGroup::Curve25519 => 31,
        }
    }
    /// The group with IANA number `id`, if supported.
    pub fn from_id(id: u16) -> Option<DhGroup> {
        match id {
            19 => Some(DhGroup::Ecp256),
            31 => Some(DhGroup::Curve25519),
            _ => None,
        }
    }
}

/// One IKE SA proposal: a single algorithm of each type (strongSwan writes one proposal
/// per string; several strings make several proposals, in order of preference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IkeProposal {
    /// Encryption.
    pub encr: Encr,
    /// PRF.
    pub prf: Prf,
    /// Integrity; `None` with an AEAD.
    pub integ: Option<Integ>,
    /// Diffie-Hellman group.
    pub dh: DhGroup,
}

/// ESP transform as relayd's datapath knows it (services/crypto's suites).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EspTransform {
    /// AES-128-GCM with a 16-byte ICV (RFC 4106).
    Aes128Gcm16,
    /// AES-256-GCM with a 16-byte ICV.
    Aes256Gcm16,
    /// AES-128-CBC with HMAC-SHA-256-128 (RFC 3602, RFC 4868).
    Aes128CbcHmacSha256,
    /// AES-256-CBC with HMAC-SHA-256-128.
    Aes256CbcHmacSha256,
}

impl EspTransform {
    /// Key bytes per direction, in relayd's key-file layout: GCM: AES key ‖ 4-byte salt;
    /// CBC: AES key ‖ 32-byte HMAC-SHA-256 key.
    pub fn key_len(self) -> usize {
        match self {
            EspTransform::Aes128Gcm16 => 20,
            EspTransform::Aes256Gcm16 => 36,
            EspTransform::Aes128CbcHmacSha256 => 48,
            EspTransform::Aes256CbcHmacSha256 => 64,
        }
    }
}

/// One ESP proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspProposal {
    /// The transform.
    pub encr: EspTransform,
    /// Extended sequence numbers (RFC 4303 2.2.1).
    pub esn: bool,
    /// A Diffie-Hellman group for perfect forward secrecy on CREATE_CHILD_SA (the first
    /// child SA, made in IKE_AUTH, never has one).
    pub pfs: Option<DhGroup>,
}

/// A traffic selector (RFC 7296 3.13.1): an address range, an IP protocol (0 = any) and
/// a port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrafficSelector {
    /// First address (same family as `end`).
    pub start: IpAddr,
    /// Last address.
    pub end: IpAddr,
    /// IP protocol number, 0 for any.
    pub protocol: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
}

impl TrafficSelector {
    /// All traffic to and from one address.
    pub fn host(a: IpAddr) -> TrafficSelector {
        TrafficSelector {
            start: a,
            end: a,
            protocol: 0,
            start_port: 0,
            end_port: 65535,
        }
    }
    /// All traffic of a subnet `a/prefix` (prefix clamped to the family's length).
    pub fn subnet(a: IpAddr, prefix: u8) -> TrafficSelector {
        let (start, end) = match a {
            IpAddr::V4(v) => {
                let p = u32::from(prefix.min(32));
                let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
                let s = u32::from(v) & mask;
                (
                    IpAddr::from((s).to_be_bytes()),
                    IpAddr::from((s | !mask).to_be_bytes()),
                )
            }
            IpAddr::V6(v) => {
                let p = u32::from(prefix.min(128));
                let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
                let s = u128::from(v) & mask;
                (
                    IpAddr::from(s.to_be_bytes()),
                    IpAddr::from((s | !mask).to_be_bytes()),
                )
            }
        };
        TrafficSelector {
            start,
            end,
            protocol: 0,
            start_port: 0,
            end_port: 65535,
        }
    }
}

/// ESP encapsulation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Transport mode (negotiated with USE_TRANSPORT_MODE).
    Transport,
    /// Tunnel mode (the default of RFC 7296).
    Tunnel,
}

/// Retransmission of requests: `timeout * base^n` before try n+1, `tries` retransmits,
/// then the IKE SA is given up (strongSwan's defaults: 4 s, 1.8, 5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retransmit {
    /// First timeout.
    pub timeout: Duration,
    /// Backoff factor.
    pub base: f64,
    /// Retransmits before giving up.
    pub tries: u32,
}

impl Default for Retransmit {
    fn default() -> Retransmit {
        Retransmit {
            timeout: Duration::from_secs(4),
            base: 1.8,
            tries: 5,
        }
    }
}

/// One connection: a peer, how to authenticate, what to negotiate.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Name, unique in an [`Endpoint`](crate::Endpoint); events and status carry it.
    pub name: String,
    /// Local IKE address (UDP 500, then 4500 with NAT-T).
    pub local: IpAddr,
    /// Peer's IKE address.
    pub remote: IpAddr,
    /// Our identity (IDi or IDr).
    pub local_id: Identity,
    /// The identity the peer must show.
    pub remote_id: Identity,
    /// Pre-shared key.
    pub psk: Secret,
    /// IKE proposals in order of preference.
    pub ike_proposals: Vec<IkeProposal>,
    /// ESP proposals in order of preference.
    pub esp_proposals: Vec<EspProposal>,
    /// Our side's traffic selectors.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's traffic selectors.
    pub remote_ts: Vec<TrafficSelector>,
    /// Transport or tunnel mode.
    pub mode: Mode,
    /// Initiate when loaded and after the IKE SA goes down (else respond only).
    pub initiate: bool,
    /// IKE SA lifetime before a rekey (jittered down by up to 10 %).
    pub ike_rekey: Duration,
    /// Child SA lifetime before a rekey (jittered down by up to 10 %).
    pub child_rekey: Duration,
    /// Rekey a child SA after this many bytes (reported by [`Endpoint::report_usage`](crate::Endpoint::report_usage)).
    pub child_rekey_bytes: Option<u64>,
    /// Rekey a child SA after this many packets.
    pub child_rekey_packets: Option<u64>,
    /// Send a liveness check after this long without a message from the peer (zero: never).
    pub dpd_delay: Duration,
    /// Retransmission of requests.
    pub retransmit: Retransmit,
}

/// A proposal string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("proposal {proposal:?}: {problem}")]
pub struct ProposalError {
    /// The string.
    pub proposal: String,
    /// What is wrong.
    pub problem: String,
}

fn perr(s: &str, problem: impl Into<String>) -> ProposalError {
    ProposalError {
        proposal: s.to_string(),
        problem: problem.into(),
    }
}

fn dh_name(t: &str) -> Option<DhGroup> {
    match t {
        "ecp256" | "modp19" => Some(DhGroup::Ecp256),
        "x25519" | "curve25519" => Some(DhGroup::Curve25519),
        _ => None,
    }
}

/// Parses a strongSwan IKE proposal, e.g. "aes128gcm16-prfsha256-x25519",
/// "aes256-sha256-ecp256" (CBC with HMAC-SHA-256-128 and PRF HMAC-SHA-256).
pub fn parse_proposal(s: &str) -> Result<IkeProposal, ProposalError> {
    let (mut encr, mut prf, mut integ, mut dh) = (None, None, None, None);
    for t in s.trim().split('-') {
        match t {
            "aes128gcm16" | "aes128gcm128" => encr = Some(Encr::Aes128Gcm16),
            "aes256gcm16" | "aes256gcm128" => encr = Some(Encr::Aes256Gcm16),
            "aes128" => encr = Some(Encr::Aes128Cbc),
            "aes256" => encr = Some(Encr::Aes256Cbc),
            "prfsha256" => prf = Some(Prf::HmacSha256),
            "sha256" | "sha2_256" => integ = Some(Integ::HmacSha256_128),
            t => match dh_name(t) {
                Some(g) => dh = Some(g),
                None => return Err(perr(s, format!("unsupported algorithm {t:?}"))),
            },
        }
    }
    let encr = encr.ok_or_else(|| perr(s, "no encryption algorithm"))?;
    let dh = dh.ok_or_else(|| perr(s, "no Diffie-Hellman group"))?;
    if encr.is_aead() && integ.is_some() {
        return Err(perr(s, "AES-GCM takes no integrity algorithm"));
    }
    if !encr.is_aead() && integ.is_none() {
        return Err(perr(s, "AES-CBC needs an integrity algorithm (sha256)"));
    }
    // strongSwan derives the PRF from the integrity algorithm when none is named.
    let prf = match (prf, integ) {
        (Some(p), _) => p,
        (None, Some(Integ::HmacSha256_128)) => Prf::HmacSha256,
        (None, None) => return Err(perr(s, "AES-GCM needs a PRF (prfsha256)")),
    };
    Ok(IkeProposal {
        encr,
        prf,
        integ,
        dh,
    })
}

/// Parses a strongSwan ESP proposal, e.g. "aes128gcm16", "aes128-sha256",
/// "aes128gcm16-x25519" (PFS with group 31), "aes128gcm16-esn".
pub fn parse_esp_proposal(s: &str) -> Result<EspProposal, ProposalError> {
    let (mut encr, mut integ, mut pfs, mut esn) = (None, false, None, false);
    for t in s.trim().split('-') {
        match t {
            "aes128gcm16" | "aes128gcm128" => encr = Some((16, true)),
            "aes256gcm16" | "aes256gcm128" => encr = Some((32, true)),
            "aes128" => encr = Some((16, false)),
            "aes256" => encr = Some((32, false)),
            "sha256" | "sha2_256" => integ = true,
            "esn" => esn = true,
            "noesn" => esn = false,
            t => match dh_name(t) {
                Some(g) => pfs = Some(g),
                None => return Err(perr(s, format!("unsupported algorithm {t:?}"))),
            },
        }
    }
    let encr = match encr.ok_or_else(|| perr(s, "no encryption algorithm"))? {
        (16, true) if !integ => EspTransform::Aes128Gcm16,
        (32, true) if !integ => EspTransform::Aes256Gcm16,
        (_, true) => return Err(perr(s, "AES-GCM takes no integrity algorithm")),
        (16, false) if integ => EspTransform::Aes128CbcHmacSha256,
        (_, false) if integ => EspTransform::Aes256CbcHmacSha256,
        _ => return Err(perr(s, "AES-CBC needs an integrity algorithm (sha256)")),
    };
    Ok(EspProposal { encr, esn, pfs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strongswan_proposals() {
        let p = parse_proposal("aes128gcm16-prfsha256-x25519").unwrap();
        assert_eq!(p.encr, Encr::Aes128Gcm16);
        assert_eq!(p.integ, None);
        assert_eq!(p.dh, DhGroup::Curve25519);
        let p = parse_proposal("aes256-sha256-ecp256").unwrap();
        assert_eq!(
            (p.encr, p.integ, p.prf),
            (
                Encr::Aes256Cbc,
                Some(Integ::HmacSha256_128),
                Prf::HmacSha256
            )
        );
        assert!(parse_proposal("aes128-ecp256").is_err());
        assert!(parse_proposal("aes128gcm16-x25519").is_err(), "no PRF");
        assert!(
            parse_proposal("3des-md5-modp1024")
                .unwrap_err()
                .problem
                .contains("3des")
        );
        let e = parse_esp_proposal("aes128gcm16").unwrap();
        assert_eq!(
            (e.encr, e.pfs, e.esn),
            (EspTransform::Aes128Gcm16, None, false)
        );
        let e = parse_esp_proposal("aes128-sha256").unwrap();
        assert_eq!(e.encr, EspTransform::Aes128CbcHmacSha256);
        let e = parse_esp_proposal("aes128gcm16-x25519-esn").unwrap();
        assert_eq!((e.pfs, e.esn), (Some(DhGroup::Curve25519), true));
        assert!(parse_esp_proposal("aes128").is_err());
    }

    #[test]
    fn subnet_and_secret() {
        let t = TrafficSelector::subnet("10.1.2.3".parse().unwrap(), 24);
        assert_eq!(t.start, "10.1.2.0".parse::<IpAddr>().unwrap());
        assert_eq!(t.end, "10.1.2.255".parse::<IpAddr>().unwrap());
        let t = TrafficSelector::subnet("::".parse().unwrap(), 0);
        assert_eq!(
            t.end,
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
                .parse::<IpAddr>()
                .unwrap()
        );
        assert_eq!(
            format!("{:?}", Secret::new(b"hunter2".to_vec())),
            "Secret(7 bytes)"
        );
    }
}
