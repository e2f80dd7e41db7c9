//! IKE_SA_INIT and IKE_AUTH (RFC 7296 1.2, 2.15): proposals, DH, nonces, NAT detection
//! (2.23), cookies (2.6), INVALID_KE_PAYLOAD (1.2), PSK authentication and the first child
//! SA, in both roles.

use super::ike::{Ctx, IkeSa, OutKind, Phase};
use crate::config::{ConnConfig, Identity};
use crate::crypto::{self, IkeKeys, dh::DhSecret};
use crate::types::Event;
use crate::wire::proposal::{Proposal, choose_ike, ike_from_chosen};
use crate::wire::{self, Header, Id, Payload, exchange, notify};
use std::net::{IpAddr, SocketAddr};

/// NAT_DETECTION hash (RFC 7296 2.23): SHA-1(SPIi | SPIr | IP | port).
pub(crate) fn nat_hash(spi_i: u64, spi_r: u64, a: SocketAddr) -> Vec<u8> {
    use sha1::Digest;
    let mut h = sha1::Sha1::new();
    h.update(spi_i.to_be_bytes());
    h.update(spi_r.to_be_bytes());
    match a.ip() {
        IpAddr::V4(v) => h.update(v.octets()),
        IpAddr::V6(v) => h.update(v.octets()),
    }
    h.update(a.port().to_be_bytes());
    h.finalize().to_vec()
}

pub(crate) fn find_notify(p: &[Payload], ty: u16) -> Option<&wire::Notify> {
    p.iter().find_map(|x| match x {
        Payload::Notify(n) if n.ty == ty => Some(n),
        _ => None,
    })
}

/// The first error notify in a response, if any.
pub(crate) fn error_notify(p: &[Payload]) -> Option<u16> {
    p.iter().find_map(|x| match x {
        Payload::Notify(n) if n.ty < notify::FIRST_STATUS => Some(n.ty),
        _ => None,
    })
}

pub(crate) fn id_payload(id: &Identity) -> Id {
    match id {
        Identity::Addr(IpAddr::V4(a)) => Id {
            ty: 1,
            data: a.octets().to_vec(),
        },
        Identity::Addr(IpAddr::V6(a)) => Id {
            ty: 5,
            data: a.octets().to_vec(),
        },
        Identity::Fqdn(s) => Id {
            ty: 2,
            data: s.as_bytes().to_vec(),
        },
        Identity::Email(s) => Id {
            ty: 3,
            data: s.as_bytes().to_vec(),
        },
        Identity::KeyId(k) => Id {
            ty: 11,
            data: k.clone(),
        },
    }
}

