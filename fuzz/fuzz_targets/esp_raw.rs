//! ESP open (services/crypto `decrypt`) on arbitrary bytes: SPI lookup, sequence and
//! replay window, length checks and the ICV check of each cipher, without the key. The
//! seeds are real ESP packets sealed with the fixed keys (see `esp_sealed`), so mutations
//! start from packets whose SPI, lengths and ICV are right.
//!
//! Input: byte 0 chooses the framing: 0-1 the rest is the ESP part after an IPv4 header,
//! 2 after an IPv6 header, 3 the rest is the whole IP packet; bit 2 puts the ESP part of
//! 0-2 in a UDP datagram to the NAT-T port 4500 (RFC 3948: ESP in UDP, or with a zero
//! marker IKE, or a keepalive), from source port byte 1 + 4400; bit 7 makes it a partial
//! copy cut at byte 1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::wire::proto;
use relay_core::{Context, Counters, Service, ServiceConfig};
use relayd_fuzz::Input;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn decrypt() -> &'static Mutex<Box<dyn Service>> {
    static D: OnceLock<Mutex<Box<dyn Service>>> = OnceLock::new();
    D.get_or_init(|| {
        Mutex::new(
            relayd_fuzz::decrypt_config()
                .into_factory("fuzz")
                .expect("the fuzz SAs load")
                .build(&Counters::new(), &relay_core::Resources::new()),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let ctl = input.byte();
    let cut = input.byte();
    let rest = input.rest();
    let (s6, d6) = relayd_fuzz::v6_pair();
    let natt;
    let (rest, carrier) = if ctl & 4 != 0 && ctl & 3 != 3 {
        // The UDP header of RFC 3948; its length follows what comes after it.
        let mut u = (4400 + u16::from(cut)).to_be_bytes().to_vec();
        u.extend_from_slice(&4500u16.to_be_bytes());
        u.extend_from_slice(&((8 + rest.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(rest);
        natt = u;
        (&natt[..], proto::UDP)
    } else {
        (rest, proto::ESP)
    };
    let bytes = match ctl & 3 {
        0 | 1 => {
            let mut b = relayd_fuzz::ipv4_header(
                relayd_fuzz::CLIENT,
                relayd_fuzz::SERVER,
                carrier,
                rest.len(),
            );
            b.extend_from_slice(rest);
            b
        }
        2 => {
            let mut b = relayd_fuzz::ipv6_header(s6, d6, carrier, rest.len());
            b.extend_from_slice(rest);
            b
        }
        _ => rest.to_vec(),
    };
    let mut pkt = relayd_fuzz::packet(&bytes, (ctl & 0x80 != 0).then_some(usize::from(cut)));
    let mut d = decrypt().lock().unwrap_or_else(|e| e.into_inner());
    let _ = d.process(&mut pkt, &mut Context::new(0, Instant::now()));
});
