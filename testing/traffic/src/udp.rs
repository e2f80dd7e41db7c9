//! Paced UDP sender and counting sink. Every datagram starts with a 16-byte [`header`]
//! (sequence number, send time), so the sink can tell loss, reordering and one-way delay
//! without any side channel.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::payload::Payload;
use crate::sys::{self, MmsgBuf};

/// The header at the start of every datagram [`udp_send`] emits.
///
/// Bytes 0..8: sequence number (big endian, from 0, one per datagram); bytes 8..16: send
/// time as CLOCK_MONOTONIC nanoseconds (big endian). Big endian so it reads naturally in
/// a packet capture.
pub mod header {
    /// Length of the header; datagrams are at least this long.
    pub const LEN: usize = 16;

    /// Writes `seq` and `send_ns` into the first [`LEN`] bytes of `buf`.
    pub fn write(buf: &mut [u8], seq: u64, send_ns: u64) {
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        buf[8..16].copy_from_slice(&send_ns.to_be_bytes());
    }

    /// Reads `(seq, send_ns)`, or `None` if `buf` is shorter than [`LEN`].
    pub fn read(buf: &[u8]) -> Option<(u64, u64)> {
        let seq = u64::from_be_bytes(buf.get(..8)?.try_into().ok()?);
        let ns = u64::from_be_bytes(buf.get(8..16)?.try_into().ok()?);
        Some((seq, ns))
    }
}

/// Largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65507;

/// Seed of the payload pattern; fixed so runs are comparable.
const PAYLOAD_SEED: u64 = 0x7265_6c61_7964;

/// Per-datagram IP + UDP header bytes counted in on-wire rates: 28 over IPv4, 48 over IPv6.
pub fn ip_udp_overhead(addr: &SocketAddr) -> usize {
    if addr.is_ipv4() { 28 } else { 48 }
}

/// What [`udp_send`] sends.
#[derive(Clone, Debug)]
pub struct UdpSendConfig {
    /// Destination address.
    pub dst: SocketAddr,
    /// UDP payload bytes per datagram, including the 16-byte header (16..=65507).
    pub size: usize,
    /// On-wire IP rate in bits/s, counting the IP+UDP header ([`ip_udp_overhead`]);
    /// `None` sends as fast as the socket takes datagrams.
    pub rate_bps: Option<u64>,
    /// How long to send.
    pub duration: Duration,
    /// Compressibility of the payload, see [`Payload`] (1.0 = incompressible).
    pub ratio: f64,
    /// Datagrams per `sendmmsg` call at most (default 32).
    pub batch: usize,
    /// Token bucket depth in datagrams: the most that accrue while the sender does not
    /// run (preempted, or slowed by the kernel), sent back to back when it runs again.
    /// `None`: one batch. Deeper keeps the offered rate on target on a busy core, at the
    /// price of bursts.
    pub burst: Option<usize>,
}

impl UdpSendConfig {
    /// Defaults: 1000-byte incompressible datagrams, unpaced, for 1 s, batches of 32,
    /// bursts of one batch.
    pub fn new(dst: SocketAddr) -> UdpSendConfig {
        UdpSendConfig {
            dst,
            size: 1000,
            rate_bps: None,
            duration: Duration::from_secs(1),
            ratio: 1.0,
            batch: 32,
            burst: None,
        }
    }

    /// Datagrams per second that `rate_bps` amounts to, if paced.
    pub fn pps(&self) -> Option<f64> {
        let bits = ((self.size + ip_udp_overhead(&self.dst)) * 8) as f64;
        self.rate_bps.map(|r| r as f64 / bits)
    }
}

/// What [`udp_send`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    /// Datagrams handed to the kernel.
    pub packets: u64,
    /// UDP payload bytes of those datagrams.
    pub bytes: u64,
    /// The same plus IP+UDP headers, the unit of `rate_bps`.
    pub wire_bytes: u64,
    /// Time from the first send to the end of the run.
    pub elapsed: Duration,
    /// Failed `sendmmsg` calls (`ENOBUFS`, `ECONNREFUSED` from an earlier ICMP error, ...).
    pub errors: u64,
}

