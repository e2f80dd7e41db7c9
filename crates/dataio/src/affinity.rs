//! Pinning a queue's thread to one CPU (`sched_setaffinity`), as routers do: the queue's
//! work, the softirq that feeds it (RPS or the NIC's interrupt) and its caches stay on one
//! core, and other work stays off it.

use std::io;
use std::os::unix::thread::JoinHandleExt;
use std::thread::JoinHandle;

/// The largest CPU number a mask can name (`CPU_SETSIZE` - 1).
pub const MAX_CPU: usize = 1023;

/// A CPU mask as the kernel takes it (`cpu_set_t`).
#[derive(Clone, Copy)]
pub struct CpuMask(libc::cpu_set_t);

impl std::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.cpus()).finish()
    }
}

impl CpuMask {
    fn empty() -> CpuMask {
        // SAFETY: an all-zero cpu_set_t is the empty set.
        CpuMask(unsafe { std::mem::zeroed() })
    }

    /// The mask of just `cpu`, or `None` past [`MAX_CPU`].
    pub fn one(cpu: usize) -> Option<CpuMask> {
        if cpu > MAX_CPU {
            return None;
        }
        let mut m = CpuMask::empty();
        // SAFETY: cpu < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(cpu, &mut m.0) };
        Some(m)
    }

    /// The calling thread's mask.
    pub fn current() -> io::Result<CpuMask> {
        let mut m = CpuMask::empty();
        // SAFETY: the pointer and size describe one writable cpu_set_t.
        let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut m.0) };
        if rc == 0 {
            Ok(m)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The CPUs in the mask, in order.
    pub fn cpus(&self) -> Vec<usize> {
        // SAFETY: CPU_ISSET only reads the set; every index is below CPU_SETSIZE.
        (0..=MAX_CPU)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &self.0) })
            .collect()
    }

    /// Applies the mask to `thread` (which must not have been joined: the handle is held).
    pub fn apply(&self, thread: &JoinHandle<()>) -> io::Result<()> {
        // SAFETY: the pthread_t comes from a live JoinHandle (not yet joined or detached,
        // so the id stays valid even if the thread has finished); the mask is one valid
        // cpu_set_t of the size given.
        let rc = unsafe {
            libc::pthread_setaffinity_np(
                thread.as_pthread_t(),
                size_of::<libc::cpu_set_t>(),
                &self.0,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }
}

/// Pins `thread` (not yet joined) to `cpu`: what every datapath's queue threads use. A
/// `cpu` past [`MAX_CPU`] is refused with `EINVAL`.
pub fn pin_thread(thread: &JoinHandle<()>, cpu: usize) -> io::Result<()> {
    CpuMask::one(cpu)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
        .apply(thread)
}

/// The CPUs relayd may run on: the calling thread's affinity mask (`sched_getaffinity`),
/// which is what cpusets, `taskset` and systemd's `CPUAffinity=` leave it. A queue can be
/// pinned only to one of these; `relayd check` refuses others.
pub fn available_cpus() -> io::Result<Vec<usize>> {
    Ok(CpuMask::current()?.cpus())
}

/// Writes CPU numbers the way the kernel's `Cpus_allowed_list` does: `0-3,6`.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&start) = cpus.get(i) {
        let mut end = start;
        while cpus.get(i + 1) == Some(&(end + 1)) {
            end += 1;
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_and_list() {
        assert_eq!(CpuMask::one(3).unwrap().cpus(), vec![3]);
        assert!(CpuMask::one(MAX_CPU + 1).is_none());
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[]), "");
        // This thread runs somewhere.
        assert!(!available_cpus().unwrap().is_empty());
    }
}
