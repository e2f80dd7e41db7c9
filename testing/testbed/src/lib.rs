//! Network-namespace testbeds for relayd's integration tests, demos and benchmarks.
//!
//! A [`Testbed`] owns a set of network namespaces ([`Node`]s) joined by veth pairs
//! ([`Link`]s); dropping it kills whatever still runs inside and deletes the namespaces,
//! also when a test panics. Everything is done by shelling out to `ip` and `tc`, so a
//! failing step can be replayed by hand from the panic message.
//!
//! Tests using this crate need root. [`Testbed::new`] panics when it is not available:
//! a kernel test that silently passes without a kernel is worse than a red one.
//!
//! ```no_run
//! let l = relay_testbed::line3("doc");
//! assert!(l.src.ping("10.0.2.2"));
//! let out = l.dst.exec(&["ip", "-br", "addr"]);
//! # let _ = out;
//! ```

mod node;
mod proc;
mod topo;
mod util;

pub use node::{Link, Node};
pub use proc::Proc;
pub use topo::{Line3, Line4, line3, line4};

use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use util::{run_checked, run_quiet};

/// Prefix of every namespace this crate creates; [`cleanup_stale`] only touches these.
pub const NS_PREFIX: &str = "rt";

/// Per-process testbed counter, so that parallel tests in one binary get distinct names.
static TESTBED_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A set of network namespaces that lives as long as this value.
///
/// Namespaces are named `rt{pid}_{n}-{node}`, where `n` counts testbeds in this process:
/// unique across parallel tests and concurrent test processes, and short enough to read in
/// `ip netns list`. Dropping the testbed SIGKILLs every process still inside one of its
/// namespaces and deletes them; errors during teardown are printed, never panicked on.
#[derive(Debug)]
pub struct Testbed {
    test_name: String,
    id: u64,
    /// Namespaces created so far, in creation order (torn down in reverse).
    namespaces: Mutex<Vec<String>>,
}

impl Testbed {
    /// Starts an empty testbed for the test `test_name` (used in messages only).
    ///
    /// Panics with a clear message if not root (`geteuid() != 0`) or `ip` is missing: a
    /// test needing root must fail loudly, never silently pass.
    pub fn new(test_name: &str) -> Testbed {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert!(
            euid == 0,
            "relay-testbed: test `{test_name}` needs root (network namespaces, veth, tc); \
             running as euid {euid}. Run the tests as root, e.g. `sudo -E cargo test`."
        );
        match Command::new("ip").arg("-V").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "relay-testbed: `ip -V` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!(
                "relay-testbed: test `{test_name}` needs the `ip` tool from iproute2, \
                 which could not be run: {e}"
            ),
        }
        Testbed {
            test_name: test_name.to_owned(),
            id: TESTBED_COUNTER.fetch_add(1, Ordering::Relaxed),
            namespaces: Mutex::new(Vec::new()),
        }
    }

    /// The test name given to [`Testbed::new`].
    pub fn test_name(&self) -> &str {
        &self.test_name
    }

    /// Names of all namespaces created so far, in creation order.
    pub fn namespaces(&self) -> Vec<String> {
        self.lock_namespaces().clone()
    }

    /// Creates a namespace named uniquely `rt{pid}_{n}-{name}` and brings `lo` up.
    ///
    /// IPv6 duplicate address detection is switched off inside (`accept_dad=0`) so that
    /// addresses are usable at once instead of "tentative" for a second or two. Panics if
    /// `name` is already used in this testbed or any `ip` step fails.
    pub fn node(&self, name: &str) -> Node {
        let ns = format!("{NS_PREFIX}{}_{}-{name}", std::process::id(), self.id);
        run_checked(Command::new("ip").args(["netns", "add", &ns]));
        // Registered right away: if a later step panics, Drop still deletes it.
        self.lock_namespaces().push(ns.clone());
        let node = Node::new(ns, name);
        node.ip(&["link", "set", "lo", "up"]);
        node.sysctl("net.ipv6.conf.all.accept_dad", "0");
        node.sysctl("net.ipv6.conf.default.accept_dad", "0");
        node
    }

    /// Creates a veth pair between `a` and `b`, addresses both ends and brings them up.
    ///
    /// The pair is created directly inside the two namespaces (`ip link add NAME netns A
    /// type veth peer name NAME2 netns B`), so names never collide in the root namespace.
    /// Interfaces are named `eth0`, `eth1`, ... (next free index per node). Addresses carry
    /// a prefix (`10.0.1.1/24`, `fd00:1::1/64`); IPv6 ones are added with `nodad`. An empty
    /// address leaves that end unaddressed; [`Link::addr_a`] adds more later.
    pub fn link(&self, a: &Node, a_addr: &str, b: &Node, b_addr: &str) -> Link {
        let a_if = a.next_ifname();
        let b_if = b.next_ifname();
        run_checked(Command::new("ip").args([
            "link",
            "add",
            &a_if,
            "netns",
            a.name(),
            "type",
            "veth",
            "peer",
            "name",
            &b_if,
            "netns",
            b.name(),
        ]));
        let link = Link::new(a.clone(), a_if, b.clone(), b_if);
        if !a_addr.is_empty() {
            link.addr_a(a_addr);
        }
        if !b_addr.is_empty() {
            link.addr_b(b_addr);
        }
        a.ip(&["link", "set", &link.a_if, "up"]);
        b.ip(&["link", "set", &link.b_if, "up"]);
        link
    }

    fn lock_namespaces(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        // A panic while holding this lock cannot leave the Vec inconsistent.
        self.namespaces.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let namespaces = std::mem::take(&mut *self.lock_namespaces());
        // Kill everything first: a process in ns A may hold a socket talking to ns B.
        for ns in namespaces.iter().rev() {
            kill_all_in(ns);
        }
        for ns in namespaces.iter().rev() {
            if let Err(e) = run_quiet(Command::new("ip").args(["netns", "del", ns])) {
                eprintln!(
                    "relay-testbed: teardown of `{}`: deleting {ns}: {e}",
                    self.test_name
                );
            }
        }
    }
}

