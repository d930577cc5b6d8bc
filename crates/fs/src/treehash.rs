//! A tree's content hash (issue 20): what `scion send` names a base by and `scion receive`
//! checks a received tree against. It covers what a user sees, not how scion stores it, so an
//! identical tree made by `cp -a` or rsync on another store has the same hash:
//!
//! - a file: its mode, owner, mtime, extended attributes, size, and the hash of each chunk's
//!   logical bytes (64 KiB of the file, zeros included), whatever its stored form (inline,
//!   patched, a plain block, a block shorter than the chunk); all-zero chunks (holes or
//!   stored zeros) are left out, so sparseness does not count;
//! - a symlink: its target and metadata; a device, FIFO or socket: its kind, number, metadata;
//! - a directory: its metadata and its entries by name with their hashes (`.snapshot` left
//!   out); nested clones are directories like any other;
//! - the tree: its top directory's hash and its hard-link structure (the sets of paths that
//!   name one file).
//!
//! Not covered: atime, ctime, birth time, inode numbers, link counts, block addresses.
//!
//! No file data is read where a chunk's block holds exactly its logical bytes (the block's
//! hash is theirs); only patched chunks and blocks shorter than their chunk are read. Clones
//! share structure and so does the work: a directory whose tree was hashed already (within
//! the namespace when hard links or clones lie below) is not walked again, a content tree
//! not hashed twice.

use crate::clone::SNAPDIR_NAME;
use crate::delta::StoredChunk;
use crate::error::errno;
use crate::fs::{eio, Fs, Ino};
use crate::inode::{Inode, Kind, CHUNK};
use crate::FsResult;
use std::collections::{BTreeMap, HashMap};

/// A tree's (or file's) content hash.
pub type TreeHash = [u8; 32];

/// Directories nest at most this deep.
const MAX_DEPTH: usize = 2048;

/// The version of the hashes above: what a memo kept across mounts was computed with
/// (`records::hash_memo`). A change to what a hash covers must change it.
pub(crate) const SCHEME: u8 = 1;

/// Work kept between hashes (clones and snapshots share most of it), and across mounts
/// (`load`, `save`).
#[derive(Default)]
pub struct HashMemo {
    /// Entries were added since it was loaded (or it was cut back): worth saving.
    changed: bool,
    /// The store's kept memo was read into it (at its first use, `load_once`: a mount that
    /// never hashes a tree never holds it).
    loaded: bool,
    /// A directory's content tree hash and the hash of its own metadata (which lives in its
    /// parent's entry, not in its content tree: two directories with the same entries may
    /// differ in mode or mtime) -> its hash.
    dirs: HashMap<([u8; 32], [u8; 32]), TreeHash>,
    /// A content tree's root hash and the file's size -> the file's chunk-list hash.
    contents: HashMap<([u8; 32], u64), TreeHash>,
}

/// Entries a memo keeps at most by default (~120 MB); past its bound the memo starts again.
pub const HASH_MEMO_ENTRIES: usize = 1 << 20;

static HASH_MEMO_LIMIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(HASH_MEMO_ENTRIES);

