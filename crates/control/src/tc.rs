//! Per-VCAN QoS with tc: an HTB tree on an egress interface with one class per VCAN
//! (rate, ceil, prio) under a root class at the link rate, a default class for everything
//! else, and one classifier that maps a packet's mark straight to its class.
//!
//! Classification is O(1) in the number of classes: a single `cls_bpf` filter runs a
//! ten-instruction classic BPF program, "if `mark >> 16` is our major and the minor is not
//! 0, the class id is the mark", and HTB finds the class in its hash. (`cls_fw`'s
//! mark-as-classid "old method" would do the same, but kernels built without
//! `CONFIG_NET_CLS_FW` exist, this test machine's among them; `cls_bpf` comes with any
//! kernel that has BPF.) The encap gives each VCAN's packets the mark `handle << 16 |
//! minor` in its verdict. A mark of another major, or of a class that does not exist,
//! falls to the default class; a minor of 0 (which HTB would send unshaped) is refused by
//! the program.
//!
//! Ownership: relayd owns the root qdisc of the interface only when it is an `htb` with
//! the plan's handle (default `1d0:`). [`install`] refuses an interface whose root qdisc is
//! someone else's (anything but the kernel's default, handle `0:`), [`remove`] deletes only
//! relayd's, and deleting the root qdisc takes the classes and filter with it and gives
//! the interface its default qdisc back: no trace. Everything is sent in one `tc -batch -`
//! run, never one process per class.

use std::fmt::Write as _;
use tracing::debug;

use crate::backend::Backend;
use crate::cmd;
use crate::error::ControlError;

/// The default HTB major handle relayd uses (`1d0:`).
pub const DEFAULT_HANDLE: u16 = 0x1d0;
/// The minor of the root class, which carries the link rate.
pub const ROOT_MINOR: u16 = 1;
/// The minor of the default class (`default ffff`).
pub const DEFAULT_MINOR: u16 = 0xffff;
/// The filter priority (`pref`) of relayd's classifier.
pub const FILTER_PREF: u16 = 1;

/// What can go wrong planning or applying a QoS tree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TcError {
    /// The plan is inconsistent (bad minor, ceil below rate, ...).
    #[error("QoS plan for {dev}: {reason}")]
    InvalidPlan {
        /// The interface.
        dev: String,
        /// What is wrong.
        reason: String,
    },
    /// The interface's root qdisc belongs to someone else: relayd does not replace it.
    #[error(
        "{dev} has a root qdisc relayd does not own ({kind} {handle}); remove it or choose \
         another interface"
    )]
    ForeignQdisc {
        /// The interface.
        dev: String,
        /// The qdisc's kind.
        kind: String,
        /// The qdisc's handle, e.g. `1:`.
        handle: String,
    },
    /// tc's output could not be understood.
    #[error("cannot parse `tc {what}` output: {detail}")]
    Parse {
        /// The command.
        what: String,
        /// What was unexpected.
        detail: String,
    },
    /// Running tc failed (not installed, not permitted, a command refused).
    #[error(transparent)]
    Tool(#[from] ControlError),
    /// Reading the classes over rtnetlink failed.
    #[error("reading the tc classes of {dev} over rtnetlink: {source}")]
    Netlink {
        /// The interface.
        dev: String,
        /// The error.
        source: std::io::Error,
    },
}

/// One class of the tree (a VCAN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbClass {
    /// The class minor, 2..=0xfffe: the class is `handle:minor` (in hex, as tc writes it).
    pub minor: u16,
    /// A name for messages and status (the VCAN name); not given to tc.
    pub name: String,
    /// Guaranteed rate, bits/s.
    pub rate_bps: u64,
    /// Ceiling, bits/s (>= rate).
    pub ceil_bps: u64,
    /// HTB priority 0..=7 (0 is served first when spare bandwidth is shared).
    pub prio: u8,
}

