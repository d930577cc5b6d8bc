//! The local cache of remote blocks (`STORE/remote-cache/`): one sparse file per remote
//! pack, named by the pack's hash, holding the blocks fetched from it at their places in the
//! pack. Bounded (`-o remote_cache=SIZE`): past the bound the block used least recently is
//! punched out.
//!
//! Every block read from the cache is verified by its hash before it is used, so the cache
//! needs no journal: a block a crash tore, or a hole, reads as a miss and is fetched again.
//! Use is remembered in memory only; files found at start are "cold", and go first.

use crate::layout::{hex, Entry, Hash};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const DIR: &str = "remote-cache";
/// The bound when a mount names none.
pub const DEFAULT_LIMIT: u64 = 1 << 30;

pub struct Cache {
    dir: PathBuf,
    limit: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    files: HashMap<Hash, Arc<File>>,
    /// Blocks cached this run: (pack, offset) -> (bytes held, last use).
    used: HashMap<(Hash, u64), (u64, u64)>,
    /// The same by last use.
    by_use: BTreeMap<u64, (Hash, u64)>,
    /// Files found at start, with the bytes they held: evicted first, whole.
    cold: Vec<(Hash, u64)>,
    total: u64,
    tick: u64,
}

fn footprint(len: u32) -> u64 {
    u64::from(len).div_ceil(4096) * 4096
}

