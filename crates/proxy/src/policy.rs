//! The destination policy: which CONNECT destinations the SOCKS5 proxy connects to, and
//! the fixed check of the transparent listener ([`check_transparent`]).
//!
//! A SOCKS5 proxy connects *from the relay*: without a policy any client could reach the
//! relay's loopback services, its own addresses and the link-local metadata services
//! (169.254.169.254) as if it ran on the relay. The policy is applied after the request
//! is parsed and, for a domain name, to every resolved address before it is tried, in
//! this order:
//!
//! 1. An entry of `deny` matches: refused.
//! 2. The address is special (loopback, unspecified, link-local, multicast, broadcast,
//!    reserved, the cloud metadata address fd00:ec2::254, and the IPv4 ones in their
//!    IPv4-mapped, IPv4-compatible and NAT64 forms) or one of the
//!    relay's own addresses: refused, unless an `allow` entry that matches it lies wholly
//!    inside its range (`127.0.0.1:8080` or `127.0.0.0/8` re-allow loopback; `0.0.0.0/0`
//!    or `*` do not) or, for an own address, names exactly that address.
//! 3. `allow` is not empty and no entry matches: refused (an allow-list, as with Dante's
//!    and 3proxy's default block when no rule passes).
//! 4. Otherwise allowed.
//!
//! The relay's own addresses are read with `getifaddrs(3)` when the listener starts and
//! on [`crate::ProxyHandle::refresh_local_addresses`] (relayd calls it on SIGHUP); an
//! address added since is still caught: before an address the snapshot does not know is
//! connected to, a UDP socket asks the kernel's routing which source it would use, and a
//! destination the kernel would answer from itself (source equal to the destination) is
//! one of the relay's own.
//!
//! Prefixes are [`relay_core::Prefix`]; IPv4-mapped addresses are unmapped with
//! [`IpAddr::to_canonical`]; the warning's rate limit is [`RateLimit`].

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use relay_core::Prefix;
use relay_core::ratelimit::RateLimit;
use relay_inject::local_addresses;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Socket, Type};

use crate::sock::unmap;

/// One entry of a SOCKS5 listener's `allow` or `deny` list: destination addresses (a
/// prefix, or any) and, optionally, destination ports.
///
/// Grammar (`relayd check` and the proxy refuse anything else):
///
/// ```text
/// entry  = addr [ ":" ports ]
/// addr   = "*"                                   any address, both families
///        | IPV4 [ "/" LEN ]                      "10.0.0.0/8", "192.0.2.1"
///        | IPV6 [ "/" LEN ]                      "2001:db8::/32", only without ports
///        | "[" IPV6 "]" [ "/" LEN ]              "[2001:db8::]/32", needed before ports
/// ports  = PORT | PORT "-" PORT                  1-65535, low <= high
/// ```
///
/// An address without a length is one host. Host bits set below the length are refused
/// (`10.0.0.1/8`), as a typo that would silently widen the entry. An IPv4-mapped IPv6
/// prefix (`::ffff:10.0.0.0/104`) is the IPv4 prefix it maps. Examples: `"10.0.0.0/8"`,
/// `"192.0.2.1:443"`, `"[2001:db8::]/32:80-90"`, `"*:25"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DestRule {
    /// `None`: any address. Host bits are clear; IPv4-mapped prefixes are IPv4.
    net: Option<Prefix>,
    /// Inclusive port range; `None`: any port.
    ports: Option<(u16, u16)>,
}

impl DestRule {
    /// Whether the rule matches destination `dst` (an IPv4-mapped address as IPv4).
    pub fn matches(&self, dst: SocketAddr) -> bool {
        let dst = unmap(dst);
        self.net.is_none_or(|n| n.contains(dst.ip()))
            && self
                .ports
                .is_none_or(|(lo, hi)| (lo..=hi).contains(&dst.port()))
    }
}

impl FromStr for DestRule {
    type Err = String;

