//! The remote packs a store reads (`scion_store::RemotePacks`): the trees it pulled
//! (`STORE/attachments`, `STORE/remote/trees/`), their blocks fetched on first read with
//! ranged GETs (the blocks that follow in the same pack read ahead in the same request),
//! every one verified by its hash, kept in the bounded cache (`cache.rs`).

use crate::cache::Cache;
use crate::client::Client;
use crate::layout::{hex, Entry, Hash, TreeBlock, TreeObject, CHUNK};
use scion_fs::records::attachments::{self, Attachment};
use scion_fs::records::remotes;
use scion_store::host::HostFile;
use scion_store::{BlockKind, BlockPtr, Host, RemotePacks};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where pulled trees' objects are kept (`STORE/remote/trees/HASH`).
pub const TREES_DIR: &str = "remote/trees";
/// A miss fetches the blocks that follow it in the pack too, up to this many bytes.
const READ_AHEAD: u64 = 1 << 20;
/// Fetches of a run whose bytes came back wrong, before the read gets EIO.
const WRONG_BYTES_TRIES: u32 = 3;

/// One pulled tree as reads need it: its remote, and per pack its hash and its blocks by
/// slot (a pointer names block `slot` of a pack at `slot * CHUNK`).
struct Attached {
    remote: String,
    first: u32,
    packs: Vec<Hash>,
    blocks: Vec<Vec<(u32, Entry)>>,
    /// The tree object's blocks, sorted by hash (`resolve`).
    by_hash: Vec<TreeBlock>,
}

impl Attached {
    fn new(a: &Attachment, tree: &TreeObject) -> Attached {
        let mut blocks = vec![Vec::new(); tree.packs.len()];
        for b in &tree.blocks {
            blocks[b.pack as usize].push((b.slot, b.entry()));
        }
        for v in &mut blocks {
            v.sort_by_key(|e| e.0);
        }
        Attached { remote: a.remote.clone(), first: a.first, packs: tree.packs.iter().map(|p| p.0).collect(), blocks, by_hash: tree.blocks.clone() }
    }
}

/// How the remotes have answered since the mount (`scion status`).
#[derive(Clone, Debug, Default)]
pub struct Health {
    pub fetches: u64,
    pub fetched_bytes: u64,
    pub failures: u64,
    /// The last failure and when (seconds since the epoch), while no fetch has worked since.
    pub failing: Option<(String, u64)>,
    pub cache_bytes: u64,
    pub cache_limit: u64,
}

pub struct Source {
    host: Host,
    dir: PathBuf,
    table: RwLock<attachments::Stored>,
    trees: RwLock<HashMap<u32, Arc<Attached>>>,
    clients: Mutex<HashMap<String, Client>>,
    cache: Cache,
    /// Per attachment being pulled: the block addresses already installed once (a second
    /// pointer to one gains a reference).
    installed: Mutex<HashMap<u32, HashSet<u64>>>,
    fetches: AtomicU64,
    fetched: AtomicU64,
    failures: AtomicU64,
    failing: Mutex<Option<(String, u64)>>,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn eio(m: impl std::fmt::Display) -> io::Error {
    io::Error::other(m.to_string())
}

impl Source {
    /// The remote packs of the store at `dir`, cached in at most `cache_limit` bytes.
    pub fn open(host: &Host, dir: &Path, cache_limit: u64) -> Result<Arc<Source>, String> {
        let table = attachments::load(host, dir).map_err(|e| e.to_string())?;
        let cache = Cache::open(dir, cache_limit).map_err(|e| format!("the remote cache in {}: {e}", dir.display()))?;
        Ok(Arc::new(Source {
            host: host.clone(),
            dir: dir.to_path_buf(),
            table: RwLock::new(table),
            trees: Default::default(),
            clients: Default::default(),
            cache,
            installed: Default::default(),
            fetches: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failing: Mutex::new(None),
        }))
    }

    /// Whether the store has attached anything (a mount without attachments needs no source).
    pub fn has_attachments(host: &Host, dir: &Path) -> bool {
        host.exists(&dir.join(attachments::FILE))
    }

    pub fn health(&self) -> Health {
        Health {
            fetches: self.fetches.load(Relaxed),
            fetched_bytes: self.fetched.load(Relaxed),
            failures: self.failures.load(Relaxed),
            failing: self.failing.lock().unwrap().clone(),
            cache_bytes: self.cache.bytes(),
            cache_limit: self.cache.limit(),
        }
    }

