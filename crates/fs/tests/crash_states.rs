//! Crash consistency, in the spirit of CrashMonkey and ALICE.
//!
//! Each workload runs the engine on a simulated host ([`SimHost`]) that records every write
//! and sync scion issues. Then, for every point of that record, the harness rebuilds the
//! states a power cut there could leave: everything issued reached the disk; only what a
//! sync covered did; and random mixes in between, where each uncovered write, truncation,
//! hole punch, creation or removal independently did or did not reach the disk, and a
//! write may be torn at 4 KiB sector boundaries. Each distinct state is opened as a mount
//! opens it (journal replay included) and must:
//! - have a committed checkpoint that `check` finds clean, before and after recovery;
//! - open without error;
//! - hold a tree (names, kinds, modes, owners, link counts, sizes, times, contents, xattrs,
//!   symlink targets, clones and snapshots) equal to one the workload passed through since
//!   its last acknowledged sync (fsync, checkpoint, clone, snapshot or destroy): nothing
//!   acknowledged lost, nothing half-done.
//!
//! `SCION_CRASH=full` checks more mixes per point (the figures in docs/testing.md);
//! the default is the reduced set CI runs. `SCION_CRASH_SEED` changes the seed;
//! `SCION_CRASH_WORKLOAD=NAME` runs the workloads whose name starts so.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use scion_fs::{Fs, Ino, Kind, MountOptions, SetAttr};
use scion_store::sim::{crash_image, durable, sector_spans, Fate, HostOp, Image, SimHost};
use scion_store::Host;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

const STORE: &str = "/store";

/// One step of a workload, by path from the root.
#[derive(Clone, Debug)]
enum Step {
    Create(String),
    Mkdir(String),
    Write(String, u64, Vec<u8>),
    Truncate(String, u64),
    /// fallocate(mode, offset, length): preallocation, KEEP_SIZE, a punched hole.
    Fallocate(String, i32, u64, u64),
    Unlink(String),
    Rmdir(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, Vec<u8>),
    SetXattr(String, Vec<u8>, Vec<u8>),
    Chmod(String, u16),
    /// utimes(path, t, t): atime and mtime set.
    Times(String, i64),
    /// chown(path, uid, uid).
    Chown(String, u32),
    Fsync,
    Checkpoint,
    /// The background's checkpoint begun: folded and written, its packs not yet synced nor
    /// its superblock written; the steps up to `CheckpointEnd` run in that window.
    CheckpointBegin,
    /// ... and committed (nothing if a `Checkpoint` in the window already did).
    CheckpointEnd,
    /// Write-behind of buffered data, as the mount's background thread does it.
    FlushBehind,
    Clone(String, String),
    Snapshot(String, String),
    Destroy(String),
    Repack(String),
    /// A pass of compression of old versions (blocks only snapshots hold).
    Compress,
    /// A clone rolled back to its snapshot of that name.
    Rollback(String, String),
    /// A clone made for an ordinary user (journal record 16).
    CloneFor(String, String, u32),
    /// Looks a path up and opens it, as a process keeping it open would (kernel reference
    /// and open handle), under a handle number for the steps below.
    Open(String, usize),
    /// A write through an open handle (the file may be unlinked by now).
    WriteHeld(usize, u64, Vec<u8>),
    /// A file created in the directory an open handle holds.
    CreateIn(usize, String),
    /// A file made without a name (O_TMPFILE) in a directory, held open under a handle.
    Tmpfile(String, usize),
    /// The held file given a name (`linkat` of a file made without one: journal record 23
    /// and its content's records, all or nothing).
    LinkHeld(usize, String),
    /// The handle closes and the kernel forgets the inode.
    Release(usize),
    /// The step must fail with this errno and change nothing.
    Refused(Box<Step>, i32),
    /// The step, in store `n` of a workload over several stores (cubes: each a store of its
    /// own in `STORE/cubes.d/N`); a step outside `In` is store 0's (the main one).
    In(usize, Box<Step>),
    /// An fsync a `nofsync` cube answers at once: nothing is synced, nothing acknowledged.
    FsyncIgnored,
    /// The store stops journaling (a `nojournal` cube): only checkpoints make it durable,
    /// and its fsync takes one.
    NoJournal,
    /// The store journals again (`cube set --mode ordered` of a `nojournal` cube): it takes
    /// a checkpoint first, so the journal starts from a state that holds what came before.
    Journal,
    /// The store journals file data with the metadata (a `data` cube): nothing is written
    /// ahead to the packs.
    JournalData,
    /// The store is a `writeback` cube: whole chunks are journaled as unordered records.
    Writeback,
    /// The background sync of a `writeback` cube: the journal alone, the packs unsynced. It
    /// makes the metadata before it durable, not the data.
    SyncJournal,
}

impl Step {
    /// The store the step works on, and the step itself.
    fn store(&self) -> (usize, &Step) {
        match self {
            Step::In(n, s) => (*n, s),
            s => (0, s),
        }
    }

    /// True if the step makes the metadata before it durable in its store, if not the data.
    fn acks_metadata(&self) -> bool {
        self.acks() || matches!(self, Step::SyncJournal)
    }

    /// True if the step, once it returns, has made everything before it in its store durable.
    fn acks(&self) -> bool {
        matches!(
            self,
            Step::Fsync
                | Step::NoJournal
                | Step::Journal
                | Step::Checkpoint
                | Step::CheckpointEnd
                | Step::Clone(..)
                | Step::Snapshot(..)
                | Step::Destroy(_)
                | Step::Repack(_)
                | Step::Compress
                | Step::Rollback(..)
                | Step::CloneFor(..)
        )
    }
}

fn opts(host: &SimHost) -> MountOptions {
    MountOptions {
        holder: "crash harness".into(),
        host: Arc::new(host.clone()) as Host,
    }
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

fn resolve(fs: &mut Fs, path: &str) -> scion_fs::FsResult<Ino> {
    let mut ino = fs.root();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, c.as_bytes())?.ino;
    }
    Ok(ino)
}

/// Inodes held open by `Step::Open`, by handle number.
type Held = HashMap<usize, Ino>;

thread_local! {
    /// The background checkpoint in flight (`Step::CheckpointBegin`), of the one store of a
    /// workload that has them.
    static INFLIGHT: std::cell::RefCell<Option<scion_fs::PackSync>> = const { std::cell::RefCell::new(None) };
}

/// Where store `n` of a workload lives: the main store, or a cube's store inside it.
fn store_dir(n: usize) -> std::path::PathBuf {
    if n == 0 {
        Path::new(STORE).to_path_buf()
    } else {
        Path::new(STORE).join(format!("cubes.d/{n}"))
    }
}

