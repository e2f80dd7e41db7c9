//! The tc trees the configured services declare in their manifests
//! ([`Manifest::qos`](relay_core::Manifest::qos)): installed when relayd starts, brought in
//! line on reload (only the differing classes change), removed on exit and by `relayd
//! cleanup`, and their per-class counters shown by `relayd status`.

use relay_control::tc::{self, HtbClass, HtbPlan, Tc};
use relay_core::{QosPlan, ServiceFactory};
use serde::{Deserialize, Serialize};

/// The tc trees relayd has installed, one per interface.
#[derive(Debug)]
pub struct QosSet {
    tc: Tc,
    installed: Vec<HtbPlan>,
}

/// The counters of one class, as `relayd status` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassStatus {
    /// The interface.
    pub interface: String,
    /// The class, as tc writes it (`1d0:64`).
    pub class: String,
    /// Its name (the VCAN's; `default` for unclassified traffic).
    pub name: String,
    /// Bytes sent.
    pub bytes: u64,
    /// Packets sent.
    pub packets: u64,
    /// Packets dropped by the class's queue.
    pub drops: u64,
}

/// The HTB plan for a service's declared tree.
fn htb(plan: &QosPlan) -> HtbPlan {
    HtbPlan {
        dev: plan.interface.clone(),
        handle: plan.handle,
        link_rate_bps: plan.link_rate_bps,
        default_rate_bps: plan.default_rate_bps,
        classes: plan
            .classes
            .iter()
            .map(|c| HtbClass {
                minor: c.minor,
                name: c.name.clone(),
                rate_bps: c.rate_bps,
                ceil_bps: c.ceil_bps,
                prio: c.prio,
            })
            .collect(),
    }
}

/// The trees `services` (name and factory, as [`Config::queue_services`] lists them)
/// declare, one per interface. Two services that declare different trees for one
/// interface are an error naming both.
///
/// [`Config::queue_services`]: crate::config::Config::queue_services
pub fn plans<'a>(
    services: impl IntoIterator<Item = (&'a str, &'a dyn ServiceFactory)>,
) -> Result<Vec<HtbPlan>, String> {
    let mut out: Vec<(&str, HtbPlan)> = Vec::new();
    let declared = services
        .into_iter()
        .filter_map(|(name, f)| f.manifest().qos.as_ref().map(|p| (name, p)));
    for (name, plan) in declared {
        let plan = htb(plan);
        plan.validate()
            .map_err(|e| format!("service `{name}`: {e}"))?;
        match out.iter().find(|(_, p)| p.dev == plan.dev) {
            Some((_, p)) if *p == plan => {}
            Some((other, _)) => {
                return Err(format!(
                    "services `{other}` and `{name}` both want the tc tree of {}",
                    plan.dev
                ));
            }
            None => out.push((name, plan)),
        }
    }
    Ok(out.into_iter().map(|(_, p)| p).collect())
}

impl QosSet {
    /// Nothing installed yet; tc runs as `tc`.
    pub fn new(tc: Tc) -> QosSet {
        QosSet {
            tc,
            installed: Vec::new(),
        }
    }

    /// Installs, changes and removes trees so that exactly `wanted` is in place. On an
    /// error the trees already handled stay as they are now, and the error says which
    /// interface failed.
    pub fn apply(&mut self, wanted: Vec<HtbPlan>) -> anyhow::Result<()> {
        let mut done = Vec::new();
        let mut result = Ok(());
        for old in std::mem::take(&mut self.installed) {
            match wanted.iter().find(|p| p.dev == old.dev) {
                Some(new) if *new == old => done.push(old),
                Some(new) => match tc::update(&self.tc, &old, new) {
                    Ok(()) => {
                        tracing::info!(dev = %new.dev, classes = new.classes.len(), "tc tree updated");
                        done.push(new.clone());
                    }
                    Err(e) => {
                        result = Err(anyhow::anyhow!("tc tree on {}: {e}", old.dev));
                        done.push(old);
                    }
                },
                None => {
                    if let Err(e) = tc::remove(&self.tc, &old.dev, old.handle) {
                        result = Err(anyhow::anyhow!("removing the tc tree on {}: {e}", old.dev));
                        done.push(old);
                    }
                }
            }
        }
        for new in wanted {
            if done.iter().any(|p| p.dev == new.dev) || result.is_err() {
                continue;
            }
            match tc::install(&self.tc, &new) {
                Ok(how) => {
                    tracing::info!(dev = %new.dev, classes = new.classes.len(), ?how, "tc tree installed");
                    done.push(new);
                }
                Err(e) => result = Err(anyhow::anyhow!("tc tree on {}: {e}", new.dev)),
            }
        }
        self.installed = done;
        result
    }

    /// Removes every tree relayd installed; returns the errors, if any.
    pub fn remove_all(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        for p in std::mem::take(&mut self.installed) {
            if let Err(e) = tc::remove(&self.tc, &p.dev, p.handle) {
                errors.push(format!("removing the tc tree on {}: {e}", p.dev));
            }
        }
        errors
    }

    /// Per-class counters of every installed tree (a tree that cannot be read is skipped).
    pub fn stats(&self) -> Vec<ClassStatus> {
        let mut out = Vec::new();
        for p in &self.installed {
            let Ok(stats) = tc::class_stats(&self.tc, &p.dev, p.handle) else {
                continue;
            };
            for s in stats {
                let name = match s.minor {
                    tc::DEFAULT_MINOR => "default".to_owned(),
                    tc::ROOT_MINOR => "link".to_owned(),
                    m => p
                        .classes
                        .iter()
                        .find(|c| c.minor == m)
                        .map_or_else(|| format!("{m:#x}"), |c| c.name.clone()),
                };
                out.push(ClassStatus {
                    interface: p.dev.clone(),
                    class: format!("{:x}:{:x}", p.handle, s.minor),
                    name,
                    bytes: s.bytes,
                    packets: s.packets,
                    drops: s.drops,
                });
            }
        }
        out
    }
}

impl Drop for QosSet {
    fn drop(&mut self) {
        for e in self.remove_all() {
            tracing::warn!("{e}");
        }
    }
}

/// After a crash: removes relayd's trees (an `htb` root with `handle`) from every
/// interface; returns the interfaces cleaned.
pub fn cleanup(tc: &Tc, handle: u16) -> Vec<String> {
    let Ok(out) = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let devs = text.lines().filter_map(|l| {
        // "2: eth0@if3: <...>": the name, less any "@peer".
        let name = l.split(": ").nth(1)?;
        Some(name.split('@').next()?.to_owned())
    });
    devs.filter(|d| matches!(tc::remove(tc, d, handle), Ok(true)))
        .collect()
}
