//! The `[daemon]` section: the status socket, relayd's chains and mark bits, metrics,
//! and the user relayd drops to.

use super::error::Ctx;
use super::queue::QueueSpec;
use relay_core::CtMarkBits;
use serde::Deserialize;
use std::path::PathBuf;
use toml::Spanned;

/// The `[daemon]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Path of the status socket.
    pub socket: PathBuf,
    /// Prefix of relayd's iptables chains.
    pub chain_prefix: String,
    /// The two mark bits in which packets relayd repeats or sends itself carry the stage of
    /// the hook they were handled at, so that relayd's rules at hooks they have crossed skip
    /// them (see [`relay_core::StageMark`]).
    pub bypass_mark: u32,
    /// Which iptables to drive: the system's default (`auto`) or `legacy`.
    pub iptables: IptablesFlavor,
    /// The nfmark bits relayd's rules use to hand a queue's services the packet's
    /// conntrack state (only on queues whose services read it; cleared again before the
    /// packet leaves).
    pub ct_mark_bits: CtMarkBits,
    /// Where `/metrics` (Prometheus/OpenMetrics text) is served, if anywhere
    /// (`daemon.metrics`). A non-loopback address needs `daemon.metrics_public = true`,
    /// so that counters are never exposed to a network by a typo.
    pub metrics: Option<std::net::SocketAddr>,
    /// The user relayd drops to when started as root (`daemon.user`), once its status
    /// socket is bound and its lock taken, before it binds a queue: its name as
    /// configured, uid and primary gid. `None`: relayd keeps the user it was started as.
    pub user: Option<DaemonUser>,
    /// The group that owns the status socket (`daemon.socket_group`), whose members may
    /// query and command relayd: mode 0660 then, else 0600.
    pub socket_group: Option<u32>,
    /// The conntrack mark bits relayd owns for NFQUEUE flow offload
    /// (`daemon.offload_mark`, docs/offload.md): its lowest bit marks an offloaded
    /// original direction, the next one the reply direction, the rest hold the generation.
    pub offload_mark: u32,
}

/// Default offload bits (`daemon.offload_mark`).
pub const DEFAULT_OFFLOAD_MARK: u32 = 0x00ff_0000;

/// `daemon.user`, resolved when the configuration is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonUser {
    /// The name (or number) as configured.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// The line of `daemon.user` in the file, for errors about what that user may do.
    pub line: usize,
}

/// Default conntrack mark bits: tracked, established, related, reply (highest first).
pub const DEFAULT_CT_MARK_BITS: u32 = 0x0f00_0000;

/// Four single bits of `mask`, highest first, as tracked, established, related, reply;
/// `None` unless `mask` has exactly four bits.
pub fn ct_bits_from_mask(mask: u32) -> Option<CtMarkBits> {
    if mask.count_ones() != 4 {
        return None;
    }
    let mut bits = (0..32).rev().map(|i| 1u32 << i).filter(|b| mask & b != 0);
    Some(CtMarkBits {
        tracked: bits.next()?,
        established: bits.next()?,
        related: bits.next()?,
        reply: bits.next()?,
    })
}

/// Which iptables tools relayd runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IptablesFlavor {
    /// `iptables-restore` as installed (nf_tables or legacy, per the system's alternative).
    Auto,
    /// `iptables-legacy-restore`.
    Legacy,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    socket: Option<PathBuf>,
    chain_prefix: Option<Spanned<String>>,
    bypass_mark: Option<Spanned<toml::Value>>,
    iptables: Option<IptablesFlavor>,
    ct_mark_bits: Option<Spanned<toml::Value>>,
    user: Option<Spanned<String>>,
    socket_group: Option<Spanned<String>>,
    metrics: Option<Spanned<String>>,
    metrics_public: Option<bool>,
    offload_mark: Option<Spanned<toml::Value>>,
}

/// Default status socket path.
pub const DEFAULT_SOCKET: &str = "/run/relayd/relayd.sock";

/// Checks `[daemon]`: every key given replaces its default.
pub(super) fn check_daemon(cx: &mut Ctx<'_>, d: RawDaemon) -> DaemonConfig {
    let mut out = DaemonConfig {
        socket: d
            .socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
        chain_prefix: "RELAYD".into(),
        bypass_mark: relay_core::StageMark::DEFAULT_MASK,
        iptables: d.iptables.unwrap_or(IptablesFlavor::Auto),
        ct_mark_bits: ct_bits_from_mask(DEFAULT_CT_MARK_BITS).expect("four bits"),
        metrics: None,
        user: None,
        socket_group: None,
        offload_mark: DEFAULT_OFFLOAD_MARK,
    };
    check_user_and_group(cx, &d, &mut out);
    check_metrics(cx, &d, &mut out);
    check_chain_prefix(cx, &d, &mut out);
    check_mark_bits(cx, &d, &mut out);
    check_offload_mark(cx, &d, &mut out);
    out
}

