//! Sends what a batch's services emitted ([`relay_core::Outbox`]) after the batch's
//! verdicts, and counts what became of each packet in the tally it was emitted with.
//!
//! Packets passing through ([`Route::Forward`]) addressed to one of the box's own
//! addresses are refused here (a raw socket would deliver them locally, as if they came
//! from `lo`): that check needs the kernel's address list, so it is the datapath's, not
//! the service's.

use relay_core::ratelimit::RateLimit;
use relay_core::{Outbox, Route};
use relay_inject::{LocalAddrs, RawSender};
use std::time::Instant;

/// The sockets and address snapshot of one queue thread's outbox.
#[derive(Debug)]
pub(crate) struct Emitter {
    raw: RawSender,
    icmpv6: RawSender,
    local: LocalAddrs,
    log: RateLimit,
}

impl Emitter {
    pub(crate) fn new() -> Emitter {
        Emitter {
            raw: RawSender::forwarding(),
            icmpv6: RawSender::with_icmpv6(),
            local: LocalAddrs::new(),
            log: RateLimit::new(1),
        }
    }

    /// Sends everything in `outbox` and empties it.
    pub(crate) fn flush(&mut self, outbox: &mut Outbox, queue: u16, now: Instant) {
        for i in 0..outbox.len() {
            let Some((p, tally)) = outbox.get(i) else {
                break;
            };
            if p.route == Route::Forward && self.local.contains(p.destination, now) {
                tally.local_destination();
                continue;
            }
            let raw = match p.route {
                Route::Icmpv6 => &mut self.icmpv6,
                Route::Originate | Route::Forward => &mut self.raw,
            };
            match raw.send(p.bytes, p.destination, p.mark) {
                Ok(()) => tally.sent(),
                Err(e) if e.is_queue_full() => tally.queue_full(),
                Err(e) => {
                    tally.failed();
                    if let Some(suppressed) = self.log.allow(now) {
                        tracing::warn!(
                            queue,
                            suppressed,
                            "sending a packet a service emitted: {e}"
                        );
                    }
                }
            }
        }
        outbox.clear();
    }
}
