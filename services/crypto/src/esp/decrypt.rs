//! `decrypt`: checks and opens the ESP packets of the configured SAs (see the parent
//! module).

use super::natt::{NattDatagram, classify};
use super::*;
use crate::durable::{Gate, InEdge};
use crate::keys::{Cipher, ICV_LEN, load_key};
use crate::persist::{self, Dir, SaFile, fingerprint};
use crate::sa::SaCrypto;
use crate::selectors;
use crate::selectors::Selectors;
use crate::state::SaId;
use crate::table::{Conn, IkeIn, IkeSas, InView};
use crate::window::{Replay, ReplayWindow};
use relay_core::Prefix;
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{EspPacket, EspTrailer, IpPacket, Layout, esp, proto};
use relay_core::{
    Action, Context, Counter, Counters, FailPolicy, InvalidConfig, IpVersion, Kept, Manifest,
    Packet, Resources, Service, ServiceConfig, ServiceFactory, Tally,
};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// An inbound SA as one `decrypt` service configures it: the shared state, and what this
/// configuration says about the SA's mode and peer (not part of the state kept across
/// reloads, so that a reload may change them).
struct InboundSa {
    state: Arc<Inbound>,
    esn: bool,
    mode: EspMode,
    peer: Option<Prefix>,
}

struct DecryptFactory {
    sas: Arc<Vec<InboundSa>>,
    /// The same SAs detached, for a service built without the daemon's start of their
    /// state ([`InStarted`]): windows in memory, starting empty (see the parent module).
    detached: Arc<Vec<InboundSa>>,
    /// A detached service was built and said so (once).
    told_detached: std::sync::atomic::AtomicBool,
    /// IKE connections whose inbound SAs are accepted too.
    ike: Vec<Arc<Conn>>,
    ike_mode: EspMode,
    ike_peer: Option<Prefix>,
    encap_port: u16,
    persister: Arc<crate::durable::Persister>,
    /// With where the manual SAs' window edges are written (none without manual SAs).
    manifest: Manifest,
}

impl ServiceConfig for DecryptConfig {
    const KIND: &'static str = "decrypt";

    /// With a fresh SA state: the replay window resumes from the state file (reads only).
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
        if self.sa.is_empty() && self.ike.is_empty() {
            return Err(
                "no [[service.NAME.sa]] and no ike: decrypt needs at least one SA or IKE \
                 connection"
                    .into(),
            );
        }
        if self.encap_port == 0 {
            return Err(
                "encap_port = 0: name the UDP port ESP in UDP arrives on (default 4500)".into(),
            );
        }
        if self.ike.iter().any(|c| c.is_empty()) {
            return Err("ike = [\"\"]: name the IKE connections".into());
        }
        if !self.ike.is_empty() && self.ike_mode == EspMode::Tunnel && self.ike_peer.is_none() {
            return Err("ike_mode = \"tunnel\" needs ike_peer: the peer relay's address".into());
        }
        let table = IkeSas::shared(kept);
        let ike: Vec<Arc<Conn>> = self.ike.iter().map(|c| table.conn(c)).collect();
        for c in &ike {
            c.set_window(self.replay_window);
        }
        let dir = persist::resolve(self.state_dir.as_deref());
        persist::check_dir(&dir)?;
        let states = kept.get_or_default::<SaStates>();
        let mut sas: Vec<InboundSa> = Vec::new();
        let mut detached: Vec<InboundSa> = Vec::new();
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
            let id = SaId::new(s.spi, s.cipher, &key);
            // A live SA keeps its window; only a new one resumes from its file, everything
            // up to the edge recorded there counting as seen.
            let sa = states.inbound.get_or_try_make(id, || {
                let file = SaFile::new(&dir, Dir::In, s.spi, fingerprint(&key));
                let top = file.load()?.unwrap_or(0);
                Ok::<_, String>(Inbound {
                    spi: s.spi,
                    crypto: SaCrypto::new(s.cipher, &key),
                    window: Mutex::new(ReplayWindow::new(self.replay_window).resumed(top)),
                    edge: InEdge::durable(file, top),
                    usage: None,
                })
            })?;
            // A kept SA keeps what it has seen, in a window of the configured size.
            let mut w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            if w.size() != ReplayWindow::new(self.replay_window).size() {
                *w = w.resized(self.replay_window);
            }
            drop(w);
            detached.push(InboundSa {
                state: Arc::new(Inbound {
                    spi: s.spi,
                    crypto: SaCrypto::new(s.cipher, &key),
                    window: Mutex::new(ReplayWindow::new(self.replay_window)),
                    edge: InEdge::fresh(),
                    usage: None,
                }),
                esn: s.esn,
                mode: s.mode,
                peer: s.peer,
            });
            sas.push(InboundSa {
                state: sa,
                esn: s.esn,
                mode: s.mode,
                peer: s.peer,
            });
        }
        let sas = Arc::new(sas);
        // The daemon's start of the SAs' state: their edges written, the state thread.
        let starts = if sas.is_empty() {
            Vec::new()
        } else {
            let (sas, persister) = (sas.clone(), states.persister.clone());
            let what = format!("the ESP window state in {}", dir.display());
            vec![relay_core::Start::new(what, move || {
                for s in sas.iter() {
                    s.state.activate(&persister);
                }
                Ok(InStarted)
            })]
        };
        Ok(Arc::new(DecryptFactory {
            sas,
            detached: Arc::new(detached),
            told_detached: std::sync::atomic::AtomicBool::new(false),
            ike,
            ike_mode: self.ike_mode,
            ike_peer: self.ike_peer,
            encap_port: self.encap_port,
            persister: states.persister.clone(),
            manifest: Manifest {
                // Hiding traffic is its point: with relayd down it stays stopped.
                fail_policy: FailPolicy::Closed,
                // Inner packets forwarded anew where a verdict cannot carry them.
                emits: true,
                rewrites_payload: true,
                state_dirs: (!self.sa.is_empty()).then_some(dir).into_iter().collect(),
                starts,
                ..Manifest::new()
            },
        }))
    }
}

