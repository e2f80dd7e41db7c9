//! Clearing stale offload marks: conntrack entries keep the generation they were
//! offloaded under after a reload revoked them, and the generation field comes round
//! again (docs/offload.md); at each start and reload the control plane clears the
//! offload bits of every entry whose generation is older than the ones in force.

use super::Daemon;
use crate::config::Config;
use std::time::{Duration, Instant};

/// How long one clearing may take (a dump of the marked entries and their updates).
const CLEAR_WITHIN: Duration = Duration::from_secs(2);

/// The generations the offloading queues of `cfg` use.
pub(super) fn generations(cfg: &Config) -> Vec<u32> {
    cfg.queues
        .iter()
        .filter_map(|q| q.queue.offload.map(|m| m.generation))
        .collect()
}

/// Clears the offload bits (all of `daemon.offload_mark`) of every conntrack entry
/// offloaded in either direction under a generation not in `keep`; returns the
/// generations the cleared entries had. Nothing if no queue of `cfg` offloads (without
/// skip rules a mark matches nothing; the reload that adds one clears). Errors are
/// logged: a mark left stale is cleared by the next reload. Since each reload clears
/// before its swap all but the generations in force, a stale entry's generation is
/// always the previous reload's, which the new generations never equal.
pub(super) fn clear_stale(cfg: &Config, keep: &[u32]) -> Vec<u32> {
    if !cfg.queues.iter().any(|q| q.queue.offload.is_some()) {
        return Vec::new();
    }
    let m = crate::config::offload_bits(cfg.daemon.offload_mark, 0);
    let clear = m.orig | m.reply | m.gen_mask;
    let deadline = Instant::now() + CLEAR_WITHIN;
    let mut gens = Vec::new();
    for bit in [m.orig, m.reply] {
        match relay_netlink::conntrack::clear_marks(
            bit,
            |mark| !keep.contains(&(mark & m.gen_mask)),
            clear,
            deadline,
        ) {
            Ok(marks) => gens.extend(marks.into_iter().map(|mark| mark & m.gen_mask)),
            Err(e) => {
                tracing::warn!("stale offload marks not cleared ({e}); the next reload tries again")
            }
        }
    }
    if !gens.is_empty() {
        tracing::info!(
            entries = gens.len(),
            "cleared the offload bits of conntrack entries of earlier generations"
        );
    }
    gens
}

impl Daemon {
    /// Counts as `revoked`, on the first offloading queue, the entries an earlier run
    /// left that [`clear_stale`] cleared at the start.
    pub(super) fn count_cleared(&self, cleared: &[u32]) {
        let first = self
            .config
            .queues
            .iter()
            .find(|q| q.queue.offload.is_some())
            .and_then(|q| self.queues.get(&q.first));
        if let Some(r) = first.filter(|_| !cleared.is_empty()) {
            r.queue.counters().offload.revoked.add(cleared.len() as u64);
        }
    }
}
