//! The `decompress` service (services/compress) on arbitrary packets: IPComp in IPv4 and
//! IPv6 with any CPI, flags and compressed body, and anything else (which must pass).
//!
//! Input: byte 0 chooses `max_size` (576 + 256 * byte, at most 65531) and, with bit 7 of
//! byte 1, a partial copy cut at byte 2; the rest is the packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::{Action, Context, Counters, Packet, Service, ServiceConfig};
use relay_svc_compress::DecompressConfig;
use relayd_fuzz::Input;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

thread_local! {
    static SERVICES: RefCell<HashMap<usize, Box<dyn Service>>> = RefCell::new(HashMap::new());
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let max_size = (576 + 256 * usize::from(input.byte())).min(65531);
    let ctl = input.byte();
    let cut = input.byte();
    let bytes = input.rest();
    let mut pkt: Packet = relayd_fuzz::packet(bytes, (ctl & 0x80 != 0).then_some(usize::from(cut)));
    let before = pkt.data().to_vec();
    let action = SERVICES.with_borrow_mut(|s| {
        let svc = s.entry(max_size).or_insert_with(|| {
            DecompressConfig { max_size }
                .into_factory("fuzz")
                .expect("a valid max_size")
                .build(&Counters::new(), &relay_core::Resources::new())
        });
        svc.process(&mut pkt, &mut Context::new(0, Instant::now()))
    });
    match action {
        Action::Continue if pkt.is_modified() => {
            assert!(pkt.len() <= max_size, "restored past max_size");
            // What comes out is a packet the rest of the chain can read.
            let mut again = Packet::from_bytes(pkt.data());
            let _ = again.layout();
        }
        Action::Continue => assert_eq!(pkt.data(), &before[..]),
        Action::Drop => {}
        other => panic!("decompress answered {other:?}"),
    }
});
