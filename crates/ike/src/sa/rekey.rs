//! Rekeying the IKE SA with CREATE_CHILD_SA (RFC 7296 1.3.2, 2.18): a new IKE SA with new
//! SPIs and SKEYSEED = prf(SK_d old, g^ir new | Ni | Nr) takes over the child SAs; the old
//! one is deleted by the exchange's initiator.

use super::auth::error_notify;
use super::ike::{Ctx, IkeSa, OutKind, Phase};
use crate::crypto::{self, IkeKeys, dh::DhSecret};
use crate::types::Event;
use crate::wire::proposal::{Proposal, choose_ike, ike_from_chosen};
use crate::wire::{Header, Payload, exchange, notify};

impl IkeSa {
    pub(crate) fn start_rekey_ike(&mut self, ctx: &mut Ctx<'_>) {
        let Some(suite) = self.keys.as_ref().map(|k| k.suite) else {
            return;
        };
        let spi = ctx.spi64();
        let ni = ctx.nonce();
        let (dh, public) = DhSecret::generate(suite.dh, ctx.rng);
        let p = [
            Payload::Sa(vec![Proposal::from_ike(
                1,
                &suite,
                spi.to_be_bytes().to_vec(),
            )]),
            Payload::Nonce(ni.clone()),
            Payload::Ke {
                group: suite.dh.id(),
                data: public,
            },
        ];
        self.send_request(
            ctx,
            exchange::CREATE_CHILD_SA,
            &p,
            OutKind::RekeyIke { spi, ni, dh, suite },
        );
    }

    /// The new IKE SA replacing this one; children move to it.
    #[allow(clippy::too_many_arguments)]
    fn successor(
        &mut self,
        ctx: &mut Ctx<'_>,
        we_initiated: bool,
        spi_i: u64,
        spi_r: u64,
        ni: &[u8],
        nr: &[u8],
        gir: &[u8],
        suite: crate::IkeProposal,
    ) -> Option<IkeSa> {
        let old = self.keys.as_ref()?;
        let seed = crypto::skeyseed_rekey(old.sk_d.bytes(), gir, ni, nr);
        let mut sa = IkeSa::blank(
            self.conn,
            ctx.cfg,
            we_initiated,
            self.local,
            self.remote,
            ctx.now,
            suite.dh,
        );
        sa.spi_i = spi_i;
        sa.spi_r = spi_r;
        sa.keys = Some(IkeKeys::derive(suite, &seed[..], ni, nr, spi_i, spi_r));
        sa.phase = Phase::Established;
        sa.nat = self.nat;
        sa.rekeys = self.rekeys + 1;
        sa.children = std::mem::take(&mut self.children);
        // Child rekeys still queued here are due on the new IKE SA at once.
        for req in std::mem::take(&mut self.queue) {
            match req {
                super::ike::Req::RekeyChild(spi) => {
                    if let Some(c) = sa.children.iter_mut().find(|c| c.spi_in == spi) {
                        c.rekey_at = Some(ctx.now);
                    }
                }
                // Deletes of child SAs replaced just before: theirs too.
                super::ike::Req::DeleteChild(spi)
                    if sa.children.iter().any(|c| c.spi_in == spi) =>
                {
                    sa.queue.push_back(req);
                }
                other => self.queue.push_back(other),
            }
        }
        sa.rekey_at = ctx.deadline(ctx.cfg.ike_rekey);
        sa.announced = true;
        self.rekeyed = true;
        self.rekey_at = None;
        ctx.c.ike_rekeys += 1;
        ctx.c.ike_up += 1;
        ctx.events.push_back(Event::IkeUp {
            conn: sa.name.clone(),
            remote: sa.remote,
        });
        Some(sa)
    }

