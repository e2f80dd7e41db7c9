//! The XDP program `relayd_xdp` (bpf/relay_xdp.c): loading it with aya, filling its maps
//! (match rules, failure policy, AF_XDP sockets), reading its counters, and attaching it
//! to an interface through [`crate::attach`].
//!
//! The program is C, built by clang in `build.rs` and embedded in this crate. It is not
//! Rust (aya-ebpf) because that needs bpf-linker, which links LLVM 21 or later (Debian
//! bookworm has up to 19), and a nightly toolchain with rust-src for `-Z build-std`, which
//! cannot be installed here; Debian's clang and libbpf-dev build the C program.
//!
//! What the program does with a packet: bpf/relay_xdp.c's header comment. In short,
//! matched packets that the FIB can forward get a [`FrameMeta`] in front of them and go
//! to the AF_XDP socket of their rx queue; with none bound there they are passed
//! (fail-open) or dropped (fail-closed); everything else goes to the kernel untouched.
//!
//! The program stays attached when this process exits or dies (see [`crate::attach`]):
//! dropping a [`Program`] closes relayd's handles, not the kernel's attachment, and the
//! failure policy last set keeps applying until [`Program::detach`] or
//! [`crate::attach::cleanup`].

use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::time::Duration;

use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray, XskMap};
use aya::programs::{TestRun as _, TestRunOptions, Xdp};
use aya::{Ebpf, EbpfLoader, Pod};

use crate::attach;
use crate::error::{XdpError, chain, errno_of, map_error};
use crate::offload::{FlowKey, FlowMaps, FlowValue, monotonic_ns, reopen, walk};

pub use crate::abi::{MAX_QUEUES, MAX_RULES, META_LEN, PROGRAM_NAME};
pub use crate::attach::Mode;

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/relay_xdp.o"));

/// One match rule (`struct relay_rule`): a packet is steered to relayd if any of the
/// rules set with [`Program::set_rules`] matches all of its fields.
///
/// [`MatchRule::ANY`] (also the [`Default`]) matches every IPv4 and IPv6 packet the
/// program parses; the `with_*` methods narrow it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchRule {
    /// 0 for any, 4 for IPv4, 6 for IPv6.
    pub family: u8,
    /// 0 for any, else the IP protocol (for IPv6, the fixed header's next header: packets
    /// with extension headers are never steered).
    pub proto: u8,
    /// Source prefix length in bits, 0 for any (needs `family` 4 or 6).
    pub src_len: u8,
    /// Destination prefix length in bits, 0 for any (needs `family` 4 or 6).
    pub dst_len: u8,
    /// Lowest source port (host order).
    pub sport_lo: u16,
    /// Highest source port. A range other than 0..=65535 matches only TCP and UDP.
    pub sport_hi: u16,
    /// Lowest destination port.
    pub dport_lo: u16,
    /// Highest destination port. A range other than 0..=65535 matches only TCP and UDP.
    pub dport_hi: u16,
    /// Source prefix, network order; IPv4 in the first 4 bytes, the rest zero.
    pub src: [u8; 16],
    /// Destination prefix, as `src`.
    pub dst: [u8; 16],
}

// SAFETY: repr(C), only integers and byte arrays, no padding (44 bytes, asserted below).
unsafe impl Pod for MatchRule {}
const _: () = assert!(std::mem::size_of::<MatchRule>() == 44);

impl Default for MatchRule {
    /// [`MatchRule::ANY`], not all zeros (which would match port 0 only).
    fn default() -> MatchRule {
        MatchRule::ANY
    }
}

impl MatchRule {
    /// Matches every packet the program parses: any family, protocol, address and port.
    pub const ANY: MatchRule = MatchRule {
        family: 0,
        proto: 0,
        src_len: 0,
        dst_len: 0,
        sport_lo: 0,
        sport_hi: u16::MAX,
        dport_lo: 0,
        dport_hi: u16::MAX,
        src: [0; 16],
        dst: [0; 16],
    };

