//! A service's manifest: everything it needs from the daemon (tc trees, TPROXY diversion,
//! an MSS clamp, mark bits, conntrack, copy range, held packets, capabilities, the
//! directories and files it writes), declared once as plain data by its factory.
//!
//! Why the types live here, in the service contract crate, and not in relayd: services
//! must not depend on the daemon (DESIGN.md), so the words they describe their needs with
//! sit below both. They are vocabulary only, plain data with no behaviour and no I/O:
//! relayd alone turns a manifest into queue settings (`config/queue.rs`: fail policy,
//! copy range, GSO, conntrack, hold capacity), iptables rules (`rules.rs`, `config/tproxy.rs`:
//! MSS clamp, TPROXY diversion, mark checks), tc trees (`qos.rs`), state directories
//! (`state_dirs.rs`), a capability set (`privilege.rs`) and the resources handed to
//! `build` (`resources.rs`: the queue monitor, opened log files, whatever the service's
//! [`Start`]s make), and it reads nothing else
//! of a service. A new need is one field here and its setup there; a new service that only
//! combines existing needs changes nothing in relayd.

use crate::qos::QosPlan;
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

/// What happens to traffic when the service cannot see it (relayd down, queue full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailPolicy {
    /// Traffic flows unprocessed: right for services that only optimise.
    #[default]
    Open,
    /// Traffic stops: right for services whose point is to stop or hide traffic.
    Closed,
}

/// The largest TCP MSS that still fits the path after a service grew the packets, per
/// address family (IPv6 headers are 20 bytes longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MssClamp {
    /// MSS for TCP over IPv4.
    pub ipv4: u16,
    /// MSS for TCP over IPv6.
    pub ipv6: u16,
}

/// What a service asks of relayd's transparent proxy ([`Manifest::proxy`]): divert the
/// TCP connections whose SYN it marks with `mark` to the proxy, which carries them on
/// upstream as given here. relayd owns the TPROXY rules, the policy route and the
/// listener; the service only decides which connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyDiversion {
    /// The fwmark the service sets on a SYN to divert its connection (non-zero).
    pub mark: u32,
    /// The service gives a marked SYN back to its hook ([`Action::Repeat`]) rather than
    /// letting it go on: needed in mangle PREROUTING, where an accepted packet leaves the
    /// hook before relayd's TPROXY rules in it.
    ///
    /// [`Action::Repeat`]: crate::Action::Repeat
    pub repeat: bool,
    /// The proxy's upstream leg uses Multipath TCP (else TCP).
    pub mptcp: bool,
    /// The proxy's upstream leg keeps the client's source address.
    pub transparent_source: bool,
}

/// A capability a service needs relayd to keep when it drops to `daemon.user`. Not
/// `non_exhaustive` on purpose: a new one must fail to compile in relayd's privilege code
/// until relayd knows what to keep for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// CAP_NET_RAW: the datapath sends the packets the service emits from raw sockets.
    NetRaw,
}

/// What a [`LogFile`]'s or a [`Start`]'s start function made: the value a service's `build` finds
/// in its [`Resources`](crate::Resources) by type ([`Resources::get`](crate::Resources::get)).
pub type Started = Arc<dyn Any + Send + Sync>;

/// Turns the opened file into the service's writer (and starts its thread, if it has one).
pub type StartFn = Arc<dyn Fn(std::fs::File) -> std::io::Result<Started> + Send + Sync>;

/// A file the service appends to while it runs (the IDS's EVE log). relayd, and only a
/// relayd that runs the service (never `relayd check`), creates the file's directory,
/// opens the file for appending (as root, before it drops to `daemon.user`), calls
/// `start` with it, and hands what `start` made to every `build` of the service through
/// [`Resources`](crate::Resources). The service thus opens no file and starts no thread itself.
#[derive(Clone)]
pub struct LogFile {
    /// The file (created if missing, appended to).
    pub path: PathBuf,
    /// What to make of the opened file.
    pub start: StartFn,
}

