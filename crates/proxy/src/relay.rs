//! The relay core: moves bytes both ways between the client's and the server's socket until
//! both directions have ended, keeping TCP's semantics across the proxy.
//!
//! - Half-close: EOF from one side becomes `shutdown(SHUT_WR)` on the other, and the other
//!   direction keeps running.
//! - Reset: an error on either socket (RST received, write to a reset peer) ends the
//!   connection and the other socket is closed with `SO_LINGER` 0, so its peer gets a RST
//!   too instead of a clean FIN that would pass a truncated transfer off as complete.
//! - Idle timeout and the drain deadline reset both sides.
//!
//! With [`RelayMode::Splice`] each direction owns a pipe: `splice(socket -> pipe)` then
//! `splice(pipe -> socket)`, payload pages never copied to user space. The pipe is only
//! filled when empty, so an `EAGAIN` from the filling splice always means "socket has no
//! data" (never "pipe full") and readiness bookkeeping stays exact.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::config::RelayMode;
use crate::sock::rst_on_close;
use crate::stats::Stats;

/// Parameters of one relayed connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RelayParams {
    pub(crate) mode: RelayMode,
    pub(crate) buffer_size: usize,
    pub(crate) idle_timeout: Option<Duration>,
}

/// How a relayed connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Both directions saw EOF and passed it on.
    Completed,
    /// One side failed or reset; the other was reset.
    Reset,
    /// No byte moved for the idle timeout; both reset.
    Idle,
    /// The drain deadline passed; both reset.
    Aborted,
}

/// Why one direction stopped.
enum DirEnd {
    /// EOF read from the source and passed on as a FIN.
    Eof,
    /// The source socket failed (usually RST received).
    SrcFailed(io::Error),
    /// The destination socket failed (usually the peer reset).
    DstFailed(io::Error),
}

/// One direction's relay loop, whichever the mode.
type Direction<'a> = std::pin::Pin<Box<dyn Future<Output = DirEnd> + Send + 'a>>;

/// Relays between `client` and `server` until both directions end, the idle timeout
/// fires or `abort` turns true. Updates byte counters and the ending counters in `stats`.
pub(crate) async fn relay(
    client: TcpStream,
    server: TcpStream,
    params: RelayParams,
    stats: &Stats,
    mut abort: watch::Receiver<bool>,
) -> Ending {
    let start = Instant::now();
    // Milliseconds since `start` of the last byte moved (either way).
    let last = AtomicU64::new(0);
    let (up, down): (Direction<'_>, Direction<'_>) = match params.mode {
        RelayMode::Splice => {
            let (p1, p2) = match (Pipe::new(params.buffer_size), Pipe::new(params.buffer_size)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "creating pipes; resetting connection");
                    rst_on_close(&client);
                    rst_on_close(&server);
                    Stats::inc(&stats.resets);
                    return Ending::Reset;
                }
            };
            let up = Box::pin(splice_dir(
                &client,
                &server,
                p1,
                &stats.bytes_up,
                &last,
                start,
            ));
            let down = Box::pin(splice_dir(
                &server,
                &client,
                p2,
                &stats.bytes_down,
                &last,
                start,
            ));
            (up, down)
        }
        RelayMode::Copy => {
            let n = params.buffer_size;
            let up = Box::pin(copy_dir(&client, &server, n, &stats.bytes_up, &last, start));
            let down = Box::pin(copy_dir(
                &server,
                &client,
                n,
                &stats.bytes_down,
                &last,
                start,
            ));
            (up, down)
        }
    };
    let mut up = up;
    let mut down = down;
    let (mut up_done, mut down_done) = (false, false);
    let idle = params.idle_timeout;
    let check_every = idle.map_or(Duration::from_secs(3600), |d| {
        (d / 4).max(Duration::from_millis(50))
    });
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + check_every, check_every);
    let ending = loop {
        tokio::select! {
            r = &mut up, if !up_done => match r {
                DirEnd::Eof => up_done = true,
                DirEnd::SrcFailed(e) | DirEnd::DstFailed(e) => {
                    tracing::debug!(error = %e, "client->server direction failed");
                    break Ending::Reset;
                }
            },
            r = &mut down, if !down_done => match r {
                DirEnd::Eof => down_done = true,
                DirEnd::SrcFailed(e) | DirEnd::DstFailed(e) => {
                    tracing::debug!(error = %e, "server->client direction failed");
                    break Ending::Reset;
                }
            },
            // A direction that ended with EOF no longer reads its source, so a RST that
            // arrives afterwards would go unnoticed until the other direction writes.
            r = client.ready(Interest::ERROR), if up_done => {
                if r.is_err() || client.take_error().ok().flatten().is_some() {
                    break Ending::Reset;
                }
                clear_error_readiness(&client);
            },
            r = server.ready(Interest::ERROR), if down_done => {
                if r.is_err() || server.take_error().ok().flatten().is_some() {
                    break Ending::Reset;
                }
                clear_error_readiness(&server);
            },
            _ = tick.tick(), if idle.is_some() => {
                let quiet = start.elapsed().saturating_sub(Duration::from_millis(last.load(Relaxed)));
                if idle.is_some_and(|d| quiet >= d) {
                    break Ending::Idle;
                }
            },
            true = flag_set(&mut abort) => break Ending::Aborted,
        }
        if up_done && down_done {
            break Ending::Completed;
        }
    };
    drop(up);
    drop(down);
    match ending {
        Ending::Completed => Stats::inc(&stats.completed),
        Ending::Reset => Stats::inc(&stats.resets),
        Ending::Idle => Stats::inc(&stats.idle_timeouts),
        Ending::Aborted => Stats::inc(&stats.drained_aborts),
    }
    if ending != Ending::Completed {
        // The side that failed is gone already; RST on the other tells its peer the
        // stream was cut. Setting it on both is harmless and covers idle/abort.
        rst_on_close(&client);
        rst_on_close(&server);
    }
    ending
}

