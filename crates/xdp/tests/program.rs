//! The XDP program on the kernel (root; namespace testbeds): its parsing and rules on test
//! frames (`BPF_PROG_TEST_RUN` in the relay's namespace, so the FIB lookups are real),
//! the failure policy on real traffic through an attached program, the attachment
//! outliving the `Program`, and the refusal of foreign programs and the cleanup.
//!
//! Topology (relay_testbed::line3): src 10.0.1.1 -- relay (XDP on eth0) -- dst 10.0.2.2.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::time::Duration;

use relay_testbed::{Line3, Node, line3};
use relay_xdp::XdpError;
use relay_xdp::attach::{self, AttachedProgram};
use relay_xdp::program::{FrameMeta, MatchRule, Mode, Program, ProgramStats};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const UDP: u8 = 17;
const TCP: u8 = 6;
const ESP: u8 = 50;

const SRC4: [u8; 4] = [10, 0, 1, 1];
const DST4: [u8; 4] = [10, 0, 2, 2];

fn v6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().unwrap().octets()
}

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ports(sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut h = vec![0u8; len];
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h
}

fn udp(dport: u16) -> Vec<u8> {
    let mut u = ports(40000, dport, 8);
    u.extend_from_slice(b"data");
    u
}

fn tcp(dport: u16) -> Vec<u8> {
    ports(40000, dport, 20)
}

/// An IPv4 frame; `frag` is the frag_off field (flags and offset).
fn ip4(proto: u8, src: [u8; 4], dst: [u8; 4], ttl: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(l4);
    eth(0x0800, &h)
}

fn udp4(dst: [u8; 4], dport: u16, ttl: u8) -> Vec<u8> {
    ip4(UDP, SRC4, dst, ttl, 0, &udp(dport))
}

fn ip6(next: u8, src: &str, dst: &str, hops: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, hops]);
    h.extend_from_slice(&v6(src));
    h.extend_from_slice(&v6(dst));
    h.extend_from_slice(l4);
    eth(0x86dd, &h)
}

/// Which counter one packet moved.
fn moved(before: ProgramStats, after: ProgramStats) -> &'static str {
    assert_eq!(after.seen, before.seen + 1, "seen counts every packet");
    let deltas = [
        ("redirected", after.redirected - before.redirected),
        ("no_socket", after.no_socket - before.no_socket),
        (
            "pass_unmatched",
            after.pass_unmatched - before.pass_unmatched,
        ),
        ("pass_fib", after.pass_fib - before.pass_fib),
        ("pass_ttl", after.pass_ttl - before.pass_ttl),
        ("pass_unparsed", after.pass_unparsed - before.pass_unparsed),
    ];
    let hit: Vec<_> = deltas.iter().filter(|d| d.1 != 0).collect();
    assert!(
        hit.len() == 1 && hit[0].1 == 1,
        "exactly one outcome counter must move by one: {deltas:?}"
    );
    hit[0].0
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: c is a live NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "no interface {name} here");
    i
}

fn mac(node: &Node, ifname: &str) -> [u8; 6] {
    let out = node.ip(&["-br", "link", "show", ifname]);
    let text = out.split_whitespace().nth(2).unwrap();
    let mut m = [0u8; 6];
    for (i, part) in text.split(':').enumerate() {
        m[i] = u8::from_str_radix(part, 16).unwrap();
    }
    m
}

fn xdp_shown(node: &Node, ifname: &str) -> bool {
    node.ip(&["-d", "link", "show", ifname]).contains("xdp")
}

/// Runs `f` with the program inside `node`'s namespace and hands the program back.
fn with<T: Send + 'static>(
    node: &Node,
    prog: Program,
    f: impl FnOnce(&mut Program) -> T + Send + 'static,
) -> (Program, T) {
    node.run(move || {
        let mut prog = prog;
        let r = f(&mut prog);
        (prog, r)
    })
}

/// Neighbour entries on the relay for dst, so that the FIB lookups succeed.
fn resolve_neighbours(l: &Line3) {
    assert!(l.relay.ping("10.0.2.2"), "relay reaches dst");
    assert!(l.relay.ping("fd00:2::2"), "relay reaches dst over IPv6");
}

