//! An XDP queue thread: the shell around the queue's [`Pipeline`]. Per round it takes up
//! to `batch` packets from the rx ring, hands each to the pipeline (which runs the chain
//! under the panic guard, keeps held packets and counts) and carries out the outcome:
//! transmit on the egress interface's AF_XDP socket, hand to the kernel's forwarding
//! through the outbox, or nothing (drop). After the round: one `sendto` per egress socket
//! with frames queued, the completion rings read back, what services emitted sent with the
//! [`Emitter`], held packets that fell due sent, and new egress sockets opened.
//!
//! Each packet is copied once from its frame into the pipeline's packet buffer (relayd's
//! `Packet` owns a growable buffer, which services that grow packets need), and once more,
//! with its Ethernet header, into a frame of the egress socket; the rx frame goes straight
//! back to the fill ring. Nothing is allocated, locked or asked of the kernel per packet.
//!
//! With offload on, the flows the round's chain offloaded are written to the program's
//! `flows` map after the round (one system call per flow direction, never per packet of a
//! flow that stays inline), and the program's offload counters are read once a second.

use crate::counters::XdpCounters;
use crate::egress::EgressTable;
use crate::forward::{self, Framed};
use crate::offload::{Offloader, monotonic_ns};
use crate::program::{FrameMeta, META_LEN};
use crate::xsk::Socket;
use relay_core::wire::FiveTuple;
use relay_core::{Chain, PacketMeta, Tally, Verdict};
use relay_dataio::Emitter;
use relay_pipeline::{Control, Outcome, Pipeline};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the thread waits for packets before it looks at its stop flag.
pub(crate) const WAIT_MS: i32 = 100;

/// Headroom in front of a packet in the chain's buffer (encapsulation grows in place).
const HEADROOM: usize = 256;

/// The chain's packet buffer: headroom and the largest IP packet.
pub(crate) const PACKET_BUF: usize = HEADROOM + 65_536;

/// Held packets sent per release at most.
const RELEASE_CHUNK: usize = 64;

/// What the control plane shares with an XDP queue thread: a reload brings a new chain,
/// with the generation its offloaded flows are written for.
pub(crate) type Shared = Control<(Chain, u32)>;

/// The queue thread's state.
pub(crate) struct Worker {
    pub(crate) batch: usize,
    pub(crate) rx: Socket,
    pub(crate) emitter: Emitter,
    pub(crate) shared: Arc<Shared>,
    /// Everything the per-packet path touches, apart from the rx socket it reads from.
    pub(crate) path: PacketPath,
}

impl Worker {
    pub(crate) fn run(&mut self) {
        let num = self.path.num;
        tracing::debug!(queue = num, "XDP queue thread running");
        let mut loops = 0u64;
        let mut stats_at = Instant::now();
        loop {
            loops = loops.wrapping_add(1);
            if let Some((chain, generation)) = self.shared.tick(loops) {
                self.path.pipeline.set_chain(chain);
                if let Some(o) = &mut self.path.offload {
                    o.set_generation(generation);
                }
            }
            if self.shared.stop_requested() {
                break;
            }
            let now = Instant::now();
            // Decapsulating services must know the box's addresses (renewed once a second).
            if let Some(local) = self.emitter.renewed_local_addresses(now) {
                self.path.pipeline.set_local_addresses(local);
            }
            let n = self.round(now);
            self.path.carry_offloads();
            self.path.release(Some(now));
            self.flush(now);
            // New egress interfaces' sockets: between rounds, never for a packet.
            self.path.egress.prepare(now);
            if now.duration_since(stats_at) >= Duration::from_secs(1) {
                stats_at = now;
                self.path.egress.refresh_mtus();
                if let Some(o) = &mut self.path.offload {
                    o.read_stats();
                }
                self.publish_stats();
            }
            if n == 0 {
                self.wait(now);
            } else {
                self.path.pipeline.counters().batches.inc();
            }
        }
        // What is still held leaves now, as a stopping NFQUEUE queue answers its own.
        self.path.release(None);
        self.path.carry_offloads();
        self.flush(Instant::now());
        if let Some(o) = &mut self.path.offload {
            o.read_stats();
        }
        self.publish_stats();
        tracing::debug!(queue = num, "XDP queue thread stopped");
    }

    /// Takes one batch from the rx ring and handles each packet.
    fn round(&mut self, now: Instant) -> usize {
        let path = &mut self.path;
        self.rx
            .recv(self.batch, |frame, head| path.packet(frame, head, now))
    }

