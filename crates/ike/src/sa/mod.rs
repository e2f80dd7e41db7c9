//! IKE SA state machines.
