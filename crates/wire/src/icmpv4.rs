//! ICMPv4 messages (RFC 792) in their high-level form [`Icmpv4Repr`]: the ones relayd
//! reads and sends by name (echo, destination unreachable, fragmentation needed, time
//! exceeded, parameter problem), any other kept whole as [`Icmpv4Repr::Other`].
//!
//! [`Icmpv4Repr::parse`] fails only on a message shorter than its 8-byte header
//! ([`Malformed::Truncated`]). The message body (echo data, the quoted packet of an error)
//! is not part of the form: the caller reads or writes it through
//! [`IcmpPacket::data`] / [`IcmpPacket::data_mut`], then fills the checksum.

use super::{IcmpPacket, Malformed, icmp};

/// ICMPv4 message types.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated, RFC 6633; still an error).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 12;
}

/// Codes of destination unreachable (RFC 792, RFC 1812 5.2.7.1).
pub mod dst_unreachable {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (RFC 1191: with the next-hop MTU).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Codes of time exceeded.
pub mod time_exceeded {
    /// TTL exceeded in transit.
    pub const TTL: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// True for the error messages, which are never answered with an error (RFC 1812
/// 4.3.2.7): destination unreachable, source quench, redirect, time exceeded and
/// parameter problem.
pub const fn is_error(msg_type: u8) -> bool {
    matches!(
        msg_type,
        msg_type::DST_UNREACHABLE
            | msg_type::SOURCE_QUENCH
            | msg_type::REDIRECT
            | msg_type::TIME_EXCEEDED
            | msg_type::PARAM_PROBLEM
    )
}

/// The high-level form of an ICMPv4 header. Fields RFC 792 calls unused are read past and
/// emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Icmpv4Repr {
    /// Echo request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Echo reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Destination unreachable (type 3) with any code but fragmentation needed (see
    /// [`dst_unreachable`]).
    DstUnreachable {
        /// The code.
        code: u8,
    },
    /// Destination unreachable, fragmentation needed (type 3 code 4, RFC 1191).
    FragNeeded {
        /// The next-hop MTU (0 from a router older than RFC 1191).
        mtu: u16,
    },
    /// Time exceeded (type 11; see [`time_exceeded`]).
    TimeExceeded {
        /// The code.
        code: u8,
    },
    /// Parameter problem (type 12).
    ParamProblem {
        /// The code (0: the pointer says where).
        code: u8,
        /// The octet of the quoted header at fault.
        pointer: u8,
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

impl Icmpv4Repr {
    /// Reads an ICMPv4 header (checking its length; the checksum is not verified, see
    /// [`IcmpPacket::verify_checksum`] with a pseudo sum of 0).
    pub fn parse<T: AsRef<[u8]>>(p: &IcmpPacket<T>) -> Result<Icmpv4Repr, Malformed> {
        p.check_len()?;
        let code = p.code();
        Ok(match (p.msg_type(), code) {
            (msg_type::ECHO_REQUEST, 0) => Icmpv4Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq(),
            },
            (msg_type::ECHO_REPLY, 0) => Icmpv4Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq(),
            },
            (msg_type::DST_UNREACHABLE, dst_unreachable::FRAG_NEEDED) => Icmpv4Repr::FragNeeded {
                mtu: p.next_hop_mtu(),
            },
            (msg_type::DST_UNREACHABLE, code) => Icmpv4Repr::DstUnreachable { code },
            (msg_type::TIME_EXCEEDED, code) => Icmpv4Repr::TimeExceeded { code },
            (msg_type::PARAM_PROBLEM, code) => Icmpv4Repr::ParamProblem {
                code,
                pointer: p.pointer(),
            },
            (msg_type, code) => Icmpv4Repr::Other {
                msg_type,
                code,
                rest: p.rest_of_header(),
            },
        })
    }

    /// The message type.
    pub const fn msg_type(&self) -> u8 {
        match *self {
            Icmpv4Repr::EchoRequest { .. } => msg_type::ECHO_REQUEST,
            Icmpv4Repr::EchoReply { .. } => msg_type::ECHO_REPLY,
            Icmpv4Repr::DstUnreachable { .. } | Icmpv4Repr::FragNeeded { .. } => {
                msg_type::DST_UNREACHABLE
            }
            Icmpv4Repr::TimeExceeded { .. } => msg_type::TIME_EXCEEDED,
            Icmpv4Repr::ParamProblem { .. } => msg_type::PARAM_PROBLEM,
            Icmpv4Repr::Other { msg_type, .. } => msg_type,
        }
    }

