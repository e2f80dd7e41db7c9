//! Opening a file (or a directory) through a path that only root and one user can change:
//! the checks behind key files and the ESP state directory.

use super::KeyFileError;
use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed at most (as the kernel's own limit).
const MAX_LINKS: usize = 40;

/// A directory opened and checked, and the path it was reached by.
struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Opens `path` for reading if the file and every directory on its way are safe for a
/// relayd running as `uid` (see [`super::load_key`]).
pub(super) fn open(path: &Path, uid: u32) -> Result<File, KeyFileError> {
    walk(path, uid, false)
}

/// Opens the directory `path` (`O_PATH`) if it and every directory on its way are safe for
/// a relayd running as `uid`: owned by it or root and writable by no one else.
pub(crate) fn open_dir(path: &Path, uid: u32) -> Result<File, KeyFileError> {
    walk(path, uid, true)
}

/// [`open`] (a file) or [`open_dir`] (`dir`).
fn walk(path: &Path, uid: u32, want_dir: bool) -> Result<File, KeyFileError> {
    let io = |source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(io)?.join(path)
    };
    let mut todo: VecDeque<OsString> = VecDeque::new();
    push_front(&mut todo, &abs);
    let root = Dir {
        fd: open_at(None, OsStr::new("/"), libc::O_PATH | libc::O_DIRECTORY).map_err(io)?,
        path: PathBuf::from("/"),
    };
    check_dir(&root, uid, path)?;
    let mut dirs = vec![root];
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            // Back to a directory checked already ("/.." is "/").
            if dirs.len() > 1 {
                dirs.pop();
            }
            continue;
        }
        let Some(here) = dirs.last() else {
            return Err(io(io::Error::from(io::ErrorKind::NotFound)));
        };
        let last = todo.is_empty();
        let flags = if last && !want_dir {
            // O_NONBLOCK: a FIFO put in the key's place must not hang the reload.
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY
        } else {
            libc::O_PATH
        };
        let opened = open_at(Some(&here.fd), &name, flags | libc::O_NOFOLLOW);
        let fd = match opened {
            Ok(fd) => fd,
            // The last component is a symbolic link (O_NOFOLLOW refuses to open it).
            Err(e) if last && e.raw_os_error() == Some(libc::ELOOP) => {
                links += 1;
                if follow(here, &name, links, &mut todo).map_err(io)? {
                    dirs.truncate(1);
                }
                continue;
            }
            Err(e) => return Err(io(e)),
        };
        let st = fstat(&fd).map_err(io)?;
        let kind = st.st_mode & libc::S_IFMT;
        let at = here.path.join(&name);
        if kind == libc::S_IFLNK {
            // Only an O_PATH open gets here: a link inside a directory checked already,
            // so no one else can have put it there.
            links += 1;
            if follow(here, &name, links, &mut todo).map_err(io)? {
                dirs.truncate(1);
            }
        } else if last && want_dir && kind == libc::S_IFDIR {
            check_dir(&Dir { fd, path: at }, uid, path)?;
            return opened_dir(path);
        } else if last && !want_dir {
            check_file(&st, &at, uid, path)?;
            return Ok(File::from(fd));
        } else if kind == libc::S_IFDIR {
            let dir = Dir { fd, path: at };
            check_dir(&dir, uid, path)?;
            dirs.push(dir);
        } else {
            return Err(io(io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
    }
    // The path ended in "/", "." or "..": a directory, not a key file.
    if want_dir {
        return opened_dir(path);
    }
    Err(io(io::Error::from_raw_os_error(libc::EISDIR)))
}

/// The checked directory `path`, opened for `fsync` (its checks were made already on the
/// descriptor of the walk; this one only serves to flush renames in it).
fn opened_dir(path: &Path) -> Result<File, KeyFileError> {
    File::open(path).map_err(|source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Puts the components of `path` in front of `todo`; an absolute path starts again
/// from "/" (the caller resets the directories).
fn push_front(todo: &mut VecDeque<OsString>, path: &Path) {
    for c in path.components().rev() {
        match c {
            Component::Normal(n) => todo.push_front(n.to_os_string()),
            Component::ParentDir => todo.push_front("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
}

/// Follows the symbolic link `name` in `here`: its target's components come next.
/// True if the target is absolute: the walk goes on from "/".
fn follow(
    here: &Dir,
    name: &OsStr,
    links: usize,
    todo: &mut VecDeque<OsString>,
) -> io::Result<bool> {
    if links > MAX_LINKS {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let target = read_link_at(&here.fd, name)?;
    push_front(todo, &target);
    Ok(target.is_absolute())
}

/// The fix for a directory open to others: a shared (sticky) one such as /tmp cannot
/// be closed, the key has to move.
fn dir_fix(dir: &Path, mode: u32) -> String {
    if mode & libc::S_ISVTX != 0 {
        format!(
            "{} is a shared directory: move the key to a directory only root or relayd's \
             user can write, such as /etc/relayd/keys (chmod 700)",
            dir.display()
        )
    } else {
        format!("chmod go-w {}", dir.display())
    }
}

fn check_dir(dir: &Dir, uid: u32, file: &Path) -> Result<(), KeyFileError> {
    let st = fstat(&dir.fd).map_err(|source| KeyFileError::Io {
        path: file.to_path_buf(),
        source,
    })?;
    let d = dir.path.display();
    let insecure = |problem: String, fix: String| KeyFileError::Insecure {
        path: file.to_path_buf(),
        problem,
        fix,
    };
    if st.st_uid != 0 && st.st_uid != uid {
        return Err(insecure(
            format!(
                "directory {d} is owned by uid {}, not by root or relayd's user \
                 (uid {uid}), so its owner can replace the key",
                st.st_uid
            ),
            format!("chown root {d}"),
        ));
    }
    if st.st_mode & 0o022 != 0 {
        let who = if st.st_mode & 0o002 != 0 {
            "anyone"
        } else {
            "its group"
        };
        return Err(insecure(
            format!(
                "directory {d} is writable by {who} (mode {:o}), who can replace the key",
                st.st_mode & 0o7777
            ),
            dir_fix(&dir.path, st.st_mode),
        ));
    }
    Ok(())
}

fn check_file(st: &libc::stat, at: &Path, uid: u32, file: &Path) -> Result<(), KeyFileError> {
    let insecure = |problem: String, fix: String| KeyFileError::Insecure {
        path: file.to_path_buf(),
        problem,
        fix,
    };
    // Name the file as reached when a link led elsewhere.
    let it = if at == file {
        "it".to_string()
    } else {
        at.display().to_string()
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(insecure(
            format!("{it} is not a regular file"),
            "put the key in a plain file (relayd keygen CIPHER FILE)".into(),
        ));
    }
    if st.st_uid != 0 && st.st_uid != uid {
        return Err(insecure(
            format!(
                "{it} is owned by uid {}, not by root or relayd's user (uid {uid}), so its \
                 owner chooses the key",
                st.st_uid
            ),
            format!("chown {uid} {}", at.display()),
        ));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(insecure(
            format!(
                "{it} is readable or writable by group or others (mode {:o})",
                st.st_mode & 0o777
            ),
            format!("chmod 600 {}", at.display()),
        ));
    }
    Ok(())
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// `openat(dir, name, flags | O_CLOEXEC)`; `None` for `dir` opens an absolute name.
fn open_at(dir: Option<&OwnedFd>, name: &OsStr, flags: i32) -> io::Result<OwnedFd> {
    let c = c_name(name)?;
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c` is a NUL-terminated string that outlives the call; `dirfd` is open.
    let fd = unsafe { libc::openat(dirfd, c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid, writable stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn read_link_at(dir: &OwnedFd, name: &OsStr) -> io::Result<PathBuf> {
    let c = c_name(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for its length; `c` is NUL-terminated; `dir` is open.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(PathBuf::from(OsString::from_vec(buf)))
}
