//! NFS file handles: an inode number the client may not forge.
//!
//! A handle is the global inode number (volume, namespace, object id) and a MAC of it under a
//! secret the server draws at start: a handle altered or made up by a client fails the MAC
//! and is NFS3ERR_BADHANDLE, never another file. The crate prefixes each handle with its
//! generation (the server's start), so a handle from before a restart is NFS3ERR_STALE.

use nfs3_server::vfs::FileHandle;

/// Bytes of the MAC kept in a handle: 2^-64 chance for a forgery.
const MAC_LEN: usize = 8;
const LEN: usize = 8 + MAC_LEN;

/// The per-server key handles are authenticated with.
#[derive(Clone)]
pub struct HandleKey([u8; 32]);

impl HandleKey {
    /// A fresh random key (from the kernel's random pool).
    pub fn random() -> std::io::Result<HandleKey> {
        let mut k = [0u8; 32];
        let mut f = std::fs::File::open("/dev/urandom")?;
        std::io::Read::read_exact(&mut f, &mut k)?;
        Ok(HandleKey(k))
    }

    fn mac(&self, ino: u64) -> [u8; MAC_LEN] {
        let h = blake3::keyed_hash(&self.0, &ino.to_le_bytes());
        h.as_bytes()[..MAC_LEN].try_into().expect("a BLAKE3 hash is 32 bytes")
    }

    pub fn handle(&self, ino: u64) -> Handle {
        let mut b = [0u8; LEN];
        b[..8].copy_from_slice(&ino.to_le_bytes());
        b[8..].copy_from_slice(&self.mac(ino));
        Handle(b)
    }

    /// The inode number of `h`, if this key made it.
    pub fn open(&self, h: &Handle) -> Option<u64> {
        let ino = h.ino_unchecked();
        // Not a secret-dependent early exit on the first differing byte: compare it all.
        let ok = self.mac(ino).iter().zip(&h.0[8..]).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        ok.then_some(ino)
    }
}

/// A handle as it travels (without the crate's generation prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle([u8; LEN]);

impl Handle {
    /// The inode number, unauthenticated: only for `HandleKey::open`.
    fn ino_unchecked(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
}

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
        let h = k.handle(0x1234_5678_9abc);
        assert_eq!(k.open(&h), Some(0x1234_5678_9abc));
        for i in 0..LEN {
            let mut b = h.0;
            b[i] ^= 1;
            assert_eq!(k.open(&Handle(b)), None, "byte {i} altered");
        }
        let other = HandleKey::random().unwrap();
        assert_eq!(other.open(&h), None);
        assert!(Handle::from_bytes(&[0u8; 15]).is_none());
        assert!(Handle::from_bytes(&[0u8; 17]).is_none());
    }
}
