//! `scion diff A B`: what differs between two directories (or two files) of a store, found by
//! shared structure (Prism's smartdiff, without its walk).
//!
//! Both sides are folded first (a checkpoint if something below either is not committed), so
//! the committed trees say everything a reader of the mount sees. Then two directories whose
//! content trees have the same hash are equal without a read; otherwise `Forest::diff` of their
//! content trees yields only the names whose entries differ, skipping shared subtrees unread,
//! and each such name is compared: kind, content, metadata. Two files are equal in content
//! when their records name the same content (size, content root, inline bytes, direct chunk)
//! or when their content trees differ only in where equal blocks lie (same block hash and
//! patches per chunk), or when their chunks' logical hashes are equal (`treehash`: the same
//! bytes stored as a patched block here and a plain one there): file data is read only for
//! patched or short chunks of files that differ otherwise, and to compare a file stored
//! inline with one stored in blocks. The cost is proportional to what differs, not to the
//! trees.

use crate::access::{Caller, R, X};
use crate::clone::SNAPDIR_NAME;
use crate::delta::StoredChunk;
use crate::error::errno;
use crate::fs::{eio, Fs, Ino};
use crate::inode::{Inode, Kind};
use crate::FsResult;
use std::collections::BTreeSet;

/// Directories nest at most this deep in a diff.
const MAX_DEPTH: usize = 2048;

/// What changed at a path (the numbers are the control protocol's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Only in B.
    Added = 0,
    /// Only in A.
    Deleted = 1,
    /// Content differs (a file's bytes, a symlink's target, a device's number).
    Modified = 2,
    /// Only metadata differs: mode, owner, extended attributes (times with `times`).
    Metadata = 3,
    /// The kind differs (a file became a directory...).
    Type = 4,
    /// A file or symlink gone from `old_path` in A is at `path` in B: the same object (its
    /// id) with the same content.
    Renamed = 5,
}

impl Change {
    /// The letter of the default output.
    pub fn letter(self) -> char {
        match self {
            Change::Added => 'A',
            Change::Deleted => 'D',
            Change::Modified => 'M',
            Change::Metadata => 'm',
            Change::Type => 'T',
            Change::Renamed => 'R',
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Deleted => "deleted",
            Change::Modified => "modified",
            Change::Metadata => "metadata",
            Change::Type => "type",
            Change::Renamed => "renamed",
        }
    }
}

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub change: Change,
    /// Relative to A and B (empty: A and B themselves); for a rename, the path in B.
    pub path: Vec<u8>,
    /// For a rename, the path in A.
    pub old_path: Option<Vec<u8>>,
    /// The kind in B (in A for a deletion).
    pub kind: Kind,
    /// Sizes in A and B (0 where absent).
    pub old_size: u64,
    pub new_size: u64,
}

/// How to compare.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffOptions {
    /// Compare modification times too.
    pub times: bool,
    /// List everything inside an added or deleted directory, not just the directory.
    pub recursive: bool,
    /// Report a file deleted in one place and added in another as deleted and added, not
    /// as renamed.
    pub no_renames: bool,
}

/// Counters of the work a diff did (for tests and `--stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffWork {
    /// Directory pairs whose entries were compared.
    pub dirs_compared: u64,
    /// Directory pairs found equal by their content tree's hash alone.
    pub dirs_skipped: u64,
    /// Files whose data was read (inline against block representation only).
    pub files_read: u64,
}

struct Walk<'a> {
    /// An ordinary user asks: every directory listed and file read must be theirs to read,
    /// as `diff -r` would need (EACCES names the first that is not).
    who: Option<&'a Caller>,
    opts: DiffOptions,
    out: Vec<Difference>,
    work: DiffWork,
    /// Files and symlinks added or deleted, by index into `out`: their object id and
    /// content, for rename detection.
    moved: Vec<(usize, u64, Vec<u8>)>,
}

impl Fs {
    /// The differences between `a` and `b` (directories or files), sorted by path.
    pub fn diff(&mut self, a: Ino, b: Ino, opts: DiffOptions) -> FsResult<(Vec<Difference>, DiffWork)> {
        self.diff_as(a, b, opts, None)
    }

