//! Where the inodes behind clients' handles were: kept in `STORE/nfs/hints` so that after a
//! restart a handle is found by a few lookups, not a walk of its namespace.
//!
//! The server writes the file from the inodes it holds (every inode it has given a handle
//! for, while it has a name) at each sweep when that set changed, and when it stops. It is a
//! hint: each path is checked by the inode number found at its end (`Fs::reach`), so a path
//! that is out of date (a rename through the mount since it was written) or a file lost or
//! damaged costs a walk (`Fs::walk_step`), never a wrong file.

use scion_store::codec::{Reader, Writer};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

const MAGIC: &[u8; 4] = b"SCNH";
const VERSION: u8 = 1;
const HASH_LEN: usize = 32;
/// Names in one path: deeper inodes are found by a walk.
const MAX_NAMES: usize = 4096;
/// Bytes of one name (the engine's `MAX_NAME`).
const MAX_NAME: usize = 255;

/// A volume's graft (0: the main volume) and the volume's own inode number.
pub type Key = (u64, u64);

/// Names from an inode's namespace root down to it, by inode.
pub type Hints = HashMap<Key, Vec<Vec<u8>>>;

pub fn encode(hints: &Hints) -> Vec<u8> {
    let mut keys: Vec<&Key> = hints.keys().collect();
    keys.sort();
    let mut w = Writer::new();
    w.raw(MAGIC).u8(VERSION).u32(keys.len() as u32);
    for k in keys {
        let names = &hints[k];
        assert!(names.len() <= MAX_NAMES, "a hint of {} names", names.len());
        w.u64(k.0).u64(k.1).u16(names.len() as u16);
        for n in names {
            assert!(!n.is_empty() && n.len() <= MAX_NAME, "a name of {} bytes in a hint", n.len());
            w.u8(n.len() as u8).raw(n);
        }
    }
    let mut out = w.finish();
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

pub fn decode(data: &[u8]) -> Result<Hints, String> {
    if data.len() < HASH_LEN {
        return Err(format!("{} bytes, shorter than its checksum", data.len()));
    }
    let (body, sum) = data.split_at(data.len() - HASH_LEN);
    if blake3::hash(body).as_bytes() != sum {
        return Err("checksum mismatch".into());
    }
    let mut r = Reader::new(body, "NFS hints");
    let e = |e: scion_store::Error| e.to_string();
    if r.raw(4).map_err(e)? != MAGIC {
        return Err("not an NFS hints file".into());
    }
    let v = r.u8().map_err(e)?;
    if v != VERSION {
        return Err(format!("version {v}; this scion reads version {VERSION}"));
    }
    let n = r.count(8 + 8 + 2).map_err(e)?;
    let mut out = Hints::with_capacity(n);
    for _ in 0..n {
        let key = (r.u64().map_err(e)?, r.u64().map_err(e)?);
        let count = r.u16().map_err(e)? as usize;
        if count > MAX_NAMES {
            return Err(format!("a path of {count} names"));
        }
        let mut names = Vec::with_capacity(count.min(r.remaining()));
        for _ in 0..count {
            let len = r.u8().map_err(e)? as usize;
            if len == 0 {
                return Err("an empty name".into());
            }
            names.push(r.raw(len).map_err(e)?.to_vec());
        }
        if out.insert(key, names).is_some() {
            return Err(format!("inode {:#x} of graft {} twice", key.1, key.0));
        }
    }
    r.expect_end().map_err(e)?;
    Ok(out)
}

/// The store's hints; none (logged) if the file is missing or damaged.
pub fn load(store: &Path) -> Hints {
    let path = crate::handle::state_dir(store).join("hints");
    match std::fs::read(&path) {
        Ok(b) => decode(&b).unwrap_or_else(|why| {
            log::warn!("nfs: {}: {why}; handles of before the restart are found by walks", path.display());
            Hints::new()
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Hints::new(),
        Err(e) => {
            log::warn!("nfs: {}: {e}", path.display());
            Hints::new()
        }
    }
}

/// Replaces the store's hints with `hints`, whole or not at all (a new file renamed over).
pub fn save(store: &Path, hints: &Hints) -> io::Result<()> {
    let dir = crate::handle::state_dir(store);
    std::fs::create_dir_all(&dir)?;
    let tmp = dir.join("hints.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&encode(hints))?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join("hints"))?;
    std::fs::File::open(&dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_round_trip_and_damage_is_refused() {
        let mut h = Hints::new();
        h.insert((0, 5), vec![b"a".to_vec(), b"b c".to_vec()]);
        h.insert((9, 1 << 40 | 3), Vec::new());
        let b = encode(&h);
        assert_eq!(decode(&b).unwrap(), h);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(decode(&d).is_err(), "byte {i} altered");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        assert_eq!(decode(&encode(&Hints::new())).unwrap(), Hints::new());
    }
}
