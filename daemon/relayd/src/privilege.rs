//! Least privilege: which capabilities a configuration needs, and dropping from root to
//! `daemon.user` with exactly those once the daemon is set up.
//!
//! relayd needs root for nothing but capabilities: CAP_NET_ADMIN (iptables, NFQUEUE, tc,
//! ip, SO_RCVBUFFORCE, IP_TRANSPARENT), CAP_NET_RAW where a service sends packets itself
//! (or with iptables-legacy), CAP_SYS_NICE for a negative queue `nice`, and
//! CAP_NET_BIND_SERVICE for a proxy listener on a port below 1024, and for `[[xdp]]`
//! entries CAP_BPF, CAP_SYS_ADMIN (to read the program attached to an interface),
//! CAP_NET_RAW (AF_XDP sockets) and CAP_IPC_LOCK (their memory). The capabilities are
//! kept as ambient ones, so that the iptables, tc and ip relayd runs after the drop (on
//! reload and shutdown) get them too.

use crate::config::Config;
use caps::{CapSet, Capability, CapsHashSet};
use std::ffi::CString;

/// One capability a configuration needs, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// The capability.
    pub cap: Capability,
    /// Why it is needed (`service esp0 sends packets`); empty for CAP_NET_ADMIN, which
    /// every configuration needs.
    pub reasons: Vec<String>,
}

/// Why dropping privileges failed.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What relayd was doing.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The user or group is unknown.
    #[error("{0}")]
    Lookup(String),
}

/// The capability relayd keeps for a service's manifest's `need`, and why (after the
/// service's name in messages).
fn for_service(need: relay_core::Capability) -> (Capability, &'static str) {
    match need {
        relay_core::Capability::NetRaw => (Capability::CAP_NET_RAW, "sends packets"),
    }
}

/// The capabilities `cfg` needs, CAP_NET_ADMIN first, each with its reasons.
pub fn needed(cfg: &Config) -> Vec<Need> {
    let mut out = vec![Need {
        cap: Capability::CAP_NET_ADMIN,
        reasons: Vec::new(),
    }];
    let mut add = |cap: Capability, why: String| match out.iter_mut().find(|n| n.cap == cap) {
        Some(n) => {
            if !n.reasons.contains(&why) {
                n.reasons.push(why);
            }
        }
        None => out.push(Need {
            cap,
            reasons: vec![why],
        }),
    };
    if cfg.daemon.iptables == crate::config::IptablesFlavor::Legacy {
        add(Capability::CAP_NET_RAW, "daemon.iptables = legacy".into());
    }
    for q in &cfg.queues {
        for (name, f) in &q.services {
            // What the services' manifests ask for (a service that emits packets of its
            // own, which the datapath sends on raw sockets: CAP_NET_RAW).
            for need in f.manifest().capabilities() {
                let (cap, why) = for_service(need);
                add(cap, format!("service {name} {why}"));
            }
        }
    }
    for x in &cfg.xdp {
        let on = &x.port.interface;
        // bpf(): loading the program, its maps; CAP_SYS_ADMIN to look up the program
        // attached to an interface by id (a stale one is replaced, a foreign one left).
        add(
            Capability::CAP_BPF,
            format!("xdp on {on} loads its program"),
        );
        add(
            Capability::CAP_SYS_ADMIN,
            format!("xdp on {on} reads the attached XDP program"),
        );
        add(
            Capability::CAP_NET_RAW,
            format!("xdp on {on} opens AF_XDP sockets"),
        );
        add(
            Capability::CAP_IPC_LOCK,
            format!("xdp on {on} locks its sockets' memory"),
        );
        for (name, f) in &x.services {
            for need in f.manifest().capabilities() {
                let (cap, why) = for_service(need);
                add(cap, format!("service {name} {why}"));
            }
        }
    }
    for q in &cfg.queues {
        if let Some(n) = q.queue.nice.filter(|n| *n < 0) {
            let which = if q.first == q.last {
                format!("queue {}", q.first)
            } else {
                format!("queues {}-{}", q.first, q.last)
            };
            add(Capability::CAP_SYS_NICE, format!("{which} nice = {n}"));
        }
    }
    for l in &cfg.listeners {
        let port = l.kind.listen().port();
        if port != 0 && port < 1024 {
            add(
                Capability::CAP_NET_BIND_SERVICE,
                format!("listener {} on port {port}", l.name),
            );
        }
    }
    for c in &cfg.ike {
        add(
            Capability::CAP_NET_BIND_SERVICE,
            format!("ike.{} on UDP ports 500 and 4500", c.name),
        );
    }
    // Bound before a drop to daemon.user, but a relayd started unprivileged with ambient
    // capabilities binds it itself.
    if let Some(port) = cfg
        .daemon
        .metrics
        .map(|a| a.port())
        .filter(|p| *p != 0 && *p < 1024)
    {
        add(
            Capability::CAP_NET_BIND_SERVICE,
            format!("daemon.metrics on port {port}"),
        );
    }
    out
}

