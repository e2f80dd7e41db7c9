//! A thin NFQUEUE netlink layer: the socket, the config/verdict messages and the parser of
//! packet messages. Written against the kernel's `nfnetlink_queue` UAPI (include/uapi/linux/
//! netfilter/nfnetlink_queue.h) because the `nfq` crate has no batch verdict and no access
//! to the socket's file descriptor (so no SO_RCVBUF, no recvmmsg); see docs/performance.md.

use crate::NfqError;
use relay_core::{CtInfo, CtState};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) const NETLINK_NETFILTER: i32 = 12;
pub(crate) const NFNL_SUBSYS_QUEUE: u16 = 3;
pub(crate) const NFQNL_MSG_PACKET: u16 = 0;
pub(crate) const NFQNL_MSG_VERDICT: u16 = 1;
pub(crate) const NFQNL_MSG_CONFIG: u16 = 2;
pub(crate) const NFQNL_MSG_VERDICT_BATCH: u16 = 3;

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLM_F_REQUEST: u16 = 1;
pub(crate) const NLM_F_ACK: u16 = 4;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_PACKET: u8 = 2;

/// Queue flag: accept packets when the queue is full instead of dropping them.
pub(crate) const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
/// Queue flag: deliver each packet's conntrack state (NFQA_CT, NFQA_CT_INFO). The kernel
/// refuses it (EOPNOTSUPP) when built without CONFIG_NETFILTER_NETLINK_GLUE_CT.
pub(crate) const NFQA_CFG_F_CONNTRACK: u32 = 2;
/// Queue flag: userspace takes GSO packets unsegmented.
pub(crate) const NFQA_CFG_F_GSO: u32 = 4;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_IFINDEX_OUTDEV: u16 = 6;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CT_INFO: u16 = 12;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;
const NFQA_SKB_GSO: u32 = 2;

/// Netlink message header plus nfgenmsg.
pub(crate) const HDR_LEN: usize = 16 + 4;
/// The largest verdict message header we write before the payload bytes:
/// nlmsghdr + nfgenmsg + verdict hdr attr (12) + mark attr (8) + payload attr header (4).
pub(crate) const VERDICT_HDR_MAX: usize = HDR_LEN + 12 + 8 + 4;

/// NF_DROP, NF_ACCEPT, NF_REPEAT.
pub(crate) const NF_DROP: u32 = 0;
pub(crate) const NF_ACCEPT: u32 = 1;
pub(crate) const NF_REPEAT: u32 = 4;

#[inline]
pub(crate) const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

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

