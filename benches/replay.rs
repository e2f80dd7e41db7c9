//! `relayd replay` throughput: a 1,000,000-packet capture of 64-byte UDP packets (raw IP,
//! 80 flows) replayed through an `accept` chain, with and without writing the output,
//! timed end to end (reading, link stripping, flow tracking, the chain, the summary).
//!
//! Run: `cargo bench -p relayd --bench replay`. Environment: PACKETS (default 1000000).

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use std::time::{Duration, Instant};

const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: u64 = std::env::var("PACKETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("relayd-replay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("big.pcap");
    let header = PcapHeader {
        datalink: DataLink::RAW,
        ts_resolution: TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let f = std::io::BufWriter::new(std::fs::File::create(&pcap).unwrap());
    let mut w = PcapWriter::with_header(f, header).unwrap();
    let mut p = vec![
        0x45, 0, 0, 64, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    p.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88, 0, 44, 0, 0]);
    p.resize(64, 0x61);
    for i in 0..n {
        p[15] = (i % 80) as u8; // 80 source hosts
        let ts = Duration::from_secs(1_700_000_000) + Duration::from_micros(i * 10);
        w.write_packet(&PcapPacket::new(ts, 64, &p)).unwrap();
    }
    drop(w);
    let cfg = dir.join("accept.toml");
    std::fs::write(
        &cfg,
        "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
    )
    .unwrap();
    let out = dir.join("out.pcap");
    println!("relayd replay, {n} packets of 64 bytes, accept chain (best of 3)\n");
    println!("| run | seconds | packets/s |");
    println!("|---|---|---|");
    for (name, extra) in [
        ("accept", vec![]),
        (
            "accept + --write",
            vec!["--write".to_string(), out.display().to_string()],
        ),
    ] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            let st = std::process::Command::new(RELAYD)
                .args(["replay", "-c"])
                .arg(&cfg)
                .arg("--pcap")
                .arg(&pcap)
                .args(&extra)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("| {name} | {best:.2} | {:.0} |", n as f64 / best);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
