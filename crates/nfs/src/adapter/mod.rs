//! The NFSv3 adapter: a thin translation from NFS calls to calls on the engine, as the FUSE
//! adapter is for kernel requests.
//!
//! Two things FUSE gives for free are the adapter's job here:
//! - **Permissions.** No kernel checks an NFS call, so every call is checked against the
//!   caller (`who.rs`) with the engine's own rules (`scion_fs::access`, ACLs included), as
//!   `generic_permission` would, and knfsd's owner override for reads and writes (the owner
//!   of a file may write it whatever its mode, as through a descriptor opened before a chmod).
//! - **References.** The kernel tells FUSE when it forgets an inode; an NFS client never
//!   does. The adapter holds one engine reference per inode it has handed out (`held`),
//!   and gives it back when the inode has no name left (`sweep`), so that a removed file's
//!   space is freed.
//! - **Handles across restarts.** The kernel never asks FUSE for an inode it did not look
//!   up since the mount; an NFS client asks for any it was ever given. An inode not held is
//!   revived (`revive`): found by number through the path it was last seen at (`hints.rs`)
//!   or a walk of its namespace, or STALE.
//!
//! Here: the adapter's state, handles and references, exports, what it tells the mount's
//! kernel. `rules.rs`: who may do what. `read.rs`: the calls that change nothing.
//! `change.rs`: the calls that change the tree.

use crate::handle::{Handle, HandleKey};
use crate::hints::{self, Hints};
use crate::who::Identity;
use nfs3_server::nfs3_types::nfs3::{
    fattr3, filename3, ftype3, nfspath3, nfsstat3, nfstime3, sattr3, set_atime, set_mtime, specdata3, stable_how,
    Nfs3Option, ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY, ACCESS3_READ,
    FSF3_CANSETTIME, FSF3_HOMOGENEOUS, FSF3_LINK, FSF3_SYMLINK, FSINFO3resok, createverf3, post_op_attr,
};
use nfs3_server::vfs::{
    DirEntryPlus, NextResult, NfsFileSystem, NfsReadFileSystem, ReadDirPlusIterator, VFSCapabilities,
};
use scion_daemon::router::{Router, VolumeId};
use scion_daemon::Engine;
use scion_fs::access::{Caller, R, W, X};
use scion_fs::clone::SNAPDIR_BIT;
use scion_fs::{Attr, Fs, FsError, Inval, Kind, SetAttr, Stamp, Ts};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

mod change;
mod read;
mod rules;

use rules::{may, without_privs};

/// Deepest directory walked up from (`thawed`).
const MAX_DEPTH: usize = 4096;

fn components(p: &[u8]) -> Vec<Vec<u8>> {
    p.split(|&b| b == b'/').filter(|n| !n.is_empty() && *n != b".").map(<[u8]>::to_vec).collect()
}

