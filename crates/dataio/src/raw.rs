//! The raw sockets the [`Emitter`](crate::Emitter) sends through, and the per-message
//! parts of a `sendmmsg` (destination, mark control message) it reuses from batch to batch.
//!
//! Sockets open on first use and never block (`MSG_DONTWAIT`): a full send buffer is an
//! error the caller counts, not a stalled queue thread. Nothing is received on them.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ICMP6_FILTER` (RFC 3542 3.2; `ICMPV6_FILTER` in linux/icmpv6.h), not in `libc`.
const ICMP6_FILTER: libc::c_int = 1;

/// One raw socket: its family, protocol and send buffer, and the descriptor once opened.
#[derive(Debug)]
pub(crate) struct RawSocket {
    family: libc::c_int,
    protocol: libc::c_int,
    /// `SO_SNDBUF(FORCE)` to set on opening, 0 for the system default.
    sndbuf: usize,
    fd: Option<OwnedFd>,
    /// The socket's own `SO_MARK`.
    mark: u32,
}

impl RawSocket {
    /// A socket of `family` and `protocol` (opened on first use) with a send buffer of
    /// `sndbuf` bytes (0: the system default).
    pub(crate) const fn new(family: libc::c_int, protocol: libc::c_int, sndbuf: usize) -> Self {
        RawSocket {
            family,
            protocol,
            sndbuf,
            fd: None,
            mark: 0,
        }
    }

    /// Sets the socket's own `SO_MARK` to `mark` unless it has it already. The packets
    /// carry their marks in control messages, but kernels before 5.9 mark an IPv4 raw
    /// socket's packets with the socket's mark whatever the message says; with the
    /// socket's mark equal to the batch's (one mark per queue, in practice) they leave
    /// with their stage bits there too, so that relayd's rules do not queue them again.
    pub(crate) fn set_mark(&mut self, mark: u32) -> io::Result<()> {
        if self.mark == mark {
            return Ok(());
        }
        let fd = self.fd.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_MARK, &mark)?;
        self.mark = mark;
        Ok(())
    }

    /// `"IPv4"`, `"IPv6"` or `"ICMPv6"`, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match (self.family, self.protocol) {
            (libc::AF_INET, _) => "IPv4",
            (_, libc::IPPROTO_ICMPV6) => "ICMPv6",
            _ => "IPv6",
        }
    }

    /// The descriptor, opened if need be (opening needs `CAP_NET_RAW`).
    pub(crate) fn fd(&mut self) -> io::Result<libc::c_int> {
        if let Some(fd) = &self.fd {
            return Ok(fd.as_raw_fd());
        }
        let fd = open(self.family, self.protocol, self.sndbuf)?;
        let raw = fd.as_raw_fd();
        self.fd = Some(fd);
        Ok(raw)
    }

    /// The socket's `SO_MARK` as the kernel has it, if open.
    pub(crate) fn kernel_mark(&self) -> Option<u32> {
        let fd = self.fd.as_ref()?;
        let mut v: u32 = 0;
        let mut len = size_of::<u32>() as libc::socklen_t;
        // SAFETY: a valid descriptor and a u32-sized buffer with its length.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&mut v as *mut u32).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(v)
    }

    /// The send buffer the kernel granted (it reports twice the size set), if open.
    pub(crate) fn sndbuf(&self) -> Option<usize> {
        let fd = self.fd.as_ref()?;
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
        (rc == 0).then_some(v as usize)
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
    if protocol == libc::IPPROTO_RAW {
        // A socket that sends whole IP packets learns that the egress qdisc dropped one
        // (ENOBUFS) only with RECVERR on; otherwise the kernel reports success. RECVERR
        // also queues local errors (EMSGSIZE) on the socket's error queue, which nobody
        // reads: the kernel bounds it by the receive buffer, and sending does not look at
        // it. No ICMP error reaches these sockets (they match protocol 255 only).
        let (level, name) = match family {
            libc::AF_INET => (libc::IPPROTO_IP, libc::IP_RECVERR),
            _ => (libc::IPPROTO_IPV6, libc::IPV6_RECVERR),
        };
        setsockopt(&fd, level, name, &1 as &libc::c_int)?;
    }
    // IPPROTO_RAW sockets send only (raw(7)): nothing to filter.
    Ok(fd)
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

/// A message's destination: an IPv4 or IPv6 socket address.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union SockAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

impl SockAddr {
    /// The socket address of `ip` (port 0, which raw sockets ignore), and its length.
    pub(crate) fn new(ip: IpAddr) -> (SockAddr, libc::socklen_t) {
        match ip {
            IpAddr::V4(a) => (
                SockAddr {
                    v4: libc::sockaddr_in {
                        sin_family: libc::AF_INET as libc::sa_family_t,
                        sin_port: 0,
                        sin_addr: libc::in_addr {
                            s_addr: u32::from_ne_bytes(a.octets()),
                        },
                        sin_zero: [0; 8],
                    },
                },
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            IpAddr::V6(a) => (
                SockAddr {
                    v6: libc::sockaddr_in6 {
                        sin6_family: libc::AF_INET6 as libc::sa_family_t,
                        sin6_port: 0,
                        sin6_flowinfo: 0,
                        sin6_addr: libc::in6_addr {
                            s6_addr: a.octets(),
                        },
                        sin6_scope_id: 0,
                    },
                },
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
        }
    }
}

impl std::fmt::Debug for SockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SockAddr")
    }
}

/// A `SOL_SOCKET`/`SO_MARK` control message: the mark of one packet, so that one
/// `sendmmsg` sends packets of different marks (the kernel honours it for raw sockets of
/// both families, with `CAP_NET_RAW` or `CAP_NET_ADMIN`, as it does `SO_MARK`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct MarkCmsg {
    hdr: libc::cmsghdr,
    mark: u32,
    /// `CMSG_SPACE` rounds the data up to the header's alignment (8 bytes on 64-bit
    /// targets, where the header is 16 bytes; on 32-bit ones it is 12 and no pad is due).
    #[cfg(target_pointer_width = "64")]
    _pad: u32,
}