/// `offload_mark`: at least four contiguous bits, apart from relayd's other bits.
fn check_offload_mark(cx: &mut Ctx<'_>, d: &RawDaemon, out: &mut DaemonConfig) {
    let span = d.offload_mark.as_ref().map(|m| m.span());
    if let Some(m) = &d.offload_mark {
        match parse_u32(m.get_ref()) {
            Some(v)
                if v.count_ones() >= 4
                    && (v >> v.trailing_zeros()).count_ones()
                        == 32 - v.leading_zeros() - v.trailing_zeros() =>
            {
                out.offload_mark = v
            }
            _ => {
                cx.err(
                    span,
                    "daemon.offload_mark",
                    "must be a 32-bit mask of at least four contiguous bits, e.g. \"0x00ff0000\": \
                     two direction bits and a generation",
                );
                return;
            }
        }
    }
    for (other, bits) in [
        ("daemon.bypass_mark", out.bypass_mark),
        ("daemon.ct_mark_bits", out.ct_mark_bits.mask()),
    ] {
        if out.offload_mark & bits != 0 {
            cx.err(
                span.clone(),
                "daemon.offload_mark",
                format!(
                    "{:#010x} overlaps {other} ({bits:#010x}): choose other bits",
                    out.offload_mark
                ),
            );
        }
    }
}

/// `user` (resolved now, and not root) and `socket_group`.
fn check_user_and_group(cx: &mut Ctx<'_>, d: &RawDaemon, out: &mut DaemonConfig) {
    if let Some(u) = &d.user {
        match crate::users::lookup_user(u.get_ref()) {
            Ok((0, _)) => cx.err(
                Some(u.span()),
                "daemon.user",
                format!(
                    "`{}` is root (uid 0): there is nothing to drop to; remove daemon.user \
                     or name an unprivileged user",
                    u.get_ref()
                ),
            ),
            Ok((uid, gid)) => {
                out.user = Some(DaemonUser {
                    name: u.get_ref().clone(),
                    uid,
                    gid,
                    line: cx.line_col(u.span().start).0,
                })
            }
            Err(e) => cx.err(Some(u.span()), "daemon.user", e),
        }
    }
    if let Some(g) = &d.socket_group {
        match crate::users::lookup_group(g.get_ref()) {
            Ok(gid) => out.socket_group = Some(gid),
            Err(e) => cx.err(Some(g.span()), "daemon.socket_group", e),
        }
    }
}

/// `metrics`: an address and port, on loopback unless `metrics_public`.
fn check_metrics(cx: &mut Ctx<'_>, d: &RawDaemon, out: &mut DaemonConfig) {
    if let Some(m) = &d.metrics {
        match m.get_ref().trim().parse::<std::net::SocketAddr>() {
            Ok(a) if a.ip().is_loopback() || d.metrics_public == Some(true) => {
                out.metrics = Some(a);
            }
            Ok(a) => cx.err(
                Some(m.span()),
                "daemon.metrics",
                format!(
                    "{a} is not a loopback address: anyone who can reach it reads relayd's \
                     counters; set daemon.metrics_public = true to serve it anyway"
                ),
            ),
            Err(_) => cx.err(
                Some(m.span()),
                "daemon.metrics",
                "must be an IP address and port, e.g. \"127.0.0.1:9477\" or \"[::1]:9477\"",
            ),
        }
    }
}

/// `chain_prefix`: a short name iptables takes in a chain name.
fn check_chain_prefix(cx: &mut Ctx<'_>, d: &RawDaemon, out: &mut DaemonConfig) {
    if let Some(p) = &d.chain_prefix {
        let ok = p.get_ref().len() <= 16
            && p.get_ref().starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.get_ref()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if ok {
            out.chain_prefix = p.get_ref().clone();
        } else {
            cx.err(
                Some(p.span()),
                "daemon.chain_prefix",
                "must be 1-16 characters of A-Z, a-z, 0-9, _ or -, starting with a letter or digit",
            );
        }
    }
}

