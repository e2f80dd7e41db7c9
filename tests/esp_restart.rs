//! ESP with manual keys across restarts, crashes and power loss of either relay, on the
//! real kernel (issue 25): src -- A (encrypt) -- B (decrypt) -- dst, in transport mode.
//! The wire between A and B is captured (an AF_PACKET socket in B's namespace) and every
//! ESP packet decoded: no (SPI, sequence number) and no (SPI, IV) may appear twice;
//! delivery resumes within 1 s of each restart; replays of every packet captured so far,
//! sent after B's restarts, deliver nothing. Needs root.

mod support;

use relay_svc_crypto::Cipher;
use relay_testbed::{Line4, line4};
use std::collections::{BTreeMap, HashSet};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const SPI: u32 = 0x1001;
/// Datagrams one batch sends, one every millisecond or so.
const BATCH: u32 = 400;
/// The test hook that makes relayd abort as a power loss would leave its disk.
const POWER_LOSS: &str = relay_svc_crypto::persist::POWER_LOSS_HOOK;

fn config_a(cipher: &str, key: &str) -> String {
    format!(
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-d 10.0.3.0/24 ! -p esp"
services = ["enc"]

[service.enc]
kind = "encrypt"
cipher = "{cipher}"
spi = {SPI}
key_file = "{key}"
# Small reservations, so that a batch crosses several of them.
sequence_reserve = 256
"#
    )
}

fn config_b(cipher: &str, key: &str) -> String {
    format!(
        r#"
[[queue]]
num = 1
hook = "prerouting"
match = "-p esp -d 10.0.3.0/24"
services = ["dec"]

[service.dec]
kind = "decrypt"
[[service.dec.sa]]
spi = {SPI}
cipher = "{cipher}"
key_file = "{key}"
"#
    )
}

