//! Ciphers and their key files. Keys are laid out as Linux `ip xfrm` takes them: for GCM
//! the AES key followed by its 4-byte salt (RFC 4106), for CBC+HMAC the AES key followed by
//! the 32-byte HMAC-SHA-256 key. Files hold hex, and only root and relayd's user may be
//! able to read or replace them ([`load_key`]).

use serde::Deserialize;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An ESP cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Cipher {
    /// AES-128-GCM with a 16-byte ICV and an 8-byte explicit IV (RFC 4106).
    #[serde(rename = "aes-128-gcm")]
    Aes128Gcm,
    /// AES-256-GCM (RFC 4106).
    #[serde(rename = "aes-256-gcm")]
    Aes256Gcm,
    /// AES-128-CBC (RFC 3602) with HMAC-SHA-256-128 (RFC 4868).
    #[serde(rename = "aes-128-cbc-hmac-sha256")]
    Aes128CbcHmac,
    /// AES-256-CBC with HMAC-SHA-256-128.
    #[serde(rename = "aes-256-cbc-hmac-sha256")]
    Aes256CbcHmac,
}

impl Cipher {
    /// Every suite, with its configuration name.
    pub const ALL: [(&'static str, Cipher); 4] = [
        ("aes-128-gcm", Cipher::Aes128Gcm),
        ("aes-256-gcm", Cipher::Aes256Gcm),
        ("aes-128-cbc-hmac-sha256", Cipher::Aes128CbcHmac),
        ("aes-256-cbc-hmac-sha256", Cipher::Aes256CbcHmac),
    ];

    /// The suite called `name` in configuration.
    pub fn from_name(name: &str) -> Option<Cipher> {
        Cipher::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
    }

    /// AES key bytes.
    pub fn aes_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm | Cipher::Aes128CbcHmac => 16,
            Cipher::Aes256Gcm | Cipher::Aes256CbcHmac => 32,
        }
    }

    /// True for the AEAD suites.
    pub fn is_gcm(self) -> bool {
        matches!(self, Cipher::Aes128Gcm | Cipher::Aes256Gcm)
    }

    /// Key file bytes: AES key plus salt (GCM) or plus HMAC key (CBC).
    pub fn key_len(self) -> usize {
        self.aes_len() + if self.is_gcm() { 4 } else { 32 }
    }

    /// Explicit IV bytes carried in each packet.
    pub fn iv_len(self) -> usize {
        if self.is_gcm() { 8 } else { 16 }
    }

    /// What the encrypted part is padded to a multiple of.
    pub fn block(self) -> usize {
        if self.is_gcm() { 4 } else { 16 }
    }
}

/// ICV bytes (both suites: 16).
pub const ICV_LEN: usize = 16;

/// Why a key file was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// It could not be opened or read.
    #[error("key file {path}: {source}")]
    Io {
        /// The file as configured.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Someone other than root or relayd's user could replace or read it: the file, or a
    /// directory on its way from `/`, has another owner or is open to group or others.
    #[error("key file {path}: {problem}: {fix}")]
    Insecure {
        /// The file as configured.
        path: PathBuf,
        /// What is wrong, naming the file or directory at fault.
        problem: String,
        /// The command (or move) that puts it right.
        fix: String,
    },
    /// Its text is not hex.
    #[error("key file {path}: not a hex string")]
    NotHex {
        /// The file as configured.
        path: PathBuf,
    },
    /// It holds a key of another length than the cipher's.
    #[error("key file {path}: {got} bytes, but this cipher takes {want} ({layout})")]
    WrongLength {
        /// The file as configured.
        path: PathBuf,
        /// Bytes in the file.
        got: usize,
        /// Bytes the cipher takes.
        want: usize,
        /// How those bytes are laid out.
        layout: &'static str,
    },
}

