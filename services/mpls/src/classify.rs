//! VCAN classification: ordered rules, first match wins, without a linear scan when the
//! rules are simple.
//!
//! Every rule goes into exactly one index, chosen by its most selective simple field:
//! a destination prefix (hash per prefix length present), else a source prefix (same),
//! else a single destination port (hash), else an exact DSCP (a 64-entry table), else the
//! ordered scan list (rules with only ranges or protocol). Each index bucket keeps its
//! rules in configuration order. A lookup takes, from every index, the first rule of the
//! bucket the packet falls in that matches all its fields; the lowest rule number among
//! those is the answer. Since each rule lives in one bucket and buckets are ordered, this
//! is exactly "the first rule in configuration order that matches" (see the property
//! test), and costs one probe per prefix length in use plus the bucket lengths, not the
//! number of rules.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port (>= `lo`).
    pub hi: u16,
}

impl PortRange {
    /// True if `p` is in the range.
    #[inline]
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

/// An address prefix, IPv4 or IPv6, with its host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefix {
    /// IPv4 network (address as u32) and length 0..=32.
    V4(u32, u8),
    /// IPv6 network (address as u128) and length 0..=128.
    V6(u128, u8),
}

impl Prefix {
    /// Parses `a.b.c.d/n`, `x::/n` or a bare address (a host prefix). Host bits set below
    /// the length are an error (a typo that would otherwise silently widen the match).
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("\"{s}\" is not an address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 = match len {
            None => max,
            Some(l) => match l.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("\"{s}\": prefix length must be 0..={max}")),
            },
        };
        let p = match addr {
            IpAddr::V4(a) => Prefix::V4(u32::from(a) & mask32(len), len),
            IpAddr::V6(a) => Prefix::V6(u128::from(a) & mask128(len), len),
        };
        let unmasked = match addr {
            IpAddr::V4(a) => Prefix::V4(u32::from(a), len),
            IpAddr::V6(a) => Prefix::V6(u128::from(a), len),
        };
        if p != unmasked {
            return Err(format!("\"{s}\" has host bits set below /{len}"));
        }
        Ok(p)
    }

    /// True if `a` is inside the prefix (an address of the other family never is).
    #[inline]
    pub fn contains(&self, a: &Addr) -> bool {
        match (*self, *a) {
            (Prefix::V4(n, l), Addr::V4(x)) => x & mask32(l) == n,
            (Prefix::V6(n, l), Addr::V6(x)) => x & mask128(l) == n,
            _ => false,
        }
    }
}

#[inline]
fn mask32(len: u8) -> u32 {
    if len == 0 { 0 } else { u32::MAX << (32 - len) }
}

#[inline]
fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    }
}

/// A packet address in the form the classifier compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// IPv4 as a big-endian u32.
    V4(u32),
    /// IPv6 as a big-endian u128.
    V6(u128),
}

impl From<std::net::IpAddr> for Addr {
    #[inline]
    fn from(a: std::net::IpAddr) -> Addr {
        match a {
            std::net::IpAddr::V4(a) => Addr::V4(a.into()),
            std::net::IpAddr::V6(a) => Addr::V6(a.into()),
        }
    }
}

/// What the classifier looks at in a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// DSCP (the top six bits of the TOS / traffic class).
    pub dscp: u8,
    /// Source address.
    pub src: Addr,
    /// Destination address.
    pub dst: Addr,
    /// Upper-layer protocol.
    pub proto: u8,
    /// Source and destination ports, when the packet has them (TCP, UDP, SCTP, UDP-Lite,
    /// not a later fragment).
    pub ports: Option<(u16, u16)>,
}

/// A protocol match: one number, or ICMP meaning ICMP for IPv4 and ICMPv6 for IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoMatch {
    /// This protocol number exactly.
    Number(u8),
    /// ICMP (1) or ICMPv6 (58).
    AnyIcmp,
}

impl ProtoMatch {
    #[inline]
    fn matches(self, p: u8) -> bool {
        match self {
            ProtoMatch::Number(n) => n == p,
            ProtoMatch::AnyIcmp => p == 1 || p == 58,
        }
    }
}

