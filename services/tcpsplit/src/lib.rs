//! `tcpsplit`: the per-connection split decision of the TCP split proxy (issue 8, seeds 003
//! and 004). It sees the SYN of each new TCP connection and either marks it for diversion
//! to relayd's proxy (the fwmark `mark`; the queue's rules turn it into a connmark so the
//! decision sticks to the connection, and TPROXY diverts it) or lets it pass natively.
//!
//! A SYN is split when it matches the policy: its destination port is in `ports` (if
//! given) and its destination address is in `prefixes` (if given): each list given narrows
//! the choice, as iptables matches do; with neither, every connection is a candidate.
//! With `adaptive`, a candidate is split only while the egress queue's expected waiting
//! time (qdisc backlog / rate, read from the queue monitor) is at least `min_wait_us`: a
//! split pays off when the path is congested (seed 003's authors' adaptive split).
//!
//! ```toml
//! [service.split]
//! kind = "tcpsplit"
//! ports = [80, 443, 9000]
//! prefixes = ["203.0.113.0/24", "2001:db8::/32"]
//! adaptive = { min_wait_us = 500 }  # optional; bandwidth = "100mbit" if the qdisc has no rate
//! interface = "eth1"                 # the egress to watch (at PREROUTING it is not known yet)
//! mark = 0x1                         # the "divert" mark (default 0x1)
//! repeat = false                     # true: NF_REPEAT with the mark (see the field)
//! upstream = "tcp"                   # for the proxy: tcp | mptcp
//! transparent_source = false         # for the proxy
//! ```
//!
//! Packets that are not a TCP SYN (without ACK) pass untouched and are counted: the queue
//! should only carry SYNs (`match = "-p tcp --syn"`, `ct state new`).
//!
//! The diversion itself is relayd's: the factory asks for it through
//! [`Manifest::proxy`] (the mark, `repeat`, and the proxy's `upstream` and
//! `transparent_source`), and relayd installs the TPROXY rules, the route and the
//! transparent listener, and checks that the queue sits where the rules see its marks.

pub use relay_core::Prefix;

use relay_core::wire::{proto, tcp};
use relay_core::{
    Action, Context, Counter, Counters, Manifest, Offload, OffloadReason, Packet, ProxyDiversion,
    Resources, Service, ServiceConfig, ServiceFactory,
};
use relay_core::{manifest::HEADER_BYTES, units::de_u32};
use relay_netlink::QueueMonitor;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Configuration of `tcpsplit`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSplitConfig {
    /// Destination ports to split (empty: any).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Destination prefixes to split, `"10.0.0.0/8"`, `"2001:db8::/32"` (empty: any).
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Split only while the egress queue is long enough.
    #[serde(default)]
    pub adaptive: Option<AdaptiveConfig>,
    /// The egress interface whose queue `adaptive` watches; default: the packet's output
    /// interface, which is known only at FORWARD and POSTROUTING.
    #[serde(default)]
    pub interface: Option<String>,
    /// The fwmark that means "divert to the proxy" (integer or "0x..." string).
    #[serde(default = "default_mark", deserialize_with = "de_u32")]
    pub mark: u32,
    /// Give a split SYN back to its hook with the mark (NF_REPEAT, with relayd's bypass
    /// bit) instead of setting the mark and continuing: for a queue in mangle PREROUTING
    /// whose TPROXY and CONNMARK rules follow in the same hook. An accepted packet goes on
    /// to the next hook, never to the next rule.
    #[serde(default)]
    pub repeat: bool,
    /// The proxy's upstream protocol, `tcp` or `mptcp` (read by the proxy, not here).
    #[serde(default)]
    pub upstream: Option<String>,
    /// Whether the proxy's upstream leg keeps the client's address (read by the proxy).
    #[serde(default)]
    pub transparent_source: bool,
}

/// The adaptive part of the policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveConfig {
    /// The least expected egress queue wait, in microseconds, for a split.
    pub min_wait_us: u64,
    /// The egress bandwidth (`"100mbit"`), for a queue whose qdisc has no rate of its own.
    #[serde(default)]
    pub bandwidth: Option<String>,
}

fn default_mark() -> u32 {
    0x1
}

/// A queue view older than this means the monitor stopped: the wait counts as unknown.
const STALE: Duration = Duration::from_millis(100);

