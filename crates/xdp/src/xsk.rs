//! AF_XDP sockets: one socket on one (interface, queue), with its own UMEM and rings.
//!
//! # Why our own module
//! The crates that do this were weighed (issue 16; the research notes): `xsk-rs` builds
//! libxdp and libbpf through bindgen, so it needs libclang, libelf and zlib at build time
//! for what is a few hundred lines of ring handling; `xdpilone` is EUPL-1.2, a copyleft
//! licence, while relayd is MIT OR Apache-2.0 and ships as a `.deb`. libc (0.2.191) has
//! every kernel type needed (`sockaddr_xdp`, `xdp_umem_reg`, `xdp_desc`,
//! `xdp_mmap_offsets`, the `XDP_*` options), so this module is those types, `mmap` and the
//! ring protocol (`xsk/ring.rs`, tested without a kernel).
//!
//! # Shape
//! A [`Socket`] owns a UMEM (anonymous, page-aligned memory cut into `frames` frames of
//! `frame_size` bytes) registered on its own file descriptor, the fill and completion
//! rings of that UMEM, and an rx ring, a tx ring or both. relayd copies each received
//! packet out of its rx frame into a chain's buffer and later into a tx frame, so frames
//! never move between sockets: the first half of the UMEM is rx frames (always in the
//! fill ring, in the kernel or in the rx ring, and recycled to the fill ring by
//! [`Socket::recv`] before it returns), the second half tx frames (on a preallocated free
//! stack until [`Socket::send`] takes one, back on it when [`Socket::complete`] reaps its
//! completion). A socket with only one ring gives that ring the whole UMEM.
//!
//! No call allocates, locks or makes a system call per packet: `recv` and `send` touch
//! only the mapped rings, and the system calls are per batch: [`Socket::flush`] (the tx
//! kick, `sendto`) and [`Socket::wait`] (`poll`).
//!
//! # What it does not do
//! No shared UMEM between sockets, no unaligned-chunk mode, no multi-buffer (jumbo)
//! frames, no tx metadata and nothing specific to zero-copy drivers beyond asking for it
//! ([`BindMode`]) and honouring the need-wakeup flags. It does not load XDP programs or
//! fill XSKMAPs either: that is `program.rs` and `attach.rs`.
//!
//! # Kernel behaviour worth knowing
//! - Received frames: the packet starts at `XDP_PACKET_HEADROOM` (256) bytes into its
//!   frame in copy mode, and the XDP program's metadata (`bpf_xdp_adjust_meta`) is copied
//!   to the bytes just before it, so [`Socket::recv`] shows the metadata as the end of the
//!   headroom slice.
//! - Copy-mode transmit happens inside `sendto` and turns at most 32 descriptors into
//!   skbs per call unless `XDP_MAX_TX_SKB_BUDGET` (kernel 6.17+) raises that, which
//!   [`Socket::open`] does (to the tx ring's size; older kernels keep 32). The kernel can
//!   still stop early (socket send buffer full, device busy) and leave descriptors on the
//!   tx ring; [`Socket::flush`] kicks again while that makes progress, and every later
//!   `flush` kicks while any are left, so nothing stays stranded as long as the owner
//!   keeps flushing.

mod error;
mod ring;
mod sys;

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use error::hint;
pub use error::{Step, XskError};
use ring::{ConsRing, FrameStack, ProdRing, RingPtrs};
use sys::Mapping;

/// Where a received packet starts in its frame in copy mode (`XDP_PACKET_HEADROOM`).
pub const PACKET_HEADROOM: usize = 256;

