//! Passthrough benchmark, per core: what one core of relay work forwards and what a packet
//! costs it, relayd against the kernel's own forwarding in the same run
//! (/work/shared/MEASURING.md; docs/performance.md has the figures and how to read them).
//!
//! Testbed: src -- relay -- dst over veth. All of the relay's work runs on the *relay
//! core*: the relay's ingress veth receives in a threaded NAPI pinned there (RELAY_RX=napi,
//! the default; RELAY_RX=rps steers it to the relay core's softirq with RPS instead), and
//! with it go the kernel's forwarding and NFQUEUE enqueueing; RPS puts the other veth's
//! receive work there too, and relayd's queue thread is pinned there with the queue's
//! `cpu` option, at `nice = -5` (QUEUE_NICE), as docs/operations.md recommends. The
//! generator, the sinks and RPS on the src and dst veths use the *traffic core*. Delivered packets are counted on the
//! dst veth's receive counter, the same way for every path (a compressed packet is IPComp,
//! which no UDP socket would count); during UDP throughput measurements dst drops the
//! datagrams in its raw PREROUTING chain, after the counter, so no sink competes with the
//! generator.
//!
//! Every measurement prints each CPU's busy share over its window (from /proc/stat). The
//! figures, each the median of ROUNDS interleaved rounds and each as a ratio to the kernel
//! measured in the same run:
//! - relay-core CPU time per delivered packet at 30 % and 60 % of relayd's RFC 2544 rate
//!   and in a flood, kernel against relayd `accept`, and the rate at which relayd
//!   saturates its core;
//! - RFC 2544 throughput (the highest offered rate with loss <= 0.1 %, by binary search)
//!   at 64 and 1,500 bytes for the kernel (when one generator core can saturate it;
//!   otherwise its CPU per packet), relayd `accept` and relayd with `compress` (LZ4,
//!   `mode = "always"`);
//! - an overload curve, delivered against offered from 0.25x to 4x relayd's RFC 2544 rate,
//!   for the kernel and relayd fail-open and fail-closed (docs/overload.dat and .png);
//! - added latency at 10 % and 50 % of relayd's RFC 2544 rate: p50, p99, p99.9 of every
//!   datagram's one-way delay, timed by the kernel at dst;
//! - one TCP flow, relayd with GSO on and off: throughput and relay-core CPU per byte.
//!
//! The RFC 2544 table also has relayd `accept` on the AF_XDP datapath (an `[[xdp]]` port on
//! the relay's ingress veth, docs/xdp.md): its XDP program runs in that veth's NAPI on the
//! relay core, relayd's `relayd-xdp0` thread is pinned there too. XDP=1 runs only the
//! AF_XDP datapath's targets (issue 16; see `passthrough/xdp.rs`). The full run ends with
//! the flow offload comparisons of issue 27 (`passthrough/offload.rs`): one TCP flow and a
//! mixed workload through `ids` with and without offload and through Suricata 7 in NFQ IPS
//! mode with and without its bypass; OFFLOAD=1 runs only those.
//!
//! Run: `make bench-passthrough` (root, about 15 minutes). Environment: ROUNDS (default 3),
//! SECS per measurement (default 3), TRIALS per RFC 2544 search (default 8), SMOKE=1 (one
//! round of one second, tiny searches, nothing written: what `make test` runs), PROFILE=1
//! (only `perf record -C RELAY -g` of a flood, or of PROFILE_PPS packets/s, through the
//! kernel and relayd `accept`, and the top of `perf report`; PROFILE_KEEP=1 keeps the
//! perf data for `perf report -i`), SIZING=1 (only the
//! packets/s-per-core table of `accept` and each service, `make bench-sizing`; with
//! SIZING_ONLY=TEXT only the rows whose name contains TEXT),
//! PROBE=x,y,.. (a quick look while tuning: the kernel and relayd `accept` at those
//! multiples of R64 packets/s, and latency at 10 % and 50 % of it), XDP=1 (only the
//! AF_XDP comparisons, written to target/bench-xdp.md), XDP_BATCH (the XDP port's
//! `batch`), RELAY_RX, QUEUE_NICE, OFFLOAD=1 (only the flow offload comparisons; their
//! knobs in `passthrough/offload.rs`).

#[path = "passthrough/offload.rs"]
mod offload;
#[path = "passthrough/xdp.rs"]
mod xdp;

use relay_testbed::{Line3, Node, Proc, line3};
use std::fmt::Write as _;
use std::io::{Read, Seek};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");
/// The UDP port datagrams go to.
const PORT: u16 = 9000;
/// Loss allowed by the RFC 2544 throughput definition used here.
const MAX_LOSS: f64 = 0.001;
/// IP + UDP header bytes: a "64-byte packet" is 64 bytes of IP packet.
const IP_UDP: usize = 28;

// ---------------------------------------------------------------------------------------
// Knobs

