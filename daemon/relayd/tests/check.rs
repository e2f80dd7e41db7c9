//! `relayd check` only reads: on a configuration whose services will write files while
//! they run (the IDS's EVE log, the ESP sequence state) and read the egress queues
//! (adaptive compression, whose monitor is a thread), it opens no file for writing and
//! starts no thread. Those are made by a running relayd from the services' manifests.
//!
//! Building the chain does no I/O either: built the way `relayd replay` builds it (the
//! resources made without the services' starts) it writes nothing and starts nothing, and
//! only the running daemon's resources start the ESP state, before the first packet.
//!
//! In-process, alone in its test binary, so that the thread count is this test's.

#[path = "../../../tests/support/mod.rs"]
mod support;

use relay_core::{Action, Context, Counters, Packet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The names of this process's threads (as the kernel keeps them: 15 bytes).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .collect()
}

/// A UDP datagram 10.0.1.1:4000 -> 10.0.2.2:5000 (no UDP checksum), 8 bytes of data.
fn udp_packet() -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 36, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2, // IPv4
        0x0f, 0xa0, 0x13, 0x88, 0, 16, 0, 0, // UDP
    ];
    p.extend_from_slice(b"12345678");
    let sum = p[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p
}

/// Every path under `dir`, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(tree(&p));
        }
        out.push(p);
    }
    out.sort();
    out
}

#[test]
fn check_writes_no_file_and_starts_no_thread() {
    // On a path only root can write: a key file anyone could replace is refused, and a
    // checkout under /tmp (as CI's) puts the target's temporary directory there.
    let dir = support::key_dir("check-no-io");
    let base = dir.0.clone();
    let rules = base.join("local.rules");
    std::fs::write(
        &rules,
        "drop tcp any any -> any 80 (content:\"x\"; sid:1;)\n",
    )
    .unwrap();
    let key = base.join("esp.key");
    relay_svc_crypto::keygen(relay_svc_crypto::Cipher::Aes128Gcm, &key).unwrap();
    let eve = base.join("log").join("eve.json");
    let state = base.join("esp-state");
    let config = base.join("relayd.toml");
    std::fs::write(
        &config,
        format!(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p tcp\"\nservices = [\"ids\"]\n\n\
             [[queue]]\nnum = 1\nhook = \"forward\"\nmatch = \"-p udp --dport 5000\"\nservices = [\"enc\"]\n\n\
             [[queue]]\nnum = 2\nhook = \"forward\"\nmatch = \"-p udp --dport 6000\"\nservices = [\"comp\"]\n\n\
             [service.ids]\nkind = \"ids\"\nrules = [{rules:?}]\neve_log = {eve:?}\n\n\
             [service.enc]\nkind = \"encrypt\"\ncipher = \"aes-128-gcm\"\nspi = 4097\n\
             key_file = {key:?}\nstate_dir = {state:?}\n\n\
             [service.comp]\nkind = \"compress\"\nmode = \"adaptive\"\n"
        ),
    )
    .unwrap();
    let files = tree(&base);
    let before = threads();
    let code = relayd::cli::check(&config, &relayd::Registry::with_builtins());
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(threads(), before, "relayd check started a thread");
    assert!(
        !eve.exists() && !eve.parent().unwrap().exists(),
        "the EVE log was made"
    );
    assert!(!state.exists(), "the ESP state directory was made");
    // What the manifests say the services will write (queue order: ids, enc), none of it
    // there yet.
    let cfg = relayd::config::load(&config, &relayd::Registry::with_builtins()).unwrap();
    let writes: Vec<PathBuf> = cfg
        .queues
        .iter()
        .flat_map(|q| q.services.iter())
        .flat_map(|(_, f)| {
            f.manifest()
                .writes()
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(writes, [eve.clone(), state.clone()]);
    assert!(writes.iter().all(|p| !p.exists()), "{writes:?}");
    assert_eq!(tree(&base), files, "relayd check wrote a file");

    // Every service built the way `relayd replay` builds it (its resources made without
    // the services' starts, no log opened): nothing written, no thread started.
    let before = threads();
    let replayed = relayd::resources::Provider::fixed(relay_netlink::QueueMonitor::fixed(0, 0))
        .resources(&cfg, relayd::resources::OpenLogs::default())
        .unwrap();
    let services: Vec<(&str, &_)> = cfg
        .queues
        .iter()
        .flat_map(|q| q.services.iter())
        .map(|(n, f)| (n.as_str(), f))
        .collect();
    let built: Vec<_> = services
        .iter()
        .map(|(n, f)| f.build(&Counters::new(), replayed.of(n)))
        .collect();
    assert_eq!(threads(), before, "building the chain started a thread");
    assert_eq!(tree(&base), files, "building the chain wrote a file");
    drop(built);

    // A running relayd's resources start the ESP state before any queue runs: the first
    // reservation is on disk and the state thread runs before the first packet.
    let enc_cfg = base.join("enc.toml");
    std::fs::write(
        &enc_cfg,
        format!(
            "[[queue]]\nnum = 1\nhook = \"forward\"\nmatch = \"-p udp --dport 5000\"\nservices = [\"enc\"]\n\n\
             [service.enc]\nkind = \"encrypt\"\ncipher = \"aes-128-gcm\"\nspi = 4097\n\
             key_file = {key:?}\nstate_dir = {state:?}\n"
        ),
    )
    .unwrap();
    let cfg = relayd::config::load(&enc_cfg, &relayd::Registry::with_builtins()).unwrap();
    let live = relayd::resources::Provider::live()
        .resources(&cfg, relayd::resources::OpenLogs::default())
        .unwrap();
    let reservation = || -> Option<String> {
        let f = std::fs::read_dir(&state).ok()?.flatten().find(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("esp-out-00001001-") && n.ends_with(".state")
        })?;
        std::fs::read_to_string(f.path()).ok()
    };
    let text = reservation().expect("the daemon's start made no reservation");
    assert!(text.contains("\nreserved 65536\n"), "{text}");
    // (A new thread takes its name itself, a moment after it started.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !thread_names().iter().any(|n| n == "relayd-esp-stat") {
        assert!(
            std::time::Instant::now() < deadline,
            "no ESP state thread: {:?}",
            thread_names()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (_, f) = &cfg.queues[0].services[0];
    let mut enc = f.build(&Counters::new(), live.of("enc"));
    let mut p = Packet::from_bytes(&udp_packet());
    let mut cx = Context::new(0, std::time::Instant::now());
    assert_eq!(enc.process(&mut p, &mut cx), Action::Continue);
    assert_eq!(p.data().get(9), Some(&50), "ESP");
    assert_eq!(p.data().get(24..28), Some(&1u32.to_be_bytes()[..]), "seq 1");
}