/// Waits until the flag turns true (returns true) or its sender is gone (returns false).
pub(crate) async fn flag_set(rx: &mut watch::Receiver<bool>) -> bool {
    // The guard `wait_for` returns is not Send: drop it before any other await.
    rx.wait_for(|v| *v).await.is_ok()
}

/// Clears a spurious ERROR readiness (the error was already taken) so that the select
/// loop does not spin on it.
fn clear_error_readiness(s: &TcpStream) {
    let _ = s.try_io(Interest::ERROR, || -> io::Result<()> {
        Err(io::ErrorKind::WouldBlock.into())
    });
}

fn shutdown_write(s: &TcpStream) -> io::Result<()> {
    // SAFETY: valid fd for the lifetime of `s`.
    let rc = unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_WR) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A non-blocking pipe for splicing one direction.
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Its capacity in bytes as the kernel set it.
    size: usize,
}

impl Pipe {
    fn new(size: usize) -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: fds is a live array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a valid fd. Failure (EPERM above pipe-max-size for an
        // unprivileged user) leaves the default size, which F_GETPIPE_SZ reports.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) };
        // SAFETY: fcntl on a valid fd.
        let got = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_GETPIPE_SZ) };
        if got <= 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe {
            r,
            w,
            size: got as usize,
        })
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain fds, null offsets (both are a socket or a pipe).
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

async fn splice_dir(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: Pipe,
    counter: &AtomicU64,
    last: &AtomicU64,
    start: Instant,
) -> DirEnd {
    let (src_fd, dst_fd) = (src.as_raw_fd(), dst.as_raw_fd());
    loop {
        let n = match when_ready(src, Interest::READABLE, || {
            src.try_io(Interest::READABLE, || {
                splice(src_fd, pipe.w.as_raw_fd(), pipe.size)
            })
        })
        .await
        {
            Ok(0) => return pass_eof(dst),
            Ok(n) => n,
            Err(e) => return DirEnd::SrcFailed(e),
        };
        let mut left = n;
        while left > 0 {
            match when_ready(dst, Interest::WRITABLE, || {
                dst.try_io(Interest::WRITABLE, || {
                    splice(pipe.r.as_raw_fd(), dst_fd, left)
                })
            })
            .await
            {
                Ok(0) => {
                    return DirEnd::DstFailed(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice to socket moved nothing",
                    ));
                }
                Ok(m) => {
                    left -= m;
                    moved(m, counter, last, start);
                }
                Err(e) => return DirEnd::DstFailed(e),
            }
        }
    }
}

async fn copy_dir(
    src: &TcpStream,
    dst: &TcpStream,
    size: usize,
    counter: &AtomicU64,
    last: &AtomicU64,
    start: Instant,
) -> DirEnd {
    let mut buf = vec![0u8; size];
    loop {
        let n = match when_ready(src, Interest::READABLE, || src.try_read(&mut buf)).await {
            Ok(0) => return pass_eof(dst),
            Ok(n) => n,
            Err(e) => return DirEnd::SrcFailed(e),
        };
        let mut off = 0;
        while off < n {
            match when_ready(dst, Interest::WRITABLE, || dst.try_write(&buf[off..n])).await {
                Ok(m) => {
                    off += m;
                    moved(m, counter, last, start);
                }
                Err(e) => return DirEnd::DstFailed(e),
            }
        }
    }
}

