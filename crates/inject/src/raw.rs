//! The raw sockets a service sends through: one per address family, opened on first use,
//! their `SO_MARK` kept equal to the mark of the packet being sent, sends that never block.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ICMP6_FILTER` (RFC 3542 3.2; `ICMPV6_FILTER` in linux/icmpv6.h), not in `libc`.
const ICMP6_FILTER: libc::c_int = 1;

/// Why a packet could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The raw socket could not be opened (sending needs `CAP_NET_RAW`).
    #[error("cannot open a raw {family} socket: {source}")]
    Open {
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
        /// The error of socket(2) or of its setup.
        #[source]
        source: io::Error,
    },
    /// The mark could not be set (`SO_MARK` needs `CAP_NET_ADMIN`); nothing was sent, since
    /// an unmarked packet would be queued to relayd again.
    #[error("cannot set SO_MARK {mark:#x}: {source}")]
    Mark {
        /// The mark asked for.
        mark: u32,
        /// The error of setsockopt(2).
        #[source]
        source: io::Error,
    },
    /// sendto(2) failed: `WouldBlock` when the socket buffer is full, or a routing error.
    #[error("cannot send to {to}: {source}")]
    Send {
        /// The destination.
        to: IpAddr,
        /// The error of sendto(2).
        #[source]
        source: io::Error,
    },
}

impl SendError {
    /// True if the packet met a full queue: the socket's send buffer (`EAGAIN`) or the
    /// egress qdisc, which dropped it (`ENOBUFS`). Congestion, not a fault.
    pub fn is_queue_full(&self) -> bool {
        matches!(self, SendError::Send { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)))
    }
}

/// One family's socket: its protocol, and the descriptor and mark once opened.
#[derive(Debug)]
struct Slot {
    family: libc::c_int,
    protocol: libc::c_int,
    /// `SO_SNDBUF(FORCE)` to set on opening, 0 for the system default.
    sndbuf: usize,
    /// The descriptor and the `SO_MARK` it carries.
    open: Option<(OwnedFd, u32)>,
}

impl Slot {
    const fn new(family: libc::c_int, protocol: libc::c_int) -> Slot {
        Slot {
            family,
            protocol,
            sndbuf: 0,
            open: None,
        }
    }

    fn family_name(&self) -> &'static str {
        if self.family == libc::AF_INET6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }

    /// The descriptor, opened if need be and carrying `mark`.
    fn fd(&mut self, mark: u32) -> Result<libc::c_int, SendError> {
        if self.open.is_none() {
            let fd = open(self.family, self.protocol, self.sndbuf).map_err(|source| {
                SendError::Open {
                    family: self.family_name(),
                    source,
                }
            })?;
            // A new socket carries mark 0.
            self.open = Some((fd, 0));
        }
        let (fd, current) = self.open.as_mut().expect("opened above");
        if *current != mark {
            set_mark(fd, mark).map_err(|source| SendError::Mark { mark, source })?;
            *current = mark;
        }
        Ok(fd.as_raw_fd())
    }
}

/// Sends packets through raw sockets, one per address family, for one queue thread.
///
/// Sockets open on first use (sending needs `CAP_NET_RAW`, the mark `CAP_NET_ADMIN`, both
/// of which relayd has to install its rules), and each send sets `SO_MARK` to the mark
/// given if the socket does not carry it yet. Sends use `MSG_DONTWAIT`: the hot path never
/// waits for a socket buffer. Nothing is received on these sockets.
#[derive(Debug)]
pub struct RawSender {
    v4: Slot,
    v6: Slot,
}

impl Default for RawSender {
    fn default() -> RawSender {
        RawSender::new()
    }
}

impl RawSender {
    /// A sender of whole IP packets, headers included, for both families (`IPPROTO_RAW`).
    /// For IPv4 the kernel fills in a zero source address, a zero identification and the
    /// header checksum (raw(7)); IPv6 headers are sent as written.
    pub const fn new() -> RawSender {
        RawSender {
            v4: Slot::new(libc::AF_INET, libc::IPPROTO_RAW),
            v6: Slot::new(libc::AF_INET6, libc::IPPROTO_RAW),
        }
    }

    /// Like [`RawSender::new`] for IPv4, but IPv6 destinations take an ICMPv6 message
    /// without IP header (`IPPROTO_ICMPV6`): the kernel builds the IPv6 header, picking the
    /// source address by route as a router's own error would have, and the ICMPv6
    /// checksum.
    pub const fn with_icmpv6() -> RawSender {
        RawSender {
            v4: Slot::new(libc::AF_INET, libc::IPPROTO_RAW),
            v6: Slot::new(libc::AF_INET6, libc::IPPROTO_ICMPV6),
        }
    }

    /// Like [`RawSender::new`], for packets relayd forwards itself (re-sent after their
    /// family changed): the sockets get a send buffer of [`RawSender::FORWARD_SNDBUF`]
    /// bytes. A packet waiting in a qdisc stays charged to the socket that sent it, so with
    /// the default buffer (about 200 KiB) one congested tc class would make sends fail for
    /// every other class; with this one the qdiscs' own limits decide first.
    pub const fn forwarding() -> RawSender {
        let mut s = RawSender::new();
        s.v4.sndbuf = Self::FORWARD_SNDBUF;
        s.v6.sndbuf = Self::FORWARD_SNDBUF;
        s
    }