impl ServiceFactory for DecryptFactory {
    fn kind(&self) -> &'static str {
        "decrypt"
    }
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service> {
        // The edges are kept on disk once the daemon started them; else detached.
        let sas = if self.sas.is_empty() || res.get::<InStarted>().is_some() {
            self.sas.clone()
        } else {
            if !self
                .told_detached
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    "decrypt runs detached (not started by a running relayd: replay, a test): \
                     replay windows in memory, starting empty; its state directory is not \
                     written"
                );
            }
            self.detached.clone()
        };
        let c = |n: &str| counters.counter(n);
        Box::new(Decrypt {
            sas,
            ike: self.ike.iter().map(|c| InView::new(c.clone())).collect(),
            ike_mode: self.ike_mode,
            ike_peer: self.ike_peer,
            encap_port: self.encap_port,
            persister: self.persister.clone(),
            resend: Tally::resend(counters),
            decrypted: c("decrypted"),
            passed: c("passed_not_esp"),
            passed_ike: c("passed_ike"),
            dropped_keepalive: c("dropped_keepalive"),
            dropped_unknown_spi: c("dropped_unknown_spi"),
            dropped_unknown_peer: c("dropped_unknown_peer"),
            dropped_outside_ts: c("dropped_outside_ts"),
            dropped_wrong_mode: c("dropped_wrong_mode"),
            dropped_replayed: c("dropped_replayed"),
            dropped_too_old: c("dropped_too_old"),
            dropped_auth: c("dropped_auth_failed"),
            dropped_malformed: c("dropped_malformed"),
            dropped_dummy: c("dropped_dummy"),
            accepted_unsaved: c("accepted_unsaved"),
            log: RateLimit::new(10),
        })
    }
}

