//! ESP sequence state that outlives the process: one small file per SA under the state
//! directory (`state_dir`), and a ledger of every SA that ever had one, so that no sequence
//! number (and so no IV) is used twice under one key across restarts, crashes and power
//! loss, and a receiver still refuses old packets after its own restart.
//!
//! - An outbound SA's file records the highest sequence number *reserved*: a number is
//!   used only once a file covering it is on disk (written to a temporary file, fsynced,
//!   renamed, directory fsynced). A new process resumes after the last reservation.
//! - An inbound SA's file records its replay window's right edge (plus a crash margin, see
//!   [`crate::esp`]); a new process treats everything up to it as seen.
//! - The ledger (`ledger`) lists every SA that had a state file, written before that file
//!   is relied on: a missing or unreadable file of an SA in the ledger is an error (rotate
//!   the key), a key never seen is a new SA starting at 1. A state directory wiped entirely
//!   looks like a fresh install: that is the one case nothing here can detect.
//! - Every write holds an exclusive `flock` on the directory's `esp.lock`, and an outbound
//!   reservation goes above what the file holds ([`SaFile::reserve_above`]): a second
//!   process on the same directory never reserves the numbers the first one uses.

use crate::keys::{KeyFileError, secure_dir};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where state goes when the configuration says nothing and systemd gave no
/// `StateDirectory=`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/relayd";

/// The environment variable of a test hook: the Nth state file this process writes (from 1)
/// aborts the process after the temporary file is written and before the rename, as a
/// power loss at that moment would leave the disk. Never set it in production.
pub const POWER_LOSS_HOOK: &str = "RELAYD_TEST_POWER_LOSS_AT_WRITE";

pub use crate::keys::set_service_user;

/// The state directory of a service: its `state_dir`, else `$STATE_DIRECTORY` (the first
/// of them, as systemd's `StateDirectory=` sets it), else [`DEFAULT_STATE_DIR`].
pub fn resolve(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|v| {
            v.to_str()
                .and_then(|s| s.split(':').next().filter(|s| !s.is_empty()))
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The direction of an SA, part of its file's name and its ledger line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// `encrypt`: the file holds the highest reserved sequence number.
    Out,
    /// `decrypt`: the file holds the replay window's right edge.
    In,
}

impl Dir {
    fn word(self) -> &'static str {
        match self {
            Dir::Out => "out",
            Dir::In => "in",
        }
    }
    fn value(self) -> &'static str {
        match self {
            Dir::Out => "reserved",
            Dir::In => "top",
        }
    }
}