    /// Sends what the round queued on the egress sockets and in the outbox.
    fn flush(&mut self, now: Instant) {
        let path = &mut self.path;
        for s in path.egress.sockets() {
            if s.pending_tx() > 0
                && let Err(err) = s.flush()
            {
                path.pipeline.counters().errors.inc();
                tracing::debug!(queue = path.num, "egress flush: {err}");
            }
            s.complete();
        }
        let outbox = path.pipeline.outbox_mut();
        if !outbox.is_empty() {
            self.emitter.flush(outbox, path.num, now);
        }
    }

    /// Waits for packets, or for the next held packet's deadline.
    fn wait(&mut self, now: Instant) {
        // Frames the kernel left on a tx ring (its send buffer was full) go out with the
        // next flush: come back for them soon rather than after WAIT_MS.
        let pending = self.path.egress.sockets_ref().any(|s| s.pending_tx() > 0);
        let mut timeout = if pending { 1 } else { WAIT_MS };
        if let Some(due) = self.path.pipeline.next_due() {
            let ms = due.saturating_duration_since(now).as_millis();
            timeout = timeout.min(i32::try_from(ms).unwrap_or(WAIT_MS));
        }
        match self.rx.wait(timeout) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                self.path.pipeline.counters().errors.inc();
                tracing::warn!(queue = self.path.num, "waiting for packets: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Copies the sockets' statistics into the gauges.
    fn publish_stats(&self) {
        let set = &self.path.xdp.set;
        if let Ok(s) = self.rx.stats() {
            set.gauge("rx_dropped").set(s.rx_dropped);
            set.gauge("rx_invalid").set(s.rx_invalid_descs);
            set.gauge("rx_ring_full").set(s.rx_ring_full);
            set.gauge("fill_ring_empty").set(s.rx_fill_ring_empty_descs);
        }
        let (mut invalid, mut empty) = (0, 0);
        for s in self.path.egress.sockets_ref() {
            if let Ok(s) = s.stats() {
                invalid += s.tx_invalid_descs;
                empty += s.tx_ring_empty_descs;
            }
        }
        set.gauge("tx_invalid").set(invalid);
        set.gauge("tx_ring_empty").set(empty);
    }
}

/// The per-packet part of a round: the pipeline and its buffer, the egress sockets and the
/// counters (the worker's rx socket stays outside, so that a batch can be read from it
/// while each packet is handled here).
pub(crate) struct PacketPath {
    pub(crate) num: u16,
    pub(crate) ingress: u32,
    /// The chain with everything around it; a held packet's handle is its next hop.
    pub(crate) pipeline: Pipeline<FrameMeta>,
    pub(crate) egress: EgressTable,
    pub(crate) xdp: XdpCounters,
    pub(crate) tally: Tally,
    pub(crate) buf: Vec<u8>,
    pub(crate) scratch: Vec<u8>,
    /// Carries out the chain's offloads, if the port offloads.
    pub(crate) offload: Option<Offloader>,
}

impl PacketPath {
    /// Writes the flows the round offloaded to the program's map (after the round).
    fn carry_offloads(&mut self) {
        let requests = self.pipeline.take_offloads();
        if requests.len() == 0 {
            return;
        }
        match &mut self.offload {
            Some(o) => o.carry_out(requests, monotonic_ns()),
            // The pipeline asks only when its settings say the datapath offloads.
            None => drop(requests),
        }
    }

    /// Tells the offloader what the pipeline's request for this packet cannot say: whether
    /// the flow's replies can arrive on this port's interface (the packet leaves by it, or
    /// to a next hop not known here: `egress` 0), and whether a service rewrote it into
    /// another flow. `ip` is the packet as received, `out` as it left. Only for packets
    /// whose flow the chain offloaded.
    #[cold]
    fn note_offload(&mut self, ip: &[u8], out: Option<&[u8]>, modified: bool, egress: u32) {
        let Some(o) = &mut self.offload else { return };
        let Some((after, l4)) = out.and_then(FiveTuple::parse) else {
            return;
        };
        let rewritten = modified && FiveTuple::parse(ip).map(|t| t.0) != Some(after);
        // The program looks up only headers it parses to the ports: no IPv4 options, no
        // IPv6 extension headers.
        let plain = l4 == if after.src.is_ipv4() { 20 } else { 40 };
        let reply_here = egress == 0 || egress == self.ingress;
        o.note(after, reply_here, rewritten || !plain);
    }

    fn packet(&mut self, frame: &[u8], head: &[u8], now: Instant) {
        let meta = head
            .len()
            .checked_sub(META_LEN)
            .and_then(|at| FrameMeta::parse(head.get(at..)?));
        let (Some(meta), Some((ethertype, ip))) = (meta, forward::ip_payload(frame)) else {
            let q = self.pipeline.counters();
            q.packets.inc();
            q.dropped.inc();
            self.xdp.bad_frames.inc();
            return;
        };
        let end = HEADROOM + ip.len();
        let Some(room) = self.buf.get_mut(HEADROOM..end) else {
            self.xdp.bad_frames.inc();
            return;
        };
        room.copy_from_slice(ip);
        let pmeta = PacketMeta {
            queue: self.num,
            hw_protocol: ethertype,
            indev: self.ingress,
            outdev: meta.ifindex,
            // veth's XDP hands over locally generated packets with partial checksums.
            csum: relay_core::Checksum::Unknown,
            ..PacketMeta::default()
        };
        let outcome = self
            .pipeline
            .process(now, pmeta, &mut self.buf, HEADROOM, end, meta);
        let Outcome::Now {
            decision,
            start,
            end,
            modified,
        } = outcome
        else {
            return; // held: sent when released
        };
        if decision.verdict == Verdict::Drop {
            return;
        }
        if decision.offload.is_some() {
            let buf = std::mem::take(&mut self.buf);
            let out = if modified {
                buf.get(start..end)
            } else {
                Some(ip)
            };
            self.note_offload(ip, out, modified, meta.ifindex);
            self.buf = buf;
        }
        // The packet as the chain left it, or as it came (unchanged, or its service
        // panicked and the malformed policy accepts it).
        let mark = decision.mark.unwrap_or(0);
        if !decision.payload {
            return self.send(&meta, ip, mark);
        }
        // Taken out for the call (no allocation: an empty Vec takes its place).
        let buf = std::mem::take(&mut self.buf);
        if let Some(changed) = buf.get(start..end) {
            self.send(&meta, changed, mark);
        }
        self.buf = buf;
    }

    /// Sends held packets that are due at `now` (all of them for `None`).
    fn release(&mut self, now: Option<Instant>) {
        while self.pipeline.holds() {
            let n = self.pipeline.release_due(now, RELEASE_CHUNK, |_| true);
            if n == 0 {
                break;
            }
            // Each goes through the packet buffer, free between packets, taken out for the
            // call (`send` needs the pipeline's outbox).
            let mut buf = std::mem::take(&mut self.buf);
            for k in 0..n {
                let Some(h) = self.pipeline.released(k) else {
                    break;
                };
                let (meta, mark) = (h.handle, h.mark.unwrap_or(0));
                let Some(copy) = buf.get_mut(..h.data.len()) else {
                    continue;
                };
                copy.copy_from_slice(&h.data);
                let len = h.data.len();
                if let Some(bytes) = buf.get(..len) {
                    self.send(&meta, bytes, mark);
                }
            }
            self.buf = buf;
            self.pipeline.finish_release();
        }
    }

    /// Sends `packet` to the next hop `meta` on the egress socket, or to the kernel.
    /// `mark`: the chain's verdict mark, which only a packet handed to the kernel keeps
    /// (an AF_XDP transmit carries none).
    fn send(&mut self, meta: &FrameMeta, packet: &[u8], mark: u32) {
        match forward::forwardable(packet) {
            Ok(_) => {}
            // Not for what the program steers (it passes TTL <= 1 to the kernel), but a
            // service may rewrite the header: the kernel's path answers it.
            Err(Framed::HopLimit) => return self.via_kernel(packet, mark),
            Err(_) => {
                self.xdp.bad_frames.inc();
                return;
            }
        }
        // Egress ifindex 0: the program found no next hop (no neighbour yet, larger than
        // the egress MTU); the kernel's forwarding resolves or answers it. So does it for
        // an interface whose socket is not open (yet), and for a packet past its MTU.
        let socket = match self.egress.lookup(meta.ifindex) {
            Some((socket, mtu)) if meta.ifindex != 0 && packet.len() <= mtu => socket,
            _ => return self.via_kernel(packet, mark),
        };
        // `forwardable` passed and the frame has the packet's length: `frame` succeeds.
        if socket.send(forward::ETH_LEN + packet.len(), |out| {
            let framed = forward::frame(out, meta, packet);
            debug_assert!(matches!(framed, Framed::Ready(_)), "{framed:?}");
        }) {
            self.xdp.transmitted.inc();
        } else {
            self.xdp.tx_full.inc();
        }
    }

    /// Hands `packet` to the kernel's forwarding through the outbox (a raw socket, after
    /// the round): the exceptional path, so a copy in the scratch buffer is no burden.
    fn via_kernel(&mut self, packet: &[u8], mark: u32) {
        self.xdp.to_kernel.inc();
        let Some(copy) = self.scratch.get_mut(..packet.len()) else {
            return;
        };
        copy.copy_from_slice(packet);
        // `forward` decreases the TTL and refuses what no router forwards (counted).
        let _ = self.pipeline.context_mut().forward(copy, mark, &self.tally);
    }
}

/// The AF_XDP shell's per-packet path in memory: frames in (with the program's metadata in
/// front), outcomes out. No egress socket is open, so what the chain accepts goes to the
/// kernel's forwarding through the outbox, where it can be read.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::ZeroCopy;
    use relay_core::wire::Ipv4Packet;
    use relay_core::{Action, ChainSettings, Context, Counters, Hook, Packet, Service, StageMark};
    use relay_pipeline::Settings;

    /// Drops packets to port 9, panics on port 66, holds those to port 5, accepts the rest.
    struct Script;

    impl Service for Script {
        fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
            match pkt.data().get(22..24) {
                Some([0, 9]) => Action::Drop,
                Some([0, 66]) => panic!("a service bug"),
                Some([0, 5]) => Action::Hold {
                    until: cx.now + Duration::from_millis(10),
                },
                _ => Action::Continue,
            }
        }
    }