fn apply(fs: &mut Fs, held: &mut Held, step: &Step) -> scion_fs::FsResult<()> {
    if let Step::FsyncIgnored = step {
        return Ok(());
    }
    let parent_of = |fs: &mut Fs, p: &str| -> scion_fs::FsResult<(Ino, Vec<u8>)> {
        let (d, n) = split(p);
        Ok((resolve(fs, d)?, n.as_bytes().to_vec()))
    };
    match step {
        Step::Create(p) => {
            let (d, n) = parent_of(fs, p)?;
            fs.mknod(d, &n, Kind::File, 0o644, 0, 0, 0, 0, &[])?;
        }
        Step::Mkdir(p) => {
            let (d, n) = parent_of(fs, p)?;
            fs.mknod(d, &n, Kind::Dir, 0o755, 0, 0, 0, 0, &[])?;
        }
        Step::Symlink(p, t) => {
            let (d, n) = parent_of(fs, p)?;
            fs.mknod(d, &n, Kind::Symlink, 0o777, 0, 0, 0, 0, t)?;
        }
        Step::Write(p, off, data) => {
            let ino = resolve(fs, p)?;
            fs.write(ino, *off, data)?;
        }
        Step::Truncate(p, size) => {
            let ino = resolve(fs, p)?;
            fs.setattr(
                ino,
                SetAttr {
                    size: Some(*size),
                    ..Default::default()
                },
            )?;
        }
        Step::Fallocate(p, mode, off, len) => {
            let ino = resolve(fs, p)?;
            fs.fallocate(ino, *mode, *off, *len)?;
        }
        Step::Chmod(p, mode) => {
            let ino = resolve(fs, p)?;
            fs.setattr(
                ino,
                SetAttr {
                    mode: Some(*mode as u32),
                    ..Default::default()
                },
            )?;
        }
        Step::Times(p, t) => {
            let ino = resolve(fs, p)?;
            let t = Some(scion_fs::Ts { sec: *t, nsec: 0 });
            fs.setattr(ino, SetAttr { atime: t, mtime: t, ..Default::default() })?;
        }
        Step::Chown(p, id) => {
            let ino = resolve(fs, p)?;
            fs.setattr(ino, SetAttr { uid: Some(*id), gid: Some(*id), ..Default::default() })?;
        }
        Step::Unlink(p) => {
            let (d, n) = parent_of(fs, p)?;
            fs.unlink(d, &n)?;
        }
        Step::Rmdir(p) => {
            let (d, n) = parent_of(fs, p)?;
            fs.rmdir(d, &n)?;
        }
        Step::Rename(a, b) => {
            let (d, n) = parent_of(fs, a)?;
            let (d2, n2) = parent_of(fs, b)?;
            fs.rename(d, &n, d2, &n2, 0)?;
        }
        Step::Link(a, b) => {
            let ino = resolve(fs, a)?;
            let (d, n) = parent_of(fs, b)?;
            fs.link(ino, d, &n)?;
        }
        Step::SetXattr(p, k, v) => {
            let ino = resolve(fs, p)?;
            fs.setxattr(ino, k, v, 0)?;
        }
        Step::Fsync => fs.fsync()?,
        Step::Checkpoint => fs.checkpoint()?,
        Step::CheckpointBegin => {
            let job = fs.checkpoint_begin()?;
            assert!(job.is_some(), "no checkpoint begun");
            INFLIGHT.with(|f| *f.borrow_mut() = job);
        }
        Step::CheckpointEnd => {
            if let Some(job) = INFLIGHT.with(|f| f.borrow_mut().take()) {
                let r = job.run();
                fs.checkpoint_end(job, r)?;
            }
        }
        Step::FlushBehind => {
            if let Some(batch) = fs.flush_begin(0) {
                let done = batch.run();
                fs.flush_end(done);
            }
        }
        Step::Clone(src, dst) => {
            let s = resolve(fs, src)?;
            let (d, n) = parent_of(fs, dst)?;
            fs.clone_dir(s, d, &n, &[], b"crash harness")?;
        }
        Step::Snapshot(dir, name) => {
            let d = resolve(fs, dir)?;
            // A name beginning "sched" is a snapshot a schedule takes (journal record 15).
            let scheduled = name.starts_with("sched");
            fs.snapshot_as(d, name.as_bytes(), b"crash harness", scheduled, scion_fs::Ts::now())?;
        }
        Step::Destroy(p) => {
            let ino = resolve(fs, p)?;
            fs.destroy(ino)?;
        }
        Step::Repack(p) => {
            let ino = resolve(fs, p)?;
            fs.repack(ino, u64::MAX)?;
        }
        Step::Compress => {
            let r = fs.compress_old(u64::MAX, 3)?;
            assert!(r.candidates == 0 || r.compressed + r.incompressible > 0, "{r:?}");
        }
        Step::CloneFor(src, dst, uid) => {
            let s = resolve(fs, src)?;
            let (d, n) = parent_of(fs, dst)?;
            fs.clone_dir_for(s, d, &n, &[], b"crash harness", Some(scion_fs::clone::ForUser { uid: *uid, gid: *uid }))?;
        }
        Step::Rollback(p, name) => {
            let ino = resolve(fs, p)?;
            fs.rollback(ino, name.as_bytes())?;
        }
        Step::Open(p, h) => {
            let ino = resolve(fs, p)?;
            fs.remember(ino)?;
            fs.open_file(ino)?;
            held.insert(*h, ino);
        }
        Step::WriteHeld(h, off, data) => {
            fs.write(held[h], *off, data)?;
        }
        Step::Tmpfile(dir, h) => {
            let d = resolve(fs, dir)?;
            let ino = fs.tmpfile(d, 0o640, 0, 0, 0)?.ino;
            fs.open_file(ino)?;
            held.insert(*h, ino);
        }
        Step::LinkHeld(h, p) => {
            let (d, n) = parent_of(fs, p)?;
            fs.link(held[h], d, &n)?;
        }
        Step::CreateIn(h, name) => {
            fs.mknod(held[h], name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])?;
        }
        Step::Release(h) => {
            let ino = held.remove(h).expect("released twice");
            fs.release(ino);
            fs.forget(ino, 1);
        }
        Step::Refused(inner, errno) => match apply(fs, held, inner) {
            Err(e) if e == *errno => {}
            Err(e) => panic!("{inner:?}: errno {e}, expected {errno}"),
            Ok(()) => panic!("{inner:?} succeeded, expected errno {errno}"),
        },
        Step::NoJournal => fs.set_journaled(false)?,
        Step::Journal => fs.set_journaled(true)?,
        Step::JournalData => fs.set_journal_data(true),
        Step::Writeback => fs.set_writeback(true),
        Step::SyncJournal => {
            let t = fs.sync_begin(false)?;
            let r = t.run_journal_only();
            fs.sync_end(t, r)?;
        }
        Step::In(..) => panic!("a store's step inside another's: {step:?}"),
        Step::FsyncIgnored => unreachable!("answered above"),
    }
    Ok(())
}

/// Everything a user can observe of a tree (snapshots included, atimes not): as bytes, the
/// same without file contents (what a `writeback` store must keep exact), and each file's
/// contents by path.
#[derive(Default)]
struct Dump {
    full: Vec<u8>,
    meta: Vec<u8>,
    files: BTreeMap<String, Vec<u8>>,
}

impl Dump {
    fn put(&mut self, b: &[u8]) {
        self.full.extend_from_slice(b);
        self.meta.extend_from_slice(b);
    }
}

fn dump(fs: &mut Fs) -> Result<Dump, String> {
    fn walk(
        fs: &mut Fs,
        dir: Ino,
        path: &str,
        snapdirs: bool,
        out: &mut Dump,
        seen: &mut HashMap<Ino, String>,
    ) -> Result<(), String> {
        let err = |what: &str, p: &str, e: scion_fs::FsError| format!("{what} of {p}: {e}");
        let mut ents = fs.readdir(dir).map_err(|e| err("readdir", path, e))?;
        ents.sort_by(|a, b| a.name.cmp(&b.name));
        for e in ents {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.lookup(dir, &e.name).map_err(|er| err("lookup", &p, er))?;
            out.put(
                format!(
                    "{p} {:?} {:o} {}:{} n{} s{} m{:?} c{:?}",
                    a.kind, a.perm, a.uid, a.gid, a.nlink, a.size, a.mtime, a.ctime
                )
                .as_bytes(),
            );
            if let Some(first) = seen.get(&a.ino) {
                out.put(format!(" = {first}\n").as_bytes());
                continue;
            }
            seen.insert(a.ino, p.clone());
            match a.kind {
                Kind::File => {
                    let data = fs.read(a.ino, 0, a.size as u32 + 1).map_err(|er| err("read", &p, er))?;
                    if data.len() as u64 != a.size {
                        return Err(format!("{p}: size {} but {} bytes read", a.size, data.len()));
                    }
                    out.full.extend_from_slice(blake3::hash(&data).to_hex().as_bytes());
                    out.files.insert(p.clone(), data);
                }
                Kind::Symlink => out.put(&fs.readlink(a.ino).map_err(|er| err("readlink", &p, er))?),
                _ => {}
            }
            for k in fs.listxattr(a.ino).map_err(|er| err("listxattr", &p, er))? {
                let v = fs.getxattr(a.ino, &k).map_err(|er| err("getxattr", &p, er))?;
                out.put(b" x:");
                out.put(&k);
                out.put(b"=");
                out.put(&v);
            }
            out.put(b"\n");
            if a.kind == Kind::Dir {
                walk(fs, a.ino, &p, snapdirs, out, seen)?;
            }
        }
        if snapdirs {
            if let Ok(s) = fs.lookup(dir, b".snapshot") {
                let mut snaps = fs.readdir(s.ino).map_err(|e| err("readdir", path, e))?;
                snaps.sort_by(|a, b| a.name.cmp(&b.name));
                let scheduled: Vec<Vec<u8>> = fs
                    .dir_snapshots(dir)
                    .map_err(|e| err("dir_snapshots", path, e))?
                    .into_iter()
                    .filter(|s| s.scheduled)
                    .map(|s| s.name)
                    .collect();
                for e in snaps {
                    let p = format!("{path}/.snapshot/{}", String::from_utf8_lossy(&e.name));
                    let kind = if scheduled.contains(&e.name) {
                        "scheduled"
                    } else {
                        "snapshot"
                    };
                    out.put(format!("{p} {kind}\n").as_bytes());
                    let root = fs.lookup(s.ino, &e.name).map_err(|er| err("lookup", &p, er))?;
                    walk(fs, root.ino, &p, false, out, seen)?;
                }
            }
        }
        Ok(())
    }
    let mut out = Dump::default();
    let root = fs.root();
    walk(fs, root, "", true, &mut out, &mut HashMap::new())?;
    Ok(out)
}

