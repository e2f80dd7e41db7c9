//! The IDS's flow offload on the real kernel (docs/ids.md, "Offload"; docs/offload.md):
//! a fail-closed IPS never offloads a flow a later packet of which a `drop` rule could
//! match, however the attacker pads it; a flow past `stream_depth` both ways, one a `pass`
//! rule decided and a TLS session with `tls_encryption_handling = "bypass"` leave the
//! queue while their bytes keep arriving; a reload brings an offloaded flow back under
//! new rules; the votes are carried out on AF_XDP too; and (module `reuse`) a new
//! connection on an offloaded connection's tuple is inspected from its start. Needs root.
//!
//! Topology (relay_testbed::line3): src 10.0.1.1 -- relay (ids) -- dst 10.0.2.2.

mod support;

#[path = "ids_offload/reuse.rs"]
mod reuse;

use relay_testbed::{Line3, Node, line3};
use relayd::status::QueueStatus;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// The queue every NFQUEUE test here runs the IDS on.
const QUEUE: u16 = 4;

/// Queue [`QUEUE`] in FORWARD for all TCP (both directions reach the IDS), offloading or
/// not, running `ids` on `rules` with `ids_extra` keys and an EVE log in `dir`.
fn config(dir: &TempDir, rules: &str, offload: bool, ids_extra: &str) -> String {
    let rules = dir.file("local.rules", rules);
    format!(
        "[[queue]]\nnum = {QUEUE}\nhook = \"forward\"\nmatch = \"-p tcp\"\n\
         services = [\"ids\"]\nfail_open = false\noffload = {offload}\n\n\
         [service.ids]\nkind = \"ids\"\nrules = [\"{}\"]\neve_log = \"{}\"\n{ids_extra}\n",
        rules.display(),
        dir.0.join("eve.json").display()
    )
}

/// The queue's status.
fn queue(r: &Relayd) -> QueueStatus {
    r.queue(QUEUE)
}

/// Waits until the queue's packet counter has not moved for half a second; returns it.
fn settled(r: &Relayd) -> u64 {
    r.settled(QUEUE)
}

/// The EVE lines of rule `sid` in `dir`'s log.
fn eve(dir: &TempDir, sid: u64) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.0.join("eve.json"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["alert"]["signature_id"] == sid)
        .collect()
}

/// Position of the end of the header block in `buf` (after `\r\n\r\n`) and the
/// Content-Length it names (0 without one).
fn http_head(buf: &[u8]) -> Option<(usize, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(buf.get(..end)?).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some((end, len))
}

/// Reads one HTTP message (headers and a Content-Length body) from `c`, keeping what
/// follows it in `buf`.
fn read_message(c: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((end, len)) = http_head(buf)
            && buf.len() >= end + len
        {
            return Ok(buf.drain(..end + len).collect());
        }
        match c.read(&mut chunk)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// An HTTP/1.1 keep-alive server on dst:`port`: answers each request it reads whole with
/// `respond(request)`; returns the requests it read.
fn http_server(l: &Line3, port: u16, respond: fn(&[u8]) -> Vec<u8>) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let listener = l
        .dst
        .run(move || TcpListener::bind(("10.0.2.2", port)).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(20))).ok();
                let mut buf = Vec::new();
                while let Ok(req) = read_message(&mut c, &mut buf) {
                    let answer = respond(&req);
                    log.lock().unwrap().push(req);
                    if c.write_all(&answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    seen
}

/// A keep-alive client connection from src to dst:`port`.
struct Client {
    c: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(l: &Line3, port: u16) -> Client {
        let c = l.src.run(move || {
            TcpStream::connect_timeout(&addr(&format!("10.0.2.2:{port}")), Duration::from_secs(3))
                .unwrap()
        });
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        Client { c, buf: Vec::new() }
    }

    /// Sends `req` and reads one response (an error if none came within 2 s).
    fn ask(&mut self, req: &[u8]) -> std::io::Result<Vec<u8>> {
        self.c.write_all(req)?;
        read_message(&mut self.c, &mut self.buf)
    }
}

fn ok_response(_req: &[u8]) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
}