    fn path(malformed: Verdict) -> PacketPath {
        let mut chain = Chain::new(ChainSettings {
            malformed,
            hook: Hook::Prerouting,
            stages: StageMark::DEFAULT,
        });
        chain.push("script", Box::new(Script), Default::default());
        let set = Counters::new();
        let xdp = XdpCounters::new(&set);
        let q = relay_core::QueueCounters::default();
        PacketPath {
            num: 1,
            ingress: 2,
            pipeline: Pipeline::new(Settings::new(1), chain, q, Instant::now()),
            egress: EgressTable::new(1, 2, 0, 64, ZeroCopy::Auto),
            tally: Tally::new(&set, "sent", "full", "failed"),
            xdp,
            buf: vec![0u8; PACKET_BUF],
            scratch: vec![0u8; PACKET_BUF],
            offload: None,
        }
    }

    /// A UDP packet to `port` in an Ethernet frame, and the headroom with the program's
    /// metadata (next hop on interface 7).
    fn frame(port: u8) -> (Vec<u8>, Vec<u8>) {
        let mut p = vec![
            0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 2, 0, 1, 0, port, 0,
            8, 0, 0,
        ];
        Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
        f.extend_from_slice(&p);
        let mut head = vec![0u8; 8];
        head.extend_from_slice(&7u32.to_ne_bytes());
        head.extend_from_slice(&[2, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 4]);
        (f, head)
    }

