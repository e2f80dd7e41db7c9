//! SAs negotiated by the IKE control plane ([`IkeSas`]), by connection name: the IKE task
//! installs, switches and removes them; `encrypt` with `ike = "CONN"` and `decrypt` with
//! `ike = ["CONN"]` use them. Kept in [`Kept`], so reloads keep them and the daemon's IKE
//! task and the services share one table.
//!
//! The queue threads take no lock per packet: each service keeps the SAs it last saw and
//! a generation number, and looks at the table again only when the generation moved (one
//! atomic load per packet). IKE keys are fresh, so their SAs start at sequence number 1
//! and keep nothing on disk. A rekey loses no packet: the control plane installs the new
//! inbound SA before it removes the old one, and the outbound switch is one store that
//! each queue thread sees from its next packet on.

use crate::durable::{InEdge, OutSeq, Persister};
use crate::keys::Cipher;
use crate::live::{Inbound, Outbound, UdpEncap, Usage};
use crate::sa::SaCrypto;
use crate::selectors::Selectors;
use crate::window::ReplayWindow;
use relay_core::Kept;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why the table refused an SA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IkeSaError {
    /// The key is not of the suite's length (relayd's key file layout: GCM: AES key then
    /// 4-byte salt; CBC: AES key then 32-byte HMAC-SHA-256 key).
    #[error("{got} key bytes for {cipher:?}, which takes {want}")]
    KeyLength {
        /// The suite.
        cipher: Cipher,
        /// Bytes given.
        got: usize,
        /// Bytes the suite takes.
        want: usize,
    },
    /// SPIs 0-255 are reserved (RFC 4303 2.1).
    #[error("spi {0:#x} is reserved (RFC 4303 2.1)")]
    ReservedSpi(u32),
}

/// An outbound SA from IKE: the SA and its ESN setting.
pub(crate) struct IkeOut {
    pub(crate) sa: Arc<Outbound>,
    pub(crate) esn: bool,
    /// ESP in UDP (RFC 3948) when IKE found a NAT.
    pub(crate) encap: Option<UdpEncap>,
}

/// An inbound SA from IKE.
pub(crate) struct IkeIn {
    pub(crate) sa: Arc<Inbound>,
    pub(crate) esn: bool,
    /// What the SA may carry (`None`: anything, for SAs installed without selectors).
    pub(crate) ts: Option<Arc<Selectors>>,
}

/// One connection's SAs.
pub(crate) struct Conn {
    /// Moves on every change of `out`.
    out_gen: AtomicU64,
    out: Mutex<Option<Arc<IkeOut>>>,
    /// Moves on every change of `ins`.
    in_gen: AtomicU64,
    ins: Mutex<Arc<Vec<Arc<IkeIn>>>>,
    /// Replay window of new inbound SAs (the decrypt service's `replay_window`).
    window: AtomicU32,
}

impl Default for Conn {
    fn default() -> Conn {
        Conn {
            out_gen: AtomicU64::new(1),
            out: Mutex::new(None),
            in_gen: AtomicU64::new(1),
            ins: Mutex::new(Arc::new(Vec::new())),
            window: AtomicU32::new(64),
        }
    }
}

impl Conn {
    /// Sets the replay window of SAs installed from now on.
    pub(crate) fn set_window(&self, size: u32) {
        self.window.store(size, Ordering::Relaxed);
    }
}

/// A queue thread's view of a connection's outbound SA: refreshed only when it changed.
pub(crate) struct OutView {
    conn: Arc<Conn>,
    seen: u64,
    current: Option<Arc<IkeOut>>,
}

impl OutView {
    pub(crate) fn new(conn: Arc<Conn>) -> OutView {
        OutView {
            conn,
            seen: 0,
            current: None,
        }
    }

    /// The SA to use now (`None`: none installed, fail closed). One atomic load unless
    /// the control plane switched SAs since the last packet.
    pub(crate) fn current(&mut self) -> Option<&Arc<IkeOut>> {
        let g = self.conn.out_gen.load(Ordering::Acquire);
        if g != self.seen {
            self.current = lock(&self.conn.out).clone();
            self.seen = g;
        }
        self.current.as_ref()
    }
}

/// A queue thread's view of a connection's inbound SAs, refreshed the same way.
pub(crate) struct InView {
    conn: Arc<Conn>,
    seen: u64,
    current: Arc<Vec<Arc<IkeIn>>>,
}

impl InView {
    pub(crate) fn new(conn: Arc<Conn>) -> InView {
        InView {
            conn,
            seen: 0,
            current: Arc::new(Vec::new()),
        }
    }

    /// The inbound SA with `spi`, if installed.
    pub(crate) fn find(&mut self, spi: u32) -> Option<&Arc<IkeIn>> {
        let g = self.conn.in_gen.load(Ordering::Acquire);
        if g != self.seen {
            self.current = lock(&self.conn.ins).clone();
            self.seen = g;
        }
        self.current.iter().find(|s| s.sa.spi == spi)
    }
}

/// SAs negotiated by the control plane (IKEv2), by connection name. See the module.
#[derive(Default)]
pub struct IkeSas {
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    persister: Arc<Persister>,
}

impl IkeSas {
    /// The daemon's table, in its [`Kept`] (made on first use).
    pub fn shared(kept: &Kept) -> Arc<IkeSas> {
        kept.get_or_default::<IkeSas>()
    }

