//! EVE JSON alert lines, written by one background thread per service configuration,
//! which relayd starts from the service's manifest on a file it opened (never `relayd check`).
//!
//! Queue threads hand over a small plain record through a bounded channel with `try_send`,
//! so a slow disk never blocks the packet path: when the channel is full the line is
//! dropped and counted (`eve_dropped`). The writer batches what it finds waiting into one
//! `write` per batch (whole lines, file opened in append mode, so a reload's new writer and
//! the old one never interleave inside a line) and flushes when the channel runs dry and
//! when the service is dropped.

use crate::rules::set::RuleSet;
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One alert, as the packet thread hands it over: plain data, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertEvent {
    /// Wall-clock time of the alert.
    pub time: SystemTime,
    /// Index of the rule in its [`RuleSet`].
    pub rule: u32,
    /// True if the packet was stopped (drop, reject, ratelimit): EVE `"blocked"`.
    pub blocked: bool,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (TCP/UDP), else `None`.
    pub sport: Option<u16>,
    /// Destination port (TCP/UDP), else `None`.
    pub dport: Option<u16>,
    /// IP protocol number.
    pub proto: u8,
    /// ICMP type and code, for ICMP.
    pub icmp: Option<(u8, u8)>,
    /// The flow id (see [`flow_id`]).
    pub flow_id: u64,
}

#[derive(Serialize)]
struct Line<'a> {
    timestamp: String,
    flow_id: u64,
    event_type: &'static str,
    src_ip: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    src_port: Option<u16>,
    dest_ip: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    dest_port: Option<u16>,
    proto: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    icmp_type: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    icmp_code: Option<u8>,
    alert: AlertObj<'a>,
}

#[derive(Serialize)]
struct AlertObj<'a> {
    action: &'static str,
    gid: u32,
    signature_id: u32,
    rev: u32,
    signature: &'a str,
    category: &'a str,
    severity: u8,
}

/// The EVE line (without the newline) for `ev`, whose rule is in `set`.
pub fn format_line(ev: &AlertEvent, set: &RuleSet) -> String {
    let r = &set.rules()[ev.rule as usize];
    let proto = match ev.proto {
        6 => "TCP".to_string(),
        17 => "UDP".to_string(),
        1 => "ICMP".to_string(),
        58 => "IPv6-ICMP".to_string(),
        n => n.to_string(),
    };
    let line = Line {
        timestamp: timestamp(ev.time),
        flow_id: ev.flow_id,
        event_type: "alert",
        src_ip: ev.src.to_string(),
        src_port: ev.sport,
        dest_ip: ev.dst.to_string(),
        dest_port: ev.dport,
        proto,
        icmp_type: ev.icmp.map(|i| i.0),
        icmp_code: ev.icmp.map(|i| i.1),
        alert: AlertObj {
            action: if ev.blocked { "blocked" } else { "allowed" },
            gid: r.gid,
            signature_id: r.sid,
            rev: r.rev,
            signature: &r.msg,
            category: &r.category,
            severity: r.priority,
        },
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// Suricata's timestamp format, in UTC: `2026-11-22T20:40:01.123456+0000`.
pub fn timestamp(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:06}+0000",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A 48-bit id of the flow (5-tuple, both directions alike), like Suricata's `flow_id`.
/// relayd keeps no flow table: the id is a hash, the same for every packet of the flow.
pub fn flow_id(a: IpAddr, b: IpAddr, pa: u16, pb: u16, proto: u8) -> u64 {
    let (ka, kb) = (crate::rules::rule::ip_key(a), crate::rules::rule::ip_key(b));
    let ((x, px), (y, py)) = if (ka, pa) <= (kb, pb) {
        ((ka, pa), (kb, pb))
    } else {
        ((kb, pb), (ka, pa))
    };
    // FNV-1a over the normalised tuple, then a final mix.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &byte in bytes {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    feed(&x.to_be_bytes());
    feed(&px.to_be_bytes());
    feed(&y.to_be_bytes());
    feed(&py.to_be_bytes());
    feed(&[proto]);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h & 0x0000_ffff_ffff_ffff
}

/// The EVE writer of one service configuration, shared by its queue threads.
#[derive(Debug)]
pub struct EveWriter {
    tx: Option<SyncSender<AlertEvent>>,
    thread: Option<JoinHandle<()>>,
}

impl EveWriter {
    /// Starts the writer thread on `file` (opened for appending by relayd, which owns the
    /// path: see the service's manifest); the channel holds up to `capacity` alerts.
    pub fn start(file: File, capacity: usize, set: Arc<RuleSet>) -> std::io::Result<EveWriter> {
        let (tx, rx) = sync_channel(capacity.max(1));
        let thread = std::thread::Builder::new()
            .name("relayd-eve".into())
            .spawn(move || run(rx, file, set))?;
        Ok(EveWriter {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hands an alert over without blocking; false if the channel was full (line lost).
    pub fn try_send(&self, ev: AlertEvent) -> bool {
        match &self.tx {
            Some(tx) => match tx.try_send(ev) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        }
    }
}

impl Drop for EveWriter {
    fn drop(&mut self) {
        // Closing the channel makes the thread write what is left and end.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(rx: Receiver<AlertEvent>, mut file: File, set: Arc<RuleSet>) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut failing = false;
    let mut flush = |buf: &mut Vec<u8>| {
        if buf.is_empty() {
            return;
        }
        match file.write_all(buf) {
            Ok(()) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot write EVE alerts; lines lost until it works again");
                }
                failing = true;
            }
        }
        buf.clear();
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(ev) => {
                push_line(&mut buf, &ev, &set);
                while let Ok(ev) = rx.try_recv() {
                    push_line(&mut buf, &ev, &set);
                    if buf.len() >= 60 * 1024 {
                        flush(&mut buf);
                    }
                }
                flush(&mut buf);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                flush(&mut buf);
                return;
            }
        }
    }
}

fn push_line(buf: &mut Vec<u8>, ev: &AlertEvent, set: &RuleSet) {
    buf.extend_from_slice(format_line(ev, set).as_bytes());
    buf.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamp_format() {
        // 2026-11-22T20:40:01.123456 UTC
        let t = UNIX_EPOCH + Duration::from_micros(1_795_380_001_123_456);
        assert_eq!(timestamp(t), "2026-11-22T20:40:01.123456+0000");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000+0000");
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn flow_id_is_direction_free() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(flow_id(a, b, 1000, 80, 6), flow_id(b, a, 80, 1000, 6));
        assert_ne!(flow_id(a, b, 1000, 80, 6), flow_id(a, b, 1001, 80, 6));
        assert!(flow_id(a, b, 1, 2, 17) < 1 << 48);
    }
}