impl std::fmt::Debug for LogFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogFile").field("path", &self.path).finish()
    }
}

impl PartialEq for LogFile {
    fn eq(&self, other: &LogFile) -> bool {
        self.path == other.path && Arc::ptr_eq(&self.start, &other.start)
    }
}

impl LogFile {
    /// A log at `path` whose opened file `start` turns into the service's writer.
    pub fn new<T, F>(path: impl Into<PathBuf>, start: F) -> LogFile
    where
        T: Any + Send + Sync,
        F: Fn(std::fs::File) -> std::io::Result<T> + Send + Sync + 'static,
    {
        LogFile {
            path: path.into(),
            start: Arc::new(move |file| start(file).map(|t| Arc::new(t) as Started)),
        }
    }
}

/// Something a service needs running while it runs, which the daemon starts for it: state
/// that outlives the process (the ESP sequence reservations, written to the service's
/// [`Manifest::state_dirs`], and the thread that keeps them ahead). relayd, and only a
/// relayd that runs the service (never `relayd check`, never `relayd replay`, which must
/// not touch a running daemon's state), calls `start` once per configuration, after it
/// made the state directories and dropped to `daemon.user` and before any queue starts,
/// and hands what it made to every `build` of the service through
/// [`Resources`](crate::Resources). A service built without it (a tool, a test) runs
/// detached: in memory, writing nothing.
///
/// `start` may be called again for a later configuration whose factory keeps the same
/// state (a reload): it must then hand back the running state, not start it twice.
#[derive(Clone)]
pub struct Start {
    /// What is started, for errors ("ESP sequence state in /var/lib/relayd").
    pub what: String,
    /// Starts it (the only I/O of the service's setup: files written, threads started).
    pub start: Arc<dyn Fn() -> std::io::Result<Started> + Send + Sync>,
}

impl std::fmt::Debug for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start").field("what", &self.what).finish()
    }
}

impl PartialEq for Start {
    fn eq(&self, other: &Start) -> bool {
        self.what == other.what && Arc::ptr_eq(&self.start, &other.start)
    }
}

impl Start {
    /// A start described by `what` whose value `start` makes.
    pub fn new<T, F>(what: impl Into<String>, start: F) -> Start
    where
        T: Any + Send + Sync,
        F: Fn() -> std::io::Result<T> + Send + Sync + 'static,
    {
        Start {
            what: what.into(),
            start: Arc::new(move || start().map(|t| Arc::new(t) as Started)),
        }
    }
}