fn join(names: &[Vec<u8>]) -> String {
    names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect::<Vec<_>>().join("/")
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Handles remembered as gone (so that a client asking again costs no walk): past this,
/// the set starts again.
const MAX_GONE: usize = 1 << 16;
/// Hints kept of inodes not revived since the restart that read them (a client may still
/// hold their handles): past this, only the held inodes' are written.
const MAX_HINTS: usize = 1 << 20;
/// Sweeps between writes of the hints when the held set did not change (renames through
/// the mount change paths without the adapter knowing).
const HINTS_EVERY: u64 = 6;

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Largest READ and WRITE offered to clients.
const MAX_IO: u32 = 1 << 20;

/// Cheap to clone: clones share the held references (the server has one, the sweeper one).
#[derive(Clone)]
pub struct ScionNfs {
    router: Arc<Router>,
    key: HandleKey,
    who: Identity,
    read_only: bool,
    /// Global inode numbers the adapter holds one engine reference to.
    held: Arc<Mutex<HashSet<u64>>>,
    /// The same, oldest first (with numbers given back since, skipped when met): which to
    /// give back first past `max_held` (`shed`).
    order: Arc<Mutex<VecDeque<u64>>>,
    /// Inodes held at most after a sweep: past it, the oldest are given back and found
    /// again by number when a client uses them (about 1 KB of engine memory each).
    max_held: usize,
    /// Tells the mount's kernel what a change made here made wrong in its caches (global
    /// inode numbers); called without the engine lock.
    tell: Option<Invalidator>,
    /// The exported directories: their paths (components from the mount root) and global
    /// inode numbers. A client mounts one of them or a directory below; `..` stops at them.
    exports: Arc<Vec<(Vec<Vec<u8>>, u64)>>,
    /// Directories below which every change is refused (`--read-only DIR`).
    frozen: Arc<HashSet<u64>>,
    /// Directories the server holds that no export holds (those above the exports): a handle
    /// of one, made under other exports, is STALE.
    above: Arc<HashSet<u64>>,
    /// The store the hints are kept in.
    store: PathBuf,
    /// Hints read at start for inodes not revived yet (`hints.rs`).
    hints: Arc<Mutex<Hints>>,
    /// Files with several names: the names (from their namespace's root) of the one a client
    /// reached each by, since such a file has no one place (`names_of` gives none). Kept as
    /// its hint, so that after a restart it is found in an export by that name.
    linked_at: Arc<Mutex<HashMap<u64, Vec<Vec<u8>>>>>,
    /// Handles known to name nothing any more, by (graft, inode).
    gone: Arc<Mutex<HashSet<hints::Key>>>,
    /// Whether the held set changed since the hints were last written, and sweeps since.
    held_changed: Arc<AtomicBool>,
    sweeps: Arc<AtomicU64>,
    /// Inodes revived by their hint and by a walk (`status`, tests).
    revived: Arc<[AtomicU64; 2]>,
}

/// See `ScionNfs::tell`.
pub type Invalidator = Arc<dyn Fn(&[Inval]) + Send + Sync>;

/// An inode of a call: its volume, that volume's engine, its number there.
struct At {
    vol: VolumeId,
    engine: Engine,
    ino: u64,
}

impl At {
    #[track_caller]
    fn fs(&self) -> scion_fs::Locked<'_> {
        self.engine.lock()
    }
}

/// The NFS status for an engine error, logged once here as it leaves the engine when it is
/// the engine's own failure.
fn status(e: FsError) -> nfsstat3 {
    use nfsstat3::*;
    match e.errno() {
        libc::EPERM => NFS3ERR_PERM,
        libc::ENOENT => NFS3ERR_NOENT,
        libc::EACCES | libc::EBUSY => NFS3ERR_ACCES,
        libc::EEXIST => NFS3ERR_EXIST,
        libc::EXDEV => NFS3ERR_XDEV,
        libc::ENOTDIR => NFS3ERR_NOTDIR,
        libc::EISDIR => NFS3ERR_ISDIR,
        libc::EINVAL => NFS3ERR_INVAL,
        libc::EFBIG => NFS3ERR_FBIG,
        libc::ENOSPC => NFS3ERR_NOSPC,
        libc::EROFS => NFS3ERR_ROFS,
        libc::EMLINK => NFS3ERR_MLINK,
        libc::ENAMETOOLONG => NFS3ERR_NAMETOOLONG,
        libc::ENOTEMPTY => NFS3ERR_NOTEMPTY,
        libc::EDQUOT => NFS3ERR_DQUOT,
        libc::ESTALE => NFS3ERR_STALE,
        libc::EOPNOTSUPP | libc::ENOSYS => NFS3ERR_NOTSUPP,
        _ => {
            log::error!("nfs: {e}");
            NFS3ERR_IO
        }
    }
}

fn ftype(k: Kind) -> ftype3 {
    match k {
        Kind::File => ftype3::NF3REG,
        Kind::Dir => ftype3::NF3DIR,
        Kind::Symlink => ftype3::NF3LNK,
        Kind::Fifo => ftype3::NF3FIFO,
        Kind::Socket => ftype3::NF3SOCK,
        Kind::CharDev => ftype3::NF3CHR,
        Kind::BlockDev => ftype3::NF3BLK,
    }
}

fn nfs_time(t: Ts) -> nfstime3 {
    nfstime3 {
        seconds: t.sec.clamp(0, u32::MAX as i64) as u32,
        nseconds: t.nsec,
    }
}

fn ts(t: nfstime3) -> Ts {
    Ts {
        sec: t.seconds as i64,
        nsec: t.nseconds.min(999_999_999),
    }
}

