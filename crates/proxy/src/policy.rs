//! The SOCKS5 destination policy: which CONNECT destinations the proxy connects to.
//!
//! A SOCKS5 proxy connects *from the relay*: without a policy any client could reach the
//! relay's loopback services, its own addresses and the link-local metadata services
//! (169.254.169.254) as if it ran on the relay. The policy is applied after the request
//! is parsed and, for a domain name, to every resolved address before it is tried, in
//! this order:
//!
//! 1. An entry of `deny` matches: refused.
//! 2. The address is special (loopback, unspecified, link-local, multicast, broadcast,
//!    reserved, and their IPv4-mapped, IPv4-compatible and NAT64 forms) or one of the
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

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use socket2::{Domain, Socket, Type};

use crate::sock::unmap;

/// An address prefix of one family, host bits clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Net {
    V4(u32, u8),
    V6(u128, u8),
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl Net {
    /// The host prefix of `ip` (IPv4-mapped addresses as IPv4).
    fn host(ip: IpAddr) -> Net {
        match unmap_ip(ip) {
            IpAddr::V4(a) => Net::V4(a.into(), 32),
            IpAddr::V6(a) => Net::V6(a.into(), 128),
        }
    }

    /// Whether `ip` (already unmapped) is inside.
    fn contains(&self, ip: IpAddr) -> bool {
        match (*self, ip) {
            (Net::V4(n, l), IpAddr::V4(a)) => u32::from(a) & mask32(l) == n,
            (Net::V6(n, l), IpAddr::V6(a)) => u128::from(a) & mask128(l) == n,
            _ => false,
        }
    }

    /// Whether every address of `self` is inside `outer`.
    fn within(&self, outer: &Net) -> bool {
        match (*self, *outer) {
            (Net::V4(n, l), Net::V4(o, ol)) => l >= ol && n & mask32(ol) == o,
            (Net::V6(n, l), Net::V6(o, ol)) => l >= ol && n & mask128(ol) == o,
            _ => false,
        }
    }

    fn max_len(&self) -> u8 {
        match self {
            Net::V4(..) => 32,
            Net::V6(..) => 128,
        }
    }

    fn len(&self) -> u8 {
        match self {
            Net::V4(_, l) | Net::V6(_, l) => *l,
        }
    }

    fn addr(&self) -> IpAddr {
        match *self {
            Net::V4(n, _) => IpAddr::V4(Ipv4Addr::from(n)),
            Net::V6(n, _) => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 one; others unchanged.
fn unmap_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

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
    /// `None`: any address.
    net: Option<Net>,
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
            let net = match ip {
                IpAddr::V4(a) => Net::V4(u32::from(a) & mask32(len), len),
                IpAddr::V6(a) => Net::V6(u128::from(a) & mask128(len), len),
            };
            if net.addr() != ip {
                return Err(bad(&format!(
                    "host bits set below /{len} (the prefix is {}/{len})",
                    net.addr()
                )));
            }
            // ::ffff:0:0/96 and longer: the IPv4 prefix it maps.
            match net {
                Net::V6(n, l) if l >= 96 && n >> 32 == 0xffff => Some(Net::V4(n as u32, l - 96)),
                n => Some(n),
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
            (Some(n @ Net::V6(..)), true) => write!(f, "[{}]", n.addr())?,
            (Some(n), _) => write!(f, "{}", n.addr())?,
        }
        if let Some(n) = self.net
            && n.len() != n.max_len()
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

/// The IPv4 ranges refused by default.
const SPECIAL_V4: [(u32, u8, &str); 5] = [
    (0x0000_0000, 8, "unspecified (0.0.0.0/8)"),
    (0x7f00_0000, 8, "loopback"),
    (0xa9fe_0000, 16, "link-local"),
    (0xe000_0000, 4, "multicast"),
    // 240.0.0.0/4 is reserved; it holds the limited broadcast 255.255.255.255.
    (0xf000_0000, 4, "reserved or broadcast"),
];

/// The IPv6 ranges refused by default (the IPv4-mapped range is unmapped before).
const SPECIAL_V6: [(u128, u8, &str); 5] = [
    (0, 128, "unspecified (::)"),
    (1, 128, "loopback"),
    // Deprecated IPv4-compatible addresses ::a.b.c.d (RFC 4291 2.5.5.1).
    (0, 96, "IPv4-compatible (::/96)"),
    (0xfe80 << 112, 10, "link-local"),
    (0xff00 << 112, 8, "multicast"),
];

/// The NAT64 well-known prefix (RFC 6052): 64:ff9b::a.b.c.d reaches a.b.c.d through a
/// NAT64 gateway, so the IPv4 ranges are refused in that form too.
const NAT64: u128 = 0x0064_ff9b << 96;

/// The special range `ip` (unmapped) is in, with its name.
fn special(ip: IpAddr) -> Option<(Net, &'static str)> {
    match ip {
        IpAddr::V4(a) => {
            let a = u32::from(a);
            SPECIAL_V4
                .iter()
                .find(|(n, l, _)| a & mask32(*l) == *n)
                .map(|(n, l, what)| (Net::V4(*n, *l), *what))
        }
        IpAddr::V6(a) => {
            let a = u128::from(a);
            if a >> 32 == NAT64 >> 32 {
                let (n, what) = special(IpAddr::V4(Ipv4Addr::from(a as u32)))?;
                let Net::V4(n4, l4) = n else { return None };
                return Some((Net::V6(NAT64 | u128::from(n4), 96 + l4), what));
            }
            SPECIAL_V6
                .iter()
                .find(|(n, l, _)| a & mask128(*l) == *n)
                .map(|(n, l, what)| (Net::V6(*n, *l), *what))
        }
    }
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
        Some((net, what)) => Some((net, Refusal::Special(what))),
        None if is_local(dst.ip()) => Some((Net::host(dst.ip()), Refusal::Local)),
        None => None,
    };
    let matching = || allow.iter().filter(|r| r.matches(dst));
    if let Some((range, refusal)) = class {
        let lifted = matching().any(|r| r.net.is_some_and(|n| n.within(&range)));
        return if lifted { Ok(()) } else { Err(refusal) };
    }
    if !allow.is_empty() && matching().next().is_none() {
        return Err(Refusal::NotAllowed);
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

/// Every address of every local interface (and the broadcast address of each IPv4
/// one), IPv4-mapped ones as IPv4, in the calling thread's network namespace.
pub(crate) fn local_addresses() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a live out-pointer; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        // SAFETY: a null or valid sockaddr of the list.
        if let Some(ip) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            out.push(unmap_ip(ip));
        }
        if ifa.ifa_flags & libc::IFF_BROADCAST as libc::c_uint != 0 {
            // SAFETY: with IFF_BROADCAST, ifa_ifu is the broadcast address (or null).
            if let Some(ip @ IpAddr::V4(_)) = unsafe { sockaddr_ip(ifa.ifa_ifu) } {
                out.push(ip);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    Ok(out)
}

/// The address of an `AF_INET` or `AF_INET6` sockaddr; `None` for null or another family.
///
/// # Safety
/// `sa` is null or points to a sockaddr whose storage fits its family.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null, points to at least a sockaddr (caller's contract).
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: AF_INET storage is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 storage is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
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

/// Lets one log line through per second, counting those held back.
#[derive(Debug)]
pub(crate) struct LogLimit {
    start: Instant,
    /// Milliseconds since `start` before which lines are held back.
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit {
            start: Instant::now(),
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }
}

impl LogLimit {
    /// `Some(lines held back since the last one)` if a line may be logged now.
    pub(crate) fn ready(&self) -> Option<u64> {
        let now = self.start.elapsed().as_millis() as u64;
        let next = self.next_ms.load(Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(next, now + 1000, Relaxed, Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Relaxed));
        }
        self.suppressed.fetch_add(1, Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<DestRule> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The decision with the given lists and no own address.
    fn d(allow: &[&str], deny: &[&str], dst: &str) -> Result<(), Refusal> {
        decide(&rules(allow), &rules(deny), |_| false, sa(dst))
    }

    #[test]
    fn every_special_range_is_refused_by_default() {
        for dst in [
            "127.0.0.1:22",
            "127.255.255.254:80",
            "0.0.0.0:80",
            "0.1.2.3:80",
            "169.254.169.254:80",
            "224.0.0.1:80",
            "239.255.255.250:1900",
            "240.0.0.1:80",
            "255.255.255.255:80",
            "[::1]:22",
            "[::]:80",
            "[::127.0.0.1]:80",
            "[fe80::1]:80",
            "[febf::1]:80",
            "[ff02::1]:80",
            // IPv4-mapped forms.
            "[::ffff:127.0.0.1]:22",
            "[::ffff:0.0.0.0]:22",
            "[::ffff:169.254.169.254]:80",
            "[::ffff:224.0.0.1]:80",
            "[::ffff:255.255.255.255]:80",
            // NAT64 forms.
            "[64:ff9b::127.0.0.1]:22",
            "[64:ff9b::169.254.169.254]:80",
        ] {
            assert!(
                matches!(d(&[], &[], dst), Err(Refusal::Special(_))),
                "{dst}: {:?}",
                d(&[], &[], dst)
            );
        }
        for dst in [
            "10.0.2.2:80",
            "192.168.1.1:443",
            "126.255.255.255:80",
            "128.0.0.1:80",
            "169.253.0.1:80",
            "223.255.255.255:80",
            "[2001:db8::1]:80",
            "[fd00::1]:80",
            "[fec0::1]:80",
            "[::1:0:0:1]:80",
            "[::ffff:10.0.2.2]:80",
            "[64:ff9b::10.0.2.2]:80",
        ] {
            assert_eq!(d(&[], &[], dst), Ok(()), "{dst}");
        }
    }

    #[test]
    fn own_addresses_are_refused_unless_named() {
        let own = |ip: IpAddr| ip == "10.0.1.2".parse::<IpAddr>().unwrap();
        let check = |allow: &[&str], dst: &str| decide(&rules(allow), &[], own, sa(dst));
        assert_eq!(check(&[], "10.0.1.2:22"), Err(Refusal::Local));
        assert_eq!(check(&[], "[::ffff:10.0.1.2]:22"), Err(Refusal::Local));
        assert_eq!(check(&[], "10.0.1.3:22"), Ok(()));
        // A prefix that holds the address does not re-allow it; the address itself does.
        assert_eq!(check(&["10.0.1.0/24"], "10.0.1.2:22"), Err(Refusal::Local));
        assert_eq!(check(&["10.0.1.0/24"], "10.0.1.3:22"), Ok(()));
        assert_eq!(check(&["10.0.1.2:8080"], "10.0.1.2:8080"), Ok(()));
        assert_eq!(
            check(&["10.0.1.2:8080"], "10.0.1.2:22"),
            Err(Refusal::Local)
        );
    }

    #[test]
    fn allow_re_allows_a_special_range_only_from_inside_it() {
        assert_eq!(d(&["127.0.0.1:8080"], &[], "127.0.0.1:8080"), Ok(()));
        assert_eq!(
            d(&["127.0.0.1:8080"], &[], "[::ffff:127.0.0.1]:8080"),
            Ok(())
        );
        assert!(d(&["127.0.0.1:8080"], &[], "127.0.0.1:22").is_err());
        assert!(d(&["127.0.0.1:8080"], &[], "127.0.0.2:8080").is_err());
        assert_eq!(d(&["127.0.0.0/8"], &[], "127.9.9.9:1"), Ok(()));
        assert_eq!(d(&["::ffff:127.0.0.0/104"], &[], "127.9.9.9:1"), Ok(()));
        assert_eq!(d(&["[::1]:631"], &[], "[::1]:631"), Ok(()));
        assert_eq!(d(&["fe80::/10"], &[], "[fe80::1]:80"), Ok(()));
        // Wide entries do not open the special ranges.
        for wide in ["0.0.0.0/0", "*", "*:8080", "::/0", "126.0.0.0/7"] {
            assert_eq!(
                d(&[wide], &[], "127.0.0.1:8080"),
                Err(Refusal::Special("loopback")),
                "{wide}"
            );
        }
        assert!(d(&["::/0"], &[], "[::1]:8080").is_err());
        assert!(d(&["::/96"], &[], "[::1]:8080").is_err());
    }

    #[test]
    fn deny_wins_and_allow_makes_an_allow_list() {
        // deny before allow, even when allow names the destination exactly.
        assert!(matches!(
            d(&["10.0.2.2"], &["10.0.0.0/8"], "10.0.2.2:80"),
            Err(Refusal::Denied(_))
        ));
        assert!(matches!(
            d(&["127.0.0.1"], &["127.0.0.1:22"], "127.0.0.1:22"),
            Err(Refusal::Denied(_))
        ));
        assert_eq!(d(&["127.0.0.1"], &["127.0.0.1:22"], "127.0.0.1:80"), Ok(()));
        // With allow entries, everything else is refused.
        assert_eq!(d(&["10.0.0.0/8"], &[], "10.9.9.9:80"), Ok(()));
        assert_eq!(
            d(&["10.0.0.0/8"], &[], "192.0.2.1:80"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            d(&["10.0.0.0/8"], &[], "[2001:db8::1]:80"),
            Err(Refusal::NotAllowed)
        );
        // Without, everything not special and not denied is allowed.
        assert_eq!(d(&[], &["*:25"], "192.0.2.1:80"), Ok(()));
        assert!(d(&[], &["*:25"], "192.0.2.1:25").is_err());
        assert!(d(&[], &["*:25"], "[2001:db8::1]:25").is_err());
        // An IPv4 deny covers the IPv4-mapped form.
        assert!(d(&[], &["192.0.2.0/24"], "[::ffff:192.0.2.7]:80").is_err());
    }

    #[test]
    fn ports_and_ranges() {
        assert_eq!(d(&["192.0.2.1:443"], &[], "192.0.2.1:443"), Ok(()));
        assert!(d(&["192.0.2.1:443"], &[], "192.0.2.1:444").is_err());
        let r = ["[2001:db8::]/32:80-90"];
        assert!(d(&r, &[], "[2001:db8::1]:79").is_err());
        assert_eq!(d(&r, &[], "[2001:db8::1]:80"), Ok(()));
        assert_eq!(d(&r, &[], "[2001:db8:ffff::1]:90"), Ok(()));
        assert!(d(&r, &[], "[2001:db8::1]:91").is_err());
        assert!(d(&r, &[], "[2001:db9::1]:80").is_err());
        assert!(d(&r, &[], "10.0.0.1:80").is_err());
    }

    #[test]
    fn grammar_round_trips_and_refuses_typos() {
        for (s, canon) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("192.0.2.1", "192.0.2.1"),
            ("192.0.2.1/32", "192.0.2.1"),
            ("192.0.2.1:443", "192.0.2.1:443"),
            ("192.0.2.0/24:1-1024", "192.0.2.0/24:1-1024"),
            ("2001:db8::/32", "2001:db8::/32"),
            ("2001:db8::1", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("[2001:db8::1]:443", "[2001:db8::1]:443"),
            ("[2001:db8::]/32:80-90", "[2001:db8::]/32:80-90"),
            ("::1", "::1"),
            ("::", "::"),
            ("::/0", "::/0"),
            ("*", "*"),
            ("*:25", "*:25"),
            ("*:80-80", "*:80"),
            ("::ffff:127.0.0.1", "127.0.0.1"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
            (" 10.0.0.0/8 ", "10.0.0.0/8"),
        ] {
            let r: DestRule = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(r.to_string(), canon, "{s}");
            assert_eq!(canon.parse::<DestRule>().unwrap(), r, "{canon}");
        }
        for (s, why) in [
            ("", "not an IP"),
            ("10.0.0.1/8", "host bits"),
            ("10.0.0.0/33", "0 to 32"),
            ("2001:db8::/129", "0 to 128"),
            ("2001:db8::/32:80", "brackets"),
            ("[10.0.0.1]:80", "IPv6 addresses only"),
            ("[2001:db8::1:80", "missing `]`"),
            ("10.0.0.1:0", "1 to 65535"),
            ("10.0.0.1:65536", "1 to 65535"),
            ("10.0.0.1:90-80", "LOW <= HIGH"),
            ("10.0.0.1:", "1 to 65535"),
            ("10.0.0.1:+80", "1 to 65535"),
            ("*/8", "no prefix length"),
            ("example.org", "not an IP"),
            ("10.0.0.0/8x", "0 to 32"),
            ("[2001:db8::1]x", "expected"),
        ] {
            let e = s.parse::<DestRule>().unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn serde_reads_and_writes_strings() {
        let v: Vec<DestRule> = serde_json::from_str(r#"["10.0.0.0/8","[::1]:80"]"#).unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"["10.0.0.0/8","[::1]:80"]"#
        );
        let e = serde_json::from_str::<Vec<DestRule>>(r#"["10.0.0.1/8"]"#).unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
    }

    #[test]
    fn local_addresses_include_loopback_and_the_route_probe_sees_them() {
        let all = local_addresses().unwrap();
        assert!(all.iter().any(|a| a.is_loopback()), "{all:?}");
        assert!(routes_to_self(IpAddr::V4(Ipv4Addr::LOCALHOST), 0));
        // A documentation address is never local (and may have no route at all).
        assert!(!routes_to_self("192.0.2.1".parse().unwrap(), 0));
    }

    #[test]
    fn log_limit_lets_one_line_a_second() {
        let l = LogLimit::default();
        assert_eq!(l.ready(), Some(0));
        assert_eq!(l.ready(), None);
        assert_eq!(l.ready(), None);
        l.next_ms.store(0, Relaxed);
        assert_eq!(l.ready(), Some(2));
    }
}
