//! The MPLS label stack entry (RFC 3032 section 2.1) and the constants of the two
//! encapsulations relayd speaks, MPLS-in-IP (RFC 4023, protocol
//! [`relay_core::wire::proto::MPLS`]) and MPLS-in-UDP (RFC 7510): they live in
//! [`relay_core::wire::mpls`], with the other header views, and are re-exported here
//! under the names this crate has always used.

pub use relay_core::wire::mpls::{
    FIRST_UNRESERVED_LABEL, HEADER_LEN, Lse, LseRepr, MAX_LABEL, UDP_PORT,
};
