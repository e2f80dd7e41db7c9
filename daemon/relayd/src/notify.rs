//! systemd's service notification protocol (`sd_notify(3)`) for `relayd run`, so that the
//! units in `dist/systemd/` can be `Type=notify` with a watchdog:
//!
//! - `READY=1` once the rules are installed, not before: the status socket exists earlier,
//!   so anything that waited for the socket would race the rules;
//! - `RELOADING=1` with `MONOTONIC_USEC` when a SIGHUP reload starts, and `READY=1` when it
//!   is over, applied or refused (the running configuration stays in force then);
//! - `STOPPING=1` on SIGTERM or SIGINT;
//! - `STATUS=`, one line for `systemctl status`: what runs, a refused reload, a queue
//!   thread that is dead or stuck;
//! - `WATCHDOG=1` every half `WATCHDOG_USEC`, but only while every queue thread is alive
//!   and going round its loop. A queue thread that has ended or is stuck leaves its
//!   traffic unserved while the rest of relayd looks fine; without pings systemd declares
//!   the service failed and restarts it (`Restart=on-failure`).
//!
//! Without `NOTIFY_SOCKET` (relayd not started by systemd as `Type=notify`) nothing is
//! sent; the health check still logs dead and stuck queue threads. The protocol's text
//! comes from the `sd-notify` crate ([`NotifyState`]), as does the reading of
//! `WATCHDOG_USEC`/`WATCHDOG_PID`; the datagrams are sent here, to the address
//! `NOTIFY_SOCKET` names (a path, or `@name` in the abstract namespace), so that a test
//! can point a [`Notifier`] at a socket of its own.

use sd_notify::NotifyState;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How the daemon's queue threads are doing, for the health check behind systemd's
/// watchdog (see [`crate::notify`]): a queue thread that has ended or is stuck no longer
/// serves its traffic, which then bypasses relayd (fail-open) or stops (fail-closed),
/// while the rest of relayd looks alive. Only a restart brings such a queue back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Queues served (bound, with a thread each).
    pub queues: usize,
    /// Proxy listeners running (not those draining after a reload).
    pub listeners: usize,
    /// Queues whose thread has ended although the daemon did not stop it.
    pub dead: Vec<u16>,
    /// Queues whose thread is alive but has not gone round its loop for longer than the
    /// limit given to [`Daemon::health`], with how long it has not.
    pub stuck: Vec<(u16, Duration)>,
}

impl Health {
    /// True if no queue thread is dead or stuck.
    pub fn is_healthy(&self) -> bool {
        self.dead.is_empty() && self.stuck.is_empty()
    }
}

/// The shortest stall that counts as a stuck queue thread when a watchdog is set, however
/// short `WatchdogSec=` is: ten times the longest a healthy idle thread goes without a
/// loop iteration ([`relay_nfq::IDLE_WAKE`]), so that a scheduling hiccup on a busy box
/// does not restart relayd.
pub const MIN_STUCK: Duration = Duration::from_secs(1);

/// The stall that counts as a stuck queue thread without a watchdog (logged, and shown in
/// `STATUS=` if there is a notify socket).
pub const DEFAULT_STUCK: Duration = Duration::from_secs(5);

/// The longest a notification may wait for room in the manager's socket: a service
/// manager that does not read must not hold relayd's main loop for long.
const SEND_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest `STATUS=` text sent (a reason is cut to fit).
const MAX_STATUS: usize = 200;

/// How often to ping a watchdog of `watchdog` (`WATCHDOG_USEC`): at half of it, as
/// `sd_watchdog_enabled(3)` advises, so that one late ping is not yet a failure.
pub fn ping_period(watchdog: Duration) -> Duration {
    (watchdog / 2).max(Duration::from_millis(1))
}

/// How long a queue thread may go without a loop iteration before it counts as stuck:
/// half the watchdog interval when there is one (pings stop then, and systemd acts within
/// another interval), at least [`MIN_STUCK`]; [`DEFAULT_STUCK`] without.
pub fn stuck_after(watchdog: Option<Duration>) -> Duration {
    match watchdog {
        Some(w) => (w / 2).max(MIN_STUCK),
        None => DEFAULT_STUCK,
    }
}

