//! `ttl-guard`: drops packets whose TTL (IPv4) or hop limit (IPv6) is below a floor, the
//! way a router protects a service behind it from traceroute-style probing. A complete
//! relayd service in one file: its configuration, its factory, and its per-packet code.

pub mod pong;
pub mod port_class;

use relay_core::{
    Action, Context, Counter, Counters, IpVersion, Manifest, Packet, Resources, Service,
    ServiceConfig, ServiceFactory,
};
use serde::Deserialize;
use std::sync::Arc;

/// `[service.NAME]` with `kind = "ttl-guard"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlGuardConfig {
    /// Packets arriving with a TTL / hop limit below this are dropped.
    pub min_ttl: u8,
}

impl ServiceConfig for TtlGuardConfig {
    const KIND: &'static str = "ttl-guard";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if self.min_ttl == 0 {
            return Err("min_ttl = 0 would drop nothing; remove the service instead".into());
        }
        Ok(Arc::new(Factory {
            min_ttl: self.min_ttl,
            // Only the IP header is read: the queue need not copy whole packets.
            manifest: Manifest {
                needs_bytes: Some(40),
                ..Manifest::new()
            },
        }))
    }
}

/// Shared by the queue threads; says what the service needs from relayd.
struct Factory {
    min_ttl: u8,
    manifest: Manifest,
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        TtlGuardConfig::KIND
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(TtlGuard {
            min_ttl: self.min_ttl,
            dropped: counters.counter("dropped_low_ttl"),
        })
    }
}

/// One instance per queue thread.
struct TtlGuard {
    min_ttl: u8,
    dropped: Counter,
}

impl Service for TtlGuard {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        // The chain has already checked the IP header, so the layout is there.
        let ttl = match pkt.layout().map(|l| l.version) {
            Ok(IpVersion::V4) => pkt.ipv4().map(|p| p.ttl()),
            Ok(IpVersion::V6) => pkt.ipv6().map(|p| p.hop_limit()),
            Err(_) => None,
        };
        match ttl {
            Some(t) if t < self.min_ttl => {
                self.dropped.inc();
                Action::Drop
            }
            _ => Action::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn ipv4_with_ttl(ttl: u8) -> Vec<u8> {
        // Protocol 253 (RFC 3692 experiment): no transport header to check.
        vec![
            0x45, 0, 0, 20, 0, 0, 0, 0, ttl, 253, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]
    }

    #[test]
    fn drops_below_the_floor_and_counts() {
        let f = TtlGuardConfig { min_ttl: 5 }.into_factory("g").unwrap();
        let counters = Counters::new();
        let mut svc = f.build(&counters, &Resources::new());
        let mut cx = Context::new(0, Instant::now());
        assert_eq!(
            svc.process(&mut Packet::from_bytes(&ipv4_with_ttl(4)), &mut cx),
            Action::Drop
        );
        assert_eq!(
            svc.process(&mut Packet::from_bytes(&ipv4_with_ttl(5)), &mut cx),
            Action::Continue
        );
        assert_eq!(counters.snapshot()[0].2, 1);
        assert!(TtlGuardConfig { min_ttl: 0 }.into_factory("g").is_err());
    }
}
