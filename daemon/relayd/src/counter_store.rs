//! The counters of every queue and service, kept apart from the chains so that they
//! survive reloads: the daemon, the XDP ports and replay build chains that count into
//! one store.

use crate::config::QueueSpec;
use crate::resources::ServiceResources;
use crate::status::ServiceStatus;
use relay_core::StageMark;
use relay_core::{Chain, ChainSettings, Counter, CounterKind, Counters, QueueCounters};
use std::collections::BTreeMap;

/// Counters live here, not in chains, so that they survive reloads.
#[derive(Default)]
pub(crate) struct CounterStore {
    queues: BTreeMap<u16, QueueCounters>,
    services: BTreeMap<(u16, String, &'static str), (Counter, Counters)>,
    /// The datapath's own counters per queue (XDP: transmitted, tx_full, ...).
    datapath: BTreeMap<u16, Counters>,
}

impl CounterStore {
    /// The chain of `spec` for queue `num`, its services counting into this store.
    /// `stage_mask` is `daemon.bypass_mark`, checked to hold two bits.
    /// `res` holds what relayd made for the services from their manifests.
    pub(crate) fn chain(
        &mut self,
        spec: &QueueSpec,
        res: &ServiceResources,
        num: u16,
        stage_mask: u32,
    ) -> Chain {
        self.chain_of(
            &spec.services,
            res,
            spec.malformed,
            spec.hook,
            num,
            stage_mask,
        )
    }

    /// The chain of `services` for queue `num` (NFQUEUE or XDP), counting into this store,
    /// each service built with its resources in `res`.
    pub(crate) fn chain_of(
        &mut self,
        services: &[(String, std::sync::Arc<dyn relay_core::ServiceFactory>)],
        res: &ServiceResources,
        malformed: relay_core::Verdict,
        hook: relay_core::Hook,
        num: u16,
        stage_mask: u32,
    ) -> Chain {
        let mut chain = Chain::new(ChainSettings {
            malformed,
            hook,
            stages: StageMark::from_mask(stage_mask).unwrap_or(StageMark::DEFAULT),
        });
        for (name, factory) in services {
            let (packets, counters) = self
                .services
                .entry((num, name.clone(), factory.kind()))
                .or_default()
                .clone();
            chain.push(name, factory.build(&counters, res.of(name)), packets);
        }
        chain
    }

    /// Per-service counters summed over queues, for the instances `active` accepts
    /// (queue, name, kind): those still configured.
    pub(crate) fn services_status(
        &self,
        active: impl Fn(u16, &str, &'static str) -> bool,
    ) -> Vec<ServiceStatus> {
        let mut services: BTreeMap<(String, &'static str), ServiceStatus> = BTreeMap::new();
        for ((num, name, kind), (packets, counters)) in &self.services {
            if !active(*num, name, kind) {
                continue; // an instance a reload removed
            }
            let s = services
                .entry((name.clone(), kind))
                .or_insert_with(|| ServiceStatus {
                    name: name.clone(),
                    kind: kind.to_string(),
                    queues: Vec::new(),
                    packets: 0,
                    counters: BTreeMap::new(),
                    gauges: Vec::new(),
                });
            s.queues.push(*num);
            s.packets += packets.get();
            for (k, kind, v) in counters.snapshot() {
                let e = s.counters.entry(k.clone()).or_insert(0);
                match kind {
                    CounterKind::Total => *e += v,
                    CounterKind::Gauge => {
                        *e = v;
                        if !s.gauges.contains(&k) {
                            s.gauges.push(k);
                        }
                    }
                }
            }
        }
        services.into_values().collect()
    }

    /// The counters of queue `num`.
    pub(crate) fn queue(&mut self, num: u16) -> QueueCounters {
        self.queues.entry(num).or_default().clone()
    }

    /// The datapath's own named counters of queue `num`.
    pub(crate) fn datapath(&mut self, num: u16) -> Counters {
        self.datapath.entry(num).or_default().clone()
    }
}
