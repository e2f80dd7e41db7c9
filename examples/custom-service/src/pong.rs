//! `pong`: answers ICMP echo requests (ping) to one IPv4 address on behalf of a host that
//! cannot (a service address in maintenance, a host behind a link that is down) and drops
//! the request. A complete relayd service that sends a packet of its own, in one file: it
//! builds the reply and emits it into the queue's outbox ([`Context::emit`]); the datapath
//! sends it after the batch's verdicts, with relayd's stage bits on its mark, and counts
//! what became of it in the service's [`Tally`]. No socket, no privileges: the tests below
//! run it on bytes.

use relay_core::wire::icmpv4::msg_type;
use relay_core::wire::{IcmpPacket, Ipv4Packet, proto};
use relay_core::{
    Action, Context, Counter, Counters, InvalidConfig, Manifest, Packet, Resources, Service,
    ServiceConfig, ServiceFactory, Tally,
};
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// `[service.NAME]` with `kind = "pong"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PongConfig {
    /// The address whose pings are answered.
    pub address: Ipv4Addr,
}

impl ServiceConfig for PongConfig {
    const KIND: &'static str = "pong";

    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        let a = self.address;
        if a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback() {
            return Err(format!("address = {a}: not a host's unicast address").into());
        }
        Ok(Arc::new(Factory {
            address: a,
            // It sends the replies: relayd keeps CAP_NET_RAW for the datapath's raw sockets.
            manifest: Manifest {
                emits: true,
                ..Manifest::new()
            },
        }))
    }
}

/// Shared by the queue threads; says what the service needs from relayd.
struct Factory {
    address: Ipv4Addr,
    manifest: Manifest,
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        PongConfig::KIND
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(Pong {
            address: self.address,
            reply: Vec::with_capacity(1500),
            answered: counters.counter("answered"),
            // replies_sent / replies_failed: what the datapath did with the replies.
            tally: Tally::new(counters, "replies_sent", "replies_failed", "replies_failed"),
        })
    }
}

/// One instance per queue thread; `reply` is its scratch buffer.
struct Pong {
    address: Ipv4Addr,
    reply: Vec<u8>,
    answered: Counter,
    tally: Tally,
}

impl Service for Pong {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        let Some(ip) = pkt.ipv4() else {
            return Action::Continue;
        };
        let is_request = ip.dst_addr() == self.address
            && ip.protocol() == proto::ICMP
            && !ip.is_fragment()
            && IcmpPacket::new_checked(ip.payload())
                .is_ok_and(|m| m.msg_type() == msg_type::ECHO_REQUEST && m.code() == 0);
        if !is_request {
            return Action::Continue;
        }
        let len = ip.packet_len();
        // The reply is the request with its addresses swapped and type "echo reply".
        self.reply.clear();
        self.reply.extend_from_slice(&pkt.data()[..len]);
        let mut ip = Ipv4Packet::new_unchecked(&mut self.reply[..]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_ttl(64);
        ip.fill_checksum();
        let mut icmp = IcmpPacket::new_unchecked(ip.payload_mut());
        icmp.set_msg_type(msg_type::ECHO_REPLY);
        icmp.fill_checksum(0);
        // A refusal (a full outbox) is counted in the tally; the request is dropped anyway.
        if cx.emit(&self.reply, 0, &self.tally).is_ok() {
            self.answered.inc();
        }
        Action::Drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{Icmpv4Repr, IpRepr};
    use std::time::Instant;

    /// An echo request from 192.0.2.1 to `dst`.
    fn ping(dst: Ipv4Addr) -> Vec<u8> {
        let echo = Icmpv4Repr::EchoRequest {
            ident: 7,
            seq_no: 1,
        };
        let body = b"abcdefgh";
        let ip = IpRepr::new(
            [192, 0, 2, 1].into(),
            dst.into(),
            proto::ICMP,
            8 + body.len(),
        )
        .unwrap();
        let mut b = vec![0u8; 20 + 8 + body.len()];
        ip.emit(&mut b);
        b[28..].copy_from_slice(body);
        let mut icmp = IcmpPacket::new_unchecked(&mut b[20..]);
        echo.emit(&mut icmp);
        icmp.fill_checksum(0);
        b
    }

    #[test]
    fn answers_pings_to_its_address_and_nothing_else() {
        let addr = Ipv4Addr::new(198, 51, 100, 7);
        let f = PongConfig { address: addr }.into_factory("p").unwrap();
        let counters = Counters::new();
        let mut svc = f.build(&counters, &Resources::new());
        let mut cx = Context::new(0, Instant::now());

        let request = ping(addr);
        assert_eq!(
            svc.process(&mut Packet::from_bytes(&request), &mut cx),
            Action::Drop
        );
        // Another destination is none of its business.
        let other = ping(Ipv4Addr::new(198, 51, 100, 8));
        assert_eq!(
            svc.process(&mut Packet::from_bytes(&other), &mut cx),
            Action::Continue
        );

        let out: Vec<_> = cx.outbox().iter().collect();
        assert_eq!(out.len(), 1, "one reply");
        assert_eq!(out[0].destination, std::net::IpAddr::from([192, 0, 2, 1]));
        let ip = Ipv4Packet::new_checked(out[0].bytes).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.src_addr(), addr);
        let icmp = IcmpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&icmp),
            Ok(Icmpv4Repr::EchoReply {
                ident: 7,
                seq_no: 1
            })
        );
        assert_eq!(relay_core::wire::checksum::checksum(ip.payload()), 0);
        assert_eq!(&ip.payload()[8..], b"abcdefgh", "the data echoed");

        // The datapath counts what it sent.
        cx.outbox_mut().settle_all_sent();
        let c: std::collections::HashMap<_, _> = counters
            .snapshot()
            .into_iter()
            .map(|(n, _, v)| (n, v))
            .collect();
        assert_eq!((c["answered"], c["replies_sent"]), (1, 1));
    }

    #[test]
    fn refuses_addresses_no_host_has() {
        for bad in ["0.0.0.0", "224.0.0.1", "255.255.255.255", "127.0.0.1"] {
            let cfg = PongConfig {
                address: bad.parse().unwrap(),
            };
            assert!(cfg.into_factory("p").is_err(), "{bad}");
        }
    }
}
