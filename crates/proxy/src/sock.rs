//! Socket set-up the listeners and the relay need and tokio does not offer: transparent
//! listeners, MPTCP upstream sockets with fallback, a foreign source address, RST on close.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::config::{ProxyOptions, Upstream};
use crate::stats::Stats;

/// `TCP_IS_MPTCP` (linux/tcp.h): 1 on a socket whose connection runs MPTCP, 0 after a
/// fallback to TCP (the option is then answered by the plain TCP subflow).
const TCP_IS_MPTCP: libc::c_int = 43;

/// Listen backlog: a burst of 2,000 connections must not overflow the accept queue.
const BACKLOG: i32 = 4096;

/// Creates a listening socket on `addr`; with `transparent` it carries `IP_TRANSPARENT`
/// so that the TPROXY target may hand it connections addressed to other hosts.
pub(crate) fn listener(addr: SocketAddr, transparent: bool) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // `[::]:P` takes IPv4 diversions too (as v4-mapped addresses).
        sock.set_only_v6(false)?;
    }
    if transparent {
        set_transparent(&sock, addr)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(BACKLOG)?;
    sock.set_nonblocking(true)?;
    TcpListener::from_std(sock.into())
}

fn set_transparent(sock: &Socket, addr: SocketAddr) -> io::Result<()> {
    if addr.is_ipv6() {
        sock.set_ip_transparent_v6(true)?;
    }
    sock.set_ip_transparent_v4(true)
}

/// Connects to `dst` as the options say (TCP or MPTCP with fallback, `SO_MARK`, buffer
/// sizes), optionally from the foreign address `source` (IP_TRANSPARENT bind, port chosen
/// by the kernel). Counts MPTCP use and fallbacks; the caller counts failures.
pub(crate) async fn connect_upstream(
    dst: SocketAddr,
    source: Option<SocketAddr>,
    opts: &ProxyOptions,
    stats: &Stats,
) -> io::Result<TcpStream> {
    let domain = Domain::for_address(dst);
    let mut want_mptcp = opts.upstream == Upstream::Mptcp;
    let sock = if want_mptcp {
        match Socket::new(domain, Type::STREAM, Some(Protocol::MPTCP)) {
            Ok(s) => s,
            Err(e) => {
                // EPROTONOSUPPORT (no CONFIG_MPTCP), ENOPROTOOPT (net.mptcp.enabled=0), ...
                tracing::debug!(error = %e, "MPTCP socket refused; using TCP");
                Stats::inc(&stats.mptcp_fallbacks);
                want_mptcp = false;
                Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?
            }
        }
    } else {
        Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?
    };
    sock.set_nonblocking(true)?;
    if opts.upstream_mark != 0 {
        sock.set_mark(opts.upstream_mark)?;
    }
    if opts.socket_buffer > 0 {
        sock.set_recv_buffer_size(opts.socket_buffer)?;
        sock.set_send_buffer_size(opts.socket_buffer)?;
    }
    if let Some(src) = source {
        let src = SocketAddr::new(unmap(src).ip(), 0);
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "client and server address families differ",
            ));
        }
        set_transparent(&sock, src)?;
        // Port 0 with IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect time for the
        // full 4-tuple, so many connections from one client address do not exhaust ports.
        let one: libc::c_int = 1;
        // SAFETY: valid fd, pointer to a live c_int with its size.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        sock.bind(&src.into())?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    let tsock = TcpSocket::from_std_stream(std_stream);
    let stream = tokio::time::timeout(opts.connect_timeout(), tsock.connect(dst))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream connect timed out"))??;
    stream.set_nodelay(true)?;
    if want_mptcp {
        if is_mptcp(&stream) {
            Stats::inc(&stats.mptcp_connections);
        } else {
            Stats::inc(&stats.mptcp_fallbacks);
        }
    }
    Ok(stream)
}

/// Whether the connection of `stream` runs MPTCP (false after a fallback to TCP).
pub(crate) fn is_mptcp(stream: &TcpStream) -> bool {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd; val/len point to live locals of the right size.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_TCP,
            TCP_IS_MPTCP,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && val == 1
}

/// Prepares an accepted client socket: no Nagle delay added by the proxy, buffer sizes.
pub(crate) fn tune_accepted(stream: &TcpStream, opts: &ProxyOptions) -> io::Result<()> {
    stream.set_nodelay(true)?;
    if opts.socket_buffer > 0 {
        let s = SockRef::from(stream);
        s.set_recv_buffer_size(opts.socket_buffer)?;
        s.set_send_buffer_size(opts.socket_buffer)?;
    }
    Ok(())
}

/// Makes the next close of `stream` send RST instead of FIN (`SO_LINGER` with 0 s).
pub(crate) fn rst_on_close(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(std::time::Duration::ZERO));
}

/// A v4-mapped IPv6 address as the IPv4 one ([`IpAddr::to_canonical`]); anything else
/// unchanged (an IPv6 address keeps its scope id).
pub(crate) fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr.ip().to_canonical() {
        IpAddr::V4(v4) if addr.is_ipv6() => SocketAddr::new(v4.into(), addr.port()),
        _ => addr,
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit and returns the new soft
/// limit: each relayed connection holds six descriptors with splice (two sockets, two
/// pipes), so the common default of 1024 caps the proxy near 170 connections.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: lim is a live rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}