/// A file's attributes as NFS carries them; `fileid` is the global inode number, unique
/// across volumes and namespaces as `st_ino` is through the mount.
fn fattr(a: &Attr, vol: VolumeId) -> fattr3 {
    fattr3 {
        type_: ftype(a.kind),
        mode: u32::from(a.perm),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.blocks * 512,
        rdev: specdata3 {
            specdata1: libc::major(u64::from(a.rdev) as libc::dev_t),
            specdata2: libc::minor(u64::from(a.rdev) as libc::dev_t),
        },
        fsid: 1,
        fileid: vol.global(a.ino),
        atime: nfs_time(a.atime),
        mtime: nfs_time(a.mtime),
        ctime: nfs_time(a.ctime),
    }
}

fn name<'a>(n: &'a filename3<'_>) -> &'a [u8] {
    n.as_ref()
}

impl ScionNfs {
    /// The adapter for `exports` and `frozen` directories (paths from the mount root, as
    /// `/`-separated names): each must be a directory.
    pub fn new(
        router: Arc<Router>,
        key: HandleKey,
        who: Identity,
        read_only: bool,
        tell: Option<Invalidator>,
        exports: &[Vec<u8>],
        frozen: &[Vec<u8>],
    ) -> Result<ScionNfs, String> {
        let store = router.main().lock().store_dir().to_path_buf();
        let mut nfs = ScionNfs {
            hints: Arc::new(Mutex::new(hints::load(&store))),
            linked_at: Arc::default(),
            store,
            router,
            key,
            who,
            read_only,
            held: Arc::new(Mutex::new(HashSet::new())),
            order: Arc::default(),
            max_held: usize::MAX,
            tell,
            // The whole mount while the exports themselves are looked up (as root: the
            // administrator named them).
            exports: Arc::new(vec![(Vec::new(), VolumeId::MAIN.global(scion_fs::ROOT_INO))]),
            frozen: Arc::new(HashSet::new()),
            above: Arc::default(),
            gone: Arc::default(),
            held_changed: Arc::default(),
            sweeps: Arc::default(),
            revived: Arc::default(),
        };
        let mut ex = Vec::new();
        for p in exports {
            let names = components(p);
            ex.push((names.clone(), nfs.resolve_dir(&names).map_err(|e| format!("--export {}: {e}", show(p)))?));
        }
        if ex.is_empty() {
            ex.push((Vec::new(), VolumeId::MAIN.global(scion_fs::ROOT_INO)));
        }
        let mut fr = HashSet::new();
        for p in frozen {
            fr.insert(nfs.resolve_dir(&components(p)).map_err(|e| format!("--read-only {}: {e}", show(p)))?);
        }
        nfs.exports = Arc::new(ex);
        nfs.frozen = Arc::new(fr);
        let held: Vec<u64> = locked(&nfs.held).iter().copied().collect();
        let above = held.into_iter().filter(|&g| match nfs.router.route(g) {
            Ok((vol, engine, ino)) => !nfs.in_exports(vol, &engine, ino, &[]),
            Err(_) => true,
        });
        nfs.above = Arc::new(above.collect());
        Ok(nfs)
    }

    /// The global inode number of the directory at `names` from the mount root, held for
    /// the server's life (looked up as root: the administrator named it).
    fn resolve_dir(&self, names: &[Vec<u8>]) -> Result<u64, String> {
        let mut h = self.handle(VolumeId::MAIN.global(scion_fs::ROOT_INO));
        for n in names {
            let at = self.at(&h).map_err(|e| format!("{e:?}"))?;
            let mut fs = at.fs();
            let a = fs.lookup(at.ino, n).map_err(|e| e.to_string())?;
            h = match self.router.grafted(at.vol, a.ino) {
                Some(cube) => {
                    fs.forget(a.ino, 1);
                    self.handle(cube.global(scion_fs::ROOT_INO))
                }
                None => self.hold(&at, &mut fs, &a),
            };
        }
        let at = self.at(&h).map_err(|e| format!("{e:?}"))?;
        let a = at.fs().getattr(at.ino).map_err(|e| e.to_string())?;
        if a.kind != Kind::Dir {
            return Err("not a directory".into());
        }
        Ok(at.vol.global(at.ino))
    }