struct Decrypt {
    sas: Arc<Vec<InboundSa>>,
    /// This queue thread's view of the IKE connections' inbound SAs.
    ike: Vec<InView>,
    ike_mode: EspMode,
    ike_peer: Option<Prefix>,
    /// Where ESP in UDP arrives (RFC 3948).
    encap_port: u16,
    /// Wakes the thread that writes the windows' edges.
    persister: Arc<crate::durable::Persister>,
    /// Sends inner packets whose family differs from the hook's.
    resend: Tally,
    decrypted: Counter,
    passed: Counter,
    /// IKE on the NAT-T port (a zero non-ESP marker), passed on to the host.
    passed_ike: Counter,
    /// NAT keepalives (RFC 3948 2.3), dropped without a log line.
    dropped_keepalive: Counter,
    dropped_unknown_spi: Counter,
    /// The outer source is not the SA's peer.
    dropped_unknown_peer: Counter,
    /// Authenticated, but outside the IKE child SA's traffic selectors.
    dropped_outside_ts: Counter,
    /// A tunnel packet on a transport SA, or the reverse.
    dropped_wrong_mode: Counter,
    dropped_replayed: Counter,
    dropped_too_old: Counter,
    dropped_auth: Counter,
    dropped_malformed: Counter,
    dropped_dummy: Counter,
    /// Accepted above the window's edge on disk: the disk did not keep up (state_dir
    /// slow or failing); a crash just then could let these be replayed once.
    accepted_unsaved: Counter,
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
    let want = match next {
        proto::IPV4 => IpVersion::V4,
        proto::IPV6 => IpVersion::V6,
        _ => return false,
    };
    IpPacket::new_checked(inner)
        .is_ok_and(|ip| ip.version() == want && ip.packet_len() == inner.len())
}

/// The outer source address of an IP packet whose layout parsed (so its header is whole).
fn source(d: &[u8], version: IpVersion) -> Option<IpAddr> {
    addresses(d, version).map(|(src, _)| src)
}

/// The source and destination addresses of an IP packet whose layout parsed.
fn addresses(d: &[u8], version: IpVersion) -> Option<(IpAddr, IpAddr)> {
    IpPacket::new_checked(d)
        .ok()
        .filter(|ip| ip.version() == version)
        .map(|ip| (ip.src_addr(), ip.dst_addr()))
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
    EspTrailer::parse(body)
        .ok()
        .map(|(plain, t)| (plain, t.next_header))
}

/// Where a packet's ESP header starts (after the UDP header of ESP in UDP).
struct Located {
    layout: Layout,
    /// The transport header's offset (the ESP or UDP header).
    l4: usize,
    /// The ESP header's offset.
    off: usize,
    /// Arrived in UDP (RFC 3948).
    carried: bool,
}

/// An inbound SA a packet names, and what the configuration says of it.
struct Found {
    sa: FoundSa,
    esn: bool,
    mode: EspMode,
    peer: Option<Prefix>,
}

/// A manual SA, or an IKE child SA with its traffic selectors (one reference count each).
enum FoundSa {
    Manual(Arc<Inbound>),
    Ike(Arc<IkeIn>),
}

impl FoundSa {
    fn inbound(&self) -> &Inbound {
        match self {
            FoundSa::Manual(sa) => sa,
            FoundSa::Ike(ike) => &ike.sa,
        }
    }

    fn selectors(&self) -> Option<&Selectors> {
        match self {
            FoundSa::Manual(_) => None,
            FoundSa::Ike(ike) => ike.ts.as_deref(),
        }
    }
}

impl Decrypt {
    /// Finds the ESP header of a packet this service takes; `Err` carries the action for
    /// every other packet (not ESP: passed; IKE on the NAT-T port: passed; a keepalive or
    /// a malformed one: dropped).
    fn locate(&mut self, pkt: &mut Packet, cx: &Context) -> Result<Located, Action> {
        let Some((layout, direct)) = pkt.headers().map(|h| (h.layout(), h.direct())) else {
            return Err(self.drop(|d| &d.dropped_malformed, "not an IP packet", 0, cx));
        };
        let carried = match layout.proto {
            proto::ESP => false,
            proto::UDP => true,
            _ => {
                self.passed.inc();
                return Err(Action::Continue);
            }
        };
        if !direct {
            self.passed.inc();
            return Err(Action::Continue);
        }
        let Some(l4) = layout.l4.filter(|_| !layout.fragment && !pkt.is_partial()) else {
            if carried {
                // Not telling (a later fragment has no port): as any UDP.
                self.passed.inc();
                return Err(Action::Continue);
            }
            let why = "fragment or partial copy";
            return Err(self.drop(|d| &d.dropped_malformed, why, 0, cx));
        };
        if !carried {
            return Ok(Located {
                layout,
                l4,
                off: l4,
                carried,
            });
        }
        // RFC 3948 2.2: on the NAT-T port, a zero marker is IKE, 0xFF a keepalive.
        let d = pkt.data();
        let port = d
            .get(l4 + 2..l4 + 4)
            .map(|p| u16::from_be_bytes([p[0], p[1]]));
        if port != Some(self.encap_port) {
            self.passed.inc();
            return Err(Action::Continue);
        }
        match classify(d, l4, layout.len) {
            NattDatagram::Esp(off) => Ok(Located {
                layout,
                l4,
                off,
                carried,
            }),
            NattDatagram::Ike => {
                self.passed_ike.inc();
                Err(Action::Continue)
            }
            NattDatagram::Keepalive => {
                self.dropped_keepalive.inc();
                Err(Action::Drop)
            }
            NattDatagram::Malformed(why) => Err(self.drop(|d| &d.dropped_malformed, why, 0, cx)),
        }
    }

