//! A chain: the services of one queue, run in configured order on each packet
//! (the configuration's order is the priority; a drop ends the chain).

use crate::counters::{Counter, QueueCounters};
use crate::hook::{Hook, StageMark};
use crate::offload::Offload;
use crate::packet::{IpVersion, Packet};
use crate::ratelimit::RateLimit;
use crate::service::{Action, Context, Service};
use std::time::Instant;

/// The kernel verdict a chain reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the packet continue (NF_ACCEPT).
    Accept,
    /// Drop it (NF_DROP).
    Drop,
    /// Run the hook again (NF_REPEAT), with a mark.
    Repeat,
}

/// The chain's answer for one packet: verdict, mark to set, and whether the packet's
/// bytes go back to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// The nfmark to set, if any.
    pub mark: Option<u32>,
    /// True if the verdict carries the packet's (modified) bytes.
    pub payload: bool,
    /// Set when a service held the packet ([`Action::Hold`]): the verdict (accept, with
    /// `mark` and `payload`) is due then, not now.
    pub hold: Option<Instant>,
    /// Set when every service of the chain voted to offload the packet's flow
    /// ([`Context::offload`]) and the verdict is an accept: the combined vote
    /// ([`Offload::and`]). Never set with a hold, a drop or a repeat.
    pub offload: Option<Offload>,
}

impl Decision {
    /// Accept unmodified, mark unchanged.
    pub const ACCEPT: Decision = Decision {
        verdict: Verdict::Accept,
        mark: None,
        payload: false,
        hold: None,
        offload: None,
    };
    /// Drop.
    pub const DROP: Decision = Decision {
        verdict: Verdict::Drop,
        mark: None,
        payload: false,
        hold: None,
        offload: None,
    };
}

/// Queue-wide settings a chain applies.
#[derive(Debug, Clone, Copy)]
pub struct ChainSettings {
    /// What happens to a packet that cannot be parsed.
    pub malformed: Verdict,
    /// The hook the queue's rule hangs from: a repeat verdict's mark, and packets services
    /// send themselves, carry its stage bits.
    pub hook: Hook,
    /// Where the stage bits sit in the mark.
    pub stages: StageMark,
}

impl ChainSettings {
    /// The stage bits a packet this queue repeats carries.
    pub fn stage_bits(&self) -> u32 {
        self.stages.for_hook(self.hook)
    }

    /// The stage bits a packet this queue's services send from a socket carries
    /// ([`StageMark::for_send`]).
    pub fn send_bits(&self) -> u32 {
        self.stages.for_send(self.hook)
    }
}

struct Entry {
    name: String,
    service: Box<dyn Service>,
    packets: Counter,
}

/// The services of one queue thread, in order.
pub struct Chain {
    entries: Vec<Entry>,
    settings: ChainSettings,
    log_limit: RateLimit,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
        f.debug_struct("Chain")
            .field("services", &names)
            .field("settings", &self.settings)
            .finish()
    }
}

impl Chain {
    /// An empty chain (accepts everything it is given).
    pub fn new(settings: ChainSettings) -> Chain {
        Chain {
            entries: Vec::new(),
            settings,
            log_limit: RateLimit::new(10),
        }
    }

    /// Appends a service; `packets` counts the packets it sees.
    pub fn push(&mut self, name: &str, service: Box<dyn Service>, packets: Counter) {
        self.entries.push(Entry {
            name: name.to_string(),
            service,
            packets,
        });
    }

    /// The stage bits packets this queue's services send from a socket carry
    /// ([`ChainSettings::send_bits`]); the datapath hands them over in
    /// [`Context::bypass_mark`].
    pub fn bypass_mark(&self) -> u32 {
        self.settings.send_bits()
    }

    /// Where the stage bits sit in the mark.
    pub fn stages(&self) -> StageMark {
        self.settings.stages
    }

    /// The verdict given to packets that cannot be parsed (also used when a service fails).
    pub fn malformed_verdict(&self) -> Verdict {
        self.settings.malformed
    }

