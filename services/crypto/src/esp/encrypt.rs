//! `encrypt`: protects each packet in an ESP packet of the SA (see the parent module).

use super::natt::{Encap, UdpEncap, emit_udp, fill_udp_v6};
use super::*;
use crate::durable::{NoSeq, OutSeq};
use crate::keys::{ICV_LEN, load_key};
use crate::persist::{self, Dir, SaFile, fingerprint};
use crate::sa::SaCrypto;
use crate::state::SaId;
use crate::table::{Conn, IkeSas, OutView};
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{
    EspPacket, EspRepr, EspTrailer, IpRepr, esp, fix_ip_header, ipv4, ipv6, proto, tcp, udp,
};
use relay_core::{
    Action, Context, Counter, Counters, FailPolicy, InvalidConfig, IpVersion, Kept, Manifest,
    MssClamp, Packet, Resources, Service, ServiceConfig, ServiceFactory, Tally,
};
use relay_inject::TooBig;
use std::net::IpAddr;
use std::sync::Arc;

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

/// Where a factory's SA comes from.
enum Source {
    /// Manual keys: one SA for the service's life, raw ESP or in UDP (`encap`). Its state
    /// is started by the daemon ([`OutStarted`]); a service built without it uses
    /// `detached` (in memory, a derived key: see the parent module).
    Manual {
        sa: Arc<Outbound>,
        detached: Arc<Outbound>,
        esn: bool,
        encap: Option<UdpEncap>,
    },
    /// The current outbound SA of an IKE connection.
    Ike(Arc<Conn>),
}

/// What a queue thread's service encrypts with.
enum SaRef {
    Manual(Arc<Outbound>, bool, Option<UdpEncap>),
    Ike(OutView),
}

struct EncryptFactory {
    source: Source,
    /// The suite the packet size limits are computed for (with IKE, the one that adds
    /// most: AES-CBC).
    cipher: Cipher,
    wrap: Wrap,
    mtu: u16,
    /// Whether the size limits leave room for a UDP header (RFC 3948): with `encap =
    /// "udp"`, and always with IKE, whose SAs may be UDP-encapsulated at any time (the
    /// MSS clamp is a rule installed once).
    udp_room: bool,
    /// With where the manual SA's reservations are written and their start (none with
    /// IKE).
    manifest: Manifest,
    /// A detached service was built and said so (once).
    told_detached: std::sync::atomic::AtomicBool,
}

impl EncryptFactory {
    /// The largest packet whose upper layer starts at `l4` (transport mode) that still fits
    /// the path MTU once encrypted.
    fn max_inner(&self, l4: usize) -> usize {
        let c = self.cipher;
        let udp = if self.udp_room { udp::HEADER_LEN } else { 0 };
        let fixed = 8 + udp + c.iv_len() + ICV_LEN;
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

    /// With a fresh SA state: the sequence counter resumes from the state file (reads only).
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        self.into_factory_kept(name, &Kept::new())
    }

