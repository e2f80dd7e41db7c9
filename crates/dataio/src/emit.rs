//! Sends what a batch's services emitted ([`relay_core::Outbox`]) after the batch's
//! verdicts, and counts what became of each packet in the tally it was emitted with.
//!
//! Everything a batch emitted leaves with one `sendmmsg` per socket, so at most three
//! system calls per batch however many packets it emitted:
//!
//! - whole IPv4 packets ([`Route::Originate`] and [`Route::Forward`]) over an IPv4
//!   `IPPROTO_RAW` socket,
//! - whole IPv6 packets (the same routes) over an IPv6 `IPPROTO_RAW` socket,
//! - ICMPv6 messages without IP header ([`Route::Icmpv6`]) over an `IPPROTO_ICMPV6` raw
//!   socket, the kernel writing the IPv6 header and the checksum.
//!
//! Each packet carries its own mark in a `SOL_SOCKET`/`SO_MARK` control message, so that
//! packets of different marks share a call; the socket's own `SO_MARK` follows a batch
//! whose packets share one mark, the usual case, for kernels before 5.9, which mark an
//! IPv4 raw socket's packets with the socket's mark alone. That was
//! chosen over grouping packets by mark and setting `SO_MARK` before each group: it costs
//! 24 bytes of control message per packet and no system call, where grouping costs one
//! `setsockopt` and one more `sendmmsg` per distinct mark in the batch. Measured by
//! `cmsg_marks_cost_nothing_measurable` in `tests/emit.rs` (`--ignored`; batches of 64
//! IPv4 packets to a veth whose peer is down, Linux 6.18, a loaded 2-core VM, three runs):
//! with one mark per batch 2.8-3.1 us/packet with control messages against 2.5-3.0 grouped;
//! with 8 marks 2.3-3.0 against 2.5-3.3. Both are within the noise of the kernel's output
//! path, which is the cost; control messages keep the call count at one per socket. The
//! kernel honours the control message for raw sockets of both families given
//! `CAP_NET_RAW` or `CAP_NET_ADMIN`, both of which relayd has (it installs iptables
//! rules); `tests/emit.rs` checks the marks with iptables rules.
//!
//! Failures: `sendmmsg` stops at the first message the kernel refuses and returns how many
//! it took; the emitter then sends again from the refused one, so that its error is
//! reported (and counted) and the rest still go out: each failure costs one more system
//! call. `ENOBUFS` (the egress qdisc dropped the packet; the `IPPROTO_RAW` sockets have
//! `IP_RECVERR`/`IPV6_RECVERR` on, without which the kernel reports such a drop as a
//! success) counts as `queue_full` in the packet's tally; `EAGAIN` (the socket's send buffer is full) counts that packet and the
//! rest of its socket's batch as `queue_full` without trying them one by one, since the
//! buffer will not drain within the batch; any other error counts as `failed`, with a
//! rate-limited warning.
//!
//! Packets passing through ([`Route::Forward`]) addressed to one of the box's own
//! addresses are refused here (a raw socket would deliver them locally, as if they came
//! from `lo`): that check needs the kernel's address list, so it is the datapath's, not
//! the service's.
//!
//! The message headers, addresses, control messages and iovecs live in buffers kept from
//! batch to batch: a flush allocates only while they grow to the largest batch seen.

use crate::raw::{self, MarkCmsg, RawSocket, SockAddr};
use relay_core::ratelimit::RateLimit;
use relay_core::{Emitted, Outbox, Route, Tally};
use relay_inject::LocalAddrs;
use std::net::IpAddr;
use std::ops::Range;
use std::time::Instant;

/// The sockets of an [`Emitter`], by index.
const V4: usize = 0;
const V6: usize = 1;
const ICMPV6: usize = 2;

/// What one [`Emitter::flush`] did, for tests, benches and offline tools (the datapath
/// counts in the packets' tallies; this is the same count, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Packets the kernel took.
    pub sent: usize,
    /// Packets lost to a full send buffer or egress qdisc.
    pub queue_full: usize,
    /// Packets that failed otherwise (no route, a socket that cannot be opened, ...).
    pub failed: usize,
    /// Forwarded packets refused because they were addressed to the box itself.
    pub local_destination: usize,
    /// `sendmmsg` system calls made.
    pub calls: usize,
}

