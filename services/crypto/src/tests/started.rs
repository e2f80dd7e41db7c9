//! Building the ESP services as a running relayd does (the manifest's starts run first,
//! what they made in the resources) and as everything else does (nothing started): only
//! the first writes, and nothing a detached service sends can be opened with the live key.

use super::*;
use relay_core::{Manifest, ServiceFactory};
use std::sync::Arc;

/// Builds a service as a running relayd does: with what its manifest's starts made
/// (the SA's state on disk and its thread), found in its resources.
pub(super) trait BuildStarted {
    fn build_started(&self, counters: &Counters) -> Box<dyn Service>;
}

impl BuildStarted for Arc<dyn ServiceFactory> {
    fn build_started(&self, counters: &Counters) -> Box<dyn Service> {
        self.build(counters, &started(self.manifest()))
    }
}

/// What the daemon makes of `m`'s starts (relayd's `resources.rs`).
pub(super) fn started(m: &Manifest) -> relay_core::Resources {
    let mut res = relay_core::Resources::new();
    for s in &m.starts {
        res.insert_any((s.start)().unwrap());
    }
    res
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .collect()
}

/// `build` does no I/O: without the daemon's start an encrypt and a decrypt service
/// write no state file and start no thread, and what the encrypt sends is sealed under
/// another key than the SA's, from 1, so that it never repeats a live (SPI, sequence
/// number) under the live key. The daemon's start then reserves before the first packet.
#[test]
fn build_writes_nothing_and_only_the_daemons_start_reserves() {
    let cipher = Cipher::Aes128Gcm;
    let k = key_file("detached", cipher);
    let state = state_dir_of(&k);
    let kept = relay_core::Kept::new();
    let ef = enc_config(cipher, k.clone())
        .into_factory_kept("e", &kept)
        .unwrap();
    let df = dec_config(cipher, k.clone(), false)
        .into_factory_kept("d", &kept)
        .unwrap();
    assert_eq!(ef.manifest().starts.len(), 1, "{:?}", ef.manifest());
    assert_eq!(df.manifest().starts.len(), 1, "{:?}", df.manifest());
    let (ec, dc) = (Counters::new(), Counters::new());
    let mut enc = ef.build(&ec, &relay_core::Resources::new());
    let mut dec = df.build(&dc, &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&udp_packet(10));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    assert_eq!(esp_of(p.data()).seq_no, 1, "detached: from 1, in memory");
    assert!(!state.exists(), "a build wrote the state directory");
    assert!(
        !esp::state_thread_started(&kept),
        "a build started the state thread"
    );
    // Not under the SA's key: the peer (its live SA) refuses it.
    let mut live_dec = df.build_started(&Counters::new());
    assert_eq!(
        live_dec.process(&mut Packet::from_bytes(p.data()), &mut cx()),
        Action::Drop
    );
    // A detached decrypt opens with the SA's key (a capture of real ESP replays), so it
    // refuses this one too; it wrote nothing.
    let mut q = Packet::from_bytes(p.data());
    assert_eq!(dec.process(&mut q, &mut cx()), Action::Drop, "other key");
    assert_eq!(count(&dc, "dropped_auth_failed"), 1);
    // The daemon's start (here, the live decrypt's start ran above): state on disk, and
    // the encrypt's reservation made before any packet of the started service.
    let res = started(ef.manifest());
    let reserved = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("esp-out-00001001-")
        });
    assert!(reserved, "the start made no reservation");
    assert!(esp::state_thread_started(&kept));
    assert!(
        thread_names().iter().any(|n| n.starts_with("relayd-esp")),
        "{:?}",
        thread_names()
    );
    let mut live = ef.build(&Counters::new(), &res);
    let mut p = Packet::from_bytes(&udp_packet(10));
    assert_eq!(live.process(&mut p, &mut cx()), Action::Continue);
    assert_eq!(esp_of(p.data()).seq_no, 1);
    let mut q = Packet::from_bytes(p.data());
    assert_eq!(live_dec.process(&mut q, &mut cx()), Action::Continue);
    assert_eq!(q.data(), &udp_packet(10)[..]);
}