    fn into_factory_kept(
        self,
        _name: &str,
        kept: &Kept,
    ) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
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
        let encap = self.udp_encap()?;
        let (source, cipher) = match (&self.ike, self.spi, self.cipher, &self.key_file) {
            (Some(_), ..) if self.encap != Encap::None => {
                return Err(
                    "encap is for manual keys: an IKE connection brings its own \
                            (UDP 4500 when it finds a NAT)"
                        .into(),
                );
            }
            (Some(conn), None, None, None) => {
                if conn.is_empty() {
                    return Err("ike = \"\": name the IKE connection".into());
                }
                let c = IkeSas::shared(kept).conn(conn);
                (Source::Ike(c), Cipher::Aes256CbcHmac)
            }
            (Some(_), ..) => {
                return Err("ike excludes spi, cipher and key_file: an IKE connection \
                            brings its own SAs"
                    .into());
            }
            (None, Some(spi), Some(cipher), Some(key_file)) => {
                let (sa, detached) = self.manual_sa(spi, cipher, key_file, kept)?;
                let esn = self.esn;
                let source = Source::Manual {
                    sa,
                    detached,
                    esn,
                    encap,
                };
                (source, cipher)
            }
            (None, ..) => {
                return Err(
                    "encrypt needs spi, cipher and key_file (manual keys), or ike \
                            (an IKE connection)"
                        .into(),
                );
            }
        };
        let udp_room = encap.is_some() || matches!(source, Source::Ike(_));
        let state_dir = matches!(source, Source::Manual { .. })
            .then(|| persist::resolve(self.state_dir.as_deref()));
        // The daemon's start of the SA's state: the first reservation, the state thread.
        let starts = match &source {
            Source::Manual { sa, .. } => {
                let sa = sa.clone();
                let what = format!(
                    "the ESP sequence state of SPI {:#x} in {}",
                    sa.spi,
                    state_dir
                        .as_deref()
                        .unwrap_or(std::path::Path::new(""))
                        .display()
                );
                vec![relay_core::Start::new(what, move || {
                    sa.seq.activate();
                    Ok(OutStarted(sa.clone()))
                })]
            }
            Source::Ike(_) => Vec::new(),
        };
        let mut f = EncryptFactory {
            source,
            cipher,
            wrap,
            mtu: self.mtu,
            udp_room,
            manifest: Manifest::new(),
            told_detached: std::sync::atomic::AtomicBool::new(false),
        };
        // Transport mode keeps the IP header, so the room depends on its length.
        let mss =
            |ip: usize| (f.max_inner(ip).saturating_sub(ip + tcp::HEADER_LEN)).min(65535) as u16;
        f.manifest = Manifest {
            // Hiding traffic is its point: with relayd down it stays stopped.
            fail_policy: FailPolicy::Closed,
            // Tunnel packets an IPv6 hook's verdict cannot carry, ICMP errors.
            emits: true,
            rewrites_payload: true,
            state_dirs: state_dir.into_iter().collect(),
            starts,
            clamp_mss: Some(MssClamp {
                ipv4: mss(ipv4::HEADER_LEN),
                ipv6: mss(ipv6::HEADER_LEN),
            }),
            ..Manifest::new()
        };
        Ok(Arc::new(f))
    }
}

impl EncryptConfig {
    /// The UDP encapsulation `encap`, `encap_port` and `encap_source_port` ask for.
    fn udp_encap(&self) -> Result<Option<UdpEncap>, InvalidConfig> {
        let ports = [
            ("encap_port", self.encap_port),
            ("encap_source_port", self.encap_source_port),
        ];
        if self.encap == Encap::None {
            if let Some((key, _)) = ports.iter().find(|(_, p)| p.is_some()) {
                return Err(format!("{key} is for encap = \"udp\"").into());
            }
            return Ok(None);
        }
        if let Some((key, _)) = ports.iter().find(|(_, p)| *p == Some(0)) {
            return Err(format!("{key} = 0: name a UDP port (default 4500)").into());
        }
        let d = UdpEncap::default();
        Ok(Some(UdpEncap {
            src_port: self.encap_source_port.unwrap_or(d.src_port),
            dst_port: self.encap_port.unwrap_or(d.dst_port),
        }))
    }

    /// The manual SA, live or resumed from its state file (read only), and its detached
    /// twin for a service built without the daemon's start (see the parent module).
    fn manual_sa(
        &self,
        spi: u32,
        cipher: Cipher,
        key_file: &std::path::Path,
        kept: &Kept,
    ) -> Result<(Arc<Outbound>, Arc<Outbound>), InvalidConfig> {
        check_spi(spi)?;
        let key = load_key(key_file, cipher).map_err(|e| e.to_string())?;
        let id = SaId::new(spi, cipher, &key);
        let dir = persist::resolve(self.state_dir.as_deref());
        persist::check_dir(&dir)?;
        let states = kept.get_or_default::<SaStates>();
        if let Some(other) = states.outbound.other_sa_with_key(&id) {
            return Err(format!(
                "key_file {}: the key is already used by the outbound SA with SPI {other:#x}; \
                 two SAs under one key would send the same IVs (the nonce does not include the \
                 SPI): give each SA its own key (relayd keygen)",
                key_file.display()
            )
            .into());
        }
        // A live SA keeps its counter; only a new one resumes from its file.
        let sa = states.outbound.get_or_try_make(id, || {
            let file = SaFile::new(&dir, Dir::Out, spi, fingerprint(&key));
            let reserved = file.load()?.unwrap_or(0);
            Ok::<_, String>(Outbound {
                spi,
                crypto: SaCrypto::new(cipher, &key),
                seq: Arc::new(OutSeq::durable(
                    file,
                    reserved,
                    self.sequence_reserve,
                    states.persister.clone(),
                )),
                usage: None,
            })
        })?;
        let detached = Arc::new(Outbound {
            spi,
            crypto: SaCrypto::new(cipher, &detached_key(cipher, &key)),
            seq: Arc::new(OutSeq::fresh(Default::default())),
            usage: None,
        });
        Ok((sa, detached))
    }
}

