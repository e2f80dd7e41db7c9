//! The packet a service sees: the kernel's IPv4/IPv6 packet in a growable buffer, its
//! NFQUEUE metadata, and a lazily parsed layout of its L3/L4 headers.
//!
//! The buffer is the datapath's receive buffer itself (the packet sits after the netlink
//! headers, which become headroom), so handing a packet to the chain copies nothing, and a
//! service that grows the packet (encapsulation, decompression) usually finds room in place.

use crate::hook::Hook;
use relay_wire::{
    self as wire, FiveTuple, Headers, IpPacket, Ipv4Packet, Ipv6Packet, Malformed, TcpPacket,
    UdpPacket, proto,
};
pub use relay_wire::{IpVersion, Layout};

/// What the kernel told us about a queued packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// The kernel's packet id, echoed in the verdict.
    pub id: u32,
    /// The queue number the packet arrived on.
    pub queue: u16,
    /// The link-layer protocol (0x0800 IPv4, 0x86dd IPv6).
    pub hw_protocol: u16,
    /// The hook the packet was queued from (`None` for a number relayd does not know).
    pub hook: Option<Hook>,
    /// The packet's nfmark when queued.
    pub mark: u32,
    /// Input interface index (0 if none).
    pub indev: u32,
    /// Output interface index (0 if none, e.g. before routing).
    pub outdev: u32,
    /// The packet's full length when the kernel copied less (copy range), else `None`.
    pub orig_len: Option<u32>,
    /// True if this is a GSO super-packet (only on queues with GSO on).
    pub gso: bool,
    /// Connection tracking state, where known (offline replay tracks flows itself).
    pub ct: Option<CtInfo>,
    /// Whether the transport checksum in the bytes can be judged (see [`Checksum`]).
    pub csum: Checksum,
}

/// What the datapath knows of a packet's transport (TCP, UDP) checksum, so that an
/// inline inspector drops a segment with a bad checksum (the destination host would
/// discard it) without misjudging packets whose checksum was never filled in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Checksum {
    /// The bytes carry a complete checksum: NFQUEUE without GSO hands packets over with
    /// their checksums completed (the kernel's `skb_checksum_help` before the copy), and
    /// the kernel reports when it did not (`NFQA_SKB_CSUMNOTREADY`).
    #[default]
    Complete,
    /// The checksum is not filled in yet (the kernel's `CHECKSUM_PARTIAL`: a locally
    /// generated or offloaded packet, `NFQA_SKB_CSUMNOTREADY`): not to be judged.
    Partial,
    /// Unknown: a capture (offloading often leaves wrong checksums in captures, which is
    /// why Suricata is run with `-k none` on them) or a datapath that cannot tell (AF_XDP
    /// on veth may hand over partial checksums). Not judged.
    Unknown,
}

impl Checksum {
    /// True if a wrong checksum in the bytes means the packet really is corrupt.
    pub fn judged(self) -> bool {
        self == Checksum::Complete
    }
}

impl PacketMeta {
    /// True if this packet's verdict may carry a packet of IP `version`: the kernel keeps
    /// the skb's protocol, so a packet queued from an IPv4 hook cannot come back as IPv6,
    /// nor the reverse. A service whose output changes family sends it anew instead
    /// ([`Context::emit`](crate::Context::emit)). `hw_protocol` 0 (offline replay, tests) allows both.
    pub fn verdict_carries(&self, version: IpVersion) -> bool {
        wire::ethernet::ethertype::ip_version(self.hw_protocol).is_none_or(|v| v == version)
    }
}

/// Connection state of a packet, as conntrack classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtState {
    /// The first packets of a flow, before any reply.
    New,
    /// A flow that has seen packets both ways.
    Established,
    /// An ICMP error about a known flow.
    Related,
}

/// Where a packet stands in its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtInfo {
    /// The flow's state.
    pub state: CtState,
    /// True for the reply direction (the flow's responder sent it).
    pub reply: bool,
}