#[test]
fn parsing_rules_and_metadata_on_test_frames() {
    let l = line3("xdp-test-frames");
    resolve_neighbours(&l);
    let dst_mac = mac(&l.dst, &l.dst_link.b_if);
    let relay_out_mac = mac(&l.relay, &l.dst_link.a_if);
    let (in_if, out_if) = (l.src_link.b_if.clone(), l.dst_link.a_if.clone());

    l.relay.run(move || {
        let (ingress, egress) = (ifindex(&in_if), ifindex(&out_if));
        let mut prog = Program::load().expect("load");
        let rules = [
            MatchRule::ANY.with_proto(UDP).with_dports(5000, 5010),
            MatchRule::ANY
                .with_proto(TCP)
                .with_src(IpAddr::from(SRC4), 25),
            MatchRule::ANY
                .with_proto(ESP)
                .with_dst("fd00:2::2".parse().unwrap(), 127),
        ];
        prog.set_rules(&rules).unwrap();
        prog.set_fail_open(false).unwrap();

        let run = |prog: &Program, frame: &[u8]| {
            let before = prog.stats().unwrap();
            let r = prog.test_run(frame, ingress, 0).unwrap();
            (moved(before, prog.stats().unwrap()), r)
        };

        // Matched, forwardable: metadata for userland, the frame untouched, and with no
        // socket bound the fail-closed policy drops it.
        let frame = udp4(DST4, 5000, 64);
        let (what, r) = run(&prog, &frame);
        assert_eq!((what, r.action), ("no_socket", XDP_DROP));
        let want = FrameMeta {
            ifindex: egress,
            dmac: dst_mac,
            smac: relay_out_mac,
        };
        assert_eq!(r.meta, Some(want), "the FIB's next hop");
        assert_eq!(r.frame, frame, "the program never rewrites the packet");
        let frame6 = ip6(UDP, "fd00:1::1", "fd00:2::2", 64, &udp(5010));
        let (what, r) = run(&prog, &frame6);
        assert_eq!(
            (what, r.action, r.meta),
            ("no_socket", XDP_DROP, Some(want))
        );
        assert_eq!(r.frame, frame6);

        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "udp port above the range",
                udp4(DST4, 5011, 64),
                "pass_unmatched",
            ),
            (
                "udp port below the range",
                udp4(DST4, 4999, 64),
                "pass_unmatched",
            ),
            ("ttl 1", udp4(DST4, 5000, 1), "pass_ttl"),
            ("ttl 0", udp4(DST4, 5000, 0), "pass_ttl"),
            ("ttl 2", udp4(DST4, 5000, 2), "no_socket"),
            ("ttl 1 unmatched", udp4(DST4, 6000, 1), "pass_unmatched"),
            (
                "to the relay itself",
                udp4([10, 0, 1, 2], 5000, 64),
                "pass_fib",
            ),
            ("no route", udp4([192, 0, 2, 1], 5000, 64), "pass_fib"),
            (
                "tcp from the /25",
                ip4(TCP, SRC4, DST4, 64, 0, &tcp(80)),
                "no_socket",
            ),
            (
                "tcp from outside the /25",
                ip4(TCP, [10, 0, 1, 129], DST4, 64, 0, &tcp(80)),
                "pass_unmatched",
            ),
            (
                "icmp (port rules need ports)",
                ip4(1, SRC4, DST4, 64, 0, &[8, 0, 0, 0, 0, 0, 0, 0]),
                "pass_unmatched",
            ),
            (
                "more fragments",
                ip4(UDP, SRC4, DST4, 64, 0x2000, &udp(5000)),
                "no_socket",
            ),
            (
                "fragment offset",
                ip4(UDP, SRC4, DST4, 64, 0x0001, &udp(5000)),
                "no_socket",
            ),
            (
                "a fragment of a protocol no rule names",
                ip4(1, SRC4, DST4, 64, 0x2000, &[8, 0, 0, 0, 0, 0, 0, 0]),
                "pass_unmatched",
            ),
            (
                // Neither protocol nor ports are read behind an extension header, so the
                // UDP port rule (any address) takes it: conservatively relayd's.
                "ipv6 hop-by-hop outside the /127",
                ip6(0, "fd00:1::1", "fd00:2::4", 64, &udp(5000)),
                "no_socket",
            ),
            (
                "don't fragment is fine",
                ip4(UDP, SRC4, DST4, 64, 0x4000, &udp(5000)),
                "no_socket",
            ),
            (
                "ipv4 options",
                {
                    let mut f = udp4(DST4, 5000, 64);
                    f[14] = 0x46;
                    f.splice(34..34, [1, 1, 1, 0]);
                    f
                },
                "no_socket",
            ),
            (
                "vlan tag",
                eth(0x8100, &udp4(DST4, 5000, 64)[12..]),
                "pass_unparsed",
            ),
            ("arp", eth(0x0806, &[0u8; 28]), "pass_unparsed"),
            // (BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header.)
            ("ethernet header only", eth(0x0800, &[]), "pass_unparsed"),
            (
                "ipv4 header cut",
                udp4(DST4, 5000, 64)[..30].to_vec(),
                "pass_unparsed",
            ),
            (
                "udp header cut",
                udp4(DST4, 5000, 64)[..38].to_vec(),
                "pass_unparsed",
            ),
            (
                "tcp header cut",
                ip4(TCP, SRC4, DST4, 64, 0, &tcp(80))[..50].to_vec(),
                "pass_unparsed",
            ),
            (
                "ipv6 hop limit 1",
                ip6(UDP, "fd00:1::1", "fd00:2::2", 1, &udp(5000)),
                "pass_ttl",
            ),
            (
                "ipv6 hop-by-hop",
                ip6(0, "fd00:1::1", "fd00:2::2", 64, &udp(5000)),
                "no_socket",
            ),
            (
                "ipv6 fragment header",
                ip6(44, "fd00:1::1", "fd00:2::2", 64, &udp(5000)),
                "no_socket",
            ),
            (
                "esp to the /127",
                ip6(ESP, "fd00:1::1", "fd00:2::3", 64, &[0u8; 16]),
                "no_socket", // no neighbour fd00:2::3: still relayd's (ifindex 0), none bound
            ),
            (
                "esp outside the /127",
                ip6(ESP, "fd00:1::1", "fd00:2::4", 64, &[0u8; 16]),
                "pass_unmatched",
            ),
            (
                "esp over ipv4 (rule is ipv6)",
                ip4(ESP, SRC4, DST4, 64, 0, &[0u8; 16]),
                "pass_unmatched",
            ),
            (
                "ipv6 header cut",
                ip6(UDP, "fd00:1::1", "fd00:2::2", 64, &udp(5000))[..40].to_vec(),
                "pass_unparsed",
            ),
        ];
        for (name, frame, want) in &cases {
            let (what, r) = run(&prog, frame);
            assert_eq!(what, *want, "case `{name}`");
            let action = if *want == "no_socket" {
                XDP_DROP
            } else {
                XDP_PASS
            };
            assert_eq!(r.action, action, "case `{name}`: verdict");
            assert_eq!(&r.frame, frame, "case `{name}`: frame untouched");
        }

        // Fewer rules: the ones beyond the count no longer apply.
        prog.set_rules(&rules[..1]).unwrap();
        let tcp_frame = ip4(TCP, SRC4, DST4, 64, 0, &tcp(80));
        assert_eq!(run(&prog, &tcp_frame).0, "pass_unmatched");
        assert_eq!(run(&prog, &frame).0, "no_socket");
        prog.set_rules(&[]).unwrap();
        assert_eq!(run(&prog, &frame).0, "pass_unmatched");

        // Fail-open passes a matched packet with no socket (metadata written all the same).
        prog.set_rules(&[MatchRule::ANY]).unwrap();
        prog.set_fail_open(true).unwrap();
        let (what, r) = run(&prog, &frame);
        assert_eq!(
            (what, r.action, r.meta),
            ("no_socket", XDP_PASS, Some(want))
        );
        assert_eq!(run(&prog, &tcp_frame).0, "no_socket", "ANY matches tcp");
    });
}

