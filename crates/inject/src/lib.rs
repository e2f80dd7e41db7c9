//! Packets a service sends itself, as a router or host in its place would: ICMP "too big"
//! errors for packets that no longer fit the path ([`TooBig`]) and TCP resets and port
//! unreachables ([`build`]). Services emit them into their queue's outbox
//! ([`relay_core::Context::emit`]); the datapath sends them.
//!
//! Also the box's own addresses ([`LocalAddrs`]), which the datapath checks forwarded
//! packets against (a service never needs them).

pub mod build;
mod local;
mod too_big;

pub use local::{LocalAddrs, local_addresses};
pub use too_big::{Answer, TooBig};