impl CtInfo {
    /// A packet of a new flow, original direction.
    pub const NEW: CtInfo = CtInfo {
        state: CtState::New,
        reply: false,
    };
}

/// The nfmark bits through which iptables rules hand a packet's conntrack state to relayd,
/// on kernels that cannot send it with the packet (NFQA_CT needs
/// CONFIG_NETFILTER_NETLINK_GLUE_CT). Rules in front of the NFQUEUE rule OR them in:
///
/// ```text
/// -m conntrack --ctstate NEW,ESTABLISHED,RELATED -j MARK --or-mark TRACKED
/// -m conntrack --ctstate ESTABLISHED             -j MARK --or-mark ESTABLISHED
/// -m conntrack --ctstate RELATED                 -j MARK --or-mark RELATED
/// -m conntrack --ctdir REPLY                     -j MARK --or-mark REPLY
/// ```
///
/// The datapath decodes them into [`PacketMeta::ct`], removes them from
/// [`PacketMeta::mark`], and gives the packet its mark back without them in the verdict, so
/// the packet leaves with the mark it came with. The bits are therefore reserved: a mark
/// that had them set before these rules loses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtMarkBits {
    /// Set for a packet of an established flow (`--ctstate ESTABLISHED`).
    pub established: u32,
    /// Set for a packet related to a known flow (`--ctstate RELATED`).
    pub related: u32,
    /// Set for a packet in the reply direction (`--ctdir REPLY`).
    pub reply: u32,
    /// Set for every packet conntrack tracks (`--ctstate NEW,ESTABLISHED,RELATED`);
    /// without it the state is unknown (untracked or invalid packets).
    pub tracked: u32,
}

impl CtMarkBits {
    /// All the bits, as one mask.
    pub fn mask(&self) -> u32 {
        self.established | self.related | self.reply | self.tracked
    }

    /// Checks that every field is a non-empty set of bits and that no two overlap.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("established", self.established),
            ("related", self.related),
            ("reply", self.reply),
            ("tracked", self.tracked),
        ];
        let mut seen = 0u32;
        for (name, bits) in fields {
            if bits == 0 {
                return Err(format!("conntrack mark bit `{name}` is zero"));
            }
            if bits & seen != 0 {
                return Err(format!(
                    "conntrack mark bit `{name}` ({bits:#x}) overlaps another one"
                ));
            }
            seen |= bits;
        }
        Ok(())
    }

    /// Decodes a queued packet's nfmark: its conntrack state (`None` when the `tracked`
    /// bit is clear) and the mark without any of these bits.
    pub fn decode(&self, mark: u32) -> (Option<CtInfo>, u32) {
        let rest = mark & !self.mask();
        if mark & self.tracked == 0 {
            return (None, rest);
        }
        // ESTABLISHED and RELATED exclude each other in conntrack; if both bits show, a
        // foreign rule set one of them: trust RELATED, the rarer and more specific.
        let state = if mark & self.related != 0 {
            CtState::Related
        } else if mark & self.established != 0 {
            CtState::Established
        } else {
            CtState::New
        };
        let reply = mark & self.reply != 0;
        (Some(CtInfo { state, reply }), rest)
    }
}

/// The writable headers of a [`Packet`] ([`Packet::headers_mut`]): dereferences to
/// [`Headers`] over the packet's bytes, and keeps the packet's parsed layout unless the
/// IP header fields it depends on changed.
#[derive(Debug)]
pub struct HeadersMut<'a> {
    headers: Headers<&'a mut [u8]>,
    cache: &'a mut Option<Result<Layout, Malformed>>,
    shape: [u8; 6],
}

