//! `scion send`'s engine half (issue 20): the stream of a snapshot, whole or what changed
//! from a base, made in the daemon from records and blocks (no round trip through the kernel
//! per file) and handed out in pieces as it is made (`crate::stream` says the format).
//!
//! It is made from a view of the committed state (`Engine::view`), which nothing changes:
//! the engine lock is taken only to take the view and give it back, and the mount goes on
//! meanwhile. The view's own lock is taken per step (an entry, or a megabyte of a file). What changed is `diff BASE SNAP`;
//! a changed file sends only its changed chunks (`Fs::chunk_changes`: a small write as its
//! patch), a moved file a copy of the base's, deletions first, directories' metadata last
//! (writing in a directory changes its mtime), deepest first.

use crate::control::{show, Failure, SendDedup};
use crate::Engine;
use scion_fs::diff::{Change, DiffOptions, Difference};
use scion_fs::stream::{Frame, Meta, StreamWriter, DATA_MAX};
use scion_fs::treehash::{ChunkChange, TreeHash};
use scion_fs::{Fs, Ino, Kind};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::sync::Mutex;

const CHUNK: u64 = 64 << 10;

/// What to send.
pub struct SendRequest<'a> {
    /// The snapshot (a path from the mount root).
    pub snap: &'a [u8],
    pub base: Option<&'a [u8]>,
    /// Go on from frame `from` where the chain hash is `chain` (a resumed stream).
    pub resume: Option<(u64, [u8; 32])>,
    /// Blocks the receiver holds, named instead of sent; or only the offer of them.
    pub dedup: &'a SendDedup,
}

/// What `Sender::data` does with a chunk one block holds exactly (`Fs::plain_block`).
enum Dedup {
    Off,
    /// Only the offer is made: each such block's hash, once, in the order met.
    Offer { seen: HashSet<[u8; 32]>, order: Vec<[u8; 32]> },
    /// Those the receiver holds go as `Block` frames.
    Use(HashSet<[u8; 32]>),
}

/// How one chunk goes in the stream (`Sender::by_hash`).
enum Named {
    Bytes,
    Hash([u8; 32]),
    /// The offer's pass: nothing is sent.
    Nothing,
}

/// `Data` frames of the bytes `buf` read at `off`, each stretch of non-zero chunks one
/// frame; all-zero chunks left out, or sent as holes (`holes`).
fn bytes_frames(off: u64, buf: Vec<u8>, holes: bool, frames: &mut Vec<Frame>) {
    if !buf.chunks(CHUNK as usize).any(|piece| piece.iter().all(|&b| b == 0)) {
        // No zero chunk (the usual case): the bytes read are the frame's.
        frames.push(Frame::Data { offset: off, bytes: buf });
        return;
    }
    let mut run: Option<usize> = None;
    for (j, piece) in buf.chunks(CHUNK as usize).enumerate() {
        if piece.iter().all(|&b| b == 0) {
            if let Some(r) = run.take() {
                let bytes = buf[r * CHUNK as usize..j * CHUNK as usize].to_vec();
                frames.push(Frame::Data { offset: off + r as u64 * CHUNK, bytes });
            }
            if holes {
                frames.push(Frame::Hole { offset: off + j as u64 * CHUNK, len: piece.len() as u64 });
            }
        } else if run.is_none() {
            run = Some(j);
        }
    }
    if let Some(r) = run {
        let bytes = buf[r * CHUNK as usize..].to_vec();
        frames.push(Frame::Data { offset: off + r as u64 * CHUNK, bytes });
    }
}

/// The sink the stream's bytes go to (the control socket's part frames).
pub struct Sink<'a>(pub &'a mut dyn FnMut(&[u8]) -> std::io::Result<()>);

