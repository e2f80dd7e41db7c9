//! The datapath I/O that relayd's datapaths share, so that NFQUEUE (`relay-nfq`) and
//! AF_XDP (`relay-xdp`) are siblings rather than one depending on the other: the
//! [`Emitter`] that sends what a batch's services emitted (one `sendmmsg` per raw socket:
//! IPv4, IPv6, ICMPv6) and pins of queue threads to CPUs.
//!
//! The chain itself runs in `relay-pipeline`, which makes no system call; this crate is
//! the shell side. Netlink framing, which NFQUEUE and rtnetlink share, is
//! `relay_netlink::frame`.

mod affinity;
mod emit;
mod raw;

pub use affinity::{CpuMask, MAX_CPU, available_cpus, format_cpu_list, pin_thread};
pub use emit::{Emitter, Flushed};
