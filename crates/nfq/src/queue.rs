//! One NFQUEUE queue served by a dedicated thread: the handle the control plane keeps
//! ([`Queue`]) to start, reconfigure, pin, renice and stop it, and to read its heartbeat.
//!
//! The thread itself is split in two: `engine.rs`, the pure part (decode a batch, run the
//! chain, hold packets, plan verdicts; unit-tested in memory), and `worker.rs`, the shell
//! doing the system calls around it (recvmmsg, sendmsg, and the emitter's sendmmsg).
//!
//! Nothing here is shared with other queues. The control plane talks to the thread through
//! the datapaths' common control block (`relay_pipeline::Control`: two atomics, and a
//! mutex taken only on reload); the per-packet path takes no lock and
//! allocates nothing.

use crate::NfqError;
use crate::config::{QueueConfig, QueueConfigError, QueueConfigErrors, check_config, sndbuf_for};
use crate::priority::{self, NICE_RANGE};
use crate::socket::Socket;
use crate::worker::{RECV_TIMEOUT_MS, Shared, Worker};
use relay_core::{Chain, QueueCounters};
use relay_dataio::CpuMask;
use std::io;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running queue: its thread, counters, and the handle to reconfigure or stop it.
pub struct Queue {
    num: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    counters: QueueCounters,
    rcvbuf: usize,
    kernel_conntrack: bool,
    /// The CPU the thread is pinned to now.
    pinned: Mutex<Option<usize>>,
    /// The mask the thread was started with, restored when a pin is taken away.
    inherited: CpuMask,
    /// The thread's kernel id, which `setpriority` takes.
    tid: libc::pid_t,
    /// The nice value set on the thread now (`None`: the inherited one).
    niced: Mutex<Option<i32>>,
    /// The nice value the thread was started with, restored when `nice` is taken away.
    inherited_nice: i32,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("num", &self.num)
            .field("rcvbuf", &self.rcvbuf)
            .finish()
    }
}

/// The longest a healthy queue thread goes without starting a new loop iteration when
/// it has nothing to do: it wakes from every receive (or wait for a held packet's
/// deadline) after this long. A busy thread goes round once per batch. So a thread whose
/// heartbeat ([`Queue::since_last_loop`]) is many times older than this is stuck (a
/// service that never returns, a thread stopped by a debugger, ...).
pub const IDLE_WAKE: Duration = Duration::from_millis(RECV_TIMEOUT_MS as u64);

