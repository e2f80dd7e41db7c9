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

use crate::keys::{Cipher, ICV_LEN, load_key};
use crate::sa::SaCrypto;
use crate::state::{Registry, SaId};
use crate::window::{Replay, ReplayWindow};
use relay_core::Prefix;
use relay_core::builtin::de_u32;
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{
    EspPacket, EspRepr, IpRepr, Ipv4Packet, Ipv6Packet, esp, fix_ip_header, ipv4, ipv6, proto, tcp,
};
use relay_core::{
    Action, Context, Counter, Counters, FailPolicy, InvalidConfig, IpVersion, Kept, MssClamp,
    Packet, Service, ServiceConfig, ServiceFactory, Tally,
};
use relay_inject::TooBig;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    /// The cipher suite.
    pub cipher: Cipher,
    /// The SPI the peer knows this SA by (256 and up; 1-255 are reserved, RFC 4303 2.1).
    #[serde(deserialize_with = "de_u32")]
    pub spi: u32,
    /// The key file (hex, mode 0600).
    pub key_file: PathBuf,
    /// Extended (64-bit) sequence numbers (RFC 4303 2.2.1); the peer's SA must agree.
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
    /// The SAs accepted, by SPI.
    pub sa: Vec<SaConfig>,
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

/// An outbound SA: keys and the sequence counter, shared by the queue threads of a range
/// (so no sequence number, and no GCM IV, repeats) and kept across reloads.
struct Outbound {
    spi: u32,
    crypto: SaCrypto,
    esn: bool,
    seq: AtomicU64,
}

/// An inbound SA: keys and the replay window, shared and kept the same way.
struct Inbound {
    spi: u32,
    crypto: SaCrypto,
    esn: bool,
    window: Mutex<ReplayWindow>,
}

/// The live SAs of both directions, kept by the daemon from one configuration to the
/// next ([`Kept`]): an SA the new configuration keeps keeps its state.
#[derive(Default)]
pub(crate) struct SaStates {
    outbound: Registry<Outbound>,
    inbound: Registry<Inbound>,
}

/// Where the encrypted packet goes.
#[derive(Debug, Clone, Copy)]
enum Wrap {
    Transport,
    Tunnel { local: IpAddr, remote: IpAddr },
}

impl Wrap {
    /// Bytes of the new outer header (tunnel mode).
    fn outer_len(self) -> usize {
        match self {
            Wrap::Transport => 0,
            Wrap::Tunnel {
                local: IpAddr::V4(_),
                ..
            } => ipv4::HEADER_LEN,
            Wrap::Tunnel { .. } => ipv6::HEADER_LEN,
        }
    }
}

struct EncryptFactory {
    sa: Arc<Outbound>,
    wrap: Wrap,
    mtu: u16,
}

impl EncryptFactory {
    /// The largest packet whose upper layer starts at `l4` (transport mode) that still fits
    /// the path MTU once encrypted.
    fn max_inner(&self, l4: usize) -> usize {
        let c = self.sa.crypto.cipher();
        let fixed = 8 + c.iv_len() + ICV_LEN;
        let (kept, outer) = match self.wrap {
            Wrap::Transport => (l4, 0),
            w @ Wrap::Tunnel { .. } => (0, w.outer_len()),
        };
        let room = (self.mtu as usize).saturating_sub(kept + outer + fixed);
        (kept + (room / c.block()) * c.block()).saturating_sub(2)
    }
}

impl ServiceConfig for EncryptConfig {
    const KIND: &'static str = "encrypt";

    /// With a fresh SA state: the sequence counter starts at 1.
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        self.into_factory_kept(name, &Kept::new())
    }

    fn into_factory_kept(
        self,
        _name: &str,
        kept: &Kept,
    ) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        check_spi(self.spi)?;
        let wrap = match (self.mode, self.local, self.remote) {
            (EspMode::Transport, None, None) => Wrap::Transport,
            (EspMode::Transport, _, _) => {
                return Err("local and remote are for mode = \"tunnel\"".into());
            }
            (EspMode::Tunnel, Some(local), Some(remote)) => {
                if local.is_ipv4() != remote.is_ipv4() {
                    return Err(format!(
                        "local = {local} and remote = {remote} are not of one address family"
                    )
                    .into());
                }
                Wrap::Tunnel { local, remote }
            }
            (EspMode::Tunnel, _, _) => {
                return Err(
                    "mode = \"tunnel\" needs local (this relay) and remote (the peer relay)".into(),
                );
            }
        };
        if self.mtu < 576 {
            return Err(format!("mtu = {} is below 576", self.mtu).into());
        }
        let key = load_key(&self.key_file, self.cipher).map_err(|e| e.to_string())?;
        let id = SaId::new(self.spi, self.cipher, self.esn, &key);
        let sa = kept
            .get_or_default::<SaStates>()
            .outbound
            .get_or_make(id, || Outbound {
                spi: self.spi,
                crypto: SaCrypto::new(self.cipher, &key),
                esn: self.esn,
                seq: AtomicU64::new(0),
            });
        Ok(Arc::new(EncryptFactory {
            sa,
            wrap,
            mtu: self.mtu,
        }))
    }
}

