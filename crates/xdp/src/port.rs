//! An XDP port: the program attached to one ingress interface and the queue threads that
//! serve its rx queues ([`XdpPort`]), and its settings ([`PortConfig`]).
//!
//! Order matters so that no packet is lost or escapes its policy: on start the program
//! is loaded with its rules and failure policy, the queues' sockets are opened and bound
//! into its XSKMAP, and only then is it attached; on stop it is detached first (the
//! traffic goes back to the kernel, as when relayd's iptables rules are removed), then
//! the sockets are unbound and the threads stopped. A relayd that dies leaves the program
//! attached, and its failure policy in force, until the next start or `relayd cleanup`.
//! (Flows it offloaded keep going to the kernel until idle, as a flow NFQUEUE offloaded
//! keeps skipping a queue whose relayd died; a new relayd loads a new, empty map.)

use crate::XdpError;
use crate::program::{MatchRule, OffloadTable, Program, ProgramStats};
use crate::queue::{QueueError, QueueSettings, XdpCounters, XdpQueue};
use crate::rules::Match;
pub use crate::settings::{OffloadConfig, PortConfig, ZeroCopy};
use relay_core::{Chain, IpVersion, QueueCounters};

/// Errors starting an XDP port.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The interface does not exist (in this network namespace).
    #[error("xdp: no interface {0} (in relayd's network namespace)")]
    NoInterface(String),
    /// A configured rx queue is not one of the interface's.
    #[error("xdp: {interface} has {count} rx queue(s) (0-{max}); rx queue {queue} is not one of them", max = .count.saturating_sub(1))]
    NoRxQueue {
        /// The interface.
        interface: String,
        /// Its rx queues.
        count: u32,
        /// The one asked for.
        queue: u32,
    },
    /// Loading, configuring or attaching the program.
    #[error("xdp on {interface}: {source}")]
    Program {
        /// The interface.
        interface: String,
        /// Why.
        source: XdpError,
    },
    /// Starting a queue.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// What each queue of a port is given: its chain and counters, for relayd queue `num`.
pub type ChainFor<'a> = dyn FnMut(u16) -> (Chain, QueueCounters, XdpCounters) + 'a;

/// A running XDP port.
pub struct XdpPort {
    cfg: PortConfig,
    ifindex: u32,
    program: Program,
    queues: Vec<XdpQueue>,
    attached: bool,
}

impl std::fmt::Debug for XdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpPort")
            .field("interface", &self.cfg.interface)
            .field("queues", &self.queues)
            .finish()
    }
}

/// The program rules of a port's match entries (one rule matching everything for none).
pub fn compile(matches: &[Match]) -> Vec<MatchRule> {
    if matches.is_empty() {
        return vec![MatchRule::ANY];
    }
    let mut rules = Vec::new();
    for m in matches {
        for (s, d) in m.port_pairs() {
            let mut r = MatchRule::ANY
                .with_proto(m.protocol.unwrap_or(0))
                .with_sports(s.lo, s.hi)
                .with_dports(d.lo, d.hi);
            if let Some(p) = m.source {
                r = r.with_src(p.network(), p.len());
            }
            if let Some(p) = m.destination {
                r = r.with_dst(p.network(), p.len());
            }
            if let Some(f) = m.family {
                r = r.with_family(match f {
                    IpVersion::V4 => 4,
                    IpVersion::V6 => 6,
                });
            }
            rules.push(r);
        }
    }
    rules
}

/// The interface's index, or `None`.
pub fn ifindex(name: &str) -> Option<u32> {
    relay_netlink::ifindex(name).ok()
}

/// How many rx queues the interface has (sysfs), if it can be read.
pub fn rx_queue_count(name: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{name}/queues")).ok()?;
    let n = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    u32::try_from(n).ok()
}

