//! The Debian package (`make deb`): builds it with cargo-deb as `make deb` does, then
//! checks its control fields, its contents and their modes, that it ships the committed
//! dist/ files unchanged, what its maintainer scripts do under a (fake) systemd, and
//! installs, upgrades, removes and purges it in a scratch root with dpkg.
//!
//! Ignored by default: it needs root, cargo-deb (`make deps`) and a release build of
//! relayd (fat LTO, minutes on a small machine). `make test` runs it:
//! `cargo test --locked -p relayd --test package -- --ignored`.

mod common;

use common::run;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A fresh scratch directory for one test under Cargo's target/tmp.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("relayd-package")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the package test installs with dpkg and mounts: run it as root (make test does)"
    );
}

/// The package, built once for all tests in this file, exactly as `make deb` builds it:
/// `cargo build --release --locked -p relayd`, then cargo-deb without building again.
fn deb() -> &'static Path {
    static DEB: OnceLock<PathBuf> = OnceLock::new();
    DEB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        run(Command::new(&cargo).current_dir(root()).args([
            "build",
            "--release",
            "--locked",
            "-p",
            "relayd",
        ]));
        let out = scratch("deb");
        run(Command::new(&cargo)
            .current_dir(root())
            .args([
                "deb",
                "--locked",
                "-p",
                "relayd",
                "--no-build",
                "--strip",
                "--output",
            ])
            .arg(&out));
        let debs: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "deb"))
            .collect();
        assert_eq!(debs.len(), 1, "cargo deb made {debs:?}");
        debs.into_iter().next().unwrap()
    })
}

fn arch() -> String {
    stdout(Command::new("dpkg").arg("--print-architecture"))
        .trim()
        .to_owned()
}

/// Man pages and completions as generated from the CLI: (path in the package, bytes).
fn generated_assets() -> Vec<(String, Vec<u8>)> {
    relayd::dist::generated()
        .unwrap()
        .into_iter()
        .map(|f| {
            let name = f.path.rsplit('/').next().unwrap().to_owned();
            let dest = match name.as_str() {
                "relayd.bash" => "usr/share/bash-completion/completions/relayd".to_owned(),
                "_relayd" => "usr/share/zsh/vendor-completions/_relayd".to_owned(),
                "relayd.fish" => "usr/share/fish/vendor_completions.d/relayd.fish".to_owned(),
                page => format!("usr/share/man/man8/{page}.gz"),
            };
            (dest, f.contents)
        })
        .collect()
}

/// The files under dist/ the package ships as they are: (path in the package, source).
const SHIPPED_AS_IS: [(&str, &str); 5] = [
    (
        "usr/lib/systemd/system/relayd.service",
        "dist/systemd/relayd.service",
    ),
    (
        "usr/lib/systemd/system/relayd@.service",
        "dist/systemd/relayd@.service",
    ),
    ("etc/relayd/relayd.toml", "dist/relayd.toml"),
    ("usr/share/doc/relayd/copyright", "dist/copyright"),
    (
        "usr/share/doc/relayd/examples/relayd-alerts.yml",
        "dist/prometheus/relayd-alerts.yml",
    ),
];

#[test]
#[ignore = "needs root, cargo-deb and a release build; make test runs it"]
fn control_fields_and_conffiles() {
    let deb = deb();
    let info = stdout(Command::new("dpkg-deb").arg("--info").arg(deb));
    let field = |name: &str| -> String {
        info.lines()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} field in:\n{info}"))
            .to_owned()
    };
    assert_eq!(field("Package"), "relayd");
    assert_eq!(field("Version"), format!("{}-1", env!("CARGO_PKG_VERSION")));
    assert_eq!(field("Architecture"), arch());
    assert_eq!(field("Section"), "net");
    assert_eq!(field("Priority"), "optional");
    let depends = field("Depends");
    for dep in ["libc6", "iptables", "iproute2"] {
        assert!(depends.contains(dep), "Depends: {depends}");
    }
    assert!(field("Maintainer").contains('@'));
    assert!(field("Description").starts_with("relayd"));
    assert!(info.contains("enables and starts nothing"), "{info}");
    let conffiles = stdout(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .arg("conffiles"),
    );
    assert_eq!(conffiles.trim(), "/etc/relayd/relayd.toml");
    // The maintainer scripts are there, executable; no others.
    for (script, present) in [
        ("postinst", true),
        ("prerm", true),
        ("postrm", true),
        ("preinst", false),
    ] {
        // "     953 bytes,    23 lines   *  postinst             #!/bin/sh"
        let line = info
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == script));
        assert_eq!(line.is_some(), present, "{script} in:\n{info}");
        if let Some(l) = line {
            assert!(l.contains(" * ") && l.ends_with("#!/bin/sh"), "{l}");
        }
    }
}