/// Sends the packets a queue thread's services emitted: the raw sockets, the box's
/// address snapshot and the reusable `sendmmsg` buffers of one thread (see the module
/// docs). Sockets open on first use; sending needs `CAP_NET_RAW` and the marks
/// `CAP_NET_ADMIN` or `CAP_NET_RAW`.
#[derive(Debug)]
pub struct Emitter {
    sockets: [RawSocket; 3],
    local: LocalAddrs,
    log: RateLimit,
    /// Outbox indices of the packets for each socket, in emission order.
    groups: [Vec<u32>; 3],
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<(SockAddr, libc::socklen_t)>,
    cmsgs: Vec<MarkCmsg>,
}

// SAFETY: the raw pointers in `msgs` and `iovs` point into the emitter's own buffers and
// the outbox being flushed; they are written before each `sendmmsg` and never read after
// `flush` returns, so moving the emitter to another thread between flushes is sound.
unsafe impl Send for Emitter {}

impl Default for Emitter {
    fn default() -> Emitter {
        Emitter::new()
    }
}

impl Emitter {
    /// The send buffer of the `IPPROTO_RAW` sockets: 64 MiB, about 28,000 full-size
    /// packets waiting in tc at once (a limit, not an allocation). A packet waiting in a
    /// qdisc stays charged to the socket that sent it, so with the default buffer (about
    /// 200 KiB) one congested tc class would make sends fail for every other class; with
    /// this one the qdiscs' own limits decide first.
    pub const SNDBUF: usize = 64 << 20;

    /// An emitter whose sockets open on first use; nothing is opened or read here.
    pub fn new() -> Emitter {
        Emitter {
            sockets: [
                RawSocket::new(libc::AF_INET, libc::IPPROTO_RAW, Self::SNDBUF),
                RawSocket::new(libc::AF_INET6, libc::IPPROTO_RAW, Self::SNDBUF),
                RawSocket::new(libc::AF_INET6, libc::IPPROTO_ICMPV6, 0),
            ],
            local: LocalAddrs::new(),
            log: RateLimit::new(1),
            groups: Default::default(),
            msgs: Vec::new(),
            iovs: Vec::new(),
            addrs: Vec::new(),
            cmsgs: Vec::new(),
        }
    }

    /// The box's addresses (the snapshot `flush` checks forwarded packets against) when
    /// they were read anew at `now`, at most once a second, for the services' context:
    /// decapsulating services refuse inner packets addressed to them
    /// ([`relay_core::Context::pass_inner`]). `None` while the services' copy holds, so
    /// that a batch costs one clock comparison, not a reference count.
    pub fn renewed_local_addresses(&mut self, now: Instant) -> Option<std::sync::Arc<[IpAddr]>> {
        self.local.renewed(now).cloned()
    }

    /// Sends everything in `outbox` (at most one `sendmmsg` per socket, more only after a
    /// refused packet), counts each packet in its tally, and empties the outbox. `queue`
    /// names the queue in warnings; `now` is the batch clock, on which the snapshot of the
    /// box's addresses is renewed once a second.
    pub fn flush(&mut self, outbox: &mut Outbox, queue: u16, now: Instant) -> Flushed {
        let mut done = Flushed::default();
        for g in &mut self.groups {
            g.clear();
        }
        for (i, p) in outbox.iter().enumerate() {
            if p.route == Route::Forward && self.local.contains(p.destination, now) {
                if let Some((_, tally)) = outbox.get(i) {
                    tally.local_destination();
                }
                done.local_destination += 1;
                continue;
            }
            self.groups[socket_of(&p)].push(i as u32);
        }
        for s in [V4, V6, ICMPV6] {
            if !self.groups[s].is_empty() {
                self.send_group(s, outbox, queue, now, &mut done);
            }
        }
        outbox.clear();
        done
    }