/// Whether `got` is a tree a `writeback` store may recover to: its metadata one of `meta`,
/// and each byte of each file one that file held at that offset in one of `states` (zero
/// where it held none): data may be older than the metadata, never another file's.
fn writeback_allows(got: &Dump, meta: &HashSet<[u8; 32]>, states: &[&Dump]) -> Result<(), String> {
    if !meta.contains(&digest(&got.meta)) {
        return Err("its metadata is no state since its last journal sync".into());
    }
    for (path, data) in &got.files {
        if states.iter().any(|s| s.files.get(path) == Some(data)) {
            continue;
        }
        for (i, b) in data.iter().enumerate() {
            let held = |s: &&Dump| s.files.get(path).map_or(0, |d| d.get(i).copied().unwrap_or(0));
            if !states.iter().any(|s| held(s) == *b) {
                return Err(format!("{path}: byte {i} ({b}) was never there since its last fsync"));
            }
        }
    }
    Ok(())
}

fn digest(b: &[u8]) -> [u8; 32] {
    *blake3::hash(b).as_bytes()
}

/// Marks in the host log: step `i` begins; store `n`'s steps up to `i` are acknowledged
/// durable (`ACKED | n << 24 | i`).
const BEGIN: u64 = 1 << 32;
const ACKED: u64 = 2 << 32;
/// Store `n`'s metadata up to step `i` is durable (a journal sync of a `writeback` store, or
/// any acknowledgement).
const META_ACKED: u64 = 3 << 32;
const STORE_SHIFT: u32 = 24;

/// A recorded run of a workload over one store or several (cubes).
struct Recording {
    base: Image,
    log: Vec<HostOp>,
    /// Per store, its tree after `j` steps, `j = 0..=steps` (as digests), and the dumps.
    states: Vec<Vec<[u8; 32]>>,
    dumps: Vec<Vec<Dump>>,
    /// Per store, whether it is a `writeback` cube (`Step::Writeback`).
    writeback: Vec<bool>,
}

/// What a store may recover to at a crash point: one of `exact`, or for a `writeback` store
/// what `writeback_allows` says of (metadata digests, the states its data may come from).
struct Acceptable<'a> {
    exact: HashSet<[u8; 32]>,
    writeback: Option<(HashSet<[u8; 32]>, Vec<&'a Dump>)>,
}

/// The number of stores a workload's steps name.
fn stores_of(steps: &[Step]) -> usize {
    steps.iter().map(|s| s.store().0 + 1).max().unwrap_or(1)
}

fn record(steps: &[Step]) -> Recording {
    let n = stores_of(steps);
    let host = SimHost::default();
    for k in 0..n {
        Fs::create(&(Arc::new(host.clone()) as Host), &store_dir(k)).unwrap();
    }
    let base = host.image();
    host.record();
    let mut fss: Vec<Fs> = (0..n).map(|k| Fs::open(&store_dir(k), opts(&host)).unwrap()).collect();
    let mut dumps: Vec<Vec<Dump>> = fss.iter_mut().map(|fs| vec![dump(fs).unwrap()]).collect();
    let mut states: Vec<Vec<[u8; 32]>> = dumps.iter().map(|d| vec![digest(&d[0].full)]).collect();
    for k in 0..n {
        host.mark(ACKED | (k as u64) << STORE_SHIFT); // each open committed its recovery checkpoint
        host.mark(META_ACKED | (k as u64) << STORE_SHIFT);
    }
    let mut held: Vec<Held> = (0..n).map(|_| Held::new()).collect();
    for (i, s) in steps.iter().enumerate() {
        host.mark(BEGIN | i as u64);
        let (k, inner) = s.store();
        apply(&mut fss[k], &mut held[k], inner).unwrap_or_else(|e| panic!("step {i} {s:?}: errno {e}"));
        if inner.acks() {
            host.mark(ACKED | (k as u64) << STORE_SHIFT | (i as u64 + 1));
        }
        if inner.acks_metadata() {
            host.mark(META_ACKED | (k as u64) << STORE_SHIFT | (i as u64 + 1));
        }
        for (k, fs) in fss.iter_mut().enumerate() {
            let d = dump(fs).unwrap();
            states[k].push(digest(&d.full));
            dumps[k].push(d);
        }
    }
    drop(fss); // a crash at the very end: no closing checkpoint
    let writeback = (0..n)
        .map(|k| steps.iter().any(|s| matches!(s.store(), (j, Step::Writeback) if j == k)))
        .collect();
    Recording {
        base,
        log: host.take_log(),
        states,
        dumps,
        writeback,
    }
}

/// Checks one crash state, every store of it against what is acceptable for that store;
/// `Err` says what is wrong.
fn verify(img: Image, acceptable: &[Acceptable]) -> Result<(), String> {
    let host = SimHost::from_image(img);
    let h: Host = Arc::new(host.clone());
    for (k, acceptable) in acceptable.iter().enumerate() {
        let dir = store_dir(k);
        let rep = scion_fs::check::check(&h, &dir).map_err(|e| format!("store {k}: check before recovery: {e}"))?;
        if !rep.is_clean() {
            return Err(format!("store {k}: check before recovery:\n{rep}"));
        }
        let mut fs = Fs::open(&dir, opts(&host)).map_err(|e| format!("store {k}: open: {e}"))?;
        let d = dump(&mut fs)?;
        if !acceptable.exact.contains(&digest(&d.full)) {
            let why = match &acceptable.writeback {
                Some((meta, states)) => writeback_allows(&d, meta, states).err(),
                None => Some("it is no state since its last sync".to_string()),
            };
            if let Some(why) = why {
                return Err(format!(
                    "store {k}: tree after recovery: {why}:\n{}",
                    String::from_utf8_lossy(&d.full)
                ));
            }
        }
        fs.close().map_err(|e| format!("store {k}: close after recovery: {e}"))?;
        let rep = scion_fs::check::check(&h, &dir).map_err(|e| format!("store {k}: check after recovery: {e}"))?;
        if !rep.is_clean() {
            return Err(format!("store {k}: check after recovery:\n{rep}"));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Tally {
    points: usize,
    states: usize,
    failures: Vec<String>,
}

/// Replays the crash states of a recording. `mixes`: random mixes per crash point.
fn explore(rec: &Recording, mixes: usize, seed: u64) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut done: HashSet<[u8; 32]> = HashSet::new();
    let mut t = Tally::default();
    let mut step = 0usize;
    let mut acked = vec![0usize; rec.states.len()];
    let mut meta_acked = vec![0usize; rec.states.len()];
    for upto in 0..=rec.log.len() {
        if upto > 0 {
            match rec.log[upto - 1] {
                HostOp::Mark(m) if m & !0xffff_ffff == BEGIN => step = (m & 0xffff_ffff) as usize + 1,
                HostOp::Mark(m) if m & !0xffff_ffff == ACKED => {
                    acked[((m >> STORE_SHIFT) & 0xff) as usize] = (m & ((1 << STORE_SHIFT) - 1)) as usize
                }
                HostOp::Mark(m) if m & !0xffff_ffff == META_ACKED => {
                    meta_acked[((m >> STORE_SHIFT) & 0xff) as usize] = (m & ((1 << STORE_SHIFT) - 1)) as usize
                }
                _ => {}
            }
        }
        // A cut only matters just before a change or a sync, and at the end.
        if upto < rec.log.len() && !rec.log[upto].is_change() && !rec.log[upto].is_sync() {
            continue;
        }
        t.points += 1;
        // Step `step` (1-based) is under way: in each store, any tree from the one its own
        // last sync acknowledged to the one the step leaves is acceptable.
        let last = rec.states[0].len() - 1;
        let upto_step = step.min(last);
        let acceptable: Vec<Acceptable> = (0..rec.states.len())
            .map(|k| Acceptable {
                // (A journal sync of a `writeback` store makes its metadata durable: no
                // state before it is acceptable, even one whose data is all there.)
                exact: rec.states[k][meta_acked[k]..=upto_step].iter().copied().collect(),
                writeback: rec.writeback[k].then(|| {
                    let meta = rec.dumps[k][meta_acked[k]..=upto_step].iter().map(|d| digest(&d.meta)).collect();
                    (meta, rec.dumps[k][acked[k]..=upto_step].iter().collect())
                }),
            })
            .collect();
        let uncovered = durable(&rec.log, upto).iter().filter(|d| !**d).count();
        let mut variants: Vec<Box<dyn FnMut(usize, &HostOp) -> Fate>> =
            vec![Box::new(|_, _| Fate::Kept), Box::new(|_, _| Fate::Lost)];
        // Every uncovered write torn after its first sector, and before its last (a
        // superblock slot, a journal page, a pack page half written), the rest kept.
        for head in [true, false] {
            variants.push(Box::new(move |_, op: &HostOp| match op {
                HostOp::Write { offset, data, .. } => {
                    let n = sector_spans(*offset, offset + data.len() as u64).count();
                    if n < 2 {
                        return Fate::Kept;
                    }
                    Fate::Torn((0..n).map(|i| (i == 0) == head).collect())
                }
                _ => Fate::Kept,
            }));
        }
        if uncovered > 0 {
            for _ in 0..mixes {
                let mut r = StdRng::seed_from_u64(rng.gen());
                let p_keep = r.gen_range(0.2..0.8);
                variants.push(Box::new(move |_, op: &HostOp| {
                    if let HostOp::Write { offset, data, .. } = op {
                        let n = sector_spans(*offset, offset + data.len() as u64).count();
                        if n > 1 && r.gen_bool(0.3) {
                            return Fate::Torn((0..n).map(|_| r.gen_bool(0.5)).collect());
                        }
                    }
                    if r.gen_bool(p_keep) {
                        Fate::Kept
                    } else {
                        Fate::Lost
                    }
                }));
            }
        }
        for (vi, fate) in variants.iter_mut().enumerate() {
            let img = crash_image(&rec.base, &rec.log, upto, fate);
            if !done.insert(img.digest()) {
                continue;
            }
            t.states += 1;
            let r = catch_unwind(AssertUnwindSafe(|| verify(img, &acceptable))).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(format!("panic: {msg}"))
            });
            if let Err(e) = r {
                let expected: Vec<String> = (acked[0]..=step.min(last))
                    .map(|j| format!("-- store 0's state after {j} steps:\n{}", String::from_utf8_lossy(&rec.dumps[0][j].full)))
                    .collect();
                t.failures.push(format!(
                    "cut before host op {upto} of {} (step {step}, acknowledged through {acked:?}), variant {vi}: {e}\n{}",
                    rec.log.len(),
                    expected.join("")
                ));
                if t.failures.len() >= 3 {
                    return t;
                }
            }
        }
    }
    t
}

