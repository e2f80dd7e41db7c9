//! Cryptography of IKEv2.
