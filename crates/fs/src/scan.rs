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
//! (same tree hash, elsewhere or in another clone) is not walked again, its files are listed
//! again under the new path; a content tree already keyed is not read again.

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

/// Most files one scan lists.
pub const MAX_FILES: usize = 1 << 24;
/// Directories nest at most this deep in a scan.
const MAX_DEPTH: usize = 2048;

/// What a scan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanListing {
    /// The distinct contents, in order of first appearance: key and size.
    pub contents: Vec<(ContentKey, u64)>,
    /// Every regular file: its path from the mount root, and its content's index in
    /// `contents`.
    pub files: Vec<(Vec<u8>, u32)>,
    /// Directories not walked and files not keyed: the caller may not read (and search)
    /// them. Nothing else of them is listed (no key, no size), so a scan tells a user
    /// nothing about bytes they could not read themselves.
    pub denied: Vec<Vec<u8>>,
}

/// In `Walk::out.files` while walking, a directory the caller may not list or a file they
/// may not read (so that a directory listed again from its first walk lists its refusals
/// again too).
const DENIED: u32 = u32::MAX;

impl ScanListing {
    /// Adds a file, keeping `contents` distinct.
    fn push(&mut self, index: &mut HashMap<ContentKey, u32>, path: Vec<u8>, key: ContentKey, size: u64) -> FsResult<()> {
        if self.files.len() >= MAX_FILES {
            return Err(errno::E2BIG);
        }
        let i = *index.entry(key).or_insert_with(|| {
            self.contents.push((key, size));
            (self.contents.len() - 1) as u32
        });
        self.files.push((path, i));
        Ok(())
    }
}

struct Walk<'a> {
    /// An ordinary user asks: directories they may not read and search are not walked.
    who: Option<&'a Caller>,
    out: ScanListing,
    index: HashMap<ContentKey, u32>,
    /// A content tree's root hash -> its file's key (clones share content trees).
    by_root: HashMap<[u8; 32], ContentKey>,
    /// A directory's tree (hash, and its namespace when hard links or clones lie below) ->
    /// the files its first walk listed (`out.files[start..end]`) and its path's length then.
    dirs: HashMap<([u8; 32], u32), (usize, usize, usize)>,
}

impl Walk<'_> {
    /// Whether the caller may read file `i` (at `path`); if not, it is listed as denied.
    fn may_read(&mut self, i: &Inode, path: &[u8]) -> bool {
        match self.who {
            Some(who) if !may(who, i, R) => {
                self.out.files.push((path.to_vec(), DENIED));
                false
            }
            _ => true,
        }
    }
}

