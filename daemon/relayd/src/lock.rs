//! One relayd per chain prefix per network namespace: the daemon holds an flock on a file
//! named after both, so that a second daemon (or `relayd cleanup`) cannot remove the rules
//! of a running one.

use anyhow::Context as _;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Directory of the lock files (unless systemd names another, see [`lock_dir`]).
pub const LOCK_DIR: &str = "/run/relayd";

/// The directory of the lock files: systemd's `$RUNTIME_DIRECTORY` (the unit's
/// `RuntimeDirectory=relayd`, owned by the unit's `User=`, so that relayd running as that
/// user can create its lock there) when set to an absolute path, else [`LOCK_DIR`].
pub fn lock_dir() -> PathBuf {
    std::env::var_os("RUNTIME_DIRECTORY")
        .and_then(|v| {
            // systemd separates several directories with ':'; the first is relayd's.
            let first = v.to_str()?.split(':').next()?.to_string();
            Some(PathBuf::from(first))
        })
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(LOCK_DIR))
}

/// The lock file's mode: only relayd's user may open it.
const LOCK_MODE: u32 = 0o600;

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
    Ok(lock_dir().join(format!("{prefix}-net{ns}.lock")))
}

impl InstanceLock {
    /// Takes the lock for `prefix` in this network namespace, or says who holds it.
    pub fn acquire(prefix: &str) -> Result<InstanceLock, LockError> {
        let dir = lock_dir();
        create_dirs(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = lock_path(prefix)?;
        // 0600 and no link followed: anyone who can open the file can flock it (read-only
        // is enough) and so keep relayd from starting. A file an older relayd left more
        // open is closed down before the lock is taken.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(LOCK_MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.set_permissions(std::fs::Permissions::from_mode(LOCK_MODE))
            .with_context(|| format!("making {} mode 0600", path.display()))?;
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

/// Why the status socket path could not be claimed at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// A process accepts connections on the socket: a running relayd, most likely.
    #[error("another relayd is answering on {}", path.display())]
    Live {
        /// The socket path.
        path: PathBuf,
    },
    /// A process listens on the socket but its backlog is full (a stopped or busy daemon).
    #[error(
        "a process listens on {} (its backlog is full): not replacing it",
        path.display()
    )]
    Busy {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket is at the path: relayd never deletes it.
    #[error(
        "{} is {what}, not a socket: relayd replaces only a stale socket; remove it or set daemon.socket",
        path.display()
    )]
    NotSocket {
        /// The socket path.
        path: PathBuf,
        /// What is there ("a regular file", "a directory", "a symbolic link", ...).
        what: &'static str,
    },
    /// A system call on the path failed (permissions, a missing directory, ...).
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What relayd was doing ("binding status socket", ...).
        action: &'static str,
        /// The socket path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// What kind of file `t` is, for [`SocketError::NotSocket`].
fn describe(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a file of unknown type"
    }
}

