//! Packets a service sends itself, as a router or host in its place would: ICMP "too big"
//! errors for packets that no longer fit the path ([`TooBig`]), TCP resets and port
//! unreachables ([`build`]), packets whose address family a service changed and which
//! their verdict therefore cannot carry ([`Resender`]), and the raw sockets they leave
//! through ([`RawSender`]).
//!
//! Everything sent carries the mark the caller passes (normally [`Context::bypass_mark`],
//! the stage bits of the sending queue's hook), so relayd's own iptables rules at the hooks
//! the packet has already crossed do not queue it again, while later ones still see it
//! ([`relay_core::StageMark`]).
//! Sockets are opened on first use, on the queue thread that sends, and sends never block:
//! a full socket buffer is an error the caller counts, not a stalled queue.
//!
//! [`Context::bypass_mark`]: relay_core::Context::bypass_mark

pub mod build;
mod local;
mod raw;
mod resend;
mod too_big;

pub use local::{LocalAddrs, forwardable, local_addresses};
pub use raw::{RawSender, SendError};
pub use resend::Resender;
pub use too_big::{Answer, TooBig};