impl IkeSa {
    /// Starts an IKE SA as initiator: sends IKE_SA_INIT.
    pub(crate) fn initiate(
        ctx: &mut Ctx<'_>,
        conn: usize,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Option<IkeSa> {
        let group = ctx.cfg.ike_proposals.first()?.dh;
        let mut sa = IkeSa::blank(conn, ctx.cfg, true, local, remote, ctx.now, group);
        sa.spi_i = ctx.spi64();
        sa.send_init(ctx, true);
        Some(sa)
    }

    /// Sends IKE_SA_INIT: with a fresh DH value and nonce, or (`fresh` false, answering a
    /// COOKIE) the same payloads again behind the cookie (RFC 7296 2.6).
    fn send_init(&mut self, ctx: &mut Ctx<'_>, fresh: bool) {
        if fresh || self.init_payloads.is_empty() {
            let (dh, public) = DhSecret::generate(self.group, ctx.rng);
            self.dh = Some(dh);
            self.ni = ctx.nonce();
            let props = ctx
                .cfg
                .ike_proposals
                .iter()
                .enumerate()
                .map(|(i, x)| Proposal::from_ike(i as u8 + 1, x, Vec::new()))
                .collect();
            self.init_payloads = vec![
                Payload::Sa(props),
                Payload::Ke {
                    group: self.group.id(),
                    data: public,
                },
                Payload::Nonce(self.ni.clone()),
                Payload::notify(
                    notify::NAT_DETECTION_SOURCE_IP,
                    nat_hash(self.spi_i, 0, self.local),
                ),
                Payload::notify(
                    notify::NAT_DETECTION_DESTINATION_IP,
                    nat_hash(self.spi_i, 0, self.remote),
                ),
            ];
        }
        self.next_msg_id = 0;
        let mut p = Vec::with_capacity(6);
        if let Some(c) = &self.cookie {
            p.push(Payload::notify(notify::COOKIE, c.clone()));
        }
        p.extend(self.init_payloads.iter().cloned());
        self.send_request(ctx, exchange::IKE_SA_INIT, &p, OutKind::Init);
        if let Some(o) = &self.out {
            self.init_ours = o.bytes.clone();
        }
        self.phase = Phase::InitSent;
    }

    /// Answers an IKE_SA_INIT request; returns the new half-open SA if one was made.
    /// `cookie_secret` is set when the responder is under load and demands cookies.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn respond_init(
        ctx: &mut Ctx<'_>,
        conn: usize,
        local: SocketAddr,
        remote: SocketAddr,
        msg: &[u8],
        m: &wire::Message,
        cookie_secret: Option<&[u8]>,
    ) -> Option<IkeSa> {
        let h = m.header;
        let p = &m.payloads;
        let reply = |ctx: &mut Ctx<'_>, payloads: &[Payload]| {
            let hdr = Header {
                spi_i: h.spi_i,
                spi_r: 0,
                next: 0,
                exchange: exchange::IKE_SA_INIT,
                flags: wire::flags::RESPONSE,
                msg_id: 0,
                length: 0,
            };
            ctx.c.msgs_out += 1;
            ctx.out.push_back(crate::Transmit {
                local,
                remote,
                payload: wire::emit_plain(hdr, payloads),
            });
        };
        let (Some(offered), Some((group, ke)), Some(ni)) = (
            p.iter().find_map(|x| {
                if let Payload::Sa(s) = x {
                    Some(s)
                } else {
                    None
                }
            }),
            p.iter().find_map(|x| {
                if let Payload::Ke { group, data } = x {
                    Some((*group, data))
                } else {
                    None
                }
            }),
            p.iter().find_map(|x| {
                if let Payload::Nonce(n) = x {
                    Some(n)
                } else {
                    None
                }
            }),
        ) else {
            ctx.c.invalid_malformed += 1;
            return None;
        };
        if let Some(secret) = cookie_secret {
            let want = crypto::prf(
                secret,
                &[
                    ni,
                    &h.spi_i.to_be_bytes(),
                    remote.ip().to_string().as_bytes(),
                ],
            );
            match find_notify(p, notify::COOKIE) {
                Some(n) if crypto::ct_eq(&n.data, &want[..]) => {}
                _ => {
                    ctx.c.cookies_sent += 1;
                    reply(ctx, &[Payload::notify(notify::COOKIE, want.to_vec())]);
                    return None;
                }
            }
        }
        let Some((suite, num)) = choose_ike(&ctx.cfg.ike_proposals, offered) else {
            ctx.c.no_proposal += 1;
            reply(
                ctx,
                &[Payload::notify(notify::NO_PROPOSAL_CHOSEN, Vec::new())],
            );
            return None;
        };
        if group != suite.dh.id() {
            reply(
                ctx,
                &[Payload::notify(
                    notify::INVALID_KE_PAYLOAD,
                    suite.dh.id().to_be_bytes().to_vec(),
                )],
            );
            return None;
        }
        let (dh, public) = DhSecret::generate(suite.dh, ctx.rng);
        let Some(gir) = dh.shared(ke) else {
            ctx.c.invalid_malformed += 1;
            reply(ctx, &[Payload::notify(notify::INVALID_SYNTAX, Vec::new())]);
            return None;
        };
        let mut sa = IkeSa::blank(conn, ctx.cfg, false, local, remote, ctx.now, suite.dh);
        sa.spi_i = h.spi_i;
        sa.spi_r = ctx.spi64();
        sa.ni = ni.clone();
        sa.nr = ctx.nonce();
        sa.init_theirs = msg.to_vec();
        sa.nat = sa.detect_nat(p, local, remote);
        let seed = crypto::skeyseed(&sa.ni, &sa.nr, &gir);
        sa.keys = Some(IkeKeys::derive(
            suite,
            &seed[..],
            &sa.ni,
            &sa.nr,
            sa.spi_i,
            sa.spi_r,
        ));
        let payloads = [
            Payload::Sa(vec![Proposal::from_ike(num, &suite, Vec::new())]),
            Payload::Ke {
                group: suite.dh.id(),
                data: public,
            },
            Payload::Nonce(sa.nr.clone()),
            Payload::notify(
                notify::NAT_DETECTION_SOURCE_IP,
                nat_hash(sa.spi_i, sa.spi_r, local),
            ),
            Payload::notify(
                notify::NAT_DETECTION_DESTINATION_IP,
                nat_hash(sa.spi_i, sa.spi_r, remote),
            ),
        ];
        sa.send_response(ctx, exchange::IKE_SA_INIT, 0, msg, &payloads);
        if let Some((_, _, b)) = &sa.last_resp {
            sa.init_ours = b.clone();
        }
        sa.phase = Phase::InitDone;
        Some(sa)
    }

    /// Whether the NAT_DETECTION notifies show a NAT between us (RFC 7296 2.23).
    fn detect_nat(&self, p: &[Payload], local: SocketAddr, remote: SocketAddr) -> bool {
        let src = find_notify(p, notify::NAT_DETECTION_SOURCE_IP);
        let dst = find_notify(p, notify::NAT_DETECTION_DESTINATION_IP);
        let (spi_i, spi_r) = (self.spi_i, if self.initiator { self.spi_r } else { 0 });
        let src_ok = src.is_none_or(|n| n.data == nat_hash(spi_i, spi_r, remote));
        let dst_ok = dst.is_none_or(|n| n.data == nat_hash(spi_i, spi_r, local));
        !(src_ok && dst_ok)
    }

    pub(super) fn on_init_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: Header,
        msg: &[u8],
        p: &[Payload],
    ) {
        if let Some(n) = find_notify(p, notify::COOKIE) {
            // A new cookie is followed a few times; a responder that never accepts one
            // must not keep us sending at its pace.
            if self.cookie.as_ref() != Some(&n.data) && self.cookie_tries < 3 {
                self.cookie_tries += 1;
                self.cookie = Some(n.data.clone());
                self.send_init(ctx, false);
            } else {
                self.die(ctx, "peer keeps refusing our cookie", false);
            }
            return;
        }
        if let Some(n) = find_notify(p, notify::INVALID_KE_PAYLOAD) {
            let g = n
                .data
                .get(..2)
                .and_then(|b| crate::DhGroup::from_id(u16::from_be_bytes([b[0], b[1]])));
            match g {
                Some(g) if g != self.group && ctx.cfg.ike_proposals.iter().any(|x| x.dh == g) => {
                    self.group = g;
                    self.send_init(ctx, true);
                }
                _ => self.die(ctx, "peer asked for a DH group we do not offer", false),
            }
            return;
        }
        if let Some(e) = error_notify(p) {
            if e == notify::NO_PROPOSAL_CHOSEN {
                ctx.c.no_proposal += 1;
            }
            self.die(ctx, &format!("IKE_SA_INIT refused: notify {e}"), false);
            return;
        }
        let chosen = p.iter().find_map(|x| {
            if let Payload::Sa(s) = x {
                s.first()
            } else {
                None
            }
        });
        let suite = chosen
            .and_then(ike_from_chosen)
            .filter(|s| ctx.cfg.ike_proposals.contains(s) && s.dh == self.group);
        let ke = p.iter().find_map(|x| {
            if let Payload::Ke { group, data } = x {
                Some((*group, data))
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
        let (Some(suite), Some((_, ke)), Some(nr), Some(dh)) = (suite, ke, nr, &self.dh) else {
            ctx.c.invalid_malformed += 1;
            self.die(ctx, "malformed IKE_SA_INIT response", false);
            return;
        };
        let Some(gir) = dh.shared(ke) else {
            self.die(ctx, "invalid KE from peer", false);
            return;
        };
        self.spi_r = h.spi_r;
        self.nr = nr.clone();
        self.init_theirs = msg.to_vec();
        self.nat = self.detect_nat(p, self.local, self.remote);
        let seed = crypto::skeyseed(&self.ni, &self.nr, &gir);
        self.keys = Some(IkeKeys::derive(
            suite,
            &seed[..],
            &self.ni,
            &self.nr,
            self.spi_i,
            self.spi_r,
        ));
        self.dh = None;
        if self.nat {
            // RFC 7296 2.23: float to port 4500 from IKE_AUTH on.
            self.local.set_port(4500);
            self.remote.set_port(4500);
        }
        self.send_auth(ctx);
    }

    fn auth_value(&self, cfg: &ConnConfig, from_initiator: bool, id: &Id) -> Option<Vec<u8>> {
        let k = self.keys.as_ref()?;
        // The signer's own IKE_SA_INIT message, the other side's nonce, its own SK_p.
        let (msg, nonce, skp) = match (from_initiator, self.initiator) {
            (true, true) => (&self.init_ours, &self.nr, &k.sk_pi),
            (true, false) => (&self.init_theirs, &self.nr, &k.sk_pi),
            (false, true) => (&self.init_theirs, &self.ni, &k.sk_pr),
            (false, false) => (&self.init_ours, &self.ni, &k.sk_pr),
        };
        Some(
            crypto::psk_auth(
                cfg.psk.bytes(),
                skp.bytes(),
                msg,
                nonce,
                &Payload::id_body(id),
            )
            .to_vec(),
        )
    }

    fn send_auth(&mut self, ctx: &mut Ctx<'_>) {
        let id = id_payload(&ctx.cfg.local_id);
        let Some(auth) = self.auth_value(ctx.cfg, true, &id) else {
            return;
        };
        let spi_in = ctx.spi32();
        let mut p = vec![
            Payload::IdI(id),
            Payload::notify(notify::INITIAL_CONTACT, Vec::new()),
        ];
        p.push(Payload::IdR(id_payload(&ctx.cfg.remote_id)));
        p.push(Payload::Auth {
            method: 2,
            data: auth,
        });
        p.extend(self.child_offer(ctx, spi_in, None));
        self.send_request(ctx, exchange::IKE_AUTH, &p, OutKind::Auth { spi_in });
        self.phase = Phase::AuthSent;
    }

    fn check_auth(&self, ctx: &mut Ctx<'_>, p: &[Payload], from_initiator: bool) -> bool {
        let id = p.iter().find_map(|x| match x {
            Payload::IdI(i) if from_initiator => Some(i),
            Payload::IdR(i) if !from_initiator => Some(i),
            _ => None,
        });
        let auth = p.iter().find_map(|x| {
            if let Payload::Auth { method: 2, data } = x {
                Some(data)
            } else {
                None
            }
        });
        let ok = match (id, auth) {
            (Some(id), Some(a)) => {
                *id == id_payload(&ctx.cfg.remote_id)
                    && self
                        .auth_value(ctx.cfg, from_initiator, id)
                        .is_some_and(|w| crypto::ct_eq(&w, a))
            }
            _ => false,
        };
        if !ok {
            ctx.c.auth_failures += 1;
        }
        ok
    }

    pub(super) fn respond_auth(&mut self, ctx: &mut Ctx<'_>, h: Header, msg: &[u8], p: &[Payload]) {
        if !self.check_auth(ctx, p, true) {
            self.send_response(
                ctx,
                exchange::IKE_AUTH,
                h.msg_id,
                msg,
                &[Payload::notify(notify::AUTHENTICATION_FAILED, Vec::new())],
            );
            self.die(ctx, "peer failed authentication", true);
            return;
        }
        let id = id_payload(&ctx.cfg.local_id);
        let Some(auth) = self.auth_value(ctx.cfg, false, &id) else {
            return;
        };
        let mut resp = vec![
            Payload::IdR(id),
            Payload::Auth {
                method: 2,
                data: auth,
            },
        ];
        let (ni, nr) = (self.ni.clone(), self.nr.clone());
        let child = self.accept_child(ctx, p, &ni, &nr, None, None);
        match child {
            Ok((payloads, ch)) => {
                ctx.initial_contact = find_notify(p, notify::INITIAL_CONTACT).is_some();
                resp.extend(payloads);
                self.establish(ctx);
                self.send_response(ctx, exchange::IKE_AUTH, h.msg_id, msg, &resp);
                self.install(ctx, ch, None, true);
            }
            Err(e) => {
                resp.push(Payload::notify(e, Vec::new()));
                self.establish(ctx);
                self.send_response(ctx, exchange::IKE_AUTH, h.msg_id, msg, &resp);
            }
        }
    }

    pub(super) fn on_auth_response(&mut self, ctx: &mut Ctx<'_>, p: &[Payload], spi_in: u32) {
        if find_notify(p, notify::AUTHENTICATION_FAILED).is_some() {
            ctx.c.auth_failures += 1;
            self.die(
                ctx,
                "peer refused our authentication (AUTHENTICATION_FAILED)",
                false,
            );
            return;
        }
        if !self.check_auth(ctx, p, false) {
            self.die(ctx, "peer failed authentication", false);
            return;
        }
        self.establish(ctx);
        let (ni, nr) = (self.ni.clone(), self.nr.clone());
        match self.child_from_response(ctx, p, spi_in, &ni, &nr, None) {
            Some(ch) => self.install(ctx, ch, None, true),
            None => tracing::warn!(conn = %self.name, "IKE SA up without its child SA"),
        }
    }

    /// The IKE SA is authenticated: announce it, arm its rekey timer.
    pub(crate) fn establish(&mut self, ctx: &mut Ctx<'_>) {
        self.phase = Phase::Established;
        self.init_ours = Vec::new();
        self.init_theirs = Vec::new();
        self.rekey_at = ctx.deadline(ctx.cfg.ike_rekey);
        ctx.c.ike_up += 1;
        self.announced = true;
        ctx.events.push_back(Event::IkeUp {
            conn: self.name.clone(),
            remote: self.remote,
        });
    }
}