/// A POST of `body` bytes of padding.
fn padded_post(body: usize) -> Vec<u8> {
    let mut req = format!("POST /upload HTTP/1.1\r\nHost: dst\r\nContent-Length: {body}\r\n\r\n")
        .into_bytes();
    req.resize(req.len() + body, b'p');
    req
}

/// The counters of a flow that never left the queue: no offload, no vote.
fn assert_never_offloaded(r: &Relayd) {
    let q = queue(r);
    assert_eq!(
        q.offload.as_ref().map_or(0, |o| o.total()),
        0,
        "offloaded: {q:?}"
    );
    assert_eq!(
        q.offload.as_ref().map_or(0, |o| o.skipped_packets),
        0,
        "{q:?}"
    );
    let c = r.counters("ids");
    for reason in ["stream_depth", "encrypted", "pass", "bypass"] {
        assert_eq!(
            c.get(&format!("offload_votes_{reason}"))
                .copied()
                .unwrap_or(0),
            0,
            "{reason}: {c:?}"
        );
    }
}

/// Sends the forbidden request on the client's connection and asserts it was dropped
/// inline: no answer, the server never read it, and the queue saw it (and its
/// retransmissions) and dropped them.
fn assert_dropped_inline(r: &Relayd, c: &mut Client, seen: &Mutex<Vec<Vec<u8>>>, req: &[u8]) {
    let before = queue(r);
    let answer = c.ask(req);
    assert!(
        answer.is_err(),
        "the forbidden request was answered: {answer:?}"
    );
    let after = queue(r);
    assert!(
        after.packets >= before.packets + 2 && after.dropped >= before.dropped + 2,
        "the request and its retransmissions were not queued and dropped: {before:?} -> {after:?}"
    );
    let got = seen.lock().unwrap();
    assert!(
        !got.iter().any(|q| q.windows(6).any(|w| w == b"/admin")),
        "the server read the forbidden request"
    );
}

