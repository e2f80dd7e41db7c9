//! `reject`: answers a rejected packet the way a host would refuse it (a TCP RST, or an
//! ICMP / ICMPv6 port unreachable for other protocols), through a raw socket whose packets
//! carry relayd's bypass mark so relayd's own iptables rules do not queue them again.
//!
//! TCP gets two resets: one to the sender (sequence number = the segment's
//! acknowledgement, so the sender's stack takes it as exact, RFC 5961) and one to the
//! receiver (sequence number = the dropped segment's, which the receiver expects next).
//! ICMP is never answered with ICMP (RFC 1122 3.2.2).

use relay_core::wire::{Ipv4Packet, TcpPacket, checksum, proto, tcp::flags};
use relay_core::{Counter, IpVersion, Packet, ratelimit::RateLimit};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// The largest answer built: the IPv6 minimum MTU.
const MAX_ANSWER: usize = 1280;
/// How much of the original an ICMPv4 error quotes at most (a 576-byte datagram, RFC 1812).
const ICMP4_MAX: usize = 576;

/// Writes an IP header + 20-byte TCP header (no options) to `out`; returns its length.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_tcp(
    out: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    tcp_flags: u8,
) -> Option<usize> {
    let ip_len = emit_ip(out, src, dst, proto::TCP, 20)?;
    let t = &mut out[ip_len..ip_len + 20];
    t.fill(0);
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = tcp_flags;
    TcpPacket::new_unchecked(t).fill_checksum(pseudo(src, dst, proto::TCP, 20));
    Some(ip_len + 20)
}

fn pseudo(src: IpAddr, dst: IpAddr, p: u8, len: u32) -> u64 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, p, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(s, d, p, len),
        _ => 0,
    }
}

/// Writes an IP header for `payload` bytes of protocol `p`; returns the header length.
fn emit_ip(out: &mut [u8], src: IpAddr, dst: IpAddr, p: u8, payload: usize) -> Option<usize> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = 20 + payload;
            let h = out.get_mut(..total)?;
            h[..20].fill(0);
            h[0] = 0x45;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = 64;
            h[9] = p;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
            Some(20)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = out.get_mut(..40 + payload)?;
            h[..40].fill(0);
            h[0] = 0x60;
            h[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
            h[6] = p;
            h[7] = 64;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            Some(40)
        }
        _ => None,
    }
}

/// Writes an ICMP(v6) port unreachable from `src` to `dst` quoting `orig`; returns its length.
pub(crate) fn emit_unreachable(
    out: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    orig: &[u8],
) -> Option<usize> {
    let (p, ty, code, quote) = match src {
        IpAddr::V4(_) => (proto::ICMP, 3, 3, orig.len().min(ICMP4_MAX - 28)),
        IpAddr::V6(_) => (proto::ICMPV6, 1, 4, orig.len().min(MAX_ANSWER - 48)),
    };
    let ip_len = emit_ip(out, src, dst, p, 8 + quote)?;
    let m = &mut out[ip_len..ip_len + 8 + quote];
    m[..8].fill(0);
    m[0] = ty;
    m[1] = code;
    m[8..].copy_from_slice(&orig[..quote]);
    let ps = if p == proto::ICMPV6 {
        pseudo(src, dst, p, (8 + quote) as u32)
    } else {
        0
    };
    relay_core::wire::IcmpPacket::new_unchecked(m).fill_checksum(ps);
    Some(ip_len + 8 + quote)
}

/// The TCP facts of a segment a reset answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u8,
    pub(crate) len: u32,
}

/// The reset to the segment's sender (RFC 9293 3.10.7.1 reset generation).
pub(crate) fn rst_to_sender(s: &Segment, out: &mut [u8]) -> Option<usize> {
    if s.flags & flags::ACK != 0 {
        emit_tcp(out, s.dst, s.src, s.dport, s.sport, s.ack, 0, flags::RST)
    } else {
        let mut ack = s.seq.wrapping_add(s.len);
        if s.flags & flags::SYN != 0 {
            ack = ack.wrapping_add(1);
        }
        if s.flags & flags::FIN != 0 {
            ack = ack.wrapping_add(1);
        }
        emit_tcp(
            out,
            s.dst,
            s.src,
            s.dport,
            s.sport,
            0,
            ack,
            flags::RST | flags::ACK,
        )
    }
}