/// One VCAN's match: every field given must match (an empty rule matches everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rule {
    /// DSCP, 0..=63.
    pub dscp: Option<u8>,
    /// Source prefix.
    pub src: Option<Prefix>,
    /// Destination prefix.
    pub dst: Option<Prefix>,
    /// Protocol.
    pub proto: Option<ProtoMatch>,
    /// Source port range (a packet without ports does not match).
    pub sport: Option<PortRange>,
    /// Destination port range (a packet without ports does not match).
    pub dport: Option<PortRange>,
}

impl Rule {
    /// True if every field given matches `k`.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        if self.dscp.is_some_and(|d| d != k.dscp) {
            return false;
        }
        if self.proto.is_some_and(|p| !p.matches(k.proto)) {
            return false;
        }
        if self.dst.is_some_and(|p| !p.contains(&k.dst)) {
            return false;
        }
        if self.src.is_some_and(|p| !p.contains(&k.src)) {
            return false;
        }
        if self.sport.is_some() || self.dport.is_some() {
            let Some((s, d)) = k.ports else { return false };
            if self.sport.is_some_and(|r| !r.contains(s))
                || self.dport.is_some_and(|r| !r.contains(d))
            {
                return false;
            }
        }
        true
    }
}

/// A fast hasher for the integer keys of the indexes (a multiply-xorshift; keys come
/// from the configuration, so no attacker chooses the table layout).
#[derive(Default, Clone, Copy)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u16(&mut self, v: u16) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type Fast = BuildHasherDefault<IntHasher>;

/// Rules indexed by one prefix field: a hash of (masked address) per prefix length.
#[derive(Debug, Default, Clone)]
struct PrefixIndex {
    /// Prefix lengths in use, IPv4 and IPv6, longest first (any order would be correct).
    lens4: Vec<u8>,
    lens6: Vec<u8>,
    v4: HashMap<(u8, u32), Vec<u32>, Fast>,
    v6: HashMap<(u8, u128), Vec<u32>, Fast>,
}

impl PrefixIndex {
    fn insert(&mut self, p: Prefix, rule: u32) {
        match p {
            Prefix::V4(n, l) => {
                if !self.lens4.contains(&l) {
                    self.lens4.push(l);
                    self.lens4.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.v4.entry((l, n)).or_default().push(rule);
            }
            Prefix::V6(n, l) => {
                if !self.lens6.contains(&l) {
                    self.lens6.push(l);
                    self.lens6.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.v6.entry((l, n)).or_default().push(rule);
            }
        }
    }

    /// The lowest-numbered rule of this index matching `k`, if lower than `best`.
    #[inline]
    fn best(&self, a: &Addr, rules: &[Rule], k: &FlowKey, mut best: u32) -> u32 {
        match *a {
            Addr::V4(x) => {
                for &l in &self.lens4 {
                    if let Some(b) = self.v4.get(&(l, x & mask32(l))) {
                        best = first_match(b, rules, k, best);
                    }
                }
            }
            Addr::V6(x) => {
                for &l in &self.lens6 {
                    if let Some(b) = self.v6.get(&(l, x & mask128(l))) {
                        best = first_match(b, rules, k, best);
                    }
                }
            }
        }
        best
    }
}

/// The first rule in `bucket` (ascending) below `best` that matches `k`, else `best`.
#[inline]
fn first_match(bucket: &[u32], rules: &[Rule], k: &FlowKey, best: u32) -> u32 {
    for &i in bucket {
        if i >= best {
            break;
        }
        if rules[i as usize].matches(k) {
            return i;
        }
    }
    best
}

/// How many rules went into each index (for tests, benches and `relayd status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    /// Rules indexed by destination prefix.
    pub by_dst: usize,
    /// Rules indexed by source prefix.
    pub by_src: usize,
    /// Rules indexed by a single destination port.
    pub by_dport: usize,
    /// Rules indexed by DSCP.
    pub by_dscp: usize,
    /// Rules left to the ordered scan.
    pub scanned: usize,
}

/// Ordered VCAN rules with the indexes that find the first match quickly.
#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
    dst: PrefixIndex,
    src: PrefixIndex,
    dport: HashMap<u16, Vec<u32>, Fast>,
    dscp: Vec<Vec<u32>>,
    scan: Vec<u32>,
    stats: IndexStats,
}

