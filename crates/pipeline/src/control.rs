//! What the control plane shares with a datapath thread, the same for every datapath: a
//! stop flag, a pending update (a new chain, with whatever else the datapath takes on
//! reload) and the thread's heartbeat, read back as "how long since it last went round".
//!
//! The thread reads two atomics per loop and takes the mutex only when an update waits;
//! the per-packet path touches none of it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The control block of one datapath thread; `U` is what an update carries.
#[derive(Debug)]
pub struct Control<U> {
    stop: AtomicBool,
    has_update: AtomicBool,
    update: Mutex<Option<U>>,
    /// The thread's loop iterations so far, stored (relaxed) once per iteration.
    loops: AtomicU64,
    /// The heartbeat as last read by the control plane, and when it was first seen at that
    /// value.
    seen: Mutex<(u64, Instant)>,
}

impl<U> Control<U> {
    /// A block with no stop asked and no update waiting; `now` starts the heartbeat.
    pub fn new(now: Instant) -> Control<U> {
        Control {
            stop: AtomicBool::new(false),
            has_update: AtomicBool::new(false),
            update: Mutex::new(None),
            loops: AtomicU64::new(0),
            seen: Mutex::new((0, now)),
        }
    }

    /// The thread's side, once per loop iteration: publishes `loops` (a plain store of the
    /// thread's own count, no read-modify-write) and takes the waiting update, if any.
    pub fn tick(&self, loops: u64) -> Option<U> {
        self.loops.store(loops, Ordering::Relaxed);
        if !self.has_update.swap(false, Ordering::Acquire) {
            return None;
        }
        self.update.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// True once [`Control::request_stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Asks the thread to stop (it looks at the flag once per loop).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Hands the thread an update, which it takes between two batches (a later one
    /// replaces one not taken yet).
    pub fn post(&self, update: U) {
        *self.update.lock().unwrap_or_else(|e| e.into_inner()) = Some(update);
        self.has_update.store(true, Ordering::Release);
    }

    /// The thread's heartbeat: how many times it has gone round its loop.
    pub fn loops(&self) -> u64 {
        self.loops.load(Ordering::Relaxed)
    }

    /// How long the thread has gone without a new loop iteration as far as the callers of
    /// this method can tell (`now` is the time of the call): the time since a call first
    /// saw the current [`Control::loops`] count. A thread that went round since the
    /// previous call gives zero, so the answer understates a stall by at most the time
    /// between two calls; it grows without bound once the thread is stuck or has ended.
    pub fn since_last_loop(&self, now: Instant) -> Duration {
        let loops = self.loops();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.0 != loops {
            *seen = (loops, now);
        }
        now.saturating_duration_since(seen.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_stop_and_heartbeat() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let c = Control::<u32>::new(t0);
        assert_eq!(c.tick(1), None);
        c.post(5);
        c.post(6);
        assert_eq!(c.tick(2), Some(6), "the latest update wins");
        assert_eq!(c.tick(3), None);
        assert!(!c.stop_requested());
        c.request_stop();
        assert!(c.stop_requested());
        assert_eq!(c.since_last_loop(ms(10)), Duration::ZERO, "a new count");
        assert_eq!(c.since_last_loop(ms(50)), Duration::from_millis(40));
        c.tick(4);
        assert_eq!(c.since_last_loop(ms(60)), Duration::ZERO);
    }
}
