//! Child SAs: the offer and its acceptance (proposal, traffic selector narrowing, mode),
//! keys, installation, and CREATE_CHILD_SA rekeying (RFC 7296 1.3.3) with optional PFS and
//! collision handling (2.8.1).

use super::auth::{error_notify, find_notify};
use super::ike::{Child, Ctx, IkeSa, OutKind};
use crate::config::{DhGroup, EspProposal, Mode, TrafficSelector};
use crate::crypto::{self, dh::DhSecret};
use crate::types::{ChildSa, Event};
use crate::wire::proposal::{Proposal, choose_esp};
use crate::wire::{Header, Payload, Ts, exchange, notify, proto};
use std::net::IpAddr;

/// A child SA negotiated and keyed, not yet installed.
pub(crate) struct NewChild {
    spi_in: u32,
    spi_out: u32,
    esp: EspProposal,
    key_in: crate::Secret,
    key_out: crate::Secret,
    local_ts: Vec<TrafficSelector>,
    remote_ts: Vec<TrafficSelector>,
    rekeys: u32,
}

fn to_wire(t: &TrafficSelector) -> Ts {
    Ts {
        protocol: t.protocol,
        start_port: t.start_port,
        end_port: t.end_port,
        start: t.start,
        end: t.end,
    }
}

fn from_wire(t: &Ts) -> TrafficSelector {
    TrafficSelector {
        start: t.start,
        end: t.end,
        protocol: t.protocol,
        start_port: t.start_port,
        end_port: t.end_port,
    }
}

fn ip_key(a: IpAddr) -> (u8, u128) {
    match a {
        IpAddr::V4(v) => (4, u128::from(u32::from(v))),
        IpAddr::V6(v) => (6, u128::from(v)),
    }
}

/// The intersection of two selectors, if not empty.
pub(crate) fn intersect(a: &TrafficSelector, b: &TrafficSelector) -> Option<TrafficSelector> {
    let (fa, sa) = ip_key(a.start);
    let (fb, sb) = ip_key(b.start);
    let (_, ea) = ip_key(a.end);
    let (_, eb) = ip_key(b.end);
    if fa != fb {
        return None;
    }
    let protocol = match (a.protocol, b.protocol) {
        (0, p) | (p, 0) => p,
        (p, q) if p == q => p,
        _ => return None,
    };
    let (s, e) = (sa.max(sb), ea.min(eb));
    let (ps, pe) = (a.start_port.max(b.start_port), a.end_port.min(b.end_port));
    if s > e || ps > pe {
        return None;
    }
    let addr = |x: u128| {
        if fa == 4 {
            IpAddr::from((x as u32).to_be_bytes())
        } else {
            IpAddr::from(x.to_be_bytes())
        }
    };
    Some(TrafficSelector {
        start: addr(s),
        end: addr(e),
        protocol,
        start_port: ps,
        end_port: pe,
    })
}

/// Narrows the peer's proposed selectors to our configuration (RFC 7296 2.9).
pub(crate) fn narrow(proposed: &[Ts], ours: &[TrafficSelector]) -> Vec<TrafficSelector> {
    let mut out = Vec::new();
    for p in proposed {
        for o in ours {
            if let Some(x) = intersect(&from_wire(p), o)
                && !out.contains(&x)
            {
                out.push(x);
            }
        }
    }
    out
}

fn tsi_tsr(p: &[Payload]) -> Option<(&Vec<Ts>, &Vec<Ts>)> {
    let i = p.iter().find_map(|x| {
        if let Payload::TsI(t) = x {
            Some(t)
        } else {
            None
        }
    })?;
    let r = p.iter().find_map(|x| {
        if let Payload::TsR(t) = x {
            Some(t)
        } else {
            None
        }
    })?;
    Some((i, r))
}