impl ServiceFactory for EncryptFactory {
    fn kind(&self) -> &'static str {
        "encrypt"
    }
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service> {
        let sa = match &self.source {
            Source::Manual {
                sa,
                detached,
                esn,
                encap,
            } => match res.get::<OutStarted>() {
                // The daemon started the SA's state: reserved on disk, kept ahead.
                Some(started) if Arc::ptr_eq(&started.0, sa) => {
                    SaRef::Manual(started.0.clone(), *esn, *encap)
                }
                _ => {
                    if !self
                        .told_detached
                        .swap(true, std::sync::atomic::Ordering::Relaxed)
                    {
                        tracing::warn!(
                            spi = format_args!("{:#x}", sa.spi),
                            "encrypt runs detached (not started by a running relayd: replay, \
                             a test): sequence numbers from 1 in memory, sealed with a key \
                             derived from key_file, which the peer cannot open; its state \
                             directory is not written"
                        );
                    }
                    SaRef::Manual(detached.clone(), *esn, *encap)
                }
            },
            Source::Ike(conn) => SaRef::Ike(OutView::new(conn.clone())),
        };
        let c = |n: &str| counters.counter(n);
        Box::new(Encrypt {
            sa: Some(sa),
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
            dropped_seq_unreserved: c("dropped_seq_unreserved"),
            dropped_no_sa: c("dropped_no_sa"),
            log: RateLimit::new(1),
        })
    }
}

struct Encrypt {
    /// Taken out while a packet is processed (so that the SA is borrowed from a local).
    sa: Option<SaRef>,
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
    /// Past the reservation on disk (the state file could not be written in time).
    dropped_seq_unreserved: Counter,
    /// An IKE connection without an outbound SA: fail closed.
    dropped_no_sa: Counter,
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

