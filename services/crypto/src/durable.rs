//! Keeping the state files ([`crate::persist`]) ahead of the queue threads without ever
//! making one wait for a disk: a background thread per daemon extends each outbound SA's
//! reservation while half of it is still unused, and writes each inbound SA's window edge
//! every [`INTERVAL`] it moved. Nothing starts or is written until a service is built from
//! the configuration (`relayd check` only reads).

use crate::persist::SaFile;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Sequence numbers reserved at a time. A restart skips what was left of the last
/// reservation: at most this many numbers of the 2^32 of an SA without ESN.
pub(crate) const RESERVE: u64 = 1 << 16;

/// How often the background thread looks at every SA (it is also woken when an outbound
/// SA has used half of its reservation).
pub(crate) const INTERVAL: Duration = Duration::from_millis(50);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Work the background thread does for one SA.
pub(crate) trait Job: Send + Sync {
    /// One round, at least every [`INTERVAL`], and whenever the thread is woken.
    fn tick(&self, now: Instant);
}

/// The background thread and the SAs it looks after; kept with the SA registries, so one
/// per daemon. The thread starts with the first SA and ends when this is dropped.
#[derive(Default)]
pub(crate) struct Persister {
    jobs: Mutex<Vec<Weak<dyn Job>>>,
    thread: OnceLock<Option<std::thread::Thread>>,
}

impl Persister {
    /// Looks after `job` from now on (starting the thread if need be).
    pub(crate) fn add(self: &Arc<Self>, job: Weak<dyn Job>) {
        lock(&self.jobs).push(job);
        self.thread.get_or_init(|| {
            let me = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("relayd-esp-state".into())
                .spawn(move || run(me));
            match spawned {
                Ok(h) => Some(h.thread().clone()),
                Err(e) => {
                    tracing::error!(
                        "cannot start the ESP state thread: {e}; outbound SAs will stop \
                         when their first reservation is used up"
                    );
                    None
                }
            }
        });
    }

    /// Wakes the thread (an outbound SA is running out of reserved numbers).
    pub(crate) fn wake(&self) {
        if let Some(Some(t)) = self.thread.get() {
            t.unpark();
        }
    }
}

fn run(p: Weak<Persister>) {
    loop {
        std::thread::park_timeout(INTERVAL);
        let jobs: Vec<Arc<dyn Job>> = {
            let Some(p) = p.upgrade() else { return };
            let mut j = lock(&p.jobs);
            j.retain(|w| w.strong_count() > 0);
            j.iter().filter_map(Weak::upgrade).collect()
        };
        let now = Instant::now();
        for j in jobs {
            j.tick(now);
        }
    }
}

/// Why a sequence number may not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoSeq {
    /// Past the durable reservation (the disk is slow or failing): the packet is dropped.
    Unreserved,
}

/// An outbound SA's sequence counter and its durable reservation.
pub(crate) struct OutSeq {
    /// The last number handed out (numbers refused as unreserved are skipped, not reused).
    seq: AtomicU64,
    /// The highest number on disk as reserved: no number above it is used.
    limit: AtomicU64,
    /// Where the reservation goes; `None` for an SA with a fresh key (IKE), unlimited.
    file: Option<SaFile>,
    /// Set once a service of the SA is built: from then on the file is kept ahead.
    active: AtomicBool,
    persister: Arc<Persister>,
    /// One reservation at a time (the thread, and a build reserving the first range).
    writing: Mutex<Option<Instant>>,
}

impl OutSeq {
    /// A counter that resumes after `reserved` (0: a new SA), kept in `file`.
    pub(crate) fn durable(file: SaFile, reserved: u64, persister: Arc<Persister>) -> OutSeq {
        OutSeq {
            seq: AtomicU64::new(reserved),
            limit: AtomicU64::new(reserved),
            file: Some(file),
            active: AtomicBool::new(false),
            persister,
            writing: Mutex::new(None),
        }
    }

    /// A counter from 1 with nothing on disk: for a key no one used before and no one will
    /// use again (negotiated by IKE).
    #[allow(dead_code)] // for the SAs IKE negotiates (part 2 of issue 25)
    pub(crate) fn fresh(persister: Arc<Persister>) -> OutSeq {
        OutSeq {
            seq: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            file: None,
            active: AtomicBool::new(false),
            persister,
            writing: Mutex::new(None),
        }
    }

