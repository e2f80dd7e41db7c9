//! `delay`: holds every packet for a configured time, with optional uniform jitter and
//! random loss, then accepts it: a netem-like delay line for testbeds whose kernel has no
//! netem, and for lab work.
//!
//! The packet is held by the datapath ([`Action::Hold`]), not copied by this service, and
//! never rewritten, so its queue keeps GSO on and copies only headers: a GSO super-packet
//! is delayed as one. A hold ends the chain: put `delay` last.
//!
//! ```toml
//! [service.wan]
//! kind = "delay"
//! delay = "40ms"      # a duration: "1.5ms", "250us", "1s" (delay_ms was removed)
//! jitter = "5ms"      # optional: uniform in [-5ms, +5ms]
//! reorder = false     # with jitter, keep each flow's packets in order (default)
//! loss = 0.01         # optional: drop 1 % at random
//! limit = 1000        # the most packets held at once (the queue drops beyond it)
//! ```
//!
//! With jitter, a packet could be due before one sent earlier. Unless `reorder = true`, a
//! packet is never due before the previous one of its flow (5-tuple, hashed into a fixed
//! table; two flows sharing a slot keep each other's order too), as on a real path. With
//! `reorder = true` each packet takes its own jittered delay, as netem does.

pub use relay_core::units::parse_duration;

use relay_core::manifest::HEADER_BYTES;
use relay_core::wire::proto;
use relay_core::{
    Action, Context, Counter, Counters, Manifest, Packet, Resources, Service, ServiceConfig,
    ServiceFactory,
};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Configuration of `delay`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelayConfig {
    /// The delay, e.g. `"40ms"`, `"1.5ms"`, `"250us"`, `"1s"`.
    #[serde(default)]
    pub delay: Option<String>,
    /// `delay_ms`, the delay's former second name: refused, with the `delay` to write
    /// instead, so that an old file fails with a message that says how to fix it rather
    /// than "unknown field".
    #[serde(default)]
    delay_ms: Option<RemovedDelayMs>,
    /// Uniform jitter: each packet's delay is in `[delay - jitter, delay + jitter]`.
    #[serde(default)]
    pub jitter: Option<String>,
    /// With jitter, let packets of a flow overtake each other (default: keep flow order).
    #[serde(default)]
    pub reorder: bool,
    /// Probability in [0, 1) that a packet is dropped instead of delayed.
    #[serde(default)]
    pub loss: f64,
    /// The most packets held at once (default 1000, as netem).
    #[serde(default = "default_limit")]
    pub limit: u32,
    /// Seed of the random generator (jitter, loss), for repeatable runs; default: the clock.
    #[serde(default)]
    pub seed: Option<u64>,
}

fn default_limit() -> u32 {
    1000
}

/// The value of a removed `delay_ms` key: a number to quote in the error, or anything else.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum RemovedDelayMs {
    Number(f64),
    Other(IgnoredAny),
}

impl RemovedDelayMs {
    /// The error for a file that still has `delay_ms`, naming what to write instead.
    fn error(self) -> String {
        let ms = match self {
            RemovedDelayMs::Number(ms) if ms.is_finite() && ms >= 0.0 => ms,
            _ => 40.0,
        };
        format!("delay_ms was removed: write delay = \"{ms}ms\"")
    }
}

/// The largest delay accepted: held packets sit in the kernel's queue meanwhile.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// Flow slots for keeping order under jitter.
const FLOW_SLOTS: usize = 4096;

impl ServiceConfig for DelayConfig {
    const KIND: &'static str = "delay";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if let Some(old) = self.delay_ms {
            return Err(old.error().into());
        }
        let delay = match &self.delay {
            Some(d) => parse_duration(d).map_err(|e| format!("delay: {e}"))?,
            None => return Err("missing delay (e.g. delay = \"40ms\")".into()),
        };
        if delay > MAX_DELAY {
            return Err(format!("delay {delay:?} is over the limit of {MAX_DELAY:?}").into());
        }
        let jitter = match &self.jitter {
            Some(j) => parse_duration(j).map_err(|e| format!("jitter: {e}"))?,
            None => Duration::ZERO,
        };
        if jitter > delay {
            return Err(format!(
                "jitter {jitter:?} is larger than the delay {delay:?}: a packet cannot leave \
                 before it came"
            )
            .into());
        }
        if !(0.0..1.0).contains(&self.loss) {
            return Err(format!("loss = {} must be in [0, 1)", self.loss).into());
        }
        if !(1..=1_000_000).contains(&self.limit) {
            return Err(format!("limit = {} must be 1-1000000", self.limit).into());
        }
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
        Ok(Arc::new(Factory {
            delay,
            jitter,
            reorder: self.reorder,
            loss: self.loss,
            seed,
            instances: AtomicU64::new(0),
            manifest: Manifest {
                // Headers for the flow of a packet; the bytes themselves stay in the kernel.
                needs_bytes: Some(HEADER_BYTES),
                max_held: self.limit,
                ..Manifest::new()
            },
        }))
    }
}

