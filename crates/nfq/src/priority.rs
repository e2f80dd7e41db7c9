//! A queue thread's scheduling priority (its nice value, `setpriority`). On a core that
//! also runs the kernel's receive work (a threaded NAPI kthread, or softirqs), the fair
//! scheduler splits the CPU by weight: a lower nice value gives the queue thread the share
//! it needs to keep up instead of the kernel queueing packets it then has to drop.

use std::io;
use std::ops::RangeInclusive;

/// The nice values Linux takes: -20 (most favoured) to 19 (least). The kernel clamps
/// others silently, so relayd refuses them instead.
pub const NICE_RANGE: RangeInclusive<i32> = -20..=19;

/// The calling thread's kernel thread id, what `setpriority(PRIO_PROCESS, ..)` takes to
/// name one thread.
pub(crate) fn current_tid() -> libc::pid_t {
    // SAFETY: gettid takes nothing and cannot fail.
    unsafe { libc::gettid() }
}

/// The nice value of thread `tid` (0: the calling thread).
pub(crate) fn nice_of(tid: libc::pid_t) -> io::Result<i32> {
    // getpriority returns the nice value itself, so -1 is a valid answer: only errno,
    // cleared first, tells a failure.
    // SAFETY: __errno_location points to this thread's errno; getpriority only reads.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
    };
    if nice == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error().is_some_and(|n| n != 0) {
            return Err(e);
        }
    }
    Ok(nice)
}

/// Sets thread `tid`'s nice value.
pub(crate) fn set_nice(tid: libc::pid_t, nice: i32) -> io::Result<()> {
    // SAFETY: plain system call on a thread id; no memory is passed.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What to add to an error setting `nice` on a thread now at `from`: the kernel refuses
/// to lower a nice value (any negative one, from the default 0) without CAP_SYS_NICE.
pub(crate) fn hint(e: &io::Error, from: i32, nice: i32) -> &'static str {
    let denied = matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES));
    if denied && nice < from {
        " (lowering a thread's nice value, as a negative one does, needs CAP_SYS_NICE: \
         run relayd as root)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_sets_this_thread() {
        // On a thread of its own, so the test runner's threads keep their value.
        std::thread::spawn(|| {
            let tid = current_tid();
            let start = nice_of(0).unwrap();
            assert_eq!(nice_of(tid).unwrap(), start);
            // Raising the value is always allowed.
            let up = (start + 1).min(19);
            set_nice(tid, up).unwrap();
            assert_eq!(nice_of(tid).unwrap(), up);
            assert_eq!(nice_of(0).unwrap(), up);
            // -1 is a valid answer, not an error (needs CAP_SYS_NICE to set from above).
            match set_nice(tid, -1) {
                Ok(()) => assert_eq!(nice_of(tid).unwrap(), -1),
                Err(e) => assert!(hint(&e, up, -1).contains("CAP_SYS_NICE"), "{e}"),
            }
        })
        .join()
        .unwrap();
        let e = io::Error::from_raw_os_error(libc::EACCES);
        assert!(hint(&e, 0, -5).contains("CAP_SYS_NICE"));
        assert_eq!(hint(&e, 0, 5), "");
        assert_eq!(hint(&io::Error::from_raw_os_error(libc::ESRCH), 0, -5), "");
        // A thread that does not exist.
        assert!(nice_of(libc::pid_t::MAX).is_err());
    }
}
