//! `encrypt` and `decrypt`: ESP (RFC 4303) between two relays, in transport mode (the
//! packet keeps its addresses; what follows the IP header is protected) or tunnel mode (the
//! whole packet is protected inside a new IP header from this relay to its peer). The ESP
//! part is SPI, sequence number, IV, the encrypted payload with its padding, pad length and
//! next header, and the ICV.
//!
//! Both fail closed: a packet `encrypt` cannot protect is dropped, never sent in clear. A
//! packet that would no longer fit the path once encrypted gets "packet too big" back to
//! its sender when it may not be fragmented, as a router in front of a tunnel does, and
//! TCP connections are clamped to an MSS that fits (a rule relayd installs).
//!
//! A tunnel whose outer family differs from the queued packet's (IPv6 sites over an IPv4
//! tunnel, or the reverse) cannot hand its result back by verdict: `encrypt` emits the ESP
//! packet, and `decrypt` forwards the inner packet, into the queue's outbox
//! ([`Context::emit`]), which the datapath sends, and they drop the queued original.
//!
//! A manual SA's state on disk (the sequence reservation, the window's edge) is started by
//! the daemon that runs the service ([`relay_core::Start`] in the manifest) and handed to
//! `build` in its [`relay_core::Resources`]; `build` itself does no I/O. Built without it
//! (`relayd replay`, a benchmark, a fuzzer) a service runs detached: `encrypt` counts from
//! 1 in memory under a key derived from the SA's ([`detached_key`]), so that nothing it
//! makes reuses a sequence number (a GCM nonce) of the live SA under the live key, and
//! `decrypt` keeps its windows in memory, starting empty; nothing is written.

use crate::durable::Persister;
use crate::keys::Cipher;
use crate::live::{Inbound, Outbound};
use crate::state::Registry;
use relay_core::Prefix;
use relay_core::units::de_u32;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

mod decrypt;
mod encrypt;
mod natt;

pub use natt::{Encap, NATT_PORT, UdpEncap};

#[cfg(test)]
pub(crate) use encrypt::jump_sequence;

/// How the packet is wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EspMode {
    /// The packet keeps its IP header; its payload is protected.
    Transport,
    /// The whole packet inside a new IP header from `local` to `remote`.
    Tunnel,
}

fn transport() -> EspMode {
    EspMode::Transport
}

fn de_opt_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    de_u32(d).map(Some)
}

fn default_reserve() -> u64 {
    crate::durable::RESERVE
}

fn default_mtu() -> u16 {
    1500
}

/// `[service.NAME]` with `kind = "encrypt"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptConfig {
    /// transport (default) or tunnel.
    #[serde(default = "transport")]
    pub mode: EspMode,
    /// The cipher suite (manual keys).
    #[serde(default)]
    pub cipher: Option<Cipher>,
    /// The SPI the peer knows this SA by (256 and up; 1-255 are reserved, RFC 4303 2.1)
    /// (manual keys).
    #[serde(default, deserialize_with = "de_opt_u32")]
    pub spi: Option<u32>,
    /// The key file (hex, mode 0600) (manual keys).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Instead of `cipher`, `spi` and `key_file`: the IKE connection whose current
    /// outbound SA encrypts ([`crate::IkeSas`]); without one, packets are dropped.
    #[serde(default)]
    pub ike: Option<String>,
    /// Extended (64-bit) sequence numbers (RFC 4303 2.2.1); the peer's SA must agree
    /// (manual keys; an IKE SA has its own setting).
    #[serde(default)]
    pub esn: bool,
    /// Tunnel mode: this relay's address, the outer source.
    #[serde(default)]
    pub local: Option<IpAddr>,
    /// Tunnel mode: the peer relay's address, the outer destination.
    #[serde(default)]
    pub remote: Option<IpAddr>,
    /// The largest packet the path to the peer carries (default 1500): encrypted packets
    /// are kept within it (MSS clamp, "packet too big" for packets that may not fragment).
    #[serde(default = "default_mtu")]
    pub mtu: u16,
    /// Sequence numbers reserved on disk at a time (default 65536, 16 to 16777216): a
    /// state file write per half of it; a restart after a crash skips at most this many.
    #[serde(default = "default_reserve")]
    pub sequence_reserve: u64,
    /// Where the SA's sequence reservation is kept (default: `$STATE_DIRECTORY`, which
    /// systemd's `StateDirectory=` sets, else /var/lib/relayd). See [`crate::persist`].
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// `"udp"`: ESP inside UDP (RFC 3948) for a path through a NAT; `"none"` (default):
    /// raw ESP (manual keys; an IKE SA brings its own).
    #[serde(default)]
    pub encap: Encap,
    /// With `encap = "udp"`: the peer's port (default 4500).
    #[serde(default)]
    pub encap_port: Option<u16>,
    /// With `encap = "udp"`: this relay's source port (default 4500).
    #[serde(default)]
    pub encap_source_port: Option<u16>,
}

