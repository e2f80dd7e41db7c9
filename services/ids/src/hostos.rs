//! The protected hosts' operating systems, as far as normalization needs them: which
//! overlap policy a host's IP reassembly follows ([`FragPolicy`]), and a small
//! longest-prefix table ([`PolicyMap`]) that picks a policy per destination address.
//!
//! `PolicyMap` is generic over the policy so that the TCP stream policy can use it too.
//! Its configuration shape is either one name (`frag_policy = "linux"`: every host) or a
//! table of prefixes with an optional `default`
//! (`frag_policy = { default = "linux", "192.168.1.0/24" = "windows" }`).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// How a host resolves overlapping IP fragments (Suricata's `defrag` policies, plus
/// today's Linux, which is relayd's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FragPolicy {
    /// Linux 4.19 and later (`linux`): an overlap kills the whole train (RFC 5722, for
    /// IPv4 too), a fragment that lies within bytes already held is a duplicate and is
    /// dropped, a non-last IPv4 fragment is cut to a multiple of 8 bytes, a non-last IPv6
    /// one that is not a multiple of 8 is discarded, as are IPv6 first fragments without
    /// the whole header chain (RFC 7112). See `decode::defrag` for the rest.
    #[default]
    Linux,
    /// Linux before 4.19 (`old-linux`, Suricata's `linux`): a later fragment wins where
    /// it starts at or before the one it overlaps.
    OldLinux,
    /// The first bytes received win (`first`; Suricata's for old Solaris, HP-UX 11, macOS).
    First,
    /// The last bytes received win (`last`).
    Last,
    /// A later fragment wins only where it starts before the one it overlaps (`bsd`;
    /// Suricata's default, also for HP-UX 10 and IRIX).
    Bsd,
    /// The fragment with the higher offset wins, a later one on equal offsets
    /// (`bsd-right`).
    BsdRight,
    /// A later fragment wins only over a fragment it covers entirely and extends past on
    /// both sides (`windows`, also `vista`, `windows2k3`).
    Windows,
    /// As `windows`, but a later fragment that starts before and ends where the earlier
    /// one ends wins too (`solaris`).
    Solaris,
}

impl FragPolicy {
    /// Every policy with its configuration name.
    pub const ALL: [(&'static str, FragPolicy); 8] = [
        ("linux", FragPolicy::Linux),
        ("old-linux", FragPolicy::OldLinux),
        ("first", FragPolicy::First),
        ("last", FragPolicy::Last),
        ("bsd", FragPolicy::Bsd),
        ("bsd-right", FragPolicy::BsdRight),
        ("windows", FragPolicy::Windows),
        ("solaris", FragPolicy::Solaris),
    ];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        FragPolicy::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("linux", |(n, _)| n)
    }

    /// For the overlap policies other than `linux`: whether a new fragment
    /// `[new_off, new_end)` replaces the bytes of an earlier one `[old_off, old_end)`
    /// where they overlap.
    pub(crate) fn new_wins(
        self,
        new_off: usize,
        new_end: usize,
        old_off: usize,
        old_end: usize,
    ) -> bool {
        match self {
            FragPolicy::Linux | FragPolicy::First => false,
            FragPolicy::Last => true,
            FragPolicy::OldLinux => new_off <= old_off,
            FragPolicy::Bsd => new_off < old_off,
            FragPolicy::BsdRight => new_off >= old_off,
            FragPolicy::Windows => new_off < old_off && new_end > old_end,
            FragPolicy::Solaris => new_off < old_off && new_end >= old_end,
        }
    }
}

/// A policy name that is not one of the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}")]
pub struct UnknownPolicy(pub String);

impl FromStr for FragPolicy {
    type Err = UnknownPolicy;

    /// The names of [`FragPolicy::ALL`], and Suricata's `host-os-policy` names mapped as
    /// its defrag does (`hpux10`, `irix` -> `bsd`; `old-solaris`, `hpux11`, `macos` ->
    /// `first`; `vista`, `windows2k3` -> `windows`).
    fn from_str(s: &str) -> Result<FragPolicy, UnknownPolicy> {
        if let Some((_, p)) = FragPolicy::ALL.iter().find(|(n, _)| *n == s) {
            return Ok(*p);
        }
        Ok(match s {
            "hpux10" | "irix" => FragPolicy::Bsd,
            "old-solaris" | "hpux11" | "macos" => FragPolicy::First,
            "vista" | "windows2k3" => FragPolicy::Windows,
            _ => return Err(UnknownPolicy(s.to_string())),
        })
    }
}

impl fmt::Display for FragPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An IPv4 or IPv6 prefix. IPv4 addresses are kept in the low 32 bits of a `u128` and
/// never match an IPv6 prefix (nor the reverse).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    v6: bool,
    addr: u128,
    len: u8,
}

impl Prefix {
    fn mask(v6: bool, len: u8) -> u128 {
        let bits = if v6 { 128 } else { 32 };
        let full = if v6 { u128::MAX } else { u128::from(u32::MAX) };
        match bits - u32::from(len) {
            0 => full,
            n if n >= bits => 0,
            n => full & !((1u128 << n) - 1),
        }
    }

