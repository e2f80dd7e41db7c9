//! Writes the seed corpora of every fuzz target into `fuzz/seeds/<target>/` (committed;
//! `make fuzz-corpus` reruns this): packets from the same builders the tests use, the
//! test captures in `tests/data`, the shipped configurations (`iptables/*.toml`, the
//! demo, the TOML blocks of the docs), the IDS rules of the tests and docs, real IPComp
//! and ESP packets made by relayd's own `compress` and `encrypt` code with the fuzz keys,
//! and hand-built NFQUEUE and rtnetlink datagrams.
//!
//! Usage: `cargo +nightly run --manifest-path fuzz/Cargo.toml --example build_corpus`.
//! Files are named after what they hold; the folder of each target is emptied first.

use relay_core::wire::proto;
use relay_core::{Context, Counters, Packet, ServiceConfig};
use relay_svc_compress::{Algorithm, Codecs, CompressConfig};
use relay_svc_crypto::SaCrypto;
use relayd_fuzz::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Seeds {
    dir: PathBuf,
    n: usize,
}

impl Seeds {
    fn new(target: &str) -> Seeds {
        let dir = Path::new(FUZZ_DIR).join("seeds").join(target);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the seeds folder");
        Seeds { dir, n: 0 }
    }

    fn add(&mut self, name: &str, bytes: &[u8]) {
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.n += 1;
        std::fs::write(self.dir.join(format!("{:03}-{clean}", self.n)), bytes)
            .expect("writing a seed");
    }

    /// `ctl` bytes in front of `bytes`.
    fn add_with(&mut self, name: &str, ctl: &[u8], bytes: &[u8]) {
        let mut v = ctl.to_vec();
        v.extend_from_slice(bytes);
        self.add(name, &v);
    }
}

fn repo(rel: &str) -> PathBuf {
    Path::new(FUZZ_DIR).join("..").join(rel)
}

/// The IP packets of the test captures.
fn capture_packets() -> Vec<Vec<u8>> {
    let path = repo("tests/data/flows-raw.pcap");
    let bytes = std::fs::read(&path).expect("tests/data/flows-raw.pcap");
    let magic: [u8; 4] = bytes[..4].try_into().unwrap();
    let mut c = relayd::replay::Capture::new(std::io::Cursor::new(bytes), magic).unwrap();
    let mut out = Vec::new();
    while let Some(r) = c.next_record() {
        if let Some(ip) = r.unwrap().ip {
            out.push(ip);
        }
    }
    out
}

/// Every IP packet the seeds start from.
fn all_packets() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = sample_packets()
        .into_iter()
        .map(|(n, p)| (n.to_string(), p))
        .collect();
    for (i, p) in capture_packets().into_iter().enumerate() {
        v.push((format!("capture{i}"), p));
    }
    v
}

fn compressed(alg: &str, orig: &[u8]) -> Vec<u8> {
    let cfg: CompressConfig =
        toml::from_str(&format!("algorithm = \"{alg}\"\nmode = \"always\"")).unwrap();
    let mut svc = cfg
        .into_factory("seed")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(orig);
    svc.process(&mut p, &mut Context::new(0, Instant::now()));
    assert!(p.is_modified(), "{alg}: not compressed");
    p.data().to_vec()
}

fn packet_seeds() {
    let mut s = Seeds::new("packet");
    for (name, p) in all_packets() {
        s.add_with(&name, &[0, 0, 0], &p);
    }
    // Partial copies and edits.
    let big = udp4(CLIENT, SERVER, 4000, 5000, &text(300));
    s.add_with("udp4_partial64", &[1, 64, 0, 0], &big);
    s.add_with("udp4_insert", &[2, 0, 20], &big);
    s.add_with("udp4_remove", &[4, 0, 24], &big);
    s.add_with("udp4_resize", &[6, 0, 40], &big);
}