/// SIGKILLs every process whose network namespace is `ns` (never this process).
fn kill_all_in(ns: &str) {
    let out = match run_quiet(Command::new("ip").args(["netns", "pids", ns])) {
        Ok(out) => out,
        Err(e) => {
            eprintln!("relay-testbed: teardown: listing pids in {ns}: {e}");
            return;
        }
    };
    let me = std::process::id();
    for pid in out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()) {
        if pid == me {
            continue;
        }
        // SAFETY: kill has no memory-safety preconditions; a stale pid only yields ESRCH.
        let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                eprintln!("relay-testbed: teardown: kill -9 {pid} in {ns}: {err}");
            }
        }
    }
}

/// Deletes namespaces left behind by testbed processes that died without tearing down
/// (SIGKILL, abort, power cut), i.e. `rt{pid}_...` names whose `pid` no longer exists.
///
/// Not called automatically: with several pid namespaces sharing one `/run/netns`, a live
/// process elsewhere would look dead from here. Returns the names deleted.
pub fn cleanup_stale() -> Vec<String> {
    let list = match run_quiet(Command::new("ip").args(["netns", "list"])) {
        Ok(list) => list,
        Err(e) => {
            eprintln!("relay-testbed: cleanup_stale: {e}");
            return Vec::new();
        }
    };
    let mut deleted = Vec::new();
    for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = stale_owner(ns) else { continue };
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if alive {
            continue;
        }
        kill_all_in(ns);
        match run_quiet(Command::new("ip").args(["netns", "del", ns])) {
            Ok(_) => deleted.push(ns.to_owned()),
            Err(e) => eprintln!("relay-testbed: cleanup_stale: deleting {ns}: {e}"),
        }
    }
    deleted
}

/// (average, mdev) RTT in ms from ping's summary line
/// (`rtt min/avg/max/mdev = 0.041/0.052/0.070/0.010 ms[, pipe 2]`), if it has one.
pub fn ping_rtt_ms(output: &str) -> Option<(f64, f64)> {
    let line = output.lines().find(|l| l.contains("min/avg/max"))?;
    let values = line.split('=').nth(1)?.split(" ms").next()?;
    let nums: Vec<f64> = values
        .trim()
        .split('/')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    Some((*nums.get(1)?, *nums.get(3)?))
}

/// Runs a measurement of rates or delays up to `attempts` times, until `attempt` accepts
/// one, and returns it; panics with every attempt's complaint if none is accepted.
///
/// Rates measured on a small shared machine dip when the hypervisor or another process
/// takes the CPU for a moment; a real defect (a class not shaped, traffic in the wrong
/// class) fails every attempt, a passing stall does not. `attempt` gets the attempt number
/// (from 1) and says what was wrong in its `Err`.
pub fn measure_with_retries<T>(
    what: &str,
    attempts: u32,
    mut attempt: impl FnMut(u32) -> Result<T, String>,
) -> T {
    let mut complaints = Vec::new();
    for n in 1..=attempts.max(1) {
        match attempt(n) {
            Ok(v) => return v,
            Err(e) => {
                eprintln!("{what}: attempt {n} of {attempts}: {e}");
                complaints.push(format!("attempt {n}: {e}"));
            }
        }
    }
    panic!("{what}: no attempt passed\n{}", complaints.join("\n"));
}

/// The pid encoded in a namespace name of ours (`rt{pid}_{n}-{node}`), if it is one.
fn stale_owner(ns: &str) -> Option<libc::pid_t> {
    let rest = ns.strip_prefix(NS_PREFIX)?;
    let (pid, rest) = rest.split_once('_')?;
    let (n, _node) = rest.split_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ping_summary_is_parsed() {
        let out = "5 packets transmitted, 5 received, 0% packet loss, time 804ms\n\
                   rtt min/avg/max/mdev = 0.041/0.052/0.070/0.010 ms, pipe 2\n";
        assert_eq!(super::ping_rtt_ms(out), Some((0.052, 0.010)));
        assert_eq!(super::ping_rtt_ms("100% packet loss\n"), None);
    }

    use super::*;

    #[test]
    fn stale_owner_parses_only_our_names() {
        assert_eq!(stale_owner("rt1234_7-src"), Some(1234));
        assert_eq!(stale_owner("rt1234_7-a-b"), Some(1234));
        assert_eq!(stale_owner("rtx_7-src"), None);
        assert_eq!(stale_owner("rt1234-src"), None);
        assert_eq!(stale_owner("ctlexp"), None);
    }
}