    /// Sends the packets of `groups[s]` through socket `s`.
    fn send_group(
        &mut self,
        s: usize,
        outbox: &Outbox,
        queue: u16,
        now: Instant,
        done: &mut Flushed,
    ) {
        let group = std::mem::take(&mut self.groups[s]);
        // Counts the packets group[range] in their tallies with `f`; returns how many.
        let count = |range: Range<usize>, f: fn(&Tally)| {
            for &i in &group[range.clone()] {
                if let Some((_, tally)) = outbox.get(i as usize) {
                    f(tally);
                }
            }
            range.len()
        };
        let n = group.len();
        let fd = match self.sockets[s].fd() {
            Ok(fd) => fd,
            Err(e) => {
                done.failed += count(0..n, Tally::failed);
                let name = self.sockets[s].name();
                self.warn(
                    queue,
                    now,
                    format_args!("cannot open a raw {name} socket: {e}"),
                );
                self.groups[s] = group;
                return;
            }
        };
        self.prepare(&group, outbox);
        // The socket's own mark too, for kernels that ignore the control message (raw.rs),
        // read from the control messages just written.
        let first = self.cmsgs.first().map(MarkCmsg::mark);
        let one_mark = first.filter(|&m| self.cmsgs.iter().all(|c| c.mark() == m));
        if let Some(mark) = one_mark
            && let Err(e) = self.sockets[s].set_mark(mark)
        {
            let name = self.sockets[s].name();
            self.warn(
                queue,
                now,
                format_args!("cannot set SO_MARK {mark:#x} on the raw {name} socket: {e}"),
            );
        }
        let mut at = 0;
        while at < n {
            done.calls += 1;
            match raw::sendmmsg(fd, &mut self.msgs[at..n]) {
                Ok(0) => {
                    // Not seen on Linux with messages to send; never loop on it.
                    done.failed += count(at..n, Tally::failed);
                    break;
                }
                Ok(sent) => {
                    let sent = sent.min(n - at);
                    done.sent += count(at..at + sent, Tally::sent);
                    at += sent;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) => {
                        // The send buffer is full: it will not drain within this batch.
                        done.queue_full += count(at..n, Tally::queue_full);
                        break;
                    }
                    Some(libc::ENOBUFS) => {
                        done.queue_full += count(at..at + 1, Tally::queue_full);
                        at += 1;
                    }
                    _ => {
                        done.failed += count(at..at + 1, Tally::failed);
                        if let Some((p, _)) = outbox.get(group[at] as usize) {
                            let to = p.destination;
                            self.warn(
                                queue,
                                now,
                                format_args!("sending a packet a service emitted to {to}: {e}"),
                            );
                        }
                        at += 1;
                    }
                },
            }
        }
        self.groups[s] = group;
    }

    /// Fills `msgs` with one message per packet of `group`. The buffers grow to the group's
    /// size first, so that no pointer taken into them moves afterwards.
    fn prepare(&mut self, group: &[u32], outbox: &Outbox) {
        let n = group.len();
        self.addrs.clear();
        self.cmsgs.clear();
        self.iovs.clear();
        self.msgs.clear();
        self.addrs.reserve(n);
        self.cmsgs.reserve(n);
        self.iovs.reserve(n);
        self.msgs.reserve(n);
        for &i in group {
            let p = outbox
                .get(i as usize)
                .map(|(p, _)| p)
                .unwrap_or_else(|| unreachable!("indices come from this outbox"));
            self.addrs.push(SockAddr::new(p.destination));
            self.cmsgs.push(MarkCmsg::new(p.mark));
            self.iovs.push(raw::iovec(p.bytes));
        }
        self.msgs.resize(n, raw::empty_message());
        for k in 0..n {
            let (addr, len) = &mut self.addrs[k];
            raw::message(
                &mut self.msgs[k],
                addr,
                *len,
                &mut self.iovs[k],
                &mut self.cmsgs[k],
            );
        }
    }

    fn warn(&mut self, queue: u16, now: Instant, what: std::fmt::Arguments<'_>) {
        if let Some(suppressed) = self.log.allow(now) {
            tracing::warn!(queue, suppressed, "{what}");
        }
    }

    /// The `SO_MARK` of the IPv4 `IPPROTO_RAW` socket as the kernel has it, once it is
    /// open; for tests.
    #[doc(hidden)]
    pub fn ipv4_socket_mark(&self) -> Option<u32> {
        self.sockets[V4].kernel_mark()
    }

    /// The send buffer the kernel granted the IPv4 `IPPROTO_RAW` socket (twice the size
    /// set), once it is open; for tests.
    #[doc(hidden)]
    pub fn ipv4_sndbuf(&self) -> Option<usize> {
        self.sockets[V4].sndbuf()
    }
}

/// The socket a packet leaves through: its destination's family, or the ICMPv6 one.
fn socket_of(p: &Emitted<'_>) -> usize {
    match (p.route, p.destination) {
        (Route::Icmpv6, _) => ICMPV6,
        (_, IpAddr::V4(_)) => V4,
        (_, IpAddr::V6(_)) => V6,
    }
}