    /// The next sequence number, or `None` when the SA's numbers are used up or not yet
    /// reserved on disk (never a number that is not: it might be used again).
    fn next_seq(&mut self, sa: &Outbound, esn: bool, cx: &Context) -> Option<u64> {
        let seq = match sa.seq.next() {
            Ok(n) => n,
            Err(NoSeq::Unreserved) => {
                self.dropped_seq_unreserved.inc();
                return None;
            }
        };
        let last = if esn { u64::MAX } else { u32::MAX as u64 };
        if seq == 0 || seq > last {
            // The counter must never wrap (RFC 4303 3.3.3): the SA needs a new key.
            self.dropped_seq_exhausted.inc();
            if self.log.allow(cx.now).is_some() {
                tracing::error!(
                    spi = sa.spi,
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
        let Some(mut src) = self.sa.take() else {
            self.dropped_no_sa.inc();
            return Action::Drop;
        };
        let a = match &mut src {
            SaRef::Manual(sa, esn, encap) => self.process_with(sa, *esn, *encap, pkt, cx),
            SaRef::Ike(view) => match view.current() {
                Some(ike) => self.process_with(&ike.sa, ike.esn, ike.encap, pkt, cx),
                None => {
                    self.dropped_no_sa.inc();
                    Action::Drop
                }
            },
        };
        self.sa = Some(src);
        a
    }
}

impl Encrypt {
    /// Protects `pkt` with `sa`, in UDP if `encap` says so.
    fn process_with(
        &mut self,
        sa: &Outbound,
        esn: bool,
        encap: Option<UdpEncap>,
        pkt: &mut Packet,
        cx: &mut Context,
    ) -> Action {
        // The traffic class and DF of the inner packet go to the outer header (IPv6 counts
        // as DF: routers never fragment it).
        let Some((l, direct, tos, inner_df)) = pkt.headers().map(|h| {
            let ip = h.ip();
            let df = ip.dont_frag().unwrap_or(true);
            (h.layout(), h.direct(), ip.traffic_class(), df)
        }) else {
            self.dropped_unfit.inc();
            return Action::Drop;
        };
        let cipher = sa.crypto.cipher();
        // What is protected starts at `start`: the upper layer (transport) or the packet.
        let (start, next) = match self.wrap {
            Wrap::Transport => {
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
        let trailer = EspTrailer::for_payload(plen, cipher.block(), next);
        let padded = plen + trailer.len();
        let hdr = esp::HEADER_LEN + cipher.iv_len();
        let outer = self.wrap.outer_len();
        // RFC 3948 2.1: the UDP header sits right before the ESP header.
        let udp_at = start + outer;
        let esp_at = udp_at + if encap.is_some() { udp::HEADER_LEN } else { 0 };
        let total = esp_at + hdr + padded + ICV_LEN;
        // A verdict cannot change the family: such a tunnel packet is emitted anew, and
        // the datapath's raw socket never fragments.
        let reinject = match self.wrap {
            Wrap::Tunnel { local, .. } => !pkt.meta.verdict_carries(IpVersion::of_addr(local)),
            Wrap::Transport => false,
        };
        let df = reinject || inner_df;
        let d = pkt.data();
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
        let Some(seq) = self.next_seq(sa, esn, cx) else {
            return Action::Drop;
        };
        self.bytes_in.add(l.len as u64);
        pkt.resize(l.len);
        pkt.insert(start, esp_at - start + hdr);
        pkt.resize(total);
        let d = pkt.data_mut();
        EspRepr {
            spi: sa.spi,
            seq_no: seq as u32,
        }
        .emit(&mut EspPacket::new_unchecked(&mut d[esp_at..]));
        // RFC 4303 2.4: padding bytes 1, 2, 3, ...; then pad length and next header.
        trailer.emit(&mut d[esp_at + hdr + plen..]);
        if sa.crypto.seal(seq, esn, &mut d[esp_at..total]).is_err() {
            // Cannot happen (the lengths are the suite's); never send what is not sealed.
            self.dropped_unfit.inc();
            return Action::Drop;
        }
        let outer_at = Outer {
            version: l.version,
            udp_at,
            total,
            tos,
            df,
            id: seq as u16,
        };
        self.write_outer(d, &outer_at, encap);
        self.encrypted.inc();
        self.bytes_out.add(total as u64);
        if let Some(u) = &sa.usage {
            u.add(total - esp_at);
        }
        if reinject {
            let _ = cx.emit_packet(pkt, &self.resend);
            return Action::Drop;
        }
        Action::Continue
    }
}

/// Where the outer headers of a sealed packet go and what they carry.
struct Outer {
    /// The packet's family (transport mode keeps it).
    version: IpVersion,
    /// Where the UDP header of ESP in UDP goes.
    udp_at: usize,
    /// The whole packet's length.
    total: usize,
    /// Traffic class and DF of the inner packet (tunnel mode copies them).
    tos: u8,
    df: bool,
    /// The outer IPv4 identification.
    id: u16,
}

impl Encrypt {
    /// Writes the IP header (transport: the packet's own, fixed up; tunnel: a new outer
    /// one) and, for ESP in UDP, the UDP header, around the sealed ESP packet in `d`.
    fn write_outer(&self, d: &mut [u8], o: &Outer, encap: Option<UdpEncap>) {
        let carrier = if encap.is_some() {
            proto::UDP
        } else {
            proto::ESP
        };
        let outer = self.wrap.outer_len();
        match self.wrap {
            Wrap::Transport => fix_ip_header(d, o.version, o.total, carrier),
            Wrap::Tunnel { local, remote } => {
                outer_header(local, remote, carrier, o.tos, o.df, o.id, o.total - outer).emit(d);
            }
        }
        if let Some(e) = encap {
            emit_udp(d, o.udp_at, o.total, e);
            // Transport mode keeps the packet's own family; tunnel mode has local's.
            let v6 = match self.wrap {
                Wrap::Transport => o.version == IpVersion::V6,
                Wrap::Tunnel { local, .. } => local.is_ipv6(),
            };
            if v6 {
                fill_udp_v6(d, o.udp_at, o.total);
            }
        }
    }
}

/// The tunnel's outer header for `payload_len` bytes of ESP (`carrier` 50) or ESP in UDP
/// (17): traffic class copied from
/// the inner packet (RFC 4301 5.1.2.1), DF copied, TTL 64.
fn outer_header(
    local: IpAddr,
    remote: IpAddr,
    carrier: u8,
    tos: u8,
    df: bool,
    id: u16,
    payload_len: usize,
) -> IpRepr {
    match IpRepr::new(local, remote, carrier, payload_len) {
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

/// Makes the next sequence number of the live outbound SA `spi` (with this suite and key)
/// in `kept` `next`: how tests reach the end of the sequence space.
#[cfg(test)]
pub(crate) fn jump_sequence(kept: &Kept, spi: u32, cipher: Cipher, key: &[u8], next: u64) {
    let states = kept.get_or_default::<SaStates>();
    let sa = states
        .outbound
        .get_or_make(SaId::new(spi, cipher, key), || {
            panic!("no live SA {spi:#x}")
        });
    sa.seq.jump(next);
}
