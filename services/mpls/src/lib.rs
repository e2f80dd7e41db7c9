//! The MPLS edge of seed 001 (MANE) as two relayd services.
//!
//! - `mpls-encap` classifies each packet to a VCAN (virtual content-aware network) by
//!   ordered rules, first match wins ([`classify`]), pushes one MPLS label and an outer
//!   IPv4 header towards the VCAN's remote edge, as MPLS-in-IP (RFC 4023, protocol 137) or
//!   MPLS-in-UDP (RFC 7510, port 6635), and sets the verdict mark to the VCAN's tc class
//!   so that an O(1) classifier on the egress qdisc finds it ([`QosTable`]).
//! - `mpls-decap` accepts MPLS only from its configured peers (the outer source), checks
//!   the label against the ones it serves and restores the inner packet for routing.
//!
//! Both run before routing (raw or mangle PREROUTING): the encap changes the destination,
//! the decap hands routing a new packet. See docs/mpls.md.

pub mod classify;
mod config;
mod decap;
mod encap;
pub mod lse;

pub use config::{
    DEFAULT_MINOR, DEFAULT_QDISC_HANDLE, DecapConfig, Encap, EncapConfig, IntOrStr, MatchConfig,
    QosClass, QosTable, ROOT_MINOR, Unclassified, VcanConfig,
};
pub use decap::{DecapError, locate_inner, locate_inner_from};
pub use encap::{flow_port, overhead};
pub use relay_core::units::parse_rate;

#[cfg(test)]
mod tests;
