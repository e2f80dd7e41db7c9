//! What an [`Endpoint`](crate::Endpoint) hands its driver: datagrams to send, events (SAs
//! to install or remove), status, counters; and the randomness it draws from.

use crate::config::{EspTransform, Mode, Secret, TrafficSelector};
use std::net::SocketAddr;
use std::time::Duration;

/// One IKE message to send. On port 4500 the driver prepends the 4-byte non-ESP marker
/// (RFC 3948 2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Our address and port to send from.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
    /// The IKE message, from the IKE header on.
    pub payload: Vec<u8>,
}

/// A child SA pair to install in the datapath.
#[derive(Debug, Clone)]
pub struct ChildSa {
    /// The connection.
    pub conn: String,
    /// SPI of inbound ESP packets (chosen by us).
    pub spi_in: u32,
    /// SPI of outbound ESP packets (chosen by the peer).
    pub spi_out: u32,
    /// The suite.
    pub transform: EspTransform,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Inbound key: GCM: AES key ‖ 4-byte salt; CBC: AES key ‖ HMAC-SHA-256 key (32 bytes),
    /// as relayd's key files.
    pub key_in: Secret,
    /// Outbound key, same layout.
    pub key_out: Secret,
    /// Transport or tunnel mode.
    pub mode: Mode,
    /// Negotiated local traffic selectors (narrowed).
    pub local_ts: Vec<TrafficSelector>,
    /// Negotiated remote traffic selectors (narrowed).
    pub remote_ts: Vec<TrafficSelector>,
    /// UDP encapsulation (RFC 3948) if a NAT was detected: local and remote address.
    pub encap: Option<(SocketAddr, SocketAddr)>,
    /// If this SA rekeys another, the old SA's inbound SPI: keep the old inbound SA until
    /// its [`Event::ChildDown`].
    pub replaces: Option<u32>,
    /// Whether to send on this SA now. False only for the responder of a rekey: the peer
    /// may not have installed the SA's inbound half yet, so keep sending on the old SA
    /// (`replaces`) until [`Event::ChildOutbound`] for this SA, which comes before the old
    /// SA's `ChildDown` (as strongSwan does).
    pub outbound: bool,
}

/// Something the driver must act on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// Install this child SA (see [`ChildSa::replaces`]).
    ChildUp(ChildSa),
    /// Start sending on this child SA (installed earlier with `outbound: false`).
    ChildOutbound {
        /// The connection.
        conn: String,
        /// Its inbound SPI.
        spi_in: u32,
        /// Its outbound SPI.
        spi_out: u32,
    },
    /// Remove this child SA.
    ChildDown {
        /// The connection.
        conn: String,
        /// Inbound SPI.
        spi_in: u32,
        /// Outbound SPI.
        spi_out: u32,
    },
    /// An IKE SA is established (or was rekeyed) with this peer address.
    IkeUp {
        /// The connection.
        conn: String,
        /// The peer's address and port.
        remote: SocketAddr,
    },
    /// The connection's IKE SA is gone (deleted, failed, timed out); its child SAs went
    /// down before this event.
    IkeDown {
        /// The connection.
        conn: String,
        /// Why, for logs.
        reason: String,
    },
}

/// The state of an IKE SA, for status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IkeState {
    /// IKE_SA_INIT sent or received, keys not yet authenticated.
    Connecting,
    /// IKE_AUTH exchange under way.
    Authenticating,
    /// Authenticated; child SAs may exist.
    Established,
    /// Being rekeyed (a new IKE SA is being made).
    Rekeying,
    /// Being deleted.
    Deleting,
}

/// A child SA in the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildStatus {
    /// Inbound SPI.
    pub spi_in: u32,
    /// Outbound SPI.
    pub spi_out: u32,
    /// Time since installed.
    pub age: Duration,
    /// Rekeys of this child SA's line (carried over from the SA it replaced).
    pub rekeys: u32,
    /// The suite.
    pub transform: EspTransform,
}