    fn contains(&self, v6: bool, addr: u128) -> bool {
        self.v6 == v6 && addr & Prefix::mask(v6, self.len) == self.addr
    }
}

impl FromStr for Prefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Prefix, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = a.parse().map_err(|_| format!("{a:?} is not an address"))?;
        let (v6, addr, bits) = match ip {
            IpAddr::V4(v) => (false, u128::from(u32::from(v)), 32u8),
            IpAddr::V6(v) => (true, u128::from(v), 128u8),
        };
        let len = match l {
            None => bits,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= bits => n,
                _ => return Err(format!("prefix length {l:?} is not 0 to {bits}")),
            },
        };
        if addr & !Prefix::mask(v6, len) != 0 {
            return Err(format!("{s} has bits set past its prefix length"));
        }
        Ok(Prefix { v6, addr, len })
    }
}

/// How a policy key is written in the configuration: one name for every host, or a table
/// of `"prefix" = "name"` entries with an optional `default`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PolicySpec {
    /// `key = "name"`: every destination.
    One(String),
    /// `key = { default = "name", "10.0.0.0/8" = "name", ... }`.
    Table(BTreeMap<String, String>),
}

/// A policy table entry that cannot be read: names the key and the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: entry {entry:?}: {reason}")]
pub struct PolicyMapError {
    /// The configuration key (`frag_policy`).
    pub key: String,
    /// The entry as written (`"10.0.0.0/33"`, or the policy name for a one-name key).
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A policy per destination prefix, the longest matching prefix winning, and a default
/// for the rest. Lookups are linear in the number of prefixes (a table is a handful of
/// networks; the entries are kept longest first, so the first match is the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMap<P> {
    default: P,
    /// Longest prefix first.
    entries: Vec<(Prefix, P)>,
}

impl<P: Copy + Default> Default for PolicyMap<P> {
    fn default() -> PolicyMap<P> {
        PolicyMap::new(P::default())
    }
}

impl<P: Copy> PolicyMap<P> {
    /// `default` for every destination.
    pub fn new(default: P) -> PolicyMap<P> {
        PolicyMap {
            default,
            entries: Vec::new(),
        }
    }

    /// The policy for destinations without a matching prefix.
    pub fn default_policy(&self) -> P {
        self.default
    }

    /// Adds (or replaces) the policy of `prefix` (`"10.0.0.0/8"`, `"2001:db8::/32"`, or
    /// an address alone for one host).
    pub fn insert(&mut self, prefix: &str, policy: P) -> Result<(), String> {
        let p: Prefix = prefix.parse()?;
        self.entries.retain(|(q, _)| *q != p);
        let at = self.entries.partition_point(|(q, _)| q.len >= p.len);
        self.entries.insert(at, (p, policy));
        Ok(())
    }

    /// The policy for an IPv4 destination.
    pub fn get_v4(&self, addr: u32) -> P {
        self.find(false, u128::from(addr))
    }

    /// The policy for an IPv6 destination.
    pub fn get_v6(&self, addr: u128) -> P {
        self.find(true, addr)
    }

    /// The policy for an address in the flow table's key form (`rule::ip_key`: IPv4
    /// mapped into IPv6, `::ffff:a.b.c.d`).
    pub fn get_key(&self, key: u128) -> P {
        if key >> 32 == 0xffff {
            self.get_v4(key as u32)
        } else {
            self.get_v6(key)
        }
    }

    /// The policy for a destination.
    pub fn get(&self, addr: IpAddr) -> P {
        match addr {
            IpAddr::V4(a) => self.get_v4(u32::from(a)),
            IpAddr::V6(a) => self.get_v6(u128::from(a)),
        }
    }

    fn find(&self, v6: bool, addr: u128) -> P {
        self.entries
            .iter()
            .find(|(p, _)| p.contains(v6, addr))
            .map_or(self.default, |(_, pol)| *pol)
    }
}

