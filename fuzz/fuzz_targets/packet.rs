//! The header views and the packet layout (crates/core: `wire::*`, `Packet::layout` and
//! the views it hands out, the `dump` line), on arbitrary bytes.
//!
//! Input: one control byte, then the packet. Control bit 0 makes the packet a partial
//! copy (the kernel's copy range) cut at a length taken from the next byte; bits 1-2
//! choose an edit (insert, remove, resize) applied afterwards, to check the layout is
//! recomputed and never read stale.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::wire::{
    IcmpPacket, IpcompPacket, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket, checksum,
};
use relay_core::{IpVersion, Packet};
use relayd_fuzz::Input;

/// Reads every field of every view that accepts `b`, the way services do.
fn views(b: &[u8]) {
    if let Ok(ip) = Ipv4Packet::new_checked(b) {
        let _ = (ip.header_len(), ip.total_len(), ip.packet_len(), ip.ident());
        let _ = (
            ip.dont_frag(),
            ip.more_frags(),
            ip.frag_offset(),
            ip.is_fragment(),
        );
        let _ = (ip.ttl(), ip.protocol(), ip.checksum(), ip.verify_checksum());
        let _ = (ip.src_addr(), ip.dst_addr(), ip.payload().len());
    }
    if let Ok(ip) = Ipv6Packet::new_checked(b) {
        let _ = (
            ip.payload_len(),
            ip.packet_len(),
            ip.next_header(),
            ip.hop_limit(),
        );
        let _ = (ip.src_addr(), ip.dst_addr(), ip.upper_layer());
    }
    if let Ok(t) = TcpPacket::new_checked(b) {
        let _ = (t.src_port(), t.dst_port(), t.seq(), t.ack(), t.header_len());
        let _ = (t.flags(), t.window(), t.checksum(), t.payload().len());
        let _ = t.verify_checksum(0);
    }
    if let Ok(u) = UdpPacket::new_checked(b) {
        let _ = (
            u.src_port(),
            u.dst_port(),
            u.len(),
            u.is_empty(),
            u.checksum(),
        );
        let _ = (u.payload().len(), u.verify_checksum(0));
    }
    if let Ok(i) = IcmpPacket::new_checked(b) {
        let _ = (
            i.msg_type(),
            i.code(),
            i.checksum(),
            i.echo_ident(),
            i.echo_seq(),
        );
    }
    if let Ok(c) = IpcompPacket::new_checked(b) {
        let _ = (c.next_header(), c.flags(), c.cpi(), c.payload().len());
    }
    let _ = checksum::checksum(b);
}

/// Everything a service may ask a packet for.
fn inspect(p: &mut Packet) {
    let layout = p.layout();
    if let Ok(l) = layout {
        assert!(l.len <= p.len(), "layout length past the packet");
        if let Some(off) = l.l4 {
            assert!(off <= l.len, "transport offset past the packet");
        }
        assert_eq!(Some(l.version), IpVersion::of(p.data()));
    }
    if let Some(ip) = p.ipv4() {
        let _ = (ip.src_addr(), ip.payload().len(), ip.verify_checksum());
    }
    if let Some(ip) = p.ipv6() {
        let _ = (ip.dst_addr(), ip.upper_layer());
    }
    let _ = p.l4().map(<[u8]>::len);
    if let Some(t) = p.tcp() {
        let _ = (t.flags(), t.payload().len());
    }
    if let Some(u) = p.udp() {
        let _ = (u.dst_port(), u.payload().len());
    }
    let mut line = String::new();
    relay_core::format_packet(&mut line, p);
    // Twice: the second answer comes from the cache and must be the same.
    assert_eq!(layout, p.layout());
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let ctl = input.byte();
    let cut = (ctl & 1 != 0).then(|| usize::from(input.byte()));
    let edit = input.u16() as usize;
    let bytes = input.rest();
    views(bytes);
    if let Some(l4) = bytes.get(20..) {
        views(l4);
    }
    if let Some(l4) = bytes.get(40..) {
        views(l4);
    }
    let mut p = relayd_fuzz::packet(bytes, cut);
    inspect(&mut p);
    let at = edit % (p.len() + 1);
    match (ctl >> 1) & 3 {
        1 => {
            p.insert(at, 8);
        }
        2 if !p.is_empty() => p.remove(at.min(p.len() - 1), 1),
        3 => p.resize(edit % 2048),
        _ => return,
    }
    let fresh = Packet::from_bytes(p.data()).layout();
    if !p.is_partial() {
        assert_eq!(p.layout(), fresh, "stale layout after an edit");
    }
    inspect(&mut p);
});