// ----- workloads ----------------------------------------------------------------------------

fn bytes(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let b: u8 = rng.gen();
    (0..n).map(|i| b.wrapping_add((i / 7) as u8)).collect()
}

/// Files created and overwritten in place, some ranges large enough to be written ahead as
/// whole chunks, with fsyncs between and an occasional background checkpoint.
fn overwrite(rng: &mut StdRng) -> Vec<Step> {
    let mut s = Vec::new();
    for f in 0..3 {
        s.push(Step::Create(format!("f{f}")));
    }
    for i in 0..24 {
        let f = format!("f{}", rng.gen_range(0..3));
        let big = rng.gen_bool(0.25);
        let off = if big {
            rng.gen_range(0..3) * 65536
        } else {
            rng.gen_range(0..200_000)
        };
        let len = if big {
            65536 * rng.gen_range(1..3)
        } else {
            rng.gen_range(1..9000)
        };
        s.push(Step::Write(f.clone(), off, bytes(rng, len)));
        if rng.gen_bool(0.2) {
            s.push(Step::FlushBehind);
        }
        if rng.gen_bool(0.1) {
            s.push(Step::Truncate(f.clone(), rng.gen_range(0..150_000)));
        }
        if rng.gen_bool(0.15) {
            // Preallocation (ranges in the inode record, format 13), past the end or not,
            // and holes punched through data and preallocated ranges alike.
            let modes = [0, libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE];
            let mode = modes[rng.gen_range(0..3)];
            s.push(Step::Fallocate(f, mode, rng.gen_range(0..200_000), rng.gen_range(1..140_000)));
        }
        if rng.gen_bool(0.35) {
            s.push(Step::Fsync);
        }
        if i % 9 == 8 {
            s.push(Step::Checkpoint);
        }
    }
    s
}

/// The atomic-replace pattern: write a temporary file, fsync it, rename it over the target.
fn rename_over(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("conf".into())];
    for i in 0..14 {
        let target = format!("conf/c{}", rng.gen_range(0..3));
        let tmp = format!("conf/.tmp{i}");
        s.push(Step::Create(tmp.clone()));
        let n = rng.gen_range(10..70_000);
        s.push(Step::Write(tmp.clone(), 0, bytes(rng, n)));
        s.push(Step::SetXattr(
            tmp.clone(),
            b"user.v".to_vec(),
            format!("{i}").into_bytes(),
        ));
        if i % 3 == 1 {
            s.push(Step::FlushBehind);
        }
        s.push(Step::Fsync);
        s.push(Step::Rename(tmp, target));
        if rng.gen_bool(0.5) {
            s.push(Step::Fsync);
        }
        if i == 7 {
            s.push(Step::Checkpoint);
        }
    }
    s
}

/// Directory trees: nested creation, files, symlinks, hard links, renames of whole
/// directories, removal.
fn dir_tree(rng: &mut StdRng) -> Vec<Step> {
    let mut s = Vec::new();
    for a in 0..3 {
        s.push(Step::Mkdir(format!("d{a}")));
        for b in 0..2 {
            s.push(Step::Mkdir(format!("d{a}/e{b}")));
            for c in 0..2 {
                let f = format!("d{a}/e{b}/f{c}");
                s.push(Step::Create(f.clone()));
                let n = rng.gen_range(0..6000);
                s.push(Step::Write(f, 0, bytes(rng, n)));
            }
        }
        if rng.gen_bool(0.5) {
            s.push(Step::Fsync);
        }
        if a == 1 {
            s.push(Step::FlushBehind);
        }
    }
    s.push(Step::Symlink("d0/link".into(), b"e0/f0".to_vec()));
    s.push(Step::Link("d0/e0/f0".into(), "d1/hard".into()));
    s.push(Step::Chmod("d1/e1".into(), 0o700));
    s.push(Step::Rename("d0/e1".into(), "d2/moved".into()));
    s.push(Step::Fsync);
    s.push(Step::Checkpoint);
    s.push(Step::Rename("d1".into(), "d2/moved/d1".into()));
    s.push(Step::Unlink("d0/e0/f1".into()));
    s.push(Step::Unlink("d2/e0/f0".into()));
    s.push(Step::Unlink("d2/e0/f1".into()));
    s.push(Step::Rmdir("d2/e0".into()));
    s.push(Step::Fsync);
    s.push(Step::FlushBehind);
    s.push(Step::Unlink("d0/e0/f0".into()));
    s.push(Step::Write("d2/moved/d1/hard".into(), 100, bytes(rng, 3000)));
    s.push(Step::FlushBehind);
    s
}

/// Clones and snapshots taken while files change, writes on both sides, a destroy, two
/// rollbacks.
fn clones(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("src".into()), Step::Mkdir("src/sub".into())];
    for f in 0..4 {
        let p = format!("src/sub/f{f}");
        s.push(Step::Create(p.clone()));
        let n = rng.gen_range(100..70_000);
        s.push(Step::Write(p, 0, bytes(rng, n)));
    }
    s.push(Step::Link("src/sub/f0".into(), "src/f0-link".into()));
    s.push(Step::Clone("src".into(), "c1".into()));
    s.push(Step::Write("c1/sub/f1".into(), 10, bytes(rng, 5000)));
    s.push(Step::Write("src/sub/f1".into(), 20, bytes(rng, 5000)));
    s.push(Step::Snapshot("src".into(), "s1".into()));
    s.push(Step::Unlink("src/sub/f2".into()));
    s.push(Step::Create("c1/new".into()));
    s.push(Step::Write("c1/new".into(), 0, bytes(rng, 70_000)));
    s.push(Step::Fsync);
    s.push(Step::Clone("c1/sub".into(), "c2".into()));
    s.push(Step::Write("c2/f3".into(), 0, bytes(rng, 200)));
    s.push(Step::Rename("c1/new".into(), "c1/sub/new".into()));
    s.push(Step::Destroy("c1".into()));
    s.push(Step::Write("c2/f0".into(), 0, bytes(rng, 300)));
    s.push(Step::Snapshot("c2".into(), "s2".into()));
    s.push(Step::Snapshot("c2".into(), "sched-1".into()));
    s.push(Step::Write("c2/f0".into(), 0, bytes(rng, 300)));
    s.push(Step::Create("c2/after".into()));
    s.push(Step::CloneFor("c2".into(), "u1".into(), 1000));
    s.push(Step::Write("u1/f0".into(), 3, bytes(rng, 100)));
    s.push(Step::Rollback("c2".into(), "s2".into()));
    s.push(Step::Write("c2/f0".into(), 7, bytes(rng, 300)));
    s.push(Step::Fsync);
    s.push(Step::Rollback("c2".into(), "sched-1".into()));
    s
}