/// The reset to the segment's receiver, in the sender's name; `None` for a SYN (the
/// receiver has no connection yet).
pub(crate) fn rst_to_receiver(s: &Segment, out: &mut [u8]) -> Option<usize> {
    if s.flags & flags::ACK == 0 {
        return None;
    }
    emit_tcp(
        out,
        s.src,
        s.dst,
        s.sport,
        s.dport,
        s.seq,
        s.ack,
        flags::RST | flags::ACK,
    )
}

/// Sends rejects for one queue thread; sockets are opened on first use.
#[derive(Debug)]
pub(crate) struct Rejecter {
    mark: Option<u32>,
    fd4: Option<OwnedFd>,
    fd6: Option<OwnedFd>,
    buf: Vec<u8>,
    sent: Counter,
    errors: Counter,
    log: RateLimit,
}

impl Rejecter {
    /// `mark`: the configured mark, or `None` to take the datapath's bypass mark.
    pub(crate) fn new(mark: Option<u32>, sent: Counter, errors: Counter) -> Rejecter {
        Rejecter {
            mark,
            fd4: None,
            fd6: None,
            buf: vec![0; MAX_ANSWER],
            sent,
            errors,
            log: RateLimit::new(1),
        }
    }

    /// The configured mark, if any.
    pub(crate) fn mark(&self) -> Option<u32> {
        self.mark
    }

    /// Answers `pkt` (which the caller then drops); the sockets carry `mark`.
    pub(crate) fn reject(&mut self, pkt: &mut Packet, mark: u32, now: Instant) {
        let Ok(l) = pkt.layout() else { return };
        let (src, dst): (IpAddr, IpAddr) = match l.version {
            IpVersion::V4 => match pkt.ipv4() {
                Some(ip) => (ip.src_addr().into(), ip.dst_addr().into()),
                None => return,
            },
            IpVersion::V6 => match pkt.ipv6() {
                Some(ip) => (ip.src_addr().into(), ip.dst_addr().into()),
                None => return,
            },
        };
        if l.proto == proto::TCP {
            let Some(t) = pkt.tcp() else { return };
            if t.flags() & flags::RST != 0 {
                return;
            }
            let s = Segment {
                src,
                dst,
                sport: t.src_port(),
                dport: t.dst_port(),
                seq: t.seq(),
                ack: t.ack(),
                flags: t.flags(),
                len: t.payload().len() as u32,
            };
            let mut buf = std::mem::take(&mut self.buf);
            if let Some(n) = rst_to_sender(&s, &mut buf) {
                self.send(&buf[..n], s.src, mark, now);
            }
            if let Some(n) = rst_to_receiver(&s, &mut buf) {
                self.send(&buf[..n], s.dst, mark, now);
            }
            self.buf = buf;
        } else if l.proto != proto::ICMP && l.proto != proto::ICMPV6 {
            let mut buf = std::mem::take(&mut self.buf);
            if let Some(n) = emit_unreachable(&mut buf, dst, src, &pkt.data()[..l.len]) {
                self.send(&buf[..n], src, mark, now);
            }
            self.buf = buf;
        }
    }

    fn send(&mut self, bytes: &[u8], to: IpAddr, mark: u32, now: Instant) {
        let v6 = to.is_ipv6();
        let slot = if v6 { &mut self.fd6 } else { &mut self.fd4 };
        let r = match slot {
            Some(fd) => send_to(fd, bytes, to),
            None => match raw_socket(v6, mark) {
                Ok(fd) => send_to(slot.insert(fd), bytes, to),
                Err(e) => Err(e),
            },
        };
        match r {
            Ok(()) => self.sent.inc(),
            Err(e) => {
                self.errors.inc();
                if let Some(suppressed) = self.log.allow(now) {
                    tracing::warn!(error = %e, %to, suppressed, "ids: cannot send a reject");
                }
            }
        }
    }
}

