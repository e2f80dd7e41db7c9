//! The egress side of an XDP queue thread: one AF_XDP socket per egress interface, with
//! the interface's MTU, kept in a small table that the per-packet path only looks up.
//!
//! Opening a socket and reading an MTU are system calls: they happen between rounds, never
//! for a packet. An interface the table does not know yet is noted ([`EgressTable::lookup`]
//! answers `None`, and the packet goes through the kernel's forwarding); after the round
//! the thread opens its socket ([`EgressTable::prepare`]), retries a failed one every
//! [`EGRESS_RETRY`], and re-reads every MTU about once a second
//! ([`EgressTable::refresh_mtus`]), so an MTU change is seen without a packet paying for it.

use crate::settings::{PortConfig, ZeroCopy};
use crate::xsk::{BindMode, Socket, SocketConfig};
use std::time::{Duration, Instant};

/// Egress sockets a queue thread keeps at most (one per egress interface).
pub(crate) const MAX_EGRESS: usize = 64;

/// How long an egress interface whose socket could not be opened is left to the kernel
/// before the thread tries again.
pub(crate) const EGRESS_RETRY: Duration = Duration::from_secs(5);

/// An egress interface's socket, or the time opening one last failed.
pub(crate) struct Egress {
    pub(crate) ifindex: u32,
    pub(crate) socket: Option<Socket>,
    pub(crate) mtu: usize,
    failed_at: Option<Instant>,
}

/// The egress interfaces of one queue thread (see the module docs).
pub(crate) struct EgressTable {
    num: u16,
    ingress: u32,
    rx_queue: u32,
    frames: u32,
    zero_copy: ZeroCopy,
    entries: Vec<Egress>,
    /// Interfaces the per-packet path met without an entry, to open after the round.
    wanted: Vec<u32>,
}

impl EgressTable {
    /// An empty table for queue `num` on rx queue `rx_queue` of interface `ingress`; the
    /// sockets it opens have `frames` frames each, bound as `zero_copy` says.
    pub(crate) fn new(
        num: u16,
        ingress: u32,
        rx_queue: u32,
        frames: u32,
        zero_copy: ZeroCopy,
    ) -> EgressTable {
        EgressTable {
            num,
            ingress,
            rx_queue,
            frames,
            zero_copy,
            entries: Vec::with_capacity(MAX_EGRESS),
            wanted: Vec::with_capacity(MAX_EGRESS),
        }
    }

    /// The socket and MTU of `ifindex`, if it has an open socket. On the per-packet path:
    /// no system call, no allocation. An interface not known yet is noted for
    /// [`EgressTable::prepare`]; the ingress interface itself never has one (its rx
    /// socket has no tx ring).
    pub(crate) fn lookup(&mut self, ifindex: u32) -> Option<(&mut Socket, usize)> {
        if ifindex == self.ingress {
            return None;
        }
        match self.entries.iter().position(|e| e.ifindex == ifindex) {
            Some(i) => {
                let e = self.entries.get_mut(i)?;
                let mtu = e.mtu;
                e.socket.as_mut().map(|s| (s, mtu))
            }
            None => {
                let room = self.entries.len() + self.wanted.len() < MAX_EGRESS;
                if room && !self.wanted.contains(&ifindex) {
                    self.wanted.push(ifindex);
                }
                None
            }
        }
    }

    /// Opens the sockets of the interfaces met since the last call, and again those whose
    /// opening failed [`EGRESS_RETRY`] ago. Between rounds only.
    pub(crate) fn prepare(&mut self, now: Instant) {
        for k in 0..self.wanted.len() {
            let Some(&ifindex) = self.wanted.get(k) else {
                break;
            };
            self.entries.push(Egress {
                ifindex,
                socket: None,
                mtu: 0,
                failed_at: None,
            });
        }
        self.wanted.clear();
        for i in 0..self.entries.len() {
            let due = self.entries.get(i).is_some_and(|e| {
                e.socket.is_none() && e.failed_at.is_none_or(|t| now >= t + EGRESS_RETRY)
            });
            if due {
                self.open(i, now);
            }
        }
    }

    fn open(&mut self, i: usize, now: Instant) {
        let Some(ifindex) = self.entries.get(i).map(|e| e.ifindex) else {
            return;
        };
        let cfg = SocketConfig {
            ifindex,
            queue: self.rx_queue,
            rx_size: 0,
            tx_size: ring_size(self.frames / 2),
            frames: self.frames,
            frame_size: PortConfig::FRAME_SIZE,
            bind: bind_mode(self.zero_copy),
        };
        let opened = Socket::open(&cfg);
        let Some(e) = self.entries.get_mut(i) else {
            return;
        };
        match opened {
            Ok(s) => {
                e.mtu = interface_mtu(ifindex).unwrap_or(1500);
                e.socket = Some(s);
                e.failed_at = None;
            }
            Err(err) => {
                tracing::warn!(
                    queue = self.num,
                    ifindex,
                    "no AF_XDP socket on the egress interface; its packets go through the kernel: {err}"
                );
                e.failed_at = Some(now);
            }
        }
    }

    /// Reads every open interface's MTU again (an operator may change it). Between
    /// rounds, about once a second.
    pub(crate) fn refresh_mtus(&mut self) {
        for e in self.entries.iter_mut().filter(|e| e.socket.is_some()) {
            if let Some(mtu) = interface_mtu(e.ifindex) {
                e.mtu = mtu;
            }
        }
    }

    /// The open sockets.
    pub(crate) fn sockets(&mut self) -> impl Iterator<Item = &mut Socket> {
        self.entries.iter_mut().filter_map(|e| e.socket.as_mut())
    }

    /// The open sockets, to read.
    pub(crate) fn sockets_ref(&self) -> impl Iterator<Item = &Socket> {
        self.entries.iter().filter_map(|e| e.socket.as_ref())
    }
}

/// The largest power of two at most `n` (ring sizes must be powers of two), at least 64.
pub(crate) fn ring_size(n: u32) -> u32 {
    let n = n.max(64);
    1 << (31 - n.leading_zeros())
}

/// The socket bind mode a port's zero-copy setting asks for.
pub(crate) fn bind_mode(z: ZeroCopy) -> BindMode {
    match z {
        ZeroCopy::Auto => BindMode::Auto,
        ZeroCopy::On => BindMode::ZeroCopy,
        ZeroCopy::Off => BindMode::Copy,
    }
}

/// The MTU of interface `ifindex` (sysfs).
fn interface_mtu(ifindex: u32) -> Option<usize> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into `name`.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .ok()?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interfaces_are_noted_not_opened_on_the_packet_path() {
        let mut t = EgressTable::new(1, 7, 0, 64, ZeroCopy::Auto);
        assert!(t.lookup(7).is_none(), "the ingress interface");
        assert!(t.wanted.is_empty());
        assert!(t.lookup(9).is_none());
        assert!(t.lookup(9).is_none());
        assert_eq!(t.wanted, [9], "noted once, nothing opened");
        assert!(t.entries.is_empty());
        for i in 100..200 {
            t.lookup(i);
        }
        assert_eq!(t.wanted.len(), MAX_EGRESS, "bounded");
        assert_eq!(ring_size(100), 64);
        assert_eq!(ring_size(4096), 4096);
    }
}
