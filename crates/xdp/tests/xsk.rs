//! AF_XDP sockets on a veth pair between two namespaces (needs root): copy-mode transmit
//! of more frames than the kernel's default per-`sendto` budget, and receive through a
//! test-only XDP program (`tests/data/redirect.c`) that redirects IPv4 UDP to the socket
//! with 16 bytes of metadata in front of each packet.

use std::ffi::CString;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use relay_testbed::{Node, Testbed};
use relay_xdp::xsk::{BindMode, PACKET_HEADROOM, Socket, SocketConfig, XskStats};

const A_IP: [u8; 4] = [10, 0, 0, 1];
const B_IP: [u8; 4] = [10, 0, 0, 2];

/// The metadata redirect.c writes before each packet.
const META: [u8; 16] = [
    0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
];

/// The interface's index in the calling thread's namespace.
fn ifindex(name: &str) -> u32 {
    let c = CString::new(name).unwrap();
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(
        i,
        0,
        "if_nametoindex({name}): {}",
        std::io::Error::last_os_error()
    );
    i
}

/// The MAC address of `ifname` on `node`, from `ip -br link`.
fn mac(node: &Node, ifname: &str) -> [u8; 6] {
    let out = node.ip(&["-br", "link", "show", "dev", ifname]);
    let text = out.split_whitespace().nth(2).unwrap_or_default();
    let bytes: Vec<u8> = text
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    bytes
        .try_into()
        .unwrap_or_else(|_| panic!("no MAC in `{out}`"))
}

/// The i-th test payload: distinct content and length (64 to 113 bytes).
fn payload(i: usize) -> Vec<u8> {
    let mut p = (i as u32).to_be_bytes().to_vec();
    p.extend((0..60 + i % 50).map(|k| (k * 7 + i) as u8));
    p
}

/// An Ethernet + IPv4 + UDP frame from a to b (UDP checksum 0: none, allowed on IPv4).
fn udp_frame(src_mac: [u8; 6], dst_mac: [u8; 6], dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&A_IP);
    ip[16..20].copy_from_slice(&B_IP);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// The Internet checksum of `data` (even length).
fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The running kernel's (major, minor).
fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r.trim().split(['.', '-']).map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[test]
fn tx_copy_mode_sends_more_than_a_kick_budget_byte_for_byte() {
    const N: usize = 200;
    let tb = Testbed::new("xsk_tx");
    let a = tb.node("a");
    let b = tb.node("b");
    let link = tb.link(&a, "10.0.0.1/24", &b, "10.0.0.2/24");
    let (a_mac, b_mac) = (mac(&a, &link.a_if), mac(&b, &link.b_if));

    let (ready_tx, ready_rx) = mpsc::channel();
    let sink = b.run_bg(move || {
        let s = UdpSocket::bind("10.0.0.2:5555").unwrap();
        let buf_bytes: libc::c_int = 8 << 20;
        // SAFETY: a valid int option on a valid socket. Root: FORCE passes rmem_max.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&buf_bytes as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < N {
            match s.recv_from(&mut buf) {
                Ok((n, _)) => got.push(buf[..n].to_vec()),
                Err(_) => break,
            }
        }
        got
    });
    ready_rx.recv().unwrap();

    let a_if = link.a_if.clone();
    let (stats, zero_copy) = a.run(move || {
        let cfg = SocketConfig {
            ifindex: ifindex(&a_if),
            queue: 0,
            rx_size: 0,
            tx_size: 128,
            frames: 128,
            frame_size: 2048,
            bind: BindMode::Auto,
        };
        let mut s = Socket::open(&cfg).unwrap_or_else(|e| panic!("{e}"));
        // More frames than the UMEM holds: the later ones reuse completed frames.
        let mut sent = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while (sent < N || s.pending_tx() > 0) && Instant::now() < deadline {
            while sent < N {
                let frame = udp_frame(a_mac, b_mac, 5555, &payload(sent));
                if !s.send(frame.len(), |buf| buf.copy_from_slice(&frame)) {
                    break;
                }
                sent += 1;
            }
            s.flush().unwrap();
            if s.complete() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert_eq!(sent, N, "frames queued");
        assert_eq!(s.pending_tx(), 0, "frames never completed");
        (s.stats().unwrap(), s.zero_copy())
    });
    assert!(
        !zero_copy,
        "veth has no zero-copy AF_XDP: Auto must bind in copy mode"
    );

    let mut got = sink.join().unwrap();
    assert_eq!(got.len(), N, "datagrams received; stats {stats:?}");
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..N).map(payload).collect();
    want.sort();
    assert!(got == want, "received payloads differ from those sent");
    assert_eq!(stats.tx_invalid_descs, 0, "{stats:?}");
    if kernel_version() >= (6, 17) {
        // XDP_MAX_TX_SKB_BUDGET = ring size (128): two kicks take all 200 (a busy retry or
        // a kick before the completions came aside); the kernel's default of 32 needs 7.
        assert!(stats.tx_kicks <= 4, "budget not raised? {stats:?}");
    }
}

