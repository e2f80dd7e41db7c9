//! One relayd per chain prefix per network namespace: the daemon holds an flock on a file
//! named after both, so that a second daemon (or `relayd cleanup`) cannot remove the rules
//! of a running one.

use anyhow::Context as _;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// A running relayd holds it.
    #[error("another relayd (pid {pid}) runs with chain prefix {prefix} in this network namespace")]
    Held {
        /// The holder's pid, as it wrote it.
        pid: String,
        /// The chain prefix.
        prefix: String,
    },
    /// The lock file could not be used (permissions, missing /run).
    #[error(transparent)]
    Io(#[from] anyhow::Error),
}

/// Directory of the lock files.
pub const LOCK_DIR: &str = "/run/relayd";

/// The lock a running daemon holds; released when dropped (or when the process dies).
/// The file itself stays: deleting a lock file while another process waits to open it
/// would let two holders lock two different files.
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

fn lock_path(prefix: &str) -> anyhow::Result<PathBuf> {
    // The namespace's inode tells namespaces apart; iptables rules live per namespace.
    let ns = std::fs::metadata("/proc/self/ns/net")
        .context("reading /proc/self/ns/net")?
        .ino();
    Ok(PathBuf::from(LOCK_DIR).join(format!("{prefix}-net{ns}.lock")))
}

impl InstanceLock {
    /// Takes the lock for `prefix` in this network namespace, or says who holds it.
    pub fn acquire(prefix: &str) -> Result<InstanceLock, LockError> {
        std::fs::create_dir_all(LOCK_DIR).with_context(|| format!("creating {LOCK_DIR}"))?;
        let path = lock_path(prefix)?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(LockError::Held {
                pid: pid.trim().to_string(),
                prefix: prefix.to_string(),
            });
        }
        file.set_len(0).context("writing the lock file")?;
        file.rewind().context("writing the lock file")?;
        write!(file, "{}", std::process::id()).context("writing the lock file")?;
        Ok(InstanceLock { _file: file })
    }
}
