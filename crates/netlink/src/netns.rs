//! Running a netlink request inside a named network namespace (`ip netns add NAME`, a
//! file under /run/netns): on a thread of its own that enters the namespace, so the
//! process and its other threads stay where they are. A socket keeps the namespace it was
//! opened in, so what the closure opens there can be used afterwards from anywhere.

use std::io;
use std::os::fd::AsRawFd;

/// Runs `f` in the network namespace `name` (`None`: here, on this thread).
pub fn in_netns<T: Send>(
    name: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let Some(name) = name else {
        return f();
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("network namespace name {name:?}"),
        ));
    }
    let ns = std::fs::File::open(format!("/run/netns/{name}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns on a valid namespace fd changes only this thread's namespace.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("netns thread panicked")))
    })
}

/// The index of interface `name` in the current thread's network namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name}"),
        )),
        i => Ok(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_any_path_is_opened() {
        for bad in ["", "../x", "a/b", ".", ".."] {
            let e = in_netns(Some(bad), || Ok(())).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        assert_eq!(in_netns(None, || Ok(7)).unwrap(), 7);
        assert_eq!(ifindex("lo").unwrap(), 1);
        assert_eq!(
            ifindex("no-such-if0").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
