//! The few libc calls std does not offer: the monotonic clock the datagram timestamps use,
//! forced socket buffer sizes, `sendmmsg`/`recvmmsg` over one flat buffer, `SIOCOUTQ`,
//! pinning a thread to a CPU, kernel receive timestamps.

use std::io;
use std::os::fd::AsRawFd;

/// CLOCK_MONOTONIC in nanoseconds: shared by every namespace of one host (barring time
/// namespaces), so sender and sink timestamps can be subtracted.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn setsockopt_int(fd: &impl AsRawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: value outlives the call and the length matches its type.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the receive buffer, past `net.core.rmem_max` when privileged (the `FORCE` option),
/// else as large as the sysctl allows: a sink must not drop what the relay delivered.
pub(crate) fn set_rcvbuf(fd: &impl AsRawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    if setsockopt_int(fd, libc::SO_RCVBUFFORCE, v).is_err() {
        let _ = setsockopt_int(fd, libc::SO_RCVBUF, v);
    }
}

/// Sets the send buffer like [`set_rcvbuf`].
pub(crate) fn set_sndbuf(fd: &impl AsRawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    if setsockopt_int(fd, libc::SO_SNDBUFFORCE, v).is_err() {
        let _ = setsockopt_int(fd, libc::SO_SNDBUF, v);
    }
}

/// Bytes not yet acknowledged by the peer of a TCP socket (`SIOCOUTQ`).
pub(crate) fn tcp_outq(fd: &impl AsRawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one int through the valid pointer.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if rc == 0 {
        Ok(n.max(0) as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A batch of `slots` message buffers of `slot_len` bytes each in one allocation, for
/// `sendmmsg`/`recvmmsg` on a connected (send) or bound (receive) socket.
pub(crate) struct MmsgBuf {
    data: Vec<u8>,
    slot_len: usize,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl MmsgBuf {
    pub(crate) fn new(slots: usize, slot_len: usize) -> MmsgBuf {
        MmsgBuf {
            data: vec![0; slots * slot_len],
            slot_len,
            iovs: Vec::with_capacity(slots),
            msgs: Vec::with_capacity(slots),
        }
    }

    pub(crate) fn slots(&self) -> usize {
        self.data.len().checked_div(self.slot_len).unwrap_or(0)
    }

    /// Buffer of slot `i` (its full length).
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.data[i * self.slot_len..(i + 1) * self.slot_len]
    }

    /// Received bytes of slot `i` after [`MmsgBuf::recv`].
    pub(crate) fn received(&self, i: usize) -> &[u8] {
        let len = (self.msgs[i].msg_len as usize).min(self.slot_len);
        &self.data[i * self.slot_len..i * self.slot_len + len]
    }

    /// Points the iovec/mmsghdr arrays at the first `n` slots. Rebuilt before every call so
    /// no pointer outlives a `&mut` access to `data`.
    fn prepare(&mut self, n: usize) {
        let base = self.data.as_mut_ptr();
        self.iovs.clear();
        for i in 0..n {
            self.iovs.push(libc::iovec {
                // SAFETY: i < slots, so the offset stays inside `data`.
                iov_base: unsafe { base.add(i * self.slot_len) }.cast(),
                iov_len: self.slot_len,
            });
        }
        self.msgs.clear();
        for iov in &mut self.iovs {
            // SAFETY: an all-zero mmsghdr is valid (null name/control, zero lengths).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            self.msgs.push(m);
        }
    }

    /// Sends the first `n` slots as `n` datagrams; returns how many went out.
    pub(crate) fn send(&mut self, fd: &impl AsRawFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.slots());
        self.prepare(n);
        // SAFETY: msgs[..n] point at iovecs that point into `data`, all alive and not
        // otherwise borrowed for the duration of the call.
        let rc =
            unsafe { libc::sendmmsg(fd.as_raw_fd(), self.msgs.as_mut_ptr(), n as libc::c_uint, 0) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }

    /// Receives up to `slots()` datagrams, blocking (up to `SO_RCVTIMEO`) for the first
    /// only (`MSG_WAITFORONE`); returns how many arrived.
    pub(crate) fn recv(&mut self, fd: &impl AsRawFd) -> io::Result<usize> {
        let n = self.slots();
        self.prepare(n);
        // SAFETY: as in `send`; the kernel writes at most iov_len bytes per slot and
        // msg_len per header. A null timeout leaves timing to SO_RCVTIMEO.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// True for the errors that mean "nothing arrived in time", not a broken socket.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Pins the calling thread to `cpu` (`sched_setaffinity`), so that a generator or a sink
/// stays on the core a benchmark gives it.
pub fn pin_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is past CPU_SETSIZE"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the pointer and size describe one valid cpu_set_t; 0 = the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CLOCK_REALTIME in nanoseconds (the clock of kernel receive timestamps).
pub(crate) fn realtime_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// Turns on `SO_TIMESTAMPNS`: each datagram carries the time the kernel received it.
pub(crate) fn set_timestampns(fd: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SO_TIMESTAMPNS, 1)
}
