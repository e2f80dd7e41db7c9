//! The SOCKS5 proxy on the real kernel: a client - relay - server line (testbed `line3`),
//! the proxy process inside the relay namespace, clients (curl, a hand-written SOCKS5
//! client) in the client namespace. Needs root. (The transparent proxy's tests are in
//! kernel.rs.)

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{block, echo_server, start_proxy, stats};
use relay_testbed::line3;
use serde_json::json;
use sha2::{Digest, Sha256};

#[test]
fn socks5_with_curl() {
    let l = line3("proxy_socks");
    // The proxy resolves `server.test` through /etc/hosts, which `ip netns exec` takes
    // from /etc/netns/NS/hosts.
    let etc = format!("/etc/netns/{}", l.relay.name());
    let had_netns_dir = std::path::Path::new("/etc/netns").exists();
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(
        format!("{etc}/hosts"),
        "10.0.2.2 server.test\nfd00:2::2 server6.test\n",
    )
    .unwrap();
    struct RmDir(String);
    impl Drop for RmDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    struct RmEmptyEtcNetns(bool);
    impl Drop for RmEmptyEtcNetns {
        fn drop(&mut self) {
            if !self.0 {
                // Only if this test created it, and only if empty (remove_dir fails otherwise).
                let _ = std::fs::remove_dir("/etc/netns");
            }
        }
    }
    // Declared before `_rm` so it drops after it (reverse order of declaration).
    let _rm_parent = RmEmptyEtcNetns(had_netns_dir);
    let _rm = RmDir(etc);
    let www = std::env::temp_dir().join(format!("relay-proxy-www-{}", std::process::id()));
    std::fs::create_dir_all(&www).unwrap();
    let body: Vec<u8> = block().into_iter().cycle().take(3 << 20).collect();
    std::fs::write(www.join("f.bin"), &body).unwrap();
    let _rm_www = RmDir(www.to_string_lossy().into_owned());
    let mut http = l.dst.cmd("python3");
    http.args(["-m", "http.server", "8000", "--bind", "::", "--directory"])
        .arg(&www)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let _http = l.dst.spawn(http);
    let open = json!({"listen": "10.0.1.2:1080"});
    let authed = json!({"listen": "10.0.1.2:1081",
        "users": [{"username": "alice", "password": "s3cret"}]});
    let p_open = start_proxy(&l.relay, "socks5", &open);
    let p_auth = start_proxy(&l.relay, "socks5", &authed);
    // Wait for the HTTP server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !l
        .dst
        .sh("python3 - <<'E'\nimport socket;socket.create_connection(('10.0.2.2',8000),1)\nE")
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "http.server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let curl = |args: &[&str]| {
        let mut c = l.src.cmd("curl");
        c.args(["-sS", "--max-time", "20"]).args(args);
        c.output().unwrap()
    };
    let want = Sha256::digest(&body).to_vec();
    for (proxy, url) in [
        ("socks5h://10.0.1.2:1080", "http://server.test:8000/f.bin"),
        ("socks5h://10.0.1.2:1080", "http://server6.test:8000/f.bin"),
        ("socks5://10.0.1.2:1080", "http://10.0.2.2:8000/f.bin"),
        ("socks5://10.0.1.2:1080", "http://[fd00:2::2]:8000/f.bin"),
        (
            "socks5h://alice:s3cret@10.0.1.2:1081",
            "http://server.test:8000/f.bin",
        ),
    ] {
        let out = curl(&["-x", proxy, url]);
        assert!(
            out.status.success(),
            "curl -x {proxy} {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            Sha256::digest(&out.stdout).to_vec(),
            want,
            "curl -x {proxy} {url}"
        );
    }
    // Also the --socks5-hostname spelling.
    let out = curl(&[
        "--socks5-hostname",
        "10.0.1.2:1080",
        "http://server.test:8000/f.bin",
    ]);
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), body.len());
    // Wrong password, no credentials, unknown host, refused port.
    let bad = curl(&[
        "-x",
        "socks5h://alice:wrong@10.0.1.2:1081",
        "http://server.test:8000/f.bin",
    ]);
    assert!(!bad.status.success());
    let none = curl(&[
        "-x",
        "socks5h://10.0.1.2:1081",
        "http://server.test:8000/f.bin",
    ]);
    assert!(!none.status.success());
    let unknown = curl(&[
        "-x",
        "socks5h://10.0.1.2:1080",
        "http://nowhere.invalid:8000/",
    ]);
    assert!(!unknown.status.success());
    let refused = curl(&["-x", "socks5://10.0.1.2:1080", "http://10.0.2.2:8001/"]);
    // curl prints the SOCKS reply code: 5 is "connection refused" (RFC 1928 section 6).
    let msg = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(
        msg.contains("(5)") || msg.contains("refused"),
        "curl said: {msg}"
    );
    let so = stats(&p_open);
    let sa = stats(&p_auth);
    println!("socks5 stats: open {so}, authed {sa}");
    assert_eq!(so["completed"], 5);
    assert_eq!(so["upstream_failed"], 2);
    assert_eq!(sa["completed"], 1);
    assert_eq!(sa["socks_auth_failed"], 1);
    assert_eq!(sa["socks_rejected"], 1);
}