/// Every ESP packet arriving at B from A while recording is on.
struct Capture {
    packets: Arc<Mutex<Vec<Vec<u8>>>>,
    recording: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Capture {
    fn start(l: &Line4) -> Capture {
        let fd = ipv4_capture_socket(&l.decomp, &l.links[1].b_if);
        let packets = Arc::new(Mutex::new(Vec::new()));
        let recording = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, r, s) = (packets.clone(), recording.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: the buffers outlive the call.
                let n = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                        &mut len,
                    )
                };
                let Ok(n) = usize::try_from(n) else { continue };
                let incoming = from.sll_pkttype != libc::PACKET_OUTGOING;
                if incoming && n > 28 && buf[9] == 50 && r.load(Ordering::Relaxed) {
                    p.lock().unwrap().push(buf[..n].to_vec());
                }
            }
        });
        Capture {
            packets,
            recording,
            stop,
            thread: Some(thread),
        }
    }

    fn snapshot(&self) -> Vec<Vec<u8>> {
        self.packets.lock().unwrap().clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The datagrams that reached dst: by index, how many times.
struct Sink {
    got: Arc<Mutex<BTreeMap<u32, u32>>>,
    stop: Arc<AtomicBool>,
}

impl Sink {
    fn start(l: &Line4) -> Sink {
        let rx = l.dst.run(|| UdpSocket::bind("10.0.3.2:7000").unwrap());
        rx.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let got = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 2000];
            while !s.load(Ordering::Relaxed) {
                if let Ok((n, _)) = rx.recv_from(&mut buf)
                    && n >= 4
                {
                    let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
                    *g.lock().unwrap().entry(i).or_default() += 1;
                }
            }
        });
        Sink { got, stop }
    }

    fn has(&self, i: u32) -> bool {
        self.got.lock().unwrap().contains_key(&i)
    }

    /// The datagrams delivered more than once.
    fn twice(&self) -> Vec<u32> {
        let g = self.got.lock().unwrap();
        g.iter().filter(|(_, n)| **n > 1).map(|(i, _)| *i).collect()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Sends datagrams numbered from `next` from host A to host B, about one a millisecond.
struct Sender {
    tx: Arc<UdpSocket>,
    next: Arc<AtomicU32>,
}

impl Sender {
    /// Sends `n` datagrams in the background; the handle gives their numbers and send times.
    fn batch(&self, n: u32) -> std::thread::JoinHandle<Vec<(u32, Instant)>> {
        let (tx, next) = (self.tx.clone(), self.next.clone());
        std::thread::spawn(move || {
            (0..n)
                .map(|_| {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let mut p = vec![0x5au8; 200];
                    p[..4].copy_from_slice(&i.to_be_bytes());
                    let at = Instant::now();
                    let _ = tx.send_to(&p, "10.0.3.2:7000");
                    std::thread::sleep(Duration::from_micros(900));
                    (i, at)
                })
                .collect()
        })
    }
}

/// After a restart: a batch is delivered from at most 1 s after its start on, whole from
/// its first delivered datagram; returns the datagrams lost at its start.
fn assert_resumes(sink: &Sink, sender: &Sender, what: &str, a: &Relayd, b: &Relayd) -> usize {
    let sent = sender.batch(BATCH).join().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let first = sent.iter().position(|(i, _)| sink.has(*i));
    let Some(first) = first else {
        panic!(
            "{what}: nothing delivered after the restart (blackhole)\nA: {:?}\nB: {:?}\n{}",
            a.counters("enc"),
            b.counters("dec"),
            b.log()
        );
    };
    let gap = sent[first].1.duration_since(sent[0].1);
    assert!(
        gap < Duration::from_secs(1),
        "{what}: delivery resumed after {gap:?}"
    );
    let lost: Vec<u32> = sent[first..]
        .iter()
        .filter(|(i, _)| !sink.has(*i))
        .map(|(i, _)| *i)
        .collect();
    assert!(lost.is_empty(), "{what}: lost after resuming: {lost:?}");
    eprintln!("{what}: delivery resumed after {gap:?} ({first} datagrams refused)");
    first
}

/// Waits for `r` to exit by itself (an abort), then starts it again.
fn restart_after_crash(r: &mut Relayd, what: &str) {
    let exited = r.proc.wait_timeout(Duration::from_secs(10));
    assert!(
        exited.is_some(),
        "{what}: relayd did not crash:\n{}",
        r.log()
    );
    r.respawn();
    r.wait_running();
}

/// Sends every packet `cap` recorded again from src (it crosses A unchanged, as ESP, and
/// reaches B): nothing B delivered before may be delivered again. With `all_delivered`
/// (B stopped cleanly while idle), every one of them was, so every one must be refused;
/// after a crash the capture also holds what A sent while B was down, which B never saw
/// and may accept now, once. Recording pauses meanwhile.
fn assert_replays_refused(
    l: &Line4,
    cap: &Capture,
    sink: &Sink,
    b: &Relayd,
    all_delivered: bool,
    what: &str,
) {
    std::thread::sleep(Duration::from_millis(100));
    cap.recording.store(false, Ordering::Relaxed);
    let old = cap.snapshot();
    let before = b.counters("dec");
    // Paced, so that the kernel's queue to B never overflows.
    for chunk in old.chunks(50) {
        send_raw(&l.src, chunk.to_vec());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let after = b.counters("dec");
    assert_eq!(
        sink.twice(),
        [0u32; 0],
        "{what}: replayed packets delivered again"
    );
    let refused = |c: &BTreeMap<String, u64>| c["dropped_replayed"] + c["dropped_too_old"];
    let (r, d) = (
        refused(&after) - refused(&before),
        after["decrypted"] - before["decrypted"],
    );
    eprintln!(
        "{what}: of {} replayed, {r} refused, {d} never seen before",
        old.len()
    );
    assert_eq!(r + d, old.len() as u64, "{what}: {after:?}");
    if all_delivered {
        assert_eq!(d, 0, "{what}: {after:?}");
    }
    cap.recording.store(true, Ordering::Relaxed);
}

/// No (SPI, sequence number) and no (SPI, IV) twice among the packets captured.
fn assert_no_repeats(packets: &[Vec<u8>], cipher: Cipher) {
    let (mut seqs, mut ivs) = (HashSet::new(), HashSet::new());
    for p in packets {
        let ihl = usize::from(p[0] & 15) * 4;
        let esp = &p[ihl..];
        let spi = u32::from_be_bytes(esp[..4].try_into().unwrap());
        let seq = u32::from_be_bytes(esp[4..8].try_into().unwrap());
        let iv = esp[8..8 + cipher.iv_len()].to_vec();
        assert!(
            seqs.insert((spi, seq)),
            "sequence number {seq} of SPI {spi:#x} used twice"
        );
        assert!(
            ivs.insert((spi, iv)),
            "an IV of SPI {spi:#x} used twice (seq {seq})"
        );
    }
}

fn restarts_of_either_side(cipher_name: &str, tag: &str) {
    let t0 = Instant::now();
    let cipher = Cipher::from_name(cipher_name).unwrap();
    let l = line4(tag);
    let dir = key_dir(tag);
    let key = dir.0.join("a2b.key");
    relay_svc_crypto::keygen(cipher, &key).unwrap();
    let key = key.display().to_string();
    let mut a = Relayd::start(&l.comp, &config_a(cipher_name, &key));
    let mut b = Relayd::start(&l.decomp, &config_b(cipher_name, &key));
    let cap = Capture::start(&l);
    let sink = Sink::start(&l);
    let sender = Sender {
        tx: Arc::new(l.src.run(|| UdpSocket::bind("10.0.1.1:0").unwrap())),
        next: Arc::new(AtomicU32::new(0)),
    };
    assert_eq!(assert_resumes(&sink, &sender, "start", &a, &b), 0);

    // The encrypting relay: a clean stop, a kill -9 under traffic, a power loss (the
    // third state file write, a reservation, never reaches the disk).
    assert!(a.stop(libc::SIGTERM), "{}", a.log());
    a.respawn();
    a.wait_running();
    assert_eq!(assert_resumes(&sink, &sender, "A: SIGTERM", &a, &b), 0);
    let traffic = sender.batch(300);
    std::thread::sleep(Duration::from_millis(150));
    a.proc.signal(libc::SIGKILL).unwrap();
    traffic.join().unwrap();
    a.respawn();
    a.wait_running();
    assert_eq!(assert_resumes(&sink, &sender, "A: SIGKILL", &a, &b), 0);
    a.respawn_with_env(&[(POWER_LOSS, "3")]);
    a.wait_running();
    sender.batch(BATCH + 200).join().unwrap();
    restart_after_crash(&mut a, "A: power loss");
    assert_eq!(assert_resumes(&sink, &sender, "A: power loss", &a, &b), 0);

    // The decrypting relay, the same three; after each, every packet seen so far is
    // replayed at it.
    assert!(b.stop(libc::SIGTERM), "{}", b.log());
    b.respawn();
    b.wait_running();
    assert_replays_refused(&l, &cap, &sink, &b, true, "B: SIGTERM");
    assert_eq!(assert_resumes(&sink, &sender, "B: SIGTERM", &a, &b), 0);
    let traffic = sender.batch(300);
    std::thread::sleep(Duration::from_millis(150));
    b.proc.signal(libc::SIGKILL).unwrap();
    traffic.join().unwrap();
    b.respawn();
    b.wait_running();
    assert_replays_refused(&l, &cap, &sink, &b, false, "B: SIGKILL");
    assert_resumes(&sink, &sender, "B: SIGKILL", &a, &b);
    // The fourth write (the first is at the start, the second for the first number above
    // the edge on disk) never reaches the disk.
    b.respawn_with_env(&[(POWER_LOSS, "4")]);
    b.wait_running();
    sender.batch(2 * BATCH).join().unwrap();
    restart_after_crash(&mut b, "B: power loss");
    assert_replays_refused(&l, &cap, &sink, &b, false, "B: power loss");
    assert_resumes(&sink, &sender, "B: power loss", &a, &b);

    std::thread::sleep(Duration::from_millis(100));
    let packets = cap.snapshot();
    drop(cap);
    assert!(
        packets.len() > 8 * BATCH as usize,
        "{} captured",
        packets.len()
    );
    assert_no_repeats(&packets, cipher);
    let c = a.counters("enc");
    assert_eq!(c["dropped_seq_unreserved"], 0, "{c:?}");
    eprintln!(
        "{cipher_name}: {} ESP packets, no repeats, {:?}",
        packets.len(),
        t0.elapsed()
    );
}

#[test]
fn no_sequence_number_twice_and_no_blackhole_across_restarts_gcm() {
    restarts_of_either_side("aes-128-gcm", "esp-rs-gcm");
}

#[test]
fn no_sequence_number_twice_and_no_blackhole_across_restarts_cbc() {
    restarts_of_either_side("aes-128-cbc-hmac-sha256", "esp-rs-cbc");
}
