//! The `[[queue]]` entry's checks: numbers, CPUs, nice values, the kernel queue's limits
//! (relay_nfq's `QueueConfig::check`, each at its key) and the settings each queue gets.

use crate::config::test_util::{errs, first_err, parsed};

#[test]
fn bad_range_duplicate_and_unknown_service() {
    let e = errs(
        "[[queue]]\nnum = \"3-1\"\nhook = \"forward\"\nservices = [\"accept\"]\n\
         [[queue]]\nnum = 5\nhook = \"input\"\nservices = [\"accept\"]\n\
         [[queue]]\nnum = \"4-6\"\nhook = \"input\"\nservices = [\"ghost\"]\n\
         [[queue]]\nnum = \"4-6\"\nhook = \"input\"\nservices = [\"accept\"]\n",
    );
    let f: Vec<(usize, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
    assert_eq!(
        f,
        vec![
            (2, "queue[0].num"),
            (10, "queue[2].num"),
            (12, "queue[2].services[0]"),
            (14, "queue[3].num")
        ],
        "{e:#?}"
    );
}

#[test]
fn queue_cpu_pins_threads_and_refuses_missing_cpus() {
    let avail = relay_nfq::available_cpus().unwrap();
    let (a, b) = (avail[0], *avail.last().unwrap());
    let q = |num: &str, cpu: &str| {
        format!(
            "[[queue]]\nnum = {num}\nhook = \"forward\"\nservices = [\"accept\"]\ncpu = {cpu}\n"
        )
    };
    // One queue, one CPU.
    let c = parsed(&q("0", &a.to_string()));
    assert_eq!(c.queues[0].cpus, vec![a]);
    assert_eq!(c.queues[0].cpu_for(0), Some(a));
    // A range over a list: thread i on cpus[i % len].
    let c = parsed(&q("\"4-7\"", &format!("[{a}, {b}]")));
    let on: Vec<Option<usize>> = (4..=7).map(|n| c.queues[0].cpu_for(n)).collect();
    assert_eq!(on, vec![Some(a), Some(b), Some(a), Some(b)]);
    // No `cpu`: not pinned.
    let c = parsed("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
    assert_eq!(c.queues[0].cpu_for(0), None);
    // A CPU relayd may not run on, with file:line and what is available.
    let e = first_err(&q("0", "1023"), 5, "queue[0].cpu");
    let text = e[0].to_string();
    assert!(text.starts_with("t.toml:5:"), "{text}");
    assert!(
        text.contains("CPU 1023 is not available to relayd (available: "),
        "{text}"
    );
    first_err(&q("\"0-1\"", &format!("[{a}, 1023]")), 5, "queue[0].cpu");
    // Not a CPU number, an empty list, more CPUs than threads.
    first_err(&q("0", "-1"), 5, "queue[0].cpu");
    first_err(&q("0", "\"1\""), 5, "queue[0].cpu");
    first_err(&q("0", "[]"), 5, "queue[0].cpu");
    let e = first_err(&q("0", &format!("[{a}, {a}]")), 5, "queue[0].cpu");
    assert!(
        e[0].message.contains("lists 2 CPUs for 1 queue thread"),
        "{e:?}"
    );
}

#[test]
fn queue_nice_is_checked_and_shared_by_a_range() {
    let q = |num: &str, nice: &str| {
        format!(
            "[[queue]]\nnum = {num}\nhook = \"forward\"\nservices = [\"accept\"]\nnice = {nice}\n"
        )
    };
    assert_eq!(parsed(&q("0", "-5")).queues[0].queue.nice, Some(-5));
    assert_eq!(parsed(&q("0", "-20")).queues[0].queue.nice, Some(-20));
    assert_eq!(parsed(&q("0", "19")).queues[0].queue.nice, Some(19));
    // A range: every thread gets the same value.
    let c = parsed(&q("\"4-7\"", "-10"));
    let cfgs: Vec<Option<i32>> = c.queues[0]
        .nums()
        .map(|n| c.queues[0].queue_config(n).nice)
        .collect();
    assert_eq!(cfgs, vec![Some(-10); 4]);
    // No `nice`: inherited.
    let c = parsed("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n");
    assert_eq!(c.queues[0].queue.nice, None);
    // Out of range, not an integer: the file, line and field.
    let e = first_err(&q("0", "20"), 5, "queue[0].nice");
    let text = e[0].to_string();
    assert!(text.starts_with("t.toml:5:"), "{text}");
    assert!(
        text.contains("must be a nice value from -20 to 19"),
        "{text}"
    );
    first_err(&q("0", "-21"), 5, "queue[0].nice");
    first_err(&q("0", "4294967296"), 5, "queue[0].nice");
    first_err(&q("0", "\"-5\""), 5, "queue[0].nice");
    first_err(&q("0", "-5.0"), 5, "queue[0].nice");
    first_err(&q("0", "[-5]"), 5, "queue[0].nice");
}

/// The kernel queue's limits (relay_nfq's `QueueConfig::check`) each name their key
/// with relayd's own message; several come in the order of the entry's keys.
#[test]
fn kernel_limits_name_their_key() {
    let q = |keys: &str| {
        format!("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n{keys}")
    };
    // The key is on the entry's last line.
    let only = |keys: &str, field: &str, message: &str| {
        let line = 4 + keys.lines().count();
        let e = first_err(&q(keys), line, field);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].message, message, "{e:?}");
        assert!(
            e[0].to_string().starts_with(&format!("t.toml:{line}:")),
            "{e:?}"
        );
    };
    only(
        "copy_range = 63\n",
        "queue[0].copy_range",
        "must be 64-65535 bytes",
    );
    only(
        "copy_range = 65536\n",
        "queue[0].copy_range",
        "must be 64-65535 bytes",
    );
    only("max_len = 0\n", "queue[0].max_len", "must be at least 1");
    only(
        "copy_range = 2048\nrcvbuf = 2559\n",
        "queue[0].rcvbuf",
        "must be larger than copy_range plus netlink overhead (2560 bytes)",
    );
    only("batch = 0\n", "queue[0].batch", "must be 1-1024 packets");
    only("batch = 1025\n", "queue[0].batch", "must be 1-1024 packets");
    only(
        "nice = 20\n",
        "queue[0].nice",
        "must be a nice value from -20 to 19 (lower runs more)",
    );
    // The limits themselves pass.
    let c = parsed(&q(
        "copy_range = 64\nmax_len = 1\nrcvbuf = 576\nbatch = 1024\n",
    ));
    let s = &c.queues[0].queue;
    assert_eq!(
        (s.copy_range, s.max_len, s.rcvbuf, s.batch),
        (64, 1, 576, 1024)
    );
    let c = parsed(&q("copy_range = 65535\nbatch = 1\n"));
    assert_eq!(
        (c.queues[0].queue.copy_range, c.queues[0].queue.batch),
        (65535, 1)
    );
    // Several at once: one error per key, in the order of the keys.
    let e = errs(&q(
        "copy_range = 10\nmax_len = 0\nbatch = 5000\nnice = -21\n",
    ));
    let f: Vec<(usize, &str)> = e.iter().map(|e| (e.line, e.field.as_str())).collect();
    assert_eq!(
        f,
        vec![
            (5, "queue[0].copy_range"),
            (6, "queue[0].max_len"),
            (7, "queue[0].batch"),
            (8, "queue[0].nice")
        ],
        "{e:#?}"
    );
    let e = errs(&q(
        "copy_range = 1024\nrcvbuf = 1\ncpu_fanout = true\nnice = 1.5\n",
    ));
    let f: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        f,
        vec!["queue[0].rcvbuf", "queue[0].cpu_fanout", "queue[0].nice"],
        "{e:#?}"
    );
    assert!(e[0].message.ends_with("(1536 bytes)"), "{e:?}");
    // Held packets: a configured max_len leaves room for them plus a batch, a default
    // one grows to.
    let d = |keys: &str| {
        format!(
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"d\"]\n{keys}[service.d]\nkind = \"delay\"\ndelay = \"10ms\"\nlimit = 100\n"
        )
    };
    let e = first_err(&d("batch = 8\nmax_len = 107\n"), 6, "queue[0].max_len");
    assert_eq!(
        e[0].message,
        "must be at least 108: the services hold up to 100 packets, plus a batch"
    );
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        parsed(&d("batch = 8\nmax_len = 108\n")).queues[0]
            .queue
            .max_len,
        108
    );
    assert_eq!(parsed(&d("")).queues[0].queue.max_len, 1024);
    let c = parsed(&d("batch = 1000\n"));
    assert_eq!(c.queues[0].queue.max_len, 1100);
    // Room is judged against a batch that is itself right: a wrong one is reported alone.
    let e = errs(&d("batch = 0\nmax_len = 50\n"));
    let f: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(f, vec!["queue[0].batch"], "{e:?}");
    // A zero max_len is both too short and leaves no room.
    let e = errs(&d("max_len = 0\n"));
    let m: Vec<&str> = e.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        m,
        vec![
            "must be at least 1",
            "must be at least 164: the services hold up to 100 packets, plus a batch"
        ]
    );
}

