//! One IKE SA: its keys, message IDs (window size 1 each way), the outstanding request and
//! its retransmission, the cached last response, its child SAs and timers. The exchanges
//! themselves are in the sibling modules.

use crate::config::{ConnConfig, DhGroup, EspProposal, EspTransform, IkeProposal};
use crate::crypto::{IkeKeys, dh::DhSecret};
use crate::types::{Counters, Event, IkeState, RngSource, Transmit};
use crate::wire::{self, Header, Payload, exchange, flags};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One installed child SA.
#[derive(Clone)]
pub(crate) struct Child {
    pub(crate) spi_in: u32,
    pub(crate) spi_out: u32,
    pub(crate) transform: EspTransform,
    pub(crate) esp: EspProposal,
    pub(crate) created: Instant,
    pub(crate) rekey_at: Option<Instant>,
    pub(crate) rekeys: u32,
    /// PFS group changes at the peer's request (INVALID_KE_PAYLOAD), bounded.
    pub(crate) pfs_switches: u8,
    /// Replaced by a rekey; waiting for its delete.
    pub(crate) replaced: bool,
    /// As the responder of its rekey: the inbound SPI of the SA it replaces, whose
    /// removal switches outbound traffic to this one.
    pub(crate) outbound_after: Option<u32>,
    /// Lowest nonce of a peer's rekey of this SA while ours was under way (collision).
    pub(crate) peer_rekey: Option<(u32, Vec<u8>)>,
}

/// What an IKE SA's handlers may touch outside it.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) cfg: &'a ConnConfig,
    pub(crate) rng: &'a mut dyn RngSource,
    pub(crate) out: &'a mut VecDeque<Transmit>,
    pub(crate) events: &'a mut VecDeque<Event>,
    pub(crate) c: &'a mut Counters,
    /// An IKE SA made by a rekey of this one, for the endpoint to adopt.
    pub(crate) new_sa: Option<IkeSa>,
    /// The peer authenticated with INITIAL_CONTACT: it has no other IKE SA with us.
    pub(crate) initial_contact: bool,
}

impl Ctx<'_> {
    pub(crate) fn random<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.rng.fill(&mut b);
        b
    }
    pub(crate) fn nonce(&mut self) -> Vec<u8> {
        self.random::<32>().to_vec()
    }
    pub(crate) fn spi32(&mut self) -> u32 {
        // SPIs 1-255 are reserved (RFC 4303 2.1).
        u32::from_be_bytes(self.random::<4>()) | 0x100
    }
    pub(crate) fn spi64(&mut self) -> u64 {
        u64::from_be_bytes(self.random::<8>()) | 1
    }
    /// `d` shortened by a random 0-10 %, so both peers do not rekey at the same moment.
    pub(crate) fn jitter(&mut self, d: Duration) -> Duration {
        let r = u32::from(u16::from_be_bytes(self.random::<2>()));
        d.saturating_sub((d / 10 / 65535).saturating_mul(r))
    }
    /// A jittered lifetime from now: `None` for zero (never) or beyond the clock's range.
    pub(crate) fn deadline(&mut self, d: Duration) -> Option<Instant> {
        if d.is_zero() {
            return None;
        }
        let j = self.jitter(d);
        self.now.checked_add(j)
    }
}

/// Phase of the IKE SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    InitSent,
    AuthSent,
    /// Responder after IKE_SA_INIT, waiting for IKE_AUTH.
    InitDone,
    Established,
}

/// A request of ours waiting for its response.
#[derive(Clone)]
pub(crate) struct Outstanding {
    pub(crate) msg_id: u32,
    pub(crate) bytes: Vec<u8>,
    pub(crate) tries: u32,
    pub(crate) next_at: Instant,
    pub(crate) kind: OutKind,
}

/// What the outstanding request was, with the state its response needs.
#[derive(Clone)]
pub(crate) enum OutKind {
    Init,
    Auth {
        spi_in: u32,
    },
    RekeyChild {
        old_spi_in: u32,
        spi_in: u32,
        ni: Vec<u8>,
        dh: Option<DhSecret>,
        esp: EspProposal,
    },
    RekeyIke {
        spi: u64,
        ni: Vec<u8>,
        dh: DhSecret,
        suite: IkeProposal,
    },
    DeleteChild(Vec<u32>),
    DeleteIke,
    Dpd,
}

