//! A queue's `nice`: its thread (named `relayd-qN`) runs at that nice value from start,
//! changes on update, gets the value it inherited back when `nice` is taken away, and a
//! value the kernel refuses (lowering it without CAP_SYS_NICE) is reported as such while
//! the queue keeps its settings. Read back from /proc/self/task/TID/stat, as `ps` would.
//! Needs root (a queue is bound in a testbed namespace).

use relay_core::{Chain, ChainSettings, QueueCounters, StageMark, Verdict};
use relay_nfq::{NfqError, Queue, QueueConfig, available_cpus};

const NUM: u16 = 24;

/// The nice value the test's starting thread runs at, so that the queue thread inherits
/// something other than the default 0.
const INHERITED: i32 = 2;

fn chain() -> Chain {
    Chain::new(ChainSettings {
        malformed: Verdict::Accept,
        hook: relay_core::Hook::Forward,
        stages: StageMark::DEFAULT,
    })
}

/// Field 19 (nice) of /proc/self/task/TID/stat for this process's thread named `name`.
fn nice_of_thread(name: &str) -> i32 {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the parenthesised name start at field 3.
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        return rest
            .split_whitespace()
            .nth(19 - 3)
            .unwrap()
            .parse()
            .unwrap();
    }
    panic!("no thread named {name}");
}

/// Takes CAP_SYS_NICE out of the calling thread's effective capabilities (they are per
/// thread), as for a relayd not run as root.
fn drop_cap_sys_nice() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_NICE: u32 = 23;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: the header and two data words are what capget/capset take for version 3.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()),
            0
        );
        data[0].effective &= !(1 << CAP_SYS_NICE);
        assert_eq!(libc::syscall(libc::SYS_capset, &hdr, data.as_ptr()), 0);
    }
}

#[test]
fn queue_thread_is_niced_at_start_and_on_update() {
    let l = relay_testbed::line3("nfq-priority");
    let name = format!("relayd-q{NUM}");
    let q = l.relay.run(move || {
        // SAFETY: a plain system call on the calling thread (0), which is the test's own.
        assert_eq!(
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, INHERITED) },
            0
        );
        let cfg = QueueConfig {
            nice: Some(5),
            ..QueueConfig::new(NUM)
        };
        Queue::start(&cfg, chain(), QueueCounters::default()).unwrap()
    });
    assert_eq!(nice_of_thread(&name), 5);
    assert_eq!(q.nice(), Some(5));

    // A reload changes it, below zero too (the test runs as root).
    let cfg = QueueConfig {
        nice: Some(-3),
        ..QueueConfig::new(NUM)
    };
    q.update(chain(), &cfg).unwrap();
    assert_eq!(nice_of_thread(&name), -3);
    assert_eq!(q.nice(), Some(-3));

    // Taking `nice` away restores what the thread started with.
    q.update(chain(), &QueueConfig::new(NUM)).unwrap();
    assert_eq!(nice_of_thread(&name), INHERITED);
    assert_eq!(q.nice(), None);

    // Out of range: refused before the kernel clamps it.
    let bad = QueueConfig {
        nice: Some(20),
        ..QueueConfig::new(NUM)
    };
    let e = q.update(chain(), &bad).unwrap_err();
    assert!(matches!(e, NfqError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("nice 20 is outside -20..19"), "{e}");
    assert_eq!(nice_of_thread(&name), INHERITED);

    // Without CAP_SYS_NICE the kernel refuses a lower value: the error says why, and the
    // queue keeps its settings, a CPU pin asked for in the same update included.
    let cpu = *available_cpus().unwrap().last().unwrap();
    let lower = QueueConfig {
        nice: Some(-10),
        cpu: Some(cpu),
        ..QueueConfig::new(NUM)
    };
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            drop_cap_sys_nice();
            q.update(chain(), &lower).unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert!(matches!(e, NfqError::Priority { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "queue {NUM}: setting its thread's nice value to -10 failed"
        )),
        "{text}"
    );
    assert!(text.contains("needs CAP_SYS_NICE"), "{text}");
    assert_eq!(nice_of_thread(&name), INHERITED);
    assert_eq!((q.nice(), q.cpu()), (None, None));
    q.stop();

    // At start too.
    let e = l
        .relay
        .run(move || Queue::start(&bad, chain(), QueueCounters::default()).map(|_| ()))
        .unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
}