    pub(super) fn on_rekey_ike_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &[Payload],
        spi: u64,
        ni: Vec<u8>,
        dh: DhSecret,
        suite: crate::IkeProposal,
    ) {
        let chosen = p.iter().find_map(|x| {
            if let Payload::Sa(s) = x {
                s.first()
            } else {
                None
            }
        });
        let nr = p.iter().find_map(|x| {
            if let Payload::Nonce(n) = x {
                Some(n)
            } else {
                None
            }
        });
        let ke = p.iter().find_map(|x| {
            if let Payload::Ke { data, .. } = x {
                Some(data)
            } else {
                None
            }
        });
        let ok = error_notify(p).is_none() && chosen.and_then(ike_from_chosen) == Some(suite);
        let (Some(c), Some(nr), Some(ke), true) = (chosen, nr, ke, ok) else {
            // Refused (e.g. a collision answered with TEMPORARY_FAILURE): try again later.
            self.rekey_at = Some(ctx.now + ctx.jitter(std::time::Duration::from_secs(10)));
            return;
        };
        let (Some(spi_r), Some(gir)) = (c.ike_spi(), dh.shared(ke)) else {
            self.rekey_at = Some(ctx.now + ctx.jitter(std::time::Duration::from_secs(10)));
            return;
        };
        if let Some(sa) = self.successor(ctx, true, spi, spi_r, &ni, nr, &gir, suite) {
            ctx.new_sa = Some(sa);
        }
        self.request(ctx, super::ike::Req::DeleteIke);
    }

    pub(super) fn respond_rekey_ike(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: Header,
        msg: &[u8],
        p: &[Payload],
    ) {
        let fail = |s: &mut IkeSa, ctx: &mut Ctx<'_>, e: u16, d: Vec<u8>| {
            s.send_response(
                ctx,
                exchange::CREATE_CHILD_SA,
                h.msg_id,
                msg,
                &[Payload::notify(e, d)],
            )
        };
        if matches!(
            self.out.as_ref().map(|o| &o.kind),
            Some(OutKind::RekeyIke { .. } | OutKind::RekeyChild { .. })
        ) || self.rekeyed
        {
            // A collision with our IKE rekey, or our child rekey whose answer must find its
            // child SA here: ours goes on, the peer retries later (RFC 7296 2.25).
            return fail(self, ctx, notify::TEMPORARY_FAILURE, Vec::new());
        }
        let offered = p.iter().find_map(|x| {
            if let Payload::Sa(s) = x {
                Some(s)
            } else {
                None
            }
        });
        let ni = p.iter().find_map(|x| {
            if let Payload::Nonce(n) = x {
                Some(n.clone())
            } else {
                None
            }
        });
        let ke = p.iter().find_map(|x| {
            if let Payload::Ke { group, data } = x {
                Some((*group, data))
            } else {
                None
            }
        });
        let (Some(offered), Some(ni), Some((group, ke))) = (offered, ni, ke) else {
            return fail(self, ctx, notify::INVALID_SYNTAX, Vec::new());
        };
        let Some((suite, num)) = choose_ike(&ctx.cfg.ike_proposals, offered) else {
            ctx.c.no_proposal += 1;
            return fail(self, ctx, notify::NO_PROPOSAL_CHOSEN, Vec::new());
        };
        let Some(spi_i) = offered
            .iter()
            .find(|q| q.num == num)
            .and_then(|q| q.ike_spi())
        else {
            return fail(self, ctx, notify::INVALID_SYNTAX, Vec::new());
        };
        if group != suite.dh.id() {
            return fail(
                self,
                ctx,
                notify::INVALID_KE_PAYLOAD,
                suite.dh.id().to_be_bytes().to_vec(),
            );
        }
        let (dh, public) = DhSecret::generate(suite.dh, ctx.rng);
        let Some(gir) = dh.shared(ke) else {
            return fail(self, ctx, notify::INVALID_SYNTAX, Vec::new());
        };
        let spi_r = ctx.spi64();
        let nr = ctx.nonce();
        let resp = [
            Payload::Sa(vec![Proposal::from_ike(
                num,
                &suite,
                spi_r.to_be_bytes().to_vec(),
            )]),
            Payload::Nonce(nr.clone()),
            Payload::Ke {
                group: suite.dh.id(),
                data: public,
            },
        ];
        self.send_response(ctx, exchange::CREATE_CHILD_SA, h.msg_id, msg, &resp);
        if let Some(sa) = self.successor(ctx, false, spi_i, spi_r, &ni, &nr, &gir, suite) {
            ctx.new_sa = Some(sa);
        }
    }
}
