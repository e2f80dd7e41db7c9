//! One-way delay of every datagram [`crate::udp_send`] sends, as the kernel timed its
//! arrival (`SO_TIMESTAMPNS`), not as the sink's thread got round to reading it: on a
//! benchmark's shared traffic core the sink may wait behind the generator for a time
//! slice, and that wait is no part of the path measured.
//!
//! The kernel stamps a datagram when it enters the receiving namespace's stack (for veth:
//! when the sending side hands it over), in CLOCK_REALTIME; the sender's header carries
//! CLOCK_MONOTONIC. The sink measures the offset between the two clocks when it starts
//! and when it ends, and reports how much it moved ([`OwdStats::clock_drift`]).

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::sys;
use crate::udp::header;

/// Datagrams per `recvmmsg`.
const SLOTS: usize = 64;
/// Bytes read of each datagram: the header is all that is needed.
const SLOT_LEN: usize = 256;
/// Control bytes per datagram: room for one `SCM_TIMESTAMPNS` message and then some.
const CONTROL_LEN: usize = 64;

/// What [`udp_owd_sink`] saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwdStats {
    /// Datagrams received.
    pub packets: u64,
    /// One-way delays in nanoseconds, sorted, of the first `max_samples` datagrams that
    /// carried a header and a kernel timestamp.
    pub samples_ns: Vec<u64>,
    /// Datagrams without a kernel timestamp (none expected).
    pub no_timestamp: u64,
    /// Datagrams shorter than the [`header`].
    pub short: u64,
    /// How far CLOCK_REALTIME moved against CLOCK_MONOTONIC during the run, in
    /// nanoseconds (NTP slewing; every delay is off by up to this much).
    pub clock_drift_ns: i64,
}

impl OwdStats {
    /// The `q` quantile (0.0-1.0) of the delays, nearest rank; `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.samples_ns.len();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
        self.samples_ns
            .get(rank - 1)
            .map(|&ns| Duration::from_nanos(ns))
    }

    /// How far the two clocks moved apart during the run.
    pub fn clock_drift(&self) -> Duration {
        Duration::from_nanos(self.clock_drift_ns.unsigned_abs())
    }
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC, read as tightly as two reads allow.
fn clock_offset_ns() -> i128 {
    let m1 = i128::from(sys::monotonic_ns());
    let r = sys::realtime_ns();
    let m2 = i128::from(sys::monotonic_ns());
    r - (m1 + m2) / 2
}

/// Receives datagrams on `sock` (bound already, so that none is lost to a race) until
/// `stop` is set, and records the one-way delay of each, from the [`header`]'s send time
/// to the kernel's receive timestamp. Keeps at most `max_samples` delays (allocated up
/// front: nothing is allocated per datagram).
pub fn udp_owd_sink(
    sock: UdpSocket,
    stop: &AtomicBool,
    max_samples: usize,
) -> io::Result<OwdStats> {
    sys::set_rcvbuf(&sock, 32 << 20);
    sys::set_timestampns(&sock)?;
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let mut stats = OwdStats {
        samples_ns: Vec::with_capacity(max_samples),
        ..OwdStats::default()
    };
    let mut data = vec![0u8; SLOTS * SLOT_LEN];
    // u64 elements keep the control buffers aligned for cmsghdr.
    let mut control = vec![0u64; SLOTS * CONTROL_LEN / 8];
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(SLOTS);
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(SLOTS);
    let offset = clock_offset_ns();
    while !stop.load(Ordering::Relaxed) {
        iovs.clear();
        msgs.clear();
        let base = data.as_mut_ptr();
        let cbase = control.as_mut_ptr().cast::<u8>();
        for i in 0..SLOTS {
            iovs.push(libc::iovec {
                // SAFETY: i < SLOTS, so the offset stays inside `data`.
                iov_base: unsafe { base.add(i * SLOT_LEN) }.cast(),
                iov_len: SLOT_LEN,
            });
        }
        for (i, iov) in iovs.iter_mut().enumerate() {
            // SAFETY: an all-zero mmsghdr is valid (null name, zero lengths).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            // SAFETY: i < SLOTS, so the control slot lies inside `control`.
            m.msg_hdr.msg_control = unsafe { cbase.add(i * CONTROL_LEN) }.cast();
            m.msg_hdr.msg_controllen = CONTROL_LEN as _;
            msgs.push(m);
        }
        // SAFETY: every mmsghdr points at a live iovec and control slot of the lengths
        // given, none otherwise borrowed during the call; a null timeout leaves timing to
        // SO_RCVTIMEO.
        let rc = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                SLOTS as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if sys::is_timeout(&e) {
                continue;
            }
            return Err(e);
        }
        for (i, m) in msgs.iter().enumerate().take(rc as usize) {
            stats.packets += 1;
            let len = (m.msg_len as usize).min(SLOT_LEN);
            let d = &data[i * SLOT_LEN..i * SLOT_LEN + len];
            let Some((_, sent_ns)) = header::read(d) else {
                stats.short += 1;
                continue;
            };
            let Some(rx_real) = kernel_timestamp(&m.msg_hdr) else {
                stats.no_timestamp += 1;
                continue;
            };
            let owd = rx_real - offset - i128::from(sent_ns);
            if stats.samples_ns.len() < max_samples {
                stats
                    .samples_ns
                    .push(u64::try_from(owd.max(0)).unwrap_or(u64::MAX));
            }
        }
    }
    stats.clock_drift_ns = i64::try_from(clock_offset_ns() - offset).unwrap_or(i64::MAX);
    stats.samples_ns.sort_unstable();
    Ok(stats)
}

/// The `SCM_TIMESTAMPNS` time of a received message, in CLOCK_REALTIME nanoseconds.
fn kernel_timestamp(h: &libc::msghdr) -> Option<i128> {
    // SAFETY: `h` was filled by recvmmsg: msg_control/msg_controllen describe the control
    // bytes the kernel wrote, which the CMSG_* macros walk without leaving them.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                let ns = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
                return (ns != 0).then_some(ns);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let s = OwdStats {
            samples_ns: (1..=1000).collect(),
            ..OwdStats::default()
        };
        assert_eq!(s.quantile(0.5), Some(Duration::from_nanos(500)));
        assert_eq!(s.quantile(0.99), Some(Duration::from_nanos(990)));
        assert_eq!(s.quantile(0.999), Some(Duration::from_nanos(999)));
        assert_eq!(s.quantile(1.0), Some(Duration::from_nanos(1000)));
        assert_eq!(OwdStats::default().quantile(0.5), None);
    }
}