impl TcpSplitConfig {
    fn factory(self) -> Result<Factory, String> {
        if self.mark == 0 {
            return Err("mark = 0 cannot mark a connection for diversion".into());
        }
        let mptcp = match self.upstream.as_deref() {
            None | Some("tcp") => false,
            Some("mptcp") => true,
            Some(u) => return Err(format!("upstream = \"{u}\" must be \"tcp\" or \"mptcp\"")),
        };
        let prefixes = self
            .prefixes
            .iter()
            .map(|p| p.parse::<Prefix>().map_err(|e| format!("prefixes: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let ifindex = match &self.interface {
            Some(name) => Some(ifindex(name)?),
            None => None,
        };
        let adaptive = match &self.adaptive {
            Some(a) => Some(Adaptive {
                min_wait: a.min_wait_us as f64 * 1e-6,
                bandwidth_bytes: match &a.bandwidth {
                    Some(b) => Some(
                        relay_core::units::parse_rate(b)
                            .map_err(|e| format!("adaptive.bandwidth: {e}"))?
                            as f64
                            / 8.0,
                    ),
                    None => None,
                },
            }),
            None => None,
        };
        let manifest = Manifest {
            needs_bytes: Some(HEADER_BYTES),
            proxy: Some(ProxyDiversion {
                mark: self.mark,
                repeat: self.repeat,
                mptcp,
                transparent_source: self.transparent_source,
            }),
            // The adaptive policy reads the egress queue.
            queue_monitor: adaptive.is_some(),
            // Connections it leaves alone are decided for good at their SYN.
            offloads: true,
            ..Manifest::new()
        };
        Ok(Factory {
            policy: Policy {
                ports: self.ports,
                prefixes,
                adaptive,
                ifindex,
            },
            manifest,
        })
    }
}

impl ServiceConfig for TcpSplitConfig {
    const KIND: &'static str = "tcpsplit";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        Ok(Arc::new(self.factory()?))
    }
}

/// The interface index of `name`, in the calling thread's network namespace.
fn ifindex(name: &str) -> Result<u32, String> {
    relay_core::ifname::check_msg(name).map_err(|e| format!("interface: {e}"))?;
    relay_netlink::ifindex(name).map_err(|_| format!("interface `{name}` does not exist"))
}

#[derive(Debug, Clone, Copy)]
struct Adaptive {
    /// Seconds.
    min_wait: f64,
    bandwidth_bytes: Option<f64>,
}

/// The split policy: built once from the configuration, copied into every queue thread's
/// instance.
#[derive(Clone)]
struct Policy {
    ports: Vec<u16>,
    prefixes: Vec<Prefix>,
    adaptive: Option<Adaptive>,
    ifindex: Option<u32>,
}

struct Factory {
    policy: Policy,
    /// The mark and the proxy's settings, for relayd ([`ProxyDiversion`]).
    manifest: Manifest,
}

impl Factory {
    /// The mark a SYN to divert gets, and whether it repeats the hook.
    fn diversion(&self) -> (u32, bool) {
        self.manifest
            .proxy
            .map_or((0, false), |p| (p.mark, p.repeat))
    }
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        "tcpsplit"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        let (mark, repeat) = self.diversion();
        Box::new(TcpSplit {
            policy: self.policy.clone(),
            mark,
            repeat,
            monitor: res.get::<QueueMonitor>(),
            n: Names {
                split: c("split"),
                split_policy: c("split_policy"),
                split_adaptive_wait: c("split_adaptive_wait"),
                passed: c("passed"),
                passed_port: c("passed_port"),
                passed_prefix: c("passed_prefix"),
                passed_queue_short: c("passed_queue_short"),
                passed_queue_unknown: c("passed_queue_unknown"),
                passed_not_syn: c("passed_not_syn"),
                passed_not_tcp: c("passed_not_tcp"),
                wait_us: counters.gauge("wait_us"),
            },
        })
    }
}

struct Names {
    split: Counter,
    split_policy: Counter,
    split_adaptive_wait: Counter,
    passed: Counter,
    passed_port: Counter,
    passed_prefix: Counter,
    passed_queue_short: Counter,
    passed_queue_unknown: Counter,
    passed_not_syn: Counter,
    passed_not_tcp: Counter,
    wait_us: Counter,
}

struct TcpSplit {
    policy: Policy,
    mark: u32,
    repeat: bool,
    /// The egress queues (adaptive policy), as relayd gave them.
    monitor: Option<Arc<QueueMonitor>>,
    n: Names,
}

