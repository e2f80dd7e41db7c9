//! A new connection on the tuple of a connection the IDS offloaded (docs/ids.md,
//! "Normalization and offload": a reused tuple is a new connection): the offloaded
//! connection's FINs or reset skip the queue, and the new one must still be inspected
//! from its SYN, as it is without offload.

use super::*;

/// An HTTP server on dst:8080 for [`offloaded_then_closed`]: its first connection says
/// hello, closes its side and reads what comes; the later ones answer requests with
/// [`ok_response`]. Returns the requests those read.
fn reuse_server(l: &Line3) -> Arc<Mutex<Vec<Vec<u8>>>> {
    let listener = l
        .dst
        .run(move || TcpListener::bind(("10.0.2.2", 8080)).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.write_all(b"hello\n").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut sink = Vec::new();
        let _ = c.read_to_end(&mut sink);
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let mut buf = Vec::new();
                while let Ok(req) = read_message(&mut c, &mut buf) {
                    log.lock().unwrap().push(req);
                    if c.write_all(&ok_response(b"")).is_err() {
                        return;
                    }
                }
            });
        }
    });
    seen
}

/// Waits until src holds no socket on port 41000 any more (the client's end of a closed
/// connection is gone), so that a new connection may take the tuple.
fn port_free(l: &Line3) {
    let free = wait_for(Duration::from_secs(3), || {
        let out = l.src.exec(&["ss", "-tanH", "sport = :41000"]);
        String::from_utf8_lossy(&out.stdout).trim().is_empty()
    });
    let out = l.src.exec(&["ss", "-tan"]);
    assert!(free, "{}", String::from_utf8_lossy(&out.stdout));
}

/// Relayd with a fail-closed IDS (an `http.uri` drop rule, `stream_depth` 4096, a `pass`
/// rule for UDP to port 9999) on all packets, and one connection from src port 41000 to
/// dst:8080 offloaded at its depth, then closed (the server's FIN came first), or aborted
/// by the client if `reset`: the FINs or the reset skip the queue with the rest of the
/// flow, so the IDS never sees the connection end.
fn offloaded_then_closed(
    l: &Line3,
    dir: &TempDir,
    reset: bool,
) -> (Relayd, Arc<Mutex<Vec<Vec<u8>>>>) {
    let rules = "drop http any any -> any any (msg:\"admin\"; http.uri; content:\"/admin\"; sid:1;)\n\
                 pass udp any any -> any 9999 (msg:\"udp\"; sid:7;)\n";
    let body = config(dir, rules, true, "stream_depth = 4096").replace("match = \"-p tcp\"\n", "");
    let r = Relayd::start(&l.relay, &body);
    let seen = reuse_server(l);
    let mut c = connect_from(&l.src, addr("10.0.1.1:41000"), addr("10.0.2.2:8080"));
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
    if reset {
        close_with_reset(c);
    } else {
        drop(c);
    }
    port_free(l);
    (r, seen)
}

/// A new connection on an offloaded, aborted connection's tuple (a client reusing its
/// port) is a new connection: conntrack gives it a new entry, and the IDS must inspect it
/// from its SYN, so a clean request is answered and a forbidden one dropped by its rule.
#[test]
#[ignore = "bug: the IDS keeps the offloaded flow's record (it never saw the reset) and judges the new connection's segments against the old stream: a clean request is dropped as stream_invalid_window, the new connection is never parsed"]
fn a_new_connection_on_an_offloaded_tuple_is_inspected_from_its_start() {
    let l = line3("idsoff-reuse");
    let dir = TempDir::new("idsoff-reuse");
    let (r, seen) = offloaded_then_closed(&l, &dir, true);
    let c = connect_from(&l.src, addr("10.0.1.1:41000"), addr("10.0.2.2:8080"));
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut c = Client { c, buf: Vec::new() };
    let ok = c.ask(b"GET /index.html HTTP/1.1\r\nHost: dst\r\n\r\n");
    let ids = r.counters("ids");
    assert!(
        ok.as_ref().is_ok_and(|a| a.starts_with(b"HTTP/1.1 200")),
        "a clean request on the new connection was not answered: {ok:?}\n{:?}\n{ids:?}",
        queue(&r)
    );
    assert_dropped_inline(
        &r,
        &mut c,
        &seen,
        b"GET /admin HTTP/1.1\r\nHost: dst\r\n\r\n",
    );
    let ids = r.counters("ids");
    assert!(ids.get("sid:1").copied() >= Some(1), "{ids:?}");
}

