//! Least privilege on a real `relayd run` (issue 14, item 3): relayd started as user
//! `nobody` with only CAP_NET_ADMIN and CAP_NET_RAW as ambient capabilities (what a unit's
//! `User=` and `AmbientCapabilities=` give it) installs its rules, relays, reloads and
//! cleans up; started as root with `daemon.user = "nobody"` it drops to that user with
//! exactly the capabilities its configuration needs, and still reloads and cleans up; its
//! status socket (`daemon.socket_group`) answers the group's members and no one else.
//! Needs root (namespaces, iptables, NFQUEUE, setpriv).

#[path = "../../../tests/support/mod.rs"]
mod support;

use relay_testbed::{Line3, Node, line3};
use std::path::Path;
use std::time::Duration;
use support::*;

/// The tests share user nobody's files and each one's rules are checked for leftovers.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const NOBODY: u32 = 65534;

/// Queue 0 on UDP port 5000; with `second`, queue 1 on port 5001 too.
fn body(prefix: &str, second: bool, extra: &str) -> String {
    let mut s = format!(
        "chain_prefix = \"{prefix}\"\n{extra}\n[[queue]]\nnum = 0\nhook = \"forward\"\n\
         match = \"-p udp --dport 5000\"\nservices = [\"accept\"]\n"
    );
    if second {
        s.push_str(
            "\n[[queue]]\nnum = 1\nhook = \"forward\"\nmatch = \"-p udp --dport 5001\"\n\
             services = [\"accept\"]\n",
        );
    }
    s
}