/// A service that reads the packets' conntrack state.
#[derive(serde::Deserialize)]
struct CtConfig {}

/// Its manifest asks for conntrack.
struct CtFactory(relay_core::Manifest);

impl relay_core::ServiceFactory for CtFactory {
    fn kind(&self) -> &'static str {
        "ct-test"
    }

    fn manifest(&self) -> &relay_core::Manifest {
        &self.0
    }

    fn build(
        &self,
        _: &relay_core::Counters,
        _: &relay_core::Resources,
    ) -> Box<dyn relay_core::Service> {
        Box::new(Pass)
    }
}

struct Pass;

impl relay_core::Service for Pass {
    fn process(
        &mut self,
        _: &mut relay_core::Packet,
        _: &mut relay_core::Context,
    ) -> relay_core::Action {
        relay_core::Action::Continue
    }
}

impl relay_core::ServiceConfig for CtConfig {
    const KIND: &'static str = "ct-test";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<std::sync::Arc<dyn relay_core::ServiceFactory>, relay_core::InvalidConfig> {
        Ok(std::sync::Arc::new(CtFactory(relay_core::Manifest {
            conntrack: true,
            ..relay_core::Manifest::new()
        })))
    }
}

#[test]
fn each_queue_of_an_entry_gets_its_number_and_cpu_and_the_shared_settings() {
    let a = relay_nfq::available_cpus().unwrap()[0];
    let entry = format!(
        "[[queue]]\nnum = \"4-5\"\nhook = \"forward\"\nservices = [\"accept\"]\ncpu = [{a}]\nmax_len = 300\nbatch = 8\n"
    );
    let c = parsed(&entry);
    let s = &c.queues[0];
    let q5 = s.queue_config(5);
    assert_eq!((q5.num, q5.cpu, q5.max_len, q5.batch), (5, Some(a), 300, 8));
    assert_eq!(
        q5,
        relay_nfq::QueueConfig {
            num: 5,
            cpu: Some(a),
            ..s.queue.clone()
        }
    );
    // What the file does not set is relay_nfq's default; no conntrack, no mark bits.
    let defaults = relay_nfq::QueueConfig::new(4);
    assert_eq!(
        (s.queue.rcvbuf, s.queue.hold),
        (defaults.rcvbuf, defaults.hold)
    );
    assert_eq!((s.queue.conntrack, s.queue.ct_mark_bits), (false, None));
    // A service that reads conntrack state: the daemon's mark bits go with the queue.
    let mut r = crate::Registry::with_builtins();
    r.register::<CtConfig>();
    let text = "[daemon]\nct_mark_bits = \"0xf0\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"c\"]\n[service.c]\nkind = \"ct-test\"\n";
    let c = crate::config::parse(text, std::path::Path::new("t.toml"), &r).unwrap();
    let q0 = c.queues[0].queue_config(0);
    assert!(q0.conntrack);
    assert_eq!(q0.ct_mark_bits.map(|b| b.mask()), Some(0xf0));
}

