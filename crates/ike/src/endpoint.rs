//! The endpoint: connections, their IKE SAs, dispatch of received messages by SPI, timers,
//! and the queues of datagrams and events its driver drains.

use crate::config::ConnConfig;
use crate::sa::ike::{Ctx, IkeSa, Phase, Req};
use crate::types::{ChildStatus, Counters, Error, Event, IkeSaStatus, RngSource, Transmit};
use crate::wire::{self, exchange};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Half-open IKE SAs above which the responder demands cookies (RFC 7296 2.6).
const COOKIE_THRESHOLD: usize = 64;
/// Half-open IKE SAs above which new IKE_SA_INIT requests are dropped.
const MAX_HALF_OPEN: usize = 1024;
/// Half-open IKE SAs from one address above which its new IKE_SA_INIT requests are
/// dropped: one host on its real address, answering cookies, must not take every slot.
const MAX_HALF_OPEN_PER_SOURCE: usize = 8;
/// Packets after which a child SA without extended sequence numbers is rekeyed whatever
/// the configured limits: 2^32 minus room for the rekey to finish at any packet rate.
pub const SEQ_REKEY_PACKETS: u64 = (1 << 32) - (1 << 26);

#[derive(Clone)]
pub(crate) struct Conn {
    cfg: ConnConfig,
    failures: u32,
    /// When to (re)initiate.
    start_at: Option<Instant>,
    /// Initiate at the first call that brings a time.
    start_pending: bool,
}

/// The IKEv2 protocol state of one daemon: every connection and IKE SA. See the crate docs
/// for how a driver uses it. Connections with `initiate` start at the first call that
/// brings the time ([`handle_timeout`](Self::handle_timeout) or [`handle`](Self::handle)).
pub struct Endpoint {
    pub(crate) conns: Vec<Conn>,
    pub(crate) sas: Vec<IkeSa>,
    pub(crate) io: Io,
    pub(crate) cookie_secret: [u8; 32],
}

/// What every exchange draws from and writes to: randomness, and the queues and counters
/// the driver drains. One field of [`Endpoint`], so that it can be lent to an SA beside
/// the connections ([`Endpoint::ctx`]).
pub(crate) struct Io {
    pub(crate) rng: Box<dyn RngSource>,
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conns", &self.conns.len())
            .field("sas", &self.sas.len())
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint for `conns`, drawing randomness from `rng`.
    pub fn new(conns: Vec<ConnConfig>, mut rng: Box<dyn RngSource>) -> Endpoint {
        let mut cookie_secret = [0u8; 32];
        rng.fill(&mut cookie_secret);
        let conns = conns
            .into_iter()
            .map(|cfg| Conn {
                start_pending: cfg.initiate,
                cfg,
                failures: 0,
                start_at: None,
            })
            .collect();
        Endpoint {
            conns,
            sas: Vec::new(),
            io: Io {
                rng,
                transmits: VecDeque::new(),
                events: VecDeque::new(),
                counters: Counters::default(),
            },
            cookie_secret,
        }
    }

    fn ctx<'a>(conns: &'a [Conn], conn: usize, now: Instant, io: &'a mut Io) -> Ctx<'a> {
        Ctx {
            now,
            cfg: &conns[conn].cfg,
            rng: io.rng.as_mut(),
            out: &mut io.transmits,
            events: &mut io.events,
            c: &mut io.counters,
            new_sa: None,
            initial_contact: false,
        }
    }

    fn start_pending(&mut self, now: Instant) {
        for c in &mut self.conns {
            if c.start_pending {
                c.start_pending = false;
                c.start_at = Some(now);
            }
        }
    }