/// Writes the configuration (`[daemon]` with the socket, then `daemon_rest`).
fn write_config(dir: &TempDir, socket: &Path, daemon_rest: &str) -> std::path::PathBuf {
    let text = format!("[daemon]\nsocket = \"{}\"\n{daemon_rest}", socket.display());
    let p = dir.0.join("relayd.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A directory user nobody may write (its status socket and, as RUNTIME_DIRECTORY, its
/// lock), world-readable so that it reads its configuration.
fn nobody_dir(tag: &str) -> TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new(tag);
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&dir.0, Some(NOBODY), Some(NOBODY)).unwrap();
    let run = dir.0.join("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

/// A field of /proc/PID/status.
fn proc_status(pid: u32, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// UDP to `port` crosses the relay, and queue `queue` counted it.
fn relays(l: &Line3, r: &Relayd, port: u16, queue: u16) {
    let before = queue_packets(r, queue);
    let (sent, got) = udp_exchange(
        &l.src,
        &l.dst,
        addr(&format!("10.0.2.2:{port}")),
        100,
        500,
        100,
    );
    assert!(sent >= 20, "sent {sent}");
    assert!(
        got * 100 >= sent * 95,
        "sent {sent}, received {got}\n{}",
        r.log()
    );
    let counted = queue_packets(r, queue) - before;
    assert!(
        counted >= got,
        "queue {queue} counted {counted} of {got}\n{}",
        r.log()
    );
}

fn queue_packets(r: &Relayd, queue: u16) -> u64 {
    r.status()
        .queues
        .iter()
        .find(|q| q.num == queue)
        .map_or(0, |q| q.packets)
}

fn start(
    node: &Node,
    cmd: std::process::Command,
    dir: TempDir,
    socket: std::path::PathBuf,
) -> Relayd {
    let config = dir.0.join("relayd.toml");
    let mut cmd = cmd;
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let proc = node.spawn(cmd);
    let r = Relayd {
        proc,
        dir,
        // Not handed to this relayd (its command is built above): it runs no ESP service.
        state: TempDir::new("priv-state"),
        config,
        socket,
        node: node.clone(),
    };
    r.wait_running();
    r
}

#[test]
fn as_nobody_with_ambient_capabilities_it_installs_relays_reloads_and_cleans_up() {
    let _g = serial();
    let l = line3("priv-amb");
    let dir = nobody_dir("priv-amb");
    let socket = dir.0.join("relayd.sock");
    let config = write_config(&dir, &socket, &body("RPRIVA", false, ""));
    let mut cmd = l.relay.cmd("setpriv");
    cmd.args([
        "--reuid=nobody",
        "--regid=nogroup",
        "--init-groups",
        "--inh-caps=+net_admin,+net_raw",
        "--ambient-caps=+net_admin,+net_raw",
        RELAYD,
        "run",
        "-c",
    ])
    .arg(&config)
    .args(["--log", "debug"])
    .env("RUNTIME_DIRECTORY", dir.0.join("run"));
    let mut r = start(&l.relay, cmd, dir, socket.clone());
    let pid = r.proc.pid();
    assert_eq!(
        proc_status(pid, "Uid"),
        format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}")
    );
    // Its lock went to RUNTIME_DIRECTORY, which systemd's RuntimeDirectory= sets.
    let locks: Vec<_> = std::fs::read_dir(r.dir.0.join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        locks.iter().any(|f| f.starts_with("RPRIVA-net")),
        "{locks:?}"
    );
    let rules = iptables_save(&l.relay);
    assert!(rules.contains("-A RPRIVA-FORWARD"), "{rules}");
    assert!(rules.contains("NFQUEUE --queue-num 0"), "{rules}");
    relays(&l, &r, 5000, 0);

    // SIGHUP with a second queue: bound and its rule installed by iptables-restore,
    // which gets CAP_NET_ADMIN from relayd's ambient set.
    write_config(&r.dir, &socket, &body("RPRIVA", true, ""));
    reload(&r, 1);
    let rules = iptables_save(&l.relay);
    assert!(rules.contains("--dport 5001"), "{rules}");
    relays(&l, &r, 5001, 1);

    // A file that needs a capability relayd lacks is refused, naming it.
    write_config(
        &r.dir,
        &socket,
        &body("RPRIVA", true, "").replace(
            "services = [\"accept\"]\n",
            "services = [\"accept\"]\nnice = -5\n",
        ),
    );
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(
        r.proc
            .wait_stderr_contains("needs CAP_SYS_NICE", Duration::from_secs(5)),
        "{}",
        r.log()
    );
    assert_eq!(r.status().reloads, 1);
    relays(&l, &r, 5001, 1);

    // Raising a queue thread's nice value needs nothing; lowering it again (even to a
    // positive value) needs CAP_SYS_NICE: refused before anything changes.
    let with_nice = |n: i32| {
        body("RPRIVA", true, "").replace(
            "services = [\"accept\"]\n",
            &format!("services = [\"accept\"]\nnice = {n}\n"),
        )
    };
    write_config(&r.dir, &socket, &with_nice(10));
    reload(&r, 2);
    write_config(&r.dir, &socket, &with_nice(5));
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(
        r.proc.wait_stderr_contains(
            "lowering its nice value from 10 to 5 needs CAP_SYS_NICE",
            Duration::from_secs(5)
        ),
        "{}",
        r.log()
    );
    assert_eq!(r.status().reloads, 2);
    relays(&l, &r, 5001, 1);

    assert!(r.stop(libc::SIGTERM), "{}", r.log());
    let rules = iptables_save(&l.relay);
    assert!(
        !rules.contains("RPRIVA"),
        "rules left after SIGTERM:\n{rules}"
    );
}

#[test]
fn started_as_root_with_daemon_user_it_drops_to_exactly_the_capabilities_it_needs() {
    let _g = serial();
    let l = line3("priv-user");
    let dir = TempDir::new("priv-user");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let socket = dir.0.join("relayd.sock");
    let daemon = "user = \"nobody\"\nsocket_group = \"nogroup\"\n";
    let nice = |b: String| {
        b.replacen(
            "services = [\"accept\"]\n",
            "services = [\"accept\"]\nnice = -5\n",
            1,
        )
    };
    let config = write_config(&dir, &socket, &nice(body("RPRIVU", false, daemon)));

    // check names the capabilities and why.
    let (code, out, err) = relayd_cmd(&l.relay, &["check", "-c", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("capabilities: CAP_NET_ADMIN, CAP_SYS_NICE (queue 0 nice = -5)"),
        "{out}"
    );

    // Root cut down as the shipped unit does (CapabilityBoundingSet=), plus what the
    // unit's comment says daemon.user and daemon.socket_group need.
    let mut cmd = l.relay.cmd("setpriv");
    cmd.args([
        "--bounding-set=-all,+net_admin,+net_raw,+sys_nice,+net_bind_service,+setuid,+setgid,+setpcap,+chown",
        RELAYD,
        "run",
        "-c",
    ])
    .arg(&config)
    .args(["--log", "debug"]);
    let mut r = start(&l.relay, cmd, dir, socket.clone());
    let pid = r.proc.pid();
    assert_eq!(
        proc_status(pid, "Uid"),
        format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}"),
        "{}",
        r.log()
    );
    assert_eq!(
        proc_status(pid, "Gid"),
        format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}")
    );
    // CAP_NET_ADMIN (12) and CAP_SYS_NICE (23), nothing else, in every set.
    let want = format!("{:016x}", (1u64 << 12) | (1u64 << 23));
    for set in ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"] {
        assert_eq!(proc_status(pid, set), want, "{set}");
    }
    // Every thread: credentials and capabilities are per thread, and the queue threads
    // send the verdicts (CAP_NET_ADMIN) and run the services.
    let tasks: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(tasks.len() > 2, "{tasks:?}");
    for t in &tasks {
        let text = std::fs::read_to_string(t.join("status")).unwrap();
        let field = |f: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(f)?.strip_prefix(':'))
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(
            field("Uid"),
            format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}"),
            "{t:?}"
        );
        assert_eq!(field("CapEff"), want, "{t:?} {}", field("Name"));
        assert_eq!(field("CapPrm"), want, "{t:?} {}", field("Name"));
    }
    let rules = iptables_save(&l.relay);
    assert!(rules.contains("-A RPRIVU-FORWARD"), "{rules}");
    relays(&l, &r, 5000, 0);

    // The status socket: root's, group nogroup, 0660; a member of the group may ask,
    // another unprivileged user may not.
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(&socket).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o660);
        assert_eq!((m.uid(), m.gid()), (0, NOBODY));
    }
    let (ok, err) = status_as("nogroup", &socket);
    assert!(ok, "a member of socket_group cannot ask: {err}");
    let (ok, err) = status_as("daemon", &socket);
    assert!(!ok, "a user outside socket_group read the status");
    assert!(err.contains("Permission denied"), "{err}");

    // Reload after the drop: a new queue, its rule installed through the ambient set.
    write_config(&r.dir, &socket, &nice(body("RPRIVU", true, daemon)));
    reload(&r, 1);
    assert!(iptables_save(&l.relay).contains("--dport 5001"));
    relays(&l, &r, 5001, 1);

    assert!(r.stop(libc::SIGTERM), "{}", r.log());
    let rules = iptables_save(&l.relay);
    assert!(
        !rules.contains("RPRIVU"),
        "rules left after SIGTERM:\n{rules}"
    );
}

