//! The daemon's XDP ports (`[[xdp]]` entries, docs/xdp.md): started with the NFQUEUE
//! queues, reconfigured on reload, stopped on exit, and shown in the status like queues.
//!
//! On reload a port whose settings are unchanged keeps running and switches its queues'
//! chains between two rounds, as an NFQUEUE queue does. A port whose rx queues, match,
//! policy or socket settings changed is started anew: its threads stop with its program
//! left attached (matched packets meanwhile get the old failure policy: a fail-closed
//! port stays closed), and the new program replaces it. A port whose entry is gone is
//! detached. With `offload` on, a reload that reaches a running port revokes the flows it
//! offloaded (XdpPort::update), so that the new chain sees every flow.

use crate::config::XdpSpec;
use crate::counter_store::CounterStore;
use crate::resources::ServiceResources;
use crate::status::{QueueStatus, XdpStatus};
use anyhow::Context as _;
use relay_core::{Chain, QueueCounters};
use relay_xdp::XdpPort;
use relay_xdp::queue::XdpCounters;
use std::collections::BTreeMap;
use std::time::Duration;

/// With offload on, the port's offload figures: the flows in its map now, and the
/// entries its program deleted.
fn offload_status(
    port: &XdpPort,
    spec: &XdpSpec,
    p: Option<relay_xdp::program::ProgramStats>,
) -> Option<BTreeMap<String, u64>> {
    spec.port.offload?;
    let mut m = BTreeMap::new();
    if let Some(p) = p {
        m.insert("expired".to_string(), p.offload_expired);
        m.insert("revoked".to_string(), p.offload_revoked);
    }
    match port.offload_table() {
        Ok(t) => {
            m.insert("flows".into(), t.flows);
            m.insert("packets".into(), t.packets);
            m.insert("bytes".into(), t.bytes);
        }
        Err(e) => tracing::debug!(interface = %spec.port.interface, "XDP offloaded flows: {e}"),
    }
    Some(m)
}

/// The running ports, by interface.
#[derive(Default)]
pub(crate) struct XdpPorts {
    ports: BTreeMap<String, (XdpPort, XdpSpec)>,
}

impl std::fmt::Debug for XdpPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.ports.keys()).finish()
    }
}

/// The chain, counters and XDP counters of queue `num` of `spec`.
fn parts(
    counters: &mut CounterStore,
    res: &ServiceResources,
    spec: &XdpSpec,
    num: u16,
    stage_mask: u32,
) -> (Chain, QueueCounters, XdpCounters) {
    let chain = counters.chain_of(
        &spec.services,
        res,
        spec.malformed,
        relay_core::Hook::Prerouting,
        num,
        stage_mask,
    );
    let xdp = XdpCounters::new(&counters.datapath(num));
    (chain, counters.queue(num), xdp)
}

impl XdpPorts {
    /// Starts the ports of `specs` that do not run yet. All or nothing: on error the
    /// ports started by this call are stopped again.
    pub(crate) fn start(
        &mut self,
        specs: &[XdpSpec],
        counters: &mut CounterStore,
        res: &ServiceResources,
        stage_mask: u32,
    ) -> anyhow::Result<()> {
        let mut started = Vec::new();
        for spec in specs {
            if self.ports.contains_key(&spec.port.interface) {
                continue;
            }
            let mut chains = |num| parts(counters, res, spec, num, stage_mask);
            match XdpPort::start(&spec.port, &mut chains) {
                Ok(port) => {
                    let names: Vec<&str> = spec.services.iter().map(|(n, _)| n.as_str()).collect();
                    tracing::info!(
                        interface = %spec.port.interface,
                        queues = %format!("{}-{}", spec.port.first, spec.last),
                        fail_open = spec.port.fail_open,
                        mode = spec.port.mode.name(),
                        "serving XDP chain [{}]",
                        names.join(", ")
                    );
                    started.push(spec.port.interface.clone());
                    self.ports
                        .insert(spec.port.interface.clone(), (port, spec.clone()));
                }
                Err(e) => {
                    for i in started {
                        self.stop_one(&i, false);
                    }
                    return Err(e).with_context(|| format!("starting xdp[{}]", spec.index));
                }
            }
        }
        Ok(())
    }

