//! ICMPv6 messages (RFC 4443) in their high-level form [`Icmpv6Repr`]: the ones relayd
//! reads and sends by name (echo, destination unreachable, packet too big, time exceeded,
//! parameter problem), any other (neighbour discovery, MLD, ...) kept whole as
//! [`Icmpv6Repr::Other`].
//!
//! [`Icmpv6Repr::parse`] fails only on a message shorter than its 8-byte header
//! ([`Malformed::Truncated`]). The body (echo data, the quoted packet of an error) is the
//! caller's, through [`IcmpPacket::data`] / [`IcmpPacket::data_mut`]; the checksum covers
//! the IPv6 pseudo header ([`super::Ipv6Repr::pseudo_sum`]).

use super::{IcmpPacket, Malformed, icmp};

/// ICMPv6 message types.
pub mod msg_type {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
}

/// Codes of destination unreachable (RFC 4443 3.1).
pub mod dst_unreachable {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond the scope of the source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDRESS: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
}

/// Codes of time exceeded (RFC 4443 3.3).
pub mod time_exceeded {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// True for the error messages (types 0 to 127, RFC 4443 2.1), which are never answered
/// with an error (RFC 4443 2.4).
pub const fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// The high-level form of an ICMPv6 header. Fields RFC 4443 calls unused are read past
/// and emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Icmpv6Repr {
    /// Echo request (type 128).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Echo reply (type 129).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Destination unreachable (type 1; see [`dst_unreachable`]).
    DstUnreachable {
        /// The code.
        code: u8,
    },
    /// Packet too big (type 2).
    PacketTooBig {
        /// The MTU of the next-hop link.
        mtu: u32,
    },
    /// Time exceeded (type 3; see [`time_exceeded`]).
    TimeExceeded {
        /// The code.
        code: u8,
    },
    /// Parameter problem (type 4).
    ParamProblem {
        /// The code.
        code: u8,
        /// The offset of the octet at fault in the quoted packet.
        pointer: u32,
    },
    /// Any other message, whole.
    Other {
        /// The type.
        msg_type: u8,
        /// The code.
        code: u8,
        /// The rest of the header.
        rest: u32,
    },
}