impl ServiceFactory for EncryptFactory {
    fn kind(&self) -> &'static str {
        "encrypt"
    }
    fn fail_policy(&self) -> FailPolicy {
        FailPolicy::Closed
    }
    fn rewrites_payload(&self) -> bool {
        true
    }
    fn clamp_mss(&self) -> Option<MssClamp> {
        // Transport mode keeps the IP header, so the room depends on its length.
        let mss =
            |ip: usize| (self.max_inner(ip).saturating_sub(ip + tcp::HEADER_LEN)).min(65535) as u16;
        Some(MssClamp {
            ipv4: mss(ipv4::HEADER_LEN),
            ipv6: mss(ipv6::HEADER_LEN),
        })
    }
    fn build(&self, counters: &Counters) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        Box::new(Encrypt {
            sa: self.sa.clone(),
            wrap: self.wrap,
            max_v4: self.max_inner(ipv4::HEADER_LEN),
            max_v6: self.max_inner(ipv6::HEADER_LEN),
            factory_mtu: self.mtu,
            too_big: TooBig::new(TooBig::DEFAULT_RATE, counters),
            resend: Tally::resend(counters),
            encrypted: c("encrypted"),
            bytes_in: c("bytes_in"),
            bytes_out: c("bytes_out"),
            dropped_unfit: c("dropped_unfit"),
            dropped_too_big: c("dropped_too_big"),
            dropped_seq_exhausted: c("dropped_seq_exhausted"),
            log: RateLimit::new(1),
        })
    }
}

struct Encrypt {
    sa: Arc<Outbound>,
    wrap: Wrap,
    /// The largest IPv4 / IPv6 packet (plain header) that fits once encrypted.
    max_v4: usize,
    max_v6: usize,
    factory_mtu: u16,
    too_big: TooBig,
    /// Sends tunnel packets whose outer family differs from the hook's.
    resend: Tally,
    encrypted: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
    dropped_unfit: Counter,
    dropped_too_big: Counter,
    dropped_seq_exhausted: Counter,
    log: RateLimit,
}

impl Encrypt {
    /// The largest packet like this one (its upper layer at `l4`) that fits once encrypted.
    fn max_for(&self, version: IpVersion, l4: usize) -> usize {
        let (plain, base) = match version {
            IpVersion::V4 => (self.max_v4, ipv4::HEADER_LEN),
            IpVersion::V6 => (self.max_v6, ipv6::HEADER_LEN),
        };
        match self.wrap {
            // Options or extension headers take room from the payload.
            Wrap::Transport => plain.saturating_sub(l4.saturating_sub(base)),
            Wrap::Tunnel { .. } => plain,
        }
    }

    /// The next sequence number, or `None` when the SA's numbers are used up.
    fn next_seq(&mut self, cx: &Context) -> Option<u64> {
        let seq = self.sa.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let last = if self.sa.esn {
            u64::MAX
        } else {
            u32::MAX as u64
        };
        if seq == 0 || seq > last {
            // The counter must never wrap (RFC 4303 3.3.3): the SA needs a new key.
            self.dropped_seq_exhausted.inc();
            if self.log.allow(cx.now).is_some() {
                tracing::error!(
                    spi = self.sa.spi,
                    "sequence numbers exhausted: rotate the key (SIGHUP)"
                );
            }
            return None;
        }
        Some(seq)
    }
}

