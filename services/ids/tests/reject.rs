//! `reject` through the service: a flood of matching packets (a spoofed source, in a real
//! attack) draws no more answers than the configured token buckets allow, the rest are
//! counted as `reject_suppressed`, and every packet is dropped. The answers go into the
//! queue's outbox, counted as sent here as a datapath whose sends succeed would: no
//! privileges needed.

mod common;

use common::{counter, udp4};
use relay_core::{Action, Context, Counters, ServiceConfig};
use relay_svc_ids::IdsConfig;
use std::time::{Duration, Instant};

const LO: [u8; 4] = [127, 0, 0, 1];

/// Runs `n` UDP datagrams at 5,000 a second (a virtual clock) through an `ids` service
/// configured with `options` and a reject rule matching them; returns the counters.
fn flood(tag: &str, options: &str, n: u64) -> Counters {
    let dir = std::env::temp_dir().join(format!("relay-ids-reject-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("reject.rules");
    std::fs::write(
        &rules,
        "reject udp any any -> any 9 (msg:\"reflect me\"; sid:7;)\n",
    )
    .unwrap();
    let cfg: IdsConfig = toml::from_str(&format!("rules = [{rules:?}]\n{options}")).unwrap();
    let f = cfg.into_factory("ids").unwrap();
    let counters = Counters::new();
    let mut s = f.build(&counters, &relay_core::Resources::new());
    let t0 = Instant::now();
    for i in 0..n {
        let mut cx = Context::new(0, t0 + Duration::from_micros(200 * i));
        let mut p = udp4(LO, LO, 40000, 9, b"reflect me");
        assert_eq!(s.process(&mut p, &mut cx), Action::Drop, "packet {i}");
        cx.outbox_mut().settle_all_sent();
    }
    let _ = std::fs::remove_dir_all(&dir);
    counters
}

#[test]
fn a_spoofed_flood_draws_at_most_the_configured_answers() {
    // Defaults: 10 answers/s and a burst of 10 for one address, over 2 s.
    let c = flood("defaults", "", 10_000);
    let (sent, suppressed) = (counter(&c, "reject_sent"), counter(&c, "reject_suppressed"));
    assert_eq!(counter(&c, "rejected"), 10_000);
    assert_eq!(counter(&c, "reject_errors"), 0);
    assert!((29..=30).contains(&sent), "answers sent: {sent}");
    assert_eq!(sent + suppressed, 10_000);

    // Only the queue's bucket, configured: 500/s, burst 100, over 2 s.
    let c = flood(
        "queue",
        "reject_rate = 500\nreject_burst = 100\nreject_dest_rate = 0\n",
        10_000,
    );
    let (sent, suppressed) = (counter(&c, "reject_sent"), counter(&c, "reject_suppressed"));
    assert!((1095..=1100).contains(&sent), "answers sent: {sent}");
    assert_eq!(sent + suppressed, 10_000);
}

#[test]
fn reject_limits_must_be_at_least_one() {
    for (opt, ok) in [
        ("reject_rate = 0", false),
        ("reject_burst = 0", false),
        ("reject_dest_burst = 0", false),
        ("reject_rate = -1", false),
        ("reject_rate = \"fast\"", false),
        ("reject_dest_rate = 0", true),
        (
            "reject_rate = 1\nreject_burst = 1\nreject_dest_burst = 1",
            true,
        ),
    ] {
        let r = toml::from_str::<IdsConfig>(&format!("rules = [\"x\"]\n{opt}\n"));
        assert_eq!(r.is_ok(), ok, "{opt}: {r:?}");
        if let Err(e) = r {
            let key = opt.split(' ').next().unwrap();
            // The error points at the key, as relayd check reports it (file:line:field).
            assert!(e.span().is_some(), "{opt}: {e}");
            if opt.ends_with("= 0") {
                assert!(e.message().contains("must be at least 1"), "{key}: {e}");
            }
        }
    }
}