struct Knobs {
    rounds: usize,
    secs: f64,
    /// Traffic before a measuring window opens (neighbours, queues filled, steady state).
    warm: f64,
    trials: usize,
    smoke: bool,
    relay_cpu: usize,
    traffic_cpu: usize,
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

impl Knobs {
    fn from_env() -> Knobs {
        let smoke = std::env::var("SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
        let cpus = relay_nfq::available_cpus().expect("sched_getaffinity");
        // Two distinct cores if there are two; one machine of one core still runs (smoke).
        let traffic_cpu = cpus[0];
        let relay_cpu = cpus.get(1).copied().unwrap_or(traffic_cpu);
        Knobs {
            rounds: if smoke {
                1
            } else {
                env_num("ROUNDS", 3usize).max(1)
            },
            secs: env_num("SECS", if smoke { 1.0 } else { 3.0f64 }).max(0.2),
            warm: if smoke { 0.1 } else { 0.3 },
            trials: if smoke {
                1
            } else {
                env_num("TRIALS", 8usize).max(1)
            },
            smoke,
            relay_cpu,
            traffic_cpu,
        }
    }
}

// ---------------------------------------------------------------------------------------
// CPU time from /proc/stat

/// One CPU's counters from /proc/stat, in clock ticks.
#[derive(Clone, Copy, Default, Debug)]
struct CpuTicks {
    /// idle + iowait: measured at idle entry and exit (NO_HZ), to the microsecond, and
    /// excluding interrupts taken while idle.
    idle: u64,
    steal: u64,
}

/// All CPUs' counters and when they were read.
struct CpuSnap {
    at: Instant,
    cpus: Vec<CpuTicks>,
}

fn read_cpus() -> CpuSnap {
    let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let at = Instant::now();
    let mut cpus = Vec::new();
    for line in text.lines() {
        // "cpuN ..." lines; not the "cpu  ..." total.
        let Some(rest) = line.strip_prefix("cpu").filter(|r| !r.starts_with(' ')) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let Some(Ok(n)) = f.next().map(str::parse::<usize>) else {
            continue;
        };
        // user nice system idle iowait irq softirq steal
        let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
        if v.len() < 8 {
            continue;
        }
        if cpus.len() <= n {
            cpus.resize(n + 1, CpuTicks::default());
        }
        cpus[n] = CpuTicks {
            idle: v[3] + v[4],
            steal: v[7],
        };
    }
    CpuSnap { at, cpus }
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

/// Busy share and busy seconds of each CPU between two readings.
#[derive(Clone, Debug, Default)]
struct CpuUse {
    /// Busy / wall time, per CPU.
    share: Vec<f64>,
    /// Stolen by the hypervisor / wall time, per CPU.
    steal: Vec<f64>,
    /// Busy seconds, per CPU.
    busy_s: Vec<f64>,
}

/// Busy = wall time - idle - steal. Not the sum of the user, system, irq and softirq
/// columns: without IRQ_TIME_ACCOUNTING those are sampled by the timer tick, which
/// NO_HZ stops while a CPU idles, so softirq work done between idle periods (the kernel
/// forwarding a packet, say) is mostly never sampled, while the idle column is measured.
fn cpu_use(a: &CpuSnap, b: &CpuSnap) -> CpuUse {
    let hz = ticks_per_sec();
    let wall = (b.at - a.at).as_secs_f64().max(1e-3);
    let mut u = CpuUse::default();
    for (x, y) in a.cpus.iter().zip(&b.cpus) {
        let idle = y.idle.saturating_sub(x.idle) as f64 / hz;
        let steal = y.steal.saturating_sub(x.steal) as f64 / hz;
        let busy = (wall - idle - steal).clamp(0.0, wall);
        u.share.push(busy / wall);
        u.steal.push(steal / wall);
        u.busy_s.push(busy);
    }
    u
}

// ---------------------------------------------------------------------------------------
// The testbed

struct Bed {
    l: Line3,
    /// /proc/net/dev of the dst namespace, opened from inside it.
    dst_dev: std::fs::File,
    k: Knobs,
    /// dst drops the bench's UDP datagrams in raw PREROUTING (after the counter).
    dropping: bool,
    /// How the relay core receives what src sends.
    rx: Rx,
}

/// How the relay core receives from src. Either way all of it runs on the relay core.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rx {
    /// The relay's ingress veth receives in its own NAPI (GRO on), run by a kernel thread
    /// (`threaded` = 1) pinned to the relay core: receive work is a thread the scheduler
    /// shares with relayd's queue thread, as on a router with `threaded` NAPI on its NIC.
    /// The default (RELAY_RX=napi).
    Napi,
    /// RPS steers receive work to the relay core's softirq (RELAY_RX=rps), which preempts
    /// relayd's thread whenever packets arrive: receive livelock under overload.
    Rps,
}

impl Rx {
    fn default_from_env() -> Rx {
        match std::env::var("RELAY_RX").as_deref() {
            Ok("rps") => Rx::Rps,
            Ok("napi") | Err(_) => Rx::Napi,
            Ok(other) => panic!("RELAY_RX={other}: napi or rps"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Rx::Napi => "threaded NAPI",
            Rx::Rps => "RPS softirq",
        }
    }
}

/// src's qdisc: what holds packets while the relay's NAPI ring is full (see [`Bed::new`]).
const SRC_QDISC: &str = "tc qdisc replace dev eth0 root pfifo limit 1000";

fn proc_net_dev(node: &Node) -> std::fs::File {
    node.run(|| std::fs::File::open("/proc/thread-self/net/dev").expect("net/dev"))
}

/// Received packets of `ifname` in a /proc/net/dev file.
fn rx_packets(f: &mut std::fs::File, ifname: &str) -> u64 {
    rx_counter(f, ifname, 1)
}

/// Received bytes of `ifname` in a /proc/net/dev file (frames, Ethernet header included).
fn rx_bytes(f: &mut std::fs::File, ifname: &str) -> u64 {
    rx_counter(f, ifname, 0)
}

/// Receive column `col` (0 bytes, 1 packets) of `ifname` in a /proc/net/dev file.
fn rx_counter(f: &mut std::fs::File, ifname: &str, col: usize) -> u64 {
    let mut text = String::new();
    f.rewind().expect("rewind net/dev");
    f.read_to_string(&mut text).expect("read net/dev");
    let key = format!("{ifname}:");
    text.lines()
        .find_map(|l| {
            let rest = l.trim_start().strip_prefix(&key)?;
            rest.split_whitespace().nth(col)?.parse().ok()
        })
        .unwrap_or_else(|| panic!("{ifname} not in net/dev:\n{text}"))
}

/// Kernel threads whose name starts with `napi/`, by pid.
fn napi_threads() -> Vec<(u32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.starts_with("napi/") {
            v.push((pid, comm.trim().to_string()));
        }
    }
    v
}

/// Pins the task (thread) `tid`, called `name` in messages, to `cpu`.
fn pin_task(tid: u32, cpu: usize, name: &str) {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET stays within it (the CPU
    // came from sched_getaffinity); the pointer and size describe that one set.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "pinning {name}: {}", std::io::Error::last_os_error());
}

/// Gives the task (thread) `tid`, called `name` in messages, the queues' nice value
/// (QUEUE_NICE, default -5), as relayd does for a queue's `nice`: for the threads the
/// bench places itself (an XDP port's, a peer's worker), so that every path shares the
/// relay core with the NAPI thread on the same terms.
fn set_nice(tid: u32, name: &str) {
    let nice: i32 = env_num("QUEUE_NICE", -5);
    // SAFETY: setpriority takes plain integers and has no memory effects.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    assert_eq!(
        rc,
        0,
        "nice {nice} for {name}: {}",
        std::io::Error::last_os_error()
    );
}

fn sh(node: &Node, script: &str) {
    let out = node.sh(script);
    assert!(
        out.status.success(),
        "{}: {script}: {}",
        node.label(),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Bed {
    fn new(k: Knobs) -> Bed {
        let l = line3("passthrough");
        let relay_mask = format!("{:x}", 1u64 << k.relay_cpu);
        let traffic_mask = format!("{:x}", 1u64 << k.traffic_cpu);
        // The relay's receive work (both directions) on the relay core; src's and dst's
        // on the traffic core.
        for (node, ifs, mask) in [
            (&l.relay, &["eth0", "eth1"][..], &relay_mask),
            (&l.src, &["eth0"][..], &traffic_mask),
            (&l.dst, &["eth0"][..], &traffic_mask),
        ] {
            for i in ifs {
                let out = node.sh(&format!(
                    "echo {mask} > /sys/class/net/{i}/queues/rx-0/rps_cpus"
                ));
                if !out.status.success() {
                    // A kernel without RPS still runs the bench; the split is then wrong.
                    println!(
                        "WARNING: no RPS on {} {i} ({}): receive work stays on the sending core",
                        node.label(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        // veth hands a packet to the receiver's NAPI (rather than to netif_rx, and so to
        // RPS) only if the sender's device does no TSO or the packet qualifies for UDP GRO
        // forwarding: src's veth without TSO sends everything through the relay's NAPI
        // (TCP goes out segmented in software; the relay's GRO puts it back together).
        sh(&l.src, "ethtool -K eth0 tso off");
        // A veth that offloads transmit checksums leaves UDP and TCP checksums unfinished
        // in the bytes (the kernel would finish them from the skb's state). XDP and
        // AF_XDP see and forward bytes, so dst would drop every datagram relayd's XDP
        // queue forwards, after its interface counter counted it as delivered: the bench
        // would lie. src finishes its checksums in software, for every path alike (a real
        // NIC delivers finished checksums too; tests/xdp.rs does the same).
        sh(&l.src, "ethtool -K eth0 tx off");
        // veth's NAPI ring holds 256 packets; when it is full veth stops src's transmit
        // queue, and a qdisc there holds what follows, as a NIC's deeper receive ring would
        // (RPS's backlog holds 1,000). Without it a few milliseconds without the NAPI
        // thread lose packets at any load. What overflows is dropped on the traffic core.
        sh(&l.src, SRC_QDISC);
        assert!(l.src.ping("10.0.2.2"), "no path src -> dst");
        let dst_dev = proc_net_dev(&l.dst);
        let mut bed = Bed {
            l,
            dst_dev,
            k,
            dropping: false,
            rx: Rx::Rps,
        };
        bed.set_rx(Rx::default_from_env());
        bed
    }

    /// Switches how the relay core receives from src (see [`Rx`]).
    fn set_rx(&mut self, rx: Rx) {
        if rx == self.rx {
            return;
        }
        let relay = &self.l.relay;
        match rx {
            Rx::Napi => {
                let before = napi_threads();
                sh(
                    relay,
                    "echo 0 > /sys/class/net/eth0/queues/rx-0/rps_cpus && ethtool -K eth0 gro on && echo 1 > /sys/class/net/eth0/threaded",
                );
                let new: Vec<_> = napi_threads()
                    .into_iter()
                    .filter(|t| !before.contains(t))
                    .collect();
                assert_eq!(
                    new.len(),
                    1,
                    "one new NAPI thread for the relay's eth0: {new:?}"
                );
                let (pid, name) = &new[0];
                pin_task(*pid, self.k.relay_cpu, name);
            }
            Rx::Rps => sh(
                relay,
                &format!(
                    "echo 0 > /sys/class/net/eth0/threaded && ethtool -K eth0 gro off && echo {:x} > /sys/class/net/eth0/queues/rx-0/rps_cpus",
                    1u64 << self.k.relay_cpu
                ),
            ),
        }
        self.rx = rx;
    }

    fn delivered(&mut self) -> u64 {
        rx_packets(&mut self.dst_dev, "eth0")
    }

    /// Drops the bench's traffic at dst right after the interface counted it (UDP
    /// throughput), or stops doing so (latency and TCP need the sockets).
    fn dst_drops(&mut self, on: bool) {
        if on == self.dropping {
            return;
        }
        let op = if on { "-I" } else { "-D" };
        // 10.0.2.1: the outer source of what the relay encapsulates (ESP tunnel, MPLS).
        for src in ["10.0.1.1", "10.0.2.1"] {
            sh(
                &self.l.dst,
                &format!("iptables -w -t raw {op} PREROUTING -s {src} -j DROP"),
            );
        }
        self.dropping = on;
    }
}

// ---------------------------------------------------------------------------------------
// relayd

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Kernel,
    /// relayd `accept`; fail-open or fail-closed.
    Accept {
        fail_open: bool,
    },
    /// relayd `accept`, GSO off.
    AcceptNoGso,
    /// relayd `compress` (LZ4, always).
    Compress,
    /// relayd `encrypt` (AES-128-GCM, transport mode) of what goes to 10.0.2.0/24.
    Encrypt,
    /// relayd `accept` on an `[[xdp]]` port, fail-closed.
    XdpAccept,
    /// relayd `compress` (LZ4, always) on an `[[xdp]]` port, fail-closed.
    XdpCompress,
    /// [`Path::Encrypt`]'s service on an `[[xdp]]` port, fail-closed.
    XdpEncrypt,
    /// Row `i` of the sizing table (SIZING=1; see [`sized`]).
    Sized(usize),
    /// relayd `ids` with the offload section's rules (OFFLOAD_RULES), fail-closed, with or
    /// without `offload` (OFFLOAD=1; see `passthrough/offload.rs`).
    Ids {
        offload: bool,
    },
    /// Suricata 7 in NFQ IPS mode with the same rules, Debian's configuration or with its
    /// flow bypass (see `passthrough/offload.rs`).
    Suricata {
        bypass: bool,
    },
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Kernel => "kernel forwarding",
            Path::Accept { fail_open: false } => "relayd accept",
            Path::Accept { fail_open: true } => "relayd accept, fail-open",
            Path::AcceptNoGso => "relayd accept, GSO off",
            Path::Compress => "relayd compress (LZ4, always)",
            Path::Encrypt => "relayd encrypt (AES-128-GCM)",
            Path::XdpAccept => "relayd accept, XDP",
            Path::XdpCompress => "relayd compress (LZ4), XDP",
            Path::XdpEncrypt => "relayd encrypt (AES-128-GCM), XDP",
            Path::Sized(i) => sized()[i].name,
            Path::Ids { offload: false } => "relayd ids",
            Path::Ids { offload: true } => "relayd ids, offload",
            Path::Suricata { bypass: false } => "Suricata 7, Debian defaults",
            Path::Suricata { bypass: true } => "Suricata 7, bypass",
        }
    }

    /// Runs on the AF_XDP datapath (an `[[xdp]]` port) rather than NFQUEUE.
    fn is_xdp(self) -> bool {
        matches!(self, Path::XdpAccept | Path::XdpCompress | Path::XdpEncrypt)
    }

    /// The name of the relay's relayd thread that serves the path's packets.
    fn thread(self) -> &'static str {
        if self.is_xdp() {
            "relayd-xdp0"
        } else {
            "relayd-q0"
        }
    }

    /// The configuration: the queue on the relay core, at `nice` (QUEUE_NICE, default -5,
    /// as docs/operations.md recommends beside threaded NAPI).
    fn body(self, cpu: usize) -> Option<String> {
        let queue = |extra: &str, services: &str| queue_body("forward", cpu, extra, services);
        Some(match self {
            Path::Sized(i) => {
                let q = &sized()[i].relay;
                queue(&q.extra, &q.services) + &q.sections
            }
            Path::Kernel | Path::Suricata { .. } => return None,
            Path::Ids { offload } => {
                let extra = if offload {
                    "fail_open = false\noffload = true\n"
                } else {
                    "fail_open = false\n"
                };
                let keys = if offload {
                    offload::ids_keys()
                } else {
                    String::new()
                };
                queue(extra, "\"ids\"") + &ids_section(&offload::rules(), &keys)
            }
            Path::Accept { fail_open } => {
                queue(&format!("fail_open = {fail_open}\n"), "\"accept\"")
            }
            Path::AcceptNoGso => queue("fail_open = false\ngso = false\n", "\"accept\""),
            Path::Compress => queue("fail_open = false\n", "\"lz4\"") + LZ4,
            Path::Encrypt => {
                queue("fail_open = false\nmatch = \"-d 10.0.2.0/24\"\n", "\"esp\"") + &esp_section()
            }
            Path::XdpAccept => xdp_body(cpu, "\"accept\"", ""),
            Path::XdpCompress => xdp_body(cpu, "\"lz4\"", "") + LZ4,
            Path::XdpEncrypt => {
                xdp_body(
                    cpu,
                    "\"esp\"",
                    "[[xdp.match]]\ndestination = \"10.0.2.0/24\"\n",
                ) + &esp_section()
            }
        })
    }
}

/// The `compress` service of [`Path::Compress`] and [`Path::XdpCompress`].
const LZ4: &str = "[service.lz4]\nkind = \"compress\"\nalgorithm = \"lz4\"\nmode = \"always\"\n";

/// The `encrypt` service of [`Path::Encrypt`] and [`Path::XdpEncrypt`]: the sizing table's
/// "encrypt (AES-128-GCM, transport)" row, with its key.
fn esp_section() -> String {
    format!(
        "[service.esp]\nkind = \"encrypt\"\nmode = \"transport\"\ncipher = \"aes-128-gcm\"\nspi = \"0x1001\"\nkey_file = \"{}\"\n",
        aes_key().display()
    )
}

/// One `[[xdp]]` port (queue 0) on the relay's ingress veth, fail-closed (overload shows as
/// loss, as on the fail-closed NFQUEUE paths), its thread on `cpu` ([`spawn_relayd`] gives
/// it the queues' nice value, which `[[xdp]]` cannot).
fn xdp_body(cpu: usize, services: &str, matches: &str) -> String {
    // XDP_BATCH: the port's `batch` (packets per round), for tuning; relayd's default
    // otherwise.
    let mut batch = std::env::var("XDP_BATCH")
        .map(|b| format!("batch = {b}\n"))
        .unwrap_or_default();
    // XDP_OFFLOAD=1: the port carries out the chain's flow offloads (`accept` offloads
    // the bench's flow after its first packet; docs/xdp.md, "Flow offload").
    if std::env::var("XDP_OFFLOAD").is_ok_and(|v| v == "1") {
        batch.push_str("offload = true\n");
    }
    format!(
        "[[xdp]]\nnum = 0\ninterface = \"eth0\"\ncpu = {cpu}\nfail_open = false\n{batch}services = [{services}]\n{matches}"
    )
}

/// The bench's directory of keys; relayd's key-file checks refuse keys under /tmp, so it
/// lies in the target directory. Removed by [`remove_keys`].
fn key_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("relayd-bench-keys-{}", std::process::id()))
}

/// An AES-128-GCM key in [`key_dir`], made with `relay_svc_crypto::keygen` on first use.
fn aes_key() -> &'static std::path::Path {
    static KEY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let keys = key_dir();
        let _ = std::fs::remove_dir_all(&keys);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&keys)
            .expect("key directory");
        let key = keys.join("aes128gcm.key");
        relay_svc_crypto::keygen(relay_svc_crypto::Cipher::Aes128Gcm, &key).expect("keygen");
        key
    })
}

