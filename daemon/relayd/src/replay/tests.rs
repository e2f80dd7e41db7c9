//! Replay never touches a running daemon's state: an `encrypt` of the production
//! configuration replayed while a daemon holds its SA's sequence state writes nothing to
//! the state directory and sends nothing under the live key with the live SA's numbers.

use super::*;
use crate::registry::Registry;
use crate::resources::{OpenLogs, Provider};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// A directory on a path only root can write (key files elsewhere are refused), removed
/// when dropped.
struct KeyDir(PathBuf);

impl KeyDir {
    fn new(tag: &str) -> KeyDir {
        for base in ["/run", "/root"] {
            let dir = Path::new(base).join(format!("relayd-replay-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() {
                return KeyDir(dir);
            }
        }
        panic!("no directory only root can write");
    }
}

impl Drop for KeyDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every file under `dir` with its content.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| (e.path(), std::fs::read(e.path()).unwrap()))
        .collect();
    out.sort();
    out
}

/// A raw-IP pcap of `n` UDP datagrams 10.0.1.1:4000 -> 10.0.2.2:5000.
fn udp_pcap(path: &Path, n: u32) {
    let header = PcapHeader {
        datalink: DataLink::RAW,
        ts_resolution: TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for i in 0..n {
        let mut p = vec![
            0x45, 0, 0, 36, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2, // IPv4
            0x0f, 0xa0, 0x13, 0x88, 0, 16, 0, 0, // UDP
        ];
        p.extend_from_slice(b"replayed");
        let mut ip = relay_core::wire::Ipv4Packet::new_unchecked(&mut p[..]);
        ip.fill_checksum();
        let t = Duration::from_millis(u64::from(i));
        w.write_packet(&PcapPacket::new(t, p.len() as u32, &p))
            .unwrap();
    }
}

#[test]
fn replay_writes_no_esp_state_while_a_daemon_holds_it() {
    let dir = KeyDir::new("esp");
    let key = dir.0.join("esp.key");
    relay_svc_crypto::keygen(relay_svc_crypto::Cipher::Aes128Gcm, &key).unwrap();
    let state = dir.0.join("state");
    let config = dir.0.join("relayd.toml");
    std::fs::write(
        &config,
        format!(
            "[[queue]]\nnum = 1\nhook = \"forward\"\nmatch = \"-p udp\"\nservices = [\"enc\"]\n\n\
             [service.enc]\nkind = \"encrypt\"\ncipher = \"aes-128-gcm\"\nspi = 4097\n\
             key_file = {key:?}\nstate_dir = {state:?}\n"
        ),
    )
    .unwrap();
    // The daemon: its SA's state started (reserved on disk, the state thread running).
    let daemon_cfg = crate::config::load(&config, &Registry::with_builtins()).unwrap();
    let daemon = Provider::live()
        .resources(&daemon_cfg, OpenLogs::default())
        .unwrap();
    let held = contents(&state);
    assert!(
        held.iter()
            .any(|(p, _)| p.to_string_lossy().ends_with(".state")),
        "{held:?}"
    );
    // Replay of the same configuration (its own load, as another process has).
    let pcap = dir.0.join("in.pcap");
    let out = dir.0.join("out.pcap");
    udp_pcap(&pcap, 3);
    let cfg = crate::config::load(&config, &Registry::with_builtins()).unwrap();
    let opts = ReplayOptions {
        pcap,
        queue: None,
        write: Some(out.clone()),
        json: false,
        egress: (0, 0),
    };
    run(&cfg, &opts, &mut Vec::new()).unwrap();
    assert_eq!(contents(&state), held, "replay wrote the ESP state");
    // It encrypted, from 1 in memory (under a key derived from the SA's, not the SA's).
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut seqs = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(p.data.get(9), Some(&50), "not ESP");
        seqs.push(
            p.data
                .get(24..28)
                .map(|s| u32::from_be_bytes(s.try_into().unwrap())),
        );
    }
    assert_eq!(seqs, [Some(1), Some(2), Some(3)]);
    drop(daemon);
}

/// Replays `n` datagrams of one flow through an `accept` queue, offloading or not, and
/// returns the JSON lines and the status.
fn replay_offload(tag: &str, offload: bool, n: u32) -> (Vec<serde_json::Value>, Status) {
    let dir = KeyDir::new(tag);
    let config = dir.0.join("relayd.toml");
    std::fs::write(
        &config,
        format!(
            "[[queue]]\nnum = 1\nhook = \"forward\"\nmatch = \"-p udp\"\n\
             services = [\"accept\"]\noffload = {offload}\n"
        ),
    )
    .unwrap();
    let cfg = crate::config::load(&config, &Registry::with_builtins()).unwrap();
    let pcap = dir.0.join("in.pcap");
    let out = dir.0.join("out.pcap");
    udp_pcap(&pcap, n);
    let opts = ReplayOptions {
        pcap,
        queue: None,
        write: Some(out.clone()),
        json: true,
        egress: (0, 0),
    };
    let mut json = Vec::new();
    let status = run(&cfg, &opts, &mut json).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Every packet comes out, offloaded or not.
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut written = 0;
    while let Some(p) = r.next_packet() {
        p.unwrap();
        written += 1;
    }
    assert_eq!(written, n);
    (lines, status)
}

#[test]
fn replay_carries_out_offloads_as_the_live_datapaths_do() {
    let (lines, status) = replay_offload("offload-on", true, 5);
    assert_eq!(lines.len(), 5);
    // The first packet runs the chain, which offloads its flow; the rest skip the chain.
    assert_eq!(lines[0]["offload"], "decided", "{:?}", lines[0]);
    assert_eq!(lines[0]["offloaded"], false);
    for l in &lines[1..] {
        assert_eq!(
            (&l["offloaded"], &l["verdict"]),
            (&true.into(), &"accept".into())
        );
    }
    let q = &status.queues[0];
    assert_eq!(q.packets, 1, "{q:?}");
    let o = q.offload.as_ref().expect("offload counters");
    assert_eq!(o.flows.get("decided"), Some(&1), "{o:?}");
    assert_eq!((o.skipped_packets, o.skipped_bytes), (4, 4 * 36), "{o:?}");

    // Without offload every packet runs the chain.
    let (lines, status) = replay_offload("offload-off", false, 5);
    assert!(
        lines
            .iter()
            .all(|l| l["offloaded"] == false && l["offload"].is_null())
    );
    assert_eq!(status.queues[0].packets, 5);
    assert_eq!(status.queues[0].offload, None);
}
