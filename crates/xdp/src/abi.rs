//! What the BPF program (bpf/relay_xdp.c) and this crate must agree on: the program's name
//! and the sizes of its maps and metadata. At the bottom of the crate: the loader, the
//! attachment and the errors all read them.

/// How many match rules the program holds (`MAX_RULES` in bpf/relay_xdp.c).
pub const MAX_RULES: usize = 32;
/// How many rx queues can have a socket (`MAX_QUEUES`, the size of the `xsks` map).
pub const MAX_QUEUES: u32 = 64;
/// Bytes of metadata the program writes just before each redirected packet
/// ([`FrameMeta`], `struct relay_meta`).
pub const META_LEN: usize = 16;

/// The program's name, in the kernel (at most 15 bytes) and in the object file; the name
/// by which relayd recognises its own attachments.
pub const PROGRAM_NAME: &str = "relayd_xdp";
