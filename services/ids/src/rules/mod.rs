//! The rules layer: the Suricata rule language parsed into [`rule::Rule`]s (`parse`, with
//! the threshold file), the classtypes, the numeric payload keywords and flowbit names.
//! It names application-layer buffers and stream events; it never inspects a packet.

pub(crate) mod bytes;
pub(crate) mod classify;
pub(crate) mod flowbits;
pub(crate) mod parse;
pub(crate) mod rule;
pub(crate) mod set;
pub(crate) mod vars;
