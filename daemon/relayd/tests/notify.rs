//! relayd under a stand-in for systemd. The test binds the notify socket a `Type=notify`
//! unit would have, starts `relayd run` with `NOTIFY_SOCKET`, `WATCHDOG_USEC` and
//! `WATCHDOG_PID` set as systemd sets them, and checks what arrives and when:
//!
//! - `READY=1` only once relayd's rules are in (relayd is frozen the moment it arrives
//!   while the test reads the namespace's iptables), no ping before it;
//! - `WATCHDOG=1` at about half of `WATCHDOG_USEC`, never a gap systemd would act on;
//! - a SIGHUP gives `RELOADING=1` with the `MONOTONIC_USEC` of that moment, then `READY=1`
//!   with the new rules in; a refused reload gives `READY=1` too, its reason in `STATUS=`;
//! - one queue thread frozen for real (ptrace stops that thread only, while the rest of
//!   relayd runs on) stops the pings once it has been stuck for the limit, `STATUS=`
//!   names the queue, and both come back when the thread goes again;
//! - SIGTERM gives `STOPPING=1`, and relayd exits clean;
//! - a start-up that fails sends no `READY=1` but a `STATUS=` with the reason.
//!
//! Needs root (namespaces, iptables, NFQUEUE, ptrace).

#[path = "../../../tests/support/mod.rs"]
mod support;

use relay_testbed::{Node, Proc, Testbed};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{Freeze, RELAYD, TempDir, iptables_save, thread_named};

/// The watchdog interval the test's "systemd" asks for: pings every 200 ms.
const WATCHDOG_USEC: u64 = 400_000;

const ONE_QUEUE: &str = r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 9"
services = ["accept"]
"#;

const TWO_QUEUES: &str = r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 9"
services = ["accept"]

[[queue]]
num = 1
hook = "forward"
match = "-p udp --dport 10"
services = ["accept"]
"#;

/// The service manager's end: the notify socket, and every datagram with its arrival.
struct Manager {
    dir: TempDir,
    path: PathBuf,
    sock: UnixDatagram,
    seen: Vec<(Instant, String)>,
}

impl Manager {
    fn new(tag: &str) -> Manager {
        let dir = TempDir::new(tag);
        let path = dir.0.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        Manager {
            dir,
            path,
            sock,
            seen: Vec::new(),
        }
    }

    /// The next datagram within `timeout`.
    fn recv(&mut self, timeout: Duration) -> Option<(Instant, String)> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).ok()?;
        let m = (
            Instant::now(),
            String::from_utf8_lossy(&buf[..n]).into_owned(),
        );
        self.seen.push(m.clone());
        Some(m)
    }

    /// Datagrams until one satisfies `want`; returns it and those before it. Panics with
    /// everything seen and relayd's log after `timeout`.
    fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        relayd: &Proc,
        want: impl Fn(&str) -> bool,
    ) -> ((Instant, String), Vec<(Instant, String)>) {
        let end = Instant::now() + timeout;
        let mut before = Vec::new();
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.recv(left) {
                Some(m) if want(&m.1) => return (m, before),
                Some(m) => before.push(m),
                None => panic!(
                    "no {what} within {timeout:?}; received:\n{:#?}\nrelayd:\n{}",
                    self.seen,
                    relayd.stderr_text()
                ),
            }
        }
    }

    /// Every datagram for `over`.
    fn collect(&mut self, over: Duration) -> Vec<(Instant, String)> {
        let end = Instant::now() + over;
        let mut out = Vec::new();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.recv(left) {
                Some(m) => out.push(m),
                None => break,
            }
        }
        out
    }

    /// Writes the configuration (status socket in the manager's directory).
    fn config(&self, body: &str) -> PathBuf {
        let socket = self.dir.0.join("relayd.sock");
        self.dir.file(
            "relayd.toml",
            &format!("[daemon]\nsocket = \"{}\"\n\n{body}", socket.display()),
        )
    }
}

/// True if `msg` holds the line `line` (`READY=1`, ...).
fn has(msg: &str, line: &str) -> bool {
    msg.lines().any(|l| l == line)
}

/// The value of `key` in `msg`.
fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// Starts `relayd run -c config` in `node` as systemd starts a `Type=notify` unit with
/// `WatchdogSec=`: `NOTIFY_SOCKET`, `WATCHDOG_USEC`, and `WATCHDOG_PID` set to relayd's
/// own pid (a shell sets it, then becomes relayd).
fn spawn(node: &Node, m: &Manager, config: &Path) -> Proc {
    let mut cmd = node.cmd("sh");
    cmd.args([
        "-c",
        r#"export WATCHDOG_PID=$$; exec "$0" run -c "$1" --log debug"#,
        RELAYD,
    ])
    .arg(config)
    .env("NOTIFY_SOCKET", &m.path)
    .env("WATCHDOG_USEC", WATCHDOG_USEC.to_string())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    node.spawn(cmd)
}

