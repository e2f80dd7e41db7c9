//! Tests of the status report: its JSON and text forms, the socket server's limits.

use super::*;
use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// A directory of its own under the system's temporary directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("relayd-status-{}-{n}-{tag}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sample(services: usize) -> Status {
    Status {
        version: "test".into(),
        uptime_s: 1.0,
        config: "/etc/relayd.toml".into(),
        reloads: 0,
        reload_failures: 0,
        start_time_ms: 0,
        unhealthy_queues: Vec::new(),
        queues: Vec::new(),
        services: (0..services)
            .map(|i| ServiceStatus {
                name: format!("service-with-a-rather-long-name-{i:08}"),
                kind: "accept".into(),
                queues: vec![0, 1, 2],
                packets: i as u64,
                counters: BTreeMap::new(),
                gauges: Vec::new(),
            })
            .collect(),
        listeners: Vec::new(),
        qos: Vec::new(),
        xdp: Vec::new(),
        ike: Vec::new(),
    }
}

/// A status server on its own runtime, answering `sample(services)`.
struct Server {
    _rt: tokio::runtime::Runtime,
    dir: Dir,
    path: PathBuf,
}

impl Server {
    fn start(tag: &str, limits: ServerLimits, services: usize) -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = Dir::new(tag);
        let path = dir.0.join("s.sock");
        let listener = {
            let _g = rt.enter();
            bind(&path).unwrap()
        };
        let st = sample(services);
        rt.spawn(serve(listener, limits, move || Some(st.clone())));
        Server { _rt: rt, dir, path }
    }
}

fn limits() -> ServerLimits {
    ServerLimits {
        request_timeout: Duration::from_millis(300),
        reply_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    }
}

/// A queue's services are `services` in the JSON and the text, as in the configuration.
#[test]
fn a_queue_lists_its_services_by_the_configuration_name() {
    let mut st = sample(0);
    st.queues.push(QueueStatus {
        num: 3,
        hook: "forward".into(),
        table: "mangle".into(),
        services: vec!["log".into(), "accept".into()],
        fail_open: true,
        gso: true,
        copy_range: 128,
        packets: 0,
        accepted: 0,
        dropped: 0,
        modified: 0,
        repeated: 0,
        malformed: 0,
        errors: 0,
        enobufs: 0,
        batches: 0,
        kernel: None,
        datapath: Default::default(),
        offload: None,
    });
    let json: serde_json::Value = serde_json::to_value(&st).unwrap();
    assert_eq!(
        json["queues"][0]["services"],
        serde_json::json!(["log", "accept"])
    );
    assert!(json["queues"][0].get("chain").is_none(), "{json}");
    let text = st.render();
    let mut lines = text.lines().skip(2);
    assert!(
        lines.next().unwrap().ends_with("k.wait  services"),
        "{text}"
    );
    assert!(lines.next().unwrap().ends_with("  log -> accept"), "{text}");
}

