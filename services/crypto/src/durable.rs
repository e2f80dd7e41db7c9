//! Keeping the state files ([`crate::persist`]) ahead of the queue threads without ever
//! making one wait for a disk: a background thread per daemon extends each outbound SA's
//! reservation while half of it is still unused, and writes each inbound SA's window edge
//! every [`INTERVAL`] it moved. Nothing starts or is written until the daemon starts the
//! services' state ([`relay_core::Start`]); building a service, `relayd check` and
//! `relayd replay` only read.

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

    /// Whether the thread was started.
    #[cfg(test)]
    pub(crate) fn started(&self) -> bool {
        self.thread.get().is_some()
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
    /// the end of the space), or why none may be used. Two atomics; no lock.
    ///
    /// The limit is read before the number is taken: a reservation that finds another
    /// writer's numbers on disk moves the counter past them before it publishes its new
    /// limit ([`OutSeq::reserve`]), so a number taken before that move is checked against
    /// the old limit and refused, never against the new one.
    pub(crate) fn next(&self) -> Result<u64, NoSeq> {
        let limit = self.limit.load(Ordering::Acquire);
        let n = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
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
    /// packet finds numbers) and hands the SA to the background thread. Called by the
    /// daemon's start of the service's state ([`relay_core::Start`]), never by `build`,
    /// `relayd check` or `relayd replay`. Again on a kept SA (a reload): nothing.
    pub(crate) fn activate(self: &Arc<Self>) {
        if self.file.is_none() || self.active.swap(true, Ordering::AcqRel) {
            return;
        }
        self.reserve(Instant::now());
        let weak: Weak<dyn Job> = Arc::downgrade(self) as Weak<dyn Job>;
        self.persister.add(weak);
    }

    /// Writes the next reservation and, once it is on disk, lets the queue threads use it.
    /// Above what this counter used and reserved and above what the file holds, under the
    /// state directory's lock ([`SaFile::reserve_above`]): if another writer of the SA (a
    /// second process on the same state directory) reserved numbers since this one's last
    /// write, the counter skips them before the new limit is published.
    fn reserve(&self, now: Instant) {
        let Some(file) = &self.file else { return };
        let mut failed = lock(&self.writing);
        let limit = self.limit.load(Ordering::Acquire);
        let floor = self.seq.load(Ordering::Acquire).max(limit);
        match file.reserve_above(floor, self.reserve) {
            Ok((held, new)) => {
                if let Some(theirs) = held.filter(|&h| h > limit) {
                    // (limit, theirs] are another writer's: never hand them out.
                    self.seq.fetch_max(theirs, Ordering::AcqRel);
                    tracing::warn!(
                        file = %file.path().display(),
                        "ESP sequence state: another process reserved numbers of this SA (up \
                         to {theirs}); they are skipped. Two relayd sending with one key is a \
                         configuration error"
                    );
                }
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
            let limit = *self.limit.get_mut();
            let used = (*self.seq.get_mut()).min(limit);
            if let Err(e) = file.store_if(limit, used) {
                tracing::warn!(file = %file.path().display(), "ESP state at stop: {e} (the last reservation stands)");
            }
        }
    }
}

/// An inbound SA's persisted window edge.
///
/// A packet is accepted above the edge on disk only when the disk cannot keep up
/// ([`InEdge::gate`]), so that after a crash the window resumes at or above every number
/// accepted before and replays are refused. To keep queue threads from waiting, the edge
/// written is the window's plus a margin of the packets the recent rate brings in
/// [`MARGIN_TIME`] (at least [`MIN_MARGIN`], and at least half the previous margin, so that
/// a short lull does not shrink it), and the background thread is woken to write the next
/// one when half of it is used: at a steady rate a queue thread never waits. When it does
/// (a burst after idle time, faster than the estimate), it waits at most [`GATE_WAIT`]; if
/// the write is not done by then the packet is accepted anyway and counted
/// (`accepted_unsaved`), and so are the following ones until the write is done: a slow
/// disk must not stall or drop traffic, and only those packets could be replayed after a
/// crash at that moment. The price of the margin after a crash is that the sender's next
/// numbers up to it count as seen: at most [`MARGIN_TIME`] of traffic at the rate before
/// the crash, or [`MIN_MARGIN`] packets at low rates, and nothing if the sender went on
/// while the receiver was down. A clean stop writes the exact edge.
pub(crate) struct InEdge {
    file: Option<SaFile>,
    active: AtomicBool,
    /// The edge on disk.
    durable: AtomicU64,
    /// Past this, the background thread is woken to write the next edge.
    ahead_at: AtomicU64,
    /// The highest number a queue thread accepted or waits to accept above the edge.
    wanted: AtomicU64,
    /// A wait timed out: accept above the edge without waiting until the next write.
    lagging: AtomicBool,
    /// Packets accepted (for the rate: numbers the receiver never saw, sent while it was
    /// down, must not count).
    accepted: AtomicU64,
    /// `accepted` at the last write, when, and the margin then.
    last: Mutex<(u64, Instant, u64)>,
}

/// How long a queue thread waits for the edge to reach the disk.
const GATE_WAIT: Duration = Duration::from_millis(50);

/// The traffic the margin ahead of the window covers, at the recent rate.
const MARGIN_TIME: Duration = Duration::from_millis(250);

/// The least margin written ahead of the window, in packets: what a crash costs at the
/// lowest rates.
const MIN_MARGIN: u64 = 8;

/// Whether an accepted packet's number is covered by the edge on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// It is.
    Saved,
    /// The disk did not keep up: accepted anyway, counted.
    Unsaved,
}

impl InEdge {
    /// The edge of an SA whose file held `top` (0: a new SA).
    pub(crate) fn durable(file: SaFile, top: u64) -> InEdge {
        InEdge {
            file: Some(file),
            active: AtomicBool::new(false),
            durable: AtomicU64::new(top),
            ahead_at: AtomicU64::new(top),
            wanted: AtomicU64::new(0),
            lagging: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            last: Mutex::new((0, Instant::now(), MIN_MARGIN)),
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
            lagging: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            last: Mutex::new((0, Instant::now(), MIN_MARGIN)),
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
                let mut last = lock(&self.last);
                (last.0, last.1) = (self.accepted.load(Ordering::Relaxed), Instant::now());
            }
            Err(e) => tracing::error!(file = %file.path().display(), "ESP window state: {e}"),
        }
        true
    }

    /// Whether `seq` (its ICV verified, about to be accepted) is covered by the edge on
    /// disk: at once if it is; else the background thread is woken to write one that is,
    /// and the caller waits for it at most [`GATE_WAIT`], and not at all while an earlier
    /// wait timed out and that write is not done.
    pub(crate) fn gate(&self, seq: u64, persister: &Persister) -> Gate {
        if seq <= self.durable.load(Ordering::Acquire) {
            if seq > self.ahead_at.load(Ordering::Relaxed) {
                persister.wake();
            }
            return Gate::Saved;
        }
        self.wanted.fetch_max(seq, Ordering::AcqRel);
        persister.wake();
        if self.lagging.load(Ordering::Acquire) {
            return Gate::Unsaved;
        }
        let until = Instant::now() + GATE_WAIT;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_micros(50));
            if seq <= self.durable.load(Ordering::Acquire) {
                return Gate::Saved;
            }
        }
        self.lagging.store(true, Ordering::Release);
        Gate::Unsaved
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
        let (before, at, prev_margin) = *last;
        // Over at least an interval: packets that waited in the kernel's queue during a
        // write arrive at once, and must not read as a rate that high.
        let elapsed = now.duration_since(at).max(INTERVAL);
        let accepted = self.accepted.load(Ordering::Relaxed);
        let moved = u128::from(accepted.saturating_sub(before));
        let by_rate = moved * MARGIN_TIME.as_micros() / elapsed.as_micros();
        let margin = u64::try_from(by_rate)
            .unwrap_or(u64::MAX / 4)
            .max(prev_margin / 2)
            .max(MIN_MARGIN);
        let value = target.max(durable).saturating_add(margin);
        match file.store(value) {
            Ok(()) => {
                self.durable.store(value, Ordering::Release);
                self.ahead_at
                    .store(value.saturating_sub(margin / 2), Ordering::Relaxed);
                // The next packet above it waits again (at most one wait a write).
                self.lagging.store(false, Ordering::Release);
                *last = (accepted, now, margin);
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
        assert_eq!(
            e.gate(1, &p),
            Gate::Unsaved,
            "no write: accepted, but counted"
        );
        assert_eq!(e.gate(2, &p), Gate::Unsaved, "no second wait while lagging");
        // With it, the gate waits for the write, which covers the number.
        struct Top(Arc<InEdge>, AtomicU64);
        impl Job for Top {
            fn tick(&self, now: Instant) {
                self.0.tick(self.1.load(Ordering::Relaxed), now);
            }
        }
        let job = Arc::new(Top(e.clone(), AtomicU64::new(0)));
        p.add(Arc::downgrade(&job) as Weak<dyn Job>);
        let deadline = Instant::now() + Duration::from_secs(2);
        while e.gate(3, &p) == Gate::Unsaved {
            assert!(Instant::now() < deadline, "the write never caught up");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut unsaved = 0;
        for seq in 3..=2000 {
            if e.gate(seq, &p) == Gate::Unsaved {
                unsaved += 1;
                continue;
            }
            job.1.store(seq, Ordering::Relaxed);
            e.count();
            let on_disk = file().load().unwrap().unwrap();
            assert!(on_disk >= seq, "accepted {seq} with {on_disk} on disk");
        }
        // Only when a write took longer than the wait (a loaded test machine).
        assert!(unsaved < 500, "{unsaved} accepted above the edge");
        // A clean stop: exact.
        drop(job);
        while Arc::strong_count(&e) > 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut e = Arc::into_inner(e).unwrap();
        e.finish(2000);
        assert_eq!(file().load(), Ok(Some(2000)));
    }

    /// Takes `n` numbers from `s` (activated here), extending its reservation itself when
    /// it runs out (as well as its thread): the numbers it handed out.
    fn take(s: &Arc<OutSeq>, n: usize) -> Vec<u64> {
        s.activate();
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match s.next() {
                Ok(x) => got.push(x),
                Err(NoSeq::Unreserved) => s.tick(Instant::now()),
            }
        }
        got
    }

    /// No number is handed out twice, and every one is at or below the file's value.
    fn assert_disjoint(all: &[Vec<u64>], on_disk: u64) {
        let mut seen = std::collections::HashSet::new();
        for (i, got) in all.iter().enumerate() {
            for &x in got {
                assert!(seen.insert(x), "writer {i}: {x} was handed out twice");
                assert!(x <= on_disk, "writer {i}: {x} above the file's {on_disk}");
            }
        }
    }

    /// Two writers of one SA (a daemon, and a second process on the same state directory
    /// that read the file at the same time) reserving at once: each reservation goes above
    /// what the file holds, and the counter skips the other's, so they never hand out the
    /// same number.
    #[test]
    fn two_writers_of_one_sa_never_hand_out_the_same_number() {
        let dir = test_key_dir("durable-two");
        let file = || SaFile::new(&dir, Dir::Out, 0x1001, fingerprint(b"k"));
        // Both read the file (nothing yet) before either reserves.
        let writers: Vec<Arc<OutSeq>> = (0..2)
            .map(|_| {
                Arc::new(OutSeq::durable(
                    file(),
                    0,
                    16,
                    Arc::new(Persister::default()),
                ))
            })
            .collect();
        let all: Vec<Vec<u64>> = writers
            .iter()
            .map(|s| {
                let s = s.clone();
                std::thread::spawn(move || take(&s, 800))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert_disjoint(&all, file().load().unwrap().unwrap());
    }

    /// The environment variable that makes the test below a writer (its child process).
    const WRITER: &str = "RELAYD_TEST_ESP_WRITER";

    /// A child writer: reads the SA's file, says it is ready, waits for the word, takes
    /// numbers, writes them out.
    fn writer(spec: &str) {
        let (dir, i) = spec.rsplit_once('|').unwrap();
        let dir = std::path::Path::new(dir);
        let file = SaFile::new(dir, Dir::Out, 0x1001, fingerprint(b"k"));
        let reserved = file.load().unwrap().unwrap_or(0);
        let s = Arc::new(OutSeq::durable(
            file,
            reserved,
            16,
            Arc::new(Persister::default()),
        ));
        std::fs::write(dir.join(format!("ready-{i}")), "").unwrap();
        while !dir.join("go").exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let got: Vec<String> = take(&s, 800).iter().map(u64::to_string).collect();
        std::fs::write(dir.join(format!("out-{i}")), got.join("\n")).unwrap();
    }

    /// Two processes on one state directory (a running relayd, and a second one started on
    /// the same configuration) reserving at once never hand out the same number: the
    /// state directory's lock makes each read-modify-write of the file atomic.
    #[test]
    fn two_processes_reserving_at_once_never_overlap() {
        if let Ok(spec) = std::env::var(WRITER) {
            return writer(&spec);
        }
        let dir = test_key_dir("durable-procs");
        let me = "durable::tests::two_processes_reserving_at_once_never_overlap";
        let children: Vec<std::process::Child> = (0..2)
            .map(|i| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", me, "--test-threads=1", "--quiet"])
                    .env(WRITER, format!("{}|{i}", dir.display()))
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..2).all(|i| dir.join(format!("ready-{i}")).exists()) {
            assert!(Instant::now() < deadline, "the writers never got ready");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(dir.join("go"), "").unwrap();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        let all: Vec<Vec<u64>> = (0..2)
            .map(|i| {
                std::fs::read_to_string(dir.join(format!("out-{i}")))
                    .unwrap()
                    .lines()
                    .map(|l| l.parse().unwrap())
                    .collect()
            })
            .collect();
        assert!(all.iter().all(|a| a.len() == 800));
        let on_disk = SaFile::new(&dir, Dir::Out, 0x1001, fingerprint(b"k"))
            .load()
            .unwrap()
            .unwrap();
        assert_disjoint(&all, on_disk);
    }
}