impl Classifier {
    /// Indexes `rules` (in priority order: rule 0 first).
    pub fn new(rules: Vec<Rule>) -> Classifier {
        let mut c = Classifier {
            rules: Vec::new(),
            dst: PrefixIndex::default(),
            src: PrefixIndex::default(),
            dport: HashMap::default(),
            dscp: vec![Vec::new(); 64],
            scan: Vec::new(),
            stats: IndexStats::default(),
        };
        // A /0 prefix selects nothing: index such a rule by another field.
        let useful =
            |p: Option<Prefix>| p.filter(|p| !matches!(p, Prefix::V4(_, 0) | Prefix::V6(_, 0)));
        for (i, r) in rules.iter().enumerate() {
            let i = i as u32;
            if let Some(p) = useful(r.dst) {
                c.dst.insert(p, i);
                c.stats.by_dst += 1;
            } else if let Some(p) = useful(r.src) {
                c.src.insert(p, i);
                c.stats.by_src += 1;
            } else if let Some(d) = r.dport.filter(|d| d.lo == d.hi) {
                c.dport.entry(d.lo).or_default().push(i);
                c.stats.by_dport += 1;
            } else if let Some(d) = r.dscp.filter(|&d| d < 64) {
                c.dscp[d as usize].push(i);
                c.stats.by_dscp += 1;
            } else {
                c.scan.push(i);
                c.stats.scanned += 1;
            }
        }
        c.rules = rules;
        c
    }

    /// The number of the first rule matching `k`, in configuration order.
    #[inline]
    pub fn classify(&self, k: &FlowKey) -> Option<usize> {
        let none = u32::MAX;
        let mut best = first_match(&self.scan, &self.rules, k, none);
        if let Some(b) = self.dscp.get(k.dscp as usize) {
            best = first_match(b, &self.rules, k, best);
        }
        if let Some((_, d)) = k.ports
            && let Some(b) = self.dport.get(&d)
        {
            best = first_match(b, &self.rules, k, best);
        }
        best = self.dst.best(&k.dst, &self.rules, k, best);
        best = self.src.best(&k.src, &self.rules, k, best);
        (best != none).then_some(best as usize)
    }