#[test]
fn answers_status_and_refuses_unknown_requests() {
    let s = Server::start("ok", limits(), 3);
    assert_eq!(query(&s.path).unwrap(), sample(3));
    let mut c = UnixStream::connect(&s.path).unwrap();
    c.write_all(b"shutdown\n").unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    assert_eq!(body, r#"{"error":"unknown request `shutdown`"}"#);
    assert!(s.dir.0.exists());
}

#[test]
fn a_request_without_newline_is_cut_off_at_the_limit() {
    let s = Server::start("long", limits(), 1);
    let mut c = UnixStream::connect(&s.path).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let chunk = [b'x'; 64 << 10];
    let mut sent = 0usize;
    let err = loop {
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        // The server reads 4 KiB; what fits in the socket buffers (a few hundred
        // KiB) may be accepted on top, no more.
        assert!(sent < 1 << 20, "the server read 1 MiB without a newline");
    };
    // Cut off: the server closed after 4 KiB (EPIPE or ECONNRESET), not a timeout.
    assert!(
        matches!(
            err.kind(),
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
        ),
        "{err} after {sent} bytes"
    );
    // And it still serves others.
    assert_eq!(query(&s.path).unwrap(), sample(1));
}

#[test]
fn an_idle_client_is_dropped_after_the_request_timeout() {
    let s = Server::start("idle", limits(), 1);
    let mut c = UnixStream::connect(&s.path).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(c.read(&mut buf).unwrap(), 0);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn clients_beyond_the_cap_are_told_busy_until_a_slot_frees() {
    let s = Server::start(
        "cap",
        ServerLimits {
            max_clients: 2,
            request_timeout: Duration::from_millis(600),
            ..limits()
        },
        1,
    );
    let idle: Vec<UnixStream> = (0..2)
        .map(|_| UnixStream::connect(&s.path).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let e = query(&s.path).unwrap_err();
    assert!(e.to_string().contains("busy: 2 clients"), "{e}");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(query(&s.path).unwrap(), sample(1));
    drop(idle);
}

#[test]
fn a_client_that_does_not_read_the_reply_is_dropped_after_the_reply_timeout() {
    // A reply far larger than a socket buffer, one client at a time: without the
    // reply timeout the slow client would hold the only slot for ever.
    let s = Server::start(
        "slow",
        ServerLimits {
            max_clients: 1,
            ..limits()
        },
        12_000,
    );
    let full = serde_json::to_string(&Some(sample(12_000))).unwrap().len();
    assert!(full > 1 << 20, "{full}");
    let mut slow = UnixStream::connect(&s.path).unwrap();
    slow.write_all(b"status\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(query(&s.path).unwrap_err().to_string().contains("busy"));
    // Its slot frees once the reply timeout has passed (after the reply was built).
    let t = Instant::now();
    let served = loop {
        match query(&s.path) {
            Ok(st) => break st,
            Err(e) if t.elapsed() < Duration::from_secs(10) => {
                assert!(e.to_string().contains("busy"), "{e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("the slow client still holds the only slot: {e}"),
        }
    };
    assert_eq!(served, sample(12_000));
    // What the slow client gets is the reply cut short.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = slow.read_to_end(&mut got);
    assert!(got.len() < full, "{} of {full}", got.len());
}

#[test]
fn remove_socket_removes_only_a_socket() {
    let d = Dir::new("rm");
    let file = d.0.join("file");
    std::fs::write(&file, b"x").unwrap();
    remove_socket(&file);
    assert!(file.exists());
    let sock = d.0.join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    remove_socket(&sock);
    assert!(!sock.exists());
}

#[test]
fn read_request_stops_at_newline_eof_or_limit() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let read = |input: &'static [u8], max| {
        rt.block_on(async {
            let mut r = input;
            read_request(&mut r, max).await.unwrap()
        })
    };
    assert_eq!(read(b"status\nmore", 16), Request::Line(b"status".to_vec()));
    assert_eq!(read(b"status", 16), Request::Line(b"status".to_vec()));
    assert_eq!(read(b"", 16), Request::Line(Vec::new()));
    assert_eq!(read(b"0123456789abcdef\n", 16), Request::TooLong);
    assert_eq!(
        read(b"0123456789abcde\n", 16),
        Request::Line(b"0123456789abcde".to_vec())
    );
    assert_eq!(read(b"x\n", 0), Request::TooLong);
}

/// A queue that offloaded shows an offload line; one that did not shows none.
#[test]
fn offload_counters_have_their_own_table() {
    let mut st = sample(0);
    assert!(!st.render().contains("offloaded"), "{}", st.render());
    let c = relay_core::QueueCounters::default();
    assert_eq!(crate::status::OffloadStatus::of(&c.offload), None);
    c.offload.offloaded(relay_core::OffloadReason::Decided);
    c.offload.offloaded(relay_core::OffloadReason::StreamDepth);
    c.offload.failed.inc();
    c.offload.skipped_packets.set(1234);
    let o = crate::status::OffloadStatus::of(&c.offload).expect("counted");
    assert_eq!(o.total(), 2);
    st.queues.push(QueueStatus {
        num: 0,
        hook: "forward".into(),
        table: "mangle".into(),
        services: vec!["accept".into()],
        fail_open: true,
        gso: true,
        copy_range: 128,
        packets: 9,
        accepted: 9,
        dropped: 0,
        modified: 0,
        repeated: 0,
        malformed: 0,
        errors: 0,
        enobufs: 0,
        batches: 3,
        kernel: None,
        datapath: Default::default(),
        offload: Some(o),
    });
    let text = st.render();
    let line = text
        .lines()
        .skip_while(|l| !l.contains("offloaded"))
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "0",
            "2",
            "1",
            "0",
            "1234",
            "0",
            "decided=1",
            "stream_depth=1"
        ],
        "{text}"
    );
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["queues"][0]["offload"]["skipped_packets"], 1234);
}
