//! Shared helpers of relayd's integration tests: run the real `relayd` binary inside a
//! testbed namespace, ask it for status, read the namespace's iptables, push traffic.

#![allow(dead_code, unreachable_pub)]

pub mod strongswan;

use relay_testbed::{Node, Proc};
use relayd::status::Status;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The relayd binary cargo built for this test run.
pub const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("relayd-it-{}-{n}-{tag}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        p
    }
}

/// A directory for key files, removed when dropped, on a path that only root can write:
/// relayd refuses keys that anyone else could replace, so the shared temporary directory
/// (where [`TempDir::new`] puts its directories) will not do. Tries the target's
/// temporary directory, `/run` and `/root`, and keeps the first where a key is accepted.
pub fn key_dir(tag: &str) -> TempDir {
    use relay_svc_crypto::Cipher;
    use std::os::unix::fs::DirBuilderExt;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("relayd-keys-{}-{n}-{tag}", std::process::id());
    for base in [env!("CARGO_TARGET_TMPDIR"), "/run", "/root"] {
        let dir = Path::new(base).join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_err() {
            continue;
        }
        let probe = dir.join("probe");
        let ok = relay_svc_crypto::keygen(Cipher::Aes128Gcm, &probe).is_ok()
            && relay_svc_crypto::load_key(&probe, Cipher::Aes128Gcm).is_ok();
        if ok && std::fs::remove_file(&probe).is_ok() {
            return TempDir(dir);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("no directory on a path only root can write, for key files");
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A relayd process running in a namespace with a given configuration.
pub struct Relayd {
    pub proc: Proc,
    pub dir: TempDir,
    /// Its state directory (`$STATE_DIRECTORY`, where ESP services keep their sequence
    /// state): its own, on a path only root can write, kept across [`Relayd::respawn`].
    pub state: TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub node: Node,
}

impl Relayd {
    /// Writes `body` (the configuration minus `[daemon]`) and starts `relayd run` in
    /// `node`; waits until it says it is running (panics with its log otherwise).
    pub fn start(node: &Node, body: &str) -> Relayd {
        let r = Relayd::spawn(node, body);
        r.wait_running();
        r
    }

    /// Like [`Relayd::start`] but returns at once, while relayd is still starting (the
    /// fault tests kill it at chosen moments of its start-up).
    pub fn spawn(node: &Node, body: &str) -> Relayd {
        let dir = TempDir::new(node.label());
        let socket = dir.0.join("relayd.sock");
        let text = format!("[daemon]\nsocket = \"{}\"\n\n{body}", socket.display());
        let config = dir.file("relayd.toml", &text);
        let state = key_dir("state");
        let proc = Relayd::spawn_proc(node, &config, &state.0, &[]);
        Relayd {
            proc,
            dir,
            state,
            config,
            socket,
            node: node.clone(),
        }
    }

    fn spawn_proc(node: &Node, config: &Path, state: &Path, env: &[(&str, &str)]) -> Proc {
        let mut cmd = node.cmd(RELAYD);
        cmd.env("STATE_DIRECTORY", state);
        cmd.envs(env.iter().copied());
        cmd.args(["run", "-c"]).arg(config).args(["--log", "debug"]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        node.spawn(cmd)
    }

    /// Starts a new `relayd run` on the same configuration file, without waiting, after
    /// the previous process has exited (or been killed: its `Proc` is reaped here).
    pub fn respawn(&mut self) {
        self.respawn_with_env(&[]);
    }

    /// [`Relayd::respawn`] with these environment variables set (test hooks).
    pub fn respawn_with_env(&mut self, env: &[(&str, &str)]) {
        self.proc.kill();
        self.proc = Relayd::spawn_proc(&self.node, &self.config, &self.state.0, env);
    }

    /// Waits until relayd says it is running; panics with its log otherwise.
    pub fn wait_running(&self) {
        if !self
            .proc
            .wait_stderr_contains("relayd running", Duration::from_secs(10))
        {
            panic!("relayd did not start:\n{}", self.proc.stderr_text());
        }
    }

    /// Replaces the configuration file (the daemon section is kept) without signalling.
    pub fn rewrite(&self, body: &str) {
        let text = format!("[daemon]\nsocket = \"{}\"\n\n{body}", self.socket.display());
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn status(&self) -> Status {
        relayd::status::query(&self.socket)
            .unwrap_or_else(|e| panic!("status: {e}\n{}", self.proc.stderr_text()))
    }

    /// Queue `num`'s status (panics if the daemon has no such queue).
    pub fn queue(&self, num: u16) -> relayd::status::QueueStatus {
        self.status()
            .queues
            .into_iter()
            .find(|q| q.num == num)
            .unwrap_or_else(|| panic!("queue {num} not in status"))
    }

    /// Waits until queue `num`'s packet counter has not moved for half a second (the
    /// packets queued before an offload took effect have been answered); returns it.
    pub fn settled(&self, num: u16) -> u64 {
        let mut last = self.queue(num).packets;
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(500));
            let now = self.queue(num).packets;
            if now == last {
                return now;
            }
            last = now;
        }
        panic!("queue {num} never settled: {last} packets\n{}", self.log());
    }

    /// Whether its first IKE connection is established with an installed child SA.
    pub fn ike_up(&self) -> bool {
        self.status()
            .ike
            .first()
            .is_some_and(|i| i.state == "established" && i.children.iter().any(|c| c.installed))
    }

    /// The counters of service instance `name` (panics if it is not running).
    pub fn counters(&self, name: &str) -> std::collections::BTreeMap<String, u64> {
        let st = self.status();
        st.services
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no service {name}"))
            .counters
    }

    /// The counters of a service that re-sends packets (`relay_core::Tally::resend`), after
    /// asserting that every packet counted in `handled` was re-sent or met a full queue,
    /// none failed. Waits up to 2 s for that: a packet in flight may sit between the
    /// service's two increments.
    pub fn assert_all_resent(
        &self,
        name: &str,
        handled: &str,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut c = self.counters(name);
        wait_for(Duration::from_secs(2), || {
            c = self.counters(name);
            c["reinjected"] + c["reinject_queue_full"] + c["reinject_failed"] == c[handled]
        });
        eprintln!("{name}: {c:?}");
        assert_eq!(c["reinject_failed"], 0, "{name}: {c:?}\n{}", self.log());
        assert_eq!(
            c["reinjected"] + c["reinject_queue_full"],
            c[handled],
            "{name}: {c:?}"
        );
        c
    }

    /// Whether the relayd process is still running (not exited, not killed).
    pub fn alive(&mut self) -> bool {
        self.proc.try_wait().is_none()
    }

    pub fn log(&self) -> String {
        self.proc.stderr_text()
    }

    /// Sends `sig` and waits for the exit; returns whether it exited successfully.
    pub fn stop(&mut self, sig: i32) -> bool {
        self.proc.signal(sig).unwrap();
        match self.proc.wait_timeout(Duration::from_secs(10)) {
            Some(st) => st.success(),
            None => panic!("relayd did not exit after signal {sig}:\n{}", self.log()),
        }
    }
}

/// Runs `relayd ARGS` in `node` and returns (exit code, stdout, stderr).
pub fn relayd_cmd(node: &Node, args: &[&str]) -> (i32, String, String) {
    let out = node.cmd(RELAYD).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Everything iptables-save and ip6tables-save print in `node` (all tables).
pub fn iptables_save(node: &Node) -> String {
    let mut s = String::new();
    for prog in ["iptables-save", "ip6tables-save"] {
        let out = node.exec(&[prog]);
        assert!(
            out.status.success(),
            "{prog} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    s
}

/// Polls `f` until it is true or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A UDP flow in progress: a sink bound in the destination namespace and a paced sender
/// in the source namespace, both on their own threads.
pub struct UdpFlow {
    sender: std::thread::JoinHandle<relay_traffic::SendStats>,
    sink: std::thread::JoinHandle<relay_traffic::UdpSinkStats>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl UdpFlow {
    /// Starts sending `size`-byte datagrams at `pps` (None: as fast as possible) for `secs`.
    pub fn start(
        src: &Node,
        dst: &Node,
        dst_addr: SocketAddr,
        pps: Option<u64>,
        size: usize,
        secs: f64,
    ) -> UdpFlow {
        let sock = dst.run(move || UdpSocket::bind(dst_addr).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop_sink = stop.clone();
        let sink = std::thread::spawn(move || {
            relay_traffic::udp_sink_on(
                sock,
                Duration::from_millis(800),
                // Longer than the flow: `finish` stops the sink once the sender is done.
                Duration::from_secs_f64(secs + 60.0),
                Some(&*stop_sink),
            )
            .unwrap()
        });
        let mut cfg = relay_traffic::UdpSendConfig::new(dst_addr);
        cfg.size = size;
        cfg.rate_bps = pps.map(|p| p * ((size as u64 + 28) * 8));
        cfg.duration = Duration::from_secs_f64(secs);
        cfg.ratio = 1.0;
        let src = src.clone();
        let sender =
            std::thread::spawn(move || src.run(move || relay_traffic::udp_send(&cfg).unwrap()));
        UdpFlow { sender, sink, stop }
    }

    /// Waits for the sender, lets what is in flight arrive, and returns both sides' stats.
    pub fn finish(self) -> (relay_traffic::SendStats, relay_traffic::UdpSinkStats) {
        let sent = self.sender.join().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (sent, self.sink.join().unwrap())
    }
}

/// Sends `count` UDP datagrams of `size` bytes from `src` to `dst_addr` (received by a sink
/// bound in `dst`) at `pps`; returns (sent, received).
pub fn udp_exchange(
    src: &Node,
    dst: &Node,
    dst_addr: SocketAddr,
    count: u64,
    pps: u64,
    size: usize,
) -> (u64, u64) {
    let (sent, got) = UdpFlow::start(
        src,
        dst,
        dst_addr,
        Some(pps),
        size,
        count as f64 / pps as f64,
    )
    .finish();
    (sent.packets, got.packets)
}

/// Sends TCP bulk data for `secs` from `src` to `dst` and returns (sent, received) bytes.
pub fn tcp_exchange(src: &Node, dst: &Node, dst_addr: SocketAddr, secs: f64) -> (u64, u64) {
    let listener = dst.run(move || std::net::TcpListener::bind(dst_addr).unwrap());
    let sink = std::thread::spawn(move || relay_traffic::tcp_sink(listener).unwrap());
    let (sent, _) =
        src.run(move || relay_traffic::tcp_send(dst_addr, Duration::from_secs_f64(secs)).unwrap());
    (sent, sink.join().unwrap())
}

/// Sends `bytes` over one TCP connection from `src` to `dst` ([`tcp_transfer_digest`])
/// and asserts that all of them arrived unchanged; `what` names the path in the message.
pub fn assert_tcp_intact(src: &Node, dst: &Node, dst_addr: SocketAddr, bytes: u64, what: &str) {
    let (sent, got, n) = tcp_transfer_digest(src, dst, dst_addr, bytes);
    assert_eq!(n, bytes, "{what}: TCP bytes");
    assert_eq!(sent, got, "{what}: TCP content differs");
}

/// Sends `bytes` of pseudo-random data over one TCP connection from `src` to `dst` and
/// returns the SHA-256 of what was sent and of what arrived, and the bytes that arrived.
pub fn tcp_transfer_digest(
    src: &Node,
    dst: &Node,
    dst_addr: SocketAddr,
    bytes: u64,
) -> ([u8; 32], [u8; 32], u64) {
    use sha2::{Digest, Sha256};
    use std::io::{Read, Write};
    let listener = dst.run(move || std::net::TcpListener::bind(dst_addr).unwrap());
    let sink = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (mut h, mut n, mut buf) = (Sha256::new(), 0u64, vec![0u8; 1 << 16]);
        loop {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    h.update(&buf[..k]);
                    n += k as u64;
                }
                Err(e) => panic!("receiving after {n} bytes: {e}"),
            }
        }
        (<[u8; 32]>::from(h.finalize()), n)
    });
    let sent = src.run(move || {
        let mut c = std::net::TcpStream::connect(dst_addr).unwrap();
        let mut chunk = relay_traffic::Payload::new(1 << 20, 0.0, 7).into_bytes();
        let (mut h, mut left, mut i) = (Sha256::new(), bytes, 0u64);
        while left > 0 {
            // Every chunk differs, so a duplicated or misplaced chunk changes the digest.
            chunk[..8].copy_from_slice(&i.to_be_bytes());
            let k = left.min(chunk.len() as u64) as usize;
            c.write_all(&chunk[..k]).unwrap();
            h.update(&chunk[..k]);
            left -= k as u64;
            i += 1;
        }
        <[u8; 32]>::from(h.finalize())
    });
    let (got, n) = sink.join().unwrap();
    (sent, got, n)
}

/// Sends SIGHUP to `r` and waits until it has applied reload number `n`.
pub fn reload(r: &Relayd, n: u64) {
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || r.status().reloads == n),
        "reload {n} not applied:\n{}",
        r.log()
    );
}

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// `relayd status --json` through the CLI, to test the CLI itself.
pub fn status_cli(node: &Node, socket: &Path) -> serde_json::Value {
    let out = Command::new(RELAYD)
        .args(["status", "--json", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = node;
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Sends raw IPv4 packets from `node` (IP_HDRINCL: the kernel fills in total length and
/// header checksum, and forwards without looking at the transport header).
pub fn send_raw(node: &Node, packets: Vec<Vec<u8>>) {
    node.run(move || {
        // SAFETY: plain socket/sendto calls on buffers that outlive them.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
            assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
            for p in &packets {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as u16;
                sa.sin_addr.s_addr = u32::from_ne_bytes([p[16], p[17], p[18], p[19]]);
                let r = libc::sendto(
                    fd,
                    p.as_ptr() as *const libc::c_void,
                    p.len(),
                    0,
                    &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                );
                assert!(r >= 0, "sendto: {}", std::io::Error::last_os_error());
            }
            libc::close(fd);
        }
    });
}

/// A count from the environment (`RELAYD_FAULT_CYCLES=1000`), or `default` when unset or
/// unreadable: how `make soak` runs the fault suite's long versions.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// (lost, duplicated) datagrams of a [`UdpFlow`]: sequence numbers the sender sent and
/// the sink never saw, and datagrams the sink saw more than once.
pub fn loss_and_duplicates(
    sent: &relay_traffic::SendStats,
    got: &relay_traffic::UdpSinkStats,
) -> (u64, u64) {
    let unique = if got.first.is_some() {
        got.max_seq + 1 - got.lost
    } else {
        0
    };
    (
        sent.packets.saturating_sub(unique),
        (got.packets - got.short).saturating_sub(unique),
    )
}

/// One line of `/proc/net/netfilter/nfnetlink_queue`: the kernel's own view of a bound
/// queue in a namespace, whatever relayd reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelQueue {
    /// Queue number.
    pub num: u16,
    /// Netlink port id of the bound socket.
    pub portid: u32,
    /// Packets waiting for a verdict.
    pub waiting: u64,
    /// Packets dropped because the queue was full (`max_len`), fail-closed queues only.
    pub queue_dropped: u64,
    /// Packets dropped because they could not be delivered to the socket (ENOBUFS).
    pub user_dropped: u64,
}

/// The queues bound in `node`, as the kernel lists them.
pub fn kernel_queues(node: &Node) -> Vec<KernelQueue> {
    let out = node.exec(&["cat", "/proc/net/netfilter/nfnetlink_queue"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .map(|w| w.parse().ok())
                .collect::<Option<_>>()?;
            Some(KernelQueue {
                num: u16::try_from(*f.first()?).ok()?,
                portid: u32::try_from(*f.get(1)?).ok()?,
                waiting: *f.get(2)?,
                queue_dropped: *f.get(5)?,
                user_dropped: *f.get(6)?,
            })
        })
        .collect()
}

/// Everything relayd can leave in a namespace, one named section per kind of trace, each
/// normalised so that two captures of the same state compare equal: iptables and
/// ip6tables (nf_tables and legacy) rules and user chains, tc qdiscs, ip rules, routes of
/// every table, and the queues the kernel has bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostState {
    /// (kind, normalised text), in a fixed order.
    pub sections: Vec<(&'static str, String)>,
}

impl HostState {
    /// Captures `node`'s state now.
    pub fn capture(node: &Node) -> HostState {
        let mut sections = Vec::new();
        for (kind, prog) in [
            ("iptables-nft", "iptables-nft-save"),
            ("ip6tables-nft", "ip6tables-nft-save"),
            ("iptables-legacy", "iptables-legacy-save"),
            ("ip6tables-legacy", "ip6tables-legacy-save"),
        ] {
            let out = node.exec(&[prog]);
            assert!(
                out.status.success(),
                "{prog} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            sections.push((kind, rules_only(&String::from_utf8_lossy(&out.stdout))));
        }
        let tc = node.exec(&["tc", "qdisc", "show"]);
        sections.push((
            "tc qdisc",
            without_counts(&String::from_utf8_lossy(&tc.stdout)),
        ));
        sections.push(("ip rule", node.ip(&["-4", "rule"])));
        sections.push(("ip -6 rule", node.ip(&["-6", "rule"])));
        sections.push((
            "ip route",
            node.ip(&["-4", "route", "show", "table", "all"]),
        ));
        sections.push((
            "ip -6 route",
            node.ip(&["-6", "route", "show", "table", "all"]),
        ));
        let queues: Vec<String> = kernel_queues(node)
            .iter()
            .map(|q| q.num.to_string())
            .collect();
        sections.push(("bound queues", queues.join(" ")));
        // XDP programs attached to an interface (`prog/xdp id N` in `ip -d link`).
        let xdp: Vec<String> = node
            .ip(&["-d", "-o", "link", "show"])
            .lines()
            .filter(|l| l.contains("prog/xdp"))
            .filter_map(|l| l.split(':').nth(1).map(|n| n.trim().to_string()))
            .collect();
        sections.push(("xdp programs", xdp.join(" ")));
        HostState { sections }
    }

    /// Every section, headed by its kind: for `contains` checks and messages.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (kind, text) in &self.sections {
            s.push_str(&format!("--- {kind}\n{text}\n"));
        }
        s
    }

    /// The kinds in which `self` and `other` differ.
    pub fn differing(&self, other: &HostState) -> Vec<&'static str> {
        self.sections
            .iter()
            .zip(&other.sections)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect()
    }

    /// The sections in which `self` differs from `expected`, both sides, for a message.
    pub fn diff(&self, expected: &HostState) -> String {
        let mut s = String::new();
        for ((kind, now), (_, want)) in self.sections.iter().zip(&expected.sections) {
            if now != want {
                s.push_str(&format!(
                    "--- {kind}, expected:\n{want}\n--- {kind}, found:\n{now}\n"
                ));
            }
        }
        s
    }
}

/// `tc qdisc show` output without the one statistic it prints (htb's
/// `direct_packets_stat`).
fn without_counts(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut skip = false;
        for w in line.split_whitespace() {
            if !std::mem::take(&mut skip) {
                out.push_str(w);
                out.push(' ');
            }
            skip = w == "direct_packets_stat";
        }
        out.push('\n');
    }
    out
}

/// The rules and user chains of an iptables-save text, each line prefixed by its table;
/// without comments, built-in chain policies and counters (an empty built-in table that
/// iptables-nft creates on first use, and packet counts, are not a trace).
fn rules_only(save: &str) -> String {
    const BUILTIN: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
    let mut out = String::new();
    let mut table = "";
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t;
        } else if line.starts_with("-A") {
            out.push_str(&format!("{table}: {line}\n"));
        } else if let Some(chain) = line.strip_prefix(':').and_then(|c| c.split(' ').next())
            && !BUILTIN.contains(&chain)
        {
            out.push_str(&format!("{table}: chain {chain}\n"));
        }
    }
    out
}

