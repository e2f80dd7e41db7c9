//! Packets a service sends itself, as a router or host in its place would: ICMP "too big"
//! errors for packets that no longer fit the path ([`TooBig`]) and TCP resets and port
//! unreachables ([`build`]). Services emit them into their queue's outbox
//! ([`relay_core::Context::emit`]); the datapath sends them.
//!
//! Also the raw sockets relayd sends through ([`RawSender`]) and the box's own addresses
//! ([`LocalAddrs`]), used by the datapath, never by a service.

pub mod build;
mod local;
mod raw;
mod too_big;

pub use local::{LocalAddrs, local_addresses};
pub use raw::{RawSender, SendError};
pub use relay_core::outbox::forwardable;
pub use too_big::{Answer, TooBig};
