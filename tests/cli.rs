//! The CLI's offline commands: `check` errors name file, line and field; `rules` prints
//! exactly what `run` installs. `check` runs `iptables-restore --test`, so these tests
//! run inside a fresh namespace (root).

mod support;

use relay_testbed::Testbed;
use support::*;

fn check(tb_node: &relay_testbed::Node, dir: &TempDir, name: &str, text: &str) -> (i32, String) {
    let f = dir.file(name, text);
    let (code, out, err) = relayd_cmd(tb_node, &["check", "-c", f.to_str().unwrap()]);
    (code, format!("{out}{err}"))
}

#[test]
fn check_accepts_a_good_config_and_names_file_line_field_otherwise() {
    let tb = Testbed::new("check");
    let n = tb.node("n");
    let dir = TempDir::new("check");
    let good = "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-i eth0 -p udp\"\nservices = [\"dump0\", \"accept\"]\n\n[service.dump0]\nkind = \"dump\"\n";
    let (code, out) = check(&n, &dir, "good.toml", good);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok"), "{out}");

    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "kind.toml",
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"s\"]\n[service.s]\nkind = \"compresss\"\n",
            ":6:",
            "service.s.kind: unknown service kind `compresss`",
        ),
        (
            "range.toml",
            "[[queue]]\nnum = \"5-2\"\nhook = \"forward\"\nservices = [\"accept\"]\n",
            ":2:",
            "queue[0].num",
        ),
        (
            "dup.toml",
            "[[queue]]\nnum = \"0-3\"\nhook = \"forward\"\nservices = [\"accept\"]\n[[queue]]\nnum = 2\nhook = \"input\"\nservices = [\"accept\"]\n",
            ":6:",
            "queue[1].num: queue 2 is already used by queue[0]",
        ),
        (
            "match.toml",
            "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p udp --dport notaport\"\nservices = [\"accept\"]\n",
            ":4:",
            "queue[0].match: rejected by iptables-restore",
        ),
        (
            "field.toml",
            "[[queue]]\nnum = 0\nhook = \"forward\"\nservice = [\"accept\"]\n",
            ":4:",
            "unknown field `service`",
        ),
        (
            "syntax.toml",
            "[[queue]]\nnum = 0\nhook = forward\n",
            ":3:",
            "(syntax)",
        ),
        (
            "missing.toml",
            "[[queue]]\nnum = 0\nservices = [\"accept\"]\n",
            ":1:",
            "missing field `hook`",
        ),
        // `check` refuses every name `run` refuses (issue 12, defect 6).
        (
            "ifname.toml",
            "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nservices = [\"e\"]\n[service.e]\nkind = \"mpls-encap\"\ninterface = \"eth\\n1\"\nlocal = \"192.0.2.1\"\n",
            ":6:",
            r#"service.e: interface: "eth\n1" is not an interface name"#,
        ),
        (
            "peers.toml",
            "[[queue]]\nnum = 0\nhook = \"prerouting\"\ntable = \"raw\"\nservices = [\"d\"]\n[service.d]\nkind = \"mpls-decap\"\nlabels = [100]\n",
            ":6:",
            "service.d: peers: missing or empty",
        ),
        // A match may not name a program for iptables to run as root (defect 5).
        (
            "modprobe.toml",
            "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p udp --modprobe=/tmp/x\"\nservices = [\"accept\"]\n",
            ":4:",
            "names a program iptables would run as root",
        ),
    ];
    for (name, text, line, needle) in cases {
        let (code, out) = check(&n, &dir, name, text);
        assert_eq!(code, 2, "{name}: {out}");
        let path = dir.0.join(name);
        let prefix = format!("{}{line}", path.display());
        assert!(
            out.contains(&prefix),
            "{name}: expected `{prefix}` in: {out}"
        );
        assert!(
            out.contains(needle),
            "{name}: expected `{needle}` in: {out}"
        );
    }
    let (code, _, err) = relayd_cmd(&n, &["check", "-c", "/nonexistent/relayd.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/relayd.toml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn rules_prints_exactly_what_run_installs() {
    let l = relay_testbed::line3("rules");
    let body = "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p udp\"\nservices = [\"accept\"]\n\n[[queue]]\nnum = \"1-2\"\nhook = \"prerouting\"\ntable = \"raw\"\nfamily = \"both\"\nfail_open = false\nservices = [\"accept\"]\n";
    let r = Relayd::start(&l.relay, body);
    let (code, text, err) = relayd_cmd(&l.relay, &["rules", "-c", r.config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let save = iptables_save(&l.relay);
    let mut checked = 0;
    for line in text.lines().filter(|l| l.starts_with("-A ")) {
        assert!(
            save.contains(line),
            "`{line}` printed by `rules` is not installed:\n{save}"
        );
        checked += 1;
    }
    // v4: mangle skip + rule, raw skip + rule; v6: raw skip + rule; plus jumps.
    assert!(checked >= 6, "{text}");
    assert!(
        text.contains("--queue-balance 1:2")
            && !text.contains("--queue-balance 1:2 --queue-bypass"),
        "{text}"
    );
    assert!(text.contains("# ip6tables-restore"), "{text}");
}

#[test]
fn every_shipped_configuration_checks() {
    let tb = Testbed::new("shipped");
    let n = tb.node("n");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("examples/demo/relayd.toml")];
    for e in std::fs::read_dir(root.join("iptables")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            files.push(p);
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        let (code, out, err) = relayd_cmd(&n, &["check", "-c", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {out}{err}", f.display());
    }
}