    /// `diff` for ordinary user `who` if given: refused (EACCES, naming the path) where
    /// `diff -r` run by them would fail: a directory compared or listed that they may not
    /// read and search, and a file compared by content that they may not read (unless both
    /// sides name the same stored content). A subtree both sides share is not looked into:
    /// nothing in it is read or shown.
    pub fn diff_as(
        &mut self,
        a: Ino,
        b: Ino,
        opts: DiffOptions,
        who: Option<&Caller>,
    ) -> FsResult<(Vec<Difference>, DiffWork)> {
        for x in [a, b] {
            if self.node(x)?.inode.kind == Kind::Dir {
                self.fold(x)?;
            } else {
                // A file's own changes: fold everything (cheap when nothing is pending).
                self.checkpoint().map_err(eio)?;
            }
        }
        let mut w = Walk {
            who,
            opts,
            out: Vec::new(),
            work: DiffWork::default(),
            moved: Vec::new(),
        };
        // Held while compared: a checkpoint could otherwise drop them.
        self.remember(a)?;
        self.remember(b)?;
        let r = self.compare(a, b, Vec::new(), &mut w, 0);
        self.forget(a, 1);
        self.forget(b, 1);
        r?;
        if !opts.no_renames {
            pair_renames(&mut w);
        }
        w.out.sort_by(|x, y| x.path.cmp(&y.path));
        Ok((w.out, w.work))
    }