/// The attacker's test: on one keep-alive connection through a fail-closed IPS, a clean
/// request and its response, then a request a `drop` rule matches. The second is dropped
/// and the flow never left the queue.
#[test]
fn a_fail_closed_ips_drops_the_second_request_of_a_keep_alive_connection() {
    let l = line3("idsoff-keep");
    let dir = TempDir::new("idsoff-keep");
    let rules =
        "drop http any any -> any any (msg:\"admin\"; http.uri; content:\"/admin\"; sid:1;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, ""));
    assert!(!queue(&r).fail_open, "fail-closed");
    let seen = http_server(&l, 8080, ok_response);
    let mut c = Client::connect(&l, 8080);
    let first = c
        .ask(b"GET /index.html HTTP/1.1\r\nHost: dst\r\n\r\n")
        .unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{first:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_dropped_inline(
        &r,
        &mut c,
        &seen,
        b"GET /admin/users HTTP/1.1\r\nHost: dst\r\n\r\n",
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_never_offloaded(&r);
    let ids = r.counters("ids");
    assert!(ids.get("sid:1").copied() >= Some(1), "{ids:?}");
    assert!(
        wait_for(Duration::from_secs(3), || eve(&dir, 1)
            .iter()
            .any(|v| v["alert"]["action"] == "blocked")),
        "no blocked EVE line: {:?}",
        std::fs::read_to_string(dir.0.join("eve.json"))
    );
}

/// The attacker pads the client direction past `stream_depth` (a large POST), then sends
/// the forbidden bytes: the server direction is not done, so no offload, and the packet
/// rule still reads the payload, past the depth, and drops it.
#[test]
fn padding_one_direction_past_stream_depth_does_not_get_a_payload_past_the_ips() {
    let l = line3("idsoff-pad1");
    let dir = TempDir::new("idsoff-pad1");
    let rules = "drop http any any -> any any (msg:\"admin uri\"; http.uri; content:\"/admin\"; sid:1;)\n\
                 drop tcp any any -> any 8080 (msg:\"admin bytes\"; flow:to_server; content:\"/admin\"; sid:2;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, "stream_depth = 4096"));
    let seen = http_server(&l, 8080, ok_response);
    let mut c = Client::connect(&l, 8080);
    let first = c.ask(&padded_post(20_000)).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{first:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert_dropped_inline(
        &r,
        &mut c,
        &seen,
        b"GET /admin HTTP/1.1\r\nHost: dst\r\n\r\n",
    );
    assert_never_offloaded(&r);
    let ids = r.counters("ids");
    assert!(ids.get("sid:2").copied() >= Some(1), "{ids:?}");
    assert!(
        ids.get("stream_truncated").copied() >= Some(1),
        "past the depth: {ids:?}"
    );
}

/// A response carrying what the `file.data` rule below drops.
fn evil_response(_req: &[u8]) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nhere: EVIL-PAYLOAD..".to_vec()
}

/// The client pads its own direction past `stream_depth` before the server answers:
/// the server's direction is not done, so the flow stays inline and the answer, which a
/// `drop` rule on the response body matches, is dropped.
#[test]
fn padding_the_client_past_stream_depth_leaves_the_answer_inspected() {
    let l = line3("idsoff-pad3");
    let dir = TempDir::new("idsoff-pad3");
    let rules = "drop http any any -> any any (msg:\"evil body\"; file.data; content:\"EVIL-PAYLOAD\"; sid:3;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, "stream_depth = 4096"));
    let seen = http_server(&l, 8080, evil_response);
    let mut c = Client::connect(&l, 8080);
    let answer = c.ask(&padded_post(20_000));
    assert!(answer.is_err(), "the forbidden answer arrived: {answer:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the server read the request");
    assert_never_offloaded(&r);
    let q = queue(&r);
    assert!(q.dropped >= 2, "the answer and its retransmissions: {q:?}");
    let ids = r.counters("ids");
    assert!(ids.get("sid:3").copied() >= Some(1), "{ids:?}");
    assert!(
        ids.get("stream_truncated").copied() >= Some(1),
        "past the depth: {ids:?}"
    );
}

/// A response as large as the server's whole direction needs to pass the depth too.
fn big_response(_req: &[u8]) -> Vec<u8> {
    let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n".to_vec();
    r.resize(r.len() + 20_000, b'r');
    r
}

/// Both directions past `stream_depth` (the depth trigger fires): a packet rule on the
/// port could still match a later packet, so the flow stays inline (`offload_kept_inline`)
/// and the forbidden bytes are dropped.
#[test]
fn a_packet_rule_keeps_a_flow_past_stream_depth_both_ways_inline() {
    let l = line3("idsoff-pad2");
    let dir = TempDir::new("idsoff-pad2");
    let rules = "drop tcp any any -> any 8080 (msg:\"admin bytes\"; flow:to_server; content:\"/admin\"; sid:2;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, "stream_depth = 4096"));
    let seen = http_server(&l, 8080, big_response);
    let mut c = Client::connect(&l, 8080);
    let first = c.ask(&padded_post(20_000)).unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{}", first.len());
    std::thread::sleep(Duration::from_millis(200));
    assert_dropped_inline(
        &r,
        &mut c,
        &seen,
        b"GET /admin HTTP/1.1\r\nHost: dst\r\n\r\n",
    );
    assert_never_offloaded(&r);
    let ids = r.counters("ids");
    assert!(ids.get("sid:2").copied() >= Some(1), "{ids:?}");
    assert!(
        ids.get("offload_kept_inline").copied() >= Some(1),
        "the depth trigger never found the live rule: {ids:?}"
    );
}

/// A TCP transfer in progress: the server on dst sends `hello` and closes its side (a
/// FIN: its direction is done), then reads everything; the client on src sends `total`
/// bytes in 64 KiB chunks, `gap` apart, counting them in `sent`.
struct Paced {
    sent: Arc<AtomicU64>,
    client: std::thread::JoinHandle<[u8; 32]>,
    server: std::thread::JoinHandle<([u8; 32], u64)>,
}

impl Paced {
    fn start(l: &Line3, port: u16, total: u64, gap: Duration) -> Paced {
        use sha2::{Digest, Sha256};
        let listener = l
            .dst
            .run(move || TcpListener::bind(("10.0.2.2", port)).unwrap());
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            c.write_all(b"hello\n").unwrap();
            c.shutdown(Shutdown::Write).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (mut h, mut n, mut buf) = (Sha256::new(), 0u64, vec![0u8; 1 << 16]);
            loop {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        h.update(&buf[..k]);
                        n += k as u64;
                    }
                    Err(e) => panic!("receiving after {n} bytes: {e}"),
                }
            }
            (<[u8; 32]>::from(h.finalize()), n)
        });
        let sent = Arc::new(AtomicU64::new(0));
        let count = sent.clone();
        let client = l.src.run_bg(move || {
            let mut c = TcpStream::connect(("10.0.2.2", port)).unwrap();
            let mut hello = Vec::new();
            c.read_to_end(&mut hello).unwrap();
            assert_eq!(hello, b"hello\n");
            let mut chunk = relay_traffic::Payload::new(1 << 16, 0.0, 9).into_bytes();
            let (mut h, mut i) = (Sha256::new(), 0u64);
            while count.load(Ordering::Relaxed) < total {
                // Every chunk differs, so a lost or repeated chunk changes the digest.
                chunk[..8].copy_from_slice(&i.to_be_bytes());
                let k = (total - count.load(Ordering::Relaxed)).min(chunk.len() as u64) as usize;
                c.write_all(&chunk[..k]).unwrap();
                h.update(&chunk[..k]);
                count.fetch_add(k as u64, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(gap);
            }
            <[u8; 32]>::from(h.finalize())
        });
        Paced {
            sent,
            client,
            server,
        }
    }

    /// Waits for both ends: (digest sent, digest received, bytes received).
    fn finish(self) -> ([u8; 32], [u8; 32], u64) {
        let sent = self.client.join().unwrap();
        let (got, n) = self.server.join().unwrap();
        (sent, got, n)
    }
}

