//! The application layer of one flow: protocol detection on its first bytes, then the
//! parser of the detected protocol, fed with the flow's reassembled TCP stream (in order,
//! no gaps) or its UDP datagrams. The engine asks it for the transactions to inspect.
//!
//! Bounds: detection looks at most at [`DETECT_BYTES`] bytes of a direction before giving
//! up; each parser bounds its own buffering (see its module docs), and charges what it
//! holds to the queue thread's [`AppBudget`] (`app_memcap`). A parser whose charge is
//! refused is freed at once and the flow is marked ([`AppState::take_memcap_hit`]) for the
//! engine to apply the exception policy.

use super::budget::AppBudget;
use super::budget::Charge;
use super::detect::{Detection, detect};
use super::dns::DnsState;
use super::http::{HttpLimits, HttpState};
use super::tls::TlsState;
use super::{AppProto, Dir, Transaction};

/// The most bytes of one direction that may wait for protocol detection. Detection itself
/// decides on fewer ([`super::detect::DETECT_MAX_LEN`]); this only caps what is held when a
/// peer sends its first bytes one at a time.
pub(crate) const DETECT_BYTES: usize = 4096;

/// Where a flow's application layer is.
#[derive(Default)]
pub(crate) enum AppState {
    /// No protocol recognised yet; per direction, whether detection has given up on it.
    #[default]
    Detecting,
    /// One direction gave up, the other has not decided yet.
    HalfDetected(Dir),
    /// HTTP/1.x.
    Http(Box<HttpState>),
    /// TLS.
    Tls(Box<TlsState>),
    /// DNS.
    Dns(Box<DnsState>),
    /// No parser applies (no known protocol): the flow is inspected packet by packet
    /// (and as a raw stream) only.
    Failed(Option<AppProto>),
    /// The parser was freed because the application-layer memcap refused it memory; the
    /// engine has not applied the exception policy yet. Then as `Failed`.
    OverCap(AppProto),
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppState::Detecting => f.write_str("Detecting"),
            AppState::HalfDetected(d) => write!(f, "HalfDetected({d:?})"),
            AppState::Failed(p) => write!(f, "Failed({p:?})"),
            other => write!(f, "{:?}", other.proto()),
        }
    }
}

impl AppState {
    /// The flow's protocol, once detected (also after its parser failed, as Suricata keeps
    /// `app-layer-protocol` of a flow whose parser errored).
    pub(crate) fn proto(&self) -> Option<AppProto> {
        match self {
            AppState::Http(_) => Some(AppProto::Http),
            AppState::Tls(_) => Some(AppProto::Tls),
            AppState::Dns(_) => Some(AppProto::Dns),
            AppState::Failed(p) => *p,
            AppState::OverCap(p) => Some(*p),
            AppState::Detecting | AppState::HalfDetected(_) => None,
        }
    }

    /// True while the protocol is still being detected.
    pub(crate) fn detecting(&self) -> bool {
        matches!(self, AppState::Detecting | AppState::HalfDetected(_))
    }

    fn start(&mut self, p: AppProto, budget: &AppBudget) {
        *self = match p {
            AppProto::Http => AppState::Http(Box::new(HttpState::with_budget(budget))),
            AppProto::Tls => {
                let mut t = Box::<TlsState>::default();
                t.mem = Charge::new(budget);
                AppState::Tls(t)
            }
            AppProto::Dns => {
                let mut d = Box::<DnsState>::default();
                d.mem = Charge::new(budget);
                AppState::Dns(d)
            }
        };
    }

    /// True (once) if the memcap stopped the flow's parser since the last call: the
    /// parser is freed, and the engine applies the exception policy to the flow.
    pub(crate) fn take_memcap_hit(&mut self) -> bool {
        match *self {
            AppState::OverCap(p) => {
                *self = AppState::Failed(Some(p));
                true
            }
            _ => false,
        }
    }

    /// Frees the parser for good (its charge is credited back), keeping the flow's
    /// protocol: what a flow the exception policy drops or passes needs no more.
    pub(crate) fn disable(&mut self) {
        if !matches!(self, AppState::Failed(_)) {
            *self = AppState::Failed(self.proto());
        }
    }

    /// Charges the DNS or TLS state for what it holds now (HTTP charges itself per step);
    /// if the memcap refuses, frees the parser (see [`AppState::OverCap`]).
    fn charge(&mut self) {
        let fits = match self {
            AppState::Tls(t) => {
                let m = t.memory();
                t.mem.set(m)
            }
            AppState::Dns(d) => {
                let m = d.memory();
                d.mem.set(m)
            }
            AppState::Http(h) => !h.over_cap(),
            _ => true,
        };
        if !fits && let Some(p) = self.proto() {
            *self = AppState::OverCap(p);
        }
    }

    /// Detection's answer for one direction: true if a parser now runs.
    fn detected(&mut self, dir: Dir, d: Detection, held: usize, budget: &AppBudget) -> bool {
        match d {
            Detection::Proto(p) => {
                self.start(p, budget);
                self.charge();
                !matches!(self, AppState::OverCap(_))
            }
            Detection::NeedMore if held < DETECT_BYTES => false,
            Detection::NeedMore | Detection::NotThis => {
                *self = match self {
                    AppState::HalfDetected(other) if *other != dir => AppState::Failed(None),
                    _ => AppState::HalfDetected(dir),
                };
                false
            }
        }
    }