    fn compare(&mut self, a: Ino, b: Ino, path: Vec<u8>, w: &mut Walk, depth: usize) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let (x, y) = (self.inode_full(a)?, self.inode_full(b)?);
        let entry = |change, kind| Difference {
            change,
            old_path: None,
            path: path.clone(),
            kind,
            old_size: size_of(&x),
            new_size: size_of(&y),
        };
        if x.kind != y.kind {
            w.out.push(entry(Change::Type, y.kind));
            return Ok(());
        }
        if x.kind == Kind::Dir {
            self.may(a, &path, R | X, w)?;
            self.may(b, &path, R | X, w)?;
            if !same_meta(&x, &y, w.opts.times) {
                w.out.push(entry(Change::Metadata, Kind::Dir));
            }
            return self.compare_dirs(a, b, &x, &y, &path, w, depth);
        }
        let shared = x.content.is_some() && x.content == y.content && x.direct == y.direct;
        if x.kind == Kind::File && !shared && !(x.inline.is_empty() && x.content.is_none() && y.inline.is_empty() && y.content.is_none()) {
            self.may(a, &path, R, w)?;
            self.may(b, &path, R, w)?;
        }
        if !self.same_content(a, b, &x, &y, w)? {
            w.out.push(entry(Change::Modified, y.kind));
        } else if !same_meta(&x, &y, w.opts.times) {
            w.out.push(entry(Change::Metadata, y.kind));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn compare_dirs(
        &mut self,
        a: Ino,
        b: Ino,
        x: &Inode,
        y: &Inode,
        path: &[u8],
        w: &mut Walk,
        depth: usize,
    ) -> FsResult<()> {
        let overlays = !self.node(a)?.entries.is_empty() || !self.node(b)?.entries.is_empty();
        // Across namespaces, equal trees may still differ below in what each namespace keeps
        // apart: hard-linked files' records and nested clones' files. Such directories are
        // compared name by name.
        let apart = self.node(a)?.ns != self.node(b)?.ns && (self.shares_below(x)? || self.shares_below(y)?);
        if !overlays && !apart && x.content.map(|p| p.hash) == y.content.map(|p| p.hash) {
            w.work.dirs_skipped += 1;
            return Ok(());
        }
        w.work.dirs_compared += 1;
        let mut names = BTreeSet::new();
        if apart {
            for d in [a, b] {
                names.extend(self.readdir(d)?.into_iter().map(|e| e.name));
            }
        }
        self.vol
            .forest
            .diff(x.content.as_ref(), y.content.as_ref(), &mut |k, _, _| {
                names.insert(k.to_vec());
                true
            })
            .map_err(eio)?;
        // What a fold left in memory, if anything: compared too.
        names.extend(self.node(a)?.entries.keys().cloned());
        names.extend(self.node(b)?.entries.keys().cloned());
        names.remove(SNAPDIR_NAME);
        for name in names {
            let sub = if path.is_empty() { name.clone() } else { [path, b"/", &name].concat() };
            match (self.child(a, &name)?, self.child(b, &name)?) {
                (None, None) => {}
                (Some(ca), Some(cb)) => {
                    self.remember(ca)?;
                    self.remember(cb)?;
                    let r = self.compare(ca, cb, sub, w, depth + 1);
                    self.forget(ca, 1);
                    self.forget(cb, 1);
                    r?;
                }
                (Some(ca), None) => self.one_side(ca, sub, Change::Deleted, w, depth)?,
                (None, Some(cb)) => self.one_side(cb, sub, Change::Added, w, depth)?,
            }
        }
        Ok(())
    }

    /// Refuses (EACCES, naming `path`) unless the caller, if an ordinary user, has `bits` on
    /// `ino`.
    fn may(&self, ino: Ino, path: &[u8], bits: u16, w: &Walk) -> FsResult<()> {
        match w.who {
            Some(c) if !self.permits(ino, c, bits)? => {
                let what = if bits & X != 0 { "read and search" } else { "read" };
                let at = if path.is_empty() { "a directory compared".into() } else { String::from_utf8_lossy(path).into_owned() };
                Err(errno::EACCES.with(format!("{at}: you may not {what} it")))
            }
            _ => Ok(()),
        }
    }

    /// Whether a hard-linked file or a nested clone lies below directory `d` (its subtree
    /// summary has an `L` or `M` key): what a directory's tree does not hold itself.
    pub(crate) fn shares_below(&self, d: &Inode) -> FsResult<bool> {
        let mut found = false;
        let mut bad = None;
        self.vol
            .forest
            .scan(d.summary.as_ref(), &[], &mut |k, _| {
                match crate::inode::summary_key_parts(k) {
                    Ok((tag, _)) => found = tag == b'L' || tag == b'M',
                    Err(e) => bad = Some(e),
                }
                !found && bad.is_none()
            })
            .map_err(eio)?;
        match bad {
            Some(e) => Err(eio(e)),
            None => Ok(found),
        }
    }

    /// An entry on one side only: one line, and with `recursive` one per entry inside.
    fn one_side(&mut self, ino: Ino, path: Vec<u8>, change: Change, w: &mut Walk, depth: usize) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let i = self.inode_full(ino)?;
        let (old_size, new_size) = if change == Change::Added { (0, size_of(&i)) } else { (size_of(&i), 0) };
        if i.kind == Kind::File || i.kind == Kind::Symlink {
            w.moved.push((w.out.len(), i.oid, content_key(&i)));
        }
        w.out.push(Difference {
            change,
            old_path: None,
            path: path.clone(),
            kind: i.kind,
            old_size,
            new_size,
        });
        if i.kind != Kind::Dir || !w.opts.recursive {
            return Ok(());
        }
        self.may(ino, &path, R | X, w)?;
        self.remember(ino)?;
        let r = (|| {
            for e in self.readdir(ino)? {
                if e.name == SNAPDIR_NAME {
                    continue;
                }
                let Some(c) = self.child(ino, &e.name)? else { continue };
                self.remember(c)?;
                let r = self.one_side(c, [&path[..], b"/", &e.name].concat(), change, w, depth + 1);
                self.forget(c, 1);
                r?;
            }
            Ok(())
        })();
        self.forget(ino, 1);
        r
    }

    /// Whether two files, symlinks or special files hold the same content, from their records
    /// and content trees (see the module comment).
    fn same_content(&mut self, a: Ino, b: Ino, x: &Inode, y: &Inode, w: &mut Walk) -> FsResult<bool> {
        match x.kind {
            Kind::Symlink => return Ok(x.target == y.target),
            Kind::File => {}
            _ => return Ok(x.rdev == y.rdev),
        }
        if x.size != y.size {
            return Ok(false);
        }
        let pending = !self.node(a)?.chunks.is_empty() || !self.node(b)?.chunks.is_empty();
        let same_form = x.inline.is_empty() == y.inline.is_empty() && x.direct.is_some() == y.direct.is_some();
        if !pending && same_form {
            if !x.inline.is_empty() {
                return Ok(x.inline == y.inline);
            }
            let same_root = x.content.map(|c| c.hash) == y.content.map(|c| c.hash);
            if let (Some(p), Some(q)) = (&x.direct, &y.direct) {
                if same_root && p == q {
                    return Ok(true);
                }
            } else if same_root || self.same_chunks(x, y)? {
                return Ok(true);
            }
            // Equal bytes may be stored differently (a patch laid over a block here, the
            // whole chunk rewritten there): compare the chunks' logical hashes, which read
            // only patched and short chunks.
            return Ok(self.logical_chunks(x)? == self.logical_chunks(y)?);
        }
        // Stored in different forms (or not folded): compare the bytes.
        w.work.files_read += 1;
        Ok(self.read_exact(a, 0, x.size)? == self.read_exact(b, 0, y.size)?)
    }

