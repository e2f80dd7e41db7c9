//! relayd's built-in services, the paper's Fig. 7 in Rust: `accept` (passthrough), `drop`,
//! `dump` (a tcpdump-like line per packet, rate-limited) and `mark` (set the nfmark,
//! optionally repeating the hook). Each is also a worked example of the service contract.

mod dump;
mod mark;

pub use dump::DumpConfig;
pub use mark::MarkConfig;

use relay_core::{
    Action, Context, Counters, FailPolicy, InvalidConfig, Manifest, Offload, OffloadReason, Packet,
    Resources, Service, ServiceConfig, ServiceFactory,
};
use serde::Deserialize;
use std::sync::Arc;

/// `accept`: passes every packet unchanged (ends the chain with an accept).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptConfig {}

/// `drop`: drops every packet it sees. Put a `match` on the queue to choose which. Fails
/// closed: when relayd is down, matching traffic stays dropped.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropConfig {}

/// A service that gives every packet the same answer, and its own factory.
struct Fixed(&'static str, Action, Manifest);

impl Fixed {
    fn new(kind: &'static str, action: Action, fail_policy: FailPolicy) -> Fixed {
        // It reads nothing of the packet: the kernel copies none of it.
        let manifest = Manifest {
            fail_policy,
            needs_bytes: Some(0),
            // `accept`'s answer never changes: it votes to offload every flow.
            offloads: matches!(action, Action::Accept),
            ..Manifest::new()
        };
        Fixed(kind, action, manifest)
    }
}

impl Service for Fixed {
    fn process(&mut self, _pkt: &mut Packet, cx: &mut Context) -> Action {
        if matches!(self.1, Action::Accept) {
            // Every later packet of the flow, either way, gets the same accept.
            cx.offload(Offload::both(OffloadReason::Decided));
        }
        self.1
    }
}

impl ServiceFactory for Fixed {
    fn kind(&self) -> &'static str {
        self.0
    }
    fn manifest(&self) -> &Manifest {
        &self.2
    }
    fn build(&self, _counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(Fixed(self.0, self.1, Manifest::new()))
    }
}

impl ServiceConfig for AcceptConfig {
    const KIND: &'static str = "accept";
    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        Ok(Arc::new(Fixed::new(
            "accept",
            Action::Accept,
            FailPolicy::Open,
        )))
    }
}

impl ServiceConfig for DropConfig {
    const KIND: &'static str = "drop";
    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        // Its point is to stop traffic: with relayd down, the traffic stays stopped.
        Ok(Arc::new(Fixed::new(
            "drop",
            Action::Drop,
            FailPolicy::Closed,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::{Chain, ChainSettings, Counter, Hook, QueueCounters, StageMark, Verdict};
    use std::time::Instant;

    /// A UDP/IPv4 packet 10.0.0.1:1000 -> 10.0.0.2:2000.
    fn udp() -> Packet {
        let mut b = vec![
            0x45, 0, 0, 29, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        b.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0, 0, 9, 0, 0, b'x']);
        Packet::from_bytes(&b)
    }

    fn run(kinds: &[Arc<dyn ServiceFactory>]) -> relay_core::Decision {
        let mut chain = Chain::new(ChainSettings {
            malformed: Verdict::Accept,
            hook: Hook::Forward,
            stages: StageMark::DEFAULT,
        });
        for f in kinds {
            assert!(f.manifest().offloads || f.kind() == "drop", "{}", f.kind());
            chain.push(
                f.kind(),
                f.build(&Counters::new(), &Resources::new()),
                Counter::new(),
            );
        }
        let mut cx = Context::new(0, Instant::now());
        chain.run(&mut udp(), &mut cx, &QueueCounters::default())
    }

    #[test]
    fn accept_and_mark_offload_the_flow_and_drop_never_does() {
        let accept = AcceptConfig {}.into_factory("a").unwrap();
        let both = Some(Offload::both(OffloadReason::Decided));
        assert_eq!(run(std::slice::from_ref(&accept)).offload, both);
        let mark = MarkConfig {
            mark: 0x20,
            mask: 0xff,
            repeat: false,
        }
        .into_factory("m")
        .unwrap();
        let d = run(&[mark, accept]);
        assert_eq!((d.offload, d.mark), (both, Some(0x20)));
        let drop = DropConfig {}.into_factory("d").unwrap();
        assert!(!drop.manifest().offloads);
        assert_eq!(run(&[drop]).offload, None);
        let repeat = MarkConfig {
            mark: 1,
            mask: 1,
            repeat: true,
        }
        .into_factory("r")
        .unwrap();
        assert!(!repeat.manifest().offloads, "a repeat is not offloaded");
    }
}
