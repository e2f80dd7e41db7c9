//! Conntrack state on the real kernel: a flow's first packet is New, later ones
//! Established, replies flagged as such; the conntrack mark bits are taken off the mark the
//! services see and off the mark the packet leaves with. Needs root.
//!
//! This kernel may lack CONFIG_NETFILTER_NETLINK_GLUE_CT: the queue asks for NFQA_CT_INFO
//! anyway and the test holds whichever way the state arrives (kernel or mark bits).

use relay_core::wire::proto;
use relay_core::{
    Action, Chain, ChainSettings, Context, Counter, CtInfo, CtMarkBits, CtState, Packet,
    QueueCounters, Service, Verdict,
};
use relay_nfq::{Queue, QueueConfig};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BITS: CtMarkBits = CtMarkBits {
    established: 0x100,
    related: 0x200,
    reply: 0x400,
    tracked: 0x800,
};

/// What the recording service saw of one packet.
#[derive(Debug, Clone, Copy)]
struct Seen {
    proto: u8,
    dport: u16,
    sport: u16,
    syn: bool,
    ct: Option<CtInfo>,
    mark: u32,
}

struct Record(Arc<Mutex<Vec<Seen>>>);

impl Service for Record {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        let (proto, sport, dport, syn) = if let Some(t) = pkt.tcp() {
            (
                proto::TCP,
                t.src_port(),
                t.dst_port(),
                t.flags() & 0x02 != 0,
            )
        } else if let Some(u) = pkt.udp() {
            (proto::UDP, u.src_port(), u.dst_port(), false)
        } else {
            (0, 0, 0, false)
        };
        let s = Seen {
            proto,
            sport,
            dport,
            syn,
            ct: pkt.meta.ct,
            mark: pkt.meta.mark,
        };
        self.0.lock().unwrap().push(s);
        Action::Continue
    }
}

fn ipt(node: &relay_testbed::Node, rule: &str) {
    let out = node.sh(&format!("iptables -w {rule}"));
    assert!(
        out.status.success(),
        "iptables {rule}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Packet counter of the first rule in mangle POSTROUTING whose line contains `needle`.
fn counter(node: &relay_testbed::Node, needle: &str) -> u64 {
    let out = node.sh("iptables -w -t mangle -nvxL POSTROUTING");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no rule with {needle:?} in\n{text}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn flows_are_new_then_established_with_replies_flagged() {
    let l = relay_testbed::line3("nfq-ct");
    // A mark of its own the packet must keep, then the conntrack bits, then the queue.
    for rule in [
        "-t mangle -A FORWARD -j MARK --set-mark 0x5",
        "-t mangle -A FORWARD -m conntrack --ctstate NEW,ESTABLISHED,RELATED -j MARK --or-mark 0x800",
        "-t mangle -A FORWARD -m conntrack --ctstate ESTABLISHED -j MARK --or-mark 0x100",
        "-t mangle -A FORWARD -m conntrack --ctstate RELATED -j MARK --or-mark 0x200",
        "-t mangle -A FORWARD -m conntrack --ctdir REPLY -j MARK --or-mark 0x400",
        "-t mangle -A FORWARD -j NFQUEUE --queue-num 7",
        "-t mangle -A POSTROUTING -d 10.0.0.0/8 -m mark --mark 0x5",
        "-t mangle -A POSTROUTING -d 10.0.0.0/8 -m mark ! --mark 0x5",
    ] {
        ipt(&l.relay, rule);
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = Record(seen.clone());
    let q = l.relay.run(move || {
        let mut chain = Chain::new(ChainSettings {
            malformed: Verdict::Accept,
            hook: relay_core::Hook::Forward,
            stages: relay_core::StageMark::DEFAULT,
        });
        chain.push("record", Box::new(rec), Counter::new());
        let cfg = QueueConfig {
            conntrack: true,
            ct_mark_bits: Some(BITS),
            ..QueueConfig::new(7)
        };
        Queue::start(&cfg, chain, QueueCounters::default()).unwrap()
    });

    // UDP: two requests, each echoed. Both servers bind before the client starts.
    let s = l.dst.run(|| UdpSocket::bind("10.0.2.2:5000").unwrap());
    let echo = l.dst.run_bg(move || {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..2 {
            let (n, from) = s.recv_from(&mut buf).unwrap();
            s.send_to(&buf[..n], from).unwrap();
        }
    });
    // TCP: a small request and answer.
    let ln = l.dst.run(|| TcpListener::bind("10.0.2.2:6000").unwrap());
    let server = l.dst.run_bg(move || {
        let (mut c, _) = ln.accept().unwrap();
        let mut req = Vec::new();
        c.read_to_end(&mut req).unwrap();
        c.write_all(b"answer").unwrap();
    });
    let got = l.src.run(|| {
        let s = UdpSocket::bind("10.0.1.1:4000").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 64];
        for msg in [&b"one"[..], b"two"] {
            s.send_to(msg, "10.0.2.2:5000").unwrap();
            let (n, _) = s.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], msg);
        }
        let mut c = TcpStream::connect("10.0.2.2:6000").unwrap();
        c.write_all(b"request").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).unwrap();
        answer
    });
    assert_eq!(got, b"answer");
    echo.join().unwrap();
    server.join().unwrap();
    let kernel_ct = q.kernel_conntrack();
    q.stop();

    let seen = seen.lock().unwrap().clone();
    let ct = |state, reply| Some(CtInfo { state, reply });
    let udp: Vec<_> = seen.iter().filter(|s| s.proto == proto::UDP).collect();
    assert_eq!(udp.len(), 4, "{seen:#?}");
    let udp_ct: Vec<_> = udp.iter().map(|s| (s.dport, s.ct)).collect();
    assert_eq!(
        udp_ct,
        [
            (5000, ct(CtState::New, false)),
            (4000, ct(CtState::Established, true)),
            (5000, ct(CtState::Established, false)),
            (4000, ct(CtState::Established, true)),
        ],
        "kernel conntrack flag taken: {kernel_ct}"
    );
    let tcp: Vec<_> = seen.iter().filter(|s| s.proto == proto::TCP).collect();
    assert!(tcp.len() >= 6, "{tcp:#?}");
    assert!(tcp[0].syn && tcp[0].dport == 6000);
    assert_eq!(tcp[0].ct, ct(CtState::New, false), "the SYN is New");
    assert!(
        tcp[1].syn && tcp[1].sport == 6000,
        "SYN-ACK second: {tcp:#?}"
    );
    assert_eq!(tcp[1].ct, ct(CtState::Established, true), "the SYN-ACK");
    for s in &tcp[2..] {
        let want = ct(CtState::Established, s.sport == 6000);
        assert_eq!(s.ct, want, "{s:?}");
    }
    // Services see the packet's own mark, never the conntrack bits...
    assert!(seen.iter().all(|s| s.mark == 0x5), "{seen:#?}");
    // ... and the packet leaves with it.
    let kept = counter(&l.relay, "mark match 0x5");
    let changed = counter(&l.relay, "mark match ! 0x5");
    assert_eq!(
        changed, 0,
        "packets left with the conntrack bits in their mark"
    );
    assert_eq!(kept, seen.len() as u64);
}