impl Icmpv6Repr {
    /// Reads an ICMPv6 header (checking its length; the checksum is not verified, see
    /// [`IcmpPacket::verify_checksum`] with the pseudo-header sum).
    pub fn parse<T: AsRef<[u8]>>(p: &IcmpPacket<T>) -> Result<Icmpv6Repr, Malformed> {
        p.check_len()?;
        Ok(match (p.msg_type(), p.code()) {
            (msg_type::ECHO_REQUEST, 0) => Icmpv6Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq(),
            },
            (msg_type::ECHO_REPLY, 0) => Icmpv6Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq(),
            },
            (msg_type::DST_UNREACHABLE, code) => Icmpv6Repr::DstUnreachable { code },
            (msg_type::PACKET_TOO_BIG, 0) => Icmpv6Repr::PacketTooBig {
                mtu: p.rest_of_header(),
            },
            (msg_type::TIME_EXCEEDED, code) => Icmpv6Repr::TimeExceeded { code },
            (msg_type::PARAM_PROBLEM, code) => Icmpv6Repr::ParamProblem {
                code,
                pointer: p.rest_of_header(),
            },
            (msg_type, code) => Icmpv6Repr::Other {
                msg_type,
                code,
                rest: p.rest_of_header(),
            },
        })
    }

    /// The message type.
    pub const fn msg_type(&self) -> u8 {
        match *self {
            Icmpv6Repr::EchoRequest { .. } => msg_type::ECHO_REQUEST,
            Icmpv6Repr::EchoReply { .. } => msg_type::ECHO_REPLY,
            Icmpv6Repr::DstUnreachable { .. } => msg_type::DST_UNREACHABLE,
            Icmpv6Repr::PacketTooBig { .. } => msg_type::PACKET_TOO_BIG,
            Icmpv6Repr::TimeExceeded { .. } => msg_type::TIME_EXCEEDED,
            Icmpv6Repr::ParamProblem { .. } => msg_type::PARAM_PROBLEM,
            Icmpv6Repr::Other { msg_type, .. } => msg_type,
        }
    }

    /// The message code.
    pub const fn code(&self) -> u8 {
        match *self {
            Icmpv6Repr::EchoRequest { .. }
            | Icmpv6Repr::EchoReply { .. }
            | Icmpv6Repr::PacketTooBig { .. } => 0,
            Icmpv6Repr::DstUnreachable { code }
            | Icmpv6Repr::TimeExceeded { code }
            | Icmpv6Repr::ParamProblem { code, .. }
            | Icmpv6Repr::Other { code, .. } => code,
        }
    }

    /// True for an error message (see [`is_error`]).
    pub const fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }

    /// The header length: 8 (the body follows).
    pub const fn header_len(&self) -> usize {
        icmp::HEADER_LEN
    }

    /// Writes the 8-byte header into `p` with checksum 0. Once the body is in place,
    /// `p.fill_checksum(ip.pseudo_sum())` fills the checksum.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut IcmpPacket<T>) {
        p.set_msg_type(self.msg_type());
        p.set_code(self.code());
        p.set_checksum(0);
        p.set_rest_of_header(match *self {
            Icmpv6Repr::EchoRequest { ident, seq_no } | Icmpv6Repr::EchoReply { ident, seq_no } => {
                (ident as u32) << 16 | seq_no as u32
            }
            Icmpv6Repr::PacketTooBig { mtu } => mtu,
            Icmpv6Repr::ParamProblem { pointer, .. } => pointer,
            Icmpv6Repr::Other { rest, .. } => rest,
            Icmpv6Repr::DstUnreachable { .. } | Icmpv6Repr::TimeExceeded { .. } => 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{
        V6_ECHO_REQUEST, V6_PACKET_TOO_BIG, V6_PORT_UNREACHABLE, V6_TIME_EXCEEDED, V6_UDP, l4,
        pseudo_of,
    };
    use super::super::{Ipv6Packet, Ipv6Repr};
    use super::*;

    /// Rebuilds a captured ICMPv6 packet from its parsed forms and its body, and checks
    /// every byte, the checksum included.
    fn rebuild(pkt: &[u8]) -> Icmpv6Repr {
        let ip = Ipv6Repr::parse(&Ipv6Packet::new_checked(pkt).unwrap()).unwrap();
        let m = IcmpPacket::new_checked(l4(pkt)).unwrap();
        assert!(m.verify_checksum(pseudo_of(pkt)));
        let r = Icmpv6Repr::parse(&m).unwrap();
        let mut out = vec![0x5au8; ip.buffer_len()];
        ip.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        let mut o = IcmpPacket::new_unchecked(&mut out[ip.header_len()..]);
        r.emit(&mut o);
        o.data_mut().copy_from_slice(m.data());
        o.fill_checksum(ip.pseudo_sum());
        assert_eq!(out, pkt);
        r
    }

    #[test]
    fn captured_messages_round_trip_byte_for_byte() {
        assert_eq!(
            rebuild(V6_ECHO_REQUEST),
            Icmpv6Repr::EchoRequest {
                ident: 2468,
                seq_no: 1
            }
        );
        assert_eq!(
            rebuild(V6_TIME_EXCEEDED),
            Icmpv6Repr::TimeExceeded {
                code: time_exceeded::HOP_LIMIT
            }
        );
        let r = rebuild(V6_PACKET_TOO_BIG);
        assert_eq!(r, Icmpv6Repr::PacketTooBig { mtu: 1280 });
        assert_eq!((r.msg_type(), r.code(), r.is_error()), (2, 0, true));
        let r = rebuild(V6_PORT_UNREACHABLE);
        assert_eq!(
            r,
            Icmpv6Repr::DstUnreachable {
                code: dst_unreachable::PORT
            }
        );
        let quote = IcmpPacket::new_checked(l4(V6_PORT_UNREACHABLE)).unwrap();
        assert_eq!(&quote.data()[40..], l4(V6_UDP));
    }

    #[test]
    fn other_messages_and_param_problems_keep_their_fields() {
        for r in [
            // A neighbour solicitation's header: reserved word zero.
            Icmpv6Repr::Other {
                msg_type: 135,
                code: 0,
                rest: 0,
            },
            Icmpv6Repr::ParamProblem {
                code: 1,
                pointer: 40,
            },
            Icmpv6Repr::EchoReply {
                ident: 0xffff,
                seq_no: 2,
            },
            Icmpv6Repr::DstUnreachable {
                code: dst_unreachable::ADMIN_PROHIBITED,
            },
        ] {
            let mut b = [0xffu8; 8];
            let mut p = IcmpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            assert_eq!(p.checksum(), 0);
            assert_eq!(Icmpv6Repr::parse(&p), Ok(r));
        }
        // Packet too big with a code RFC 4443 does not define: kept whole.
        let m = IcmpPacket::new_unchecked(&[2u8, 1, 0, 0, 0, 0, 5, 0][..]);
        assert_eq!(
            Icmpv6Repr::parse(&m),
            Ok(Icmpv6Repr::Other {
                msg_type: 2,
                code: 1,
                rest: 1280
            })
        );
    }

    #[test]
    fn errors_and_truncation() {
        assert!(is_error(1) && is_error(127));
        assert!(!is_error(128) && !is_error(135));
        assert_eq!(
            Icmpv6Repr::parse(&IcmpPacket::new_unchecked(&[1u8, 4, 0, 0, 0, 0, 0][..])),
            Err(Malformed::Truncated)
        );
    }
}
