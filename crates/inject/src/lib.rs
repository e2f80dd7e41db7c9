//! Packets a service sends itself, as a router or host in its place would: ICMP "too big"
//! errors for packets that no longer fit the path, rate-limited and counted ([`TooBig`]).
//! Services emit them into their queue's outbox ([`relay_core::Context::emit`]); the
//! datapath sends them. The packets themselves (these errors, TCP resets, port
//! unreachables) are built by `relay_wire::build`, re-exported as [`build`].
//!
//! Also the box's own addresses ([`LocalAddrs`]), which the datapath checks forwarded
//! packets against (a service never needs them).

/// The packet builders, now in the wire crate (kept here for the code that names them so).
pub use relay_core::wire::build;
mod local;
mod too_big;

pub use local::{LocalAddrs, local_addresses};
pub use too_big::{Answer, TooBig};