    /// Applies the `[[xdp]]` entries of a new configuration (see the module docs).
    pub(crate) fn reload(
        &mut self,
        new: &[XdpSpec],
        counters: &mut CounterStore,
        res: &ServiceResources,
        stage_mask: u32,
    ) -> anyhow::Result<()> {
        let wanted: BTreeMap<&str, &XdpSpec> =
            new.iter().map(|s| (s.port.interface.as_str(), s)).collect();
        let running: Vec<String> = self.ports.keys().cloned().collect();
        for interface in running {
            match wanted.get(interface.as_str()) {
                Some(spec) if self.ports[&interface].1.port == spec.port => {
                    let (port, old) = self.ports.get_mut(&interface).expect("running");
                    let mut chains = |num| parts(counters, res, spec, num, stage_mask);
                    port.update(&mut chains);
                    *old = (*spec).clone();
                }
                // Changed: stopped with its program left attached, which the new one
                // replaces, so that its failure policy holds in between.
                Some(_) => self.stop_one(&interface, true),
                None => self.stop_one(&interface, false),
            }
        }
        self.start(new, counters, res, stage_mask)
    }

    /// Stops the port on `interface`; `restart`: leave its program attached
    /// ([`XdpPort::stop_for_restart`]).
    fn stop_one(&mut self, interface: &str, restart: bool) {
        let Some((port, _)) = self.ports.remove(interface) else {
            return;
        };
        let r = if restart {
            port.stop_for_restart()
        } else {
            port.stop()
        };
        if let Err(e) = r {
            tracing::error!(interface, "stopping XDP: {e}");
        }
    }

    /// Stops every port (programs detached first).
    pub(crate) fn stop_all(&mut self) {
        let all: Vec<String> = self.ports.keys().cloned().collect();
        for i in all {
            self.stop_one(&i, false);
        }
    }

    /// True if no port runs.
    pub(crate) fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// Queue numbers and names of the services of every running XDP queue.
    pub(crate) fn serves(&self, num: u16, name: &str, kind: &str) -> bool {
        self.ports.values().any(|(_, s)| {
            s.nums().contains(&num)
                && s.services
                    .iter()
                    .any(|(n, f)| n == name && f.kind() == kind)
        })
    }

    /// Each queue's number, whether its thread runs, and how long it has not looped.
    pub(crate) fn threads(&self) -> Vec<(u16, bool, Duration)> {
        self.ports
            .values()
            .flat_map(|(p, _)| p.queues())
            .map(|q| (q.num(), q.is_running(), q.since_last_loop()))
            .collect()
    }

    /// The status of every XDP queue, and of every port.
    pub(crate) fn status(&self) -> (Vec<QueueStatus>, Vec<XdpStatus>) {
        let mut queues = Vec::new();
        let mut ports = Vec::new();
        for (port, spec) in self.ports.values() {
            for q in port.queues() {
                let mut s = QueueStatus::xdp(q.num(), spec, q.counters());
                for (name, _, v) in q.xdp_counters().set.snapshot() {
                    s.datapath.insert(name, v);
                }
                queues.push(s);
            }
            let program = match port.program_stats() {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::debug!(interface = %spec.port.interface, "XDP program counters: {e}");
                    None
                }
            };
            let mut status = XdpStatus::new(spec, program);
            if let (Some(m), Some(p)) = (&mut status.program, program) {
                m.insert("pass_offloaded".into(), p.pass_offloaded);
            }
            status.offload = offload_status(port, spec, program);
            ports.push(status);
        }
        (queues, ports)
    }
}
