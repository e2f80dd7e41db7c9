//! A synchronous NETLINK_ROUTE socket ([`RtnlSocket`]: send a request, read the kernel's
//! answers to it) and, on it, a minimal RTM_GETQDISC dump: the root qdisc of every
//! interface with its queue statistics (TCA_STATS2 / TCA_STATS_QUEUE) and, for tbf, its
//! configured rate (TCA_TBF_PARMS / TCA_TBF_RATE64); and an RTM_GETTCLASS dump of one
//! interface's classes with their counters (what `tc -s class show` prints), which
//! relay-control reads for the QoS trees. relay-xdp's link requests (attaching XDP
//! programs) use the same socket.
//!
//! Hand-written rather than through the `rtnetlink` crate: that crate is async (a tokio
//! task per poll) and leaves qdisc options untyped, while the monitor polls every
//! millisecond from a plain thread and needs exactly these three attributes.

use crate::frame::{
    Attrs, Header, Messages, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN,
    ne32_at, os_error,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const RTM_NEWTCLASS: u16 = 40;
const RTM_GETTCLASS: u16 = 42;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_PKT64: u16 = 8;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_STATS2: u16 = 7;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TC_H_ROOT: u32 = 0xffff_ffff;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;

/// What one root qdisc reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Interface index.
    pub ifindex: u32,
    /// Bytes waiting in the qdisc.
    pub backlog_bytes: u32,
    /// Packets waiting in the qdisc.
    pub qlen: u32,
    /// Packets the qdisc dropped since it was created.
    pub drops: u32,
    /// The configured rate in bytes per second (tbf), 0 if none.
    pub rate_bytes: u64,
}

/// What one traffic class reports (`struct gnet_stats_basic` and `gnet_stats_queue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// The class handle (major << 16 | minor).
    pub handle: u32,
    /// The parent's handle.
    pub parent: u32,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent (64-bit where the kernel gives TCA_STATS_PKT64).
    pub packets: u64,
    /// Packets dropped.
    pub drops: u32,
    /// Times the class was over its rate.
    pub overlimits: u32,
    /// Bytes queued now.
    pub backlog_bytes: u32,
    /// Packets queued now.
    pub qlen: u32,
}