/// The bound of every volume's hash memo from now on (mount option `hash_memo=N`; at least
/// 1,024 entries).
pub fn set_hash_memo_limit(entries: usize) {
    HASH_MEMO_LIMIT.store(entries.max(1024), std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn hash_memo_limit() -> usize {
    HASH_MEMO_LIMIT.load(std::sync::atomic::Ordering::Relaxed)
}

impl HashMemo {

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.dirs.len() + self.contents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn trim(&mut self) {
        if self.dirs.len() + self.contents.len() > hash_memo_limit() {
            *self = HashMemo { changed: true, loaded: true, ..HashMemo::default() };
        }
    }

    /// Adds the memo kept in store `dir` at its last clean unmount, up to the memo's bound,
    /// the first time it is called; nothing if there is none or it cannot be used (said in
    /// the log: it is a cache).
    fn load_once(&mut self, host: &scion_store::Host, dir: &std::path::Path) {
        use crate::records::hash_memo;
        if std::mem::replace(&mut self.loaded, true) {
            return;
        }
        let path = dir.join(hash_memo::FILE);
        if !host.exists(&path) {
            return;
        }
        let decoded = host.read(&path).map_err(|e| e.to_string()).and_then(|b| hash_memo::decode(SCHEME, &b));
        match decoded {
            Ok((dirs, contents)) => {
                let room = hash_memo_limit().saturating_sub(self.len());
                self.dirs.extend(dirs.into_iter().take(room));
                let room = hash_memo_limit().saturating_sub(self.len());
                self.contents.extend(contents.into_iter().take(room));
            }
            Err(e) => log::warn!("{}: {e}; content hashes are computed again as needed", path.display()),
        }
    }

    /// Writes the memo into store `dir` if it changed since it was loaded. Not synced: a
    /// file cut short by a crash fails its checksum and is not used.
    pub(crate) fn save(&mut self, host: &scion_store::Host, dir: &std::path::Path) -> scion_store::Result<()> {
        use crate::records::hash_memo;
        if !self.changed {
            return Ok(());
        }
        let dirs: Vec<_> = self.dirs.iter().map(|(k, v)| (*k, *v)).collect();
        let contents: Vec<_> = self.contents.iter().map(|(k, v)| (*k, *v)).collect();
        let b = hash_memo::encode(SCHEME, &dirs, &contents);
        let path = dir.join(hash_memo::FILE);
        host.open(&path, scion_store::OpenMode::Truncate)
            .and_then(|f| f.write_all_at(&b, 0))
            .map_err(|e| scion_store::Error::io(format!("write of {}", path.display()), e))?;
        self.changed = false;
        Ok(())
    }
}

/// What changed in one chunk of a file between two versions (`Fs::chunk_changes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkChange {
    /// The chunk's bytes are new: send them.
    Data(u64),
    /// The old chunk's block with these runs laid over it (offset in the chunk, bytes).
    Patch(u64, Vec<(u32, Vec<u8>)>),
    /// The chunk is all zeros now (a hole) where it held data.
    Hole(u64),
}

/// Walk state: the hard-linked files seen, by object, with their paths.
struct Walk<'m> {
    memo: &'m mut HashMemo,
    links: BTreeMap<(u32, u64), Vec<Vec<u8>>>,
}

impl Fs {
    /// The content hash of the tree at `dir`, with the engine's own memo.
    pub fn content_hash_of(&mut self, dir: Ino) -> FsResult<TreeHash> {
        let mut memo = std::mem::take(&mut self.hash_memo);
        let r = self.tree_hash(dir, &mut memo);
        self.hash_memo = memo;
        r
    }