/// A request queued behind the outstanding one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Req {
    RekeyChild(u32),
    RekeyIke,
    DeleteChild(u32),
    DeleteIke,
    Dpd,
}

/// One IKE SA.
#[derive(Clone)]
pub(crate) struct IkeSa {
    pub(crate) conn: usize,
    pub(crate) name: String,
    /// We are the original initiator.
    pub(crate) initiator: bool,
    pub(crate) spi_i: u64,
    pub(crate) spi_r: u64,
    pub(crate) phase: Phase,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) keys: Option<IkeKeys>,
    pub(crate) group: DhGroup,
    pub(crate) dh: Option<DhSecret>,
    pub(crate) ni: Vec<u8>,
    pub(crate) nr: Vec<u8>,
    pub(crate) cookie: Option<Vec<u8>>,
    pub(crate) cookie_tries: u8,
    /// Our IKE_SA_INIT payloads (without cookie), resent with a cookie.
    pub(crate) init_payloads: Vec<Payload>,
    /// Our IKE_SA_INIT message and the peer's, signed by AUTH.
    pub(crate) init_ours: Vec<u8>,
    pub(crate) init_theirs: Vec<u8>,
    pub(crate) next_msg_id: u32,
    pub(crate) peer_msg_id: u32,
    pub(crate) out: Option<Outstanding>,
    pub(crate) queue: VecDeque<Req>,
    /// The last response sent: message ID, a hash of its request, the bytes.
    pub(crate) last_resp: Option<(u32, [u8; 32], Vec<u8>)>,
    pub(crate) children: Vec<Child>,
    pub(crate) created: Instant,
    pub(crate) last_heard: Instant,
    pub(crate) rekey_at: Option<Instant>,
    pub(crate) rekeys: u32,
    pub(crate) nat: bool,
    /// Set when the SA is finished: the reason, and whether to stay silent (replaced by a
    /// rekey, so no IkeDown).
    pub(crate) dead: Option<(String, bool)>,
    /// Replaced by a rekey: waiting for the peer's delete (or ours to be answered).
    pub(crate) rekeyed: bool,
    pub(crate) announced: bool,
}

impl IkeSa {
    /// A fresh IKE SA (either role); the exchange modules fill in the rest.
    pub(crate) fn blank(
        conn: usize,
        cfg: &ConnConfig,
        initiator: bool,
        local: SocketAddr,
        remote: SocketAddr,
        now: Instant,
        group: DhGroup,
    ) -> IkeSa {
        IkeSa {
            conn,
            name: cfg.name.clone(),
            initiator,
            spi_i: 0,
            spi_r: 0,
            phase: Phase::InitSent,
            local,
            remote,
            keys: None,
            group,
            dh: None,
            ni: Vec::new(),
            nr: Vec::new(),
            cookie: None,
            cookie_tries: 0,
            init_payloads: Vec::new(),
            init_ours: Vec::new(),
            init_theirs: Vec::new(),
            next_msg_id: 0,
            peer_msg_id: 0,
            out: None,
            queue: VecDeque::new(),
            last_resp: None,
            children: Vec::new(),
            created: now,
            last_heard: now,
            rekey_at: None,
            rekeys: 0,
            nat: false,
            dead: None,
            rekeyed: false,
            announced: false,
        }
    }

    pub(crate) fn state(&self) -> IkeState {
        match self.phase {
            Phase::InitSent | Phase::InitDone => IkeState::Connecting,
            Phase::AuthSent => IkeState::Authenticating,
            Phase::Established
                if self.rekeyed
                    || matches!(self.out.as_ref().map(|o| &o.kind), Some(OutKind::DeleteIke)) =>
            {
                IkeState::Deleting
            }
            Phase::Established
                if matches!(
                    self.out.as_ref().map(|o| &o.kind),
                    Some(OutKind::RekeyIke { .. })
                ) =>
            {
                IkeState::Rekeying
            }
            Phase::Established => IkeState::Established,
        }
    }