    /// The service names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// Runs the chain on one packet and counts the outcome in `q`.
    pub fn run(&mut self, pkt: &mut Packet, cx: &mut Context, q: &QueueCounters) -> Decision {
        q.packets.inc();
        if let Err(why) = pkt.layout() {
            q.malformed.inc();
            if let Some(suppressed) = self.log_limit.allow(cx.now) {
                tracing::warn!(
                    queue = cx.queue,
                    reason = why.as_str(),
                    len = pkt.len(),
                    suppressed,
                    "malformed packet, verdict {:?} by policy",
                    self.settings.malformed
                );
            }
            return self.count(q, self.settings.malformed, None, false);
        }
        // The combined offload vote, and how many services voted: a flow leaves the queue
        // only when every service saw the packet and voted.
        let (mut vote, mut voters) = (None::<Offload>, 0);
        for e in &mut self.entries {
            e.packets.inc();
            let action = e.service.process(pkt, cx);
            if let Some(v) = cx.take_vote() {
                vote = Some(vote.map_or(v, |c| c.and(v)));
                voters += 1;
            }
            match action {
                Action::Continue => {}
                Action::Accept => break,
                Action::Drop => return self.count(q, Verdict::Drop, None, false),
                Action::Repeat { mark } => {
                    let mark = Some(self.settings.stages.with(mark, self.settings.stage_bits()));
                    let Some(payload) = self.payload(pkt, cx, q) else {
                        return self.count(q, Verdict::Drop, None, false);
                    };
                    return self.count(q, Verdict::Repeat, mark, payload);
                }
                Action::Hold { until } => {
                    // Counted as accepted (or dropped, by overflow policy) by the datapath
                    // when the verdict is given.
                    let Some(payload) = self.payload(pkt, cx, q) else {
                        return self.count(q, Verdict::Drop, None, false);
                    };
                    q.held.inc();
                    if payload {
                        q.modified.inc();
                    }
                    return Decision {
                        verdict: Verdict::Accept,
                        mark: self.verdict_mark(pkt),
                        payload,
                        hold: Some(until),
                        offload: None,
                    };
                }
            }
        }
        let Some(payload) = self.payload(pkt, cx, q) else {
            return self.count(q, Verdict::Drop, None, false);
        };
        let mut d = self.count(q, Verdict::Accept, self.verdict_mark(pkt), payload);
        d.offload = vote.filter(|_| voters == self.entries.len());
        d
    }

    /// The mark a service set, keeping the stage bits the packet came with: a service
    /// that sets a mark must not make relayd queue a packet again at a hook it has crossed.
    fn verdict_mark(&self, pkt: &Packet) -> Option<u32> {
        pkt.verdict_mark()
            .map(|m| self.settings.stages.with(m, pkt.meta.mark))
    }

    /// Whether the verdict carries the packet's bytes: only if modified, and never for a
    /// partial copy. `None` if the packet cannot leave at all: a service made it a packet
    /// the verdict cannot carry (another address family, or not IP), and the original
    /// bytes are gone; counted as an error and dropped rather than handed to the kernel.
    fn payload(&mut self, pkt: &Packet, cx: &Context, q: &QueueCounters) -> Option<bool> {
        let payload = pkt.is_modified();
        if payload && !IpVersion::of(pkt.data()).is_some_and(|v| pkt.meta.verdict_carries(v)) {
            q.errors.inc();
            if let Some(suppressed) = self.log_limit.allow(cx.now) {
                tracing::warn!(
                    queue = cx.queue,
                    suppressed,
                    "a service made a packet its verdict cannot carry (another address \
                     family, or not IP); dropped: send such packets with \
                     Context::emit"
                );
            }
            return None;
        }
        if payload && pkt.is_partial() {
            // The kernel gave us only part of the packet: sending it back would cut the
            // packet short. Keep the original instead and say so.
            q.errors.inc();
            if let Some(suppressed) = self.log_limit.allow(cx.now) {
                tracing::warn!(
                    queue = cx.queue,
                    suppressed,
                    "a service modified a partially copied packet; raise copy_range; original kept"
                );
            }
            return Some(false);
        }
        Some(payload)
    }

