//! `mpls-encap`: classify a packet to its VCAN and push it into that VCAN's MPLS path,
//! as MPLS-in-IP (RFC 4023) or MPLS-in-UDP (RFC 7510), marking it with the VCAN's tc class.
//!
//! Outer IPv4 header: source `local`, destination the VCAN's `remote`, TTL 64, the inner
//! DSCP and ECN copied (so the core can keep treating the packet by its class), DF copied
//! from an inner IPv4 packet and clear for an inner IPv6 one (the kernel may then fragment
//! the outer packet, and the far edge's defragmentation restores it: IPv6 packets must not
//! be refused for a size the sender was never told about). The label stack entry carries
//! the VCAN's label, TC = DSCP >> 3 (the class selector), S = 1 and the inner TTL / hop
//! limit (RFC 3443 uniform model at ingress).
//!
//! An IPv4 packet with DF that no longer fits `mtu` once encapsulated is dropped and its
//! sender told what fits, ICMP "fragmentation needed" with the MTU less the overhead
//! (RFC 1191), as a router in front of a tunnel does; TCP is also clamped (`clamp_mss`).
//!
//! An IPv6 packet queued from ip6tables cannot leave as the IPv4 packet its encapsulation
//! is (a verdict keeps the family): it is sent anew from a raw IPv4 socket with the VCAN's
//! mark plus relayd's bypass bit, and its original dropped (`reinjected`). The kernel does
//! not fragment such a packet, so one that no longer fits `mtu` gets ICMPv6 "packet too
//! big" instead (RFC 8200 section 5: routers never fragment IPv6).

use crate::classify::{Addr, FlowKey};
use crate::config::{Checked, Encap, EncapConfig, Unclassified, VcanPath};
use crate::lse::{self, LseRepr, UDP_PORT};
use relay_core::wire::{Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr, checksum, ipv4, proto, udp};
use relay_core::{
    Action, Context, Counter, Counters, IpVersion, Manifest, MssClamp, Packet, Resources, Service,
    ServiceConfig, ServiceFactory, Tally,
};
use relay_inject::TooBig;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Bytes the encapsulation adds: outer IPv4 + label (+ UDP).
pub fn overhead(encap: Encap) -> usize {
    ipv4::HEADER_LEN
        + lse::HEADER_LEN
        + match encap {
            Encap::Ip => 0,
            Encap::Udp => udp::HEADER_LEN,
        }
}

/// The UDP source port for a flow (RFC 7510 section 3: from a hash of the inner flow, in
/// the dynamic range 49152-65535, so that ECMP in the core spreads flows, not packets).
pub fn flow_port(k: &FlowKey) -> u16 {
    let fold = |a: &Addr| match *a {
        Addr::V4(x) => x as u64,
        Addr::V6(x) => (x as u64) ^ ((x >> 64) as u64),
    };
    let (s, d) = k.ports.unwrap_or((0, 0));
    let mut h = fold(&k.src).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ fold(&k.dst)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h = (h ^ ((k.proto as u64) << 32 | (s as u64) << 16 | d as u64))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 32;
    0xc000 | (h as u16 & 0x3fff)
}

/// Reads the classification key of a well-formed packet (its 5-tuple: ports of TCP, UDP,
/// SCTP and UDP-Lite, not of a later fragment; and its DSCP) and what the encapsulation
/// copies from it, all from one parse.
pub(crate) fn flow_key(pkt: &mut Packet) -> Option<(FlowKey, Inner)> {
    let h = pkt.headers()?;
    let ip = h.ip();
    let t = h.five_tuple();
    let tos = ip.traffic_class();
    let k = FlowKey {
        dscp: tos >> 2,
        src: Addr::from(t.src),
        dst: Addr::from(t.dst),
        proto: t.proto,
        ports: t.ports,
    };
    let inner = Inner {
        len: h.layout().len,
        ttl: ip.hop_limit(),
        tos,
        // DF copied from IPv4, clear for IPv6 (see the module's docs).
        df: ip.dont_frag().unwrap_or(false),
    };
    Some((k, inner))
}

struct Shared {
    checked: Checked,
    encap: Encap,
    local: Ipv4Addr,
    unclassified: Unclassified,
    mtu: usize,
    udp_checksum: bool,
}

struct EncapCounters {
    encapsulated: Counter,
    unclassified_passed: Counter,
    dropped_unclassified: Counter,
    dropped_too_big: Counter,
    skipped: Counter,
}

struct EncapService {
    shared: Arc<Shared>,
    ident: u16,
    too_big: TooBig,
    /// Sends the encapsulation of packets queued from an IPv6 hook.
    resend: Tally,
    c: EncapCounters,
}

/// What the encapsulation needs to know about the inner packet.
pub(crate) struct Inner {
    /// Its length per its IP header.
    len: usize,
    /// Its TTL or hop limit.
    ttl: u8,
    /// Its TOS byte or traffic class.
    tos: u8,
    /// Its DF bit (IPv4), false for IPv6.
    df: bool,
}