/// Small overwrites of committed, shared chunks (copy-on-abundant-write): patches carried at
/// the head of each new journal across checkpoints, folded for a clone of their directory, on
/// a rename and once a chunk has taken too many.
fn small_writes(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("src".into())];
    for f in 0..3 {
        let p = format!("src/f{f}");
        s.push(Step::Create(p.clone()));
        s.push(Step::Write(p, 0, bytes(rng, 2 * 65536 + 100)));
    }
    s.push(Step::Clone("src".into(), "c1".into()));
    let small = |rng: &mut StdRng, s: &mut Vec<Step>, dir: &str| {
        for _ in 0..3 {
            let p = format!("{dir}/f{}", rng.gen_range(0..3));
            let off = rng.gen_range(0..32) * 4096 + rng.gen_range(0..4080);
            s.push(Step::Write(p, off, bytes(rng, 16)));
        }
    };
    for round in 0..4 {
        small(rng, &mut s, "c1");
        if rng.gen_bool(0.5) {
            s.push(Step::Fsync);
        }
        s.push(Step::Checkpoint);
        if round == 1 {
            s.push(Step::Clone("c1".into(), "c2".into()));
            small(rng, &mut s, "c2");
        }
        if round == 2 {
            s.push(Step::Rename("c1/f2".into(), "c1/f9".into()));
            s.push(Step::Create("c1/f2".into()));
            s.push(Step::Write("c1/f0".into(), 0, bytes(rng, 6000)));
        }
    }
    small(rng, &mut s, "c1");
    s.push(Step::Fsync);
    small(rng, &mut s, "c2");
    s
}

/// Changes of attributes one after another, as an untar's file gets them (the kernel's
/// times, the owner, times, the mode): consecutive changes of one inode are journaled as one
/// record (`attr_merge.rs`); a change of size, another file's record, a sync or a checkpoint
/// between two keeps them apart.
fn attrs(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("t".into())];
    for f in 0..4u32 {
        let p = format!("t/f{f}");
        s.push(Step::Create(p.clone()));
        s.push(Step::Write(p.clone(), 0, bytes(rng, 100 + f as usize * 3000)));
        s.push(Step::Times(p.clone(), 1_000 + f as i64));
        s.push(Step::Chown(p.clone(), 1000 + f));
        s.push(Step::Times(p.clone(), 2_000 + f as i64));
        s.push(Step::Chmod(p.clone(), 0o600 + f as u16));
        s.push(Step::Chmod(p.clone(), 0o620 + f as u16));
        if f == 1 {
            s.push(Step::Fsync);
        }
        s.push(Step::Times(p.clone(), 3_000 + f as i64));
        if f == 2 {
            s.push(Step::Truncate(p.clone(), 50));
            s.push(Step::Chmod(p.clone(), 0o640));
        }
    }
    s.push(Step::Chmod("t/f0".into(), 0o700));
    s.push(Step::Chmod("t/f1".into(), 0o711));
    s.push(Step::Chmod("t/f0".into(), 0o750));
    s.push(Step::Checkpoint);
    s.push(Step::Times("t/f3".into(), 4_000));
    s.push(Step::Chmod("t/f3".into(), 0o444));
    s.push(Step::Fsync);
    s.push(Step::Chown("t/f3".into(), 7));
    s
}

/// 4 KiB overwrites of a large committed file, shared with a clone (fio's randwrite): each
/// checkpoint puts the pages changed since the last one in a layer beside the chunk's block
/// (format 16); chunk 1 takes a page every round, past LAYERS_MAX layers; a truncate into a
/// layered chunk; the last writes journaled only; a file overwritten before its blocks were
/// taken by a checkpoint.
fn layered(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("l".into()), Step::Create("l/f".into())];
    s.push(Step::Write("l/f".into(), 0, bytes(rng, 4 * 65536)));
    s.push(Step::Checkpoint);
    s.push(Step::Clone("l".into(), "lc".into()));
    // A file overwritten in places before any checkpoint took its blocks: patches over the
    // blocks written ahead.
    s.push(Step::Create("l/g".into()));
    s.push(Step::Write("l/g".into(), 0, bytes(rng, 3 * 65536)));
    s.push(Step::Write("l/g".into(), 5 * 4096, bytes(rng, 4096)));
    s.push(Step::Write("l/g".into(), 65536 + 100, bytes(rng, 8192)));
    s.push(Step::Fsync);
    for round in 0..10u64 {
        s.push(Step::Write("l/f".into(), 65536 + (round % 16) * 4096, bytes(rng, 4096)));
        let page = rng.gen_range(0..64u64);
        s.push(Step::Write("l/f".into(), page * 4096, bytes(rng, 4096)));
        if rng.gen_bool(0.3) {
            s.push(Step::Fsync);
        }
        s.push(Step::Checkpoint);
    }
    s.push(Step::Truncate("l/f".into(), 65536 + 10_000));
    s.push(Step::Write("l/f".into(), 65536 + 8192, bytes(rng, 4096)));
    s.push(Step::Fsync);
    s.push(Step::Write("l/f".into(), 65536 + 20_000, bytes(rng, 4096)));
    s
}

/// Pages overwritten here and there in a large committed file, each a layer written ahead
/// (`layer_ahead.rs`, record 25): several in one chunk between checkpoints, then a stream's
/// write into it (its layers let go of), the same bytes again, layers written in an overlapped
/// checkpoint's window (before and after its fold), a clone, a truncate through layers, a
/// chunk past LAYERS_MAX, and layers unsynced at the end.
fn layers_ahead(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("a".into()), Step::Create("a/f".into())];
    s.push(Step::Write("a/f".into(), 0, bytes(rng, 4 * 65536)));
    s.push(Step::Checkpoint);
    let page = |s: &mut Vec<Step>, rng: &mut StdRng, chunk: u64, p: u64| {
        s.push(Step::Write("a/f".into(), chunk * 65536 + p * 4096, bytes(rng, 4096)));
    };
    for p in [1, 5, 9] {
        page(&mut s, rng, 1, p);
    }
    s.push(Step::Fsync);
    page(&mut s, rng, 1, 10); // a stream's next write: chunk 1's layers go
    page(&mut s, rng, 2, 3);
    let same = bytes(rng, 4096);
    s.push(Step::Write("a/f".into(), 2 * 65536 + 8 * 4096, same.clone()));
    s.push(Step::Write("a/f".into(), 2 * 65536 + 8 * 4096, same));
    page(&mut s, rng, 3, 0);
    // Pages over the boundary of chunks 2 and 3, in one write (as write-back merges them):
    // a layer in each.
    s.push(Step::Write("a/f".into(), 3 * 65536 - 4096, bytes(rng, 8192)));
    s.push(Step::CheckpointBegin);
    page(&mut s, rng, 2, 12);
    page(&mut s, rng, 3, 7);
    s.push(Step::Fsync);
    s.push(Step::CheckpointEnd);
    s.push(Step::Clone("a".into(), "ac".into()));
    for round in 0..10u64 {
        page(&mut s, rng, 0, (round * 3) % 16);
        if round == 5 {
            s.push(Step::Write("a/f".into(), 65536 - 8192, bytes(rng, 16384))); // chunks 0 and 1
        }
        if round % 4 == 3 {
            s.push(Step::Checkpoint);
        }
    }
    s.push(Step::Fsync);
    s.push(Step::Truncate("a/f".into(), 2 * 65536 + 30_000));
    page(&mut s, rng, 2, 2);
    s.push(Step::Truncate("a/f".into(), 4 * 65536));
    s.push(Step::Fsync);
    page(&mut s, rng, 3, 14);
    page(&mut s, rng, 1, 2);
    s
}

