//! A thin NFQUEUE netlink layer: the config/verdict messages and the parser of packet
//! messages (the socket is in `socket.rs`, the netlink framing in
//! [`relay_netlink::frame`]). Written against the kernel's `nfnetlink_queue` UAPI
//! (include/uapi/linux/netfilter/nfnetlink_queue.h) because the `nfq` crate has no batch
//! verdict and no access to the socket's file descriptor (so no SO_RCVBUF, no recvmmsg);
//! see docs/performance.md.

use relay_core::{CtInfo, CtState};
use relay_netlink::frame::{
    Attrs, Builder, Header, NLA_TYPE_MASK, NLM_F_ACK, NLM_F_REQUEST, NLMSG_HDRLEN, attr_header,
    os_error,
};
pub(crate) use relay_netlink::frame::{Messages, align};

pub(crate) const NETLINK_NETFILTER: i32 = 12;
pub(crate) const NFNL_SUBSYS_QUEUE: u16 = 3;
pub(crate) const NFQNL_MSG_PACKET: u16 = 0;
pub(crate) const NFQNL_MSG_VERDICT: u16 = 1;
pub(crate) const NFQNL_MSG_CONFIG: u16 = 2;
pub(crate) const NFQNL_MSG_VERDICT_BATCH: u16 = 3;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
pub(crate) const NFQNL_CFG_CMD_BIND: u8 = 1;
pub(crate) const NFQNL_CFG_CMD_UNBIND: u8 = 2;
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
/// NFQA_SKB_INFO bit: the checksum is not filled in yet (`CHECKSUM_PARTIAL`).
const NFQA_SKB_CSUMNOTREADY: u32 = 1;

/// Netlink message header plus nfgenmsg.
pub(crate) const HDR_LEN: usize = NLMSG_HDRLEN + 4;
/// The largest verdict message header we write before the payload bytes:
/// nlmsghdr + nfgenmsg + verdict hdr attr (12) + mark attr (8) + payload attr header (4).
pub(crate) const VERDICT_HDR_MAX: usize = HDR_LEN + 12 + 8 + 4;

/// NF_DROP, NF_ACCEPT, NF_REPEAT.
pub(crate) const NF_DROP: u32 = 0;
pub(crate) const NF_ACCEPT: u32 = 1;
pub(crate) const NF_REPEAT: u32 = 4;

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
pub(crate) fn config_message(num: u16, p: &QueueParams, seq: u32) -> Builder {
    let mut m = message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, num);
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

/// The config message running command `cmd` (bind, unbind) on queue `num`.
pub(crate) fn config_command(num: u16, cmd: u8, seq: u32) -> Builder {
    let mut m = message(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, seq, num);
    m.attr(NFQA_CFG_CMD, &[cmd, 0, 0, 0]);
    m
}

/// nfgenmsg for queue `queue`: family, NFNETLINK_V0, the queue number (big-endian).
fn nfgenmsg(queue: u16) -> [u8; 4] {
    let q = queue.to_be_bytes();
    [libc::AF_UNSPEC as u8, 0, q[0], q[1]]
}

