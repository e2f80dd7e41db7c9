//! The errors of loading, configuring and attaching the XDP program: each says what
//! failed, on which interface, and what to do about it.

use std::io;

use crate::abi::{MAX_QUEUES, MAX_RULES};

/// Loading, configuring, attaching or detaching the XDP program failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpError {
    /// The kernel refused for want of privileges.
    #[error(
        "{what}: permission denied; relayd needs CAP_BPF and CAP_NET_ADMIN (CAP_SYS_ADMIN to \
         look up programs by id, and on kernels before 5.8) to load and attach its XDP \
         program: run it as root or grant these capabilities"
    )]
    Permission {
        /// What was being done.
        what: String,
    },

    /// The program could not be loaded (the verifier refused it, or the kernel lacks BPF).
    #[error(
        "loading the XDP program relayd_xdp failed: {detail} (it needs a kernel with \
         CONFIG_BPF_SYSCALL and XDP; on kernels before 5.11, RLIMIT_MEMLOCK may be too low: \
         raise it with LimitMEMLOCK=infinity or `ulimit -l unlimited`)"
    )]
    Load {
        /// aya's message, with the verifier log when there is one.
        detail: String,
    },

    /// Reading or writing one of the program's maps failed.
    #[error("XDP program map `{map}`: {op} failed: {detail}")]
    Map {
        /// The map's name in bpf/relay_xdp.c.
        map: &'static str,
        /// What was being done.
        op: String,
        /// aya's message.
        detail: String,
    },

    /// More match rules than the program holds.
    #[error("at most {MAX_RULES} match rules fit in the XDP program; {got} were given")]
    TooManyRules {
        /// How many were given.
        got: usize,
    },

    /// A match rule the program cannot apply as meant.
    #[error("XDP match rule {index}: {reason}")]
    InvalidRule {
        /// Its position in the list given.
        index: usize,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An rx queue beyond the socket map.
    #[error("rx queue {queue} is out of range: the XDP program has sockets for queues 0 to {}", MAX_QUEUES - 1)]
    QueueOutOfRange {
        /// The queue asked for.
        queue: u32,
    },

    /// Another XDP program is attached to the interface, which relayd leaves alone.
    #[error(
        "another XDP program ({name}, id {id}) is attached to {ifname}; relayd does not \
         replace programs it did not attach (if it is not needed: `ip link set dev {ifname} \
         xdp off`)"
    )]
    Foreign {
        /// The interface.
        ifname: String,
        /// The program's name as the kernel knows it (at most 15 bytes).
        name: String,
        /// The program's kernel id (`bpftool prog show id ID`).
        id: u32,
    },

    /// An interface index that does not exist in the calling thread's network namespace.
    #[error("no interface with index {ifindex} in this network namespace")]
    NoSuchInterface {
        /// The index asked for.
        ifindex: u32,
    },

    /// An rtnetlink request (attach, detach, link query) or a bpf(2) query failed.
    #[error("{what} on {ifname} failed: {source}{}{}", kernel_msg(.kernel), .hint)]
    Kernel {
        /// What was being done ("attaching relayd_xdp in native mode", ...).
        what: String,
        /// The interface (its index when the name is unknown).
        ifname: String,
        /// The error the kernel returned.
        source: io::Error,
        /// The kernel's own explanation (netlink extended ack), if it gave one.
        kernel: Option<String>,
        /// What to do about it, if anything obvious ("" otherwise).
        hint: &'static str,
    },
}

fn kernel_msg(m: &Option<String>) -> String {
    match m {
        Some(m) => format!(" (kernel: {m})"),
        None => String::new(),
    }
}

/// The errno of an aya error chain, if one of its sources is an `io::Error`.
pub(crate) fn errno_of(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && let Some(n) = io.raw_os_error()
        {
            return Some(n);
        }
        cur = e.source();
    }
    None
}

/// A map error, or [`XdpError::Permission`] when the kernel said EPERM.
pub(crate) fn map_error(map: &'static str, op: String, e: aya::maps::MapError) -> XdpError {
    if errno_of(&e) == Some(libc::EPERM) {
        return XdpError::Permission {
            what: format!("{op} in XDP map `{map}`"),
        };
    }
    XdpError::Map {
        map,
        op,
        detail: chain(&e),
    }
}

/// An error with its sources, "outer: inner: innermost" (aya's messages leave the errno
/// to their sources), skipping a source whose text the outer message already shows.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(e) = cur {
        let t = e.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = e.source();
    }
    s
}