impl Write for Sink<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        (self.0)(b)?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Makes the stream into `sink` (buffered); the tree's content hash.
/// The stream is made from a view of the committed state (`Engine::view`): requests to the
/// engine go on while it is hashed, compared with its base and read.
pub fn send(engine: &Engine, req: &SendRequest, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Result<TreeHash, Failure> {
    let view = engine.view().map_err(Failure::from_fs("a view of the committed state".into()))?;
    let view = Mutex::new(view);
    let r = send_from(&view, req, sink);
    engine.end_view(view.into_inner().unwrap_or_else(|e| e.into_inner()));
    r
}

fn send_from(view: &Mutex<Fs>, req: &SendRequest, sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> Result<TreeHash, Failure> {
    let fail = |what: String| move |e: scion_fs::FsError| Failure::from_fs(what)(e);
    let (snap, root, base, changes) = {
        let mut fs = scion_fs::lock(view);
        let snap = fs.resolve_path(req.snap).map_err(fail(show(req.snap)))?;
        let root = fs.content_hash_of(snap).map_err(fail(format!("content hash of {}", show(req.snap))))?;
        let base = match req.base {
            None => None,
            Some(b) => {
                let ino = fs.resolve_path(b).map_err(fail(show(b)))?;
                let h = fs.content_hash_of(ino).map_err(fail(format!("content hash of {}", show(b))))?;
                let opts = DiffOptions {
                    times: true,
                    recursive: true,
                    no_renames: false,
                };
                let (changes, _) = fs.diff(ino, snap, opts).map_err(fail(format!("diff of {} and {}", show(b), show(req.snap))))?;
                Some((ino, h, changes))
            }
        };
        // Held until the end: checkpoints between steps may not drop them.
        fs.remember(snap).map_err(fail(show(req.snap)))?;
        if let Some((b, _, _)) = &base {
            fs.remember(*b).map_err(fail(show(req.base.unwrap_or_default())))?;
        }
        let (base, changes) = match base {
            Some((b, h, c)) => (Some((b, h)), Some(c)),
            None => (None, None),
        };
        (snap, root, base, changes)
    };
    let name = req.snap.rsplit(|&c| c == b'/').next().unwrap_or_default().to_vec();
    let dedup = match req.dedup {
        SendDedup::Off => Dedup::Off,
        SendDedup::Offer => Dedup::Offer { seen: HashSet::new(), order: Vec::new() },
        SendDedup::Use(h) => Dedup::Use(h.iter().copied().collect()),
    };
    // An offer is made by a pass that sends nothing: the frames go nowhere.
    let mut nowhere = |_: &[u8]| Ok(());
    let offering = matches!(dedup, Dedup::Offer { .. });
    let (sink, offer_sink): (&mut dyn FnMut(&[u8]) -> std::io::Result<()>, _) =
        if offering { (&mut nowhere, Some(sink)) } else { (sink, None) };
    let mut out = std::io::BufWriter::with_capacity(256 << 10, Sink(sink));
    let w = match req.resume {
        None => StreamWriter::new(&mut out),
        Some((from, chain)) => StreamWriter::resume_at(&mut out, from, chain, root),
    };
    // Hard-link groups of the tree sent: an increment sends every name of a group it touches
    // (the receiver's names of one file may have been linked otherwise in the base).
    let groups = if base.is_some() {
        let mut fs = scion_fs::lock(view);
        fs.link_groups(snap).map_err(fail(format!("hard links of {}", show(req.snap))))?
    } else {
        Vec::new()
    };
    let mut w = w;
    let mut s = Sender {
        view,
        out: &mut w,
        snap,
        links: HashMap::new(),
        groups: groups.into_iter().flat_map(|g| g.clone().into_iter().map(move |p| (p, g.clone()))).collect(),
        grouped: Default::default(),
        later: Vec::new(),
        dedup,
    };
    let r = (|| {
        s.put(Frame::Begin {
            base: base.map(|(_, h)| h),
            root,
            name,
            entries: 0,
            bytes: 0,
        })?;
        match (&changes, base) {
            (Some(c), Some((b, _))) => s.incremental(b, c)?,
            _ => s.full()?,
        }
        Ok(std::mem::replace(&mut s.dedup, Dedup::Off))
    })();
    drop(s);
    let r = r.and_then(|d| w.finish(root).map(|_| d).map_err(io));
    let mut fs = scion_fs::lock(view);
    fs.forget(snap, 1);
    if let Some((b, _)) = base {
        fs.forget(b, 1);
    }
    drop(fs);
    let dedup = r?;
    out.flush().map_err(io)?;
    drop(out);
    if let (Dedup::Offer { order, .. }, Some(sink)) = (dedup, offer_sink) {
        for piece in order.chunks(4096) {
            sink(&piece.concat()).map_err(io)?;
        }
    }
    Ok(root)
}

/// The frames of a full stream of snapshot `snap` (a path from the mount root) into `out`,
/// chunks whose block hash is in `held` as `Block` frames (`scion push`: the blocks the
/// remote holds); the tree's content hash. `End` is the caller's.
pub fn frames(engine: &Engine, snap: &[u8], held: HashSet<[u8; 32]>, out: &mut dyn FnMut(Frame) -> Result<(), Failure>) -> Result<TreeHash, Failure> {
    let view = engine.view().map_err(Failure::from_fs("a view of the committed state".into()))?;
    let view = Mutex::new(view);
    let r = frames_from(&view, snap, held, out);
    engine.end_view(view.into_inner().unwrap_or_else(|e| e.into_inner()));
    r
}

fn frames_from(view: &Mutex<Fs>, snap_path: &[u8], held: HashSet<[u8; 32]>, out: &mut dyn FnMut(Frame) -> Result<(), Failure>) -> Result<TreeHash, Failure> {
    let fail = |what: String| move |e: scion_fs::FsError| Failure::from_fs(what)(e);
    let (snap, root) = {
        let mut fs = scion_fs::lock(view);
        let snap = fs.resolve_path(snap_path).map_err(fail(show(snap_path)))?;
        let root = fs.content_hash_of(snap).map_err(fail(format!("content hash of {}", show(snap_path))))?;
        fs.remember(snap).map_err(fail(show(snap_path)))?;
        (snap, root)
    };
    let name = snap_path.rsplit(|&c| c == b'/').next().unwrap_or_default().to_vec();
    let mut sink = FnSink(out);
    let mut s = Sender {
        view,
        out: &mut sink,
        snap,
        links: HashMap::new(),
        groups: HashMap::new(),
        grouped: Default::default(),
        later: Vec::new(),
        dedup: Dedup::Use(held),
    };
    let r = s.put(Frame::Begin { base: None, root, name, entries: 0, bytes: 0 }).and_then(|()| s.full());
    scion_fs::lock(view).forget(snap, 1);
    r.map(|()| root)
}

fn io(e: std::io::Error) -> Failure {
    Failure::new(e.raw_os_error().unwrap_or(libc::EPIPE), format!("sending the stream: {e}"))
}

fn fs_err(what: &[u8]) -> impl FnOnce(scion_fs::FsError) -> Failure + '_ {
    move |e| Failure::from_fs(format!("send: /{}", String::from_utf8_lossy(what)))(e)
}

/// Where a stream's frames go: a stream's bytes, or a push (`frames`).
trait FrameSink {
    fn put(&mut self, f: Frame) -> Result<(), Failure>;
}

impl<W: Write> FrameSink for StreamWriter<W> {
    fn put(&mut self, f: Frame) -> Result<(), Failure> {
        StreamWriter::put(self, &f).map_err(io)
    }
}

struct FnSink<'a>(&'a mut dyn FnMut(Frame) -> Result<(), Failure>);

