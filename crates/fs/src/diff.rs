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
//!
//! Changes stream (`Fs::diff_each`): they are handed on in batches in walk order (each
//! directory's names sorted, a subdirectory's entries where its name falls: the paths sorted
//! with `/` below every other byte, `walk_cmp`). Only the files and symlinks added or deleted
//! are held back, for rename pairing, which needs both sides whole; they follow the walk as
//! a second run, also in walk order, which a reader merges with the first (`Merged`). With
//! `no_renames` nothing is held.

use crate::access::{Caller, R, X};
use crate::clone::SNAPDIR_NAME;
use crate::delta::StoredChunk;
use crate::error::errno;
use crate::fs::{eio, Fs, Ino};
use crate::inode::{Inode, Kind};
use crate::FsResult;
use std::cmp::Ordering;
use std::collections::BTreeSet;

/// Directories nest at most this deep in a diff.
const MAX_DEPTH: usize = 2048;

/// Changes handed on at a time.
pub const BATCH: usize = 4096;

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

/// The two runs of a diff's changes, each in walk order (`walk_cmp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// Found by the walk and handed on at once.
    Walk,
    /// Files and symlinks added or deleted, held for rename pairing and handed on after the
    /// walk: renames (at their new path) and what found no partner.
    Held,
}

/// Where a diff's changes go, a batch at a time; an error ends the walk with it.
pub type DiffSink<'s> = dyn FnMut(Run, Vec<Difference>) -> FsResult<()> + 's;

/// Files and symlinks added or deleted (each may be half a rename), held compactly until the
/// walk has seen both sides: per change its object id, 16 bytes of its content key's hash,
/// sizes and kind (56 bytes), its path in one arena. The walk finds them in walk order, so
/// they are kept in it.
#[derive(Default)]
struct Held {
    entries: Vec<HeldEntry>,
    paths: Vec<u8>,
}

struct HeldEntry {
    oid: u64,
    key: [u8; 16],
    /// Where its path ends in `paths` (it begins where the one before ends).
    end: u64,
    old_size: u64,
    new_size: u64,
    change: Change,
    kind: Kind,
}

impl Held {
    fn push(&mut self, d: Difference, oid: u64, key: [u8; 32]) {
        debug_assert!(d.old_path.is_none());
        // Invariant: held changes come in walk order.
        debug_assert!(self.entries.is_empty() || walk_cmp(self.path(self.entries.len() - 1), &d.path).is_lt());
        self.paths.extend_from_slice(&d.path);
        self.entries.push(HeldEntry {
            oid,
            key: key[..16].try_into().expect("16 of 32 bytes"),
            end: self.paths.len() as u64,
            old_size: d.old_size,
            new_size: d.new_size,
            change: d.change,
            kind: d.kind,
        });
    }

    fn path(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.entries[i - 1].end as usize };
        &self.paths[start..self.entries[i].end as usize]
    }

    fn difference(&self, i: usize) -> Difference {
        let e = &self.entries[i];
        Difference {
            change: e.change,
            path: self.path(i).to_vec(),
            old_path: None,
            kind: e.kind,
            old_size: e.old_size,
            new_size: e.new_size,
        }
    }

    /// The renames among them: (addition, deletion) by index. A deletion and an addition of
    /// the same object with the same content are a rename; an object id alone could be two
    /// files (a clone and its source both number new files from where they parted), so the
    /// content must match too: exactly, as git's exact renames do. Only a one-to-one match is
    /// a rename: several copies stay additions, several names deleted stay deletions.
    fn renames(&self) -> std::collections::HashMap<u32, u32> {
        let n = self.entries.len();
        assert!(n <= u32::MAX as usize, "more than 2^32 changes held");
        let mut order: Vec<u32> = (0..n as u32).collect();
        let id = |i: &u32| {
            let e = &self.entries[*i as usize];
            (e.oid, e.key)
        };
        order.sort_unstable_by_key(id);
        let mut pairs = std::collections::HashMap::new();
        for same in order.chunk_by(|x, y| id(x) == id(y)) {
            if let [x, y] = same {
                let del = |i: &u32| self.entries[*i as usize].change == Change::Deleted;
                match (del(x), del(y)) {
                    (true, false) => pairs.insert(*y, *x),
                    (false, true) => pairs.insert(*x, *y),
                    _ => None,
                };
            }
        }
        pairs
    }
}

struct Walk<'a, 's> {
    /// An ordinary user asks: every directory listed and file read must be theirs to read,
    /// as `diff -r` would need (EACCES names the first that is not).
    who: Option<&'a Caller>,
    opts: DiffOptions,
    work: DiffWork,
    /// Changes found and not yet handed on (fewer than `BATCH`).
    batch: Vec<Difference>,
    sink: &'a mut DiffSink<'s>,
    /// Files and symlinks added or deleted (with renames detected).
    held: Held,
}

