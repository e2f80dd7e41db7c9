//! Handles on one namespace ([`Node`]) and on one veth pair ([`Link`]); both are cheap to
//! clone and own nothing: the [`crate::Testbed`] that made them tears everything down.

use std::io;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

use relay_core::units::parse_rate;

use crate::proc::Proc;
use crate::util::{cmdline, run_checked, run_quiet};

/// Bytes of a full-size Ethernet frame without FCS; `tc` limits are sized in these.
const FRAME_BYTES: u64 = 1514;

/// One network namespace of a testbed: a cheap, cloneable handle holding its name.
#[derive(Clone, Debug)]
pub struct Node {
    inner: Arc<NodeInner>,
}

#[derive(Debug)]
struct NodeInner {
    ns: String,
    label: String,
    next_if: AtomicU32,
}

impl Node {
    pub(crate) fn new(ns: String, label: &str) -> Node {
        Node {
            inner: Arc::new(NodeInner {
                ns,
                label: label.to_owned(),
                next_if: AtomicU32::new(0),
            }),
        }
    }

    /// The namespace name (`rt{pid}_{n}-{label}`), as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.inner.ns
    }

    /// The short name given to [`crate::Testbed::node`], e.g. `"relay"`.
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// The next free `ethN` name on this node; links take them in order.
    pub(crate) fn next_ifname(&self) -> String {
        format!("eth{}", self.inner.next_if.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `ip -n NS ARGS...`; panics with the command line and stderr on failure.
    /// Returns stdout. The escape hatch for anything the typed helpers do not cover.
    pub fn ip(&self, args: &[&str]) -> String {
        run_checked(Command::new("ip").args(["-n", self.name()]).args(args))
    }

    /// Writes a sysctl inside this namespace (`key` in dotted form, e.g.
    /// `net.ipv4.ip_forward`); panics on failure.
    pub fn sysctl(&self, key: &str, value: &str) {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let value = value.to_owned();
        // /proc/sys/net resolves against the opening thread's namespace, so a thread that
        // entered the namespace sees (and writes) the namespace's own values.
        let res = self.run(move || std::fs::write(&path, value).map_err(|e| (path, e)));
        if let Err((path, e)) = res {
            panic!("relay-testbed: writing {path} in {}: {e}", self.name());
        }
    }

    /// Switches IPv4 and IPv6 forwarding inside this namespace on or off.
    pub fn forwarding(&self, on: bool) {
        let v = if on { "1" } else { "0" };
        self.sysctl("net.ipv4.ip_forward", v);
        self.sysctl("net.ipv6.conf.all.forwarding", v);
    }

    /// `ip route add DST via VIA` (with `-6` when either is IPv6); panics with stderr on
    /// failure. `dst` may be `default`.
    pub fn route(&self, dst: &str, via: &str) {
        let mut args = Vec::new();
        if dst.contains(':') || via.contains(':') {
            args.push("-6");
        }
        args.extend(["route", "add", dst, "via", via]);
        self.ip(&args);
    }

    /// A [`Command`] that runs `ip netns exec NS program`; add arguments, pipes and env.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.name(), program]);
        c
    }

    /// Runs `args[0] args[1..]` inside the namespace and returns its output; a non-zero
    /// exit is not an error (check `status`). Panics only if `ip` itself cannot start.
    pub fn exec(&self, args: &[&str]) -> Output {
        let (program, rest) = args
            .split_first()
            .expect("relay-testbed: Node::exec needs a program");
        let mut c = self.cmd(program);
        c.args(rest);
        c.output()
            .unwrap_or_else(|e| panic!("relay-testbed: `{}`: {e}", cmdline(&c)))
    }

    /// Runs `sh -c script` inside the namespace and returns its output (no panic on a
    /// non-zero exit).
    pub fn sh(&self, script: &str) -> Output {
        self.exec(&["sh", "-c", script])
    }

    /// `ping -c1 -W1 dst` from this node; true if a reply came back.
    pub fn ping(&self, dst: &str) -> bool {
        self.exec(&["ping", "-c1", "-W1", dst]).status.success()
    }

    /// The average RTT in ms of `count` pings from this node to `dst`, `interval` apart
    /// (ping's `-i`, e.g. `"0.2"`); panics with ping's output if any went unanswered.
    pub fn ping_avg_ms(&self, dst: &str, count: u32, interval: &str) -> f64 {
        let out = self.exec(&["ping", "-q", "-c", &count.to_string(), "-i", interval, dst]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "ping {dst} failed:\n{text}");
        crate::ping_rtt_ms(&text)
            .unwrap_or_else(|| panic!("no RTT summary from ping:\n{text}"))
            .0
    }

    /// Spawns `cmd` (usually built with [`Node::cmd`]) and wraps the child in a [`Proc`],
    /// which SIGKILLs and reaps it on drop. Piped stdout/stderr are captured in the
    /// background so the child never blocks on a full pipe. Panics if spawning fails.
    pub fn spawn(&self, mut cmd: Command) -> Proc {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("relay-testbed: spawning `{}`: {e}", cmdline(&cmd)));
        Proc::new(child, cmdline(&cmd))
    }

    /// Runs `f` on a fresh thread that has entered this namespace with
    /// `setns(/run/netns/NS, CLONE_NEWNET)`, and returns its result; sockets created by
    /// `f` live in the namespace. A panic in `f` is propagated to the caller.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match self.run_bg(f).join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Like [`Node::run`] but returns the [`JoinHandle`] so `f` runs in the background
    /// (a sink while the test drives a sender, say).
    pub fn run_bg<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let ns = self.name().to_owned();
        std::thread::Builder::new()
            .name(format!("netns {}", self.label()))
            .spawn(move || {
                enter_netns(&ns);
                f()
            })
            .unwrap_or_else(|e| panic!("relay-testbed: spawning a thread for {}: {e}", self.name()))
    }
}