    /// The snapshots (and clones) whose tree's content hash is `want`, up to `most`, those
    /// named `hint` first: where a stream's base may be found. Hashing every snapshot costs
    /// only what they do not share with those hashed before.
    pub fn find_tree(&mut self, want: &TreeHash, hint: &[u8], most: usize) -> FsResult<Vec<Vec<u8>>> {
        let ids: Vec<(u32, bool, Ino)> = self
            .namespaces
            .iter()
            .filter(|(id, _)| **id != 1)
            .map(|(id, n)| (*id, n.info.kind == crate::NsKind::Snapshot, n.root))
            .collect();
        let mut rows = Vec::new();
        for (id, snap, root) in ids {
            if let Ok(p) = self.path_of_dir(root) {
                rows.push((!snap, !p.ends_with(hint) || hint.is_empty(), id, p));
            }
        }
        rows.sort();
        let mut out = Vec::new();
        for (_, _, _, path) in rows {
            let Ok(ino) = self.resolve_path(&path) else { continue };
            if &self.content_hash_of(ino)? == want {
                out.push(path);
                if out.len() >= most {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The hard-link groups of the tree at `dir`: the paths (from `dir`) of each file with
    /// two or more names in it, sorted.
    pub fn link_groups(&mut self, dir: Ino) -> FsResult<Vec<Vec<Vec<u8>>>> {
        let mut memo = std::mem::take(&mut self.hash_memo);
        let r = self.tree_hash_with(dir, &mut memo);
        self.hash_memo = memo;
        Ok(r?.1)
    }

    /// The content hash of the tree at directory `dir` (see the module comment).
    pub fn tree_hash(&mut self, dir: Ino, memo: &mut HashMemo) -> FsResult<TreeHash> {
        Ok(self.tree_hash_with(dir, memo)?.0)
    }

    fn tree_hash_with(&mut self, dir: Ino, memo: &mut HashMemo) -> FsResult<(TreeHash, Vec<Vec<Vec<u8>>>)> {
        self.fold(dir)?;
        memo.load_once(&self.vol.host, &self.vol.dir);
        memo.trim();
        let mut w = Walk {
            memo,
            links: BTreeMap::new(),
        };
        self.remember(dir)?;
        let top = self.node_hash(dir, &mut Vec::new(), &mut w, 0);
        self.forget(dir, 1);
        let top = top?;
        let mut h = blake3::Hasher::new();
        h.update(b"scion tree v1");
        h.update(&top);
        let mut groups: Vec<Vec<Vec<u8>>> = w.links.into_values().filter(|v| v.len() > 1).collect();
        for g in &mut groups {
            g.sort();
        }
        groups.sort();
        h.update(&(groups.len() as u64).to_le_bytes());
        for g in &groups {
            h.update(&(g.len() as u64).to_le_bytes());
            for p in g {
                put_bytes(&mut h, p);
            }
        }
        Ok((*h.finalize().as_bytes(), groups))
    }

    fn node_hash(&mut self, ino: Ino, path: &mut Vec<u8>, w: &mut Walk, depth: usize) -> FsResult<TreeHash> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let (i, ns, overlays) = {
            let n = self.node(ino)?;
            (self.inode_full(ino)?, n.ns, !n.entries.is_empty() || !n.chunks.is_empty())
        };
        let mut h = blake3::Hasher::new();
        match i.kind {
            Kind::Dir => return self.dir_hash(ino, &i, overlays, path, w, depth),
            Kind::File => {
                if i.nlink > 1 {
                    w.links.entry((ns, i.oid)).or_default().push(path.clone());
                }
                h.update(b"F");
                meta(&mut h, &i);
                h.update(&self.content_hash(&i, w)?);
            }
            Kind::Symlink => {
                h.update(b"L");
                // A symlink's mode means nothing on Linux (lchmod is refused): always 0777.
                let mut i = i.clone();
                i.perm = 0o777;
                meta(&mut h, &i);
                put_bytes(&mut h, &i.target);
            }
            k => {
                h.update(b"S");
                h.update(&[k as u8]);
                meta(&mut h, &i);
                h.update(&i.rdev.to_le_bytes());
            }
        }
        Ok(*h.finalize().as_bytes())
    }

    #[allow(clippy::too_many_arguments)]
    fn dir_hash(
        &mut self,
        d: Ino,
        i: &Inode,
        overlays: bool,
        path: &mut Vec<u8>,
        w: &mut Walk,
        depth: usize,
    ) -> FsResult<TreeHash> {
        // A directory with no hard links or clones below hashes the same wherever its tree
        // is (its files' paths do not enter its hash), given the same metadata of its own.
        let key = match (&i.content, overlays) {
            (Some(c), false) if !self.shares_below(i)? => {
                let mut m = blake3::Hasher::new();
                meta(&mut m, i);
                Some((c.hash, *m.finalize().as_bytes()))
            }
            _ => None,
        };
        if let Some(h) = key.and_then(|k| w.memo.dirs.get(&k)) {
            return Ok(*h);
        }
        let mut h = blake3::Hasher::new();
        h.update(b"D");
        meta(&mut h, i);
        let mut names: Vec<Vec<u8>> = self.readdir(d)?.into_iter().map(|e| e.name).filter(|n| n != SNAPDIR_NAME).collect();
        names.sort();
        h.update(&(names.len() as u64).to_le_bytes());
        for name in names {
            let Some(c) = self.child(d, &name)? else { continue };
            let len = path.len();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            self.remember(c)?;
            let r = self.node_hash(c, path, w, depth + 1);
            self.forget(c, 1);
            path.truncate(len);
            put_bytes(&mut h, &name);
            h.update(&r?);
        }
        let out = *h.finalize().as_bytes();
        if let Some(k) = key {
            w.memo.dirs.insert(k, out);
            w.memo.changed = true;
        }
        Ok(out)
    }

    /// The hash of a file's size and logical chunks (all-zero chunks left out).
    fn content_hash(&mut self, i: &Inode, w: &mut Walk) -> FsResult<TreeHash> {
        let key = match (&i.content, &i.direct) {
            (Some(c), None) => Some((c.hash, i.size)),
            _ => None,
        };
        if let Some(h) = key.and_then(|k| w.memo.contents.get(&k)) {
            return Ok(*h);
        }
        let mut h = blake3::Hasher::new();
        h.update(b"scion file v1");
        h.update(&i.size.to_le_bytes());
        for (idx, c) in self.logical_chunks(i)? {
            h.update(&idx.to_le_bytes());
            h.update(&c);
        }
        let out = *h.finalize().as_bytes();
        if let Some(k) = key {
            w.memo.contents.insert(k, out);
            w.memo.changed = true;
        }
        Ok(out)
    }

    /// The hashes of a file's chunks that are not all zeros, by index.
    pub(crate) fn logical_chunks(&self, i: &Inode) -> FsResult<Vec<(u64, [u8; 32])>> {
        let mut out = Vec::new();
        for (idx, c) in self.stored(i)? {
            let Some(len) = logical_len(i.size, idx) else { continue };
            let h = match &c {
                Stored::Inline(b) => hash_padded(b, len),
                Stored::Block(s) if s.is_plain() && u64::from(s.block.len) == len => s.block.hash,
                Stored::Block(s) => {
                    let mut b = self.vol.forest.store.read(&s.block).map_err(eio)?;
                    s.patches.apply(&mut b);
                    hash_padded(&b, len)
                }
            };
            if h != zero_hash(len) {
                out.push((idx, h));
            }
        }
        Ok(out)
    }

    /// A file's stored chunks in index order: its inline bytes, or its blocks and patches.
    fn stored(&self, i: &Inode) -> FsResult<Vec<(u64, Stored)>> {
        if !i.inline.is_empty() {
            return Ok(vec![(0, Stored::Inline(i.inline.clone()))]);
        }
        Ok(self.stored_chunks_of(i)?.into_iter().map(|(idx, c)| (idx, Stored::Block(c))).collect())
    }

    /// File `ino`'s record with everything written to it folded in (for `chunk_changes`).
    pub fn file_record(&mut self, ino: Ino) -> FsResult<Inode> {
        if !self.node(ino)?.chunks.is_empty() {
            self.checkpoint_with(crate::checkpoint::Fold::All).map_err(eio)?;
        }
        self.inode_full(ino)
    }

    /// What changed chunk by chunk from file `old` to file `new` (both committed: the caller
    /// folds first), for a stream to send only that: chunks equal in both are left out; a
    /// chunk that is the old one's plain block with patches laid over it is those patches.
    pub fn chunk_changes(&self, old: &Inode, new: &Inode) -> FsResult<Vec<ChunkChange>> {
        let a: BTreeMap<u64, Stored> = self.stored(old)?.into_iter().collect();
        let b: BTreeMap<u64, Stored> = self.stored(new)?.into_iter().collect();
        let mut out = Vec::new();
        let mut idx: Vec<u64> = a.keys().chain(b.keys()).copied().collect();
        idx.sort();
        idx.dedup();
        for i in idx {
            if logical_len(new.size, i).is_none() {
                continue; // past the new end: a truncate says it
            }
            let change = match (a.get(&i), b.get(&i)) {
                (_, None) => Some(ChunkChange::Hole(i)),
                (Some(Stored::Block(x)), Some(Stored::Block(y))) if x.block.hash == y.block.hash => {
                    if x.patches == y.patches && logical_len(old.size, i) == logical_len(new.size, i) {
                        None
                    } else if x.is_plain() && x.block.len == y.block.len && logical_len(old.size, i) == logical_len(new.size, i) {
                        Some(ChunkChange::Patch(i, y.patches.within(0, CHUNK as usize).map(|(o, d)| (o as u32, d.to_vec())).collect()))
                    } else {
                        Some(ChunkChange::Data(i))
                    }
                }
                (Some(Stored::Inline(x)), Some(Stored::Inline(y))) if x == y && old.size == new.size => None,
                _ => Some(ChunkChange::Data(i)),
            };
            out.extend(change);
        }
        Ok(out)
    }
}

/// A stored chunk: inline bytes, or a block with patches.
enum Stored {
    Inline(Vec<u8>),
    Block(StoredChunk),
}

/// The length of chunk `idx` of a file of `size` bytes (None: past its end).
fn logical_len(size: u64, idx: u64) -> Option<u64> {
    let start = idx.checked_mul(CHUNK)?;
    (start < size).then(|| (size - start).min(CHUNK))
}

/// The hash of `b` cut or padded with zeros to `len` bytes.
fn hash_padded(b: &[u8], len: u64) -> [u8; 32] {
    let len = len as usize;
    let mut h = blake3::Hasher::new();
    h.update(&b[..b.len().min(len)]);
    if b.len() < len {
        h.update(&vec![0u8; len - b.len()]);
    }
    *h.finalize().as_bytes()
}

/// The hash of `len` zero bytes (the full chunk's kept).
fn zero_hash(len: u64) -> [u8; 32] {
    static FULL: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    if len == CHUNK {
        return *FULL.get_or_init(|| hash_padded(&[], CHUNK));
    }
    hash_padded(&[], len)
}

fn put_bytes(h: &mut blake3::Hasher, b: &[u8]) {
    h.update(&(b.len() as u64).to_le_bytes());
    h.update(b);
}

/// Mode bits, owner, mtime and extended attributes (sorted by name).
fn meta(h: &mut blake3::Hasher, i: &Inode) {
    h.update(&i.perm.to_le_bytes());
    h.update(&i.uid.to_le_bytes());
    h.update(&i.gid.to_le_bytes());
    h.update(&i.mtime.sec.to_le_bytes());
    h.update(&i.mtime.nsec.to_le_bytes());
    h.update(&(i.xattrs.len() as u64).to_le_bytes());
    for (k, v) in &i.xattrs {
        put_bytes(h, k);
        put_bytes(h, v);
    }
}