impl Walk<'_, '_> {
    /// A change found; `who` is the object id and content of a file or symlink on one side
    /// only, which may be half a rename.
    fn found(&mut self, d: Difference, who: Option<(u64, [u8; 32])>) -> FsResult<()> {
        if let (Some((oid, key)), false) = (who, self.opts.no_renames) {
            self.held.push(d, oid, key);
            return Ok(());
        }
        // Invariant: the walk finds changes in walk order.
        debug_assert!(self.batch.last().is_none_or(|p| walk_cmp(&p.path, &d.path) == Ordering::Less));
        self.batch.push(d);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> FsResult<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        (self.sink)(Run::Walk, std::mem::take(&mut self.batch))
    }

    /// After the walk: what is held, paired into renames, in walk order, in batches.
    fn finish(mut self) -> FsResult<DiffWork> {
        self.flush()?;
        let held = std::mem::take(&mut self.held);
        let renames = held.renames();
        let gone: std::collections::HashSet<u32> = renames.values().copied().collect();
        let mut batch = Vec::new();
        for i in 0..held.entries.len() {
            if gone.contains(&(i as u32)) {
                continue;
            }
            let mut d = held.difference(i);
            if let Some(&del) = renames.get(&(i as u32)) {
                d.change = Change::Renamed;
                d.old_size = d.new_size;
                d.old_path = Some(held.path(del as usize).to_vec());
            }
            batch.push(d);
            if batch.len() == BATCH {
                (self.sink)(Run::Held, std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            (self.sink)(Run::Held, batch)?;
        }
        Ok(self.work)
    }
}

/// The order of a diff's (and a scan's) walk: paths compared byte by byte with `/` below
/// every other byte, so a directory's entries come right after it and before its next
/// sibling (`a`, `a/z`, `a.b`).
pub fn walk_cmp(x: &[u8], y: &[u8]) -> Ordering {
    let rank = |b: &u8| if *b == b'/' { 0u16 } else { u16::from(*b) + 1 };
    x.iter().map(rank).cmp(y.iter().map(rank))
}

/// A sink that gathers both runs of a diff (`take`) and merges them at the end.
#[derive(Default)]
pub struct Gather {
    walk: Vec<Difference>,
    held: Vec<Difference>,
}

impl Gather {
    pub fn take(&mut self, run: Run, v: Vec<Difference>) -> FsResult<()> {
        match run {
            Run::Walk => self.walk.extend(v),
            Run::Held => self.held.extend(v),
        }
        Ok(())
    }

    /// Every change, in walk order.
    pub fn changes(self) -> Vec<Difference> {
        Merged::new(self.walk.into_iter(), self.held.into_iter()).collect()
    }
}

/// The two runs of a diff merged into one sequence in walk order.
pub struct Merged<I: Iterator<Item = Difference>, J: Iterator<Item = Difference>> {
    walk: std::iter::Peekable<I>,
    held: std::iter::Peekable<J>,
}

impl<I: Iterator<Item = Difference>, J: Iterator<Item = Difference>> Merged<I, J> {
    pub fn new(walk: I, held: J) -> Self {
        Merged {
            walk: walk.peekable(),
            held: held.peekable(),
        }
    }
}

impl<I: Iterator<Item = Difference>, J: Iterator<Item = Difference>> Iterator for Merged<I, J> {
    type Item = Difference;
    fn next(&mut self) -> Option<Difference> {
        let first = match (self.walk.peek(), self.held.peek()) {
            (Some(a), Some(b)) => walk_cmp(&a.path, &b.path) != Ordering::Greater,
            (Some(_), None) => true,
            _ => false,
        };
        if first {
            self.walk.next()
        } else {
            self.held.next()
        }
    }
}

impl Fs {
    /// The differences between `a` and `b` (directories or files), in walk order.
    pub fn diff(&mut self, a: Ino, b: Ino, opts: DiffOptions) -> FsResult<(Vec<Difference>, DiffWork)> {
        self.diff_as(a, b, opts, None)
    }

    /// `diff_each`, gathered: every change, in walk order.
    pub fn diff_as(
        &mut self,
        a: Ino,
        b: Ino,
        opts: DiffOptions,
        who: Option<&Caller>,
    ) -> FsResult<(Vec<Difference>, DiffWork)> {
        let mut all = Gather::default();
        let work = self.diff_each(a, b, opts, who, &mut |run, v| all.take(run, v))?;
        Ok((all.changes(), work))
    }

    /// `diff` for ordinary user `who` if given: refused (EACCES, naming the path) where
    /// `diff -r` run by them would fail: a directory compared or listed that they may not
    /// read and search, and a file compared by content that they may not read (unless both
    /// sides name the same stored content). A subtree both sides share is not looked into:
    /// nothing in it is read or shown. The changes go to `sink` in batches, in two runs
    /// (`Run`), as the module comment says.
    pub fn diff_each(
        &mut self,
        a: Ino,
        b: Ino,
        opts: DiffOptions,
        who: Option<&Caller>,
        sink: &mut DiffSink<'_>,
    ) -> FsResult<DiffWork> {
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
            work: DiffWork::default(),
            batch: Vec::new(),
            sink,
            held: Held::default(),
        };
        // Held while compared: a checkpoint could otherwise drop them.
        self.remember(a)?;
        self.remember(b)?;
        let r = self.compare(a, b, Vec::new(), &mut w, 0);
        self.forget(a, 1);
        self.forget(b, 1);
        r?;
        w.finish()
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
            return w.found(entry(Change::Type, y.kind), None);
        }
        if x.kind == Kind::Dir {
            self.may(a, &path, R | X, w)?;
            self.may(b, &path, R | X, w)?;
            if !same_meta(&x, &y, w.opts.times) {
                w.found(entry(Change::Metadata, Kind::Dir), None)?;
            }
            return self.compare_dirs(a, b, &x, &y, &path, w, depth);
        }
        let shared = x.content.is_some() && x.content == y.content && x.direct == y.direct;
        if x.kind == Kind::File && !shared && !(x.inline.is_empty() && x.content.is_none() && y.inline.is_empty() && y.content.is_none()) {
            self.may(a, &path, R, w)?;
            self.may(b, &path, R, w)?;
        }
        if !self.same_content(a, b, &x, &y, w)? {
            w.found(entry(Change::Modified, y.kind), None)?;
        } else if !same_meta(&x, &y, w.opts.times) {
            w.found(entry(Change::Metadata, y.kind), None)?;
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
                // (Remembered and forgotten, as above, so that a file loaded only for this
                // is unloaded again: a diff's memory must not grow with what it walks.)
                (Some(ca), None) => self.one_side_held(ca, sub, Change::Deleted, w, depth)?,
                (None, Some(cb)) => self.one_side_held(cb, sub, Change::Added, w, depth)?,
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

    /// `one_side` of `ino` held (remembered) while it runs.
    fn one_side_held(&mut self, ino: Ino, path: Vec<u8>, change: Change, w: &mut Walk, depth: usize) -> FsResult<()> {
        self.remember(ino)?;
        let r = self.one_side(ino, path, change, w, depth);
        self.forget(ino, 1);
        r
    }

    /// An entry on one side only: one line, and with `recursive` one per entry inside.
    fn one_side(&mut self, ino: Ino, path: Vec<u8>, change: Change, w: &mut Walk, depth: usize) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let i = self.inode_full(ino)?;
        let (old_size, new_size) = if change == Change::Added { (0, size_of(&i)) } else { (size_of(&i), 0) };
        let half = (i.kind == Kind::File || i.kind == Kind::Symlink).then(|| (i.oid, content_key(&i)));
        let d = Difference {
            change,
            old_path: None,
            path: path.clone(),
            kind: i.kind,
            old_size,
            new_size,
        };
        w.found(d, half)?;
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
                self.one_side_held(c, [&path[..], b"/", &e.name].concat(), change, w, depth + 1)?;
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
                    (Ok(p), Ok(q)) => {
                        let layers = |c: &StoredChunk| c.layers.iter().map(|l| (l.block.hash, l.runs.clone())).collect::<Vec<_>>();
                        same = p.block.hash == q.block.hash && p.patches == q.patches && layers(&p) == layers(&q)
                    }
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

/// What identifies a file's or symlink's content in its record: kind, size, the content
/// root's hash, the inline bytes, the direct chunk's patches, the symlink's target.
fn content_key(i: &Inode) -> [u8; 32] {
    let mut k = vec![i.kind as u8];
    k.extend_from_slice(&i.size.to_le_bytes());
    k.extend_from_slice(i.content.map(|c| c.hash).unwrap_or_default().as_slice());
    k.extend_from_slice(blake3::hash(&i.inline).as_bytes());
    if let Some(p) = &i.direct {
        k.extend_from_slice(blake3::hash(&p.encode()).as_bytes());
    }
    k.extend_from_slice(&i.target);
    *blake3::hash(&k).as_bytes()
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