/// A long transfer with a small `stream_depth` and only transaction rules (no parser on
/// this flow): once both directions are done (the client's at its depth, the server's by
/// its FIN) the flow leaves the queue, whose counter stays flat while every byte arrives.
#[test]
fn a_long_transfer_leaves_the_queue_once_both_streams_are_done() {
    let l = line3("idsoff-depth");
    let dir = TempDir::new("idsoff-depth");
    let rules = "drop http any any -> any any (msg:\"admin\"; http.uri; content:\"/admin\"; sid:1;)\n\
                 alert tls any any -> any any (msg:\"sni\"; tls.sni; content:\"evil\"; sid:2;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, "stream_depth = 65536"));
    let total = 6u64 << 20;
    // 96 chunks, 25 ms apart: about 2.5 s.
    let t = Paced::start(&l, 5702, total, Duration::from_millis(25));
    assert!(
        wait_for(Duration::from_secs(10), || t.sent.load(Ordering::Relaxed)
            >= 1 << 20),
        "the transfer did not start"
    );
    let early = settled(&r);
    let at = t.sent.load(Ordering::Relaxed);
    let skipped_early = queue(&r).offload.map_or(0, |o| o.skipped_packets);
    let (sent, got, n) = t.finish();
    let q = queue(&r);
    eprintln!("settled at {early} packets, {at} bytes sent\n{q:?}");
    assert_eq!(n, total, "bytes received: {q:?}");
    assert_eq!(sent, got, "content differs");
    assert!(
        at < total / 2,
        "the transfer was over before the queue settled: {at}"
    );
    assert_eq!(
        q.packets, early,
        "the queue counted packets after both streams were done: {q:?}"
    );
    assert!(
        early < 400,
        "more than the first packets were queued: {q:?}"
    );
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("stream_depth"), Some(&1), "{o:?}\n{}", r.log());
    assert_eq!(o.total(), 1, "{o:?}");
    assert!(
        o.skipped_packets > skipped_early && o.skipped_bytes >= total - at,
        "skipped {skipped_early} -> {o:?}, {} bytes after the queue settled",
        total - at
    );
    let ids = r.counters("ids");
    assert!(
        ids.get("offload_votes_stream_depth").copied() >= Some(1),
        "{ids:?}"
    );
}