/// Streams of 4 KiB writes, as NFS clients send them: each chunk a stream fills goes to a
/// pack, its block's record replacing the stream's journaled writes (`retract.rs`). Runs cut
/// short by an fsync, a chmod, another file's writes and a checkpoint's window; a stream
/// over a committed file; full chunks unsynced at the end.
fn streams(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("s".into()), Step::Create("s/b".into())];
    s.push(Step::Write("s/b".into(), 0, bytes(rng, 3 * 65536)));
    s.push(Step::Checkpoint);
    s.push(Step::Create("s/a".into()));
    s.push(Step::Create("s/c".into()));
    let w = |s: &mut Vec<Step>, rng: &mut StdRng, p: &str, page: u64| {
        s.push(Step::Write(p.into(), page * 4096, bytes(rng, 4096)));
    };
    for page in 0..48 {
        w(&mut s, rng, "s/a", page);
        match page {
            20 => s.push(Step::Fsync),                     // in chunk 1's run
            36 => s.push(Step::Chmod("s/a".into(), 0o600)), // in chunk 2's
            _ => {}
        }
    }
    for page in 0..16 {
        w(&mut s, rng, "s/a", 48 + page);
        w(&mut s, rng, "s/c", page);
    }
    s.push(Step::Fsync);
    s.push(Step::CheckpointBegin);
    for page in 16..32 {
        w(&mut s, rng, "s/c", page);
    }
    s.push(Step::CheckpointEnd);
    for page in 16..32 {
        w(&mut s, rng, "s/b", page);
    }
    s.push(Step::Fsync);
    for page in 64..84 {
        w(&mut s, rng, "s/a", page);
    }
    // A small file written in pieces and synced (an NFS client's WRITEs and COMMIT): the
    // sync puts it in a pack as its tail block in place of the pieces' records. Then an
    // appender syncing after each short write, whose writes stay journaled.
    s.push(Step::Create("s/d".into()));
    for (at, len) in [(0, 4096), (4096, 4096), (8192, 1808)] {
        s.push(Step::Write("s/d".into(), at, bytes(rng, len)));
    }
    s.push(Step::Fsync);
    s.push(Step::Create("s/e".into()));
    s.push(Step::Write("s/e".into(), 0, bytes(rng, 16384)));
    for i in 0..3 {
        s.push(Step::Write("s/e".into(), 16384 + i * 100, bytes(rng, 100)));
        s.push(Step::Fsync);
    }
    s
}

/// Background checkpoints overlapped with requests: changes and fsyncs between a
/// checkpoint's fold and its commit (a small overwrite carried, a whole chunk written
/// ahead, a rename, a removal), a checkpoint taken while one is in flight (it commits that
/// one first), and a crash with one in flight.
fn overlapped(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("d".into())];
    for f in 0..4 {
        let p = format!("d/f{f}");
        s.push(Step::Create(p.clone()));
        s.push(Step::Write(p, 0, bytes(rng, 3000 + 70000 * (f % 2))));
    }
    s.push(Step::Checkpoint);
    s.push(Step::Write("d/f0".into(), 10, bytes(rng, 500)));
    s.push(Step::CheckpointBegin);
    s.push(Step::Write("d/f1".into(), 100, bytes(rng, 50)));
    s.push(Step::Create("d/g0".into()));
    s.push(Step::Write("d/g0".into(), 0, bytes(rng, 70000)));
    s.push(Step::Rename("d/f2".into(), "d/f9".into()));
    s.push(Step::Fsync);
    s.push(Step::Write("d/f3".into(), 5, bytes(rng, 20)));
    s.push(Step::CheckpointEnd);
    s.push(Step::Write("d/f1".into(), 7, bytes(rng, 30)));
    s.push(Step::CheckpointBegin);
    s.push(Step::Unlink("d/f3".into()));
    s.push(Step::Mkdir("d/e".into()));
    s.push(Step::Create("d/e/h".into()));
    s.push(Step::Checkpoint);
    s.push(Step::CheckpointEnd);
    s.push(Step::Write("d/e/h".into(), 0, bytes(rng, 100)));
    s.push(Step::CheckpointBegin);
    s.push(Step::Write("d/f0".into(), 0, bytes(rng, 40)));
    s.push(Step::Create("d/last".into()));
    s.push(Step::Fsync);
    s.push(Step::Write("d/f9".into(), 1, bytes(rng, 10)));
    s
}

/// Large files written, checkpointed and deleted, so checkpoints free blocks and punch
/// holes while new data is written ahead.
fn free_space(rng: &mut StdRng) -> Vec<Step> {
    let mut s = Vec::new();
    for round in 0..4 {
        let f = format!("big{round}");
        s.push(Step::Create(f.clone()));
        for c in 0..4 {
            s.push(Step::Write(f.clone(), c * 65536, bytes(rng, 65536)));
        }
        s.push(Step::Fsync);
        s.push(Step::Checkpoint);
        if round > 0 {
            s.push(Step::Unlink(format!("big{}", round - 1)));
        }
        s.push(Step::Truncate(f.clone(), 70_000));
        if rng.gen_bool(0.5) {
            s.push(Step::Fsync);
        }
        s.push(Step::Checkpoint);
        s.push(Step::Write(f, 1000, bytes(rng, 2000)));
    }
    s
}

/// Files written a chunk at a time side by side (scattered in the pack), repacked, written
/// again and repacked again: a cut inside a pass must find each file's old blocks or its new
/// ones, never a mix, and the moved blocks of an unfinished pass must not outlive it.
fn repacked(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Mkdir("r".into()), Step::Mkdir("r/sub".into())];
    let files = ["r/a", "r/b", "r/sub/c"];
    for f in files {
        s.push(Step::Create(f.into()));
    }
    for c in 0..3 {
        for f in files {
            s.push(Step::Write(f.into(), c * 65536, bytes(rng, 65536)));
        }
    }
    s.push(Step::Fsync);
    s.push(Step::Repack("r".into()));
    // A partial chunk (kept in memory) and a whole one (written ahead) on moved files.
    s.push(Step::Write("r/a".into(), 70_000, bytes(rng, 30_000)));
    s.push(Step::Write("r/b".into(), 3 * 65536, bytes(rng, 65536)));
    s.push(Step::Write("r/sub/c".into(), 0, bytes(rng, 65536)));
    s.push(Step::Fsync);
    s.push(Step::Repack("r".into()));
    s.push(Step::Unlink("r/sub/c".into()));
    s.push(Step::Repack("r".into()));
    s
}

/// Blocks only a snapshot holds compressed and relocated, then brought back into a live tree
/// by a rollback and overwritten, and the snapshot destroyed: a cut anywhere in a pass must
/// find each block at its old place or its compressed one (the relocation committed), and a
/// rollback's files read the compressed blocks right.
fn compressed(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![
        Step::Mkdir("src".into()),
        Step::Clone("src".into(), "c".into()),
        Step::Create("c/a".into()),
        Step::Create("c/b".into()),
        Step::Write("c/a".into(), 0, bytes(rng, 3 * 65536)),
        Step::Write("c/b".into(), 0, bytes(rng, 100_000)),
        Step::Fsync,
        Step::Snapshot("c".into(), "s1".into()),
        Step::Write("c/a".into(), 0, bytes(rng, 3 * 65536)),
        Step::Write("c/b".into(), 65536, bytes(rng, 40_000)),
        Step::Fsync,
        Step::Compress,
        Step::Rollback("c".into(), "s1".into()),
        Step::Write("c/b".into(), 0, bytes(rng, 65536)),
        Step::Fsync,
    ];
    s.push(Step::Snapshot("c".into(), "s2".into()));
    s.push(Step::Write("c/a".into(), 65536, bytes(rng, 65536)));
    s.push(Step::Fsync);
    s.push(Step::Compress);
    s.push(Step::Destroy("c/.snapshot/s1".into()));
    s.push(Step::Checkpoint);
    s
}

