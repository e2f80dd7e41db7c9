//! The NFQUEUE message decoder (crates/nfq `netlink.rs`): netlink message framing, the
//! packet message's attributes (packet header, mark, interfaces, capture length, GSO,
//! conntrack info, payload), the packet id of a damaged message, conntrack mark bits;
//! then the packet placed in the datagram buffer as the queue thread places it, and its
//! layout.
//!
//! Input: byte 0 bit 0 decodes with conntrack mark bits configured; the rest is the
//! datagram as received from the kernel.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::CtMarkBits;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, dgram)) = data.split_first() else {
        return;
    };
    let bits = (ctl & 1 != 0).then_some(CtMarkBits {
        established: 0x100,
        related: 0x200,
        reply: 0x400,
        tracked: 0x800,
    });
    let (_id, pkt) = relay_nfq::fuzz_decode_datagram(dgram, bits);
    if let Some(mut pkt) = pkt {
        let (start, end) = pkt.bounds();
        assert!(start <= end && end <= dgram.len());
        let _ = pkt.layout();
        let _ = pkt.is_partial();
        let mut line = String::new();
        relay_core::format_packet(&mut line, &mut pkt);
    }
});