/// A connection a payload `pass` rule decided, closed; a new connection on its tuple
/// carries a request the drop rule matches: it must be inspected as a new connection.
fn passed_tuple_reused(tag: &str, offload: bool) {
    let l = line3(tag);
    let dir = TempDir::new(tag);
    let rules = "drop http any any -> any any (msg:\"admin\"; http.uri; content:\"/admin\"; sid:1;)\n\
                 pass tcp any any -> any 8080 (msg:\"trusted\"; content:\"trusted-hello\"; sid:5;)\n";
    let r = Relayd::start(&l.relay, &config(&dir, rules, offload, ""));
    let seen = reuse_server(&l);
    let (from, to) = (addr("10.0.1.1:41000"), addr("10.0.2.2:8080"));
    let mut c = connect_from(&l.src, from, to);
    let mut hello = Vec::new();
    c.read_to_end(&mut hello).unwrap();
    c.write_all(b"trusted-hello\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(c);
    port_free(&l);
    let ids = r.counters("ids");
    assert!(ids.get("sid:5").copied() >= Some(1), "{ids:?}");
    let c = connect_from(&l.src, from, to);
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut c = Client { c, buf: Vec::new() };
    let answer = c.ask(b"GET /admin HTTP/1.1\r\nHost: dst\r\n\r\n");
    assert!(
        answer.is_err() && seen.lock().unwrap().is_empty(),
        "the forbidden request reached the server: {answer:?}\n{:?}\n{:?}",
        queue(&r),
        r.counters("ids")
    );
    // Dropped by its rule, in a flow of its own: not judged against the old stream.
    let ids = r.counters("ids");
    assert!(
        ids.get("sid:1").copied() >= Some(1) && ids.get("flow_created") == Some(&2),
        "{ids:?}"
    );
}

/// Without offload the IDS sees the first connection end: the new one on its tuple is a
/// flow of its own, inspected from its SYN (the control for the test below).
#[test]
fn a_passed_connections_tuple_reused_is_a_new_flow() {
    passed_tuple_reused("idsoff-passre0", false);
}

/// The same with offload: the first connection's FINs skipped the queue.
#[test]
#[ignore = "bug: the IDS keeps the passed, offloaded flow's record; the new connection's packets count flow_passed, its SYN votes pass again, and its data is dropped as stream_invalid_window against the old stream (sid:1 never runs)"]
fn a_passed_and_offloaded_connections_tuple_reused_is_a_new_flow() {
    passed_tuple_reused("idsoff-passre1", true);
}

/// The offload table's slot of a flow on the NFQUEUE datapath: crates/nfq/src/offload.rs
/// `flow_tag` (a `DefaultHasher` of the direction-free tuple) in a table of 4096 slots.
fn nfq_slot(a: (std::net::IpAddr, u16), b: (std::net::IpAddr, u16), proto: u8) -> usize {
    use std::hash::{Hash, Hasher};
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = std::hash::DefaultHasher::new();
    (lo, hi, proto).hash(&mut h);
    (h.finish().max(1) as usize) & 4095
}

/// The attacker's version: after the connection closed (normally: the server's FIN
/// first, so the client may reuse its port at once), a few UDP flows a `pass` rule
/// offloads take the old connection's slot in the datapath's table of flows offloaded
/// (which alone kept the stale vote from being carried out; any 4096 other offloaded
/// flows may do it, these are picked by the table's hash). The new connection on the old
/// tuple must still be inspected, and its forbidden request dropped.
#[test]
#[ignore = "bug: the IDS votes stream_depth on the new connection's SYN from the stale record of the offloaded, closed flow on the same tuple; once the datapath has forgotten the old flow, the new connection is offloaded from its SYN and a request the drop rule matches reaches the server"]
fn a_new_connection_on_an_offloaded_tuple_is_not_offloaded_on_the_old_record() {
    let l = line3("idsoff-reuse2");
    let dir = TempDir::new("idsoff-reuse2");
    let (r, seen) = offloaded_then_closed(&l, &dir, false);
    let (src, dst) = (addr("10.0.1.1:41000"), addr("10.0.2.2:8080"));
    let target = nfq_slot((src.ip(), src.port()), (dst.ip(), dst.port()), 6);
    let ports: Vec<u16> = (20000..60000)
        .filter(|p| nfq_slot((src.ip(), *p), (dst.ip(), 9999), 17) == target)
        .take(3)
        .collect();
    assert!(!ports.is_empty());
    l.src.run(move || {
        for p in ports {
            let s = std::net::UdpSocket::bind(("10.0.1.1", p)).unwrap();
            s.send_to(b"x", "10.0.2.2:9999").unwrap();
        }
    });
    assert!(
        wait_for(Duration::from_secs(2), || queue(&r)
            .offload
            .is_some_and(|o| o.flows.get("pass").copied() >= Some(1))),
        "the UDP flows were not offloaded: {:?}",
        queue(&r)
    );
    let before = queue(&r);
    let c = connect_from(&l.src, addr("10.0.1.1:41000"), addr("10.0.2.2:8080"));
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut c = Client { c, buf: Vec::new() };
    let answer = c.ask(b"GET /admin HTTP/1.1\r\nHost: dst\r\n\r\n");
    let q = queue(&r);
    assert!(
        answer.is_err() && seen.lock().unwrap().is_empty(),
        "the forbidden request reached the server: {answer:?}\n{before:?}\n-> {q:?}\n{:?}",
        r.counters("ids")
    );
}