    /// The same rule for one IP protocol only (`libc::IPPROTO_UDP as u8`, ...).
    pub fn with_proto(mut self, proto: u8) -> MatchRule {
        self.proto = proto;
        self
    }

    /// The same rule for one family only (4 or 6).
    pub fn with_family(mut self, family: u8) -> MatchRule {
        self.family = family;
        self
    }

    /// The same rule for source ports `lo..=hi` (TCP and UDP packets only).
    pub fn with_sports(mut self, lo: u16, hi: u16) -> MatchRule {
        (self.sport_lo, self.sport_hi) = (lo, hi);
        self
    }

    /// The same rule for destination ports `lo..=hi` (TCP and UDP packets only).
    pub fn with_dports(mut self, lo: u16, hi: u16) -> MatchRule {
        (self.dport_lo, self.dport_hi) = (lo, hi);
        self
    }

    /// The same rule for sources in `addr/len`; sets the family to the address's.
    /// [`Program::set_rules`] refuses a length beyond the address's bits.
    pub fn with_src(mut self, addr: IpAddr, len: u8) -> MatchRule {
        self.family = family_of(addr);
        self.src = addr_bytes(addr);
        self.src_len = len;
        self
    }

    /// The same rule for destinations in `addr/len`; sets the family to the address's.
    pub fn with_dst(mut self, addr: IpAddr, len: u8) -> MatchRule {
        self.family = family_of(addr);
        self.dst = addr_bytes(addr);
        self.dst_len = len;
        self
    }

    /// Why the program would not apply this rule as meant, if it would not.
    fn check(&self) -> Result<(), &'static str> {
        let bits = match self.family {
            0 => 0,
            4 => 32,
            6 => 128,
            _ => return Err("family must be 0 (any), 4 or 6"),
        };
        if self.src_len > bits || self.dst_len > bits {
            return Err(if bits == 0 {
                "an address prefix needs family 4 or 6"
            } else {
                "prefix length beyond the address's bits"
            });
        }
        if self.sport_lo > self.sport_hi || self.dport_lo > self.dport_hi {
            return Err("port range with its low end above its high end (matches nothing)");
        }
        Ok(())
    }
}

fn family_of(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 6,
    }
}

fn addr_bytes(addr: IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match addr {
        IpAddr::V4(a) => b[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => b = a.octets(),
    }
    b
}

/// What the program wrote before a redirected packet (`struct relay_meta`): the FIB's
/// answer for it, for userland to write the Ethernet header and pick the egress socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameMeta {
    /// The egress interface.
    pub ifindex: u32,
    /// The next hop's MAC address (the new destination).
    pub dmac: [u8; 6],
    /// The egress interface's MAC address (the new source).
    pub smac: [u8; 6],
}

impl FrameMeta {
    /// Reads the metadata from `meta`, the bytes that end where the packet starts: its
    /// last [`META_LEN`] bytes are read (the UMEM bytes `addr - META_LEN .. addr` of an rx
    /// descriptor, or more headroom before them). `None` if `meta` is shorter. `ifindex`
    /// is in host byte order; no alignment is needed.
    #[inline]
    pub fn parse(meta: &[u8]) -> Option<FrameMeta> {
        let m = meta.get(meta.len().checked_sub(META_LEN)?..)?;
        let mut dmac = [0u8; 6];
        let mut smac = [0u8; 6];
        dmac.copy_from_slice(&m[4..10]);
        smac.copy_from_slice(&m[10..16]);
        Some(FrameMeta {
            ifindex: u32::from_ne_bytes([m[0], m[1], m[2], m[3]]),
            dmac,
            smac,
        })
    }
}