impl IkeSa {
    /// SA, TSi, TSr (and USE_TRANSPORT_MODE) offering a child SA with inbound SPI `spi_in`,
    /// PFS group `pfs` if any (CREATE_CHILD_SA).
    pub(crate) fn child_offer(
        &self,
        ctx: &mut Ctx<'_>,
        spi_in: u32,
        pfs: Option<DhGroup>,
    ) -> Vec<Payload> {
        let props = ctx
            .cfg
            .esp_proposals
            .iter()
            .enumerate()
            .map(|(i, e)| Proposal::from_esp(i as u8 + 1, e, spi_in, pfs.and(e.pfs)))
            .collect();
        let mut p = Vec::new();
        if ctx.cfg.mode == Mode::Transport {
            p.push(Payload::notify(notify::USE_TRANSPORT_MODE, Vec::new()));
        }
        p.push(Payload::Sa(props));
        p.push(Payload::TsI(ctx.cfg.local_ts.iter().map(to_wire).collect()));
        p.push(Payload::TsR(
            ctx.cfg.remote_ts.iter().map(to_wire).collect(),
        ));
        p
    }

    /// Responder: accepts the child SA offered in `p` (of an exchange with nonces `ni`,
    /// `nr` and DH result `gir`), returns the response payloads and the new child, or the
    /// error notify to send.
    pub(crate) fn accept_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &[Payload],
        ni: &[u8],
        nr: &[u8],
        gir: Option<&[u8]>,
        rekeys: Option<u32>,
    ) -> Result<(Vec<Payload>, NewChild), u16> {
        let offered = p
            .iter()
            .find_map(|x| {
                if let Payload::Sa(s) = x {
                    Some(s)
                } else {
                    None
                }
            })
            .ok_or(notify::INVALID_SYNTAX)?;
        // A rekey without a KE payload matches only our proposals without PFS: taking it
        // for one that names a group would quietly drop the PFS the configuration asks
        // for. (The first child, in IKE_AUTH, never has its own KE: RFC 7296 1.2.)
        let ours: Vec<_> = ctx
            .cfg
            .esp_proposals
            .iter()
            .filter(|o| rekeys.is_none() || gir.is_some() || o.pfs.is_none())
            .copied()
            .collect();
        let Some((esp, prop)) = choose_esp(&ours, offered, gir.is_some()) else {
            ctx.c.no_proposal += 1;
            return Err(notify::NO_PROPOSAL_CHOSEN);
        };
        let spi_out = prop.esp_spi().ok_or(notify::INVALID_SYNTAX)?;
        let transport = find_notify(p, notify::USE_TRANSPORT_MODE).is_some();
        if transport != (ctx.cfg.mode == Mode::Transport) {
            ctx.c.no_proposal += 1;
            return Err(notify::NO_PROPOSAL_CHOSEN);
        }
        let (tsi, tsr) = tsi_tsr(p).ok_or(notify::INVALID_SYNTAX)?;
        // The initiator's TSi is our remote side.
        let remote_ts = narrow(tsi, &ctx.cfg.remote_ts);
        let local_ts = narrow(tsr, &ctx.cfg.local_ts);
        if remote_ts.is_empty() || local_ts.is_empty() {
            ctx.c.ts_unacceptable += 1;
            return Err(notify::TS_UNACCEPTABLE);
        }
        let spi_in = ctx.spi32();
        let k = self.keys.as_ref().ok_or(notify::INVALID_SYNTAX)?;
        // We are the responder of this exchange: i->r is our inbound key.
        let (k_ir, k_ri) = crypto::child_keys(k.sk_d.bytes(), gir, ni, nr, esp.encr);
        let mut out = Vec::new();
        if transport {
            out.push(Payload::notify(notify::USE_TRANSPORT_MODE, Vec::new()));
        }
        let mut chosen = Proposal::from_esp(
            prop.num,
            &esp,
            spi_in,
            if gir.is_some() { esp.pfs } else { None },
        );
        chosen.num = prop.num;
        out.push(Payload::Sa(vec![chosen]));
        out.push(Payload::TsI(remote_ts.iter().map(to_wire).collect()));
        out.push(Payload::TsR(local_ts.iter().map(to_wire).collect()));
        let ch = NewChild {
            spi_in,
            spi_out,
            esp,
            key_in: k_ir,
            key_out: k_ri,
            local_ts,
            remote_ts,
            rekeys: rekeys.unwrap_or(0),
        };
        Ok((out, ch))
    }

    /// Initiator: the child SA the response `p` accepted, keyed.
    pub(crate) fn child_from_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &[Payload],
        spi_in: u32,
        ni: &[u8],
        nr: &[u8],
        gir: Option<&[u8]>,
    ) -> Option<NewChild> {
        if let Some(e) = error_notify(p) {
            if e == notify::TS_UNACCEPTABLE {
                ctx.c.ts_unacceptable += 1;
            } else if e == notify::NO_PROPOSAL_CHOSEN {
                ctx.c.no_proposal += 1;
            }
            return None;
        }
        let chosen = p.iter().find_map(|x| {
            if let Payload::Sa(s) = x {
                s.first()
            } else {
                None
            }
        })?;
        let (esp, _) = choose_esp(
            &ctx.cfg.esp_proposals,
            std::slice::from_ref(chosen),
            gir.is_some(),
        )?;
        let spi_out = chosen.esp_spi()?;
        let transport = find_notify(p, notify::USE_TRANSPORT_MODE).is_some();
        if transport != (ctx.cfg.mode == Mode::Transport) {
            return None;
        }
        let (tsi, tsr) = tsi_tsr(p)?;
        // The responder may only narrow what we offered.
        let local_ts = narrow(tsi, &ctx.cfg.local_ts);
        let remote_ts = narrow(tsr, &ctx.cfg.remote_ts);
        if local_ts.is_empty() || remote_ts.is_empty() {
            ctx.c.ts_unacceptable += 1;
            return None;
        }
        let k = self.keys.as_ref()?;
        let (k_ir, k_ri) = crypto::child_keys(k.sk_d.bytes(), gir, ni, nr, esp.encr);
        Some(NewChild {
            spi_in,
            spi_out,
            esp,
            key_in: k_ri,
            key_out: k_ir,
            local_ts,
            remote_ts,
            rekeys: 0,
        })
    }

    /// Installs a child SA: the `ChildUp` event and its rekey timer.
    /// `outbound`: send on it now (else after `replaces` goes, see [`ChildSa::outbound`]).
    pub(crate) fn install(
        &mut self,
        ctx: &mut Ctx<'_>,
        ch: NewChild,
        replaces: Option<u32>,
        outbound: bool,
    ) {
        let encap = self.nat.then_some((self.local, self.remote));
        ctx.c.child_up += 1;
        ctx.events.push_back(Event::ChildUp(ChildSa {
            conn: self.name.clone(),
            spi_in: ch.spi_in,
            spi_out: ch.spi_out,
            transform: ch.esp.encr,
            esn: ch.esp.esn,
            key_in: ch.key_in,
            key_out: ch.key_out,
            mode: ctx.cfg.mode,
            local_ts: ch.local_ts,
            remote_ts: ch.remote_ts,
            encap,
            replaces,
            outbound,
        }));
        let rekey_at = ctx.deadline(ctx.cfg.child_rekey);
        self.children.push(Child {
            spi_in: ch.spi_in,
            spi_out: ch.spi_out,
            transform: ch.esp.encr,
            esp: ch.esp,
            created: ctx.now,
            rekey_at,
            rekeys: ch.rekeys,
            replaced: false,
            pfs_switches: 0,
            outbound_after: if outbound { None } else { replaces },
            peer_rekey: None,
        });
    }

    pub(crate) fn start_rekey_child(&mut self, ctx: &mut Ctx<'_>, old: u32) {
        let Some(c) = self
            .children
            .iter()
            .find(|c| c.spi_in == old && !c.replaced)
        else {
            return;
        };
        let esp = c.esp;
        let spi_in = ctx.spi32();
        let ni = ctx.nonce();
        let pfs = esp.pfs;
        let mut p = vec![Payload::Notify(crate::wire::Notify {
            proto: proto::ESP,
            spi: old.to_be_bytes().to_vec(),
            ty: notify::REKEY_SA,
            data: Vec::new(),
        })];
        p.extend(self.child_offer(ctx, spi_in, pfs));
        p.push(Payload::Nonce(ni.clone()));
        let dh = pfs.map(|g| {
            let (s, public) = DhSecret::generate(g, ctx.rng);
            p.push(Payload::Ke {
                group: g.id(),
                data: public,
            });
            s
        });
        self.send_request(
            ctx,
            exchange::CREATE_CHILD_SA,
            &p,
            OutKind::RekeyChild {
                old_spi_in: old,
                spi_in,
                ni,
                dh,
                esp,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_rekey_child_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &[Payload],
        old: u32,
        spi_in: u32,
        ni: Vec<u8>,
        dh: Option<DhSecret>,
        esp: EspProposal,
    ) {
        // The peer wants another PFS group (RFC 7296 1.3): if we offer it too, retry with
        // it at once, and keep it for later rekeys of this SA.
        if let Some(n) = find_notify(p, notify::INVALID_KE_PAYLOAD) {
            let g = n
                .data
                .get(..2)
                .and_then(|b| DhGroup::from_id(u16::from_be_bytes([b[0], b[1]])));
            let ours = ctx
                .cfg
                .esp_proposals
                .iter()
                .any(|e| e.encr == esp.encr && e.pfs == g);
            match (g, ours) {
                // A peer that keeps changing its mind gets two tries, then the usual wait.
                (Some(g), true)
                    if esp.pfs != Some(g)
                        && self
                            .children
                            .iter()
                            .any(|c| c.spi_in == old && c.pfs_switches < 2) =>
                {
                    if let Some(c) = self.children.iter_mut().find(|c| c.spi_in == old) {
                        c.esp.pfs = Some(g);
                        c.pfs_switches += 1;
                    }
                    self.request(ctx, super::ike::Req::RekeyChild(old));
                }
                _ => self.retry_rekey_later(ctx, old),
            }
            return;
        }
        let nr = p.iter().find_map(|x| {
            if let Payload::Nonce(n) = x {
                Some(n.clone())
            } else {
                None
            }
        });
        let gir = match (
            &dh,
            p.iter().find_map(|x| {
                if let Payload::Ke { data, .. } = x {
                    Some(data)
                } else {
                    None
                }
            }),
        ) {
            (Some(d), Some(ke)) => d.shared(ke),
            (None, _) => None,
            (Some(_), None) => {
                self.retry_rekey_later(ctx, old);
                return;
            }
        };
        if dh.is_some() && gir.is_none() {
            self.retry_rekey_later(ctx, old);
            return;
        }
        let Some(nr) = nr else {
            self.retry_rekey_later(ctx, old);
            return;
        };
        let Some(mut ch) =
            self.child_from_response(ctx, p, spi_in, &ni, &nr, gir.as_deref().map(|v| &v[..]))
        else {
            self.retry_rekey_later(ctx, old);
            return;
        };
        let Some(oldc) = self.children.iter_mut().find(|c| c.spi_in == old) else {
            return;
        };
        ch.rekeys = oldc.rekeys + 1;
        // A collision (RFC 7296 2.8.1): the peer rekeyed this SA too. The exchange with the
        // lowest nonce made the redundant SA; its initiator deletes it.
        if let Some((peer_new, peer_min)) = oldc.peer_rekey.take() {
            let ours = ni.as_slice().min(nr.as_slice());
            let name = self.name.clone();
            let peer_child = self.children.iter_mut().find(|c| c.spi_in == peer_new);
            if ours < peer_min.as_slice() {
                // Ours lost: the peer's new SA carries the traffic; ours is deleted at once.
                if let Some(c) = peer_child {
                    c.outbound_after = None;
                    ctx.events.push_back(Event::ChildOutbound {
                        conn: name,
                        spi_in: c.spi_in,
                        spi_out: c.spi_out,
                    });
                }
                if let Some(c) = self.children.iter_mut().find(|c| c.spi_in == old) {
                    c.replaced = true;
                    c.rekey_at = None;
                }
                self.install(ctx, ch, None, false);
                self.request(ctx, super::ike::Req::DeleteChild(spi_in));
                return;
            }
            // Ours won: the peer deletes its new SA, which never carries our traffic.
            if let Some(c) = peer_child {
                c.outbound_after = None;
            }
        }
        let Some(oldc) = self.children.iter_mut().find(|c| c.spi_in == old) else {
            return;
        };
        oldc.replaced = true;
        oldc.rekey_at = None;
        ctx.c.child_rekeys += 1;
        self.install(ctx, ch, Some(old), true);
        self.request(ctx, super::ike::Req::DeleteChild(old));
    }

    fn retry_rekey_later(&mut self, ctx: &mut Ctx<'_>, old: u32) {
        let at = ctx.now + ctx.jitter(std::time::Duration::from_secs(10));
        if let Some(c) = self.children.iter_mut().find(|c| c.spi_in == old) {
            c.rekey_at = Some(at);
        }
    }

    /// Answers CREATE_CHILD_SA: a child rekey (REKEY_SA), an IKE rekey (SA of protocol
    /// IKE), or a new child SA (refused: one child per IKE SA).
    pub(super) fn respond_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: Header,
        msg: &[u8],
        p: &[Payload],
    ) {
        let ike = p
            .iter()
            .any(|x| matches!(x, Payload::Sa(s) if s.iter().any(|q| q.proto == proto::IKE)));
        if ike {
            return self.respond_rekey_ike(ctx, h, msg, p);
        }
        let err = |s: &mut IkeSa, ctx: &mut Ctx<'_>, e: u16| {
            s.send_response(
                ctx,
                exchange::CREATE_CHILD_SA,
                h.msg_id,
                msg,
                &[Payload::notify(e, Vec::new())],
            )
        };
        let Some(rekey) = find_notify(p, notify::REKEY_SA) else {
            return err(self, ctx, 35); // NO_ADDITIONAL_SAS
        };
        let old_out = rekey
            .spi
            .get(..4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let Some(idx) = self
            .children
            .iter()
            .position(|c| Some(c.spi_out) == old_out && !c.replaced)
        else {
            return err(self, ctx, notify::CHILD_SA_NOT_FOUND);
        };
        let Some(ni) = p.iter().find_map(|x| {
            if let Payload::Nonce(n) = x {
                Some(n.clone())
            } else {
                None
            }
        }) else {
            return err(self, ctx, notify::INVALID_SYNTAX);
        };
        let nr = ctx.nonce();
        let mut extra = Vec::new();
        let gir = match p.iter().find_map(|x| {
            if let Payload::Ke { group, data } = x {
                Some((*group, data))
            } else {
                None
            }
        }) {
            Some((g, ke)) => {
                let want = ctx.cfg.esp_proposals.iter().find_map(|e| e.pfs);
                let Some(group) = want.filter(|w| w.id() == g) else {
                    let id = want.map_or(0, |w| w.id());
                    return self.send_response(
                        ctx,
                        exchange::CREATE_CHILD_SA,
                        h.msg_id,
                        msg,
                        &[Payload::notify(
                            notify::INVALID_KE_PAYLOAD,
                            id.to_be_bytes().to_vec(),
                        )],
                    );
                };
                let (s, public) = DhSecret::generate(group, ctx.rng);
                extra.push(Payload::Ke {
                    group: g,
                    data: public,
                });
                match s.shared(ke) {
                    Some(x) => Some(x),
                    None => return err(self, ctx, notify::INVALID_SYNTAX),
                }
            }
            None => None,
        };
        let old_in = self.children[idx].spi_in;
        let rekeys = self.children[idx].rekeys + 1;
        match self.accept_child(
            ctx,
            p,
            &ni,
            &nr,
            gir.as_deref().map(|v| &v[..]),
            Some(rekeys),
        ) {
            Ok((mut resp, ch)) => {
                let new_in = ch.spi_in;
                resp.push(Payload::Nonce(nr.clone()));
                resp.extend(extra);
                self.send_response(ctx, exchange::CREATE_CHILD_SA, h.msg_id, msg, &resp);
                let ours_pending = matches!(&self.out, Some(o) if matches!(o.kind, OutKind::RekeyChild { old_spi_in, .. } if old_spi_in == old_in));
                if let Some(c) = self.children.get_mut(idx) {
                    if ours_pending {
                        c.peer_rekey = Some((new_in, ni.as_slice().min(nr.as_slice()).to_vec()));
                    } else {
                        c.replaced = true;
                    }
                    c.rekey_at = None;
                }
                if !ours_pending {
                    ctx.c.child_rekeys += 1;
                }
                self.install(ctx, ch, Some(old_in), false);
            }
            Err(e) => err(self, ctx, e),
        }
    }
}