    fn run(p: &mut PacketPath, port: u8) {
        let (f, head) = frame(port);
        p.packet(&f, &head, Instant::now());
    }

    /// TTLs of what waits in the outbox (for the kernel's forwarding), emptied.
    fn to_kernel(p: &mut PacketPath) -> Vec<u8> {
        let out = p.pipeline.outbox_mut();
        let ttls = out
            .iter()
            .map(|e| e.bytes.get(8).copied().unwrap_or(0))
            .collect();
        out.clear();
        ttls
    }

    #[test]
    fn accepted_packets_are_forwarded_and_drops_are_not() {
        let mut p = path(Verdict::Drop);
        run(&mut p, 1);
        assert_eq!(to_kernel(&mut p), [63], "forwarded, TTL decreased");
        assert_eq!(p.xdp.to_kernel.get(), 1);
        run(&mut p, 9);
        assert!(to_kernel(&mut p).is_empty());
        let q = p.pipeline.counters();
        assert_eq!(
            (q.packets.get(), q.accepted.get(), q.dropped.get()),
            (2, 1, 1)
        );
        // The egress interface was noted, not opened, on the packet's path.
        assert!(p.egress.sockets_ref().next().is_none());
    }

    #[test]
    fn a_panicking_service_gets_the_malformed_policy() {
        let mut p = path(Verdict::Accept);
        run(&mut p, 66);
        assert_eq!(to_kernel(&mut p), [63], "the original, forwarded");
        assert_eq!(p.pipeline.counters().errors.get(), 1);
        assert_eq!(p.buf.len(), PACKET_BUF, "a new buffer");
        let mut p = path(Verdict::Drop);
        run(&mut p, 66);
        assert!(to_kernel(&mut p).is_empty());
        run(&mut p, 1);
        assert_eq!(to_kernel(&mut p), [63], "and goes on");
    }