    /// Handles one received IKE message (from the IKE header on; on port 4500 the driver
    /// has removed the non-ESP marker).
    pub fn handle(&mut self, now: Instant, local: SocketAddr, remote: SocketAddr, msg: &[u8]) {
        self.start_pending(now);
        self.io.counters.msgs_in += 1;
        let m = match wire::parse_message(msg) {
            Ok(m) => m,
            Err(wire::WireError::Critical(t)) => {
                self.io.counters.invalid_critical += 1;
                // An IKE_SA_INIT request (in clear) is refused in clear (RFC 7296 2.5);
                // other messages are answered by their IKE SA once authenticated.
                if let Ok(h) = wire::Header::parse(msg)
                    && h.exchange == exchange::IKE_SA_INIT
                    && !h.is_response()
                    && h.spi_r == 0
                {
                    let hdr = wire::Header {
                        spi_r: 0,
                        next: 0,
                        flags: wire::flags::RESPONSE,
                        length: 0,
                        ..h
                    };
                    let n =
                        wire::Payload::notify(wire::notify::UNSUPPORTED_CRITICAL_PAYLOAD, vec![t]);
                    self.io.counters.msgs_out += 1;
                    self.io.transmits.push_back(Transmit {
                        local,
                        remote,
                        payload: wire::emit_plain(hdr, &[n]),
                    });
                }
                return;
            }
            Err(_) => {
                self.io.counters.invalid_malformed += 1;
                return;
            }
        };
        let h = m.header;
        let idx = self.sas.iter().position(|s| {
            s.dead.is_none()
                && s.spi_i == h.spi_i
                && match (h.exchange == exchange::IKE_SA_INIT, h.is_response()) {
                    (true, true) => s.initiator && s.phase == Phase::InitSent,
                    (true, false) => !s.initiator && h.spi_r == 0 && s.remote == remote,
                    _ => s.spi_r == h.spi_r,
                }
        });
        match idx {
            Some(i) => {
                let conn = self.sas[i].conn;
                let mut ctx = Self::ctx(&self.conns, conn, now, &mut self.io);
                self.sas[i].handle(&mut ctx, local, remote, msg, m);
                let new = ctx.new_sa.take();
                if ctx.initial_contact {
                    self.initial_contact(now, i);
                }
                if self.sas[i].phase == Phase::Established {
                    self.conns[conn].failures = 0;
                }
                self.adopt(now, new);
            }
            None if h.exchange == exchange::IKE_SA_INIT
                && !h.is_response()
                && h.spi_r == 0
                && h.msg_id == 0 =>
            {
                let Some(conn) = self
                    .conns
                    .iter()
                    .position(|c| c.cfg.remote == remote.ip() && c.cfg.local == local.ip())
                    .or_else(|| self.conns.iter().position(|c| c.cfg.remote == remote.ip()))
                    // Behind a NAT the peer's address is not the configured one: a
                    // connection on our address (its PSK and identity still decide).
                    .or_else(|| {
                        self.conns
                            .iter()
                            .position(|c| c.cfg.local == local.ip() && !c.cfg.initiate)
                    })
                else {
                    self.io.counters.invalid_unknown_spi += 1;
                    return;
                };
                let half_open = self
                    .sas
                    .iter()
                    .filter(|s| s.phase == Phase::InitDone)
                    .count();
                let from_source = self
                    .sas
                    .iter()
                    .filter(|s| s.phase == Phase::InitDone && s.remote.ip() == remote.ip())
                    .count();
                if half_open >= MAX_HALF_OPEN || from_source >= MAX_HALF_OPEN_PER_SOURCE {
                    // Even with cookies, a flood from real addresses must not grow the
                    // table without bound: refuse until half-open SAs expire.
                    self.io.counters.dropped_half_open += 1;
                    return;
                }
                let secret = (half_open >= COOKIE_THRESHOLD).then_some(self.cookie_secret);
                let mut ctx = Self::ctx(&self.conns, conn, now, &mut self.io);
                if let Some(sa) = IkeSa::respond_init(
                    &mut ctx,
                    conn,
                    local,
                    remote,
                    msg,
                    &m,
                    secret.as_ref().map(|s| &s[..]),
                ) {
                    self.sas.push(sa);
                }
            }
            None => self.io.counters.invalid_unknown_spi += 1,
        }
        self.reap(now);
    }

    /// The peer of SA `i` says it has no other IKE SA with us (it restarted): the older
    /// SAs of the connection that have not heard from it since are stale; remove them
    /// and their child SAs (RFC 7296 2.4). An SA the peer answered since (a simultaneous
    /// initiation) stays.
    fn initial_contact(&mut self, now: Instant, i: usize) {
        let (conn, created, remote_ip) = (
            self.sas[i].conn,
            self.sas[i].created,
            self.sas[i].remote.ip(),
        );
        for j in 0..self.sas.len() {
            let s = &self.sas[j];
            if j == i
                || s.conn != conn
                || s.phase != Phase::Established
                || s.last_heard >= created
                || s.remote.ip() != remote_ip
            {
                continue;
            }
            let mut ctx = Self::ctx(&self.conns, conn, now, &mut self.io);
            self.sas[j].die(
                &mut ctx,
                "replaced: the peer restarted (INITIAL_CONTACT)",
                true,
            );
        }
    }