impl Fs {
    /// Every regular file below the directories `roots` (each with its path from the mount
    /// root, which prefixes its files' paths), with its content's key. With `since`, only
    /// the files that differ from the snapshot of each root given there (added, changed or
    /// of another kind; a root without one is scanned whole). With `who`, as that user
    /// would walk: directories they may not read and search, and files they may not read,
    /// are listed as denied.
    pub fn scan_contents(&mut self, roots: &[(Ino, Vec<u8>, Option<Ino>)], who: Option<&Caller>) -> FsResult<ScanListing> {
        // What a reader of the mount sees, committed (files a checkpoint would carry too):
        // the walk then reads records only.
        for (ino, _, _) in roots {
            self.fold(*ino)?;
        }
        let mut w = Walk {
            who,
            out: ScanListing::default(),
            index: HashMap::new(),
            by_root: HashMap::new(),
            dirs: HashMap::new(),
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
        let mut out = w.out;
        let (denied, files): (Vec<_>, Vec<_>) = out.files.into_iter().partition(|(_, k)| *k == DENIED);
        out.files = files;
        out.denied = denied.into_iter().map(|(p, _)| p).collect();
        out.denied.dedup();
        Ok(out)
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
            if w.may_read(&i, &at) {
                let key = self.content_key(&i, w)?;
                w.out.push(&mut w.index, at, key, i.size)?;
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
        if w.out.files.last().map(|(p, k)| (&p[..], *k)) != Some((path, DENIED)) {
            w.out.files.push((path.to_vec(), DENIED));
        }
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
        if let Some(&(start, end, len)) = memo.as_ref().and_then(|m| w.dirs.get(m)) {
            for i in start..end {
                let (p, k) = &w.out.files[i];
                let again = [&path[..], &p[len..]].concat();
                if *k == DENIED {
                    w.out.files.push((again, DENIED));
                    continue;
                }
                let (key, size) = w.out.contents[*k as usize];
                w.out.push(&mut w.index, again, key, size)?;
            }
            return Ok(());
        }
        let start = w.out.files.len();
        if overlays {
            self.scan_entries_loaded(d, &path, w, depth)?;
        } else {
            self.scan_entries_committed(d, &inode, ns, &path, w, depth)?;
        }
        if let Some(m) = memo {
            w.dirs.insert(m, (start, w.out.files.len(), path.len()));
        }
        Ok(())
    }

    /// A directory's entries from its committed tree: files keyed from their records there,
    /// without loading them.
    fn scan_entries_committed(
        &mut self,
        d: Ino,
        dir: &Inode,
        ns: u32,
        path: &[u8],
        w: &mut Walk,
        depth: usize,
    ) -> FsResult<()> {
        let mut files = Vec::new();
        let mut others = Vec::new();
        let mut bad = None;
        self.vol
            .forest
            .scan(dir.content.as_ref(), &[], &mut |k, v| {
                match EntryRecord::from_value(v) {
                    Ok(EntryRecord::Inline(i)) if i.kind == Kind::File => files.push((k.to_vec(), i)),
                    Ok(EntryRecord::Inline(i)) if i.kind != Kind::Dir => {}
                    Ok(EntryRecord::Linked { kind, .. }) if kind != Kind::File => {}
                    Ok(_) => others.push(k.to_vec()),
                    Err(e) => bad = Some(e),
                }
                bad.is_none()
            })
            .map_err(eio)?;
        if let Some(e) = bad {
            return Err(eio(e));
        }
        for (name, i) in files {
            // A file loaded with changes of its own would be seen here as committed; the
            // fold above left none.
            debug_assert!(self.nodes.get(&make_ino(ns, i.oid)).is_none_or(|n| n.chunks.is_empty()));
            let at = join(path, &name);
            if w.may_read(&i, &at) {
                let key = self.content_key(&i, w)?;
                w.out.push(&mut w.index, at, key, i.size)?;
            }
        }
        // Subdirectories, hard-linked files and nested clones: through the inode table.
        for name in others {
            self.scan_child(d, &name, path, w, depth)?;
        }
        Ok(())
    }

    /// A directory's entries as loaded (a directory with changes not folded into its tree).
    fn scan_entries_loaded(&mut self, d: Ino, path: &[u8], w: &mut Walk, depth: usize) -> FsResult<()> {
        for e in self.readdir(d)? {
            if e.name != SNAPDIR_NAME && matches!(e.kind, Kind::File | Kind::Dir) {
                self.scan_child(d, &e.name, path, w, depth)?;
            }
        }
        Ok(())
    }

    fn scan_child(&mut self, d: Ino, name: &[u8], path: &[u8], w: &mut Walk, depth: usize) -> FsResult<()> {
        let Some(c) = self.child(d, name)? else { return Ok(()) };
        self.remember(c)?;
        let r = (|| {
            let i = self.inode_full(c)?;
            let sub = join(path, name);
            match i.kind {
                Kind::Dir => self.scan_dir(c, sub, w, depth + 1),
                Kind::File if w.may_read(&i, &sub) => {
                    let key = self.content_key(&i, w)?;
                    w.out.push(&mut w.index, sub, key, i.size)
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
            (Some(block), Some(p)) => one_chunk(&block.hash, &patch_bytes(p)),
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
                    (Ok(idx), Ok(c)) => add_chunk(&mut h, idx, &c.block.hash, &patch_bytes(&c.patches)),
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
fn patch_bytes(p: &crate::delta::Patches) -> Vec<u8> {
    if p.is_empty() {
        Vec::new()
    } else {
        p.encode()
    }
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
