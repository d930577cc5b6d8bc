//! `scion send PATH [--base BASE]` (issue 20): a stream of the tree at PATH, whole or as what
//! changed from BASE (`crate::stream` says the format). The tree sent is a snapshot, so it
//! does not change while it is read: PATH itself if it is one, otherwise one taken for the
//! send and destroyed after. What changed is `scion diff BASE SNAPSHOT`; a changed file sends
//! only its changed chunks (`Op::ChunkChanges`), a small write as its patch, a moved file as a
//! copy of the base's. The base is named by its content hash, which the receiver looks for
//! among its own snapshots. File data is read through the mount.

use crate::tree_cmds::{call, locate, store_path, utc_now_name, Located};
use scion::stream::{Frame, StreamWriter, DATA_MAX, FLAG_ZSTD};
use scion_daemon::control::{Op, Reply, Target};
use scion_fs::diff::{Change, Difference};
use scion_fs::treehash::ChunkChange;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

const CHUNK: u64 = 64 << 10;

pub struct SendArgs {
    pub path: PathBuf,
    pub base: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub no_compress: bool,
    pub progress: bool,
    /// A resume token from `scion receive --resumable`: send only what did not arrive.
    pub resume: Option<String>,
}

pub fn send(a: SendArgs) -> Result<(), String> {
    let at = locate(&a.path, true, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", a.path.display()));
    };
    let rel = store_path(&at);
    if a.resume.is_some() && !in_snapshot(&rel) {
        return Err("--resume sends again what was sent: give the snapshot that was sent (PATH/.snapshot/NAME)".into());
    }
    let (snap, temp) = if in_snapshot(&rel) {
        (rel.clone(), false)
    } else {
        let name = utc_now_name().into_bytes();
        call(&at, &Op::Snapshot { path: rel.clone(), name: name.clone() })?;
        ([&rel[..], b"/.snapshot/", &name].concat(), true)
    };
    let r = send_snapshot(&a, &at, &mnt, &snap);
    if temp {
        if let Err(e) = call(&at, &Op::Destroy(Target::Path(snap.clone()))) {
            eprintln!("scion send: the snapshot {} stays: {e}", String::from_utf8_lossy(&snap));
        }
    }
    r
}