/// A NETLINK_ROUTE socket for requests answered by the kernel (qdisc dumps, link
/// requests): setup and monitoring paths, not per packet.
#[derive(Debug)]
pub struct RtnlSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl RtnlSocket {
    /// Opens the socket. It asks for the kernel's extended acknowledgements (a refusal's
    /// explanation, "Peer MTU is too large to set XDP", is worth more than its errno)
    /// with the request not echoed back; both are optional. A receive times out after 5 s:
    /// the kernel always answers, the timeout only keeps a bug from hanging relayd.
    pub fn open() -> io::Result<RtnlSocket> {
        let fd = crate::sock::open(libc::NETLINK_ROUTE, false)?;
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            // Optional: an older kernel answers without them.
            let _ = crate::sock::set_int(&fd, SOL_NETLINK, opt, 1);
        }
        let _ = crate::sock::set_recv_timeout(&fd, std::time::Duration::from_secs(5));
        Ok(RtnlSocket {
            fd,
            seq: 0,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// A new request sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends one request (whole netlink messages).
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: msg is a live buffer of msg.len() bytes.
        cvt(unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
            )
        })
        .map(|_| ())
    }

    /// Receives datagrams from the kernel (datagrams from other senders are skipped) and
    /// hands each to `f` until `f` returns `Some`.
    pub fn recv_datagrams<T, E: From<io::Error>>(
        &mut self,
        mut f: impl FnMut(&[u8]) -> Option<Result<T, E>>,
    ) -> Result<T, E> {
        loop {
            // SAFETY: a zeroed sockaddr_nl is valid; it receives the sender's address.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: buf is a live writable buffer of buf.len() bytes; from/from_len are live.
            let n = match cvt(unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    0,
                    &mut from as *mut libc::sockaddr_nl as *mut libc::sockaddr,
                    &mut from_len,
                )
            }) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if from.nl_pid != 0 {
                continue; // only the kernel answers for the kernel
            }
            if let Some(r) = f(&self.buf[..n]) {
                return r;
            }
        }
    }

    /// [`RtnlSocket::recv_datagrams`], message by message: hands each message answering
    /// request `seq` to `f` (its header and payload) until `f` returns `Some`.
    pub fn recv_until<T, E: From<io::Error>>(
        &mut self,
        seq: u32,
        mut f: impl FnMut(&Header, &[u8]) -> Option<Result<T, E>>,
    ) -> Result<T, E> {
        self.recv_datagrams(|dgram| {
            Messages::new(dgram)
                .filter(|m| m.seq() == seq)
                .find_map(|m| f(&m.header, m.payload))
        })
    }

    /// Sends a tc dump request of type `ty` (a struct tcmsg for interface `ifindex`, 0: every
    /// interface) and returns its sequence number.
    fn request_tc_dump(&mut self, ty: u16, ifindex: i32) -> io::Result<u32> {
        self.next_seq();
        let mut req = [0u8; NLMSG_HDRLEN + 20];
        let header = Header {
            len: req.len() as u32,
            ty,
            flags: NLM_F_REQUEST | NLM_F_DUMP,
            seq: self.seq,
            pid: 0,
        };
        req[..NLMSG_HDRLEN].copy_from_slice(&header.to_bytes());
        req[NLMSG_HDRLEN] = libc::AF_UNSPEC as u8;
        req[NLMSG_HDRLEN + 4..NLMSG_HDRLEN + 8].copy_from_slice(&ifindex.to_ne_bytes());
        self.send(&req)?;
        Ok(self.seq)
    }

    /// Dumps the root qdiscs, calling `f` for each. Allocates nothing after the first call.
    pub fn dump_root_qdiscs(&mut self, mut f: impl FnMut(QdiscStats)) -> io::Result<()> {
        let seq = self.request_tc_dump(RTM_GETQDISC, 0)?;
        self.recv_datagrams(|dgram| {
            parse_dump(dgram, seq, RTM_NEWQDISC, &mut |b| {
                if let Some(q) = parse_qdisc(b) {
                    f(q);
                }
            })
        })
    }

    /// Dumps the classes of interface `ifindex` with their counters, calling `f` for each.
    pub fn dump_classes(&mut self, ifindex: u32, mut f: impl FnMut(ClassStats)) -> io::Result<()> {
        let ifindex = i32::try_from(ifindex)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?;
        let seq = self.request_tc_dump(RTM_GETTCLASS, ifindex)?;
        self.recv_datagrams(|dgram| {
            parse_dump(dgram, seq, RTM_NEWTCLASS, &mut |b| {
                if let Some(c) = parse_class(b) {
                    f(c);
                }
            })
        })
    }
}

/// Reads one datagram of a tc dump answering request `seq`: calls `f` with the body of
/// each message of type `ty`, and returns `Some` once the dump is over (`NLMSG_DONE`, or
/// the kernel's error), `None` if more datagrams follow. Stops at the first inconsistent
/// length.
fn parse_dump(
    dgram: &[u8],
    seq: u32,
    ty: u16,
    f: &mut impl FnMut(&[u8]),
) -> Option<io::Result<()>> {
    for m in Messages::new(dgram).filter(|m| m.seq() == seq) {
        match m.ty() {
            NLMSG_DONE => return Some(Ok(())),
            NLMSG_ERROR => {
                if let Some(e) = m.error()
                    && e != 0
                {
                    return Some(Err(os_error(e)));
                }
            }
            t if t == ty => f(m.payload),
            _ => {}
        }
    }
    None
}