/// A flow offloaded at its depth, then a reload that adds a `drop` rule for its packets:
/// the flow comes back to the queue (a new generation), is not offloaded again on the
/// old rules' say-so by a harmless packet, and the forbidden bytes are dropped.
#[test]
fn a_reload_that_adds_a_drop_rule_brings_an_offloaded_flow_back_under_it() {
    let l = line3("idsoff-reload");
    let dir = TempDir::new("idsoff-reload");
    let rules =
        "drop http any any -> any any (msg:\"admin\"; http.uri; content:\"/admin\"; sid:1;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, "stream_depth = 4096"));
    let listener = l
        .dst
        .run(move || TcpListener::bind(("10.0.2.2", 5704)).unwrap());
    // What the server read (it is not waited for: the dropped bytes hold its end back).
    let got = Arc::new(Mutex::new(Vec::new()));
    let read = got.clone();
    std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.write_all(b"hello\n").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 65536];
        while let Ok(n @ 1..) = c.read(&mut buf) {
            read.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let mut c = l
        .src
        .run(|| TcpStream::connect(("10.0.2.2", 5704)).unwrap());
    let mut hello = Vec::new();
    c.read_to_end(&mut hello).unwrap();
    c.write_all(&[b'p'; 100_000]).unwrap();
    assert!(
        wait_for(Duration::from_secs(3), || queue(&r)
            .offload
            .is_some_and(|o| o.flows.get("stream_depth") == Some(&1))),
        "not offloaded at its depth: {:?}",
        queue(&r)
    );
    let rules = format!(
        "{rules}drop tcp any any -> any 5704 (msg:\"admin bytes\"; content:\"/admin\"; sid:2;)\n"
    );
    r.rewrite(&config(&dir, &rules, true, "stream_depth = 4096"));
    reload(&r, 1);
    let before = queue(&r);
    // A harmless packet first: were the flow offloaded again on its old record, the
    // forbidden bytes after it would skip the queue.
    c.write_all(b"nothing to see\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    c.write_all(b"GET /admin HTTP/1.1\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let q = queue(&r);
    let ids = r.counters("ids");
    let got = got.lock().unwrap();
    assert!(got.len() >= 100_000, "the padding arrived: {}", got.len());
    assert!(
        !got.windows(6).any(|w| w == b"/admin"),
        "the server read the forbidden bytes: {before:?} -> {q:?}\n{ids:?}"
    );
    assert!(q.packets > before.packets, "{before:?} -> {q:?}");
    assert!(q.dropped > before.dropped, "{before:?} -> {q:?}");
    assert_eq!(q.offload.as_ref().map(|o| o.revoked), Some(1), "{q:?}");
    assert!(ids.get("sid:2").copied() >= Some(1), "{ids:?}");
}

/// A `pass` rule decides the flow on its first packet: it is offloaded with reason `pass`
/// (a broad `drop` rule, which would keep any other flow inline, does not matter to it).
#[test]
fn a_pass_rule_offloads_its_flow() {
    let l = line3("idsoff-pass");
    let dir = TempDir::new("idsoff-pass");
    let rules = "pass tcp any any -> any 5703 (msg:\"trusted\"; sid:1;)\n\
                 drop tcp any any -> any any (msg:\"forbidden\"; content:\"forbidden\"; sid:2;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, true, ""));
    let (sent, got) = tcp_exchange(&l.src, &l.dst, addr("10.0.2.2:5703"), 1.0);
    let q = queue(&r);
    eprintln!("{q:?}");
    assert!(
        sent > 1_000_000 && got == sent,
        "TCP sent {sent} received {got}: {q:?}"
    );
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("pass"), Some(&1), "{o:?}\n{}", r.log());
    assert_eq!(o.total(), 1, "{o:?}");
    assert!(q.packets < 50, "the passed flow stayed in the queue: {q:?}");
    assert!(o.skipped_bytes >= got, "{o:?} for {got} bytes");
    let ids = r.counters("ids");
    assert!(ids.get("offload_votes_pass").copied() >= Some(1), "{ids:?}");
    assert!(ids.get("sid:1").copied() >= Some(1), "{ids:?}");
}

