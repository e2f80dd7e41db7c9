//! `mark`: sets the packet's nfmark (masked), and optionally gives it back to the hook
//! (`repeat = true`) so that later rules can act on the mark.

use relay_core::counters::Counters;
use relay_core::manifest::Manifest;
use relay_core::offload::{Offload, OffloadReason};
use relay_core::packet::Packet;
use relay_core::resources::Resources;
use relay_core::service::{Action, Context, Service, ServiceConfig, ServiceFactory};
use relay_core::units::de_u32;
use serde::Deserialize;
use std::sync::Arc;

/// Configuration of `mark`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkConfig {
    /// The mark to set (integer or "0x..." string).
    #[serde(deserialize_with = "de_u32")]
    pub mark: u32,
    /// Which bits of the mark to change (default all).
    #[serde(default = "all_bits", deserialize_with = "de_u32")]
    pub mask: u32,
    /// Repeat the hook with the new mark instead of continuing the chain.
    #[serde(default)]
    pub repeat: bool,
}

fn all_bits() -> u32 {
    u32::MAX
}

struct Mark {
    cfg: MarkConfig,
}

impl Service for Mark {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        let current = pkt.verdict_mark().unwrap_or(pkt.meta.mark);
        let mark = (current & !self.cfg.mask) | (self.cfg.mark & self.cfg.mask);
        if self.cfg.repeat {
            Action::Repeat { mark }
        } else {
            pkt.set_mark(mark);
            // The bits it sets are the same for every packet of the flow, both ways: the
            // offload keeps them in the conntrack mark and relayd's skip rule restores
            // them onto the packets that no longer come here (docs/offload.md).
            cx.offload(Offload::both(OffloadReason::Decided));
            Action::Continue
        }
    }
}

struct MarkFactory {
    cfg: MarkConfig,
    manifest: Manifest,
}

impl ServiceFactory for MarkFactory {
    fn kind(&self) -> &'static str {
        "mark"
    }
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn build(&self, _counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        Box::new(Mark {
            cfg: self.cfg.clone(),
        })
    }
}

impl ServiceConfig for MarkConfig {
    const KIND: &'static str = "mark";
    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if self.mark & !self.mask != 0 {
            return Err(format!(
                "mark {:#x} has bits outside mask {:#x}; they would be ignored",
                self.mark, self.mask
            )
            .into());
        }
        let manifest = Manifest {
            mark_bits: self.mark & self.mask,
            // The mark is all it reads or writes: the kernel copies none of the packet.
            needs_bytes: Some(0),
            // A repeated hook's later rules act on the mark per packet: inline.
            offloads: !self.repeat,
            ..Manifest::new()
        };
        Ok(Arc::new(MarkFactory {
            cfg: self,
            manifest,
        }))
    }
}