/// The address of the unix socket at `path` and its length, for bind and connect.
fn sockaddr(path: &Path) -> std::io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "path too long for a unix socket",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A new unix stream socket (close-on-exec, plus `flags`).
fn unix_socket(flags: libc::c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain socket call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | flags,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket nobody else owns; OwnedFd closes it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connects to the socket at `path` without blocking: Ok if a process accepted (or
/// queued) the connection, the error otherwise (ECONNREFUSED: nobody listens; EAGAIN: a
/// listener whose backlog is full). A blocking connect would hang start-up on a stopped
/// daemon's full backlog.
fn probe(path: &Path) -> std::io::Result<()> {
    let (addr, len) = sockaddr(path)?;
    let fd = unix_socket(libc::SOCK_NONBLOCK)?;
    // SAFETY: addr outlives the call and len does not exceed its size (sockaddr checked).
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The mode of the status socket: only its owner (root, or relayd's user) may connect.
/// Connecting to a unix socket needs write permission on it.
pub const SOCKET_MODE: u32 = 0o600;

/// The mode of the status socket with `daemon.socket_group` set: the group's members may
/// connect (query and command relayd) too.
pub const GROUP_SOCKET_MODE: u32 = 0o660;

/// The mode of the directories relayd creates for its socket and lock files (whatever
/// the umask: a directory others could write would let them replace the socket).
const DIR_MODE: u32 = 0o755;

/// Creates `dir` and its missing parents with [`DIR_MODE`] (less the umask's bits).
fn create_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Binds and listens on a unix socket at `path` (nothing may be there) whose mode is
/// [`SOCKET_MODE`] whatever the process's umask, without a moment when another user
/// could connect: the socket file is created no more open than 0600, and its mode is
/// final before `listen` (until then every connect is refused). The umask itself is
/// left alone: it is per process, and other threads create files meanwhile.
///
/// With `group`, the socket file is given to that group and made
/// [`GROUP_SOCKET_MODE`], also before `listen`.
fn bind_private(
    path: &Path,
    group: Option<u32>,
) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let (addr, len) = sockaddr(path)?;
    let fd = unix_socket(0)?;
    // Linux creates the socket file with the mode of the socket's own inode less the
    // umask: with the inode at 0600, the file is at most 0600 from the moment it exists.
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(fd.as_raw_fd(), SOCKET_MODE) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: addr outlives the call and len does not exceed its size (sockaddr checked).
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // A umask that takes owner bits (0277, say) leaves less than 0600: set it exactly.
    // Nobody can connect before listen, so this leaves no window either.
    let fixed = std::fs::symlink_metadata(path).and_then(|m| {
        if !m.file_type().is_socket() {
            return Err(std::io::Error::other("the bound socket was replaced"));
        }
        if let Some(gid) = group {
            std::os::unix::fs::lchown(path, None, Some(gid))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(GROUP_SOCKET_MODE))?;
        } else if m.permissions().mode() & 0o7777 != SOCKET_MODE {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))?;
        }
        Ok(())
    });
    if let Err(e) = fixed {
        remove_if_socket(path);
        return Err(e);
    }
    // The kernel caps the backlog at net.core.somaxconn, as std's bind asks.
    // SAFETY: listen on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), libc::c_int::MAX) } != 0 {
        let e = std::io::Error::last_os_error();
        remove_if_socket(path);
        return Err(e);
    }
    Ok(std::os::unix::net::UnixListener::from(fd))
}

/// Removes `path` if it is a socket (never another kind of file).
pub(crate) fn remove_if_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds the status socket at `path`. Whatever is there is looked at without following
/// symbolic links: nothing is bound over; a socket no process listens on (left by a
/// relayd that was killed) is replaced; a socket a process answers on is refused
/// ([`SocketError::Live`]), and so is anything that is not a socket (a regular file, a
/// directory, a symbolic link, a FIFO, a device: [`SocketError::NotSocket`]), which
/// stays untouched. The socket's mode is [`SOCKET_MODE`] whatever the umask, and a
/// missing parent directory is created 0755.
pub fn claim_socket(path: &Path) -> Result<std::os::unix::net::UnixListener, SocketError> {
    claim_group_socket(path, None)
}