/// How to bind: the kernel copies frames between its buffers and the UMEM, or the driver
/// DMAs straight into the UMEM (zero-copy, when it supports that).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindMode {
    /// Zero-copy if the driver supports it, copy otherwise (the kernel decides at bind).
    #[default]
    Auto,
    /// Copy mode (`XDP_COPY`): works on every interface, veth included.
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`): fails with `EOPNOTSUPP` where the driver lacks it.
    ZeroCopy,
}

/// What [`Socket::open`] sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketConfig {
    /// The interface (in the calling thread's network namespace).
    pub ifindex: u32,
    /// The interface's queue (the rx queue an XDP program redirects from; for tx, the
    /// device queue to send on).
    pub queue: u32,
    /// Rx ring entries: a power of two, or 0 for a socket that only transmits.
    pub rx_size: u32,
    /// Tx ring entries: a power of two, or 0 for a socket that only receives.
    pub tx_size: u32,
    /// UMEM frames (e.g. 4096), split evenly between rx and tx when both rings exist.
    pub frames: u32,
    /// Bytes per frame: a power of two from 2048 to the page size (2048 or 4096); the
    /// largest packet is this minus [`PACKET_HEADROOM`] on rx, this on tx.
    pub frame_size: u32,
    /// Copy, zero-copy or whichever the driver offers.
    pub bind: BindMode,
}

/// Counters of one socket: the kernel's six `XDP_STATISTICS` and this module's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct XskStats {
    /// Received packets dropped for other reasons (kernel).
    pub rx_dropped: u64,
    /// Fill-ring descriptors the kernel found invalid (kernel).
    pub rx_invalid_descs: u64,
    /// Tx descriptors the kernel found invalid (kernel).
    pub tx_invalid_descs: u64,
    /// Packets dropped because the rx ring was full (kernel).
    pub rx_ring_full: u64,
    /// Packets dropped because the fill ring was empty (kernel).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the tx ring empty when woken (kernel).
    pub tx_ring_empty_descs: u64,
    /// Tx kicks (`sendto`) made by [`Socket::flush`].
    pub tx_kicks: u64,
    /// Tx kicks that returned `EAGAIN`, `EBUSY` or `ENOBUFS` (the kernel stopped early;
    /// what it left on the ring goes with a later kick).
    pub tx_kicks_busy: u64,
    /// Rx or completion entries whose address was not one of this socket's frames,
    /// skipped (never seen from a sane kernel).
    pub bad_descs: u64,
}

/// An AF_XDP socket with its UMEM and rings; see the module docs.
///
/// Dropping it unmaps the rings and the UMEM and closes the socket (which also removes it
/// from any XSKMAP).
#[derive(Debug)]
pub struct Socket {
    rx: Option<ConsRing<libc::xdp_desc>>,
    tx: Option<ProdRing<libc::xdp_desc>>,
    fill: ProdRing<u64>,
    comp: ConsRing<u64>,
    /// Rx frames waiting for room in the fill ring.
    rx_free: FrameStack,
    /// Tx frames not queued or in flight.
    tx_free: FrameStack,
    frame_size: u32,
    /// Rx frames are `[0, rx_end)`, tx frames `[rx_end, umem len)` (byte offsets).
    rx_end: u64,
    zero_copy: bool,
    tx_kicks: u64,
    tx_kicks_busy: u64,
    bad_descs: u64,
    /// Declared after the rings that point into them, so they are unmapped after them.
    _ring_maps: [Option<Mapping>; 4],
    fd: OwnedFd,
    umem: Mapping,
}

// SAFETY: the raw pointers in the rings point into mappings this value owns; nothing
// else in the process touches them, so moving the whole socket to another thread is
// sound. The kernel side synchronises through the rings' atomics. (Not Sync: `&self`
// methods only read counters and the fd, but there is no need to share one socket.)
unsafe impl Send for Socket {}

impl Socket {
    /// Creates the socket, registers a fresh UMEM, sizes and maps the rings, puts every rx
    /// frame on the fill ring and binds to `cfg.ifindex`/`cfg.queue` with
    /// `XDP_USE_NEED_WAKEUP`. Needs CAP_NET_RAW, and CAP_IPC_LOCK or enough
    /// RLIMIT_MEMLOCK for the UMEM.
    pub fn open(cfg: &SocketConfig) -> Result<Socket, XskError> {
        let layout = Layout::new(cfg)?;
        let os = |step: Step| {
            move |source: io::Error| XskError::Os {
                step,
                ifindex: cfg.ifindex,
                queue: cfg.queue,
                hint: hint(step, cfg.bind, &source),
                source,
            }
        };

        let fd = sys::xdp_socket().map_err(os(Step::Socket))?;
        let umem = Mapping::anon(layout.umem_len).map_err(os(Step::Umem))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr().as_ptr() as u64,
            len: layout.umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sys::set_opt(&fd, libc::XDP_UMEM_REG, &reg).map_err(os(Step::Umem))?;

        sys::set_opt(&fd, libc::XDP_UMEM_FILL_RING, &layout.fill_size)
            .map_err(os(Step::RingSizes))?;
        sys::set_opt(&fd, libc::XDP_UMEM_COMPLETION_RING, &layout.comp_size)
            .map_err(os(Step::RingSizes))?;
        if cfg.rx_size > 0 {
            sys::set_opt(&fd, libc::XDP_RX_RING, &cfg.rx_size).map_err(os(Step::RingSizes))?;
        }
        if cfg.tx_size > 0 {
            sys::set_opt(&fd, libc::XDP_TX_RING, &cfg.tx_size).map_err(os(Step::RingSizes))?;
        }
        // The kernel accepts budgets from 32 to the tx ring's size; a smaller ring cannot
        // hold more than the default anyway. ENOPROTOOPT: a kernel before 6.17.
        if cfg.tx_size > sys::DEFAULT_TX_BUDGET {
            match sys::set_opt(&fd, sys::XDP_MAX_TX_SKB_BUDGET, &cfg.tx_size) {
                Err(e) if e.raw_os_error() != Some(libc::ENOPROTOOPT) => {
                    return Err(os(Step::RingSizes)(e));
                }
                _ => {}
            }
        }

        let (off, off_len) =
            sys::get_opt::<libc::xdp_mmap_offsets>(fd.as_raw_fd(), libc::XDP_MMAP_OFFSETS)
                .map_err(os(Step::Mmap))?;
        if off_len < size_of::<libc::xdp_mmap_offsets>() {
            // Kernels before 5.4 have no flags word, hence no need-wakeup.
            return Err(os(Step::Mmap)(io::Error::from_raw_os_error(
                libc::EOPNOTSUPP,
            )));
        }
        let raw = fd.as_raw_fd();
        let fill_map = map_ring::<u64>(
            raw,
            &off.fr,
            layout.fill_size,
            libc::XDP_UMEM_PGOFF_FILL_RING,
        )
        .map_err(os(Step::Mmap))?;
        let comp_map = map_ring::<u64>(
            raw,
            &off.cr,
            layout.comp_size,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        )
        .map_err(os(Step::Mmap))?;
        let rx_map = (cfg.rx_size > 0)
            .then(|| {
                map_ring::<libc::xdp_desc>(
                    raw,
                    &off.rx,
                    cfg.rx_size,
                    libc::XDP_PGOFF_RX_RING as u64,
                )
            })
            .transpose()
            .map_err(os(Step::Mmap))?;
        let tx_map = (cfg.tx_size > 0)
            .then(|| {
                map_ring::<libc::xdp_desc>(
                    raw,
                    &off.tx,
                    cfg.tx_size,
                    libc::XDP_PGOFF_TX_RING as u64,
                )
            })
            .transpose()
            .map_err(os(Step::Mmap))?;

        // SAFETY (all four): the pointers lie inside mappings stored in the socket below,
        // which outlive the rings (field order); sizes are the powers of two the kernel
        // accepted; this socket is the rings' only user in the process.
        let fill = unsafe { ProdRing::new(fill_map.1, layout.fill_size) };
        let comp = unsafe { ConsRing::new(comp_map.1, layout.comp_size) };
        let rx = rx_map
            .as_ref()
            .map(|m| unsafe { ConsRing::new(m.1, cfg.rx_size) });
        let tx = tx_map
            .as_ref()
            .map(|m| unsafe { ProdRing::new(m.1, cfg.tx_size) });

        let fs = u64::from(cfg.frame_size);
        let mut rx_free = FrameStack::with_capacity(layout.rx_frames as usize);
        for i in 0..u64::from(layout.rx_frames) {
            rx_free.push(i * fs);
        }
        let mut tx_free = FrameStack::with_capacity(layout.tx_frames as usize);
        // Pushed in reverse so the lowest frames are used first.
        for i in (u64::from(layout.rx_frames)..u64::from(cfg.frames)).rev() {
            tx_free.push(i * fs);
        }

        let mut sock = Socket {
            rx,
            tx,
            fill,
            comp,
            rx_free,
            tx_free,
            frame_size: cfg.frame_size,
            rx_end: u64::from(layout.rx_frames) * fs,
            zero_copy: false,
            tx_kicks: 0,
            tx_kicks_busy: 0,
            bad_descs: 0,
            _ring_maps: [
                Some(fill_map.0),
                Some(comp_map.0),
                rx_map.map(|m| m.0),
                tx_map.map(|m| m.0),
            ],
            fd,
            umem,
        };
        // Before bind, so the first packets find frames.
        sock.refill();

        let mode = match cfg.bind {
            BindMode::Auto => 0,
            BindMode::Copy => libc::XDP_COPY,
            BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
        };
        sys::bind(
            &sock.fd,
            cfg.ifindex,
            cfg.queue,
            mode | libc::XDP_USE_NEED_WAKEUP,
        )
        .map_err(os(Step::Bind))?;
        sock.zero_copy =
            match sys::get_opt::<libc::xdp_options>(sock.fd.as_raw_fd(), libc::XDP_OPTIONS) {
                Ok((o, _)) => o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
                // XDP_OPTIONS exists since 5.3; without it only a forced mode is known.
                Err(_) => cfg.bind == BindMode::ZeroCopy,
            };
        Ok(sock)
    }

    /// The socket's descriptor: for an XSKMAP entry, or to poll it with others.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether the bind ended up in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Receives up to `max` packets. `f(data, headroom)` sees each packet (from its
    /// Ethernet header) and the bytes before it in its frame (the XDP metadata, if the
    /// program wrote any, is the end of `headroom`). The frames go back to the fill ring
    /// before this returns, so `f` must copy out what it keeps. Returns the count; 0 with
    /// no rx ring.
    pub fn recv(&mut self, max: usize, mut f: impl FnMut(&[u8], &[u8])) -> usize {
        let Some(rx) = self.rx.as_mut() else {
            return 0;
        };
        let n = rx.available(u32::try_from(max).unwrap_or(u32::MAX));
        let fs = u64::from(self.frame_size);
        for i in 0..n {
            let desc = rx.get(i);
            // Aligned chunk mode: the frame is the address rounded down to a frame.
            let base = desc.addr & !(fs - 1);
            let offset = desc.addr - base;
            if base >= self.rx_end || offset + u64::from(desc.len) > fs {
                self.bad_descs += 1;
                continue;
            }
            // SAFETY: the frame is inside the UMEM (base < rx_end <= len, offset + len <=
            // frame size) and ours until it is back on the fill ring: the kernel wrote it
            // before publishing the descriptor.
            let frame = unsafe { frame_slice(&self.umem, base, fs as usize) };
            let (head, rest) = frame.split_at(offset as usize);
            f(&rest[..desc.len as usize], head);
            // Cannot overflow: the stack holds every rx frame and this one was not on it.
            if !self.rx_free.push(base) {
                self.bad_descs += 1;
            }
        }
        rx.release(n);
        self.refill();
        n as usize
    }

    /// Queues one frame of `len` bytes written by `f` (from the Ethernet header on).
    /// False, without calling `f`, if there is no free tx frame or tx ring slot (reap with
    /// [`Socket::complete`]), no tx ring, or `len` is 0 or above the frame size. The
    /// kernel sees it at the next [`Socket::flush`].
    pub fn send(&mut self, len: usize, f: impl FnOnce(&mut [u8])) -> bool {
        let Some(tx) = self.tx.as_mut() else {
            return false;
        };
        if len == 0 || len > self.frame_size as usize || tx.free(1) == 0 {
            return false;
        }
        let Some(addr) = self.tx_free.pop() else {
            return false;
        };
        // SAFETY: tx frames lie in [rx_end, umem len) and the frame is off the free stack,
        // so neither the kernel nor another call uses it; len <= frame size.
        let frame = unsafe { frame_slice(&self.umem, addr, len) };
        f(frame);
        tx.push(libc::xdp_desc {
            addr,
            len: len as u32,
            options: 0,
        })
    }

    /// Publishes the queued tx descriptors and wakes the kernel when it needs it: always
    /// in copy mode, where the kernel transmits only inside the `sendto`; in zero-copy mode
    /// when the driver set the ring's need-wakeup flag. Kicks again while the kernel leaves
    /// descriptors behind and makes progress, and kicks for leftovers of earlier calls even
    /// when nothing new was queued, so call it once per batch, also an empty one, until
    /// [`Socket::pending_tx`] is 0. `EAGAIN`, `EBUSY` and `ENOBUFS` mean the kernel stopped
    /// early and are counted ([`XskStats::tx_kicks_busy`]), not returned; other errors
    /// (`ENETDOWN`: the interface is down) are, and the descriptors stay on the ring for a
    /// later flush all the same.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(tx) = self.tx.as_mut() else {
            return Ok(());
        };
        tx.publish();
        // Each copy-mode kick sends up to the budget (the ring's size on 6.17+, else 32).
        let max_kicks = self.tx_free.capacity() / sys::DEFAULT_TX_BUDGET as usize + 2;
        let mut left = tx.outstanding();
        for _ in 0..max_kicks {
            if left == 0 || (self.zero_copy && !tx.needs_wakeup()) {
                return Ok(());
            }
            self.tx_kicks += 1;
            if let Err(e) = sys::kick_tx(self.fd.as_raw_fd()) {
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS) => self.tx_kicks_busy += 1,
                    _ => return Err(e),
                }
            }
            if self.zero_copy {
                // The driver transmits asynchronously; one wakeup is enough.
                return Ok(());
            }
            let now = tx.outstanding();
            if now >= left {
                // No progress (send buffer full, device busy): the next flush retries.
                return Ok(());
            }
            left = now;
        }
        Ok(())
    }

    /// Reclaims transmitted frames from the completion ring; returns how many.
    pub fn complete(&mut self) -> usize {
        let n = self.comp.available(u32::MAX);
        let fs = u64::from(self.frame_size);
        for i in 0..n {
            let base = self.comp.get(i) & !(fs - 1);
            if base < self.rx_end || base >= self.umem.len() as u64 || !self.tx_free.push(base) {
                self.bad_descs += 1;
            }
        }
        self.comp.release(n);
        n as usize
    }

    /// Waits up to `timeout_ms` (-1: forever) for received packets; true if there are
    /// some. Returns at once, without a system call, when the rx ring already holds some.
    /// In zero-copy mode, first wakes the driver for the fill ring if it asked.
    /// An interrupted wait returns false.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<bool> {
        if self.zero_copy && self.fill.needs_wakeup() {
            match sys::kick_rx(self.fd.as_raw_fd()) {
                Err(e)
                    if !matches!(
                        e.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                    ) =>
                {
                    return Err(e);
                }
                _ => {}
            }
        }
        if let Some(rx) = self.rx.as_mut()
            && !rx.is_empty()
        {
            return Ok(true);
        }
        sys::poll_in(self.fd.as_raw_fd(), timeout_ms)
    }

    /// Tx frames queued or in flight: taken by [`Socket::send`], not yet reclaimed by
    /// [`Socket::complete`].
    pub fn pending_tx(&self) -> usize {
        self.tx_free.capacity() - self.tx_free.len()
    }

    /// The kernel's `XDP_STATISTICS` and this socket's own counters.
    pub fn stats(&self) -> io::Result<XskStats> {
        let (k, _) =
            sys::get_opt::<libc::xdp_statistics>(self.fd.as_raw_fd(), libc::XDP_STATISTICS)?;
        Ok(XskStats {
            rx_dropped: k.rx_dropped,
            rx_invalid_descs: k.rx_invalid_descs,
            tx_invalid_descs: k.tx_invalid_descs,
            rx_ring_full: k.rx_ring_full,
            rx_fill_ring_empty_descs: k.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: k.tx_ring_empty_descs,
            tx_kicks: self.tx_kicks,
            tx_kicks_busy: self.tx_kicks_busy,
            bad_descs: self.bad_descs,
        })
    }

    /// Moves free rx frames onto the fill ring, as many as it has room for, and publishes.
    fn refill(&mut self) {
        let room = self.fill.free(self.rx_free.len() as u32);
        for _ in 0..room {
            let Some(addr) = self.rx_free.pop() else {
                break;
            };
            self.fill.push(addr);
        }
        self.fill.publish();
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// How a [`SocketConfig`] turns into UMEM and ring sizes.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    umem_len: usize,
    rx_frames: u32,
    tx_frames: u32,
    /// Fill ring entries: room for every rx frame, so a recycled frame always fits.
    fill_size: u32,
    /// Completion ring entries: room for every tx frame, so the kernel never stalls on a
    /// full completion ring.
    comp_size: u32,
}

impl Layout {
    fn new(cfg: &SocketConfig) -> Result<Layout, XskError> {
        let page = sys::page_size();
        if !cfg.frame_size.is_power_of_two()
            || cfg.frame_size < 2048
            || cfg.frame_size as usize > page
        {
            return Err(XskError::Config(
                "frame_size must be a power of two from 2048 to the page size",
            ));
        }
        for size in [cfg.rx_size, cfg.tx_size] {
            if size != 0 && !size.is_power_of_two() {
                return Err(XskError::Config(
                    "rx_size and tx_size must be 0 or a power of two",
                ));
            }
        }
        if cfg.rx_size == 0 && cfg.tx_size == 0 {
            return Err(XskError::Config(
                "a socket needs an rx ring, a tx ring or both",
            ));
        }
        if cfg.frames > 1 << 24 {
            return Err(XskError::Config("frames is above 16M"));
        }
        let (rx_frames, tx_frames) = match (cfg.rx_size > 0, cfg.tx_size > 0) {
            (true, true) => (cfg.frames / 2, cfg.frames - cfg.frames / 2),
            (true, false) => (cfg.frames, 0),
            _ => (0, cfg.frames),
        };
        if (cfg.rx_size > 0 && rx_frames == 0) || (cfg.tx_size > 0 && tx_frames == 0) {
            return Err(XskError::Config(
                "too few frames: each ring needs at least one",
            ));
        }
        let umem_len = (cfg.frames as usize)
            .checked_mul(cfg.frame_size as usize)
            .ok_or(XskError::Config("frames * frame_size overflows"))?;
        Ok(Layout {
            umem_len,
            rx_frames,
            tx_frames,
            fill_size: rx_frames.max(1).next_power_of_two(),
            comp_size: tx_frames.max(1).next_power_of_two(),
        })
    }
}

/// Maps one ring of `size` entries of `T` and finds its parts.
fn map_ring<T>(
    fd: RawFd,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: u64,
) -> io::Result<(Mapping, RingPtrs<T>)> {
    let len = usize::try_from(off.desc)
        .ok()
        .and_then(|d| d.checked_add(size as usize * size_of::<T>()))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let map = Mapping::ring(fd, len, pgoff)?;
    let ptrs = ring_ptrs(&map, off).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok((map, ptrs))
}

/// The ring's parts inside `map`, or None if the kernel's offsets are out of bounds or
/// misaligned (they never are; this keeps a bad kernel from making us dereference junk).
fn ring_ptrs<T>(map: &Mapping, off: &libc::xdp_ring_offset) -> Option<RingPtrs<T>> {
    let field = |o: u64, size: usize, align: usize| {
        let o = usize::try_from(o).ok()?;
        if o % align != 0 || o.checked_add(size)? > map.len() {
            return None;
        }
        // SAFETY: o + size <= map.len(), so the pointer stays inside the mapping.
        Some(unsafe { map.ptr().add(o) })
    };
    let u32_field = |o| field(o, 4, align_of::<u32>()).map(|p| p.cast());
    Some(RingPtrs {
        producer: u32_field(off.producer)?,
        consumer: u32_field(off.consumer)?,
        flags: u32_field(off.flags)?,
        descs: field(off.desc, 0, align_of::<T>())?.cast(),
    })
}

/// `len` bytes of the UMEM from `addr`; `addr + len` must be within it.
///
/// # Safety
/// No other reference to those bytes may exist while the slice lives, and the kernel
/// must not be writing them (the frame is owned by this process at the time).
#[allow(clippy::mut_from_ref)]
unsafe fn frame_slice(umem: &Mapping, addr: u64, len: usize) -> &mut [u8] {
    debug_assert!(addr as usize + len <= umem.len());
    // SAFETY: in bounds per the caller; exclusivity per the caller.
    unsafe { std::slice::from_raw_parts_mut(umem.ptr().as_ptr().add(addr as usize), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rx: u32, tx: u32, frames: u32) -> SocketConfig {
        SocketConfig {
            ifindex: 1,
            queue: 0,
            rx_size: rx,
            tx_size: tx,
            frames,
            frame_size: 2048,
            bind: BindMode::Copy,
        }
    }

    /// relayd moves each socket to its queue's thread.
    #[test]
    fn socket_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Socket>();
    }

    #[test]
    fn layout_splits_frames_and_sizes_fill_and_completion_rings() {
        let l = Layout::new(&cfg(1024, 1024, 4096)).unwrap();
        assert_eq!((l.rx_frames, l.tx_frames), (2048, 2048));
        assert_eq!((l.fill_size, l.comp_size), (2048, 2048));
        assert_eq!(l.umem_len, 4096 * 2048);

        let l = Layout::new(&cfg(0, 256, 1000)).unwrap();
        assert_eq!((l.rx_frames, l.tx_frames), (0, 1000));
        assert_eq!((l.fill_size, l.comp_size), (1, 1024));

        let l = Layout::new(&cfg(64, 64, 5)).unwrap();
        assert_eq!((l.rx_frames, l.tx_frames), (2, 3));
    }

    #[test]
    fn layout_refuses_bad_configs() {
        let bad = [
            cfg(0, 0, 64),
            cfg(100, 0, 64),
            cfg(0, 100, 64),
            cfg(64, 64, 1),
            cfg(64, 0, 0),
            cfg(64, 0, (1 << 24) + 1),
            SocketConfig {
                frame_size: 3000,
                ..cfg(64, 0, 64)
            },
            SocketConfig {
                frame_size: 1024,
                ..cfg(64, 0, 64)
            },
            SocketConfig {
                frame_size: 1 << 20,
                ..cfg(64, 0, 64)
            },
        ];
        for c in bad {
            assert!(matches!(Layout::new(&c), Err(XskError::Config(_))), "{c:?}");
        }
    }
}