impl Service for Encrypt {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        let Ok(l) = pkt.layout() else {
            self.dropped_unfit.inc();
            return Action::Drop;
        };
        let cipher = self.sa.crypto.cipher();
        // What is protected starts at `start`: the upper layer (transport) or the packet.
        let (start, next) = match self.wrap {
            Wrap::Transport => {
                let direct = l.version == IpVersion::V4
                    || Ipv6Packet::new_unchecked(pkt.data()).next_header() == l.proto;
                match l.l4.filter(|_| !l.fragment && direct) {
                    Some(off) => (off, l.proto),
                    // Fail closed: what cannot be protected does not leave.
                    None => {
                        self.dropped_unfit.inc();
                        return Action::Drop;
                    }
                }
            }
            Wrap::Tunnel { .. } => match l.version {
                IpVersion::V4 => (0, proto::IPV4),
                IpVersion::V6 => (0, proto::IPV6),
            },
        };
        if pkt.is_partial() || pkt.meta.gso {
            self.dropped_unfit.inc();
            return Action::Drop;
        }
        let plen = l.len - start;
        let padded = (plen + 2).next_multiple_of(cipher.block());
        let hdr = esp::HEADER_LEN + cipher.iv_len();
        let outer = self.wrap.outer_len();
        let esp_at = start + outer;
        let total = esp_at + hdr + padded + ICV_LEN;
        // A verdict cannot change the family: such a tunnel packet is emitted anew, and
        // the datapath's raw socket never fragments.
        let reinject = match self.wrap {
            Wrap::Tunnel { local, .. } => !pkt.meta.verdict_carries(IpVersion::of_addr(local)),
            Wrap::Transport => false,
        };
        let d = pkt.data();
        let df = reinject
            || match l.version {
                IpVersion::V4 => Ipv4Packet::new_unchecked(d).dont_frag(),
                IpVersion::V6 => true,
            };
        if total > self.factory_mtu as usize && df {
            // A router would not fragment it either: tell the sender what fits.
            let fits = self.max_for(l.version, start.max(ipv4::HEADER_LEN));
            self.too_big.emit(&d[..l.len], fits.min(65535) as u16, cx);
            self.dropped_too_big.inc();
            return Action::Drop;
        }
        if total > 0xffff {
            self.dropped_unfit.inc();
            return Action::Drop;
        }
        // Traffic class and DF of the inner packet, for the outer header.
        let tos = match l.version {
            IpVersion::V4 => Ipv4Packet::new_unchecked(d).tos(),
            IpVersion::V6 => Ipv6Packet::new_unchecked(d).traffic_class(),
        };
        let Some(seq) = self.next_seq(cx) else {
            return Action::Drop;
        };
        self.bytes_in.add(l.len as u64);
        pkt.resize(l.len);
        pkt.insert(start, outer + hdr);
        pkt.resize(total);
        let d = pkt.data_mut();
        EspRepr {
            spi: self.sa.spi,
            seq_no: seq as u32,
        }
        .emit(&mut EspPacket::new_unchecked(&mut d[esp_at..]));
        // RFC 4303 2.4: padding bytes 1, 2, 3, ...; then pad length and next header.
        let trailer = esp_at + hdr + plen;
        let pad = padded - plen - 2;
        for (i, b) in d[trailer..trailer + pad].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        d[trailer + pad] = pad as u8;
        d[trailer + pad + 1] = next;
        if self
            .sa
            .crypto
            .seal(seq, self.sa.esn, &mut d[esp_at..total])
            .is_err()
        {
            // Cannot happen (the lengths are the suite's); never send what is not sealed.
            self.dropped_unfit.inc();
            return Action::Drop;
        }
        match self.wrap {
            Wrap::Transport => fix_ip_header(d, l.version, total, proto::ESP),
            Wrap::Tunnel { local, remote } => {
                outer_header(local, remote, tos, df, seq as u16, total - outer).emit(d);
            }
        }
        self.encrypted.inc();
        self.bytes_out.add(total as u64);
        if reinject {
            let _ = cx.emit_packet(pkt, &self.resend);
            return Action::Drop;
        }
        Action::Continue
    }
}

/// The tunnel's outer header for `payload_len` bytes of ESP: traffic class copied from
/// the inner packet (RFC 4301 5.1.2.1), DF copied, TTL 64.
fn outer_header(
    local: IpAddr,
    remote: IpAddr,
    tos: u8,
    df: bool,
    id: u16,
    payload_len: usize,
) -> IpRepr {
    match IpRepr::new(local, remote, proto::ESP, payload_len) {
        Some(IpRepr::V4(mut r)) => {
            (r.tos, r.dont_frag, r.ident) = (tos, df, id);
            IpRepr::V4(r)
        }
        Some(IpRepr::V6(mut r)) => {
            r.traffic_class = tos;
            IpRepr::V6(r)
        }
        None => unreachable!("families checked in into_factory"),
    }
}