    /// What is served, for `scion status`.
    pub fn describe(&self) -> String {
        let ex: Vec<String> = self.exports.iter().map(|(p, _)| format!("/{}", join(p))).collect();
        let mut s = format!("exports {}", ex.join(", "));
        if self.read_only {
            s.push_str(" (read-only)");
        }
        if !self.frozen.is_empty() {
            s.push_str(&format!("; {} read-only director{}", self.frozen.len(), if self.frozen.len() == 1 { "y" } else { "ies" }));
        }
        s.push_str(&format!(
            "; squash {} to {}:{}; {} inodes held (at most {} after a sweep); {} found again by hint, {} by walk",
            match self.who.squash {
                crate::Squash::Root => "root",
                crate::Squash::All => "all",
                crate::Squash::None => "none",
            },
            self.who.anon.0,
            self.who.anon.1,
            self.held(),
            self.max_held,
            self.revived().0,
            self.revived().1
        ));
        s
    }

    /// Whether global inode `g` is the root of an export (its `..` is itself).
    fn is_export_root(&self, g: u64) -> bool {
        self.exports.iter().any(|(_, e)| *e == g)
    }

    /// Tells the mount's kernel of a change: names (`Entry`) and inodes (`Inode`, its
    /// attributes and cached pages), in `at`'s volume's numbers.
    /// Only what the kernel holds is told (a write's invalidation costs the kernel its
    /// cached pages of the file, and the daemon a system call), decided under the engine
    /// lock and told without it.
    fn told(&self, vol: VolumeId, what: &[Inval]) {
        let Some(t) = &self.tell else { return };
        let Ok(engine) = self.router.engine(vol) else { return };
        let known: Vec<Inval> = {
            let fs = engine.lock();
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            // The adapter's own reference is not the kernel's; the kernel holds the mount's
            // root (and a cube's) without counting it.
            let kernel = |ino: u64| {
                ino == scion_fs::ROOT_INO || fs.references(ino) > u64::from(held.contains(&vol.global(ino)))
            };
            what.iter()
                .filter(|i| match i {
                    Inval::Entry(dir, _) => kernel(*dir),
                    Inval::Inode(ino) => kernel(*ino),
                })
                .cloned()
                .collect()
        };
        if !known.is_empty() {
            t(&vol.global_invals(&known));
        }
    }