fn ipcomp_seeds() {
    let mut s = Seeds::new("ipcomp");
    let mut codecs = Codecs::new(1);
    let inputs: Vec<(String, Vec<u8>)> = vec![
        ("text1400".into(), text(1400)),
        ("udp4".into(), udp4(CLIENT, SERVER, 4000, 5000, &text(600))),
        ("zeros".into(), vec![0u8; 2000]),
        ("empty".into(), Vec::new()),
    ];
    for (i, alg) in [Algorithm::Deflate, Algorithm::Lz4, Algorithm::Lzo]
        .into_iter()
        .enumerate()
    {
        for (name, data) in &inputs {
            let mut out = vec![0u8; Algorithm::max_output(data.len())];
            let n = codecs.compress(alg, data, &mut out).expect("compresses");
            let room = (data.len().max(1) as u16).saturating_sub(1).to_be_bytes();
            s.add_with(
                &format!("{}-{name}", alg.name()),
                &[i as u8, room[0], room[1]],
                &out[..n],
            );
            s.add_with(
                &format!("{}-{name}-roundtrip", alg.name()),
                &[0x80 | i as u8, 0, 0],
                data,
            );
        }
    }
}

fn decompress_seeds() {
    let mut s = Seeds::new("decompress");
    let (s6, d6) = v6_pair();
    for alg in ["deflate", "lz4", "lzo"] {
        let v4 = compressed(alg, &udp4(CLIENT, SERVER, 4000, 5000, &text(1400)));
        s.add_with(&format!("{alg}-udp4"), &[33, 0, 0], &v4);
        let v6 = compressed(alg, &udp6(s6, d6, &[], &text(1400)));
        s.add_with(&format!("{alg}-udp6"), &[33, 0, 0], &v6);
        s.add_with(&format!("{alg}-udp4-partial"), &[33, 0x80, 60], &v4);
        s.add_with(&format!("{alg}-udp4-max576"), &[0, 0, 0], &v4);
    }
    s.add_with("not-ipcomp", &[33, 0, 0], &udp4(CLIENT, SERVER, 1, 2, b"x"));
}

fn esp_seeds() {
    let mut sealed = Seeds::new("esp_sealed");
    let mut raw = Seeds::new("esp_raw");
    let (s6, d6) = v6_pair();
    let segment = &udp4(CLIENT, SERVER, 4000, 5000, &text(100))[20..];
    let inner4 = udp4(CLIENT, SERVER, 4000, 5000, &text(60));
    let inner6 = udp6(s6, d6, &[], &text(60));
    for (i, sa) in ESP_SAS.iter().enumerate() {
        let tag = format!("sa{i}-{}", cipher_name(sa.cipher));
        let i8 = i as u8;
        let (plain, next) = match (sa.tunnel, sa.v6) {
            (false, _) => (segment, 17),
            (true, false) => (&inner4[..], 4),
            (true, true) => (&inner6[..], 41),
        };
        sealed.add_with(&format!("{tag}-valid"), &[i8, next], plain);
        sealed.add_with(&format!("{tag}-other-family"), &[i8 | 64, next], plain);
        sealed.add_with(&format!("{tag}-dummy"), &[i8, 59], b"");
        sealed.add_with(
            &format!("{tag}-raw-trailer"),
            &[i8 | 16, 0],
            &esp_pad(sa.cipher, plain, next),
        );
        // Real packets sealed with the fuzz keys, for the keyless target.
        let crypto = SaCrypto::new(sa.cipher, &esp_key(sa.cipher));
        let esp = esp_seal(&crypto, i, 1 + i as u64, &esp_pad(sa.cipher, plain, next));
        raw.add_with(&tag, &[if sa.v6 { 2 } else { 0 }, 0], &esp);
        // The same in UDP to port 4500 (RFC 3948), from source port 4500.
        raw.add_with(
            &format!("{tag}-udp"),
            &[if sa.v6 { 6 } else { 4 }, 100],
            &esp,
        );
        let mut whole = if sa.v6 {
            ipv6_header(s6, d6, proto::ESP, esp.len())
        } else {
            ipv4_header(CLIENT, SERVER, proto::ESP, esp.len())
        };
        whole.extend_from_slice(&esp);
        raw.add_with(&format!("{tag}-whole"), &[3, 0], &whole);
    }
    // What else arrives on the NAT-T port: IKE behind the zero marker, a keepalive.
    let mut ike = vec![0u8; 4];
    ike.extend_from_slice(&text(40));
    raw.add_with("natt-ike", &[4, 100], &ike);
    raw.add_with("natt-keepalive", &[4, 100], &[0xff]);
}

