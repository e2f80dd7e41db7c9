//! A reload as a plan: the steps that bring the running daemon from the configuration in
//! force to a new one (tc trees, XDP ports, new queues, the split proxy's routing, the
//! rules), computed from the new configuration, each of which applies its part and can
//! undo it. They run in order; when one fails, it and every step before it are undone in
//! reverse order, so the old configuration stays in force whole. Only when every step is
//! in does the daemon commit: running queues switch chains, queues no longer configured
//! are drained and unbound.

use super::{Daemon, ListenerChanges, Running, stop_all};
use crate::config::{Config, QueueSpec};
use crate::qos;
use crate::resources::{self, ServiceResources};
use crate::rules;
use anyhow::{Context as _, bail};
use relay_nfq::Queue;
use std::collections::BTreeMap;

/// One part of the daemon a reload changes, in the order they are applied: the classes
/// before the queues that mark packets for them, queues before the rules that feed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The tc trees the services declare.
    Trees,
    /// The `[[xdp]]` ports: first, so that a port that cannot start leaves nothing else
    /// changed.
    Xdp,
    /// The queues the new configuration adds, bound (not yet fed).
    NewQueues,
    /// The split proxy's `ip rule` and local route; `before` is what was installed.
    Routing {
        /// The routing in force before (preference, table).
        before: Option<(u32, u32)>,
    },
    /// The iptables rules, swapped atomically.
    Rules,
}

/// What the applied steps made that the commit takes over.
struct Pending {
    /// The services' resources for the new configuration.
    res: ServiceResources,
    /// Queues bound by [`Step::NewQueues`].
    started: BTreeMap<u16, Running>,
}

/// The steps that bring a daemon whose split proxy routing is `routing` to `new`.
fn plan(routing: Option<(u32, u32)>, new: &Config) -> Vec<Step> {
    let mut steps = vec![Step::Trees, Step::Xdp, Step::NewQueues];
    // Removing the routing of a configuration without a split proxy waits for the
    // commit: connections split until then still need it.
    if new.tproxy.is_some() {
        steps.push(Step::Routing { before: routing });
    }
    steps.push(Step::Rules);
    steps
}

impl Step {
    /// Brings this part of `d` to `new`.
    fn apply(self, d: &mut Daemon, new: &Config, p: &mut Pending) -> anyhow::Result<()> {
        match self {
            Step::Trees => d
                .qos
                .apply(qos::plans(new.queue_services()).map_err(anyhow::Error::msg)?),
            Step::Xdp => d
                .xdp
                .reload(&new.xdp, &mut d.counters, &p.res, new.daemon.bypass_mark),
            Step::NewQueues => {
                // All or nothing: on error none of the new queues is left bound.
                p.started = d.start_queues(new, &p.res)?;
                Ok(())
            }
            Step::Routing { .. } => d.install_routing(new),
            Step::Rules => d.install(new).context("new rules refused"),
        }
    }

    /// Puts this part of `d` back as the configuration in force has it (after its own
    /// failure too: a step may have changed part of what it covers). Errors are logged:
    /// there is nothing left to fall back to.
    fn undo(self, d: &mut Daemon, p: &mut Pending) {
        match self {
            Step::Trees => {
                // The old configuration's marks select the old classes.
                if let Err(e) = d
                    .qos
                    .apply(qos::plans(d.config.queue_services()).unwrap_or_default())
                {
                    tracing::error!("restoring the previous tc trees failed too: {e:#}");
                }
            }
            Step::Xdp => d.restore_xdp(),
            Step::NewQueues => stop_all(
                std::mem::take(&mut p.started)
                    .into_values()
                    .map(|r| r.queue),
            ),
            Step::Routing { before } => {
                let r = match before {
                    Some(_) => d.install_routing(&d.config.clone()),
                    None => {
                        d.remove_routing();
                        Ok(())
                    }
                };
                if let Err(e) = r {
                    tracing::error!("restoring the previous ip rule failed too: {e:#}");
                }
            }
            Step::Rules => {
                // The old rules back before the new queues go, so no rule points at them.
                if let Err(e) = d.install(&d.config) {
                    tracing::error!("restoring the previous rules failed too: {e:#}");
                }
            }
        }
    }
}

impl Daemon {
    /// Applies a new configuration without losing a packet: new queues are bound first,
    /// the rules are swapped atomically, running queues switch chains between two batches,
    /// and queues no longer configured are drained before they are unbound. On error the
    /// old configuration stays in force: every step done so far is undone (see the module
    /// docs).
    ///
    /// Proxy listeners whose options changed, or that are gone, are handed back to the
    /// caller to drain, with those to start ([`ListenerChanges`]); unchanged ones keep
    /// running.
    pub fn reload(&mut self, mut new: Config) -> anyhow::Result<ListenerChanges> {
        self.check_reload(&new)?;
        // Every reload starts a new offload generation: the new rules match no flow the
        // old chains offloaded (a rule file may have changed under the same text).
        self.epoch = self.epoch.wrapping_add(1);
        crate::config::set_generations(&mut new, self.epoch);
        // Before the new generations' rules: the entries of any generation but those in
        // force lose their offload bits (the ones the reload before this one left), so
        // that no stale entry is left when a generation comes round again. The queue
        // threads counted them revoked when their generation ended. Done now, not after
        // the swap, so that it never races with an offload of the new generations (the
        // update writes the bits blindly).
        super::offload::clear_stale(&new, &super::offload::generations(&self.config));
        // The new services' resources (log writers; the monitor if newly needed) before
        // anything changes: if one cannot be made, nothing has.
        let res = resources::open_logs(&new)
            .and_then(|logs| self.provider.resources(&new, logs))
            .context("the old configuration stays in force")?;
        let mut p = Pending {
            res,
            started: BTreeMap::new(),
        };
        let steps = plan(self.routing, &new);
        for (i, step) in steps.iter().enumerate() {
            if let Err(e) = step.apply(self, &new, &mut p) {
                for s in steps[..=i].iter().rev() {
                    s.undo(self, &mut p);
                }
                return Err(e.context("the old configuration stays in force"));
            }
        }
        Ok(self.commit(new, p))
    }

