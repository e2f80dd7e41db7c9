//! `mpls-decap`: at the far edge, check the outer header (IPv4 protocol 137, or UDP to
//! port 6635) and that its source is a configured peer, check the top label is one this
//! edge serves, strip outer IP, UDP and the label stack, and hand the inner packet to
//! routing.
//!
//! Packets that are not MPLS-in-IP/UDP pass untouched (the queue's rule should select only
//! those). MPLS from a source that is not a peer is counted and dropped before anything
//! past the outer header is read: decapsulating for any host would let it hand this edge
//! packets to re-send past the queues and rules the inner packet never met (an IDS on
//! the path, for one). Unknown labels are counted and dropped; a malformed encapsulation (short label
//! stack, bad UDP length or checksum, an inner packet that is neither well-formed IPv4
//! nor IPv6) is counted and dropped. An outer fragment cannot be decapsulated (the label
//! and inner header may be in another fragment): it is counted and dropped; on a decap
//! edge the kernel's defragmentation (any conntrack use, or `nf_defrag_ipv4`) reassembles
//! before the queue sees the packet.
//!
//! An inner packet of the other family than the hook's (IPv6 out of an IPv4 core) cannot
//! leave by verdict: with its hop limit decreased, as forwarding would, it is sent anew
//! from a raw socket marked with relayd's bypass bit, and the outer packet dropped
//! (`reinjected`). One whose hop limit runs out is dropped (`dropped_hop_limit`).

use crate::config::{DecapChecked, DecapConfig};
use crate::lse::{self, Lse, UDP_PORT};
use relay_core::wire::{Ipv4Packet, Ipv6Packet, UdpPacket, checksum, proto, udp};
use relay_core::{
    Action, Context, Counter, Counters, IpVersion, Manifest, Packet, Resources, Service,
    ServiceConfig, ServiceFactory, Tally,
};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The most label stack entries walked before the stack is called malformed.
const MAX_STACK: usize = 8;

/// Why a packet could not be decapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecapError {
    /// Not MPLS-in-IP or MPLS-in-UDP: left alone.
    NotMpls,
    /// MPLS whose outer source is not a configured peer.
    UnknownPeer(Ipv4Addr),
    /// An outer fragment.
    Fragment,
    /// The top label is not in the configured set.
    UnknownLabel(u32),
    /// A broken label stack, UDP header or inner packet.
    Malformed,
}

/// Where the inner packet of an MPLS-in-IP/UDP packet is: `(offset, length, version,
/// top label)`, for MPLS from any source. Pure, for tests and offline tools; the service
/// uses [`locate_inner_from`], which accepts only its peers.
pub fn locate_inner(
    data: &[u8],
    labels: &[u32],
) -> Result<(usize, usize, IpVersion, u32), DecapError> {
    locate(data, None, labels)
}

/// [`locate_inner`] for MPLS whose outer source is one of `peers` (sorted ascending, as
/// `labels` is); MPLS from any other source is [`DecapError::UnknownPeer`], found from
/// the outer IPv4 header (and, for MPLS-in-UDP, the UDP ports) alone.
pub fn locate_inner_from(
    data: &[u8],
    peers: &[Ipv4Addr],
    labels: &[u32],
) -> Result<(usize, usize, IpVersion, u32), DecapError> {
    locate(data, Some(peers), labels)
}