    /// The next sequence number (0 after a wrap of the 64-bit counter: the caller checks
    /// the end of the space), or why none may be used. Two relaxed atomics; no lock.
    pub(crate) fn next(&self) -> Result<u64, NoSeq> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let limit = self.limit.load(Ordering::Acquire);
        if n > limit {
            self.persister.wake();
            return Err(NoSeq::Unreserved);
        }
        if limit - n == RESERVE / 2 {
            self.persister.wake();
        }
        Ok(n)
    }

    /// The last number handed out.
    #[cfg(test)]
    pub(crate) fn last(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Starts keeping the reservation ahead: reserves the first range now (so the first
    /// packet finds numbers) and hands the SA to the background thread. Called when a
    /// service is built, never while a configuration is only checked.
    pub(crate) fn activate(self: &Arc<Self>) {
        if self.file.is_none() || self.active.swap(true, Ordering::AcqRel) {
            return;
        }
        self.reserve(Instant::now());
        let weak: Weak<dyn Job> = Arc::downgrade(self) as Weak<dyn Job>;
        self.persister.add(weak);
    }

    /// Writes the next reservation and, once it is on disk, lets the queue threads use it.
    fn reserve(&self, now: Instant) {
        let Some(file) = &self.file else { return };
        let mut failed = lock(&self.writing);
        let base = self
            .seq
            .load(Ordering::Relaxed)
            .max(self.limit.load(Ordering::Relaxed));
        let new = base.saturating_add(RESERVE);
        match file.store(new) {
            Ok(()) => {
                self.limit.store(new, Ordering::Release);
                *failed = None;
            }
            Err(e) => {
                // Logged at most every 10 s; the queue threads count their drops.
                if failed.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
                    tracing::error!(
                        file = %file.path().display(),
                        "cannot reserve ESP sequence numbers: {e}; packets beyond the last \
                         reservation are dropped (dropped_seq_unreserved)"
                    );
                    *failed = Some(now);
                }
            }
        }
    }

    /// Makes the next number `next` (tests reaching the end of the sequence space).
    #[cfg(test)]
    pub(crate) fn jump(&self, next: u64) {
        self.seq.store(next - 1, Ordering::Relaxed);
        if self.file.is_some() {
            self.limit.store(next - 1, Ordering::Relaxed);
            self.reserve(Instant::now());
        }
    }
}

impl Job for OutSeq {
    fn tick(&self, now: Instant) {
        let (seq, limit) = (
            self.seq.load(Ordering::Relaxed),
            self.limit.load(Ordering::Acquire),
        );
        if limit.saturating_sub(seq) <= RESERVE / 2 {
            self.reserve(now);
        }
    }
}

impl Drop for OutSeq {
    /// A clean stop records exactly what was used, so a restart skips nothing.
    fn drop(&mut self) {
        if let (Some(file), true) = (&self.file, *self.active.get_mut()) {
            let used = (*self.seq.get_mut()).min(*self.limit.get_mut());
            if let Err(e) = file.store(used) {
                tracing::warn!(file = %file.path().display(), "ESP state at stop: {e} (the last reservation stands)");
            }
        }
    }
}

/// An inbound SA's persisted window edge.
///
/// After a crash the edge on disk may lag the window's: packets received since the last
/// write could then be replayed once. So what is written is the edge plus a margin, twice
/// the packets received in the last interval, and it is rewritten when less than one
/// interval's worth of that margin is left: unless the rate more than doubles within one
/// interval, the edge on disk is never behind the window. The price after a crash is that
/// the sender's next numbers up to the margin count as seen: about two intervals of
/// traffic (100 ms) are refused. A clean stop writes the exact edge.
pub(crate) struct InEdge {
    file: Option<SaFile>,
    active: AtomicBool,
    /// The edge at the last round, what is on disk, when that round was.
    last: Mutex<(u64, u64, Instant)>,
}

impl InEdge {
    /// The edge of an SA whose file held `top` (0: a new SA).
    pub(crate) fn durable(file: SaFile, top: u64) -> InEdge {
        InEdge {
            file: Some(file),
            active: AtomicBool::new(false),
            last: Mutex::new((top, top, Instant::now())),
        }
    }

    /// Nothing on disk (an SA negotiated by IKE, whose key dies with the process).
    #[allow(dead_code)] // for the SAs IKE negotiates (part 2 of issue 25)
    pub(crate) fn fresh() -> InEdge {
        InEdge {
            file: None,
            active: AtomicBool::new(false),
            last: Mutex::new((0, 0, Instant::now())),
        }
    }