/// The program's counters, summed over CPUs. Every packet the program sees adds one to
/// `seen` and to exactly one of the others, so `seen` is their sum (give or take the
/// packets in flight while reading).
///
/// In the `stats` map (a per-CPU array of `u64`) they sit at these indices: 0 `seen`,
/// 1 `redirected`, 2 `no_socket`, 3 `pass_unmatched`, 4 `pass_fib`, 5 `pass_ttl`,
/// 6 `pass_unparsed`, 7 `redirected_unresolved`, 8 `pass_offloaded`, and two events that
/// are not outcomes: 9 `offload_expired`, 10 `offload_revoked`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramStats {
    /// Packets the program ran on.
    pub seen: u64,
    /// Matched and handed to the AF_XDP socket of their rx queue.
    pub redirected: u64,
    /// Matched, but no socket was bound on their rx queue: passed to the kernel if
    /// fail-open, dropped if fail-closed.
    pub no_socket: u64,
    /// Parsed but matched by no rule: passed to the kernel.
    pub pass_unmatched: u64,
    /// Matched, but the kernel would not forward it either (local delivery, no route,
    /// blackhole, prohibit, forwarding off): passed to the kernel, which answers or
    /// delivers it. Also a matched packet for which the driver left no room for the
    /// metadata: the failure policy (passed if fail-open, else dropped).
    pub pass_fib: u64,
    /// Matched, but the TTL or hop limit was 1 or 0: passed to the kernel, which sends
    /// the ICMP time exceeded.
    pub pass_ttl: u64,
    /// Not parsed (not untagged IPv4 or IPv6, truncated headers): passed to the kernel.
    /// (IPv4 options, fragments and IPv6 extension headers are parsed as far as the
    /// addresses, matched on them, and if matched handed to relayd as unresolved.)
    pub pass_unparsed: u64,
    /// Matched and handed to relayd although the FIB knew no next hop to send it to (no
    /// neighbour entry yet, larger than the egress MTU), or with IPv4 options, as a
    /// fragment or with IPv6 extension headers: its metadata says egress ifindex 0, and
    /// relayd hands the chain's result to the kernel's forwarding.
    pub redirected_unresolved: u64,
    /// Matched, and of a flow relayd offloaded ([`Program::set_offload`]): passed to the
    /// kernel's forwarding without going through relayd.
    pub pass_offloaded: u64,
    /// Not an outcome: offloaded flows' entries deleted by the packet that found them
    /// idle for longer than the offload idle time (the packet went on to relayd).
    pub offload_expired: u64,
    /// Not an outcome: entries deleted by the packet that found them from an older
    /// generation ([`Program::set_generation`]: a reload changed the chain).
    pub offload_revoked: u64,
}

/// The offloaded flows in the `flows` map now: those of the current generation and not
/// idle ([`Program::offload_table`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadTable {
    /// Live entries (one per direction offloaded).
    pub flows: u64,
    /// Packets they passed to the kernel.
    pub packets: u64,
    /// Their IP bytes.
    pub bytes: u64,
}

/// What one [`Program::test_run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// The program's verdict: `XDP_PASS` (2), `XDP_DROP` (1), `XDP_REDIRECT` (4), ...
    pub action: u32,
    /// The metadata written before the frame, if the program wrote some.
    pub meta: Option<FrameMeta>,
    /// The frame as the program left it.
    pub frame: Vec<u8>,
}

/// `struct relay_cfg`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Cfg {
    fail_open: u32,
    nrules: u32,
    offload: u32,
    generation: u32,
    idle_ns: u64,
}

// SAFETY: repr(C), four u32 and a u64 at offset 16, no padding (24 bytes).
unsafe impl Pod for Cfg {}
const _: () = assert!(std::mem::size_of::<Cfg>() == 24);