/// The IP header bytes a layout depends on, compared before and after a rewrite: for IPv4
/// the version and header length, total length, flags and fragment offset, protocol; for
/// IPv6 the version, payload length and next header (extension headers are reached only
/// through the payload, which [`Headers`] does not hand out writable before the
/// transport).
fn shape(d: &[u8], version: IpVersion) -> [u8; 6] {
    let at = |i: usize| d.get(i).copied().unwrap_or(0);
    match version {
        IpVersion::V4 => [at(0), at(2), at(3), at(6), at(7), at(9)],
        IpVersion::V6 => [at(0), at(4), at(5), at(6), 0, 0],
    }
}

impl<'a> std::ops::Deref for HeadersMut<'a> {
    type Target = Headers<&'a mut [u8]>;

    fn deref(&self) -> &Self::Target {
        &self.headers
    }
}

impl std::ops::DerefMut for HeadersMut<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.headers
    }
}

impl Drop for HeadersMut<'_> {
    fn drop(&mut self) {
        let l = self.headers.layout();
        if shape(self.headers.bytes(), l.version) != self.shape {
            *self.cache = None;
        }
    }
}

/// Room kept in front of a packet built with [`Packet::from_bytes`], for encapsulation.
pub const DEFAULT_HEADROOM: usize = 128;

/// A packet in flight through a chain.
#[derive(Debug)]
pub struct Packet {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The kernel's metadata.
    pub meta: PacketMeta,
    layout: Option<Result<Layout, Malformed>>,
    modified: bool,
    mark: Option<u32>,
}

impl Packet {
    /// A packet copied from bytes, with some headroom (tests, replay, injection).
    pub fn from_bytes(bytes: &[u8]) -> Packet {
        let mut buf = Vec::with_capacity(DEFAULT_HEADROOM + bytes.len() + 256);
        buf.resize(DEFAULT_HEADROOM, 0);
        buf.extend_from_slice(bytes);
        let end = buf.len();
        Packet::in_buffer(buf, DEFAULT_HEADROOM, end, PacketMeta::default())
    }

    /// A packet occupying `buf[start..end]`; the rest of `buf` is head- and tailroom.
    /// Used by the datapath to run a chain on its receive buffer without copying.
    ///
    /// # Panics
    /// If `start > end` or `end > buf.len()`: the datapath's own invariant, not packet input.
    pub fn in_buffer(buf: Vec<u8>, start: usize, end: usize, meta: PacketMeta) -> Packet {
        assert!(
            start <= end && end <= buf.len(),
            "packet bounds outside buffer"
        );
        Packet {
            buf,
            start,
            end,
            meta,
            layout: None,
            modified: false,
            mark: None,
        }
    }

    /// Where the packet sits in its buffer (`start..end`), for the datapath's verdict.
    #[inline]
    pub fn bounds(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    /// Gives the buffer back (to be reused for the next receive).
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// The packet's bytes, from the IP header on.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The packet's bytes, writable. Marks the packet modified (its bytes go back in the
    /// verdict) and forgets the cached layout.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.modified = true;
        self.layout = None;
        &mut self.buf[self.start..self.end]
    }

    /// The packet's length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True for an empty packet (only ever seen with broken input).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// True if a service changed the packet's bytes.
    #[inline]
    pub fn is_modified(&self) -> bool {
        self.modified
    }

    /// True if the kernel copied only part of the packet (copy range smaller than it):
    /// such a packet must not be modified, since the verdict would cut it.
    #[inline]
    pub fn is_partial(&self) -> bool {
        self.meta.orig_len.is_some_and(|l| l as usize > self.len())
    }

    /// Sets the nfmark the verdict gives the packet.
    #[inline]
    pub fn set_mark(&mut self, mark: u32) {
        self.mark = Some(mark);
    }

    /// The nfmark the verdict will set, if a service set one.
    #[inline]
    pub fn verdict_mark(&self) -> Option<u32> {
        self.mark
    }

