//! MPLS decapsulation (services/mpls `mpls-decap` and `locate_inner`) on arbitrary
//! packets: MPLS-in-IP (protocol 137) and MPLS-in-UDP (port 6635) outer headers, peer
//! check, label stacks, and inner IPv4/IPv6 packets.
//!
//! The service serves labels 16, 100, 1000 and 1048575 from peer 192.0.2.1 (and
//! 10.0.1.1). Input: the whole outer packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::{Action, Context, Counters, IpVersion, Packet, Service, ServiceConfig};
use relay_svc_mpls::{DecapConfig, locate_inner};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

const LABELS: [u32; 4] = [16, 100, 1000, 1_048_575];

fn decap() -> &'static Mutex<Box<dyn Service>> {
    static D: OnceLock<Mutex<Box<dyn Service>>> = OnceLock::new();
    D.get_or_init(|| {
        let cfg: DecapConfig = toml::from_str(
            "labels = [16, 100, 1000, 1048575]\npeers = [\"192.0.2.1\", \"10.0.1.1\"]",
        )
        .expect("the decap configuration parses");
        Mutex::new(
            cfg.into_factory("fuzz")
                .expect("the decap configuration is valid")
                .build(&Counters::new(), &relay_core::Resources::new()),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok((off, len, v, label)) = locate_inner(data, &LABELS) {
        assert!(off + len <= data.len(), "inner packet past the end");
        assert!(LABELS.contains(&label));
        assert_eq!(IpVersion::of(&data[off..]), Some(v));
    }
    let mut pkt = Packet::from_bytes(data);
    let mut d = decap().lock().unwrap_or_else(|e| e.into_inner());
    match d.process(&mut pkt, &mut Context::new(0, Instant::now())) {
        Action::Continue if pkt.is_modified() => {
            // What is handed to routing is one whole IPv4 or IPv6 packet.
            assert!(
                IpVersion::of(pkt.data()).is_some(),
                "inner packet is not IP"
            );
        }
        Action::Continue => assert_eq!(pkt.data(), data, "passed packet changed"),
        _ => {}
    }
});
