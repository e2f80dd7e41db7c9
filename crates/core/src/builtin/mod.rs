//! The built-in services, the paper's Fig. 7 in Rust: `accept` (passthrough), `drop`,
//! `dump` (a tcpdump-like line per packet, rate-limited) and `mark` (set the nfmark,
//! optionally repeating the hook). Each is also a worked example of the service contract.

mod dump;
mod mark;

pub use dump::{DumpConfig, format_packet};
pub use mark::MarkConfig;

/// Bytes a header-only service asks for: enough for IPv6 with a few extension headers and
/// a TCP header with options.
pub const HEADER_BYTES: u32 = 192;

use crate::counters::Counters;
use crate::manifest::{FailPolicy, Manifest};
use crate::packet::Packet;
use crate::resources::Resources;
use crate::service::{Action, Context, Service, ServiceConfig, ServiceFactory};
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
            ..Manifest::new()
        };
        Fixed(kind, action, manifest)
    }
}

impl Service for Fixed {
    fn process(&mut self, _pkt: &mut Packet, _cx: &mut Context) -> Action {
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
    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, crate::InvalidConfig> {
        Ok(Arc::new(Fixed::new(
            "accept",
            Action::Accept,
            FailPolicy::Open,
        )))
    }
}

impl ServiceConfig for DropConfig {
    const KIND: &'static str = "drop";
    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, crate::InvalidConfig> {
        // Its point is to stop traffic: with relayd down, the traffic stays stopped.
        Ok(Arc::new(Fixed::new(
            "drop",
            Action::Drop,
            FailPolicy::Closed,
        )))
    }
}

/// Parses a 32-bit value written as an integer or as a "0x..." string (marks and SPIs
/// are usually written in hex). For `#[serde(deserialize_with = "de_u32")]`.
pub fn de_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        N(i64),
        S(String),
    }
    let err = |s: &str| serde::de::Error::custom(format!("{s} is not a 32-bit value"));
    match V::deserialize(d)? {
        V::N(n) => u32::try_from(n).map_err(|_| err(&n.to_string())),
        V::S(s) => {
            let t = s.trim();
            let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u32::from_str_radix(h, 16),
                None => t.parse(),
            };
            r.map_err(|_| err(&format!("\"{s}\"")))
        }
    }
}