mod offload {
    use crate::config::test_util::{errs, parsed};

    const MARK: &str = "[service.m]\nkind = \"mark\"\nmark = \"0x20\"\nmask = \"0xff\"\n";

    #[test]
    fn an_offloading_queue_gets_the_daemon_bits_and_the_chain_marks() {
        let cfg = parsed(&format!(
            "{MARK}[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"m\", \"accept\"]\noffload = true\n"
        ));
        let m = cfg.queues[0].queue.offload.expect("offload");
        assert_eq!(
            (m.orig, m.reply, m.gen_mask),
            (0x1_0000, 0x2_0000, 0xfc_0000)
        );
        assert_eq!(m.restore, 0x20);
        assert!(
            cfg.queues[0].queue.conntrack,
            "the direction comes with the mark bits"
        );
        let plain = parsed("[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"accept\"]\n");
        assert_eq!(plain.queues[0].queue.offload, None);
        assert!(!plain.queues[0].queue.conntrack);
    }

    #[test]
    fn offload_is_refused_where_it_cannot_work() {
        for (text, field, what) in [
            (
                "[service.d]\nkind = \"dump\"\n[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"d\", \"accept\"]\noffload = true\n",
                "queue[0].offload",
                "service `d`",
            ),
            (
                "[[queue]]\nnum = 1\ntable = \"raw\"\nhook = \"prerouting\"\nservices = [\"accept\"]\noffload = true\n",
                "queue[0].offload",
                "before conntrack",
            ),
            (
                "[daemon]\noffload_mark = \"0x00ff0000\"\n[service.m]\nkind = \"mark\"\nmark = \"0x10000\"\n[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"m\"]\noffload = true\n",
                "queue[0].offload",
                "overlap daemon.offload_mark",
            ),
            (
                "[daemon]\noffload_mark = \"0x0f000000\"\n[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"accept\"]\n",
                "daemon.offload_mark",
                "overlaps daemon.ct_mark_bits",
            ),
            (
                "[daemon]\noffload_mark = \"0x00f0f000\"\n[[queue]]\nnum = 1\nhook = \"forward\"\nservices = [\"accept\"]\n",
                "daemon.offload_mark",
                "contiguous",
            ),
            (
                "[daemon]\noffload_mark = \"0x000f0000\"\n[[queue]]\nnum = \"1-2\"\nhook = \"forward\"\nservices = [\"accept\"]\noffload = true\n[[queue]]\nnum = 3\nhook = \"input\"\nservices = [\"accept\"]\noffload = true\n",
                "daemon.offload_mark",
                "at most 1 queues may offload",
            ),
        ] {
            let found = errs(text);
            assert!(
                found.iter().any(|e| e.field == field
                    && e.message.contains(what)
                    && (e.line > 0 || field.starts_with("daemon"))),
                "{text}\n{found:#?}"
            );
        }
    }
}
