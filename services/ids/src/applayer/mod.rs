//! Application-layer parsing over reassembled TCP streams and UDP datagrams: protocol
//! detection and the HTTP/1.x, DNS and TLS parsers that fill the buffers of
//! [`crate::applayer::buffer::Buffer`] for the rules.
//!
//! The vocabulary shared by the parsers and the engine lives here: which protocol a flow
//! speaks, which direction a byte travels, and how far a transaction has got.

pub(crate) use crate::flow::Dir;

pub(crate) mod budget;
pub(crate) mod buffer;
pub(crate) mod detect;
pub(crate) mod dns;
pub(crate) mod tls;

/// The application protocol of a flow, as detected from its first bytes (and ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub(crate) enum AppProto {
    /// HTTP/1.x.
    Http,
    /// TLS (and SSL 3).
    Tls,
    /// DNS over UDP or TCP.
    Dns,
}

impl AppProto {
    /// The name in rules (`alert http ...`, `app-layer-protocol:http`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            AppProto::Http => "http",
            AppProto::Tls => "tls",
            AppProto::Dns => "dns",
        }
    }
}

/// How far one direction of a transaction has got. Ordered: a buffer is final once the
/// progress of its direction is at least the buffer's `ready` (see `buffer::BUFFERS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) enum Progress {
    /// Nothing seen yet.
    #[default]
    None,
    /// The first line (HTTP request or status line) is in.
    Line,
    /// The headers are in.
    Headers,
    /// The body (or the whole message: a DNS query, a TLS handshake message) is in; also
    /// the state of a transaction whose flow ended, or whose body passed the body limit.
    Complete,
}

/// One application-layer transaction (an HTTP request and its response, a DNS query, a
/// TLS handshake), as the engine sees it: its id within the flow, how far each direction
/// has got, and its buffers.
pub(crate) trait Transaction {
    /// The transaction's number within its flow (0, 1, ...), never reused.
    fn id(&self) -> u64;

    /// How far the direction `dir` of the transaction has got.
    fn progress(&self, dir: Dir) -> Progress;

    /// Calls `f` with each instance of buffer `b` seen in direction `dir` (most buffers
    /// have one instance; `dns.query` has one per question), stopping at the first call
    /// that returns true. Returns true if some call did; false if none did or the buffer
    /// is absent (not of this protocol, or not seen yet).
    fn for_each(
        &self,
        b: crate::applayer::buffer::Buffer,
        dir: Dir,
        f: &mut dyn FnMut(&[u8]) -> bool,
    ) -> bool;
}

pub(crate) mod http;
pub(crate) mod state;