    fn count(
        &self,
        q: &QueueCounters,
        verdict: Verdict,
        mark: Option<u32>,
        payload: bool,
    ) -> Decision {
        match verdict {
            Verdict::Accept => q.accepted.inc(),
            Verdict::Drop => q.dropped.inc(),
            Verdict::Repeat => q.repeated.inc(),
        }
        if payload {
            q.modified.inc();
        }
        Decision {
            verdict,
            mark,
            payload,
            hold: None,
            offload: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::tests::udp4;
    use std::time::Duration;

    struct Fixed(Action, Option<u32>);
    impl Service for Fixed {
        fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
            if let Some(m) = self.1 {
                pkt.set_mark(m);
            }
            self.0
        }
    }

    #[test]
    fn hold_ends_the_chain_with_a_deferred_accept() {
        let now = Instant::now();
        let until = now + Duration::from_millis(40);
        let mut chain = Chain::new(ChainSettings {
            malformed: Verdict::Drop,
            hook: Hook::Forward,
            stages: StageMark::DEFAULT,
        });
        let later = Counter::new();
        chain.push(
            "delay",
            Box::new(Fixed(Action::Hold { until }, Some(7))),
            Counter::new(),
        );
        chain.push("drop", Box::new(Fixed(Action::Drop, None)), later.clone());
        let q = QueueCounters::default();
        let mut pkt = Packet::from_bytes(&udp4(b"x"));
        let d = chain.run(&mut pkt, &mut Context::new(0, now), &q);
        assert_eq!(
            d,
            Decision {
                verdict: Verdict::Accept,
                mark: Some(7),
                payload: false,
                hold: Some(until),
                offload: None,
            }
        );
        assert_eq!(later.get(), 0, "a hold ends the chain");
        assert_eq!((q.held.get(), q.accepted.get(), q.dropped.get()), (1, 0, 0));
    }

    #[test]
    fn repeats_carry_the_hooks_stage_and_marks_keep_the_incoming_one() {
        let q = QueueCounters::default();
        let mut cx = Context::new(0, Instant::now());
        let settings = |hook| ChainSettings {
            malformed: Verdict::Drop,
            hook,
            stages: StageMark::DEFAULT,
        };
        // A repeat at PREROUTING gets stage 1 (bit 30), replacing any stage bits in the
        // service's mark; at POSTROUTING stage 3.
        for (hook, want) in [
            (Hook::Prerouting, 0x4000_0005),
            (Hook::Forward, 0x8000_0005),
            (Hook::Postrouting, 0xc000_0005),
        ] {
            let mut chain = Chain::new(settings(hook));
            chain.push(
                "m",
                Box::new(Fixed(Action::Repeat { mark: 0xc000_0005 }, None)),
                Counter::new(),
            );
            let mut pkt = Packet::from_bytes(&udp4(b"x"));
            assert_eq!(chain.run(&mut pkt, &mut cx, &q).mark, Some(want), "{hook}");
        }
        // A packet a PREROUTING queue sent (stage 1) keeps its stage when a later queue's
        // service sets a mark, so no relayd rule at a hook it crossed queues it again.
        let mut chain = Chain::new(settings(Hook::Forward));
        chain.push(
            "m",
            Box::new(Fixed(Action::Continue, Some(7))),
            Counter::new(),
        );
        let mut pkt = Packet::from_bytes(&udp4(b"x"));
        pkt.meta.mark = 0x4000_0000;
        assert_eq!(chain.run(&mut pkt, &mut cx, &q).mark, Some(0x4000_0007));
    }

    /// Votes `vote` on every packet and answers `action`.
    struct Voter(Option<Offload>, Action);
    impl Service for Voter {
        fn process(&mut self, _pkt: &mut Packet, cx: &mut Context) -> Action {
            if let Some(v) = self.0 {
                cx.offload(v);
            }
            self.1
        }
    }

    #[test]
    fn a_flow_is_offloaded_only_when_every_service_votes_on_an_accepted_packet() {
        use crate::offload::OffloadReason::{Decided, StreamDepth};
        let settings = ChainSettings {
            malformed: Verdict::Drop,
            hook: Hook::Forward,
            stages: StageMark::DEFAULT,
        };
        let both = Some(Offload::both(Decided));
        let depth = Some(Offload::direction(StreamDepth));
        let cont = Action::Continue;
        for (services, want) in [
            (vec![(both, cont)], both),
            (vec![(both, cont), (depth, cont)], depth),
            // One service that says nothing keeps the flow inline.
            (vec![(both, cont), (None, cont)], None),
            (vec![(None, cont), (both, cont)], None),
            // A service the packet never reached did not vote.
            (vec![(both, Action::Accept), (both, cont)], None),
            // Never with a drop, a repeat or a hold.
            (vec![(both, Action::Drop)], None),
            (vec![(both, Action::Repeat { mark: 1 })], None),
            (
                vec![(
                    both,
                    Action::Hold {
                        until: Instant::now() + Duration::from_secs(1),
                    },
                )],
                None,
            ),
        ] {
            let mut chain = Chain::new(settings);
            for (vote, action) in &services {
                chain.push("v", Box::new(Voter(*vote, *action)), Counter::new());
            }
            let mut cx = Context::new(0, Instant::now());
            let mut pkt = Packet::from_bytes(&udp4(b"x"));
            let d = chain.run(&mut pkt, &mut cx, &QueueCounters::default());
            assert_eq!(d.offload, want, "{services:?}");
            // A vote never outlives its packet.
            let mut next = Packet::from_bytes(&udp4(b"y"));
            let mut quiet = Chain::new(settings);
            quiet.push("q", Box::new(Voter(None, cont)), Counter::new());
            let d = quiet.run(&mut next, &mut cx, &QueueCounters::default());
            assert_eq!(d.offload, None);
        }
    }

    /// Turns the packet into a 40-byte IPv6 header.
    struct ToV6;
    impl Service for ToV6 {
        fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
            pkt.resize(40);
            let d = pkt.data_mut();
            d.fill(0);
            d[0] = 0x60;
            d[6] = 59;
            d[7] = 64;
            Action::Continue
        }
    }

    #[test]
    fn a_packet_of_the_wrong_family_is_dropped_not_handed_to_the_kernel() {
        let settings = ChainSettings {
            malformed: Verdict::Accept,
            hook: Hook::Forward,
            stages: StageMark::DEFAULT,
        };
        let mut cx = Context::new(0, Instant::now());
        for (hw_protocol, verdict, errors) in [
            (0x0800, Verdict::Drop, 1),
            (0x86dd, Verdict::Accept, 0),
            (0, Verdict::Accept, 0),
        ] {
            let mut chain = Chain::new(settings);
            chain.push("six", Box::new(ToV6), Counter::new());
            let q = QueueCounters::default();
            let mut pkt = Packet::from_bytes(&udp4(b"x"));
            pkt.meta.hw_protocol = hw_protocol;
            let d = chain.run(&mut pkt, &mut cx, &q);
            assert_eq!(d.verdict, verdict, "hook {hw_protocol:#x}");
            assert_eq!(d.payload, verdict == Verdict::Accept);
            assert_eq!(q.errors.get(), errors);
            assert_eq!(q.dropped.get(), errors);
        }
    }
}