/// Moves the calling thread (only it: network namespaces are per thread) into `ns`.
fn enter_netns(ns: &str) {
    let path = format!("/run/netns/{ns}");
    let file =
        std::fs::File::open(&path).unwrap_or_else(|e| panic!("relay-testbed: opening {path}: {e}"));
    // SAFETY: the fd is valid for the duration of the call; setns does not retain it.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        panic!(
            "relay-testbed: setns({path}, CLONE_NEWNET): {}",
            io::Error::last_os_error()
        );
    }
}

/// A veth pair between two nodes: `a_if` inside `a`, `b_if` inside `b`.
#[derive(Clone, Debug)]
pub struct Link {
    /// Interface name of the pair's end inside node `a` (e.g. `"eth0"`).
    pub a_if: String,
    /// Interface name of the pair's end inside node `b`.
    pub b_if: String,
    a: Node,
    b: Node,
}

impl Link {
    pub(crate) fn new(a: Node, a_if: String, b: Node, b_if: String) -> Link {
        Link { a_if, b_if, a, b }
    }

    /// The node holding `a_if`.
    pub fn a(&self) -> &Node {
        &self.a
    }

    /// The node holding `b_if`.
    pub fn b(&self) -> &Node {
        &self.b
    }

    /// Adds another address (with prefix) to side a; IPv6 ones get `nodad`.
    pub fn addr_a(&self, addr: &str) {
        add_addr(&self.a, &self.a_if, addr);
    }

    /// Adds another address (with prefix) to side b; IPv6 ones get `nodad`.
    pub fn addr_b(&self, addr: &str) {
        add_addr(&self.b, &self.b_if, addr);
    }

    /// Sets the MTU of both ends (e.g. to leave room for an encapsulation header).
    pub fn mtu(&self, mtu: u32) {
        let mtu = mtu.to_string();
        self.a.ip(&["link", "set", &self.a_if, "mtu", &mtu]);
        self.b.ip(&["link", "set", &self.b_if, "mtu", &mtu]);
    }

    /// Token-bucket rate limit on the egress of side a:
    /// `tc qdisc replace dev IF root tbf rate RATE burst B limit L`.
    ///
    /// `rate` is in `tc` syntax (`100mbit`). The queue holds `limit_packets` full frames
    /// (`limit_packets * 1514` bytes); the bucket is `max(rate / 250 Hz, 2 * 1514)` bytes,
    /// enough to keep the rate on a 250 Hz kernel without making bursts visible.
    pub fn tbf_a(&self, rate: &str, limit_packets: u32) -> io::Result<()> {
        tbf(&self.a, &self.a_if, rate, limit_packets)
    }

    /// Same as [`Link::tbf_a`] on the egress of side b.
    pub fn tbf_b(&self, rate: &str, limit_packets: u32) -> io::Result<()> {
        tbf(&self.b, &self.b_if, rate, limit_packets)
    }

    /// Any root qdisc on side a's egress: `tc qdisc replace dev IF root SPEC...`, with
    /// `spec` split on whitespace (e.g. `"netem delay 10ms loss 1%"`).
    pub fn qdisc_a(&self, spec: &str) -> io::Result<()> {
        qdisc(&self.a, &self.a_if, spec)
    }

    /// Same as [`Link::qdisc_a`] on side b.
    pub fn qdisc_b(&self, spec: &str) -> io::Result<()> {
        qdisc(&self.b, &self.b_if, spec)
    }

    /// Removes side a's root qdisc, back to the default.
    pub fn clear_qdisc_a(&self) -> io::Result<()> {
        tc(&self.a, &["qdisc", "del", "dev", &self.a_if, "root"])
    }

    /// Removes side b's root qdisc, back to the default.
    pub fn clear_qdisc_b(&self) -> io::Result<()> {
        tc(&self.b, &["qdisc", "del", "dev", &self.b_if, "root"])
    }
}

fn add_addr(node: &Node, ifname: &str, addr: &str) {
    if addr.contains(':') {
        node.ip(&["-6", "addr", "add", addr, "dev", ifname, "nodad"]);
    } else {
        node.ip(&["addr", "add", addr, "dev", ifname]);
    }
}

fn tbf(node: &Node, ifname: &str, rate: &str, limit_packets: u32) -> io::Result<()> {
    let bits = parse_rate(rate).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("relay-testbed: not a tc rate: {rate:?}"),
        )
    })?;
    let burst = (bits / 8 / 250).max(2 * FRAME_BYTES);
    let limit = u64::from(limit_packets.max(1)) * FRAME_BYTES;
    tc(
        node,
        &[
            "qdisc",
            "replace",
            "dev",
            ifname,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            &burst.to_string(),
            "limit",
            &limit.to_string(),
        ],
    )
}

fn qdisc(node: &Node, ifname: &str, spec: &str) -> io::Result<()> {
    let mut args = vec!["qdisc", "replace", "dev", ifname, "root"];
    args.extend(spec.split_whitespace());
    tc(node, &args)
}

/// Runs `tc ARGS...` inside the node's namespace, mapping failure to an `io::Error` that
/// carries the command line and stderr.
fn tc(node: &Node, args: &[&str]) -> io::Result<()> {
    let mut c = node.cmd("tc");
    c.args(args);
    run_quiet(&mut c).map(drop).map_err(io::Error::other)
}
