//! Builds bpf/relay_xdp.c with clang (filled in by the XDP program work).
fn main() {}