/// An inbound SA as one `decrypt` service configures it: the shared state, and what this
/// configuration says about the SA's mode and peer (not part of the state kept across
/// reloads, so that a reload may change them).
struct InboundSa {
    state: Arc<Inbound>,
    mode: EspMode,
    peer: Option<Prefix>,
}

struct DecryptFactory {
    sas: Arc<Vec<InboundSa>>,
}

impl ServiceConfig for DecryptConfig {
    const KIND: &'static str = "decrypt";

    /// With a fresh SA state: an empty replay window.
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        self.into_factory_kept(name, &Kept::new())
    }

    fn into_factory_kept(
        self,
        _name: &str,
        kept: &Kept,
    ) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        if !(1..=4096).contains(&self.replay_window) {
            return Err(format!("replay_window = {} must be 1-4096", self.replay_window).into());
        }
        if self.sa.is_empty() {
            return Err("no [[service.NAME.sa]]: decrypt needs at least one SA".into());
        }
        let mut sas: Vec<InboundSa> = Vec::new();
        for s in &self.sa {
            check_spi(s.spi)?;
            if sas.iter().any(|x| x.state.spi == s.spi) {
                return Err(format!("spi = {:#x} appears twice", s.spi).into());
            }
            if s.mode == EspMode::Tunnel && s.peer.is_none() {
                return Err(format!(
                    "the SA with spi = {:#x} is in mode = \"tunnel\" and needs peer: the \
                     peer relay's address (its encrypt's local), the only outer source accepted",
                    s.spi
                )
                .into());
            }
            let key = load_key(&s.key_file, s.cipher).map_err(|e| e.to_string())?;
            let id = SaId::new(s.spi, s.cipher, s.esn, &key);
            let sa = kept
                .get_or_default::<SaStates>()
                .inbound
                .get_or_make(id, || Inbound {
                    spi: s.spi,
                    crypto: SaCrypto::new(s.cipher, &key),
                    esn: s.esn,
                    window: Mutex::new(ReplayWindow::new(self.replay_window)),
                });
            // A kept SA keeps what it has seen, in a window of the configured size.
            let mut w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            if w.size() != ReplayWindow::new(self.replay_window).size() {
                *w = w.resized(self.replay_window);
            }
            drop(w);
            sas.push(InboundSa {
                state: sa,
                mode: s.mode,
                peer: s.peer,
            });
        }
        Ok(Arc::new(DecryptFactory { sas: Arc::new(sas) }))
    }
}

impl ServiceFactory for DecryptFactory {
    fn kind(&self) -> &'static str {
        "decrypt"
    }
    fn fail_policy(&self) -> FailPolicy {
        FailPolicy::Closed
    }
    fn rewrites_payload(&self) -> bool {
        true
    }
    fn build(&self, counters: &Counters) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        Box::new(Decrypt {
            sas: self.sas.clone(),
            resend: Tally::resend(counters),
            decrypted: c("decrypted"),
            passed: c("passed_not_esp"),
            dropped_unknown_spi: c("dropped_unknown_spi"),
            dropped_unknown_peer: c("dropped_unknown_peer"),
            dropped_wrong_mode: c("dropped_wrong_mode"),
            dropped_replayed: c("dropped_replayed"),
            dropped_too_old: c("dropped_too_old"),
            dropped_auth: c("dropped_auth_failed"),
            dropped_malformed: c("dropped_malformed"),
            dropped_dummy: c("dropped_dummy"),
            log: RateLimit::new(10),
        })
    }
}

struct Decrypt {
    sas: Arc<Vec<InboundSa>>,
    /// Sends inner packets whose family differs from the hook's.
    resend: Tally,
    decrypted: Counter,
    passed: Counter,
    dropped_unknown_spi: Counter,
    /// The outer source is not the SA's peer.
    dropped_unknown_peer: Counter,
    /// A tunnel packet on a transport SA, or the reverse.
    dropped_wrong_mode: Counter,
    dropped_replayed: Counter,
    dropped_too_old: Counter,
    dropped_auth: Counter,
    dropped_malformed: Counter,
    dropped_dummy: Counter,
    log: RateLimit,
}