/// One IKE SA in the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaStatus {
    /// The connection.
    pub conn: String,
    /// Its state.
    pub state: IkeState,
    /// Whether we were the original initiator.
    pub initiator: bool,
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI.
    pub spi_r: u64,
    /// Our address.
    pub local: SocketAddr,
    /// The peer's address.
    pub remote: SocketAddr,
    /// Time since created.
    pub age: Duration,
    /// IKE rekeys of this line.
    pub rekeys: u32,
    /// Child SAs.
    pub children: Vec<ChildStatus>,
    /// Failed attempts of the connection since its last success.
    pub failures: u32,
    /// Whether a NAT was detected (UDP encapsulation).
    pub nat: bool,
}

/// Counters of the endpoint, read by the driver for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// IKE messages received.
    pub msgs_in: u64,
    /// IKE messages sent (retransmits included).
    pub msgs_out: u64,
    /// Retransmitted requests and responses.
    pub retransmits: u64,
    /// Messages that did not parse.
    pub invalid_malformed: u64,
    /// Messages for no known IKE SA.
    pub invalid_unknown_spi: u64,
    /// Messages whose SK payload did not verify or decrypt.
    pub invalid_integrity: u64,
    /// Messages with an unexpected message ID (not the next request nor a retransmit).
    pub invalid_msg_id: u64,
    /// Messages not fitting the exchange's state.
    pub invalid_state: u64,
    /// Messages with an unsupported critical payload.
    pub invalid_critical: u64,
    /// Authentication failures (either side's AUTH).
    pub auth_failures: u64,
    /// Proposals refused (NO_PROPOSAL_CHOSEN sent or received).
    pub no_proposal: u64,
    /// Traffic selectors refused.
    pub ts_unacceptable: u64,
    /// IKE SAs established (first ones and rekeys).
    pub ike_up: u64,
    /// Child SAs established (first ones and rekeys).
    pub child_up: u64,
    /// Child SA rekeys completed.
    pub child_rekeys: u64,
    /// IKE SA rekeys completed.
    pub ike_rekeys: u64,
    /// IKE SAs given up after retransmits.
    pub timeouts: u64,
    /// COOKIE notifies sent (responder under load).
    pub cookies_sent: u64,
    /// IKE_SA_INIT requests dropped because too many SAs were half-open.
    pub dropped_half_open: u64,
}

/// Errors of [`Endpoint`](crate::Endpoint)'s commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No connection of that name.
    #[error("no connection named {0:?}")]
    UnknownConn(String),
    /// The connection has an IKE SA already (or one under way).
    #[error("connection {0:?} is already up or connecting")]
    AlreadyUp(String),
    /// The configuration cannot work.
    #[error("connection {conn:?}: {problem}")]
    BadConfig {
        /// The connection.
        conn: String,
        /// What is wrong.
        problem: String,
    },
}

/// A source of random bytes (SPIs, nonces, DH secrets, IVs). [`OsRng`] in production; a
/// seeded one in tests for reproducible runs.
pub trait RngSource: Send {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
}

/// The operating system's generator (getrandom).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsRng;

impl RngSource for OsRng {
    fn fill(&mut self, buf: &mut [u8]) {
        // A failing system generator leaves no safe way on; getrandom only fails before the
        // kernel's pool is ready, and keys must not come from anything weaker.
        getrandom::fill(buf).expect("the system random generator failed");
    }
}

/// A deterministic generator for tests and fuzzing (SHA-256 in counter mode over a seed):
/// never use it for real keys.
#[derive(Debug, Clone)]
pub struct SeededRng {
    seed: u64,
    counter: u64,
}

impl SeededRng {
    /// A generator whose output depends only on `seed`.
    pub fn new(seed: u64) -> SeededRng {
        SeededRng { seed, counter: 0 }
    }
}

impl RngSource for SeededRng {
    fn fill(&mut self, buf: &mut [u8]) {
        use sha2::Digest;
        for chunk in buf.chunks_mut(32) {
            let mut h = sha2::Sha256::new();
            h.update(self.seed.to_be_bytes());
            h.update(self.counter.to_be_bytes());
            self.counter += 1;
            let out = h.finalize();
            chunk.copy_from_slice(&out[..chunk.len()]);
        }
    }
}
