//! The box's own addresses, and which destinations a packet relayd forwards itself may
//! have. A decapsulated packet that relayd sends from a raw socket is routed like one the
//! box originates: to one of its own addresses, or to loopback, it would be delivered
//! locally, arriving from `lo` where firewalls usually trust everything. A peer that can
//! forge its outer source could then reach services bound to the relay itself, which the
//! kernel's own decapsulation never allows for loopback and which no router does for
//! addresses it cannot forward to. So the datapath refuses such packets
//! ([`relay_core::Route::Forward`]).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every address of every local interface (and the broadcast address of each IPv4 one),
/// IPv4-mapped ones as IPv4, in the calling thread's network namespace, sorted.
pub fn local_addresses() -> io::Result<Vec<IpAddr>> {
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
            out.push(ip.to_canonical());
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

/// A snapshot of [`local_addresses`], read again when a second old (on the batch clock, so
/// at most one `getifaddrs` a second per queue thread and none per packet).
#[derive(Debug)]
pub struct LocalAddrs {
    addrs: Arc<[IpAddr]>,
    read: Option<Instant>,
}

impl LocalAddrs {
    /// How long a snapshot serves.
    pub const MAX_AGE: Duration = Duration::from_secs(1);

    /// An empty snapshot, read on first use.
    pub fn new() -> LocalAddrs {
        LocalAddrs {
            addrs: Arc::from([]),
            read: None,
        }
    }

    /// Whether `ip` is one of the box's addresses as of at most [`LocalAddrs::MAX_AGE`]
    /// before `now`. If the addresses cannot be read, the last snapshot serves.
    pub fn contains(&mut self, ip: IpAddr, now: Instant) -> bool {
        self.snapshot(now).binary_search(&ip.to_canonical()).is_ok()
    }

    /// The box's addresses as of at most [`LocalAddrs::MAX_AGE`] before `now` (sorted,
    /// IPv4-mapped ones as IPv4), for the services' [`relay_core::Context`]: a clone of
    /// the same snapshot until it is read again, so no allocation per batch.
    pub fn snapshot(&mut self, now: Instant) -> &Arc<[IpAddr]> {
        self.renew(now);
        &self.addrs
    }

    /// The snapshot as [`LocalAddrs::snapshot`] gives it, but only when it was read anew
    /// at `now` (the first call, then at most once per [`LocalAddrs::MAX_AGE`]); `None`
    /// while the last one holds. A datapath hands the services its addresses only then:
    /// one clock comparison per batch.
    pub fn renewed(&mut self, now: Instant) -> Option<&Arc<[IpAddr]>> {
        self.renew(now).then_some(&self.addrs)
    }

    /// Reads the addresses again if the snapshot is older than [`LocalAddrs::MAX_AGE`];
    /// returns whether it did. If they cannot be read, the last snapshot serves.
    fn renew(&mut self, now: Instant) -> bool {
        let stale = self
            .read
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::MAX_AGE);
        if stale {
            if let Ok(a) = local_addresses() {
                self.addrs = a.into();
            }
            self.read = Some(now);
        }
        stale
    }
}

impl Default for LocalAddrs {
    fn default() -> Self {
        LocalAddrs::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_handed_on_only_when_renewed() {
        let mut l = LocalAddrs::new();
        let t = Instant::now();
        assert!(l.renewed(t).is_some(), "the first call reads");
        assert!(l.renewed(t + Duration::from_millis(500)).is_none());
        assert!(
            l.snapshot(t + Duration::from_millis(900))
                .contains(&IpAddr::from([127, 0, 0, 1]))
        );
        assert!(l.renewed(t + LocalAddrs::MAX_AGE).is_some(), "read again");
        assert!(l.renewed(t + LocalAddrs::MAX_AGE).is_none());
    }

    #[test]
    fn the_box_knows_its_loopback_address() {
        let mut local = LocalAddrs::new();
        let now = Instant::now();
        // Every namespace has lo; it may be down (no address) in a fresh one, so only
        // check that what getifaddrs lists is found and a documentation address is not.
        let all = local_addresses().unwrap();
        for a in &all {
            assert!(local.contains(*a, now), "{a}");
        }
        assert!(!local.contains("192.0.2.77".parse().unwrap(), now));
    }
}