    /// The inbound SA of `spi`: a manual one, else one of the IKE connections'.
    fn find(&mut self, spi: u32) -> Option<Found> {
        if let Some(s) = self.sas.iter().find(|s| s.state.spi == spi) {
            return Some(Found {
                sa: FoundSa::Manual(s.state.clone()),
                esn: s.esn,
                mode: s.mode,
                peer: s.peer,
            });
        }
        let (mode, peer) = (self.ike_mode, self.ike_peer);
        self.ike.iter_mut().find_map(|v| {
            v.find(spi).map(|s| Found {
                esn: s.esn,
                sa: FoundSa::Ike(s.clone()),
                mode,
                peer,
            })
        })
    }

    /// RFC 4303 3.4.3: a cheap replay check first, the ICV next (decrypting in place), the
    /// window last; then the edge on disk and the SA's usage. Returns the sequence number.
    fn open(
        &mut self,
        pkt: &mut Packet,
        at: &Located,
        f: &Found,
        (spi, low, esp_len): (u32, u32, usize),
        cx: &Context,
    ) -> Result<u64, Action> {
        let sa = f.sa.inbound();
        let seq = {
            let w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            let seq = if f.esn { w.infer_esn(low) } else { low as u64 };
            if let Err(r) = w.check(seq) {
                drop(w);
                return Err(self.replay_drop(r, spi, cx));
            }
            seq
        };
        let hi = f.esn.then_some((seq >> 32) as u32);
        let opened = match pkt.data_mut().get_mut(at.off..at.layout.len) {
            Some(esp) => sa.crypto.open(hi, esp).is_ok(),
            None => false,
        };
        if !opened {
            return Err(self.drop(|d| &d.dropped_auth, "integrity check failed", spi, cx));
        }
        // Accepted once the edge on disk covers it (no replay after a crash), unless the
        // disk cannot keep up.
        if sa.edge.gate(seq, &self.persister) == Gate::Unsaved {
            self.accepted_unsaved.inc();
        }
        {
            // Another queue thread may have taken the same number meanwhile.
            let mut w = sa.window.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(r) = w.check(seq) {
                drop(w);
                return Err(self.replay_drop(r, spi, cx));
            }
            w.update(seq);
        }
        sa.edge.count();
        if let Some(u) = &sa.usage {
            u.add(esp_len);
        }
        Ok(seq)
    }

    /// An IKE child SA carries only what was negotiated (RFC 4301 5.2): checked on the
    /// authenticated plaintext `inner` (a whole packet in tunnel mode, the upper-layer
    /// header on in transport mode), before it goes anywhere.
    fn within_selectors(
        &self,
        pkt: &Packet,
        version: IpVersion,
        ts: &Selectors,
        (inner, next, tunnel): (&[u8], u8, bool),
    ) -> bool {
        let flow = if tunnel {
            selectors::inner_flow(inner)
        } else {
            addresses(pkt.data(), version)
                .map(|(s, t)| selectors::transport_flow(s, t, next, inner))
        };
        flow.is_some_and(|f| ts.allow(&f))
    }

