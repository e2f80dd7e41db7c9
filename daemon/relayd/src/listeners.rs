//! The proxy listeners the daemon runs on its tokio runtime (`socks5`, and the transparent
//! listener of the split proxy), and the split proxy's local-delivery `ip rule` and route.
//!
//! Listeners are not chain services: they are started before the rules that divert to
//! them, restarted on SIGHUP only when their options changed (the old one stops accepting
//! and drains its connections in the background), and drained, within their
//! `drain_timeout_secs`, on SIGTERM/SIGINT.

use crate::config::{ListenerKind, ListenerSpec};
use crate::status::ListenerStatus;
use anyhow::Context as _;
use relay_proxy::{ProxyHandle, Socks5Proxy, Stats, StatsSnapshot, TransparentProxy, Upstream};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

struct Running {
    spec: ListenerSpec,
    handle: ProxyHandle,
}

/// A listener a reload replaced or removed, finishing its live connections.
struct Draining {
    name: String,
    kind: &'static str,
    listen: SocketAddr,
    upstream: Upstream,
    stats: Arc<Stats>,
    task: JoinHandle<StatsSnapshot>,
}

/// The running listeners, by name, and those draining after a reload.
#[derive(Default)]
pub struct Listeners {
    running: BTreeMap<String, Running>,
    draining: Vec<Draining>,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listeners")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .field("draining", &self.draining.len())
            .finish()
    }
}

/// Binds and starts one listener. Needs a tokio runtime (the daemon's).
pub fn bind(spec: &ListenerSpec) -> Result<ProxyHandle, relay_proxy::ProxyError> {
    match &spec.kind {
        ListenerKind::Socks5(c) => Socks5Proxy::bind(c.clone())?.spawn(),
        ListenerKind::Transparent(c) => TransparentProxy::bind(c.clone())?.spawn(),
    }
}

fn upstream_name(u: Upstream) -> &'static str {
    match u {
        Upstream::Mptcp => "mptcp",
        _ => "tcp",
    }
}

impl Listeners {
    /// Starts every listener of `specs`; all or nothing.
    pub fn start(specs: &[ListenerSpec]) -> anyhow::Result<Listeners> {
        let mut out = Listeners::default();
        for spec in specs {
            // On error the listeners started so far drop, which closes them at once.
            let handle = bind(spec).with_context(|| {
                format!(
                    "starting {} listener `{}` on {}",
                    spec.kind.as_str(),
                    spec.name,
                    spec.kind.listen()
                )
            })?;
            tracing::info!(
                listener = %spec.name,
                kind = spec.kind.as_str(),
                listen = %handle.local_addr(),
                upstream = upstream_name(spec.kind.upstream()),
                "listener running"
            );
            out.insert(spec.clone(), handle);
        }
        Ok(out)
    }

    /// Adds a started listener.
    pub fn insert(&mut self, spec: ListenerSpec, handle: ProxyHandle) {
        self.running
            .insert(spec.name.clone(), Running { spec, handle });
    }

