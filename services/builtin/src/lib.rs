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
            // Its answer never changes, so an accepting one needs no more of any flow.
            offloads: action == Action::Accept,
            ..Manifest::new()
        };
        Fixed(kind, action, manifest)
    }
}

impl Service for Fixed {
    fn process(&mut self, _pkt: &mut Packet, cx: &mut Context) -> Action {
        if self.1 == Action::Accept {
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