fn signal(p: &Proc, sig: i32) {
    p.signal(sig)
        .unwrap_or_else(|e| panic!("signal {sig}: {e}"));
}

/// The namespace's iptables as they are while relayd is stopped in its tracks (SIGSTOP):
/// what was in place when it sent the message the test just received.
fn rules_now(node: &Node, p: &Proc) -> String {
    signal(p, libc::SIGSTOP);
    let rules = iptables_save(node);
    signal(p, libc::SIGCONT);
    rules
}

/// CLOCK_MONOTONIC in µs, the clock of `MONOTONIC_USEC`.
fn monotonic_usec() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the live timespec.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as i128 * 1_000_000 + ts.tv_nsec as i128 / 1_000
}

/// The state letter of thread `tid` of `pid` (`S` sleeping, `t` stopped by a tracer, ...).
fn thread_state(pid: u32, tid: i32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

#[test]
fn relayd_tells_systemd_its_state_and_the_watchdog_follows_its_queue_threads() {
    let tb = Testbed::new("notify");
    let node = tb.node("r");
    let mut m = Manager::new("notify");
    let config = m.config(ONE_QUEUE);
    let mut p = spawn(&node, &m, &config);
    let pid = p.pid();

    // READY=1 once the rules are in, with nothing but status lines before it.
    let ((_, ready), before) = m.until("READY=1", Duration::from_secs(15), &p, |s| {
        has(s, "READY=1")
    });
    let rules = rules_now(&node, &p);
    assert!(
        rules.contains("-A FORWARD -j RELAYD-FORWARD") && rules.contains("--queue-num 0"),
        "READY=1 came before the rules were in:\n{rules}"
    );
    assert!(
        before.iter().all(|(_, s)| !has(s, "WATCHDOG=1")),
        "pings before READY=1: {before:?}"
    );
    assert_eq!(
        field(&ready, "STATUS"),
        Some("running: 1 queue, 0 listeners")
    );

    // Pings at half the interval, never a gap the watchdog would act on.
    let pings: Vec<Instant> = m
        .collect(Duration::from_millis(1400))
        .into_iter()
        .filter(|(_, s)| has(s, "WATCHDOG=1"))
        .map(|(t, _)| t)
        .collect();
    let mut gaps: Vec<Duration> = pings.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    eprintln!("{} pings, gaps {gaps:?}", pings.len());
    assert!(pings.len() >= 4, "{} pings in 1.4 s", pings.len());
    let interval = Duration::from_micros(WATCHDOG_USEC);
    let median = gaps[gaps.len() / 2];
    assert!(
        median >= interval * 35 / 100 && median <= interval * 65 / 100,
        "median gap {median:?}, not about half of {interval:?}"
    );
    assert!(
        *gaps.last().unwrap() < interval,
        "a gap of {:?} would trip the watchdog",
        gaps.last()
    );

    // A reload: RELOADING=1 stamped with the time it began, then READY=1 with the new
    // rules in.
    m.config(TWO_QUEUES);
    let t0 = monotonic_usec();
    signal(&p, libc::SIGHUP);
    let ((_, reloading), _) = m.until("RELOADING=1", Duration::from_secs(5), &p, |s| {
        has(s, "RELOADING=1")
    });
    let t1 = monotonic_usec();
    let stamp: i128 = field(&reloading, "MONOTONIC_USEC")
        .unwrap_or_else(|| panic!("RELOADING=1 without MONOTONIC_USEC: {reloading:?}"))
        .parse()
        .unwrap();
    assert!(
        (t0..=t1).contains(&stamp),
        "MONOTONIC_USEC={stamp} is not between the signal ({t0}) and its arrival ({t1})"
    );
    let ((_, ready), between) = m.until(
        "READY=1 after the reload",
        Duration::from_secs(10),
        &p,
        |s| has(s, "READY=1"),
    );
    assert!(
        between.iter().all(|(_, s)| !has(s, "RELOADING=1")),
        "{between:?}"
    );
    let rules = rules_now(&node, &p);
    assert!(
        rules.contains("--queue-num 1"),
        "READY=1 came before the reload's rules were in:\n{rules}"
    );
    assert_eq!(
        field(&ready, "STATUS"),
        Some("running: 2 queues, 0 listeners")
    );

    // A refused reload ends in READY=1 as well, with the reason in the status.
    m.config("[[queue]]\nnum = 0\nhook = \"nowhere\"\n");
    signal(&p, libc::SIGHUP);
    m.until("RELOADING=1", Duration::from_secs(5), &p, |s| {
        has(s, "RELOADING=1") && field(s, "MONOTONIC_USEC").is_some()
    });
    let ((_, ready), _) = m.until(
        "READY=1 after the refused reload",
        Duration::from_secs(10),
        &p,
        |s| has(s, "READY=1"),
    );
    let status = field(&ready, "STATUS").unwrap_or_default();
    assert!(
        status.starts_with("running: 2 queues, 0 listeners; last reload refused: "),
        "{status}"
    );

    // Queue 0's thread frozen, the rest of relayd running on: pings go on until the
    // thread has been stuck for the limit (1 s at this interval), then stop, and the
    // status says which queue.
    let tid = thread_named(pid, "relayd-q0");
    let main_tid = pid as i32;
    let frozen_at = Instant::now();
    let freeze = Freeze::thread(tid);
    assert_eq!(thread_state(pid, tid), 't', "queue 0 thread not stopped");
    assert_ne!(
        thread_state(pid, main_tid),
        't',
        "more than one thread stopped"
    );
    let ((noticed, status_msg), before) =
        m.until("a status naming queue 0", Duration::from_secs(5), &p, |s| {
            field(s, "STATUS").is_some_and(|v| v.contains("queue 0 thread stuck"))
        });
    let after = noticed - frozen_at;
    let last_ping = before
        .iter()
        .filter(|(_, s)| has(s, "WATCHDOG=1"))
        .map(|(t, _)| *t - frozen_at)
        .next_back();
    eprintln!("stuck noticed {after:?} after the freeze; last ping {last_ping:?} after it");
    assert!(
        !has(&status_msg, "WATCHDOG=1"),
        "pinged with a stuck queue: {status_msg:?}"
    );
    assert!(
        field(&status_msg, "STATUS")
            .unwrap()
            .contains("watchdog pings stopped"),
        "{status_msg:?}"
    );
    assert!(
        after >= Duration::from_millis(800) && after < Duration::from_secs(3),
        "stuck thread noticed {after:?} after it stopped (limit 1 s)"
    );
    assert!(
        last_ping.is_some(),
        "pings stopped at once, before the thread was stuck for the limit: {before:?}"
    );
    // Silence for well over the interval: systemd would restart relayd now.
    let quiet = m.collect(interval * 2);
    assert!(
        quiet.iter().all(|(_, s)| !has(s, "WATCHDOG=1")),
        "pinged while queue 0 is stuck: {quiet:?}"
    );
    // relayd itself still answers: only the queue thread stopped.
    relayd::status::query(&m.dir.0.join("relayd.sock")).expect("status while frozen");

    // The thread goes again: pings and the running status come back.
    drop(freeze);
    let ((_, back), _) = m.until(
        "a ping after the thread resumed",
        Duration::from_secs(3),
        &p,
        |s| has(s, "WATCHDOG=1"),
    );
    assert!(
        field(&back, "STATUS").is_some_and(|v| v.starts_with("running: 2 queues")),
        "{back:?}"
    );
    let log = p.stderr_text();
    for needle in [
        "queue thread stuck",
        "watchdog pings stopped",
        "queue thread going again",
    ] {
        assert!(log.contains(needle), "no {needle:?} in the log:\n{log}");
    }

    // SIGTERM: STOPPING=1, a clean exit, no rule left.
    signal(&p, libc::SIGTERM);
    m.until("STOPPING=1", Duration::from_secs(5), &p, |s| {
        has(s, "STOPPING=1")
    });
    let st = p
        .wait_timeout(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("relayd did not exit:\n{}", p.stderr_text()));
    assert!(st.success(), "{st:?}\n{}", p.stderr_text());
    let rules = iptables_save(&node);
    assert!(!rules.contains("RELAYD"), "{rules}");
}

#[test]
fn a_failed_start_says_why_and_is_never_ready() {
    let tb = Testbed::new("notify-fail");
    let node = tb.node("r");
    let mut m = Manager::new("notify-fail");
    // A regular file where the status socket would go: relayd refuses to replace it.
    let file = m.dir.file("not-a-socket", "");
    let config = m.dir.file(
        "relayd.toml",
        &format!("[daemon]\nsocket = \"{}\"\n{ONE_QUEUE}", file.display()),
    );
    let mut p = spawn(&node, &m, &config);
    let ((_, msg), before) = m.until("a status", Duration::from_secs(10), &p, |s| {
        field(s, "STATUS").is_some()
    });
    let status = field(&msg, "STATUS").unwrap();
    assert!(
        status.starts_with("start failed: ") && status.contains("not a socket"),
        "{status}"
    );
    let st = p
        .wait_timeout(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("relayd did not exit:\n{}", p.stderr_text()));
    assert_eq!(st.code(), Some(1), "{}", p.stderr_text());
    m.collect(Duration::from_millis(100));
    assert!(
        m.seen.iter().all(|(_, s)| !has(s, "READY=1")),
        "READY=1 from a relayd that failed to start: {before:?} {msg:?} {:?}",
        m.seen
    );
}