    /// Sets the packet's length, keeping its start. Growing uses tailroom (or reallocates,
    /// rarely) and zero-fills the new bytes.
    pub fn resize(&mut self, len: usize) {
        let need = self.start + len;
        if need > self.end {
            // The tailroom holds bytes of earlier packets: never let them show through.
            let old = self.buf.len();
            self.buf[self.end..need.min(old)].fill(0);
            if need > old {
                self.buf.resize(need, 0);
            }
        }
        self.end = need;
        self.modified = true;
        self.layout = None;
    }

    /// Opens `n` zeroed bytes at offset `at` (0 = in front of the IP header) and returns them.
    /// Uses headroom when the gap is nearer the front, tailroom otherwise.
    ///
    /// # Panics
    /// If `at > self.len()`.
    pub fn insert(&mut self, at: usize, n: usize) -> &mut [u8] {
        assert!(at <= self.len(), "insert past end of packet");
        if at <= self.len() / 2 && self.start >= n {
            self.buf
                .copy_within(self.start..self.start + at, self.start - n);
            self.start -= n;
        } else {
            if self.end + n > self.buf.len() {
                self.buf.resize(self.end + n, 0);
            }
            self.buf
                .copy_within(self.start + at..self.end, self.start + at + n);
            self.end += n;
        }
        self.modified = true;
        self.layout = None;
        let s = self.start + at;
        let gap = &mut self.buf[s..s + n];
        gap.fill(0);
        gap
    }

    /// Removes `n` bytes at offset `at`.
    ///
    /// # Panics
    /// If `at + n > self.len()`.
    pub fn remove(&mut self, at: usize, n: usize) {
        assert!(at + n <= self.len(), "remove past end of packet");
        if at <= (self.len() - n) / 2 {
            self.buf
                .copy_within(self.start..self.start + at, self.start + n);
            self.start += n;
        } else {
            self.buf
                .copy_within(self.start + at + n..self.end, self.start + at);
            self.end -= n;
        }
        self.modified = true;
        self.layout = None;
    }

    /// The packet's header layout, parsed on first use and cached until it changes.
    #[inline]
    pub fn layout(&mut self) -> Result<Layout, Malformed> {
        if let Some(l) = self.layout {
            return l;
        }
        let l = Layout::parse(self.data(), self.is_partial());
        self.layout = Some(l);
        l
    }

    /// The packet's headers as typed views (the IP header of either version, the
    /// transport header, the 5-tuple: see [`Headers`]), if it is well-formed (also on a
    /// partial copy, whose views stop at the copy).
    #[inline]
    pub fn headers(&mut self) -> Option<Headers<&[u8]>> {
        let l = self.layout().ok()?;
        Some(Headers::new_unchecked(self.data(), l))
    }

