//! SA state that outlives a reload: an SA that the new configuration keeps (same SPI,
//! suite and key; the ESN setting may change) keeps its sequence counter and replay window, so a SIGHUP
//! neither restarts the sender at 1 (which the peer would drop as replays) nor reopens the
//! receiver's window to replays. The daemon keeps the registries
//! ([`relay_core::Kept`]); nothing here is process-wide.

use crate::keys::Cipher;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex, Weak};

/// What makes two configured SAs the same SA. Not the ESN setting: numbers used under a
/// key stay used whatever the setting, and one SA has one state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SaId {
    spi: u32,
    cipher: Cipher,
    /// SHA-256 of the key, so the registry keeps no second copy of it.
    key: [u8; 32],
}

impl SaId {
    pub(crate) fn new(spi: u32, cipher: Cipher, key: &[u8]) -> SaId {
        SaId {
            spi,
            cipher,
            key: Sha256::digest(key).into(),
        }
    }
}

/// The live SAs of one direction, by identity. Entries die with the last service using them.
pub(crate) struct Registry<T>(Mutex<Vec<(SaId, Weak<T>)>>);

impl<T> Default for Registry<T> {
    fn default() -> Registry<T> {
        Registry::new()
    }
}

impl<T> Registry<T> {
    pub(crate) const fn new() -> Registry<T> {
        Registry(Mutex::new(Vec::new()))
    }

    /// The live state of SA `id`, or a new one from `make`.
    #[cfg(test)]
    pub(crate) fn get_or_make(&self, id: SaId, make: impl FnOnce() -> T) -> Arc<T> {
        match self.get_or_try_make(id, || Ok::<T, std::convert::Infallible>(make())) {
            Ok(t) => t,
            Err(e) => match e {},
        }
    }

    /// The SPI of a live SA under the same key as `id` that is not `id` itself (another
    /// SPI or suite). Two outbound SAs under one key would send the same IVs: GCM's nonce
    /// is the key's salt and the sequence number, without the SPI.
    pub(crate) fn other_sa_with_key(&self, id: &SaId) -> Option<u32> {
        let list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .find(|(i, w)| i.key == id.key && i != id && w.strong_count() > 0)
            .map(|(i, _)| i.spi)
    }

    /// The live state of SA `id`, or a new one from `make` (which may fail: its state file
    /// is lost). A live SA is never made again, so its file is not read over it.
    pub(crate) fn get_or_try_make<E>(
        &self,
        id: SaId,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|(_, w)| w.strong_count() > 0);
        if let Some(live) = list
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(live);
        }
        let new = Arc::new(make()?);
        list.push((id, Arc::downgrade(&new)));
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_sa_shares_state_until_the_last_user_goes() {
        let r: Registry<u32> = Registry::new();
        let id = |k: &[u8]| SaId::new(0x1001, Cipher::Aes128Gcm, k);
        let a = r.get_or_make(id(b"k1"), || 1);
        let b = r.get_or_make(id(b"k1"), || 2);
        assert!(Arc::ptr_eq(&a, &b));
        let c = r.get_or_make(id(b"k2"), || 3);
        assert_eq!(*c, 3, "another key is another SA");
        drop((a, b));
        assert_eq!(
            *r.get_or_make(id(b"k1"), || 4),
            4,
            "gone with its last user"
        );
    }
}