/// Files unlinked while open (their data in the packs, never journaled), a clone destroyed
/// while a file and a directory in it are held (every change through them refused), and
/// writes attempted inside snapshots and inside a clone nested in one.
fn held_and_refused(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![
        Step::Mkdir("d".into()),
        Step::Create("d/a".into()),
        Step::Write("d/a".into(), 0, bytes(rng, 70_000)),
        Step::Fsync,
        Step::Open("d/a".into(), 0),
        Step::Unlink("d/a".into()),
        // Whole chunks (written ahead, unjournaled) and a partial one (written behind).
        Step::WriteHeld(0, 0, bytes(rng, 3 * 65536)),
        Step::WriteHeld(0, 300_000, bytes(rng, 5000)),
        Step::FlushBehind,
        Step::Create("d/b".into()),
        Step::Write("d/b".into(), 0, bytes(rng, 9000)),
        Step::Fsync,
        Step::Checkpoint,
        Step::WriteHeld(0, 65536, bytes(rng, 65536)),
        Step::Fsync,
        Step::Release(0),
        Step::Checkpoint,
        Step::Mkdir("src".into()),
        Step::Mkdir("src/sub".into()),
        Step::Create("src/f".into()),
        Step::Write("src/f".into(), 0, bytes(rng, 20_000)),
        Step::Clone("src".into(), "c".into()),
        Step::Open("c/f".into(), 1),
        Step::Open("c/sub".into(), 2),
        Step::WriteHeld(1, 0, bytes(rng, 100)),
        Step::Destroy("c".into()),
    ];
    s.push(Step::Refused(
        Box::new(Step::WriteHeld(1, 0, bytes(rng, 70_000))),
        libc::ESTALE,
    ));
    s.push(Step::Refused(Box::new(Step::CreateIn(2, "x".into())), libc::ESTALE));
    s.push(Step::Create("after".into()));
    s.push(Step::Fsync);
    s.push(Step::Release(1));
    s.push(Step::Release(2));
    s.push(Step::Clone("src/sub".into(), "src/nested".into()));
    s.push(Step::Create("src/nested/g".into()));
    s.push(Step::Snapshot("src".into(), "s".into()));
    for (p, errno) in [
        ("src/.snapshot/s/f", libc::EROFS),
        ("src/.snapshot/s/nested/g", libc::EROFS),
    ] {
        s.push(Step::Refused(
            Box::new(Step::Write(p.into(), 0, bytes(rng, 100))),
            errno,
        ));
        s.push(Step::Refused(Box::new(Step::Truncate(p.into(), 0)), errno));
        s.push(Step::Refused(
            Box::new(Step::SetXattr(p.into(), b"user.x".to_vec(), b"1".to_vec())),
            errno,
        ));
    }
    s.push(Step::Refused(
        Box::new(Step::Create("src/.snapshot/s/nested/new".into())),
        libc::EROFS,
    ));
    s.push(Step::Refused(
        Box::new(Step::Unlink("src/.snapshot/s/f".into())),
        libc::EROFS,
    ));
    s.push(Step::Write("src/nested/g".into(), 0, bytes(rng, 3000)));
    s.push(Step::Fsync);
    s
}

/// Files made without a name (O_TMPFILE) and named later: whole chunks written ahead,
/// buffered bytes, bytes written behind, an xattr and a preallocated range, across a
/// checkpoint and an overlapped one; one never named, and files made after them, whose object
/// ids replay after the reserved ones.
fn tmpfiles(rng: &mut StdRng) -> Vec<Step> {
    vec![
        Step::Mkdir("d".into()),
        Step::Create("d/x".into()),
        Step::Write("d/x".into(), 0, bytes(rng, 5000)),
        Step::Fsync,
        Step::Tmpfile("d".into(), 0),
        Step::WriteHeld(0, 0, bytes(rng, 3 * 65536)),
        Step::WriteHeld(0, 200_000, bytes(rng, 5000)),
        Step::FlushBehind,
        Step::Tmpfile("d".into(), 1),
        Step::WriteHeld(1, 0, bytes(rng, 70_000)),
        Step::Create("d/after".into()),
        Step::Write("d/after".into(), 0, bytes(rng, 300)),
        Step::Fsync,
        Step::Checkpoint,
        Step::WriteHeld(0, 65_536 + 10, bytes(rng, 4000)),
        Step::LinkHeld(0, "d/named".into()),
        Step::Write("d/named".into(), 3, bytes(rng, 10)),
        Step::SetXattr("d/named".into(), b"user.k".to_vec(), b"v".to_vec()),
        Step::Fsync,
        Step::Tmpfile("".into(), 2),
        Step::WriteHeld(2, 0, bytes(rng, 100)),
        Step::Fallocate("d/x".into(), libc::FALLOC_FL_KEEP_SIZE, 8192, 65536),
        Step::LinkHeld(2, "small".into()),
        Step::Link("small".into(), "d/small2".into()),
        Step::CheckpointBegin,
        Step::Tmpfile("d".into(), 3),
        Step::WriteHeld(3, 0, bytes(rng, 70_000)),
        Step::LinkHeld(3, "d/in-window".into()),
        Step::Create("d/after2".into()),
        Step::CheckpointEnd,
        Step::Release(0),
        Step::Release(1),
        Step::Release(2),
        Step::Release(3),
        Step::Unlink("d/named".into()),
        Step::Fsync,
    ]
}

/// Long runs of whole chunks (a megabyte at once, as streaming writeback sends them) go to
/// the packs with direct writes into space allocated ahead, which each sync cuts back:
/// crashes around the allocation, the direct writes and the cut.
fn direct_runs(rng: &mut StdRng) -> Vec<Step> {
    let mut s = vec![Step::Create("big".into()), Step::Create("small".into())];
    for i in 0..3u64 {
        s.push(Step::Write("big".into(), i << 20, bytes(rng, 1 << 20)));
        s.push(Step::Write("small".into(), i * 5000, bytes(rng, 5000)));
        if i == 1 {
            s.push(Step::Checkpoint);
        }
        s.push(Step::Fsync);
    }
    s.push(Step::Write("big".into(), 3 << 20, bytes(rng, 1 << 20)));
    s.push(Step::Truncate("big".into(), 1 << 20));
    s.push(Step::Checkpoint);
    s
}

/// Long writes off the chunk grid (`pieces.rs`): a stream shifted by one odd write, its
/// WRITEs taken in order (each one's tail piece taken back by the next, which puts the
/// chunk in a pack), out of order (the later one's head piece journaled, an earlier one's
/// tail floating over later records), with another file's record, a sync and a
/// checkpoint's window between some of them.
fn shifted_stream(rng: &mut StdRng) -> Vec<Step> {
    const LONG: u64 = 3 * 65536;
    let shift = 65536 + 24576;
    let mut s = vec![Step::Create("f".into()), Step::Create("g".into())];
    s.push(Step::Write("f".into(), 0, bytes(rng, shift as usize)));
    let at = |k: u64| shift + k * LONG;
    let mut w = |s: &mut Vec<Step>, k: u64| s.push(Step::Write("f".into(), at(k), bytes(rng, LONG as usize)));
    w(&mut s, 0);
    w(&mut s, 1);
    w(&mut s, 3);
    w(&mut s, 2);
    s.push(Step::Write("g".into(), 0, vec![7; 100]));
    w(&mut s, 4);
    s.push(Step::Fsync);
    w(&mut s, 5);
    s.push(Step::CheckpointBegin);
    w(&mut s, 6);
    s.push(Step::CheckpointEnd);
    w(&mut s, 7);
    w(&mut s, 8);
    s.push(Step::Fsync);
    w(&mut s, 9);
    w(&mut s, 10);
    // Pieces floating over later writes' records (`pieces.rs`): 11's tail over 13 and 14,
    // 13's over 14, until 12 and then 15 bring the rest of their chunks.
    for k in [11, 13, 14, 12, 15] {
        w(&mut s, k);
    }
    s.push(Step::Fsync);
    s
}