/// Runs one TLS session (openssl s_server on dst:4433, s_client on src naming
/// www.example.com) carrying `bytes` from the client after the handshake; returns the
/// bytes the server received.
fn tls_session(l: &Line3, dir: &TempDir, bytes: usize) -> usize {
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=www.example.com", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl req: {out:?}");
    // Lines of `x`: no read of s_client's starts with one of its command letters.
    let mut data = String::with_capacity(bytes);
    while data.len() < bytes {
        data.extend(std::iter::repeat_n('x', 65535));
        data.push('\n');
    }
    data.truncate(bytes);
    let file = dir.file("data", &data);
    let mut cmd = l.dst.cmd("openssl");
    cmd.args([
        "s_server",
        "-accept",
        "10.0.2.2:4433",
        "-naccept",
        "1",
        "-quiet",
    ])
    .arg("-cert")
    .arg(&cert)
    .arg("-key")
    .arg(&key)
    // Its stdin stays open: at its end s_server would quit.
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let server = l.dst.spawn(cmd);
    assert!(
        wait_for(Duration::from_secs(5), || {
            let ss = l.dst.exec(&["ss", "-ltn"]);
            String::from_utf8_lossy(&ss.stdout).contains("10.0.2.2:4433")
        }),
        "s_server is not listening: {}",
        server.stderr_text()
    );
    let out = l
        .src
        .cmd("openssl")
        .args(["s_client", "-connect", "10.0.2.2:4433", "-servername"])
        .args(["www.example.com", "-quiet", "-no_ign_eof"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "s_client: {out:?}");
    wait_for(Duration::from_secs(10), || {
        server.stdout_text().len() >= bytes
    });
    server.stdout_text().len()
}

const TLS_RULES: &str =
    "alert tls any any -> any any (msg:\"example\"; tls.sni; content:\"example\"; sid:1;)\n";

/// `tls_encryption_handling = "bypass"`: once the session is encrypted both ways, the
/// flow leaves the queue (reason `encrypted`) and its bulk arrives whole.
#[test]
fn tls_with_encryption_bypass_is_offloaded_after_the_handshake() {
    let l = line3("idsoff-tls");
    let dir = TempDir::new("idsoff-tls");
    // No depth limit: the only trigger is the encryption.
    let extra = "tls_encryption_handling = \"bypass\"\nstream_depth = 0";
    let r = Relayd::start(&l.relay, &config(&dir, TLS_RULES, true, extra));
    let bytes = 4 << 20;
    assert_eq!(tls_session(&l, &dir, bytes), bytes, "{}", r.log());
    std::thread::sleep(Duration::from_millis(300));
    let q = queue(&r);
    eprintln!("{q:?}");
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("encrypted"), Some(&1), "{o:?}\n{}", r.log());
    assert_eq!(o.total(), 1, "{o:?}");
    assert!(o.skipped_bytes >= bytes as u64, "{o:?}");
    assert!(q.packets < 30, "the session stayed in the queue: {q:?}");
    let ids = r.counters("ids");
    assert!(
        ids.get("sid:1").copied() >= Some(1),
        "the SNI was inspected: {ids:?}"
    );
    assert!(
        ids.get("offload_votes_encrypted").copied() >= Some(1),
        "{ids:?}"
    );
}