/// The first 8 bytes of SHA-256 of a key, in hex: names the key in file names and the
/// ledger without giving anything of it away.
pub(crate) fn fingerprint(key: &[u8]) -> String {
    let d = Sha256::digest(key);
    d.iter().take(8).fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// One SA's state file in a state directory.
#[derive(Debug, Clone)]
pub(crate) struct SaFile {
    dir: PathBuf,
    way: Dir,
    spi: u32,
    fp: String,
}

/// One state file write at a time in this process, so that a conditional write
/// ([`SaFile::store_if`]) sees no other write between its read and its own.
static FILES: Mutex<()> = Mutex::new(());

/// The lock file in a state directory that every state file write holds (flock).
const LOCK_FILE: &str = "esp.lock";

/// Only one ledger update at a time in this process (the ledger is rewritten whole).
static LEDGER: Mutex<()> = Mutex::new(());

/// The fix for every lost-state error.
const ROTATE: &str = "rotate the key: a new key file (relayd keygen CIPHER FILE) and a new \
                      SPI, on both relays (docs/encryption.md, \"State files\")";

impl SaFile {
    /// The state of SA (`way`, `spi`, key fingerprint `fp`) in the state directory `dir`.
    pub(crate) fn new(dir: &Path, way: Dir, spi: u32, fp: String) -> SaFile {
        SaFile {
            dir: dir.to_path_buf(),
            way,
            spi,
            fp,
        }
    }

    /// The file's name: direction, SPI and key fingerprint.
    fn name(&self) -> String {
        format!("esp-{}-{:08x}-{}.state", self.way.word(), self.spi, self.fp)
    }

    /// The file's path.
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(self.name())
    }

    /// The file's text for `value`, with a check line over what precedes it.
    fn text(&self, value: u64) -> String {
        let body = format!(
            "# relayd ESP SA state: written by relayd; never edit it, never delete it without \
             rotating the key\nsa {} {:08x} {}\n{} {value}\n",
            self.way.word(),
            self.spi,
            self.fp,
            self.way.value()
        );
        let check = fingerprint(body.as_bytes());
        format!("{body}check {check}\n")
    }

    /// Parses the file's text: its value, or why it is not a state file of this SA.
    fn parse(&self, text: &str) -> Result<u64, &'static str> {
        let (body, check) = text
            .trim_end_matches('\n')
            .rsplit_once('\n')
            .ok_or("truncated")?;
        let body = format!("{body}\n");
        if check.strip_prefix("check ") != Some(fingerprint(body.as_bytes()).as_str()) {
            return Err("its check line does not match its content (damaged)");
        }
        let mut lines = body.lines().filter(|l| !l.starts_with('#'));
        let want = format!("sa {} {:08x} {}", self.way.word(), self.spi, self.fp);
        if lines.next() != Some(want.as_str()) {
            return Err("it names another SA");
        }
        let value = lines
            .next()
            .and_then(|l| l.strip_prefix(self.way.value()))
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or("no value")?;
        Ok(value)
    }

    /// The recorded value, `None` for a new SA (no file, and the ledger has never seen
    /// it), or the configuration error (naming the file and the fix) when state is lost or
    /// damaged. Reads only: nothing is created.
    pub(crate) fn load(&self) -> Result<Option<u64>, String> {
        self.load_among(Path::new(DEFAULT_STATE_DIR))
    }

    /// [`load`](Self::load), looking for other state of the key under `default_base` (the
    /// default state directory, and its subdirectories, systemd's for `relayd@` instances)
    /// as well as under `$STATE_DIRECTORY`.
    fn load_among(&self, default_base: &Path) -> Result<Option<u64>, String> {
        check_dir(&self.dir)?;
        let path = self.path();
        match std::fs::read_to_string(&path) {
            Ok(text) => self.parse(&text).map(Some).map_err(|why| {
                format!(
                    "state file {}: {why}: the SA's sequence state is lost; {ROTATE}",
                    path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(seen) = self.in_ledger()? {
                    return Err(format!(
                        "state file {} is missing, but {} used this key before (ledger {}): \
                         starting again would {}; {ROTATE}",
                        path.display(),
                        seen,
                        self.dir.join("ledger").display(),
                        match self.way {
                            Dir::Out => "send sequence numbers and IVs again under the same key",
                            Dir::In => "accept replays of old packets",
                        }
                    ));
                }
                // A key never seen here may have state elsewhere: the state directory
                // moved (another `state_dir`, relayd.service and relayd@NAME, a run by
                // hand without $STATE_DIRECTORY). Starting at 1 would repeat its IVs.
                if let Some(other) = self.used_in_another_dir(default_base) {
                    return Err(format!(
                        "state file {} is missing, but the state directory {} lists this key \
                         (its ledger): the state directory moved; set state_dir = \"{}\" \
                         to go on where it left off, or {ROTATE}",
                        path.display(),
                        other.display(),
                        other.display()
                    ));
                }
                Ok(None)
            }
            Err(e) => Err(format!(
                "state file {}: {e}: the SA's sequence state cannot be read; fix the file's \
                 permissions, or {ROTATE}",
                path.display()
            )),
        }
    }

    /// Whether the ledger lists this SA: an outbound key under any SPI (its IVs are the
    /// key's, whatever the SPI), an inbound SA by SPI and key. Names who used it.
    fn in_ledger(&self) -> Result<Option<String>, String> {
        self.in_ledger_of(&self.dir)
    }

    /// Another state directory relayd may have used whose ledger lists this SA: the
    /// default one, its subdirectories, and `$STATE_DIRECTORY`'s. Unreadable ones are
    /// passed over (this is a safety net, not the state).
    fn used_in_another_dir(&self, default_base: &Path) -> Option<PathBuf> {
        let mut dirs = vec![default_base.to_path_buf()];
        if let Ok(entries) = std::fs::read_dir(default_base) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        if let Some(v) = std::env::var_os("STATE_DIRECTORY") {
            dirs.extend(
                v.to_string_lossy()
                    .split(':')
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from),
            );
        }
        let here = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
        dirs.into_iter().find(|d| {
            std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()) != here
                && matches!(self.in_ledger_of(d), Ok(Some(_)))
        })
    }

    fn in_ledger_of(&self, dir: &Path) -> Result<Option<String>, String> {
        let ledger = dir.join("ledger");
        let text = match std::fs::read_to_string(&ledger) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("state ledger {}: {e}", ledger.display())),
        };
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let f: Vec<&str> = line.split(' ').collect();
            let [way, spi, fp] = f.as_slice() else {
                return Err(format!(
                    "state ledger {}: damaged line {line:?}; restore it from a backup, or \
                     rotate every key of this relay",
                    ledger.display()
                ));
            };
            let same_spi = *spi == format!("{:08x}", self.spi);
            let hit =
                *way == self.way.word() && *fp == self.fp && (self.way == Dir::Out || same_spi);
            if hit {
                return Ok(Some(format!("the {way}bound SA with SPI 0x{spi}")));
            }
        }
        Ok(None)
    }

    /// Records `value` durably: the temporary file written and fsynced, renamed over the
    /// state file, the directory fsynced; then the ledger, if it does not list the SA yet.
    /// Only once this returns may the value be relied on. Creates the directory (mode
    /// 0700) if it is missing.
    pub(crate) fn store(&self, value: u64) -> std::io::Result<()> {
        let _files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let _dir = self.lock_dir()?;
        self.store_locked(value)
    }

    /// Records `value` only if the file still holds `expected` (this SA's own last
    /// write): a stopping SA must not roll back a reservation a newer instance of the same
    /// SA (a reload that removed it and one that brought it back, or another process) has
    /// made since.
    pub(crate) fn store_if(&self, expected: u64, value: u64) -> std::io::Result<()> {
        let _files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let _dir = self.lock_dir()?;
        match std::fs::read_to_string(self.path()) {
            Ok(text) if self.parse(&text) == Ok(expected) => self.store_locked(value),
            _ => Ok(()),
        }
    }

    /// Reserves the next `by` numbers above both `floor` (what this process used or
    /// reserved) and what the file holds, under the state directory's lock: two writers of
    /// one SA (a second process on the same state directory) never reserve the same
    /// numbers, whatever each one has in memory. Returns what the file held (`None`:
    /// missing or unreadable) and the new reservation, on disk when this returns.
    pub(crate) fn reserve_above(&self, floor: u64, by: u64) -> std::io::Result<(Option<u64>, u64)> {
        let _files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let _dir = self.lock_dir()?;
        let held = std::fs::read_to_string(self.path())
            .ok()
            .and_then(|t| self.parse(&t).ok());
        let new = held.unwrap_or(0).max(floor).saturating_add(by);
        self.store_locked(new)?;
        Ok((held, new))
    }

    /// The state directory's lock (`esp.lock`, flock'ed exclusively until the file is
    /// dropped), creating the directory (mode 0700) if it is missing. Every state file
    /// write holds it: across processes, a read-modify-write of a state file is atomic.
    fn lock_dir(&self) -> std::io::Result<std::fs::File> {
        if !self.dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
            // The new directory's entry must be on disk too, or a power loss could take
            // the directory, ledger and all, and a used key would look new.
            if let Some(parent) = self.dir.parent() {
                std::fs::File::open(parent)?.sync_all()?;
            }
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            // Never through a link planted under its name.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.dir.join(LOCK_FILE))?;
        use std::os::fd::AsRawFd as _;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(f);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// [`store`](Self::store) with both locks held (the directory exists).
    fn store_locked(&self, value: u64) -> std::io::Result<()> {
        let path = self.path();
        write_atomic(&self.dir, &path, self.text(value).as_bytes())?;
        let line = format!("{} {:08x} {}", self.way.word(), self.spi, self.fp);
        let _one = LEDGER.lock().unwrap_or_else(|e| e.into_inner());
        let ledger = self.dir.join("ledger");
        let mut text = match std::fs::read_to_string(&ledger) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                "# relayd ESP SAs that had a state file: never edit or delete\n".to_string()
            }
            Err(e) => return Err(e),
        };
        if !text.lines().any(|l| l == line) {
            text.push_str(&line);
            text.push('\n');
            write_atomic(&self.dir, &ledger, text.as_bytes())?;
        }
        Ok(())
    }
}