/// The processes left in `node`'s namespace (`ip netns pids`).
pub fn netns_pids(node: &Node) -> Vec<u32> {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", node.name()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The MAC address of interface `ifname` in `node`.
pub fn mac_of(node: &Node, ifname: &str) -> [u8; 6] {
    let text = node.ip(&["-br", "link", "show", "dev", ifname]);
    let word = text
        .split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no MAC in {text:?}"));
    let mut mac = [0u8; 6];
    for (i, b) in word.split(':').enumerate() {
        mac[i] = u8::from_str_radix(b, 16).unwrap();
    }
    mac
}

/// Sends each `(ethertype, network-layer bytes)` from `node`'s interface `ifname` to
/// `dst_mac` through a packet socket, paced to `pps`, untouched by the sender's IP stack:
/// unlike [`send_raw`], any header can be wrong (length, IHL, checksum, version).
/// Returns the frames sent (a frame the driver refuses is not counted).
pub fn send_frames(
    node: &Node,
    ifname: &str,
    dst_mac: [u8; 6],
    frames: Vec<(u16, Vec<u8>)>,
    pps: u64,
) -> u64 {
    let ifname = std::ffi::CString::new(ifname).unwrap();
    node.run(move || {
        // SAFETY: plain socket/sendto calls on buffers that outlive them.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, 0);
            assert!(
                fd >= 0,
                "packet socket: {}",
                std::io::Error::last_os_error()
            );
            let index = libc::if_nametoindex(ifname.as_ptr());
            assert!(index > 0, "no interface {ifname:?}");
            let start = Instant::now();
            let mut sent = 0u64;
            for (i, (ethertype, p)) in frames.iter().enumerate() {
                let due = start + Duration::from_secs_f64(i as f64 / pps as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let mut sa: libc::sockaddr_ll = std::mem::zeroed();
                sa.sll_family = libc::AF_PACKET as u16;
                sa.sll_protocol = ethertype.to_be();
                sa.sll_ifindex = index as i32;
                sa.sll_halen = 6;
                sa.sll_addr[..6].copy_from_slice(&dst_mac);
                let r = libc::sendto(
                    fd,
                    p.as_ptr() as *const libc::c_void,
                    p.len(),
                    0,
                    &sa as *const libc::sockaddr_ll as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                if r >= 0 {
                    sent += 1;
                }
            }
            libc::close(fd);
            sent
        }
    })
}

/// Inserts, at the top of raw PREROUTING in `node`, a rule without a target that counts
/// packets arriving on `ifname` matching `what` (iptables match words), named `tag`
/// ([`read_count_with`]). `tool` is `iptables` or `ip6tables`.
pub fn count_arrivals_with(tool: &str, node: &Node, ifname: &str, what: &[&str], tag: &str) {
    let mut args = vec![tool, "-t", "raw", "-I", "PREROUTING", "-i", ifname];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-m", "comment", "--comment", tag]);
    let out = node.exec(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The packet count of the counting rule named `tag` ([`count_arrivals_with`]).
pub fn read_count_with(tool: &str, node: &Node, tag: &str) -> u64 {
    let out = node.exec(&[tool, "-t", "raw", "-L", "PREROUTING", "-v", "-n", "-x"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let needle = format!("/* {tag} */");
    text.lines()
        .find(|l| l.contains(&needle))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rule with {needle}:\n{text}"))
}

/// One thread of another process stopped with ptrace (`PTRACE_SEIZE`, then
/// `PTRACE_INTERRUPT`): the rest of the process runs on, whereas any stop signal stops
/// every thread. The tracer is a thread of the test (ptrace belongs to the thread that
/// attached); dropping the value detaches, and the thread resumes.
pub struct Freeze {
    release: Option<std::sync::mpsc::Sender<()>>,
    tracer: Option<std::thread::JoinHandle<()>>,
}

impl Freeze {
    pub fn thread(tid: i32) -> Freeze {
        let (stopped_tx, stopped_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let tracer = std::thread::spawn(move || {
            let null = std::ptr::null_mut::<libc::c_void>();
            let err = |what: &str| format!("{what} {tid}: {}", std::io::Error::last_os_error());
            // SAFETY: ptrace and waitpid on a thread id, with no memory handed over.
            unsafe {
                if libc::ptrace(libc::PTRACE_SEIZE, tid, null, null) != 0 {
                    let _ = stopped_tx.send(Err(err("PTRACE_SEIZE")));
                    return;
                }
                if libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null) != 0 {
                    let _ = stopped_tx.send(Err(err("PTRACE_INTERRUPT")));
                    return;
                }
                let mut status = 0;
                if libc::waitpid(tid, &mut status, libc::__WALL) != tid {
                    let _ = stopped_tx.send(Err(err("waitpid")));
                    return;
                }
                if !libc::WIFSTOPPED(status) {
                    let _ = stopped_tx.send(Err(format!("thread {tid}: wait status {status:#x}")));
                    return;
                }
                let _ = stopped_tx.send(Ok(()));
                let _ = released.recv();
                libc::ptrace(libc::PTRACE_DETACH, tid, null, null);
            }
        });
        match stopped_rx.recv() {
            Ok(Ok(())) => Freeze {
                release: Some(release),
                tracer: Some(tracer),
            },
            Ok(Err(e)) => panic!("freezing thread {tid}: {e}"),
            Err(_) => panic!("freezing thread {tid}: the tracer thread ended"),
        }
    }
}

impl Drop for Freeze {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(t) = self.tracer.take() {
            let _ = t.join();
        }
    }
}

/// Runs `relayd status --socket SOCKET` as nobody with primary group `group` and no
/// other: (success, stderr).
pub fn status_as(group: &str, socket: &Path) -> (bool, String) {
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=nobody",
            &format!("--regid={group}"),
            "--clear-groups",
            RELAYD,
        ])
        .args(["status", "--socket"])
        .arg(socket)
        .output()
        .expect("running setpriv");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The thread id of `pid`'s thread named `name`.
pub fn thread_named(pid: u32, name: &str) -> i32 {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            return dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        }
    }
    panic!("relayd (pid {pid}) has no thread named {name}");
}

/// An AF_PACKET socket in `node` that reads every IPv4 packet crossing `ifname` (without
/// its link header), with a 50 ms receive timeout so that a reader thread can check for
/// its stop: how the ESP tests decode the wire.
pub fn ipv4_capture_socket(node: &Node, ifname: &str) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let ifname = ifname.to_string();
    node.run(move || {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: plain socket calls; the descriptor is owned from here on.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, proto as i32);
            assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
            let name = std::ffi::CString::new(ifname).unwrap();
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            let r = libc::bind(
                fd,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 50_000,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            std::os::fd::OwnedFd::from_raw_fd(fd)
        }
    })
}