/// What the policy decided, as the counter of its reason.
enum Outcome<'a> {
    Split(&'a Counter),
    Pass(&'a Counter),
    /// Not a SYN of a new connection: its connection was decided at its SYN, which this
    /// packet cannot tell (so it casts no offload vote).
    NotSyn(&'a Counter),
}

impl TcpSplit {
    fn decide(&self, pkt: &mut Packet) -> Outcome<'_> {
        let n = &self.n;
        let Ok(l) = pkt.layout() else {
            return Outcome::Pass(&n.passed_not_tcp);
        };
        if l.proto != proto::TCP {
            return Outcome::Pass(&n.passed_not_tcp);
        }
        let Some(t) = pkt.tcp() else {
            return Outcome::NotSyn(&n.passed_not_syn); // a later fragment
        };
        if t.flags() & (tcp::flags::SYN | tcp::flags::ACK) != tcp::flags::SYN {
            return Outcome::NotSyn(&n.passed_not_syn);
        }
        let port = t.dst_port();
        if !self.policy.ports.is_empty() && !self.policy.ports.contains(&port) {
            return Outcome::Pass(&n.passed_port);
        }
        if !self.policy.prefixes.is_empty() {
            let dst = pkt.ip().map(|ip| ip.dst_addr());
            if !dst.is_some_and(|dst| self.policy.prefixes.iter().any(|p| p.contains(dst))) {
                return Outcome::Pass(&n.passed_prefix);
            }
        }
        let Some(a) = self.policy.adaptive else {
            return Outcome::Split(&n.split_policy);
        };
        let ifindex = self.policy.ifindex.unwrap_or(pkt.meta.outdev);
        let q = self
            .monitor
            .as_ref()
            .and_then(|m| m.get(ifindex))
            .filter(|q| q.age < STALE);
        let Some(q) = q else {
            return Outcome::Pass(&n.passed_queue_unknown);
        };
        let rate = a
            .bandwidth_bytes
            .or(Some(q.rate_bytes as f64).filter(|&r| r > 0.0));
        let Some(rate) = rate else {
            return Outcome::Pass(&n.passed_queue_unknown);
        };
        let wait = q.backlog_bytes as f64 / rate;
        n.wait_us.set((wait * 1e6) as u64);
        if wait >= a.min_wait {
            Outcome::Split(&n.split_adaptive_wait)
        } else {
            Outcome::Pass(&n.passed_queue_short)
        }
    }
}

impl Service for TcpSplit {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        match self.decide(pkt) {
            Outcome::Split(reason) => {
                reason.inc();
                self.n.split.inc();
                let mark = pkt.verdict_mark().unwrap_or(pkt.meta.mark) | self.mark;
                if self.repeat {
                    return Action::Repeat { mark };
                }
                pkt.set_mark(mark);
            }
            Outcome::Pass(reason) => {
                reason.inc();
                self.n.passed.inc();
                // A connection (or a non-TCP flow) it leaves alone: never split later.
                cx.offload(Offload::both(OffloadReason::Decided));
            }
            Outcome::NotSyn(reason) => {
                reason.inc();
                self.n.passed.inc();
            }
        }
        Action::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{IpRepr, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr, UdpPacket};
    use std::net::Ipv6Addr;
    use std::time::Instant;

    /// A bare TCP segment from port 40000 to `port` (sequence number 1, window 65535).
    fn segment(ip: IpRepr, port: u16, flags: u8) -> Vec<u8> {
        let mut b = vec![0u8; ip.buffer_len()];
        ip.emit(&mut b);
        TcpRepr {
            src_port: 40000,
            dst_port: port,
            seq: 1,
            ack: 0,
            flags,
            window: 0xffff,
            urgent: 0,
            options_len: 0,
        }
        .emit(&mut TcpPacket::new_unchecked(&mut b[ip.header_len()..]));
        b
    }

    /// A TCP/IPv4 segment 10.0.1.1:40000 -> `dst`:`port` with `flags`.
    fn tcp4(dst: [u8; 4], port: u16, flags: u8) -> Vec<u8> {
        let mut ip = Ipv4Repr::new([10, 0, 1, 1].into(), dst.into(), proto::TCP, 20);
        ip.ident = 1;
        let ip = IpRepr::V4(ip);
        let mut b = segment(ip, port, flags);
        TcpPacket::new_unchecked(&mut b[20..]).fill_checksum(ip.pseudo_sum());
        b
    }

    /// A TCP/IPv6 SYN to `dst`:`port` (its TCP checksum left 0).
    fn syn6(dst: Ipv6Addr, port: u16) -> Vec<u8> {
        let src = "fd00:1::1".parse::<Ipv6Addr>().unwrap();
        let ip = IpRepr::new(src.into(), dst.into(), proto::TCP, 20).unwrap();
        segment(ip, port, tcp::flags::SYN)
    }

    const SYN: u8 = tcp::flags::SYN;

    fn build(text: &str, monitor: Option<Arc<QueueMonitor>>) -> (Box<dyn Service>, Counters) {
        let cfg: TcpSplitConfig = toml::from_str(text).unwrap();
        let f = cfg.factory().unwrap();
        let c = Counters::new();
        let res = match monitor {
            Some(m) => Resources::new().with(m),
            None => Resources::new(),
        };
        (f.build(&c, &res), c)
    }

    fn counts(c: &Counters) -> std::collections::HashMap<String, u64> {
        c.snapshot().into_iter().map(|(n, _, v)| (n, v)).collect()
    }

    /// The mark the verdict sets after the service ran on `bytes` (with `mark` queued).
    fn run(s: &mut Box<dyn Service>, bytes: &[u8], mark: u32) -> Option<u32> {
        let mut p = Packet::from_bytes(bytes);
        p.meta.mark = mark;
        assert_eq!(
            s.process(&mut p, &mut Context::new(0, Instant::now())),
            Action::Continue
        );
        assert!(!p.is_modified());
        p.verdict_mark()
    }

    #[test]
    fn splits_syns_to_listed_ports_and_prefixes() {
        let (mut s, c) = build(
            "ports = [80, 443]\nprefixes = [\"10.0.2.0/24\", \"fd00:2::/64\"]\nmark = \"0x10\"",
            None,
        );
        assert_eq!(run(&mut s, &tcp4([10, 0, 2, 2], 80, SYN), 0x3), Some(0x13));
        assert_eq!(
            run(&mut s, &syn6("fd00:2::2".parse().unwrap(), 443), 0),
            Some(0x10)
        );
        // Wrong port, wrong prefix, a SYN-ACK, a plain ACK, UDP: all pass, unmarked.
        assert_eq!(run(&mut s, &tcp4([10, 0, 2, 2], 22, SYN), 0), None);
        assert_eq!(run(&mut s, &tcp4([10, 0, 3, 2], 80, SYN), 0), None);
        assert_eq!(
            run(&mut s, &syn6("fd00:3::2".parse().unwrap(), 80), 0),
            None
        );
        assert_eq!(
            run(&mut s, &tcp4([10, 0, 2, 2], 80, SYN | tcp::flags::ACK), 0),
            None
        );
        assert_eq!(
            run(&mut s, &tcp4([10, 0, 2, 2], 80, tcp::flags::ACK), 0),
            None
        );
        let mut udp = tcp4([10, 0, 2, 2], 80, SYN);
        let mut ip = Ipv4Packet::new_unchecked(&mut udp[..]);
        ip.set_protocol(proto::UDP);
        ip.fill_checksum();
        UdpPacket::new_unchecked(ip.payload_mut()).set_len(20);
        assert_eq!(run(&mut s, &udp, 0), None);
        let n = counts(&c);
        assert_eq!((n["split"], n["split_policy"]), (2, 2), "{n:?}");
        assert_eq!(n["passed"], 6, "{n:?}");
        assert_eq!(
            (
                n["passed_port"],
                n["passed_prefix"],
                n["passed_not_syn"],
                n["passed_not_tcp"]
            ),
            (1, 2, 2, 1),
            "{n:?}"
        );
    }

    #[test]
    fn no_lists_split_every_syn_with_the_default_mark() {
        let (mut s, _) = build("", None);
        assert_eq!(run(&mut s, &tcp4([192, 0, 2, 1], 9999, SYN), 0), Some(1));
    }

    #[test]
    fn repeat_gives_a_split_syn_back_to_the_hook() {
        let (mut s, _) = build(
            "repeat = true
mark = 0x4",
            None,
        );
        let mut cx = Context::new(0, Instant::now());
        let mut p = Packet::from_bytes(&tcp4([192, 0, 2, 1], 80, SYN));
        p.meta.mark = 0x1;
        assert_eq!(s.process(&mut p, &mut cx), Action::Repeat { mark: 0x5 });
        let mut p = Packet::from_bytes(&tcp4([192, 0, 2, 1], 80, tcp::flags::ACK));
        assert_eq!(s.process(&mut p, &mut cx), Action::Continue);
    }

    #[test]
    fn adaptive_splits_only_on_a_long_egress_queue() {
        // 100 kB waiting at 1 MB/s: 100 ms of queue.
        let long = QueueMonitor::fixed(100_000, 1_000_000);
        let text = "ports = [80]\nadaptive = { min_wait_us = 500 }";
        let (mut s, c) = build(text, Some(long));
        let syn = tcp4([10, 0, 2, 2], 80, SYN);
        let mut p = Packet::from_bytes(&syn);
        p.meta.outdev = 3;
        s.process(&mut p, &mut Context::new(0, Instant::now()));
        assert_eq!(p.verdict_mark(), Some(1));
        let n = counts(&c);
        assert_eq!((n["split_adaptive_wait"], n["wait_us"]), (1, 100_000));
        // 100 bytes at 1 MB/s: 100 us, under the 500 us asked for.
        let (mut s, c) = build(text, Some(QueueMonitor::fixed(100, 1_000_000)));
        assert_eq!(run(&mut s, &syn, 0), None);
        assert_eq!(counts(&c)["passed_queue_short"], 1);
        // No rate known and none configured: the wait is unknown, the connection passes.
        let (mut s, c) = build(text, Some(QueueMonitor::fixed(100_000, 0)));
        assert_eq!(run(&mut s, &syn, 0), None);
        assert_eq!(counts(&c)["passed_queue_unknown"], 1);
        // ... unless the bandwidth is given: 100 kB at 100 Mbit/s is 8 ms.
        let text = "adaptive = { min_wait_us = 500, bandwidth = \"100mbit\" }";
        let (mut s, c) = build(text, Some(QueueMonitor::fixed(100_000, 0)));
        assert_eq!(run(&mut s, &syn, 0), Some(1));
        assert_eq!(counts(&c)["wait_us"], 8000);
    }

    #[test]
    fn asks_relayd_for_the_diversion_it_marks_for() {
        let div = |text: &str| {
            let cfg: TcpSplitConfig = toml::from_str(text).unwrap();
            cfg.factory().unwrap().manifest().proxy
        };
        assert_eq!(
            div(""),
            Some(ProxyDiversion {
                mark: 0x1,
                repeat: false,
                mptcp: false,
                transparent_source: false,
            })
        );
        assert_eq!(
            div("mark = \"0x20\"\nrepeat = true\nupstream = \"mptcp\"\ntransparent_source = true"),
            Some(ProxyDiversion {
                mark: 0x20,
                repeat: true,
                mptcp: true,
                transparent_source: true,
            })
        );
        assert_eq!(div("upstream = \"tcp\"").map(|d| d.mptcp), Some(false));
    }

    #[test]
    fn bad_configs_are_refused() {
        for (text, want) in [
            ("mark = 0", "mark"),
            ("prefixes = [\"10.0.0.0/33\"]", "prefixes"),
            ("prefixes = [\"bogus\"]", "prefixes"),
            ("interface = \"nosuchif0\"", "nosuchif0"),
            ("upstream = \"udp\"", "upstream"),
            (
                "adaptive = { min_wait_us = 1, bandwidth = \"9 furlongs\" }",
                "bandwidth",
            ),
        ] {
            let cfg: TcpSplitConfig = toml::from_str(text).unwrap();
            let e = cfg.factory().err().unwrap_or_default();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert!(toml::from_str::<TcpSplitConfig>("port = [80]").is_err());
        let ok: TcpSplitConfig = toml::from_str(
            "ports = [80]\ninterface = \"lo\"\nupstream = \"mptcp\"\ntransparent_source = true",
        )
        .unwrap();
        assert!(ok.factory().is_ok());
    }

    /// A connection it leaves alone is decided at its SYN: the vote is Decided, both ways;
    /// a split one, and packets after the SYN (whose connection it cannot tell), get none.
    #[test]
    fn votes_to_offload_only_the_connections_it_leaves_alone() {
        let (mut s, _) = build("ports = [80]", None);
        assert!(s_manifest_offloads("ports = [80]"));
        let vote = |s: &mut Box<dyn Service>, bytes: &[u8]| {
            let mut p = Packet::from_bytes(bytes);
            let mut cx = Context::new(0, Instant::now());
            s.process(&mut p, &mut cx);
            cx.offload_vote()
        };
        let decided = Some(Offload::both(OffloadReason::Decided));
        assert_eq!(vote(&mut s, &tcp4([192, 0, 2, 1], 22, SYN)), decided);
        assert_eq!(vote(&mut s, &tcp4([192, 0, 2, 1], 80, SYN)), None);
        assert_eq!(
            vote(&mut s, &tcp4([192, 0, 2, 1], 22, tcp::flags::ACK)),
            None
        );
        assert_eq!(
            vote(&mut s, &tcp4([192, 0, 2, 1], 80, tcp::flags::ACK)),
            None
        );
    }

    fn s_manifest_offloads(text: &str) -> bool {
        let cfg: TcpSplitConfig = toml::from_str(text).unwrap();
        cfg.factory().unwrap().manifest().offloads
    }
}