struct Factory {
    delay: Duration,
    jitter: Duration,
    reorder: bool,
    loss: f64,
    seed: u64,
    instances: AtomicU64,
    manifest: Manifest,
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        "delay"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, _res: &Resources) -> Box<dyn Service> {
        // Each queue thread gets its own random sequence.
        let n = self.instances.fetch_add(1, Ordering::Relaxed);
        let keep_order = !self.reorder && !self.jitter.is_zero();
        Box::new(Delay {
            delay: self.delay,
            jitter: self.jitter,
            loss: (self.loss * u64::MAX as f64) as u64,
            rng: Rng::new(self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            last: if keep_order {
                vec![None; FLOW_SLOTS].into_boxed_slice()
            } else {
                Box::new([])
            },
            delayed: counters.counter("delayed"),
            lost: counters.counter("lost"),
            order_kept: counters.counter("order_kept"),
        })
    }
}

struct Delay {
    delay: Duration,
    jitter: Duration,
    /// Loss probability scaled to u64.
    loss: u64,
    rng: Rng,
    /// Per flow slot, the deadline of the flow's latest packet (empty: order not kept).
    last: Box<[Option<Instant>]>,
    delayed: Counter,
    lost: Counter,
    order_kept: Counter,
}

impl Service for Delay {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        if self.loss > 0 && self.rng.next() < self.loss {
            self.lost.inc();
            return Action::Drop;
        }
        let mut until = cx.now + self.delay;
        if !self.jitter.is_zero() {
            // Uniform in [-jitter, +jitter].
            let j = self.jitter.as_nanos() as u64;
            let r = self.rng.next() % (2 * j + 1);
            until = if r >= j {
                until + Duration::from_nanos(r - j)
            } else {
                until - Duration::from_nanos(j - r)
            };
        }
        if !self.last.is_empty() {
            let slot = &mut self.last[flow_hash(pkt) as usize % FLOW_SLOTS];
            if let Some(prev) = *slot
                && prev > until
            {
                until = prev;
                self.order_kept.inc();
            }
            *slot = Some(until);
        }
        self.delayed.inc();
        Action::Hold { until }
    }
}

/// A hash of the packet's addresses, protocol and ports (FNV-1a); 0 for what cannot be
/// parsed (all such packets then share one flow).
fn flow_hash(pkt: &mut Packet) -> u64 {
    let Some(t) = pkt.five_tuple() else { return 0 };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    for a in [t.src, t.dst] {
        match a {
            IpAddr::V4(a) => mix(&a.octets()),
            IpAddr::V6(a) => mix(&a.octets()),
        }
    }
    mix(&[t.proto]);
    // TCP and UDP ports only, as the hash always had (SCTP and UDP-Lite flows of one
    // address pair keep sharing a hash).
    if let Some((s, d)) = t
        .ports
        .filter(|_| matches!(t.proto, proto::TCP | proto::UDP))
    {
        mix(&s.to_be_bytes());
        mix(&d.to_be_bytes());
    }
    h
}

