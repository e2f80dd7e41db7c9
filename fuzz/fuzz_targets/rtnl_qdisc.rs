//! The rtnetlink qdisc dump parser (crates/netlink `rtnl.rs`) that the egress queue
//! monitor runs every millisecond: netlink framing, NLMSG_DONE / NLMSG_ERROR, the tcmsg
//! header, TCA_KIND, TCA_STATS2 / TCA_STATS_QUEUE and tbf's TCA_OPTIONS (TCA_TBF_PARMS,
//! TCA_TBF_RATE64).
//!
//! Input: one received datagram, answering request sequence number 1.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut n = 0usize;
    let _ = relay_netlink::fuzz_parse_dump(data, 1, |q| {
        n += 1;
        let _ = (q.ifindex, q.backlog_bytes, q.qlen, q.drops, q.rate_bytes);
    });
    // Each reported qdisc had a 16-byte header and a 20-byte tcmsg of its own.
    assert!(n * 36 <= data.len());
});