/// Builds redirect.c into `dir` with clang; panics with clang's output on failure.
fn build_redirect(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redirect.c");
    let obj = dir.join("redirect.o");
    let out = Command::new("clang")
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            "-c",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap_or_else(|e| panic!("running clang (make deps installs it): {e}"));
    assert!(
        out.status.success(),
        "clang {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    obj
}

#[test]
fn rx_through_xskmap_redirect_with_metadata() {
    // More packets than frames: received frames must go back to the fill ring.
    const N: usize = 300;
    let dir = std::env::temp_dir().join(format!("relay-xdp-xsk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let obj = std::fs::read(build_redirect(&dir)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let tb = Testbed::new("xsk_rx");
    let a = tb.node("a");
    let b = tb.node("b");
    let link = tb.link(&a, "10.0.0.1/24", &b, "10.0.0.2/24");

    let (ready_tx, ready_rx) = mpsc::channel();
    let b_if = link.b_if.clone();
    let receiver = b.run_bg(move || {
        use aya::maps::XskMap;
        use aya::programs::{Xdp, XdpMode};
        let mut ebpf = aya::Ebpf::load(&obj).unwrap_or_else(|e| panic!("loading redirect.o: {e}"));
        let prog: &mut Xdp = ebpf
            .program_mut("redirect_udp")
            .unwrap()
            .try_into()
            .unwrap();
        prog.load().unwrap_or_else(|e| panic!("verifier: {e}"));
        let link_id = prog
            .attach(&b_if, XdpMode::Driver)
            .unwrap_or_else(|e| panic!("attach: {e}"));

        let cfg = SocketConfig {
            ifindex: ifindex(&b_if),
            queue: 0,
            rx_size: 64,
            tx_size: 0,
            frames: 64,
            frame_size: 2048,
            bind: BindMode::Copy,
        };
        let mut s = Socket::open(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let mut xsks = XskMap::try_from(ebpf.map_mut("xsks").unwrap()).unwrap();
        xsks.set(0, s.fd(), 0).unwrap();
        ready_tx.send(()).unwrap();

        let mut got: Vec<(Vec<u8>, usize, [u8; 16])> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < N && Instant::now() < deadline {
            if !s.wait(100).unwrap() {
                continue;
            }
            s.recv(64, |data, head| {
                let meta: [u8; 16] = head[head.len().saturating_sub(16)..]
                    .try_into()
                    .unwrap_or([0; 16]);
                got.push((data.to_vec(), head.len(), meta));
            });
        }
        let stats: XskStats = s.stats().unwrap();
        xsks.unset(0).unwrap();
        let prog: &mut Xdp = ebpf
            .program_mut("redirect_udp")
            .unwrap()
            .try_into()
            .unwrap();
        prog.detach(link_id).unwrap();
        (got, stats)
    });
    ready_rx.recv().unwrap();

    a.run(move || {
        let s = UdpSocket::bind("10.0.0.1:0").unwrap();
        for i in 0..N {
            s.send_to(&payload(i), "10.0.0.2:6000").unwrap();
            // Paced a little: the first ones wait in a's neighbour queue for ARP.
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let (got, stats) = receiver.join().unwrap();

    assert_eq!(got.len(), N, "packets received; stats {stats:?}");
    let mut payloads = Vec::new();
    for (data, headroom, meta) in &got {
        assert_eq!(
            *headroom, PACKET_HEADROOM,
            "copy mode puts packets 256 bytes in"
        );
        assert_eq!(*meta, META, "metadata before the packet");
        assert_eq!(
            &data[12..14],
            &[0x08, 0x00],
            "starts with the Ethernet header"
        );
        assert_eq!(data[14 + 9], 17, "UDP");
        assert_eq!(&data[14 + 16..14 + 20], &B_IP);
        assert_eq!(u16::from_be_bytes([data[36], data[37]]), 6000);
        payloads.push(data[42..].to_vec());
    }
    let want: Vec<Vec<u8>> = (0..N).map(payload).collect();
    assert_eq!(payloads, want, "payloads in order, byte for byte");
    assert_eq!(stats.rx_dropped, 0, "{stats:?}");
    assert_eq!(stats.rx_invalid_descs, 0, "{stats:?}");
    assert_eq!(stats.rx_ring_full, 0, "{stats:?}");
    assert_eq!(stats.rx_fill_ring_empty_descs, 0, "{stats:?}");
    assert_eq!(stats.bad_descs, 0, "{stats:?}");

    // Detaching closes the link's fd; a fork by a parallel test (spawning `ip`) may hold
    // a copy of it until that child's exec, so the detach can show a moment later.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut shown = b.ip(&["link", "show", "dev", &link.b_if]);
    while shown.contains("xdp") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        shown = b.ip(&["link", "show", "dev", &link.b_if]);
    }
    assert!(!shown.contains("xdp"), "program still attached: {shown}");
}

#[test]
fn tx_leftovers_go_out_with_a_later_flush() {
    const N: usize = 40;
    let tb = Testbed::new("xsk_tx_left");
    let a = tb.node("a");
    let b = tb.node("b");
    let link = tb.link(&a, "10.0.0.1/24", &b, "10.0.0.2/24");
    let (a_mac, b_mac) = (mac(&a, &link.a_if), mac(&b, &link.b_if));

    let (ready_tx, ready_rx) = mpsc::channel();
    let sink = b.run_bg(move || {
        let s = UdpSocket::bind("10.0.0.2:5555").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < N {
            match s.recv_from(&mut buf) {
                Ok((n, _)) => got.push(buf[..n].to_vec()),
                Err(_) => break,
            }
        }
        got
    });
    ready_rx.recv().unwrap();

    // The interface goes down after the frames are queued: the kernel refuses the kick
    // and leaves them on the tx ring; once it is up again, flushes with nothing new
    // queued must send them.
    let a_if = link.a_if.clone();
    let a2 = a.clone();
    let out = a.run(move || {
        let cfg = SocketConfig {
            ifindex: ifindex(&a_if),
            queue: 0,
            rx_size: 0,
            tx_size: 64,
            frames: 64,
            frame_size: 2048,
            bind: BindMode::Copy,
        };
        let mut s = Socket::open(&cfg).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..N {
            let frame = udp_frame(a_mac, b_mac, 5555, &payload(i));
            assert!(s.send(frame.len(), |buf| buf.copy_from_slice(&frame)));
        }
        a2.ip(&["link", "set", &a_if, "down"]);
        let down = s.flush();
        s.complete();
        let pending_down = s.pending_tx();
        a2.ip(&["link", "set", &a_if, "up"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.pending_tx() > 0 && Instant::now() < deadline {
            let _ = s.flush();
            if s.complete() == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        (
            down.map_err(|e| e.raw_os_error()),
            pending_down,
            s.pending_tx(),
            s.stats().unwrap(),
        )
    });
    let (down, pending_down, pending_end, stats) = out;
    assert_eq!(down, Err(Some(libc::ENETDOWN)), "flush on a down interface");
    assert_eq!(pending_down, N, "nothing sent or completed while down");
    assert_eq!(pending_end, 0, "leftovers never went out; {stats:?}");
    let mut got = sink.join().unwrap();
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..N).map(payload).collect();
    want.sort();
    assert!(
        got == want,
        "received {} of {N}, or different bytes",
        got.len()
    );
}
