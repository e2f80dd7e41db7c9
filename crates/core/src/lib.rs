//! relayd core: the packet a service sees (with typed views of its headers from the
//! relay-wire crate, re-exported as [`wire`]), the [`Service`] contract, chains of
//! services, the outbox for packets services send and counters; the vocabulary a service's
//! manifest and configuration use (hooks and stage marks, tc plans, interface names,
//! units). The built-in services are in services/builtin (`relay-svc-builtin`).
//! No I/O: everything here can be driven from tests by feeding bytes and checking bytes
//! and verdicts.
//!
//! Writing a service takes one small file: a serde config implementing [`ServiceConfig`],
//! a [`ServiceFactory`] that declares what the service needs from the daemon in a
//! [`Manifest`] and builds one instance per queue thread, and the per-packet
//! [`Service::process`]. See services/builtin for four worked examples.

pub mod chain;
pub mod counters;
pub mod describe;
pub mod hook;
pub mod ifname;
pub mod manifest;
pub mod offload;
pub mod outbox;
pub mod packet;
pub mod prefix;
pub mod qos;
pub mod ratelimit;
pub mod resources;
pub mod service;
pub mod units;
pub use relay_wire as wire;

pub use chain::{Chain, ChainSettings, Decision, Verdict};
pub use counters::{Counter, CounterKind, Counters, OffloadCounters, QueueCounters};
pub use describe::format_packet;
pub use hook::{Hook, StageMark};
pub use manifest::{
    Capability, FailPolicy, LogFile, Manifest, MssClamp, ProxyDiversion, Start, Started,
};
pub use offload::{Offload, OffloadReason, OffloadScope};
pub use outbox::{EmitError, Emitted, Outbox, Route, Tally};
pub use packet::{
    Checksum, CtInfo, CtMarkBits, CtState, HeadersMut, IpVersion, Layout, Packet, PacketMeta,
};
pub use prefix::Prefix;
pub use qos::{QosClass, QosPlan};
pub use resources::{Clock, Resources};
pub use service::{Action, Context, InvalidConfig, Kept, Service, ServiceConfig, ServiceFactory};