    /// The message code.
    pub const fn code(&self) -> u8 {
        match *self {
            Icmpv4Repr::EchoRequest { .. } | Icmpv4Repr::EchoReply { .. } => 0,
            Icmpv4Repr::FragNeeded { .. } => dst_unreachable::FRAG_NEEDED,
            Icmpv4Repr::DstUnreachable { code }
            | Icmpv4Repr::TimeExceeded { code }
            | Icmpv4Repr::ParamProblem { code, .. }
            | Icmpv4Repr::Other { code, .. } => code,
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
    /// `p.fill_checksum(0)` fills the checksum.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut IcmpPacket<T>) {
        p.set_msg_type(self.msg_type());
        p.set_code(self.code());
        p.set_checksum(0);
        p.set_rest_of_header(0);
        match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no } | Icmpv4Repr::EchoReply { ident, seq_no } => {
                p.set_echo_ident(ident);
                p.set_echo_seq(seq_no);
            }
            Icmpv4Repr::FragNeeded { mtu } => p.set_next_hop_mtu(mtu),
            Icmpv4Repr::ParamProblem { pointer, .. } => p.set_pointer(pointer),
            Icmpv4Repr::Other { rest, .. } => p.set_rest_of_header(rest),
            Icmpv4Repr::DstUnreachable { .. } | Icmpv4Repr::TimeExceeded { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{
        V4_ECHO_REQUEST, V4_FRAG_NEEDED, V4_PORT_UNREACHABLE, V4_TIME_EXCEEDED, V4_UDP, l4,
    };
    use super::super::{Ipv4Packet, Ipv4Repr};
    use super::*;
    use std::net::Ipv4Addr;

    /// Rebuilds a captured ICMPv4 packet from its parsed forms and its body, and checks
    /// every byte, both checksums included.
    fn rebuild(pkt: &[u8]) -> Icmpv4Repr {
        let ip = Ipv4Repr::parse(&Ipv4Packet::new_checked(pkt).unwrap()).unwrap();
        let m = IcmpPacket::new_checked(l4(pkt)).unwrap();
        assert!(m.verify_checksum(0));
        let r = Icmpv4Repr::parse(&m).unwrap();
        let mut out = vec![0xa5u8; ip.buffer_len()];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        let mut o = IcmpPacket::new_unchecked(&mut out[ip.header_len()..]);
        r.emit(&mut o);
        o.data_mut().copy_from_slice(m.data());
        o.fill_checksum(0);
        assert_eq!(out, pkt);
        r
    }

    #[test]
    fn captured_messages_round_trip_byte_for_byte() {
        assert_eq!(
            rebuild(V4_ECHO_REQUEST),
            Icmpv4Repr::EchoRequest {
                ident: 2467,
                seq_no: 1
            }
        );
        assert_eq!(
            rebuild(V4_TIME_EXCEEDED),
            Icmpv4Repr::TimeExceeded {
                code: time_exceeded::TTL
            }
        );
        let r = rebuild(V4_FRAG_NEEDED);
        assert_eq!(r, Icmpv4Repr::FragNeeded { mtu: 1280 });
        assert_eq!((r.msg_type(), r.code(), r.is_error()), (3, 4, true));
        let r = rebuild(V4_PORT_UNREACHABLE);
        assert_eq!(
            r,
            Icmpv4Repr::DstUnreachable {
                code: dst_unreachable::PORT
            }
        );
        // The quote is the datagram as sent, TTL already lowered by the router.
        let quote = IcmpPacket::new_checked(l4(V4_PORT_UNREACHABLE)).unwrap();
        assert_eq!(&quote.data()[20..], l4(V4_UDP));
    }

    #[test]
    fn builds_a_port_unreachable_like_the_kernels() {
        // B's own answer: TOS 0xc0, TTL 64 (63 once through R), no DF, the datagram quoted.
        let orig = IcmpPacket::new_checked(l4(V4_PORT_UNREACHABLE)).unwrap();
        let quote = orig.data();
        let mut ip = Ipv4Repr::new(
            Ipv4Addr::new(198, 51, 100, 2),
            Ipv4Addr::new(192, 0, 2, 1),
            super::super::proto::ICMP,
            8 + quote.len(),
        );
        (ip.tos, ip.ttl, ip.ident, ip.dont_frag) = (0xc0, 63, 36415, false);
        let mut out = vec![0u8; ip.buffer_len()];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        let mut m = IcmpPacket::new_unchecked(&mut out[20..]);
        Icmpv4Repr::DstUnreachable {
            code: dst_unreachable::PORT,
        }
        .emit(&mut m);
        m.data_mut().copy_from_slice(quote);
        m.fill_checksum(0);
        assert_eq!(out, V4_PORT_UNREACHABLE);
    }

    #[test]
    fn other_messages_and_param_problems_keep_their_fields() {
        for r in [
            Icmpv4Repr::Other {
                msg_type: msg_type::REDIRECT,
                code: 1,
                rest: 0xc0000201,
            },
            Icmpv4Repr::ParamProblem {
                code: 0,
                pointer: 9,
            },
            Icmpv4Repr::EchoReply {
                ident: 1,
                seq_no: 0xffff,
            },
            Icmpv4Repr::DstUnreachable {
                code: dst_unreachable::ADMIN_PROHIBITED,
            },
        ] {
            let mut b = [0xffu8; 8];
            let mut p = IcmpPacket::new_unchecked(&mut b[..]);
            r.emit(&mut p);
            assert_eq!(p.checksum(), 0);
            assert_eq!(Icmpv4Repr::parse(&p), Ok(r));
        }
        // An echo with a code other than 0 is not an echo RFC 792 knows: kept whole.
        let m = IcmpPacket::new_unchecked(&[8u8, 1, 0, 0, 0, 1, 0, 2][..]);
        assert_eq!(
            Icmpv4Repr::parse(&m),
            Ok(Icmpv4Repr::Other {
                msg_type: 8,
                code: 1,
                rest: 0x0001_0002
            })
        );
    }

    #[test]
    fn errors_and_truncation() {
        for t in [3, 4, 5, 11, 12] {
            assert!(is_error(t), "{t}");
        }
        for t in [0, 8, 13, 14, 255] {
            assert!(!is_error(t), "{t}");
        }
        assert_eq!(
            Icmpv4Repr::parse(&IcmpPacket::new_unchecked(&[3u8, 3, 0, 0][..])),
            Err(Malformed::Truncated)
        );
    }
}