    /// Starts persisting: writes the current edge now (so the ledger lists the SA before
    /// any packet is accepted). True the first time, when the caller hands the SA to the
    /// background thread.
    pub(crate) fn activate(&self, top: u64) -> bool {
        let Some(file) = &self.file else { return false };
        if self.active.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut last = lock(&self.last);
        let value = top.max(last.1);
        match file.store(value) {
            Ok(()) => *last = (top, value, Instant::now()),
            Err(e) => tracing::error!(file = %file.path().display(), "ESP window state: {e}"),
        }
        true
    }

    /// One round of the background thread with the window's edge `top`.
    pub(crate) fn tick(&self, top: u64, now: Instant) {
        let Some(file) = &self.file else { return };
        let mut last = lock(&self.last);
        let (prev, stored, at) = *last;
        if now.duration_since(at) < INTERVAL {
            return;
        }
        last.2 = now;
        if top <= prev {
            return;
        }
        let delta = top - prev;
        last.0 = top;
        if top.saturating_add(delta) <= stored {
            return;
        }
        let value = top.saturating_add(delta.saturating_mul(2));
        match file.store(value) {
            Ok(()) => last.1 = value,
            Err(e) => tracing::error!(file = %file.path().display(), "ESP window state: {e}"),
        }
    }

    /// At the SA's end (clean stop, or removed by a reload): the exact edge.
    pub(crate) fn finish(&mut self, top: u64) {
        if let (Some(file), true) = (&self.file, *self.active.get_mut())
            && let Err(e) = file.store(top)
        {
            tracing::warn!(file = %file.path().display(), "ESP window state at stop: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::test_key_dir;
    use crate::persist::{Dir, SaFile, fingerprint};

    #[test]
    fn numbers_are_used_only_once_reserved_and_resume_after_the_reservation() {
        let dir = test_key_dir("durable-out");
        let file = || SaFile::new(&dir, Dir::Out, 0x1001, fingerprint(b"k"));
        let p = Arc::new(Persister::default());
        let s = Arc::new(OutSeq::durable(file(), 0, p.clone()));
        assert_eq!(s.next(), Err(NoSeq::Unreserved), "nothing reserved yet");
        assert_eq!(file().load(), Ok(None), "no file before activation");
        s.activate();
        // Past what was handed out already (the refused 1 included).
        assert_eq!(file().load(), Ok(Some(RESERVE + 1)));
        let first = s.next().unwrap();
        assert_eq!(first, 2, "the refused number is skipped, never reused");
        // Used past half: the thread extends the reservation ahead of use.
        for _ in 0..RESERVE / 2 {
            s.next().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while file().load().unwrap().unwrap() <= RESERVE + 1 {
            assert!(Instant::now() < deadline, "not extended");
            std::thread::sleep(Duration::from_millis(5));
        }
        let on_disk = file().load().unwrap().unwrap();
        assert!(on_disk > s.last(), "{on_disk} > {}", s.last());
        // A crash: a new counter starts after the reservation on disk.
        let crash = OutSeq::durable(file(), on_disk, p.clone());
        assert_eq!(crash.seq.load(Ordering::Relaxed), on_disk);
        drop(crash);
        // A clean stop records what was used.
        let used = s.last();
        drop(s);
        assert_eq!(file().load(), Ok(Some(used)));
    }

    #[test]
    fn the_window_edge_on_disk_keeps_a_margin_of_the_recent_rate() {
        let dir = test_key_dir("durable-in");
        let file = || SaFile::new(&dir, Dir::In, 0x2002, fingerprint(b"k"));
        let mut e = InEdge::durable(file(), 0);
        assert_eq!(file().load(), Ok(None));
        assert!(e.activate(0));
        assert_eq!(file().load(), Ok(Some(0)), "listed before any packet");
        let t0 = Instant::now();
        e.tick(100, t0 + INTERVAL);
        assert_eq!(
            file().load(),
            Ok(Some(300)),
            "100 a round: 2 rounds of margin"
        );
        e.tick(200, t0 + INTERVAL * 2);
        assert_eq!(
            file().load(),
            Ok(Some(300)),
            "still a round ahead: not rewritten"
        );
        e.tick(300, t0 + INTERVAL * 3);
        assert_eq!(file().load(), Ok(Some(500)));
        e.tick(310, t0 + INTERVAL * 3 + INTERVAL / 2);
        assert_eq!(
            file().load(),
            Ok(Some(500)),
            "at most one round an interval"
        );
        e.finish(310);
        assert_eq!(file().load(), Ok(Some(310)), "a clean stop: exact");
    }
}
