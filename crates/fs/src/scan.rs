//! `scion scan`'s engine half (issue 19 item 2, Prism's scan without its walk of every
//! clone): every regular file below some directories, each with a key that names its
//! content, found from block hashes without reading file data.
//!
//! A file's key is a hash of its size and, per stored chunk, the chunk's index, its data
//! block's hash and its patches; an inline file counts as chunk 0 with the hash of its bytes
//! (a block's hash is the hash of the same bytes, so a file is keyed alike in both forms).
//! Files with equal keys hold equal bytes. Two files with equal bytes usually have equal keys
//! (their chunks were written alike); when they do not (a patch left on one), they are
//! scanned twice, which costs time, never a wrong answer.
//!
//! Clones share structure, and so does the walk: a directory whose tree was walked already
//! (same tree hash, elsewhere or in another clone) is not walked again, its entries are
//! listed again under the new path (`Memo`, within `MEMO_BUDGET`); a content tree already
//! keyed is not read again.
//!
//! The listing streams: files go to the caller in batches of `BATCH_FILES` as the walk finds
//! them, each batch with the contents first seen in it, so that memory grows with the
//! distinct contents (and the memo's bound), not with the files. Files come in walk order:
//! each directory's names sorted, a subdirectory's files where its name falls (the order of
//! the paths sorted with `/` below every other byte).

use crate::clone::SNAPDIR_NAME;
use crate::delta::StoredChunk;
use crate::error::errno;
use crate::fs::{eio, make_ino, Fs, Ino};
use crate::inode::{chunk_index, chunk_key, EntryRecord, Inode, Kind};
use crate::access::{may, Caller, R, X};
use crate::FsResult;
use std::collections::HashMap;

/// Names a file's content (see the module comment).
pub type ContentKey = [u8; 32];

/// Files a batch holds before it goes to the caller.
pub const BATCH_FILES: usize = 4096;
/// Bytes the memo of walked directories may hold (names and entries); past it, a tree seen
/// again is walked again (slower, the same listing).
const MEMO_BUDGET: usize = 32 << 20;
/// Directories nest at most this deep in a scan.
const MAX_DEPTH: usize = 2048;

/// Part of what a scan found, in walk order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanBatch {
    /// The contents first seen in this batch, in order: key and size. Indexes go on from
    /// the batches before (the first batch's first content is 0).
    pub contents: Vec<(ContentKey, u64)>,
    /// Regular files: path from the mount root, and the index of its content.
    pub files: Vec<(Vec<u8>, u32)>,
    /// Directories not walked and files not keyed: the caller may not read (and search)
    /// them. Nothing else of them is listed (no key, no size), so a scan tells a user
    /// nothing about bytes they could not read themselves.
    pub denied: Vec<Vec<u8>>,
}

/// A whole scan's batches put together (`Fs::scan_contents`, for callers that want it all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanListing {
    pub contents: Vec<(ContentKey, u64)>,
    pub files: Vec<(Vec<u8>, u32)>,
    pub denied: Vec<Vec<u8>>,
}

/// An entry of a walked directory, as the memo keeps it to list the same tree again.
enum Seen {
    /// A file keyed in the directory's tree: its name and content index.
    File(Vec<u8>, u32),
    /// A file the caller may not read.
    Denied(Vec<u8>),
    /// A subdirectory, a file with several names or a clone's mount: looked up again.
    Other(Vec<u8>),
}

impl Seen {
    fn bytes(&self) -> usize {
        let (Seen::File(n, _) | Seen::Denied(n) | Seen::Other(n)) = self;
        n.len() + 40
    }
}

struct Walk<'a> {
    /// An ordinary user asks: directories they may not read and search are not walked.
    who: Option<&'a Caller>,
    /// What goes to `sink` next.
    batch: ScanBatch,
    sink: &'a mut dyn FnMut(ScanBatch) -> FsResult<()>,
    /// Content key -> its index (every content seen so far).
    index: HashMap<ContentKey, u32>,
    /// A content tree's root hash -> its file's key (clones share content trees).
    by_root: HashMap<[u8; 32], ContentKey>,
    /// A directory's tree (hash, and its namespace when hard links or clones lie below) ->
    /// its entries as its first walk saw them.
    memo: HashMap<([u8; 32], u32), Vec<Seen>>,
    memo_bytes: usize,
}

