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

use crate::handle::{Handle, HandleKey};
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
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

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
    /// Tells the mount's kernel what a change made here made wrong in its caches (global
    /// inode numbers); called without the engine lock.
    tell: Option<Invalidator>,
    /// The exported directories: their paths (components from the mount root) and global
    /// inode numbers. A client mounts one of them or a directory below; `..` stops at them.
    exports: Arc<Vec<(Vec<Vec<u8>>, u64)>>,
    /// Directories below which every change is refused (`--read-only DIR`).
    frozen: Arc<HashSet<u64>>,
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
    fn fs(&self) -> std::sync::MutexGuard<'_, Fs> {
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

/// Whether `caller` has `want` on the file or directory `a` is, by its record and ACL; for
/// reads and writes of a regular file its owner always has (knfsd's owner override).
fn may(fs: &Fs, a: &Attr, caller: &Caller, want: u16) -> Result<(), nfsstat3> {
    if a.kind == Kind::File && want & X == 0 && caller.uid == a.uid {
        return Ok(());
    }
    match fs.permits(a.ino, caller, want) {
        Ok(true) => Ok(()),
        Ok(false) => Err(nfsstat3::NFS3ERR_ACCES),
        Err(e) => Err(status(e)),
    }
}

/// The sticky-bit rule of `may_delete`: in a directory with the sticky bit, only the owner
/// of the entry or of the directory (or root) removes or renames it.
fn sticky_allows(dir: &Attr, victim: &Attr, caller: &Caller) -> bool {
    dir.perm & 0o1000 == 0 || caller.uid == 0 || caller.uid == dir.uid || caller.uid == victim.uid
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
        let mut nfs = ScionNfs {
            router,
            key,
            who,
            read_only,
            held: Arc::new(Mutex::new(HashSet::new())),
            tell,
            exports: Arc::new(Vec::new()),
            frozen: Arc::new(HashSet::new()),
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
        Ok(nfs)
    }

    /// The global inode number of the directory at `names` from the mount root, held for
    /// the server's life (looked up as root: the administrator named it).
    fn resolve_dir(&self, names: &[Vec<u8>]) -> Result<u64, String> {
        let mut h = self.key.handle(VolumeId::MAIN.global(scion_fs::ROOT_INO));
        for n in names {
            let at = self.at(&h).map_err(|e| format!("{e:?}"))?;
            let mut fs = at.fs();
            let a = fs.lookup(at.ino, n).map_err(|e| e.to_string())?;
            h = match self.router.grafted(at.vol, a.ino) {
                Some(cube) => {
                    fs.forget(a.ino, 1);
                    self.key.handle(cube.global(scion_fs::ROOT_INO))
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
            "; squash {} to {}:{}; {} inodes held",
            match self.who.squash {
                crate::Squash::Root => "root",
                crate::Squash::All => "all",
                crate::Squash::None => "none",
            },
            self.who.anon.0,
            self.who.anon.1,
            self.held()
        ));
        s
    }

    /// Whether global inode `g` is the root of an export (its `..` is itself).
    fn is_export_root(&self, g: u64) -> bool {
        self.exports.iter().any(|(_, e)| *e == g)
    }

    /// NFS3ERR_ROFS if `at` lies in a `--read-only` directory (or is one), found by walking
    /// its parents; a file with several names, whose parent is not one, counts as inside
    /// when any directory is read-only.
    fn thawed(&self, fs: &mut Fs, at: &At) -> Result<(), nfsstat3> {
        if self.frozen.is_empty() {
            return Ok(());
        }
        let mut ino = at.ino;
        for _ in 0..MAX_DEPTH {
            if self.frozen.contains(&at.vol.global(ino)) {
                return Err(nfsstat3::NFS3ERR_ROFS);
            }
            let p = fs.parent_of(ino);
            if p == ino {
                let top = ino == scion_fs::ROOT_INO || fs.getattr(ino).is_ok_and(|a| a.kind == Kind::Dir);
                return if top { Ok(()) } else { Err(nfsstat3::NFS3ERR_ROFS) };
            }
            ino = p;
        }
        Err(nfsstat3::NFS3ERR_ROFS)
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
        self.who.caller(nfs3_server::vfs::caller().as_ref())
    }

    /// The inode a handle names: BADHANDLE for one this server did not make, STALE for one
    /// whose volume is gone.
    fn at(&self, h: &Handle) -> Result<At, nfsstat3> {
        let global = self.key.open(h).ok_or(nfsstat3::NFS3ERR_BADHANDLE)?;
        let (vol, engine, ino) = self.router.route(global).map_err(|_| nfsstat3::NFS3ERR_STALE)?;
        Ok(At { vol, engine, ino })
    }

    /// The handle of `a`, which the engine just counted one reference to (lookup, create):
    /// the adapter keeps one per inode and gives any other back at once.
    fn hold(&self, at: &At, fs: &mut Fs, a: &Attr) -> Handle {
        let global = at.vol.global(a.ino);
        let fresh = self.held.lock().unwrap_or_else(|p| p.into_inner()).insert(global);
        if !fresh {
            fs.forget(a.ino, 1);
        }
        self.key.handle(global)
    }

    /// Gives back the references to held inodes that have no name left, so that the engine
    /// frees them (and a removed file's blocks): run by the server's timer, for removals made
    /// through the mount (the adapter's own removals release their victims at once, `release`).
    pub fn sweep(&self) {
        let held: Vec<u64> = self.held.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect();
        self.release(&held);
    }

    /// `sweep` for the inodes `globals` only: each the adapter holds and whose last name is
    /// gone is given back (the engine lock, then the held set, as `hold` takes them).
    fn release(&self, globals: &[u64]) {
        for &global in globals {
            let Ok((_, engine, ino)) = self.router.route(global) else {
                self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&global);
                continue;
            };
            let mut fs = engine.lock();
            if fs.getattr(ino).is_ok_and(|a| a.nlink > 0) {
                continue;
            }
            if self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&global) {
                fs.forget(ino, 1);
            }
        }
    }

    /// How many inodes the adapter holds (for `status`).
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn writable(&self) -> Result<(), nfsstat3> {
        if self.read_only {
            Err(nfsstat3::NFS3ERR_ROFS)
        } else {
            Ok(())
        }
    }

    /// Checks a change of directory `dir` by `caller` (write and search), and that the
    /// directory takes changes (not a snapshot, not a read-only store).
    fn may_change(&self, fs: &mut Fs, dir: &At, caller: &Caller) -> Result<Attr, nfsstat3> {
        self.writable()?;
        let a = getattr(fs, dir.ino)?;
        if a.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        fs.check_writable(dir.ino).map_err(status)?;
        self.thawed(fs, dir)?;
        may(fs, &a, caller, W | X)?;
        Ok(a)
    }

    /// A removal or rename of `victim` from `dir` (which `may_change` allowed): the sticky
    /// rule, and EBUSY for a directory a command holds (as through the mount).
    fn may_unlink(&self, fs: &mut Fs, at: &At, dir: &Attr, victim: &[u8], caller: &Caller) -> Result<u64, nfsstat3> {
        let v = fs.lookup(at.ino, victim).map_err(status)?;
        fs.forget(v.ino, 1);
        if !sticky_allows(dir, &v, caller) {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        if v.kind == Kind::Dir && self.router.pinned(at.vol, v.ino) {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        Ok(v.ino)
    }

    /// A new entry's handle and attributes; `r` is the engine's answer to making it.
    fn made(&self, at: &At, fs: &mut Fs, r: scion_fs::FsResult<Attr>) -> Result<(Handle, fattr3), nfsstat3> {
        let a = r.map_err(status)?;
        let h = self.hold(at, fs, &a);
        Ok((h, fattr(&a, at.vol)))
    }

    /// Applies `set` to `at` for `caller`, with the kernel's rules for who may change what
    /// (`notify_change` and `setattr_prepare`).
    fn set(&self, at: &At, fs: &mut Fs, set: &sattr3, caller: &Caller) -> Result<Attr, nfsstat3> {
        let cur = getattr(fs, at.ino)?;
        let asks = matches!(set.mode, Nfs3Option::Some(_))
            || matches!(set.uid, Nfs3Option::Some(_))
            || matches!(set.gid, Nfs3Option::Some(_))
            || matches!(set.size, Nfs3Option::Some(_))
            || !matches!(set.atime, set_atime::DONT_CHANGE)
            || !matches!(set.mtime, set_mtime::DONT_CHANGE);
        if asks {
            // A read-only filesystem answers EROFS before any permission check, as the
            // kernel's `mnt_want_write` comes first.
            fs.check_writable(at.ino).map_err(status)?;
            self.thawed(fs, at)?;
        }
        let root = caller.uid == 0;
        let owner = caller.uid == cur.uid;
        let mut s = SetAttr::default();
        if let Nfs3Option::Some(mode) = set.mode {
            if !root && !owner {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            let mut m = mode & 0o7777;
            // setattr_should_drop_sgid: a caller outside the group cannot set setgid.
            let gid = match set.gid {
                Nfs3Option::Some(g) => g,
                Nfs3Option::None => cur.gid,
            };
            if !root && !caller.in_group(gid) && cur.kind != Kind::Dir {
                m &= !0o2000;
            }
            s.mode = Some(m);
        }
        if let Nfs3Option::Some(uid) = set.uid {
            if uid != cur.uid && !root {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            s.uid = Some(uid);
        }
        if let Nfs3Option::Some(gid) = set.gid {
            if gid != cur.gid && !root && !(owner && caller.in_group(gid)) {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            s.gid = Some(gid);
        }
        if let Nfs3Option::Some(size) = set.size {
            if cur.kind == Kind::Dir {
                return Err(nfsstat3::NFS3ERR_ISDIR);
            }
            may(fs, &cur, caller, W)?;
            s.size = Some(size);
        }
        let now = Ts::now();
        let may_touch = |fs: &Fs| if owner || root { Ok(()) } else { may(fs, &cur, caller, W).map_err(|_| nfsstat3::NFS3ERR_ACCES) };
        match set.atime {
            set_atime::DONT_CHANGE => {}
            set_atime::SET_TO_SERVER_TIME => {
                may_touch(fs)?;
                s.atime = Some(now);
            }
            set_atime::SET_TO_CLIENT_TIME(t) => {
                if !owner && !root {
                    return Err(nfsstat3::NFS3ERR_PERM);
                }
                s.atime = Some(ts(t));
            }
        }
        match set.mtime {
            set_mtime::DONT_CHANGE => {}
            set_mtime::SET_TO_SERVER_TIME => {
                may_touch(fs)?;
                s.mtime = Some(now);
            }
            set_mtime::SET_TO_CLIENT_TIME(t) => {
                if !owner && !root {
                    return Err(nfsstat3::NFS3ERR_PERM);
                }
                s.mtime = Some(ts(t));
            }
        }
        if s == SetAttr::default() {
            return Ok(cur);
        }
        // A chown or a truncate by someone other than root drops setuid and setgid, as the
        // kernel's `should_remove_suid` does.
        let changes_owner = s.uid.is_some_and(|u| u != cur.uid) || s.gid.is_some_and(|g| g != cur.gid);
        if cur.kind == Kind::File && s.mode.is_none() && (changes_owner || (s.size.is_some() && !root)) {
            let kept = without_privs(cur.perm);
            if kept != cur.perm {
                s.mode = Some(u32::from(kept));
            }
        }
        fs.setattr(at.ino, s).map_err(status)
    }
}

/// The mode of a file written or truncated by someone other than root: setuid goes, and
/// setgid with group execute (without it, setgid marks mandatory locking and stays).
fn without_privs(perm: u16) -> u16 {
    let mut p = perm & !0o4000;
    if p & 0o2010 == 0o2010 {
        p &= !0o2000;
    }
    p
}

/// The volume's fsync, off the server's one thread (`lib.rs`): other calls go on meanwhile.
async fn sync(engine: &Engine) -> Result<(), nfsstat3> {
    let e = engine.clone();
    tokio::task::spawn_blocking(move || e.fsync()).await.map_err(|_| nfsstat3::NFS3ERR_IO)?.map_err(status)
}

fn getattr(fs: &mut Fs, ino: u64) -> Result<Attr, nfsstat3> {
    fs.getattr(ino).map_err(status)
}

/// A directory listing already made, served from the position a cookie names.
pub struct Listing {
    entries: std::vec::IntoIter<DirEntryPlus<Handle>>,
}

impl ReadDirPlusIterator<Handle> for Listing {
    async fn next(&mut self) -> NextResult<DirEntryPlus<Handle>> {
        match self.entries.next() {
            Some(e) => NextResult::Ok(e),
            None => NextResult::Eof,
        }
    }
}

/// Entries listed per READDIRPLUS at most: the client asks again from the last cookie.
const LIST_BATCH: usize = 1024;

impl NfsReadFileSystem for ScionNfs {
    type Handle = Handle;

    fn root_dir(&self) -> Handle {
        self.key.handle(VolumeId::MAIN.global(scion_fs::ROOT_INO))
    }

    async fn lookup(&self, dirid: &Handle, filename: &filename3<'_>) -> Result<Handle, nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let n = name(filename);
        let mut fs = at.fs();
        let dir = getattr(&mut fs, at.ino)?;
        if dir.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        may(&fs, &dir, &caller, X)?;
        if n == b"." {
            return Ok(*dirid);
        }
        if n == b".." {
            // An export's root is its own parent: nothing above it is reachable.
            if self.is_export_root(at.vol.global(at.ino)) {
                return Ok(*dirid);
            }
            let p = fs.parent_of(at.ino);
            return Ok(self.key.handle(at.vol.global(p)));
        }
        let a = if at.ino & SNAPDIR_BIT != 0 {
            fs.lookup_as(at.ino, n, &caller)
        } else {
            fs.lookup(at.ino, n)
        }
        .map_err(status)?;
        if let Some(cube) = self.router.grafted(at.vol, a.ino) {
            // A cube's directory shows the cube's root, as through the mount.
            fs.forget(a.ino, 1);
            return Ok(self.key.handle(cube.global(scion_fs::ROOT_INO)));
        }
        Ok(self.hold(&at, &mut fs, &a))
    }

    /// MNT: `path` must be an export or lie below one; it is walked as the caller, from
    /// the export's root.
    async fn lookup_by_path(&self, path: &str) -> Result<Handle, nfsstat3> {
        let names = components(path.as_bytes());
        let export = self
            .exports
            .iter()
            .filter(|(p, _)| names.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        let mut h = self.key.handle(export.1);
        for n in &names[export.0.len()..] {
            if n == b".." {
                return Err(nfsstat3::NFS3ERR_NOENT);
            }
            h = self.lookup(&h, &n.as_slice().into()).await?;
        }
        Ok(h)
    }

    async fn getattr(&self, id: &Handle) -> Result<fattr3, nfsstat3> {
        let at = self.at(id)?;
        let a = getattr(&mut at.fs(), at.ino)?;
        Ok(fattr(&a, at.vol))
    }

    async fn read(&self, id: &Handle, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        let (plan, size) = {
            let mut fs = at.fs();
            let a = getattr(&mut fs, at.ino)?;
            match a.kind {
                Kind::File => {}
                Kind::Dir => return Err(nfsstat3::NFS3ERR_ISDIR),
                _ => return Err(nfsstat3::NFS3ERR_INVAL),
            }
            may(&fs, &a, &caller, R)?;
            fs.open_file(at.ino).map_err(status)?;
            let plan = fs.read_plan(at.ino, offset, count.min(MAX_IO));
            fs.release(at.ino);
            (plan.map_err(status)?, a.size)
        };
        // The blocks are read without the engine lock, as the mount reads them, and off the
        // server's one thread (`lib.rs`), which a cold read would hold up.
        let data = tokio::task::spawn_blocking(move || plan.execute())
            .await
            .map_err(|_| nfsstat3::NFS3ERR_IO)?
            .map_err(status)?;
        let eof = offset.saturating_add(data.len() as u64) >= size;
        Ok((data, eof))
    }

    #[allow(refining_impl_trait)]
    async fn readdirplus(&self, dirid: &Handle, cookie: u64) -> Result<Listing, nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        let dir = getattr(&mut fs, at.ino)?;
        if dir.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        may(&fs, &dir, &caller, R)?;
        let list = fs.readdir(at.ino).map_err(status)?;
        let parent = if self.is_export_root(at.vol.global(at.ino)) { at.ino } else { fs.parent_of(at.ino) };
        // Cookies are positions: 1 and 2 are "." and "..", then the entries in name order.
        let mut out = Vec::new();
        let start = cookie as usize;
        let dots = [(b".".to_vec(), at.ino), (b"..".to_vec(), parent)];
        for (i, (n, ino)) in dots.into_iter().enumerate().skip(start) {
            let a = fs.getattr(ino).ok();
            out.push(DirEntryPlus {
                fileid: at.vol.global(ino),
                name: n.into(),
                cookie: i as u64 + 1,
                name_attributes: a.map(|a| fattr(&a, at.vol)),
                name_handle: Some(self.key.handle(at.vol.global(ino))),
            });
        }
        for (i, e) in list.into_iter().enumerate().skip(start.saturating_sub(2)).take(LIST_BATCH) {
            let cookie = i as u64 + 3;
            let found = if at.ino & SNAPDIR_BIT != 0 {
                fs.lookup_as(at.ino, &e.name, &caller)
            } else {
                fs.lookup(at.ino, &e.name)
            };
            // Gone since the listing, or a snapshot the caller may not see: left out.
            let Ok(a) = found else { continue };
            let (handle, a, vol) = match self.router.grafted(at.vol, a.ino) {
                Some(cube) => {
                    fs.forget(a.ino, 1);
                    let root = self.router.engine(cube).and_then(|e| e.lock().getattr(scion_fs::ROOT_INO));
                    let Ok(root) = root else { continue };
                    (self.key.handle(cube.global(scion_fs::ROOT_INO)), root, cube)
                }
                None => (self.hold(&at, &mut fs, &a), a, at.vol),
            };
            out.push(DirEntryPlus {
                fileid: vol.global(a.ino),
                name: e.name.into(),
                cookie,
                name_attributes: Some(fattr(&a, vol)),
                name_handle: Some(handle),
            });
        }
        Ok(Listing { entries: out.into_iter() })
    }

    async fn readlink(&self, id: &Handle) -> Result<nfspath3<'_>, nfsstat3> {
        let at = self.at(id)?;
        let t = at.fs().readlink(at.ino).map_err(status)?;
        Ok(t.into())
    }

    async fn access(&self, id: &Handle, mask: u32) -> u32 {
        let caller = self.caller();
        let Ok(at) = self.at(id) else { return 0 };
        let mut fs = at.fs();
        let Ok(a) = fs.getattr(at.ino) else { return 0 };
        let changes = !self.read_only && fs.check_writable(at.ino).is_ok();
        let mut granted = 0;
        let checks = [
            (ACCESS3_READ, R),
            (ACCESS3_LOOKUP, X),
            (ACCESS3_EXECUTE, X),
            (ACCESS3_MODIFY, W),
            (ACCESS3_EXTEND, W),
            (ACCESS3_DELETE, W),
        ];
        for (bit, want) in checks {
            if mask & bit == 0 {
                continue;
            }
            let dir_only = bit == ACCESS3_LOOKUP || bit == ACCESS3_DELETE;
            let file_only = bit == ACCESS3_EXECUTE;
            if (dir_only && a.kind != Kind::Dir) || (file_only && a.kind == Kind::Dir) {
                continue;
            }
            if want == W && !changes {
                continue;
            }
            // Execute of a file is not the owner's by override.
            let ok = if want == X { fs.permits(at.ino, &caller, X).unwrap_or(false) } else { may(&fs, &a, &caller, want).is_ok() };
            if ok {
                granted |= bit;
            }
        }
        granted
    }

    async fn space(&self) -> [u64; 6] {
        let s = self.router.main().lock().statfs();
        let b = u64::from(s.bsize);
        [s.blocks * b, s.bfree * b, s.bavail * b, s.files, s.ffree, s.ffree]
    }

    async fn fsinfo(&self, root: &Handle) -> Result<FSINFO3resok, nfsstat3> {
        let attrs = self.getattr(root).await.map_or(post_op_attr::None, post_op_attr::Some);
        Ok(FSINFO3resok {
            obj_attributes: attrs,
            rtmax: MAX_IO,
            rtpref: MAX_IO,
            rtmult: 4096,
            wtmax: MAX_IO,
            wtpref: MAX_IO,
            wtmult: 4096,
            dtpref: 64 << 10,
            maxfilesize: i64::MAX as u64,
            time_delta: nfstime3 { seconds: 0, nseconds: 1 },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }
}


/// The changes that make a name, without the engine lock's holder telling the kernel
/// (`ScionNfs::made_in` does, after).
impl ScionNfs {
    fn create_now(&self, dirid: &Handle, filename: &filename3<'_>, attr: sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let mode = match attr.mode {
            Nfs3Option::Some(m) => m & 0o7777,
            Nfs3Option::None => 0o644,
        };
        let n = name(filename);
        let made = fs.mknod(at.ino, n, Kind::File, libc::S_IFREG | mode, 0, caller.uid, caller.gid, 0, &[]);
        let (h, a) = match made {
            // UNCHECKED: an existing file is opened, as O_CREAT without O_EXCL does (GUARDED
            // is refused by the server before it gets here).
            Err(e) if e.errno() == libc::EEXIST => {
                let a = fs.lookup(at.ino, n).map_err(status)?;
                if a.kind != Kind::File {
                    fs.forget(a.ino, 1);
                    return Err(nfsstat3::NFS3ERR_EXIST);
                }
                self.made(&at, &mut fs, Ok(a))?
            }
            r => self.made(&at, &mut fs, r)?,
        };
        if let Nfs3Option::Some(size) = attr.size {
            let child = At { vol: at.vol, engine: at.engine.clone(), ino: VolumeId::local(a.fileid) };
            let set = sattr3 { size: Nfs3Option::Some(size), ..Default::default() };
            let a = self.set(&child, &mut fs, &set, &caller)?;
            return Ok((h, fattr(&a, at.vol)));
        }
        Ok((h, a))
    }

    fn create_exclusive_now(&self, dirid: &Handle, filename: &filename3<'_>, verf: createverf3) -> Result<Handle, nfsstat3> {
        // The verifier is kept in the new file's times, as knfsd does, so that a
        // retransmitted CREATE finds its own file rather than EEXIST.
        let v = verf.0;
        let stamp = Ts {
            sec: i64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
            nsec: u32::from_be_bytes([v[4], v[5], v[6], v[7]]) % 1_000_000_000,
        };
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let n = name(filename);
        match fs.mknod(at.ino, n, Kind::File, libc::S_IFREG | 0o600, 0, caller.uid, caller.gid, 0, &[]) {
            Ok(a) => {
                let h = self.hold(&at, &mut fs, &a);
                fs.setattr(a.ino, SetAttr { atime: Some(stamp), mtime: Some(stamp), ..Default::default() })
                    .map_err(status)?;
                Ok(h)
            }
            Err(e) if e.errno() == libc::EEXIST => {
                let a = fs.lookup(at.ino, n).map_err(status)?;
                let h = self.hold(&at, &mut fs, &a);
                if a.kind == Kind::File && a.mtime == stamp && a.atime == stamp {
                    Ok(h)
                } else {
                    Err(nfsstat3::NFS3ERR_EXIST)
                }
            }
            Err(e) => Err(status(e)),
        }
    }

    fn mkdir_now(&self, dirid: &Handle, dirname: &filename3<'_>, attr: &sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        // The client applied its umask; the engine adds what the parent passes down.
        let mode = match attr.mode {
            Nfs3Option::Some(m) => m & 0o7777,
            Nfs3Option::None => 0o755,
        };
        let r = fs.mknod(at.ino, name(dirname), Kind::Dir, libc::S_IFDIR | mode, 0, caller.uid, caller.gid, 0, &[]);
        self.made(&at, &mut fs, r)
    }

    fn symlink_now<'a>(
        &self,
        dirid: &Handle,
        linkname: &filename3<'a>,
        symlink: &nfspath3<'a>,
        _attr: &sattr3,
    ) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let r = fs.mknod(at.ino, name(linkname), Kind::Symlink, 0o777, 0, caller.uid, caller.gid, 0, symlink.as_ref());
        self.made(&at, &mut fs, r)
    }

    /// Tells the mount's kernel of a name made in `dirid` (its cached absence, the
    /// directory's times and size).
    fn made_in(&self, dirid: &Handle, n: &filename3<'_>, ok: bool) {
        if let (true, Ok(at)) = (ok, self.at(dirid)) {
            self.told(at.vol, &[Inval::Entry(at.ino, name(n).to_vec()), Inval::Inode(at.ino)]);
        }
    }
}

impl NfsFileSystem for ScionNfs {
    fn capabilities(&self) -> VFSCapabilities {
        if self.read_only {
            VFSCapabilities::ReadOnly
        } else {
            VFSCapabilities::ReadWrite
        }
    }

    async fn setattr(&self, id: &Handle, set: sattr3) -> Result<fattr3, nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        self.writable()?;
        let a = self.set(&at, &mut at.fs(), &set, &caller)?;
        self.told(at.vol, &[Inval::Inode(at.ino)]);
        Ok(fattr(&a, at.vol))
    }

    async fn write(&self, id: &Handle, offset: u64, data: &[u8], stable: stable_how) -> Result<(fattr3, stable_how), nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        self.writable()?;
        {
            let mut fs = at.fs();
            let a = getattr(&mut fs, at.ino)?;
            match a.kind {
                Kind::File => {}
                Kind::Dir => return Err(nfsstat3::NFS3ERR_ISDIR),
                _ => return Err(nfsstat3::NFS3ERR_INVAL),
            }
            fs.check_writable(at.ino).map_err(status)?;
            self.thawed(&mut fs, &at)?;
            may(&fs, &a, &caller, W)?;
            fs.open_file(at.ino).map_err(status)?;
        }
        let r = at.engine.write(at.ino, offset, data, Stamp::Now, |fs| {
            // A write by anyone but root drops setuid (and setgid with group execute).
            if caller.uid != 0 {
                let cur = fs.getattr(at.ino)?;
                let kept = without_privs(cur.perm);
                if kept != cur.perm {
                    fs.setattr(at.ino, SetAttr { mode: Some(u32::from(kept)), ..Default::default() })?;
                }
            }
            Ok(())
        });
        at.fs().release(at.ino);
        r.map_err(status)?;
        self.told(at.vol, &[Inval::Inode(at.ino)]);
        // UNSTABLE is answered as the mount answers a write: journaled, durable at the next
        // COMMIT (or fsync, or checkpoint). The others are synced first.
        let committed = if stable == stable_how::UNSTABLE || self.router.serving(at.vol).nofsync {
            stable_how::UNSTABLE
        } else {
            sync(&at.engine).await?;
            stable_how::FILE_SYNC
        };
        let a = getattr(&mut at.fs(), at.ino)?;
        Ok((fattr(&a, at.vol), committed))
    }

    async fn create(&self, dirid: &Handle, filename: &filename3<'_>, attr: sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.create_now(dirid, filename, attr);
        self.made_in(dirid, filename, r.is_ok());
        r
    }

    async fn create_exclusive(&self, dirid: &Handle, filename: &filename3<'_>, verf: createverf3) -> Result<Handle, nfsstat3> {
        let r = self.create_exclusive_now(dirid, filename, verf);
        self.made_in(dirid, filename, r.is_ok());
        r
    }

    async fn mkdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Result<(Handle, fattr3), nfsstat3> {
        self.mkdir_with(dirid, dirname, &sattr3::default()).await
    }

    async fn mkdir_with(&self, dirid: &Handle, dirname: &filename3<'_>, attr: &sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.mkdir_now(dirid, dirname, attr);
        self.made_in(dirid, dirname, r.is_ok());
        r
    }

    async fn remove(&self, dirid: &Handle, filename: &filename3<'_>) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let victim = {
            let mut fs = at.fs();
            let dir = self.may_change(&mut fs, &at, &caller)?;
            let victim = self.may_unlink(&mut fs, &at, &dir, name(filename), &caller)?;
            fs.unlink(at.ino, name(filename)).map_err(status)?;
            victim
        };
        self.told(at.vol, &[Inval::Entry(at.ino, name(filename).to_vec()), Inval::Inode(at.ino), Inval::Inode(victim)]);
        self.release(&[at.vol.global(victim)]);
        Ok(())
    }

    async fn rmdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let victim = {
            let mut fs = at.fs();
            let dir = self.may_change(&mut fs, &at, &caller)?;
            let victim = self.may_unlink(&mut fs, &at, &dir, name(dirname), &caller)?;
            fs.rmdir(at.ino, name(dirname)).map_err(status)?;
            victim
        };
        self.told(at.vol, &[Inval::Entry(at.ino, name(dirname).to_vec()), Inval::Inode(at.ino), Inval::Inode(victim)]);
        self.release(&[at.vol.global(victim)]);
        Ok(())
    }

    async fn rename<'a>(
        &self,
        from_dirid: &Handle,
        from_filename: &filename3<'a>,
        to_dirid: &Handle,
        to_filename: &filename3<'a>,
    ) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let from = self.at(from_dirid)?;
        let to = self.at(to_dirid)?;
        if from.vol != to.vol {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        let changed = {
            let mut fs = from.fs();
            let src_dir = self.may_change(&mut fs, &from, &caller)?;
            let dst_dir = self.may_change(&mut fs, &to, &caller)?;
            let moved = self.may_unlink(&mut fs, &from, &src_dir, name(from_filename), &caller)?;
            let replaced = match self.may_unlink(&mut fs, &to, &dst_dir, name(to_filename), &caller) {
                Ok(v) => Some(v),
                Err(nfsstat3::NFS3ERR_NOENT) => None,
                Err(e) => return Err(e),
            };
            fs.rename(from.ino, name(from_filename), to.ino, name(to_filename), 0).map_err(status)?;
            let mut v = vec![
                Inval::Entry(from.ino, name(from_filename).to_vec()),
                Inval::Entry(to.ino, name(to_filename).to_vec()),
                Inval::Inode(from.ino),
                Inval::Inode(to.ino),
                Inval::Inode(moved),
            ];
            v.extend(replaced.map(Inval::Inode));
            (v, replaced)
        };
        self.told(from.vol, &changed.0);
        if let Some(r) = changed.1 {
            self.release(&[from.vol.global(r)]);
        }
        Ok(())
    }

    async fn symlink<'a>(
        &self,
        dirid: &Handle,
        linkname: &filename3<'a>,
        symlink: &nfspath3<'a>,
        attr: &sattr3,
    ) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.symlink_now(dirid, linkname, symlink, attr);
        self.made_in(dirid, linkname, r.is_ok());
        r
    }

    async fn link(&self, id: &Handle, dirid: &Handle, newname: &filename3<'_>) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let file = self.at(id)?;
        let dir = self.at(dirid)?;
        if file.vol != dir.vol {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        let mut fs = dir.fs();
        self.may_change(&mut fs, &dir, &caller)?;
        if getattr(&mut fs, file.ino)?.kind == Kind::Dir {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        // A name in a writable directory would make a frozen file writable.
        self.thawed(&mut fs, &file)?;
        let a = fs.link(file.ino, dir.ino, name(newname)).map_err(status)?;
        // The engine counted a reference for the new name; the adapter holds one already.
        self.hold(&file, &mut fs, &a);
        drop(fs);
        self.told(dir.vol, &[Inval::Entry(dir.ino, name(newname).to_vec()), Inval::Inode(dir.ino), Inval::Inode(file.ino)]);
        Ok(())
    }

    async fn commit(&self, id: &Handle, _offset: u64, _count: u32) -> Result<(), nfsstat3> {
        // What fsync means through the mount: everything acknowledged so far in the volume.
        let at = self.at(id)?;
        if self.router.serving(at.vol).nofsync {
            return Ok(());
        }
        sync(&at.engine).await
    }
}
