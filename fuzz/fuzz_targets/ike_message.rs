//! The IKEv2 message parser of relayd's IKE daemon (crates/ike `wire`): the header and the
//! payload chain of a datagram, and the same bytes as the decrypted content of an SK
//! payload (first byte: the first inner payload's type), as the endpoint parses them.
//!
//! Input: an IKE message (from the IKE header on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_ike::wire;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = wire::parse_message(data) {
        // Whatever parsed must re-emit and parse to the same payloads (SK, ignored
        // payloads and transform attributes aside: they are not re-emitted).
        let lossy = |p: &wire::Payload| match p {
            wire::Payload::Sk { .. } | wire::Payload::Other(_) => true,
            wire::Payload::Sa(props) => props.iter().any(|q| q.transforms.iter().any(|t| t.unknown_attr)),
            _ => false,
        };
        if !m.payloads.iter().any(lossy) {
            let again = wire::emit_plain(m.header, &m.payloads);
            let m2 = wire::parse_message(&again).expect("re-emitted message parses");
            assert_eq!(m.payloads, m2.payloads);
        }
    }
    if let Some((&first, rest)) = data.split_first() {
        let _ = wire::parse_chain(rest, first, 0);
    }
});