/// The datagram for `states`: one `KEY=VALUE` line each, as `sd_notify(3)` reads them.
pub fn message(states: &[NotifyState<'_>]) -> String {
    let mut m = String::new();
    for s in states {
        let _ = writeln!(m, "{s}");
    }
    m
}

/// `text` made fit for one `STATUS=` line: its first non-empty line (a newline would end
/// the assignment), control characters replaced, cut to [`MAX_STATUS`] characters, with
/// a count of the lines left out (a refused configuration lists every error).
pub fn one_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let more = lines.count();
    let mut s: String = first
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.chars().count() > MAX_STATUS {
        s = s.chars().take(MAX_STATUS - 3).collect::<String>() + "...";
    }
    if more > 0 {
        let _ = write!(
            s,
            " (and {more} more line{})",
            if more == 1 { "" } else { "s" }
        );
    }
    s
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The `STATUS=` line for `health`: "running: 2 queues, 1 listener" while all is well
/// (with the reason of a refused reload, until a reload succeeds), else which queue
/// threads are dead or stuck for longer than `stuck_after`, and whether that stopped the
/// watchdog pings.
pub fn status_line(
    health: &Health,
    refused: Option<&str>,
    stuck_after: Duration,
    watchdog: bool,
) -> String {
    let mut problems: Vec<String> = health
        .dead
        .iter()
        .map(|q| format!("queue {q} thread dead"))
        .collect();
    problems.extend(health.stuck.iter().map(|(q, _)| {
        format!(
            "queue {q} thread stuck (no progress for over {:.1} s)",
            stuck_after.as_secs_f64()
        )
    }));
    let mut s = if problems.is_empty() {
        format!(
            "running: {}, {}",
            plural(health.queues, "queue"),
            plural(health.listeners, "listener")
        )
    } else {
        let mut s = format!("unhealthy: {}", problems.join(", "));
        if watchdog {
            s.push_str("; watchdog pings stopped");
        }
        s
    };
    if let Some(r) = refused {
        let _ = write!(s, "; last reload refused: {r}");
    }
    s
}

/// Where relayd's notifications go: the datagram socket systemd names in `NOTIFY_SOCKET`,
/// and the watchdog interval it asks for in `WATCHDOG_USEC`. Inactive (every send a
/// no-op) without a socket.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
    /// A failed send was logged as a warning already (later ones go to debug).
    warned: AtomicBool,
}

impl Notifier {
    /// From the environment systemd sets for a `Type=notify` service: `NOTIFY_SOCKET`, and
    /// `WATCHDOG_USEC` when `WatchdogSec=` is set (honoured only if `WATCHDOG_PID` is
    /// relayd's pid, as [`sd_notify::watchdog_enabled`] checks, so that a child never
    /// takes its parent's watchdog). The variables stay set: unsetting them would race
    /// the threads already running, and no child of relayd speaks the protocol.
    pub fn from_env() -> Notifier {
        let mut usec = 0;
        let watchdog =
            sd_notify::watchdog_enabled(false, &mut usec).then(|| Duration::from_micros(usec));
        Notifier::new(std::env::var_os("NOTIFY_SOCKET").as_deref(), watchdog)
    }