/// `bypass_mark` (relayd's two stage bits) and `ct_mark_bits` (four bits besides them).
fn check_mark_bits(cx: &mut Ctx<'_>, d: &RawDaemon, out: &mut DaemonConfig) {
    if let Some(m) = &d.bypass_mark {
        match parse_u32(m.get_ref()) {
            Some(v) if v.count_ones() == 2 => out.bypass_mark = v,
            _ => cx.err(
                Some(m.span()),
                "daemon.bypass_mark",
                "must be a 32-bit mask with exactly two bits set, e.g. \"0xc0000000\": relayd \
                 keeps in them which hooks a packet it sent or repeated has crossed",
            ),
        }
    }
    if let Some(m) = &d.ct_mark_bits {
        match parse_u32(m.get_ref()).and_then(ct_bits_from_mask) {
            Some(b) if b.mask() & out.bypass_mark == 0 => out.ct_mark_bits = b,
            Some(_) => cx.err(
                Some(m.span()),
                "daemon.ct_mark_bits",
                "overlaps daemon.bypass_mark",
            ),
            None => cx.err(
                Some(m.span()),
                "daemon.ct_mark_bits",
                "must be a 32-bit mask with exactly four bits set, e.g. \"0x0f000000\"",
            ),
        }
    } else if out.ct_mark_bits.mask() & out.bypass_mark != 0 {
        cx.err(
            None,
            "daemon.ct_mark_bits",
            "the default bits 0x0f000000 overlap daemon.bypass_mark: choose other ones",
        );
    }
}

/// Warns when relayd drops to `daemon.user` and runs services that re-read files on a
/// reload (key files, EVE logs) as that user, which cannot read root's 0600 keys.
pub(super) fn warn_rereads_as_user(cx: &mut Ctx<'_>, daemon: &DaemonConfig, queues: &[QueueSpec]) {
    let Some(u) = &daemon.user else {
        return;
    };
    // Reloads read the file again as that user, and the key files and EVE log with it.
    let rereads: Vec<String> = queues
        .iter()
        .flat_map(|q| q.services.iter())
        .filter(|(_, f)| matches!(f.kind(), "encrypt" | "decrypt" | "ids"))
        .map(|(name, f)| format!("{name} ({})", f.kind()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !rereads.is_empty() {
        cx.warn(
            None,
            "daemon.user",
            format!(
                "reloads re-read key files and reopen EVE logs as `{}`, which cannot read \
                 root's 0600 keys: with {} a reload will be refused; restart instead, or run \
                 relayd as that user from the start (docs/operations.md, Least privilege)",
                u.name,
                rereads.join(", ")
            ),
        );
    }
}

pub(super) fn parse_u32(v: &toml::Value) -> Option<u32> {
    match v {
        toml::Value::Integer(i) => u32::try_from(*i).ok(),
        toml::Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_util::{errs, first_err, parsed};

    #[test]
    fn metrics_must_be_loopback_unless_public() {
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"a\"]\n[service.a]\nkind = \"accept\"\n";
        let c = parsed(&format!("[daemon]\nmetrics = \"127.0.0.1:9477\"\n{q}"));
        assert_eq!(c.daemon.metrics, Some("127.0.0.1:9477".parse().unwrap()));
        let c = parsed(&format!("[daemon]\nmetrics = \"[::1]:9477\"\n{q}"));
        assert_eq!(c.daemon.metrics, Some("[::1]:9477".parse().unwrap()));
        assert_eq!(parsed(q).daemon.metrics, None);
        let e = first_err(
            &format!("[daemon]\nsocket = \"/tmp/x\"\nmetrics = \"0.0.0.0:9477\"\n{q}"),
            3,
            "daemon.metrics",
        );
        assert!(e[0].message.contains("metrics_public"), "{e:?}");
        first_err(
            &format!("[daemon]\nmetrics = \"localhost:9477\"\n{q}"),
            2,
            "daemon.metrics",
        );
        let c = parsed(&format!(
            "[daemon]\nmetrics = \"0.0.0.0:9477\"\nmetrics_public = true\n{q}"
        ));
        assert_eq!(c.daemon.metrics, Some("0.0.0.0:9477".parse().unwrap()));
    }

    #[test]
    fn conntrack_mark_bits_and_held_packets() {
        assert_eq!(
            ct_bits_from_mask(0x0f00_0000),
            Some(CtMarkBits {
                tracked: 0x0800_0000,
                established: 0x0400_0000,
                related: 0x0200_0000,
                reply: 0x0100_0000,
            })
        );
        assert_eq!(ct_bits_from_mask(0x7), None);
        first_err(
            "[daemon]\nct_mark_bits = \"0x3\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
            2,
            "daemon.ct_mark_bits",
        );
        let e = errs(
            "[daemon]\nbypass_mark = \"0x03000000\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
        );
        assert_eq!(e[0].field, "daemon.ct_mark_bits", "{e:?}");
        // A delaying queue holds packets: its kernel queue is made long enough, or refused.
        let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n";
        let svc = "[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 5000\n";
        let cfg = parsed(&format!("{q}{svc}"));
        assert_eq!(cfg.queues[0].queue.hold.max_packets, 5000);
        assert!(cfg.queues[0].queue.max_len >= 5000 + cfg.queues[0].queue.batch as u32);
        let e = errs(&format!("{q}max_len = 100\n{svc}"));
        assert_eq!(e[0].field, "queue[0].max_len", "{e:?}");
    }
}