/// Waits up to 10 s for both relays' IKE connection ([`Relayd::ike_up`]); panics with both
/// logs.
pub fn wait_ike_pair(a: &Relayd, b: &Relayd) {
    assert!(
        wait_for(Duration::from_secs(10), || a.ike_up() && b.ike_up()),
        "--- a\n{}\n--- b\n{}",
        a.log(),
        b.log()
    );
}

/// Writes a pre-shared key file as relayd wants it (mode 600, created anew).
pub fn write_psk(path: &Path, psk: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    writeln!(f, "{psk}").unwrap();
}

/// A TCP connection from `node`, from the IPv4 address and port `from` (bound with
/// `SO_REUSEADDR`, so that a new connection can take a closed one's tuple at once) to
/// `to`.
pub fn connect_from(node: &Node, from: SocketAddr, to: SocketAddr) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let sin = |a: SocketAddr| {
        let SocketAddr::V4(a) = a else {
            panic!("connect_from: IPv4 only, not {a}")
        };
        libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            },
            sin_zero: [0; 8],
        }
    };
    let (me, peer) = (sin(from), sin(to));
    node.run(move || {
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        // SAFETY: plain socket calls on a descriptor this closure owns (handed to the
        // stream at the end), with values that outlive the calls.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let one: libc::c_int = 1;
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
            assert_eq!(rc, 0, "SO_REUSEADDR: {}", std::io::Error::last_os_error());
            let rc = libc::bind(fd, &me as *const _ as *const libc::sockaddr, len);
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let rc = libc::connect(fd, &peer as *const _ as *const libc::sockaddr, len);
            assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
            std::net::TcpStream::from_raw_fd(fd)
        }
    })
}

/// Closes `c` with a reset (`SO_LINGER` 0) instead of a FIN: the connection is gone at
/// once on both ends.
pub fn close_with_reset(c: std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on the stream's own descriptor with a value that outlives it.
    let rc = unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
}
