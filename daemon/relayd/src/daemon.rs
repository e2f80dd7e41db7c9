//! The running daemon: queues bound and served, rules installed, counters kept across
//! reloads. Order matters everywhere here so that no packet is lost and no rule is left:
//! queues are bound before the rules that feed them exist, and rules are removed before
//! the queues they feed are drained and unbound.

use crate::config::{Config, ListenerSpec, QueueSpec};
use crate::listeners::{self, Listeners};
use crate::qos::{self, QosSet};
use crate::resources::{self, OpenLogs, Provider, ServiceResources};
use crate::rules;
use crate::status::{KernelStatus, QueueStatus, Status};
use crate::xdp::XdpPorts;
use anyhow::{Context as _, bail};
use relay_control::IpVersion;
use relay_control::tc::Tc;
use relay_nfq::{Queue, QueueConfig};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod offload;
mod reload;

pub(crate) use crate::counter_store::CounterStore;
pub use crate::notify::Health;

struct Running {
    queue: Queue,
    cfg: QueueConfig,
    spec: QueueSpec,
}

/// Per offload skip-rule comment: the kernel's counters last read and the running totals,
/// each (packets, bytes).
type SkipTotals = BTreeMap<String, ([u64; 2], [u64; 2])>;

/// A running relayd.
pub struct Daemon {
    _lock: crate::lock::InstanceLock,
    config: Config,
    queues: BTreeMap<u16, Running>,
    counters: CounterStore,
    started: Instant,
    /// `started` on the wall clock (`relayd_start_time_seconds`).
    started_wall: std::time::SystemTime,
    reloads: u64,
    reload_failures: u64,
    listeners: Listeners,
    /// The split proxy's `ip rule` and route are in place (preference, table).
    routing: Option<(u32, u32)>,
    /// The tc trees the services declared (per-VCAN QoS), installed.
    qos: QosSet,
    /// The XDP ports (`[[xdp]]`), running.
    xdp: XdpPorts,
    /// Makes the services' resources from their manifests (keeps the queue monitor).
    provider: Provider,
    /// The resources of the configuration in force's services.
    resources: ServiceResources,
    /// Starts and reloads so far, from a random start: the offload generation
    /// ([`crate::config::set_generations`]).
    epoch: u64,
    /// Per skip-rule comment: the kernel's counters last read and the running totals
    /// (packets, bytes), so that the totals survive a reload's fresh rules.
    skipped: std::sync::Mutex<SkipTotals>,
}

