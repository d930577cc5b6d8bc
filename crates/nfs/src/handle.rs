//! NFS file handles: which inode, in a form a client may not forge, good across restarts.
//!
//! A handle names the volume by its graft (the main volume's directory a cube hangs at, 0
//! for the main volume: a cube's slot in the router may differ at the next start, its graft
//! does not) and the inode by the volume's own number (namespace and object id, neither ever
//! reused), followed by a MAC of both under the store's secret (`STORE/nfs/key`, made at the
//! first serve, readable by the store's owner alone). A handle altered or made up by a client
//! fails the MAC and is NFS3ERR_BADHANDLE, never another file; one whose inode is gone is
//! NFS3ERR_STALE (`adapter::revive`). The crate prefixes each handle with a generation,
//! derived from the secret here, so it too stays the same across restarts.

use nfs3_server::vfs::FileHandle;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// This layout's version, the handle's first byte.
const VERSION: u8 = 2;
/// Bytes of the MAC kept in a handle: 2^-64 chance for a forgery.
const MAC_LEN: usize = 8;
const BODY: usize = 1 + 8 + 8;
const LEN: usize = BODY + MAC_LEN;
const KEY_LEN: usize = 32;

/// The key handles are authenticated with.
#[derive(Clone)]
pub struct HandleKey([u8; KEY_LEN]);

/// Where a store keeps its NFS state: the key, and the hints (`hints.rs`).
pub fn state_dir(store: &Path) -> PathBuf {
    store.join("nfs")
}

impl HandleKey {
    /// A fresh random key (from the kernel's random pool): handles good for one server's life.
    pub fn random() -> io::Result<HandleKey> {
        let mut k = [0u8; KEY_LEN];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
        Ok(HandleKey(k))
    }

    /// A key of the given bytes (the fuzz targets').
    pub fn from_secret(k: [u8; KEY_LEN]) -> HandleKey {
        HandleKey(k)
    }

    /// The store's key (`STORE/nfs/key`), made (mode 0600, synced) if there is none yet.
    pub fn of_store(store: &Path) -> io::Result<HandleKey> {
        let dir = state_dir(store);
        let path = dir.join("key");
        match std::fs::read(&path) {
            Ok(b) => {
                let k: [u8; KEY_LEN] = b.as_slice().try_into().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, format!(
                        "{}: {} bytes, not a {KEY_LEN}-byte key; remove it to make a new one (clients' handles then become stale)",
                        path.display(),
                        b.len()
                    ))
                })?;
                Ok(HandleKey(k))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = HandleKey::random()?;
                std::fs::create_dir_all(&dir)?;
                let tmp = dir.join("key.tmp");
                let mut f = std::fs::OpenOptions::new();
                std::os::unix::fs::OpenOptionsExt::mode(&mut f, 0o600);
                let mut f = f.write(true).create(true).truncate(true).open(&tmp)?;
                f.write_all(&key.0)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(&dir)?.sync_all()?;
                Ok(key)
            }
            Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// The crate's generation prefix: the same for every start with this key.
    pub fn generation(&self) -> u64 {
        let h = blake3::keyed_hash(&self.0, b"scion nfs generation");
        u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("a BLAKE3 hash is 32 bytes"))
    }

    fn mac(&self, body: &[u8]) -> [u8; MAC_LEN] {
        let h = blake3::keyed_hash(&self.0, body);
        h.as_bytes()[..MAC_LEN].try_into().expect("a BLAKE3 hash is 32 bytes")
    }

    /// The handle of inode `ino` (the volume's own number) of the volume grafted at `graft`.
    pub fn handle(&self, graft: u64, ino: u64) -> Handle {
        let mut b = [0u8; LEN];
        b[0] = VERSION;
        b[1..9].copy_from_slice(&graft.to_le_bytes());
        b[9..BODY].copy_from_slice(&ino.to_le_bytes());
        let mac = self.mac(&b[..BODY]);
        b[BODY..].copy_from_slice(&mac);
        Handle(b)
    }

    /// The graft and inode number of `h`, if this key made it.
    pub fn open(&self, h: &Handle) -> Option<(u64, u64)> {
        // Not a secret-dependent early exit on the first differing byte: compare it all.
        let ok = self.mac(&h.0[..BODY]).iter().zip(&h.0[BODY..]).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        let graft = u64::from_le_bytes(h.0[1..9].try_into().expect("8 bytes"));
        let ino = u64::from_le_bytes(h.0[9..BODY].try_into().expect("8 bytes"));
        (ok && h.0[0] == VERSION).then_some((graft, ino))
    }
}

/// A handle as it travels (without the crate's generation prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle([u8; LEN]);

impl FileHandle for Handle {
    fn len(&self) -> usize {
        LEN
    }

    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(Handle(bytes.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn altered_and_foreign_handles_are_refused() {
        let k = HandleKey::random().unwrap();
        let h = k.handle(7, 0x1234_5678_9abc);
        assert_eq!(k.open(&h), Some((7, 0x1234_5678_9abc)));
        for i in 0..LEN {
            let mut b = h.0;
            b[i] ^= 1;
            assert_eq!(k.open(&Handle(b)), None, "byte {i} altered");
        }
        let other = HandleKey::random().unwrap();
        assert_eq!(other.open(&h), None);
        assert_ne!(other.generation(), k.generation());
        assert!(Handle::from_bytes(&[0u8; LEN - 1]).is_none());
        assert!(Handle::from_bytes(&[0u8; LEN + 1]).is_none());
    }

    #[test]
    fn a_store_keeps_its_key() {
        let tmp = tempfile::tempdir().unwrap();
        let a = HandleKey::of_store(tmp.path()).unwrap();
        let b = HandleKey::of_store(tmp.path()).unwrap();
        assert_eq!(a.0, b.0);
        let meta = std::fs::metadata(tmp.path().join("nfs/key")).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
        std::fs::write(tmp.path().join("nfs/key"), b"short").unwrap();
        let e = HandleKey::of_store(tmp.path()).err().unwrap().to_string();
        assert!(e.contains("remove it"), "{e}");
    }
}
