//! ctnetlink (NETLINK_NETFILTER, subsystem CTNETLINK): the one request relayd's flow
//! offload needs, an update of an existing conntrack entry's mark under a mask
//! (IPCTNL_MSG_CT_NEW without NLM_F_CREATE), and a non-blocking socket to send such
//! updates in batches and read the kernel's acknowledgements without waiting.
//!
//! The kernel (net/netfilter/nf_conntrack_netlink.c, `ctnetlink_new_conntrack`) looks the
//! entry up by CTA_TUPLE_ORIG with `nf_conntrack_find_get`, which matches either
//! direction's tuple: the tuple of a packet in the reply direction finds its entry too.
//! An entry not yet confirmed (its first packet has not left the box) is not found:
//! ENOENT. `ctnetlink_change_mark` sets `mark = (mark & ~CTA_MARK_MASK) ^ CTA_MARK`, so
//! the mark given must lie inside the mask. Messages are built into fixed buffers: the
//! datapath calls this after each batch and allocates nothing. For the control plane,
//! [`clear_marks`] dumps the entries whose mark carries given bits and clears them.

use crate::frame::{Attrs, Header, Messages, NLM_F_ACK, NLM_F_REQUEST, NLMSG_HDRLEN, attr_header};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// nfnetlink subsystem of conntrack.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
/// IPCTNL_MSG_CT_NEW: create, or (without NLM_F_CREATE) change, an entry.
const IPCTNL_MSG_CT_NEW: u16 = 0;
/// The message type of a conntrack update.
pub const CT_NEW: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
/// IPCTNL_MSG_CT_GET: get one entry, or with NLM_F_DUMP all of them.
const IPCTNL_MSG_CT_GET: u16 = 1;
const CT_GET: u16 = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
const NLA_F_NESTED: u16 = 0x8000;
/// `enum ctattr_type`.
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_MARK: u16 = 8;
const CTA_MARK_MASK: u16 = 21;
const CTA_ZONE: u16 = 18;
/// `enum ctattr_tuple`.
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
/// `enum ctattr_ip`.
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
/// `enum ctattr_l4proto`.
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// The largest update message [`mark_update`] writes (IPv6 tuple).
pub const UPDATE_MAX: usize = 128;

/// The tuple a conntrack entry is looked up by: addresses, protocol and ports (the
/// protocols conntrack tracks by ports: TCP, UDP, SCTP, UDP-Lite, DCCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CtTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (the same family as `src`).
    pub dst: IpAddr,
    /// IP protocol number.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// Which tuple attribute carries the lookup tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// CTA_TUPLE_ORIG (the kernel matches either direction's tuple with it).
    Orig,
    /// CTA_TUPLE_REPLY.
    Reply,
}

/// A small cursor writing netlink bytes into a fixed buffer; `None` once it would overrun.
struct Cursor<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.at.checked_add(bytes.len())?;
        self.buf.get_mut(self.at..end)?.copy_from_slice(bytes);
        self.at = end;
        // Netlink's 4-byte alignment; the padding is zero.
        let padded = crate::frame::align(end);
        self.buf.get_mut(end..padded)?.fill(0);
        self.at = padded;
        Some(())
    }

    fn attr(&mut self, ty: u16, data: &[u8]) -> Option<()> {
        self.put(&attr_header(ty, data.len()))?;
        self.put(data)
    }

    /// Opens a nested attribute: returns where its header is, for [`Cursor::close`].
    fn open(&mut self, ty: u16) -> Option<usize> {
        let at = self.at;
        self.put(&attr_header(ty | NLA_F_NESTED, 0))?;
        Some(at)
    }

    fn close(&mut self, at: usize) -> Option<()> {
        let len = u16::try_from(self.at.checked_sub(at)?).ok()?;
        self.buf
            .get_mut(at..at + 2)?
            .copy_from_slice(&len.to_ne_bytes());
        Some(())
    }
}

/// Writes into `buf` an update of the mark of the conntrack entry `tuple` finds:
/// `mark & mask` into the bits of `mask` (bits of `mark` outside `mask` are dropped, the
/// kernel would XOR them in). Sequence number `seq`, with NLM_F_ACK so that every update
/// is answered (0 or a negative errno). Returns the message's length, or `None` if the
/// addresses are of different families or `buf` is too short ([`UPDATE_MAX`] suffices).
pub fn mark_update(
    buf: &mut [u8],
    seq: u32,
    tuple: &CtTuple,
    lookup: Lookup,
    mark: u32,
    mask: u32,
) -> Option<usize> {
    update_in_zone(buf, seq, tuple, lookup, (mark, mask), 0)
}

