//! An in-memory network of two endpoints with a fake clock.
#![allow(dead_code, unreachable_pub)]

use relay_ike::*;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

pub const A: &str = "10.0.0.1";
pub const B: &str = "10.0.0.2";

pub fn conn(
    name: &str,
    local: &str,
    remote: &str,
    initiate: bool,
    ike: &str,
    esp: &str,
    mode: Mode,
) -> ConnConfig {
    let l: IpAddr = local.parse().unwrap();
    let r: IpAddr = remote.parse().unwrap();
    ConnConfig {
        name: name.into(),
        local: l,
        remote: r,
        local_id: Identity::Addr(l),
        remote_id: Identity::Addr(r),
        psk: Secret::new(b"a shared secret of some length".to_vec()),
        ike_proposals: ike.split(',').map(|s| parse_proposal(s).unwrap()).collect(),
        esp_proposals: esp
            .split(',')
            .map(|s| parse_esp_proposal(s).unwrap())
            .collect(),
        local_ts: vec![TrafficSelector::host(l)],
        remote_ts: vec![TrafficSelector::host(r)],
        mode,
        initiate,
        ike_rekey: Duration::from_secs(3600),
        child_rekey: Duration::from_secs(600),
        child_rekey_bytes: None,
        child_rekey_packets: None,
        dpd_delay: Duration::from_secs(30),
        retransmit: Retransmit::default(),
    }
}

pub struct Net {
    pub a: Endpoint,
    pub b: Endpoint,
    pub now: Instant,
    pub drop_to_a: bool,
    pub drop_to_b: bool,
    pub ev_a: Vec<Event>,
    pub ev_b: Vec<Event>,
    /// Every datagram delivered, (to_b, bytes).
    pub wire: Vec<(bool, Vec<u8>)>,
    /// Rewrites the source address of datagrams to b (a NAT in front of a).
    pub nat_a: Option<SocketAddr>,
}

impl Net {
    pub fn new(ca: ConnConfig, cb: ConnConfig) -> Net {
        Net::with_seeds(ca, cb, 1, 2)
    }
    pub fn with_seeds(ca: ConnConfig, cb: ConnConfig, sa: u64, sb: u64) -> Net {
        let now = Instant::now();
        Net {
            a: Endpoint::new(vec![ca], Box::new(SeededRng::new(sa))),
            b: Endpoint::new(vec![cb], Box::new(SeededRng::new(sb))),
            now,
            drop_to_a: false,
            drop_to_b: false,
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            wire: Vec::new(),
            nat_a: None,
        }
    }

    /// Delivers datagrams until both are quiet.
    pub fn run(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit() {
                moved = true;
                if !self.drop_to_b {
                    let mut from = t.local;
                    if let Some(n) = self.nat_a {
                        from = SocketAddr::new(
                            n.ip(),
                            if t.local.port() == 4500 {
                                n.port() + 1
                            } else {
                                n.port()
                            },
                        );
                    }
                    self.wire.push((true, t.payload.clone()));
                    self.b.handle(self.now, t.remote, from, &t.payload);
                }
            }
            while let Some(t) = self.b.poll_transmit() {
                moved = true;
                if !self.drop_to_a {
                    let mut to = t.remote;
                    if let Some(n) = self.nat_a {
                        to = SocketAddr::new(
                            A.parse().unwrap(),
                            if to.port() == n.port() + 1 { 4500 } else { 500 },
                        );
                    }
                    self.wire.push((false, t.payload.clone()));
                    self.a.handle(self.now, to, t.local, &t.payload);
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                self.ev_b.push(e);
            }
            if !moved {
                return;
            }
        }
        panic!("endless exchange");
    }

    /// Advances the clock to now + d, firing timers on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.run();
        loop {
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = t.max(self.now);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                    self.run();
                }
                _ => break,
            }
        }
        self.now = end;
    }

    pub fn children_up(ev: &[Event]) -> Vec<&ChildSa> {
        ev.iter()
            .filter_map(|e| {
                if let Event::ChildUp(c) = e {
                    Some(c)
                } else {
                    None
                }
            })
            .collect()
    }
}

/// The two sides' child SAs pair up: a's outbound key is b's inbound key and vice versa.
pub fn assert_paired(a: &ChildSa, b: &ChildSa) {
    assert_eq!(a.spi_in, b.spi_out);
    assert_eq!(a.spi_out, b.spi_in);
    assert_eq!(a.key_in.bytes(), b.key_out.bytes());
    assert_eq!(a.key_out.bytes(), b.key_in.bytes());
    assert_ne!(a.key_in.bytes(), a.key_out.bytes());
    assert_eq!(a.key_in.len(), a.transform.key_len());
    assert_eq!(a.transform, b.transform);
}