    /// The client of remote `name`, as the store's remotes file says it is.
    pub fn client(&self, name: &str) -> Result<Client, String> {
        if let Some(c) = self.clients.lock().unwrap().get(name) {
            return Ok(c.clone());
        }
        let list = remotes::load(&self.host, &self.dir).map_err(|e| e.to_string())?;
        let r = list.remotes.iter().find(|r| r.name == name).ok_or_else(|| format!("no remote named {name} in this store (scion remote list)"))?;
        let c = Client::new(r)?;
        self.clients.lock().unwrap().insert(name.to_string(), c.clone());
        Ok(c)
    }

    /// Records a pulled tree (its object `bytes`, of hash `key`, already checked): kept in
    /// the store, given pack ids, synced. Returns the first pack id.
    pub fn attach(&self, remote: &str, key: &Hash, bytes: &[u8], tree: &TreeObject) -> Result<u32, String> {
        let trees = self.dir.join(TREES_DIR);
        std::fs::create_dir_all(&trees).map_err(|e| format!("{}: {e}", trees.display()))?;
        let path = trees.join(hex(key));
        if !path.exists() {
            let tmp = trees.join(format!(".{}.tmp", hex(key)));
            let write = || -> io::Result<()> {
                let f = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut &f, bytes)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(&trees)?.sync_all()
            };
            write().map_err(|e| format!("keeping the tree object in {}: {e}", path.display()))?;
        }
        let mut table = self.table.write().unwrap();
        let count = tree.packs.len() as u32;
        let first = table.next_first(count).map_err(|e| e.to_string())?;
        let a = Attachment { first, count, remote: remote.to_string(), tree: *key };
        *table = attachments::add(&self.host, &self.dir, &table, a.clone()).map_err(|e| e.to_string())?;
        self.trees.write().unwrap().insert(first, Arc::new(Attached::new(&a, tree)));
        self.installed.lock().unwrap().insert(first, HashSet::new());
        Ok(first)
    }

    /// The pointer to block `hash` of the tree attached at `first`, and whether it is
    /// installed already (then it gains a reference); `None`: the tree has no such block.
    pub fn resolve(&self, first: u32, hash: &Hash) -> Result<Option<(BlockPtr, bool)>, String> {
        let t = self.attached(first).map_err(|e| e.to_string())?;
        let Ok(i) = t.by_hash.binary_search_by(|b| b.hash.cmp(hash)) else {
            return Ok(None);
        };
        let b = t.by_hash[i];
        let ptr = BlockPtr { addr: BlockPtr::make_addr(first + b.pack, u64::from(b.slot) * CHUNK), len: b.len, kind: BlockKind::Data, hash: *hash };
        let mut inst = self.installed.lock().unwrap();
        let set = inst.entry(first).or_default();
        Ok(Some((ptr, !set.insert(ptr.addr))))
    }

    /// The attachment holding pack id `pack`, its tree loaded from the store on first use.
    fn attached(&self, pack: u32) -> io::Result<Arc<Attached>> {
        let a = self.table.read().unwrap().find(pack).cloned().ok_or_else(|| eio(format!("remote pack {pack} is in no attachment")))?;
        if let Some(t) = self.trees.read().unwrap().get(&a.first) {
            return Ok(t.clone());
        }
        let path = self.dir.join(TREES_DIR).join(hex(&a.tree));
        let bytes = std::fs::read(&path).map_err(|e| eio(format!("{}: {e}", path.display())))?;
        if blake3::hash(&bytes).as_bytes() != &a.tree {
            return Err(eio(format!("{}: damaged (its hash is not its name); pull the tree again", path.display())));
        }
        let tree = TreeObject::decode(&bytes).map_err(|e| eio(format!("{}: {e}", path.display())))?;
        let t = Arc::new(Attached::new(&a, &tree));
        self.trees.write().unwrap().insert(a.first, t.clone());
        Ok(t)
    }

    /// Block `i` (in slot order) of pack `p` of `t`: from the cache, or fetched with the
    /// blocks after it.
    fn block(&self, t: &Attached, p: usize, i: usize) -> io::Result<Vec<u8>> {
        let pack = &t.packs[p];
        let blocks = &t.blocks[p];
        if let Some(b) = self.cache.get(pack, &cached(blocks[i])) {
            return Ok(b);
        }
        let start = blocks[i].1.offset;
        let mut j = i + 1;
        while j < blocks.len() && blocks[j].1.offset >= start && blocks[j].1.end() - start <= READ_AHEAD && !self.cache.holds(pack, cached(blocks[j]).offset) {
            j += 1;
        }
        let end = blocks[j - 1].1.end();
        let mut last = String::new();
        for _ in 0..WRONG_BYTES_TRIES {
            match self.fetch(t, pack, start, end, &blocks[i..j]) {
                Ok(b) => return Ok(b),
                // The client retried already, within its deadline.
                Err(Fetch::Failed(e)) => {
                    last = e;
                    break;
                }
                Err(Fetch::Wrong(e)) => last = e,
            }
        }
        self.failures.fetch_add(1, Relaxed);
        *self.failing.lock().unwrap() = Some((last.clone(), now()));
        log::warn!("{last}");
        Err(eio(last))
    }