// SAFETY (of the constants): CMSG_LEN and CMSG_SPACE only compute sizes.
/// `CMSG_SPACE(4)`: what a mark message takes in the control buffer.
const MARK_SPACE: usize = unsafe { libc::CMSG_SPACE(4) } as usize;
/// `CMSG_LEN(4)`: the length a mark message declares.
const MARK_LEN: usize = unsafe { libc::CMSG_LEN(4) } as usize;

// The layout above is what CMSG_DATA and CMSG_SPACE expect on this target.
const _: () = assert!(size_of::<MarkCmsg>() == MARK_SPACE);
const _: () = assert!(std::mem::offset_of!(MarkCmsg, mark) + 4 == MARK_LEN);

impl std::fmt::Debug for MarkCmsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MarkCmsg({:#x})", self.mark)
    }
}

impl MarkCmsg {
    /// The mark it carries.
    pub(crate) fn mark(&self) -> u32 {
        self.mark
    }

    /// The control message carrying `mark`.
    pub(crate) fn new(mark: u32) -> MarkCmsg {
        // SAFETY: an all-zero cmsghdr is valid (musl's has padding fields).
        let mut hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        hdr.cmsg_len = MARK_LEN as _;
        hdr.cmsg_level = libc::SOL_SOCKET;
        hdr.cmsg_type = libc::SO_MARK;
        MarkCmsg {
            hdr,
            mark,
            #[cfg(target_pointer_width = "64")]
            _pad: 0,
        }
    }
}

/// An empty `mmsghdr`, filled in by [`message`].
pub(crate) fn empty_message() -> libc::mmsghdr {
    // SAFETY: an all-zero mmsghdr is a valid (empty) value.
    unsafe { std::mem::zeroed() }
}

/// Points `m` at one packet: its destination, its bytes and its mark. The three must stay
/// alive and unmoved until `m` is sent.
pub(crate) fn message(
    m: &mut libc::mmsghdr,
    addr: &mut SockAddr,
    addr_len: libc::socklen_t,
    iov: &mut libc::iovec,
    cmsg: &mut MarkCmsg,
) {
    *m = empty_message();
    m.msg_hdr.msg_name = (addr as *mut SockAddr).cast();
    m.msg_hdr.msg_namelen = addr_len;
    m.msg_hdr.msg_iov = iov;
    m.msg_hdr.msg_iovlen = 1;
    m.msg_hdr.msg_control = (cmsg as *mut MarkCmsg).cast();
    m.msg_hdr.msg_controllen = MARK_SPACE as _;
}

/// An iovec over `bytes` (which sendmmsg only reads).
pub(crate) fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// One `sendmmsg` without waiting: how many of `msgs` the kernel took (counted from the
/// first), or the error of the first one if it took none.
pub(crate) fn sendmmsg(fd: libc::c_int, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    let n = msgs.len().min(libc::c_uint::MAX as usize) as libc::c_uint;
    // SAFETY: every message points at live names, iovecs, buffers and control messages
    // (the caller's contract for `message`); the kernel writes only `msg_len`.
    let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n, libc::MSG_DONTWAIT) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