impl Shared {
    /// Writes the outer headers in front of the inner packet.
    fn encapsulate(&self, pkt: &mut Packet, k: &FlowKey, inner: Inner, ident: u16, path: VcanPath) {
        let (s, inner_len, ttl, tos, df) = (self, inner.len, inner.ttl, inner.tos, inner.df);
        if pkt.len() > inner_len {
            pkt.resize(inner_len);
        }
        let over = overhead(s.encap);
        let total = inner_len + over;
        let b = pkt.insert(0, over);
        let protocol = match s.encap {
            Encap::Ip => proto::MPLS,
            Encap::Udp => proto::UDP,
        };
        let mut ip = Ipv4Repr::new(s.local, path.remote, protocol, total - ipv4::HEADER_LEN);
        (ip.tos, ip.ident, ip.dont_frag) = (tos, ident, df);
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut b[..ipv4::HEADER_LEN]));
        let lse_at = over - lse::HEADER_LEN;
        LseRepr {
            label: path.label,
            tc: k.dscp >> 3,
            bottom: true,
            ttl,
        }
        .emit(&mut lse::Lse::new_unchecked(&mut b[lse_at..over]));
        if s.encap == Encap::Udp {
            let ulen = total - ipv4::HEADER_LEN;
            let u = &mut pkt.data_mut()[ipv4::HEADER_LEN..total];
            let mut up = UdpPacket::new_unchecked(u);
            UdpRepr {
                src_port: flow_port(k),
                dst_port: UDP_PORT,
                payload_len: ulen - udp::HEADER_LEN,
            }
            .emit(&mut up);
            if s.udp_checksum {
                up.fill_checksum(checksum::pseudo_v4(
                    s.local,
                    path.remote,
                    proto::UDP,
                    ulen as u32,
                ));
            }
        }
        pkt.set_mark(path.mark);
    }
}

impl Service for EncapService {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        if pkt.is_partial() {
            self.c.skipped.inc();
            return Action::Continue;
        }
        let Some((k, inner)) = flow_key(pkt) else {
            // The chain has already handled malformed packets by policy.
            self.c.skipped.inc();
            return Action::Continue;
        };
        let s = &*self.shared;
        let Some(i) = s.checked.classifier.classify(&k) else {
            return match s.unclassified {
                Unclassified::Pass => {
                    self.c.unclassified_passed.inc();
                    Action::Continue
                }
                Unclassified::Drop => {
                    self.c.dropped_unclassified.inc();
                    Action::Drop
                }
            };
        };
        // An IPv6 hook cannot hand back an IPv4 packet: the encapsulation is sent anew.
        let reinject = !pkt.meta.verdict_carries(IpVersion::V4);
        // The kernel fragments neither a raw socket's packet nor one with DF.
        let df = reinject || inner.df;
        let inner_len = inner.len;
        let new_len = inner_len + overhead(s.encap);
        if df && new_len > s.mtu {
            // A router would not fragment it either: tell the sender what fits.
            let fits = s.mtu - overhead(s.encap);
            self.too_big.emit(&pkt.data()[..inner_len], fits as u16, cx);
            self.c.dropped_too_big.inc();
            return Action::Drop;
        }
        if new_len > 0xffff {
            // The outer total length cannot say it; only arrives from a link with a 64 KiB
            // MTU (loopback), without DF.
            self.c.dropped_too_big.inc();
            return Action::Drop;
        }
        self.ident = self.ident.wrapping_add(1);
        s.encapsulate(pkt, &k, inner, self.ident, s.checked.paths[i]);
        self.c.encapsulated.inc();
        if reinject {
            let _ = cx.emit_packet(pkt, &self.resend);
            return Action::Drop;
        }
        Action::Continue
    }
}

struct EncapFactory {
    shared: Arc<Shared>,
    manifest: Manifest,
}

impl EncapFactory {
    fn new(shared: Shared) -> EncapFactory {
        let room = shared.mtu - overhead(shared.encap);
        let manifest = Manifest {
            // ICMP errors, and encapsulations an IPv6 hook's verdict cannot carry.
            emits: true,
            rewrites_payload: true,
            // The per-VCAN classes its marks select.
            qos: Some(shared.checked.qos.clone()),
            // What still fits once the outer headers are added.
            clamp_mss: Some(MssClamp {
                ipv4: (room - 40) as u16,
                ipv6: (room - 60) as u16,
            }),
            ..Manifest::new()
        };
        EncapFactory {
            shared: Arc::new(shared),
            manifest,
        }
    }
}

impl ServiceFactory for EncapFactory {
    fn kind(&self) -> &'static str {
        "mpls-encap"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(EncapService {
            shared: Arc::clone(&self.shared),
            ident: 0,
            too_big: TooBig::new(TooBig::DEFAULT_RATE, counters),
            resend: Tally::resend(counters),
            c: EncapCounters {
                encapsulated: counters.counter("encapsulated"),
                unclassified_passed: counters.counter("unclassified_passed"),
                dropped_unclassified: counters.counter("dropped_unclassified"),
                dropped_too_big: counters.counter("dropped_too_big"),
                skipped: counters.counter("skipped"),
            },
        })
    }
}

impl ServiceConfig for EncapConfig {
    const KIND: &'static str = "mpls-encap";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        let checked = self.check()?;
        Ok(Arc::new(EncapFactory::new(Shared {
            checked,
            encap: self.encap,
            local: self.local,
            unclassified: self.unclassified,
            mtu: self.mtu as usize,
            udp_checksum: self.udp_checksum,
        })))
    }
}
