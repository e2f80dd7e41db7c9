//! `encrypt` and `decrypt`: ESP (RFC 4303) in transport mode between two relays. The packet
//! keeps its addresses; what follows the IP header becomes SPI, sequence number, IV, the
//! encrypted payload with its padding, pad length and next header, and the ICV.
//!
//! Both fail closed: a packet `encrypt` cannot protect is dropped, never sent in clear.

use crate::keys::{Cipher, ICV_LEN, load_key};
use crate::sa::SaCrypto;
use crate::window::{Replay, ReplayWindow};
use relay_core::builtin::de_u32;
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{fix_ip_header, proto};
use relay_core::{
    Action, Context, Counter, Counters, FailPolicy, IpVersion, Packet, Service, ServiceConfig,
    ServiceFactory,
};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the packet is wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EspMode {
    /// The packet keeps its IP header; its payload is protected.
    Transport,
    /// The whole packet inside a new IP header to the peer relay (not yet implemented).
    Tunnel,
}

fn transport() -> EspMode {
    EspMode::Transport
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

struct Outbound {
    spi: u32,
    crypto: SaCrypto,
    /// Shared by the queue threads of a range, so no sequence number (and GCM IV) repeats.
    seq: AtomicU64,
}

struct EncryptFactory {
    sa: Arc<Outbound>,
}

impl ServiceConfig for EncryptConfig {
    const KIND: &'static str = "encrypt";

    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, String> {
        if self.mode == EspMode::Tunnel {
            return Err("mode = \"tunnel\" is not implemented yet; use \"transport\"".into());
        }
        check_spi(self.spi)?;
        let key = load_key(&self.key_file, self.cipher)?;
        let sa = Outbound {
            spi: self.spi,
            crypto: SaCrypto::new(self.cipher, &key),
            seq: AtomicU64::new(0),
        };
        Ok(Arc::new(EncryptFactory { sa: Arc::new(sa) }))
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
    fn build(&self, counters: &Counters) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        Box::new(Encrypt {
            sa: self.sa.clone(),
            encrypted: c("encrypted"),
            bytes_in: c("bytes_in"),
            bytes_out: c("bytes_out"),
            dropped_unfit: c("dropped_unfit"),
            dropped_seq_exhausted: c("dropped_seq_exhausted"),
            log: RateLimit::new(1),
        })
    }
}

struct Encrypt {
    sa: Arc<Outbound>,
    encrypted: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
    dropped_unfit: Counter,
    dropped_seq_exhausted: Counter,
    log: RateLimit,
}

impl Service for Encrypt {
    fn process(&mut self, pkt: &mut Packet, cx: &Context) -> Action {
        let Ok(l) = pkt.layout() else {
            return Action::Drop;
        };
        let cipher = self.sa.crypto.cipher();
        let fits = !pkt.is_partial()
            && !pkt.meta.gso
            && !l.fragment
            && (l.version == IpVersion::V4 || pkt.data()[6] == l.proto);
        let Some(off) = l.l4.filter(|_| fits) else {
            // Fail closed: what cannot be protected does not leave.
            self.dropped_unfit.inc();
            return Action::Drop;
        };
        let plen = l.len - off;
        let padded = (plen + 2).next_multiple_of(cipher.block());
        let hdr = 8 + cipher.iv_len();
        let total = off + hdr + padded + ICV_LEN;
        if total > 0xffff {
            self.dropped_unfit.inc();
            return Action::Drop;
        }
        let seq = self.sa.seq.fetch_add(1, Ordering::Relaxed) + 1;
        if seq > u32::MAX as u64 {
            // Without extended sequence numbers the counter must never wrap (RFC 4303
            // 3.3.3): the SA needs a new key.
            self.dropped_seq_exhausted.inc();
            if self.log.allow(cx.now).is_some() {
                tracing::error!(
                    spi = self.sa.spi,
                    "sequence numbers exhausted: rotate the key (SIGHUP)"
                );
            }
            return Action::Drop;
        }
        self.bytes_in.add(l.len as u64);
        pkt.resize(l.len);
        pkt.insert(off, hdr);
        pkt.resize(total);
        let d = pkt.data_mut();
        d[off..off + 4].copy_from_slice(&self.sa.spi.to_be_bytes());
        d[off + 4..off + 8].copy_from_slice(&(seq as u32).to_be_bytes());
        // RFC 4303 2.4: padding bytes 1, 2, 3, ...; then pad length and next header.
        let trailer = off + hdr + plen;
        let pad = padded - plen - 2;
        for (i, b) in d[trailer..trailer + pad].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        d[trailer + pad] = pad as u8;
        d[trailer + pad + 1] = l.proto;
        self.sa.crypto.seal(seq, &mut d[off..total]);
        fix_ip_header(d, l.version, total, proto::ESP);
        self.encrypted.inc();
        self.bytes_out.add(total as u64);
        Action::Continue
    }
}

struct Inbound {
    spi: u32,
    crypto: SaCrypto,
}

struct DecryptFactory {
    window: u32,
    sas: Arc<Vec<Inbound>>,
}

impl ServiceConfig for DecryptConfig {
    const KIND: &'static str = "decrypt";

    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, String> {
        if !(1..=4096).contains(&self.replay_window) {
            return Err(format!(
                "replay_window = {} must be 1-4096",
                self.replay_window
            ));
        }
        if self.sa.is_empty() {
            return Err("no [[service.NAME.sa]]: decrypt needs at least one SA".into());
        }
        let mut sas = Vec::new();
        for s in &self.sa {
            check_spi(s.spi)?;
            if sas.iter().any(|x: &Inbound| x.spi == s.spi) {
                return Err(format!("spi = {:#x} appears twice", s.spi));
            }
            let key = load_key(&s.key_file, s.cipher)?;
            sas.push(Inbound {
                spi: s.spi,
                crypto: SaCrypto::new(s.cipher, &key),
            });
        }
        Ok(Arc::new(DecryptFactory {
            window: self.replay_window,
            sas: Arc::new(sas),
        }))
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
            windows: self
                .sas
                .iter()
                .map(|_| ReplayWindow::new(self.window))
                .collect(),
            sas: self.sas.clone(),
            decrypted: c("decrypted"),
            passed: c("passed_not_esp"),
            dropped_unknown_spi: c("dropped_unknown_spi"),
            dropped_replayed: c("dropped_replayed"),
            dropped_too_old: c("dropped_too_old"),
            dropped_auth: c("dropped_auth_failed"),
            dropped_malformed: c("dropped_malformed"),
            log: RateLimit::new(10),
        })
    }
}

