//! TCP bulk transfer: a sender that writes for a set time and a sink that reads to EOF.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::payload::Payload;
use crate::sys;

/// Size of each write and read.
const CHUNK: usize = 128 * 1024;

/// How long [`tcp_send_ratio`] waits for the peer to acknowledge what is still queued.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Accepts one connection on `listener`, reads it to EOF and returns the byte count.
pub fn tcp_sink(listener: TcpListener) -> io::Result<u64> {
    tcp_sink_progress(listener, None)
}

/// Like [`tcp_sink`], and adds every read's byte count to `progress` as it goes, so that
/// a benchmark can count the bytes delivered within a measuring window.
pub fn tcp_sink_progress(listener: TcpListener, progress: Option<&AtomicU64>) -> io::Result<u64> {
    let (mut stream, _) = listener.accept()?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                total += n as u64;
                if let Some(p) = progress {
                    p.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Connects to `dst` and writes incompressible 128 KiB buffers for `duration`; returns
/// the bytes written and the elapsed time. Same as [`tcp_send_ratio`] with ratio 1.0.
pub fn tcp_send(dst: SocketAddr, duration: Duration) -> io::Result<(u64, Duration)> {
    tcp_send_ratio(dst, duration, 1.0)
}

/// Like [`tcp_send`] with a payload of the given compressibility (see [`Payload`]).
///
/// After `duration` the sender waits (at most 10 s) until the peer has acknowledged
/// everything (`SIOCOUTQ` reaches 0) before stopping the clock, so bytes / elapsed is the
/// delivered rate rather than the rate of filling the local socket buffer.
pub fn tcp_send_ratio(
    dst: SocketAddr,
    duration: Duration,
    ratio: f64,
) -> io::Result<(u64, Duration)> {
    let mut stream = TcpStream::connect(dst)?;
    // Short write timeout so a stalled path cannot hold us past the deadline.
    stream.set_write_timeout(Some(Duration::from_millis(50)))?;
    let buf = Payload::new(CHUNK, ratio, 0x0074_6370).into_bytes();
    let start = Instant::now();
    let end = start + duration;
    let mut total = 0u64;
    let mut off = 0;
    while Instant::now() < end {
        match stream.write(&buf[off..]) {
            Ok(n) => {
                total += n as u64;
                off = (off + n) % buf.len();
            }
            Err(e) if sys::is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let drain_end = Instant::now() + DRAIN_LIMIT;
    while sys::tcp_outq(&stream)? > 0 && Instant::now() < drain_end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = start.elapsed();
    let _ = stream.shutdown(Shutdown::Write);
    Ok((total, elapsed))
}
