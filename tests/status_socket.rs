//! The status socket against hostile or broken local clients, on a real `relayd run`: a
//! request without a newline is cut off with relayd's memory unchanged; idle clients
//! beyond the cap neither exhaust its file descriptors nor stop a reload, and `status`
//! answers again once they time out; a failing accept (EMFILE) pauses instead of
//! spinning; start-up replaces only a stale socket, never another kind of file; the
//! socket is 0600 whatever relayd's umask, closed to other users.
//! Needs root (namespaces, iptables, NFQUEUE).

mod support;

use relay_testbed::{Node, Testbed};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

const CONFIG: &str = r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 9"
services = ["accept"]
"#;

/// A field of /proc/PID/status in kB (VmRSS, VmHWM).
fn proc_kb(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// CPU time (user + system, all threads) the process has used, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    f[0] + f[1]
}

/// Share of one CPU the process used over `over`, in percent.
fn cpu_percent(pid: u32, over: Duration) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(over);
    let (t1, c1) = (Instant::now(), cpu_ticks(pid));
    (c1 - c0) as f64 / hz / (t1 - t0).as_secs_f64() * 100.0
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Sets the soft RLIMIT_NOFILE of a running process (the hard limit stays: raising it
/// again would need CAP_SYS_RESOURCE).
fn set_nofile(pid: u32, n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit writes the current limits into `lim`, then reads the new ones.
    unsafe {
        let r = libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut lim,
        );
        assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
        lim.rlim_cur = n.min(lim.rlim_max);
        let r = libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &lim,
            std::ptr::null_mut(),
        );
        assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    }
}

/// Connects to `path` without blocking (a full backlog does not hang the test); None if
/// the backlog is full.
fn connect_nonblocking(path: &Path) -> Option<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: all-zero sockaddr_un is valid; the path fits (checked by the assert).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    assert!(bytes.len() < addr.sun_path.len());
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket/connect calls on a fresh fd we own.
    unsafe {
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fd = OwnedFd::from_raw_fd(fd);
        let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
        let r = libc::connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&raw const addr).cast(),
            len as libc::socklen_t,
        );
        if r != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "connect: {e}");
            return None;
        }
        let s = UnixStream::from(fd);
        s.set_nonblocking(false).unwrap();
        Some(s)
    }
}

