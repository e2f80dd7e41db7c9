//! The direction of a packet within its flow, named by the flow table and used by every
//! layer above it (streams, application-layer parsers, rules).

/// The direction of a packet or of stream bytes within its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Dir {
    /// From the client (the side that opened the flow) to the server.
    ToServer,
    /// From the server to the client.
    ToClient,
}

impl Dir {
    /// Index 0 (to server) or 1 (to client), for per-direction arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The other direction.
    pub(crate) fn reverse(self) -> Dir {
        match self {
            Dir::ToServer => Dir::ToClient,
            Dir::ToClient => Dir::ToServer,
        }
    }
}
