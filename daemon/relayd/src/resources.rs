//! The resources relayd makes from its services' manifests and hands to their `build`:
//! the egress queue monitor (one per daemon, [`Manifest::queue_monitor`]), the log files
//! services append to ([`Manifest::logs`]: the IDS's EVE log), opened here and turned into
//! the service's writer, and what a service needs started ([`Manifest::starts`]: the ESP
//! sequence state). Only a running relayd and `relayd replay` make them, and replay only
//! the monitor and the logs (its own outputs): it starts no service's persistent state,
//! which belongs to the daemon that runs the service. `relayd check` (which only loads
//! the configuration) opens no file and starts no thread.
//!
//! Opening is split from starting so that relayd started as root with `daemon.user` opens
//! the files as root, before it drops (as it makes the state directories), while every
//! thread it starts runs as the user.

use crate::config::Config;
use anyhow::Context as _;
use relay_core::{Manifest, Resources, ServiceFactory};
use relay_netlink::QueueMonitor;
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

/// How often the daemon's queue monitor reads the egress queues.
const MONITOR_INTERVAL: Duration = Duration::from_millis(1);

/// Every service of `cfg` (queues and XDP ports), each once, by name.
fn services(cfg: &Config) -> BTreeMap<&str, &Arc<dyn ServiceFactory>> {
    cfg.queues
        .iter()
        .flat_map(|q| q.services.iter())
        .chain(cfg.xdp.iter().flat_map(|x| x.services.iter()))
        .map(|(name, f)| (name.as_str(), f))
        .collect()
}

/// The log files of a configuration's services, open for appending, not yet started.
#[derive(Debug, Default)]
pub struct OpenLogs {
    /// Per service: the manifest's logs, in order, each with its file.
    files: BTreeMap<String, Vec<File>>,
}

/// Opens (creating it and its directory) every log file `cfg`'s services declare.
pub fn open_logs(cfg: &Config) -> anyhow::Result<OpenLogs> {
    let mut out = OpenLogs::default();
    for (name, f) in services(cfg) {
        let mut files = Vec::new();
        for log in &f.manifest().logs {
            let path = &log.path;
            let open = || -> std::io::Result<File> {
                if let Some(dir) = path.parent()
                    && !dir.as_os_str().is_empty()
                {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
            };
            let file = open().with_context(|| format!("service {name}: {}", path.display()))?;
            files.push(file);
        }
        if !files.is_empty() {
            out.files.insert(name.to_string(), files);
        }
    }
    Ok(out)
}

/// The resources of one configuration's services, by service name.
#[derive(Debug, Clone, Default)]
pub struct ServiceResources {
    by_name: BTreeMap<String, Resources>,
    /// What a service without resources of its own gets (the monitor, the clock).
    common: Resources,
}

impl ServiceResources {
    /// The resources the service called `name` is built with.
    pub fn of(&self, name: &str) -> &Resources {
        self.by_name.get(name).unwrap_or(&self.common)
    }
}

/// Makes the resources of each configuration: keeps the queue monitor for the daemon's
/// life once a service needed it (a live one, or replay's fixed one).
#[derive(Debug)]
pub struct Provider {
    monitor: Option<Arc<QueueMonitor>>,
    /// Whether the services' [`Manifest::starts`] run (a daemon that runs the services).
    starts: bool,
}

impl Provider {
    /// A provider that starts the live monitor when a service first asks for it, and
    /// starts what each service's manifest asks ([`Manifest::starts`]).
    pub fn live() -> Provider {
        Provider {
            monitor: None,
            starts: true,
        }
    }

    /// A provider whose monitor reports `monitor`'s fixed values and that starts no
    /// service's state (replay: no kernel, and never a running daemon's state).
    pub fn fixed(monitor: Arc<QueueMonitor>) -> Provider {
        Provider {
            monitor: Some(monitor),
            starts: false,
        }
    }

    /// The resources of `cfg`'s services: the monitor for those that read the egress
    /// queues, the writers its opened `logs` start and (a live provider) what their
    /// manifests' `starts` make, each started once per configuration.
    pub fn resources(&mut self, cfg: &Config, logs: OpenLogs) -> anyhow::Result<ServiceResources> {
        let all = services(cfg);
        let monitor = if all.values().any(|f| f.manifest().queue_monitor) {
            Some(self.monitor()?)
        } else {
            None
        };
        let mut common = Resources::new();
        if let Some(m) = &monitor {
            common.insert(m.clone());
        }
        let mut out = ServiceResources {
            by_name: BTreeMap::new(),
            common: common.clone(),
        };
        let mut logs = logs.files;
        for (name, f) in all {
            let m: &Manifest = f.manifest();
            let files = logs.remove(name).unwrap_or_default();
            let starts = if self.starts { &m.starts[..] } else { &[] };
            if files.is_empty() && starts.is_empty() {
                continue;
            }
            let mut res = common.clone();
            for (log, file) in m.logs.iter().zip(files) {
                let started = (log.start)(file)
                    .with_context(|| format!("service {name}: {}", log.path.display()))?;
                res.insert_any(started);
            }
            for s in starts {
                let started =
                    (s.start)().with_context(|| format!("service {name}: starting {}", s.what))?;
                res.insert_any(started);
            }
            out.by_name.insert(name.to_string(), res);
        }
        Ok(out)
    }

    /// The daemon's queue monitor, started on first use.
    fn monitor(&mut self) -> anyhow::Result<Arc<QueueMonitor>> {
        if let Some(m) = &self.monitor {
            return Ok(m.clone());
        }
        let m = QueueMonitor::start(MONITOR_INTERVAL)
            .context("the egress queue monitor cannot read the qdiscs over rtnetlink")?;
        self.monitor = Some(m.clone());
        Ok(m)
    }
}
