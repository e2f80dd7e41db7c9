//! `[[queue]] offload` and the conntrack mark bits it uses (`[daemon] offload_mark`):
//! the checks, the queue's [`OffloadMark`] and the generation each start or reload gives
//! the offloading queues (docs/offload.md).

use super::Config;
use super::error::Ctx;
use relay_control::{Hook, Table};
use relay_core::ServiceFactory;
use relay_nfq::OffloadMark;
use std::sync::Arc;
use toml::Spanned;

/// The offload bits of a queue under `mask` (`daemon.offload_mark`): the lowest bit for
/// the original direction, the next for the reply, the rest the generation (the first
/// generation until [`set_generations`]); `restore` are the verdict mark bits kept.
pub fn offload_bits(mask: u32, restore: u32) -> OffloadMark {
    let low = mask.trailing_zeros().min(31);
    let orig = 1u32 << low;
    let reply = orig.checked_shl(1).unwrap_or(0) & mask;
    let gen_mask = mask & !(orig | reply);
    OffloadMark {
        orig,
        reply,
        gen_mask,
        generation: gen_mask & gen_mask.wrapping_neg(),
        restore,
        turned: true,
    }
}

/// How many generations `mark`'s field holds (0 excluded).
fn generations(mark: &OffloadMark) -> u32 {
    mark.gen_mask >> mark.gen_mask.trailing_zeros().min(31)
}

/// Gives every offloading queue of `cfg` its generation for `epoch` (the daemon's count
/// of starts and reloads, from a random start): distinct between the queues, and none
/// equal to any queue's under `epoch - 1`, so that a reload revokes every offload and no
/// queue's skip rule matches a flow another queue offloaded. `(epoch * n + k) mod max`
/// for the k-th of n queues, computed without wrapping (the epoch taken modulo `max`
/// first): with `2n <= max` ([`check_count`]) the n values are distinct, and those of
/// consecutive epochs differ by 1 to 2n - 1, never a multiple of `max`. A generation
/// comes round again after a few reloads: the daemon clears the offload bits of every
/// conntrack entry of another generation after each start and reload (docs/offload.md).
pub fn set_generations(cfg: &mut Config, epoch: impl Into<u64>) {
    let epoch: u64 = epoch.into();
    let n = cfg
        .queues
        .iter()
        .filter(|q| q.queue.offload.is_some())
        .count() as u64;
    let mut k = 0u64;
    for q in &mut cfg.queues {
        if let Some(m) = &mut q.queue.offload {
            let max = u64::from(generations(m).max(1));
            let g = ((epoch % max) * (n % max) + k) % max + 1;
            let g = u32::try_from(g).unwrap_or(1);
            m.generation = (g << m.gen_mask.trailing_zeros().min(31)) & m.gen_mask;
            k += 1;
        }
    }
}

/// `offload` of queue entry `index`: allowed only when every service of the chain may
/// vote (`Manifest::offloads`) and the table sees conntrack (not `raw`); the verdict mark
/// bits the chain's services set are kept with the offload, outside `mask`. At `hook`
/// in `table`, NAT may have changed the packets' tuples already unless the hook is
/// PREROUTING or mangle OUTPUT (mangle runs before nat there, priority -150 < -100).
pub(super) fn check_offload(
    cx: &mut Ctx<'_>,
    index: usize,
    offload: Option<&Spanned<bool>>,
    chain: &[(String, Arc<dyn ServiceFactory>)],
    (table, hook): (Table, Hook),
    mask: u32,
) -> Option<OffloadMark> {
    let o = offload.filter(|o| *o.get_ref())?;
    let mut ok = true;
    for (name, s) in chain {
        if !s.manifest().offloads {
            cx.err(
                Some(o.span()),
                format!("queue[{index}].offload"),
                format!(
                    "service `{name}` ({}) never votes to offload a flow: a queue offloads only \
                     when every service of its chain may",
                    s.kind()
                ),
            );
            ok = false;
        }
    }
    if table == Table::Raw {
        cx.err(
            Some(o.span()),
            format!("queue[{index}].offload"),
            "table raw runs before conntrack: its rules cannot see an offloaded flow's mark",
        );
        ok = false;
    }
    let restore = chain
        .iter()
        .fold(0u32, |bits, (_, s)| bits | s.manifest().mark_bits);
    if restore & mask != 0 {
        cx.err(
            Some(o.span()),
            format!("queue[{index}].offload"),
            format!(
                "the chain sets mark bits {restore:#x}, which overlap daemon.offload_mark \
                 {mask:#x}: an offloaded flow keeps its mark in the same conntrack mark"
            ),
        );
        ok = false;
    }
    let turned = !matches!(
        (table, hook),
        (_, Hook::Prerouting) | (Table::Mangle, Hook::Output)
    );
    ok.then(|| OffloadMark {
        turned,
        ..offload_bits(mask, restore)
    })
}

/// `n` offloading queues: at most half the generations may be in use at once ([`set_generations`]).
pub(super) fn check_count(cx: &mut Ctx<'_>, n: u32, mask: u32) {
    let max = generations(&offload_bits(mask, 0));
    if n > 0 && n.saturating_mul(2) > max {
        cx.err(
            None,
            "daemon.offload_mark",
            format!(
                "{n} queues offload, but {mask:#x} holds only {max} generations: at most {} \
                 queues may offload; give offload_mark more bits",
                max / 2
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_generations() {
        let m = offload_bits(0x00ff_0000, 0xff);
        assert_eq!(
            (m.orig, m.reply, m.gen_mask),
            (0x1_0000, 0x2_0000, 0xfc_0000)
        );
        assert_eq!(m.generation, 0x4_0000);
        assert_eq!(m.mask(), 0x00ff_00ff);
        assert_eq!(generations(&m), 63);
    }
}