/// Removes [`key_dir`] (the bench is done with its keys).
fn remove_keys() {
    let _ = std::fs::remove_dir_all(key_dir());
}

/// One `[[queue]]` (queue 0) on `hook`, its thread on `cpu` at `nice` QUEUE_NICE (default
/// -5, as docs/operations.md recommends beside threaded NAPI).
fn queue_body(hook: &str, cpu: usize, extra: &str, services: &str) -> String {
    let nice: i32 = env_num("QUEUE_NICE", -5);
    format!(
        "[[queue]]\nnum = 0\nhook = \"{hook}\"\ncpu = {cpu}\nnice = {nice}\n{extra}services = [{services}]\n"
    )
}

/// The relayds running for a path (none for the kernel); stopped on drop.
struct Relayd {
    procs: Vec<Proc>,
    /// The relay's relayd when it serves an `[[xdp]]` port: its node, control socket and
    /// configuration file.
    xdp: Option<(Node, std::path::PathBuf, std::path::PathBuf)>,
    /// A script to run in a node once the processes stopped (a peer's iptables rules).
    cleanup: Option<(Node, String)>,
}

impl Drop for Relayd {
    fn drop(&mut self) {
        for mut p in self.procs.drain(..) {
            p.stop(libc::SIGTERM, Duration::from_secs(10));
        }
        if let Some((node, script)) = &self.cleanup {
            let out = node.sh(script);
            if !out.status.success() {
                println!(
                    "WARNING: cleanup in {} failed: {script}: {}",
                    node.label(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        // A fail-closed XDP program left attached (relayd killed after the timeout) would
        // drop every later path's packets: detach it as `relayd cleanup` does.
        if let Some((node, _, config)) = &self.xdp
            && xdp::attached(node)
        {
            println!("WARNING: relayd left its XDP program attached; relayd cleanup");
            let mut cmd = node.cmd(RELAYD);
            cmd.args(["cleanup", "-c"]).arg(config);
            let ok = cmd.status().is_ok_and(|s| s.success());
            assert!(
                ok && !xdp::attached(node),
                "relayd cleanup left XDP attached"
            );
        }
    }
}

fn start(bed: &Bed, path: Path) -> Relayd {
    if let Path::Suricata { bypass } = path {
        return offload::suricata(bed, bypass);
    }
    let Some(body) = path.body(bed.k.relay_cpu) else {
        return Relayd {
            procs: Vec::new(),
            xdp: None,
            cleanup: None,
        };
    };
    if path.is_xdp() && bed.rx != Rx::Napi {
        // With RPS, the veth's NAPI (and so the XDP program and AF_XDP's copy) would run
        // in the softirq of the sending core, the traffic core.
        println!(
            "WARNING: {} with {}: its XDP program runs on the traffic core",
            path.name(),
            bed.rx.name()
        );
    }
    let mut running = Vec::new();
    // A decoder's input: its encoder in src, on the traffic core (started first, so that
    // nothing reaches the decoder unencoded).
    if let Path::Sized(i) = path
        && let Some(q) = &sized()[i].src
    {
        let cpu = bed.k.traffic_cpu;
        let body = queue_body("output", cpu, &q.extra, &q.services) + &q.sections;
        running.push(spawn_relayd(&bed.l.src, "src", &body, cpu, "relayd-q0"));
    }
    running.push(spawn_relayd(
        &bed.l.relay,
        "relay",
        &body,
        bed.k.relay_cpu,
        path.thread(),
    ));
    Relayd {
        procs: running,
        cleanup: None,
        xdp: path.is_xdp().then(|| {
            let dir = run_dir();
            (
                bed.l.relay.clone(),
                dir.join("relay.sock"),
                dir.join("relay.toml"),
            )
        }),
    }
}

/// Where the bench's relayd configurations and control sockets are.
fn run_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("relayd-bench-{}", std::process::id()))
}

/// relayd in `node` with configuration `body`, once it runs with its thread `thread` (the
/// queue's, `relayd-q0`, or the XDP port's, `relayd-xdp0`) on `cpu`.
fn spawn_relayd(node: &Node, tag: &str, body: &str, cpu: usize, thread: &str) -> Proc {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join(format!("{tag}.toml"));
    let text = format!(
        "[daemon]\nsocket = \"{}\"\n{body}",
        dir.join(format!("{tag}.sock")).display()
    );
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = node.cmd(RELAYD);
    cmd.args(["run", "-c"])
        .arg(&cfg)
        .args(["--log", "warn,relayd::cli=info"]);
    cmd.stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let p = node.spawn(cmd);
    assert!(
        p.wait_stderr_contains("relayd running", Duration::from_secs(10)),
        "{}",
        p.stderr_text()
    );
    // The queue thread must be on its core, or nothing here means anything. It pins
    // itself as it starts, which may follow "relayd running" by a moment.
    let mut cpus = thread_cpus(p.pid(), thread);
    for _ in 0..20 {
        if cpus == cpu.to_string() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        cpus = thread_cpus(p.pid(), thread);
    }
    assert_eq!(
        cpus,
        cpu.to_string(),
        "relayd's thread {thread} ({tag}) runs on CPUs {cpus}, not on CPU {cpu}"
    );
    if thread != "relayd-q0" {
        // `[[xdp]]` has no `nice` key: the bench gives the XDP thread the NFQUEUE queue's
        // nice value itself (setpriority, as relayd does for `nice`), so that both
        // datapaths share the relay core with the NAPI thread on the same terms.
        let (tid, _) = find_thread(p.pid(), thread);
        set_nice(tid, thread);
    }
    p
}

/// `Cpus_allowed_list` of the thread of process `pid` named `name`.
fn thread_cpus(pid: u32, name: &str) -> String {
    find_thread(pid, name).1
}

/// The kernel thread id and `Cpus_allowed_list` of the thread of process `pid` named
/// `name`.
fn find_thread(pid: u32, name: &str) -> (u32, String) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("relayd's tasks");
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if comm.trim() == name {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            if let Some(v) = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            {
                return (tid, v.trim().to_string());
            }
        }
    }
    panic!("relayd (pid {pid}) has no thread {name}");
}