struct Decrypt {
    sas: Arc<Vec<Inbound>>,
    windows: Vec<ReplayWindow>,
    decrypted: Counter,
    passed: Counter,
    dropped_unknown_spi: Counter,
    dropped_replayed: Counter,
    dropped_too_old: Counter,
    dropped_auth: Counter,
    dropped_malformed: Counter,
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
}

impl Service for Decrypt {
    fn process(&mut self, pkt: &mut Packet, cx: &Context) -> Action {
        let Ok(l) = pkt.layout() else {
            return Action::Drop;
        };
        let direct = l.version == IpVersion::V4 || pkt.data()[6] == proto::ESP;
        if l.proto != proto::ESP || !direct {
            self.passed.inc();
            return Action::Continue;
        }
        let Some(off) = l.l4.filter(|_| !l.fragment && !pkt.is_partial()) else {
            return self.drop(|d| &d.dropped_malformed, "fragment or partial copy", 0, cx);
        };
        let esp = &pkt.data()[off..l.len];
        if esp.len() < 8 {
            return self.drop(
                |d| &d.dropped_malformed,
                "shorter than an ESP header",
                0,
                cx,
            );
        }
        let spi = u32::from_be_bytes([esp[0], esp[1], esp[2], esp[3]]);
        let seq = u32::from_be_bytes([esp[4], esp[5], esp[6], esp[7]]) as u64;
        let Some(i) = self.sas.iter().position(|s| s.spi == spi) else {
            return self.drop(|d| &d.dropped_unknown_spi, "unknown SPI", spi, cx);
        };
        // RFC 4303 3.4.3: a cheap replay check first, the ICV next, the window last.
        match self.windows[i].check(seq) {
            Err(Replay::Duplicate) => {
                return self.drop(|d| &d.dropped_replayed, "replayed", spi, cx);
            }
            Err(Replay::TooOld) => {
                return self.drop(|d| &d.dropped_too_old, "outside the replay window", spi, cx);
            }
            Ok(()) => {}
        }
        let hdr = 8 + self.sas[i].crypto.cipher().iv_len();
        if self.sas[i]
            .crypto
            .open(&mut pkt.data_mut()[off..l.len])
            .is_err()
        {
            return self.drop(|d| &d.dropped_auth, "integrity check failed", spi, cx);
        }
        self.windows[i].update(seq);
        let d = pkt.data();
        let body = &d[off + hdr..l.len - ICV_LEN];
        let (pad, next) = (body[body.len() - 2] as usize, body[body.len() - 1]);
        let valid_pad = pad + 2 <= body.len()
            && body[body.len() - 2 - pad..body.len() - 2]
                .iter()
                .enumerate()
                .all(|(k, &b)| b == k as u8 + 1);
        if !valid_pad {
            return self.drop(|d| &d.dropped_malformed, "bad padding", spi, cx);
        }
        let plain = body.len() - 2 - pad;
        pkt.remove(off, hdr);
        pkt.resize(off + plain);
        fix_ip_header(pkt.data_mut(), l.version, off + plain, next);
        self.decrypted.inc();
        Action::Continue
    }
}