    /// Takes in the IKE SA a rekey made, and sends what was queued for it.
    fn adopt(&mut self, now: Instant, new: Option<IkeSa>) {
        if let Some(mut sa) = new {
            let mut ctx = Self::ctx(&self.conns, sa.conn, now, &mut self.io);
            sa.kick(&mut ctx);
            self.sas.push(sa);
        }
    }

    /// Removes finished SAs: `IkeDown`, and a restart for connections that initiate.
    fn reap(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.sas.len() {
            let Some((reason, silent)) = self.sas[i].dead.clone() else {
                i += 1;
                continue;
            };
            let sa = self.sas.remove(i);
            let others = self
                .sas
                .iter()
                .any(|s| s.conn == sa.conn && s.dead.is_none());
            if silent || others {
                continue;
            }
            let c = &mut self.conns[sa.conn];
            if sa.announced || sa.initiator {
                self.io.events.push_back(Event::IkeDown {
                    conn: sa.name.clone(),
                    reason: reason.clone(),
                });
            }
            if !sa.announced {
                c.failures = c.failures.saturating_add(1);
            }
            if c.cfg.initiate && reason != "shutdown" {
                let backoff = Duration::from_secs(1u64 << c.failures.min(6));
                c.start_at = Some(now + backoff);
            }
        }
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.start_pending(now);
        for ci in 0..self.conns.len() {
            if self.conns[ci].start_at.is_some_and(|t| t <= now) {
                self.conns[ci].start_at = None;
                // A refused start is not retried: the configuration must change (a reload).
                if !self.sas.iter().any(|s| s.conn == ci && s.dead.is_none())
                    && let Err(e) = self.start(now, ci)
                {
                    let conn = self.conns[ci].cfg.name.clone();
                    self.io.events.push_back(Event::IkeDown {
                        conn,
                        reason: e.to_string(),
                    });
                }
            }
        }
        for i in 0..self.sas.len() {
            let conn = self.sas[i].conn;
            let mut ctx = Self::ctx(&self.conns, conn, now, &mut self.io);
            self.sas[i].on_timeout(&mut ctx);
            let new = ctx.new_sa.take();
            self.adopt(now, new);
        }
        self.reap(now);
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let sas = self
            .sas
            .iter()
            .filter_map(|s| s.next_timeout(&self.conns[s.conn].cfg));
        sas.chain(self.conns.iter().filter_map(|c| c.start_at))
            .min()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.io.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.io.events.pop_front()
    }

    fn start(&mut self, now: Instant, ci: usize) -> Result<(), Error> {
        let cfg = &self.conns[ci].cfg;
        let problem = if cfg.ike_proposals.is_empty() || cfg.esp_proposals.is_empty() {
            Some("no IKE or ESP proposal")
        } else if cfg.local_ts.is_empty()
            || cfg.remote_ts.is_empty()
            || cfg.local_ts.len() > 32
            || cfg.remote_ts.len() > 32
        {
            Some("local_ts and remote_ts need 1 to 32 traffic selectors each")
        } else if cfg.ike_proposals.len() > 16 || cfg.esp_proposals.len() > 16 {
            Some("at most 16 IKE and 16 ESP proposals")
        } else {
            None
        };
        if let Some(p) = problem {
            return Err(Error::BadConfig {
                conn: cfg.name.clone(),
                problem: p.into(),
            });
        }
        let local = SocketAddr::new(cfg.local, 500);
        let remote = SocketAddr::new(cfg.remote, 500);
        let mut ctx = Self::ctx(&self.conns, ci, now, &mut self.io);
        if let Some(sa) = IkeSa::initiate(&mut ctx, ci, local, remote) {
            self.sas.push(sa);
        }
        Ok(())
    }

