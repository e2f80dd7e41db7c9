//! INFORMATIONAL exchanges (RFC 7296 1.4, 2.4): deleting child and IKE SAs, and the empty
//! request that checks the peer is alive.

use super::ike::{Ctx, IkeSa, OutKind};
use crate::types::Event;
use crate::wire::{Header, Payload, exchange, proto};

impl IkeSa {
    pub(crate) fn start_delete_child(&mut self, ctx: &mut Ctx<'_>, spi_in: u32) {
        if !self.children.iter().any(|c| c.spi_in == spi_in) {
            return;
        }
        let p = [Payload::Delete {
            proto: proto::ESP,
            spis: vec![spi_in],
        }];
        self.send_request(
            ctx,
            exchange::INFORMATIONAL,
            &p,
            OutKind::DeleteChild(vec![spi_in]),
        );
    }

    pub(crate) fn start_delete_ike(&mut self, ctx: &mut Ctx<'_>) {
        let p = [Payload::Delete {
            proto: proto::IKE,
            spis: Vec::new(),
        }];
        self.send_request(ctx, exchange::INFORMATIONAL, &p, OutKind::DeleteIke);
    }

    /// Removes child SAs by inbound SPI, with their `ChildDown` events.
    pub(crate) fn remove_children(&mut self, ctx: &mut Ctx<'_>, spis_in: &[u32]) {
        let name = self.name.clone();
        for c in &mut self.children {
            if c.outbound_after.is_some_and(|old| spis_in.contains(&old)) {
                c.outbound_after = None;
                ctx.events.push_back(Event::ChildOutbound {
                    conn: name.clone(),
                    spi_in: c.spi_in,
                    spi_out: c.spi_out,
                });
            }
        }
        self.children.retain(|c| {
            let gone = spis_in.contains(&c.spi_in);
            if gone {
                ctx.events.push_back(Event::ChildDown {
                    conn: name.clone(),
                    spi_in: c.spi_in,
                    spi_out: c.spi_out,
                });
            }
            !gone
        });
    }

    pub(super) fn on_delete_child_response(&mut self, ctx: &mut Ctx<'_>, spis: &[u32]) {
        // Whatever the peer answers, our SAs are gone (RFC 7296 1.4.1).
        self.remove_children(ctx, spis);
    }

    pub(super) fn respond_informational(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: Header,
        msg: &[u8],
        p: &[Payload],
    ) {
        let mut ours = Vec::new();
        let mut delete_ike = false;
        for x in p {
            match x {
                Payload::Delete {
                    proto: proto::IKE, ..
                } => delete_ike = true,
                Payload::Delete {
                    proto: proto::ESP,
                    spis,
                } => {
                    // The peer names its inbound SPIs: our outbound ones.
                    for s in spis {
                        if let Some(c) = self.children.iter().find(|c| c.spi_out == *s) {
                            ours.push(c.spi_in);
                        }
                    }
                }
                _ => {}
            }
        }
        if delete_ike {
            self.send_response(ctx, exchange::INFORMATIONAL, h.msg_id, msg, &[]);
            let silent = self.rekeyed;
            self.die(ctx, "deleted by peer", silent);
            return;
        }
        // If we were deleting the same SAs ourselves, answering with their SPIs is right too.
        let resp: Vec<Payload> = if ours.is_empty() {
            Vec::new()
        } else {
            vec![Payload::Delete {
                proto: proto::ESP,
                spis: ours.clone(),
            }]
        };
        self.send_response(ctx, exchange::INFORMATIONAL, h.msg_id, msg, &resp);
        self.remove_children(ctx, &ours);
    }
}