/// Where a test CONNECT asks to go.
#[derive(Clone, Copy, Debug)]
enum To {
    Addr(&'static str),
    Name(&'static str, u16),
}

/// Runs a SOCKS5 CONNECT (no authentication) through `proxy` to `to`; returns the reply
/// code, and on success checks that the connection echoes.
fn socks_connect(proxy: &str, to: To) -> u8 {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).unwrap();
    assert_eq!(r, [5, 0]);
    let mut req = vec![5, 1, 0];
    match to {
        To::Addr(a) => {
            let a: SocketAddr = a.parse().unwrap();
            match a.ip() {
                std::net::IpAddr::V4(v4) => {
                    req.push(1);
                    req.extend_from_slice(&v4.octets());
                }
                std::net::IpAddr::V6(v6) => {
                    req.push(4);
                    req.extend_from_slice(&v6.octets());
                }
            }
            req.extend_from_slice(&a.port().to_be_bytes());
        }
        To::Name(n, port) => {
            req.extend_from_slice(&[3, n.len() as u8]);
            req.extend_from_slice(n.as_bytes());
            req.extend_from_slice(&port.to_be_bytes());
        }
    }
    s.write_all(&req).unwrap();
    let mut rep = [0u8; 4];
    s.read_exact(&mut rep).unwrap();
    assert_eq!(rep[0], 5);
    let rest = if rep[3] == 4 { 18 } else { 6 };
    s.read_exact(&mut vec![0u8; rest]).unwrap();
    if rep[1] == 0 {
        s.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
    } else {
        // A refused request ends the connection.
        assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0);
    }
    rep[1]
}

/// Issue 12: a SOCKS5 listener with no options listens on loopback only, and no listener
/// connects to the relay's loopback or own addresses (also through a name that resolves
/// to loopback) unless `allow` names them; reply 2, counted, and nothing reaches the
/// server behind the refused address.
#[test]
fn socks5_destination_policy_guards_the_relay() {
    let l = line3("proxy_policy");
    // No options: 127.0.0.1:1080, out of the network's reach.
    let default = start_proxy(&l.relay, "socks5", &json!({}));
    assert!(
        default.stdout_text().contains("ready 127.0.0.1:1080"),
        "{}",
        default.stdout_text()
    );
    let e = l
        .src
        .run(|| {
            TcpStream::connect_timeout(&"10.0.1.2:1080".parse().unwrap(), Duration::from_secs(2))
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    drop(default);

    // Services of the relay: one on loopback, one on every address; one beyond it.
    let (on_lo, stop_lo) = echo_server(&l.relay, "127.0.0.1:7001");
    let (on_any, stop_any) = echo_server(&l.relay, "[::]:7002");
    let (on_dst, stop_dst) = echo_server(&l.dst, "10.0.2.2:7003");
    let open = start_proxy(&l.relay, "socks5", &json!({"listen": "10.0.1.2:1080"}));
    let allowing = start_proxy(
        &l.relay,
        "socks5",
        &json!({"listen": "10.0.1.2:1081", "allow": ["127.0.0.1:7001", "10.0.2.0/24"],
                "deny": ["10.0.2.2:7004"]}),
    );
    // An address the relay gets after the listeners started (not in their snapshot).
    l.relay.ip(&["addr", "add", "10.9.9.9/32", "dev", "lo"]);
    let refused = [
        To::Addr("127.0.0.1:7001"),
        To::Addr("127.0.0.2:7001"),
        To::Addr("[::1]:7002"),
        To::Addr("[::ffff:127.0.0.1]:7001"),
        To::Addr("0.0.0.0:7002"),
        To::Addr("[::]:7002"),
        To::Addr("10.0.1.2:7002"),
        To::Addr("10.0.2.1:7002"),
        To::Addr("[fd00:1::2]:7002"),
        To::Addr("[::ffff:10.0.2.1]:7002"),
        To::Addr("10.9.9.9:7002"),
        To::Addr("169.254.169.254:80"),
        To::Name("localhost", 7001),
    ];
    let results = l.src.run(move || {
        let mut out = Vec::new();
        for to in refused {
            out.push((to, socks_connect("10.0.1.2:1080", to)));
        }
        // Allowed: a destination beyond the relay, by address and by name.
        out.push((
            To::Addr("10.0.2.2:7003"),
            socks_connect("10.0.1.2:1080", To::Addr("10.0.2.2:7003")),
        ));
        // `allow` re-allows one loopback port exactly, and is an allow-list.
        for (to, want) in [
            (To::Addr("127.0.0.1:7001"), 0),
            (To::Name("localhost", 7001), 0),
            (To::Addr("127.0.0.1:7002"), 2),
            (To::Addr("10.0.1.2:7002"), 2),
            (To::Addr("10.0.2.2:7003"), 0),
            (To::Addr("10.0.1.1:7003"), 2),
            (To::Addr("10.0.2.2:7004"), 2),
        ] {
            let got = socks_connect("10.0.1.2:1081", to);
            assert_eq!(got, want, "through the allowing listener to {to:?}");
        }
        out
    });
    for (to, rep) in &results[..refused.len()] {
        assert_eq!(
            *rep, 2,
            "CONNECT {to:?}: reply {rep}, want 2 (not allowed by ruleset)"
        );
    }
    assert_eq!(results[refused.len()].1, 0);
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        on_lo.load(Relaxed),
        2,
        "only the allowed CONNECTs reach the loopback service"
    );
    assert_eq!(
        on_any.load(Relaxed),
        0,
        "nothing reaches the service on the relay's addresses"
    );
    assert_eq!(on_dst.load(Relaxed), 2);
    let so = stats(&open);
    let sa = stats(&allowing);
    println!("policy stats: open {so}, allowing {sa}");
    assert_eq!(so["refused_policy"], refused.len());
    assert_eq!(so["upstream_failed"], 0);
    assert_eq!(
        so["completed"].as_u64().unwrap() + so["active"].as_u64().unwrap(),
        1
    );
    assert_eq!(sa["refused_policy"], 4);
    assert_eq!(sa["upstream_failed"], 0);
    for s in [stop_lo, stop_any, stop_dst] {
        s.store(true, Relaxed);
    }
}
