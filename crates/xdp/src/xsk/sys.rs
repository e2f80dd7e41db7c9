//! The few system calls behind an AF_XDP socket, wrapped once so that `xsk.rs` reads as
//! the setup sequence it is: memory mappings that unmap on drop, and typed socket options.

use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// `XDP_MAX_TX_SKB_BUDGET` from linux/if_xdp.h (kernel 6.17+; libc 0.2.191 lacks it):
/// how many tx descriptors one `sendto` turns into skbs in copy mode (default 32, range
/// 32 to the tx ring's size).
pub(super) const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// The kernel's minimum tx budget (`TX_BATCH_SIZE` in net/xdp/xsk.c).
pub(super) const DEFAULT_TX_BUDGET: u32 = 32;

/// One `mmap` region, unmapped on drop.
#[derive(Debug)]
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Anonymous private memory of `len` bytes, page-aligned and populated: the UMEM.
    pub(super) fn anon(len: usize) -> io::Result<Mapping> {
        Self::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    }

    /// A ring of the socket `fd` at the page offset `offset` (`XDP_PGOFF_*`).
    pub(super) fn ring(fd: RawFd, len: usize, offset: u64) -> io::Result<Mapping> {
        let offset = libc::off_t::try_from(offset).map_err(|_| einval())?;
        Self::map(len, libc::MAP_SHARED | libc::MAP_POPULATE, fd, offset)
    }

    fn map(len: usize, flags: libc::c_int, fd: RawFd, offset: libc::off_t) -> io::Result<Mapping> {
        if len == 0 {
            return Err(einval());
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(einval)?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte.
    pub(super) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and nothing borrows the mapping
        // any more (its owner is being dropped).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0)`.
pub(super) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with no pointers.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, SOL_XDP, opt, value)` for a plain-data `value`.
pub(super) fn set_opt<T: Copy>(fd: &OwnedFd, opt: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: value points to size_of::<T>() readable bytes for the call's duration.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(fd, SOL_XDP, opt)` into a zeroed `T`; also returns the length the kernel
/// wrote (older kernels write shorter versions of some structs).
pub(super) fn get_opt<T: Copy>(fd: RawFd, opt: libc::c_int) -> io::Result<(T, usize)> {
    let mut value = MaybeUninit::<T>::zeroed();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: value has room for len bytes, and len is a valid in/out length.
    let rc =
        unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, value.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed memory is a valid value of the plain-data option structs used here
    // (integers only), and the kernel wrote at most size_of::<T>() bytes over it.
    Ok((unsafe { value.assume_init() }, len as usize))
}

/// `bind(fd, sockaddr_xdp)`.
pub(super) fn bind(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: addr is a valid sockaddr_xdp of the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT)`: the tx kick.
pub(super) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: no buffer and no address are passed.
    let rc = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT)`: the fill-ring kick for zero-copy drivers.
pub(super) fn kick_rx(fd: RawFd) -> io::Result<()> {
    // SAFETY: no buffer and no address are passed.
    let rc = unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `poll(fd, POLLIN, timeout_ms)`: true if readable; an interrupted wait is a timeout.
pub(super) fn poll_in(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(err);
    }
    Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
}

/// The system page size.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096)
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}