fn setsockopt_int(fd: RawFd, level: i32, opt: i32, val: i32) -> io::Result<()> {
    // SAFETY: passing a pointer to a live c_int and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

impl Socket {
    /// Opens a NETLINK_NETFILTER socket with the given buffer sizes and receive timeout.
    pub(crate) fn open(rcvbuf: usize, sndbuf: usize, timeout_ms: u32) -> Result<Socket, NfqError> {
        // SAFETY: plain socket(2) call; the fd is owned right after.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        })
        .map_err(|e| NfqError::Socket("socket(AF_NETLINK, NETLINK_NETFILTER)", e))?;
        // SAFETY: fd was just returned by socket(2) and is not owned elsewhere.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
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
        let tv = libc::timeval {
            tv_sec: (timeout_ms / 1000) as libc::time_t,
            tv_usec: ((timeout_ms % 1000) * 1000) as libc::suseconds_t,
        };
        // SAFETY: pointer to a live timeval and its size.
        cvt(unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })
        .map_err(|e| NfqError::Socket("setsockopt(SO_RCVTIMEO)", e))?;
        let sock = Socket { fd, seq: 0 };
        sock.set_buffers(rcvbuf, sndbuf)?;
        Ok(sock)
    }

    /// Sets the receive and send buffer sizes. SO_*BUFFORCE lifts the rmem_max/wmem_max
    /// caps where we may (CAP_NET_ADMIN in the initial user namespace); elsewhere the
    /// plain options apply, capped: read back what was granted with `rcvbuf`/`sndbuf`.
    pub(crate) fn set_buffers(&self, rcvbuf: usize, sndbuf: usize) -> Result<(), NfqError> {
        let raw = self.as_raw_fd();
        let set_buf = |force, plain, size: usize| {
            let size = size.min(i32::MAX as usize / 2) as i32;
            setsockopt_int(raw, libc::SOL_SOCKET, force, size)
                .or_else(|_| setsockopt_int(raw, libc::SOL_SOCKET, plain, size))
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
        let mut m = MsgBuilder::new(
            NFQNL_MSG_CONFIG,
            NLM_F_REQUEST | NLM_F_ACK,
            self.next_seq(),
            num,
        );
        m.attr(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
        self.request(m.finish())
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
        let mut m = MsgBuilder::new(
            NFQNL_MSG_CONFIG,
            NLM_F_REQUEST | NLM_F_ACK,
            self.next_seq(),
            num,
        );
        m.attr(NFQA_CFG_CMD, &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0]);
        self.request(m.finish())
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends a request and waits for its acknowledgement, skipping queued packets
    /// (only used at setup and teardown, when no verdicts are outstanding on our side).
    fn request(&mut self, msg: &[u8]) -> io::Result<()> {
        self.send(msg)?;
        let seq = u32::from_ne_bytes([msg[8], msg[9], msg[10], msg[11]]);
        let mut buf = vec![0u8; 8192];
        loop {
            let n = match self.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(e) => return Err(e),
            };
            for m in Messages::new(&buf[..n]) {
                if m.ty == NLMSG_ERROR && m.seq == seq && m.payload.len() >= 4 {
                    let err = i32::from_ne_bytes([
                        m.payload[0],
                        m.payload[1],
                        m.payload[2],
                        m.payload[3],
                    ]);
                    return if err == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(err.saturating_neg()))
                    };
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

/// Copy range, queue length and flags of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueParams {
    pub(crate) copy_range: u32,
    pub(crate) max_len: u32,
    pub(crate) fail_open: bool,
    pub(crate) gso: bool,
    pub(crate) conntrack: bool,
}

/// The config message setting copy range, queue length and flags in one go (all flags in
/// one NFQA_CFG_FLAGS attribute: a second one would silently override the first).
fn config_message(num: u16, p: &QueueParams, seq: u32) -> MsgBuilder {
    let mut m = MsgBuilder::new(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, num);
    let mut params = [0u8; 5];
    params[..4].copy_from_slice(&p.copy_range.to_be_bytes());
    params[4] = NFQNL_COPY_PACKET;
    m.attr(NFQA_CFG_PARAMS, &params);
    m.attr(NFQA_CFG_QUEUE_MAXLEN, &p.max_len.to_be_bytes());
    let mask = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO | NFQA_CFG_F_CONNTRACK;
    let mut flags = 0;
    if p.fail_open {
        flags |= NFQA_CFG_F_FAIL_OPEN;
    }
    if p.gso {
        flags |= NFQA_CFG_F_GSO;
    }
    if p.conntrack {
        flags |= NFQA_CFG_F_CONNTRACK;
    }
    m.attr(NFQA_CFG_MASK, &mask.to_be_bytes());
    m.attr(NFQA_CFG_FLAGS, &flags.to_be_bytes());
    m
}

/// Builds one netlink message in a small owned buffer (setup path only).
pub(crate) struct MsgBuilder {
    buf: Vec<u8>,
}

impl MsgBuilder {
    pub(crate) fn new(msg: u16, flags: u16, seq: u32, queue: u16) -> MsgBuilder {
        let mut buf = Vec::with_capacity(64);
        write_header(&mut buf, msg, flags, seq, queue);
        MsgBuilder { buf }
    }

    pub(crate) fn attr(&mut self, ty: u16, data: &[u8]) {
        self.buf
            .extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    pub(crate) fn finish(&mut self) -> &[u8] {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        &self.buf
    }
}

/// Appends nlmsghdr (length patched later) and nfgenmsg for a queue message.
fn write_header(buf: &mut Vec<u8>, msg: u16, flags: u16, seq: u32, queue: u16) {
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.push(libc::AF_UNSPEC as u8);
    buf.push(0); // NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes());
}

/// Writes the header part of a verdict message into `out` (at most VERDICT_HDR_MAX bytes)
/// and returns its length. `payload_len` is the length of the packet bytes that follow in
/// the same message (0 for none); the caller sends them and the padding after this header.
pub(crate) fn verdict_header(
    out: &mut [u8; VERDICT_HDR_MAX],
    batch: bool,
    queue: u16,
    id: u32,
    verdict: u32,
    mark: Option<u32>,
    payload_len: Option<usize>,
) -> usize {
    let msg = if batch {
        NFQNL_MSG_VERDICT_BATCH
    } else {
        NFQNL_MSG_VERDICT
    };
    let mut n = 0;
    let mut put = |b: &[u8]| {
        out[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    put(&0u32.to_ne_bytes());
    put(&((NFNL_SUBSYS_QUEUE << 8) | msg).to_ne_bytes());
    put(&NLM_F_REQUEST.to_ne_bytes());
    put(&0u32.to_ne_bytes());
    put(&0u32.to_ne_bytes());
    put(&[libc::AF_UNSPEC as u8, 0]);
    put(&queue.to_be_bytes());
    put(&12u16.to_ne_bytes());
    put(&NFQA_VERDICT_HDR.to_ne_bytes());
    put(&verdict.to_be_bytes());
    put(&id.to_be_bytes());
    if let Some(m) = mark {
        put(&8u16.to_ne_bytes());
        put(&NFQA_MARK.to_ne_bytes());
        put(&m.to_be_bytes());
    }
    let total = match payload_len {
        Some(p) => {
            put(&((4 + p) as u16).to_ne_bytes());
            put(&NFQA_PAYLOAD.to_ne_bytes());
            n + p
        }
        None => n,
    };
    out[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    n
}

/// One netlink message inside a received datagram.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    pub(crate) ty: u16,
    pub(crate) seq: u32,
    /// Offset of `payload` in the datagram.
    pub(crate) offset: usize,
    pub(crate) payload: &'a [u8],
}

/// Iterates the netlink messages of a datagram; stops at the first inconsistent length.
pub(crate) struct Messages<'a> {
    buf: &'a [u8],
    off: usize,
}

impl<'a> Messages<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Messages<'a> {
        Messages { buf, off: 0 }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<'a>;
    fn next(&mut self) -> Option<Message<'a>> {
        let b = self.buf.get(self.off..)?;
        if b.len() < 16 {
            return None;
        }
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < 16 || len > b.len() {
            return None;
        }
        let m = Message {
            ty: u16::from_ne_bytes([b[4], b[5]]),
            seq: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            offset: self.off + 16,
            payload: &b[16..len],
        };
        self.off += align4(len);
        Some(m)
    }
}

/// What a packet message says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PacketMsg {
    pub(crate) id: u32,
    pub(crate) hw_protocol: u16,
    pub(crate) hook: u8,
    pub(crate) mark: u32,
    pub(crate) indev: u32,
    pub(crate) outdev: u32,
    pub(crate) cap_len: Option<u32>,
    pub(crate) gso: bool,
    /// NFQA_CT_INFO: the kernel's `enum ip_conntrack_info` for the packet.
    pub(crate) ct_info: Option<u32>,
    /// Byte range of the packet within the message payload (after nfgenmsg), if any.
    pub(crate) payload: Option<(usize, usize)>,
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// Parses the attributes of an NFQNL_MSG_PACKET payload (starting at nfgenmsg).
/// Returns `None` if the packet header attribute is missing or an attribute overruns.
pub(crate) fn parse_packet(p: &[u8]) -> Option<PacketMsg> {
    let mut off = 4; // nfgenmsg
    let mut out = PacketMsg::default();
    let mut have_hdr = false;
    while off + 4 <= p.len() {
        let len = u16::from_ne_bytes([p[off], p[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([p[off + 2], p[off + 3]]) & 0x3fff;
        if len < 4 || off + len > p.len() {
            return None;
        }
        let d = &p[off + 4..off + len];
        match ty {
            NFQA_PACKET_HDR if d.len() >= 7 => {
                out.id = be32(d)?;
                out.hw_protocol = u16::from_be_bytes([d[4], d[5]]);
                out.hook = d[6];
                have_hdr = true;
            }
            NFQA_MARK => out.mark = be32(d)?,
            NFQA_IFINDEX_INDEV => out.indev = be32(d)?,
            NFQA_IFINDEX_OUTDEV => out.outdev = be32(d)?,
            NFQA_CAP_LEN => out.cap_len = Some(be32(d)?),
            NFQA_SKB_INFO => out.gso = be32(d)? & NFQA_SKB_GSO != 0,
            NFQA_PAYLOAD => out.payload = Some((off + 4, off + len)),
            NFQA_CT_INFO => out.ct_info = Some(be32(d)?),
            _ => {}
        }
        off += align4(len);
    }
    have_hdr.then_some(out)
}

/// A packet's conntrack state from the kernel's `enum ip_conntrack_info` (NFQA_CT_INFO);
/// `None` for untracked (7) and values the kernel does not define.
pub(crate) fn ct_from_kernel(info: u32) -> Option<CtInfo> {
    let (state, reply) = match info {
        0 => (CtState::Established, false), // IP_CT_ESTABLISHED
        1 => (CtState::Related, false),     // IP_CT_RELATED
        2 => (CtState::New, false),         // IP_CT_NEW
        3 => (CtState::Established, true),  // IP_CT_ESTABLISHED_REPLY
        4 => (CtState::Related, true),      // IP_CT_RELATED_REPLY
        5 => (CtState::New, true),          // IP_CT_NEW_REPLY (never sent by the kernel)
        _ => return None,                   // 7: IP_CT_UNTRACKED
    };
    Some(CtInfo { state, reply })
}

/// The packet id of a packet message whose attributes cannot all be read (a datagram cut
/// short), so that the packet can still be answered. `dgram` starts at the nlmsghdr.
pub(crate) fn packet_id_of_damaged(dgram: &[u8]) -> Option<u32> {
    let ty = u16::from_ne_bytes([*dgram.get(4)?, *dgram.get(5)?]);
    if ty != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
        return None;
    }
    // nlmsghdr (16) + nfgenmsg (4), then the packet header attribute comes first.
    let a = dgram.get(HDR_LEN..HDR_LEN + 8)?;
    let attr_ty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
    (attr_ty == NFQA_PACKET_HDR)
        .then(|| be32(&a[4..8]))
        .flatten()
}

/// For the fuzz targets in `fuzz/` only (not an API; may change at any time): decodes a
/// received datagram the way the queue thread does (`Queue::handle_datagram`): its netlink
/// messages, the packet message's attributes, conntrack state from `NFQA_CT_INFO` or from
/// the mark bits `ct_bits`, and the packet placed in the datagram's own buffer. Returns
/// the id the packet would be answered by (also for a damaged message) and the packet.
#[doc(hidden)]
pub fn fuzz_decode_datagram(
    dgram: &[u8],
    ct_bits: Option<relay_core::CtMarkBits>,
) -> (Option<u32>, Option<relay_core::Packet>) {
    let packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
    let mut found: Option<(PacketMsg, usize)> = None;
    for m in Messages::new(dgram) {
        if m.ty == packet_type {
            if let Some(p) = parse_packet(m.payload)
                && found.is_none()
            {
                found = Some((p, m.offset));
            }
        } else if m.ty == NLMSG_ERROR && m.payload.len() >= 4 {
            let err = i32::from_ne_bytes([m.payload[0], m.payload[1], m.payload[2], m.payload[3]]);
            let _ = io::Error::from_raw_os_error(err.saturating_neg());
        }
    }
    let data = found.and_then(|(p, base)| p.payload.map(|(s, e)| (p, base + s, base + e)));
    let Some((p, start, end)) = data else {
        let id = found
            .map(|(p, _)| p.id)
            .or_else(|| packet_id_of_damaged(dgram));
        return (id, None);
    };
    let mut meta = relay_core::PacketMeta {
        id: p.id,
        queue: 0,
        hw_protocol: p.hw_protocol,
        hook: relay_core::Hook::from_kernel(p.hook),
        mark: p.mark,
        indev: p.indev,
        outdev: p.outdev,
        orig_len: p.cap_len,
        gso: p.gso,
        ct: None,
    };
    if let Some(bits) = ct_bits {
        (meta.ct, meta.mark) = bits.decode(p.mark);
    }
    if let Some(info) = p.ct_info {
        meta.ct = ct_from_kernel(info);
    }
    let pkt = relay_core::Packet::in_buffer(dgram.to_vec(), start, end, meta);
    (Some(p.id), Some(pkt))
}

/// Netlink messages as the kernel sends them, and a reader of the verdicts we send, for
/// the unit tests of the engine.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A packet message for queue `queue`: packet `id` (an IPv4 one), its mark and bytes.
    pub(crate) fn packet(queue: u16, id: u32, mark: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, queue);
        let mut hdr = [0u8; 7];
        hdr[..4].copy_from_slice(&id.to_be_bytes());
        hdr[4..6].copy_from_slice(&0x0800u16.to_be_bytes());
        hdr[6] = 3; // NF_INET_LOCAL_OUT
        m.attr(NFQA_PACKET_HDR, &hdr);
        m.attr(NFQA_MARK, &mark.to_be_bytes());
        m.attr(NFQA_PAYLOAD, payload);
        m.finish().to_vec()
    }

    /// The kernel's answer `err` (0 or a negative errno) to our request `seq`.
    pub(crate) fn error(seq: u32, err: i32) -> Vec<u8> {
        // nlmsgerr: the error, then the request's header (left empty here).
        let mut b = vec![0u8; 16 + 4 + 16];
        let len = b.len() as u32;
        b[0..4].copy_from_slice(&len.to_ne_bytes());
        b[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b[8..12].copy_from_slice(&seq.to_ne_bytes());
        b[16..20].copy_from_slice(&err.to_ne_bytes());
        b
    }

    /// One verdict message we sent.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Sent {
        /// NFQNL_MSG_VERDICT_BATCH (answers every id up to `id`) rather than one packet's.
        pub(crate) batch: bool,
        pub(crate) id: u32,
        pub(crate) verdict: u32,
        pub(crate) mark: Option<u32>,
        pub(crate) payload: Option<Vec<u8>>,
    }

    /// The verdict messages in what one sendmsg carried.
    pub(crate) fn verdicts(buf: &[u8]) -> Vec<Sent> {
        let mut out = Vec::new();
        for m in Messages::new(buf) {
            let batch = match m.ty {
                t if t == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT => false,
                t if t == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT_BATCH => true,
                t => panic!("not a verdict message: type {t:#x}"),
            };
            let mut v = Sent {
                batch,
                id: 0,
                verdict: u32::MAX,
                mark: None,
                payload: None,
            };
            let p = m.payload;
            let mut off = 4;
            while off + 4 <= p.len() {
                let len = u16::from_ne_bytes([p[off], p[off + 1]]) as usize;
                let ty = u16::from_ne_bytes([p[off + 2], p[off + 3]]);
                let d = &p[off + 4..off + len];
                match ty {
                    NFQA_VERDICT_HDR => {
                        v.verdict = be32(d).unwrap();
                        v.id = be32(&d[4..]).unwrap();
                    }
                    NFQA_MARK => v.mark = be32(d),
                    NFQA_PAYLOAD => v.payload = Some(d.to_vec()),
                    _ => panic!("unexpected attribute {ty}"),
                }
                off += align4(len);
            }
            out.push(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzz_entry_decodes_like_the_queue_thread() {
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 1, 2, 0x08, 0x00, 2]);
        m.attr(NFQA_MARK, &0x805u32.to_be_bytes());
        m.attr(NFQA_PAYLOAD, &[0x45; 40]);
        let packet = m.finish().to_vec();
        // An error message whose code has no negation comes first.
        let mut dgram = vec![0u8; 20];
        dgram[0..4].copy_from_slice(&20u32.to_ne_bytes());
        dgram[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        dgram[16..20].copy_from_slice(&i32::MIN.to_ne_bytes());
        dgram.extend_from_slice(&packet);
        let bits = relay_core::CtMarkBits {
            established: 0x100,
            related: 0x200,
            reply: 0x400,
            tracked: 0x800,
        };
        let (id, pkt) = fuzz_decode_datagram(&dgram, Some(bits));
        let pkt = pkt.unwrap();
        assert_eq!((id, pkt.len(), pkt.meta.mark), (Some(0x0102), 40, 0x5));
        assert_eq!(pkt.meta.ct, Some(CtInfo::NEW));
        assert_eq!(pkt.data(), &[0x45; 40]);
        let (id, pkt) = fuzz_decode_datagram(&packet[..60], None);
        assert_eq!((id, pkt.is_none()), (Some(0x0102), true));
    }

    #[test]
    fn recovers_the_id_of_a_cut_datagram() {
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 1, 2, 0x08, 0x00, 2]);
        m.attr(NFQA_PAYLOAD, &[0x45; 100]);
        let buf = m.finish().to_vec();
        assert_eq!(Messages::new(&buf[..60]).count(), 0);
        assert_eq!(packet_id_of_damaged(&buf[..60]), Some(0x0102));
        assert_eq!(packet_id_of_damaged(&buf[..20]), None);
    }

    #[test]
    fn verdict_header_layout() {
        let mut out = [0u8; VERDICT_HDR_MAX];
        let n = verdict_header(&mut out, false, 7, 42, NF_ACCEPT, Some(0x10), Some(100));
        assert_eq!(n, VERDICT_HDR_MAX);
        assert_eq!(
            u32::from_ne_bytes(out[0..4].try_into().unwrap()) as usize,
            n + 100
        );
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), (3 << 8) | 1);
        assert_eq!(u16::from_be_bytes([out[18], out[19]]), 7);
        assert_eq!(&out[24..28], &1u32.to_be_bytes());
        assert_eq!(&out[28..32], &42u32.to_be_bytes());
        assert_eq!(&out[36..40], &0x10u32.to_be_bytes());
        assert_eq!(u16::from_ne_bytes([out[40], out[41]]), 104);
        let n = verdict_header(&mut out, true, 7, 42, NF_DROP, None, None);
        assert_eq!(n, 32);
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), (3 << 8) | 3);
    }

    #[test]
    fn parses_ct_info() {
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x08, 0x00, 2]);
        m.attr(NFQA_CT_INFO, &3u32.to_be_bytes());
        m.attr(NFQA_PAYLOAD, &[0x45]);
        let buf = m.finish().to_vec();
        let p = parse_packet(&buf[16..]).unwrap();
        assert_eq!(p.ct_info, Some(3));
        let ct = |state, reply| Some(CtInfo { state, reply });
        assert_eq!(ct_from_kernel(3), ct(CtState::Established, true));
        assert_eq!(ct_from_kernel(0), ct(CtState::Established, false));
        assert_eq!(ct_from_kernel(1), ct(CtState::Related, false));
        assert_eq!(ct_from_kernel(2), ct(CtState::New, false));
        assert_eq!(ct_from_kernel(4), ct(CtState::Related, true));
        assert_eq!(ct_from_kernel(7), None);
        assert_eq!(ct_from_kernel(99), None);
        // Without the attribute there is no state.
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x08, 0x00, 2]);
        assert_eq!(parse_packet(&m.finish()[16..]).unwrap().ct_info, None);
    }

    /// The flags attribute of a config message, as (mask, flags); fails on a second one.
    fn flags_of(msg: &[u8]) -> (u32, u32) {
        let (mut mask, mut flags) = (None, None);
        let mut off = HDR_LEN;
        while off + 4 <= msg.len() {
            let len = u16::from_ne_bytes([msg[off], msg[off + 1]]) as usize;
            let ty = u16::from_ne_bytes([msg[off + 2], msg[off + 3]]);
            let v = be32(&msg[off + 4..]);
            match ty {
                NFQA_CFG_MASK => assert!(mask.replace(v.unwrap()).is_none()),
                NFQA_CFG_FLAGS => assert!(flags.replace(v.unwrap()).is_none(), "two flag attrs"),
                _ => {}
            }
            off += align4(len);
        }
        (mask.unwrap(), flags.unwrap())
    }

    #[test]
    fn all_flags_go_in_one_attribute() {
        let p = QueueParams {
            copy_range: 0xffff,
            max_len: 1024,
            fail_open: true,
            gso: true,
            conntrack: true,
        };
        let (mask, flags) = flags_of(config_message(1, &p, 1).finish());
        assert_eq!((mask, flags), (7, 7));
        let p = QueueParams {
            fail_open: false,
            conntrack: false,
            ..p
        };
        // Clearing a flag needs it in the mask.
        let (mask, flags) = flags_of(config_message(1, &p, 1).finish());
        assert_eq!((mask, flags), (7, NFQA_CFG_F_GSO));
    }

    #[test]
    fn parses_packet_message_and_refuses_garbage() {
        let mut m = MsgBuilder::new(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x08, 0x00, 2]);
        m.attr(NFQA_MARK, &5u32.to_be_bytes());
        m.attr(NFQA_IFINDEX_OUTDEV, &3u32.to_be_bytes());
        m.attr(NFQA_SKB_INFO, &2u32.to_be_bytes());
        m.attr(NFQA_PAYLOAD, &[0x45, 1, 2]);
        let buf = m.finish().to_vec();
        let msgs: Vec<_> = Messages::new(&buf).collect();
        assert_eq!(msgs.len(), 1);
        let p = parse_packet(msgs[0].payload).unwrap();
        assert_eq!(
            (p.id, p.hw_protocol, p.hook, p.mark, p.outdev, p.gso),
            (9, 0x0800, 2, 5, 3, true)
        );
        let (s, e) = p.payload.unwrap();
        assert_eq!(&msgs[0].payload[s..e], &[0x45, 1, 2]);
        // Every truncation parses to None or Some, never panics.
        for n in 0..buf.len() {
            for m in Messages::new(&buf[..n]) {
                let _ = parse_packet(m.payload);
            }
            let _ = parse_packet(&buf[16..n.max(16)]);
        }
        let mut bad = buf.clone();
        bad[20] = 0xff; // first attribute's length overruns
        assert!(parse_packet(&bad[16..]).is_none());
    }
}