/// Reads a key file for `cipher`. Whoever can replace a key file chooses the key at the
/// next reload, so the file must be owned by the user relayd runs as (its effective uid)
/// or root and be neither readable nor writable by group or others, and every directory
/// from `/` to it owned by that user or root and writable by no one else (OpenSSH's
/// `StrictModes` rule; a sticky world-writable directory such as /tmp does not qualify).
/// The path is walked from `/` one component at a time, each opened relative to the one
/// checked before it and without following symbolic links, which are followed only by
/// hand, from a directory already checked; the file's own checks are made on the opened
/// descriptor: nothing can be swapped between check and read.
pub fn load_key(path: &Path, cipher: Cipher) -> Result<Vec<u8>, KeyFileError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    load_key_as(path, cipher, uid)
}

/// [`load_key`] for a relayd running as `uid`.
pub(crate) fn load_key_as(path: &Path, cipher: Cipher, uid: u32) -> Result<Vec<u8>, KeyFileError> {
    let io = |source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = secure::open(path, uid)?;
    // A key file is a line of hex: anything much longer is not one.
    let mut text = String::new();
    (&mut file)
        .take(64 << 10)
        .read_to_string(&mut text)
        .map_err(io)?;
    let hex: String = text.split_whitespace().collect::<String>();
    let hex = hex.strip_prefix("0x").unwrap_or(&hex);
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(KeyFileError::NotHex {
            path: path.to_path_buf(),
        });
    }
    let key: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("00"), 16).unwrap_or(0))
        .collect();
    if key.len() != cipher.key_len() {
        return Err(KeyFileError::WrongLength {
            path: path.to_path_buf(),
            got: key.len(),
            want: cipher.key_len(),
            layout: if cipher.is_gcm() {
                "AES key then 4-byte salt"
            } else {
                "AES key then 32-byte HMAC key"
            },
        });
    }
    Ok(key)
}

/// Opens a secret file that is not an ESP key (an IKE pre-shared key) under the same rules
/// as [`load_key`]: whoever can replace it chooses the secret, so the file and every
/// directory on its way must be safe. The caller reads and parses the opened file.
pub fn open_secret(path: &Path) -> Result<std::fs::File, KeyFileError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    secure::open(path, uid)
}

/// Opens the directory `path` if it and every directory on its way are safe by the key
/// file rules ([`load_key`]): owned by relayd's user, root, or the user relayd drops to
/// ([`set_service_user`]), writable by no one else.
pub(crate) fn secure_dir(path: &Path) -> Result<std::fs::File, KeyFileError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    secure::open_dir(path, uid, service_user())
}

mod secure;

/// Writes a fresh random key for `cipher` to `path` (a new file, mode 0600).
pub fn keygen(cipher: Cipher, path: &Path) -> Result<(), String> {
    let mut key = vec![0u8; cipher.key_len()];
    getrandom::fill(&mut key).map_err(|e| format!("no randomness: {e}"))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{hex}").map_err(|e| format!("{}: {e}", path.display()))
}

/// A fresh directory for test keys, `tag`ged, on a path the key file rule accepts for the
/// user running the tests (the system's temporary directory is shared, so never that): the
/// first of the test binary's own directory, /run and the home directory that qualifies.
/// No [`set_service_user`].
const NO_USER: u64 = u64::MAX;

/// See [`set_service_user`].
static SERVICE_USER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(NO_USER);