/// The whole tree for one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbPlan {
    /// The egress interface.
    pub dev: String,
    /// The qdisc's major handle (1..=0x3fff; relayd's mark bit 30 lies above).
    pub handle: u16,
    /// The root class's rate and ceil, bits/s: the link.
    pub link_rate_bps: u64,
    /// The default class's guaranteed rate; it may borrow up to the link rate.
    pub default_rate_bps: u64,
    /// The VCAN classes.
    pub classes: Vec<HtbClass>,
}

/// Counters of one class (what `tc -s class show` prints), read over rtnetlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// The class minor.
    pub minor: u16,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped (queue full).
    pub drops: u64,
    /// Times the class was over its rate.
    pub overlimits: u64,
    /// Bytes queued now.
    pub backlog_bytes: u64,
    /// Packets queued now.
    pub backlog_packets: u64,
}

/// What [`install`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallOutcome {
    /// The tree was created.
    Created,
    /// relayd's tree was already there (a restart, or after a crash): deleted and built
    /// again from the plan.
    Replaced,
}

/// How to run tc: which program, and in which network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tc {
    /// The tc program (default `tc`).
    pub program: String,
    /// Run inside this named network namespace (`ip netns exec NAME tc ...`).
    pub netns: Option<String>,
}

impl Default for Tc {
    fn default() -> Self {
        Tc::system()
    }
}

impl Tc {
    /// `tc` from `PATH`, in the current namespace.
    pub fn system() -> Tc {
        Tc {
            program: "tc".to_owned(),
            netns: None,
        }
    }

    /// The same, inside the named network namespace.
    pub fn in_netns(mut self, name: impl Into<String>) -> Tc {
        self.netns = Some(name.into());
        self
    }

    /// `tc` in the namespace an iptables [`Backend`] works in.
    pub fn for_backend(backend: &Backend) -> Tc {
        Tc {
            program: "tc".to_owned(),
            netns: backend.netns.clone(),
        }
    }

    /// Runs `tc ARGS` (with `stdin` for `-batch -`) and returns stdout.
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, ControlError> {
        debug!(netns = ?self.netns, ?args, lines = stdin.map(|s| s.lines().count()), "running tc");
        let out = cmd::run(self.netns.as_deref(), &self.program, args, stdin)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs a `tc -batch -` script (stops at the first failing line).
    pub fn batch(&self, script: &str) -> Result<(), ControlError> {
        if script.is_empty() {
            return Ok(());
        }
        self.run(&["-batch", "-"], Some(script)).map(drop)
    }
}

/// HTB's DRR quantum for a class: rate / 10 in bytes, between one frame and HTB's own
/// ceiling; set explicitly so that 10,000 classes do not print 10,000 warnings.
fn quantum(rate_bps: u64) -> u64 {
    (rate_bps / 8 / 10).clamp(1514, 200_000)
}

/// VCAN classes are grouped by `minor >> GROUP_SHIFT` (1,024 minors per group), each
/// group in its own HTB qdisc: the kernel walks every class of a qdisc each time it adds
/// one (`tc_bind_tclass`), so one flat qdisc of 10,000 classes takes O(n^2) (21 s here),
/// groups of at most 1,024 take 1.4 s.
pub const GROUP_SHIFT: u32 = 10;
/// Outer class minor of group `g` is `GROUP_BASE + g`.
pub const GROUP_BASE: u16 = 0x100;

/// The outer classic BPF program (on `handle:`): if `(mark >> 16) & 0x3fff == handle` and
/// the minor is not 0, the class is the minor's group `handle:(0x100 + (minor >> 10))`,
/// else no match (default class). Bits 30 and 31 are masked off: a packet relayd sends
/// itself carries the bypass bit on top of its VCAN's mark. `ld mark` is the ancillary
/// load SKF_AD_OFF + SKF_AD_MARK (-4096 + 20).
pub fn outer_bpf(handle: u16) -> String {
    format!(
        "13,32 0 0 4294963220,7 0 0 0,116 0 0 16,84 0 0 16383,21 0 7 {handle},135 0 0 0,84 0 0 65535,\
         21 4 0 0,116 0 0 {GROUP_SHIFT},4 0 0 {GROUP_BASE},68 0 0 {},22 0 0 0,6 0 0 0",
        u32::from(handle) << 16
    )
}

/// The inner program (on a group's qdisc `inner:`): class `inner:minor` for a mark of
/// `handle:minor` (bits 30 and 31 masked off, as in [`outer_bpf`]), else no match.
pub fn inner_bpf(handle: u16, inner: u16) -> String {
    format!(
        "11,32 0 0 4294963220,7 0 0 0,116 0 0 16,84 0 0 16383,21 0 5 {handle},135 0 0 0,84 0 0 65535,\
         21 2 0 0,68 0 0 {},22 0 0 0,6 0 0 0",
        u32::from(inner) << 16
    )
}

/// The group of a class minor.
pub fn group_of(minor: u16) -> u16 {
    minor >> GROUP_SHIFT
}

/// The rate of a group: the sum of its classes' rates.
fn group_rate(classes: &[&HtbClass]) -> u64 {
    classes.iter().map(|c| c.rate_bps).sum::<u64>().max(8)
}

impl HtbPlan {
    /// The mark that selects class `minor`: `handle << 16 | minor`.
    pub fn mark(&self, minor: u16) -> u32 {
        (u32::from(self.handle) << 16) | u32::from(minor)
    }

