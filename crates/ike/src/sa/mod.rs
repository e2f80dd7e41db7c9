//! IKE SA state machines.
pub(crate) mod ike;