/// [`claim_socket`], the socket owned by group `group` (`daemon.socket_group`) and of
/// mode [`GROUP_SOCKET_MODE`] when given.
pub fn claim_group_socket(
    path: &Path,
    group: Option<u32>,
) -> Result<std::os::unix::net::UnixListener, SocketError> {
    use std::os::unix::fs::FileTypeExt;
    let io = |action, source| SocketError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("looking at", e)),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(SocketError::NotSocket {
                path: path.to_path_buf(),
                what: describe(m.file_type()),
            });
        }
        Ok(_) => match probe(path) {
            Ok(()) => {
                return Err(SocketError::Live {
                    path: path.to_path_buf(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                return Err(SocketError::Busy {
                    path: path.to_path_buf(),
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                tracing::info!(socket = %path.display(), "replacing a stale status socket");
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io("removing stale socket", e)),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // EACCES and the like: relayd cannot tell whether it is stale, so it stays.
            Err(e) => return Err(io("probing the socket at", e)),
        },
    }
    if let Some(dir) = path.parent() {
        create_dirs(dir).ok();
    }
    bind_private(path, group).map_err(|e| io("binding status socket", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("relayd-lock-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn the_lock_file_is_0600_even_if_an_older_one_was_open() {
        if unsafe { libc::geteuid() } != 0 {
            return; // /run/relayd is root's
        }
        let prefix = format!("LOCKTEST{}", std::process::id());
        let path = lock_path(&prefix).unwrap();
        create_dirs(Path::new(LOCK_DIR)).unwrap();
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let lock = InstanceLock::acquire(&prefix).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        drop(lock);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(mode, 0o600, "lock file mode {mode:o}");
    }

    /// A socket left behind by a process that died: bound, never unlinked, closed.
    fn stale_socket(path: &Path) {
        drop(std::os::unix::net::UnixListener::bind(path).unwrap());
        assert!(path.exists());
    }

    #[test]
    fn a_missing_or_stale_socket_is_bound() {
        let d = dir("stale");
        let p = d.join("s.sock");
        // Dropping the listener leaves the file: a stale socket, as after a SIGKILL.
        drop(claim_socket(&p).unwrap());
        let l = claim_socket(&p).unwrap();
        std::os::unix::net::UnixStream::connect(&p).unwrap();
        drop(l);
        let q = d.join("t.sock");
        stale_socket(&q);
        let l = claim_socket(&q).unwrap();
        std::os::unix::net::UnixStream::connect(&q).unwrap();
        drop(l);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The socket file's permission bits.
    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_socket_is_0600_and_its_missing_directory_0755() {
        // The test process's umask (022, usually) would give 0755 by itself; umask 0 is
        // tested on a real daemon in tests/status_socket.rs (the umask is per process).
        let d = dir("mode");
        let p = d.join("sub").join("s.sock");
        let l = claim_socket(&p).unwrap();
        assert_eq!(mode(&p), 0o600, "socket mode {:o}", mode(&p));
        assert_eq!(mode(&d.join("sub")) & !0o755, 0);
        std::os::unix::net::UnixStream::connect(&p).unwrap();
        // A stale socket of mode 0777 is replaced by one of 0600.
        drop(l);
        std::fs::remove_file(&p).unwrap();
        let q = d.join("t.sock");
        stale_socket(&q);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&q, std::fs::Permissions::from_mode(0o777)).unwrap();
        let _l = claim_socket(&q).unwrap();
        assert_eq!(mode(&q), 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_live_socket_is_refused_and_kept() {
        let d = dir("live");
        let p = d.join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let e = claim_socket(&p).unwrap_err();
        assert!(matches!(e, SocketError::Live { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!("another relayd is answering on {}", p.display())
        );
        std::os::unix::net::UnixStream::connect(&p).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn anything_but_a_socket_is_refused_and_left_alone() {
        let d = dir("other");
        let file = d.join("file");
        std::fs::write(&file, b"precious").unwrap();
        let e = claim_socket(&file).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a regular file, not a socket: relayd replaces only a stale socket; remove it or set daemon.socket",
                file.display()
            )
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");

        let sub = d.join("dir");
        std::fs::create_dir(&sub).unwrap();
        let e = claim_socket(&sub).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert!(sub.is_dir());

        // A symbolic link, even to a stale socket, is not followed nor removed.
        let target = d.join("stale.sock");
        stale_socket(&target);
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = claim_socket(&link).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(target.exists());

        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = claim_socket(&fifo).unwrap_err();
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        assert!(fifo.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