/// xorshift64*: small, fast, good enough for jitter and loss; not for anything secret.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(toml_text: &str) -> (Box<dyn Service>, Counters, Arc<dyn ServiceFactory>) {
        let cfg: DelayConfig = toml::from_str(toml_text).unwrap();
        let f = cfg.into_factory("d").unwrap();
        let counters = Counters::new();
        (
            f.build(&counters, &relay_core::Resources::new()),
            counters,
            f,
        )
    }

    fn count(c: &Counters, name: &str) -> u64 {
        c.snapshot().into_iter().find(|x| x.0 == name).unwrap().2
    }

    /// A UDP/IPv4 packet from port `sport` to 10.0.2.2:5000.
    fn udp(sport: u16) -> Packet {
        let mut b = vec![
            0x45, 0, 0, 29, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
        ];
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&5000u16.to_be_bytes());
        b.extend_from_slice(&[0, 9, 0, 0, b'x']);
        Packet::from_bytes(&b)
    }

    fn until(a: Action) -> Instant {
        match a {
            Action::Hold { until } => until,
            other => panic!("not a hold: {other:?}"),
        }
    }

    #[test]
    fn holds_for_the_delay_and_rewrites_nothing() {
        let (mut s, c, f) = build("delay = \"40ms\"\nlimit = 10");
        assert_eq!(
            (f.manifest().max_held, f.manifest().rewrites_payload),
            (10, false)
        );
        assert_eq!(f.manifest().needs_bytes, Some(HEADER_BYTES));
        let now = Instant::now();
        let mut p = udp(1);
        let t = until(s.process(&mut p, &mut Context::new(0, now)));
        assert_eq!(t - now, Duration::from_millis(40));
        assert!(!p.is_modified() && p.verdict_mark().is_none());
        assert_eq!(count(&c, "delayed"), 1);
        let (mut s, _, _) = build("delay = \"2.5ms\"");
        let t = until(s.process(&mut udp(1), &mut Context::new(0, now)));
        assert_eq!(t - now, Duration::from_micros(2500));
    }

    #[test]
    fn jitter_stays_in_band_and_keeps_flow_order() {
        let (mut s, c, _) = build("delay = \"10ms\"\njitter = \"5ms\"\nseed = 7");
        let t0 = Instant::now();
        let mut prev = [t0; 2];
        let mut hi = Duration::ZERO;
        for i in 0..2000u64 {
            let now = t0 + Duration::from_micros(i * 10);
            let flow = (i % 2) as usize;
            let t = until(s.process(&mut udp(1000 + flow as u16), &mut Context::new(0, now)));
            assert!(t >= prev[flow], "packet {i} overtook its flow");
            prev[flow] = t;
            let d = t - now;
            // Raised at most to the flow's previous deadline, itself within the band.
            assert!(d >= Duration::from_millis(5), "{d:?}");
            hi = hi.max(d);
        }
        assert!(hi <= Duration::from_millis(15), "{hi:?}");
        assert!(count(&c, "order_kept") > 0);
        // Packets far enough apart never wait for each other: the whole band shows.
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for i in 0..2000u64 {
            let now = t0 + Duration::from_millis(20 * (i + 1));
            let d = until(s.process(&mut udp(1000), &mut Context::new(0, now))) - now;
            lo = lo.min(d);
            hi = hi.max(d);
        }
        assert!(lo < Duration::from_micros(5100) && lo >= Duration::from_millis(5));
        assert!(hi > Duration::from_micros(14900) && hi <= Duration::from_millis(15));
    }

    #[test]
    fn reorder_lets_jitter_reorder() {
        let (mut s, c, _) = build("delay = \"10ms\"\njitter = \"5ms\"\nreorder = true\nseed = 3");
        let t0 = Instant::now();
        let mut overtaken = 0;
        let mut prev = t0;
        for i in 0..1000u64 {
            let now = t0 + Duration::from_micros(i * 10);
            let t = until(s.process(&mut udp(1), &mut Context::new(0, now)));
            let d = t - now;
            assert!(d >= Duration::from_millis(5) && d <= Duration::from_millis(15));
            if t < prev {
                overtaken += 1;
            }
            prev = t;
        }
        assert!(overtaken > 100, "{overtaken}");
        assert_eq!(count(&c, "order_kept"), 0);
    }

    #[test]
    fn loss_drops_about_the_configured_share() {
        let (mut s, c, _) = build("delay = \"1ms\"\nloss = 0.1\nseed = 11");
        let now = Instant::now();
        let drops = (0..10_000)
            .filter(|_| s.process(&mut udp(1), &mut Context::new(0, now)) == Action::Drop)
            .count();
        assert!((800..1200).contains(&drops), "{drops}");
        assert_eq!(count(&c, "lost"), drops as u64);
    }

    #[test]
    fn bad_configs_are_refused_with_the_field() {
        for (text, want) in [
            ("", "missing delay"),
            ("delay = \"4 parsecs\"", "delay:"),
            ("delay = \"1ms\"\njitter = \"2ms\"", "jitter"),
            ("delay = \"1ms\"\nloss = 1.0", "loss"),
            ("delay = \"1ms\"\nlimit = 0", "limit"),
            ("delay = \"2min\"", "delay:"),
            ("delay = \"61s\"", "over the limit"),
        ] {
            let cfg: DelayConfig = toml::from_str(text).unwrap();
            let e = cfg
                .into_factory("d")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert!(toml::from_str::<DelayConfig>("delay = \"1ms\"\nlatency = 1").is_err());
    }

    /// `delay_ms` is gone: any use of it is refused with the `delay` to write instead.
    #[test]
    fn delay_ms_is_refused_naming_its_replacement() {
        for (text, want) in [
            (
                "delay_ms = 40",
                "delay_ms was removed: write delay = \"40ms\"",
            ),
            (
                "delay_ms = 2.5",
                "delay_ms was removed: write delay = \"2.5ms\"",
            ),
            (
                "delay = \"1ms\"\ndelay_ms = 1",
                "delay_ms was removed: write delay = \"1ms\"",
            ),
            (
                "delay_ms = -1",
                "delay_ms was removed: write delay = \"40ms\"",
            ),
            (
                "delay_ms = \"40\"",
                "delay_ms was removed: write delay = \"40ms\"",
            ),
        ] {
            let cfg: DelayConfig = toml::from_str(text).unwrap();
            let e = cfg
                .into_factory("d")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert_eq!(e, want, "{text:?}");
        }
    }
}