    /// Two content trees whose chunks differ only in where equal blocks lie.
    fn same_chunks(&mut self, x: &Inode, y: &Inode) -> FsResult<bool> {
        let mut same = true;
        let mut bad = None;
        self.vol
            .forest
            .diff(x.content.as_ref(), y.content.as_ref(), &mut |_, old, new| {
                let (Some(old), Some(new)) = (old, new) else {
                    same = false;
                    return false;
                };
                match (StoredChunk::from_value(old), StoredChunk::from_value(new)) {
                    (Ok(p), Ok(q)) => same = p.block.hash == q.block.hash && p.patches == q.patches,
                    (Err(e), _) | (_, Err(e)) => bad = Some(e),
                }
                same && bad.is_none()
            })
            .map_err(eio)?;
        if let Some(e) = bad {
            return Err(eio(e));
        }
        Ok(same)
    }

}

/// Turns a deletion and an addition of the same object with the same content into a rename.
/// An object id alone could be two files (a clone and its source both number new files from
/// where they parted), so the content must match too: exactly, as git's exact renames do.
fn pair_renames(w: &mut Walk) {
    use std::collections::HashMap;
    let mut added: HashMap<(u64, &[u8]), Vec<usize>> = HashMap::new();
    for (i, oid, key) in &w.moved {
        if w.out[*i].change == Change::Added {
            added.entry((*oid, key.as_slice())).or_default().push(*i);
        }
    }
    let mut pairs = Vec::new();
    for (i, oid, key) in &w.moved {
        if w.out[*i].change != Change::Deleted {
            continue;
        }
        // Only a one-to-one match is a rename; several copies stay additions.
        if let Some(v) = added.get(&(*oid, key.as_slice())) {
            if v.len() == 1 {
                pairs.push((*i, v[0]));
            }
        }
    }
    let mut gone = vec![false; w.out.len()];
    for (del, add) in pairs {
        let old_path = std::mem::take(&mut w.out[del].path);
        let d = &mut w.out[add];
        d.change = Change::Renamed;
        d.old_size = d.new_size;
        d.old_path = Some(old_path);
        gone[del] = true;
    }
    let mut k = 0;
    w.out.retain(|_| {
        k += 1;
        !gone[k - 1]
    });
}

/// What identifies a file's or symlink's content in its record: kind, size, the content
/// root's hash, the inline bytes, the direct chunk's patches, the symlink's target.
fn content_key(i: &Inode) -> Vec<u8> {
    let mut k = vec![i.kind as u8];
    k.extend_from_slice(&i.size.to_le_bytes());
    k.extend_from_slice(i.content.map(|c| c.hash).unwrap_or_default().as_slice());
    k.extend_from_slice(blake3::hash(&i.inline).as_bytes());
    if let Some(p) = &i.direct {
        k.extend_from_slice(blake3::hash(&p.encode()).as_bytes());
    }
    k.extend_from_slice(&i.target);
    k
}

/// The size `stat` shows (a symlink's is its target's length).
fn size_of(i: &Inode) -> u64 {
    if i.kind == Kind::Symlink {
        i.target.len() as u64
    } else {
        i.size
    }
}

/// Mode, owner, extended attributes, and the modification time with `times`.
fn same_meta(x: &Inode, y: &Inode, times: bool) -> bool {
    x.perm == y.perm && x.uid == y.uid && x.gid == y.gid && x.xattrs == y.xattrs && (!times || x.mtime == y.mtime)
}