impl Walk<'_> {
    /// Lists a file, keeping contents distinct.
    fn push(&mut self, path: Vec<u8>, key: ContentKey, size: u64) -> FsResult<u32> {
        let next = self.index.len();
        let i = match self.index.get(&key) {
            Some(i) => *i,
            None => {
                let i = u32::try_from(next).map_err(|_| errno::E2BIG)?;
                self.index.insert(key, i);
                self.batch.contents.push((key, size));
                i
            }
        };
        self.batch.files.push((path, i));
        self.flush_if_full()?;
        Ok(i)
    }

    /// Lists a path the caller may not read (once, where a memo lists it again).
    fn deny(&mut self, path: Vec<u8>) -> FsResult<()> {
        if self.batch.denied.last() != Some(&path) {
            self.batch.denied.push(path);
        }
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> FsResult<()> {
        if self.batch.files.len() + self.batch.denied.len() >= BATCH_FILES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> FsResult<()> {
        let b = std::mem::take(&mut self.batch);
        if b.files.is_empty() && b.denied.is_empty() && b.contents.is_empty() {
            return Ok(());
        }
        (self.sink)(b)
    }

    /// Whether the caller may read file `i` (at `path`); if not, it is listed as denied.
    fn may_read(&mut self, i: &Inode, path: &[u8]) -> FsResult<bool> {
        match self.who {
            Some(who) if !may(who, i, R) => {
                self.deny(path.to_vec())?;
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    /// Keeps a walked directory's entries, if the budget allows.
    fn remember(&mut self, key: ([u8; 32], u32), seen: Vec<Seen>) {
        let bytes: usize = seen.iter().map(Seen::bytes).sum::<usize>() + 64;
        if self.memo_bytes + bytes <= MEMO_BUDGET {
            self.memo_bytes += bytes;
            self.memo.insert(key, seen);
        }
    }
}

impl Fs {
    /// Every regular file below the directories `roots` (each with its path from the mount
    /// root, which prefixes its files' paths), with its content's key, handed to `sink` in
    /// batches as the walk goes. With `since`, only the files that differ from the snapshot
    /// of each root given there (added, changed or of another kind; a root without one is
    /// scanned whole). With `who`, as that user would walk: directories they may not read
    /// and search, and files they may not read, are listed as denied. An error from `sink`
    /// ends the walk with it.
    pub fn scan_each(
        &mut self,
        roots: &[(Ino, Vec<u8>, Option<Ino>)],
        who: Option<&Caller>,
        sink: &mut dyn FnMut(ScanBatch) -> FsResult<()>,
    ) -> FsResult<()> {
        // What a reader of the mount sees, committed (files a checkpoint would carry too):
        // the walk then reads records only.
        for (ino, _, _) in roots {
            self.fold(*ino)?;
        }
        let mut w = Walk {
            who,
            batch: ScanBatch::default(),
            sink,
            index: HashMap::new(),
            by_root: HashMap::new(),
            memo: HashMap::new(),
            memo_bytes: 0,
        };
        for (ino, path, since) in roots {
            self.remember(*ino)?;
            let r = match since {
                None => self.scan_dir(*ino, path.clone(), &mut w, 0),
                Some(s) => self.scan_changed(*s, *ino, path, &mut w),
            };
            self.forget(*ino, 1);
            r?;
        }
        w.flush()
    }

    /// `scan_each`, its batches put together.
    pub fn scan_contents(&mut self, roots: &[(Ino, Vec<u8>, Option<Ino>)], who: Option<&Caller>) -> FsResult<ScanListing> {
        let mut all = ScanListing::default();
        self.scan_each(roots, who, &mut |b| {
            all.contents.extend(b.contents);
            all.files.extend(b.files);
            all.denied.extend(b.denied);
            Ok(())
        })?;
        Ok(all)
    }

    /// The files of `root` that differ from its snapshot `snap`.
    fn scan_changed(&mut self, snap: Ino, root: Ino, path: &[u8], w: &mut Walk) -> FsResult<()> {
        let opts = crate::diff::DiffOptions {
            recursive: true,
            no_renames: true,
            ..Default::default()
        };
        let (changes, _) = self.diff(snap, root, opts)?;
        for d in changes {
            use crate::diff::Change;
            if d.kind != Kind::File || !matches!(d.change, Change::Added | Change::Modified | Change::Type) {
                continue;
            }
            let Some(ino) = self.walk_to(root, path, &d.path, w)? else { continue };
            self.remember(ino)?;
            let i = self.inode_full(ino)?;
            self.forget(ino, 1);
            let at = join(path, &d.path);
            if w.may_read(&i, &at)? {
                let key = self.content_key(&i, w)?;
                w.push(at, key, i.size)?;
            }
        }
        Ok(())
    }

    /// The object at `rel` (names separated by `/`) below `dir` (at `path`), if any, and if
    /// the caller may read and search every directory on the way.
    fn walk_to(&mut self, dir: Ino, path: &[u8], rel: &[u8], w: &mut Walk) -> FsResult<Option<Ino>> {
        let (mut at, mut at_path) = (dir, path.to_vec());
        for name in rel.split(|&c| c == b'/').filter(|n| !n.is_empty()) {
            if !self.may_list(at, &at_path, w)? {
                return Ok(None);
            }
            match self.child(at, name)? {
                Some(c) => at = c,
                None => return Ok(None),
            }
            at_path = join(&at_path, name);
        }
        Ok(Some(at))
    }

    /// Whether the caller may read and search directory `d` (at `path`); if not, it is
    /// listed as denied.
    fn may_list(&mut self, d: Ino, path: &[u8], w: &mut Walk) -> FsResult<bool> {
        let Some(who) = w.who else { return Ok(true) };
        if self.permits(d, who, R | X)? {
            return Ok(true);
        }
        w.deny(path.to_vec())?;
        Ok(false)
    }

    fn scan_dir(&mut self, d: Ino, path: Vec<u8>, w: &mut Walk, depth: usize) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let (inode, ns, overlays) = {
            let n = self.node(d)?;
            (n.inode.clone(), n.ns, !n.entries.is_empty())
        };
        let memo = match (&inode.content, overlays) {
            (Some(c), false) => Some((c.hash, if self.shares_below(&inode)? { ns } else { 0 })),
            _ => None,
        };
        // The directory's own permissions are its parent's record, not its tree's: the same
        // tree elsewhere may be open where this one is closed. Checked before the memo.
        if !self.may_list(d, &path, w)? {
            return Ok(());
        }
        if let Some(seen) = memo.as_ref().and_then(|m| w.memo.remove(m)) {
            let r = self.list_again(d, &path, &seen, w, depth);
            w.memo.insert(memo.unwrap(), seen);
            return r;
        }
        let seen = if overlays {
            self.scan_entries_loaded(d, &path, w, depth)?
        } else {
            self.scan_entries_committed(d, &inode, ns, &path, w, depth)?
        };
        if let Some(m) = memo {
            w.remember(m, seen);
        }
        Ok(())
    }

    /// A directory whose tree was walked before, at `path`: its entries as then.
    fn list_again(&mut self, d: Ino, path: &[u8], seen: &[Seen], w: &mut Walk, depth: usize) -> FsResult<()> {
        for s in seen {
            match s {
                Seen::File(name, k) => {
                    w.batch.files.push((join(path, name), *k));
                    w.flush_if_full()?;
                }
                Seen::Denied(name) => w.deny(join(path, name))?,
                Seen::Other(name) => self.scan_child(d, name, path, w, depth)?,
            }
        }
        Ok(())
    }

    /// A directory's entries from its committed tree, in name order: files keyed from their
    /// records there, without loading them.
    fn scan_entries_committed(
        &mut self,
        d: Ino,
        dir: &Inode,
        ns: u32,
        path: &[u8],
        w: &mut Walk,
        depth: usize,
    ) -> FsResult<Vec<Seen>> {
        // (Inline records of files; None: an entry looked up through the inode table.)
        let mut entries: Vec<(Vec<u8>, Option<Inode>)> = Vec::new();
        let mut bad = None;
        self.vol
            .forest
            .scan(dir.content.as_ref(), &[], &mut |k, v| {
                match EntryRecord::from_value(v) {
                    Ok(EntryRecord::Inline(i)) if i.kind == Kind::File => entries.push((k.to_vec(), Some(i))),
                    Ok(EntryRecord::Inline(i)) if i.kind != Kind::Dir => {}
                    Ok(EntryRecord::Linked { kind, .. }) if kind != Kind::File => {}
                    Ok(_) => entries.push((k.to_vec(), None)),
                    Err(e) => bad = Some(e),
                }
                bad.is_none()
            })
            .map_err(eio)?;
        if let Some(e) = bad {
            return Err(eio(e));
        }
        let mut seen = Vec::with_capacity(entries.len());
        for (name, record) in entries {
            let Some(i) = record else {
                // Subdirectories, hard-linked files and nested clones: through the inode table.
                self.scan_child(d, &name, path, w, depth)?;
                seen.push(Seen::Other(name));
                continue;
            };
            // A file loaded with changes of its own would be seen here as committed; the
            // fold above left none.
            debug_assert!(self.nodes.get(&make_ino(ns, i.oid)).is_none_or(|n| n.chunks.is_empty()));
            let at = join(path, &name);
            if w.may_read(&i, &at)? {
                let key = self.content_key(&i, w)?;
                let k = w.push(at, key, i.size)?;
                seen.push(Seen::File(name, k));
            } else {
                seen.push(Seen::Denied(name));
            }
        }
        Ok(seen)
    }

    /// A directory's entries as loaded (a directory with changes not folded into its tree).
    fn scan_entries_loaded(&mut self, d: Ino, path: &[u8], w: &mut Walk, depth: usize) -> FsResult<Vec<Seen>> {
        let mut entries = self.readdir(d)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            if e.name != SNAPDIR_NAME && matches!(e.kind, Kind::File | Kind::Dir) {
                self.scan_child(d, &e.name, path, w, depth)?;
            }
        }
        // (Never kept: such a directory has no tree hash to find it by.)
        Ok(Vec::new())
    }

    fn scan_child(&mut self, d: Ino, name: &[u8], path: &[u8], w: &mut Walk, depth: usize) -> FsResult<()> {
        let Some(c) = self.child(d, name)? else { return Ok(()) };
        self.remember(c)?;
        let r = (|| {
            let i = self.inode_full(c)?;
            let sub = join(path, name);
            match i.kind {
                Kind::Dir => self.scan_dir(c, sub, w, depth + 1),
                Kind::File if w.may_read(&i, &sub)? => {
                    let key = self.content_key(&i, w)?;
                    w.push(sub, key, i.size).map(|_| ())
                }
                _ => Ok(()),
            }
        })();
        self.forget(c, 1);
        r
    }

    /// A file's content key, from its record and content tree (see the module comment):
    /// the hash of its size and of its chunk list.
    fn content_key(&mut self, i: &Inode, w: &mut Walk) -> FsResult<ContentKey> {
        let chunks = match (&i.content, &i.direct) {
            _ if !i.inline.is_empty() => one_chunk(blake3::hash(&i.inline).as_bytes(), &[]),
            (None, _) => one_chunk(&[0; 32], &[]),
            (Some(block), Some(p)) => one_chunk(&block.hash, &p.encode()),
            (Some(root), None) => match w.by_root.get(&root.hash) {
                Some(k) => *k,
                None => {
                    let k = self.chunk_list(root)?;
                    w.by_root.insert(root.hash, k);
                    k
                }
            },
        };
        let mut h = blake3::Hasher::new();
        h.update(b"scion content key v1");
        h.update(&i.size.to_le_bytes());
        h.update(&chunks);
        Ok(*h.finalize().as_bytes())
    }

    /// The hash of a content tree's chunk list.
    fn chunk_list(&self, root: &scion_store::BlockPtr) -> FsResult<[u8; 32]> {
        let mut h = blake3::Hasher::new();
        let mut bad = None;
        self.vol
            .forest
            .scan(Some(root), &chunk_key(0), &mut |k, v| {
                match (chunk_index(k), StoredChunk::from_value(v)) {
                    (Ok(idx), Ok(c)) => add_chunk(&mut h, idx, &c.block.hash, &overlay_bytes(&c)),
                    (Err(e), _) | (_, Err(e)) => bad = Some(e),
                }
                bad.is_none()
            })
            .map_err(eio)?;
        match bad {
            Some(e) => Err(eio(e)),
            None => Ok(*h.finalize().as_bytes()),
        }
    }
}

fn add_chunk(h: &mut blake3::Hasher, idx: u64, block: &[u8; 32], patches: &[u8]) {
    h.update(&idx.to_be_bytes());
    h.update(block);
    h.update(&(patches.len() as u64).to_le_bytes());
    h.update(patches);
}

/// The chunk list of a file with chunk 0 only (inline, direct, or empty).
fn one_chunk(block: &[u8; 32], patches: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    if block != &[0; 32] {
        add_chunk(&mut h, 0, block, patches);
    }
    *h.finalize().as_bytes()
}

/// A patch list's bytes for a key: nothing for no patches.
/// What a stored chunk lays over its block, as a content key hashes it: its patch list, or
/// its layers' places and block hashes (which name their bytes as the block's hash names its).
fn overlay_bytes(c: &StoredChunk) -> Vec<u8> {
    let mut out = c.patches.encode();
    for l in &c.layers {
        out.extend_from_slice(&l.block.hash);
        for (o, len) in &l.runs {
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
    }
    out
}

fn join(path: &[u8], name: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        name.to_vec()
    } else if name.is_empty() {
        path.to_vec()
    } else {
        [path, b"/", name].concat()
    }
}