impl SendStats {
    /// Achieved on-wire rate in bits/s.
    pub fn wire_bps(&self) -> f64 {
        per_second(self.wire_bytes * 8, self.elapsed)
    }

    /// Datagrams per second actually handed to the kernel: what was offered, whatever
    /// the configured rate.
    pub fn pps(&self) -> f64 {
        per_second(self.packets, self.elapsed)
    }
}

fn per_second(n: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// Sends datagrams to `cfg.dst` for `cfg.duration`, paced to `cfg.rate_bps`.
///
/// Pacing is a token bucket counted in datagrams, `burst` deep: the sender sleeps while
/// the next datagram is more than 200 µs away, spins closer than that, and sends whatever
/// has accrued in one `sendmmsg` (at most `batch`, and at high rates groups of about 50 µs
/// worth, so the syscall rate stays bounded). Oversleeping is made up by the next batch,
/// so the long-run rate stays on target. Each datagram carries a [`header`]; datagrams of
/// one batch share a timestamp taken just before the call.
pub fn udp_send(cfg: &UdpSendConfig) -> io::Result<SendStats> {
    if !(header::LEN..=MAX_DATAGRAM).contains(&cfg.size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "datagram size {} outside {}..={MAX_DATAGRAM}",
                cfg.size,
                header::LEN
            ),
        ));
    }
    let bind: SocketAddr = if cfg.dst.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(cfg.dst)?;
    sys::set_sndbuf(&sock, 4 << 20);

    let batch = cfg.batch.clamp(1, 1024);
    let depth = cfg.burst.unwrap_or(batch).max(batch) as f64;
    let payload = Payload::new(cfg.size, cfg.ratio, PAYLOAD_SEED);
    let mut buf = MmsgBuf::new(batch, cfg.size);
    for i in 0..batch {
        buf.slot_mut(i).copy_from_slice(payload.bytes());
    }
    let wire = (cfg.size + ip_udp_overhead(&cfg.dst)) as u64;
    let pps = cfg.pps().filter(|p| *p > 0.0);
    // Datagrams to wait for before a call: ~50 µs worth, at least 1, at most a batch.
    let group = pps.map_or(batch as f64, |p| (p * 50e-6).clamp(1.0, batch as f64));

    let mut stats = SendStats::default();
    let start = Instant::now();
    let end = start + cfg.duration;
    let mut tokens = 1.0f64;
    let mut last = start;
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let n = match pps {
            None => batch,
            Some(pps) => {
                tokens = (tokens + (now - last).as_secs_f64() * pps).min(depth);
                last = now;
                if tokens < group {
                    let wait = Duration::from_secs_f64((group - tokens) / pps).min(end - now);
                    if wait > Duration::from_micros(200) {
                        std::thread::sleep(wait);
                    } else {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                (tokens as usize).min(batch)
            }
        };
        let now_ns = sys::monotonic_ns();
        for i in 0..n {
            header::write(buf.slot_mut(i), seq + i as u64, now_ns);
        }
        match buf.send(&sock, n) {
            Ok(sent) => {
                seq += sent as u64;
                tokens -= sent as f64;
                stats.packets += sent as u64;
            }
            Err(e) => {
                stats.errors += 1;
                match e.raw_os_error() {
                    // Queue full, or an ICMP error from an earlier datagram reported
                    // now: keep going, the sink counts what got through.
                    Some(libc::ENOBUFS | libc::EAGAIN | libc::ECONNREFUSED | libc::EINTR) => {
                        std::thread::yield_now();
                    }
                    Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EPERM) => {
                        // Routing or netfilter said no; do not spin on it.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    _ => return Err(e),
                }
            }
        }
    }
    stats.elapsed = start.elapsed();
    stats.bytes = stats.packets * cfg.size as u64;
    stats.wire_bytes = stats.packets * wire;
    Ok(stats)
}