    fn from_str(s: &str) -> Result<DestRule, String> {
        let bad = |why: &str| format!("\"{s}\": {why}");
        let t = s.trim();
        // Split off the address part; what follows it is "" or "/LEN[:PORTS]" or ":PORTS".
        let (addr, rest, bracketed) = if let Some(r) = t.strip_prefix('[') {
            let (a, rest) = r
                .split_once(']')
                .ok_or_else(|| bad("missing `]` after the IPv6 address"))?;
            (a, rest, true)
        } else if let Some(rest) = t.strip_prefix('*') {
            ("*", rest, false)
        } else if t.matches(':').count() > 1 {
            // A bare IPv6 address: its colons are not a port separator.
            let end = t.find('/').unwrap_or(t.len());
            (&t[..end], &t[end..], false)
        } else {
            let end = t.find(['/', ':']).unwrap_or(t.len());
            (&t[..end], &t[end..], false)
        };
        let (len, ports) = match rest.strip_prefix('/') {
            Some(r) => match r.split_once(':') {
                Some((l, p)) => (Some(l), Some(p)),
                None => (Some(r), None),
            },
            None => match rest.strip_prefix(':') {
                Some(p) => (None, Some(p)),
                None if rest.is_empty() => (None, None),
                None => return Err(bad("expected `/LEN` or `:PORT` after the address")),
            },
        };
        let net = if addr == "*" {
            if len.is_some() {
                return Err(bad("`*` takes no prefix length"));
            }
            None
        } else {
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| bad("not an IP address, prefix or `*`"))?;
            if bracketed && ip.is_ipv4() {
                return Err(bad("brackets are for IPv6 addresses only"));
            }
            if !bracketed && ip.is_ipv6() && ports.is_some() {
                return Err(bad(
                    "an IPv6 address or prefix followed by ports needs brackets: \"[2001:db8::]/32:80\"",
                ));
            }
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match len {
                None => max,
                Some(l) => match l.parse::<u8>() {
                    Ok(n) if n <= max && !l.starts_with('+') => n,
                    _ => return Err(bad(&format!("prefix length must be 0 to {max}"))),
                },
            };
            let net = Prefix::new(ip, len)
                .ok_or_else(|| bad(&format!("prefix length must be 0 to {max}")))?;
            if net.network() != ip {
                return Err(bad(&format!(
                    "host bits set below /{len} (the prefix is {}/{len})",
                    net.network()
                )));
            }
            // ::ffff:0:0/96 and longer: the IPv4 prefix it maps.
            match ip {
                IpAddr::V6(a) if len >= 96 => match a.to_ipv4_mapped() {
                    Some(v4) => Prefix::new(IpAddr::V4(v4), len - 96),
                    None => Some(net),
                },
                _ => Some(net),
            }
        };
        let ports = match ports {
            None => None,
            Some(p) => {
                let port = |x: &str| match x.parse::<u16>() {
                    Ok(n) if n > 0 && !x.starts_with('+') => Ok(n),
                    _ => Err(bad("ports must be PORT or LOW-HIGH, each 1 to 65535")),
                };
                let (lo, hi) = match p.split_once('-') {
                    Some((a, b)) => (port(a)?, port(b)?),
                    None => (port(p)?, port(p)?),
                };
                if lo > hi {
                    return Err(bad("port range LOW-HIGH needs LOW <= HIGH"));
                }
                Some((lo, hi))
            }
        };
        Ok(DestRule { net, ports })
    }
}

impl fmt::Display for DestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.net, self.ports.is_some()) {
            (None, _) => f.write_str("*")?,
            (Some(n), true) if n.addr().is_ipv6() => write!(f, "[{}]", n.addr())?,
            (Some(n), _) => write!(f, "{}", n.addr())?,
        }
        if let Some(n) = self.net
            && !n.is_host()
        {
            write!(f, "/{}", n.len())?;
        }
        match self.ports {
            Some((lo, hi)) if lo == hi => write!(f, ":{lo}"),
            Some((lo, hi)) => write!(f, ":{lo}-{hi}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for DestRule {
    type Error = String;

    fn try_from(s: String) -> Result<DestRule, String> {
        s.parse()
    }
}

impl From<DestRule> for String {
    fn from(r: DestRule) -> String {
        r.to_string()
    }
}

/// Why the policy refused a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It matches this `deny` entry.
    Denied(DestRule),
    /// It is in a range refused by default; the text names the range.
    Special(&'static str),
    /// It is one of the relay's own addresses.
    Local,
    /// `allow` is given and no entry of it matches.
    NotAllowed,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Denied(r) => write!(f, "matches deny entry \"{r}\""),
            Refusal::Special(what) => write!(f, "{what} address, refused unless allowed"),
            Refusal::Local => {
                f.write_str("one of the relay's own addresses, refused unless allowed")
            }
            Refusal::NotAllowed => f.write_str("matches no allow entry"),
        }
    }
}

/// A range of addresses refused by default.
#[derive(Debug, Clone, Copy)]
struct Range {
    net: Prefix,
    /// Names the range in refusals and logs.
    what: &'static str,
    /// Whether a router may forward a packet addressed into the range. The transparent
    /// listener refuses only the ranges that are not (see [`check_transparent`]).
    forwarded: bool,
}

