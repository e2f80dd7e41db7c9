//! The capture reader behind `relayd replay` (daemon/relayd `replay::Capture`): pcap in
//! both byte orders and time resolutions, pcapng blocks and interface options, every
//! link type relayd strips (Ethernet with VLAN tags, Linux SLL and SLL2, raw IP, BSD
//! loopback, PPP, Cisco HDLC), snap lengths; then each IP packet through the replay's
//! flow tracker, as `relayd replay` does before running the chain.
//!
//! Input: the capture file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::Packet;
use relayd::replay::{Capture, FlowTracker};

/// Records read per input at most: enough for the seeds, bounded for speed.
const MAX_RECORDS: usize = 256;

fuzz_target!(|data: &[u8]| {
    let Some(magic) = data.get(..4) else {
        return;
    };
    let magic: [u8; 4] = magic.try_into().expect("four bytes");
    let Ok(mut capture) = Capture::new(std::io::Cursor::new(data), magic) else {
        return;
    };
    let mut flows = FlowTracker::default();
    for _ in 0..MAX_RECORDS {
        let Some(rec) = capture.next_record() else {
            break;
        };
        let Ok(rec) = rec else {
            continue;
        };
        let Some(ip) = rec.ip else {
            continue;
        };
        let mut pkt = Packet::from_bytes(&ip);
        pkt.meta.orig_len = rec.ip_orig_len;
        let _ = flows.classify(&mut pkt, rec.ts);
        let _ = pkt.layout();
    }
    let _ = flows.len();
});