    /// One ranged GET of `start..end` of `pack`, each of `run` verified and cached; the first's
    /// bytes, or why not (a block that came back wrong fails the try).
    fn fetch(&self, t: &Attached, pack: &Hash, start: u64, end: u64, run: &[(u32, Entry)]) -> Result<Vec<u8>, Fetch> {
        let client = self.client(&t.remote).map_err(Fetch::Failed)?;
        let bytes = client.get_range(&crate::layout::pack_key(pack), start, end).map_err(|e| Fetch::Failed(e.to_string()))?;
        self.fetches.fetch_add(1, Relaxed);
        self.fetched.fetch_add(bytes.len() as u64, Relaxed);
        let mut first = None;
        for &(slot, e) in run {
            let at = (e.offset - start) as usize;
            let b = crate::layout::block_bytes(&e, &bytes[at..at + e.stored as usize]).unwrap_or_default();
            if blake3::hash(&b).as_bytes() != &e.hash {
                if first.is_none() {
                    return Err(Fetch::Wrong(format!("remote {}: pack {} gave wrong bytes for the block at {}", t.remote, hex(pack), e.offset)));
                }
                // Only the one asked for must be right; the rest is read-ahead.
                break;
            }
            if let Err(err) = self.cache.put(pack, &cached((slot, e)), &b) {
                log::warn!("remote cache: {err}");
            }
            first.get_or_insert(b);
        }
        *self.failing.lock().unwrap() = None;
        Ok(first.expect("the run's first block"))
    }

    /// Every block of the tree attached at `first` into the cache; `progress` hears
    /// (blocks done, blocks in all). Returns the bytes fetched.
    pub fn prefetch(&self, first: u32, progress: &mut dyn FnMut(u64, u64)) -> io::Result<u64> {
        let t = self.attached(first)?;
        let total: u64 = t.blocks.iter().map(|v| v.len() as u64).sum();
        let bytes: u64 = t.blocks.iter().flatten().map(|(_, e)| u64::from(e.len).div_ceil(4096) * 4096).sum();
        if bytes > self.cache.limit() {
            // Fetched, the first blocks would be evicted by the last.
            return Err(io::Error::other(format!(
                "the tree's blocks take {} MiB and the remote cache holds {} MiB: mount with -o remote_cache=SIZE to prefetch it",
                bytes >> 20,
                self.cache.limit() >> 20
            )));
        }
        let before = self.fetched.load(Relaxed);
        let mut done = 0;
        for p in 0..t.packs.len() {
            for i in 0..t.blocks[p].len() {
                self.block(&t, p, i)?;
                done += 1;
                if done % 64 == 0 || done == total {
                    progress(done, total);
                }
            }
        }
        Ok(self.fetched.load(Relaxed) - before)
    }
}

/// Where the cache keeps block `e` of `slot`: at the place its pointer names.
fn cached((slot, e): (u32, Entry)) -> Entry {
    Entry { offset: u64::from(slot) * CHUNK, stored: e.len, ..e }
}

/// Why a fetch failed: the remote's answer was wrong (tried again), or no answer came.
enum Fetch {
    Wrong(String),
    Failed(String),
}

/// The handle the block store reads remote packs through.
pub struct Packs(pub Arc<Source>);

impl RemotePacks for Packs {
    fn pack(&self, id: u32) -> Option<Arc<dyn HostFile>> {
        let t = self.0.attached(id).ok()?;
        Some(Arc::new(PackFile { source: self.0.clone(), index: (id - t.first) as usize, tree: t }))
    }
}

/// One remote pack, read-only.
struct PackFile {
    source: Arc<Source>,
    tree: Arc<Attached>,
    index: usize,
}

impl HostFile for PackFile {
    /// Reads the blocks' bytes at the places their pointers name (`slot * CHUNK`), zeros
    /// between them.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        buf.fill(0);
        let end = offset + buf.len() as u64;
        let blocks = &self.tree.blocks[self.index];
        let mut i = blocks.partition_point(|&(slot, e)| u64::from(slot) * CHUNK + u64::from(e.len) <= offset);
        while i < blocks.len() && u64::from(blocks[i].0) * CHUNK < end {
            let (at, len) = (u64::from(blocks[i].0) * CHUNK, u64::from(blocks[i].1.len));
            let bytes = self.source.block(&self.tree, self.index, i)?;
            let (from, to) = (at.max(offset), (at + len).min(end));
            buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
            i += 1;
        }
        Ok(())
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.tree.blocks[self.index].last().map_or(0, |&(slot, e)| u64::from(slot) * CHUNK + u64::from(e.len)))
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }
}