/// A prefix of a table below; a length too long for the family stops the build (the
/// tables are constants, evaluated when compiled).
const fn net(addr: IpAddr, len: u8) -> Prefix {
    let Some(net) = Prefix::new(addr, len) else {
        panic!("a prefix longer than its family");
    };
    net
}

const fn range(addr: IpAddr, len: u8, what: &'static str, forwarded: bool) -> Range {
    Range {
        net: net(addr, len),
        what,
        forwarded,
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

const fn v6(s: [u16; 8]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
    ))
}

/// The IPv4 ranges refused by default, the first match naming the range.
const SPECIAL_V4: [Range; 6] = [
    range(v4(0, 0, 0, 0), 8, "unspecified (0.0.0.0/8)", false),
    range(v4(127, 0, 0, 0), 8, "loopback", false),
    // Holds the cloud metadata service 169.254.169.254; routers never forward it.
    range(v4(169, 254, 0, 0), 16, "link-local", false),
    range(v4(224, 0, 0, 0), 4, "multicast", false),
    range(v4(255, 255, 255, 255), 32, "broadcast", false),
    // 240.0.0.0/4 is reserved, but Linux routes and forwards it like unicast.
    range(v4(240, 0, 0, 0), 4, "reserved", true),
];

/// The IPv6 ranges refused by default (the IPv4-mapped range is unmapped before), the
/// first match naming the range.
const SPECIAL_V6: [Range; 6] = [
    range(v6([0; 8]), 128, "unspecified (::)", false),
    range(v6([0, 0, 0, 0, 0, 0, 0, 1]), 128, "loopback", false),
    // Deprecated IPv4-compatible addresses ::a.b.c.d (RFC 4291 2.5.5.1); a `sit` device
    // routes ::/96 into IPv4, to a.b.c.d itself.
    range(v6([0; 8]), 96, "IPv4-compatible (::/96)", false),
    range(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10, "link-local", false),
    range(v6([0xff00, 0, 0, 0, 0, 0, 0, 0]), 8, "multicast", false),
    // The IPv6 address of the cloud metadata service (EC2 IMDS on Nitro), answered to
    // the instance itself like 169.254.169.254: what it tells the relay (credentials)
    // is no client's business. The rest of fd00::/8 is ordinary ULA space.
    range(
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]),
        128,
        "cloud metadata (fd00:ec2::254)",
        false,
    ),
];

/// The NAT64 prefixes whose addresses carry an IPv4 address in their last 32 bits, which
/// a NAT64 gateway reaches: the well-known 64:ff9b::/96 (RFC 6052) and the local-use
/// 64:ff9b:1::/48 (RFC 8215). The IPv4 ranges are refused in these forms too. Within
/// 64:ff9b:1::/48 the IPv4 address is read where a /96 NAT64 prefix puts it; an operator
/// whose gateway uses a shorter prefix there (RFC 6052 2.2) lists it in `deny`.
const NAT64: [Prefix; 2] = [
    net(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]), 96),
    net(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]), 48),
];

/// The special range `ip` (unmapped) is in: its prefix (for a NAT64 address, the NAT64
/// form of the IPv4 range, inside the address's /96) and what it is.
fn special(ip: IpAddr) -> Option<(Prefix, &'static Range)> {
    let table: &'static [Range] = match ip {
        IpAddr::V4(_) => &SPECIAL_V4,
        IpAddr::V6(a) => {
            if NAT64.iter().any(|n| n.contains(ip)) {
                let bits = u128::from(a);
                let (inner, r) = special(IpAddr::V4(Ipv4Addr::from(bits as u32)))?;
                let IpAddr::V4(n4) = inner.network() else {
                    return None;
                };
                let outer = bits & !u128::from(u32::MAX) | u128::from(u32::from(n4));
                let net = Prefix::new(IpAddr::V6(Ipv6Addr::from(outer)), 96 + inner.len())?;
                return Some((net, r));
            }
            &SPECIAL_V6
        }
    };
    table
        .iter()
        .find(|r| r.net.contains(ip))
        .map(|r| (r.net, r))
}