impl Decrypt {
    fn drop(
        &mut self,
        counter: fn(&Decrypt) -> &Counter,
        why: &str,
        spi: u32,
        cx: &Context,
    ) -> Action {
        counter(self).inc();
        if let Some(suppressed) = self.log.allow(cx.now) {
            tracing::warn!(
                queue = cx.queue,
                spi,
                suppressed,
                "dropping ESP packet: {why}"
            );
        }
        Action::Drop
    }

    fn replay_drop(&mut self, r: Replay, spi: u32, cx: &Context) -> Action {
        match r {
            Replay::Duplicate => self.drop(|d| &d.dropped_replayed, "replayed", spi, cx),
            Replay::TooOld => {
                self.drop(|d| &d.dropped_too_old, "outside the replay window", spi, cx)
            }
        }
    }
}

/// Whether `inner` is a whole IP packet of version `next` (4 or 41) and exactly its length.
fn is_whole_packet(inner: &[u8], next: u8) -> bool {
    match (next, inner.first().map(|b| b >> 4)) {
        (proto::IPV4, Some(4)) if inner.len() >= ipv4::HEADER_LEN => {
            Ipv4Packet::new_unchecked(inner).total_len() as usize == inner.len()
        }
        (proto::IPV6, Some(6)) if inner.len() >= ipv6::HEADER_LEN => {
            ipv6::HEADER_LEN + Ipv6Packet::new_unchecked(inner).payload_len() as usize
                == inner.len()
        }
        _ => false,
    }
}

/// The outer source address of an IP packet whose layout parsed (so its header is whole).
fn source(d: &[u8], version: IpVersion) -> Option<IpAddr> {
    match version {
        IpVersion::V4 if d.len() >= ipv4::HEADER_LEN => {
            Some(Ipv4Packet::new_unchecked(d).src_addr().into())
        }
        IpVersion::V6 if d.len() >= ipv6::HEADER_LEN => {
            Some(Ipv6Packet::new_unchecked(d).src_addr().into())
        }
        _ => None,
    }
}

/// Why the length of an ESP packet (SPI to ICV, `len` bytes) cannot be one of `cipher`'s,
/// or `None` if it can: room for SPI, sequence number, IV and ICV, and a body of whole
/// blocks with room for the trailer (pad length and next header).
fn bad_length(cipher: Cipher, len: usize) -> Option<&'static str> {
    let Some(body) = len.checked_sub(esp::HEADER_LEN + cipher.iv_len() + ICV_LEN) else {
        return Some("shorter than ESP header, IV and ICV");
    };
    if body < 2 {
        return Some("no room for the ESP trailer");
    }
    if !body.is_multiple_of(cipher.block()) {
        return Some("body not a whole number of cipher blocks");
    }
    None
}

/// The ESP trailer of a decrypted `body`: the length of the payload before the padding and
/// the next header, or `None` if the pad length does not fit the body or the padding is
/// not 1, 2, 3, ... (RFC 4303 2.4).
fn trailer(body: &[u8]) -> Option<(usize, u8)> {
    let [rest @ .., pad, next] = body else {
        return None;
    };
    let plain = rest.len().checked_sub(*pad as usize)?;
    let padding = rest.get(plain..)?;
    padding
        .iter()
        .enumerate()
        .all(|(k, &b)| b == (k as u8).wrapping_add(1))
        .then_some((plain, *next))
}

