//! The NFQUEUE netlink socket of one queue: opening and sizing it, binding and configuring
//! the queue (each step acknowledged), and the send and receive calls the queue thread
//! makes (sendmsg, recvmmsg, ppoll).

use crate::NfqError;
use crate::netlink::{
    NETLINK_NETFILTER, NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND, QueueParams, config_command,
    config_message,
};
use relay_netlink::frame::{Header, Messages, os_error};
use relay_netlink::sock::set_int;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// An NFQUEUE netlink socket bound to one queue.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Socket {
    /// Opens a NETLINK_NETFILTER socket with the given buffer sizes and receive timeout.
    pub(crate) fn open(rcvbuf: usize, sndbuf: usize, timeout_ms: u32) -> Result<Socket, NfqError> {
        let fd = relay_netlink::sock::open(NETLINK_NETFILTER, false)
            .map_err(|e| NfqError::Socket("socket(AF_NETLINK, NETLINK_NETFILTER)", e))?;
        let raw = fd.as_raw_fd();
        // SAFETY: a zeroed sockaddr_nl is valid; we set the family.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: addr is a valid sockaddr_nl of the given size.
        cvt(unsafe {
            libc::bind(
                raw,
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })
        .map_err(|e| NfqError::Socket("bind", e))?;
        relay_netlink::sock::set_recv_timeout(
            &fd,
            std::time::Duration::from_millis(u64::from(timeout_ms)),
        )
        .map_err(|e| NfqError::Socket("setsockopt(SO_RCVTIMEO)", e))?;
        let sock = Socket { fd, seq: 0 };
        sock.set_buffers(rcvbuf, sndbuf)?;
        Ok(sock)
    }

    /// Sets the receive and send buffer sizes. SO_*BUFFORCE lifts the rmem_max/wmem_max
    /// caps where we may (CAP_NET_ADMIN in the initial user namespace); elsewhere the
    /// plain options apply, capped: read back what was granted with `rcvbuf`/`sndbuf`.
    pub(crate) fn set_buffers(&self, rcvbuf: usize, sndbuf: usize) -> Result<(), NfqError> {
        let set_buf = |force, plain, size: usize| {
            let size = size.min(i32::MAX as usize / 2) as i32;
            set_int(&self.fd, libc::SOL_SOCKET, force, size)
                .or_else(|_| set_int(&self.fd, libc::SOL_SOCKET, plain, size))
        };
        set_buf(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, rcvbuf)
            .map_err(|e| NfqError::Socket("setsockopt(SO_RCVBUF)", e))?;
        set_buf(libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, sndbuf)
            .map_err(|e| NfqError::Socket("setsockopt(SO_SNDBUF)", e))?;
        Ok(())
    }

    fn get_int(&self, opt: i32) -> usize {
        let mut v: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: pointers to a live i32 and its length.
        let r = unsafe {
            libc::getsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &mut v as *mut i32 as *mut libc::c_void,
                &mut len,
            )
        };
        if r < 0 { 0 } else { v as usize }
    }

    /// The receive buffer size the kernel granted (it doubles the request).
    pub(crate) fn rcvbuf(&self) -> usize {
        self.get_int(libc::SO_RCVBUF)
    }

    /// The send buffer size the kernel granted; one sendmsg may carry at most this less 32.
    pub(crate) fn sndbuf(&self) -> usize {
        self.get_int(libc::SO_SNDBUF)
    }

    /// Binds the socket to queue `num` and sets its parameters, each step acknowledged.
    /// Returns whether the kernel took the conntrack flag: where it cannot deliver
    /// conntrack state (no CONFIG_NETFILTER_NETLINK_GLUE_CT) the queue is set up without it.
    pub(crate) fn bind_queue(&mut self, num: u16, params: &QueueParams) -> Result<bool, NfqError> {
        let seq = self.next_seq();
        self.request(config_command(num, NFQNL_CFG_CMD_BIND, seq).finish())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EBUSY) => NfqError::QueueBusy(num),
                // The kernel answers EPERM both to the unprivileged and to a bind of a
                // queue another socket owns; the queue's presence in /proc tells which.
                Some(libc::EPERM) if crate::procfs::read().contains_key(&num) => {
                    NfqError::QueueBusy(num)
                }
                Some(libc::EPERM) => NfqError::Permission(num),
                _ => NfqError::Config(num, "bind", e),
            })?;
        if !params.conntrack {
            return self.configure(num, params).map(|()| false);
        }
        // EAGAIN: the kernel just loaded the conntrack glue module; ask again once.
        let mut r = self.configure(num, params);
        if matches!(&r, Err(NfqError::Config(_, _, e)) if e.raw_os_error() == Some(libc::EAGAIN)) {
            r = self.configure(num, params);
        }
        match r {
            Ok(()) => Ok(true),
            Err(NfqError::Config(_, _, e)) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                tracing::warn!(
                    queue = num,
                    "the kernel cannot send conntrack state with queued packets \
                     (CONFIG_NETFILTER_NETLINK_GLUE_CT); only the conntrack mark bits, \
                     if configured, tell services a packet's state"
                );
                let without = QueueParams {
                    conntrack: false,
                    ..*params
                };
                self.configure(num, &without).map(|()| false)
            }
            Err(e) => Err(e),
        }
    }

    /// Sets copy range, queue length and flags of the bound queue and waits for the answer
    /// (at bind time, before any packet can be queued for us).
    pub(crate) fn configure(&mut self, num: u16, p: &QueueParams) -> Result<(), NfqError> {
        let seq = self.next_seq();
        let mut m = config_message(num, p, seq);
        self.request(m.finish())
            .map_err(|e| NfqError::Config(num, "set parameters", e))
    }

    /// Sends new parameters to a queue that is running, without waiting: packets may sit
    /// in front of the acknowledgement, so the caller matches the returned sequence number
    /// in the error messages it receives with its packets.
    pub(crate) fn configure_async(&mut self, num: u16, p: &QueueParams) -> io::Result<u32> {
        let seq = self.next_seq();
        let mut m = config_message(num, p, seq);
        self.send(m.finish())?;
        Ok(seq)
    }

    /// Unbinds the queue (the kernel drops what is still queued for it).
    pub(crate) fn unbind_queue(&mut self, num: u16) -> io::Result<()> {
        let seq = self.next_seq();
        self.request(config_command(num, NFQNL_CFG_CMD_UNBIND, seq).finish())
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends a request and waits for its acknowledgement, skipping queued packets
    /// (only used at setup and teardown, when no verdicts are outstanding on our side).
    fn request(&mut self, msg: &[u8]) -> io::Result<()> {
        self.send(msg)?;
        let seq = Header::parse(msg).map_or(0, |h| h.seq);
        let mut buf = vec![0u8; 8192];
        loop {
            let n = match self.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e),
            };
            for m in Messages::new(&buf[..n]).filter(|m| m.seq() == seq) {
                match m.error() {
                    Some(0) => return Ok(()),
                    Some(err) => return Err(os_error(err)),
                    None => {}
                }
            }
        }
    }

    /// Sends one buffer (one or more netlink messages).
    pub(crate) fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: msg is a live buffer of msg.len() bytes; the kernel is the destination.
        let r = unsafe {
            libc::send(
                self.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
            )
        };
        cvt(r as libc::c_int).map(|_| ())
    }

    /// Sends the messages described by `iov` in one sendmsg.
    pub(crate) fn send_iov(&self, iov: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: a zeroed msghdr is valid; iov points to live iovecs whose buffers the
        // caller keeps alive for the duration of the call.
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_iov = iov.as_ptr() as *mut libc::iovec;
        mh.msg_iovlen = iov.len();
        // SAFETY: mh is fully initialised above.
        let r = unsafe { libc::sendmsg(self.as_raw_fd(), &mh, 0) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Waits up to `timeout` for something to receive; true if there is.
    pub(crate) fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one live pollfd, a live timespec, no signal mask.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r > 0)
        }
    }

    /// Receives one datagram into `buf`.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is a live, writable buffer of buf.len() bytes.
        let r = unsafe {
            libc::recv(
                self.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// Receives up to `msgs.len()` datagrams in one call: blocks (up to the receive
    /// timeout) for the first, then takes whatever else is already queued.
    pub(crate) fn recv_many(&self, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
        // SAFETY: msgs point to iovecs over live buffers set up by the caller.
        let r = unsafe {
            libc::recvmmsg(
                self.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}