#[test]
#[ignore = "needs root, cargo-deb and a release build; make test runs it"]
fn contents_and_modes() {
    let deb = deb();
    let list = stdout(Command::new("dpkg-deb").arg("--contents").arg(deb));
    // "-rwxr-xr-x root/root 4242 2026-01-01 00:00 ./usr/bin/relayd"
    let entries: Vec<(&str, &str, &str)> = list
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0], f[1], f[5])
        })
        .collect();
    let mode_of = |path: &str| -> &str {
        let dotted = format!("./{path}");
        entries
            .iter()
            .find(|(_, _, p)| *p == dotted)
            .unwrap_or_else(|| panic!("{path} not in the package:\n{list}"))
            .0
    };
    assert_eq!(mode_of("usr/bin/relayd"), "-rwxr-xr-x");
    let mut expected: Vec<String> = generated_assets().into_iter().map(|(p, _)| p).collect();
    expected.extend(SHIPPED_AS_IS.iter().map(|(p, _)| p.to_string()));
    for path in &expected {
        assert_eq!(mode_of(path), "-rw-r--r--", "{path}");
    }
    assert!(
        expected
            .iter()
            .any(|p| p == "usr/share/man/man8/relayd-run.8.gz"),
        "{expected:?}"
    );
    for (_, owner, path) in &entries {
        assert!(
            ["root/root", "0/0"].contains(owner),
            "{path} owned by {owner}"
        );
    }
    // Nothing outside the places relayd's files belong (and their parent directories).
    let places = [
        "./usr/bin/",
        "./usr/lib/systemd/system/",
        "./usr/share/",
        "./etc/relayd/",
    ];
    for (_, _, path) in &entries {
        assert!(
            places
                .iter()
                .any(|p| path.starts_with(p) || p.starts_with(path)),
            "{path}"
        );
    }
}

/// The package ships the committed dist/ files byte for byte (man pages gzipped), the
/// maintainer scripts from dist/debian/, and a stripped relayd that runs.
#[test]
#[ignore = "needs root, cargo-deb and a release build; make test runs it"]
fn ships_the_committed_files() {
    let deb = deb();
    let dir = scratch("extract");
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir));
    let control = dir.join("DEBIAN");
    run(Command::new("dpkg-deb").arg("-e").arg(deb).arg(&control));
    for (dest, contents) in generated_assets() {
        let shipped = if dest.ends_with(".gz") {
            run(Command::new("gzip").arg("-dc").arg(dir.join(&dest))).stdout
        } else {
            std::fs::read(dir.join(&dest)).unwrap()
        };
        assert!(shipped == contents, "{dest} is not what the CLI generates");
    }
    for (dest, source) in SHIPPED_AS_IS {
        assert_eq!(
            std::fs::read(dir.join(dest)).unwrap(),
            std::fs::read(root().join(source)).unwrap(),
            "{dest} differs from {source}"
        );
    }
    for script in ["postinst", "prerm", "postrm"] {
        assert_eq!(
            std::fs::read(control.join(script)).unwrap(),
            std::fs::read(root().join("dist/debian").join(script)).unwrap(),
            "{script}"
        );
        run(Command::new("sh").arg("-n").arg(control.join(script)));
    }
    let binary = dir.join("usr/bin/relayd");
    let version = stdout(Command::new(&binary).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("relayd {}", env!("CARGO_PKG_VERSION"))
    );
    let sections = stdout(Command::new("objdump").arg("-h").arg(&binary));
    assert!(
        !sections.contains(".debug_info"),
        "relayd is not stripped:\n{sections}"
    );
}

/// What the maintainer scripts ask systemd, run under a fake `systemctl` in a private
/// mount namespace where /run/systemd/system exists (systemd "running").
fn scripts_under_systemd(script: &str, args: &[&str], dpkg_root: &str) -> (Vec<String>, String) {
    let dir = scratch(&format!(
        "systemd-{script}-{}-{}",
        args.join("-"),
        dpkg_root.len()
    ));
    let control = dir.join("DEBIAN");
    run(Command::new("dpkg-deb").arg("-e").arg(deb()).arg(&control));
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.join("systemctl.log");
    let fake = bin.join("systemctl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\n\
             [ \"$1\" = list-units ] && echo 'relayd.service loaded active running relayd'\n\
             exit 0\n",
            log.display()
        ),
    )
    .unwrap();
    run(Command::new("chmod").arg("755").arg(&fake));
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec \"$@\"")
        .arg("sh")
        .arg(control.join(script))
        .args(args)
        .env("PATH", path)
        .env("DPKG_ROOT", dpkg_root));
    let calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    (calls, String::from_utf8(out.stdout).unwrap())
}