/// zstd worker threads: one per CPU beyond the first, at least one (`SCION_SEND_THREADS`).
fn compress_threads() -> u32 {
    std::env::var("SCION_SEND_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32 - 1).max(1))
}

fn in_snapshot(rel: &[u8]) -> bool {
    rel.split(|&c| c == b'/').any(|n| n == b".snapshot")
}

fn hash_of(at: &Located, path: &[u8]) -> Result<[u8; 32], String> {
    match call(at, &Op::TreeHash { path: path.to_vec() })? {
        Reply::TreeHash(h) => Ok(h),
        _ => Err("the daemon answered something else".into()),
    }
}

fn send_snapshot(a: &SendArgs, at: &Located, mnt: &Path, snap: &[u8]) -> Result<(), String> {
    let root = hash_of(at, snap)?;
    let resume = match &a.resume {
        None => None,
        Some(t) => {
            let (from, chain, troot) = scion::stream::parse_token(t)?;
            if troot != root {
                return Err(format!("the resume token is for another tree than {}", a.path.display()));
            }
            Some((from, chain))
        }
    };
    let base = match &a.base {
        None => None,
        Some(b) => {
            let bat = locate(b, true, &None)?;
            if bat.store != at.store {
                return Err(format!("{} is not in the same store as {}", b.display(), a.path.display()));
            }
            let brel = store_path(&bat);
            Some((hash_of(at, &brel)?, brel))
        }
    };
    let name = snap.rsplit(|&c| c == b'/').next().unwrap_or_default().to_vec();
    let mut out: Box<dyn Write> = match &a.output {
        Some(f) => Box::new(std::fs::File::create(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let io = |e: std::io::Error| format!("writing the stream: {e}");
    let flags = if a.no_compress { 0 } else { FLAG_ZSTD };
    scion::stream::write_header(&mut out, flags).map_err(io)?;
    let (written, progress) = {
        let body: Box<dyn Write + '_> = if a.no_compress {
            Box::new(std::io::BufWriter::with_capacity(1 << 20, &mut out))
        } else {
            // Compressed by a worker thread, while this one reads the files.
            let mut e = zstd::stream::write::Encoder::new(&mut out, 3).map_err(io)?;
            e.multithread(compress_threads()).map_err(io)?;
            Box::new(e.auto_finish())
        };
        let w = match resume {
            None => StreamWriter::new(body),
            Some((from, chain)) => StreamWriter::resume_at(body, from, chain, root),
        };
        let mut s = Sender {
            w,
            top: mnt.join(rel(snap)),
            links: HashMap::new(),
            progress: Progress::new(a.progress),
        };
        s.put(Frame::Begin {
            base: base.as_ref().map(|(h, _)| *h),
            root,
            name,
            entries: 0,
            bytes: 0,
        })?;
        match &base {
            None => s.full()?,
            Some((_, brel)) => {
                let changes = match call(
                    at,
                    &Op::Diff {
                        a: brel.clone(),
                        b: snap.to_vec(),
                        times: true,
                        recursive: true,
                        no_renames: false,
                    },
                )? {
                    Reply::Diff(c) => c,
                    _ => return Err("the daemon answered something else to diff".into()),
                };
                s.incremental(at, brel, snap, &changes)?;
            }
        }
        let written = s.w.written;
        // Dropping the body ends the zstd frame into `out`.
        let mut body = s.w.finish(root).map_err(io)?;
        body.flush().map_err(io)?;
        (written, s.progress)
    };
    out.flush().map_err(io)?;
    progress.done(written);
    Ok(())
}

struct Sender<W: Write> {
    w: StreamWriter<W>,
    /// The sent tree through the mount.
    top: PathBuf,
    /// Files with several names sent so far: (device, inode) -> the first path.
    links: HashMap<(u64, u64), Vec<u8>>,
    progress: Progress,
}

fn rel(p: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(p))
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        b.to_vec()
    } else {
        [a, b"/", b].concat()
    }
}

impl<W: Write> Sender<W> {
    fn put(&mut self, f: Frame) -> Result<(), String> {
        self.w.put(&f).map_err(|e| format!("writing the stream: {e}"))?;
        self.progress.tick(self.w.written);
        Ok(())
    }

    fn path(&self, p: &[u8]) -> PathBuf {
        if p.is_empty() {
            self.top.clone()
        } else {
            self.top.join(rel(p))
        }
    }

    /// Every entry of the tree, parents first; directories' metadata at the end, deepest
    /// first (writing inside a directory changes its mtime).
    fn full(&mut self) -> Result<(), String> {
        let mut dirs = vec![Vec::new()];
        let mut stack = vec![Vec::new()];
        while let Some(d) = stack.pop() {
            let mut names: Vec<Vec<u8>> = std::fs::read_dir(self.path(&d))
                .map_err(|e| format!("{}: {e}", self.path(&d).display()))?
                .map(|e| e.map(|e| e.file_name().as_bytes().to_vec()))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", self.path(&d).display()))?;
            names.retain(|n| n != b".snapshot");
            names.sort();
            let mut sub = Vec::new();
            for n in names {
                let p = join(&d, &n);
                if self.entry(&p)? {
                    dirs.push(p.clone());
                    sub.push(p);
                }
            }
            stack.extend(sub.into_iter().rev());
        }
        self.dir_metas(dirs)
    }

    /// Sends the entry at `p` whole (a directory without its contents); true if it is one.
    fn entry(&mut self, p: &[u8]) -> Result<bool, String> {
        let full = self.path(p);
        let m = full.symlink_metadata().map_err(|e| format!("{}: {e}", full.display()))?;
        let ft = m.file_type();
        if ft.is_dir() {
            self.put(Frame::Dir { path: p.to_vec() })?;
            return Ok(true);
        }
        let meta = crate::meta::read(&full)?;
        if ft.is_symlink() {
            let t = std::fs::read_link(&full).map_err(|e| format!("{}: {e}", full.display()))?;
            self.put(Frame::Symlink { path: p.to_vec(), target: t.as_os_str().as_bytes().to_vec(), meta })?;
        } else if ft.is_file() {
            if m.nlink() > 1 {
                if let Some(first) = self.links.get(&(m.dev(), m.ino())) {
                    let target = first.clone();
                    self.put(Frame::Link { path: p.to_vec(), target })?;
                    return Ok(false);
                }
                self.links.insert((m.dev(), m.ino()), p.to_vec());
            }
            self.put(Frame::File { path: p.to_vec(), size: m.len(), fresh: true, meta })?;
            let chunks: Vec<u64> = (0..m.len().div_ceil(CHUNK)).collect();
            self.data(&full, m.len(), &chunks, false)?;
        } else {
            let kind = if ft.is_fifo() {
                4
            } else if ft.is_socket() {
                5
            } else if ft.is_char_device() {
                6
            } else {
                7
            };
            self.put(Frame::Special { path: p.to_vec(), kind, rdev: m.rdev() as u32, meta })?;
        }
        Ok(false)
    }

    /// The bytes of `chunks` of the file at `full` (`size` bytes), in frames of up to
    /// `DATA_MAX` of consecutive chunks. All-zero chunks are left out of a new file (which
    /// reads zeros there) and sent as holes into an old one (`holes`).
    fn data(&mut self, full: &Path, size: u64, chunks: &[u64], holes: bool) -> Result<(), String> {
        let f = std::fs::File::open(full).map_err(|e| format!("{}: {e}", full.display()))?;
        let per_frame = (DATA_MAX as u64 / CHUNK) as usize;
        let mut buf = vec![0u8; DATA_MAX];
        let mut k = 0;
        while k < chunks.len() {
            let first = chunks[k];
            let mut n = 1;
            while k + n < chunks.len() && chunks[k + n] == first + n as u64 && n < per_frame {
                n += 1;
            }
            let off = first * CHUNK;
            let len = (n as u64 * CHUNK).min(size.saturating_sub(off)) as usize;
            f.read_exact_at(&mut buf[..len], off).map_err(|e| format!("{}: {e}", full.display()))?;
            // Split at all-zero chunks.
            let mut run: Option<usize> = None;
            let pieces: Vec<&[u8]> = buf[..len].chunks(CHUNK as usize).collect();
            for (j, piece) in pieces.iter().enumerate() {
                let zero = piece.iter().all(|&b| b == 0);
                if zero {
                    if let Some(r) = run.take() {
                        let bytes = buf[r * CHUNK as usize..j * CHUNK as usize].to_vec();
                        self.put(Frame::Data { offset: off + r as u64 * CHUNK, bytes })?;
                    }
                    if holes {
                        self.put(Frame::Hole { offset: off + j as u64 * CHUNK, len: piece.len() as u64 })?;
                    }
                } else if run.is_none() {
                    run = Some(j);
                }
            }
            if let Some(r) = run {
                let bytes = buf[r * CHUNK as usize..len].to_vec();
                self.put(Frame::Data { offset: off + r as u64 * CHUNK, bytes })?;
            }
            k += n;
        }
        Ok(())
    }

    /// Metadata of directories, deepest first.
    fn dir_metas(&mut self, mut dirs: Vec<Vec<u8>>) -> Result<(), String> {
        dirs.sort_by_key(|d| std::cmp::Reverse(d.iter().filter(|&&c| c == b'/').count() + usize::from(!d.is_empty())));
        for d in dirs {
            let meta = crate::meta::read(&self.path(&d))?;
            self.put(Frame::Meta { path: d, meta })?;
        }
        Ok(())
    }

    /// What changed from the base: deletions, then each changed entry in path order, then
    /// the metadata of every directory a change lies in.
    fn incremental(&mut self, at: &Located, base: &[u8], snap: &[u8], changes: &[Difference]) -> Result<(), String> {
        let mut deleted: Vec<&[u8]> = Vec::new();
        for d in changes {
            let gone: Option<&[u8]> = match d.change {
                Change::Deleted | Change::Type => Some(&d.path),
                Change::Renamed => d.old_path.as_deref(),
                _ => None,
            };
            if let Some(g) = gone {
                deleted.push(g);
            }
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
            match (d.change, d.kind) {
                (_, scion_fs::Kind::Dir) => {
                    if matches!(d.change, Change::Added | Change::Type) {
                        self.put(Frame::Dir { path: d.path.clone() })?;
                    }
                    dirs.insert(d.path.clone());
                }
                (Change::Metadata, _) => {
                    let meta = crate::meta::read(&self.path(&d.path))?;
                    self.put(Frame::Meta { path: d.path.clone(), meta })?;
                }
                (Change::Renamed, _) => {
                    let from = d.old_path.clone().unwrap_or_default();
                    self.put(Frame::Copy { path: d.path.clone(), from })?;
                    let meta = crate::meta::read(&self.path(&d.path))?;
                    self.put(Frame::Meta { path: d.path.clone(), meta })?;
                }
                (Change::Modified, scion_fs::Kind::File) => self.changed_file(at, base, snap, &d.path)?,
                _ => {
                    self.entry(&d.path)?;
                }
            }
        }
        self.dir_metas(dirs.into_iter().collect())
    }

    /// A file changed in place: its changed chunks only.
    fn changed_file(&mut self, at: &Located, base: &[u8], snap: &[u8], p: &[u8]) -> Result<(), String> {
        let full = self.path(p);
        let m = full.symlink_metadata().map_err(|e| format!("{}: {e}", full.display()))?;
        if m.nlink() > 1 {
            if let Some(first) = self.links.get(&(m.dev(), m.ino())) {
                // Another name of a file already sent: the receiver's copy changed with it.
                let _ = first;
                return Ok(());
            }
            self.links.insert((m.dev(), m.ino()), p.to_vec());
        }
        let op = Op::ChunkChanges {
            old: join(base, p),
            new: join(snap, p),
        };
        let changes = match call(at, &op)? {
            Reply::ChunkChanges(c) => c,
            _ => return Err("the daemon answered something else".into()),
        };
        let meta = crate::meta::read(&full)?;
        self.put(Frame::File { path: p.to_vec(), size: m.len(), fresh: false, meta })?;
        let mut data = Vec::new();
        for c in changes {
            match c {
                ChunkChange::Data(i) => data.push(i),
                ChunkChange::Hole(i) => {
                    let len = CHUNK.min(m.len().saturating_sub(i * CHUNK));
                    self.put(Frame::Hole { offset: i * CHUNK, len })?;
                }
                ChunkChange::Patch(i, runs) => {
                    for (o, bytes) in runs {
                        self.put(Frame::Data { offset: i * CHUNK + u64::from(o), bytes })?;
                    }
                }
            }
        }
        self.data(&full, m.len(), &data, true)
    }
}

/// Bytes sent, the rate, on stderr twice a second (a terminal, or `--progress`).
pub struct Progress {
    on: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    pub fn new(asked: bool) -> Progress {
        let on = asked || std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            on,
            start: Instant::now(),
            last: Instant::now(),
        }
    }

    pub fn tick(&mut self, bytes: u64) {
        if self.on && self.last.elapsed().as_millis() >= 500 {
            self.last = Instant::now();
            let s = self.start.elapsed().as_secs_f64().max(0.001);
            eprint!("\r{} MiB, {:.0} MiB/s\x1b[K", bytes >> 20, bytes as f64 / s / 1048576.0);
        }
    }

    pub fn done(&self, bytes: u64) {
        if self.on {
            let s = self.start.elapsed().as_secs_f64();
            eprintln!("\r{} MiB in {s:.1} s\x1b[K", bytes >> 20);
        }
    }
}