    /// What a reload cannot apply, refused before anything changes.
    fn check_reload(&self, new: &Config) -> anyhow::Result<()> {
        let (old, now) = (&self.config.daemon, &new.daemon);
        if now.chain_prefix != old.chain_prefix
            || now.iptables != old.iptables
            || now.socket != old.socket
            || now.metrics != old.metrics
            || now.user != old.user
            || now.socket_group != old.socket_group
        {
            bail!(
                "daemon.chain_prefix, daemon.iptables, daemon.socket, daemon.metrics, daemon.user and daemon.socket_group can only change with a restart"
            );
        }
        // A queue thread's nice value can be lowered only with CAP_SYS_NICE (which a relayd
        // running as daemon.user, or unprivileged, may lack): refuse such a reload before
        // anything changes, rather than leave that queue on its old chain.
        for spec in &new.queues {
            for num in spec.nums() {
                let Some(r) = self.queues.get(&num) else {
                    continue;
                };
                let now = r.queue.effective_nice();
                let want = spec.queue.nice.unwrap_or(r.queue.inherited_nice());
                if want < now
                    && !caps::has_cap(
                        None,
                        caps::CapSet::Effective,
                        caps::Capability::CAP_SYS_NICE,
                    )
                    .unwrap_or(false)
                {
                    bail!(
                        "queue {num}: lowering its nice value from {now} to {want} needs CAP_SYS_NICE, which relayd does not have; restart relayd to apply it"
                    );
                }
            }
        }
        if let Err(e) = rules::validate(new) {
            bail!("{e}");
        }
        Ok(())
    }

    /// Makes `new` the configuration in force once every step is in: running queues
    /// switch chains, those no longer configured are drained and unbound.
    fn commit(&mut self, new: Config, p: Pending) -> ListenerChanges {
        let wanted: BTreeMap<u16, &QueueSpec> = new
            .queues
            .iter()
            .flat_map(|s| s.nums().map(move |n| (n, s)))
            .collect();
        let bypass = new.daemon.bypass_mark;
        for (num, r) in self.queues.iter_mut() {
            if let Some(spec) = wanted.get(num) {
                let cfg = spec.queue_config(*num);
                let chain = self.counters.chain(spec, &p.res, *num, bypass);
                // Checked by the configuration already; what is left is the kernel refusing
                // a CPU pin or a nice value (no CAP_SYS_NICE, say).
                if let Err(e) = r.queue.update(chain, &cfg) {
                    tracing::error!(queue = num, "queue keeps its old settings: {e}");
                    continue;
                }
                r.cfg = cfg;
                r.spec = (*spec).clone();
            }
        }
        let gone: Vec<u16> = self
            .queues
            .keys()
            .filter(|n| !wanted.contains_key(n))
            .copied()
            .collect();
        let removed: Vec<Queue> = gone
            .iter()
            .filter_map(|n| self.queues.remove(n))
            .map(|r| r.queue)
            .collect();
        stop_all(removed);
        for num in gone {
            tracing::info!(queue = num, "queue removed");
        }
        self.queues.extend(p.started);
        if new.tproxy.is_none() {
            self.remove_routing();
        }
        let (stop, start) = self.listeners.take_changed(&new.listeners);
        self.config = new;
        self.resources = p.res;
        self.reloads += 1;
        ListenerChanges { stop, start }
    }

    /// Puts the XDP ports of the configuration in force back, after a refused reload.
    fn restore_xdp(&mut self) {
        let old = self.config.xdp.clone();
        if let Err(e) = self.xdp.reload(
            &old,
            &mut self.counters,
            &self.resources,
            self.config.daemon.bypass_mark,
        ) {
            tracing::error!("restoring the previous XDP ports failed too: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use std::path::Path;

    fn config(text: &str) -> Config {
        crate::config::parse(text, Path::new("t.toml"), &Registry::with_builtins()).unwrap()
    }

    /// Classes before the queues that mark for them, queues before the rules that feed
    /// them; the split proxy's routing only where the new configuration has one.
    #[test]
    fn the_plan_orders_the_steps_and_routes_only_for_a_split_proxy() {
        let plain = config("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert_eq!(
            plan(Some((100, 200)), &plain),
            [Step::Trees, Step::Xdp, Step::NewQueues, Step::Rules]
        );
        let split = config(
            "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\n\
             match = \"-p tcp --syn\"\nservices = [\"split\"]\n\n\
             [service.split]\nkind = \"tcpsplit\"\nports = [5201]\n",
        );
        assert_eq!(
            plan(None, &split),
            [
                Step::Trees,
                Step::Xdp,
                Step::NewQueues,
                Step::Routing { before: None },
                Step::Rules
            ]
        );
    }
}
