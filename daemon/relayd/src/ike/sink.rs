//! Where negotiated child SAs go: the ESP datapath's SA table. A trait, so the IKE daemon
//! does not depend on how services/crypto keeps its SAs, and tests can record events.

use relay_ike::{ChildSa, EspTransform};
use relay_svc_crypto::{Cipher, IkeSas, Selector, Selectors, UdpEncap};
use std::collections::HashMap;
use std::sync::Arc;

/// The datapath side of the IKE daemon: installs and removes child SAs and reports their
/// volume.
///
/// The order of calls is the one relay_ike gives: on `child_up` the inbound SA must be
/// accepted before outbound traffic moves to the new SA (a rekey's `replaces`), and the
/// old inbound SA stays until its `child_down`, so that no packet in flight is lost.
pub trait SaSink: Send {
    /// Installs the inbound SA and then, if `sa.outbound`, makes the outbound SA the one
    /// the connection's encrypting service uses; else keeps it for [`SaSink::child_outbound`]
    /// (the responder of a rekey sends on the old SA until the peer has the new one).
    fn child_up(&mut self, sa: &ChildSa) -> Result<(), String>;
    /// Starts sending on the child SA installed earlier with `outbound: false`.
    fn child_outbound(&mut self, conn: &str, spi_in: u32, spi_out: u32) -> Result<(), String>;
    /// The child SA with outbound SPI `spi_out` is deleted: stop sending on it now (if it
    /// is still the connection's current one). Its inbound half goes later
    /// ([`SaSink::child_down`]).
    fn retire_outbound(&mut self, conn: &str, spi_out: u32);
    /// Removes the inbound SA `spi_in`; called a grace period after the child's delete, so
    /// that packets the peer sent on it before and still waiting in the queues are taken.
    fn child_down(&mut self, conn: &str, spi_in: u32, spi_out: u32);
    /// The connection's IKE SA is gone: nothing may be sent under its keys any more.
    fn ike_down(&mut self, conn: &str);
    /// Bytes and packets sent so far under the outbound SA `spi_out`, for rekeying by
    /// volume; `None` if unknown.
    fn usage(&self, conn: &str, spi_out: u32) -> Option<(u64, u64)>;
}

/// A sink for a relayd whose ESP services do not take negotiated SAs (yet): it refuses
/// nothing, says once that traffic is not protected by these SAs, and knows no usage.
#[derive(Debug, Default)]
pub struct NoDatapath {
    warned: bool,
}

impl SaSink for NoDatapath {
    fn child_up(&mut self, sa: &ChildSa) -> Result<(), String> {
        if !std::mem::replace(&mut self.warned, true) {
            tracing::warn!(
                connection = %sa.conn,
                "ike: no ESP service takes negotiated SAs (`ike = \"{}\"` on an encrypt \
                 service): the SAs are negotiated but carry no traffic",
                sa.conn
            );
        }
        Ok(())
    }

    fn child_outbound(&mut self, _conn: &str, _spi_in: u32, _spi_out: u32) -> Result<(), String> {
        Ok(())
    }

    fn retire_outbound(&mut self, _conn: &str, _spi_out: u32) {}

    fn child_down(&mut self, _conn: &str, _spi_in: u32, _spi_out: u32) {}

    fn ike_down(&mut self, _conn: &str) {}

    fn usage(&self, _conn: &str, _spi_out: u32) -> Option<(u64, u64)> {
        None
    }
}

/// The ESP services' SA table (services/crypto's [`IkeSas`], shared through the registry's
/// `Kept`): `encrypt` with `ike = "CONN"` sends under the outbound SA set here, `decrypt`
/// with `ike = ["CONN"]` accepts the inbound SAs installed here.
pub struct EspTable {
    table: Arc<IkeSas>,
    /// Each connection's current outbound SPI: a child deleted without a successor
    /// leaves its connection with no outbound SA (fail closed), not with dead keys.
    current_out: HashMap<String, u32>,
    /// Outbound halves waiting for `child_outbound`, by (connection, outbound SPI).
    pending_out: HashMap<(String, u32), PendingOut>,
}

/// An outbound SA negotiated but not sent on yet.
struct PendingOut {
    cipher: Cipher,
    esn: bool,
    key: relay_ike::Secret,
    encap: Option<UdpEncap>,
}

impl EspTable {
    /// A sink filling `table`.
    pub fn new(table: Arc<IkeSas>) -> EspTable {
        EspTable {
            table,
            current_out: HashMap::new(),
            pending_out: HashMap::new(),
        }
    }
}

