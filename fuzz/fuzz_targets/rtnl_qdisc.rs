//! The rtnetlink tc dump parsers (crates/netlink `rtnl.rs`): the qdisc dump the egress
//! queue monitor runs every millisecond (netlink framing, NLMSG_DONE / NLMSG_ERROR, the
//! tcmsg header, TCA_KIND, TCA_STATS2 / TCA_STATS_QUEUE and tbf's TCA_OPTIONS:
//! TCA_TBF_PARMS, TCA_TBF_RATE64), and the class dump `relayd status` reads (TCA_STATS2's
//! basic, 64-bit packet and queue counters), each on the same datagram.
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
    let mut classes = 0usize;
    let _ = relay_netlink::fuzz_parse_class_dump(data, 1, |c| {
        classes += 1;
        let _ = (c.handle, c.parent, c.bytes, c.packets, c.drops, c.overlimits);
    });
    assert!(classes * 36 <= data.len());
});
