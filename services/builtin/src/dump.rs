//! `dump`: logs one tcpdump-like line per packet (rate-limited, so a flood cannot flood
//! the log) and passes the packet on unchanged.

use relay_core::ratelimit::RateLimit;
use relay_core::{
    Action, Context, Counter, Counters, InvalidConfig, Manifest, Packet, Resources, Service,
    ServiceConfig, ServiceFactory, format_packet,
};
use serde::Deserialize;
use std::fmt::Write;
use std::sync::Arc;

/// Configuration of `dump`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DumpConfig {
    /// At most this many lines per second (the rest are counted as `suppressed`).
    #[serde(default = "default_rate")]
    pub rate: u32,
}

fn default_rate() -> u32 {
    100
}

struct Dump {
    name: String,
    limit: RateLimit,
    line: String,
    logged: Counter,
    suppressed: Counter,
}

impl Service for Dump {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        match self.limit.allow(cx.now) {
            None => self.suppressed.inc(),
            Some(skipped) => {
                self.line.clear();
                format_packet(&mut self.line, pkt);
                if skipped > 0 {
                    let _ = write!(self.line, " ({skipped} lines suppressed)");
                }
                tracing::info!(target: "relayd::dump", "{} q{} {}", self.name, cx.queue, self.line);
                self.logged.inc();
            }
        }
        Action::Continue
    }
}

struct DumpFactory {
    cfg: DumpConfig,
    name: String,
    manifest: Manifest,
}

impl ServiceFactory for DumpFactory {
    fn kind(&self) -> &'static str {
        "dump"
    }
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(Dump {
            name: self.name.clone(),
            limit: RateLimit::new(self.cfg.rate),
            line: String::with_capacity(256),
            logged: counters.counter("logged"),
            suppressed: counters.counter("suppressed"),
        })
    }
}

impl ServiceConfig for DumpConfig {
    const KIND: &'static str = "dump";
    fn into_factory(self, name: &str) -> Result<Arc<dyn ServiceFactory>, InvalidConfig> {
        Ok(Arc::new(DumpFactory {
            cfg: self,
            name: name.to_string(),
            // Headers are all a dump line shows.
            manifest: Manifest {
                needs_bytes: Some(relay_core::manifest::HEADER_BYTES),
                ..Manifest::new()
            },
        }))
    }
}