impl XdpPort {
    /// Starts the port: program loaded and configured, one queue per rx queue with its
    /// socket bound, then the program attached. All or nothing.
    pub fn start(cfg: &PortConfig, chains: &mut ChainFor<'_>) -> Result<XdpPort, PortError> {
        let interface = cfg.interface.clone();
        let ifindex =
            ifindex(&interface).ok_or_else(|| PortError::NoInterface(interface.clone()))?;
        if let Some(count) = rx_queue_count(&interface) {
            if let Some(&q) = cfg.rx_queues.iter().find(|&&q| q >= count) {
                return Err(PortError::NoRxQueue {
                    interface,
                    count,
                    queue: q,
                });
            }
            if (cfg.rx_queues.len() as u32) < count {
                tracing::warn!(
                    interface = %interface,
                    served = cfg.rx_queues.len(),
                    rx_queues = count,
                    "XDP serves only some of the interface's rx queues: matched packets on the others get the failure policy ({})",
                    if cfg.fail_open { "passed to the kernel" } else { "dropped" }
                );
            }
        }
        let program_err = |source| PortError::Program {
            interface: interface.clone(),
            source,
        };
        let flows = cfg.offload.map_or(1, |o| o.flows);
        let mut program = Program::load_with_flows(flows).map_err(program_err)?;
        program
            .set_rules(&compile(&cfg.matches))
            .map_err(program_err)?;
        program.set_fail_open(cfg.fail_open).map_err(program_err)?;
        program
            .set_offload(cfg.offload.map(|o| o.idle))
            .map_err(program_err)?;
        let mut port = XdpPort {
            cfg: cfg.clone(),
            ifindex,
            program,
            queues: Vec::new(),
            attached: false,
        };
        for (i, &rx_queue) in cfg.rx_queues.iter().enumerate() {
            let num = cfg.first.wrapping_add(i as u16);
            let (chain, counters, xdp) = chains(num);
            let settings = QueueSettings {
                num,
                ifindex,
                rx_queue,
                cpu: (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]),
                generation: port.program.generation(),
            };
            let flows = match cfg.offload {
                Some(_) => Some(port.program.flow_maps(rx_queue).map_err(program_err)?),
                None => None,
            };
            let q = XdpQueue::start(cfg, &settings, chain, counters, xdp, flows)?;
            let bound = port.program.bind_socket(rx_queue, q.fd());
            port.queues.push(q);
            bound.map_err(program_err)?;
        }
        port.program
            .attach(ifindex, cfg.mode)
            .map_err(program_err)?;
        port.attached = true;
        Ok(port)
    }

    /// The port's settings.
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// Its queues, in rx queue order.
    pub fn queues(&self) -> &[XdpQueue] {
        &self.queues
    }

    /// The program's counters.
    pub fn program_stats(&self) -> Result<ProgramStats, XdpError> {
        self.program.stats()
    }

    /// The offloaded flows in the program's map now (walks the map: for the status).
    pub fn offload_table(&self) -> Result<OffloadTable, XdpError> {
        self.program.offload_table()
    }

    /// Gives each queue a new chain (between two rounds); `chains` as for
    /// [`XdpPort::start`]. Counters stay those the queue started with.
    ///
    /// With offload on, every flow offloaded so far is revoked first (a new generation:
    /// each comes back to relayd with its next packet, counted in `offload.revoked`), so
    /// that the new chain sees every flow. relayd cannot tell whether a reload changed a
    /// service's options, so every reload that reaches a running port revokes.
    pub fn update(&mut self, chains: &mut ChainFor<'_>) {
        let mut generation = self.program.generation();
        if self.cfg.offload.is_some() {
            generation = generation.wrapping_add(1);
            if let Err(e) = self.program.set_generation(generation) {
                tracing::warn!(interface = %self.cfg.interface, "revoking offloaded flows: {e}");
            }
        }
        for q in &self.queues {
            let (chain, _, _) = chains(q.num());
            q.update(chain, generation);
        }
    }

    /// Detaches the program (the traffic goes back to the kernel), then unbinds the
    /// sockets and stops the threads.
    pub fn stop(mut self) -> Result<(), XdpError> {
        self.shut()
    }

    /// Stops the threads and unbinds their sockets but leaves the program attached, for a
    /// port about to be started anew on the same interface (a reload that changed its
    /// settings): until the new program replaces it, matched packets get this one's
    /// failure policy (a fail-closed port stays closed), as while relayd is down.
    pub fn stop_for_restart(mut self) -> Result<(), XdpError> {
        self.attached = false;
        self.shut()
    }

    fn shut(&mut self) -> Result<(), XdpError> {
        let detached = if std::mem::take(&mut self.attached) {
            self.program.detach(self.ifindex)
        } else {
            Ok(())
        };
        let queues = std::mem::take(&mut self.queues);
        for q in &queues {
            if let Err(e) = self.program.unbind_socket(q.rx_queue()) {
                tracing::warn!(queue = q.num(), "unbinding its socket: {e}");
            }
            q.request_stop();
        }
        for q in queues {
            q.join();
        }
        detached
    }
}

impl Drop for XdpPort {
    fn drop(&mut self) {
        if (self.attached || !self.queues.is_empty())
            && let Err(e) = self.shut()
        {
            tracing::error!(interface = %self.cfg.interface, "stopping XDP: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::PortRange;

    #[test]
    fn compiles_one_rule_per_port_pair_and_matches_everything_when_empty() {
        assert_eq!(compile(&[]), vec![MatchRule::ANY]);
        let m = Match {
            protocol: Some(17),
            ports: vec![
                PortRange { lo: 53, hi: 53 },
                PortRange { lo: 5000, hi: 5100 },
            ],
            destination: Some("10.0.2.0/24".parse().unwrap()),
            family: Some(IpVersion::V4),
            ..Match::default()
        };
        let rules = compile(&[m, Match::default()]);
        assert_eq!(rules.len(), 3);
        assert_eq!(
            (rules[1].proto, rules[1].dport_lo, rules[1].dport_hi),
            (17, 5000, 5100)
        );
        assert_eq!((rules[0].family, rules[0].dst_len), (4, 24));
        assert_eq!(&rules[0].dst[..4], &[10, 0, 2, 0]);
        assert_eq!(rules[2], MatchRule::ANY);
    }
}