/// Waits until `sock` is ready for `interest`, then runs `op` (a `try_` operation on
/// `sock` that clears the readiness when it would block), again while it would block or
/// is interrupted.
async fn when_ready<T>(
    sock: &TcpStream,
    interest: Interest,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    loop {
        sock.ready(interest).await?;
        match op() {
            Err(e) if retry(&e) => continue,
            r => return r,
        }
    }
}

/// EOF from the source: passes it on as a FIN to `dst`, which ends the direction.
fn pass_eof(dst: &TcpStream) -> DirEnd {
    match shutdown_write(dst) {
        Ok(()) => DirEnd::Eof,
        Err(e) => DirEnd::DstFailed(e),
    }
}

/// Counts `n` bytes moved in one direction and notes the time for the idle timeout.
fn moved(n: usize, counter: &AtomicU64, last: &AtomicU64, start: Instant) {
    counter.fetch_add(n as u64, Relaxed);
    last.store(start.elapsed().as_millis() as u64, Relaxed);
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair over loopback: (our end, the peer's end).
    async fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let addr = l.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
        (a.unwrap(), b.unwrap().0)
    }

    /// A client and a server over loopback with [`relay`] between them in a task.
    struct Relayed {
        client: TcpStream,
        server: TcpStream,
        stats: std::sync::Arc<Stats>,
        task: tokio::task::JoinHandle<Ending>,
        /// The abort flag's sender, kept so that the relay never sees it gone.
        _abort: watch::Sender<bool>,
    }

    async fn relayed(params: RelayParams) -> Relayed {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (client, proxy_c) = pair(&l).await;
        let (proxy_s, server) = pair(&l).await;
        let stats = std::sync::Arc::new(Stats::default());
        let (tx, rx) = watch::channel(false);
        let st = stats.clone();
        let task = tokio::spawn(async move { relay(proxy_c, proxy_s, params, &st, rx).await });
        Relayed {
            client,
            server,
            stats,
            task,
            _abort: tx,
        }
    }

    async fn run(mode: RelayMode) {
        let Relayed {
            mut client,
            mut server,
            stats,
            task,
            _abort,
        } = relayed(RelayParams {
            mode,
            buffer_size: 4096,
            idle_timeout: None,
        })
        .await;
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let d2 = data.clone();
        // Client writes and half-closes; the server answers after reading EOF.
        let srv = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, d2);
            server.write_all(b"answer").await.unwrap();
        });
        client.write_all(&data).await.unwrap();
        client.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"answer");
        srv.await.unwrap();
        assert_eq!(task.await.unwrap(), Ending::Completed);
        let s = stats.snapshot();
        assert_eq!((s.bytes_up, s.bytes_down, s.completed), (300_000, 6, 1));
    }

    #[tokio::test]
    async fn splice_keeps_half_close() {
        run(RelayMode::Splice).await;
    }

    #[tokio::test]
    async fn copy_keeps_half_close() {
        run(RelayMode::Copy).await;
    }

    #[tokio::test]
    async fn reset_is_propagated() {
        for mode in [RelayMode::Splice, RelayMode::Copy] {
            let Relayed {
                mut client,
                server,
                task,
                _abort,
                ..
            } = relayed(RelayParams {
                mode,
                buffer_size: 65536,
                idle_timeout: None,
            })
            .await;
            rst_on_close(&server);
            drop(server);
            let mut buf = [0u8; 16];
            let err = client.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{mode:?}");
            assert_eq!(task.await.unwrap(), Ending::Reset);
        }
    }

    #[tokio::test]
    async fn idle_timeout_resets_both() {
        let Relayed {
            mut client,
            server: _server,
            stats,
            task,
            _abort,
        } = relayed(RelayParams {
            mode: RelayMode::Splice,
            buffer_size: 65536,
            idle_timeout: Some(Duration::from_millis(200)),
        })
        .await;
        assert_eq!(task.await.unwrap(), Ending::Idle);
        let mut buf = [0u8; 1];
        assert!(client.read(&mut buf).await.is_err());
        assert_eq!(stats.snapshot().idle_timeouts, 1);
    }
}