fn raw_socket(v6: bool, mark: u32) -> io::Result<OwnedFd> {
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // IPPROTO_RAW means the header is included (IP_HDRINCL, and on IPv6 likewise).
    // SO_MARK needs CAP_NET_ADMIN, which relayd has to install its rules.
    let v: u32 = mark;
    // SAFETY: a valid fd and a pointer to a live u32 of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            (&v as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn send_to(fd: &OwnedFd, bytes: &[u8], to: IpAddr) -> io::Result<()> {
    let rc = match to {
        IpAddr::V4(a) => {
            // SAFETY: zeroed sockaddr_in is a valid value.
            let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
            // SAFETY: buffer and address are live for the call, sizes match.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    libc::MSG_DONTWAIT,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        IpAddr::V6(a) => {
            // SAFETY: zeroed sockaddr_in6 is a valid value.
            let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sa.sin6_addr.s6_addr = a.octets();
            // SAFETY: buffer and address are live for the call, sizes match.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    bytes.as_ptr().cast(),
                    bytes.len(),
                    libc::MSG_DONTWAIT,
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{IcmpPacket, Ipv6Packet};

    fn seg(flags: u8) -> Segment {
        Segment {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            sport: 40000,
            dport: 80,
            seq: 1000,
            ack: 5000,
            flags,
            len: 100,
        }
    }

    #[test]
    fn resets_are_valid_and_aimed() {
        let mut buf = vec![0; MAX_ANSWER];
        let n = rst_to_sender(&seg(flags::ACK | flags::PSH), &mut buf).unwrap();
        let mut p = Packet::from_bytes(&buf[..n]);
        let ip = p.ipv4().unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr().to_string(), "10.0.0.1");
        let t = p.tcp().unwrap();
        assert_eq!(
            (t.src_port(), t.dst_port(), t.seq(), t.flags()),
            (80, 40000, 5000, flags::RST)
        );
        let ps = checksum::pseudo_v4([10, 0, 0, 2].into(), [10, 0, 0, 1].into(), 6, 20);
        assert!(t.verify_checksum(ps));

        let n = rst_to_receiver(&seg(flags::ACK), &mut buf).unwrap();
        let mut p = Packet::from_bytes(&buf[..n]);
        let t = p.tcp().unwrap();
        assert_eq!(
            (t.dst_port(), t.seq(), t.flags()),
            (80, 1000, flags::RST | flags::ACK)
        );

        // A SYN: reset+ack to the sender acknowledging the SYN, nothing to the receiver.
        let n = rst_to_sender(&seg(flags::SYN), &mut buf).unwrap();
        let mut p = Packet::from_bytes(&buf[..n]);
        let t = p.tcp().unwrap();
        assert_eq!((t.ack(), t.flags()), (1101, flags::RST | flags::ACK));
        assert!(rst_to_receiver(&seg(flags::SYN), &mut buf).is_none());
    }

    #[test]
    fn unreachable_quotes_the_original() {
        let mut buf = vec![0; MAX_ANSWER];
        let orig = [0x45u8; 60];
        let n = emit_unreachable(
            &mut buf,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            &orig,
        )
        .unwrap();
        let mut p = Packet::from_bytes(&buf[..n]);
        let l4 = p.l4().unwrap().to_vec();
        let icmp = IcmpPacket::new_checked(&l4[..]).unwrap();
        assert_eq!((icmp.msg_type(), icmp.code()), (3, 3));
        assert_eq!(checksum::checksum(&l4), 0);
        assert_eq!(&l4[8..], &orig[..]);

        let src: IpAddr = "2001:db8::2".parse().unwrap();
        let dst: IpAddr = "2001:db8::1".parse().unwrap();
        let n = emit_unreachable(&mut buf, src, dst, &[0x60; 2000]).unwrap();
        assert_eq!(n, MAX_ANSWER);
        let ip = Ipv6Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(ip.next_header(), 58);
        let ps = pseudo(src, dst, 58, (n - 40) as u32);
        assert_eq!(checksum::fold(checksum::sum(ps, &buf[40..n])), 0xffff);
    }
}