// ---------------------------------------------------------------------------------------
// One UDP measurement

/// One paced (or flooding) UDP run and what the relay core spent on it.
#[derive(Clone, Debug, Default)]
struct Trial {
    /// Datagrams per second the generator actually handed to the kernel.
    offered: f64,
    /// 1 - delivered / sent over the whole run.
    loss: f64,
    /// Delivered per second within the measuring window.
    delivered_rate: f64,
    cpu: CpuUse,
    /// Relay-core CPU time per packet delivered within the window, in microseconds.
    relay_us: f64,
    relay_share: f64,
}

fn fmt_rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The busy shares of the traffic and relay cores, as printed with every measurement.
fn shares(k: &Knobs, u: &CpuUse) -> String {
    [("traffic", k.traffic_cpu), ("relay", k.relay_cpu)]
        .iter()
        .map(|&(what, i)| {
            let (b, s) = (u.share[i], u.steal[i]);
            if s >= 0.005 {
                format!(
                    "{what} cpu{i} {:.0} % (steal {:.0} %)",
                    b * 100.0,
                    s * 100.0
                )
            } else {
                format!("{what} cpu{i} {:.0} %", b * 100.0)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sends `size`-byte IP packets at `rate` packets/s (None: flood) for warm + secs, and
/// measures the window `warm..warm + secs`.
fn trial(bed: &mut Bed, path: Path, size: usize, rate: Option<f64>) -> Trial {
    bed.dst_drops(true);
    let (warm, secs, cpu) = (bed.k.warm, bed.k.secs, bed.k.traffic_cpu);
    let dst: SocketAddr = format!("10.0.2.2:{PORT}").parse().unwrap();
    let payload = size - IP_UDP;
    let mut cfg = relay_traffic::UdpSendConfig::new(dst);
    cfg.size = payload;
    cfg.ratio = 0.5; // compressible, so that `compress` rewrites what it can
    cfg.batch = 64;
    // A stalled generator catches up by up to 256 datagrams (the relay's queues hold
    // 1,000 each), so that a busy traffic core costs less of the offered rate.
    cfg.burst = Some(256);
    cfg.rate_bps = rate.map(|r| (r * (payload + IP_UDP) as f64 * 8.0).round() as u64);
    cfg.duration = Duration::from_secs_f64(warm + secs + 0.05);
    let rx0 = bed.delivered();
    let generator = bed.l.src.run_bg(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the generator");
        relay_traffic::udp_send(&cfg).expect("udp_send")
    });
    std::thread::sleep(Duration::from_secs_f64(warm));
    let (c1, r1) = (read_cpus(), bed.delivered());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (c2, r2) = (read_cpus(), bed.delivered());
    let sent = generator.join().expect("generator");
    // Let what is queued drain, then count the whole run.
    let mut last = bed.delivered();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(25));
        let now = bed.delivered();
        if now == last {
            break;
        }
        last = now;
    }
    let delivered = last - rx0;
    let in_window = r2 - r1;
    let cpu = cpu_use(&c1, &c2);
    let relay = bed.k.relay_cpu;
    let t = Trial {
        offered: sent.pps(),
        loss: (1.0 - delivered as f64 / sent.packets.max(1) as f64).max(0.0),
        delivered_rate: in_window as f64 / (c2.at - c1.at).as_secs_f64(),
        relay_us: cpu.busy_s[relay] / in_window.max(1) as f64 * 1e6,
        relay_share: cpu.share[relay],
        cpu,
    };
    println!(
        "    {:<32} {size:>5} B {:>9}: offered {:>9}/s, delivered {:>9}/s, loss {:6.3} %, {}; relay core {:.2} us/packet",
        path.name(),
        rate.map_or("flood".into(), fmt_rate),
        fmt_rate(t.offered),
        fmt_rate(t.delivered_rate),
        t.loss * 100.0,
        shares(&bed.k, &t.cpu),
        t.relay_us
    );
    t
}

// ---------------------------------------------------------------------------------------
// RFC 2544

#[derive(Clone, Debug)]
struct Search {
    /// Highest offered rate with loss <= 0.1 % (0 if none passed).
    rate: f64,
    /// The generator's flood passed: the path forwards at least `rate`.
    generator_bound: bool,
    /// The trial at `rate` (or the flood).
    at: Trial,
    flood: Trial,
    /// An XDP path's relayd status after the search (see [`xdp::note`]).
    xdp: Option<String>,
}

fn rfc2544(bed: &mut Bed, path: Path, size: usize) -> Search {
    let r = start(bed, path);
    let mut s = search(bed, path, size);
    s.xdp = xdp::note(&r);
    s
}

/// The RFC 2544 binary search through `path`, whose relayd runs.
fn search(bed: &mut Bed, path: Path, size: usize) -> Search {
    let flood = trial(bed, path, size, None);
    if flood.loss <= MAX_LOSS {
        return Search {
            rate: flood.offered,
            generator_bound: true,
            at: flood.clone(),
            flood,
            xdp: None,
        };
    }
    let mut lo: Option<Trial> = None;
    let mut hi = flood.offered;
    // The flood's delivered rate is where the answer usually lies: start there, unless
    // the flood drove the path into receive livelock (delivering next to nothing).
    let mut next = if flood.delivered_rate > 0.2 * hi {
        flood.delivered_rate.min(hi * 0.95)
    } else {
        hi / 2.0
    };
    for _ in 0..bed.k.trials {
        let t = trial(bed, path, size, Some(next));
        if t.loss <= MAX_LOSS {
            let better = lo.as_ref().is_none_or(|l| t.offered > l.offered);
            if better {
                lo = Some(t);
            }
        } else {
            hi = next;
        }
        let low = lo.as_ref().map_or(0.0, |l| l.offered);
        if hi - low < 0.02 * hi {
            break;
        }
        next = (low + hi) / 2.0;
    }
    match lo {
        Some(at) => Search {
            rate: at.offered,
            generator_bound: false,
            at,
            flood,
            xdp: None,
        },
        None => Search {
            rate: 0.0,
            generator_bound: false,
            at: flood.clone(),
            flood,
            xdp: None,
        },
    }
}

// ---------------------------------------------------------------------------------------
// Latency

#[derive(Clone, Debug, Default)]
struct Latency {
    samples: usize,
    p50: f64,
    p99: f64,
    p999: f64,
    offered: f64,
    cpu: CpuUse,
}

fn latency(bed: &mut Bed, path: Path, rate: f64) -> Latency {
    bed.dst_drops(false);
    let r = start(bed, path);
    let (warm, secs, cpu) = (bed.k.warm, bed.k.secs, bed.k.traffic_cpu);
    let dst: SocketAddr = format!("10.0.2.2:{PORT}").parse().unwrap();
    let sock = bed
        .l
        .dst
        .run(move || UdpSocket::bind(dst).expect("bind sink"));
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sink = std::thread::spawn(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the sink");
        relay_traffic::udp_owd_sink(sock, &s2, 4_000_000).expect("owd sink")
    });
    let mut cfg = relay_traffic::UdpSendConfig::new(dst);
    cfg.size = 64 - IP_UDP;
    cfg.batch = 64;
    cfg.rate_bps = Some((rate * 64.0 * 8.0).round() as u64);
    cfg.duration = Duration::from_secs_f64(warm + secs);
    let generator = bed.l.src.run_bg(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the generator");
        relay_traffic::udp_send(&cfg).expect("udp_send")
    });
    std::thread::sleep(Duration::from_secs_f64(warm));
    let c1 = read_cpus();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let c2 = read_cpus();
    let sent = generator.join().expect("generator");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let got = sink.join().expect("sink");
    let us = |q: f64| got.quantile(q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6);
    let l = Latency {
        samples: got.samples_ns.len(),
        p50: us(0.5),
        p99: us(0.99),
        p999: us(0.999),
        offered: sent.pps(),
        cpu: cpu_use(&c1, &c2),
    };
    println!(
        "    {:<32} {:>9}/s: {} samples, p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, {}",
        path.name(),
        fmt_rate(l.offered),
        l.samples,
        l.p50,
        l.p99,
        l.p999,
        shares(&bed.k, &l.cpu)
    );
    xdp::note(&r);
    l
}

// ---------------------------------------------------------------------------------------
// TCP

#[derive(Clone, Debug, Default)]
struct Tcp {
    bps: f64,
    /// Relay-core CPU nanoseconds per kB (1,000 bytes) delivered.
    relay_ns_per_kb: f64,
    relay_share: f64,
    cpu: CpuUse,
}

fn tcp(bed: &mut Bed, path: Path) -> Tcp {
    let _r = start(bed, path);
    tcp_on(bed, path)
}