impl<P: Copy + Default + FromStr> PolicyMap<P>
where
    P::Err: fmt::Display,
{
    /// The table a configuration key `key` describes; an error names `key` and the entry.
    /// Without a `default` entry the default is `P::default()`.
    pub fn from_spec(key: &str, spec: &PolicySpec) -> Result<PolicyMap<P>, PolicyMapError> {
        let err = |entry: &str, reason: String| PolicyMapError {
            key: key.to_string(),
            entry: entry.to_string(),
            reason,
        };
        let name = |entry: &str, v: &str| v.parse::<P>().map_err(|e| err(entry, e.to_string()));
        match spec {
            PolicySpec::One(v) => Ok(PolicyMap::new(name(v, v)?)),
            PolicySpec::Table(t) => {
                let mut m = PolicyMap::new(P::default());
                for (k, v) in t {
                    let p = name(k, v)?;
                    if k == "default" {
                        m.default = p;
                    } else {
                        m.insert(k, p).map_err(|r| err(k, r))?;
                    }
                }
                Ok(m)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, &str)]) -> PolicySpec {
        PolicySpec::Table(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn every_name_parses_and_round_trips() {
        for (n, p) in FragPolicy::ALL {
            assert_eq!(n.parse::<FragPolicy>(), Ok(p));
            assert_eq!(p.to_string(), n);
        }
        assert_eq!("vista".parse(), Ok(FragPolicy::Windows));
        assert_eq!("macos".parse(), Ok(FragPolicy::First));
        assert!("beos".parse::<FragPolicy>().is_err());
        assert_eq!(FragPolicy::default(), FragPolicy::Linux);
    }

    #[test]
    fn the_longest_prefix_wins() {
        let spec = table(&[
            ("default", "bsd"),
            ("10.0.0.0/8", "windows"),
            ("10.1.0.0/16", "solaris"),
            ("10.1.2.3", "last"),
            ("2001:db8::/32", "first"),
            ("0.0.0.0/0", "old-linux"),
        ]);
        let m: PolicyMap<FragPolicy> = PolicyMap::from_spec("frag_policy", &spec).unwrap();
        let v4 = |s: &str| m.get(s.parse().unwrap());
        assert_eq!(v4("10.9.9.9"), FragPolicy::Windows);
        assert_eq!(v4("10.1.9.9"), FragPolicy::Solaris);
        assert_eq!(v4("10.1.2.3"), FragPolicy::Last);
        assert_eq!(v4("192.0.2.1"), FragPolicy::OldLinux);
        assert_eq!(v4("2001:db8::1"), FragPolicy::First);
        // An IPv6 address outside every IPv6 prefix gets the default, not 0.0.0.0/0's.
        assert_eq!(v4("2001:db9::1"), FragPolicy::Bsd);
        // One name: every host; a table without `default`: linux for the rest.
        let one: PolicyMap<FragPolicy> =
            PolicyMap::from_spec("frag_policy", &PolicySpec::One("windows".into())).unwrap();
        assert_eq!(one.get_v4(1), FragPolicy::Windows);
        let nodef: PolicyMap<FragPolicy> =
            PolicyMap::from_spec("frag_policy", &table(&[("10.0.0.0/8", "bsd")])).unwrap();
        assert_eq!(nodef.get_v4(0x0a00_0001), FragPolicy::Bsd);
        assert_eq!(nodef.get_v4(0x0b00_0001), FragPolicy::Linux);
    }

    #[test]
    fn bad_entries_name_the_key_and_the_entry() {
        let bad = |spec: PolicySpec, entry: &str| {
            let e = PolicyMap::<FragPolicy>::from_spec("frag_policy", &spec).unwrap_err();
            assert_eq!((e.key.as_str(), e.entry.as_str()), ("frag_policy", entry));
            let s = e.to_string();
            assert!(s.contains("frag_policy") && s.contains(entry), "{s}");
        };
        bad(PolicySpec::One("beos".into()), "beos");
        bad(table(&[("10.0.0.0/8", "beos")]), "10.0.0.0/8");
        bad(table(&[("10.0.0.0/33", "bsd")]), "10.0.0.0/33");
        bad(table(&[("10.0.0.1/8", "bsd")]), "10.0.0.1/8");
        bad(table(&[("ten", "bsd")]), "ten");
        bad(table(&[("default", "nope")]), "default");
    }

    #[test]
    fn the_configuration_shapes_deserialize() {
        #[derive(Deserialize)]
        struct C {
            frag_policy: PolicySpec,
        }
        let one: C = toml::from_str("frag_policy = \"windows\"").unwrap();
        assert_eq!(one.frag_policy, PolicySpec::One("windows".into()));
        let t: C = toml::from_str(
            "frag_policy = { default = \"linux\", \"192.168.1.0/24\" = \"windows\" }",
        )
        .unwrap();
        let m: PolicyMap<FragPolicy> = PolicyMap::from_spec("frag_policy", &t.frag_policy).unwrap();
        assert_eq!(m.get("192.168.1.7".parse().unwrap()), FragPolicy::Windows);
        assert_eq!(m.default_policy(), FragPolicy::Linux);
    }

    #[test]
    fn overlap_winners_follow_the_policies() {
        use FragPolicy::*;
        // New [0,16) over old [8,16): starts before, ends at the same place.
        let w = |p: FragPolicy| p.new_wins(0, 16, 8, 16);
        assert!(!w(First) && w(Last) && w(Bsd) && w(OldLinux) && !w(Windows) && w(Solaris));
        assert!(!w(BsdRight));
        // Same start: old-linux and bsd-right take the new bytes, bsd keeps the old.
        let s = |p: FragPolicy| p.new_wins(8, 16, 8, 24);
        assert!(s(OldLinux) && s(BsdRight) && !s(Bsd) && !s(Windows));
        // Covering on both sides: windows takes the new bytes.
        assert!(Windows.new_wins(0, 32, 8, 16));
    }
}