    /// Starts an IKE SA for connection `conn` now.
    pub fn initiate(&mut self, now: Instant, conn: &str) -> Result<(), Error> {
        let ci = self
            .conns
            .iter()
            .position(|c| c.cfg.name == conn)
            .ok_or_else(|| Error::UnknownConn(conn.to_string()))?;
        self.conns[ci].start_pending = false;
        self.conns[ci].start_at = None;
        if self.sas.iter().any(|s| s.conn == ci && s.dead.is_none()) {
            return Err(Error::AlreadyUp(conn.to_string()));
        }
        self.start(now, ci)
    }

    /// The datapath's count of bytes and packets sent on the child SA with outbound SPI
    /// `spi_out` (totals since installed), for rekeying by volume: a rekey starts at 90 %
    /// of the configured limit, and for SAs without ESN at [`SEQ_REKEY_PACKETS`] packets
    /// (before the sequence number wraps) in any case.
    pub fn report_usage(
        &mut self,
        now: Instant,
        conn: &str,
        spi_out: u32,
        bytes: u64,
        packets: u64,
    ) {
        let Some(ci) = self.conns.iter().position(|c| c.cfg.name == conn) else {
            return;
        };
        let (lb, lp) = (
            self.conns[ci].cfg.child_rekey_bytes,
            self.conns[ci].cfg.child_rekey_packets,
        );
        let over = |lim: Option<u64>, v: u64| lim.is_some_and(|l| v >= l - l / 10);
        for i in 0..self.sas.len() {
            let sa = &self.sas[i];
            if sa.conn != ci || sa.dead.is_some() {
                continue;
            }
            let Some((spi_in, esn)) = sa
                .children
                .iter()
                .find(|c| c.spi_out == spi_out && !c.replaced)
                .map(|c| (c.spi_in, c.esp.esn))
            else {
                continue;
            };
            // Without ESN the 32-bit sequence number must never wrap (RFC 4303 3.3.3):
            // a limit of its own, whatever the configuration says.
            let seq_limit = (!esn).then_some(SEQ_REKEY_PACKETS);
            if !(over(lb, bytes) || over(lp, packets) || seq_limit.is_some_and(|l| packets >= l)) {
                continue;
            }
            let mut ctx = Self::ctx(&self.conns, ci, now, &mut self.io);
            if let Some(c) = self.sas[i].children.iter_mut().find(|c| c.spi_in == spi_in) {
                c.rekey_at = None;
            }
            self.sas[i].request(&mut ctx, Req::RekeyChild(spi_in));
        }
    }

    /// Deletes every IKE SA (INFORMATIONAL with DELETE, sent once, not retransmitted) and
    /// emits their `ChildDown` and `IkeDown` events.
    pub fn shutdown(&mut self, now: Instant) {
        for c in &mut self.conns {
            c.start_at = None;
            c.start_pending = false;
        }
        for i in 0..self.sas.len() {
            let conn = self.sas[i].conn;
            let mut ctx = Self::ctx(&self.conns, conn, now, &mut self.io);
            let sa = &mut self.sas[i];
            if sa.phase == Phase::Established && sa.dead.is_none() {
                sa.out = None;
                sa.queue.clear();
                sa.start_delete_ike(&mut ctx);
            }
            sa.die(&mut ctx, "shutdown", false);
        }
        self.reap(now);
    }

    /// The IKE SAs and their child SAs (`now` for ages: pass the driver's clock).
    pub fn status_at(&self, now: Instant) -> Vec<IkeSaStatus> {
        self.sas
            .iter()
            .filter(|s| s.dead.is_none())
            .map(|s| IkeSaStatus {
                conn: s.name.clone(),
                state: s.state(),
                initiator: s.initiator,
                spi_i: s.spi_i,
                spi_r: s.spi_r,
                local: s.local,
                remote: s.remote,
                age: now.saturating_duration_since(s.created),
                rekeys: s.rekeys,
                children: s
                    .children
                    .iter()
                    .map(|c| ChildStatus {
                        spi_in: c.spi_in,
                        spi_out: c.spi_out,
                        age: now.saturating_duration_since(c.created),
                        rekeys: c.rekeys,
                        transform: c.transform,
                    })
                    .collect(),
                failures: self.conns[s.conn].failures,
                nat: s.nat,
            })
            .collect()
    }

    /// The IKE SAs and their child SAs, ages measured with the system clock.
    pub fn status(&self) -> Vec<IkeSaStatus> {
        self.status_at(Instant::now())
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.io.counters
    }
}