/// [`mark_update`] of the entry in conntrack zone `zone` (0: the default zone, no
/// CTA_ZONE sent; the kernel looks entries up in zone 0 otherwise).
fn update_in_zone(
    buf: &mut [u8],
    seq: u32,
    tuple: &CtTuple,
    lookup: Lookup,
    (mark, mask): (u32, u32),
    zone: u16,
) -> Option<usize> {
    let family = match (tuple.src, tuple.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET as u8,
        (IpAddr::V6(_), IpAddr::V6(_)) => libc::AF_INET6 as u8,
        _ => return None,
    };
    let mut c = Cursor { buf, at: 0 };
    c.put(&[0u8; NLMSG_HDRLEN])?;
    // struct nfgenmsg: family, NFNETLINK_V0, res_id 0 (big-endian).
    c.put(&[family, 0, 0, 0])?;
    let outer = c.open(match lookup {
        Lookup::Orig => CTA_TUPLE_ORIG,
        Lookup::Reply => CTA_TUPLE_REPLY,
    })?;
    let ip = c.open(CTA_TUPLE_IP)?;
    match (tuple.src, tuple.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            c.attr(CTA_IP_V4_SRC, &s.octets())?;
            c.attr(CTA_IP_V4_DST, &d.octets())?;
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            c.attr(CTA_IP_V6_SRC, &s.octets())?;
            c.attr(CTA_IP_V6_DST, &d.octets())?;
        }
        _ => return None,
    }
    c.close(ip)?;
    let proto = c.open(CTA_TUPLE_PROTO)?;
    c.attr(CTA_PROTO_NUM, &[tuple.proto])?;
    c.attr(CTA_PROTO_SRC_PORT, &tuple.sport.to_be_bytes())?;
    c.attr(CTA_PROTO_DST_PORT, &tuple.dport.to_be_bytes())?;
    c.close(proto)?;
    c.close(outer)?;
    c.attr(CTA_MARK, &(mark & mask).to_be_bytes())?;
    c.attr(CTA_MARK_MASK, &mask.to_be_bytes())?;
    if zone != 0 {
        c.attr(CTA_ZONE, &zone.to_be_bytes())?;
    }
    let len = c.at;
    let header = Header {
        len: u32::try_from(len).ok()?,
        ty: CT_NEW,
        flags: NLM_F_REQUEST | NLM_F_ACK,
        seq,
        pid: 0,
    };
    c.buf
        .get_mut(..NLMSG_HDRLEN)?
        .copy_from_slice(&header.to_bytes());
    Some(len)
}

/// Hands `f` the sequence number and error (0: done; else a negative errno) of every
/// acknowledgement in a received datagram; other messages are skipped.
pub fn acks(datagram: &[u8], mut f: impl FnMut(u32, i32)) {
    for m in Messages::new(datagram) {
        if let Some(err) = m.error() {
            f(m.seq(), err);
        }
    }
}

/// Bytes of an acknowledgement the kernel sends for an update: a header and `struct
/// nlmsgerr` (error, then the request's header) — with NETLINK_CAP_ACK, without the
/// request's payload.
pub const ACK_LEN: usize = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;

/// The room [`CtSocket::try_recv_many`] gives each datagram: an acknowledgement with room
/// to spare.
pub const ACK_SLOT: usize = 128;

const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;

/// A NETLINK_NETFILTER socket for conntrack updates: non-blocking, so that a queue thread
/// sends a batch of updates and later reads whatever answers have come, never waiting.
#[derive(Debug)]
pub struct CtSocket {
    fd: OwnedFd,
}

impl CtSocket {
    /// Opens the socket with a receive buffer of `rcvbuf` bytes (the answers to the updates
    /// in flight must fit: [`ACK_LEN`] each, plus the kernel's overhead per datagram).
    /// Acknowledgements leave out the request's payload (NETLINK_CAP_ACK).
    pub fn open(rcvbuf: usize) -> io::Result<CtSocket> {
        let fd = crate::sock::open(libc::NETLINK_NETFILTER, true)?;
        let size = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
        let _ = crate::sock::set_int(&fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
        let _ = crate::sock::set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, size);
        Ok(CtSocket { fd })
    }

