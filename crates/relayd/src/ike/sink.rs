//! Where negotiated child SAs go: the ESP datapath's SA table. A trait, so the IKE daemon
//! does not depend on how services/crypto keeps its SAs, and tests can record events.

use relay_ike::ChildSa;

/// The datapath side of the IKE daemon: installs and removes child SAs and reports their
/// volume.
///
/// The order of calls is the one relay_ike gives: on `child_up` the inbound SA must be
/// accepted before outbound traffic moves to the new SA (a rekey's `replaces`), and the
/// old inbound SA stays until its `child_down`, so that no packet in flight is lost.
pub trait SaSink: Send {
    /// Installs the inbound SA and then makes the outbound SA the one the connection's
    /// encrypting service uses.
    fn child_up(&mut self, sa: &ChildSa) -> Result<(), String>;
    /// Removes the inbound SA `spi_in` (and the outbound `spi_out` if it is still the
    /// connection's current one).
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

    fn child_down(&mut self, _conn: &str, _spi_in: u32, _spi_out: u32) {}

    fn ike_down(&mut self, _conn: &str) {}

    fn usage(&self, _conn: &str, _spi_out: u32) -> Option<(u64, u64)> {
        None
    }
}