/// Tells the ESP services which user relayd drops to once it is set up (`daemon.user`),
/// when it reads its configuration as root before the drop: a state directory owned by
/// that user (made for it by the daemon) is relayd's own and passes the ownership check,
/// as one owned by root or by the current user does. Process-wide, like the process's
/// uid it anticipates; `None` forgets it.
pub fn set_service_user(uid: Option<u32>) {
    let v = uid.map_or(NO_USER, u64::from);
    SERVICE_USER.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// The user set by [`set_service_user`].
pub(crate) fn service_user() -> Option<u32> {
    u32::try_from(SERVICE_USER.load(std::sync::atomic::Ordering::Relaxed)).ok()
}

#[cfg(test)]
pub(crate) fn test_key_dir(tag: &str) -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let exe = std::env::current_exe().ok();
    let bases = [
        exe.as_deref().and_then(Path::parent).map(Path::to_path_buf),
        Some(PathBuf::from("/run")),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    for base in bases.into_iter().flatten() {
        // What earlier runs left behind (a test that failed keeps its keys).
        for e in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("relayd-test-keys-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = base.join(format!("relayd-test-keys-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_err() {
            continue;
        }
        let probe = dir.join("probe");
        if keygen(Cipher::Aes128Gcm, &probe).is_ok() && load_key(&probe, Cipher::Aes128Gcm).is_ok()
        {
            let _ = std::fs::remove_file(&probe);
            return dir;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("no directory on a path that only root or this user can write, for test keys");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    const NOBODY: u32 = 65534;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), None).unwrap();
    }

    fn mkdir(p: &Path, mode: u32) -> PathBuf {
        std::fs::create_dir(p).unwrap();
        chmod(p, mode);
        p.to_path_buf()
    }

    /// The (problem, fix) of an insecure key file; panics on any other outcome.
    fn refused(r: Result<Vec<u8>, KeyFileError>) -> (String, String) {
        match r {
            Err(KeyFileError::Insecure { problem, fix, .. }) => (problem, fix),
            other => panic!("not refused as insecure: {other:?}"),
        }
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn keygen_then_load_and_permissions() {
        let dir = test_key_dir("keygen");
        let p = dir.join("k");
        keygen(Cipher::Aes128Gcm, &p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_key(&p, Cipher::Aes128Gcm).unwrap().len(), 20);
        let e = load_key(&p, Cipher::Aes256CbcHmac).unwrap_err();
        assert!(e.to_string().contains("takes 64"), "{e}");
        assert!(
            keygen(Cipher::Aes128Gcm, &p).is_err(),
            "never overwrites a key"
        );
        for mode in [0o644, 0o640, 0o620, 0o602] {
            chmod(&p, mode);
            let (problem, fix) = refused(load_key(&p, Cipher::Aes128Gcm));
            assert!(problem.contains("group or others"), "{mode:o}: {problem}");
            assert_eq!(fix, format!("chmod 600 {}", p.display()));
        }
        chmod(&p, 0o400);
        assert!(load_key(&p, Cipher::Aes128Gcm).is_ok(), "read-only is fine");
        // Not hex, a directory, a FIFO (which must not hang the load), nothing at all.
        std::fs::write(dir.join("text"), "not a key").unwrap();
        chmod(&dir.join("text"), 0o600);
        assert!(matches!(
            load_key(&dir.join("text"), Cipher::Aes128Gcm),
            Err(KeyFileError::NotHex { .. })
        ));
        let sub = mkdir(&dir.join("sub"), 0o700);
        let (problem, _) = refused(load_key(&sub, Cipher::Aes128Gcm));
        assert!(problem.contains("not a regular file"), "{problem}");
        let fifo =
            std::ffi::CString::new(dir.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (problem, _) = refused(load_key(&dir.join("fifo"), Cipher::Aes128Gcm));
        assert!(problem.contains("not a regular file"), "{problem}");
        let e = load_key(&dir.join("absent"), Cipher::Aes128Gcm).unwrap_err();
        assert!(
            matches!(&e, KeyFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn owners_and_directories_on_the_way_are_checked() {
        if !is_root() {
            eprintln!("SKIPPED: needs root to give files to another user");
            return;
        }
        let top = test_key_dir("owners");
        let c = Cipher::Aes128Gcm;
        let good = mkdir(&top.join("good"), 0o755);
        let key = good.join("k");
        keygen(c, &key).unwrap();
        assert!(
            load_key(&key, c).is_ok(),
            "root's key in root's directories"
        );
        // The same through "." and "..".
        let odd = good.join("..").join("good").join(".").join("k");
        assert!(load_key(&odd, c).is_ok());

        // A key owned by another user: that user chooses the key.
        chown(&key, NOBODY);
        let (problem, fix) = refused(load_key(&key, c));
        assert!(problem.contains("owned by uid 65534"), "{problem}");
        assert_eq!(fix, format!("chown 0 {}", key.display()));
        let e = load_key(&key, c).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("key file {}: ", key.display())),
            "{e}"
        );
        // ... but it is right for a relayd running as that user (root's directories are).
        assert!(load_key_as(&key, c, NOBODY).is_ok());
        chown(&key, 0);

        // The key's directory owned by another user, or writable by group or anyone.
        chown(&good, NOBODY);
        let (problem, fix) = refused(load_key(&key, c));
        assert!(
            problem.contains(&format!(
                "directory {} is owned by uid 65534",
                good.display()
            )),
            "{problem}"
        );
        assert_eq!(fix, format!("chown root {}", good.display()));
        assert!(
            load_key_as(&key, c, NOBODY).is_ok(),
            "its own user's directory"
        );
        chown(&good, 0);
        for (mode, who) in [(0o775, "its group"), (0o757, "anyone"), (0o777, "anyone")] {
            chmod(&good, mode);
            let (problem, fix) = refused(load_key(&key, c));
            assert!(
                problem.contains(&format!(
                    "directory {} is writable by {who}",
                    good.display()
                )),
                "{mode:o}: {problem}"
            );
            assert_eq!(fix, format!("chmod go-w {}", good.display()));
        }
        // A shared directory like /tmp (sticky) is no better: the key has to move.
        chmod(&good, 0o1777);
        let (problem, fix) = refused(load_key(&key, c));
        assert!(
            problem.contains("writable by anyone (mode 1777)"),
            "{problem}"
        );
        assert!(fix.contains("move the key"), "{fix}");
        chmod(&good, 0o755);
        assert!(load_key(&key, c).is_ok());

        // Any directory on the way counts, not only the last.
        let deep = mkdir(&good.join("a"), 0o700);
        let deep = mkdir(&deep.join("b"), 0o700);
        keygen(c, &deep.join("k")).unwrap();
        assert!(load_key(&deep.join("k"), c).is_ok());
        chmod(&good, 0o770);
        let (problem, _) = refused(load_key(&deep.join("k"), c));
        assert!(problem.contains(&good.display().to_string()), "{problem}");
        chmod(&good, 0o755);

        // Symbolic links are followed only from directories checked already, and what
        // they lead to is checked as well.
        symlink(&key, good.join("link")).unwrap();
        assert!(load_key(&good.join("link"), c).is_ok());
        symlink("a/b", good.join("dirlink")).unwrap();
        assert!(load_key(&good.join("dirlink").join("k"), c).is_ok());
        let open = mkdir(&top.join("open"), 0o777);
        keygen(c, &open.join("k")).unwrap();
        symlink(open.join("k"), good.join("to-open")).unwrap();
        let (problem, _) = refused(load_key(&good.join("to-open"), c));
        assert!(problem.contains(&open.display().to_string()), "{problem}");
        // A link in a directory anyone can write is refused before it is read.
        symlink(&key, open.join("link")).unwrap();
        let (problem, _) = refused(load_key(&open.join("link"), c));
        assert!(problem.contains(&open.display().to_string()), "{problem}");
        symlink("loop", good.join("loop")).unwrap();
        assert!(matches!(
            load_key(&good.join("loop"), c),
            Err(KeyFileError::Io { .. })
        ));

        // The system's shared temporary directory is never acceptable.
        let tmp = Path::new("/tmp");
        let tmp_mode = std::fs::metadata(tmp).map(|m| m.permissions().mode());
        if tmp_mode.is_ok_and(|m| m & 0o002 != 0) {
            let d = tmp.join(format!("relayd-keys-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            mkdir(&d, 0o700);
            keygen(c, &d.join("k")).unwrap();
            let (problem, fix) = refused(load_key(&d.join("k"), c));
            std::fs::remove_dir_all(&d).unwrap();
            assert!(
                problem.contains("directory /tmp is writable by anyone"),
                "{problem}"
            );
            assert!(fix.contains("/etc/relayd/keys"), "{fix}");
        }
        std::fs::remove_dir_all(&top).unwrap();
    }
}