/// Parses one RTM_NEWTCLASS body (tcmsg + attributes).
fn parse_class(body: &[u8]) -> Option<ClassStats> {
    let mut c = ClassStats {
        handle: ne32_at(body, 8)?,
        parent: ne32_at(body, 12)?,
        ..ClassStats::default()
    };
    for a in Attrs::new(body.get(20..)?).filter(|a| a.ty == TCA_STATS2) {
        for s in Attrs::new(a.data) {
            match s.ty {
                // struct gnet_stats_basic { u64 bytes; u32 packets; }
                TCA_STATS_BASIC => {
                    c.bytes = u64::from_ne_bytes(s.data.get(..8)?.try_into().ok()?);
                    if c.packets == 0 {
                        c.packets = u64::from(s.ne32_at(8)?);
                    }
                }
                TCA_STATS_PKT64 => {
                    c.packets = u64::from_ne_bytes(s.data.get(..8)?.try_into().ok()?)
                }
                // struct gnet_stats_queue { qlen, backlog, drops, requeues, overlimits }
                TCA_STATS_QUEUE => {
                    c.qlen = s.ne32_at(0)?;
                    c.backlog_bytes = s.ne32_at(4)?;
                    c.drops = s.ne32_at(8)?;
                    c.overlimits = s.ne32_at(16)?;
                }
                _ => {}
            }
        }
    }
    Some(c)
}

/// For the fuzz targets in `fuzz/` only (not an API; may change at any time): runs the
/// qdisc dump parser on one datagram as if it answered request `seq`.
#[doc(hidden)]
pub fn fuzz_parse_dump(
    dgram: &[u8],
    seq: u32,
    mut f: impl FnMut(QdiscStats),
) -> Option<io::Result<()>> {
    parse_dump(dgram, seq, RTM_NEWQDISC, &mut |b| {
        if let Some(q) = parse_qdisc(b) {
            f(q);
        }
    })
}

/// For the fuzz targets in `fuzz/` only, as [`fuzz_parse_dump`]: the class dump parser
/// (`relayd status`'s tc classes) on one datagram answering request `seq`.
#[doc(hidden)]
pub fn fuzz_parse_class_dump(
    dgram: &[u8],
    seq: u32,
    mut f: impl FnMut(ClassStats),
) -> Option<io::Result<()>> {
    parse_dump(dgram, seq, RTM_NEWTCLASS, &mut |b| {
        if let Some(c) = parse_class(b) {
            f(c);
        }
    })
}