/// The loaded program and its maps. The program runs wherever it is attached until
/// detached; dropping this value does not detach it.
pub struct Program {
    ebpf: Ebpf,
    config: Array<MapData, Cfg>,
    rules: Array<MapData, MatchRule>,
    stats: PerCpuArray<MapData, u64>,
    xsks: XskMap<MapData>,
    /// `flows` and `offload_stats`, reopened for each queue thread ([`Program::flow_maps`]).
    flows_fd: OwnedFd,
    offload_stats_fd: OwnedFd,
    cfg: Cfg,
    id: u32,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("id", &self.id)
            .field("fail_open", &(self.cfg.fail_open != 0))
            .field("nrules", &self.cfg.nrules)
            .finish()
    }
}

const _: () = {
    const fn send<T: Send>() {}
    send::<Program>();
};

fn take<T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<T, XdpError> {
    let map = ebpf.take_map(name).ok_or_else(|| XdpError::Map {
        map: name,
        op: "finding it in the object".into(),
        detail: "no such map (bpf/relay_xdp.c and program.rs disagree)".into(),
    })?;
    T::try_from(map).map_err(|e| map_error(name, "opening".into(), e))
}

/// A duplicate of the descriptor of map `name`, for [`reopen`].
fn take_fd(ebpf: &mut Ebpf, name: &'static str) -> Result<OwnedFd, XdpError> {
    let map = ebpf.take_map(name).ok_or_else(|| XdpError::Map {
        map: name,
        op: "finding it in the object".into(),
        detail: "no such map (bpf/relay_xdp.c and program.rs disagree)".into(),
    })?;
    let data = match &map {
        Map::LruHashMap(d) | Map::PerCpuArray(d) => d,
        _ => {
            return Err(XdpError::Map {
                map: name,
                op: "opening".into(),
                detail: "not of the type program.rs expects".into(),
            });
        }
    };
    data.fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| XdpError::Map {
            map: name,
            op: "duplicating its descriptor".into(),
            detail: e.to_string(),
        })
}

/// The most flow directions `[[xdp]] offload_flows` may ask for (the map is allocated
/// whole, 136 bytes per entry on x86-64: 544 MiB).
pub const MAX_OFFLOAD_FLOWS: u32 = 1 << 22;

impl Program {
    /// Loads the program into the kernel (verifier included) with no rules, fail-open,
    /// no socket bound and offload off, with room for no offloaded flow: until
    /// [`Program::set_rules`], it steers nothing.
    pub fn load() -> Result<Program, XdpError> {
        Program::load_with_flows(1)
    }