    /// The major handle of group `g`'s qdisc: `handle + 1 + g`.
    pub fn inner_handle(&self, g: u16) -> u16 {
        self.handle + 1 + g
    }

    /// The classes by group, groups ascending.
    fn groups(&self) -> std::collections::BTreeMap<u16, Vec<&HtbClass>> {
        let mut m: std::collections::BTreeMap<u16, Vec<&HtbClass>> = Default::default();
        for c in &self.classes {
            m.entry(group_of(c.minor)).or_default().push(c);
        }
        m
    }

    /// Checks handles, minors and rates.
    pub fn validate(&self) -> Result<(), TcError> {
        let bad = |reason: String| TcError::InvalidPlan {
            dev: self.dev.clone(),
            reason,
        };
        relay_core::ifname::check_msg(&self.dev).map_err(bad)?;
        if !(1..0x4000).contains(&self.handle) {
            return Err(bad(format!(
                "handle {:#x} is not 0x1..=0x3fff",
                self.handle
            )));
        }
        if self.link_rate_bps < 8 || self.default_rate_bps < 8 {
            return Err(bad("link and default rates must be at least 8 bit/s".into()));
        }
        if self.default_rate_bps > self.link_rate_bps {
            return Err(bad("default rate above the link rate".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.classes {
            if !(2..=0xfffe).contains(&c.minor) {
                return Err(bad(format!(
                    "class \"{}\": minor {:#x} is not 2..=0xfffe",
                    c.name, c.minor
                )));
            }
            if !seen.insert(c.minor) {
                return Err(bad(format!(
                    "class \"{}\": minor {:#x} used twice",
                    c.name, c.minor
                )));
            }
            if c.rate_bps < 8 || c.ceil_bps < c.rate_bps || c.ceil_bps > self.link_rate_bps {
                return Err(bad(format!(
                    "class \"{}\": need 8 <= rate <= ceil <= link rate (rate {}, ceil {}, link {})",
                    c.name, c.rate_bps, c.ceil_bps, self.link_rate_bps
                )));
            }
            if c.prio > 7 {
                return Err(bad(format!(
                    "class \"{}\": prio {} is not 0..=7",
                    c.name, c.prio
                )));
            }
        }
        Ok(())
    }

    fn class_line(
        &self,
        verb: &str,
        parent: (u16, u16),
        c: &HtbClass,
        major: u16,
        out: &mut String,
    ) {
        let _ = writeln!(
            out,
            "class {verb} dev {} parent {:x}:{:x} classid {major:x}:{:x} htb rate {}bit ceil {}bit prio {} quantum {}",
            self.dev,
            parent.0,
            parent.1,
            c.minor,
            c.rate_bps,
            c.ceil_bps,
            c.prio,
            quantum(c.rate_bps)
        );
    }

    fn root_and_default(&self, verb: &str, out: &mut String) {
        let (d, h, l) = (&self.dev, self.handle, self.link_rate_bps);
        let _ = writeln!(
            out,
            "class {verb} dev {d} parent {h:x}: classid {h:x}:{ROOT_MINOR:x} htb rate {l}bit ceil {l}bit quantum {}",
            quantum(l)
        );
        let default = HtbClass {
            minor: DEFAULT_MINOR,
            name: "default".into(),
            rate_bps: self.default_rate_bps,
            ceil_bps: l,
            prio: 7,
        };
        self.class_line(verb, (h, ROOT_MINOR), &default, h, out);
    }

    /// The group's outer class and its qdisc's root class (`verb` add or change).
    fn group_classes(&self, verb: &str, g: u16, rate: u64, out: &mut String) {
        let (d, h, l, i) = (
            &self.dev,
            self.handle,
            self.link_rate_bps,
            self.inner_handle(g),
        );
        let q = quantum(rate);
        let _ = writeln!(
            out,
            "class {verb} dev {d} parent {h:x}:{ROOT_MINOR:x} classid {h:x}:{:x} htb rate {rate}bit ceil {l}bit quantum {q}",
            GROUP_BASE + g
        );
        if verb == "add" {
            let _ = writeln!(
                out,
                "qdisc add dev {d} parent {h:x}:{:x} handle {i:x}: htb",
                GROUP_BASE + g
            );
        }
        let _ = writeln!(
            out,
            "class {verb} dev {d} parent {i:x}: classid {i:x}:{ROOT_MINOR:x} htb rate {rate}bit ceil {l}bit quantum {q}"
        );
        if verb == "add" {
            let _ = writeln!(
                out,
                "filter add dev {d} parent {i:x}: protocol all pref {FILTER_PREF} bpf bytecode \"{}\"",
                inner_bpf(h, i)
            );
        }
    }

    fn add_group(&self, g: u16, classes: &[&HtbClass], out: &mut String) {
        self.group_classes("add", g, group_rate(classes), out);
        let i = self.inner_handle(g);
        for c in classes {
            self.class_line("add", (i, ROOT_MINOR), c, i, out);
        }
    }

    /// The `tc -batch` script that creates the tree from nothing.
    pub fn install_script(&self) -> String {
        let (d, h) = (&self.dev, self.handle);
        let mut s = String::with_capacity(128 * (self.classes.len() + 4));
        let _ = writeln!(
            s,
            "qdisc add dev {d} root handle {h:x}: htb default {DEFAULT_MINOR:x}"
        );
        self.root_and_default("add", &mut s);
        for (g, classes) in self.groups() {
            self.add_group(g, &classes, &mut s);
        }
        let _ = writeln!(
            s,
            "filter add dev {d} parent {h:x}: protocol all pref {FILTER_PREF} bpf bytecode \"{}\"",
            outer_bpf(h)
        );
        s
    }

    /// The script that turns tree `old` into `self` on the same interface and handle,
    /// touching only the classes that differ: `class del` for the gone ones (first, so a
    /// freed rate is available), `class change` for the changed, `class add` for the new
    /// (and a group's class and qdisc when the group appears, changes rate or empties).
    /// Unchanged classes keep their queues and counters.
    pub fn update_script(&self, old: &HtbPlan) -> String {
        let mut s = String::new();
        let (d, h) = (&self.dev, self.handle);
        let (og, ng) = (old.groups(), self.groups());
        for (g, classes) in &og {
            match ng.get(g) {
                None => {
                    let _ = writeln!(s, "class del dev {d} classid {h:x}:{:x}", GROUP_BASE + g);
                }
                Some(new) => {
                    let keep: std::collections::HashSet<u16> =
                        new.iter().map(|c| c.minor).collect();
                    for c in classes.iter().filter(|c| !keep.contains(&c.minor)) {
                        let _ = writeln!(
                            s,
                            "class del dev {d} classid {:x}:{:x}",
                            self.inner_handle(*g),
                            c.minor
                        );
                    }
                }
            }
        }
        if (old.link_rate_bps, old.default_rate_bps) != (self.link_rate_bps, self.default_rate_bps)
        {
            self.root_and_default("change", &mut s);
        }
        for (g, classes) in &ng {
            let Some(oldc) = og.get(g) else {
                self.add_group(*g, classes, &mut s);
                continue;
            };
            if group_rate(oldc) != group_rate(classes) || old.link_rate_bps != self.link_rate_bps {
                self.group_classes("change", *g, group_rate(classes), &mut s);
            }
            let olds: std::collections::HashMap<u16, &&HtbClass> =
                oldc.iter().map(|c| (c.minor, c)).collect();
            let i = self.inner_handle(*g);
            for c in classes {
                match olds.get(&c.minor) {
                    Some(o)
                        if (o.rate_bps, o.ceil_bps, o.prio) == (c.rate_bps, c.ceil_bps, c.prio) => {
                    }
                    Some(_) => self.class_line("change", (i, ROOT_MINOR), c, i, &mut s),
                    None => self.class_line("add", (i, ROOT_MINOR), c, i, &mut s),
                }
            }
        }
        s
    }
}

/// The root qdisc of `dev`: `(kind, handle)` as tc prints them, e.g. `("htb", "1d0:")`.
pub fn root_qdisc(tc: &Tc, dev: &str) -> Result<(String, String), TcError> {
    let out = tc.run(&["qdisc", "show", "dev", dev, "root"], None)?;
    // "qdisc htb 1d0: root refcnt 2 r2q 10 default 0xffff ..."
    for line in out.lines() {
        let mut w = line.split_whitespace();
        if w.next() == Some("qdisc")
            && let (Some(kind), Some(handle)) = (w.next(), w.next())
        {
            return Ok((kind.to_owned(), handle.to_owned()));
        }
    }
    Err(TcError::Parse {
        what: format!("qdisc show dev {dev} root"),
        detail: format!("no root qdisc in {out:?}"),
    })
}

fn ours(kind: &str, handle: &str, major: u16) -> bool {
    kind == "htb" && handle == format!("{major:x}:")
}

/// Installs the tree (one `tc -batch` run). Idempotent: relayd's own tree already in place
/// is brought in line with the plan instead. A failure part-way removes what was added.
pub fn install(tc: &Tc, plan: &HtbPlan) -> Result<InstallOutcome, TcError> {
    plan.validate()?;
    let (kind, handle) = root_qdisc(tc, &plan.dev)?;
    let outcome = if ours(&kind, &handle, plan.handle) {
        // relayd's own tree from an earlier run (a crash, a double start): rebuilt from the
        // plan, since its classes may be anything.
        tc.batch(&format!(
            "qdisc del dev {} root handle {:x}:\n",
            plan.dev, plan.handle
        ))?;
        InstallOutcome::Replaced
    } else if handle != "0:" {
        return Err(TcError::ForeignQdisc {
            dev: plan.dev.clone(),
            kind,
            handle,
        });
    } else {
        InstallOutcome::Created
    };
    if let Err(e) = tc.batch(&plan.install_script()) {
        let _ = remove(tc, &plan.dev, plan.handle);
        return Err(e.into());
    }
    Ok(outcome)
}
/// Applies a changed plan, touching only the classes that differ (see
/// [`HtbPlan::update_script`]). A new interface or handle means remove and install.
pub fn update(tc: &Tc, old: &HtbPlan, new: &HtbPlan) -> Result<(), TcError> {
    new.validate()?;
    if (old.dev.as_str(), old.handle) != (new.dev.as_str(), new.handle) {
        remove(tc, &old.dev, old.handle)?;
        install(tc, new)?;
        return Ok(());
    }
    tc.batch(&new.update_script(old))?;
    Ok(())
}

/// Deletes relayd's root qdisc on `dev` (with its classes and filter), if it is there and
/// relayd's (`htb` with `handle`); anything else is left alone. Returns true if it deleted.
pub fn remove(tc: &Tc, dev: &str, handle: u16) -> Result<bool, TcError> {
    let (kind, h) = match root_qdisc(tc, dev) {
        Ok(r) => r,
        // The interface is gone: so is the qdisc.
        Err(TcError::Tool(ControlError::ToolFailed { stderr, .. }))
            if stderr.contains("Cannot find device") =>
        {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    if !ours(&kind, &h, handle) {
        return Ok(false);
    }
    tc.batch(&format!("qdisc del dev {dev} root handle {handle:x}:\n"))?;
    Ok(true)
}

/// Per-class counters of relayd's tree on `dev`: every VCAN class (by its minor), the root
/// class (minor 1) and the default class (0xffff). Read over rtnetlink (RTM_GETTCLASS), the
/// same dump the queue monitor reads qdiscs with, in the namespace `tc` runs in.
pub fn class_stats(tc: &Tc, dev: &str, handle: u16) -> Result<Vec<ClassStats>, TcError> {
    let raw = relay_netlink::in_netns(tc.netns.as_deref(), || {
        let ifindex = relay_netlink::ifindex(dev)?;
        let mut sock = relay_netlink::RtnlSocket::open()?;
        let mut all = Vec::new();
        sock.dump_classes(ifindex, |c| all.push(c))?;
        Ok(all)
    })
    .map_err(|source| TcError::Netlink {
        dev: dev.to_owned(),
        source,
    })?;
    Ok(select_classes(&raw, handle))
}

/// relayd's classes of tree `handle` among an interface's classes: the outer root and
/// default classes, and the VCAN classes in the group qdiscs; not the group classes nor
/// the groups' root classes.
fn select_classes(raw: &[relay_netlink::ClassStats], handle: u16) -> Vec<ClassStats> {
    raw.iter()
        .filter_map(|c| {
            let (major, minor) = ((c.handle >> 16) as u16, c.handle as u16);
            let outer = major == handle && (minor == ROOT_MINOR || minor == DEFAULT_MINOR);
            let inner =
                major > handle && u32::from(major) <= u32::from(handle) + 64 && minor != ROOT_MINOR;
            (outer || inner).then_some(ClassStats {
                minor,
                bytes: c.bytes,
                packets: c.packets,
                drops: u64::from(c.drops),
                overlimits: u64::from(c.overlimits),
                backlog_bytes: u64::from(c.backlog_bytes),
                backlog_packets: u64::from(c.qlen),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(n: u16) -> HtbPlan {
        HtbPlan {
            dev: "eth1".into(),
            handle: DEFAULT_HANDLE,
            link_rate_bps: 100_000_000,
            default_rate_bps: 1_000_000,
            classes: (0..n)
                .map(|i| HtbClass {
                    minor: 100 + i,
                    name: format!("v{i}"),
                    rate_bps: 10_000_000,
                    ceil_bps: 20_000_000,
                    prio: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn install_script_is_one_batch_with_one_filter_per_qdisc() {
        let s = plan(2).install_script();
        assert_eq!(
            s,
            "qdisc add dev eth1 root handle 1d0: htb default ffff\n\
             class add dev eth1 parent 1d0: classid 1d0:1 htb rate 100000000bit ceil 100000000bit quantum 200000\n\
             class add dev eth1 parent 1d0:1 classid 1d0:ffff htb rate 1000000bit ceil 100000000bit prio 7 quantum 12500\n\
             class add dev eth1 parent 1d0:1 classid 1d0:100 htb rate 20000000bit ceil 100000000bit quantum 200000\n\
             qdisc add dev eth1 parent 1d0:100 handle 1d1: htb\n\
             class add dev eth1 parent 1d1: classid 1d1:1 htb rate 20000000bit ceil 100000000bit quantum 200000\n\
             filter add dev eth1 parent 1d1: protocol all pref 1 bpf bytecode \"11,32 0 0 4294963220,7 0 0 0,116 0 0 16,84 0 0 16383,21 0 5 464,135 0 0 0,84 0 0 65535,21 2 0 0,68 0 0 30474240,22 0 0 0,6 0 0 0\"\n\
             class add dev eth1 parent 1d1:1 classid 1d1:64 htb rate 10000000bit ceil 20000000bit prio 0 quantum 125000\n\
             class add dev eth1 parent 1d1:1 classid 1d1:65 htb rate 10000000bit ceil 20000000bit prio 0 quantum 125000\n\
             filter add dev eth1 parent 1d0: protocol all pref 1 bpf bytecode \"13,32 0 0 4294963220,7 0 0 0,116 0 0 16,84 0 0 16383,21 0 7 464,135 0 0 0,84 0 0 65535,21 4 0 0,116 0 0 10,4 0 0 256,68 0 0 30408704,22 0 0 0,6 0 0 0\"\n"
        );
        assert_eq!(plan(1).mark(100), 0x01d0_0064);
    }

    #[test]
    fn update_touches_only_differing_classes() {
        let old = plan(3);
        let mut new = plan(3);
        new.classes.remove(0);
        new.classes[0].ceil_bps = 30_000_000;
        new.classes.push(HtbClass {
            minor: 0x500,
            name: "new".into(),
            rate_bps: 1_000_000,
            ceil_bps: 1_000_000,
            prio: 1,
        });
        assert_eq!(
            new.update_script(&old),
            "class del dev eth1 classid 1d1:64\n\
             class change dev eth1 parent 1d0:1 classid 1d0:100 htb rate 20000000bit ceil 100000000bit quantum 200000\n\
             class change dev eth1 parent 1d1: classid 1d1:1 htb rate 20000000bit ceil 100000000bit quantum 200000\n\
             class change dev eth1 parent 1d1:1 classid 1d1:65 htb rate 10000000bit ceil 30000000bit prio 0 quantum 125000\n\
             class add dev eth1 parent 1d0:1 classid 1d0:101 htb rate 1000000bit ceil 100000000bit quantum 12500\n\
             qdisc add dev eth1 parent 1d0:101 handle 1d2: htb\n\
             class add dev eth1 parent 1d2: classid 1d2:1 htb rate 1000000bit ceil 100000000bit quantum 12500\n\
             filter add dev eth1 parent 1d2: protocol all pref 1 bpf bytecode \"11,32 0 0 4294963220,7 0 0 0,116 0 0 16,84 0 0 16383,21 0 5 464,135 0 0 0,84 0 0 65535,21 2 0 0,68 0 0 30539776,22 0 0 0,6 0 0 0\"\n\
             class add dev eth1 parent 1d2:1 classid 1d2:500 htb rate 1000000bit ceil 1000000bit prio 1 quantum 12500\n"
        );
        assert_eq!(old.update_script(&old), "");
    }

    #[test]
    fn validate_names_the_problem() {
        let mut p = plan(2);
        p.classes[1].minor = 100;
        assert!(p.validate().unwrap_err().to_string().contains("used twice"));
        let mut p = plan(1);
        p.classes[0].ceil_bps = 1;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("rate <= ceil")
        );
        let mut p = plan(1);
        p.handle = 0x4000;
        assert!(p.validate().is_err());
    }

    #[test]
    fn selects_relayds_classes_of_the_tree() {
        let class = |major: u32, minor: u32, bytes: u64| relay_netlink::ClassStats {
            handle: major << 16 | minor,
            bytes,
            packets: 3,
            drops: 1,
            overlimits: 7,
            backlog_bytes: 12 * 1024,
            qlen: 9,
            ..Default::default()
        };
        let raw = [
            class(0x1d0, 1, 0),
            class(0x1d0, 0x100, 0),
            class(0x1d1, 0x64, 4200),
            class(0x1d1, 1, 5),
            class(1, 2, 5),
            class(0x1d0, 0xffff, 0),
        ];
        let s = select_classes(&raw, 0x1d0);
        let minors: Vec<u16> = s.iter().map(|c| c.minor).collect();
        assert_eq!(
            minors,
            [1, 0x64, 0xffff],
            "root, a VCAN of a group, default"
        );
        assert_eq!(
            s[1],
            ClassStats {
                minor: 0x64,
                bytes: 4200,
                packets: 3,
                drops: 1,
                overlimits: 7,
                backlog_bytes: 12 * 1024,
                backlog_packets: 9,
            }
        );
    }
}