/// What a reload leaves to the caller, which runs the tokio side: listeners to drain
/// (gone, or their options changed) and listeners to start (new, or changed).
#[derive(Debug, Default)]
pub struct ListenerChanges {
    /// Taken out of service: stop accepting, then drain.
    pub stop: Vec<(ListenerSpec, relay_proxy::ProxyHandle)>,
    /// To bind and start (after those stopped have released their address).
    pub start: Vec<ListenerSpec>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("queues", &self.queues.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Drains all queues at once (each waits for a quiet receive timeout), then waits for all.
fn stop_all(queues: impl IntoIterator<Item = Queue>) {
    let queues: Vec<Queue> = queues.into_iter().collect();
    for q in &queues {
        q.request_stop();
    }
    for q in queues {
        q.join();
    }
}

/// Removes the split proxy's policy routing a previous relayd left, if `config` has a
/// split proxy (found by its rule preference and table).
fn cleanup_routing(config: &Config) -> anyhow::Result<usize> {
    match &config.tproxy {
        Some(t) => listeners::remove_routing(t.spec.rule_pref, t.spec.table),
        None => Ok(0),
    }
}

/// Removes whatever a previous relayd with this prefix left (after a crash), all families.
pub fn cleanup_all(
    cfg_prefix: &str,
    flavor: crate::config::IptablesFlavor,
) -> anyhow::Result<usize> {
    let mut removed = 0;
    for f in [IpVersion::V4, IpVersion::V6] {
        let b = rules::backend(flavor, f);
        match relay_control::cleanup(cfg_prefix, &b) {
            Ok(r) => removed += r.chains.len() + r.rules,
            // ip6tables may be absent on an IPv4-only box: not an error for cleanup.
            Err(relay_control::ControlError::ToolMissing { .. }) if f == IpVersion::V6 => {}
            Err(e) => return Err(e).with_context(|| format!("cleaning up {f} rules")),
        }
    }
    Ok(removed)
}

impl Daemon {
    /// Starts: removes leftovers of a crashed run, binds every queue, then installs the
    /// rules. On failure everything done so far is undone.
    pub fn start(config: Config) -> anyhow::Result<Daemon> {
        let lock = crate::lock::InstanceLock::acquire(&config.daemon.chain_prefix)?;
        Daemon::start_locked(config, lock)
    }

    /// [`Daemon::start`] with the instance lock already taken (relayd takes it as root,
    /// before it drops to `daemon.user`).
    pub fn start_locked(config: Config, lock: crate::lock::InstanceLock) -> anyhow::Result<Daemon> {
        let logs = resources::open_logs(&config)?;
        Daemon::start_opened(config, lock, logs)
    }

    /// [`Daemon::start_locked`] with the services' log files already opened (relayd
    /// opens them as root, before it drops to `daemon.user`: [`resources::open_logs`]).
    pub fn start_opened(
        mut config: Config,
        lock: crate::lock::InstanceLock,
        logs: OpenLogs,
    ) -> anyhow::Result<Daemon> {
        // A generation no earlier run is likely to have left in conntrack marks.
        let epoch = u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
                ^ std::process::id(),
        );
        crate::config::set_generations(&mut config, epoch);
        let stale = cleanup_all(&config.daemon.chain_prefix, config.daemon.iptables)?
            + cleanup_routing(&config)?;
        if stale > 0 {
            tracing::warn!(
                removed = stale,
                "removed rules left by an earlier relayd (crash?)"
            );
        }
        // Offload marks an earlier run left, whatever their generation (this run has
        // offloaded nothing yet): before any skip rule of this run is in.
        let cleared = offload::clear_stale(&config, &[]);
        let mut d = Daemon {
            _lock: lock,
            config: config.clone(),
            queues: BTreeMap::new(),
            counters: CounterStore::default(),
            started: Instant::now(),
            started_wall: std::time::SystemTime::now(),
            reloads: 0,
            reload_failures: 0,
            epoch,
            skipped: std::sync::Mutex::default(),
            listeners: Listeners::default(),
            routing: None,
            qos: QosSet::new(Tc::system()),
            xdp: XdpPorts::default(),
            provider: Provider::live(),
            resources: ServiceResources::default(),
        };
        // What the services need started (the queue monitor, their log writers), before
        // anything is installed.
        d.resources = d.provider.resources(&config, logs)?;
        // The classes before the queues that mark packets for them.
        d.qos
            .apply(qos::plans(config.queue_services()).map_err(anyhow::Error::msg)?)
            .context("installing the services' tc trees")?;
        let res = d.resources.clone();
        let new = d.start_queues(&config, &res)?;
        d.queues.extend(new);
        if let Err(e) = d.xdp.start(
            &config.xdp,
            &mut d.counters,
            &d.resources,
            config.daemon.bypass_mark,
        ) {
            d.stop_queues();
            return Err(e);
        }
        // Listeners before the rules that divert to them, as queues before theirs.
        let started = Listeners::start(&config.listeners).and_then(|l| {
            d.listeners = l;
            d.install_routing(&config)
        });
        if let Err(e) = started.and_then(|()| d.install(&config)) {
            // Part of the rules may be in (one family, one table): never leave them
            // pointing at queues that are about to go.
            if let Err(c) = cleanup_all(&config.daemon.chain_prefix, config.daemon.iptables) {
                tracing::error!("removing partly installed rules: {c:#}");
            }
            d.remove_routing();
            d.stop_queues();
            return Err(e);
        }
        d.count_cleared(&cleared);
        for q in &config.queues {
            let names: Vec<&str> = q.services.iter().map(|(n, _)| n.as_str()).collect();
            tracing::info!(
                queues = %format!("{}-{}", q.first, q.last),
                hook = %q.hook,
                fail_open = q.queue.fail_open,
                gso = q.queue.gso,
                "serving chain [{}]",
                names.join(", ")
            );
        }
        Ok(d)
    }

    /// Binds the queues of `config` that are not running yet. All or nothing.
    fn start_queues(
        &mut self,
        config: &Config,
        res: &ServiceResources,
    ) -> anyhow::Result<BTreeMap<u16, Running>> {
        let mut started = BTreeMap::new();
        for spec in &config.queues {
            for num in spec.nums() {
                if self.queues.contains_key(&num) {
                    continue;
                }
                let cfg = spec.queue_config(num);
                let chain = self
                    .counters
                    .chain(spec, res, num, config.daemon.bypass_mark);
                let counters = self.counters.queue(num);
                match Queue::start(&cfg, chain, counters) {
                    Ok(queue) => {
                        if queue.rcvbuf() < cfg.rcvbuf {
                            tracing::warn!(
                                queue = num,
                                granted = queue.rcvbuf(),
                                "receive buffer smaller than asked"
                            );
                        }
                        started.insert(
                            num,
                            Running {
                                queue,
                                cfg,
                                spec: spec.clone(),
                            },
                        );
                    }
                    Err(e) => {
                        stop_all(std::mem::take(&mut started).into_values().map(|r| r.queue));
                        return Err(e).with_context(|| format!("starting queue {num}"));
                    }
                }
            }
        }
        Ok(started)
    }

    /// Installs the split proxy's `ip rule` and local route if `config` has a split proxy,
    /// replacing those of another preference or table.
    fn install_routing(&mut self, config: &Config) -> anyhow::Result<()> {
        let want = config
            .tproxy
            .as_ref()
            .map(|t| (t.spec.rule_pref, t.spec.table));
        if self.routing.is_some() && self.routing != want {
            self.remove_routing();
        }
        if let Some(t) = &config.tproxy {
            // A different fwmark at the same preference and table: replace it.
            listeners::remove_routing(t.spec.rule_pref, t.spec.table)?;
            t.spec
                .install_routing(None)
                .context("installing the split proxy's ip rule and local route")?;
            self.routing = want;
        }
        Ok(())
    }

    /// Removes the split proxy's `ip rule` and route, if installed (errors logged).
    fn remove_routing(&mut self) {
        if let Some((pref, table)) = self.routing.take()
            && let Err(e) = listeners::remove_routing(pref, table)
        {
            tracing::error!("removing the split proxy's ip rule and route: {e:#}");
        }
    }

    fn install(&self, config: &Config) -> anyhow::Result<()> {
        let rs = rules::ruleset(config);
        let used = rules::families(config);
        for f in [IpVersion::V4, IpVersion::V6] {
            let b = rules::backend(config.daemon.iptables, f);
            if used.contains(&f) {
                rs.install(&b)
                    .with_context(|| format!("installing {f} rules"))?;
            } else if let Err(e) = relay_control::cleanup(&config.daemon.chain_prefix, &b) {
                // Only matters if an earlier configuration used this family.
                tracing::debug!("no {f} rules to clean: {e}");
            }
        }
        Ok(())
    }

    /// Drains a listener a reload took out of service, in the background.
    pub fn drain_listener(&mut self, spec: ListenerSpec, handle: relay_proxy::ProxyHandle) {
        self.listeners.drain(spec, handle);
    }

    /// Adds a listener started after a reload.
    pub fn add_listener(&mut self, spec: ListenerSpec, handle: relay_proxy::ProxyHandle) {
        self.listeners.insert(spec, handle);
    }

    /// First half of a graceful stop: no new packet is queued and no new connection split
    /// (queue rules removed, so SYNs pass natively), the queues are drained and unbound,
    /// but the TPROXY rules and the route stay, so that connections already split keep
    /// reaching the proxy while it drains. Returns the listeners to drain; then call
    /// [`Daemon::shutdown`].
    pub fn stop_serving(&mut self) -> Vec<(String, std::time::Duration, relay_proxy::ProxyHandle)> {
        let active = self.listeners.status().iter().any(|l| l.stats.active > 0);
        let keep_tproxy = active && self.config.tproxy.is_some();
        let r = if keep_tproxy {
            let rs = rules::drain_ruleset(&self.config);
            rules::families(&self.config)
                .into_iter()
                .try_for_each(|f| {
                    rs.install(&rules::backend(self.config.daemon.iptables, f))
                        .map(|_| ())
                })
                .map_err(anyhow::Error::from)
        } else {
            cleanup_all(
                &self.config.daemon.chain_prefix,
                self.config.daemon.iptables,
            )
            .map(|_| ())
        };
        if let Err(e) = r {
            tracing::error!("removing the queue rules: {e:#}");
        }
        self.stop_queues();
        self.listeners.take_all()
    }

    /// Stops: removes the rules (traffic flows unqueued from here on), then drains and
    /// unbinds every queue.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        let r = cleanup_all(
            &self.config.daemon.chain_prefix,
            self.config.daemon.iptables,
        );
        self.remove_routing();
        self.stop_queues();
        let tc = self.qos.remove_all();
        r?;
        match tc.first() {
            Some(e) => bail!("{e}"),
            None => Ok(()),
        }
    }

    fn stop_queues(&mut self) {
        self.xdp.stop_all();
        stop_all(
            std::mem::take(&mut self.queues)
                .into_values()
                .map(|r| r.queue),
        );
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Queues whose thread has stopped although the daemon did not stop it.
    pub fn dead_queues(&self) -> Vec<u16> {
        let mut dead: Vec<u16> = self
            .queues
            .iter()
            .filter(|(_, r)| !r.queue.is_running())
            .map(|(n, _)| *n)
            .collect();
        dead.extend(self.xdp.threads().into_iter().filter(|t| !t.1).map(|t| t.0));
        dead
    }

    /// The queue threads' health: dead ones, and live ones that have not gone round their
    /// loop for longer than `stuck_after` ([`relay_nfq::Queue::since_last_loop`]; a
    /// healthy one does at least every [`relay_nfq::IDLE_WAKE`]). Call it periodically:
    /// a stall is measured from the first call that saw the thread's heartbeat stand still.
    /// Takes no lock the queue threads take.
    pub fn health(&self, stuck_after: Duration) -> Health {
        let xdp = self.xdp.threads();
        let mut h = Health {
            queues: self.queues.len() + xdp.len(),
            listeners: self
                .listeners
                .status()
                .iter()
                .filter(|l| l.state == "running")
                .count(),
            ..Health::default()
        };
        for (num, r) in &self.queues {
            // Read for every queue, so that each one's view of its heartbeat stays current.
            let idle = r.queue.since_last_loop();
            if !r.queue.is_running() {
                h.dead.push(*num);
            } else if idle > stuck_after {
                h.stuck.push((*num, idle));
            }
        }
        for (num, running, idle) in xdp {
            if !running {
                h.dead.push(num);
            } else if idle > stuck_after {
                h.stuck.push((num, idle));
            }
        }
        h
    }

    /// Counts a refused reload (the configuration did not load, or [`Daemon::reload`]
    /// failed and kept the running one), for `relayd_reload_failures_total`.
    pub fn reload_failed(&mut self) {
        self.reload_failures += 1;
    }

    /// Reads the packets and bytes the offloading queues' skip rules let by into their
    /// first queue's `offload.skipped_*` (an iptables-save per family; control plane).
    fn read_skipped(&self) {
        let specs: Vec<&QueueSpec> = self
            .config
            .queues
            .iter()
            .filter(|q| q.queue.offload.is_some())
            .collect();
        if specs.is_empty() {
            return;
        }
        let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for f in rules::families(&self.config) {
            let b = rules::backend(self.config.daemon.iptables, f);
            match relay_control::commented_counters(&b, "relayd-offload-") {
                Ok(found) => {
                    for (c, p, n) in found {
                        let e = sums.entry(c).or_default();
                        e.0 += p;
                        e.1 += n;
                    }
                }
                Err(e) => tracing::debug!("offload skip counters unread: {e}"),
            }
        }
        let mut totals = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        for spec in specs {
            let comment = rules::offload_comment(spec.first);
            let (p, b) = sums.get(&comment).copied().unwrap_or_default();
            let (seen, total) = totals.entry(comment).or_default();
            for (i, now) in [p, b].into_iter().enumerate() {
                // Lower than last time: the rules were installed afresh (a reload).
                total[i] += if now >= seen[i] { now - seen[i] } else { now };
                seen[i] = now;
            }
            if let Some(r) = self.queues.get(&spec.first) {
                let o = &r.queue.counters().offload;
                o.skipped_packets.set(total[0]);
                o.skipped_bytes.set(total[1]);
            }
        }
    }

    /// A snapshot of every counter.
    pub fn status(&self) -> Status {
        self.read_skipped();
        let kernel = relay_nfq::procfs::read();
        let mut queues = Vec::new();
        for (num, r) in &self.queues {
            let c = r.queue.counters();
            let k = kernel.get(num).map(|k| KernelStatus {
                waiting: k.queue_total,
                queue_dropped: k.queue_dropped,
                user_dropped: k.user_dropped,
            });
            queues.push(QueueStatus::new(*num, &r.spec, r.cfg.gso, c, k));
        }
        let (xdp_queues, xdp) = self.xdp.status();
        queues.extend(xdp_queues);
        queues.sort_by_key(|q| q.num);
        let services = self.counters.services_status(|num, name, kind| {
            self.queues.get(&num).is_some_and(|r| {
                r.spec
                    .services
                    .iter()
                    .any(|(n, f)| n == name && f.kind() == kind)
            }) || self.xdp.serves(num, name, kind)
        });
        Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            config: self.config.path.display().to_string(),
            reloads: self.reloads,
            reload_failures: self.reload_failures,
            start_time_ms: self
                .started_wall
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            unhealthy_queues: {
                let h = self.health(crate::notify::DEFAULT_STUCK);
                let mut q = h.dead;
                q.extend(h.stuck.iter().map(|(n, _)| *n));
                q.sort_unstable();
                q
            },
            queues,
            services,
            listeners: self.listeners.status(),
            qos: self.qos.stats(),
            xdp,
            ike: Vec::new(),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !self.queues.is_empty() || self.routing.is_some() || !self.xdp.is_empty() {
            // Reached only on an error path: never leave rules feeding dead queues.
            let _ = cleanup_all(
                &self.config.daemon.chain_prefix,
                self.config.daemon.iptables,
            );
            self.remove_routing();
            self.stop_queues();
        }
    }
}