/// Parses one RTM_NEWQDISC body (tcmsg + attributes); `None` for a non-root qdisc.
fn parse_qdisc(body: &[u8]) -> Option<QdiscStats> {
    // struct tcmsg { u8 family, pad[3]; i32 ifindex; u32 handle; u32 parent; u32 info }
    let ifindex = ne32_at(body, 4)?;
    if ne32_at(body, 12)? != TC_H_ROOT {
        return None;
    }
    let mut q = QdiscStats {
        ifindex,
        ..QdiscStats::default()
    };
    let mut kind: &[u8] = b"";
    let mut options: &[u8] = b"";
    for a in Attrs::new(body.get(20..)?) {
        match a.ty {
            TCA_KIND => kind = a.data.strip_suffix(b"\0").unwrap_or(a.data),
            TCA_OPTIONS => options = a.data,
            TCA_STATS2 => {
                for s in Attrs::new(a.data).filter(|s| s.ty == TCA_STATS_QUEUE) {
                    // struct gnet_stats_queue { qlen, backlog, drops, requeues, overlimits }
                    q.qlen = s.ne32_at(0)?;
                    q.backlog_bytes = s.ne32_at(4)?;
                    q.drops = s.ne32_at(8)?;
                }
            }
            _ => {}
        }
    }
    if kind == b"tbf" {
        for o in Attrs::new(options) {
            match o.ty {
                // struct tc_tbf_qopt { struct tc_ratespec rate; ... }, rate at offset 8
                TCA_TBF_PARMS if q.rate_bytes == 0 => q.rate_bytes = o.ne32_at(8)? as u64,
                TCA_TBF_RATE64 => {
                    q.rate_bytes = u64::from_ne_bytes(o.data.get(..8)?.try_into().ok()?)
                }
                _ => {}
            }
        }
    }
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Builder, put_attr as attr};

    fn nlmsg(ty: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        Builder::new(ty, 0, seq).push(body).finish().to_vec()
    }

    fn qdisc(ifindex: i32, parent: u32, kind: &[u8], rate: Option<u32>) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&ifindex.to_ne_bytes());
        b.extend_from_slice(&0x10000u32.to_ne_bytes());
        b.extend_from_slice(&parent.to_ne_bytes());
        b.extend_from_slice(&[0; 4]);
        attr(&mut b, TCA_KIND, kind);
        if let Some(r) = rate {
            let mut parms = vec![0u8; 36];
            parms[8..12].copy_from_slice(&r.to_ne_bytes());
            let mut opts = Vec::new();
            attr(&mut opts, TCA_TBF_PARMS, &parms);
            attr(&mut b, TCA_OPTIONS, &opts);
        }
        let mut q = Vec::new();
        for v in [3u32, 4500, 17, 0, 0] {
            q.extend_from_slice(&v.to_ne_bytes());
        }
        let mut stats = Vec::new();
        attr(&mut stats, TCA_STATS_QUEUE, &q);
        attr(&mut b, TCA_STATS2, &stats);
        b
    }

    #[test]
    fn dump_datagram_reports_root_qdiscs_until_done() {
        let mut d = nlmsg(
            RTM_NEWQDISC,
            7,
            &qdisc(2, TC_H_ROOT, b"tbf\0", Some(125_000)),
        );
        d.extend(nlmsg(RTM_NEWQDISC, 7, &qdisc(3, 0x10001, b"pfifo\0", None)));
        d.extend(nlmsg(RTM_NEWQDISC, 6, &qdisc(4, TC_H_ROOT, b"fq\0", None)));
        let mut seen = Vec::new();
        assert!(
            fuzz_parse_dump(&d, 7, |q| seen.push(q)).is_none(),
            "more to come"
        );
        assert_eq!(
            seen,
            [QdiscStats {
                ifindex: 2,
                backlog_bytes: 4500,
                qlen: 3,
                drops: 17,
                rate_bytes: 125_000,
            }],
            "only the root qdisc of this dump"
        );
        let done = nlmsg(NLMSG_DONE, 7, &0i32.to_ne_bytes());
        assert!(matches!(fuzz_parse_dump(&done, 7, |_| {}), Some(Ok(()))));
        let err = nlmsg(NLMSG_ERROR, 7, &(-libc::EPERM).to_ne_bytes());
        let e = fuzz_parse_dump(&err, 7, |_| {}).unwrap().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // Every truncation and a bad length stop quietly.
        for n in 0..d.len() {
            let _ = fuzz_parse_dump(&d[..n], 7, |_| {});
        }
        // Found by the `rtnl_qdisc` fuzz target: -i32::MIN overflowed.
        let min = nlmsg(NLMSG_ERROR, 7, &i32::MIN.to_ne_bytes());
        assert!(matches!(fuzz_parse_dump(&min, 7, |_| {}), Some(Err(_))));
        let mut bad = d.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(fuzz_parse_dump(&bad, 7, |_| panic!("nothing to report")).is_none());
    }

    #[test]
    fn class_dump_reports_counters_of_every_class() {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&5i32.to_ne_bytes());
        b.extend_from_slice(&0x01d1_0064u32.to_ne_bytes());
        b.extend_from_slice(&0x01d1_0001u32.to_ne_bytes());
        b.extend_from_slice(&[0; 4]);
        let mut basic = 4200u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&3u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let mut q = Vec::new();
        for v in [2u32, 3000, 1, 0, 9] {
            q.extend_from_slice(&v.to_ne_bytes());
        }
        let mut stats = Vec::new();
        attr(&mut stats, TCA_STATS_BASIC, &basic);
        attr(&mut stats, TCA_STATS_QUEUE, &q);
        attr(&mut b, TCA_STATS2, &stats);
        let d = nlmsg(RTM_NEWTCLASS, 9, &b);
        let mut seen = Vec::new();
        let mut f = |body: &[u8]| seen.extend(parse_class(body));
        assert!(parse_dump(&d, 9, RTM_NEWTCLASS, &mut f).is_none());
        assert_eq!(
            seen,
            [ClassStats {
                handle: 0x01d1_0064,
                parent: 0x01d1_0001,
                bytes: 4200,
                packets: 3,
                drops: 1,
                overlimits: 9,
                backlog_bytes: 3000,
                qlen: 2,
            }]
        );
        for n in 0..b.len() {
            let _ = parse_class(&b[..n]);
        }
    }
}
