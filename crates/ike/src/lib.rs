//! IKEv2 (RFC 7296) without I/O: the protocol core that relayd's IKE daemon drives.
//!
//! # Design
//!
//! Like `quinn-proto`, this crate sends and receives nothing and reads no clock (but for
//! the convenience [`Endpoint::status`]; [`Endpoint::status_at`] takes the time). An
//! [`Endpoint`] holds the configured connections ([`ConnConfig`]) and their IKE SAs; its
//! driver (relayd's IKE daemon: tokio UDP sockets on ports 500 and 4500)
//!
//! - feeds every received IKE message to [`Endpoint::handle`] with the current time (on
//!   port 4500 after stripping the 4-byte non-ESP marker),
//! - calls [`Endpoint::handle_timeout`] when [`Endpoint::poll_timeout`] says so
//!   (retransmits, rekeys, dead peer detection),
//! - after each of those calls, drains [`Endpoint::poll_transmit`] (datagrams to send) and
//!   [`Endpoint::poll_event`] (child SAs to install or remove, IKE SAs up or down),
//! - reports the datapath's per-SA volume with [`Endpoint::report_usage`] so child SAs are
//!   rekeyed before their byte or packet limit.
//!
//! The driver applies the events of a call before it sends that call's datagrams: a child
//! SA's inbound half must be in the datapath before the peer can learn of it and use it.
//! A rekeyed child SA comes up ([`Event::ChildUp`] with `replaces`) before the old one goes
//! ([`Event::ChildDown`]); the rekey's initiator sends on the new SA at once, the responder
//! after [`Event::ChildOutbound`] (when the initiator deletes the old SA, so the initiator
//! has the new one), so no packet meets a missing SA.
//!
//! Connections with `initiate` start at the first call that brings the time (normally the
//! driver's first [`Endpoint::handle_timeout`]) and again after their IKE SA goes down,
//! with a backoff of 1 s doubling to 64 s while attempts fail.
//!
//! Everything is deterministic given the inputs and the [`RngSource`], so whole exchanges
//! (initiator against responder, lost and reordered datagrams, rekeys, dead peers) are
//! tested in memory with a fake clock (tests/), and the message parser and the endpoint are
//! fuzzed (fuzz/fuzz_targets/ike_*.rs). The key schedule, AUTH values, child key material
//! (with and without PFS), IKE rekey keys and NAT-D hashes are checked against what two
//! strongSwan 5.9.8 charons logged (tests/data, read by the `crypto` unit tests).
//!
//! # Layout
//!
//! - [`config`]: connections, algorithms, strongSwan proposal syntax.
//! - `wire`: the message format (header, payloads, SA proposals, traffic selectors),
//!   parsed from untrusted bytes without panics and with bounded allocation, and emitted.
//! - `crypto`: PRF, prf+, key derivation, Diffie-Hellman (groups 19 and 31), the SK
//!   payload (AES-GCM-16 and AES-CBC + HMAC-SHA-256-128), PSK authentication.
//! - `sa`: one IKE SA's exchanges (IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA,
//!   INFORMATIONAL), its child SAs, retransmission and message IDs.
//! - [`Endpoint`]: dispatch of messages to IKE SAs, timers, events.
//! - `fuzzing` (hidden): prepared endpoint pairs, sealing with real keys, and the seeds
//!   of the fuzz targets.
//!
//! Not supported (yet): certificates, EAP, IKE fragmentation (RFC 7383), MOBIKE, more
//! than one child SA per IKE SA (beyond rekeys), configuration payloads, window sizes
//! above 1.
//!
//! Supported: PSK authentication, DH groups 19 and 31, AES-GCM-16 and AES-CBC with
//! HMAC-SHA-256-128 for IKE and ESP, PRF HMAC-SHA-256, NAT-T detection, child and IKE SA
//! rekeying, delete, dead peer detection. Window size 1 (one request in flight each way).

pub mod config;
mod crypto;
mod endpoint;
#[doc(hidden)]
pub mod fuzzing;
mod sa;
mod types;
#[doc(hidden)]
pub mod wire;

pub use config::{
    ConnConfig, DhGroup, Encr, EspProposal, EspTransform, Identity, IkeProposal, Integ, Mode, Prf,
    ProposalError, Retransmit, Secret, TrafficSelector, parse_esp_proposal, parse_proposal,
};
pub use endpoint::{Endpoint, SEQ_REKEY_PACKETS};
pub use types::{
    ChildSa, ChildStatus, Counters, Error, Event, IkeSaStatus, IkeState, OsRng, RngSource,
    SeededRng, Transmit,
};