    /// Takes the ESP header, trailer and ICV (and the UDP header of ESP in UDP) off an
    /// authenticated packet whose payload of `plain` bytes starts `hdr` bytes after the
    /// ESP header: the inner packet replaces it (tunnel mode) or its payload follows the
    /// IP header (transport mode).
    fn deliver(
        &mut self,
        pkt: &mut Packet,
        at: &Located,
        (hdr, plain, next): (usize, usize, u8),
        cx: &mut Context,
    ) -> Action {
        match next {
            proto::IPV4 | proto::IPV6 => {
                pkt.remove(0, at.off + hdr);
                pkt.resize(plain);
                self.decrypted.inc();
                // Never to this box: refused (`dropped_local_destination`), forwarded
                // anew on INPUT or across families, else carried on by the verdict.
                cx.pass_inner(pkt, &self.resend)
            }
            proto::NO_NEXT_HEADER => {
                // A dummy packet (RFC 4303 2.6): authenticated, then discarded.
                self.dropped_dummy.inc();
                Action::Drop
            }
            _ => {
                // The UDP header of ESP in UDP goes with the ESP header.
                pkt.remove(at.l4, at.off - at.l4 + hdr);
                pkt.set_transport(at.layout, plain, next);
                if at.carried
                    && let Some(mut h) = pkt.headers_mut()
                {
                    // RFC 3948 3.1.2: the checksum still covers the addresses the sender
                    // used, which a NAT changed; recomputed over the packet's addresses
                    // (the NAT-OA addresses are not known for manual SAs), so the host
                    // accepts it; the ICV has vouched for every byte of it.
                    h.fill_l4_checksum();
                }
                self.decrypted.inc();
                Action::Continue
            }
        }
    }
}

impl Service for Decrypt {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        let at = match self.locate(pkt, cx) {
            Ok(at) => at,
            Err(action) => return action,
        };
        let l = at.layout;
        let Some(esp) = pkt
            .data()
            .get(at.off..l.len)
            .and_then(|e| EspPacket::new_checked(e).ok())
        else {
            let why = "shorter than an ESP header";
            return self.drop(|d| &d.dropped_malformed, why, 0, cx);
        };
        let (spi, low) = (esp.spi(), esp.seq_no());
        let esp_len = esp.into_inner().len();
        let Some(found) = self.find(spi) else {
            return self.drop(|d| &d.dropped_unknown_spi, "unknown SPI", spi, cx);
        };
        // Only the SA's peer may use it: checked before any cryptographic work.
        if let Some(peer) = found.peer
            && !source(pkt.data(), l.version).is_some_and(|a| peer.contains(a))
        {
            let why = "outer source is not the SA's peer";
            return self.drop(|d| &d.dropped_unknown_peer, why, spi, cx);
        }
        let cipher = found.sa.inbound().crypto.cipher();
        if let Some(why) = bad_length(cipher, esp_len) {
            return self.drop(|d| &d.dropped_malformed, why, spi, cx);
        }
        if let Err(action) = self.open(pkt, &at, &found, (spi, low, esp_len), cx) {
            return action;
        }
        let hdr = esp::HEADER_LEN + cipher.iv_len();
        // The lengths were checked above; `get` keeps a mistake from becoming a panic.
        let body = pkt
            .data()
            .get(at.off + hdr..l.len.saturating_sub(ICV_LEN))
            .unwrap_or_default();
        let Some((plain, next)) = trailer(body) else {
            return self.drop(|d| &d.dropped_malformed, "bad padding", spi, cx);
        };
        let inner = body.get(..plain).unwrap_or_default();
        let tunnel = matches!(next, proto::IPV4 | proto::IPV6);
        if next != proto::NO_NEXT_HEADER && tunnel != (found.mode == EspMode::Tunnel) {
            let why = if tunnel {
                "a tunnel-mode packet on a transport SA (set mode = \"tunnel\" and peer)"
            } else {
                "a transport-mode packet on a tunnel SA"
            };
            return self.drop(|d| &d.dropped_wrong_mode, why, spi, cx);
        }
        if let Some(ts) = found.sa.selectors()
            && next != proto::NO_NEXT_HEADER
            && !self.within_selectors(pkt, l.version, ts, (inner, next, tunnel))
        {
            let why = "outside the SA's traffic selectors";
            return self.drop(|d| &d.dropped_outside_ts, why, spi, cx);
        }
        // Tunnel mode: the inner packet replaces the whole packet.
        if tunnel && !is_whole_packet(inner, next) {
            return self.drop(|d| &d.dropped_malformed, "bad inner packet", spi, cx);
        }
        self.deliver(pkt, &at, (hdr, plain, next), cx)
    }
}