/// The same session with `tls_encryption_handling` at its default (`full`): every record
/// is inspected, nothing is offloaded.
#[test]
fn tls_at_the_default_encryption_handling_stays_in_the_queue() {
    let l = line3("idsoff-tlsfull");
    let dir = TempDir::new("idsoff-tlsfull");
    let r = Relayd::start(&l.relay, &config(&dir, TLS_RULES, true, "stream_depth = 0"));
    let bytes = 4 << 20;
    assert_eq!(tls_session(&l, &dir, bytes), bytes, "{}", r.log());
    std::thread::sleep(Duration::from_millis(300));
    assert_never_offloaded(&r);
    let q = queue(&r);
    eprintln!("{q:?}");
    assert!(q.packets >= 60, "{q:?}");
    let ids = r.counters("ids");
    assert!(
        ids.get("sid:1").copied() >= Some(1),
        "the SNI was inspected: {ids:?}"
    );
}

/// Turns off transmit checksum offload on `node`'s `ifname` (see tests/xdp.rs: XDP sees
/// the bytes, which a veth that offloads leaves unfinished).
fn no_tx_offload(node: &Node, ifname: &str) {
    let out = node.exec(&["ethtool", "-K", ifname, "tx", "off"]);
    assert!(out.status.success(), "ethtool: {out:?}");
}

/// On AF_XDP: the IDS's `pass` vote puts the flow in the XDP program's map, and the
/// connection's bulk skips the queue (the program passes it to the kernel).
#[test]
fn the_ids_votes_are_carried_out_on_af_xdp() {
    let l = line3("idsoff-xdp");
    no_tx_offload(&l.src, "eth0");
    let dir = TempDir::new("idsoff-xdp");
    let rules = dir.file(
        "local.rules",
        "pass tcp any any -> any 6000 (msg:\"trusted\"; sid:1;)\n",
    );
    let body = format!(
        "[[xdp]]\nnum = 0\ninterface = \"eth0\"\nfail_open = true\nservices = [\"ids\"]\n\
         offload = true\n\n[service.ids]\nkind = \"ids\"\nrules = [\"{}\"]\n",
        rules.display()
    );
    let r = Relayd::start(&l.relay, &body);
    // Neighbours resolved, so that the flow's first packets leave by AF_XDP.
    assert!(l.src.ping("10.0.2.2"), "ping through the relay");
    let xdp_queue = |r: &Relayd| {
        r.status()
            .queues
            .into_iter()
            .find(|q| q.num == 0)
            .expect("xdp queue 0")
    };
    let before = xdp_queue(&r).packets;
    assert_tcp_intact(
        &l.src,
        &l.dst,
        addr("10.0.2.2:6000"),
        4 << 20,
        "passed tcp over xdp",
    );
    let q = xdp_queue(&r);
    eprintln!("{before} -> {q:?}");
    assert!(
        q.packets < before + 20,
        "a 4 MiB transfer stayed in the queue: {before} -> {q:?}"
    );
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("pass"), Some(&1), "{o:?}\n{}", r.log());
    let st = r.status();
    let map = st.xdp[0].offload.clone().expect("offload figures");
    assert!(map.get("flows").copied() >= Some(1), "{map:?}");
    assert!(map.get("packets").copied() >= Some(1000), "{map:?}");
    let ids = r.counters("ids");
    assert!(ids.get("offload_votes_pass").copied() >= Some(1), "{ids:?}");
}