/// Polls `relayd status` until it answers (or `within` passes).
fn status_answers(r: &Relayd, within: Duration) -> Result<relayd::status::Status, String> {
    let end = Instant::now() + within;
    loop {
        match relayd::status::query(&r.socket) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= end => return Err(e.to_string()),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[test]
fn a_request_without_newline_is_cut_off_and_memory_stays_bounded() {
    let tb = Testbed::new("st-long");
    let n = tb.node("r");
    let r = Relayd::start(&n, CONFIG);
    let pid = r.proc.pid();
    r.status();
    let hwm0 = proc_kb(pid, "VmHWM");
    let mut c = UnixStream::connect(&r.socket).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let chunk = vec![b'A'; 1 << 20];
    let mut sent = 0u64;
    let err = loop {
        match c.write(&chunk) {
            Ok(k) => sent += k as u64,
            Err(e) => break Some(e),
        }
        if sent >= 64 << 20 {
            break None;
        }
    };
    let hwm1 = proc_kb(pid, "VmHWM");
    eprintln!(
        "sent {sent} bytes before {err:?}; VmHWM {hwm0} -> {hwm1} kB, VmRSS {} kB",
        proc_kb(pid, "VmRSS")
    );
    assert!(
        err.is_some(),
        "relayd read 64 MiB without a newline (VmHWM {hwm0} -> {hwm1} kB)"
    );
    assert!(sent < 4 << 20, "relayd took {sent} bytes of one request");
    assert!(
        hwm1 < hwm0 + 8 * 1024,
        "peak resident memory grew from {hwm0} to {hwm1} kB"
    );
    let st = status_answers(&r, Duration::from_secs(2)).unwrap();
    assert_eq!(st.queues.len(), 1);
}

#[test]
fn idle_clients_beyond_the_cap_keep_fds_for_reloads_and_status_comes_back() {
    const LIMIT: u64 = 128;
    let tb = Testbed::new("st-idle");
    let n = tb.node("r");
    let mut r = Relayd::start(&n, CONFIG);
    let pid = r.proc.pid();
    r.status();
    set_nofile(pid, LIMIT);
    let base = open_fds(pid);
    // Far more than the cap (64) and than the descriptors relayd may open.
    let idle: Vec<UnixStream> = (0..400)
        .filter_map(|_| connect_nonblocking(&r.socket))
        .collect();
    let opened = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let fds = open_fds(pid);
    eprintln!(
        "{} idle clients connected; relayd fds {base} -> {fds} (limit {LIMIT})",
        idle.len()
    );
    assert!(idle.len() > 100, "only {} connections", idle.len());
    let cpu = cpu_percent(pid, Duration::from_secs(1));
    eprintln!("relayd CPU with idle clients: {cpu:.1} %");
    assert!(cpu < 20.0, "relayd used {cpu:.1} % CPU\n{}", r.log());
    // A reload opens the configuration and runs iptables-restore: it must find
    // descriptors although the idle clients still hold theirs (request timeout 5 s).
    let reloads_before = r.log().matches("INFO relayd::cli: reloaded").count();
    r.proc.signal(libc::SIGHUP).unwrap();
    let reloaded = wait_for(Duration::from_secs(3), || {
        r.log().matches("INFO relayd::cli: reloaded").count() > reloads_before
    });
    assert!(
        opened.elapsed() < Duration::from_secs(5),
        "too slow: the idle clients timed out before the reload was checked"
    );
    assert!(reloaded, "reload failed with idle clients\n{}", r.log());
    assert!(
        r.log().contains("status socket: connections refused"),
        "{}",
        r.log()
    );
    // Once the idle clients have timed out, `relayd status` answers, with the reload.
    let st = status_answers(&r, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("status did not come back: {e}\n{}", r.log()));
    assert_eq!(st.reloads, 1);
    let (code, out, err) = relayd_cmd(&n, &["status", "--socket", r.socket.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    drop(idle);
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}

#[test]
fn accept_failing_with_emfile_pauses_instead_of_spinning() {
    let tb = Testbed::new("st-emfile");
    let n = tb.node("r");
    let mut r = Relayd::start(&n, CONFIG);
    let pid = r.proc.pid();
    r.status();
    // No descriptor left (stdin, stdout and stderr take 0 to 2): every accept fails
    // with EMFILE while a client waits.
    set_nofile(pid, 3);
    let mut waiting = connect_nonblocking(&r.socket).expect("backlog full");
    waiting.write_all(b"status\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cpu = cpu_percent(pid, Duration::from_secs(1));
    eprintln!("relayd CPU while accept fails: {cpu:.1} %");
    assert!(cpu < 20.0, "relayd used {cpu:.1} % CPU\n{}", r.log());
    assert!(
        r.log().contains("status socket: accept failed"),
        "{}",
        r.log()
    );
    // Descriptors back: the client that waited in the backlog is served.
    set_nofile(pid, 1024);
    waiting
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut body = String::new();
    waiting.read_to_string(&mut body).unwrap();
    let st: relayd::status::Status = serde_json::from_str(&body).unwrap();
    assert_eq!(st.queues.len(), 1);
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}

/// Waits until `s` has bytes to read (without reading them); false after `within`.
fn readable(s: &UnixStream, within: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(s),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(within.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Writes a configuration whose socket is `socket` and runs `relayd run` on it in `n`.
fn run_with_socket(n: &Node, dir: &TempDir, socket: &Path, prefix: &str) -> relay_testbed::Proc {
    run_with_socket_umask(n, dir, socket, prefix, None)
}

/// [`run_with_socket`], relayd running with `umask` if given (set by a shell that then
/// execs relayd, so the process's umask is that one from its first instruction).
fn run_with_socket_umask(
    n: &Node,
    dir: &TempDir,
    socket: &Path,
    prefix: &str,
    umask: Option<&str>,
) -> relay_testbed::Proc {
    let text = format!(
        "[daemon]\nsocket = \"{}\"\nchain_prefix = \"{prefix}\"\n\n{CONFIG}",
        socket.display()
    );
    let config = dir.file(&format!("{prefix}.toml"), &text);
    let mut cmd = match umask {
        None => n.cmd(RELAYD),
        Some(u) => {
            let mut c = n.cmd("sh");
            c.args(["-c", &format!("umask {u} && exec \"$0\" \"$@\""), RELAYD]);
            c
        }
    };
    cmd.args(["run", "-c"]).arg(&config);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    n.spawn(cmd)
}

/// The permission bits of the file at `p` (not following a symbolic link).
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn the_socket_is_0600_whatever_the_umask_and_other_users_cannot_connect() {
    use std::os::unix::fs::PermissionsExt;
    let tb = Testbed::new("st-mode");
    let n = tb.node("r");
    let dir = TempDir::new("st-mode");
    // Every directory on the way is open to nobody: only the socket's mode can stop it.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The socket's directory is missing: relayd creates it (0755, not 0777).
    let socket = dir.0.join("run").join("relayd.sock");
    let mut p = run_with_socket_umask(&n, &dir, &socket, "RMODE", Some("0"));
    assert!(
        p.wait_stderr_contains("relayd running", Duration::from_secs(10)),
        "{}",
        p.stderr_text()
    );
    let umask = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
    assert!(
        umask.lines().any(|l| l == "Umask:\t0000"),
        "relayd does not run with umask 0:\n{umask}"
    );
    eprintln!(
        "umask 0: socket {:o}, its directory {:o}",
        mode(&socket),
        mode(&dir.0.join("run"))
    );
    assert_eq!(mode(&socket), 0o600, "socket mode {:o}", mode(&socket));
    assert_eq!(mode(&dir.0.join("run")), 0o755);
    relayd::status::query(&socket).unwrap();

    let (ok, err) = status_as("nogroup", &socket);
    eprintln!("as nobody: {}", err.trim());
    assert!(!ok, "user nobody read the status");
    assert!(err.contains("Permission denied"), "{err}");
    // The same user connects to the same path once the mode lets it: what refused it
    // above was the socket's mode, nothing else on the way.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, err) = status_as("nogroup", &socket);
    assert!(ok, "nobody cannot connect even to a 0666 socket: {err}");

    let (st, _) = p.stop(libc::SIGTERM, Duration::from_secs(10));
    assert!(st.is_some_and(|s| s.success()), "{}", p.stderr_text());
}

#[test]
fn start_up_replaces_only_a_stale_socket() {
    let tb = Testbed::new("st-path");
    let n = tb.node("r");
    let dir = TempDir::new("st-path");

    // A regular file where the socket should be: left alone, start-up fails naming it.
    let file = dir.file("relayd.sock", "not a socket\n");
    let mut p = run_with_socket(&n, &dir, &file, "RFILE");
    let (st, _, err) = p.wait_output(Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(1), "{err}");
    let want = format!("{} is a regular file, not a socket", file.display());
    assert!(err.contains(&want), "expected `{want}` in:\n{err}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "not a socket\n",
        "the file was touched"
    );
    assert!(
        !iptables_save(&n).contains("RFILE"),
        "rules left behind by a start that failed"
    );

    // A stale socket (bound, closed, never unlinked, as after SIGKILL) is replaced.
    let stale = dir.0.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let mut p = run_with_socket(&n, &dir, &stale, "RSTALE");
    assert!(
        p.wait_stderr_contains("relayd running", Duration::from_secs(10)),
        "{}",
        p.stderr_text()
    );
    assert!(p.stderr_text().contains("replacing a stale status socket"));
    let st = relayd::status::query(&stale).unwrap();
    assert_eq!(st.queues.len(), 1);

    // A socket a live daemon answers on is refused, and that daemon keeps it.
    let mut second = run_with_socket(&n, &dir, &stale, "RLIVE");
    let (code, _, err) = second.wait_output(Duration::from_secs(10));
    assert_eq!(code.and_then(|s| s.code()), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "another relayd is answering on {}",
            stale.display()
        )),
        "{err}"
    );
    relayd::status::query(&stale).unwrap();

    let (st, _) = p.stop(libc::SIGTERM, Duration::from_secs(10));
    assert!(st.is_some_and(|s| s.success()), "{}", p.stderr_text());
}

#[test]
fn a_client_that_never_reads_the_reply_is_dropped_after_the_reply_timeout() {
    // 8,000 services in the chain: a status reply of about 700 kB, more than a unix
    // socket buffers, so writing it blocks until the client reads.
    let names: Vec<String> = (0..8000).map(|i| format!("m{i:05}")).collect();
    let mut body = format!(
        "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p udp --dport 9\"\nservices = [{}, \"accept\"]\n",
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for n in &names {
        body.push_str(&format!("\n[service.{n}]\nkind = \"mark\"\nmark = 1\n"));
    }
    let tb = Testbed::new("st-slow");
    let node = tb.node("r");
    let mut r = Relayd::start(&node, &body);
    let pid = r.proc.pid();
    // The whole reply, read as it comes: `relayd status` gives up after 5 s without a
    // byte, and building this status took up to 5.4 s with the CPUs busy.
    let base = open_fds(pid);
    let t = Instant::now();
    let mut c = UnixStream::connect(&r.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(b"status\n").unwrap();
    let mut reply = Vec::new();
    c.read_to_end(&mut reply).unwrap();
    let st: relayd::status::Status = serde_json::from_slice(&reply).unwrap();
    assert_eq!(st.queues.len(), 1);
    let full = reply.len();
    eprintln!("a full status: {full} bytes in {:?}", t.elapsed());
    assert!(full > 600_000, "reply of {full} bytes only");
    // relayd closes its end just after the end of the reply.
    drop(c);
    assert!(
        wait_for(Duration::from_secs(5), || open_fds(pid) == base),
        "relayd holds {} descriptors, {base} before the first client",
        open_fds(pid)
    );
    let mut slow = UnixStream::connect(&r.socket).unwrap();
    slow.write_all(b"status\n").unwrap();
    // The reply timeout (5 s) starts when relayd starts writing the reply, once it has
    // built the status of 8,000 services: seconds on a loaded machine (and how long is
    // not what this test is about). So time from the first reply byte, which the client
    // sees without reading it.
    let asked = Instant::now();
    assert!(
        readable(&slow, Duration::from_secs(60)),
        "no reply byte within 60 s\n{}",
        r.log()
    );
    let first = Instant::now();
    assert_eq!(open_fds(pid), base + 1, "the slow client's connection");
    // relayd lets go of the connection 5 s after it started writing, which was just
    // before `first`; 3 s more for the timer and the close on a busy 2-CPU machine.
    let dropped = wait_for(Duration::from_secs(8), || open_fds(pid) == base);
    let held = first.elapsed();
    eprintln!(
        "first reply byte after {:?}; connection dropped {held:?} after it",
        first - asked
    );
    assert!(
        dropped,
        "relayd still holds the slow client's connection {held:?} after its first reply byte"
    );
    // Not before the reply timeout either (the first byte may be seen a little late).
    assert!(held > Duration::from_secs(3), "dropped after {held:?} only");
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = slow.read_to_end(&mut got);
    eprintln!("the slow client got {} of {full} bytes", got.len());
    assert!(got.len() < full * 9 / 10, "{} of {full} bytes", got.len());
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}