    /// The send buffer of [`RawSender::forwarding`]: 64 MiB, about 28,000 full-size
    /// packets waiting in tc at once (a limit, not an allocation).
    pub const FORWARD_SNDBUF: usize = 64 << 20;

    /// Sends `bytes` to `to` through the socket of `to`'s family, marked with `mark`.
    pub fn send(&mut self, bytes: &[u8], to: IpAddr, mark: u32) -> Result<(), SendError> {
        let slot = match to {
            IpAddr::V4(_) => &mut self.v4,
            IpAddr::V6(_) => &mut self.v6,
        };
        let fd = slot.fd(mark)?;
        send_to(fd, bytes, to).map_err(|source| SendError::Send { to, source })
    }
}

/// A raw socket of `family` and `protocol`, which receives nothing, with a send buffer of
/// `sndbuf` bytes (0: the default).
fn open(family: libc::c_int, protocol: libc::c_int, sndbuf: usize) -> io::Result<OwnedFd> {
    let ty = libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: plain socket(2); the result is checked before use.
    let fd = unsafe { libc::socket(family, ty, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if protocol == libc::IPPROTO_ICMPV6 {
        // An ICMPv6 raw socket gets a copy of every ICMPv6 message the host receives; nobody
        // reads this one, so block them all rather than keep a full receive buffer.
        let block_all = [u32::MAX; 8];
        setsockopt(&fd, libc::IPPROTO_ICMPV6, ICMP6_FILTER, &block_all)?;
    }
    if sndbuf > 0 {
        let v = sndbuf.min(i32::MAX as usize / 2) as libc::c_int;
        // FORCE passes net.core.wmem_max (relayd has CAP_NET_ADMIN); without it, the most
        // the system allows.
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v).is_err() {
            setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v)?;
        }
    }
    // IPPROTO_RAW sockets send only (raw(7)): nothing to filter.
    Ok(fd)
}

fn set_mark(fd: &OwnedFd, mark: u32) -> io::Result<()> {
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_MARK, &mark)
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: a valid descriptor, and a pointer to a live `T` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn send_to(fd: libc::c_int, bytes: &[u8], to: IpAddr) -> io::Result<()> {
    let rc = match to {
        IpAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.octets()),
                },
                sin_zero: [0; 8],
            };
            sendto(fd, bytes, &sa)
        }
        IpAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                sin6_scope_id: 0,
            };
            sendto(fd, bytes, &sa)
        }
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// sendto(2) without waiting; `A` is a sockaddr type.
fn sendto<A>(fd: libc::c_int, bytes: &[u8], addr: &A) -> isize {
    // SAFETY: `bytes` and `addr` are live for the call and the lengths are theirs.
    unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            (addr as *const A).cast(),
            size_of::<A>() as libc::socklen_t,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use std::net::Ipv4Addr;

    fn mark_of(s: &RawSender) -> Option<u32> {
        s.v4.open.as_ref().map(|(_, m)| *m)
    }

    #[test]
    fn opens_lazily_and_keeps_the_mark_in_sync() {
        let mut s = RawSender::new();
        assert_eq!(mark_of(&s), None, "nothing opened before the first send");
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut buf = [0u8; 128];
        // A port unreachable from 127.0.0.1 to itself, about a UDP packet to port 9.
        let n = build::emit_port_unreachable(&mut buf, lo, lo, &[0x45; 28]).unwrap();
        let bytes = buf[..n].to_vec();
        s.send(&bytes, lo, 0x4000_0000).unwrap();
        assert_eq!(mark_of(&s), Some(0x4000_0000));
        s.send(&bytes, lo, 0x10).unwrap();
        assert_eq!(mark_of(&s), Some(0x10));
        assert!(s.v6.open.is_none(), "the other family stays closed");
    }

    #[test]
    fn a_forwarding_sender_gets_its_large_send_buffer() {
        let sndbuf = |s: &RawSender| {
            let (fd, _) = s.v4.open.as_ref().expect("opened");
            let mut v: libc::c_int = 0;
            let mut len = size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: a valid descriptor and an int-sized buffer with its length.
            let rc = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    (&mut v as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0);
            v as usize
        };
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut buf = [0u8; 128];
        let n = build::emit_port_unreachable(&mut buf, lo, lo, &[0x45; 28]).unwrap();
        let mut plain = RawSender::new();
        plain.send(&buf[..n], lo, 0).unwrap();
        let mut fwd = RawSender::forwarding();
        fwd.send(&buf[..n], lo, 0).unwrap();
        // The kernel reports twice what was set (socket(7)).
        assert!(
            sndbuf(&fwd) >= RawSender::FORWARD_SNDBUF,
            "{}",
            sndbuf(&fwd)
        );
        assert!(sndbuf(&plain) < RawSender::FORWARD_SNDBUF);
    }
}