/// The traffic selectors an inbound child SA enforces: from the peer's side to ours. In
/// transport mode through a NAT, the peer's packets come from the address IKE sees it at.
fn selectors(sa: &ChildSa) -> Selectors {
    let conv = |ts: &[relay_ike::TrafficSelector]| {
        ts.iter()
            .map(|t| Selector {
                start: t.start,
                end: t.end,
                protocol: t.protocol,
                start_port: t.start_port,
                end_port: t.end_port,
            })
            .collect()
    };
    Selectors {
        remote: conv(&sa.remote_ts),
        local: conv(&sa.local_ts),
        nat_peer: sa
            .encap
            .filter(|_| sa.mode == relay_ike::Mode::Transport)
            .map(|(_, remote)| remote.ip()),
    }
}

/// The datapath's suite for a negotiated ESP transform.
pub fn cipher_of(t: EspTransform) -> Option<Cipher> {
    match t {
        EspTransform::Aes128Gcm16 => Some(Cipher::Aes128Gcm),
        EspTransform::Aes256Gcm16 => Some(Cipher::Aes256Gcm),
        EspTransform::Aes128CbcHmacSha256 => Some(Cipher::Aes128CbcHmac),
        EspTransform::Aes256CbcHmacSha256 => Some(Cipher::Aes256CbcHmac),
        _ => None,
    }
}

impl SaSink for EspTable {
    fn child_up(&mut self, sa: &ChildSa) -> Result<(), String> {
        let cipher = cipher_of(sa.transform)
            .ok_or_else(|| format!("ESP transform {:?} has no datapath suite", sa.transform))?;
        // NAT detected: ESP goes in UDP between the ports IKE moved to (RFC 3948); what
        // arrives that way the decrypting service opens whatever the SA.
        let encap = sa.encap.map(|(l, r)| UdpEncap {
            src_port: l.port(),
            dst_port: r.port(),
        });
        // Inbound first: the peer may send under the new SA as soon as it has installed it.
        self.table
            .install_inbound_with(
                &sa.conn,
                sa.spi_in,
                cipher,
                sa.esn,
                sa.key_in.bytes(),
                Some(selectors(sa)),
            )
            .map_err(|e| e.to_string())?;
        if !sa.outbound {
            self.pending_out.insert(
                (sa.conn.clone(), sa.spi_out),
                PendingOut {
                    cipher,
                    esn: sa.esn,
                    key: sa.key_out.clone(),
                    encap,
                },
            );
            return Ok(());
        }
        self.table
            .set_outbound_encap(
                &sa.conn,
                sa.spi_out,
                cipher,
                sa.esn,
                sa.key_out.bytes(),
                encap,
            )
            .map_err(|e| {
                self.table.remove_inbound(&sa.conn, sa.spi_in);
                e.to_string()
            })?;
        self.current_out.insert(sa.conn.clone(), sa.spi_out);
        Ok(())
    }

    fn child_outbound(&mut self, conn: &str, _spi_in: u32, spi_out: u32) -> Result<(), String> {
        let p = self
            .pending_out
            .remove(&(conn.to_string(), spi_out))
            .ok_or_else(|| format!("no pending outbound SA {spi_out:08x}"))?;
        self.table
            .set_outbound_encap(conn, spi_out, p.cipher, p.esn, p.key.bytes(), p.encap)
            .map_err(|e| e.to_string())?;
        self.current_out.insert(conn.to_string(), spi_out);
        Ok(())
    }

    fn retire_outbound(&mut self, conn: &str, spi_out: u32) {
        // The outbound SA of a rekeyed child was replaced when the new one started
        // sending; one still current (a delete without a rekey) goes now.
        self.pending_out.remove(&(conn.to_string(), spi_out));
        if self.current_out.get(conn) == Some(&spi_out) {
            self.current_out.remove(conn);
            self.table.clear_outbound(conn);
        }
    }

    fn child_down(&mut self, conn: &str, spi_in: u32, spi_out: u32) {
        self.retire_outbound(conn, spi_out);
        self.table.remove_inbound(conn, spi_in);
    }

    fn ike_down(&mut self, conn: &str) {
        self.current_out.remove(conn);
        self.pending_out.retain(|(c, _), _| c != conn);
        self.table.clear_outbound(conn);
    }

    fn usage(&self, conn: &str, spi_out: u32) -> Option<(u64, u64)> {
        self.table.usage(conn, spi_out)
    }
}