    /// Feeds the bytes of direction `dir` of a TCP stream that the application layer has
    /// not consumed yet (`pending`, in order, from the first unconsumed byte). Returns how
    /// many of them are consumed: all of them, except while detection needs more.
    pub(crate) fn feed_stream(
        &mut self,
        dir: Dir,
        pending: &[u8],
        ports: (u16, u16),
        limits: &HttpLimits,
        budget: &AppBudget,
    ) -> usize {
        if pending.is_empty() {
            return 0;
        }
        if let AppState::HalfDetected(d) = self
            && *d == dir
        {
            // This direction already gave up: its bytes go unparsed.
            return pending.len();
        }
        if self.detecting() {
            let d = detect(dir, pending, false, ports.0, ports.1);
            if !self.detected(dir, d, pending.len(), budget) {
                return if self.detecting() && matches!(d, Detection::NeedMore) {
                    0
                } else {
                    pending.len()
                };
            }
        }
        // A parser error stops that parser where it happened (HTTP: that direction, as
        // libhtp; DNS over TCP and TLS: the flow) and the parser remembers it; what it
        // parsed stays inspectable, and its protocol stays the flow's.
        let res = match self {
            AppState::Http(h) => h.feed(dir, pending, limits).map_err(|e| e.to_string()),
            AppState::Tls(t) => t.feed(dir, pending).map_err(|e| e.to_string()),
            AppState::Dns(d) => d.feed_stream(dir, pending).map_err(|e| e.to_string()),
            _ => Ok(()),
        };
        if let Err(e) = res {
            tracing::trace!(proto = ?self.proto(), "application-layer parser stopped: {e}");
        }
        if let AppState::Http(h) = self
            && h.failed(dir) == Some(super::http::HttpError::Memcap)
        {
            *self = AppState::OverCap(AppProto::Http);
        }
        self.charge();
        pending.len()
    }

    /// Feeds one UDP datagram travelling in `dir`.
    pub(crate) fn feed_datagram(
        &mut self,
        dir: Dir,
        data: &[u8],
        ports: (u16, u16),
        budget: &AppBudget,
    ) {
        if self.detecting() {
            if let AppState::HalfDetected(d) = self
                && *d == dir
            {
                return;
            }
            let d = detect(dir, data, true, ports.0, ports.1);
            // A datagram is all there is: NeedMore is as good as NotThis.
            if !self.detected(dir, d, DETECT_BYTES, budget) {
                return;
            }
        }
        if let AppState::Dns(d) = self {
            // A malformed datagram makes no transaction; the next one is parsed all the same.
            let _ = d.feed_datagram(dir, data);
            self.charge();
        }
    }

    /// The direction `dir` ended (FIN, RST, flow timeout): a body delimited by the close
    /// completes.
    pub(crate) fn close(&mut self, dir: Dir) {
        if let AppState::Http(h) = self {
            h.close(dir);
            self.charge();
        }
    }

    /// Calls `f` with each live transaction, oldest first.
    pub(crate) fn for_each_tx(&self, f: &mut dyn FnMut(&dyn Transaction)) {
        match self {
            AppState::Http(h) => h.txs().for_each(|t| f(t)),
            AppState::Dns(d) => d.txs().for_each(|t| f(t)),
            AppState::Tls(t) => f(t.tx()),
            _ => {}
        }
    }

    /// Drops the transactions with ids below `below` (the engine has finished with them).
    pub(crate) fn retire(&mut self, below: u64) {
        match self {
            AppState::Http(h) => h.retire(below),
            AppState::Dns(d) if below > 0 => {
                d.free_through(below - 1);
                self.charge();
            }
            _ => {}
        }
    }

    /// Bytes the parser has charged to the application-layer memcap.
    pub(crate) fn charged(&self) -> usize {
        match self {
            AppState::Http(h) => h.charged(),
            AppState::Tls(t) => t.mem.charged(),
            AppState::Dns(d) => d.mem.charged(),
            _ => 0,
        }
    }

    /// True if the parser holds transaction `id`.
    pub(crate) fn holds_tx(&self, id: u64) -> bool {
        match self {
            AppState::Http(h) => h.holds(id),
            AppState::Dns(d) => d.tx(id).is_some(),
            AppState::Tls(t) => t.tx().id() == id,
            _ => false,
        }
    }

    /// True if the flow is TLS and both directions are encrypted (see
    /// [`TlsState::encrypted`]).
    pub(crate) fn tls_encrypted(&self) -> bool {
        matches!(self, AppState::Tls(t) if t.encrypted())
    }

    /// True if no transaction can progress any more: `more_bytes` says whether the flow's
    /// later bytes may still reach the parser (false once both streams are done). No
    /// parser left; or TLS encrypted both ways or stopped (later bytes are not parsed);
    /// or HTTP holding no live transaction (a close could complete one); or, without
    /// more bytes, DNS and a protocol still undetected.
    pub(crate) fn settled(&self, more_bytes: bool) -> bool {
        match self {
            AppState::Tls(t) => t.encrypted() || t.is_stopped() || !more_bytes,
            AppState::Http(_) => self.tx_count() == 0,
            AppState::Dns(_) => self.tx_count() == 0 || !more_bytes,
            AppState::Detecting | AppState::HalfDetected(_) => !more_bytes,
            AppState::Failed(_) | AppState::OverCap(_) => true,
        }
    }

    /// Transactions held by the parser now.
    pub(crate) fn tx_count(&self) -> usize {
        let mut n = 0;
        self.for_each_tx(&mut |_| n += 1);
        n
    }
}
