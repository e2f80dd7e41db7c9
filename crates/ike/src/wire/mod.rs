//! The IKEv2 message format.
