//! Opening a netlink socket and setting its options: the unsafe calls every netlink
//! family's socket makes (rtnetlink, ctnetlink here; nfnetlink_queue in relay-nfq), in one
//! place.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Opens an `AF_NETLINK` socket of `protocol` (`NETLINK_ROUTE`, `NETLINK_NETFILTER`),
/// close-on-exec, and non-blocking if `nonblocking`.
pub fn open(protocol: libc::c_int, nonblocking: bool) -> io::Result<OwnedFd> {
    let ty =
        libc::SOCK_RAW | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket(2); the fd is owned right after.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, ty, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets the integer socket option `opt` of `level` to `val`.
pub fn set_int(
    fd: &impl AsRawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `val` is a live c_int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            &val as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes a blocking receive give up after `wait` (`SO_RCVTIMEO`).
pub fn set_recv_timeout(fd: &impl AsRawFd, wait: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_usec: wait.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a live timeval of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