    /// With no hold limits (a port's services cannot hold), a hold is an overflow:
    /// forwarded at once and counted accepted, which the queue did not count before.
    #[test]
    fn a_hold_without_room_is_forwarded_and_counted() {
        let mut p = path(Verdict::Accept);
        run(&mut p, 5);
        assert_eq!(to_kernel(&mut p), [63]);
        let q = p.pipeline.counters();
        assert_eq!(
            (q.held.get(), q.hold_overflow.get(), q.accepted.get()),
            (1, 1, 1)
        );
    }

    #[test]
    fn frames_without_metadata_or_ip_are_counted_and_dropped() {
        let mut p = path(Verdict::Accept);
        let (f, _) = frame(1);
        p.packet(&f, &[0u8; 4], Instant::now());
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        p.packet(&arp, &frame(1).1, Instant::now());
        assert_eq!(p.xdp.bad_frames.get(), 2);
        let q = p.pipeline.counters();
        assert_eq!((q.packets.get(), q.dropped.get()), (2, 2));
        assert!(to_kernel(&mut p).is_empty());
    }

    /// Votes to offload every packet's flow; rewrites destination port 77 to 78 first.
    struct Vote;

    impl Service for Vote {
        fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
            if pkt.data().get(22..24) == Some(&[0, 77]) {
                // A rewrite into another flow (the checksum is no matter here).
                if let Some(b) = pkt.data_mut().get_mut(23) {
                    *b = 78;
                }
            }
            cx.offload(relay_core::Offload::both(
                relay_core::OffloadReason::Decided,
            ));
            Action::Accept
        }
    }

    /// What the offloader wrote, in memory.
    #[derive(Default)]
    struct Written(std::sync::Mutex<Vec<crate::offload::FlowKey>>);

    impl crate::offload::FlowSink for Arc<Written> {
        fn insert(
            &mut self,
            key: &crate::offload::FlowKey,
            _: &crate::offload::FlowValue,
        ) -> Result<bool, crate::XdpError> {
            let mut w = self.0.lock().unwrap();
            let new = !w.contains(key);
            if new {
                w.push(*key);
            }
            Ok(new)
        }
        fn queue_stats(&self) -> Result<crate::offload::QueueOffloadStats, crate::XdpError> {
            Ok(Default::default())
        }
    }

    #[test]
    fn offloaded_flows_are_written_after_the_round_one_way_unless_replies_come_here() {
        let mut p = path(Verdict::Drop);
        let mut chain = Chain::new(ChainSettings {
            malformed: Verdict::Drop,
            hook: Hook::Prerouting,
            stages: StageMark::DEFAULT,
        });
        chain.push("vote", Box::new(Vote), Default::default());
        let q = relay_core::QueueCounters::default();
        let settings = Settings {
            offload: true,
            ..Settings::new(1)
        };
        p.pipeline = Pipeline::new(settings, chain, q.clone(), Instant::now());
        let written = Arc::new(Written::default());
        let expired = relay_core::Counter::new();
        p.offload = Some(Offloader::new(
            Box::new(written.clone()),
            q.offload.clone(),
            expired,
            0,
        ));
        // Three packets of one flow in a round: one flow, written once. It leaves by
        // interface 7, where its replies arrive: only its own direction is written.
        for _ in 0..3 {
            run(&mut p, 1);
        }
        assert!(
            written.0.lock().unwrap().is_empty(),
            "not before the round ends"
        );
        p.carry_offloads();
        assert_eq!(written.0.lock().unwrap().len(), 1);
        assert_eq!(q.offload.total(), 1);
        // A flow leaving by the interface it came in on (2): its replies come in here too.
        let (f, mut head) = frame(2);
        head[8..12].copy_from_slice(&2u32.to_ne_bytes());
        p.packet(&f, &head, Instant::now());
        p.carry_offloads();
        assert_eq!(written.0.lock().unwrap().len(), 3, "both directions");
        assert_eq!(q.offload.total(), 2);
        // Rewritten into another flow (port 77 -> 78): refused, counted.
        run(&mut p, 77);
        p.carry_offloads();
        assert_eq!(written.0.lock().unwrap().len(), 3);
        assert_eq!(q.offload.failed.get(), 1);
        assert_eq!(
            to_kernel(&mut p).len(),
            5,
            "every packet forwarded all the same"
        );
    }
}