/// The decision for `dst`, given the lists and a test for the relay's own addresses
/// (called only for an address no other rule has decided). See the module documentation
/// for the order.
pub(crate) fn decide(
    allow: &[DestRule],
    deny: &[DestRule],
    is_local: impl FnOnce(IpAddr) -> bool,
    dst: SocketAddr,
) -> Result<(), Refusal> {
    let dst = unmap(dst);
    if let Some(d) = deny.iter().find(|r| r.matches(dst)) {
        return Err(Refusal::Denied(*d));
    }
    let class = match special(dst.ip()) {
        Some((net, r)) => Some((net, Refusal::Special(r.what))),
        None if is_local(dst.ip()) => Some((Prefix::host(dst.ip()), Refusal::Local)),
        None => None,
    };
    let matching = || allow.iter().filter(|r| r.matches(dst));
    if let Some((range, refusal)) = class {
        let lifted = matching().any(|r| r.net.is_some_and(|n| n.is_within(&range)));
        return if lifted { Ok(()) } else { Err(refusal) };
    }
    if !allow.is_empty() && matching().next().is_none() {
        return Err(Refusal::NotAllowed);
    }
    Ok(())
}

/// Whether the transparent listener may connect to `dst`, the original destination of a
/// diverted connection (an IPv4-mapped address as IPv4). Refused: an address that would
/// reach the relay itself (unspecified, loopback, IPv4-compatible, or one the kernel's
/// routing delivers locally, probed with the upstream sockets' `mark`) and one a router
/// never forwards (link-local, multicast, broadcast, the cloud metadata address), also
/// in NAT64 form. The TPROXY rules divert none of these in a sane set-up
/// (`-m addrtype ! --dst-type LOCAL`, and `::` kept out by [`crate::tproxy`]), but a packet
/// addressed to `::` is not LOCAL and the accepted socket's `::` connects to `::1`:
/// this check is what keeps the relay's loopback services out of reach whatever the rules.
pub(crate) fn check_transparent(dst: SocketAddr, mark: u32) -> Result<(), Refusal> {
    let ip = dst.ip().to_canonical();
    if let Some((_, r)) = special(ip)
        && !r.forwarded
    {
        return Err(Refusal::Special(r.what));
    }
    if routes_to_self(ip, mark) {
        return Err(Refusal::Local);
    }
    Ok(())
}

/// A listener's policy: its lists, and the relay's own addresses.
#[derive(Debug)]
pub(crate) struct DestPolicy {
    allow: Vec<DestRule>,
    deny: Vec<DestRule>,
    /// The mark the upstream sockets carry, for the routing probe (same routing).
    mark: u32,
    local: RwLock<Arc<[IpAddr]>>,
}

impl DestPolicy {
    /// The policy of `allow` and `deny`, with the relay's addresses read now.
    pub(crate) fn new(allow: Vec<DestRule>, deny: Vec<DestRule>, mark: u32) -> io::Result<Self> {
        Ok(DestPolicy {
            allow,
            deny,
            mark,
            local: RwLock::new(local_addresses()?.into()),
        })
    }

    /// Reads the relay's addresses again; returns how many there are.
    pub(crate) fn refresh(&self) -> io::Result<usize> {
        let new: Arc<[IpAddr]> = local_addresses()?.into();
        let n = new.len();
        match self.local.write() {
            Ok(mut g) => *g = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
        Ok(n)
    }

    /// Whether the proxy may connect to `dst`.
    pub(crate) fn check(&self, dst: SocketAddr) -> Result<(), Refusal> {
        let local = match self.local.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        };
        decide(
            &self.allow,
            &self.deny,
            |ip| local.contains(&ip) || routes_to_self(ip, self.mark),
            dst,
        )
    }
}

/// Whether the kernel would deliver a packet to `ip` locally: the source it picks for a
/// connected UDP socket (no packet is sent) is the destination itself only for a local
/// route. Any error answers false (the TCP connect then fails on its own).
fn routes_to_self(ip: IpAddr, mark: u32) -> bool {
    let dst = SocketAddr::new(ip, 9);
    let Ok(s) = Socket::new(Domain::for_address(dst), Type::DGRAM, None) else {
        return false;
    };
    if mark != 0 {
        let _ = s.set_mark(mark);
    }
    if s.connect(&dst.into()).is_err() {
        return false;
    }
    s.local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .is_some_and(|a| unmap(a).ip() == ip)
}

/// Lets one log line a second through for a listener, counting those held back: a
/// [`RateLimit`] of 1 a second shared by the listener's connection tasks (the lock is
/// held only to take a token, and only when a connection is refused).
#[derive(Debug)]
pub(crate) struct LogLimit(Mutex<RateLimit>);

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit(Mutex::new(RateLimit::new(1)))
    }
}

impl LogLimit {
    /// `Some(lines held back since the last one)` if a line may be logged now.
    pub(crate) fn ready(&self) -> Option<u64> {
        self.ready_at(Instant::now())
    }

    fn ready_at(&self, now: Instant) -> Option<u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allow(now)
    }
}

#[cfg(test)]
mod tests;
