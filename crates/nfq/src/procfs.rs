//! The kernel's own view of each queue, from /proc/net/netfilter/nfnetlink_queue:
//! packets waiting, and packets the kernel dropped before relayd could see them.

use std::collections::BTreeMap;

/// One line of /proc/net/netfilter/nfnetlink_queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelQueueStats {
    /// Netlink port id of the bound program.
    pub portid: u32,
    /// Packets waiting for a verdict right now.
    pub queue_total: u32,
    /// Copy mode (2 = whole packet).
    pub copy_mode: u32,
    /// Copy range in bytes.
    pub copy_range: u32,
    /// Packets dropped because the queue was full (with fail-open off).
    pub queue_dropped: u64,
    /// Packets dropped because netlink could not deliver them (receive buffer full).
    pub user_dropped: u64,
    /// The last packet id handed out.
    pub id_sequence: u32,
}

/// Parses the file's text into per-queue stats (lines that do not parse are skipped).
pub fn parse(text: &str) -> BTreeMap<u16, KernelQueueStats> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let n = |i: usize| f[i].parse::<u64>().ok();
        let (
            Some(q),
            Some(portid),
            Some(total),
            Some(mode),
            Some(range),
            Some(qd),
            Some(ud),
            Some(seq),
        ) = (n(0), n(1), n(2), n(3), n(4), n(5), n(6), n(7))
        else {
            continue;
        };
        let Ok(q) = u16::try_from(q) else { continue };
        out.insert(
            q,
            KernelQueueStats {
                portid: portid as u32,
                queue_total: total as u32,
                copy_mode: mode as u32,
                copy_range: range as u32,
                queue_dropped: qd,
                user_dropped: ud,
                id_sequence: seq as u32,
            },
        );
    }
    out
}

/// Reads the current network namespace's queue stats (empty if the module is not loaded).
pub fn read() -> BTreeMap<u16, KernelQueueStats> {
    std::fs::read_to_string("/proc/net/netfilter/nfnetlink_queue")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_kernel_lines() {
        let t =
            "    0  12345     3 2 65535     7     9    100  1\n   12 99 0 2 128 0 0 5 1\ngarbage\n";
        let m = super::parse(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[&0].queue_dropped, 7);
        assert_eq!(m[&0].user_dropped, 9);
        assert_eq!(m[&12].copy_range, 128);
    }
}
