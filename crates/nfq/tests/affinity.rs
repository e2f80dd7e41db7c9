//! A queue's `cpu`: its thread (named `relayd-qN`) runs only on that CPU from start, moves
//! on update, gets its inherited CPUs back when the pin is taken away, and a CPU relayd
//! may not use is refused. Read back from /proc/self/task/TID/status, as an operator
//! would. Needs root (a queue is bound in a testbed namespace).

use relay_core::{Chain, ChainSettings, QueueCounters, StageMark, Verdict};
use relay_nfq::{NfqError, Queue, QueueConfig, available_cpus, format_cpu_list};

const NUM: u16 = 23;

fn chain() -> Chain {
    Chain::new(ChainSettings {
        malformed: Verdict::Accept,
        hook: relay_core::Hook::Forward,
        stages: StageMark::DEFAULT,
    })
}

/// `Cpus_allowed_list` of this process's thread named `name`.
fn cpus_of_thread(name: &str) -> String {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        return status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
    }
    panic!("no thread named {name}");
}

fn own_cpus() -> String {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn queue_thread_is_pinned_at_start_and_on_update() {
    let cpus = available_cpus().unwrap();
    let first = cpus[0];
    let last = *cpus.last().unwrap();
    let l = relay_testbed::line3("nfq-affinity");
    let name = format!("relayd-q{NUM}");
    let q = l.relay.run(move || {
        let cfg = QueueConfig {
            cpu: Some(last),
            ..QueueConfig::new(NUM)
        };
        Queue::start(&cfg, chain(), QueueCounters::default()).unwrap()
    });
    assert_eq!(cpus_of_thread(&name), last.to_string());
    assert_eq!(q.cpu(), Some(last));

    // A reload moves it.
    let cfg = QueueConfig {
        cpu: Some(first),
        ..QueueConfig::new(NUM)
    };
    q.update(chain(), &cfg).unwrap();
    assert_eq!(cpus_of_thread(&name), first.to_string());

    // Taking the pin away restores what the thread was started with (here: the test's).
    q.update(chain(), &QueueConfig::new(NUM)).unwrap();
    assert_eq!(cpus_of_thread(&name), own_cpus());
    assert_eq!(own_cpus(), format_cpu_list(&cpus));
    assert_eq!(q.cpu(), None);

    // A CPU relayd may not run on is refused, and the queue keeps its pin.
    q.update(chain(), &cfg).unwrap();
    let bad = QueueConfig {
        cpu: Some(relay_nfq::MAX_CPU + 1),
        ..QueueConfig::new(NUM)
    };
    let e = q.update(chain(), &bad).unwrap_err();
    assert!(matches!(e, NfqError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("not available"), "{e}");
    assert_eq!(cpus_of_thread(&name), first.to_string());
    q.stop();

    // At start too.
    let e = l
        .relay
        .run(move || Queue::start(&bad, chain(), QueueCounters::default()).map(|_| ()))
        .unwrap_err();
    assert!(e.to_string().contains("not available"), "{e}");
}