fn locate(
    data: &[u8],
    peers: Option<&[Ipv4Addr]>,
    labels: &[u32],
) -> Result<(usize, usize, IpVersion, u32), DecapError> {
    if data.first().map(|b| b >> 4) != Some(4) {
        return Err(DecapError::NotMpls);
    }
    let ip = Ipv4Packet::new_checked(data).map_err(|_| DecapError::NotMpls)?;
    let hl = ip.header_len();
    let end = ip.packet_len().min(data.len());
    // Called once the outer header says MPLS, before anything else is read.
    let from_peer = || match peers {
        Some(p) if p.binary_search(&ip.src_addr()).is_err() => {
            Err(DecapError::UnknownPeer(ip.src_addr()))
        }
        _ => Ok(()),
    };
    let mut off = match ip.protocol() {
        proto::MPLS => {
            from_peer()?;
            hl
        }
        proto::UDP => {
            if ip.frag_offset() != 0 {
                return Err(DecapError::NotMpls);
            }
            let Some(Ok(u)) = data.get(hl..end).map(UdpPacket::new_checked) else {
                return Err(DecapError::NotMpls);
            };
            if u.dst_port() != UDP_PORT {
                return Err(DecapError::NotMpls);
            }
            from_peer()?;
            if ip.is_fragment() {
                return Err(DecapError::Fragment);
            }
            if (u.len() as usize) != end - hl {
                return Err(DecapError::Malformed);
            }
            let pseudo =
                checksum::pseudo_v4(ip.src_addr(), ip.dst_addr(), proto::UDP, u.len() as u32);
            if !u.verify_checksum(pseudo) {
                return Err(DecapError::Malformed);
            }
            hl + udp::HEADER_LEN
        }
        _ => return Err(DecapError::NotMpls),
    };
    if ip.is_fragment() {
        return Err(DecapError::Fragment);
    }
    let mut top = None;
    for _ in 0..MAX_STACK {
        let e = Lse::new_checked(data.get(off..end).ok_or(DecapError::Malformed)?)
            .map_err(|_| DecapError::Malformed)?;
        let label = e.label();
        off += lse::HEADER_LEN;
        if top.is_none() {
            if labels.binary_search(&label).is_err() {
                return Err(DecapError::UnknownLabel(label));
            }
            top = Some(label);
        }
        if e.bottom() {
            let inner = &data[off..end];
            let (len, v) = match inner.first().map(|b| b >> 4) {
                Some(4) => (
                    Ipv4Packet::new_checked(inner)
                        .map_err(|_| DecapError::Malformed)?
                        .packet_len(),
                    IpVersion::V4,
                ),
                Some(6) => (
                    Ipv6Packet::new_checked(inner)
                        .map_err(|_| DecapError::Malformed)?
                        .packet_len(),
                    IpVersion::V6,
                ),
                _ => return Err(DecapError::Malformed),
            };
            return Ok((off, len, v, top.unwrap_or(label)));
        }
    }
    Err(DecapError::Malformed)
}

struct DecapService {
    checked: Arc<DecapChecked>,
    decapsulated: Counter,
    unknown_peer: Counter,
    passed: Counter,
    unknown: Counter,
    malformed: Counter,
    fragment: Counter,
    /// Sends inner packets of the other family than the hook's.
    resend: Tally,
}

impl Service for DecapService {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        if pkt.is_partial() {
            self.passed.inc();
            return Action::Continue;
        }
        let c = &*self.checked;
        match locate_inner_from(pkt.data(), &c.peers, &c.labels) {
            Ok((off, len, _, _)) => {
                pkt.remove(0, off);
                pkt.resize(len);
                self.decapsulated.inc();
                // Never to this box: refused (`dropped_local_destination`), forwarded
                // anew on INPUT or across families (an IPv4 hook cannot hand back IPv6),
                // else carried on by the verdict.
                cx.pass_inner(pkt, &self.resend)
            }
            Err(DecapError::NotMpls) => {
                self.passed.inc();
                Action::Continue
            }
            Err(DecapError::UnknownPeer(_)) => {
                self.unknown_peer.inc();
                Action::Drop
            }
            Err(DecapError::UnknownLabel(_)) => {
                self.unknown.inc();
                Action::Drop
            }
            Err(DecapError::Fragment) => {
                self.fragment.inc();
                Action::Drop
            }
            Err(DecapError::Malformed) => {
                self.malformed.inc();
                Action::Drop
            }
        }
    }
}

struct DecapFactory {
    checked: Arc<DecapChecked>,
    manifest: Manifest,
}

impl ServiceFactory for DecapFactory {
    fn kind(&self) -> &'static str {
        "mpls-decap"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(DecapService {
            checked: Arc::clone(&self.checked),
            decapsulated: counters.counter("decapsulated"),
            unknown_peer: counters.counter("dropped_unknown_peer"),
            passed: counters.counter("passed_not_mpls"),
            unknown: counters.counter("dropped_unknown_label"),
            malformed: counters.counter("dropped_malformed"),
            fragment: counters.counter("dropped_fragment"),
            resend: Tally::resend(counters),
        })
    }
}

impl ServiceConfig for DecapConfig {
    const KIND: &'static str = "mpls-decap";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        Ok(Arc::new(DecapFactory {
            checked: Arc::new(self.check()?),
            manifest: Manifest {
                // Inner packets forwarded anew where a verdict cannot carry them.
                emits: true,
                rewrites_payload: true,
                ..Manifest::new()
            },
        }))
    }
}
