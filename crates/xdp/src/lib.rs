//! relayd's AF_XDP datapath (docs/xdp.md).
//!
//! An XDP program (`bpf/relay_xdp.c`, built by clang in `build.rs`) runs on the ingress
//! interface. It matches the packets a queue wants, asks the kernel's FIB for their next
//! hop, writes the egress interface and MAC addresses into the frame's metadata and
//! redirects them to the AF_XDP socket of their rx queue; everything else, and whatever
//! the FIB cannot resolve, goes on to the kernel untouched (`XDP_PASS`). With no socket
//! bound, a matched packet is passed (fail-open) or dropped (fail-closed) by the program
//! itself, so the failure policy holds while relayd is down.
//!
//! relayd runs one thread per rx queue: it receives batches from the socket's rings, runs
//! the queue's chain on each packet through the pipeline every datapath shares
//! (`relay-pipeline`: panic guard, holds, counters), decrements the TTL or hop limit, writes the Ethernet
//! header from the metadata and transmits on an AF_XDP socket of the egress interface.
//!
//! Flows the chain offloads (every service voted that it needs no more of their packets)
//! go into the program's `flows` map (`offload.rs`), and the program passes their later
//! packets to the kernel's forwarding without a copy to relayd.

mod abi;
pub mod attach;
mod counters;
mod egress;
mod error;
pub mod forward;
pub mod offload;
pub mod port;
pub mod program;
pub mod queue;
pub mod rules;
mod settings;
mod worker;
pub mod xsk;
pub use error::XdpError;
pub use port::{OffloadConfig, PortConfig, PortError, XdpPort, ZeroCopy};
pub use program::Mode;
pub use rules::{Match, PortRange};