/// The needed capabilities as a set.
pub fn needed_set(cfg: &Config) -> CapsHashSet {
    needed(cfg).into_iter().map(|n| n.cap).collect()
}

/// The line `relayd check` prints: `capabilities: CAP_NET_ADMIN, CAP_NET_RAW (service x
/// sends packets)`.
pub fn describe(needs: &[Need]) -> String {
    let parts: Vec<String> = needs
        .iter()
        .map(|n| {
            if n.reasons.is_empty() {
                n.cap.to_string()
            } else {
                format!("{} ({})", n.cap, n.reasons.join(", "))
            }
        })
        .collect();
    format!("capabilities: {}", parts.join(", "))
}

/// The capabilities `cfg` needs that this thread does not have in its effective set
/// (after a drop, a reload cannot gain any); empty when it has them all.
pub fn missing(cfg: &Config) -> Vec<Capability> {
    let have = caps::read(None, CapSet::Effective).unwrap_or_default();
    let mut m: Vec<Capability> = needed_set(cfg).difference(&have).copied().collect();
    m.sort_by_key(|c| c.index());
    m
}

pub use crate::users::{lookup_group, lookup_user};

/// Drops from root to `user` keeping exactly `keep`, in every thread of the process:
/// the bounding set loses every other capability, supplementary groups, gid and uid
/// become the user's (with PR_SET_KEEPCAPS so that the permitted set survives), and the
/// permitted, effective, inheritable and ambient sets become `keep` (ambient, so that
/// iptables, tc and ip run later get them across execve).
///
/// Credentials and capabilities are per thread in Linux, and relayd's queue threads need
/// CAP_NET_ADMIN for every verdict they send: each thread makes the same change itself
/// (the others on a real-time signal, the calling thread last), with raw system calls
/// only, the way libpsx does. Returns the uid and gid.
pub fn drop_to(user: &str, keep: &CapsHashSet) -> Result<(u32, u32), PrivilegeError> {
    use std::sync::atomic::Ordering::SeqCst;
    let (uid, gid) = lookup_user(user).map_err(PrivilegeError::Lookup)?;
    let groups = user_groups(user, gid);
    for (slot, g) in plan::GROUPS.iter().zip(&groups) {
        slot.store(*g, SeqCst);
    }
    plan::NGROUPS.store(groups.len().min(plan::GROUPS.len()), SeqCst);
    plan::UID.store(uid, SeqCst);
    plan::GID.store(gid, SeqCst);
    plan::KEEP.store(keep.iter().fold(0u64, |m, c| m | c.bitmask()), SeqCst);
    plan::FAILED.store(0, SeqCst);
    plan::DONE.store(0, SeqCst);
    let sig = libc::SIGRTMAX() - 1;
    // SAFETY: a handler that makes only async-signal-safe system calls.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = plan::on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
            return Err(os_err("installing the signal handler"));
        }
    }
    // SAFETY: plain system calls.
    let (pid, me) = unsafe { (libc::getpid(), libc::gettid()) };
    let mut signalled = std::collections::BTreeSet::new();
    // Until no thread is left unsignalled (a thread may start another meanwhile).
    loop {
        let tids = threads().map_err(|e| PrivilegeError::Os {
            what: "listing /proc/self/task".into(),
            source: e,
        })?;
        let new: Vec<i32> = tids
            .into_iter()
            .filter(|t| *t != me && !signalled.contains(t))
            .collect();
        if new.is_empty() {
            break;
        }
        for t in new {
            // SAFETY: tgkill on a thread of this process; one that ended meanwhile
            // (ESRCH) is not waited for.
            if unsafe { libc::syscall(libc::SYS_tgkill, pid, t, sig) } == 0 {
                signalled.insert(t);
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while plan::DONE.load(SeqCst) < signalled.len() {
            if std::time::Instant::now() > deadline {
                return Err(PrivilegeError::Lookup(format!(
                    "{} of {} threads changed their credentials within 5 s",
                    plan::DONE.load(SeqCst),
                    signalled.len()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let mine = plan::transition();
    let failed = plan::FAILED.load(SeqCst);
    match (mine, failed) {
        (Err(code), _) | (Ok(()), code @ 1..) => Err(plan::describe(code)),
        _ => Ok((uid, gid)),
    }
}

/// The thread ids of this process.
fn threads() -> std::io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task")? {
        if let Some(t) = e?.file_name().to_str().and_then(|n| n.parse().ok()) {
            out.push(t);
        }
    }
    Ok(out)
}

/// The groups of `user` (primary `gid` included), as initgroups would set them; only
/// `gid` for a numeric user.
fn user_groups(user: &str, gid: u32) -> Vec<u32> {
    if user.parse::<u32>().is_ok() {
        return vec![gid];
    }
    let Ok(name) = CString::new(user) else {
        return vec![gid];
    };
    let mut n: libc::c_int = 64;
    let mut groups = vec![0 as libc::gid_t; 64];
    // SAFETY: groups has room for n entries; getgrouplist writes at most n.
    let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    if r < 0 {
        // More than 64 groups: keep the first 64 (and the primary one).
        n = 64;
    }
    groups.truncate(usize::try_from(n).unwrap_or(0).min(64));
    if !groups.contains(&gid) {
        groups.insert(0, gid);
        groups.truncate(64);
    }
    groups
}

/// The credential system calls with 32-bit ids. On 32-bit ARM and x86 the plain numbers
/// are the old 16-bit-uid calls (ids above 65535 would be truncated, and `setgroups`
/// would read the 32-bit group list as 16-bit ids): those architectures have `*32` calls.
#[cfg(any(target_arch = "arm", target_arch = "x86", target_arch = "sparc"))]
mod sys {
    pub(super) const GETUID: libc::c_long = libc::SYS_getuid32;
    pub(super) const GETEUID: libc::c_long = libc::SYS_geteuid32;
    pub(super) const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
    pub(super) const SETRESGID: libc::c_long = libc::SYS_setresgid32;
    pub(super) const SETRESUID: libc::c_long = libc::SYS_setresuid32;
}

/// The credential system calls (32-bit ids everywhere else).
#[cfg(not(any(target_arch = "arm", target_arch = "x86", target_arch = "sparc")))]
mod sys {
    pub(super) const GETUID: libc::c_long = libc::SYS_getuid;
    pub(super) const GETEUID: libc::c_long = libc::SYS_geteuid;
    pub(super) const SETGROUPS: libc::c_long = libc::SYS_setgroups;
    pub(super) const SETRESGID: libc::c_long = libc::SYS_setresgid;
    pub(super) const SETRESUID: libc::c_long = libc::SYS_setresuid;
}

fn os_err(what: &str) -> PrivilegeError {
    PrivilegeError::Os {
        what: what.to_string(),
        source: std::io::Error::last_os_error(),
    }
}

/// The credential change every thread makes, and what it reads: set by [`drop_to`]
/// before any thread is signalled, read by the signal handler (atomics only).
mod plan {
    use super::PrivilegeError;
    use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};

    pub(super) static UID: AtomicU32 = AtomicU32::new(0);
    pub(super) static GID: AtomicU32 = AtomicU32::new(0);
    pub(super) static KEEP: AtomicU64 = AtomicU64::new(0);
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: AtomicU32 = AtomicU32::new(0);
    pub(super) static GROUPS: [AtomicU32; 64] = [ZERO; 64];
    pub(super) static NGROUPS: AtomicUsize = AtomicUsize::new(0);
    /// Threads that made the change (or failed to).
    pub(super) static DONE: AtomicUsize = AtomicUsize::new(0);
    /// The first failure: step << 16 | errno; 0 for none.
    pub(super) static FAILED: AtomicUsize = AtomicUsize::new(0);

    const STEPS: [&str; 7] = [
        "",
        "reducing the bounding set",
        "PR_SET_KEEPCAPS",
        "setgroups",
        "setresgid",
        "setresuid",
        "setting the capability sets (capset, PR_CAP_AMBIENT_RAISE)",
    ];

    /// The error a failure code stands for.
    pub(super) fn describe(code: usize) -> PrivilegeError {
        PrivilegeError::Os {
            what: STEPS.get(code >> 16).copied().unwrap_or("?").to_string(),
            source: std::io::Error::from_raw_os_error((code & 0xffff) as i32),
        }
    }

    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }

    const CAP_V3: u32 = 0x2008_0522;

    fn errno() -> usize {
        // SAFETY: errno location of this thread.
        (unsafe { *libc::__errno_location() }) as usize & 0xffff
    }

    /// The change, made by the calling thread with raw system calls only (so that it is
    /// async-signal-safe and glibc does not repeat it in other threads). A thread
    /// already running as the user is left as it is.
    pub(super) fn transition() -> Result<(), usize> {
        let uid = UID.load(SeqCst);
        let gid = GID.load(SeqCst);
        let keep = KEEP.load(SeqCst);
        let n = NGROUPS.load(SeqCst).min(GROUPS.len());
        let mut groups = [0 as libc::gid_t; 64];
        for (g, a) in groups.iter_mut().zip(GROUPS.iter()) {
            *g = a.load(SeqCst);
        }
        let fail = |step: usize| Err(step << 16 | errno());
        // SAFETY: plain system calls with valid arguments; the buffers outlive them.
        unsafe {
            if libc::syscall(super::sys::GETUID) as u32 == uid
                && libc::syscall(super::sys::GETEUID) as u32 == uid
            {
                return Ok(());
            }
            for cap in 0..64u64 {
                // Only what is there: dropping needs CAP_SETPCAP even for a capability
                // the bounding set lacks (a unit's CapabilityBoundingSet= took it).
                if keep & (1 << cap) == 0
                    && libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) == 1
                    && libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                    && errno() != libc::EINVAL as usize
                {
                    return fail(1);
                }
            }
            if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
                return fail(2);
            }
            if libc::syscall(super::sys::SETGROUPS, n, groups.as_ptr()) != 0 {
                return fail(3);
            }
            if libc::syscall(super::sys::SETRESGID, gid, gid, gid) != 0 {
                return fail(4);
            }
            if libc::syscall(super::sys::SETRESUID, uid, uid, uid) != 0 {
                return fail(5);
            }
            let mut hdr = CapHeader {
                version: CAP_V3,
                pid: 0,
            };
            let lo = keep as u32;
            let hi = (keep >> 32) as u32;
            let data = [
                CapData {
                    effective: lo,
                    permitted: lo,
                    inheritable: lo,
                },
                CapData {
                    effective: hi,
                    permitted: hi,
                    inheritable: hi,
                },
            ];
            if libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) != 0 {
                return fail(6);
            }
            for cap in 0..64u64 {
                if keep & (1 << cap) != 0
                    && libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                        cap,
                        0,
                        0,
                    ) != 0
                {
                    return fail(6);
                }
            }
            if libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0 {
                return fail(2);
            }
        }
        Ok(())
    }

    /// The signal handler: the change in this thread, then counted done.
    pub(super) extern "C" fn on_signal(_sig: libc::c_int) {
        // SAFETY: the handler keeps the interrupted code's errno.
        let saved = unsafe { *libc::__errno_location() };
        if let Err(code) = transition() {
            let _ = FAILED.compare_exchange(0, code, SeqCst, SeqCst);
        }
        DONE.fetch_add(1, SeqCst);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(text: &str) -> Config {
        crate::config::parse(text, Path::new("t.toml"), &crate::Registry::with_builtins()).unwrap()
    }

    #[test]
    fn accept_needs_only_net_admin() {
        let c = cfg("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        let n = needed(&c);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].cap, Capability::CAP_NET_ADMIN);
        assert_eq!(describe(&n), "capabilities: CAP_NET_ADMIN");
    }

    #[test]
    fn nice_and_legacy_add_their_capabilities_with_reasons() {
        let c = cfg(
            "[daemon]\niptables = \"legacy\"\n[[queue]]\nnum = \"0-1\"\nhook = \
             \"forward\"\nservices = [\"accept\"]\nnice = -5\n[[queue]]\nnum = 3\nhook = \
             \"input\"\nservices = [\"accept\"]\nnice = 5\n",
        );
        assert_eq!(
            describe(&needed(&c)),
            "capabilities: CAP_NET_ADMIN, CAP_NET_RAW (daemon.iptables = legacy), \
             CAP_SYS_NICE (queues 0-1 nice = -5)"
        );
        let s = needed_set(&c);
        assert!(s.contains(&Capability::CAP_SYS_NICE));
        assert!(!s.contains(&Capability::CAP_NET_BIND_SERVICE));
    }

    /// An unprivileged relayd can create and remove files only in its runtime directory:
    /// the default status socket lives there, beside the lock files.
    #[test]
    fn the_default_socket_is_in_the_runtime_directory() {
        let c = cfg("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert!(
            c.daemon.socket.starts_with(crate::lock::LOCK_DIR),
            "{}",
            c.daemon.socket.display()
        );
    }

    #[test]
    fn a_metrics_port_below_1024_needs_net_bind_service() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n";
        let low = cfg(&format!("[daemon]\nmetrics = \"127.0.0.1:443\"\n{q}"));
        assert_eq!(
            describe(&needed(&low)),
            "capabilities: CAP_NET_ADMIN, CAP_NET_BIND_SERVICE (daemon.metrics on port 443)"
        );
        let high = cfg(&format!("[daemon]\nmetrics = \"127.0.0.1:9477\"\n{q}"));
        assert_eq!(describe(&needed(&high)), "capabilities: CAP_NET_ADMIN");
    }

    #[test]
    fn daemon_user_and_socket_group_are_resolved_or_refused_with_their_line() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n";
        let c = cfg(&format!(
            "[daemon]\nuser = \"nobody\"\nsocket_group = \"0\"\n{q}"
        ));
        let u = c.daemon.user.unwrap();
        let (uid, gid) = lookup_user("nobody").unwrap();
        assert_eq!((u.name.as_str(), u.uid, u.gid), ("nobody", uid, gid));
        assert_ne!(uid, 0);
        assert_eq!(c.daemon.socket_group, Some(0));
        assert_eq!(cfg(q).daemon.user, None);
        // Root is nothing to drop to: refused at its line rather than skipped.
        let e = crate::config::parse(
            &format!("[daemon]\nsocket = \"/tmp/x\"\nuser = \"root\"\n{q}"),
            Path::new("t.toml"),
            &crate::Registry::with_builtins(),
        )
        .unwrap_err()
        .0;
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (3, "daemon.user"),
            "{e:?}"
        );
        assert!(e[0].message.contains("nothing to drop to"), "{e:?}");
        let e = crate::config::parse(
            &format!("[daemon]\nsocket = \"/tmp/x\"\nuser = \"no-such-user-relayd\"\nsocket_group = \"no-such-group-relayd\"\n{q}"),
            Path::new("t.toml"),
            &crate::Registry::with_builtins(),
        )
        .unwrap_err()
        .0;
        assert_eq!(
            (e[0].line, e[0].field.as_str()),
            (3, "daemon.user"),
            "{e:?}"
        );
        assert!(
            e[0].message.contains("no user `no-such-user-relayd`"),
            "{e:?}"
        );
        assert_eq!(
            (e[1].line, e[1].field.as_str()),
            (4, "daemon.socket_group"),
            "{e:?}"
        );
        assert!(e[0].to_string().starts_with("t.toml:3:"), "{}", e[0]);
    }

    #[test]
    fn lookups_find_root_and_refuse_unknown_names() {
        assert_eq!(lookup_user("root"), Ok((0, 0)));
        assert_eq!(lookup_user("0"), Ok((0, 0)));
        assert!(lookup_user("no-such-user-relayd").is_err());
        assert_eq!(lookup_group("root"), Ok(0));
        assert!(lookup_group("no-such-group-relayd").is_err());
    }
}
