//! A child process started in a testbed: killed and reaped on drop, with its piped output
//! captured by background threads so tests can wait for a "ready" line without deadlock.

use std::io::{self, Read};
use std::process::{Child, ExitStatus};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often [`Proc::wait_timeout`] polls the child.
const POLL: Duration = Duration::from_millis(5);

/// A spawned child process. Drop sends SIGKILL (if it still runs) and waits for it, so a
/// failing test never leaves a daemon behind.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    cmdline: String,
    stdout: Option<Arc<Capture>>,
    stderr: Option<Arc<Capture>>,
}

/// Output of one pipe so far, filled by a reader thread.
#[derive(Debug, Default)]
struct Capture {
    state: Mutex<CaptureState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct CaptureState {
    buf: Vec<u8>,
    eof: bool,
}

impl Capture {
    fn start(mut pipe: impl Read + Send + 'static) -> Arc<Capture> {
        let cap = Arc::new(Capture::default());
        let writer = Arc::clone(&cap);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                let n = match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                let mut st = writer.lock();
                if n == 0 {
                    st.eof = true;
                } else {
                    st.buf.extend_from_slice(&chunk[..n]);
                }
                let eof = st.eof;
                drop(st);
                writer.changed.notify_all();
                if eof {
                    break;
                }
            }
        });
        cap
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CaptureState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().buf).into_owned()
    }

    /// Waits until `done(captured bytes, eof)` holds or `timeout` passes; returns the last
    /// value of `done`.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&[u8], bool) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if done(&st.buf, st.eof) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || st.eof {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Proc {
    pub(crate) fn new(mut child: Child, cmdline: String) -> Proc {
        let stdout = child.stdout.take().map(Capture::start);
        let stderr = child.stderr.take().map(Capture::start);
        Proc {
            child,
            cmdline,
            stdout,
            stderr,
        }
    }

    /// The child's pid. With [`crate::Node::cmd`] this is the program itself, since
    /// `ip netns exec` execs it in place.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The command line it was started with, for messages.
    pub fn cmdline(&self) -> &str {
        &self.cmdline
    }

    /// The underlying [`Child`] (its stdout/stderr have been taken if they were piped).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Sends signal `sig` (e.g. `libc::SIGTERM`) to the child.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        // SAFETY: kill has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Returns the exit status if the child has exited, without blocking.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILLs the child (if still running) and reaps it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.try_wait() {
            return Some(status);
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// Sends `sig`, waits up to `timeout` for a clean exit, and SIGKILLs after that.
    /// Returns the exit status and whether the child exited on its own.
    pub fn stop(&mut self, sig: i32, timeout: Duration) -> (Option<ExitStatus>, bool) {
        if let Some(status) = self.try_wait() {
            return (Some(status), true);
        }
        let _ = self.signal(sig);
        match self.wait_timeout(timeout) {
            Some(status) => (Some(status), true),
            None => (self.kill(), false),
        }
    }

    /// Everything the child wrote to stdout so far (empty unless stdout was piped).
    pub fn stdout_text(&self) -> String {
        self.stdout.as_ref().map(|c| c.text()).unwrap_or_default()
    }

    /// Everything the child wrote to stderr so far (empty unless stderr was piped).
    pub fn stderr_text(&self) -> String {
        self.stderr.as_ref().map(|c| c.text()).unwrap_or_default()
    }

    /// Waits up to `timeout` until piped stdout contains `needle` (a "ready" line, say).
    pub fn wait_stdout_contains(&self, needle: &str, timeout: Duration) -> bool {
        wait_contains(self.stdout.as_deref(), needle, timeout)
    }

    /// Waits up to `timeout` until piped stderr contains `needle`.
    pub fn wait_stderr_contains(&self, needle: &str, timeout: Duration) -> bool {
        wait_contains(self.stderr.as_deref(), needle, timeout)
    }

    /// Waits up to `timeout` for the child to exit and for its piped output to reach EOF,
    /// then returns (status, stdout, stderr). Output is whatever arrived if it times out.
    pub fn wait_output(&mut self, timeout: Duration) -> (Option<ExitStatus>, String, String) {
        let deadline = Instant::now() + timeout;
        let status = self.wait_timeout(timeout);
        for cap in [&self.stdout, &self.stderr].into_iter().flatten() {
            let left = deadline.saturating_duration_since(Instant::now());
            cap.wait_until(left, |_, eof| eof);
        }
        (status, self.stdout_text(), self.stderr_text())
    }
}

fn wait_contains(cap: Option<&Capture>, needle: &str, timeout: Duration) -> bool {
    let Some(cap) = cap else { return false };
    let needle = needle.as_bytes();
    cap.wait_until(timeout, |buf, _| {
        needle.is_empty() || buf.windows(needle.len()).any(|w| w == needle)
    })
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            if let Err(e) = self.child.kill() {
                eprintln!("relay-testbed: killing `{}`: {e}", self.cmdline);
            }
            if let Err(e) = self.child.wait() {
                eprintln!("relay-testbed: reaping `{}`: {e}", self.cmdline);
            }
        }
    }
}