/// A queue message (setup path only): its header and nfgenmsg, for attributes to follow.
pub(crate) fn message(msg: u16, flags: u16, seq: u32, queue: u16) -> Builder {
    let mut m = Builder::new((NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq);
    m.push(&nfgenmsg(queue));
    m
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
    // The length goes in last, when known.
    let header = Header {
        len: 0,
        ty: (NFNL_SUBSYS_QUEUE << 8) | msg,
        flags: NLM_F_REQUEST,
        seq: 0,
        pid: 0,
    };
    put(&header.to_bytes());
    put(&nfgenmsg(queue));
    put(&attr_header(NFQA_VERDICT_HDR, 8));
    put(&verdict.to_be_bytes());
    put(&id.to_be_bytes());
    if let Some(m) = mark {
        put(&attr_header(NFQA_MARK, 4));
        put(&m.to_be_bytes());
    }
    let total = match payload_len {
        Some(p) => {
            put(&attr_header(NFQA_PAYLOAD, p));
            n + p
        }
        None => n,
    };
    out[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    n
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
    /// NFQA_SKB_INFO said the transport checksum is not filled in (only sent on queues
    /// with GSO on; without it the kernel completes checksums before the copy).
    pub(crate) csum_partial: bool,
    /// NFQA_CT_INFO: the kernel's `enum ip_conntrack_info` for the packet.
    pub(crate) ct_info: Option<u32>,
    /// Byte range of the packet within the message payload (after nfgenmsg), if any.
    pub(crate) payload: Option<(usize, usize)>,
}

impl PacketMsg {
    /// The packet's metadata as services see it, on queue `queue`: its conntrack state
    /// decoded from the mark bits `ct_bits` (which leave the mark) when given, and from
    /// the kernel's NFQA_CT_INFO, which wins, when sent.
    pub(crate) fn meta(
        &self,
        queue: u16,
        ct_bits: Option<relay_core::CtMarkBits>,
    ) -> relay_core::PacketMeta {
        let mut meta = relay_core::PacketMeta {
            id: self.id,
            queue,
            hw_protocol: self.hw_protocol,
            hook: relay_core::Hook::from_kernel(self.hook),
            mark: self.mark,
            indev: self.indev,
            outdev: self.outdev,
            orig_len: self.cap_len,
            gso: self.gso,
            ct: None,
            csum: if self.csum_partial {
                relay_core::Checksum::Partial
            } else {
                relay_core::Checksum::Complete
            },
        };
        if let Some(bits) = ct_bits {
            (meta.ct, meta.mark) = bits.decode(self.mark);
        }
        if let Some(info) = self.ct_info {
            meta.ct = ct_from_kernel(info);
        }
        meta
    }
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// Parses the attributes of an NFQNL_MSG_PACKET payload (starting at nfgenmsg).
/// Returns `None` if the packet header attribute is missing or an attribute overruns.
pub(crate) fn parse_packet(p: &[u8]) -> Option<PacketMsg> {
    let mut out = PacketMsg::default();
    let mut have_hdr = false;
    // Attribute offsets count from the nfgenmsg.
    let mut attrs = Attrs::new(p.get(4..)?);
    for a in attrs.by_ref() {
        let d = a.data;
        match a.ty {
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
            NFQA_SKB_INFO => {
                let info = be32(d)?;
                out.gso = info & NFQA_SKB_GSO != 0;
                out.csum_partial = info & NFQA_SKB_CSUMNOTREADY != 0;
            }
            NFQA_PAYLOAD => out.payload = Some((4 + a.offset, 4 + a.offset + d.len())),
            NFQA_CT_INFO => out.ct_info = Some(be32(d)?),
            _ => {}
        }
    }
    (have_hdr && !attrs.damaged()).then_some(out)
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
    if Header::parse(dgram)?.ty != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
        return None;
    }
    // nlmsghdr (16) + nfgenmsg (4), then the packet header attribute comes first; its id
    // is read even if the datagram ends within the attribute (hence no `Attrs` here).
    let a = dgram.get(HDR_LEN..HDR_LEN + 8)?;
    let attr_ty = u16::from_ne_bytes([a[2], a[3]]) & NLA_TYPE_MASK;
    (attr_ty == NFQA_PACKET_HDR)
        .then(|| be32(&a[4..8]))
        .flatten()
}

/// For the fuzz targets in `fuzz/` only (not an API; may change at any time): decodes a
/// received datagram the way the queue thread does (`Engine::handle_datagram`): its netlink
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
        if m.ty() == packet_type {
            if let Some(p) = parse_packet(m.payload)
                && found.is_none()
            {
                found = Some((p, m.offset));
            }
        } else if let Some(err) = m.error() {
            let _ = os_error(err);
        }
    }
    let data = found.and_then(|(p, base)| p.payload.map(|(s, e)| (p, base + s, base + e)));
    let Some((p, start, end)) = data else {
        let id = found
            .map(|(p, _)| p.id)
            .or_else(|| packet_id_of_damaged(dgram));
        return (id, None);
    };
    let meta = p.meta(0, ct_bits);
    let pkt = relay_core::Packet::in_buffer(dgram.to_vec(), start, end, meta);
    (Some(p.id), Some(pkt))
}

/// Netlink messages as the kernel sends them, and a reader of the verdicts we send, for
/// the unit tests of the engine.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use relay_netlink::frame::NLMSG_ERROR;

    /// A packet message for queue `queue`: packet `id` (an IPv4 one), its mark and bytes.
    pub(crate) fn packet(queue: u16, id: u32, mark: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, queue);
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
        let mut m = Builder::new(NLMSG_ERROR, 0, seq);
        m.push(&err.to_ne_bytes()).push(&[0; NLMSG_HDRLEN]);
        m.finish().to_vec()
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
            let batch = match m.ty() {
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
            let mut attrs = Attrs::new(&m.payload[4..]);
            for a in attrs.by_ref() {
                match a.ty {
                    NFQA_VERDICT_HDR => {
                        v.verdict = be32(a.data).unwrap();
                        v.id = be32(&a.data[4..]).unwrap();
                    }
                    NFQA_MARK => v.mark = be32(a.data),
                    NFQA_PAYLOAD => v.payload = Some(a.data.to_vec()),
                    ty => panic!("unexpected attribute {ty}"),
                }
            }
            assert!(!attrs.damaged(), "a damaged verdict message");
            out.push(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_netlink::frame::NLMSG_ERROR;

    #[test]
    fn fuzz_entry_decodes_like_the_queue_thread() {
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
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
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
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
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
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
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x08, 0x00, 2]);
        assert_eq!(parse_packet(&m.finish()[16..]).unwrap().ct_info, None);
    }

    /// The flags attribute of a config message, as (mask, flags); fails on a second one.
    fn flags_of(msg: &[u8]) -> (u32, u32) {
        let (mut mask, mut flags) = (None, None);
        for a in Attrs::new(&msg[HDR_LEN..]) {
            let v = a.be32();
            match a.ty {
                NFQA_CFG_MASK => assert!(mask.replace(v.unwrap()).is_none()),
                NFQA_CFG_FLAGS => assert!(flags.replace(v.unwrap()).is_none(), "two flag attrs"),
                _ => {}
            }
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
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
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
        assert_eq!(p.meta(0, None).csum, relay_core::Checksum::Complete);
        // CSUMNOTREADY: the checksum is partial, not to be judged.
        let mut m = message(NFQNL_MSG_PACKET, 0, 0, 1);
        m.attr(NFQA_PACKET_HDR, &[0, 0, 0, 9, 0x08, 0x00, 2]);
        m.attr(NFQA_SKB_INFO, &3u32.to_be_bytes());
        let buf2 = m.finish().to_vec();
        let msgs2: Vec<_> = Messages::new(&buf2).collect();
        let p2 = parse_packet(msgs2[0].payload).unwrap();
        assert!(p2.gso);
        assert_eq!(p2.meta(0, None).csum, relay_core::Checksum::Partial);
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