#[test]
fn rules_and_queues_are_checked() {
    // Loading needs no namespace; the checks are made before any map is written.
    let mut prog = Program::load().expect("load");
    let too_many = vec![MatchRule::ANY; 33];
    assert!(matches!(
        prog.set_rules(&too_many),
        Err(XdpError::TooManyRules { got: 33 })
    ));
    prog.set_rules(&too_many[..32]).expect("32 rules fit");
    let bad = [
        MatchRule::ANY.with_family(5),
        MatchRule {
            src_len: 8,
            ..MatchRule::ANY
        },
        MatchRule::ANY.with_src(IpAddr::from(Ipv4Addr::LOCALHOST), 33),
        MatchRule::ANY.with_dst(IpAddr::from(Ipv6Addr::LOCALHOST), 129),
        MatchRule::ANY.with_dports(10, 9),
    ];
    for (i, r) in bad.iter().enumerate() {
        let e = prog.set_rules(&[MatchRule::ANY, *r]).unwrap_err();
        assert!(
            matches!(e, XdpError::InvalidRule { index: 1, .. }),
            "bad rule {i}: {e}"
        );
    }
    assert!(matches!(
        prog.bind_socket(64, 0),
        Err(XdpError::QueueOutOfRange { queue: 64 })
    ));
    // Not an AF_XDP socket: the kernel refuses it.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    use std::os::fd::AsRawFd;
    assert!(prog.bind_socket(0, udp.as_raw_fd()).is_err());
    prog.unbind_socket(3)
        .expect("unbinding an empty queue is no error");
    assert_eq!(MatchRule::default(), MatchRule::ANY);
    assert_eq!(FrameMeta::parse(&[0u8; 15]), None);
    let mut m = vec![9u8; 20];
    m[4..8].copy_from_slice(&7u32.to_ne_bytes());
    m[8..14].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
    m[14..20].copy_from_slice(&[7, 8, 9, 10, 11, 12]);
    assert_eq!(
        FrameMeta::parse(&m),
        Some(FrameMeta {
            ifindex: 7,
            dmac: [1, 2, 3, 4, 5, 6],
            smac: [7, 8, 9, 10, 11, 12]
        }),
        "the last 16 bytes before the packet"
    );
}

