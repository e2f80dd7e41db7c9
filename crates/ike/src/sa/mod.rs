//! IKE SA state machines: [`ike::IkeSa`] holds one IKE SA; the exchanges are split by kind.

pub(crate) mod auth;
pub(crate) mod child;
pub(crate) mod ike;
mod info;
mod rekey;
