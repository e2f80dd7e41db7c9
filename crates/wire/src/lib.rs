//! Typed views of the headers relayd reads and rewrites, and their high-level forms, in
//! the smoltcp style. Every header offset of relayd lives here: services read and write
//! packets through these types, never by hand. No I/O and no dependency: relay-core
//! re-exports this crate as `relay_core::wire`.
//!
//! Above the headers: [`Layout`] (where a packet's headers are, parsed once), [`Headers`]
//! (a parsed packet's typed views, which `relay_core::Packet::headers` and `headers_mut`
//! hand out), [`IpPacket`] (either IP version), [`FiveTuple`], the capture link layers
//! ([`link`]) and the builders of the packets relayd answers with ([`build`]).
//!
//! Each view (`EthernetFrame`, `NshHeader`, `Ipv4Packet`, `Ipv6Packet`, `ipv6::FragmentHeader`,
//! `UdpPacket`, `TcpPacket`, `IcmpPacket`, `GrePacket`, `VxlanPacket`, `GenevePacket`,
//! `EspPacket`, `IpcompPacket`, `mpls::Lse`) wraps a byte buffer (`T: AsRef<[u8]>`,
//! writable with `AsMut<[u8]>`) and reads and writes its fields in place.
//! `new_checked` validates the lengths once and returns [`Malformed`] on bad input (each
//! module's docs say exactly which input fails and how); after a successful check no
//! getter or setter panics. `new_unchecked` skips the check and may panic on a short
//! buffer: use it only on a buffer already checked, or one about to be written by a
//! `Repr`.
//!
//! Each `Repr` (`EthernetRepr`, `Ipv4Repr`, `Ipv6Repr`, `IpRepr`, `UdpRepr`, `TcpRepr`,
//! `Icmpv4Repr`, `Icmpv6Repr`, `GreRepr`, `EspRepr`, `EspTrailer`, `mpls::LseRepr`) is a header's fields as plain values:
//! `parse(&view)` checks the view as `new_checked` would and fails the same way;
//! `emit(&self, &mut view)` writes the header, and panics only if the buffer is shorter
//! than the header (`header_len()`; `buffer_len()` where the header carries a length).
//! Payloads, TCP options and ICMP bodies are the caller's; checksums that cover them are
//! filled afterwards with the view's `fill_checksum`, given the pseudo-header sum of
//! `IpRepr::pseudo_sum` (0 for ICMPv4). No `parse` verifies a checksum: the views'
//! `verify_checksum` do.

pub mod build;
pub mod checksum;
pub mod esp;
pub mod ethernet;
pub mod geneve;
pub mod gre;
mod headers;
pub mod icmp;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
mod ip_packet;
pub mod ipcomp;
pub mod ipv4;
pub mod ipv6;
mod layout;
pub mod link;
pub mod mpls;
pub mod tcp;
pub mod tuple;
pub mod udp;
pub mod vxlan;

#[cfg(test)]
mod captures;

pub use esp::{EspPacket, EspRepr, EspTrailer};
pub use ethernet::{EthernetFrame, EthernetRepr, NshHeader};
pub use geneve::GenevePacket;
pub use gre::{GreHeader, GrePacket, GreRepr};
pub use headers::Headers;
pub use icmp::IcmpPacket;
pub use icmpv4::Icmpv4Repr;
pub use icmpv6::Icmpv6Repr;
pub use ip::{IpRepr, IpVersion};
pub use ip_packet::IpPacket;
pub use ipcomp::IpcompPacket;
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use layout::Layout;
pub use mpls::{Lse, LseRepr};
pub use tcp::{TcpPacket, TcpRepr};
pub use tuple::FiveTuple;
pub use udp::{UdpPacket, UdpRepr};
pub use vxlan::VxlanPacket;

/// IP protocol numbers relayd knows by name.
pub mod proto {
    /// ICMP
    pub const ICMP: u8 = 1;
    /// IPv4 in IP (a tunnel's inner packet)
    pub const IPV4: u8 = 4;
    /// TCP
    pub const TCP: u8 = 6;
    /// UDP
    pub const UDP: u8 = 17;
    /// IPv6 in IP (a tunnel's inner packet)
    pub const IPV6: u8 = 41;
    /// ESP (RFC 4303)
    pub const ESP: u8 = 50;
    /// ICMPv6
    pub const ICMPV6: u8 = 58;
    /// No next header (IPv6; an ESP dummy packet)
    pub const NO_NEXT_HEADER: u8 = 59;
    /// MPLS in IP (RFC 4023)
    pub const MPLS: u8 = 137;
    /// IPComp (RFC 3173)
    pub const IPCOMP: u8 = 108;
}

/// Rewrites the IP header after the bytes from the transport offset on were replaced by
/// `total - header` new bytes carrying `protocol` (IPComp, ESP, or the restored one): the
/// IPv4 total length, protocol and header checksum, or the IPv6 payload length and the
/// fixed header's next header.
///
/// # Panics
/// If `data` is shorter than the IP header; `total` must fit the header's length field.
pub fn fix_ip_header(data: &mut [u8], version: IpVersion, total: usize, protocol: u8) {
    IpPacket::new_unchecked(data, version).set_len_and_protocol(total, protocol);
}

/// Why a packet could not be parsed. Counted per queue and handled by the queue's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Malformed {
    /// The buffer is shorter than a header or a length field says.
    Truncated,
    /// The IP version nibble is neither 4 nor 6 (or not the one expected).
    BadVersion,
    /// A header length field is below the minimum or inconsistent.
    BadHeaderLen,
}

impl Malformed {
    /// A short name used in logs and counters.
    pub fn as_str(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::BadVersion => "bad_version",
            Malformed::BadHeaderLen => "bad_header_len",
        }
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for Malformed {}