impl FrameSink for FnSink<'_> {
    fn put(&mut self, f: Frame) -> Result<(), Failure> {
        (self.0)(f)
    }
}

struct Sender<'e> {
    view: &'e Mutex<Fs>,
    out: &'e mut dyn FrameSink,
    /// The snapshot's top (held).
    snap: Ino,
    /// Files with several names sent so far: inode -> first path.
    links: HashMap<Ino, Vec<u8>>,
    /// For an increment: each name of a file with several, and all its names.
    groups: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Names sent with their group already (a change listed at one of them is done).
    grouped: std::collections::HashSet<Vec<u8>>,
    /// Links to make once every directory is there: (name, the group's first name), and
    /// (first name, empty) for the names sent whole, whose directories' metadata is due.
    later: Vec<(Vec<u8>, Vec<u8>)>,
    dedup: Dedup,
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        b.to_vec()
    } else {
        [a, b"/", b].concat()
    }
}

/// What a user sees of `ino` besides its content.
fn meta(fs: &mut Fs, ino: Ino) -> scion_fs::FsResult<Meta> {
    let a = fs.getattr(ino)?;
    let mut xattrs = Vec::new();
    if a.kind != Kind::Symlink {
        for k in fs.listxattr(ino)? {
            let v = fs.getxattr(ino, &k)?;
            xattrs.push((k, v));
        }
        xattrs.sort();
    }
    Ok(Meta {
        perm: a.perm,
        uid: a.uid,
        gid: a.gid,
        mtime_sec: a.mtime.sec,
        mtime_nsec: a.mtime.nsec,
        xattrs,
    })
}