#[test]
#[ignore = "needs root, cargo-deb and a release build; make test runs it"]
fn maintainer_scripts_reload_systemd_and_start_nothing() {
    // Every systemctl call is compared in full: none enables, starts or restarts a unit.
    assert_root();
    let (calls, out) = scripts_under_systemd("postinst", &["configure", ""], "");
    assert_eq!(calls[0], "--system daemon-reload", "{calls:?}");
    assert!(calls[1].starts_with("list-units "), "{calls:?}");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        out.contains("systemctl restart relayd.service"),
        "postinst with relayd running says: {out}"
    );
    let (calls, _) = scripts_under_systemd("prerm", &["remove"], "");
    assert_eq!(
        calls,
        ["--system stop relayd.service relayd@*.service"],
        "prerm remove"
    );
    let (calls, _) = scripts_under_systemd("prerm", &["upgrade", "0.0.1"], "");
    assert!(calls.is_empty(), "prerm upgrade: {calls:?}");
    for action in ["remove", "purge"] {
        let (calls, _) = scripts_under_systemd("postrm", &[action], "");
        assert_eq!(calls, ["--system daemon-reload"], "postrm {action}");
    }
    // Installing into another root (dpkg --root without chroot): the running systemd
    // manages the host, so the scripts leave it alone.
    for (script, action) in [
        ("postinst", "configure"),
        ("prerm", "remove"),
        ("postrm", "purge"),
    ] {
        let (calls, _) = scripts_under_systemd(script, &[action], "/nonexistent-root");
        assert!(
            calls.is_empty(),
            "{script} {action} with DPKG_ROOT: {calls:?}"
        );
    }
}

fn dpkg(root: &Path) -> Command {
    let mut c = Command::new("dpkg");
    c.arg(format!("--root={}", root.display())).args([
        "--force-depends",
        "--force-script-chrootless",
        "--log=/dev/null",
    ]);
    c
}

fn status(root: &Path) -> String {
    let out = dpkg(root).args(["--status", "relayd"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// dpkg installs the package into an empty scratch root, upgrades it in place, removes
/// it (the conffile stays) and purges it (the conffile and enable links go).
#[test]
#[ignore = "needs root, cargo-deb and a release build; make test runs it"]
fn installs_upgrades_removes_and_purges_in_a_scratch_root() {
    assert_root();
    let deb = deb();
    let r = scratch("root");
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::write(r.join("var/lib/dpkg/status"), "").unwrap();
    run(dpkg(&r).arg("--install").arg(deb));
    let st = status(&r);
    assert!(st.contains("Status: install ok installed"), "{st}");
    assert!(st.contains(" /etc/relayd/relayd.toml "), "conffile: {st}");
    for path in ["usr/bin/relayd", "usr/share/man/man8/relayd.8.gz"] {
        assert!(r.join(path).exists(), "{path}");
    }
    let listed = stdout(dpkg(&r).args(["--listfiles", "relayd"]));
    for (dest, _) in generated_assets() {
        assert!(
            listed.contains(&format!("/{dest}\n")),
            "{dest} in:\n{listed}"
        );
    }
    // The installed relayd accepts the installed example configuration.
    let check = stdout(
        Command::new(r.join("usr/bin/relayd"))
            .args(["check", "-c"])
            .arg(r.join("etc/relayd/relayd.toml")),
    );
    assert!(check.contains(": ok ("), "{check}");

    // An edited conffile survives an upgrade (same version again) and a removal.
    let conf = r.join("etc/relayd/relayd.toml");
    let mut edited = std::fs::read_to_string(&conf).unwrap();
    edited.push_str("# edited by the operator\n");
    std::fs::write(&conf, &edited).unwrap();
    run(dpkg(&r).args(["--force-confold", "--install"]).arg(deb));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited);
    run(dpkg(&r).args(["--remove", "relayd"]));
    assert!(!r.join("usr/bin/relayd").exists());
    assert!(!r.join("usr/share/man/man8/relayd.8.gz").exists());
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited);
    assert!(
        status(&r).contains("Status: deinstall ok config-files"),
        "{}",
        status(&r)
    );

    // Purge: the conffile goes, and so do the links `systemctl enable` would have made.
    let wants = r.join("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    for unit in ["relayd.service", "relayd@b.service", "other.service"] {
        std::os::unix::fs::symlink(format!("/usr/lib/systemd/system/{unit}"), wants.join(unit))
            .unwrap();
    }
    run(dpkg(&r).args(["--purge", "relayd"]));
    assert!(!conf.exists());
    assert!(!r.join("etc/relayd").exists(), "/etc/relayd left behind");
    assert!(wants.join("relayd.service").symlink_metadata().is_err());
    assert!(wants.join("relayd@b.service").symlink_metadata().is_err());
    assert!(
        wants.join("other.service").symlink_metadata().is_ok(),
        "purge removed another package's link"
    );
    assert!(!status(&r).contains("Status: "), "{}", status(&r));
}
