//! Request/response latency: a UDP echo server and a probe that times round trips.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::sys;
use crate::udp::header;

/// Bytes per probe datagram: the 16-byte header plus padding to a small-packet size.
const PROBE_LEN: usize = 64;

/// Echoes every datagram back to its sender until `stop` is set; returns how many it
/// echoed. Polls `stop` every 50 ms (a read timeout), so it ends within ~50 ms of the flag.
pub fn udp_echo_server(sock: UdpSocket, stop: Arc<AtomicBool>) -> u64 {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 65536];
    let mut echoed = 0;
    while !stop.load(Ordering::Relaxed) {
        // Errors are timeouts or ICMP errors for earlier replies: keep serving.
        if let Ok((n, from)) = sock.recv_from(&mut buf)
            && sock.send_to(&buf[..n], from).is_ok()
        {
            echoed += 1;
        }
    }
    echoed
}

/// Round-trip times of a [`rr_probe`] run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RrStats {
    /// RTT of each answered probe, in sending order.
    pub samples: Vec<Duration>,
    /// Probes without an answer within the timeout.
    pub lost: u64,
}

impl RrStats {
    /// The `q`-quantile (0.0..=1.0) by nearest rank; `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let mut s = self.samples.clone();
        s.sort_unstable();
        let rank = (q.clamp(0.0, 1.0) * s.len() as f64).ceil() as usize;
        s.get(rank.saturating_sub(1)).copied()
    }

    /// Median RTT.
    pub fn p50(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    /// 99th percentile RTT.
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }

    /// Smallest RTT.
    pub fn min(&self) -> Option<Duration> {
        self.samples.iter().min().copied()
    }

    /// Largest RTT.
    pub fn max(&self) -> Option<Duration> {
        self.samples.iter().max().copied()
    }

    /// Mean RTT.
    pub fn mean(&self) -> Option<Duration> {
        let n = u32::try_from(self.samples.len()).ok().filter(|n| *n > 0)?;
        Some(self.samples.iter().sum::<Duration>() / n)
    }

    /// Mean absolute difference of consecutive RTTs: the interarrival jitter of RFC 3550
    /// section 6.4.1, but as a plain mean instead of its 1/16 running average, so short
    /// runs are not biased towards 0. `None` with fewer than two samples.
    pub fn jitter(&self) -> Option<Duration> {
        let n = u32::try_from(self.samples.len().checked_sub(1)?)
            .ok()
            .filter(|n| *n > 0)?;
        let sum: Duration = self.samples.windows(2).map(|w| w[0].abs_diff(w[1])).sum();
        Some(sum / n)
    }
}

/// Sends `count` 64-byte probes to the echo server at `dst`, one every `interval`, and
/// times each answer. A probe without an answer within `timeout` counts as lost; late
/// answers to earlier probes are recognised by sequence number and ignored.
pub fn rr_probe(
    dst: SocketAddr,
    count: usize,
    interval: Duration,
    timeout: Duration,
) -> io::Result<RrStats> {
    let bind: SocketAddr = if dst.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind)?;
    sock.connect(dst)?;
    let mut stats = RrStats::default();
    let mut req = [0u8; PROBE_LEN];
    let mut resp = [0u8; 2048];
    let start = Instant::now();
    for i in 0..count {
        let seq = i as u64;
        header::write(&mut req, seq, sys::monotonic_ns());
        let sent = Instant::now();
        let answered = match sock.send(&req) {
            Ok(_) => wait_reply(&sock, seq, sent + timeout, &mut resp)?,
            // An ICMP error for an earlier probe, or no route yet: this probe is lost.
            Err(e) if is_unreachable(&e) => false,
            Err(e) => return Err(e),
        };
        if answered {
            stats.samples.push(sent.elapsed());
        } else {
            stats.lost += 1;
        }
        let next = start + interval * (i as u32 + 1);
        let now = Instant::now();
        if i + 1 < count && next > now {
            std::thread::sleep(next - now);
        }
    }
    Ok(stats)
}

/// Waits until `deadline` for the reply carrying `seq`; true if it came.
fn wait_reply(sock: &UdpSocket, seq: u64, deadline: Instant, buf: &mut [u8]) -> io::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        sock.set_read_timeout(Some(left))?;
        match sock.recv(buf) {
            Ok(n) => {
                if header::read(&buf[..n]).is_some_and(|(s, _)| s == seq) {
                    return Ok(true);
                }
            }
            Err(e) if sys::is_timeout(&e) => return Ok(false),
            // Port unreachable from the echo side: nobody will answer this one.
            Err(e) if is_unreachable(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

fn is_unreachable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> RrStats {
        RrStats {
            samples: v.iter().map(|&m| Duration::from_millis(m)).collect(),
            lost: 0,
        }
    }

    #[test]
    fn statistics() {
        let s = ms(&[10, 30, 20, 40]);
        assert_eq!(s.p50(), Some(Duration::from_millis(20)));
        assert_eq!(s.p99(), Some(Duration::from_millis(40)));
        assert_eq!(s.mean(), Some(Duration::from_millis(25)));
        // |30-10| + |20-30| + |40-20| = 50 over 3.
        assert_eq!(s.jitter(), Some(Duration::from_millis(50) / 3));
        assert_eq!(s.min(), Some(Duration::from_millis(10)));
        let empty = ms(&[]);
        assert_eq!(
            (empty.p50(), empty.mean(), empty.jitter()),
            (None, None, None)
        );
        assert_eq!(ms(&[5]).jitter(), None);
    }
}
