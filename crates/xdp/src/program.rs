//! Placeholder until the program work lands.
/// Rules in the program.
pub const MAX_RULES: usize = 32;
/// Rx queues the program serves.
pub const MAX_QUEUES: u32 = 64;
