//! Ciphers and their key files. Keys are laid out as Linux `ip xfrm` takes them: for GCM
//! the AES key followed by its 4-byte salt (RFC 4106), for CBC+HMAC the AES key followed by
//! the 32-byte HMAC-SHA-256 key. Files hold hex and must not be readable by group or others.

use serde::Deserialize;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

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

/// Reads a key file for `cipher`, refusing one that others may read.
pub fn load_key(path: &Path, cipher: Cipher) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("key file {}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "key file {} is readable by group or others (mode {:o}): chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("key file {}: {e}", path.display()))?;
    let hex: String = text.split_whitespace().collect::<String>();
    let hex = hex.strip_prefix("0x").unwrap_or(&hex);
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("key file {}: not a hex string", path.display()));
    }
    let key: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
        .collect();
    if key.len() != cipher.key_len() {
        return Err(format!(
            "key file {}: {} bytes, but this cipher takes {} ({})",
            path.display(),
            key.len(),
            cipher.key_len(),
            if cipher.is_gcm() {
                "AES key then 4-byte salt"
            } else {
                "AES key then 32-byte HMAC key"
            }
        ));
    }
    Ok(key)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_then_load_and_permissions() {
        let dir = std::env::temp_dir().join(format!("relayd-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k");
        let _ = std::fs::remove_file(&p);
        keygen(Cipher::Aes128Gcm, &p).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_key(&p, Cipher::Aes128Gcm).unwrap().len(), 20);
        assert!(
            load_key(&p, Cipher::Aes256CbcHmac)
                .unwrap_err()
                .contains("takes 64")
        );
        assert!(
            keygen(Cipher::Aes128Gcm, &p).is_err(),
            "never overwrites a key"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            load_key(&p, Cipher::Aes128Gcm)
                .unwrap_err()
                .contains("chmod 600")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