/// Datagrams waiting on `sock`, read until it stays quiet for `quiet`.
fn drain(sock: &UdpSocket, quiet: Duration) -> usize {
    sock.set_read_timeout(Some(quiet)).unwrap();
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while sock.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

/// Sends `n` datagrams from `from` to `to` and waits a little for them to cross.
fn send(from: &UdpSocket, to: &str, n: usize) {
    for _ in 0..n {
        from.send_to(b"xdp test", to).unwrap();
    }
}

fn stats(node: &Node, prog: Program) -> (Program, ProgramStats) {
    with(node, prog, |p| p.stats().unwrap())
}

#[test]
fn failure_policy_on_real_traffic_and_the_attachment_outlives_the_program() {
    let l = line3("xdp-policy");
    let in_if = l.src_link.b_if.clone();
    let q = Duration::from_millis(400);
    let tx = l.src.run(|| UdpSocket::bind("0.0.0.0:0").unwrap());
    let tx6 = l.src.run(|| UdpSocket::bind("[::]:0").unwrap());
    let rx = l.dst.run(|| UdpSocket::bind("[::]:5000").unwrap());
    let rx_other = l.dst.run(|| UdpSocket::bind("[::]:6000").unwrap());

    let prog = Program::load().expect("load");
    let (prog, ifindex) = with(&l.relay, prog, move |p| {
        p.set_rules(&[MatchRule::ANY.with_proto(UDP).with_dports(5000, 5000)])
            .unwrap();
        p.set_fail_open(true).unwrap();
        let i = ifindex(&in_if);
        p.attach(i, Mode::Native).expect("attach native on veth");
        i
    });
    let id = prog.id();
    let here = l.relay.run(move || attach::attached(ifindex).unwrap());
    assert_eq!(
        here,
        Some(AttachedProgram {
            id,
            name: "relayd_xdp".into(),
            mode: Some(Mode::Native)
        })
    );
    assert!(xdp_shown(&l.relay, &l.src_link.b_if));

    // The very first packet finds no neighbour entry for dst: it is still relayd's (so a
    // chain is never bypassed); with no socket bound, fail-open hands it to the kernel,
    // which resolves dst and delivers it.
    let (prog, s0) = stats(&l.relay, prog);
    send(&tx, "10.0.2.2:5000", 1);
    assert_eq!(
        drain(&rx, q),
        1,
        "fail-open passes a matched packet with no neighbour yet"
    );
    let (prog, s1) = stats(&l.relay, prog);
    assert_eq!(s1.no_socket - s0.no_socket, 1, "{s1:?}");
    assert_eq!(s1.pass_fib, s0.pass_fib, "{s1:?}");
    assert!(l.relay.ping("fd00:2::2"));

    // Fail-open, no socket: everything arrives; the matched ones are counted.
    send(&tx, "10.0.2.2:5000", 5);
    send(&tx6, "[fd00:2::2]:5000", 3);
    send(&tx, "10.0.2.2:6000", 5);
    assert_eq!(drain(&rx, q), 8, "fail-open passes matched packets");
    assert_eq!(drain(&rx_other, q), 5);
    let (prog, s2) = stats(&l.relay, prog);
    assert_eq!(s2.no_socket - s1.no_socket, 8, "{s2:?}");
    assert_eq!(s2.redirected_unresolved, 0);
    assert!(s2.pass_unmatched - s1.pass_unmatched >= 5, "{s2:?}");
    assert_eq!(s2.redirected, 0);
    assert_eq!(s2.pass_fib, s1.pass_fib);

    // Fail-closed: matched packets are dropped, the rest still flows.
    let (prog, ()) = with(&l.relay, prog, |p| p.set_fail_open(false).unwrap());
    send(&tx, "10.0.2.2:5000", 5);
    send(&tx, "10.0.2.2:6000", 5);
    assert_eq!(drain(&rx, q), 0, "fail-closed drops matched packets");
    assert_eq!(drain(&rx_other, q), 5);
    let (prog, s3) = stats(&l.relay, prog);
    assert_eq!(s3.no_socket - s2.no_socket, 5, "{s3:?}");

    // TTL 1: the kernel's to answer, even fail-closed.
    tx.set_ttl(1).unwrap();
    send(&tx, "10.0.2.2:5000", 2);
    tx.set_ttl(64).unwrap();
    assert_eq!(drain(&rx, q), 0);
    let (prog, s4) = stats(&l.relay, prog);
    assert_eq!(s4.pass_ttl - s3.pass_ttl, 2, "{s4:?}");

    // relayd gone (its Program dropped): the program stays, and so does the policy.
    drop(prog);
    let still = l.relay.run(move || attach::attached(ifindex).unwrap());
    assert_eq!(
        still.map(|p| p.id),
        Some(id),
        "the attachment outlives the Program"
    );
    send(&tx, "10.0.2.2:5000", 3);
    send(&tx, "10.0.2.2:6000", 3);
    assert_eq!(drain(&rx, q), 0, "fail-closed holds with relayd gone");
    assert_eq!(drain(&rx_other, q), 3);

    // Detached: no trace, and traffic flows as before.
    assert!(l.relay.run(move || attach::detach(ifindex).unwrap()));
    assert!(!xdp_shown(&l.relay, &l.src_link.b_if));
    assert_eq!(
        l.relay.run(move || attach::attached(ifindex).unwrap()),
        None
    );
    assert!(
        !l.relay.run(move || attach::detach(ifindex).unwrap()),
        "nothing left"
    );
    send(&tx, "10.0.2.2:5000", 2);
    assert_eq!(drain(&rx, q), 2);
}

/// Builds a minimal XDP program named `foreign_xdp` with clang (which the crate's build
/// needs anyway) and returns the object's path.
fn foreign_object(dir: &std::path::Path) -> std::path::PathBuf {
    let c = dir.join("foreign.c");
    std::fs::write(
        &c,
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n\
         SEC(\"xdp\") int foreign_xdp(struct xdp_md *ctx) { return XDP_PASS; }\n\
         char _license[] SEC(\"license\") = \"GPL\";\n",
    )
    .unwrap();
    let o = dir.join("foreign.o");
    let arch = if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    };
    let out = std::process::Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf"])
        .arg(format!("-I/usr/include/{arch}"))
        .arg("-c")
        .arg(&c)
        .arg("-o")
        .arg(&o)
        .output()
        .expect("clang");
    assert!(
        out.status.success(),
        "clang: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    o
}

#[test]
fn foreign_programs_are_left_alone_and_cleanup_removes_only_relayd() {
    let l = line3("xdp-foreign");
    let dir = std::env::temp_dir().join(format!("relay-xdp-foreign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let obj = foreign_object(&dir);
    let (eth0, eth1) = (l.src_link.b_if.clone(), l.dst_link.a_if.clone());
    l.relay.ip(&[
        "link",
        "set",
        "dev",
        &eth1,
        "xdpdrv",
        "obj",
        obj.to_str().unwrap(),
        "sec",
        "xdp",
    ]);
    let _ = std::fs::remove_dir_all(&dir);

    let (e0, e1) = l.relay.run(move || (ifindex(&eth0), ifindex(&eth1)));
    let theirs = l.relay.run(move || attach::attached(e1).unwrap()).unwrap();
    assert_eq!(
        (theirs.name.as_str(), theirs.mode, theirs.is_relayd()),
        ("foreign_xdp", Some(Mode::Native), false)
    );

    let first = Program::load().unwrap();
    let (first, refused) = with(&l.relay, first, move |p| p.attach(e1, Mode::Native));
    match refused {
        Err(XdpError::Foreign { ifname, name, id }) => {
            assert_eq!(
                (ifname.as_str(), name.as_str(), id),
                (l.dst_link.a_if.as_str(), "foreign_xdp", theirs.id)
            );
        }
        other => panic!("a foreign program must be refused: {other:?}"),
    }
    let (_, refused) = with(&l.relay, first, move |p| p.attach(e1, Mode::Generic));
    assert!(
        matches!(refused, Err(XdpError::Foreign { .. })),
        "{refused:?}"
    );
    assert_eq!(
        l.relay
            .run(move || attach::attached(e1).unwrap())
            .map(|p| p.id),
        Some(theirs.id),
        "still theirs"
    );
    assert!(
        !l.relay.run(move || attach::detach(e1).unwrap()),
        "detach leaves it too"
    );

    // The kernel's own explanation reaches the error: native XDP on veth caps the peer's
    // MTU (no multi-buffer support in the program).
    l.src
        .ip(&["link", "set", "dev", &l.src_link.a_if, "mtu", "9000"]);
    let (_, e) = with(&l.relay, Program::load().unwrap(), move |p| {
        p.attach(e0, Mode::Native)
    });
    match e {
        Err(XdpError::Kernel { source, kernel, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ERANGE));
            let msg = kernel.unwrap_or_default();
            assert!(msg.contains("MTU"), "extended ack: {msg:?}");
        }
        other => panic!("a peer MTU of 9000 must be refused: {other:?}"),
    }
    l.src
        .ip(&["link", "set", "dev", &l.src_link.a_if, "mtu", "1500"]);
    assert!(!xdp_shown(&l.relay, &l.src_link.b_if));

    // A relayd that died left its program on eth0; the next one replaces it, also when it
    // asks for the other mode.
    let (old, ()) = with(&l.relay, Program::load().unwrap(), move |p| {
        p.attach(e0, Mode::Native).unwrap()
    });
    let old_id = old.id();
    drop(old);
    let (new, ()) = with(&l.relay, Program::load().unwrap(), move |p| {
        p.attach(e0, Mode::Native).unwrap()
    });
    let now = l.relay.run(move || attach::attached(e0).unwrap()).unwrap();
    assert_eq!((now.id, now.mode), (new.id(), Some(Mode::Native)));
    assert_ne!(now.id, old_id);
    let (new, ()) = with(&l.relay, new, move |p| p.attach(e0, Mode::Native).unwrap());
    assert_eq!(
        l.relay
            .run(move || attach::attached(e0).unwrap())
            .map(|p| p.id),
        Some(new.id()),
        "attaching again is a no-op"
    );
    let (new, ()) = with(&l.relay, new, move |p| p.attach(e0, Mode::Generic).unwrap());
    let now = l.relay.run(move || attach::attached(e0).unwrap()).unwrap();
    assert_eq!((now.id, now.mode), (new.id(), Some(Mode::Generic)));
    drop(new);

    // cleanup: relayd's attachment goes, the foreign one stays.
    let cleaned = l.relay.run(|| attach::cleanup().unwrap());
    assert_eq!(cleaned, vec![l.src_link.b_if.clone()]);
    assert!(!xdp_shown(&l.relay, &l.src_link.b_if));
    assert!(xdp_shown(&l.relay, &l.dst_link.a_if));
    assert_eq!(
        l.relay.run(|| attach::cleanup().unwrap()),
        Vec::<String>::new()
    );
    l.relay
        .ip(&["link", "set", "dev", &l.dst_link.a_if, "xdp", "off"]);
    assert!(!l.relay.ip(&["-d", "link", "show"]).contains("xdp"));

    assert!(matches!(
        l.relay.run(|| attach::attached(999_999)),
        Err(XdpError::NoSuchInterface { ifindex: 999_999 })
    ));
}