    fn caller(&self) -> Caller {
        let auth = nfs3_server::vfs::caller();
        // For the fold policy, an NFS client's user is a caller of its own (high bit set: never
        // a local process's id), so that two clients, or a client and a local process, fold
        // early (`scion_fs::fold_policy`).
        let id = auth.as_ref().map_or(0, |a| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (a.uid, a.machinename.as_ref()).hash(&mut h);
            h.finish() as u32
        });
        scion_fs::fold_policy::note_caller(id | 1 << 31);
        self.who.caller(auth.as_ref())
    }

    /// How handles name volume `vol`: 0 for the main volume, a cube by its graft (None for
    /// one hanging nowhere: being removed).
    fn graft(&self, vol: VolumeId) -> Option<u64> {
        if vol == VolumeId::MAIN {
            Some(0)
        } else {
            self.router.graft_of(vol)
        }
    }

    /// The handle of global inode `global`.
    fn handle(&self, global: u64) -> Handle {
        let vol = VolumeId::of(global);
        // A volume hanging nowhere is one being removed: a handle naming no graft is stale.
        let graft = self.graft(vol).unwrap_or(u64::MAX);
        self.key.handle(graft, VolumeId::local(global))
    }

    /// The inode a handle names: BADHANDLE for one this store's key did not make, STALE for
    /// one whose volume or inode is gone. An inode not held is revived first.
    fn at(&self, h: &Handle) -> Result<At, nfsstat3> {
        let (graft, ino) = self.key.open(h).ok_or(nfsstat3::NFS3ERR_BADHANDLE)?;
        let vol = match graft {
            0 => VolumeId::MAIN,
            g => self.router.grafted(VolumeId::MAIN, g).ok_or(nfsstat3::NFS3ERR_STALE)?,
        };
        let engine = self.router.engine(vol).map_err(status)?;
        // A `.snapshot` directory is made up from its directory, which is what is held.
        self.revive(graft, vol, &engine, ino & !SNAPDIR_BIT)?;
        Ok(At { vol, engine, ino })
    }

    /// Makes sure the adapter holds inode `ino` of volume `vol` (grafted at `graft`): found
    /// loaded, by its hint, or by a walk (`scion_fs::reach`); STALE if it has no name left.
    fn revive(&self, graft: u64, vol: VolumeId, engine: &Engine, ino: u64) -> Result<(), nfsstat3> {
        let global = vol.global(ino);
        if self.above.contains(&global) {
            return Err(nfsstat3::NFS3ERR_STALE);
        }
        if locked(&self.held).contains(&global) {
            return Ok(());
        }
        if locked(&self.gone).contains(&(graft, ino)) {
            return Err(nfsstat3::NFS3ERR_STALE);
        }
        let hint = locked(&self.hints).remove(&(graft, ino)).unwrap_or_default();
        // (The engine lock is let go before a walk, which takes it step by step.)
        let reached = engine.lock().reach(ino, &hint);
        let found = match reached {
            Ok(Some(a)) => {
                self.revived[0].fetch_add(u64::from(!hint.is_empty()), Ordering::Relaxed);
                Ok(a)
            }
            Ok(None) => engine.walk(ino).map_err(status).inspect(|_| {
                self.revived[1].fetch_add(1, Ordering::Relaxed);
            }),
            Err(e) => Err(status(e)),
        };
        if found.as_ref().is_ok_and(|a| a.nlink > 0) && !self.in_exports(vol, engine, ino, &hint) {
            // Made under other exports (before a restart with other `--export`s).
            engine.lock().forget(ino, 1);
            return Err(nfsstat3::NFS3ERR_STALE);
        }
        let mut fs = engine.lock();
        match found {
            Ok(a) if a.nlink > 0 => {
                if !hint.is_empty() && fs.names_of(ino).is_some_and(|n| n.is_empty()) {
                    // A file with several names keeps the name it was found by as its hint.
                    locked(&self.linked_at).insert(global, hint);
                }
                if locked(&self.held).insert(global) {
                    locked(&self.order).push_back(global);
                } else {
                    fs.forget(ino, 1);
                }
                self.held_changed.store(true, Ordering::Relaxed);
                Ok(())
            }
            Ok(_) => {
                fs.forget(ino, 1);
                drop(fs);
                self.lost((graft, ino));
                Err(nfsstat3::NFS3ERR_STALE)
            }
            Err(e) => {
                drop(fs);
                if e == nfsstat3::NFS3ERR_STALE {
                    self.lost((graft, ino));
                }
                Err(e)
            }
        }
    }

    /// Whether inode `ino` of `vol` (loaded) lies in an export, by its path from the mount
    /// root: a directory's own, a file's directory's. A file with several names has no one
    /// directory: it is in an export if `hint` (the name a client reached it by) still names
    /// it there, or if the mount's root is exported.
    fn in_exports(&self, vol: VolumeId, engine: &Engine, ino: u64, hint: &[Vec<u8>]) -> bool {
        if self.exports.iter().any(|(p, _)| p.is_empty()) {
            return true;
        }
        let path = {
            let mut fs = engine.lock();
            let dir = match fs.getattr(ino) {
                Ok(a) if a.kind == Kind::Dir => ino,
                Ok(_) if fs.parent_of(ino) != ino => fs.parent_of(ino),
                Ok(_) => match fs.named_in(ino, hint) {
                    Ok(Some(d)) => d,
                    _ => return false,
                },
                _ => return false,
            };
            let Ok(p) = fs.path_of_dir(dir) else { return false };
            p
        };
        let mut names = Vec::new();
        if vol != VolumeId::MAIN {
            // A cube's paths start at its graft (the main volume's lock, after the cube's).
            let Some(graft) = self.router.graft_of(vol) else { return false };
            let Ok(g) = self.router.main().lock().path_of_dir(graft) else { return false };
            names = components(&g);
        }
        names.extend(components(&path));
        self.exports.iter().any(|(p, _)| names.starts_with(p))
    }

    /// The global inode number of directory `at`'s parent: itself at an export's root
    /// (nothing above it is reachable), the graft's parent in the main volume at a cube's
    /// root (the main volume's lock taken after the cube's, which `fs` holds).
    fn parent_global(&self, fs: &mut Fs, at: &At) -> u64 {
        let me = at.vol.global(at.ino);
        if self.is_export_root(me) {
            return me;
        }
        if at.ino == scion_fs::ROOT_INO && at.vol != VolumeId::MAIN {
            return match self.router.graft_of(at.vol) {
                Some(g) => VolumeId::MAIN.global(self.router.main().lock().parent_of(g)),
                None => me, // a cube being removed hangs nowhere
            };
        }
        at.vol.global(fs.parent_of(at.ino))
    }

    /// Notes that a client reached file `a` by the name `name` in directory `dir`: where a
    /// file with several names is found in an export after a restart (`linked_at`).
    fn reached_by(&self, fs: &Fs, dir: &At, name: &[u8], a: &Attr) {
        if a.kind == Kind::Dir || a.nlink < 2 {
            return;
        }
        let Some(mut names) = fs.names_of(dir.ino) else { return };
        names.push(name.to_vec());
        let mut l = locked(&self.linked_at);
        if l.len() < MAX_HINTS {
            l.insert(dir.vol.global(a.ino), names);
        }
    }

    /// The hint of inode `ino` of `vol`: its names from its namespace's root, or for a file
    /// with several names the one a client reached it by.
    fn hint_of(&self, fs: &Fs, vol: VolumeId, ino: u64) -> Option<Vec<Vec<u8>>> {
        match fs.names_of(ino) {
            Some(n) if n.is_empty() && ino != scion_fs::ROOT_INO => locked(&self.linked_at).get(&vol.global(ino)).cloned(),
            n => n,
        }
    }

    fn lost(&self, key: hints::Key) {
        let mut g = locked(&self.gone);
        if g.len() >= MAX_GONE {
            g.clear();
        }
        g.insert(key);
    }

    /// The handle of `a`, which the engine just counted one reference to (lookup, create):
    /// the adapter keeps one per inode and gives any other back at once.
    fn hold(&self, at: &At, fs: &mut Fs, a: &Attr) -> Handle {
        let global = at.vol.global(a.ino);
        let fresh = locked(&self.held).insert(global);
        if fresh {
            locked(&self.order).push_back(global);
            self.held_changed.store(true, Ordering::Relaxed);
        } else {
            fs.forget(a.ino, 1);
        }
        self.handle(global)
    }

    /// Gives back the references to held inodes that have no name left, so that the engine
    /// frees them (and a removed file's blocks): run by the server's timer, for removals made
    /// through the mount (the adapter's own removals release their victims at once, `release`).
    /// Then writes the hints, if the held set changed or enough sweeps went by.
    pub fn sweep(&self) {
        let held: Vec<u64> = locked(&self.held).iter().copied().collect();
        self.release(&held);
        self.shed();
        let n = self.sweeps.fetch_add(1, Ordering::Relaxed) + 1;
        if self.held_changed.load(Ordering::Relaxed) || (n % HINTS_EVERY == 0 && !held.is_empty()) {
            self.save_hints();
        }
    }

    /// `sweep` for the inodes `globals` only: each the adapter holds and whose last name is
    /// gone is given back (the engine lock, then the held set, as `hold` takes them).
    fn release(&self, globals: &[u64]) {
        for &global in globals {
            let Ok((vol, engine, ino)) = self.router.route(global) else {
                locked(&self.held).remove(&global);
                continue;
            };
            let mut fs = engine.lock();
            if fs.getattr(ino).is_ok_and(|a| a.nlink > 0) {
                continue;
            }
            if locked(&self.held).remove(&global) {
                fs.forget(ino, 1);
                drop(fs);
                self.held_changed.store(true, Ordering::Relaxed);
                if let Some(g) = self.graft(vol) {
                    self.lost((g, ino & !SNAPDIR_BIT));
                }
            }
        }
    }

    /// Inodes held at most after each sweep (`max_held`).
    pub(crate) fn set_max_held(&mut self, n: usize) {
        self.max_held = n;
    }

    /// Gives back the oldest held inodes past `max_held`, keeping where each is (a hint in
    /// memory and in the hints file), so that a client's later use finds it again by number.
    /// Exports, read-only directories, the directories above them and `.snapshot`
    /// directories stay held.
    fn shed(&self) {
        let over = locked(&self.held).len().saturating_sub(self.max_held);
        if over == 0 {
            return;
        }
        let mut victims = Vec::with_capacity(over);
        {
            let mut order = locked(&self.order);
            for _ in 0..order.len() {
                if victims.len() == over {
                    break;
                }
                let Some(g) = order.pop_front() else { break };
                if !locked(&self.held).contains(&g) {
                    continue; // given back since
                }
                let kept = self.is_export_root(g) || self.frozen.contains(&g) || self.above.contains(&g);
                if kept || g & SNAPDIR_BIT != 0 {
                    order.push_back(g);
                    continue;
                }
                victims.push(g);
            }
            if order.len() > 2 * locked(&self.held).len() + 1024 {
                // Numbers given back pile up at the front only as fast as the sweep meets them.
                let held = locked(&self.held);
                order.retain(|g| held.contains(g));
            }
        }
        for g in victims {
            let Ok((vol, engine, ino)) = self.router.route(g) else {
                locked(&self.held).remove(&g);
                continue;
            };
            let mut fs = engine.lock();
            if let (Some(graft), Some(names)) = (self.graft(vol), self.hint_of(&fs, vol, ino)) {
                let mut h = locked(&self.hints);
                if h.len() < MAX_HINTS {
                    h.insert((graft, ino), names);
                }
            }
            if locked(&self.held).remove(&g) {
                fs.forget(ino, 1);
                self.held_changed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Writes `STORE/nfs/hints`: where each held inode is now, and the hints read at start
    /// not used yet. Engine locks are taken a volume's share at a time, in chunks.
    pub fn save_hints(&self) {
        self.held_changed.store(false, Ordering::Relaxed);
        let mut out = locked(&self.hints).clone();
        if out.len() > MAX_HINTS {
            out.clear();
        }
        let mut held: Vec<u64> = locked(&self.held).iter().copied().collect();
        held.sort_unstable();
        for chunk in held.chunks(4096) {
            let Ok((vol, engine, _)) = self.router.route(chunk[0]) else { continue };
            let Some(graft) = self.graft(vol) else { continue };
            let fs = engine.lock();
            for &g in chunk.iter().filter(|g| VolumeId::of(**g) == vol && **g & SNAPDIR_BIT == 0) {
                let ino = VolumeId::local(g);
                if let Some(names) = self.hint_of(&fs, vol, ino) {
                    out.insert((graft, ino), names);
                }
            }
        }
        if let Err(e) = hints::save(&self.store, &out) {
            log::warn!("nfs: hints not written to {}: {e}", self.store.display());
        }
    }

    /// Inodes not held that were found by their hint, and by a walk (a loaded inode or a
    /// file with several names is found without either).
    pub fn revived(&self) -> (u64, u64) {
        (self.revived[0].load(Ordering::Relaxed), self.revived[1].load(Ordering::Relaxed))
    }

    /// How many inodes the adapter holds (for `status`).
    pub fn held(&self) -> usize {
        locked(&self.held).len()
    }

    fn writable(&self) -> Result<(), nfsstat3> {
        if self.read_only {
            Err(nfsstat3::NFS3ERR_ROFS)
        } else {
            Ok(())
        }
    }

}

/// The volume's fsync, off the server's one thread (`lib.rs`): other calls go on meanwhile.
async fn sync(engine: &Engine) -> Result<(), nfsstat3> {
    let e = engine.clone();
    tokio::task::spawn_blocking(move || e.fsync()).await.map_err(|_| nfsstat3::NFS3ERR_IO)?.map_err(status)
}

/// The attributes of `ino`, which READ and WRITE need to be a regular file (ISDIR for a
/// directory, INVAL for anything else, as RFC 1813 asks).
fn regular_file(fs: &mut Fs, ino: u64) -> Result<Attr, nfsstat3> {
    let a = getattr(fs, ino)?;
    match a.kind {
        Kind::File => Ok(a),
        Kind::Dir => Err(nfsstat3::NFS3ERR_ISDIR),
        _ => Err(nfsstat3::NFS3ERR_INVAL),
    }
}

fn getattr(fs: &mut Fs, ino: u64) -> Result<Attr, nfsstat3> {
    fs.getattr(ino).map_err(status)
}