    /// For a reload to `new`: takes out the listeners that are gone or whose options
    /// changed (the caller drains them) and returns the specs to start. Unchanged
    /// listeners keep running with their connections and counters.
    pub fn take_changed(
        &mut self,
        new: &[ListenerSpec],
    ) -> (Vec<(ListenerSpec, ProxyHandle)>, Vec<ListenerSpec>) {
        let mut stop = Vec::new();
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            let keep = new
                .iter()
                .any(|n| n.name == name && n.kind == self.running[&name].spec.kind);
            if !keep && let Some(r) = self.running.remove(&name) {
                stop.push((r.spec, r.handle));
            }
        }
        // Listeners kept renew their snapshot of the relay's addresses, which the SOCKS5
        // destination policy refuses (new ones read it when they bind).
        for (name, r) in &self.running {
            if let Err(e) = r.handle.refresh_local_addresses() {
                tracing::warn!(listener = %name, "re-reading the local addresses: {e}");
            }
        }
        let start = new
            .iter()
            .filter(|n| !self.running.contains_key(&n.name))
            .cloned()
            .collect();
        (stop, start)
    }

    /// Drains `handle` in the background; its counters stay in the status until it ends.
    pub fn drain(&mut self, spec: ListenerSpec, handle: ProxyHandle) {
        self.draining.retain(|d| !d.task.is_finished());
        let (listen, stats) = (handle.local_addr(), handle.stats_handle());
        let name = spec.name.clone();
        let task = tokio::spawn(async move {
            let s = handle.shutdown().await;
            tracing::info!(listener = %name, completed = s.completed, aborted = s.drained_aborts, "old listener drained");
            s
        });
        self.draining.push(Draining {
            name: spec.name.clone(),
            kind: spec.kind.as_str(),
            listen,
            upstream: spec.kind.upstream(),
            stats,
            task,
        });
    }

    /// Takes every running listener out (for the drain on exit), with its drain deadline.
    pub fn take_all(&mut self) -> Vec<(String, Duration, ProxyHandle)> {
        std::mem::take(&mut self.running)
            .into_iter()
            .map(|(n, r)| (n, r.spec.kind.drain_timeout(), r.handle))
            .collect()
    }

    /// Whether no listener runs or drains.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty() && self.draining.iter().all(|d| d.task.is_finished())
    }

    /// Counters of every listener, running ones first.
    pub fn status(&self) -> Vec<ListenerStatus> {
        let mut out: Vec<ListenerStatus> = self
            .running
            .values()
            .map(|r| ListenerStatus {
                name: r.spec.name.clone(),
                kind: r.spec.kind.as_str().to_string(),
                listen: r.handle.local_addr().to_string(),
                upstream: upstream_name(r.spec.kind.upstream()).to_string(),
                state: "running".into(),
                stats: r.handle.stats(),
            })
            .collect();
        out.extend(
            self.draining
                .iter()
                .filter(|d| !d.task.is_finished())
                .map(|d| ListenerStatus {
                    name: d.name.clone(),
                    kind: d.kind.to_string(),
                    listen: d.listen.to_string(),
                    upstream: upstream_name(d.upstream).to_string(),
                    state: "draining".into(),
                    stats: d.stats.snapshot(),
                }),
        );
        out
    }
}

/// Drains listeners on exit, all at once, each within its own deadline; returns when all
/// are done (a reset of what is left bounds each one).
pub async fn drain_all(handles: Vec<(String, Duration, ProxyHandle)>) {
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|(name, deadline, h)| {
            tokio::spawn(async move {
                let active = h.stats().active;
                if active > 0 {
                    tracing::info!(listener = %name, active, "draining connections");
                }
                let s = h.shutdown_within(deadline).await;
                tracing::info!(
                    listener = %name,
                    accepted = s.accepted,
                    completed = s.completed,
                    aborted = s.drained_aborts,
                    "listener stopped"
                );
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// Binds `spec`, retrying while its address is still held by the listener a reload just
/// stopped (its accept task closes the socket on its next turn).
pub async fn bind_retrying(spec: &ListenerSpec) -> anyhow::Result<ProxyHandle> {
    let mut last = None;
    for _ in 0..40 {
        match bind(spec) {
            Ok(h) => return Ok(h),
            Err(relay_proxy::ProxyError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                last = Some(source);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(anyhow::anyhow!(
        "{} still in use after 2 s: {}",
        spec.kind.listen(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Runs `ip ARGS` and returns stdout, or stderr as the error.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        anyhow::bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    }
}

/// Removes the split proxy's local-delivery policy routing, found by relayd's own rule
/// preference and table (whatever its fwmark): every `ip rule` at preference `pref` that
/// looks up `table`, and the `local default dev lo` route in `table`, both families. For
/// exit, reloads and `relayd cleanup` after a crash. Returns how many it removed.
pub fn remove_routing(pref: u32, table: u32) -> anyhow::Result<usize> {
    let (pref, table) = (pref.to_string(), table.to_string());
    let lookup = format!("lookup {table}");
    let mut removed = 0;
    for f in ["-4", "-6"] {
        // Bounded: each pass removes one rule.
        for _ in 0..64 {
            let rules = match ip(&[f, "rule", "show", "pref", &pref]) {
                Ok(r) => r,
                // No IPv6 on this box: nothing of ours there.
                Err(_) if f == "-6" => break,
                Err(e) => return Err(e),
            };
            if !rules.lines().any(|l| l.contains(&lookup)) {
                break;
            }
            ip(&[f, "rule", "del", "pref", &pref, "lookup", &table])?;
            removed += 1;
        }
        let routes = ip(&[f, "route", "show", "table", &table]).unwrap_or_default();
        if routes
            .lines()
            .any(|l| l.starts_with("local default dev lo"))
        {
            ip(&[
                f, "route", "del", "local", "default", "dev", "lo", "table", &table,
            ])?;
            removed += 1;
        }
    }
    Ok(removed)
}