impl Service for Decrypt {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        let Ok(l) = pkt.layout() else {
            return self.drop(|d| &d.dropped_malformed, "not an IP packet", 0, cx);
        };
        let direct = l.version == IpVersion::V4
            || Ipv6Packet::new_unchecked(pkt.data()).next_header() == proto::ESP;
        if l.proto != proto::ESP || !direct {
            self.passed.inc();
            return Action::Continue;
        }
        let Some(off) = l.l4.filter(|_| !l.fragment && !pkt.is_partial()) else {
            return self.drop(|d| &d.dropped_malformed, "fragment or partial copy", 0, cx);
        };
        let d = pkt.data();
        let Some(esp) = d
            .get(off..l.len)
            .and_then(|e| EspPacket::new_checked(e).ok())
        else {
            return self.drop(
                |d| &d.dropped_malformed,
                "shorter than an ESP header",
                0,
                cx,
            );
        };
        let (spi, low) = (esp.spi(), esp.seq_no());
        let esp_len = esp.into_inner().len();
        let Some(i) = self.sas.iter().position(|s| s.state.spi == spi) else {
            return self.drop(|d| &d.dropped_unknown_spi, "unknown SPI", spi, cx);
        };
        let (sa, mode, peer) = {
            let s = &self.sas[i];
            (s.state.clone(), s.mode, s.peer)
        };
        // Only the SA's peer may use it: checked before any cryptographic work.
        if let Some(peer) = peer
            && !source(d, l.version).is_some_and(|a| peer.contains(a))
        {
            return self.drop(
                |d| &d.dropped_unknown_peer,
                "outer source is not the SA's peer",
                spi,
                cx,
            );
        }
        let cipher = sa.crypto.cipher();
        if let Some(why) = bad_length(cipher, esp_len) {
            return self.drop(|d| &d.dropped_malformed, why, spi, cx);
        }
        // RFC 4303 3.4.3: a cheap replay check first, the ICV next, the window last.
        let seq = {
            let w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            let seq = if sa.esn { w.infer_esn(low) } else { low as u64 };
            if let Err(r) = w.check(seq) {
                drop(w);
                return self.replay_drop(r, spi, cx);
            }
            seq
        };
        let hdr = esp::HEADER_LEN + cipher.iv_len();
        let hi = sa.esn.then_some((seq >> 32) as u32);
        let opened = match pkt.data_mut().get_mut(off..l.len) {
            Some(esp) => sa.crypto.open(hi, esp).is_ok(),
            None => false,
        };
        if !opened {
            return self.drop(|d| &d.dropped_auth, "integrity check failed", spi, cx);
        }
        {
            // Another queue thread may have taken the same number meanwhile.
            let mut w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(r) = w.check(seq) {
                drop(w);
                return self.replay_drop(r, spi, cx);
            }
            w.update(seq);
        }
        // The lengths were checked above; `get` keeps a mistake from becoming a panic.
        let body = pkt
            .data()
            .get(off + hdr..l.len.saturating_sub(ICV_LEN))
            .unwrap_or_default();
        let Some((plain, next)) = trailer(body) else {
            return self.drop(|d| &d.dropped_malformed, "bad padding", spi, cx);
        };
        let tunnel = matches!(next, proto::IPV4 | proto::IPV6);
        if next != proto::NO_NEXT_HEADER && tunnel != (mode == EspMode::Tunnel) {
            let why = if tunnel {
                "a tunnel-mode packet on a transport SA (set mode = \"tunnel\" and peer)"
            } else {
                "a transport-mode packet on a tunnel SA"
            };
            return self.drop(|d| &d.dropped_wrong_mode, why, spi, cx);
        }
        match next {
            proto::IPV4 | proto::IPV6 => {
                // Tunnel mode: the inner packet replaces the whole packet.
                if !body.get(..plain).is_some_and(|b| is_whole_packet(b, next)) {
                    return self.drop(|d| &d.dropped_malformed, "bad inner packet", spi, cx);
                }
                pkt.remove(0, off + hdr);
                pkt.resize(plain);
                let v = if next == proto::IPV4 {
                    IpVersion::V4
                } else {
                    IpVersion::V6
                };
                if !pkt.meta.verdict_carries(v) {
                    // The other family than the hook's: forwarded from a raw socket.
                    self.decrypted.inc();
                    let _ = cx.forward_packet(pkt, &self.resend);
                    return Action::Drop;
                }
            }
            proto::NO_NEXT_HEADER => {
                // A dummy packet (RFC 4303 2.6): authenticated, then discarded.
                self.dropped_dummy.inc();
                return Action::Drop;
            }
            _ => {
                pkt.remove(off, hdr);
                pkt.resize(off + plain);
                fix_ip_header(pkt.data_mut(), l.version, off + plain, next);
            }
        }
        self.decrypted.inc();
        Action::Continue
    }
}

/// Makes the next sequence number of the live outbound SA `spi` (with this suite, ESN
/// setting and key) in `kept` `next`: how tests reach the end of the sequence space.
#[cfg(test)]
pub(crate) fn jump_sequence(
    kept: &Kept,
    spi: u32,
    cipher: Cipher,
    esn: bool,
    key: &[u8],
    next: u64,
) {
    let states = kept.get_or_default::<SaStates>();
    let sa = states
        .outbound
        .get_or_make(SaId::new(spi, cipher, esn, key), || {
            panic!("no live SA {spi:#x}")
        });
    sa.seq.store(next - 1, Ordering::Relaxed);
}