/// One TCP flow (10.0.1.1 -> 10.0.2.2:9001, random bytes) through `path`, whose relayd (or
/// peer) runs: throughput and the relay core's CPU per kB delivered.
fn tcp_on(bed: &mut Bed, path: Path) -> Tcp {
    bed.dst_drops(false);
    let (warm, secs, cpu) = (bed.k.warm, bed.k.secs, bed.k.traffic_cpu);
    let dst: SocketAddr = "10.0.2.2:9001".parse().unwrap();
    let listener = bed
        .l
        .dst
        .run(move || TcpListener::bind(dst).expect("listen"));
    let progress = Arc::new(AtomicU64::new(0));
    let p2 = progress.clone();
    let sink = std::thread::spawn(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the sink");
        relay_traffic::tcp_sink_progress(listener, Some(&p2)).expect("tcp sink")
    });
    let sender = bed.l.src.run_bg(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the sender");
        relay_traffic::tcp_send(dst, Duration::from_secs_f64(warm + secs)).expect("tcp send")
    });
    std::thread::sleep(Duration::from_secs_f64(warm));
    let (c1, b1) = (read_cpus(), progress.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (c2, b2) = (read_cpus(), progress.load(Ordering::Relaxed));
    let (sent, _) = sender.join().expect("sender");
    let got = sink.join().expect("sink");
    assert_eq!(got, sent, "TCP lost bytes");
    let bytes = (b2 - b1) as f64;
    let cpu = cpu_use(&c1, &c2);
    let relay = bed.k.relay_cpu;
    let t = Tcp {
        bps: bytes * 8.0 / (c2.at - c1.at).as_secs_f64(),
        relay_ns_per_kb: cpu.busy_s[relay] * 1e9 / (bytes / 1000.0).max(1.0),
        relay_share: cpu.share[relay],
        cpu,
    };
    println!(
        "    {:<32} {:>7.0} Mbit/s, {}; relay core {:.1} ns/kB",
        path.name(),
        t.bps / 1e6,
        shares(&bed.k, &t.cpu),
        t.relay_ns_per_kb
    );
    t
}

// ---------------------------------------------------------------------------------------
// Reporting

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn med<T>(v: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(v.iter().map(f).collect())
}

