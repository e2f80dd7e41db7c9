//! `relayd check` only reads: on a configuration whose services will write files while
//! they run (the IDS's EVE log, the ESP sequence state) and read the egress queues
//! (adaptive compression, whose monitor is a thread), it opens no file for writing and
//! starts no thread. Those are made by a running relayd from the services' manifests.
//!
//! In-process, alone in its test binary, so that the thread count is this test's.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
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
}
