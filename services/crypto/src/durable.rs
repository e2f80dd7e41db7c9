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
    /// Numbers reserved at a time.
    reserve: u64,
    /// Where the reservation goes; `None` for an SA with a fresh key (IKE), unlimited.
    file: Option<SaFile>,
    /// Set once a service of the SA is built: from then on the file is kept ahead.
    active: AtomicBool,
    persister: Arc<Persister>,
    /// One reservation at a time (the thread, and a build reserving the first range).
    writing: Mutex<Option<Instant>>,
}

impl OutSeq {
    /// A counter that resumes after `reserved` (0: a new SA), kept in `file`, reserving
    /// `reserve` numbers at a time.
    pub(crate) fn durable(
        file: SaFile,
        reserved: u64,
        reserve: u64,
        persister: Arc<Persister>,
    ) -> OutSeq {
        OutSeq {
            seq: AtomicU64::new(reserved),
            limit: AtomicU64::new(reserved),
            reserve: reserve.max(2),
            file: Some(file),
            active: AtomicBool::new(false),
            persister,
            writing: Mutex::new(None),
        }
    }

    /// A counter from 1 with nothing on disk: for a key no one used before and no one will
    /// use again (negotiated by IKE).
    pub(crate) fn fresh(persister: Arc<Persister>) -> OutSeq {
        OutSeq {
            seq: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            reserve: RESERVE,
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
        if limit - n == self.reserve / 2 {
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
        let new = base.saturating_add(self.reserve);
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
        if limit.saturating_sub(seq) <= self.reserve / 2 {
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
/// No packet is accepted above the edge on disk ([`InEdge::gate`]), so that after any crash
/// the window resumes at or above every number accepted before, and no replay gets
/// through. To keep queue threads from waiting for the disk, the edge written is the
/// window's plus a margin of twice the packets the recent rate brings in one [`INTERVAL`]
/// (at least [`MIN_MARGIN`]), and the background thread is woken to write the next one when
/// half of it is used: at a steady rate a queue thread never waits; at the start of a
/// burst after idle time a few packets wait for a write (a few ms) while the rate estimate
/// catches up. The price after a crash is that the sender's next numbers up to the margin
/// count as seen: about two intervals of traffic (100 ms), or [`MIN_MARGIN`] packets at low
/// rates; none if the sender went on while the receiver was down. A clean stop writes the
/// exact edge.
pub(crate) struct InEdge {
    file: Option<SaFile>,
    active: AtomicBool,
    /// The edge on disk: no number above it is accepted.
    durable: AtomicU64,
    /// Past this, the background thread is woken to write the next edge.
    ahead_at: AtomicU64,
    /// The highest number a queue thread is waiting to accept.
    wanted: AtomicU64,
    /// Packets accepted (for the rate: numbers the receiver never saw, sent while it was
    /// down, must not count).
    accepted: AtomicU64,
    /// `accepted` at the last write, and when: the rate.
    last: Mutex<(u64, Instant)>,
}

/// How long a queue thread waits for the edge to reach the disk before it drops the packet
/// (a disk that takes longer for one small write is failing).
const GATE_WAIT: Duration = Duration::from_secs(1);

/// The least margin written ahead of the window, in packets: what a crash costs at the
/// lowest rates, and what spares the first packets of a burst after idle time a wait each.
const MIN_MARGIN: u128 = 8;

impl InEdge {
    /// The edge of an SA whose file held `top` (0: a new SA).
    pub(crate) fn durable(file: SaFile, top: u64) -> InEdge {
        InEdge {
            file: Some(file),
            active: AtomicBool::new(false),
            durable: AtomicU64::new(top),
            ahead_at: AtomicU64::new(top),
            wanted: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            last: Mutex::new((0, Instant::now())),
        }
    }

    /// Nothing on disk (an SA negotiated by IKE, whose key dies with the process).
    pub(crate) fn fresh() -> InEdge {
        InEdge {
            file: None,
            active: AtomicBool::new(false),
            durable: AtomicU64::new(u64::MAX),
            ahead_at: AtomicU64::new(u64::MAX),
            wanted: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            last: Mutex::new((0, Instant::now())),
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
        let value = top.max(self.durable.load(Ordering::Acquire));
        match file.store(value) {
            Ok(()) => {
                self.durable.store(value, Ordering::Release);
                self.ahead_at.store(value, Ordering::Relaxed);
                *lock(&self.last) = (self.accepted.load(Ordering::Relaxed), Instant::now());
            }
            Err(e) => tracing::error!(file = %file.path().display(), "ESP window state: {e}"),
        }
        true
    }

    /// Whether a queue thread may accept `seq` (its ICV verified): at once if the edge on
    /// disk covers it, else after the background thread wrote one that does (false if
    /// that takes longer than [`GATE_WAIT`]: the packet is dropped).
    pub(crate) fn gate(&self, seq: u64, persister: &Persister) -> bool {
        if seq <= self.durable.load(Ordering::Acquire) {
            if seq > self.ahead_at.load(Ordering::Relaxed) {
                persister.wake();
            }
            return true;
        }
        self.wanted.fetch_max(seq, Ordering::AcqRel);
        persister.wake();
        let until = Instant::now() + GATE_WAIT;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_micros(50));
            if seq <= self.durable.load(Ordering::Acquire) {
                return true;
            }
        }
        false
    }

    /// Counts a packet accepted (after the window moved), for the rate.
    pub(crate) fn count(&self) {
        if self.file.is_some() {
            self.accepted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One round of the background thread with the window's edge `top`: writes the next
    /// edge when a queue thread waits for it or half the margin is used.
    pub(crate) fn tick(&self, top: u64, now: Instant) {
        let Some(file) = &self.file else { return };
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let target = top.max(self.wanted.load(Ordering::Acquire));
        let durable = self.durable.load(Ordering::Acquire);
        if target <= durable && top <= self.ahead_at.load(Ordering::Relaxed) {
            return;
        }
        let mut last = lock(&self.last);
        let (before, at) = *last;
        let elapsed = now.duration_since(at).max(Duration::from_millis(1));
        let accepted = self.accepted.load(Ordering::Relaxed);
        let moved = accepted.saturating_sub(before) as u128;
        let per_two = (moved * 2 * INTERVAL.as_micros() / elapsed.as_micros()).max(MIN_MARGIN);
        let margin = u64::try_from(per_two).unwrap_or(u64::MAX / 4);
        let value = target.max(durable).saturating_add(margin);
        match file.store(value) {
            Ok(()) => {
                self.durable.store(value, Ordering::Release);
                self.ahead_at
                    .store(value.saturating_sub(margin / 2), Ordering::Relaxed);
                *last = (accepted, now);
            }
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
        let s = Arc::new(OutSeq::durable(file(), 0, RESERVE, p.clone()));
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
        let crash = OutSeq::durable(file(), on_disk, RESERVE, p.clone());
        assert_eq!(crash.seq.load(Ordering::Relaxed), on_disk);
        drop(crash);
        // A clean stop records what was used.
        let used = s.last();
        drop(s);
        // (The thread may hold the SA for a moment: the last one to go writes.)
        let deadline = Instant::now() + Duration::from_secs(2);
        while file().load() != Ok(Some(used)) {
            assert!(Instant::now() < deadline, "{:?} != {used}", file().load());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn no_packet_is_accepted_above_the_edge_on_disk() {
        let dir = test_key_dir("durable-in");
        let file = || SaFile::new(&dir, Dir::In, 0x2002, fingerprint(b"k"));
        let p = Arc::new(Persister::default());
        let e = Arc::new(InEdge::durable(file(), 0));
        assert_eq!(file().load(), Ok(None));
        assert!(e.activate(0));
        assert_eq!(file().load(), Ok(Some(0)), "listed before any packet");
        // Without the thread nothing is written: the queue thread may not go past 0.
        assert!(!e.gate(1, &p), "accepted above the edge on disk");
        // With it, the gate waits for the write, which covers the number.
        struct Top(Arc<InEdge>, AtomicU64);
        impl Job for Top {
            fn tick(&self, now: Instant) {
                self.0.tick(self.1.load(Ordering::Relaxed), now);
            }
        }
        let job = Arc::new(Top(e.clone(), AtomicU64::new(0)));
        p.add(Arc::downgrade(&job) as Weak<dyn Job>);
        for seq in 1..=2000 {
            assert!(e.gate(seq, &p), "{seq}");
            job.1.store(seq, Ordering::Relaxed);
            e.count();
            let on_disk = file().load().unwrap().unwrap();
            assert!(on_disk >= seq, "accepted {seq} with {on_disk} on disk");
        }
        // A clean stop: exact.
        drop(job);
        while Arc::strong_count(&e) > 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut e = Arc::into_inner(e).unwrap();
        e.finish(2000);
        assert_eq!(file().load(), Ok(Some(2000)));
    }
}
