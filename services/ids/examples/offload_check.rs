//! Checks on real captures that offload votes lose nothing (docs/ids.md, "Offload"): each
//! capture is inspected twice with its rules, once as today and once with the offload the
//! votes ask for carried out (once a packet of a flow votes, that flow's later packets in
//! the vote's scope are not inspected, as the datapath would let the kernel forward them),
//! and the hits of the rules that alert or block must agree, the packets both runs inspect
//! get the same verdicts, and no packet skipped was dropped by the plain run.
//!
//! `cargo run --release -p relay-svc-ids --example offload_check -- [--depth N]
//! [--tls-bypass] [--verbose] DIR...`: each DIR holds a `test.rules` and a capture (the
//! one its `test.yaml` names, or its `*.pcap`), as suricata-verify's tests do. A directory whose rules do not all load
//! (as `strict = true`) or whose capture cannot be read is skipped. Prints, per run, the
//! directories compared, those where flows voted, the packets the offload skipped, and
//! every directory whose hits differ (exit 1 if any).

use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use relay_core::wire::ethernet::{EthernetFrame, ethertype};
use relay_core::wire::{link, proto};
use relay_core::{Checksum, Counters, OffloadScope, Packet};
use relay_svc_ids::{
    Detector, DetectorOptions, LoadOptions, OffloadOptions, Outcome, RuleAction, RuleSet,
    SURICATA_VARS,
};
use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The IP packets of a capture with their timestamps, or `None` if it cannot be read.
fn packets(path: &Path) -> Option<Vec<(Duration, Vec<u8>)>> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).ok()?;
    let f = std::io::BufReader::new(std::fs::File::open(path).ok()?);
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).ok()?;
        let mut links = Vec::new();
        while let Some(b) = r.next_block() {
            match b.ok()? {
                Block::InterfaceDescription(i) => links.push(i.linktype),
                Block::EnhancedPacket(p) => {
                    let l = *links.get(p.interface_id as usize)?;
                    if let Some(ip) = strip(l, &p.data) {
                        out.push((p.timestamp, ip.to_vec()));
                    }
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(f).ok()?;
        let l = r.header().datalink;
        while let Some(p) = r.next_packet() {
            let p = p.ok()?;
            if let Some(ip) = strip(l, &p.data) {
                out.push((p.timestamp, ip.to_vec()));
            }
        }
    }
    Some(out)
}

/// The IP packet inside a link-layer frame.
fn strip(l: DataLink, frame: &[u8]) -> Option<&[u8]> {
    match l {
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(frame),
        DataLink::ETHERNET => {
            let (ty, off) = EthernetFrame::new_checked(frame).ok()?.network()?;
            matches!(ty, ethertype::IPV4 | ethertype::IPV6).then_some(frame.get(off..)?)
        }
        DataLink::LINUX_SLL => link::sll(frame),
        DataLink::LINUX_SLL2 => link::sll2(frame),
        DataLink::NULL => link::bsd_loopback(frame, false),
        DataLink::LOOP => link::bsd_loopback(frame, true),
        _ => None,
    }
}

/// A flow direction: (protocol, source, source port, destination, destination port).
type Way = (u8, std::net::IpAddr, u16, std::net::IpAddr, u16);

fn way(p: &mut Packet) -> Option<Way> {
    let ip = p.ip()?;
    let (src, dst, pr) = (ip.src_addr(), ip.dst_addr(), p.layout().ok()?.proto);
    let ports = match pr {
        proto::TCP => p.tcp().map(|t| (t.src_port(), t.dst_port()))?,
        proto::UDP => p.udp().map(|u| (u.src_port(), u.dst_port()))?,
        _ => return None,
    };
    Some((pr, src, ports.0, dst, ports.1))
}

/// What one run saw: hits per sid, outcomes of the packets it inspected, votes and skips.
#[derive(Default)]
struct Run {
    hits: BTreeMap<String, u64>,
    /// Per packet: its outcome (`None`: skipped) and whether a rule matched it.
    outcomes: Vec<Option<(Outcome, bool)>>,
    voted_flows: usize,
    skipped: usize,
}

fn run(set: &Arc<RuleSet>, pkts: &[(Duration, Vec<u8>)], o: &DetectorOptions, carry: bool) -> Run {
    let c = Counters::new();
    let mut d = Detector::with_options(set.clone(), &c, None, o.clone());
    let base = Instant::now();
    let mut off: HashSet<Way> = HashSet::new();
    let mut r = Run::default();
    let t0 = pkts.first().map_or(Duration::ZERO, |p| p.0);
    for (ts, bytes) in pkts {
        let mut p = Packet::from_bytes(bytes);
        // Captures: checksums not judged, as replay and Suricata's `-k none`.
        p.meta.csum = Checksum::Unknown;
        let w = way(&mut p);
        // A SYN opens a new connection on the tuple: conntrack makes a new entry for it
        // (a SYN in TIME_WAIT kills the old one), so its offload mark is gone.
        let syn = p.tcp().is_some_and(|t| t.flags() & 0x12 == 0x02);
        if let (true, Some(w)) = (syn, w) {
            off.remove(&w);
            off.remove(&(w.0, w.3, w.4, w.1, w.2));
        }
        if carry && w.is_some_and(|w| off.contains(&w)) {
            r.skipped += 1;
            r.outcomes.push(None);
            continue;
        }
        let out = d.inspect(&mut p, base + ts.saturating_sub(t0));
        r.outcomes
            .push(Some((out, d.matched_sids().next().is_some())));
        if let (Some(v), Some(w)) = (d.offload(), w) {
            let back = (w.0, w.3, w.4, w.1, w.2);
            let new = off.insert(w);
            if v.scope == OffloadScope::Both {
                off.insert(back);
            }
            r.voted_flows += usize::from(new);
        }
    }
    // Hits of the rules that alert or block: a `pass` rule's hit lets a packet through,
    // which the kernel does for an offloaded flow's packets too.
    let acts: HashSet<String> = set
        .rules()
        .iter()
        .filter(|r| r.action != RuleAction::Pass)
        .map(|r| format!("sid:{}", r.sid))
        .collect();
    r.hits = c
        .snapshot()
        .into_iter()
        .filter(|(n, _, v)| acts.contains(n) && *v > 0)
        .map(|(n, _, v)| (n, v))
        .collect();
    r
}

/// The capture a suricata-verify `test.yaml` names (`pcap: PATH`, relative to the test).
fn named_pcap(dir: &Path) -> Option<PathBuf> {
    let yaml = std::fs::read_to_string(dir.join("test.yaml")).ok()?;
    let line = yaml.lines().find_map(|l| l.strip_prefix("pcap:"))?.trim();
    (line != "false").then(|| dir.join(line))
}

fn main() -> ExitCode {
    let mut o = DetectorOptions::default();
    o.offload = OffloadOptions {
        enabled: true,
        encrypted: false,
    };
    let (mut dirs, mut verbose) = (Vec::<PathBuf>::new(), false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--depth" => {
                o.flows.stream.depth = args.next().and_then(|v| v.parse().ok()).unwrap_or(0)
            }
            "--tls-bypass" => o.offload.encrypted = true,
            "--verbose" => verbose = true,
            d => dirs.push(d.into()),
        }
    }
    let vars: BTreeMap<String, String> = SURICATA_VARS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let (mut compared, mut voted, mut skipped, mut differ) = (0, 0, 0, Vec::new());
    let mut invalid = 0;
    for dir in &dirs {
        let rules = dir.join("test.rules");
        let Ok(set) = RuleSet::load(&LoadOptions {
            files: vec![rules],
            vars: vars.clone(),
            ..LoadOptions::default()
        }) else {
            continue;
        };
        if !set.errors().is_empty() || set.rules().is_empty() {
            continue;
        }
        let pcap = named_pcap(dir).or_else(|| {
            std::fs::read_dir(dir).ok().and_then(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
            })
        });
        let Some(pkts) = pcap.as_deref().and_then(packets) else {
            continue;
        };
        let set = Arc::new(set);
        let plain = run(&set, &pkts, &o, false);
        let carried = run(&set, &pkts, &o, true);
        compared += 1;
        voted += usize::from(carried.voted_flows > 0);
        skipped += carried.skipped;
        // The packets both runs inspected get the same verdicts; a packet the offload
        // skipped was let through by the plain run, or dropped with no rule matching: a
        // segment its receiver discards itself (normalization's `drop_invalid`).
        let mut same_verdicts = true;
        for (a, b) in plain.outcomes.iter().zip(&carried.outcomes) {
            match (a, b) {
                (_, Some(_)) => same_verdicts &= a == b,
                (Some((Outcome::Drop | Outcome::Reject, false)), None) => invalid += 1,
                (Some((Outcome::Drop | Outcome::Reject, true)), None) => same_verdicts = false,
                _ => {}
            }
        }
        if plain.hits != carried.hits || !same_verdicts {
            differ.push(dir.display().to_string());
            if verbose {
                eprintln!("{}: {:?} vs {:?}", dir.display(), plain.hits, carried.hits);
                for (i, (a, b)) in plain.outcomes.iter().zip(&carried.outcomes).enumerate() {
                    if a != b {
                        eprintln!("  packet {}: {a:?} vs {b:?}", i + 1);
                    }
                }
            }
        }
    }
    println!(
        "compared {compared}, with votes {voted}, packets skipped {skipped} (of which the \
         plain run dropped as invalid, no rule matching: {invalid}), differing {}",
        differ.len()
    );
    for d in &differ {
        println!("differs: {d}");
    }
    if differ.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