/// Everything a service needs from the daemon, built once by its factory
/// ([`ServiceFactory::manifest`](crate::ServiceFactory::manifest)). The defaults
/// ([`Manifest::new`]) describe a service that reads whole packets, changes none,
/// optimises only (fail-open) and needs nothing set up; a service states what differs:
///
/// ```
/// # use relay_core::{Manifest, FailPolicy};
/// let m = Manifest { fail_policy: FailPolicy::Closed, needs_bytes: Some(128), ..Manifest::new() };
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    /// The failure policy the service wants for its queue (the queue's default).
    pub fail_policy: FailPolicy,
    /// The nfmark bits the service sets to 1 (in a verdict or repeat mark, or on packets
    /// it sends), so that the configuration check can refuse a mark that overlaps relayd's
    /// stage bits (`daemon.bypass_mark`, [`StageMark`](crate::StageMark)).
    pub mark_bits: u32,
    /// The service rewrites packet bytes: its queue turns GSO off, so that it sees
    /// MTU-sized packets.
    pub rewrites_payload: bool,
    /// The service emits packets of its own ([`Context::emit`](crate::Context::emit) and
    /// the like): the datapath sends them from raw sockets, so relayd keeps
    /// [`Capability::NetRaw`] ([`Manifest::capabilities`]).
    pub emits: bool,
    /// How many bytes of each packet the service needs to see: `None` for the whole
    /// packet, `Some(n)` for the first `n`. A queue whose services all need only headers
    /// asks the kernel to copy only those. A service that rewrites packets needs `None`.
    pub needs_bytes: Option<u32>,
    /// The service reads [`PacketMeta::ct`](crate::PacketMeta::ct): its queue asks the
    /// kernel for the conntrack state or decodes it from the mark bits its rules set.
    pub conntrack: bool,
    /// The most packets the service holds at once ([`Action::Hold`](crate::Action::Hold));
    /// 0 for a service that never holds. A queue's hold capacity is the sum.
    pub max_held: u32,
    /// The TCP MSS connections crossing the service are clamped to, because it grows
    /// packets (encapsulation): relayd installs a TCPMSS rule before the queue rule.
    pub clamp_mss: Option<MssClamp>,
    /// The transparent proxy diversion the service asks for (a split proxy's
    /// per-connection decision): relayd installs the TPROXY rules and route, and refuses a
    /// queue from which the marked SYNs cannot reach them. Every diverting service of a
    /// configuration feeds the one listener, so they must ask the same.
    pub proxy: Option<ProxyDiversion>,
    /// The tc tree the service's marks select classes of: relayd installs it on start,
    /// changes only the differing classes on reload and removes it on exit.
    pub qos: Option<QosPlan>,
    /// The service reads the egress queues (backlog, rate): relayd gives its `build` the
    /// queue monitor in [`Resources`](crate::Resources) (one for the whole daemon).
    pub queue_monitor: bool,
    /// Directories the service writes into while it runs (the ESP sequence state): relayd
    /// started as root with `daemon.user` makes them for that user before it drops to it,
    /// and refuses to start when that user could not write them.
    pub state_dirs: Vec<PathBuf>,
    /// Files the service appends to while it runs, and what each becomes ([`LogFile`]).
    pub logs: Vec<LogFile>,
    /// What the daemon starts for the service before its queues start ([`Start`]).
    pub starts: Vec<Start>,
    /// The service votes to offload flows it needs no more packets of
    /// ([`Context::offload`](crate::Context::offload)). A queue offloads only when every
    /// service of its chain declares this (and its configuration allows it): one that
    /// does not would never vote, so relayd installs nothing for offload on its queue.
    pub offloads: bool,
}

impl Manifest {
    /// The manifest of a service that needs nothing (the defaults).
    pub const fn new() -> Manifest {
        Manifest {
            fail_policy: FailPolicy::Open,
            mark_bits: 0,
            rewrites_payload: false,
            emits: false,
            needs_bytes: None,
            conntrack: false,
            max_held: 0,
            clamp_mss: None,
            proxy: None,
            qos: None,
            queue_monitor: false,
            state_dirs: Vec::new(),
            logs: Vec::new(),
            starts: Vec::new(),
            offloads: false,
        }
    }

    /// The capabilities relayd must keep for the service.
    pub fn capabilities(&self) -> Vec<Capability> {
        let mut caps = Vec::new();
        if self.emits {
            caps.push(Capability::NetRaw);
        }
        caps
    }

    /// Every path the service writes to while it runs: its state directories and log
    /// files. `relayd check` writes none of them.
    pub fn writes(&self) -> impl Iterator<Item = &std::path::Path> {
        self.state_dirs
            .iter()
            .map(PathBuf::as_path)
            .chain(self.logs.iter().map(|l| l.path.as_path()))
    }
}

/// A manifest with nothing in it, for factories that need nothing
/// ([`ServiceFactory::manifest`](crate::ServiceFactory::manifest)'s default).
pub static NOTHING: Manifest = Manifest::new();

/// Bytes a header-only service asks for: enough for IPv6 with a few extension headers and
/// a TCP header with options.
pub const HEADER_BYTES: u32 = 192;