    /// Sends to `socket` (a path, or `@name` for the abstract namespace; `None`: an
    /// inactive notifier), with a watchdog of `watchdog`. An address that cannot be used
    /// is logged and leaves the notifier inactive: relayd runs without notifications
    /// rather than not at all.
    pub fn new(socket: Option<&OsStr>, watchdog: Option<Duration>) -> Notifier {
        let target = socket.and_then(|s| match open(s) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(
                    "NOTIFY_SOCKET={}: {e}; no notifications to the service manager",
                    s.to_string_lossy()
                );
                None
            }
        });
        Notifier {
            watchdog: watchdog.filter(|w| !w.is_zero() && target.is_some()),
            target,
            warned: AtomicBool::new(false),
        }
    }

    /// True if notifications go somewhere.
    pub fn is_active(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog interval the manager asked for, if it did (and there is a socket).
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends `states` in one datagram. Errors are logged, never returned: a service
    /// manager that has gone away must not stop relayd.
    pub fn send(&self, states: &[NotifyState<'_>]) {
        let Some((sock, addr)) = &self.target else {
            return;
        };
        let msg = message(states);
        tracing::debug!(notify = %msg.trim_end().replace('\n', " "), "to the service manager");
        if let Err(e) = sock.send_to_addr(msg.as_bytes(), addr) {
            if self.warned.swap(true, Ordering::Relaxed) {
                tracing::debug!("notifying the service manager: {e}");
            } else {
                tracing::warn!("notifying the service manager: {e}");
            }
        }
    }
}

/// An unbound datagram socket and the manager's address.
fn open(socket: &OsStr) -> std::io::Result<(UnixDatagram, SocketAddr)> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None if bytes.starts_with(b"/") => SocketAddr::from_pathname(socket)?,
        None => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "neither an absolute path nor @name",
            ));
        }
    };
    let sock = UnixDatagram::unbound()?;
    sock.set_write_timeout(Some(SEND_TIMEOUT))?;
    Ok((sock, addr))
}

/// Waits for the next watchdog ping, or forever without a watchdog: a branch for the
/// daemon's `select!` loop.
#[derive(Debug)]
pub struct Pinger(Option<tokio::time::Interval>);

