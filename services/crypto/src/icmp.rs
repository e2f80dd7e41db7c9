//! "Packet too big" for the sender of a packet that would not fit the path once encrypted:
//! ICMP "fragmentation needed" (RFC 792, RFC 1191) for IPv4 with DF, ICMPv6 "packet too
//! big" (RFC 4443) for IPv6, as a router in front of a tunnel sends them. Raw sockets are
//! opened on first use, the messages are rate-limited, and each carries relayd's bypass
//! mark so that relayd does not queue it again.

use relay_core::ratelimit::RateLimit;
use relay_core::wire::checksum;
use relay_core::{Context, Counter};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Original bytes quoted in an ICMPv4 error: the message stays within 576 bytes (RFC 1812 4.3.2.3).
const QUOTE_V4: usize = 576 - 20 - 8;
/// Original bytes quoted in an ICMPv6 error: within the minimum MTU of 1280 (RFC 4443 2.4).
const QUOTE_V6: usize = 1280 - 40 - 8;

/// Sends "too big" errors from one queue thread.
pub(crate) struct TooBig {
    v4: Option<(OwnedFd, u32)>,
    v6: Option<(OwnedFd, u32)>,
    limit: RateLimit,
    buf: Vec<u8>,
    sent: Counter,
    suppressed: Counter,
    failed: Counter,
}

impl TooBig {
    /// At most `per_second` errors per second leave; the rest are counted.
    pub(crate) fn new(
        per_second: u32,
        sent: Counter,
        suppressed: Counter,
        failed: Counter,
    ) -> TooBig {
        TooBig {
            v4: None,
            v6: None,
            limit: RateLimit::new(per_second),
            buf: Vec::with_capacity(1280),
            sent,
            suppressed,
            failed,
        }
    }

    /// Tells the sender of `pkt` (a whole IPv4 or IPv6 packet) that the path carries
    /// packets of at most `mtu` bytes. Errors about errors and from unspecified or
    /// multicast sources are never sent (RFC 1812 4.3.2.7, RFC 4443 2.4).
    pub(crate) fn send(&mut self, pkt: &[u8], mtu: u16, cx: &Context) {
        let Some((src, is_error)) = source_of(pkt) else {
            return;
        };
        if is_error || src.is_unspecified() || src.is_multicast() || is_broadcast(src) {
            return;
        }
        if self.limit.allow(cx.now).is_none() {
            self.suppressed.inc();
            return;
        }
        let ok = match src {
            IpAddr::V4(a) => self.send_v4(a, pkt, mtu, cx.bypass_mark),
            IpAddr::V6(a) => self.send_v6(a, pkt, mtu, cx.bypass_mark),
        };
        match ok {
            Ok(()) => self.sent.inc(),
            Err(e) => {
                self.failed.inc();
                tracing::debug!("cannot send packet-too-big to {src}: {e}");
            }
        }
    }

