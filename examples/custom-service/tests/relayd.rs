//! The custom services joined to relayd by one registry line each: relayd reads the tc
//! tree and the mark `port-class` needs from its manifest, with nothing in relayd changed.

use relayd_example_ttl_guard::port_class::PortClassConfig;

fn registry() -> relayd::Registry {
    let mut r = relayd::Registry::with_builtins();
    r.register::<PortClassConfig>();
    r
}

fn load(text: &str) -> Result<relayd::config::Config, String> {
    let dir = std::env::temp_dir().join(format!("relayd-port-class-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{:x}.toml", text.len()));
    std::fs::write(&path, text).unwrap();
    relayd::config::load(&path, &registry()).map_err(|e| e.to_string())
}

const CONFIG: &str = r#"
[[queue]]
num = 7
hook = "postrouting"
services = ["shape"]

[service.shape]
kind = "port-class"
interface = "eth1"
link_rate = "100mbit"
classes = [{ port = 22, rate = "10mbit" }, { port = 443, rate = "60mbit" }]
"#;

#[test]
fn relayd_installs_the_tree_the_manifest_declares() {
    let cfg = load(CONFIG).unwrap();
    let plans = relayd::qos::plans(cfg.queue_services()).unwrap();
    assert_eq!(plans.len(), 1);
    assert_eq!((plans[0].dev.as_str(), plans[0].handle), ("eth1", 0x1e0));
    assert_eq!(plans[0].classes.len(), 2);
    // Headers only: the queue copies a header's worth, not whole packets.
    assert!(cfg.queues[0].queue.copy_range < 65535);
}

#[test]
fn relayd_refuses_a_mark_over_its_stage_bits() {
    // The marks' bits (0x1e0xxxx) meet stage bits placed there.
    let text = format!("[daemon]\nbypass_mark = 0x00600000\n{CONFIG}");
    let err = load(&text).unwrap_err();
    assert!(err.contains("shape"), "{err}");
}
