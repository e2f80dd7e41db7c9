//! `relayd replay` on captures the project made (tests/data): every link type, built-in
//! services and compression, outputs checked byte for byte; broken captures give errors
//! naming the packet. Runs unprivileged.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::{DataLink, TsResolution};
use relay_core::wire::{Ipv4Packet, TcpPacket, UdpPacket, checksum};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(name)
}

fn text(n: usize) -> Vec<u8> {
    let t = b"relayd replays captures like suricata -r. ";
    (0..n).map(|i| t[i % t.len()]).collect()
}

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, l4: Vec<u8>) -> Vec<u8> {
    let mut b = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    b.extend_from_slice(&src);
    b.extend_from_slice(&dst);
    let total = (20 + l4.len()) as u16;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    b.extend_from_slice(&l4);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    let pseudo = checksum::pseudo_v4(src.into(), dst.into(), proto, l4.len() as u32);
    match proto {
        17 => UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo),
        6 => TcpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo),
        _ => {}
    }
    b
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn tcp(sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xfa, 0xf0, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// The IP packets of the test captures, in order (a non-IP ARP frame sits between 5 and 6
/// in the link-layer variants).
fn packets() -> Vec<Vec<u8>> {
    let (a, b) = ([10, 0, 1, 1], [10, 0, 2, 2]);
    let mut v6 = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
    v6.extend_from_slice(&[0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    v6.extend_from_slice(&[0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    let u6 = udp(4001, 5001, &text(500));
    v6[4..6].copy_from_slice(&(u6.len() as u16).to_be_bytes());
    v6.extend_from_slice(&u6);
    vec![
        ipv4(a, b, 17, udp(4000, 5000, &text(600))),
        ipv4(b, a, 17, udp(5000, 4000, b"ok")),
        ipv4(a, b, 6, tcp(40000, 80, 1, 0, 0x02, &[])),
        ipv4(b, a, 6, tcp(80, 40000, 9, 2, 0x12, &[])),
        ipv4(a, b, 6, tcp(40000, 80, 2, 10, 0x18, &text(800))),
        ipv4(a, b, 1, vec![8, 0, 0xf7, 0xfe, 0, 1, 0, 0]),
        v6,
    ]
}

const ARP: [u8; 28] = [
    0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 1, 1, 0, 0, 0, 0, 0, 0, 10, 0, 1, 2,
];

fn ts(i: usize) -> Duration {
    Duration::new(1_700_000_000, 1_000 + i as u32 * 1_000_000)
}

/// The frames of one link type: (timestamp, frame) with the ARP frame where it fits.
fn frames(link: DataLink) -> Vec<(Duration, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, p) in packets().into_iter().enumerate() {
        let v6 = p[0] >> 4 == 6;
        let et: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
        let wrap = |et: [u8; 2], body: &[u8]| -> Vec<u8> {
            let mut f = Vec::new();
            match link {
                DataLink::ETHERNET => {
                    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
                    f.extend_from_slice(&et);
                }
                DataLink::LINUX_SLL => {
                    f.extend_from_slice(&[0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                    f.extend_from_slice(&et);
                }
                DataLink::LINUX_SLL2 => {
                    f.extend_from_slice(&et);
                    f.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                }
                _ => {}
            }
            f.extend_from_slice(body);
            f
        };
        out.push((ts(i), wrap(et, &p)));
        if i == 4 && link != DataLink::RAW {
            out.push((ts(i) + Duration::from_micros(500), wrap([0x08, 0x06], &ARP)));
        }
    }
    out
}

fn pcap_bytes(link: DataLink) -> Vec<u8> {
    let header = PcapHeader {
        datalink: link,
        ts_resolution: TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    for (t, f) in frames(link) {
        w.write_packet(&PcapPacket::new(t, f.len() as u32, &f))
            .unwrap();
    }
    w.into_writer()
}

fn pcapng_bytes() -> Vec<u8> {
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    // Nanosecond timestamps, said so as pcapng requires (the default unit is microseconds).
    let idb = InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0xffff,
        options: vec![InterfaceDescriptionOption::IfTsResol(9)],
    };
    w.write_pcapng_block(idb).unwrap();
    for (t, f) in frames(DataLink::ETHERNET) {
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: t,
            original_len: f.len() as u32,
            data: f.into(),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    w.into_inner()
}

const CAPTURES: [&str; 5] = [
    "flows-eth.pcap",
    "flows-sll.pcap",
    "flows-sll2.pcap",
    "flows-raw.pcap",
    "flows-eth.pcapng",
];

fn capture_bytes(name: &str) -> Vec<u8> {
    match name {
        "flows-eth.pcap" => pcap_bytes(DataLink::ETHERNET),
        "flows-sll.pcap" => pcap_bytes(DataLink::LINUX_SLL),
        "flows-sll2.pcap" => pcap_bytes(DataLink::LINUX_SLL2),
        "flows-raw.pcap" => pcap_bytes(DataLink::RAW),
        "flows-eth.pcapng" => pcapng_bytes(),
        _ => unreachable!(),
    }
}

/// Writes tests/data/*.pcap from the packets above: `cargo test -p relayd --test replay -- --ignored`.
#[test]
#[ignore]
fn regenerate_test_captures() {
    for name in CAPTURES {
        std::fs::write(data(name), capture_bytes(name)).unwrap();
    }
}

#[test]
fn committed_captures_match_their_generator() {
    for name in CAPTURES {
        let committed = std::fs::read(data(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            committed,
            capture_bytes(name),
            "{name} differs from what the test generates"
        );
        assert!(committed.len() < 8 * 1024, "{name} should stay a few KB");
    }
}

fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("replay.toml");
    std::fs::write(
        &p,
        format!("[[queue]]\nnum = 0\nhook = \"forward\"\n{body}"),
    )
    .unwrap();
    p
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("relayd-replay-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `relayd replay` as an unprivileged user; returns (exit code, stdout, stderr).
fn replay(cfg: &Path, pcap: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        RELAYD,
        "replay",
        "-c",
    ])
    .arg(cfg)
    .arg("--pcap")
    .arg(pcap)
    .args(extra);
    let out = cmd
        .output()
        .expect("setpriv (util-linux) runs relayd unprivileged");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read_pcap(p: &Path) -> Vec<(Duration, Vec<u8>)> {
    let mut r = PcapReader::new(std::fs::File::open(p).unwrap()).unwrap();
    assert_eq!(r.header().datalink, DataLink::RAW);
    let mut v = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let pkt = pkt.unwrap();
        v.push((pkt.timestamp, pkt.data.into_owned()));
    }
    v
}

fn world_writable(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
}

#[test]
fn accept_writes_every_ip_packet_unchanged_for_every_link_type() {
    let d = tmpdir("accept");
    world_writable(&d);
    let cfg = config(&d, "services = [\"accept\"]\n");
    for name in CAPTURES {
        let out = d.join(format!("{name}.out.pcap"));
        let (code, stdout, stderr) = replay(&cfg, &data(name), &["--write", out.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {stdout}{stderr}");
        let got = read_pcap(&out);
        let want: Vec<(Duration, Vec<u8>)> = packets()
            .into_iter()
            .enumerate()
            .map(|(i, p)| (ts(i), p))
            .collect();
        assert_eq!(
            got, want,
            "{name}: output differs from the input's IP packets"
        );
        assert!(stdout.contains("accept"), "{stdout}");
    }
}

/// A service that holds packets (`delay`) is honoured as live: each packet comes out when
/// the capture's clock reaches its deadline, or at the end, written with that time, and
/// is counted held then accepted. Replay used to write held packets at once, undelayed.
#[test]
fn held_packets_come_out_at_their_deadline() {
    let d = tmpdir("hold");
    world_writable(&d);
    let out = d.join("hold.pcap");
    let cfg = config(
        &d,
        "services = [\"wan\"]\n\n[service.wan]\nkind = \"delay\"\ndelay = \"2500us\"\n",
    );
    let (code, stdout, stderr) = replay(
        &cfg,
        &data("flows-raw.pcap"),
        &["--write", out.to_str().unwrap(), "--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7, "{stdout}");
    assert!(
        lines
            .iter()
            .all(|l| l["held"] == true && l["verdict"] == "accept")
    );
    // Records 1 ms apart, held 2.5 ms: each leaves after the next two arrived, in order.
    let order: Vec<u64> = lines
        .iter()
        .map(|l| l["packet"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [1, 2, 3, 4, 5, 6, 7]);
    let written = read_pcap(&out);
    let want: Vec<Duration> = (0..7)
        .map(|i| ts(i) + Duration::from_micros(2500))
        .collect();
    let times: Vec<Duration> = written.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, want, "written at their deadlines");
    let bytes: Vec<Vec<u8>> = written.into_iter().map(|(_, b)| b).collect();
    assert_eq!(bytes, packets(), "unchanged");
    // The summary: 7 packets, 7 accepted (counted when they left).
    let row = stderr.lines().find(|l| l.trim_start().starts_with("0 "));
    let fields: Vec<&str> = row.unwrap_or_default().split_whitespace().collect();
    assert_eq!(fields.get(3..5), Some(&["7", "7"][..]), "{stderr}");
}

#[test]
fn drop_and_dump_and_json_verdicts() {
    let d = tmpdir("drop");
    world_writable(&d);
    let out = d.join("drop.pcap");
    let (code, stdout, _) = replay(
        &config(&d, "services = [\"drop\"]\n"),
        &data("flows-eth.pcap"),
        &["--write", out.to_str().unwrap()],
    );
    assert_eq!(code, 0);
    assert!(read_pcap(&out).is_empty());
    assert!(
        stdout
            .lines()
            .any(|l| l.trim_start().starts_with("0 ") && l.contains(" 7 ")),
        "{stdout}"
    );
    let (code, stdout, stderr) = replay(
        &config(&d, "services = [\"dump\", \"accept\"]\n"),
        &data("flows-eth.pcapng"),
        &["--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7);
    assert!(lines.iter().all(|l| l["verdict"] == "accept"));
    // The flow tracker: the UDP exchange and the TCP handshake as conntrack sees them.
    let ct: Vec<&str> = lines
        .iter()
        .map(|l| l["ct"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        ct,
        [
            "New",
            "Established reply",
            "New",
            "Established reply",
            "Established",
            "New",
            "New"
        ]
    );
    assert_eq!(
        lines[5]["packet"], 7,
        "the ARP frame between them counts as record 6"
    );
    assert!(
        stderr.contains("logged=7"),
        "the summary goes to stderr with --json: {stderr}"
    );
}

#[test]
fn compressed_output_decompresses_to_the_input() {
    let d = tmpdir("compress");
    world_writable(&d);
    let z = d.join("compressed.pcap");
    let back = d.join("restored.pcap");
    let (code, _, stderr) = replay(
        &config(
            &d,
            "services = [\"c\"]\n[service.c]\nkind = \"compress\"\nalgorithm = \"deflate\"\nmode = \"always\"\n",
        ),
        &data("flows-sll2.pcap"),
        &["--write", z.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    let compressed = read_pcap(&z);
    // The three large text packets (UDP 600, TCP 800, IPv6 UDP 500) are in IPComp form.
    let ipcomp: Vec<usize> = compressed
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| (p[0] >> 4 == 4 && p[9] == 108) || (p[0] >> 4 == 6 && p[6] == 108))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(ipcomp, [0, 4, 6]);
    let (code, _, stderr) = replay(
        &config(
            &d,
            "services = [\"d\"]\n[service.d]\nkind = \"decompress\"\n",
        ),
        &z,
        &["--write", back.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    let want: Vec<(Duration, Vec<u8>)> = packets()
        .into_iter()
        .enumerate()
        .map(|(i, p)| (ts(i), p))
        .collect();
    assert_eq!(read_pcap(&back), want, "decompress(compress(x)) != x");
    // Adaptive with the paper's C and R on an idle 100 Mb/s queue compresses nothing
    // ((1 - R) S / B is below C); behind a 1 MB backlog, everything that shrinks.
    let adaptive = config(
        &d,
        "services = [\"c\"]\n[service.c]\nkind = \"compress\"\nalgorithm = \"lz4\"\nestimate = \"fixed\"\n",
    );
    let (_, idle, _) = replay(
        &adaptive,
        &data("flows-raw.pcap"),
        &["--bandwidth", "100mbit"],
    );
    assert!(idle.contains("compressed=0"), "{idle}");
    let (_, busy, _) = replay(
        &adaptive,
        &data("flows-raw.pcap"),
        &["--bandwidth", "100mbit", "--backlog-bytes", "1000000"],
    );
    assert!(busy.contains("compressed=3"), "{busy}");
}

#[test]
fn broken_captures_name_the_packet() {
    let d = tmpdir("broken");
    world_writable(&d);
    let cfg = config(&d, "services = [\"accept\"]\n");
    let whole = std::fs::read(data("flows-eth.pcap")).unwrap();
    // Cut in the middle of the fourth record.
    let cut = d.join("cut.pcap");
    let fourth_start = 24
        + frames(DataLink::ETHERNET)[..3]
            .iter()
            .map(|(_, f)| 16 + f.len())
            .sum::<usize>();
    std::fs::write(&cut, &whole[..fourth_start + 30]).unwrap();
    let (code, _, stderr) = replay(&cfg, &cut, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("packet 4"), "{stderr}");
    let junk = d.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture at all").unwrap();
    let (code, _, stderr) = replay(&cfg, &junk, &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a pcap or pcapng file"), "{stderr}");
    // Every truncation: an error or a shorter replay, never a panic.
    for n in (0..whole.len()).step_by(37) {
        let p = d.join("t.pcap");
        std::fs::write(&p, &whole[..n]).unwrap();
        let (code, _, stderr) = replay(&cfg, &p, &[]);
        assert!(code == 0 || code == 2, "cut at {n}: exit {code}: {stderr}");
        assert!(!stderr.contains("panicked"), "cut at {n}: {stderr}");
    }
}

#[test]
fn microsecond_pcapng_and_snap_length_captures_replay_as_captured() {
    let d = tmpdir("units");
    world_writable(&d);
    let cfg = config(&d, "services = [\"accept\"]\n");
    // pcapng without if_tsresol: timestamps are in microseconds.
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::RAW,
        snaplen: 0xffff,
        options: vec![],
    })
    .unwrap();
    for (i, p) in packets().into_iter().enumerate() {
        let raw_micros = Duration::from_nanos(ts(i).as_micros() as u64);
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: raw_micros,
            original_len: p.len() as u32,
            data: p.into(),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    let us = d.join("micro.pcapng");
    std::fs::write(&us, w.into_inner()).unwrap();
    let out = d.join("micro.out.pcap");
    let (code, _, stderr) = replay(&cfg, &us, &["--write", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let times: Vec<Duration> = read_pcap(&out).into_iter().map(|(t, _)| t).collect();
    let want: Vec<Duration> = (0..7)
        .map(|i| Duration::from_micros(ts(i).as_micros() as u64))
        .collect();
    assert_eq!(times, want, "pcapng microsecond timestamps misread");
    // A `tcpdump -s 96` capture: every record cut at 96 bytes, and replayed as such.
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 96,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    for (t, f) in frames(DataLink::ETHERNET) {
        let cut = &f[..f.len().min(96)];
        let raw = pcap_file::pcap::RawPcapPacket {
            ts_sec: t.as_secs() as u32,
            ts_frac: t.subsec_micros(),
            incl_len: cut.len() as u32,
            orig_len: f.len() as u32,
            data: cut.into(),
        };
        w.write_raw_packet(&raw).unwrap();
    }
    let snap = d.join("snap.pcap");
    std::fs::write(&snap, w.into_writer()).unwrap();
    let (code, stdout, stderr) = replay(
        &config(&d, "services = [\"dump\", \"accept\"]\n"),
        &snap,
        &["--json"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 7, "{stdout}");
    assert!(
        stderr.contains("UDP, length 600"),
        "partial packets keep their real lengths: {stderr}"
    );
    assert!(
        stderr.contains("malformed") && !stderr.contains("malformed=1"),
        "{stderr}"
    );
}
