//! `mark`: sets the packet's nfmark (masked), and optionally gives it back to the hook
//! (`repeat = true`) so that later rules can act on the mark.

use super::de_u32;
use crate::counters::Counters;
use crate::packet::Packet;
use crate::service::{Action, Context, Service, ServiceConfig, ServiceFactory};
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

#[derive(Clone)]
struct Mark {
    cfg: MarkConfig,
}

impl Service for Mark {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        let current = pkt.verdict_mark().unwrap_or(pkt.meta.mark);
        let mark = (current & !self.cfg.mask) | (self.cfg.mark & self.cfg.mask);
        if self.cfg.repeat {
            Action::Repeat { mark }
        } else {
            pkt.set_mark(mark);
            Action::Continue
        }
    }
}

impl ServiceFactory for Mark {
    fn kind(&self) -> &'static str {
        "mark"
    }
    fn mark_bits(&self) -> u32 {
        self.cfg.mark & self.cfg.mask
    }

    fn needs_bytes(&self) -> Option<u32> {
        Some(0)
    }
    fn build(&self, _counters: &Counters) -> Box<dyn Service> {
        Box::new(self.clone())
    }
}

impl ServiceConfig for MarkConfig {
    const KIND: &'static str = "mark";
    fn into_factory(self, _name: &str) -> Result<Arc<dyn ServiceFactory>, crate::InvalidConfig> {
        if self.mark & !self.mask != 0 {
            return Err(format!(
                "mark {:#x} has bits outside mask {:#x}; they would be ignored",
                self.mark, self.mask
            )
            .into());
        }
        Ok(Arc::new(Mark { cfg: self }))
    }
}
