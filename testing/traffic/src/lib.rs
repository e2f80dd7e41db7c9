//! Traffic generators and sinks for relayd's tests, benchmarks and experiments.
//!
//! Everything is blocking std + libc (`sendmmsg`/`recvmmsg` for UDP speed), meant to run
//! on a thread inside a test namespace (`relay_testbed::Node::run`) or from the
//! `relay-traffic` CLI, which prints each result as one JSON object.
//!
//! - UDP: [`udp_send`] paces datagrams of a chosen size and compressibility ([`Payload`])
//!   at an on-wire rate; [`udp_sink`] counts them, with loss, reordering and one-way delay
//!   taken from the 16-byte header every datagram carries ([`header`]).
//! - TCP: [`tcp_send`] / [`tcp_sink`] move bulk data for a duration.
//! - Latency: [`rr_probe`] against [`udp_echo_server`] measures request/response times;
//!   [`udp_owd_sink`] takes the one-way delay of every datagram of a [`udp_send`] stream
//!   from the kernel's receive timestamps.
//! - [`pin_thread`] keeps a generator or sink on the CPU a benchmark gives it.

mod owd;
mod payload;
mod rr;
mod sys;
mod tcp;
mod udp;
pub mod units;

pub use owd::{OwdStats, udp_owd_sink};
pub use payload::Payload;
pub use rr::{RrStats, rr_probe, udp_echo_server};
pub use sys::pin_thread;
pub use tcp::{tcp_send, tcp_send_ratio, tcp_sink, tcp_sink_progress};
pub use udp::{
    SendStats, UdpSendConfig, UdpSinkStats, header, ip_udp_overhead, udp_send, udp_sink,
    udp_sink_on,
};