/// Cubes and the main store written in turn (each cube a store of its own on the same
/// host, as `STORE/cubes.d/N`): cube 1 `ordered` (its fsyncs acknowledge it alone), cube 2
/// `nofsync` (its fsyncs are answered without a sync; only its checkpoints acknowledge it).
/// Each store's crash state must be one its own acknowledgements allow, whatever the others
/// synced. Cube 3 is `nojournal`: nothing of it is written between its checkpoints (its
/// fsync takes one). Cube 4 is `data`: whole chunks go into its journal, not ahead to packs.
fn cubes(rng: &mut StdRng) -> Vec<Step> {
    let in1 = |s: Step| Step::In(1, Box::new(s));
    let in2 = |s: Step| Step::In(2, Box::new(s));
    let in3 = |s: Step| Step::In(3, Box::new(s));
    let in4 = |s: Step| Step::In(4, Box::new(s));
    vec![
        in4(Step::JournalData),
        in4(Step::Create("j".into())),
        in4(Step::Write("j".into(), 0, bytes(rng, 200_000))),
        in4(Step::Fsync),
        in4(Step::Write("j".into(), 65536, bytes(rng, 131_072))),
        in3(Step::NoJournal),
        in3(Step::Create("n".into())),
        in3(Step::Write("n".into(), 0, bytes(rng, 9000))),
        in3(Step::Mkdir("nd".into())),
        in1(Step::Create("a".into())),
        in2(Step::Create("b".into())),
        Step::Create("r".into()),
        in1(Step::Write("a".into(), 0, bytes(rng, 6000))),
        in2(Step::Write("b".into(), 0, bytes(rng, 70_000))),
        Step::Write("r".into(), 0, bytes(rng, 3000)),
        in1(Step::Fsync),
        in2(Step::FsyncIgnored),
        in2(Step::Write("b".into(), 70_000, bytes(rng, 5000))),
        in1(Step::Mkdir("d".into())),
        in1(Step::Write("a".into(), 6000, bytes(rng, 8000))),
        Step::Fsync,
        in2(Step::Checkpoint),
        in1(Step::Rename("a".into(), "d/a2".into())),
        in2(Step::Unlink("b".into())),
        in2(Step::Create("c".into())),
        in2(Step::Write("c".into(), 0, bytes(rng, 2000))),
        in2(Step::FsyncIgnored),
        Step::Write("r".into(), 3000, bytes(rng, 3000)),
        in1(Step::Snapshot("d".into(), "s".into())),
        in1(Step::Write("d/a2".into(), 0, bytes(rng, 100))),
        in3(Step::Fsync),
        in3(Step::Rename("n".into(), "nd/n".into())),
        in3(Step::Write("nd/n".into(), 9000, bytes(rng, 70_000))),
        in1(Step::Fsync),
        Step::Unlink("r".into()),
        in3(Step::Checkpoint),
        in3(Step::Unlink("nd/n".into())),
        in4(Step::Fsync),
        in4(Step::Truncate("j".into(), 70_000)),
        in4(Step::Checkpoint),
        in4(Step::Write("j".into(), 0, bytes(rng, 65536))),
        // Store 3 journals again: made unjournaled before the switch, then changed after it
        // and fsynced through the journal.
        in3(Step::Mkdir("u".into())),
        in3(Step::Create("u/f".into())),
        in3(Step::Write("u/f".into(), 0, bytes(rng, 5000))),
        in3(Step::Journal),
        in3(Step::Create("u/g".into())),
        in3(Step::Write("u/f".into(), 5000, bytes(rng, 3000))),
        in3(Step::Write("u/g".into(), 0, bytes(rng, 70_000))),
        in3(Step::Fsync),
        in3(Step::Rename("u/g".into(), "u/h".into())),
    ]
}

/// A `writeback` cube (store 1) beside the root: its background syncs write the journal
/// without the packs, so a crash may find a chunk's block missing under durable metadata.
/// Its tree must be one its journal syncs allow, and each byte of its files one the file
/// held since its last fsync; the root stays exact.
fn writeback_cube(rng: &mut StdRng) -> Vec<Step> {
    let in1 = |s: Step| Step::In(1, Box::new(s));
    vec![
        in1(Step::Writeback),
        in1(Step::Create("f".into())),
        in1(Step::Write("f".into(), 0, bytes(rng, 150_000))),
        in1(Step::Fsync),
        Step::Create("r".into()),
        in1(Step::Write("f".into(), 0, bytes(rng, 131_072))),
        in1(Step::Mkdir("d".into())),
        Step::Write("r".into(), 0, bytes(rng, 70_000)),
        in1(Step::SyncJournal),
        in1(Step::Create("d/g".into())),
        in1(Step::Write("d/g".into(), 0, bytes(rng, 70_000))),
        in1(Step::Write("f".into(), 65_600, bytes(rng, 100))),
        in1(Step::SyncJournal),
        Step::Fsync,
        in1(Step::Write("f".into(), 131_072, bytes(rng, 65_536))),
        in1(Step::Rename("d/g".into(), "g".into())),
        in1(Step::SyncJournal),
        in1(Step::Fsync),
        in1(Step::Write("g".into(), 0, bytes(rng, 65_536))),
        in1(Step::Truncate("f".into(), 100_000)),
        in1(Step::SyncJournal),
        in1(Step::Checkpoint),
        in1(Step::Write("f".into(), 0, bytes(rng, 65_536))),
        in1(Step::SyncJournal),
    ]
}

#[test]
fn every_crash_state_recovers() {
    let full = std::env::var("SCION_CRASH").is_ok_and(|v| v == "full");
    let seed: u64 = std::env::var("SCION_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mixes = if full { 24 } else { 3 };
    let workloads: [(&str, fn(&mut StdRng) -> Vec<Step>); 19] = [
        ("overwrite + fsync", overwrite),
        ("attribute changes", attrs),
        ("rename over", rename_over),
        ("directory trees", dir_tree),
        ("clones + snapshots", clones),
        ("deletes freeing space", free_space),
        ("small writes to clones", small_writes),
        ("repack", repacked),
        ("compressed old versions", compressed),
        ("held, unlinked, refused", held_and_refused),
        ("direct runs", direct_runs),
        ("cubes and the root", cubes),
        ("writeback cube", writeback_cube),
        ("overlapped checkpoints", overlapped),
        ("tmpfiles", tmpfiles),
        ("streams of small writes", streams),
        ("layered chunks", layered),
        ("layers written ahead", layers_ahead),
        ("shifted long writes", shifted_stream),
    ];
    println!("crash states: seed {seed}, {mixes} random mixes per crash point");
    println!(
        "{:<24} {:>6} {:>9} {:>8} {:>8} {:>9}",
        "workload", "steps", "host ops", "points", "states", "failures"
    );
    let mut failures = Vec::new();
    let mut total = 0;
    // SCION_CRASH_WORKLOAD=NAME: that workload alone (a name's prefix).
    let only = std::env::var("SCION_CRASH_WORKLOAD").unwrap_or_default();
    for (name, gen) in workloads.into_iter().filter(|(n, _)| n.starts_with(&only)) {
        let steps = gen(&mut StdRng::seed_from_u64(seed));
        let rec = record(&steps);
        if name == "direct runs" {
            // The workload is there for the direct path: it must allocate the pack ahead
            // (16 MiB past what was written) and cut it back.
            let grown = rec
                .log
                .iter()
                .any(|o| matches!(o, HostOp::SetLen { len, .. } if *len > 16 << 20));
            assert!(grown, "no allocation ahead: the direct write path was not taken");
        }
        if name == "streams of small writes" {
            // The workload is there for the runs replaced by their chunks' blocks: without
            // them the journals got 457,277 bytes here, with them 276,527 (before the small
            // file settled at its fsync and the appender were added; 234,605 now).
            let is_journal = |p: &Path| p.to_string_lossy().contains("/journal/");
            let mut journals: HashSet<u64> = rec.base.names().filter(|(p, _)| is_journal(p)).map(|(_, i)| i).collect();
            journals.extend(rec.log.iter().filter_map(|o| match o {
                HostOp::Create { path, ino } if is_journal(path) => Some(*ino),
                _ => None,
            }));
            let journaled: usize = rec
                .log
                .iter()
                .filter_map(|o| match o {
                    HostOp::Write { ino, data, .. } if journals.contains(ino) && data.iter().any(|b| *b != 0) => Some(data.len()),
                    _ => None,
                })
                .sum();
            println!("streams of small writes: {journaled} bytes written to journals");
            assert!(journaled < 384 << 10, "{journaled} journal bytes: no run was replaced by its block");
        }
        // The issue's ten thousand power cuts with cubes and the root writing at once: the
        // full run gives the workloads over several stores more random mixes per point.
        let mixes = if full && rec.states.len() > 1 { mixes * 8 } else { mixes };
        let t = explore(&rec, mixes, seed);
        println!(
            "{name:<24} {:>6} {:>9} {:>8} {:>8} {:>9}",
            steps.len(),
            rec.log.iter().filter(|o| !matches!(o, HostOp::Mark(_))).count(),
            t.points,
            t.states,
            t.failures.len()
        );
        total += t.states;
        failures.extend(t.failures.into_iter().map(|f| format!("[{name}] {f}")));
    }
    println!("{total} crash states checked, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