    /// The headers, writable. Rewriting fields (addresses, ports, TTL, traffic class,
    /// checksums) keeps the parsed layout; a change of what the layout depends on (the
    /// version, header length, lengths, protocol or fragment fields of the IP header) is
    /// noticed when the view is dropped, and the layout parsed again on next use. Marks
    /// the packet modified.
    #[inline]
    pub fn headers_mut(&mut self) -> Option<HeadersMut<'_>> {
        let l = self.layout().ok()?;
        self.modified = true;
        let data = &mut self.buf[self.start..self.end];
        let shape = shape(data, l.version);
        Some(HeadersMut {
            headers: Headers::new_unchecked(data, l),
            cache: &mut self.layout,
            shape,
        })
    }

    /// The IP header of either version, if the packet is well-formed.
    #[inline]
    pub fn ip(&mut self) -> Option<IpPacket<&[u8]>> {
        let l = self.layout().ok()?;
        Some(IpPacket::new_unchecked(self.data(), l.version))
    }

    /// The packet's addresses, protocol and ports, if it is well-formed.
    #[inline]
    pub fn five_tuple(&mut self) -> Option<FiveTuple> {
        self.headers().map(|h| h.five_tuple())
    }

    /// Replaces the transport (everything from the transport offset of `was`, the
    /// packet's layout before the bytes there changed) with `len` bytes carrying
    /// `protocol`: the packet ends there, and the IP header's lengths, protocol (IPv6: the
    /// fixed header's next header) and checksum say so. Returns the `len` bytes to fill
    /// (new bytes are zero), or `None` for a layout without a transport offset (a later
    /// fragment). How IPComp and ESP transport mode insert and remove themselves.
    #[inline]
    pub fn set_transport(&mut self, was: Layout, len: usize, protocol: u8) -> Option<&mut [u8]> {
        let l4 = was.l4?;
        let total = l4 + len;
        // `resize` marks the packet modified and forgets the layout.
        self.resize(total);
        let d = &mut self.buf[self.start..self.end];
        IpPacket::new_unchecked(&mut *d, was.version).set_len_and_protocol(total, protocol);
        d.get_mut(l4..)
    }

    /// The IPv4 header view, if this is a well-formed IPv4 packet. Also on a partial
    /// copy (copy range): the header is checked, and the view's payload stops at the copy.
    pub fn ipv4(&mut self) -> Option<Ipv4Packet<&[u8]>> {
        let l = self.layout().ok()?;
        (l.version == IpVersion::V4).then(|| Ipv4Packet::new_unchecked(self.data()))
    }

    /// The IPv6 header view, if this is a well-formed IPv6 packet (also on a partial copy).
    pub fn ipv6(&mut self) -> Option<Ipv6Packet<&[u8]>> {
        let l = self.layout().ok()?;
        (l.version == IpVersion::V6).then(|| Ipv6Packet::new_unchecked(self.data()))
    }

    /// The transport header and data (from the L4 offset to the packet's end), if present.
    pub fn l4(&mut self) -> Option<&[u8]> {
        let l = self.layout().ok()?;
        let off = l.l4?;
        self.data().get(off..l.len)
    }

    /// The TCP segment view, if this is TCP with a whole header.
    pub fn tcp(&mut self) -> Option<TcpPacket<&[u8]>> {
        let l = self.layout().ok()?;
        if l.proto != proto::TCP {
            return None;
        }
        TcpPacket::new_checked(self.data().get(l.l4?..l.len)?).ok()
    }

    /// The UDP datagram view, if this is UDP with a whole header. On a partial copy only
    /// the header is checked; the view's payload stops at the copy.
    pub fn udp(&mut self) -> Option<UdpPacket<&[u8]>> {
        let l = self.layout().ok()?;
        if l.proto != proto::UDP {
            return None;
        }
        let b = self.data().get(l.l4?..l.len)?;
        if self.is_partial() {
            return (b.len() >= wire::udp::HEADER_LEN).then(|| UdpPacket::new_unchecked(b));
        }
        UdpPacket::new_checked(b).ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A UDP/IPv4 packet 10.0.1.1:4000 -> 10.0.2.2:5000 with `payload`, checksums filled.
    pub(crate) fn udp4(payload: &[u8]) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut b = vec![
            0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
        ];
        b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        b.extend_from_slice(&4000u16.to_be_bytes());
        b.extend_from_slice(&5000u16.to_be_bytes());
        b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(payload);
        Ipv4Packet::new_checked(&mut b[..]).unwrap().fill_checksum();
        let pseudo = wire::checksum::pseudo_v4(
            Ipv4Addr::new(10, 0, 1, 1),
            Ipv4Addr::new(10, 0, 2, 2),
            17,
            (8 + payload.len()) as u32,
        );
        UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo);
        b
    }

    #[test]
    fn ip_version_names_round_trip() {
        assert_eq!(IpVersion::ALL, [IpVersion::V4, IpVersion::V6]);
        for v in IpVersion::ALL {
            assert_eq!(v.to_string().parse::<IpVersion>(), Ok(v));
        }
        assert_eq!(IpVersion::V6.to_string(), "ipv6");
        let e = "both".parse::<IpVersion>().unwrap_err();
        assert!(e.contains("unknown address family `both`"), "{e}");
        assert!(IpVersion::V4 < IpVersion::V6);
    }

    #[test]
    fn layout_of_udp() {
        let mut p = Packet::from_bytes(&udp4(b"hello"));
        let l = p.layout().unwrap();
        assert_eq!(
            (l.version, l.proto, l.l4, l.len, l.fragment),
            (IpVersion::V4, 17, Some(20), 33, false)
        );
        let u = p.udp().unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.payload()),
            (4000, 5000, &b"hello"[..])
        );
        let pseudo = wire::checksum::pseudo_v4(
            Ipv4Addr::new(10, 0, 1, 1),
            Ipv4Addr::new(10, 0, 2, 2),
            17,
            13,
        );
        assert!(u.verify_checksum(pseudo));
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        let good = udp4(b"0123456789");
        // Every truncation of a valid packet either parses or is an error.
        for n in 0..good.len() {
            let mut p = Packet::from_bytes(&good[..n]);
            assert!(
                p.layout().is_err(),
                "truncated to {n} bytes must be malformed"
            );
            assert!(p.udp().is_none());
        }
        // Bad UDP length.
        let mut b = good.clone();
        b[24..26].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(
            Packet::from_bytes(&b).layout().unwrap_err(),
            Malformed::BadHeaderLen
        );
        // TCP with a 4-byte header.
        let mut b = good.clone();
        b[9] = 6;
        b[2..4].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(
            Packet::from_bytes(&b[..24]).layout().unwrap_err(),
            Malformed::Truncated
        );
        // Every single-byte corruption of the header parses or errors, never panics.
        for i in 0..28 {
            for v in [0u8, 0x0f, 0x46, 0xff] {
                let mut b = good.clone();
                b[i] = v;
                let mut p = Packet::from_bytes(&b);
                let _ = p.layout();
                let _ = p.tcp();
                let _ = p.udp();
            }
        }
    }

    #[test]
    fn partial_copy_is_not_malformed_and_views_work() {
        let good = udp4(&[7u8; 200]);
        let mut p = Packet::from_bytes(&good[..64]);
        p.meta.orig_len = Some(good.len() as u32);
        assert!(p.is_partial());
        assert_eq!(p.layout().unwrap().proto, 17);
        assert_eq!(p.ipv4().unwrap().ttl(), 64);
        assert_eq!(p.ipv4().unwrap().payload().len(), 44);
        let u = p.udp().unwrap();
        assert_eq!((u.dst_port(), u.len(), u.payload().len()), (5000, 208, 36));
    }

    #[test]
    fn partial_copy_with_total_length_below_header_is_malformed() {
        // Found by the `packet` fuzz target: the views of such a packet sliced 20..2.
        let mut b = udp4(&[7u8; 200]);
        b[2..4].copy_from_slice(&2u16.to_be_bytes());
        let mut p = Packet::from_bytes(&b[..64]);
        p.meta.orig_len = Some(b.len() as u32);
        assert_eq!(p.layout().unwrap_err(), Malformed::BadHeaderLen);
        assert!(p.ipv4().is_none() && p.udp().is_none() && p.l4().is_none());
    }

    #[test]
    fn headers_mut_keeps_the_layout_unless_it_changes() {
        let mut p = Packet::from_bytes(&udp4(b"hello"));
        let before = p.layout().unwrap();
        {
            let mut h = p.headers_mut().unwrap();
            h.udp_mut().unwrap().set_dst_port(6000);
            h.ip_mut().set_hop_limit(9);
            h.fill_l4_checksum();
            h.ip_mut().fill_checksum();
        }
        assert!(p.is_modified());
        assert_eq!(
            p.layout,
            Some(Ok(before)),
            "a field rewrite keeps the layout"
        );
        assert_eq!(p.udp().unwrap().dst_port(), 6000);
        let h = p.headers().unwrap();
        assert!(h.udp().unwrap().verify_checksum(h.l4_pseudo_sum().unwrap()));
        if let IpPacket::V4(ip) = p.ip().unwrap() {
            assert!(ip.verify_checksum());
        }
        p.headers_mut()
            .unwrap()
            .ip_mut()
            .set_len_and_protocol(33, 99);
        assert_eq!(p.layout, None, "a protocol change forgets the layout");
        assert_eq!(p.layout().unwrap().proto, 99);
    }

    #[test]
    fn set_transport_rewrites_the_ip_header() {
        let mut p = Packet::from_bytes(&udp4(b"hello"));
        let l = p.layout().unwrap();
        p.set_transport(l, 4, 108)
            .unwrap()
            .copy_from_slice(&[17, 0, 0, 2]);
        let l = p.layout().unwrap();
        assert_eq!((l.proto, l.len, l.l4), (108, 24, Some(20)));
        assert!(p.ipv4().unwrap().verify_checksum());
        assert_eq!(p.five_tuple().unwrap().ports, None);
    }

    #[test]
    fn insert_and_remove_use_headroom_and_tailroom() {
        let orig = udp4(b"payload");
        let mut p = Packet::from_bytes(&orig);
        p.insert(0, 4).copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(&p.data()[..4], &[1, 2, 3, 4]);
        assert_eq!(&p.data()[4..], &orig[..]);
        p.remove(0, 4);
        assert_eq!(p.data(), &orig[..]);
        p.insert(orig.len(), 3).copy_from_slice(&[9, 9, 9]);
        assert_eq!(&p.data()[orig.len()..], &[9, 9, 9]);
        p.remove(orig.len(), 3);
        assert_eq!(p.data(), &orig[..]);
        p.insert(20, 8);
        p.remove(20, 8);
        assert_eq!(p.data(), &orig[..]);
        assert!(p.is_modified());
        p.resize(10);
        assert_eq!(p.data(), &orig[..10]);
        p.resize(12);
        assert_eq!(&p.data()[10..], &[0, 0]);
    }

    #[test]
    fn ct_mark_bits_decode_and_strip() {
        let b = CtMarkBits {
            established: 0x100,
            related: 0x200,
            reply: 0x400,
            tracked: 0x800,
        };
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(b.mask(), 0xf00);
        assert_eq!(b.decode(0x5), (None, 0x5));
        assert_eq!(
            b.decode(0x405),
            (None, 0x5),
            "no tracked bit: unknown state"
        );
        assert_eq!(b.decode(0x805), (Some(CtInfo::NEW), 0x5));
        let ct = |state, reply| Some(CtInfo { state, reply });
        assert_eq!(b.decode(0xd00), (ct(CtState::Established, true), 0));
        assert_eq!(
            b.decode(0xffff_f9ff),
            (ct(CtState::Established, false), 0xffff_f0ff)
        );
        assert_eq!(b.decode(0xa01), (ct(CtState::Related, false), 1));
        assert_eq!(b.decode(0xe00), (ct(CtState::Related, true), 0));
        assert!(CtMarkBits { reply: 0, ..b }.validate().is_err());
        assert!(CtMarkBits { reply: 0x100, ..b }.validate().is_err());
    }

    #[test]
    fn growing_never_shows_old_bytes() {
        let mut buf = vec![0xaa; 64];
        buf[..4].copy_from_slice(&[0x45, 0, 0, 4]);
        let mut p = Packet::in_buffer(buf, 0, 4, PacketMeta::default());
        p.resize(100);
        assert!(p.data()[4..].iter().all(|&b| b == 0));
        let mut buf = vec![0xaa; 64];
        buf[..4].copy_from_slice(&[0x45, 0, 0, 4]);
        let mut p = Packet::in_buffer(buf, 0, 4, PacketMeta::default());
        p.insert(4, 20);
        assert!(p.data()[4..].iter().all(|&b| b == 0));
    }
}