impl Queue {
    /// Binds queue `cfg.num` (errors, such as the queue being taken, come back here) and
    /// starts its thread running `chain`. A `cfg` that fails [`QueueConfig::check`], or
    /// whose conntrack mark bits overlap the chain's stage bits, is refused first with
    /// [`NfqError::Invalid`], naming everything wrong.
    pub fn start(
        cfg: &QueueConfig,
        chain: Chain,
        counters: QueueCounters,
    ) -> Result<Queue, NfqError> {
        check_config(cfg, chain.stages().mask())?;
        let inherited = CpuMask::current()
            .map_err(|e| NfqError::Affinity(cfg.num, "the inherited CPUs".into(), e))?;
        // The thread starts with this thread's nice value (Linux keeps one per thread).
        let inherited_nice = priority::nice_of(0).map_err(|source| NfqError::Priority {
            num: cfg.num,
            what: "reading the inherited nice value".into(),
            hint: "",
            source,
        })?;
        let mut sock = Socket::open(cfg.rcvbuf, sndbuf_for(cfg), RECV_TIMEOUT_MS)?;
        let kernel_conntrack = sock.bind_queue(cfg.num, &cfg.params())?;
        let rcvbuf = sock.rcvbuf();
        let shared = Arc::new(Shared::new(Instant::now()));
        let worker_shared = shared.clone();
        let worker_counters = counters.clone();
        let (cpu, nice) = (cfg.cpu, cfg.nice);
        let cfg = cfg.clone();
        let num = cfg.num;
        // The thread tells its kernel id first thing, for setpriority.
        let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("relayd-q{num}"))
            .spawn(move || {
                // The receiver waits for this; if it is gone, start has failed anyway.
                let _ = tid_tx.send(priority::current_tid());
                block_signals();
                let mut w = Worker::new(
                    sock,
                    cfg,
                    chain,
                    worker_counters,
                    worker_shared,
                    kernel_conntrack,
                );
                w.run();
            })
            .map_err(|e| NfqError::Socket("spawn queue thread", e))?;
        let Ok(tid) = tid_rx.recv() else {
            // The thread ended without a word (it cannot, short of a panic).
            shared.request_stop();
            let _ = thread.join();
            return Err(NfqError::Socket(
                "spawn queue thread",
                io::Error::other("the queue thread ended at once"),
            ));
        };
        let queue = Queue {
            num,
            shared,
            thread: Some(thread),
            counters,
            rcvbuf,
            kernel_conntrack,
            pinned: Mutex::new(None),
            inherited,
            tid,
            niced: Mutex::new(None),
            inherited_nice,
        };
        // Pinned and niced before any rule feeds the queue (the daemon binds queues
        // first); if the kernel refuses, the queue is stopped again (on drop) and the
        // error returned.
        queue.pin(cpu)?;
        queue.renice(nice)?;
        Ok(queue)
    }

    /// Pins the thread to `cpu`, or gives it back the mask it started with (`None`), if
    /// that changes anything.
    fn pin(&self, cpu: Option<usize>) -> Result<(), NfqError> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        if *pinned == cpu {
            return Ok(());
        }
        let what = cpu.map_or_else(|| "its inherited CPUs".to_string(), |c| format!("CPU {c}"));
        let mask = match cpu {
            // Past MAX_CPU: not one relayd may run on (check_config refuses it first).
            Some(c) => CpuMask::one(c).ok_or_else(|| QueueConfigErrors {
                num: self.num,
                errors: vec![QueueConfigError::Cpu {
                    cpu: c,
                    available: crate::available_cpus().unwrap_or_default(),
                }],
            })?,
            None => self.inherited,
        };
        if let Some(t) = &self.thread {
            mask.apply(t)
                .map_err(|e| NfqError::Affinity(self.num, what, e))?;
        }
        *pinned = cpu;
        Ok(())
    }

    /// The CPU the queue's thread is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        *self.pinned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the thread's nice value to `nice`, or gives it back the one it started with
    /// (`None`), if that changes anything.
    fn renice(&self, nice: Option<i32>) -> Result<(), NfqError> {
        let mut niced = self.niced.lock().unwrap_or_else(|e| e.into_inner());
        if *niced == nice {
            return Ok(());
        }
        let (value, what) = match nice {
            Some(n) if NICE_RANGE.contains(&n) => {
                (n, format!("setting its thread's nice value to {n}"))
            }
            Some(n) => {
                return Err(QueueConfigErrors {
                    num: self.num,
                    errors: vec![QueueConfigError::Nice { nice: n }],
                }
                .into());
            }
            None => (
                self.inherited_nice,
                format!(
                    "restoring its thread's inherited nice value {}",
                    self.inherited_nice
                ),
            ),
        };
        // A finished thread's id may be reused: leave a dead queue's alone.
        if self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            let from = niced.unwrap_or(self.inherited_nice);
            priority::set_nice(self.tid, value).map_err(|source| NfqError::Priority {
                num: self.num,
                what,
                hint: priority::hint(&source, from, value),
                source,
            })?;
        }
        *niced = nice;
        Ok(())
    }

    /// The nice value set on the queue's thread, if any (`None`: the inherited one).
    pub fn nice(&self) -> Option<i32> {
        *self.niced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The nice value the thread was started with, which `nice = None` restores.
    pub fn inherited_nice(&self) -> i32 {
        self.inherited_nice
    }

    /// The thread's nice value now: the one set, or the inherited one.
    pub fn effective_nice(&self) -> i32 {
        self.nice().unwrap_or(self.inherited_nice)
    }

    /// True if the kernel took the conntrack flag at start, so it sends each packet's
    /// conntrack state (false if not asked for, or refused by the kernel).
    pub fn kernel_conntrack(&self) -> bool {
        self.kernel_conntrack
    }

    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }

    /// The queue's counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The receive buffer the kernel granted at start.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// True while the thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The thread's heartbeat: how many times it has gone round its loop. A healthy
    /// thread adds one at least every [`IDLE_WAKE`], also when no packet comes, and once
    /// per batch under load.
    pub fn loops(&self) -> u64 {
        self.shared.loops()
    }

    /// How long the thread has gone without a new loop iteration, as far as the callers
    /// of this method can tell: the time since a call first saw the current
    /// [`Queue::loops`] count. A thread that went round since the previous call gives
    /// zero, so the answer understates a stall by at most the time between two calls;
    /// call it periodically (the daemon's health check does). Stays small (under a few
    /// [`IDLE_WAKE`]s plus the calling period) while the thread is healthy, and grows
    /// without bound once it is stuck or has ended. The thread's only cost is one relaxed
    /// store per loop iteration, no clock read.
    pub fn since_last_loop(&self) -> Duration {
        self.shared.since_last_loop(Instant::now())
    }

    /// Hands the thread a new chain and queue configuration. The thread first resizes its
    /// buffers for the new copy range and batch, then tells the kernel, then switches chains
    /// between two batches, so no packet is lost or sees half of each chain.
    /// Packets held when the update is applied get their verdicts first (accept), so none
    /// is lost. A changed `cpu` or `nice` is applied at once, before anything else; if
    /// the kernel refuses either, the queue keeps its old settings and the error comes
    /// back. A `cfg` refused as by [`Queue::start`] changes nothing.
    pub fn update(&self, chain: Chain, cfg: &QueueConfig) -> Result<(), NfqError> {
        check_config(cfg, chain.stages().mask())?;
        // The thread's CPU and nice value first: if the kernel refuses one, nothing else
        // changes (a new pin is taken back if the nice value is refused).
        let old_cpu = self.cpu();
        self.pin(cfg.cpu)?;
        if let Err(e) = self.renice(cfg.nice) {
            if let Err(back) = self.pin(old_cpu) {
                tracing::warn!(queue = self.num, "{back}");
            }
            return Err(e);
        }
        self.shared.post((chain, cfg.clone()));
        Ok(())
    }

    /// Asks the thread to drain and stop, without waiting (see [`Queue::join`]): it serves
    /// what is still queued (remove the rules that feed the queue first), accepts what
    /// services hold at once, then unbinds.
    pub fn request_stop(&self) {
        self.shared.request_stop();
    }

    /// Waits for a stopping thread to finish.
    pub fn join(mut self) {
        self.shutdown();
    }

    /// Drains, unbinds and waits: `request_stop` then `join`.
    pub fn stop(self) {
        self.request_stop();
        self.join();
    }

    fn shutdown(&mut self) {
        self.shared.request_stop();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!(queue = self.num, "queue thread panicked");
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Queue threads take no signals: the control plane handles them, and a signal landing
/// here would only cut a receive short.
fn block_signals() {
    // SAFETY: a zeroed sigset filled by sigfillset, applied to this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::{
        Action, ChainSettings, Context, Counter, Packet, Service, StageMark, Verdict,
    };
    use std::sync::mpsc;

    const NUM: u16 = 26;

    /// A service that holds the queue thread inside `process` until the test says go: a
    /// thread stuck in a service, as a service bug would leave it.
    struct Block(mpsc::Receiver<()>);

    impl Service for Block {
        fn process(&mut self, _pkt: &mut Packet, _cx: &mut Context) -> Action {
            let _ = self.0.recv_timeout(Duration::from_secs(20));
            Action::Continue
        }
    }

    /// The largest `since_last_loop` seen over `over`, sampled every 50 ms, and the loop
    /// count at the end.
    fn watch(q: &Queue, over: Duration) -> (Duration, u64) {
        let end = Instant::now() + over;
        let mut worst = Duration::ZERO;
        while Instant::now() < end {
            worst = worst.max(q.since_last_loop());
            std::thread::sleep(Duration::from_millis(50));
        }
        (worst.max(q.since_last_loop()), q.loops())
    }

    /// An idle queue thread goes round its loop every IDLE_WAKE, so its heartbeat stays
    /// fresh; a thread stuck in a service stops it, and the age grows until the service
    /// returns. Needs root (a queue bound in a testbed namespace).
    #[test]
    fn the_heartbeat_tells_an_idle_thread_from_a_stuck_one() {
        let tb = relay_testbed::Testbed::new("nfq-heartbeat");
        let n = tb.node("q");
        n.ip(&["link", "set", "lo", "up"]);
        let out = n.sh(&format!(
            "iptables -w -A OUTPUT -o lo -p udp --dport 9 -j NFQUEUE --queue-num {NUM}"
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (go, wait) = mpsc::channel();
        let q = n.run(move || {
            let mut chain = Chain::new(ChainSettings {
                malformed: Verdict::Accept,
                hook: relay_core::Hook::Output,
                stages: StageMark::DEFAULT,
            });
            chain.push("block", Box::new(Block(wait)), Counter::new());
            Queue::start(&QueueConfig::new(NUM), chain, QueueCounters::default()).unwrap()
        });

        // Idle: about ten wake-ups a second, never long without one.
        let before = q.loops();
        let (worst, after) = watch(&q, Duration::from_millis(800));
        eprintln!(
            "idle: {} loops in 0.8 s, oldest heartbeat {worst:?}",
            after - before
        );
        assert!(
            after >= before + 4,
            "{before} -> {after} loops in 0.8 s idle"
        );
        assert!(
            worst < IDLE_WAKE * 4,
            "idle thread's heartbeat {worst:?} old"
        );

        // One packet into the blocking service: the thread stops going round.
        n.run(|| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.send_to(b"x", "127.0.0.1:9").unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        let stuck_at = q.loops();
        let (age, later) = watch(&q, Duration::from_millis(1000));
        eprintln!("stuck: heartbeat {age:?} old, loops {stuck_at} -> {later}");
        assert_eq!(later, stuck_at, "the stuck thread went round its loop");
        assert!(
            age >= Duration::from_millis(800),
            "stuck for 1 s, heartbeat {age:?} old"
        );

        // The service returns: fresh again at once.
        go.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (worst, resumed) = watch(&q, Duration::from_millis(400));
        assert!(resumed > stuck_at, "no loop after the service returned");
        assert!(
            worst < IDLE_WAKE * 4,
            "heartbeat {worst:?} old after resuming"
        );
        assert_eq!(q.counters().packets.get(), 1);
        q.stop();
    }
}
