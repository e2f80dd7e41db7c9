//! Why [`super::Socket::open`] failed: the step, the interface and queue, the kernel's
//! error and what usually causes that error at that step.

use std::fmt;
use std::io;

use super::BindMode;

/// The step of [`Socket::open`](super::Socket::open) that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// `socket(AF_XDP)`.
    Socket,
    /// Mapping the UMEM or registering it (`XDP_UMEM_REG`).
    Umem,
    /// Setting the ring sizes or the tx budget.
    RingSizes,
    /// Reading the ring offsets or mapping the rings.
    Mmap,
    /// `bind` to the interface and queue.
    Bind,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Socket => "socket",
            Step::Umem => "umem registration",
            Step::RingSizes => "ring sizes",
            Step::Mmap => "ring mmap",
            Step::Bind => "bind",
        })
    }
}

/// Why a socket could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XskError {
    /// The [`SocketConfig`](super::SocketConfig) is unusable; nothing was asked of the kernel.
    #[error("AF_XDP socket config: {0}")]
    Config(&'static str),
    /// The kernel refused a step.
    #[error("AF_XDP {step} failed on ifindex {ifindex} queue {queue}: {source}{hint}")]
    Os {
        /// The step that failed.
        step: Step,
        /// The interface asked for.
        ifindex: u32,
        /// The queue asked for.
        queue: u32,
        /// The kernel's error.
        #[source]
        source: io::Error,
        /// What usually causes this error at this step (empty, or starting with "; ").
        hint: &'static str,
    },
}

/// What usually causes `err` at `step`, for the error message.
pub(super) fn hint(step: Step, bind: BindMode, err: &io::Error) -> &'static str {
    let errno = err.raw_os_error().unwrap_or(0);
    match (step, errno) {
        (Step::Socket, libc::EPERM | libc::EACCES) => "; AF_XDP sockets need CAP_NET_RAW",
        (Step::Socket, libc::EAFNOSUPPORT) => "; the kernel lacks CONFIG_XDP_SOCKETS",
        (Step::Umem, libc::ENOBUFS | libc::ENOMEM | libc::EPERM) => {
            "; the UMEM counts against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK \
             (raise `ulimit -l` or LimitMEMLOCK=, or grant CAP_IPC_LOCK)"
        }
        (Step::Bind, libc::ENODEV) => "; no interface with that index in this network namespace",
        (Step::Bind, libc::EINVAL) => {
            "; the queue does not exist on that interface (see `ethtool -l`), \
             or the interface cannot run XDP"
        }
        (Step::Bind, libc::EBUSY) => "; another AF_XDP socket is bound to that queue",
        (Step::Bind, libc::EOPNOTSUPP) if bind == BindMode::ZeroCopy => {
            "; the driver lacks zero-copy AF_XDP (veth has none): use BindMode::Copy or Auto"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_step_interface_queue_and_hint() {
        let e = XskError::Os {
            step: Step::Bind,
            ifindex: 7,
            queue: 3,
            hint: hint(
                Step::Bind,
                BindMode::ZeroCopy,
                &io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("AF_XDP bind failed on ifindex 7 queue 3: "),
            "{text}"
        );
        assert!(text.contains("zero-copy"), "{text}");
        assert_eq!(
            hint(
                Step::Bind,
                BindMode::Auto,
                &io::Error::from_raw_os_error(libc::EOPNOTSUPP)
            ),
            ""
        );
        assert!(
            hint(
                Step::Umem,
                BindMode::Auto,
                &io::Error::from_raw_os_error(libc::ENOBUFS)
            )
            .contains("CAP_IPC_LOCK")
        );
        assert!(
            hint(
                Step::Socket,
                BindMode::Auto,
                &io::Error::from_raw_os_error(libc::EPERM)
            )
            .contains("CAP_NET_RAW")
        );
        assert!(
            hint(
                Step::Bind,
                BindMode::Auto,
                &io::Error::from_raw_os_error(libc::EINVAL)
            )
            .contains("queue")
        );
    }
}