    /// The reference semantics: a linear scan (tests and benches compare against it).
    pub fn classify_linear(&self, k: &FlowKey) -> Option<usize> {
        self.rules.iter().position(|r| r.matches(k))
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// How the rules were indexed.
    pub fn stats(&self) -> IndexStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Addr {
        Addr::V4(u32::from(s.parse::<std::net::Ipv4Addr>().unwrap()))
    }

    fn key(dscp: u8, dst: &str, proto: u8, dport: u16) -> FlowKey {
        FlowKey {
            dscp,
            src: v4("10.0.1.1"),
            dst: v4(dst),
            proto,
            ports: Some((40000, dport)),
        }
    }

    #[test]
    fn prefixes_parse_and_refuse_host_bits() {
        assert_eq!(
            Prefix::parse("10.1.0.0/16").unwrap(),
            Prefix::V4(0x0a01_0000, 16)
        );
        assert_eq!(
            Prefix::parse("10.1.2.3").unwrap(),
            Prefix::V4(0x0a01_0203, 32)
        );
        assert!(
            Prefix::parse("10.1.2.3/16")
                .unwrap_err()
                .contains("host bits")
        );
        assert!(Prefix::parse("10.1.0.0/33").is_err());
        assert!(Prefix::parse("fd00:1::/32").is_ok());
        assert!(Prefix::parse("nope").is_err());
        assert!(Prefix::parse("0.0.0.0/0").unwrap().contains(&v4("1.2.3.4")));
        assert!(!Prefix::parse("::/0").unwrap().contains(&v4("1.2.3.4")));
    }

    #[test]
    fn first_match_wins_across_indexes() {
        let rules = vec![
            Rule {
                dport: Some(PortRange { lo: 5004, hi: 5010 }),
                proto: Some(ProtoMatch::Number(17)),
                ..Rule::default()
            },
            Rule {
                dscp: Some(34),
                ..Rule::default()
            },
            Rule {
                dst: Some(Prefix::parse("10.1.0.0/16").unwrap()),
                ..Rule::default()
            },
            Rule {
                dport: Some(PortRange { lo: 80, hi: 80 }),
                ..Rule::default()
            },
        ];
        let c = Classifier::new(rules);
        assert_eq!(
            c.stats(),
            IndexStats {
                by_dst: 1,
                by_dport: 1,
                by_dscp: 1,
                scanned: 1,
                ..IndexStats::default()
            }
        );
        assert_eq!(c.classify(&key(34, "10.1.2.3", 17, 5005)), Some(0));
        assert_eq!(c.classify(&key(34, "10.1.2.3", 6, 5005)), Some(1));
        assert_eq!(c.classify(&key(0, "10.1.2.3", 6, 80)), Some(2));
        assert_eq!(c.classify(&key(0, "10.2.2.3", 6, 80)), Some(3));
        assert_eq!(c.classify(&key(0, "10.2.2.3", 6, 81)), None);
        let mut k = key(0, "10.2.2.3", 6, 80);
        k.ports = None;
        assert_eq!(c.classify(&k), None, "a port rule needs ports");
    }

    /// A deterministic pseudo-random generator for the property test.
    struct Xs(u64);
    impl Xs {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn indexed_equals_linear_scan_on_random_rules() {
        let mut x = Xs(0x5eed);
        for round in 0..20 {
            let mut rules = Vec::new();
            for _ in 0..(1 + x.below(200)) {
                let mut r = Rule::default();
                if x.below(3) == 0 {
                    r.dscp = Some(x.below(8) as u8 * 8);
                }
                if x.below(2) == 0 {
                    let len = [8u8, 16, 24, 32][x.below(4) as usize];
                    let a = (10u32 << 24)
                        | ((x.below(4) as u32) << 16)
                        | ((x.below(4) as u32) << 8)
                        | x.below(4) as u32;
                    r.dst = Some(Prefix::V4(a & mask32(len), len));
                }
                if x.below(4) == 0 {
                    let len = [8u8, 24][x.below(2) as usize];
                    r.src = Some(Prefix::V4(
                        (10u32 << 24 | (x.below(2) as u32) << 8) & mask32(len),
                        len,
                    ));
                }
                if x.below(3) == 0 {
                    r.proto = Some(
                        [
                            ProtoMatch::Number(6),
                            ProtoMatch::Number(17),
                            ProtoMatch::AnyIcmp,
                        ][x.below(3) as usize],
                    );
                }
                if x.below(3) == 0 {
                    let lo = 5000 + x.below(8) as u16;
                    r.dport = Some(PortRange {
                        lo,
                        hi: lo + x.below(2) as u16 * 3,
                    });
                }
                if x.below(6) == 0 {
                    let lo = 40000 + x.below(3) as u16;
                    r.sport = Some(PortRange { lo, hi: lo + 1 });
                }
                rules.push(r);
            }
            let c = Classifier::new(rules);
            for _ in 0..2000 {
                let proto = [1u8, 6, 17][x.below(3) as usize];
                let k = FlowKey {
                    dscp: x.below(8) as u8 * 8,
                    src: Addr::V4((10 << 24) | ((x.below(2) as u32) << 8) | x.below(2) as u32),
                    dst: Addr::V4(
                        (10u32 << 24)
                            | ((x.below(4) as u32) << 16)
                            | ((x.below(4) as u32) << 8)
                            | x.below(4) as u32,
                    ),
                    proto,
                    ports: (proto != 1)
                        .then(|| (40000 + x.below(3) as u16, 5000 + x.below(12) as u16)),
                };
                assert_eq!(
                    c.classify(&k),
                    c.classify_linear(&k),
                    "round {round}: {k:?}"
                );
            }
        }
    }
}