#[test]
fn an_unknown_daemon_user_or_socket_group_is_an_error_with_its_line() {
    let dir = TempDir::new("priv-bad");
    let p = dir.file(
        "bad.toml",
        "[daemon]\nuser = \"no-such-user-relayd\"\nsocket_group = \"no-such-group-relayd\"\n\
         [[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n",
    );
    let out = std::process::Command::new(RELAYD)
        .args(["check", "-c"])
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let f = p.display();
    assert!(
        err.contains(&format!(
            "{f}:2:8: daemon.user: no user `no-such-user-relayd`"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{f}:3:16: daemon.socket_group: no group")),
        "{err}"
    );
}

/// The ESP state directory under `daemon.user` (issue 25): relayd started as root makes
/// it for the user before it drops privileges, so the sequence reservations the user
/// writes afterwards succeed; a restart finds it the user's and resumes; one the user
/// cannot write refuses the start with daemon.user's line and the fix.
#[test]
fn started_as_root_with_daemon_user_the_esp_state_directory_is_made_for_that_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let _g = serial();
    let l = line3("priv-state");
    // Root's, 0755: nobody may pass through to its state directory, no one else write.
    let keys = key_dir("priv-state");
    std::fs::set_permissions(&keys.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = keys.0.join("a.key");
    relay_svc_crypto::keygen(relay_svc_crypto::Cipher::Aes128Gcm, &key).unwrap();
    let state = keys.0.join("esp-state");
    let dir = TempDir::new("priv-state");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.0.join("relayd.sock");
    let rest = format!(
        "chain_prefix = \"RPRIVS\"\nuser = \"nobody\"\n\n[[queue]]\nnum = 0\nhook = \"forward\"\n\
         match = \"-p udp --dport 5000\"\nservices = [\"enc\"]\n\n[service.enc]\n\
         kind = \"encrypt\"\ncipher = \"aes-128-gcm\"\nspi = 4097\nkey_file = \"{}\"\n\
         state_dir = \"{}\"\nsequence_reserve = 16\n",
        key.display(),
        state.display()
    );
    let config = write_config(&dir, &socket, &rest);
    let run = |dir: TempDir| {
        let mut cmd = l.relay.cmd(RELAYD);
        cmd.args(["run", "-c"]).arg(&config);
        start(&l.relay, cmd, dir, socket.clone())
    };
    // 100 datagrams: with 16 numbers reserved at a time, some 12 reservations written by
    // user nobody. 20 ms apart, so that each reservation (three fsyncs) has 160 ms to land
    // before its numbers are needed even on a loaded machine: what is tested is that the
    // user can write them, not the disk's latency.
    let send = || {
        l.src.run(|| {
            let s = std::net::UdpSocket::bind("10.0.1.1:0").unwrap();
            for i in 0..100u32 {
                s.send_to(&i.to_be_bytes(), "10.0.2.2:5000").unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    assert!(!state.exists());
    let mut r = run(dir);
    send();
    let encrypted = |r: &Relayd| {
        let c = r.counters("enc");
        (c["encrypted"], c["dropped_seq_unreserved"])
    };
    assert!(
        wait_for(Duration::from_secs(6), || encrypted(&r).0 == 100),
        "{:?}\n{}",
        r.counters("enc"),
        r.log()
    );
    assert_eq!(encrypted(&r).1, 0, "{}", r.log());
    let m = std::fs::metadata(&state).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (NOBODY, NOBODY, 0o700)
    );
    let files: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().uid())
        .collect();
    assert!(
        !files.is_empty() && files.iter().all(|&u| u == NOBODY),
        "{files:?}"
    );
    let dir = std::mem::replace(&mut r.dir, TempDir::new("priv-state-spare"));
    assert!(r.stop(libc::SIGTERM), "{}", r.log());

    // A restart as root reads the user's directory (and resumes past the reservation).
    let mut r = run(dir);
    send();
    assert!(
        wait_for(Duration::from_secs(6), || encrypted(&r).0 == 100),
        "{:?}\n{}",
        r.counters("enc"),
        r.log()
    );
    assert_eq!(encrypted(&r).1, 0);
    let dir = std::mem::replace(&mut r.dir, TempDir::new("priv-state-spare"));
    assert!(r.stop(libc::SIGTERM), "{}", r.log());

    // Root's again (restored from a backup as root, say): refused, naming the fix.
    std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
    let (code, _, err) = relayd_cmd(&l.relay, &["run", "-c", config.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    let want = format!(
        "{}:4: daemon.user: relayd drops to `nobody`",
        config.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains(&format!("chown -R 65534:65534 {}", state.display())),
        "{err}"
    );

    // The same directory as systemd's StateDirectory= (which systemd gives back to root at
    // every start of a unit without User=): relayd gives it, files and all, to the user.
    let mut cmd = l.relay.cmd(RELAYD);
    cmd.args(["run", "-c"])
        .arg(&config)
        .env("STATE_DIRECTORY", &state);
    let mut r = start(&l.relay, cmd, dir, socket.clone());
    send();
    assert!(
        wait_for(Duration::from_secs(6), || encrypted(&r).0 == 100),
        "{:?}\n{}",
        r.counters("enc"),
        r.log()
    );
    assert_eq!(encrypted(&r).1, 0);
    assert_eq!(std::fs::metadata(&state).unwrap().uid(), NOBODY);
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}