/// One SA of `[[service.NAME.sa]]` of a `decrypt` service.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaConfig {
    /// The SPI.
    #[serde(deserialize_with = "de_u32")]
    pub spi: u32,
    /// The cipher suite.
    pub cipher: Cipher,
    /// The key file.
    pub key_file: PathBuf,
    /// Extended sequence numbers, as the sender's SA.
    #[serde(default)]
    pub esn: bool,
    /// transport (default) or tunnel, as the sender's SA: a packet of the other mode is
    /// dropped, so that a transport SA never decapsulates.
    #[serde(default = "transport")]
    pub mode: EspMode,
    /// The outer source addresses this SA accepts, an address or a prefix: ESP from
    /// anywhere else is dropped (`dropped_unknown_peer`) before any cryptographic work.
    /// Required in tunnel mode (the peer relay's `local`); in transport mode, optional
    /// (the sending site's prefix).
    #[serde(default)]
    pub peer: Option<Prefix>,
}

/// `[service.NAME]` with `kind = "decrypt"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecryptConfig {
    /// Anti-replay window in packets (default 64, at most 4096).
    #[serde(default = "default_window")]
    pub replay_window: u32,
    /// The SAs accepted, by SPI (manual keys).
    #[serde(default)]
    pub sa: Vec<SaConfig>,
    /// IKE connections whose inbound SAs are accepted too ([`crate::IkeSas`]).
    #[serde(default)]
    pub ike: Vec<String>,
    /// transport (default) or tunnel: the mode of the IKE connections' SAs.
    #[serde(default = "transport")]
    pub ike_mode: EspMode,
    /// The outer sources the IKE connections' SAs accept (required with `ike_mode =
    /// "tunnel"`), as `peer` of an SA.
    #[serde(default)]
    pub ike_peer: Option<Prefix>,
    /// Where each SA's window edge is kept (default as `encrypt`'s `state_dir`).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// The UDP port where ESP in UDP (RFC 3948) arrives (default 4500): such datagrams
    /// are opened like raw ESP, for every SA; IKE on it (a zero non-ESP marker) passes on
    /// untouched, NAT keepalives are dropped. Datagrams to other ports pass as not ESP.
    #[serde(default = "default_natt_port")]
    pub encap_port: u16,
}

fn default_natt_port() -> u16 {
    NATT_PORT
}

fn default_window() -> u32 {
    64
}

fn check_spi(spi: u32) -> Result<(), String> {
    if spi < 256 {
        Err(format!(
            "spi = {spi} is reserved (RFC 4303 2.1): use 256 or more"
        ))
    } else {
        Ok(())
    }
}

/// The key a detached SA ([`crate::esp`]) seals with: derived from the SA's, never equal
/// to it, so that its sequence numbers, which no reservation covers, are never the live
/// SA's nonces under the live key.
pub(crate) fn detached_key(cipher: Cipher, key: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut out = Vec::with_capacity(cipher.key_len() + 32);
    let mut block = 0u8;
    while out.len() < cipher.key_len() {
        let mut h = Sha256::new();
        h.update(b"relayd detached ESP SA (replay, tests): never on the wire");
        h.update([block]);
        h.update(key);
        out.extend_from_slice(&h.finalize());
        block = block.wrapping_add(1);
    }
    out.truncate(cipher.key_len());
    out
}

/// What the daemon's start of an `encrypt` service's manual SA hands its `build`: the SA,
/// its first reservation on disk and the state thread keeping the next ones ahead.
pub(crate) struct OutStarted(pub(crate) Arc<Outbound>);

/// What the daemon's start of a `decrypt` service's manual SAs hands its `build`: their
/// edges written and kept by the state thread.
pub(crate) struct InStarted;

/// The live SAs of both directions, kept by the daemon from one configuration to the
/// next ([`Kept`]): an SA the new configuration keeps keeps its state, and is never read
/// again from its file while it lives.
#[derive(Default)]
pub(crate) struct SaStates {
    outbound: Registry<Outbound>,
    inbound: Registry<Inbound>,
    persister: Arc<Persister>,
}

/// Whether the state thread of the SAs kept in `kept` runs (tests: only a start runs it).
#[cfg(test)]
pub(crate) fn state_thread_started(kept: &relay_core::Kept) -> bool {
    kept.get_or_default::<SaStates>().persister.started()
}