impl Sender<'_> {
    fn put(&mut self, f: Frame) -> Result<(), Failure> {
        self.out.put(f)
    }

    /// The inode at `path` below the snapshot (held: forgotten by the caller).
    fn at(&self, fs: &mut Fs, path: &[u8]) -> Result<Ino, Failure> {
        fs.walk_held(self.snap, path).map_err(fs_err(path))
    }

    /// Every entry of the tree, parents first; directories' metadata at the end.
    fn full(&mut self) -> Result<(), Failure> {
        let mut dirs = vec![Vec::new()];
        let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
        while let Some(d) = stack.pop() {
            let names: Vec<Vec<u8>> = {
                let view = self.view;
                let mut fs = scion_fs::lock(view);
                let ino = self.at(&mut fs, &d)?;
                let r = fs.readdir(ino).map_err(fs_err(&d));
                fs.forget(ino, 1);
                let mut v: Vec<Vec<u8>> = r?.into_iter().map(|e| e.name).filter(|n| n != b".snapshot").collect();
                v.sort();
                v
            };
            let mut sub = Vec::new();
            for n in names {
                let p = join(&d, &n);
                if self.entry(&p, true)? {
                    dirs.push(p.clone());
                    sub.push(p);
                }
            }
            stack.extend(sub.into_iter().rev());
        }
        self.dir_metas(dirs)
    }

    /// Sends the entry at `p` whole (a directory without its contents); true if it is one.
    /// A file's data follows (`fresh`: a new file, zero chunks left out).
    fn entry(&mut self, p: &[u8], fresh: bool) -> Result<bool, Failure> {
        let (frame, file) = {
            let view = self.view;
                let mut fs = scion_fs::lock(view);
            let ino = self.at(&mut fs, p)?;
            let r = self.entry_frame(&mut fs, ino, p, fresh);
            fs.forget(ino, 1);
            r?
        };
        let dir = matches!(frame, Frame::Dir { .. });
        self.put(frame)?;
        if let Some(size) = file {
            let chunks: Vec<u64> = (0..size.div_ceil(CHUNK)).collect();
            self.data(p, size, &chunks, !fresh)?;
        }
        Ok(dir)
    }

    /// The frame for `ino` at `p`, and for a file (not another name of one sent) its size.
    fn entry_frame(&mut self, fs: &mut Fs, ino: Ino, p: &[u8], fresh: bool) -> Result<(Frame, Option<u64>), Failure> {
        let a = fs.getattr(ino).map_err(fs_err(p))?;
        let path = p.to_vec();
        Ok(match a.kind {
            Kind::Dir => (Frame::Dir { path }, None),
            Kind::Symlink => {
                let target = fs.readlink(ino).map_err(fs_err(p))?;
                (Frame::Symlink { path, target, meta: meta(fs, ino).map_err(fs_err(p))? }, None)
            }
            Kind::File => {
                if a.nlink > 1 {
                    if let Some(first) = self.links.get(&ino) {
                        return Ok((Frame::Link { path, target: first.clone() }, None));
                    }
                    self.links.insert(ino, path.clone());
                }
                let meta = meta(fs, ino).map_err(fs_err(p))?;
                (Frame::File { path, size: a.size, fresh, meta }, Some(a.size))
            }
            k => (
                Frame::Special {
                    path,
                    kind: k as u8,
                    rdev: a.rdev,
                    meta: meta(fs, ino).map_err(fs_err(p))?,
                },
                None,
            ),
        })
    }

    /// The bytes of `chunks` of the file at `p`, a megabyte per step, in frames of up to
    /// `DATA_MAX` of consecutive chunks. All-zero chunks are left out of a new file (which
    /// reads zeros there) and sent as holes into an old one (`holes`). In a negotiated stream
    /// a chunk one block holds exactly goes as that block's hash if the receiver holds it;
    /// the offer's pass only notes such blocks and reads nothing.
    fn data(&mut self, p: &[u8], size: u64, chunks: &[u64], holes: bool) -> Result<(), Failure> {
        let per_frame = (DATA_MAX as u64 / CHUNK) as usize;
        let mut k = 0;
        while k < chunks.len() {
            let first = chunks[k];
            let mut n = 1;
            while k + n < chunks.len() && chunks[k + n] == first + n as u64 && n < per_frame {
                n += 1;
            }
            let frames = {
                let view = self.view;
                let mut fs = scion_fs::lock(view);
                let ino = self.at(&mut fs, p)?;
                let r = self.step_frames(&mut fs, ino, p, size, first..first + n as u64, holes);
                fs.forget(ino, 1);
                r?
            };
            for f in frames {
                self.put(f)?;
            }
            k += n;
        }
        Ok(())
    }

    /// The frames of the consecutive chunks `run` of file `ino` (one engine step): runs of
    /// chunks sent as bytes are read at once.
    fn step_frames(&mut self, fs: &mut Fs, ino: Ino, p: &[u8], size: u64, run: std::ops::Range<u64>, holes: bool) -> Result<Vec<Frame>, Failure> {
        let named = run.clone().map(|i| self.by_hash(fs, ino, p, i)).collect::<Result<Vec<_>, _>>()?;
        let mut frames = Vec::new();
        let mut j = 0;
        while j < named.len() {
            let idx = run.start + j as u64;
            match named[j] {
                Named::Hash(hash) => frames.push(Frame::Block { offset: idx * CHUNK, hash }),
                Named::Nothing => {}
                Named::Bytes => {
                    // Chunks sent as bytes, up to the next one named by its hash.
                    let n = named[j..].iter().take_while(|x| matches!(x, Named::Bytes)).count();
                    let off = idx * CHUNK;
                    let len = (n as u64 * CHUNK).min(size.saturating_sub(off));
                    let buf = fs.read_exact(ino, off, len).map_err(fs_err(p))?;
                    bytes_frames(off, buf, holes, &mut frames);
                    j += n;
                    continue;
                }
            }
            j += 1;
        }
        Ok(frames)
    }

    /// How chunk `idx` of file `ino` goes: as bytes (no negotiation, or not a block the
    /// receiver holds), as its block's hash, or not at all (the offer's pass, which notes
    /// the block).
    fn by_hash(&mut self, fs: &mut Fs, ino: Ino, p: &[u8], idx: u64) -> Result<Named, Failure> {
        if matches!(self.dedup, Dedup::Off) {
            return Ok(Named::Bytes);
        }
        let block = fs.plain_block(ino, idx).map_err(fs_err(p))?;
        Ok(match (&mut self.dedup, block) {
            (Dedup::Offer { seen, order }, b) => {
                if let Some(b) = b.filter(|b| seen.insert(b.hash)) {
                    order.push(b.hash);
                }
                Named::Nothing
            }
            (Dedup::Use(held), Some(b)) if held.contains(&b.hash) => Named::Hash(b.hash),
            _ => Named::Bytes,
        })
    }

    /// Metadata of directories, deepest first.
    fn dir_metas(&mut self, mut dirs: Vec<Vec<u8>>) -> Result<(), Failure> {
        dirs.sort_by_key(|d| std::cmp::Reverse(d.iter().filter(|&&c| c == b'/').count() + usize::from(!d.is_empty())));
        for d in dirs {
            let m = {
                let view = self.view;
                let mut fs = scion_fs::lock(view);
                let ino = self.at(&mut fs, &d)?;
                let r = meta(&mut fs, ino).map_err(fs_err(&d));
                fs.forget(ino, 1);
                r?
            };
            self.put(Frame::Meta { path: d, meta: m })?;
        }
        Ok(())
    }

    /// What changed from the base: deletions, then each changed entry in path order, then
    /// the metadata of every directory a change lies in.
    fn incremental(&mut self, base: Ino, changes: &[Difference]) -> Result<(), Failure> {
        let mut deleted: Vec<&[u8]> = Vec::new();
        for d in changes {
            let gone: Option<&[u8]> = match d.change {
                Change::Deleted | Change::Type => Some(&d.path),
                Change::Renamed => d.old_path.as_deref(),
                _ => None,
            };
            deleted.extend(gone);
        }
        deleted.sort();
        let mut last: Option<&[u8]> = None;
        for g in deleted {
            if last.is_some_and(|l| g.starts_with(l) && g.get(l.len()) == Some(&b'/')) {
                continue; // inside a directory already deleted
            }
            self.put(Frame::Delete { path: g.to_vec() })?;
            last = Some(g);
        }
        let mut dirs: BTreeSet<Vec<u8>> = BTreeSet::new();
        dirs.insert(Vec::new());
        let mut puts: Vec<&Difference> = changes.iter().filter(|d| d.change != Change::Deleted).collect();
        puts.sort_by(|x, y| x.path.cmp(&y.path));
        for d in puts {
            let mut p = d.path.as_slice();
            while let Some(i) = p.iter().rposition(|&c| c == b'/') {
                p = &p[..i];
                dirs.insert(p.to_vec());
            }
            if self.grouped.contains(&d.path) {
                continue;
            }
            match (d.change, d.kind) {
                (_, Kind::Dir) => {
                    if matches!(d.change, Change::Added | Change::Type) {
                        self.put(Frame::Dir { path: d.path.clone() })?;
                    }
                    dirs.insert(d.path.clone());
                }
                (_, Kind::File) if self.groups.contains_key(&d.path) => self.linked(&d.path)?,
                (Change::Metadata, _) => {
                    let m = self.meta_at(&d.path)?;
                    self.put(Frame::Meta { path: d.path.clone(), meta: m })?;
                }
                (Change::Renamed, Kind::File) => {
                    let from = d.old_path.clone().unwrap_or_default();
                    self.put(Frame::Copy { path: d.path.clone(), from })?;
                    let m = self.meta_at(&d.path)?;
                    self.put(Frame::Meta { path: d.path.clone(), meta: m })?;
                }
                (Change::Modified, Kind::File) => self.changed_file(base, &d.path)?,
                _ => {
                    self.entry(&d.path, true)?;
                }
            }
        }
        for (path, target) in std::mem::take(&mut self.later) {
            // Linking a name changes its directory's mtime: set again at the end.
            let mut p = path.as_slice();
            while let Some(i) = p.iter().rposition(|&c| c == b'/') {
                p = &p[..i];
                dirs.insert(p.to_vec());
            }
            if !target.is_empty() {
                self.put(Frame::Link { path, target })?;
            }
        }
        self.dir_metas(dirs.into_iter().collect())
    }

    fn meta_at(&mut self, p: &[u8]) -> Result<Meta, Failure> {
        let view = self.view;
                let mut fs = scion_fs::lock(view);
        let ino = self.at(&mut fs, p)?;
        let r = meta(&mut fs, ino).map_err(fs_err(p));
        fs.forget(ino, 1);
        r
    }

    /// A file with several names in the tree sent: the whole file under its first name (once),
    /// every other name linked to it (after the other changes, when their directories are
    /// there).
    fn linked(&mut self, p: &[u8]) -> Result<(), Failure> {
        let names = self.groups.get(p).cloned().unwrap_or_default();
        let first = names.first().cloned().unwrap_or_else(|| p.to_vec());
        if self.groups.remove(&first).is_none() {
            return Ok(()); // sent with its group already
        }
        self.entry(&first, true)?;
        // (Its directory's mtime changes on the receiver: set again at the end.)
        self.later.push((first.clone(), Vec::new()));
        for n in names.iter().skip(1) {
            self.groups.remove(n);
            // (Its directory may come later in the stream.)
            self.later.push((n.clone(), first.clone()));
        }
        self.grouped.extend(names);
        Ok(())
    }

    /// A file changed in place: its changed chunks only (a file that had several names in
    /// the base is sent whole, as a new file: the receiver's other names must not change).
    fn changed_file(&mut self, base: Ino, p: &[u8]) -> Result<(), Failure> {
        let (frame, changes, size) = {
            let view = self.view;
                let mut fs = scion_fs::lock(view);
            let new = self.at(&mut fs, p)?;
            let r = (|| {
                let a = fs.getattr(new).map_err(fs_err(p))?;
                if a.nlink > 1 {
                    if self.links.contains_key(&new) {
                        // Another name of a file already sent: the receiver's copy changed too.
                        return Ok(None);
                    }
                    self.links.insert(new, p.to_vec());
                }
                let old = fs.walk_held(base, p).map_err(fs_err(p))?;
                if fs.getattr(old).map(|o| o.nlink > 1).unwrap_or(true) {
                    fs.forget(old, 1);
                    return Ok(Some(None));
                }
                let r = (|| {
                    let (x, y) = (fs.file_record(old)?, fs.file_record(new)?);
                    fs.chunk_changes(&x, &y)
                })();
                fs.forget(old, 1);
                let changes = r.map_err(fs_err(p))?;
                let m = meta(&mut fs, new).map_err(fs_err(p))?;
                Ok(Some(Some((Frame::File { path: p.to_vec(), size: a.size, fresh: false, meta: m }, changes, a.size))))
            })();
            fs.forget(new, 1);
            drop(fs);
            match r? {
                Some(Some(x)) => x,
                Some(None) => {
                    self.entry(p, true)?;
                    return Ok(());
                }
                None => return Ok(()),
            }
        };
        self.put(frame)?;
        let mut data = Vec::new();
        for c in changes {
            match c {
                ChunkChange::Data(i) => data.push(i),
                ChunkChange::Hole(i) => {
                    let len = CHUNK.min(size.saturating_sub(i * CHUNK));
                    self.put(Frame::Hole { offset: i * CHUNK, len })?;
                }
                ChunkChange::Patch(i, runs) => {
                    for (o, bytes) in runs {
                        self.put(Frame::Data { offset: i * CHUNK + u64::from(o), bytes })?;
                    }
                }
            }
        }
        self.data(p, size, &data, true)
    }
}