impl Pinger {
    /// Completes at the next ping time (the first at once).
    pub async fn tick(&mut self) {
        match &mut self.0 {
            Some(i) => {
                i.tick().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// What `relayd run` tells its service manager over its life, and the health check that
/// feeds the watchdog: it keeps the state the protocol needs (the status line last sent,
/// a refused reload, which problems were logged already).
#[derive(Debug)]
pub struct Supervisor {
    notifier: Notifier,
    stuck_after: Duration,
    /// The `STATUS=` text last sent, so that an unchanged one is not sent again.
    status: String,
    /// Why the last reload was refused, until one is applied.
    refused: Option<String>,
    /// Queues already logged as dead, or as stuck, so that each problem is logged once.
    logged_dead: Vec<u16>,
    logged_stuck: Vec<u16>,
    /// The last check stopped the pings (logged once, as is their coming back).
    pings_stopped: bool,
}

impl Supervisor {
    /// For `relayd run`: the notifier from the environment ([`Notifier::from_env`]).
    pub fn from_env() -> Supervisor {
        Supervisor::new(Notifier::from_env())
    }

    /// Notifications through `notifier`; a queue thread counts as stuck after
    /// [`stuck_after`] of its watchdog.
    pub fn new(notifier: Notifier) -> Supervisor {
        Supervisor {
            stuck_after: stuck_after(notifier.watchdog()),
            notifier,
            status: String::new(),
            refused: None,
            logged_dead: Vec::new(),
            logged_stuck: Vec::new(),
            pings_stopped: false,
        }
    }

    /// How long a queue thread may go without a loop iteration before it counts as stuck
    /// (the limit to give [`crate::daemon::Daemon::health`]).
    pub fn stuck_after(&self) -> Duration {
        self.stuck_after
    }

    /// The timer of the watchdog pings: every [`ping_period`], the first at once; never
    /// without a watchdog.
    pub fn pinger(&self) -> Pinger {
        Pinger(self.notifier.watchdog().map(|w| {
            let mut i = tokio::time::interval(ping_period(w));
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        }))
    }

    fn status_now(&self, health: &Health) -> String {
        status_line(
            health,
            self.refused.as_deref(),
            self.stuck_after,
            self.notifier.watchdog().is_some(),
        )
    }

    /// Start-up is complete (queues bound, rules installed): `READY=1` and the status.
    pub fn ready(&mut self, health: &Health) {
        self.status = self.status_now(health);
        self.notifier
            .send(&[NotifyState::Ready, NotifyState::Status(&self.status)]);
    }

    /// Start-up failed with `error` (relayd exits next): the status says why.
    pub fn failed(&mut self, error: &anyhow::Error) {
        self.status = format!("start failed: {}", one_line(&format!("{error:#}")));
        self.notifier.send(&[NotifyState::Status(&self.status)]);
    }

    /// A SIGHUP reload starts: `RELOADING=1` with the monotonic time it started, which
    /// systemd 253 and later require (and earlier ones ignore). The reload blocks the
    /// pings while it runs, and systemd keeps its watchdog running through a reload, so
    /// this is a ping too unless pings are stopped: the reload gets a whole interval.
    pub fn reloading(&mut self) {
        self.status = "reloading the configuration".into();
        let mut states = vec![NotifyState::Reloading];
        match NotifyState::monotonic_usec_now() {
            Ok(now) => states.push(now),
            Err(e) => tracing::debug!("CLOCK_MONOTONIC: {e}"),
        }
        states.push(NotifyState::Status(&self.status));
        if self.notifier.watchdog().is_some() && !self.pings_stopped {
            states.push(NotifyState::Watchdog);
        }
        self.notifier.send(&states);
    }

    /// The reload is over, applied (`Ok`) or refused with a reason (the running
    /// configuration stays): `READY=1` either way, and the status, which keeps the
    /// reason of a refusal until a reload is applied.
    pub fn reloaded(&mut self, outcome: Result<(), String>, health: &Health) {
        self.refused = outcome.err().map(|r| one_line(&r));
        self.status = self.status_now(health);
        self.notifier
            .send(&[NotifyState::Ready, NotifyState::Status(&self.status)]);
    }

    /// relayd stops on `signal`: `STOPPING=1` (systemd stops expecting pings).
    pub fn stopping(&mut self, signal: &str) {
        self.status = format!("stopping ({signal}): removing rules, draining queues");
        self.notifier
            .send(&[NotifyState::Stopping, NotifyState::Status(&self.status)]);
    }

    /// The periodic health check: logs a queue thread that died or got stuck (once each,
    /// and a stuck one that goes again), sends the status when it changed, and with
    /// `ping` a `WATCHDOG=1`, unless a queue thread is dead or stuck.
    pub fn check(&mut self, health: &Health, ping: bool) {
        for q in &health.dead {
            if !self.logged_dead.contains(q) {
                tracing::error!(
                    queue = q,
                    "queue thread stopped unexpectedly; its traffic bypasses relayd (fail-open) or stops (fail-closed)"
                );
            }
        }
        self.logged_dead.clone_from(&health.dead);
        for (q, idle) in &health.stuck {
            if !self.logged_stuck.contains(q) {
                tracing::error!(
                    queue = q,
                    "queue thread stuck: no loop iteration for {:.1} s; its traffic waits (or bypasses relayd once the queue is full, if fail-open)",
                    idle.as_secs_f64()
                );
            }
        }
        for q in &self.logged_stuck {
            if !health.stuck.iter().any(|(s, _)| s == q) && !health.dead.contains(q) {
                tracing::warn!(queue = q, "queue thread going again");
            }
        }
        self.logged_stuck = health.stuck.iter().map(|(q, _)| *q).collect();
        let status = self.status_now(health);
        let mut states = Vec::new();
        if status != self.status {
            self.status = status;
            states.push(NotifyState::Status(&self.status));
        }
        if ping && self.notifier.watchdog().is_some() {
            let healthy = health.is_healthy();
            if healthy {
                states.push(NotifyState::Watchdog);
            }
            if healthy == self.pings_stopped {
                self.pings_stopped = !healthy;
                if healthy {
                    tracing::warn!("watchdog pings resumed");
                } else {
                    tracing::error!(
                        "watchdog pings stopped: the service manager will restart relayd"
                    );
                }
            }
        }
        if !states.is_empty() {
            self.notifier.send(&states);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(queues: usize, listeners: usize) -> Health {
        Health {
            queues,
            listeners,
            ..Health::default()
        }
    }

    /// A stand-in for the service manager's socket, in a directory of its own.
    struct Manager {
        dir: std::path::PathBuf,
        sock: UnixDatagram,
    }

    impl Manager {
        fn new(tag: &str) -> Manager {
            let dir = std::env::temp_dir()
                .join(format!("relayd-notify-unit-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let sock = UnixDatagram::bind(dir.join("notify")).unwrap();
            sock.set_nonblocking(true).unwrap();
            Manager { dir, sock }
        }

        fn notifier(&self, watchdog: Option<Duration>) -> Notifier {
            Notifier::new(Some(self.dir.join("notify").as_os_str()), watchdog)
        }

        /// Every datagram waiting, in order.
        fn take(&self) -> Vec<String> {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = self.sock.recv(&mut buf) {
                out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            out
        }
    }

    impl Drop for Manager {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn messages_are_one_line_per_state() {
        assert_eq!(
            message(&[NotifyState::Ready, NotifyState::Status("running: 1 queue")]),
            "READY=1\nSTATUS=running: 1 queue\n"
        );
        assert_eq!(
            message(&[NotifyState::Reloading, NotifyState::MonotonicUsec(12)]),
            "RELOADING=1\nMONOTONIC_USEC=12\n"
        );
        assert_eq!(message(&[NotifyState::Watchdog]), "WATCHDOG=1\n");
        assert_eq!(message(&[NotifyState::Stopping]), "STOPPING=1\n");
    }

    #[test]
    fn a_status_never_spans_lines() {
        assert_eq!(
            one_line("\n a.toml:3:1: queue.num: missing\nb\nc\n"),
            "a.toml:3:1: queue.num: missing (and 2 more lines)"
        );
        assert_eq!(one_line("x\ty"), "x y");
        assert_eq!(one_line(""), "");
        let long = one_line(&"é".repeat(500));
        assert_eq!(long.chars().count(), MAX_STATUS);
        assert!(long.ends_with("..."));
    }

    #[test]
    fn the_watchdog_is_pinged_at_half_its_interval_and_stalls_count_from_half() {
        assert_eq!(
            ping_period(Duration::from_micros(400_000)),
            Duration::from_millis(200)
        );
        assert_eq!(
            ping_period(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(
            ping_period(Duration::from_micros(1)),
            Duration::from_millis(1)
        );
        assert_eq!(
            stuck_after(Some(Duration::from_secs(30))),
            Duration::from_secs(15)
        );
        assert_eq!(stuck_after(Some(Duration::from_millis(400))), MIN_STUCK);
        assert_eq!(stuck_after(None), DEFAULT_STUCK);
    }

    #[test]
    fn status_lines_say_what_runs_and_which_queue_is_wrong() {
        let s = Duration::from_secs(1);
        assert_eq!(
            status_line(&healthy(1, 0), None, s, true),
            "running: 1 queue, 0 listeners"
        );
        assert_eq!(
            status_line(&healthy(3, 1), Some("bad file"), s, true),
            "running: 3 queues, 1 listener; last reload refused: bad file"
        );
        let h = Health {
            queues: 3,
            listeners: 0,
            dead: vec![2],
            stuck: vec![(0, Duration::from_secs(7))],
        };
        assert_eq!(
            status_line(&h, None, s, true),
            "unhealthy: queue 2 thread dead, queue 0 thread stuck (no progress for over 1.0 s); watchdog pings stopped"
        );
        assert_eq!(
            status_line(&h, None, s, false),
            "unhealthy: queue 2 thread dead, queue 0 thread stuck (no progress for over 1.0 s)"
        );
    }

    #[test]
    fn without_a_socket_nothing_is_sent_and_there_is_no_watchdog() {
        let n = Notifier::new(None, Some(Duration::from_millis(400)));
        assert!(!n.is_active());
        assert_eq!(n.watchdog(), None);
        n.send(&[NotifyState::Ready]);
        let mut sup = Supervisor::new(n);
        assert_eq!(sup.stuck_after(), DEFAULT_STUCK);
        assert!(sup.pinger().0.is_none());
        sup.ready(&healthy(1, 0));
        sup.check(&healthy(1, 0), true);
        // A relative path is no address: inactive, not an error.
        assert!(!Notifier::new(Some(OsStr::new("notify.sock")), None).is_active());
    }

    #[test]
    fn a_life_as_the_service_manager_sees_it() {
        let m = Manager::new("life");
        let mut sup = Supervisor::new(m.notifier(Some(Duration::from_millis(400))));
        assert_eq!(sup.stuck_after(), MIN_STUCK);
        sup.ready(&healthy(2, 1));
        assert_eq!(
            m.take(),
            ["READY=1\nSTATUS=running: 2 queues, 1 listener\n"]
        );
        // Healthy: a ping each time, the status only when it changes.
        sup.check(&healthy(2, 1), true);
        sup.check(&healthy(2, 1), false);
        sup.check(&healthy(2, 1), true);
        assert_eq!(m.take(), ["WATCHDOG=1\n", "WATCHDOG=1\n"]);

        // A stuck queue: no ping, the status says which, once.
        let stuck = Health {
            stuck: vec![(1, Duration::from_secs(2))],
            ..healthy(2, 1)
        };
        sup.check(&stuck, true);
        sup.check(&stuck, true);
        assert_eq!(
            m.take(),
            [
                "STATUS=unhealthy: queue 1 thread stuck (no progress for over 1.0 s); watchdog pings stopped\n"
            ]
        );
        // Going again: pings and the running status come back together.
        sup.check(&healthy(2, 1), true);
        assert_eq!(
            m.take(),
            ["STATUS=running: 2 queues, 1 listener\nWATCHDOG=1\n"]
        );
        // A dead queue stops them too.
        sup.check(
            &Health {
                dead: vec![0],
                ..healthy(2, 1)
            },
            true,
        );
        assert_eq!(
            m.take(),
            ["STATUS=unhealthy: queue 0 thread dead; watchdog pings stopped\n"]
        );

        // A reload: RELOADING=1 with the monotonic time it started (and no ping while
        // a queue is dead), then READY=1.
        let before = match NotifyState::monotonic_usec_now().unwrap() {
            NotifyState::MonotonicUsec(u) => u,
            _ => unreachable!(),
        };
        sup.reloading();
        sup.reloaded(Ok(()), &healthy(1, 0));
        let got = m.take();
        assert_eq!(got.len(), 2, "{got:?}");
        let lines: Vec<&str> = got[0].lines().collect();
        assert_eq!(lines[0], "RELOADING=1");
        let usec: i128 = lines[1]
            .strip_prefix("MONOTONIC_USEC=")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            usec >= before && usec - before < 1_000_000,
            "{usec} vs {before}"
        );
        assert_eq!(lines[2], "STATUS=reloading the configuration");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(got[1], "READY=1\nSTATUS=running: 1 queue, 0 listeners\n");

        // Healthy again: a reload's RELOADING=1 is a ping as well (the reload holds the
        // pings while it runs). A refused reload is READY=1 too, and the reason stays in
        // the status until a reload is applied.
        sup.check(&healthy(1, 0), true);
        assert_eq!(m.take(), ["WATCHDOG=1\n"]);
        sup.reloading();
        sup.reloaded(
            Err("relayd.toml:4:1: queue.num: missing\nmore".into()),
            &healthy(1, 0),
        );
        let got = m.take();
        assert!(
            got[0].starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{got:?}"
        );
        assert!(
            got[0].ends_with("\nSTATUS=reloading the configuration\nWATCHDOG=1\n"),
            "{got:?}"
        );
        assert_eq!(
            got[1],
            "READY=1\nSTATUS=running: 1 queue, 0 listeners; last reload refused: relayd.toml:4:1: queue.num: missing (and 1 more line)\n"
        );
        sup.check(&healthy(1, 0), true);
        assert_eq!(m.take(), ["WATCHDOG=1\n"]);
        sup.reloading();
        sup.reloaded(Ok(()), &healthy(1, 0));
        assert_eq!(
            m.take()[1],
            "READY=1\nSTATUS=running: 1 queue, 0 listeners\n"
        );

        sup.stopping("SIGTERM");
        assert_eq!(
            m.take(),
            ["STOPPING=1\nSTATUS=stopping (SIGTERM): removing rules, draining queues\n"]
        );
    }

    #[test]
    fn a_manager_that_went_away_does_not_stop_relayd() {
        let m = Manager::new("gone");
        let n = m.notifier(None);
        drop(m);
        n.send(&[NotifyState::Ready]);
        n.send(&[NotifyState::Ready]);
        assert!(n.warned.load(Ordering::Relaxed));
    }
}