impl Cache {
    /// The cache in `store`'s directory, bounded to `limit` bytes (0: nothing is kept).
    pub fn open(store: &Path, limit: u64) -> io::Result<Cache> {
        let dir = store.join(DIR);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            // A store on a read-only medium still reads its pulled trees, each read a fetch.
            log::warn!("no remote cache in {}: {e}; every read of a remote block fetches it", dir.display());
            return Ok(Cache { dir, limit: 0, inner: Mutex::new(Inner::default()) });
        }
        let mut inner = Inner::default();
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            match crate::layout::unhex(&name) {
                Some(h) => {
                    let bytes = e.metadata()?.blocks() * 512;
                    inner.cold.push((h, bytes));
                    inner.total += bytes;
                }
                // Not ours (a temporary file a crash left): gone.
                None => std::fs::remove_file(e.path())?,
            }
        }
        let c = Cache { dir, limit, inner: Mutex::new(inner) };
        c.evict_to(&mut c.inner.lock().unwrap(), limit)?;
        Ok(c)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().unwrap().total
    }

    fn file(&self, inner: &mut Inner, pack: &Hash, create: bool) -> io::Result<Option<Arc<File>>> {
        if let Some(f) = inner.files.get(pack) {
            return Ok(Some(f.clone()));
        }
        let path = self.dir.join(hex(pack));
        let f = match OpenOptions::new().read(true).write(true).create(create).open(&path) {
            Ok(f) => Arc::new(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        inner.files.insert(*pack, f.clone());
        Ok(Some(f))
    }

    /// The block `e` of pack `pack`, if the cache holds it whole and right.
    pub fn get(&self, pack: &Hash, e: &Entry) -> Option<Vec<u8>> {
        let f = {
            let mut inner = self.inner.lock().unwrap();
            self.file(&mut inner, pack, false).ok()??
        };
        let mut buf = vec![0u8; e.len as usize];
        f.read_exact_at(&mut buf, e.offset).ok()?;
        if blake3::hash(&buf).as_bytes() != &e.hash {
            return None;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.tick += 1;
        let tick = inner.tick;
        match inner.used.get_mut(&(*pack, e.offset)) {
            Some(u) => {
                let old = std::mem::replace(&mut u.1, tick);
                inner.by_use.remove(&old);
                inner.by_use.insert(tick, (*pack, e.offset));
            }
            // In a cold file: its bytes are counted there.
            None => {}
        }
        Some(buf)
    }

    /// Whether block `e` of `pack` was cached this run (a hint for read-ahead).
    pub fn holds(&self, pack: &Hash, offset: u64) -> bool {
        self.inner.lock().unwrap().used.contains_key(&(*pack, offset))
    }

    /// Keeps `bytes` (verified: block `e` of `pack`), making room first.
    pub fn put(&self, pack: &Hash, e: &Entry, bytes: &[u8]) -> io::Result<()> {
        let need = footprint(e.len);
        if need > self.limit {
            return Ok(());
        }
        let mut inner = self.inner.lock().unwrap();
        if inner.used.contains_key(&(*pack, e.offset)) {
            return Ok(());
        }
        self.evict_to(&mut inner, self.limit - need)?;
        let f = self.file(&mut inner, pack, true)?.expect("created");
        f.write_all_at(bytes, e.offset)?;
        inner.tick += 1;
        let tick = inner.tick;
        inner.used.insert((*pack, e.offset), (need, tick));
        inner.by_use.insert(tick, (*pack, e.offset));
        inner.total += need;
        Ok(())
    }

    /// Evicts until at most `target` bytes are held: cold files first, then blocks by use.
    fn evict_to(&self, inner: &mut Inner, target: u64) -> io::Result<()> {
        while inner.total > target {
            if let Some((pack, bytes)) = inner.cold.pop() {
                // A cold file goes whole, with the blocks used from it this run.
                inner.files.remove(&pack);
                let _ = std::fs::remove_file(self.dir.join(hex(&pack)));
                let gone: Vec<(Hash, u64)> = inner.used.keys().filter(|k| k.0 == pack).copied().collect();
                for k in gone {
                    let (n, t) = inner.used.remove(&k).expect("listed");
                    inner.by_use.remove(&t);
                    inner.total -= n;
                }
                inner.total -= bytes.min(inner.total);
                continue;
            }
            let Some((&t, &(pack, offset))) = inner.by_use.iter().next() else { break };
            inner.by_use.remove(&t);
            let (n, _) = inner.used.remove(&(pack, offset)).expect("indexed");
            inner.total -= n;
            if let Some(f) = self.file(inner, &pack, false)? {
                punch(&f, offset, n)?;
            }
        }
        Ok(())
    }
}

fn punch(f: &File, offset: u64, len: u64) -> io::Result<()> {
    let r = unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset as i64, len as i64) };
    if r != 0 {
        let e = io::Error::last_os_error();
        // A host without hole punching keeps the bytes: the bound is then on what is counted.
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(i: u8) -> (Entry, Vec<u8>) {
        let b = vec![i; 5000];
        (Entry { hash: *blake3::hash(&b).as_bytes(), offset: u64::from(i) * 8192, len: 5000, stored: 5000 }, b)
    }

    #[test]
    fn the_least_recently_used_block_goes_and_damage_is_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let pack = [1u8; 32];
        let c = Cache::open(tmp.path(), 2 * 8192).unwrap();
        let (e0, b0) = block(0);
        let (e1, b1) = block(1);
        let (e2, b2) = block(2);
        c.put(&pack, &e0, &b0).unwrap();
        c.put(&pack, &e1, &b1).unwrap();
        assert_eq!(c.get(&pack, &e0).unwrap(), b0); // 0 used after 1
        c.put(&pack, &e2, &b2).unwrap(); // room for two: 1, used least recently, goes
        assert_eq!(c.bytes(), 2 * 8192);
        assert!(c.get(&pack, &e1).is_none());
        assert_eq!(c.get(&pack, &e0).unwrap(), b0);
        assert_eq!(c.get(&pack, &e2).unwrap(), b2);
        // A damaged block reads as a miss.
        let f = OpenOptions::new().write(true).open(tmp.path().join(DIR).join(hex(&pack))).unwrap();
        f.write_all_at(b"x", e2.offset + 7).unwrap();
        assert!(c.get(&pack, &e2).is_none());
        drop(c);
        // Reopened: what was there is cold, and still read (verified).
        let c = Cache::open(tmp.path(), 2 * 8192).unwrap();
        assert_eq!(c.get(&pack, &e0).unwrap(), b0);
        let c = Cache::open(tmp.path(), 0).unwrap();
        assert_eq!(c.bytes(), 0);
        assert!(c.get(&pack, &e0).is_none());
    }
}