/// What [`udp_sink`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpSinkStats {
    /// Datagrams received (including duplicates and ones too short for a header).
    pub packets: u64,
    /// UDP payload bytes received.
    pub bytes: u64,
    /// Sequence numbers in `0..=max_seq` never received. Loss after the last received
    /// datagram is invisible to the sink.
    pub lost: u64,
    /// When the first datagram arrived.
    pub first: Option<std::time::Instant>,
    /// When the last datagram arrived.
    pub last: Option<std::time::Instant>,
    /// Highest sequence number seen.
    pub max_seq: u64,
    /// Datagrams that arrived after a higher sequence number (reordered or duplicated).
    pub duplicates_or_reordered: u64,
    /// Datagrams shorter than the 16-byte header (not from [`udp_send`]).
    pub short: u64,
    /// IP+UDP header bytes per datagram counted in [`UdpSinkStats::throughput_bps`].
    pub ip_udp_overhead: usize,
    /// Smallest one-way delay (sender and sink on one host share CLOCK_MONOTONIC).
    pub owd_min: Option<Duration>,
    /// Largest one-way delay.
    pub owd_max: Option<Duration>,
    /// Sum of one-way delays over `owd_samples` datagrams.
    pub owd_total: Duration,
    /// Datagrams with a usable timestamp.
    pub owd_samples: u64,
}

impl UdpSinkStats {
    /// Received on-wire rate in bits/s: (payload + IP/UDP header bytes) * 8 over the time
    /// from the first to the last datagram; 0 with fewer than two batches.
    pub fn throughput_bps(&self) -> f64 {
        let wire = self.bytes + self.packets * self.ip_udp_overhead as u64;
        per_second(wire * 8, self.duration())
    }

    /// Time from the first to the last datagram.
    pub fn duration(&self) -> Duration {
        match (self.first, self.last) {
            (Some(f), Some(l)) => l - f,
            _ => Duration::ZERO,
        }
    }

    /// `lost / (max_seq + 1)`, 0 before anything arrived.
    pub fn loss_ratio(&self) -> f64 {
        if self.first.is_none() {
            0.0
        } else {
            self.lost as f64 / (self.max_seq as f64 + 1.0)
        }
    }

    /// Mean one-way delay.
    pub fn owd_mean(&self) -> Option<Duration> {
        let n = u32::try_from(self.owd_samples).ok().filter(|n| *n > 0)?;
        Some(self.owd_total / n)
    }
}

/// Binds `bind` and runs [`udp_sink_on`] on it.
pub fn udp_sink(
    bind: SocketAddr,
    idle_timeout: Duration,
    max_duration: Duration,
) -> io::Result<UdpSinkStats> {
    udp_sink_on(UdpSocket::bind(bind)?, idle_timeout, max_duration, None)
}