    /// [`Program::load`], with room for `flows` offloaded flow directions in its `flows`
    /// map (at least 1, at most [`MAX_OFFLOAD_FLOWS`]; the map is allocated whole).
    pub fn load_with_flows(flows: u32) -> Result<Program, XdpError> {
        let load_err = |e: &(dyn std::error::Error + 'static)| {
            if errno_of(e) == Some(libc::EPERM) {
                XdpError::Permission {
                    what: "loading the XDP program relayd_xdp".into(),
                }
            } else {
                XdpError::Load { detail: chain(e) }
            }
        };
        // No kernel BTF: the program has no CO-RE relocations, and parsing vmlinux's BTF
        // (megabytes) would only slow the start.
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .map_max_entries("flows", flows.clamp(1, MAX_OFFLOAD_FLOWS))
            .load(OBJECT)
            .map_err(|e| load_err(&e))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| XdpError::Load {
                detail: format!("the object has no program {PROGRAM_NAME}"),
            })?
            .try_into()
            .map_err(|e| load_err(&e))?;
        prog.load().map_err(|e| load_err(&e))?;
        let id = prog.info().map_err(|e| load_err(&e))?.id();
        let mut p = Program {
            config: take(&mut ebpf, "config")?,
            rules: take(&mut ebpf, "rules")?,
            stats: take(&mut ebpf, "stats")?,
            xsks: take(&mut ebpf, "xsks")?,
            flows_fd: take_fd(&mut ebpf, "flows")?,
            offload_stats_fd: take_fd(&mut ebpf, "offload_stats")?,
            ebpf,
            cfg: Cfg {
                fail_open: 1,
                nrules: 0,
                offload: 0,
                generation: 0,
                idle_ns: 0,
            },
            id,
        };
        p.write_cfg()?;
        Ok(p)
    }

    /// The program's kernel id (`bpftool prog show id ID`, [`attach::attached`]).
    pub fn id(&self) -> u32 {
        self.id
    }

    fn write_cfg(&mut self) -> Result<(), XdpError> {
        self.config
            .set(0, self.cfg, 0)
            .map_err(|e| map_error("config", "writing the configuration".into(), e))
    }

    /// Sets the rules: a packet is steered if any of them matches. At most [`MAX_RULES`];
    /// a rule the program could not apply as meant (unknown family, a prefix without a
    /// family or longer than its address, an empty port range) is refused.
    ///
    /// The rules are written before their count, so a growing list never exposes stale
    /// rules; but while rules already in force are overwritten, a packet in flight may be
    /// judged by a mix of old and new ones. Set them before binding sockets.
    pub fn set_rules(&mut self, rules: &[MatchRule]) -> Result<(), XdpError> {
        if rules.len() > MAX_RULES {
            return Err(XdpError::TooManyRules { got: rules.len() });
        }
        for (index, r) in rules.iter().enumerate() {
            r.check()
                .map_err(|reason| XdpError::InvalidRule { index, reason })?;
        }
        for (i, r) in rules.iter().enumerate() {
            self.rules
                .set(i as u32, *r, 0)
                .map_err(|e| map_error("rules", format!("writing rule {i}"), e))?;
        }
        self.cfg.nrules = rules.len() as u32;
        self.write_cfg()
    }

    /// Sets the failure policy for matched packets whose rx queue has no socket bound
    /// (relayd stopped, crashed, or not yet started there): `true` passes them to the
    /// kernel, `false` drops them. It holds after this process is gone.
    pub fn set_fail_open(&mut self, open: bool) -> Result<(), XdpError> {
        self.cfg.fail_open = u32::from(open);
        self.write_cfg()
    }

    /// Turns flow offload on (`Some(idle)`: an offloaded flow's entry expires after `idle`
    /// without a packet) or off (`None`: matched packets are not looked up, whatever the
    /// `flows` map holds).
    pub fn set_offload(&mut self, idle: Option<Duration>) -> Result<(), XdpError> {
        self.cfg.offload = u32::from(idle.is_some());
        self.cfg.idle_ns = idle.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.write_cfg()
    }

    /// Sets the generation of offloaded flows in force: an entry written for another one
    /// is revoked (deleted, its packet to relayd) by the next packet that finds it. A
    /// reload that changes the chain moves to a new generation, so that every offloaded
    /// flow comes back to the new chain at once, without walking the map.
    pub fn set_generation(&mut self, generation: u32) -> Result<(), XdpError> {
        self.cfg.generation = generation;
        self.write_cfg()
    }

    /// The generation in force.
    pub fn generation(&self) -> u32 {
        self.cfg.generation
    }

    /// A queue thread's own handles on the `flows` map and on rx queue `rx_queue`'s
    /// offload counters.
    pub fn flow_maps(&self, rx_queue: u32) -> Result<FlowMaps, XdpError> {
        if rx_queue >= MAX_QUEUES {
            return Err(XdpError::QueueOutOfRange { queue: rx_queue });
        }
        FlowMaps::open(&self.flows_fd, &self.offload_stats_fd, rx_queue)
    }

    /// Inserts (or replaces) one entry of the `flows` map: for tests and diagnostics (the
    /// queue threads write through [`Program::flow_maps`]).
    pub fn insert_flow(&self, key: &FlowKey, value: &FlowValue) -> Result<(), XdpError> {
        let mut flows: HashMap<MapData, FlowKey, FlowValue> = reopen(&self.flows_fd, "flows")?;
        flows
            .insert(key, value, 0)
            .map_err(|e| map_error("flows", "inserting a flow".into(), e))
    }

    /// The entry of `key` in the `flows` map, if any.
    pub fn flow(&self, key: &FlowKey) -> Result<Option<FlowValue>, XdpError> {
        let flows: HashMap<MapData, FlowKey, FlowValue> = reopen(&self.flows_fd, "flows")?;
        match flows.get(key, 0) {
            Ok(v) => Ok(Some(v)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_error("flows", "reading a flow".into(), e)),
        }
    }

    /// The live offloaded flows and what they passed, summed over the `flows` map (a
    /// few thousand entries per system call: for the status, never on a packet's path).
    pub fn offload_table(&self) -> Result<OffloadTable, XdpError> {
        let now = monotonic_ns();
        let mut t = OffloadTable::default();
        if self.cfg.offload == 0 {
            return Ok(t);
        }
        walk(&self.flows_fd, |_, v| {
            let idle = now.saturating_sub(v.last_ns);
            if v.generation == self.cfg.generation && idle <= self.cfg.idle_ns {
                t.flows += 1;
                t.packets = t.packets.wrapping_add(v.packets);
                t.bytes = t.bytes.wrapping_add(v.bytes);
            }
        })?;
        Ok(t)
    }

    /// Attaches the program to interface `ifindex` of the calling thread's network
    /// namespace, replacing a `relayd_xdp` left there by an earlier relayd; refuses if
    /// another program is attached ([`XdpError::Foreign`]). Attaching again in the same
    /// mode does nothing; in the other mode, the program is detached and attached anew
    /// (the kernel cannot swap across modes), so for a moment no program runs. The
    /// attachment is made by rtnetlink and outlives this process ([`crate::attach`]).
    pub fn attach(&mut self, ifindex: u32, mode: Mode) -> Result<(), XdpError> {
        let fd = self
            .xdp()?
            .fd()
            .map_err(|e| XdpError::Load { detail: chain(&e) })?;
        attach::attach(ifindex, fd.as_fd(), self.id, mode)
    }

    /// Binds AF_XDP socket `fd` to rx queue `queue`: matched packets received on that
    /// queue go to it. The socket must be bound (`bind(2)` with `sockaddr_xdp`) to the
    /// same interface and queue, or the kernel drops what is redirected to it. Closing
    /// the socket unbinds it.
    pub fn bind_socket(&mut self, queue: u32, fd: RawFd) -> Result<(), XdpError> {
        if queue >= MAX_QUEUES {
            return Err(XdpError::QueueOutOfRange { queue });
        }
        self.xsks
            .set(queue, fd, 0)
            .map_err(|e| map_error("xsks", format!("binding socket {fd} to queue {queue}"), e))
    }

    /// Removes rx queue `queue`'s socket, if any: its matched packets then follow the
    /// failure policy.
    pub fn unbind_socket(&mut self, queue: u32) -> Result<(), XdpError> {
        if queue >= MAX_QUEUES {
            return Err(XdpError::QueueOutOfRange { queue });
        }
        match self.xsks.unset(queue) {
            Ok(()) => Ok(()),
            // Nothing bound there: already the state asked for.
            Err(e) if errno_of(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(map_error("xsks", format!("unbinding queue {queue}"), e)),
        }
    }

    /// The counters, summed over CPUs (one system call per counter).
    pub fn stats(&self) -> Result<ProgramStats, XdpError> {
        let mut v = [0u64; 11];
        for (i, slot) in v.iter_mut().enumerate() {
            let per_cpu = self
                .stats
                .get(&(i as u32), 0)
                .map_err(|e| map_error("stats", format!("reading counter {i}"), e))?;
            *slot = per_cpu.iter().fold(0u64, |a, b| a.wrapping_add(*b));
        }
        Ok(ProgramStats {
            seen: v[0],
            redirected: v[1],
            no_socket: v[2],
            pass_unmatched: v[3],
            pass_fib: v[4],
            pass_ttl: v[5],
            pass_unparsed: v[6],
            redirected_unresolved: v[7],
            pass_offloaded: v[8],
            offload_expired: v[9],
            offload_revoked: v[10],
        })
    }

    /// Runs the program once on `frame` (an Ethernet frame) as if received on rx queue
    /// `queue` of interface `ifindex` of the calling thread's network namespace, without
    /// attaching it (`BPF_PROG_TEST_RUN`): the counters and maps are the real ones, but a
    /// redirect goes nowhere. For tests and diagnostics of the rules; allocates.
    pub fn test_run(&self, frame: &[u8], ifindex: u32, queue: u32) -> Result<TestRun, XdpError> {
        let prog: &Xdp = self.xdp()?;
        let ctx_in = xdp_md(frame, ifindex, queue);
        let mut ctx_out = [0u8; 24];
        let mut out = vec![0u8; frame.len() + 256];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in),
                ctx_out: Some(&mut ctx_out),
                ..TestRunOptions::default()
            })
            .map_err(test_run_error)?;
        // On the way out, xdp_md.data is the metadata's length: the output starts with it.
        let meta_len = u32::from_ne_bytes([ctx_out[0], ctx_out[1], ctx_out[2], ctx_out[3]]);
        out.truncate((r.data_size_out as usize).min(out.len()));
        let meta_len = (meta_len as usize).min(out.len());
        let meta = FrameMeta::parse(&out[..meta_len]).filter(|_| meta_len == META_LEN);
        out.drain(..meta_len);
        Ok(TestRun {
            action: r.return_value,
            meta,
            frame: out,
        })
    }

    /// Runs the program `repeat` times on `frame` as [`Program::test_run`] does, and
    /// returns the kernel's mean time per run: for measuring the program's own cost per
    /// packet (benches, `tests/offload.rs`). A redirecting frame's later runs take the
    /// metadata path's failure (the kernel reuses one buffer), so compare like with like.
    pub fn time_runs(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
        repeat: u32,
    ) -> Result<Duration, XdpError> {
        let prog: &Xdp = self.xdp()?;
        let ctx_in = xdp_md(frame, ifindex, queue);
        let mut out = vec![0u8; frame.len() + 256];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in),
                repeat: repeat.max(1),
                ..TestRunOptions::default()
            })
            .map_err(test_run_error)?;
        Ok(r.duration)
    }

    fn xdp(&self) -> Result<&Xdp, XdpError> {
        self.ebpf
            .program(PROGRAM_NAME)
            .and_then(|p| <&Xdp>::try_from(p).ok())
            .ok_or_else(|| XdpError::Load {
                detail: format!("program {PROGRAM_NAME} is gone from its object"),
            })
    }

    /// Detaches `relayd_xdp` from interface `ifindex` (this process's or an earlier
    /// relayd's); another program is left alone. See [`attach::detach`].
    pub fn detach(&mut self, ifindex: u32) -> Result<(), XdpError> {
        attach::detach(ifindex).map(drop)
    }
}

/// The `struct xdp_md` a test run of `frame` passes in: data (the metadata's length on
/// the way in: none), data_end, data_meta, ingress_ifindex, rx_queue_index,
/// egress_ifindex.
fn xdp_md(frame: &[u8], ifindex: u32, queue: u32) -> [u8; 24] {
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
    ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    ctx[16..20].copy_from_slice(&queue.to_ne_bytes());
    ctx
}

/// What a failed `BPF_PROG_TEST_RUN` means.
fn test_run_error(e: aya::programs::ProgramError) -> XdpError {
    if errno_of(&e) == Some(libc::EPERM) {
        XdpError::Permission {
            what: "running the XDP program on a test frame".into(),
        }
    } else {
        XdpError::Load { detail: chain(&e) }
    }
}
