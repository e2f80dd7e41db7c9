//! Reclaiming application-layer memory from idle flows when `app_memcap` runs high, so
//! that flows that hold parser state and wait (slow bodies, endless heads, pipelined
//! requests nobody answers) cannot keep every new flow from being parsed. Suricata's flow
//! engine does the like in its emergency mode (flows timed out early when its memcap is
//! reached).
//!
//! When the charge passes 7/8 of the cap, at most once a second, the flows idle for at
//! least [`MIN_IDLE`] that hold parser memory are reclaimed longest idle first, until the
//! charge would be back under 3/4 of the cap: each gets the exception policy (as a flow
//! the memcap refused; a flow a rule already decided keeps its verdict) and its parser is
//! freed whatever the policy (counted in `app_reclaimed`). Flows that keep sending are
//! not touched: a new flow that then finds no room gets the policy itself.

use super::app::{FlowAction, FlowState, memcap_exception};
use super::exception::Exceptions;
use crate::applayer::budget::AppBudget;
use crate::flow::FlowTable;
use relay_core::{Counter, Counters};
use std::time::{Duration, Instant};

/// Least time since a flow's last packet for its parser memory to be reclaimed.
pub(crate) const MIN_IDLE: Duration = Duration::from_secs(1);
/// Least time between two reclaim passes over the flow table.
const EVERY: Duration = Duration::from_secs(1);

/// The reclaim state of one detector.
#[derive(Debug)]
pub(crate) struct Reclaim {
    next: Option<Instant>,
    reclaimed: Counter,
}

impl Reclaim {
    /// Counting reclaimed flows in `app_reclaimed`.
    pub(crate) fn new(c: &Counters) -> Reclaim {
        Reclaim {
            next: None,
            reclaimed: c.counter("app_reclaimed"),
        }
    }

    /// Reclaims parser memory from idle flows of `table` if `budget` runs high (see the
    /// module docs). Cheap when it does not: one load and a comparison.
    pub(crate) fn run(
        &mut self,
        table: &mut FlowTable<FlowState>,
        budget: &AppBudget,
        ex: &Exceptions,
        now: Instant,
    ) {
        let (used, cap) = (budget.used(), budget.cap());
        if used <= cap - cap / 8 || self.next.is_some_and(|n| now < n) {
            return;
        }
        self.next = Some(now + EVERY);
        let need = used.saturating_sub(cap - cap / 4);
        let mut held: Vec<(Duration, usize)> = table
            .idle_states_mut(now)
            .filter(|(idle, st)| *idle >= MIN_IDLE && st.app.charged() > 0)
            .map(|(idle, st)| (idle, st.app.charged()))
            .collect();
        held.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
        let mut freed = 0;
        let mut cutoff = None;
        for (idle, charged) in held {
            if freed >= need {
                break;
            }
            freed += charged;
            cutoff = Some(idle);
        }
        let Some(cutoff) = cutoff else {
            return;
        };
        for (idle, st) in table.idle_states_mut(now) {
            if idle < cutoff || st.app.charged() == 0 {
                continue;
            }
            let FlowState {
                app,
                txs,
                action,
                offload,
                ..
            } = st;
            if *action == FlowAction::Inspect && memcap_exception(app, txs, action, ex).is_some() {
                offload.bypass |= ex.bypasses();
            }
            app.disable();
            txs.clear();
            self.reclaimed.inc();
        }
        // Flows the policy decided hold no stream memory either.
        table.abandon_streams_where(|st| st.action != FlowAction::Inspect);
    }
}