    pub(crate) fn header(&self, exchange: u8, msg_id: u32, response: bool) -> Header {
        let mut f = if self.initiator { flags::INITIATOR } else { 0 };
        if response {
            f |= flags::RESPONSE;
        }
        Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next: 0,
            exchange,
            flags: f,
            msg_id,
            length: 0,
        }
    }

    pub(crate) fn transmit(&self, ctx: &mut Ctx<'_>, bytes: Vec<u8>) {
        ctx.c.msgs_out += 1;
        ctx.out.push_back(Transmit {
            local: self.local,
            remote: self.remote,
            payload: bytes,
        });
    }

    fn retransmit_after(cfg: &ConnConfig, tries: u32) -> Duration {
        // At most an hour between tries, whatever the configuration (and no float overflow).
        let r = cfg.retransmit;
        let secs = r.timeout.as_secs_f64() * r.base.max(1.0).powi(tries.min(32) as i32);
        Duration::try_from_secs_f64(secs.min(3600.0)).unwrap_or(Duration::from_secs(3600))
    }

    /// Sends a request: in clear for IKE_SA_INIT, else in an SK payload.
    pub(crate) fn send_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        exch: u8,
        payloads: &[Payload],
        kind: OutKind,
    ) {
        let msg_id = self.next_msg_id;
        self.next_msg_id = self.next_msg_id.wrapping_add(1);
        let h = self.header(exch, msg_id, false);
        let bytes = match &self.keys {
            Some(k) if exch != exchange::IKE_SA_INIT => {
                k.seal(self.initiator, h, payloads, ctx.rng)
            }
            _ => wire::emit_plain(h, payloads),
        };
        self.transmit(ctx, bytes.clone());
        let next_at = ctx.now + Self::retransmit_after(ctx.cfg, 0);
        self.out = Some(Outstanding {
            msg_id,
            bytes,
            tries: 0,
            next_at,
            kind,
        });
    }

    /// Sends and caches a response to the request `req` (raw bytes, for its hash).
    pub(crate) fn send_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        exch: u8,
        msg_id: u32,
        req: &[u8],
        payloads: &[Payload],
    ) {
        let h = self.header(exch, msg_id, true);
        let bytes = match &self.keys {
            Some(k) if exch != exchange::IKE_SA_INIT => {
                k.seal(self.initiator, h, payloads, ctx.rng)
            }
            _ => wire::emit_plain(h, payloads),
        };
        self.transmit(ctx, bytes.clone());
        self.last_resp = Some((msg_id, req_hash(req), bytes));
        self.peer_msg_id = msg_id.wrapping_add(1);
    }

    /// Queues `req`, or sends it if no request is outstanding.
    pub(crate) fn request(&mut self, ctx: &mut Ctx<'_>, req: Req) {
        if !self.queue.contains(&req) {
            self.queue.push_back(req);
        }
        self.kick(ctx);
    }

    /// Sends the next queued request if the window is free.
    pub(crate) fn kick(&mut self, ctx: &mut Ctx<'_>) {
        while self.out.is_none() && self.dead.is_none() && self.phase == Phase::Established {
            let Some(req) = self.queue.pop_front() else {
                return;
            };
            match req {
                Req::RekeyChild(spi) => self.start_rekey_child(ctx, spi),
                Req::RekeyIke => self.start_rekey_ike(ctx),
                Req::DeleteChild(spi) => self.start_delete_child(ctx, spi),
                Req::DeleteIke => self.start_delete_ike(ctx),
                Req::Dpd => self.send_request(ctx, exchange::INFORMATIONAL, &[], OutKind::Dpd),
            }
        }
    }

    /// Handles a message for this SA (already matched by SPIs).
    pub(crate) fn handle(
        &mut self,
        ctx: &mut Ctx<'_>,
        local: SocketAddr,
        remote: SocketAddr,
        msg: &[u8],
        m: wire::Message,
    ) {
        let h = m.header;
        if h.from_initiator() == self.initiator {
            // Our own flag in a message from the peer: a reflection or a confused peer.
            ctx.c.invalid_state += 1;
            return;
        }
        if h.is_response() {
            let Some(o) = &self.out else {
                ctx.c.invalid_msg_id += 1;
                return;
            };
            if o.msg_id != h.msg_id {
                ctx.c.invalid_msg_id += 1;
                return;
            }
            let Ok(payloads) = self.decrypt(ctx, msg, &m) else {
                return;
            };
            self.last_heard = ctx.now;
            self.update_addr(local, remote);
            let Some(o) = self.out.take() else { return };
            self.on_response(ctx, h, msg, payloads, o);
            self.kick(ctx);
            return;
        }
        // A request.
        if let Some((id, hash, bytes)) = &self.last_resp
            && *id == h.msg_id
        {
            if *hash == req_hash(msg) {
                let b = bytes.clone();
                ctx.c.retransmits += 1;
                self.transmit(ctx, b);
            } else {
                ctx.c.invalid_msg_id += 1;
            }
            return;
        }
        if h.msg_id != self.peer_msg_id {
            ctx.c.invalid_msg_id += 1;
            return;
        }
        let payloads = match self.decrypt(ctx, msg, &m) {
            Ok(p) => p,
            Err(Some(t)) => {
                // RFC 7296 2.5: refuse the whole request, naming the payload type.
                self.last_heard = ctx.now;
                let n = Payload::notify(wire::notify::UNSUPPORTED_CRITICAL_PAYLOAD, vec![t]);
                self.send_response(ctx, h.exchange, h.msg_id, msg, &[n]);
                return;
            }
            Err(None) => return,
        };
        self.last_heard = ctx.now;
        self.update_addr(local, remote);
        match (h.exchange, self.phase) {
            (exchange::IKE_AUTH, Phase::InitDone) => self.respond_auth(ctx, h, msg, &payloads),
            (exchange::CREATE_CHILD_SA, Phase::Established) => {
                self.respond_create_child(ctx, h, msg, &payloads)
            }
            (exchange::INFORMATIONAL, Phase::Established) => {
                self.respond_informational(ctx, h, msg, &payloads)
            }
            _ => ctx.c.invalid_state += 1,
        }
        self.kick(ctx);
    }

    /// With NAT-T, the peer may change address or port; follow it (RFC 7296 2.23).
    fn update_addr(&mut self, local: SocketAddr, remote: SocketAddr) {
        if self.nat {
            self.local = local;
            self.remote = remote;
        }
    }

    /// The payloads of `m` (decrypted unless IKE_SA_INIT), or `Err(Some(type))` for an
    /// authenticated message with an unsupported critical payload, `Err(None)` if dropped.
    fn decrypt(
        &self,
        ctx: &mut Ctx<'_>,
        msg: &[u8],
        m: &wire::Message,
    ) -> Result<Vec<Payload>, Option<u8>> {
        if m.header.exchange == exchange::IKE_SA_INIT {
            // Only the answer to our own IKE_SA_INIT comes in clear. Any other clear
            // message is unauthenticated: it must not refresh liveness or move the SA's
            // addresses, which callers do on success.
            if m.header.is_response() && self.phase == Phase::InitSent {
                return Ok(m.payloads.clone());
            }
            ctx.c.invalid_state += 1;
            return Err(None);
        }
        let (Some(k), Some(Payload::Sk { offset, inner })) = (&self.keys, m.payloads.last()) else {
            ctx.c.invalid_malformed += 1;
            return Err(None);
        };
        match k.open(!self.initiator, msg, *offset, *inner) {
            Ok(p) => Ok(p),
            Err(crate::crypto::sk::SkError::Integrity) => {
                ctx.c.invalid_integrity += 1;
                Err(None)
            }
            Err(crate::crypto::sk::SkError::Wire(wire::WireError::Critical(t))) => {
                ctx.c.invalid_critical += 1;
                Err(Some(t))
            }
            Err(_) => {
                ctx.c.invalid_malformed += 1;
                Err(None)
            }
        }
    }

    fn on_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: Header,
        msg: &[u8],
        p: Vec<Payload>,
        o: Outstanding,
    ) {
        match o.kind {
            OutKind::Init => self.on_init_response(ctx, h, msg, &p),
            OutKind::Auth { spi_in } => self.on_auth_response(ctx, &p, spi_in),
            OutKind::RekeyChild {
                old_spi_in,
                spi_in,
                ni,
                dh,
                esp,
            } => self.on_rekey_child_response(ctx, &p, old_spi_in, spi_in, ni, dh, esp),
            OutKind::RekeyIke { spi, ni, dh, suite } => {
                self.on_rekey_ike_response(ctx, &p, spi, ni, dh, suite)
            }
            OutKind::DeleteChild(spis) => self.on_delete_child_response(ctx, &spis),
            OutKind::DeleteIke => self.die(ctx, "deleted", self.rekeyed),
            OutKind::Dpd => {}
        }
    }

    /// Ends the SA: its children go down (unless moved), the endpoint removes it.
    pub(crate) fn die(&mut self, ctx: &mut Ctx<'_>, reason: &str, silent: bool) {
        if self.dead.is_some() {
            return;
        }
        for ch in self.children.drain(..) {
            ctx.events.push_back(Event::ChildDown {
                conn: self.name.clone(),
                spi_in: ch.spi_in,
                spi_out: ch.spi_out,
            });
        }
        self.out = None;
        self.dead = Some((reason.to_string(), silent));
    }

    /// The next time [`on_timeout`](Self::on_timeout) has work.
    pub(crate) fn next_timeout(&self, cfg: &ConnConfig) -> Option<Instant> {
        if self.dead.is_some() {
            return None;
        }
        let mut t = self.out.as_ref().map(|o| o.next_at);
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        if self.phase == Phase::Established && !self.rekeyed {
            min(self.rekey_at);
            for ch in &self.children {
                min(ch.rekey_at);
            }
            if !cfg.dpd_delay.is_zero() && self.out.is_none() {
                min(self.last_heard.checked_add(cfg.dpd_delay));
            }
        } else if self.out.is_none() {
            // A half-open or replaced SA that nobody finishes: give up on it in time.
            min(Some(self.last_heard + Duration::from_secs(30)));
        }
        t
    }

    /// Retransmits, gives up, starts rekeys and liveness checks that are due.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.dead.is_some() {
            return;
        }
        let now = ctx.now;
        if let Some(o) = &mut self.out
            && o.next_at <= now
        {
            if o.tries >= ctx.cfg.retransmit.tries {
                ctx.c.timeouts += 1;
                let silent = self.rekeyed;
                self.die(ctx, "peer did not answer (retransmits exhausted)", silent);
                return;
            }
            o.tries += 1;
            o.next_at = now + Self::retransmit_after(ctx.cfg, o.tries);
            let b = o.bytes.clone();
            ctx.c.retransmits += 1;
            self.transmit(ctx, b);
        }
        if self.phase != Phase::Established || self.rekeyed {
            if self.out.is_none() && self.last_heard + Duration::from_secs(30) <= now {
                self.die(ctx, "half-open SA expired", self.rekeyed);
            }
            return;
        }
        if self.rekey_at.is_some_and(|t| t <= now) {
            self.rekey_at = None;
            self.request(ctx, Req::RekeyIke);
        }
        let due: Vec<u32> = self
            .children
            .iter()
            .filter(|c| c.rekey_at.is_some_and(|t| t <= now))
            .map(|c| c.spi_in)
            .collect();
        for spi in due {
            if let Some(c) = self.children.iter_mut().find(|c| c.spi_in == spi) {
                c.rekey_at = None;
            }
            self.request(ctx, Req::RekeyChild(spi));
        }
        if !ctx.cfg.dpd_delay.is_zero()
            && self.out.is_none()
            && self
                .last_heard
                .checked_add(ctx.cfg.dpd_delay)
                .is_some_and(|t| t <= now)
        {
            // Counts as heard so the next check waits a whole delay after this one's answer.
            self.request(ctx, Req::Dpd);
        }
    }
}

/// A hash of a request, to recognise its retransmits.
pub(crate) fn req_hash(msg: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(msg).into()
}