/// Counts datagrams on an already bound socket (bind first, then start the sender, and no
/// datagram is lost to a race). Returns when nothing arrived for `idle_timeout` after the
/// first datagram, when `max_duration` has passed since the call, or when `stop` is set.
///
/// Uses `recvmmsg` with a large forced `SO_RCVBUF` (32 MiB). Expects one sender whose
/// sequence numbers start at 0.
pub fn udp_sink_on(
    sock: UdpSocket,
    idle_timeout: Duration,
    max_duration: Duration,
    stop: Option<&AtomicBool>,
) -> io::Result<UdpSinkStats> {
    sys::set_rcvbuf(&sock, 32 << 20);
    let tick = idle_timeout.clamp(Duration::from_millis(1), Duration::from_millis(20));
    sock.set_read_timeout(Some(tick))?;
    let mut stats = UdpSinkStats {
        ip_udp_overhead: ip_udp_overhead(&sock.local_addr()?),
        ..UdpSinkStats::default()
    };
    let mut seqs = SeqTracker::new();
    let mut buf = MmsgBuf::new(64, 65536);
    let start = Instant::now();
    loop {
        let now = Instant::now();
        if now - start >= max_duration
            || stats.last.is_some_and(|l| now - l >= idle_timeout)
            || stop.is_some_and(|s| s.load(Ordering::Relaxed))
        {
            break;
        }
        let n = match buf.recv(&sock) {
            Ok(n) => n,
            Err(e) if sys::is_timeout(&e) => continue,
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        let now_ns = sys::monotonic_ns();
        stats.first.get_or_insert(now);
        stats.last = Some(now);
        for i in 0..n {
            let d = buf.received(i);
            stats.packets += 1;
            stats.bytes += d.len() as u64;
            let Some((seq, sent_ns)) = header::read(d) else {
                stats.short += 1;
                continue;
            };
            seqs.add(seq);
            if let Some(owd) = now_ns.checked_sub(sent_ns) {
                let owd = Duration::from_nanos(owd);
                stats.owd_min = Some(stats.owd_min.map_or(owd, |m| m.min(owd)));
                stats.owd_max = Some(stats.owd_max.map_or(owd, |m| m.max(owd)));
                stats.owd_total += owd;
                stats.owd_samples += 1;
            }
        }
    }
    stats.max_seq = seqs.max.unwrap_or(0);
    stats.lost = seqs.max.map_or(0, |m| (m + 1).saturating_sub(seqs.unique));
    stats.duplicates_or_reordered = seqs.late;
    Ok(stats)
}

/// Sequence numbers seen, as a sliding bitmap of the last [`SeqTracker::WINDOW`] numbers
/// below the highest: enough to tell a late datagram from a duplicate without memory
/// growing with the run.
struct SeqTracker {
    bits: Vec<u64>,
    max: Option<u64>,
    /// Distinct sequence numbers seen (a datagram older than the window counts as seen
    /// only if it is not a duplicate we can detect, i.e. never: conservative).
    unique: u64,
    late: u64,
}

impl SeqTracker {
    const WINDOW: u64 = 1 << 20;

    fn new() -> SeqTracker {
        SeqTracker {
            bits: vec![0; (Self::WINDOW / 64) as usize],
            max: None,
            unique: 0,
            late: 0,
        }
    }

    fn slot(seq: u64) -> (usize, u64) {
        let i = seq % Self::WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn add(&mut self, seq: u64) {
        match self.max {
            Some(max) if seq <= max => {
                self.late += 1;
                if max - seq >= Self::WINDOW {
                    return;
                }
                let (w, b) = Self::slot(seq);
                if self.bits[w] & b == 0 {
                    self.bits[w] |= b;
                    self.unique += 1;
                }
            }
            _ => {
                // Forget the numbers the window slides past.
                let from = self.max.map_or(0, |m| m + 1);
                if seq - from >= Self::WINDOW {
                    self.bits.fill(0);
                } else {
                    for s in from..seq {
                        let (w, b) = Self::slot(s);
                        self.bits[w] &= !b;
                    }
                }
                let (w, b) = Self::slot(seq);
                self.bits[w] |= b;
                self.max = Some(seq);
                self.unique += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let mut b = [0u8; 20];
        header::write(&mut b, 7, 123_456_789);
        assert_eq!(header::read(&b), Some((7, 123_456_789)));
        assert_eq!(header::read(&b[..15]), None);
    }

    #[test]
    fn seq_tracker_counts_loss_reorder_duplicates() {
        let mut t = SeqTracker::new();
        for s in [0, 1, 3, 2, 2, 5, 6] {
            t.add(s);
        }
        // 4 missing; 2 arrived late once and once more as a duplicate.
        assert_eq!(t.max, Some(6));
        assert_eq!(t.unique, 6);
        assert_eq!(t.late, 2);
        assert_eq!(7 - t.unique, 1);
    }

    #[test]
    fn seq_tracker_window_slides() {
        let mut t = SeqTracker::new();
        t.add(0);
        t.add(SeqTracker::WINDOW * 3);
        t.add(SeqTracker::WINDOW * 3 - 1);
        t.add(5); // too old to tell: late, not unique
        assert_eq!(t.unique, 3);
        assert_eq!(t.late, 2);
    }
}