/// An MPLS-in-IP (or, with `udp`, MPLS-in-UDP) packet from `src` with `labels` (the last
/// with bottom-of-stack) around `inner`.
fn mpls(src: [u8; 4], labels: &[u32], inner: &[u8], udp: bool) -> Vec<u8> {
    let mut stack = Vec::new();
    for (k, &l) in labels.iter().enumerate() {
        let bottom = u32::from(k + 1 == labels.len());
        stack.extend_from_slice(&((l << 12) | (bottom << 8) | 64).to_be_bytes());
    }
    stack.extend_from_slice(inner);
    if !udp {
        let mut b = ipv4_header(src, SERVER, 137, stack.len());
        b.extend_from_slice(&stack);
        return b;
    }
    udp4(src, SERVER, 49152, 6635, &stack)
}

fn mpls_seeds() {
    let mut s = Seeds::new("mpls_decap");
    let peer = MPLS_PEER.octets();
    let (s6, d6) = v6_pair();
    let inner4 = udp4(CLIENT, SERVER, 4000, 5000, &text(80));
    let inner6 = udp6(s6, d6, &[], &text(80));
    s.add("ip-label100-v4", &mpls(peer, &[100], &inner4, false));
    s.add("ip-label100-v6", &mpls(peer, &[100], &inner6, false));
    s.add("ip-two-labels", &mpls(peer, &[1000, 16], &inner4, false));
    s.add("udp-label16-v4", &mpls(peer, &[16], &inner4, true));
    s.add("udp-label-max-v6", &mpls(peer, &[1_048_575], &inner6, true));
    s.add("unknown-label", &mpls(peer, &[200], &inner4, false));
    s.add(
        "unknown-peer",
        &mpls([203, 0, 113, 9], &[100], &inner4, false),
    );
    s.add("not-mpls", &inner4);
}

fn rules_lines(text: &str) -> Vec<String> {
    let actions = ["alert ", "drop ", "pass ", "reject ", "ratelimit "];
    text.lines()
        .map(str::trim)
        .map(|l| l.trim_start_matches("# "))
        .filter(|l| actions.iter().any(|a| l.starts_with(a)) && l.ends_with(')'))
        .map(String::from)
        .collect()
}

fn ids_seeds() {
    let mut rules = Seeds::new("ids_rules");
    let varied = std::fs::read_to_string(repo("services/ids/tests/fixtures/varied.rules"))
        .expect("varied.rules");
    rules.add("varied.rules", varied.as_bytes());
    rules.add("extra.rules", EXTRA_RULES.as_bytes());
    let docs = std::fs::read_to_string(repo("docs/ids.md")).unwrap_or_default();
    for (i, l) in rules_lines(&varied)
        .into_iter()
        .chain(rules_lines(EXTRA_RULES))
        .chain(rules_lines(&docs))
        .enumerate()
    {
        rules.add(&format!("rule{i}"), l.as_bytes());
    }
    let mut eng = Seeds::new("ids_engine");
    for (name, p) in all_packets() {
        eng.add_with(&name, &[0, 1, 0], &p);
    }
    let hits: Vec<(&str, u8, Vec<u8>)> = vec![
        (
            "http-passwd-established",
            2,
            tcp4(
                [203, 0, 113, 5],
                SERVER,
                40000,
                80,
                0x18,
                &[],
                b"GET /etc/passwd HTTP/1.1\r\nuser  root\r\n",
            ),
        ),
        (
            "deadbeef",
            0,
            tcp4(
                CLIENT,
                SERVER,
                40000,
                80,
                0x18,
                &[],
                b"xx\xde\xad\xbe\xefxx",
            ),
        ),
        (
            "dns-evil",
            1,
            udp4(
                CLIENT,
                [8, 8, 8, 8],
                5353,
                53,
                b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04evil\x03com\x00",
            ),
        ),
        (
            "telnet-syn",
            1,
            tcp4(CLIENT, SERVER, 40001, 23, 0x02, &[], b""),
        ),
        (
            "ssh-syn",
            1,
            tcp4(CLIENT, SERVER, 40002, 22, 0x02, &[], b""),
        ),
        ("big-ping", 0, icmp4(CLIENT, SERVER, 8, 0, &text(1100))),
        (
            "threshold",
            2,
            tcp4(CLIENT, SERVER, 1, 2, 0x10, &[], b"AAAA"),
        ),
    ];
    for (name, ctl, p) in hits {
        eng.add_with(name, &[ctl, 1, 0], &p);
    }
}