/// Checks a state directory that exists against the key file rules (owned by relayd's
/// user or root, writable by no one else, and so every directory on the way); a missing
/// one is fine (created on first use).
pub(crate) fn check_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    secure_dir(dir).map(drop).map_err(|e| match e {
        KeyFileError::Insecure { problem, fix, .. } => format!(
            "state_dir {}: {}: {fix}",
            dir.display(),
            problem.replace("the key", "the ESP sequence state")
        ),
        e => format!("state_dir {}: {e}", dir.display()),
    })
}

/// How many state files this process has written, for [`POWER_LOSS_HOOK`].
static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes `data` to `path` in `dir` so that after any crash the file holds either its old
/// or its new content, and the new one is on disk when this returns.
fn write_atomic(dir: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        // Never through a link planted under the temporary name.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if std::env::var(POWER_LOSS_HOOK).is_ok_and(|v| v.parse() == Ok(n)) {
        // The test hook: the disk as a power loss here leaves it (the rename not done).
        std::process::abort();
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::test_key_dir;
    use std::os::unix::fs::PermissionsExt;

    fn sa(dir: &Path, way: Dir, spi: u32, key: &[u8]) -> SaFile {
        SaFile::new(dir, way, spi, fingerprint(key))
    }

    /// A key whose state lives in another state directory relayd may have used (the
    /// default one or an instance's under it) is not a new SA: the directory moved.
    #[test]
    fn a_key_with_state_in_another_directory_is_not_new() {
        let base = test_key_dir("state-moved");
        let old = base.join("relayd").join("site-a");
        sa(&old, Dir::Out, 0x1001, b"key moved")
            .store(65536)
            .unwrap();
        let here = base.join("elsewhere");
        let f = sa(&here, Dir::Out, 0x1001, b"key moved");
        let e = f.load_among(&base.join("relayd")).unwrap_err();
        assert!(e.contains("the state directory moved"), "{e}");
        assert!(e.contains("site-a"), "{e}");
        // Another key is new there, and the directory itself is not "another".
        let g = sa(&here, Dir::Out, 0x1002, b"another key");
        assert_eq!(g.load_among(&base.join("relayd")), Ok(None));
        assert_eq!(
            sa(&old, Dir::Out, 0x1001, b"key moved").load_among(&base.join("relayd")),
            Ok(Some(65536))
        );
    }

    /// A stopping SA writes what it used only over its own last write: never over a
    /// newer reservation of the same SA.
    #[test]
    fn a_stop_never_rolls_back_a_newer_reservation() {
        let dir = test_key_dir("state-rollback").join("state");
        let f = sa(&dir, Dir::Out, 0x1001, b"key rollback");
        f.store(65536).unwrap();
        f.store(131072).unwrap(); // a newer instance reserved further
        f.store_if(65536, 100).unwrap();
        assert_eq!(f.load(), Ok(Some(131072)));
        f.store_if(131072, 70000).unwrap();
        assert_eq!(f.load(), Ok(Some(70000)));
    }

    /// A link planted under the temporary file's name is never written through.
    #[test]
    fn a_link_at_the_temporary_name_is_not_followed() {
        let base = test_key_dir("state-link");
        let dir = base.join("state");
        let f = sa(&dir, Dir::Out, 0x1001, b"key link");
        f.store(16).unwrap();
        let victim = base.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let mut tmp = f.path().into_os_string();
        tmp.push(".tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        assert!(f.store(32).is_err(), "wrote through a link");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert_eq!(f.load(), Ok(Some(16)));
    }

    #[test]
    fn a_new_sa_then_its_reservation_survives() {
        let dir = test_key_dir("state-new").join("state");
        let f = sa(&dir, Dir::Out, 0x1001, b"key one");
        assert_eq!(f.load(), Ok(None), "never seen: a new SA");
        assert!(!dir.exists(), "loading creates nothing");
        f.store(65536).unwrap();
        assert_eq!(f.load(), Ok(Some(65536)));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let text = std::fs::read_to_string(f.path()).unwrap();
        assert!(!text.contains("key one"), "{text}");
        assert!(
            f.path().to_string_lossy().contains("esp-out-00001001-"),
            "{}",
            f.path().display()
        );
        // A rewrite replaces it whole; no temporary file stays.
        f.store(131072).unwrap();
        assert_eq!(f.load(), Ok(Some(131072)));
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
        // A write cut short (the temporary file written, not renamed) changes nothing.
        let mut tmp = f.path().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, "half a fi").unwrap();
        assert_eq!(f.load(), Ok(Some(131072)));
        f.store(196608).unwrap();
        assert_eq!(f.load(), Ok(Some(196608)));
        assert!(!Path::new(&tmp).exists());
        // Another key is another SA, even under the same SPI: it starts at 1.
        assert_eq!(sa(&dir, Dir::Out, 0x1001, b"key two").load(), Ok(None));
        // Inbound state of the same SPI and key is its own file.
        assert_eq!(sa(&dir, Dir::In, 0x1001, b"key one").load(), Ok(None));
    }

    #[test]
    fn lost_or_damaged_state_of_a_used_key_is_an_error_naming_the_fix() {
        let dir = test_key_dir("state-lost").join("state");
        let f = sa(&dir, Dir::Out, 0x1001, b"k");
        f.store(65536).unwrap();
        // Damaged: a changed value no longer matches the check line.
        let text = std::fs::read_to_string(f.path()).unwrap();
        std::fs::write(f.path(), text.replace("65536", "65537")).unwrap();
        let e = f.load().unwrap_err();
        assert!(e.contains("damaged") && e.contains("rotate the key"), "{e}");
        std::fs::write(f.path(), "garbage").unwrap();
        assert!(f.load().unwrap_err().contains("relayd keygen"));
        // Missing, with the key in the ledger.
        std::fs::remove_file(f.path()).unwrap();
        let e = f.load().unwrap_err();
        assert!(e.contains("missing") && e.contains("ledger"), "{e}");
        assert!(e.contains("IVs again"), "{e}");
        // The same key under another SPI would reuse its IVs as well.
        let e = sa(&dir, Dir::Out, 0x2002, b"k").load().unwrap_err();
        assert!(e.contains("SPI 0x00001001"), "{e}");
        // Inbound: by SPI and key.
        let i = sa(&dir, Dir::In, 0x3003, b"k");
        i.store(10).unwrap();
        std::fs::remove_file(i.path()).unwrap();
        assert!(i.load().unwrap_err().contains("replays"));
        assert_eq!(sa(&dir, Dir::In, 0x3004, b"k").load(), Ok(None));
        // Unreadable (not a file).
        let d = sa(&dir, Dir::In, 0x5005, b"k");
        std::fs::create_dir(d.path()).unwrap();
        assert!(d.load().is_err());
        // A damaged ledger is refused rather than read as empty.
        std::fs::write(dir.join("ledger"), "out 1\n").unwrap();
        let e = sa(&dir, Dir::Out, 0x6006, b"new").load().unwrap_err();
        assert!(e.contains("damaged line"), "{e}");
    }

    #[test]
    fn a_state_dir_others_can_write_is_refused() {
        let top = test_key_dir("state-perm");
        let dir = top.join("state");
        let f = sa(&dir, Dir::Out, 0x1001, b"k");
        f.store(1).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = f.load().unwrap_err();
        assert!(
            e.starts_with(&format!("state_dir {}", dir.display())),
            "{e}"
        );
        assert!(e.contains("writable by anyone"), "{e}");
        assert!(e.contains("ESP sequence state"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(f.load(), Ok(Some(1)));
    }

    #[test]
    fn the_directory_defaults_to_systemds_state_directory() {
        assert_eq!(resolve(Some(Path::new("/x"))), PathBuf::from("/x"));
        // Not set in tests (and never set here: tests run in parallel).
        if std::env::var_os("STATE_DIRECTORY").is_none() {
            assert_eq!(resolve(None), PathBuf::from(DEFAULT_STATE_DIR));
        }
    }
}