/// `a / b` to two places, or "-" when either is missing.
fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "-".into()
    }
}

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we use.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let started = Instant::now();
    let k = Knobs::from_env();
    let (rounds, secs, smoke) = (k.rounds, k.secs, k.smoke);
    let (relay_cpu, traffic_cpu) = (k.relay_cpu, k.traffic_cpu);
    if relay_cpu == traffic_cpu {
        println!(
            "WARNING: one CPU only: relay and traffic share CPU {relay_cpu}; figures mean nothing"
        );
    }
    let mut bed = Bed::new(k);
    if std::env::var("SIZING").is_ok_and(|v| !v.is_empty() && v != "0") {
        sizing(&mut bed);
        return;
    }
    if std::env::var("XDP").is_ok_and(|v| !v.is_empty() && v != "0") {
        xdp::run(&mut bed, started);
        return;
    }
    if std::env::var("OFFLOAD").is_ok_and(|v| !v.is_empty() && v != "0") {
        offload::run(&mut bed, started);
        return;
    }
    if let Ok(mults) = std::env::var("PROBE") {
        probe(&mut bed, &mults);
        return;
    }
    if std::env::var_os("PROFILE").is_some() {
        for path in [
            Path::Kernel,
            Path::Accept { fail_open: false },
            Path::XdpAccept,
        ] {
            profile(&mut bed, path);
        }
        return;
    }
    println!(
        "passthrough: relay core = CPU {relay_cpu} ({}), traffic core = CPU {traffic_cpu}; {rounds} round(s) of {secs} s per measurement{}",
        bed.rx.name(),
        if smoke { " (SMOKE)" } else { "" }
    );
    let mut report = String::new();
    let uptime = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    writeln!(
        report,
        "\n## passthrough: relay core CPU {relay_cpu} ({}), traffic core CPU {traffic_cpu}; medians of {rounds} round(s) of {secs} s; load average at start: {}",
        bed.rx.name(),
        uptime.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
    .unwrap();

    // 1. RFC 2544 throughput. -----------------------------------------------------------
    let accept = Path::Accept { fail_open: false };
    let searches: Vec<(Path, usize)> = if smoke {
        vec![
            (Path::Kernel, 64),
            (accept, 64),
            (Path::XdpAccept, 64),
            (Path::Compress, 1500),
        ]
    } else {
        vec![
            (Path::Kernel, 64),
            (accept, 64),
            (Path::XdpAccept, 64),
            (Path::Compress, 64),
            (Path::Kernel, 1500),
            (accept, 1500),
            (Path::Compress, 1500),
        ]
    };
    let mut found: Vec<Vec<Search>> = vec![Vec::new(); searches.len()];
    for round in 0..rounds {
        println!("RFC 2544 throughput, round {}/{rounds}", round + 1);
        for (i, &(path, size)) in searches.iter().enumerate() {
            found[i].push(rfc2544(&mut bed, path, size));
        }
    }
    let rate_of = |path: Path, size: usize| -> f64 {
        searches
            .iter()
            .position(|&s| s == (path, size))
            .map_or(f64::NAN, |i| med(&found[i], |s| s.rate))
    };
    let mut r64 = rate_of(accept, 64);
    if r64.is_nan() || r64 <= 0.0 {
        // Nothing passed (a busy machine, or a smoke run's single trial): scale by half
        // the flood's delivered rate instead, and say so.
        let i = searches.iter().position(|&s| s == (accept, 64)).unwrap();
        r64 = (med(&found[i], |s| s.flood.delivered_rate) / 2.0).max(1000.0);
        writeln!(
            report,
            "\nWARNING: relayd accept passed no rate with loss <= 0.1 %; the rates below are scaled by half its flood rate, {}/s.",
            fmt_rate(r64)
        )
        .unwrap();
    }
    rfc_table(&mut report, bed.k.trials, &searches, &found);

    // 2. Relay-core CPU per packet at fixed offered rates. ------------------------------
    let loads: Vec<Option<f64>> = if smoke {
        vec![Some(0.6 * r64), None]
    } else {
        vec![Some(0.3 * r64), Some(0.6 * r64), None]
    };
    let mut fixed: Vec<[Vec<Trial>; 2]> = vec![[Vec::new(), Vec::new()]; loads.len()];
    for round in 0..rounds {
        println!(
            "CPU per packet at fixed offered rates, round {}/{rounds}",
            round + 1
        );
        for (j, path) in [Path::Kernel, accept].into_iter().enumerate() {
            let _r = start(&bed, path);
            for (i, &load) in loads.iter().enumerate() {
                fixed[i][j].push(trial(&mut bed, path, 64, load));
            }
        }
    }
    writeln!(
        report,
        "\n### Relay-core CPU per delivered 64-byte packet, same offered rates\n"
    )
    .unwrap();
    writeln!(report, "| offered | kernel: delivered/s | kernel: relay core | kernel us/packet | relayd: delivered/s | relayd: relay core | relayd us/packet | ratio |").unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|---|").unwrap();
    for (i, load) in loads.iter().enumerate() {
        let [k, r] = &fixed[i];
        let label = match load {
            Some(x) => format!(
                "{} ({:.0} % of relayd's RFC 2544 rate)",
                fmt_rate(*x),
                x / r64 * 100.0
            ),
            None => format!(
                "flood (kernel {}/s, relayd {}/s)",
                fmt_rate(med(k, |t| t.offered)),
                fmt_rate(med(r, |t| t.offered))
            ),
        };
        let (ku, ru) = (med(k, |t| t.relay_us), med(r, |t| t.relay_us));
        writeln!(
            report,
            "| {label} | {} | {} | {ku:.2} | {} | {} | {ru:.2} | {:.1} |",
            fmt_rate(med(k, |t| t.delivered_rate)),
            pct(med(k, |t| t.relay_share)),
            fmt_rate(med(r, |t| t.delivered_rate)),
            pct(med(r, |t| t.relay_share)),
            ru / ku
        )
        .unwrap();
    }
    let flood = &fixed[loads.len() - 1][1];
    let search = searches.iter().position(|&s| s == (accept, 64)).unwrap();
    writeln!(
        report,
        "\nrelayd `accept` saturates its core at its RFC 2544 rate, {} packets/s (relay core {} busy there); in a flood of {}/s its core is {} busy and delivers {} packets/s{}.",
        fmt_rate(r64),
        pct(med(&found[search], |s| s.at.relay_share)),
        fmt_rate(med(flood, |t| t.offered)),
        pct(med(flood, |t| t.relay_share)),
        fmt_rate(med(flood, |t| t.delivered_rate)),
        if med(flood, |t| t.delivered_rate) < 0.5 * r64 {
            " (receive livelock: the core goes to packets dropped at the full queue)"
        } else {
            ""
        }
    )
    .unwrap();

    // 3. Overload curve. ------------------------------------------------------------------
    let mults: Vec<f64> = if smoke {
        vec![1.0, 4.0]
    } else {
        vec![0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0]
    };
    // The bench's receive mode, and relayd fail-closed with the other one beside it (the
    // receive livelock that threaded NAPI avoids).
    let rx = bed.rx;
    let other = if rx == Rx::Napi { Rx::Rps } else { Rx::Napi };
    let curve_paths = [
        (Path::Kernel, rx),
        (Path::Accept { fail_open: true }, rx),
        (accept, rx),
        (accept, other),
    ];
    let mut curve: Vec<Vec<Vec<Trial>>> = vec![vec![Vec::new(); mults.len()]; curve_paths.len()];
    for round in 0..rounds {
        println!("Overload curve, round {}/{rounds}", round + 1);
        for (j, &(path, rx)) in curve_paths.iter().enumerate() {
            bed.set_rx(rx);
            let _r = start(&bed, path);
            for (i, m) in mults.iter().enumerate() {
                curve[j][i].push(trial(&mut bed, path, 64, Some(m * r64)));
            }
        }
    }
    bed.set_rx(rx);
    writeln!(report, "\n### Overload: delivered against offered, 64-byte packets (x = multiple of relayd's RFC 2544 rate, {}/s)\n", fmt_rate(r64)).unwrap();
    write!(report, "| x |").unwrap();
    for (p, rx) in &curve_paths {
        write!(
            report,
            " {} ({}): offered/s | delivered/s | relay core |",
            p.name(),
            rx.name()
        )
        .unwrap();
    }
    writeln!(report, "\n|---|{}", "---|".repeat(3 * curve_paths.len())).unwrap();
    let mut dat = format!(
        "# x, then offered and delivered packets/s (medians) for: {}\n",
        curve_paths
            .iter()
            .map(|(p, rx)| format!("{} ({})", p.name(), rx.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (i, m) in mults.iter().enumerate() {
        write!(report, "| {m} |").unwrap();
        write!(dat, "{m}").unwrap();
        for c in &curve {
            let o = med(&c[i], |t| t.offered);
            let d = med(&c[i], |t| t.delivered_rate);
            write!(
                report,
                " {} | {} | {} |",
                fmt_rate(o),
                fmt_rate(d),
                pct(med(&c[i], |t| t.relay_share))
            )
            .unwrap();
            write!(dat, " {o:.0} {d:.0}").unwrap();
        }
        writeln!(report).unwrap();
        writeln!(dat).unwrap();
    }
    let reached = curve
        .iter()
        .map(|c| med(&c[mults.len() - 1], |t| t.offered))
        .fold(0.0, f64::max)
        / r64;
    writeln!(
        report,
        "\nThe generator reached {reached:.1}x relayd's RFC 2544 rate at most (offered/s is what it sent, not what was asked)."
    )
    .unwrap();
    if !smoke {
        write_plot(&dat, rx, other);
    }

    // 4. Added latency. ---------------------------------------------------------------------
    let lat_loads: Vec<f64> = if smoke { vec![0.5] } else { vec![0.1, 0.5] };
    let mut lats: Vec<[Vec<Latency>; 2]> = vec![[Vec::new(), Vec::new()]; lat_loads.len()];
    for round in 0..rounds {
        println!("Latency, round {}/{rounds}", round + 1);
        for (i, f) in lat_loads.iter().enumerate() {
            for (j, path) in [Path::Kernel, accept].into_iter().enumerate() {
                lats[i][j].push(latency(&mut bed, path, f * r64));
            }
        }
    }
    writeln!(
        report,
        "\n### One-way delay src -> dst, 64-byte packets (kernel receive timestamps)\n"
    )
    .unwrap();
    writeln!(report, "| load | samples per round | kernel p50 / p99 / p99.9 us | relayd p50 / p99 / p99.9 us | added p50 / p99 / p99.9 us |").unwrap();
    writeln!(report, "|---|---|---|---|---|").unwrap();
    for (i, f) in lat_loads.iter().enumerate() {
        let [k, r] = &lats[i];
        let q = |v: &[Latency]| (med(v, |l| l.p50), med(v, |l| l.p99), med(v, |l| l.p999));
        let (k50, k99, k999) = q(k);
        let (r50, r99, r999) = q(r);
        writeln!(
            report,
            "| {:.0} % ({}/s) | {} | {k50:.1} / {k99:.1} / {k999:.1} | {r50:.1} / {r99:.1} / {r999:.1} | {:.1} / {:.1} / {:.1} |",
            f * 100.0,
            fmt_rate(f * r64),
            fmt_rate(med(r, |l| l.samples as f64)),
            r50 - k50,
            r99 - k99,
            r999 - k999
        )
        .unwrap();
    }

    // 5. TCP. --------------------------------------------------------------------------------
    let tcp_paths = [Path::Kernel, accept, Path::AcceptNoGso];
    let mut tcps: Vec<Vec<Tcp>> = vec![Vec::new(); tcp_paths.len()];
    for round in 0..rounds {
        println!("TCP, one flow, round {}/{rounds}", round + 1);
        for (j, &path) in tcp_paths.iter().enumerate() {
            tcps[j].push(tcp(&mut bed, path));
        }
    }
    writeln!(report, "\n### TCP, one flow\n").unwrap();
    tcp_table(&mut report, traffic_cpu, &tcp_paths, &tcps);
    offload::section(&mut bed, &mut report);
    bed.dst_drops(false);
    println!("{report}");
    println!(
        "passthrough: done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// The one-TCP-flow table: for each path (the kernel first), the medians of its rounds in
/// `runs`, throughput and relay-core CPU per kB each as a ratio to the kernel's.
fn tcp_table(report: &mut String, traffic_cpu: usize, paths: &[Path], runs: &[Vec<Tcp>]) {
    writeln!(
        report,
        "| path | Mbit/s | ratio | relay core | traffic core | relay-core ns per kB | ratio |"
    )
    .unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|").unwrap();
    let (kb, kns) = (
        med(&runs[0], |t| t.bps),
        med(&runs[0], |t| t.relay_ns_per_kb),
    );
    for (p, t) in paths.iter().zip(runs) {
        let (b, ns) = (med(t, |t| t.bps), med(t, |t| t.relay_ns_per_kb));
        writeln!(
            report,
            "| {} | {:.0} | {:.2} | {} | {} | {ns:.1} | {:.2} |",
            p.name(),
            b / 1e6,
            b / kb,
            pct(med(t, |t| t.relay_share)),
            pct(med(t, |t| t.cpu.share[traffic_cpu])),
            ns / kns
        )
        .unwrap();
    }
}

/// The RFC 2544 table: for each search of `searches` (path and size), the medians of its
/// rounds in `found`, each with its ratio to the kernel at the same size.
fn rfc_table(
    report: &mut String,
    trials: usize,
    searches: &[(Path, usize)],
    found: &[Vec<Search>],
) {
    let rate_of = |path: Path, size: usize| -> f64 {
        searches
            .iter()
            .position(|&s| s == (path, size))
            .map_or(f64::NAN, |i| med(&found[i], |s| s.rate))
    };
    writeln!(
        report,
        "\n### RFC 2544 throughput (loss <= 0.1 %, binary search, up to {} trials)\n",
        trials + 1
    )
    .unwrap();
    writeln!(report, "| path | size | throughput packets/s | ratio to kernel | relay core at that rate | relay-core us/packet | ratio to kernel | flood: delivered/s | flood: relay core |").unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|---|---|").unwrap();
    for (i, &(path, size)) in searches.iter().enumerate() {
        let s = &found[i];
        let rate = med(s, |s| s.rate);
        let bound = s.iter().filter(|s| s.generator_bound).count() * 2 > s.len();
        let kernel = rate_of(Path::Kernel, size);
        let kernel_bound = searches
            .iter()
            .position(|&x| x == (Path::Kernel, size))
            .is_some_and(|j| {
                found[j].iter().filter(|s| s.generator_bound).count() * 2 > found[j].len()
            });
        let k_us = searches
            .iter()
            .position(|&x| x == (Path::Kernel, size))
            .map_or(f64::NAN, |j| med(&found[j], |s| s.at.relay_us));
        let us = med(s, |s| s.at.relay_us);
        let vs_kernel = if path == Path::Kernel {
            "1.00".to_string()
        } else if kernel_bound {
            format!("<= {} (kernel generator-bound)", ratio(rate, kernel))
        } else {
            ratio(rate, kernel)
        };
        writeln!(
            report,
            "| {} | {size} B | {}{} | {vs_kernel} | {} | {us:.2} | {} | {} | {} |",
            path.name(),
            if bound { ">= " } else { "" },
            fmt_rate(rate),
            pct(med(s, |s| s.at.relay_share)),
            ratio(us, k_us),
            fmt_rate(med(s, |s| s.flood.delivered_rate)),
            pct(med(s, |s| s.flood.relay_share)),
        )
        .unwrap();
    }
    writeln!(report, "\n\">=\": the generator's flood passed (one traffic core cannot saturate the path); its relay-core CPU per packet is the comparison.").unwrap();
}

/// PROBE=x,y,..: the kernel and relayd `accept` fail-closed and fail-open at those multiples of R64
/// (default 144,000) packets/s, then latency at 10 % and 50 % of it: a quick look while
/// tuning, no report.
fn probe(bed: &mut Bed, mults: &str) {
    let r64: f64 = env_num("R64", 144_000.0);
    for path in [
        Path::Kernel,
        Path::Accept { fail_open: false },
        Path::Accept { fail_open: true },
    ] {
        let _r = start(bed, path);
        for m in mults
            .split(',')
            .filter_map(|m| m.trim().parse::<f64>().ok())
        {
            trial(bed, path, 64, Some(m * r64));
        }
    }
    for f in [0.1, 0.5] {
        for path in [Path::Kernel, Path::Accept { fail_open: false }] {
            latency(bed, path, f * r64);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sizing (SIZING=1): packets/s per core for `accept` and each shipped service

/// A queue of the sizing table: extra `[[queue]]` keys, the `services` list and the
/// `[service.*]` sections.
struct QueueSpec {
    extra: String,
    services: String,
    sections: String,
}

impl QueueSpec {
    fn new(extra: &str, services: &str, sections: &str) -> QueueSpec {
        QueueSpec {
            extra: extra.into(),
            services: services.into(),
            sections: sections.into(),
        }
    }
}

/// A row of the sizing table.
struct SizedSvc {
    /// What the row measures.
    name: &'static str,
    /// The relay's queue.
    relay: QueueSpec,
    /// A decoder's input: the encoder that runs in src on the traffic core (hook output).
    src: Option<QueueSpec>,
    /// Nothing reaches dst (`drop`): the row is the relay core's CPU per offered packet.
    drops: bool,
    /// The encoder in src installs a tc tree on src's eth0 (mpls-encap), which must not
    /// have the bench's qdisc then.
    src_tc: bool,
    /// Measured with one TCP flow (relay-core CPU per kB against the kernel's) instead of
    /// the packets/s search on the UDP stream.
    tcp: bool,
}

static SIZED: std::sync::OnceLock<Vec<SizedSvc>> = std::sync::OnceLock::new();

/// The sizing table's rows (set up by [`sizing`]).
fn sized() -> &'static [SizedSvc] {
    SIZED.get().map_or(&[], Vec::as_slice)
}

/// SIZING=1: the RFC 2544 rate (loss <= 0.1 %) of `accept` and every shipped service that
/// handles packets one by one, at 64 and 1,500 bytes, on one relay core, measured as the
/// rest of this bench; the table docs/operations.md carries. A row whose relay core was
/// not saturated at that rate (its source, the generator or a decoder's encoder on the
/// traffic core, could not offer more) says so, with the rate a whole core would reach at
/// the CPU per packet measured.
fn sizing(bed: &mut Bed) {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let mut specs = sizing_rows(&dir);
    // SIZING_ONLY=TEXT: only the rows whose name contains TEXT (`ids`, `encrypt`, ...).
    if let Ok(only) = std::env::var("SIZING_ONLY") {
        specs.retain(|s| s.name.contains(only.as_str()));
        assert!(!specs.is_empty(), "SIZING_ONLY={only}: no such row");
    }
    // Encoded 1,500-byte packets are larger than 1,500 (ESP 1,536-1,556, MPLS-in-IP 1,524);
    // the generator sends with DF.
    bed.l.src_link.mtu(1600);
    bed.l.dst_link.mtu(1600);
    let n = specs.len();
    assert!(SIZED.set(specs).is_ok(), "sizing rows set twice");
    let sizes = if bed.k.smoke {
        vec![64]
    } else {
        vec![64, 1500]
    };
    let mut report = String::new();
    writeln!(
        report,
        "\n### Packets/s per core ({}, relay core CPU {}; RFC 2544, loss <= 0.1 %, medians of {} round(s))\n",
        bed.rx.name(),
        bed.k.relay_cpu,
        bed.k.rounds
    )
    .unwrap();
    writeln!(report, "| service | size | packets/s per core | relay core at that rate | relay-core us/packet | at a full core (packets/s) | note |").unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|").unwrap();
    for &size in &sizes {
        for i in (0..n).filter(|&i| !sized()[i].tcp) {
            let path = Path::Sized(i);
            let svc = &sized()[i];
            let mut rows: Vec<(f64, f64, f64, bool)> = Vec::new();
            if svc.src_tc {
                sh(&bed.l.src, "tc qdisc del dev eth0 root");
            }
            for round in 0..bed.k.rounds {
                println!(
                    "sizing: {} {size} B, round {}/{}",
                    svc.name,
                    round + 1,
                    bed.k.rounds
                );
                if svc.drops {
                    // Nothing is delivered: CPU per packet offered at a fixed rate.
                    let _r = start(bed, path);
                    let rate = env_num("SIZING_DROP_PPS", 100_000.0);
                    let t = trial(bed, path, size, Some(rate));
                    let us =
                        t.cpu.busy_s[bed.k.relay_cpu] / (t.offered * bed.k.secs).max(1.0) * 1e6;
                    rows.push((f64::NAN, t.relay_share, us, false));
                } else {
                    let r = rfc2544(bed, path, size);
                    rows.push((r.rate, r.at.relay_share, r.at.relay_us, r.generator_bound));
                }
            }
            // An ICMP "too big" would teach src a smaller path MTU for later rows.
            sh(&bed.l.src, "ip route flush cache");
            if svc.src_tc {
                sh(&bed.l.src, SRC_QDISC);
            }
            let rate = median(rows.iter().map(|r| r.0).collect());
            let share = median(rows.iter().map(|r| r.1).collect());
            let us = median(rows.iter().map(|r| r.2).collect());
            let full = 1e6 / us;
            let note = if svc.drops {
                format!(
                    "drops everything: CPU per packet at {}/s offered",
                    fmt_rate(env_num("SIZING_DROP_PPS", 100_000.0))
                )
            } else if share < 0.9 {
                format!(
                    "relay core {} busy: {} could not offer more",
                    pct(share),
                    if svc.src.is_some() {
                        "the encoder in src"
                    } else {
                        "the generator"
                    }
                )
            } else {
                String::new()
            };
            writeln!(
                report,
                "| {} | {size} B | {} | {} | {us:.2} | {} | {note} |",
                svc.name,
                if rate.is_nan() {
                    "-".to_string()
                } else if rows.iter().filter(|r| r.3).count() * 2 > rows.len() {
                    format!(">= {}", fmt_rate(rate))
                } else {
                    fmt_rate(rate)
                },
                pct(share),
                fmt_rate(full),
            )
            .unwrap();
        }
    }
    writeln!(report, "\n\"at a full core\": 1 / relay-core CPU per packet, what the core would forward if the source could saturate it (CPU per packet falls as batches fill, so this is conservative).").unwrap();
    let tcp_rows: Vec<usize> = (0..n).filter(|&i| sized()[i].tcp).collect();
    if !tcp_rows.is_empty() {
        sizing_tcp(bed, &tcp_rows, &mut report);
    }
    println!("{report}");
    remove_keys();
}

/// The sizing table's TCP rows: one TCP flow (10.0.1.1 -> 10.0.2.2:9001, GSO and GRO on as
/// in the TCP section) through the row's queue and through the kernel alone, `ROUNDS`
/// times each; the relay core's CPU per kB delivered as a ratio to the kernel's.
fn sizing_tcp(bed: &mut Bed, rows: &[usize], report: &mut String) {
    let paths: Vec<Path> = std::iter::once(Path::Kernel)
        .chain(rows.iter().map(|&i| Path::Sized(i)))
        .collect();
    let mut runs: Vec<Vec<Tcp>> = vec![Vec::new(); paths.len()];
    for round in 0..bed.k.rounds {
        println!(
            "sizing: TCP, one flow, round {}/{}",
            round + 1,
            bed.k.rounds
        );
        for (j, &path) in paths.iter().enumerate() {
            runs[j].push(tcp(bed, path));
        }
    }
    writeln!(
        report,
        "\n### One TCP flow (medians of {} round(s))\n",
        bed.k.rounds
    )
    .unwrap();
    writeln!(
        report,
        "| path | Mbit/s | relay core | relay-core ns per kB | ratio to the kernel |"
    )
    .unwrap();
    writeln!(report, "|---|---|---|---|---|").unwrap();
    let kns = med(&runs[0], |t| t.relay_ns_per_kb);
    for (j, p) in paths.iter().enumerate() {
        let t = &runs[j];
        let ns = med(t, |t| t.relay_ns_per_kb);
        writeln!(
            report,
            "| {} | {:.0} | {} | {ns:.1} | {:.1} |",
            p.name(),
            med(t, |t| t.bps) / 1e6,
            pct(med(t, |t| t.relay_share)),
            ns / kns
        )
        .unwrap();
    }
}

/// The bench's IDS rules in `dir`: benches/sizing-ids.rules (20 rules, UDP, TCP, ICMP,
/// IP) and benches/sizing-ids-tcp.rules (2 more: a stream rule and an HTTP rule).
fn ids_rules(dir: &std::path::Path) -> [std::path::PathBuf; 2] {
    std::fs::create_dir_all(dir).expect("run directory");
    let rules = dir.join("ids.rules");
    std::fs::write(&rules, include_str!("sizing-ids.rules")).expect("ids rules");
    let tcp_rules = dir.join("ids-tcp.rules");
    std::fs::write(&tcp_rules, include_str!("sizing-ids-tcp.rules")).expect("ids tcp rules");
    [rules, tcp_rules]
}

/// The `[service.ids]` section of the bench's IDS paths: `rules`, strict, HOME_NET the
/// dst side, and `extra` keys.
fn ids_section(rules: &[std::path::PathBuf], extra: &str) -> String {
    let list = rules
        .iter()
        .map(|r| format!("\"{}\"", r.display()))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[service.ids]\nkind = \"ids\"\nrules = [{list}]\nstrict = true\n{extra}[service.ids.vars]\nHOME_NET = \"[10.0.2.0/24]\"\nEXTERNAL_NET = \"!$HOME_NET\"\n"
    )
}

/// The sizing table's rows, with the key and rule files they need. Every queue is
/// fail-closed, so that overload shows as loss (fail-open would pass the excess around
/// relayd and the search would climb past what relayd handles).
fn sizing_rows(dir: &std::path::Path) -> Vec<SizedSvc> {
    const FC: &str = "fail_open = false\n";
    // Only the bench's stream is encoded in src (a fail-closed OUTPUT queue would take
    // everything else src sends too).
    const SRC: &str = "match = \"-p udp -d 10.0.2.2 --dport 9000\"\nfail_open = false\n";
    let key = aes_key().display();
    let rules = ids_rules(dir);
    let row = |name: &'static str, relay: QueueSpec| SizedSvc {
        name,
        relay,
        src: None,
        drops: false,
        src_tc: false,
        tcp: false,
    };
    let decoder = |name: &'static str, src: QueueSpec, relay: QueueSpec| SizedSvc {
        name,
        relay,
        src: Some(src),
        drops: false,
        src_tc: false,
        tcp: false,
    };
    let compress = |alg: &str| {
        QueueSpec::new(
            FC,
            "\"c\"",
            &format!(
                "[service.c]\nkind = \"compress\"\nalgorithm = \"{alg}\"\nmode = \"always\"\n"
            ),
        )
    };
    let encrypt = |extra: &str, mode: &str, spi: u32, ends: &str| {
        QueueSpec::new(
            extra,
            "\"esp\"",
            &format!(
                "[service.esp]\nkind = \"encrypt\"\nmode = \"{mode}\"\n{ends}cipher = \"aes-128-gcm\"\nspi = \"{spi:#x}\"\nkey_file = \"{key}\"\nmtu = 1600\n"
            ),
        )
    };
    let decrypt = |mode: &str, spi: u32| {
        QueueSpec::new(
            FC,
            "\"dec\"",
            &format!(
                "[service.dec]\nkind = \"decrypt\"\n[[service.dec.sa]]\nspi = \"{spi:#x}\"\ncipher = \"aes-128-gcm\"\nkey_file = \"{key}\"\nmode = \"{mode}\"\npeer = \"10.0.1.1\"\n"
            ),
        )
    };
    // One VCAN for the stream; rates far above it, so HTB never delays (it still costs
    // its enqueue and dequeue, as in a real deployment).
    let encap = |extra: &str, interface: &str, local: &str| {
        QueueSpec::new(
            extra,
            "\"mpls\"",
            &format!(
                "[service.mpls]\nkind = \"mpls-encap\"\nencap = \"ip\"\ninterface = \"{interface}\"\nlocal = \"{local}\"\nmtu = 1600\nlink_rate = \"10gbit\"\ndefault_rate = \"1gbit\"\n[[service.mpls.vcan]]\nname = \"bench\"\nmatch = {{ dst = \"10.0.2.2/32\", proto = \"udp\", dport = 9000 }}\nlabel = 100\nremote = \"10.0.2.2\"\nrate = \"9gbit\"\nceil = \"10gbit\"\n"
            ),
        )
    };
    let rows = vec![
        row("accept", QueueSpec::new(FC, "\"accept\"", "")),
        row(
            "mark",
            QueueSpec::new(
                FC,
                "\"m\"",
                "[service.m]\nkind = \"mark\"\nmark = \"0x10\"\nmask = \"0xff\"\n",
            ),
        ),
        row(
            "dump (rate 100)",
            QueueSpec::new(FC, "\"d\"", "[service.d]\nkind = \"dump\"\n"),
        ),
        SizedSvc {
            name: "drop",
            relay: QueueSpec::new(FC, "\"drop\"", ""),
            src: None,
            drops: true,
            src_tc: false,
            tcp: false,
        },
        row("compress (LZ4, always)", compress("lz4")),
        row("compress (deflate, always)", compress("deflate")),
        row("compress (LZO, always)", compress("lzo")),
        decoder(
            "decompress (LZ4 IPComp in)",
            QueueSpec::new(
                SRC,
                "\"c\"",
                "[service.c]\nkind = \"compress\"\nalgorithm = \"lz4\"\nmode = \"always\"\n",
            ),
            QueueSpec::new(FC, "\"d\"", "[service.d]\nkind = \"decompress\"\n"),
        ),
        row(
            "encrypt (AES-128-GCM, transport)",
            encrypt(FC, "transport", 0x1001, ""),
        ),
        row(
            "encrypt (AES-128-GCM, tunnel)",
            encrypt(
                FC,
                "tunnel",
                0x1001,
                "local = \"10.0.2.1\"\nremote = \"10.0.2.2\"\n",
            ),
        ),
        decoder(
            "decrypt (AES-128-GCM, transport)",
            encrypt(SRC, "transport", 0x1001, ""),
            decrypt("transport", 0x1001),
        ),
        decoder(
            "decrypt (AES-128-GCM, tunnel)",
            encrypt(
                SRC,
                "tunnel",
                0x1002,
                "local = \"10.0.1.1\"\nremote = \"10.0.2.2\"\n",
            ),
            decrypt("tunnel", 0x1002),
        ),
        row(
            "mpls-encap (MPLS-in-IP, HTB)",
            encap(FC, "eth1", "10.0.2.1"),
        ),
        SizedSvc {
            src_tc: true,
            ..decoder(
                "mpls-decap (MPLS-in-IP in)",
                encap(SRC, "eth0", "10.0.1.1"),
                QueueSpec::new(
                    FC,
                    "\"decap\"",
                    "[service.decap]\nkind = \"mpls-decap\"\nlabels = [100]\npeers = [\"10.0.1.1\"]\n",
                ),
            )
        },
        row(
            "ids (20 rules, alert only)",
            QueueSpec::new(FC, "\"ids\"", &ids_section(&rules[..1], "")),
        ),
        SizedSvc {
            tcp: true,
            ..row(
                "ids, one TCP flow (22 rules: + stream, + HTTP)",
                QueueSpec::new(FC, "\"ids\"", &ids_section(&rules, "")),
            )
        },
        row(
            "delay (1 ms)",
            QueueSpec::new(
                FC,
                "\"delay\"",
                "[service.delay]\nkind = \"delay\"\ndelay = \"1ms\"\n",
            ),
        ),
    ];
    rows
}

/// PROFILE=1: a 64-byte flood through `path` with `perf record -C RELAY -g` over the
/// window, and the top of `perf report --no-children` by command and object, and by
/// symbol (docs/performance.md keeps them beside the figures).
fn profile(bed: &mut Bed, path: Path) {
    let _r = start(bed, path);
    bed.dst_drops(true);
    let (warm, secs, cpu, relay) = (bed.k.warm, bed.k.secs, bed.k.traffic_cpu, bed.k.relay_cpu);
    let mut cfg = relay_traffic::UdpSendConfig::new(format!("10.0.2.2:{PORT}").parse().unwrap());
    cfg.size = 64 - IP_UDP;
    cfg.batch = 64;
    cfg.burst = Some(256);
    // PROFILE_PPS: a paced rate instead of a flood (relayd keeping up, not livelocked).
    let pps: Option<f64> = std::env::var("PROFILE_PPS")
        .ok()
        .and_then(|v| v.parse().ok());
    cfg.rate_bps = pps.map(|r| (r * 64.0 * 8.0).round() as u64);
    cfg.duration = Duration::from_secs_f64(warm + secs + 1.0);
    let rx0 = bed.delivered();
    let generator = bed.l.src.run_bg(move || {
        relay_traffic::pin_thread(cpu).expect("pinning the generator");
        relay_traffic::udp_send(&cfg).expect("udp_send")
    });
    std::thread::sleep(Duration::from_secs_f64(warm));
    let data = std::env::temp_dir().join(format!("relayd-perf-{}.data", std::process::id()));
    let c1 = read_cpus();
    let status = std::process::Command::new("perf")
        .args(["record", "-q", "-C", &relay.to_string(), "-g", "-o"])
        .arg(&data)
        .args(["--", "sleep", &secs.to_string()])
        .status();
    let c2 = read_cpus();
    let sent = generator.join().expect("generator");
    let delivered = bed.delivered() - rx0;
    println!(
        "\n## perf record -C {relay} -g, {secs} s of 64-byte packets ({}) through {}: offered {}/s, delivered {} of {} sent, {}",
        pps.map_or("flood".into(), |p| format!("paced at {}/s", fmt_rate(p))),
        path.name(),
        fmt_rate(sent.pps()),
        delivered,
        sent.packets,
        shares(&bed.k, &cpu_use(&c1, &c2))
    );
    if !status.is_ok_and(|s| s.success()) {
        println!("perf record failed or perf is missing");
        return;
    }
    for sort in ["comm,dso", "symbol"] {
        let out = std::process::Command::new("perf")
            .args([
                "report",
                "--stdio",
                "--no-children",
                "-g",
                "none",
                "--percent-limit",
                "0.7",
                "--sort",
                sort,
                "-i",
            ])
            .arg(&data)
            .output();
        let Ok(out) = out else { continue };
        println!("\n$ perf report --no-children --sort {sort}");
        for line in String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .take(30)
        {
            // perf pads every line to its widest symbol and adds empty columns.
            println!("{}", line.trim_end().trim_end_matches([' ', '-']));
        }
    }
    if std::env::var_os("PROFILE_KEEP").is_some() {
        println!("perf data kept: {}", data.display());
    } else {
        let _ = std::fs::remove_file(&data);
    }
}

/// docs/overload.dat and, with gnuplot, docs/overload.png.
fn write_plot(dat: &str, rx: Rx, other: Rx) {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    std::fs::write(docs.join("overload.dat"), dat).expect("writing docs/overload.dat");
    let (a, b) = (rx.name(), other.name());
    let script = format!(
        "set terminal pngcairo size 800,500\n\
        set output 'overload.png'\n\
        set title 'Overload: one relay core, 64-byte UDP (make bench-passthrough)'\n\
        set xlabel 'offered (packets/s)'\n\
        set ylabel 'delivered (packets/s)'\n\
        set key top left\n\
        set grid\n\
        plot 'overload.dat' using 2:3 with linespoints title 'kernel forwarding ({a})', \\\n\
             'overload.dat' using 4:5 with linespoints title 'relayd accept, fail-open ({a})', \\\n\
             'overload.dat' using 6:7 with linespoints title 'relayd accept, fail-closed ({a})', \\\n\
             'overload.dat' using 8:9 with linespoints title 'relayd accept, fail-closed ({b})', \\\n\
             'overload.dat' using 4:4 with lines dt 2 title 'delivered = offered'\n"
    );
    let gp = std::env::temp_dir().join(format!("relayd-overload-{}.gp", std::process::id()));
    std::fs::write(&gp, script).expect("gnuplot script");
    let ok = std::process::Command::new("gnuplot")
        .current_dir(&docs)
        .arg(&gp)
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&gp);
    if ok {
        println!("wrote docs/overload.dat and docs/overload.png");
    } else {
        println!(
            "wrote docs/overload.dat; gnuplot missing or failed, no plot (apt-get install gnuplot-nox)"
        );
    }
}