fn capture_seeds() {
    let mut s = Seeds::new("capture");
    for f in [
        "flows-eth.pcap",
        "flows-eth.pcapng",
        "flows-raw.pcap",
        "flows-sll.pcap",
        "flows-sll2.pcap",
    ] {
        let bytes = std::fs::read(repo(&format!("tests/data/{f}"))).expect("test capture");
        // No .pcap suffix: the repository ignores *.pcap outside tests/data.
        s.add(&f.replace('.', "-"), &bytes);
    }
    // The link types without a test capture: the same IP packets behind each one's
    // header (BSD loopback in both byte orders, PPP with and without address/control,
    // Cisco HDLC), written as a little-endian microsecond pcap.
    let packets = capture_packets();
    let v6 = |ip: &[u8]| ip.first().is_some_and(|b| b >> 4 == 6);
    let links: [(&str, u32, &dyn Fn(&[u8]) -> Vec<u8>); 5] = [
        ("null", 0, &|ip| {
            (if v6(ip) { 30u32 } else { 2 }).to_le_bytes().to_vec()
        }),
        ("loop", 108, &|ip| {
            (if v6(ip) { 24u32 } else { 2 }).to_be_bytes().to_vec()
        }),
        ("ppp", 9, &|ip| {
            (if v6(ip) { 0x0057u16 } else { 0x0021 })
                .to_be_bytes()
                .to_vec()
        }),
        ("ppp-ac", 9, &|ip| {
            let mut h = vec![0xff, 0x03];
            h.extend((if v6(ip) { 0x0057u16 } else { 0x0021 }).to_be_bytes());
            h
        }),
        ("c-hdlc", 104, &|ip| {
            let mut h = vec![0x0f, 0x00];
            h.extend((if v6(ip) { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
            h
        }),
    ];
    for (name, linktype, header) in links {
        // Magic, version 2.4, zone, sigfigs, snap length, link type.
        let mut f = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
        f.extend(2u16.to_le_bytes());
        f.extend(4u16.to_le_bytes());
        for v in [0, 0, 65_535, linktype] {
            f.extend(v.to_le_bytes());
        }
        for (i, ip) in packets.iter().enumerate() {
            let mut frame = header(ip);
            frame.extend_from_slice(ip);
            let len = frame.len() as u32;
            for v in [1_700_000_000 + i as u32, 0, len, len] {
                f.extend(v.to_le_bytes());
            }
            f.extend(frame);
        }
        s.add(&format!("flows-{name}-pcap"), &f);
    }
}

/// The ```toml blocks of a Markdown file.
fn toml_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match &mut cur {
            None if line.trim_start().starts_with("```toml") => cur = Some(String::new()),
            Some(b) if line.trim_start().starts_with("```") => {
                out.push(std::mem::take(b));
                cur = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

fn config_seeds() {
    let mut s = Seeds::new("config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("iptables"))
        .expect("iptables/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.push(repo("examples/demo/relayd.toml"));
    files.sort();
    for f in files {
        let text = std::fs::read(&f).expect("a shipped configuration");
        s.add(&f.file_name().unwrap().to_string_lossy(), &text);
    }
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(repo("README.md"));
    docs.sort();
    for d in docs {
        let md = std::fs::read_to_string(&d).unwrap_or_default();
        let stem = d.file_stem().unwrap().to_string_lossy().to_string();
        for (i, b) in toml_blocks(&md).into_iter().enumerate() {
            s.add(&format!("{stem}-{i}"), b.as_bytes());
        }
    }
}

/// A netlink attribute (length, type, payload, padding to 4).
fn attr(out: &mut Vec<u8>, ty: u16, data: &[u8]) {
    out.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// A netlink message of type `ty` with sequence `seq` around `body`.
fn nlmsg(ty: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(body);
    m
}

fn nfq_message(id: u32, pkt: &[u8], extra: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![2, 0, 0, 0]; // nfgenmsg: AF_INET, version 0, queue 0
    let mut hdr = id.to_be_bytes().to_vec();
    hdr.extend_from_slice(&0x0800u16.to_be_bytes());
    hdr.push(2); // NF_INET_FORWARD
    attr(&mut body, 1, &hdr);
    for (ty, d) in extra {
        attr(&mut body, *ty, d);
    }
    attr(&mut body, 10, pkt);
    nlmsg(3 << 8, 0, &body)
}

fn netlink_seeds() {
    let mut s = Seeds::new("nfq_datagram");
    for (name, p) in sample_packets().into_iter().take(6) {
        s.add_with(&format!("plain-{name}"), &[0], &nfq_message(7, &p, &[]));
    }
    let p = udp4(CLIENT, SERVER, 4000, 5000, &text(200));
    let all = vec![
        (3u16, 0x905u32.to_be_bytes().to_vec()),
        (5, 2u32.to_be_bytes().to_vec()),
        (6, 3u32.to_be_bytes().to_vec()),
        (13, (p.len() as u32 + 100).to_be_bytes().to_vec()),
        (14, 2u32.to_be_bytes().to_vec()),
        (12, 3u32.to_be_bytes().to_vec()),
    ];
    s.add_with("every-attribute", &[1], &nfq_message(9, &p, &all));
    let whole = nfq_message(11, &p, &[]);
    s.add_with("cut-short", &[0], &whole[..60]);
    let mut err = (-1i32).to_ne_bytes().to_vec();
    err.extend_from_slice(&nlmsg(0, 5, &[])); // the request the error is about
    let mut two = nlmsg(2, 5, &err);
    two.extend_from_slice(&whole);
    s.add_with("error-then-packet", &[0], &two);

    let mut r = Seeds::new("rtnl_qdisc");
    let tcmsg = |ifindex: i32, parent: u32| {
        let mut t = vec![0u8; 4];
        t.extend_from_slice(&ifindex.to_ne_bytes());
        t.extend_from_slice(&0x10000u32.to_ne_bytes());
        t.extend_from_slice(&parent.to_ne_bytes());
        t.extend_from_slice(&0u32.to_ne_bytes());
        t
    };
    let mut stats = Vec::new();
    let mut q = Vec::new();
    for v in [3u32, 4500, 17, 0, 2] {
        q.extend_from_slice(&v.to_ne_bytes());
    }
    attr(&mut stats, 3, &q);
    let mut tbf = tcmsg(2, 0xffff_ffff);
    attr(&mut tbf, 1, b"tbf\0");
    let mut opts = Vec::new();
    let mut parms = vec![0u8; 36];
    parms[8..12].copy_from_slice(&125_000u32.to_ne_bytes());
    attr(&mut opts, 1, &parms);
    attr(&mut opts, 4, &12_500_000_000u64.to_ne_bytes());
    attr(&mut tbf, 2, &opts);
    attr(&mut tbf, 7, &stats);
    let mut fq = tcmsg(3, 0xffff_ffff);
    attr(&mut fq, 1, b"fq_codel\0");
    attr(&mut fq, 7, &stats);
    let mut child = tcmsg(3, 0x10001);
    attr(&mut child, 1, b"pfifo\0");
    let mut dump = nlmsg(36, 1, &tbf);
    dump.extend_from_slice(&nlmsg(36, 1, &fq));
    dump.extend_from_slice(&nlmsg(36, 1, &child));
    r.add("tbf-fq_codel-child", &dump);
    let mut done = nlmsg(36, 1, &tbf);
    done.extend_from_slice(&nlmsg(3, 1, &0i32.to_ne_bytes()));
    r.add("tbf-done", &done);
    r.add("error", &nlmsg(2, 1, &(-22i32).to_ne_bytes()));
    r.add("other-seq", &nlmsg(36, 9, &fq));
}

/// IKE messages of an in-memory exchange and endpoint scenarios (crates/ike `fuzzing`).
fn ike_seeds() {
    let mut msg = Seeds::new("ike_message");
    let mut ep = Seeds::new("ike_endpoint");
    for (target, name, bytes) in relay_ike::fuzzing::seeds() {
        match target {
            "ike_message" => msg.add(&name, &bytes),
            _ => ep.add(&name, &bytes),
        }
    }
}

fn main() {
    packet_seeds();
    ipcomp_seeds();
    decompress_seeds();
    esp_seeds();
    mpls_seeds();
    ids_seeds();
    capture_seeds();
    config_seeds();
    netlink_seeds();
    ike_seeds();
    let total: u64 = walk(&Path::new(FUZZ_DIR).join("seeds"));
    println!("seeds written to fuzz/seeds/: {total} bytes");
}

fn walk(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let m = e.metadata().unwrap();
                    if m.is_dir() { walk(&e.path()) } else { m.len() }
                })
                .sum()
        })
        .unwrap_or(0)
}
