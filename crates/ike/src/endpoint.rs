//! The endpoint: connections, their IKE SAs, dispatch of received messages by SPI, timers,
//! and the queues of datagrams and events its driver drains.

use crate::config::ConnConfig;
use crate::types::{Counters, Error, Event, IkeSaStatus, RngSource, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

/// The IKEv2 protocol state of one daemon: every connection and IKE SA. See the crate docs
/// for how a driver uses it.
pub struct Endpoint {
    conns: Vec<ConnConfig>,
    rng: Box<dyn RngSource>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    counters: Counters,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conns", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint for `conns`, drawing randomness from `rng`. Connections with `initiate`
    /// start at the first [`handle_timeout`](Self::handle_timeout) (or [`initiate`](Self::initiate)).
    pub fn new(conns: Vec<ConnConfig>, rng: Box<dyn RngSource>) -> Endpoint {
        Endpoint {
            conns,
            rng,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// Handles one received IKE message (from the IKE header on).
    pub fn handle(&mut self, now: Instant, local: SocketAddr, remote: SocketAddr, msg: &[u8]) {
        let _ = (now, local, remote, msg, &mut self.rng);
        self.counters.msgs_in += 1;
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Starts an IKE SA for connection `conn` now.
    pub fn initiate(&mut self, now: Instant, conn: &str) -> Result<(), Error> {
        let _ = now;
        Err(Error::UnknownConn(conn.to_string()))
    }

    /// The datapath's count of bytes and packets sent on the child SA with outbound SPI
    /// `spi_out` (totals since installed), for rekeying by volume.
    pub fn report_usage(
        &mut self,
        now: Instant,
        conn: &str,
        spi_out: u32,
        bytes: u64,
        packets: u64,
    ) {
        let _ = (now, conn, spi_out, bytes, packets);
    }

    /// Deletes every IKE SA (INFORMATIONAL with DELETE, sent once) and emits their
    /// `ChildDown` and `IkeDown` events.
    pub fn shutdown(&mut self, now: Instant) {
        let _ = now;
    }

    /// The IKE SAs and their child SAs.
    pub fn status(&self) -> Vec<IkeSaStatus> {
        Vec::new()
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}