    /// Sends whole netlink messages (several updates in one datagram) without waiting.
    pub fn send(&self, msgs: &[u8]) -> io::Result<()> {
        // SAFETY: msgs is a live buffer of msgs.len() bytes.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                msgs.as_ptr() as *const libc::c_void,
                msgs.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives as many datagrams as wait, up to one per slot of `bufs`, in one recvmmsg
    /// without waiting: how many came (0 when none did), each slot's length in `lens`.
    /// The kernel sends each acknowledgement as its own datagram; [`ACK_LEN`] bytes each.
    pub fn try_recv_many<const N: usize>(
        &self,
        bufs: &mut [[u8; ACK_SLOT]; N],
        lens: &mut [usize; N],
    ) -> io::Result<usize> {
        let mut iov: [libc::iovec; N] = std::array::from_fn(|i| libc::iovec {
            iov_base: bufs[i].as_mut_ptr() as *mut libc::c_void,
            iov_len: ACK_SLOT,
        });
        // SAFETY: an all-zero mmsghdr is a valid (empty) value.
        let mut hdrs: [libc::mmsghdr; N] = unsafe { std::mem::zeroed() };
        for (h, v) in hdrs.iter_mut().zip(iov.iter_mut()) {
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: hdrs and the iovecs and buffers they point to are live for the call.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                N as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        let n = (r as usize).min(N);
        for (len, h) in lens.iter_mut().zip(&hdrs).take(n) {
            *len = (h.msg_len as usize).min(ACK_SLOT);
        }
        Ok(n)
    }
}

/// A conntrack entry as a dump gives it: what [`clear_marks`] needs to update it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtEntry {
    /// Its original direction's tuple.
    pub tuple: CtTuple,
    /// Its mark.
    pub mark: u32,
    /// Its conntrack zone (0: the default).
    pub zone: u16,
}

/// The tuple in a CTA_TUPLE_* attribute's payload; `None` without ports (ICMP, GRE).
fn parse_tuple(data: &[u8]) -> Option<CtTuple> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for a in Attrs::new(data) {
        match a.ty {
            CTA_TUPLE_IP => {
                for ip in Attrs::new(a.data) {
                    let addr = |d: &[u8]| -> Option<IpAddr> {
                        match d.len() {
                            4 => <[u8; 4]>::try_from(d).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(d).ok().map(IpAddr::from),
                            _ => None,
                        }
                    };
                    match ip.ty {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => src = addr(ip.data),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => dst = addr(ip.data),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for p in Attrs::new(a.data) {
                    let port = || Some(u16::from_be_bytes(p.data.get(..2)?.try_into().ok()?));
                    match p.ty {
                        CTA_PROTO_NUM => proto = p.data.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = port(),
                        CTA_PROTO_DST_PORT => dport = port(),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(CtTuple {
        src: src?,
        dst: dst?,
        proto: proto?,
        sport: sport?,
        dport: dport?,
    })
}

/// The entry in one message of a conntrack dump (its payload: nfgenmsg, attributes);
/// `None` for an entry without ports or a damaged message.
pub fn parse_entry(payload: &[u8]) -> Option<CtEntry> {
    let (mut tuple, mut mark, mut zone) = (None, 0, 0);
    for a in Attrs::new(payload.get(4..)?) {
        match a.ty {
            CTA_TUPLE_ORIG => tuple = parse_tuple(a.data),
            CTA_MARK => mark = a.be32()?,
            CTA_ZONE => zone = u16::from_be_bytes(a.data.get(..2)?.try_into().ok()?),
            _ => {}
        }
    }
    Some(CtEntry {
        tuple: tuple?,
        mark,
        zone,
    })
}

/// The dump request of every entry whose `mark & mask == value` (the kernel filters by
/// CTA_MARK and CTA_MARK_MASK in `ctnetlink_filter_match`), both families.
fn dump_request(seq: u32, value: u32, mask: u32) -> Vec<u8> {
    let mut b = crate::frame::Builder::new(CT_GET, NLM_F_REQUEST | crate::frame::NLM_F_DUMP, seq);
    b.push(&[libc::AF_UNSPEC as u8, 0, 0, 0])
        .attr(CTA_MARK, &value.to_be_bytes())
        .attr(CTA_MARK_MASK, &mask.to_be_bytes());
    b.finish().to_vec()
}

/// Opens a blocking NETLINK_NETFILTER socket whose receives give up after `wait`.
fn dump_socket(wait: std::time::Duration) -> io::Result<OwnedFd> {
    let fd = crate::sock::open(libc::NETLINK_NETFILTER, false)?;
    let _ = crate::sock::set_recv_timeout(&fd, wait);
    Ok(fd)
}

/// The entries whose `mark & mask == value`, as a dump gives them, until `deadline`
/// (then `TimedOut`). Entries without ports are left out.
pub fn dump_marked(
    value: u32,
    mask: u32,
    deadline: std::time::Instant,
) -> io::Result<Vec<CtEntry>> {
    let fd = dump_socket(std::time::Duration::from_millis(200))?;
    let req = dump_request(1, value, mask);
    // SAFETY: req is a live buffer of req.len() bytes.
    if unsafe {
        libc::send(
            fd.as_raw_fd(),
            req.as_ptr() as *const libc::c_void,
            req.len(),
            0,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if std::time::Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        // SAFETY: buf is a live, writable buffer of buf.len() bytes.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN) => continue,
                _ => return Err(e),
            }
        }
        for m in Messages::new(buf.get(..n as usize).unwrap_or_default()) {
            match m.ty() {
                crate::frame::NLMSG_DONE => return Ok(out),
                crate::frame::NLMSG_ERROR => {
                    return Err(crate::frame::os_error(m.error().unwrap_or(-libc::EIO)));
                }
                CT_NEW => {
                    // The kernel's filter may be missing (an old kernel): check here too.
                    if let Some(e) = parse_entry(m.payload).filter(|e| e.mark & mask == value) {
                        out.push(e);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Clears the bits `clear` in the mark of every conntrack entry whose mark has all of
/// `bits` set and for which `stale(mark)` holds, until `deadline`: a dump filtered by
/// the kernel, then one update per entry found, its answer awaited. Returns the marks
/// the entries had that were cleared (an entry gone since the dump is left out). For
/// the control plane: it blocks, up to `deadline`.
pub fn clear_marks(
    bits: u32,
    stale: impl Fn(u32) -> bool,
    clear: u32,
    deadline: std::time::Instant,
) -> io::Result<Vec<u32>> {
    let found: Vec<CtEntry> = dump_marked(bits, bits, deadline)?
        .into_iter()
        .filter(|e| stale(e.mark))
        .collect();
    let sock = CtSocket::open(1 << 20)?;
    let mut cleared = Vec::new();
    let mut bufs = [[0u8; ACK_SLOT]; 32];
    let mut lens = [0usize; 32];
    for chunk in found.chunks(64) {
        if std::time::Instant::now() >= deadline {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut out = Vec::with_capacity(chunk.len() * UPDATE_MAX);
        for (i, e) in chunk.iter().enumerate() {
            let mut b = [0u8; UPDATE_MAX];
            if let Some(n) =
                update_in_zone(&mut b, i as u32, &e.tuple, Lookup::Orig, (0, clear), e.zone)
            {
                out.extend_from_slice(&b[..n]);
            }
        }
        sock.send(&out)?;
        // The kernel answers within the send; a short wait covers a slow reader.
        let mut answered = 0;
        let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
        while answered < chunk.len() && std::time::Instant::now() < until.min(deadline) {
            let n = sock.try_recv_many(&mut bufs, &mut lens)?;
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            for (b, len) in bufs.iter().zip(lens).take(n) {
                acks(b.get(..len).unwrap_or_default(), |seq, err| {
                    answered += 1;
                    if let Some(e) = chunk.get(seq as usize).filter(|_| err == 0) {
                        cleared.push(e.mark);
                    }
                });
            }
        }
    }
    Ok(cleared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::NLMSG_ERROR;

    fn v4() -> CtTuple {
        CtTuple {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.1.2".parse().unwrap(),
            proto: 6,
            sport: 40000,
            dport: 5201,
        }
    }

    #[test]
    fn an_ipv4_update_is_the_bytes_the_kernel_parses() {
        let mut buf = [0u8; UPDATE_MAX];
        let n = mark_update(&mut buf, 7, &v4(), Lookup::Orig, 0x0041_0000, 0x00ff_0000).unwrap();
        let want: Vec<u8> = [
            // nlmsghdr: len 88, type 0x100, REQUEST|ACK, seq 7, pid 0
            &88u32.to_ne_bytes()[..],
            &0x100u16.to_ne_bytes(),
            &5u16.to_ne_bytes(),
            &7u32.to_ne_bytes(),
            &0u32.to_ne_bytes(),
            // nfgenmsg
            &[2, 0, 0, 0],
            // CTA_TUPLE_ORIG (nested), 52 bytes
            &52u16.to_ne_bytes(),
            &0x8001u16.to_ne_bytes(),
            //   CTA_TUPLE_IP (nested), 20 bytes: two 8-byte addresses
            &20u16.to_ne_bytes(),
            &0x8001u16.to_ne_bytes(),
            &8u16.to_ne_bytes(),
            &1u16.to_ne_bytes(),
            &[10, 0, 0, 1],
            &8u16.to_ne_bytes(),
            &2u16.to_ne_bytes(),
            &[10, 0, 1, 2],
            //   CTA_TUPLE_PROTO (nested), 28 bytes
            &28u16.to_ne_bytes(),
            &0x8002u16.to_ne_bytes(),
            &5u16.to_ne_bytes(),
            &1u16.to_ne_bytes(),
            &[6, 0, 0, 0],
            &6u16.to_ne_bytes(),
            &2u16.to_ne_bytes(),
            &40000u16.to_be_bytes(),
            &[0, 0],
            &6u16.to_ne_bytes(),
            &3u16.to_ne_bytes(),
            &5201u16.to_be_bytes(),
            &[0, 0],
            // CTA_MARK, CTA_MARK_MASK, big-endian
            &8u16.to_ne_bytes(),
            &8u16.to_ne_bytes(),
            &[0, 0x41, 0, 0],
            &8u16.to_ne_bytes(),
            &21u16.to_ne_bytes(),
            &[0, 0xff, 0, 0],
        ]
        .concat();
        assert_eq!(&buf[..n], &want[..]);
    }

    #[test]
    fn an_ipv6_update_fits_and_reads_back() {
        let t = CtTuple {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8:1::2".parse().unwrap(),
            proto: 17,
            sport: 1,
            dport: 2,
        };
        let mut buf = [0u8; UPDATE_MAX];
        let n = mark_update(&mut buf, 1, &t, Lookup::Reply, 0xffff_ffff, 0x0003_0000).unwrap();
        let m = Messages::new(&buf[..n]).next().unwrap();
        assert_eq!((m.ty(), m.header.len as usize), (CT_NEW, n));
        assert_eq!(m.payload[0], libc::AF_INET6 as u8);
        let attrs: Vec<_> = Attrs::new(&m.payload[4..]).collect();
        assert_eq!(attrs.len(), 3);
        assert_eq!(attrs[0].ty, CTA_TUPLE_REPLY);
        let inner: Vec<_> = Attrs::new(attrs[0].data).collect();
        let ip: Vec<_> = Attrs::new(inner[0].data).collect();
        assert_eq!((ip[0].ty, ip[0].data.len()), (CTA_IP_V6_SRC, 16));
        assert_eq!(
            attrs[1].be32(),
            Some(0x0003_0000),
            "the mark stays inside the mask"
        );
        assert_eq!(attrs[2].be32(), Some(0x0003_0000));
    }

    #[test]
    fn mixed_families_and_short_buffers_are_refused() {
        let mut t = v4();
        t.dst = "::1".parse().unwrap();
        let mut buf = [0u8; UPDATE_MAX];
        assert_eq!(mark_update(&mut buf, 1, &t, Lookup::Orig, 1, 1), None);
        for len in 0..88 {
            let mut short = vec![0u8; len];
            assert_eq!(
                mark_update(&mut short, 1, &v4(), Lookup::Orig, 1, 1),
                None,
                "{len}"
            );
        }
    }

    #[test]
    fn the_kernel_answers_an_update_of_an_entry_it_does_not_have() {
        // An address pair nothing uses: ENOENT as root, EPERM without CAP_NET_ADMIN.
        let t = CtTuple {
            src: "192.0.2.77".parse().unwrap(),
            dst: "198.51.100.77".parse().unwrap(),
            proto: 17,
            sport: 9,
            dport: 9,
        };
        let sock = CtSocket::open(64 << 10).unwrap();
        let mut out = Vec::new();
        for seq in [41u32, 42] {
            let mut buf = [0u8; UPDATE_MAX];
            let n = mark_update(&mut buf, seq, &t, Lookup::Orig, 1 << 16, 3 << 16).unwrap();
            out.extend_from_slice(&buf[..n]);
        }
        sock.send(&out).unwrap();
        let mut bufs = [[0u8; ACK_SLOT]; 4];
        let mut lens = [0usize; 4];
        let n = sock.try_recv_many(&mut bufs, &mut lens).unwrap();
        let mut got = Vec::new();
        for (b, len) in bufs.iter().zip(lens).take(n) {
            assert_eq!(len, ACK_LEN, "capped acknowledgements");
            acks(&b[..len], |seq, err| got.push((seq, err)));
        }
        assert_eq!(got.len(), 2, "both answered within the send: {got:?}");
        for (i, (seq, err)) in got.into_iter().enumerate() {
            assert_eq!(seq, 41 + i as u32);
            assert!(err == -libc::ENOENT || err == -libc::EPERM, "{err}");
        }
        assert_eq!(sock.try_recv_many(&mut bufs, &mut lens).unwrap(), 0);
    }

    #[test]
    fn a_dumped_entry_reads_back_its_tuple_mark_and_zone() {
        // A dump's message has the update's layout: nfgenmsg, CTA_TUPLE_ORIG, CTA_MARK.
        for t in [
            v4(),
            CtTuple {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8:1::2".parse().unwrap(),
                proto: 17,
                sport: 1,
                dport: 2,
            },
        ] {
            let mut buf = [0u8; UPDATE_MAX];
            let n = update_in_zone(&mut buf, 1, &t, Lookup::Orig, (0x0041_0000, !0), 7).unwrap();
            let m = Messages::new(&buf[..n]).next().unwrap();
            assert_eq!(
                parse_entry(m.payload),
                Some(CtEntry {
                    tuple: t,
                    mark: 0x0041_0000,
                    zone: 7
                })
            );
            // Cut anywhere, it reads as nothing or as the entry, never panics.
            for cut in 0..m.payload.len() {
                let _ = parse_entry(&m.payload[..cut]);
            }
        }
        let req = dump_request(3, 0x1_0000, 0x1_0000);
        let m = Messages::new(&req).next().unwrap();
        assert_eq!((m.ty(), m.header.flags), (CT_GET, 0x301));
        let attrs: Vec<_> = Attrs::new(&m.payload[4..]).collect();
        assert_eq!((attrs[0].ty, attrs[0].be32()), (CTA_MARK, Some(0x1_0000)));
        assert_eq!(
            (attrs[1].ty, attrs[1].be32()),
            (CTA_MARK_MASK, Some(0x1_0000))
        );
    }

    #[test]
    fn a_dump_of_marks_nothing_has_finds_nothing() {
        // As root: the kernel's filter (or ours) leaves every entry out. Without
        // CAP_NET_ADMIN the dump is refused.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        match dump_marked(0x4000_0001, 0xc000_0001, deadline) {
            Ok(found) => assert_eq!(found, []),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
        match clear_marks(0x4000_0001, |_| true, 0x4000_0001, deadline) {
            Ok(cleared) => assert_eq!(cleared, []),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
        }
    }

    #[test]
    fn acknowledgements_give_sequence_and_error() {
        let mut d = Vec::new();
        for (seq, err) in [(3u32, 0i32), (4, -libc::ENOENT)] {
            let mut b = crate::frame::Builder::new(NLMSG_ERROR, 0, seq);
            b.push(&err.to_ne_bytes()).push(&[0u8; NLMSG_HDRLEN]);
            d.extend_from_slice(b.finish());
        }
        let mut got = Vec::new();
        acks(&d, |s, e| got.push((s, e)));
        assert_eq!(got, [(3, 0), (4, -libc::ENOENT)]);
        assert_eq!(d.len(), 2 * ACK_LEN);
        // A damaged datagram ends quietly.
        acks(&d[..10], |_, _| panic!("nothing to read"));
    }
}