    fn send_v4(&mut self, dst: Ipv4Addr, pkt: &[u8], mtu: u16, mark: u32) -> std::io::Result<()> {
        let fd = socket(&mut self.v4, libc::AF_INET, libc::IPPROTO_RAW, mark)?;
        let quote = &pkt[..pkt.len().min(QUOTE_V4)];
        let b = &mut self.buf;
        b.clear();
        // IP header: the kernel fills in the source address, id and checksum (raw(7)).
        let total = (20 + 8 + quote.len()) as u16;
        b.extend_from_slice(&[0x45, 0xc0]);
        b.extend_from_slice(&total.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0, 64, 1, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&dst.octets());
        // ICMP destination unreachable, fragmentation needed, next-hop MTU (RFC 1191).
        b.extend_from_slice(&[3, 4, 0, 0, 0, 0]);
        b.extend_from_slice(&mtu.to_be_bytes());
        b.extend_from_slice(quote);
        let sum = checksum::checksum(&b[20..]);
        b[22..24].copy_from_slice(&sum.to_be_bytes());
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(dst.octets()),
            },
            sin_zero: [0; 8],
        };
        send_to(fd, b, &addr)
    }

    fn send_v6(&mut self, dst: Ipv6Addr, pkt: &[u8], mtu: u16, mark: u32) -> std::io::Result<()> {
        // An ICMPv6 raw socket: the kernel builds the IPv6 header and the checksum.
        let fd = socket(&mut self.v6, libc::AF_INET6, libc::IPPROTO_ICMPV6, mark)?;
        let b = &mut self.buf;
        b.clear();
        b.extend_from_slice(&[2, 0, 0, 0]);
        b.extend_from_slice(&u32::from(mtu).to_be_bytes());
        b.extend_from_slice(&pkt[..pkt.len().min(QUOTE_V6)]);
        let addr = libc::sockaddr_in6 {
            sin6_family: libc::AF_INET6 as libc::sa_family_t,
            sin6_port: 0,
            sin6_flowinfo: 0,
            sin6_addr: libc::in6_addr {
                s6_addr: dst.octets(),
            },
            sin6_scope_id: 0,
        };
        send_to(fd, b, &addr)
    }
}

/// The packet's source and whether it is itself an ICMP error.
fn source_of(pkt: &[u8]) -> Option<(IpAddr, bool)> {
    match pkt.first()? >> 4 {
        4 if pkt.len() >= 20 => {
            let src: [u8; 4] = pkt[12..16].try_into().ok()?;
            let ihl = ((pkt[0] & 0xf) as usize) * 4;
            let icmp_type = (pkt[9] == 1).then(|| pkt.get(ihl).copied()).flatten();
            let error = icmp_type.is_some_and(|t| matches!(t, 3 | 4 | 5 | 11 | 12));
            Some((IpAddr::from(src), error))
        }
        6 if pkt.len() >= 40 => {
            let src: [u8; 16] = pkt[8..24].try_into().ok()?;
            let error = pkt[6] == 58 && pkt.get(40).is_some_and(|&t| t < 128);
            Some((IpAddr::from(src), error))
        }
        _ => None,
    }
}

fn is_broadcast(a: IpAddr) -> bool {
    matches!(a, IpAddr::V4(v) if v.is_broadcast())
}

/// The raw socket in `slot`, opened on first use and marked with `mark`.
fn socket(
    slot: &mut Option<(OwnedFd, u32)>,
    family: libc::c_int,
    protocol: libc::c_int,
    mark: u32,
) -> std::io::Result<libc::c_int> {
    if slot.is_none() {
        // SAFETY: plain socket(2); the descriptor is owned from here on.
        let fd = unsafe { libc::socket(family, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        *slot = Some((unsafe { OwnedFd::from_raw_fd(fd) }, 0));
    }
    let (fd, current) = slot.as_mut().expect("opened above");
    if *current != mark {
        let v = mark;
        // SAFETY: setsockopt with a valid descriptor and a u32 option value.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&v as *const u32).cast(),
                size_of::<u32>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        *current = mark;
    }
    Ok(fd.as_raw_fd())
}

fn send_to<A>(fd: libc::c_int, buf: &[u8], addr: &A) -> std::io::Result<()> {
    // SAFETY: `buf` and `addr` are valid for the lengths given; `A` is a sockaddr type.
    let r = unsafe {
        libc::sendto(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (addr as *const A).cast(),
            size_of::<A>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_answers_errors_or_unanswerable_sources() {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 1;
        p[12..16].copy_from_slice(&[127, 0, 0, 1]);
        p[20] = 3; // an ICMP error itself
        assert_eq!(source_of(&p), Some((IpAddr::from([127, 0, 0, 1]), true)));
        p[20] = 8; // an echo request is fine
        assert_eq!(source_of(&p), Some((IpAddr::from([127, 0, 0, 1]), false)));
        assert_eq!(source_of(&p[..10]), None);
        assert!(is_broadcast(IpAddr::from([255, 255, 255, 255])));
    }
}