    /// The connection `name` (made on first use).
    pub(crate) fn conn(&self, name: &str) -> Arc<Conn> {
        lock(&self.conns)
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    fn check(spi: u32, cipher: Cipher, key: &[u8]) -> Result<(), IkeSaError> {
        if spi < 256 {
            return Err(IkeSaError::ReservedSpi(spi));
        }
        if key.len() != cipher.key_len() {
            return Err(IkeSaError::KeyLength {
                cipher,
                got: key.len(),
                want: cipher.key_len(),
            });
        }
        Ok(())
    }

    /// Adds (or replaces, by SPI) an inbound SA of `conn`: packets with `spi` are accepted
    /// from now on. Install the new SA of a rekey before removing the old one.
    pub fn install_inbound(
        &self,
        conn: &str,
        spi: u32,
        cipher: Cipher,
        esn: bool,
        key: &[u8],
    ) -> Result<(), IkeSaError> {
        self.install_inbound_with(conn, spi, cipher, esn, key, None)
    }

    /// [`install_inbound`](Self::install_inbound) for a child SA with its negotiated
    /// traffic selectors (`Some`): a decrypted packet outside them is dropped
    /// (`dropped_outside_ts`), as RFC 4301 5.2 has an IPsec implementation do.
    pub fn install_inbound_with(
        &self,
        conn: &str,
        spi: u32,
        cipher: Cipher,
        esn: bool,
        key: &[u8],
        ts: Option<Selectors>,
    ) -> Result<(), IkeSaError> {
        Self::check(spi, cipher, key)?;
        let c = self.conn(conn);
        let sa = Arc::new(IkeIn {
            sa: Arc::new(Inbound {
                spi,
                crypto: SaCrypto::new(cipher, key),
                window: Mutex::new(ReplayWindow::new(c.window.load(Ordering::Relaxed))),
                edge: InEdge::fresh(),
                usage: Some(Usage::default()),
            }),
            esn,
            ts: ts.map(Arc::new),
        });
        let mut ins = lock(&c.ins);
        let mut next: Vec<Arc<IkeIn>> = ins.iter().filter(|s| s.sa.spi != spi).cloned().collect();
        next.push(sa);
        *ins = Arc::new(next);
        c.in_gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Makes the SA `spi` the outbound SA of `conn`, replacing the current one: each queue
    /// thread uses it from its next packet on. Its sequence numbers start at 1. Raw ESP:
    /// [`IkeSas::set_outbound_encap`] for an SA in UDP.
    pub fn set_outbound(
        &self,
        conn: &str,
        spi: u32,
        cipher: Cipher,
        esn: bool,
        key: &[u8],
    ) -> Result<(), IkeSaError> {
        self.set_outbound_encap(conn, spi, cipher, esn, key, None)
    }

    /// [`IkeSas::set_outbound`], with the UDP encapsulation of a child SA whose IKE SA
    /// found a NAT (RFC 3948: its ports, usually 4500 on both ends, the peer's as the NAT
    /// shows it), or `None` for raw ESP. The inbound side needs nothing: `decrypt` opens
    /// ESP in UDP to its `encap_port` for every SA.
    pub fn set_outbound_encap(
        &self,
        conn: &str,
        spi: u32,
        cipher: Cipher,
        esn: bool,
        key: &[u8],
        encap: Option<UdpEncap>,
    ) -> Result<(), IkeSaError> {
        Self::check(spi, cipher, key)?;
        let c = self.conn(conn);
        let sa = Arc::new(IkeOut {
            sa: Arc::new(Outbound {
                spi,
                crypto: SaCrypto::new(cipher, key),
                seq: Arc::new(OutSeq::fresh(self.persister.clone())),
                usage: Some(Usage::default()),
            }),
            esn,
            encap,
        });
        *lock(&c.out) = Some(sa);
        c.out_gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Removes the inbound SA `spi` of `conn` (its packets are dropped from now on as of an
    /// unknown SPI).
    pub fn remove_inbound(&self, conn: &str, spi: u32) {
        let c = self.conn(conn);
        let mut ins = lock(&c.ins);
        let next: Vec<Arc<IkeIn>> = ins.iter().filter(|s| s.sa.spi != spi).cloned().collect();
        *ins = Arc::new(next);
        c.in_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Leaves `conn` without an outbound SA: its packets are dropped (fail closed) and
    /// counted (`dropped_no_sa`).
    pub fn clear_outbound(&self, conn: &str) {
        let c = self.conn(conn);
        *lock(&c.out) = None;
        c.out_gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Bytes and packets of the SA `spi` of `conn` so far: the current outbound SA or an
    /// installed inbound one (bytes of ESP: outbound as sent, inbound as received).
    pub fn usage(&self, conn: &str, spi: u32) -> Option<(u64, u64)> {
        let c = self.conn(conn);
        if let Some(o) = lock(&c.out).as_ref().filter(|o| o.sa.spi == spi) {
            return o.sa.usage.as_ref().map(Usage::get);
        }
        let ins = lock(&c.ins).clone();
        ins.iter()
            .find(|s| s.sa.spi == spi)
            .and_then(|s| s.sa.usage.as_ref().map(Usage::get))
    }
}
