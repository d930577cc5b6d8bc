//! The FUSE adapter: a thin translation from kernel requests to calls on the engine
//! ([`scion_daemon::Engine`], which owns the locking and the protocols that keep disk work
//! outside the lock).
//!
//! Round trips are what a FUSE filesystem pays for, so the adapter asks the kernel to keep
//! as much as it can: writeback caching of file data, long attribute and entry timeouts
//! (nothing but this daemon changes the tree), readdirplus, cached directory listings and
//! page cache kept across opens, and 1 MiB requests.

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use scion_daemon::router::{Router, VolumeId, CUBES_DIR_INO, CUBES_DIR_NAME};
use scion_daemon::Engine;
use scion_fs::clone::SNAPDIR_BIT;
use scion_fs::{Attr, Fs, FsError, FsResult, Kind, SetAttr, Stamp, Ts};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How long the kernel may trust what it was told. Only this daemon changes the tree, and it
/// tells the kernel when it does so behind the kernel's back.
const TTL: Duration = Duration::from_secs(3600);

/// How long the kernel may keep a file's attributes. Not at all for a file with several
/// names: after an unlink, or a rename over one of its names, the kernel takes one off its
/// cached link count itself, and with the writeback cache the ctime change that follows does
/// not make it ask again (it keeps times itself). A GETATTR of the file from another process
/// answered between the daemon's unlink and that decrement leaves one link too few cached: a
/// `stat` showed nlink 0 for a file that still had its name (found by tests/soak.py, which
/// walks the trees its writers change). Not caching makes each `stat` of such a file ask.
fn attr_ttl(a: &Attr) -> Duration {
    if a.linked {
        Duration::ZERO
    } else {
        TTL
    }
}

/// How long the kernel may trust a name. Not at all for a file with several names: the
/// kernel takes one off its cached link count itself after an unlink or a rename over one
/// of its names, and a GETATTR answered between the daemon's unlink and that decrement
/// leaves the count one too low, possibly 0. `link(2)` checks the cached count without asking
/// (`vfs_link`: ENOENT for 0) unless the path walk revalidated the name, which a zero entry
/// timeout makes it do (the LOOKUP's reply refreshes the count). Costs one LOOKUP per path
/// walk to such a file.
fn entry_ttl(a: &Attr) -> Duration {
    if a.linked {
        Duration::ZERO
    } else {
        TTL
    }
}
const MAX_WRITE: u32 = 1 << 20;
/// Background requests in flight by default (`-o max_background=N`; the kernel's own
/// default is 12, fuser's 16).
pub const DEFAULT_MAX_BACKGROUND: u16 = 64;

pub struct ScionFuse {
    /// The volumes served, found by inode number.
    router: Arc<Router>,
    /// Directory listings, read by offset: taken at each read from offset 0 (the first read,
    /// or one after rewinddir).
    dirs: Mutex<HashMap<u64, DirHandle>>,
    next_fh: AtomicU64,
    /// Ask for FUSE over io_uring (per-CPU queues: no cross-CPU wake-up per round trip).
    uring: bool,
    /// Background requests (writeback, readahead) the kernel keeps in flight at once.
    max_background: u16,
    /// Ask for the kernel's writeback cache of file data.
    writeback: bool,
    /// The users' control socket the root directory names (`CONTROL_XATTR`), if any.
    control: Option<Vec<u8>>,
    /// When an open for reading sets a file's atime (`-o noatime|relatime|strictatime`).
    atime: Atime,
    /// Tells the kernel to drop its cached attributes of an inode (its number as the kernel
    /// knows it): set once the session exists (`attr_invalidator`).
    stale_attrs: AttrInvalidator,
}

/// When a file's access time changes. FUSE leaves atime to the filesystem, and reads the
/// kernel serves from its cache never reach it, so scion sets it when a file is opened for
/// reading, by the mount's rule: `relatime` (the default, as on ext4: when it is older than
/// the last change, or than a day), `strictatime` (every open), `noatime` (never).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atime {
    Never,
    Relative,
    Strict,
}

impl Atime {
    /// The rule the last of the kernel's atime options in `options` names (default relatime).
    pub fn from_options<'a>(options: impl IntoIterator<Item = &'a str>) -> Atime {
        let mut a = Atime::Relative;
        for o in options {
            match o {
                "noatime" => a = Atime::Never,
                "relatime" | "atime" => a = Atime::Relative,
                "strictatime" => a = Atime::Strict,
                _ => {}
            }
        }
        a
    }
}

/// The longest the kernel's coarse clock lags the precise one (a tick at HZ=100).
const TICK_NS: i128 = 10_000_000;

fn ts_ns(t: Ts) -> i128 {
    i128::from(t.sec) * 1_000_000_000 + i128::from(t.nsec)
}

/// Sets `ino`'s atime to now if the rule `rule` says an open for reading does (ctime stays:
/// an access is no change); true if it did.
fn touch_atime(fs: &mut Fs, ino: u64, rule: Atime) -> bool {
    if rule == Atime::Never || fs.check_writable(ino).is_err() {
        return false;
    }
    let Ok(a) = fs.getattr(ino) else { return false };
    let now = Ts::now();
    let day_old = now.sec - a.atime.sec >= 24 * 3600;
    // "Newer than the last change" with a tick's slack: the kernel stamps the writeback
    // cache's mtime and ctime from its coarse clock, up to a tick behind the daemon's.
    let newer = |t: Ts| ts_ns(a.atime) > ts_ns(t) + TICK_NS;
    if rule == Atime::Relative && newer(a.mtime) && newer(a.ctime) && !day_old {
        return false;
    }
    let set = SetAttr { atime: Some(now), ctime: Some(a.ctime), ..Default::default() };
    fs.setattr(ino, set).is_ok()
}

/// Where the front end puts the function that makes the kernel forget an inode's cached
/// attributes (a notification, attributes only: no page cache, so it cannot wait on the
/// request that sends it).
pub type AttrInvalidator = Arc<std::sync::OnceLock<Box<dyn Fn(u64) + Send + Sync>>>;

/// The root directory's attribute naming the users' control socket: answered by the
/// daemon, never stored, listed or changed (`scion_daemon::server::CONTROL_XATTR`).
pub const CONTROL_XATTR: &[u8] = b"user.scion.control";

fn kind(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

fn file_attr(a: &Attr, vol: VolumeId) -> FileAttr {
    FileAttr {
        ino: INodeNo(vol.global(a.ino)),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.to_system(),
        mtime: a.mtime.to_system(),
        ctime: a.ctime.to_system(),
        crtime: a.btime.to_system(),
        kind: kind(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 65536,
        flags: 0,
    }
}

fn ts(t: TimeOrNow) -> Ts {
    match t {
        TimeOrNow::Now => Ts::now(),
        TimeOrNow::SpecificTime(t) => Ts::from_system(t),
    }
}

/// The errno the kernel gets. A failure of the store underneath (its context says what
/// failed) is logged here, once, as it leaves the engine.
fn err(e: FsError) -> Errno {
    if let Some(c) = e.context() {
        log::error!("{c}");
    }
    Errno::from_i32(e.errno())
}

/// Where a request goes: the volume its inode belongs to, that volume's engine, and the
/// inode's number in the volume (what the engine knows it by).
struct At {
    vol: VolumeId,
    engine: Engine,
    ino: u64,
    /// The generation of the volume's entries (`Router::generation`).
    generation: u64,
}

impl At {
    #[track_caller]
    fn fs(&self) -> scion_fs::Locked<'_> {
        self.engine.lock()
    }

    fn attr(&self, a: &Attr) -> FileAttr {
        file_attr(a, self.vol)
    }

    fn entry(&self, r: FsResult<Attr>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry_with_ttls(&attr_ttl(&a), &entry_ttl(&a), &self.attr(&a), Generation(self.generation)),
            Err(e) => reply.error(err(self.localize(e))),
        }
    }

    /// A failure of a cube's store underneath (a bad checksum, a failed host I/O: EIO with
    /// a context) fails that cube's volume, which its policy then turns read-only or fenced;
    /// the main volume's own read errors stay the file's (scrub names them). Called without
    /// the engine lock.
    fn localize(&self, e: FsError) -> FsError {
        if self.vol != VolumeId::MAIN && e.errno() == libc::EIO {
            if let Some(c) = e.context() {
                let mut fs = self.fs();
                if fs.failure().is_none() {
                    log::error!("cube volume {}: {c}; the cube stops taking changes", self.vol.index());
                    fs.fail(c);
                }
            }
        }
        e
    }

    /// The volume's own number of a second inode of the same request (a rename's or link's
    /// target directory, a copy's destination): EXDEV if it lies in another volume, as
    /// between two filesystems (the kernel then copies).
    fn same_volume(&self, other: INodeNo) -> FsResult<u64> {
        if VolumeId::of(other.0) == self.vol {
            Ok(VolumeId::local(other.0))
        } else {
            Err(scion_fs::errno::EXDEV)
        }
    }
}

/// The request's `At` for inode `$ino`, or the error (ESTALE: a volume no longer served)
/// replied and the handler left.
macro_rules! route {
    ($self:ident, $ino:expr, $reply:ident) => {
        match $self.router.route($ino.0) {
            Ok((vol, engine, ino)) => At { vol, engine, ino, generation: $self.router.generation(vol) },
            Err(e) => return $reply.error(err(e)),
        }
    };
}

impl ScionFuse {
    pub fn new(router: Arc<Router>) -> ScionFuse {
        ScionFuse {
            router,
            dirs: Mutex::new(HashMap::new()),
            stale_attrs: Arc::new(std::sync::OnceLock::new()),
            atime: Atime::Relative,
            next_fh: AtomicU64::new(1),
            uring: false,
            max_background: DEFAULT_MAX_BACKGROUND,
            writeback: true,
            control: None,
        }
    }

    /// The root directory names `socket`, the abstract socket of the users' control socket.
    pub fn with_control_socket(mut self, socket: Option<String>) -> ScionFuse {
        self.control = socket.map(String::into_bytes);
        self
    }

    /// The answer to the control attribute if `ino` and `name` ask for it: the socket's
    /// name at the root, ENODATA where there is none, EPERM for a change (`set`).
    fn control_attr(&self, ino: INodeNo, name: &OsStr, set: bool) -> Option<Result<Vec<u8>, Errno>> {
        if ino.0 != scion_fs::ROOT_INO || name.as_bytes() != CONTROL_XATTR {
            return None;
        }
        Some(match (&self.control, set) {
            (_, true) => Err(Errno::EPERM),
            (Some(c), false) => Ok(c.clone()),
            (None, false) => Err(Errno::ENODATA),
        })
    }

    /// Let the kernel cache written data and send it later in large writes (the default), or
    /// send every write as it is made.
    /// The slot for the function that makes the kernel forget an inode's attributes.
    pub fn attr_invalidator(&self) -> AttrInvalidator {
        self.stale_attrs.clone()
    }

    /// The kernel caches a file's mode (the writeback cache keeps attributes): a change it
    /// did not ask for, setuid and setgid cleared by a write, must reach it.
    fn attrs_changed(&self, global: u64) {
        if let Some(f) = self.stale_attrs.get() {
            f(global);
        }
    }

    pub fn with_atime(mut self, rule: Atime) -> ScionFuse {
        self.atime = rule;
        self
    }

    /// `r`, whether the daemon changed a mode the kernel did not ask for, with the kernel told.
    fn told(&self, ino: INodeNo, r: FsResult<bool>) -> FsResult<()> {
        if r.as_ref().is_ok_and(|changed| *changed) {
            self.attrs_changed(ino.0);
        }
        r.map(drop)
    }

    pub fn with_writeback(mut self, on: bool) -> ScionFuse {
        self.writeback = on;
        self
    }

    /// The cube whose root a directory shows, with its attributes, if `child` of `at`'s
    /// volume is a cube's directory.
    fn graft_attr(&self, at: &At, child: u64) -> Option<(VolumeId, FsResult<Attr>)> {
        let cube = self.router.grafted(at.vol, child)?;
        Some((cube, self.router.engine(cube).and_then(|e| e.lock().getattr(scion_fs::ROOT_INO))))
    }

    /// EBUSY if `name` in `at` is a cube's directory or one above it (they stay where they
    /// are while the cube is served, as mount points and their parents do).
    fn not_pinned(&self, at: &At, name: &[u8]) -> FsResult<()> {
        let mut fs = at.fs();
        let Ok(a) = fs.lookup(at.ino, name) else { return Ok(()) };
        fs.forget(a.ino, 1);
        if self.router.pinned(at.vol, a.ino) {
            return Err(scion_fs::errno::EBUSY);
        }
        Ok(())
    }

    /// `MNT/.cubes`: each cube's root by id, reachable even when a directory above the cube
    /// cannot be read. Not listed in the root, as `.snapshot` is not.
    fn cubes_dir_attr() -> FileAttr {
        let t = SystemTime::UNIX_EPOCH;
        FileAttr {
            ino: INodeNo(CUBES_DIR_INO),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::Directory,
            perm: 0o555,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 65536,
            flags: 0,
        }
    }

    /// A lookup in `.cubes`: the root of the cube named by id.
    fn lookup_cube(&self, name: &[u8], reply: ReplyEntry) {
        let id: Option<u32> = std::str::from_utf8(name).ok().and_then(|n| n.parse().ok());
        let Some(vol) = id.and_then(|id| self.router.cube_ids().into_iter().find(|(i, _)| *i == id).map(|(_, v)| v)) else {
            return reply.error(Errno::ENOENT);
        };
        self.cube_root_entry(vol, reply)
    }

    /// The entry of volume `vol`'s root (a cube's), with the kernel's reference counted there.
    fn cube_root_entry(&self, vol: VolumeId, reply: ReplyEntry) {
        let engine = match self.router.engine(vol) {
            Ok(e) => e,
            Err(e) => return reply.error(err(e)),
        };
        let root = At { vol, engine, ino: scion_fs::ROOT_INO, generation: self.router.generation(vol) };
        let r = root.fs().remember(scion_fs::ROOT_INO);
        root.entry(r, reply)
    }

    /// LOOKUP of "." or "..", which the kernel sends only with FUSE_EXPORT_SUPPORT: "." to
    /// find an inode by number (a file handle whose inode it no longer holds: after a
    /// remount, or once its caches were dropped), ".." for a directory's parent (to connect
    /// a directory found so to the tree).
    fn lookup_by_number(&self, nodeid: u64, dotdot: bool, reply: ReplyEntry) {
        if nodeid == CUBES_DIR_INO {
            if dotdot {
                return self.found(VolumeId::MAIN, scion_fs::ROOT_INO, reply);
            }
            return reply.entry_with_ttls(&Duration::from_secs(1), &Duration::ZERO, &Self::cubes_dir_attr(), Generation(0));
        }
        let (vol, engine, ino) = match self.router.route(nodeid) {
            Ok(r) => r,
            Err(e) => return reply.error(err(e)),
        };
        let cube_root = vol != VolumeId::MAIN && ino == scion_fs::ROOT_INO;
        if !dotdot && cube_root {
            return self.cube_root_entry(vol, reply);
        }
        if !dotdot {
            return self.found(vol, ino, reply);
        }
        let parent = if cube_root {
            // Above a cube's root: the directory holding its graft, in the main volume.
            let Some(graft) = self.router.graft_of(vol) else { return reply.error(Errno::ESTALE) };
            let main = self.router.main();
            main.reach(graft, &[]).and_then(|_| {
                let mut fs = main.lock();
                let p = fs.parent_ino(graft);
                fs.forget(graft, 1);
                p
            })
        } else {
            engine.lock().parent_ino(ino)
        };
        match parent {
            Ok(p) => self.found(if cube_root { VolumeId::MAIN } else { vol }, p, reply),
            Err(e) => reply.error(err(e)),
        }
    }

    /// The entry of inode `ino` of volume `vol` (a `.snapshot` directory's too), found by
    /// its number (`Engine::reach`), with the kernel's reference counted; ESTALE if it is
    /// gone, removed but still open included (the kernel would hold it if it were open).
    fn found(&self, vol: VolumeId, ino: u64, reply: ReplyEntry) {
        let engine = match self.router.engine(vol) {
            Ok(e) => e,
            Err(e) => return reply.error(err(e)),
        };
        let at = At { vol, engine, ino, generation: self.router.generation(vol) };
        // A `.snapshot` directory is its directory's: found through it.
        let dir = ino & !SNAPDIR_BIT;
        let r = at.engine.reach(dir, &[]).and_then(|a| {
            if a.nlink > 0 && ino == dir {
                return Ok(a);
            }
            let mut fs = at.fs();
            fs.forget(dir, 1);
            if a.nlink == 0 {
                Err(scion_fs::errno::ESTALE)
            } else {
                fs.remember(ino)
            }
        });
        if let Ok(a) = &r {
            if let Some(cube) = self.router.grafted(vol, a.ino) {
                // A graft shows its cube's root (as `lookup` gives it).
                at.fs().forget(a.ino, 1);
                return self.cube_root_entry(cube, reply);
            }
        }
        at.entry(r, reply)
    }

    /// Serve requests through io_uring if the kernel offers it (Linux 6.14+, with the fuse
    /// module parameter enable_uring=Y); /dev/fuse otherwise.
    pub fn with_uring(mut self, on: bool) -> ScionFuse {
        self.uring = on;
        self
    }

    /// At most `n` background requests (writeback, readahead) in flight: fewer let an
    /// fsync or a small request overtake a bulk writer's queue sooner.
    pub fn with_max_background(mut self, n: u16) -> ScionFuse {
        self.max_background = n;
        self
    }
}

/// The answer to CREATE and TMPFILE: the new file `r`, opened (or the error).
fn created(at: &At, fs: &mut scion_fs::Fs, r: scion_fs::FsResult<scion_fs::Attr>, reply: ReplyCreate) {
    match r.and_then(|a| fs.open_file(a.ino).map(|_| a)) {
        Ok(a) => reply.created(&TTL, &at.attr(&a), Generation(at.generation), FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
        Err(e) => reply.error(err(e)),
    }
}

/// The mode to set when the kernel asks the filesystem to drop a file's privileges
/// (FUSE_HANDLE_KILLPRIV_V2): on a write or truncate by a caller without CAP_FSETID, and on a
/// chown of anything but a directory. `mode` is the one the request sets, if any; `None`: it
/// need not change. The rule is the VFS's own (setattr_should_drop_suidgid,
/// setattr_should_drop_sgid), so files behave as on ext4: setuid always goes; setgid goes when
/// group execute is set, and otherwise (where it marks mandatory locking) only if the caller
/// is neither privileged nor in the file's group.
fn mode_without_privs(cur: &Attr, mode: Option<u32>, req: &Request) -> Option<u32> {
    let perm = mode.map_or(u32::from(cur.perm), |m| m & 0o7777);
    let mut kept = perm & !libc::S_ISUID;
    if kept & libc::S_ISGID != 0 && (kept & libc::S_IXGRP != 0 || (req.uid() != 0 && !caller_in_group(req, cur.gid))) {
        kept &= !libc::S_ISGID;
    }
    (kept != perm || mode.is_some()).then_some(kept)
}

/// Notes who made a request, for the fold policy (`scion_fs::fold_policy`): early folds only
/// while more than one process uses the mount, or one syncs.
fn note(req: &Request) {
    scion_fs::fold_policy::note_caller(req.pid());
}

/// Whether the caller of `req` is in group `gid`: its filesystem gid, or one of its
/// supplementary groups (`caller`, read from /proc only when the gid does not match).
fn caller_in_group(req: &Request, gid: u32) -> bool {
    req.gid() == gid || caller(req).in_group(gid)
}

/// The caller of `req`, with its supplementary groups (which a request does not carry:
/// read from /proc while the caller waits for the reply).
fn caller(req: &Request) -> scion_fs::access::Caller {
    let groups = std::fs::read_to_string(format!("/proc/{}/status", req.pid()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().filter_map(|g| g.parse().ok()).collect())
        })
        .unwrap_or_default();
    scion_fs::access::Caller {
        uid: req.uid(),
        gid: req.gid(),
        groups,
    }
}

/// Whether a SETATTR that changes nothing but perhaps ctime is a chown(f, -1, -1) (see
/// `setattr`): without the writeback cache, whose ctime it carries, this cannot be told.
fn chown_unchanged(cur: &Attr, a: &SetAttr) -> bool {
    match cur.kind {
        Kind::Dir => false,
        Kind::File => a.ctime.is_some(),
        _ => true,
    }
}

/// Clear a file's setuid/setgid bits as a write by `req` requires (FUSE_WRITE_KILL_SUIDGID);
/// true if they were set.
fn kill_privs(fs: &mut Fs, ino: u64, req: &Request) -> FsResult<bool> {
    let cur = fs.getattr(ino)?;
    match mode_without_privs(&cur, None, req) {
        Some(mode) => {
            fs.setattr(
                ino,
                SetAttr {
                    mode: Some(mode),
                    ..Default::default()
                },
            )?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// An open directory: its listing as of the last read from offset 0. POSIX says a stream
/// rewound (rewinddir) sees the directory as it is then, names made since opendir included.
struct DirHandle {
    list: Arc<Vec<(Vec<u8>, u64, Kind)>>,
    /// Listed once at opendir, never again (the cubes directory).
    fixed: bool,
    /// The listing's bytes, as counted in `scion_daemon::memory` (given back on drop).
    bytes: u64,
}

impl DirHandle {
    fn new(list: Vec<(Vec<u8>, u64, Kind)>, fixed: bool) -> DirHandle {
        let bytes = Self::size(&list);
        scion_daemon::memory::listing_opened(bytes);
        DirHandle { list: Arc::new(list), fixed, bytes }
    }

    fn replace(&mut self, list: Arc<Vec<(Vec<u8>, u64, Kind)>>) {
        let bytes = Self::size(&list);
        scion_daemon::memory::listing_closed(self.bytes);
        scion_daemon::memory::listing_opened(bytes);
        (self.list, self.bytes) = (list, bytes);
    }

    fn size(list: &[(Vec<u8>, u64, Kind)]) -> u64 {
        list.iter().map(|(n, _, _)| std::mem::size_of::<(Vec<u8>, u64, Kind)>() + n.capacity()).sum::<usize>() as u64
    }
}

impl Drop for DirHandle {
    fn drop(&mut self) {
        scion_daemon::memory::listing_closed(self.bytes);
    }
}

impl ScionFuse {
    /// Directory `ino`'s entries with `.` and `..`, in the volume's own inode numbers
    /// (`readdir` makes them the kernel's).
    fn listing(&self, ino: INodeNo) -> Result<Vec<(Vec<u8>, u64, Kind)>, Errno> {
        let at = match self.router.route(ino.0) {
            Ok((vol, engine, ino)) => At { vol, engine, ino, generation: self.router.generation(vol) },
            Err(e) => return Err(err(e)),
        };
        let mut fs = at.fs();
        let list = fs.readdir(at.ino).map_err(err)?;
        let parent = fs.parent_of(at.ino);
        drop(fs);
        let mut v = Vec::with_capacity(list.len() + 2);
        v.push((b".".to_vec(), at.ino, Kind::Dir));
        v.push((b"..".to_vec(), parent, Kind::Dir));
        v.extend(list.into_iter().map(|e| (e.name, e.ino, e.kind)));
        Ok(v)
    }

    /// The listing of open directory `fh` to read from `offset`: taken anew for a read from 0.
    fn dir_handle(&self, ino: INodeNo, fh: FileHandle, offset: u64) -> Result<Arc<Vec<(Vec<u8>, u64, Kind)>>, Errno> {
        {
            let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            let h = dirs.get(&fh.0).ok_or(Errno::EBADF)?;
            if offset != 0 || h.fixed {
                return Ok(h.list.clone());
            }
        }
        let list = Arc::new(self.listing(ino)?);
        if let Some(h) = self.dirs.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&fh.0) {
            h.replace(list.clone());
        }
        Ok(list)
    }
}

impl Filesystem for ScionFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let writeback = self.writeback && config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_ok();
        self.writeback = writeback; // (what `write` goes by: who stamps the times)
        log::info!(
            "file data: {}",
            if writeback {
                "writeback cache"
            } else {
                "written through (each write sent as made)"
            }
        );
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_ASYNC_READ,
            // The kernel enforces and caches ACLs; the engine inherits and updates them.
            InitFlags::FUSE_POSIX_ACL,
            // Modes arrive unmasked, with the umask: the engine applies it unless a default
            // ACL decides instead.
            InitFlags::FUSE_DONT_MASK,
            // File handles (open_by_handle_at, knfsd, fanotify): the kernel finds an inode it
            // no longer holds by LOOKUP of "." and its parent by "..", `lookup_by_number`.
            InitFlags::FUSE_EXPORT_SUPPORT,
        ] {
            if config.add_capabilities(cap).is_err() {
                log::info!("kernel lacks {cap:?}");
            }
        }
        // The daemon clears setuid/setgid on write, truncate and chown (kill_privs), so the
        // kernel need not ask for a file's mode before a chown, and may mark a file it has
        // found free of privileges (S_NOSEC) instead of asking for its security.capability
        // before every write: one GETXATTR per write call, 10 KiB apiece from tar, was a
        // quarter of an untar's requests. Only with the writeback cache: without it, a
        // chown(f, -1, -1) cannot be recognised (see `setattr`).
        if writeback && config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2).is_err() {
            log::info!("kernel lacks FUSE_HANDLE_KILLPRIV_V2");
        }
        if self.uring {
            match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
                Ok(()) => {
                    log::info!("FUSE over io_uring: one queue per CPU");
                    // Its queue threads serve requests at SCHED_IDLE.
                    scion_daemon::requests_served_at_idle(true);
                }
                Err(_) => log::info!("FUSE over io_uring not offered by the kernel (fuse module parameter enable_uring); using /dev/fuse"),
            }
        }
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.set_max_background(self.max_background);
        Ok(())
    }

    fn destroy(&mut self) {
        // The final checkpoint is taken by whoever owns the Fs after the session ends.
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        note(req);
        if matches!(name.as_bytes(), b"." | b"..") {
            return self.lookup_by_number(parent.0, name.as_bytes() == b"..", reply);
        }
        if parent.0 == CUBES_DIR_INO {
            return self.lookup_cube(name.as_bytes(), reply);
        }
        if parent.0 == scion_fs::ROOT_INO && name.as_bytes() == CUBES_DIR_NAME {
            return reply.entry_with_ttls(&Duration::from_secs(1), &Duration::ZERO, &Self::cubes_dir_attr(), Generation(0));
        }
        let at = route!(self, parent, reply);
        if at.ino & SNAPDIR_BIT != 0 {
            // `D/.snapshot/NAME` depends on who asks (`Fs::lookup_as`): the kernel may not
            // cache the entry, or it would serve it to the next caller without asking.
            let r = at.fs().lookup_as(at.ino, name.as_bytes(), &caller(req));
            return match r {
                Ok(a) => reply.entry_with_ttls(&attr_ttl(&a), &Duration::ZERO, &at.attr(&a), Generation(at.generation)),
                Err(e) => reply.error(err(e)),
            };
        }
        let r = at.fs().lookup(at.ino, name.as_bytes());
        if let Ok(a) = &r {
            if let Some(cube) = self.router.grafted(at.vol, a.ino) {
                // A cube's directory shows the cube's root, as a mount point shows the
                // mounted filesystem's: the kernel's reference is the root's.
                at.fs().forget(a.ino, 1);
                return self.cube_root_entry(cube, reply);
            }
        }
        at.entry(r, reply)
    }


    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // A volume no longer served has nothing left to forget, but its slot waits until the
        // kernel has forgotten its inodes.
        match self.router.route(ino.0) {
            Ok((_, engine, ino)) => engine.lock().forget(ino, nlookup),
            Err(_) => {
                self.router.forget_retired(ino.0, nlookup);
            }
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        note(req);
        if ino.0 == CUBES_DIR_INO {
            return reply.attr(&Duration::from_secs(1), &Self::cubes_dir_attr());
        }
        let at = route!(self, ino, reply);
        let r = at.fs().getattr(at.ino);
        match r {
            Ok(a) => reply.attr(&attr_ttl(&a), &at.attr(&a)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        note(req);
        let mut a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(ts),
            mtime: mtime.map(ts),
            ctime: ctime.map(Ts::from_system),
        };
        // chown(f, -1, -1) clears setuid/setgid too, but as it passes neither uid nor gid the
        // kernel sets no FATTR_KILL_SUIDGID, and drops the mode it worked out. What arrives is
        // a SETATTR of ctime alone for a regular file (the writeback cache keeps its ctime),
        // of nothing at all for other non-directories, and nothing else sends either:
        // utimensat omitting both times returns before reaching the filesystem, the kernel's
        // own time updates carry mtime, and an empty one for a regular file comes from a
        // write removing a capability, which must not touch the mode.
        let bare = a
            == SetAttr {
                ctime: a.ctime,
                ..Default::default()
            };
        let at = route!(self, ino, reply);
        let mut fs = at.fs();
        if kill_suidgid || bare {
            // Applied to the mode this request sets, if it sets one (the kernel does not, with
            // FUSE_HANDLE_KILLPRIV_V2), in the same journal record as the change itself.
            match fs.getattr(at.ino) {
                Ok(cur) if !kill_suidgid && !chown_unchanged(&cur, &a) => {}
                Ok(cur) => a.mode = mode_without_privs(&cur, a.mode, req).or(a.mode),
                Err(e) => return reply.error(err(e)),
            }
        }
        match fs.setattr(at.ino, a) {
            Ok(a) => reply.attr(&attr_ttl(&a), &at.attr(&a)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        note(req);
        let at = route!(self, ino, reply);
        let r = at.fs().readlink(at.ino);
        match r {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(err(e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        note(req);
        let Some(k) = Kind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if k == Kind::Dir || k == Kind::Symlink {
            return reply.error(Errno::EINVAL);
        }
        let at = route!(self, parent, reply);
        let r = at
            .fs()
            .mknod(at.ino, name.as_bytes(), k, mode, umask, req.uid(), req.gid(), rdev, &[]);
        at.entry(r, reply)
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        note(req);
        let at = route!(self, parent, reply);
        let r = at.fs().mknod(
            at.ino,
            name.as_bytes(),
            Kind::Dir,
            mode,
            umask,
            req.uid(),
            req.gid(),
            0,
            &[],
        );
        at.entry(r, reply)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        note(req);
        let at = route!(self, parent, reply);
        let r = at.fs().unlink(at.ino, name.as_bytes());
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        note(req);
        let at = route!(self, parent, reply);
        let r = self.not_pinned(&at, name.as_bytes()).and_then(|()| at.fs().rmdir(at.ino, name.as_bytes()));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        note(req);
        let at = route!(self, parent, reply);
        let r = at.fs().mknod(
            at.ino,
            link_name.as_bytes(),
            Kind::Symlink,
            0o777,
            0,
            req.uid(),
            req.gid(),
            0,
            target.as_os_str().as_bytes(),
        );
        at.entry(r, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        note(req);
        let at = route!(self, parent, reply);
        let r = at.same_volume(newparent).and_then(|to| {
            self.not_pinned(&at, name.as_bytes())?;
            let dst = At { vol: at.vol, engine: at.engine.clone(), ino: to, generation: at.generation };
            self.not_pinned(&dst, newname.as_bytes())?;
            let (name, newname, flags) = (name.as_bytes(), newname.as_bytes(), flags.bits());
            if flags & scion_fs::RENAME_WHITEOUT != 0 {
                at.fs().rename_whiteout(at.ino, name, to, newname, flags, req.uid(), req.gid())
            } else {
                at.fs().rename(at.ino, name, to, newname, flags)
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        note(req);
        let at = route!(self, ino, reply);
        let r = at
            .same_volume(newparent)
            .and_then(|to| at.fs().link(at.ino, to, newname.as_bytes()));
        at.entry(r, reply)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        note(req);
        let at = route!(self, ino, reply);
        let mut fs = at.fs();
        if flags.0 & (libc::O_ACCMODE | libc::O_TRUNC) != libc::O_RDONLY {
            // A snapshot refuses writes here: with writeback caching a write error would
            // only surface at writeback.
            if let Err(e) = fs.check_writable(at.ino) {
                return reply.error(err(e));
            }
        }
        if let Err(e) = fs.open_file(at.ino) {
            return reply.error(err(e));
        }
        let reads = flags.0 & libc::O_ACCMODE != libc::O_WRONLY && flags.0 & libc::O_NOATIME == 0;
        if reads && touch_atime(&mut fs, at.ino, self.atime) {
            drop(fs);
            self.attrs_changed(ino.0);
        }
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE)
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        note(req);
        // Resolved under the engine lock, fetched outside it, straight into the reply buffer.
        let at = route!(self, ino, reply);
        let plan = at.fs().read_plan(at.ino, offset, size);
        match plan {
            Ok(p) => reply.data_with(p.len(), |buf| p.fill(buf).map_err(|e| err(at.localize(e)))),
            Err(e) => reply.error(err(at.localize(e))),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            note(req); // (write-back is the kernel's own doing)
        }
        let at = route!(self, ino, reply);
        log::trace!("WRITE ino {} offset {offset} size {}", ino.0, data.len());
        let mut killed = false;
        let stamp = if self.writeback { Stamp::Kernel } else { Stamp::Now };
        let r = at.engine.write(at.ino, offset, data, stamp, |fs| {
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                killed = kill_privs(fs, at.ino, req)?;
            }
            Ok(())
        });
        if killed {
            self.attrs_changed(ino.0);
        }
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(err(at.localize(e))),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Nothing to do at close (no locks, data is journaled as it arrives). ENOSYS tells the
        // kernel to stop sending FLUSH, saving a round trip per close; it still writes back
        // cached pages on close.
        reply.error(Errno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let at = route!(self, ino, reply);
        at.fs().release(at.ino);
        reply.ok()
    }

    fn fsync(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        note(req);
        // Syncs the file's volume only: an fsync in one volume never waits for another's.
        let at = route!(self, ino, reply);
        if self.router.serving(at.vol).nofsync {
            return reply.ok();
        }
        match at.engine.fsync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(at.localize(e))),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        note(req);
        if ino.0 == CUBES_DIR_INO {
            // The kernel's numbers already: each cube's root.
            let mut v = vec![(b".".to_vec(), CUBES_DIR_INO, Kind::Dir), (b"..".to_vec(), scion_fs::ROOT_INO, Kind::Dir)];
            v.extend(self.router.cube_ids().into_iter().map(|(id, vol)| (id.to_string().into_bytes(), vol.global(scion_fs::ROOT_INO), Kind::Dir)));
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            self.dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, DirHandle::new(v, true));
            return reply.opened(FileHandle(fh), FopenFlags::empty());
        }
        let at = route!(self, ino, reply);
        if let Err(e) = at.fs().getattr(at.ino) {
            return reply.error(err(e));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, DirHandle::new(Vec::new(), false));
        // No FOPEN_CACHE_DIR: the listing is taken at opendir, and a kernel cache filled from
        // a listing taken while the directory changed stayed stale (found by tests/soak.py).
        reply.opened(FileHandle(fh), FopenFlags::empty())
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        note(req);
        let list = match self.dir_handle(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let vol = VolumeId::of(ino.0);
        for (i, (name, child, k)) in list.iter().enumerate().skip(offset as usize) {
            let shown = match self.router.grafted(vol, *child) {
                _ if ino.0 == CUBES_DIR_INO => *child,
                Some(cube) if i >= 2 => cube.global(scion_fs::ROOT_INO),
                _ => vol.global(*child),
            };
            if reply.add(
                INodeNo(shown),
                i as u64 + 1,
                kind(*k),
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        note(req);
        let list = match self.dir_handle(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        if ino.0 == CUBES_DIR_INO {
            // Names only (node id 0): each is looked up, through `lookup_cube`, before use.
            for (i, (name, _, _)) in list.iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(0), i as u64 + 1, OsStr::from_bytes(name), &Duration::ZERO, &Self::cubes_dir_attr(), Generation(0)) {
                    break;
                }
            }
            return reply.ok();
        }
        let at = route!(self, ino, reply);
        let mut fs = at.fs();
        for (i, (name, child, _)) in list.iter().enumerate().skip(offset as usize) {
            let dots = i < 2;
            // "." and ".." are not instantiated by the kernel, so they take no reference.
            // Nor does a child the kernel already holds: it gets name and type only (node id
            // 0), because a full entry would make the kernel refresh the cached inode and drop
            // its cached ACLs, and `ls -l` would then ask for them again, one round trip each.
            let known = !dots && fs.kernel_holds(*child);
            if !dots && at.ino & SNAPDIR_BIT != 0 {
                // Entries of `.snapshot` depend on the caller: names only (node id 0), so
                // that each use goes through `lookup`.
                if let Ok(a) = fs.getattr(*child) {
                    if reply.add(
                        INodeNo(0),
                        i as u64 + 1,
                        OsStr::from_bytes(name),
                        &Duration::ZERO,
                        &at.attr(&a),
                        Generation(0),
                    ) {
                        break;
                    }
                }
                continue;
            }
            if !dots {
                if let Some((cube, a)) = self.graft_attr(&at, *child) {
                    // A cube's directory: its root's attributes, name only (node id 0), so
                    // that the kernel looks it up, through `lookup`, before using it.
                    let Ok(a) = a else { continue };
                    if reply.add(INodeNo(0), i as u64 + 1, OsStr::from_bytes(name), &Duration::ZERO, &file_attr(&a, cube), Generation(0)) {
                        break;
                    }
                    continue;
                }
            }
            let a = if dots || known {
                fs.getattr(*child)
            } else {
                fs.lookup(at.ino, name)
            };
            let Ok(a) = a else { continue };
            let counted = !dots && !known;
            if reply.add(
                INodeNo(if known { 0 } else { at.vol.global(a.ino) }),
                i as u64 + 1,
                OsStr::from_bytes(name),
                &attr_ttl(&a),
                &at.attr(&a),
                Generation(at.generation),
            ) {
                if counted {
                    fs.forget(a.ino, 1);
                }
                break;
            }
        }
        drop(fs);
        reply.ok()
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        note(req);
        let at = route!(self, ino, reply);
        if self.router.serving(at.vol).nofsync {
            return reply.ok();
        }
        match at.engine.fsync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        note(req);
        let at = route!(self, ino, reply);
        let s = at.fs().statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        note(req);
        if let Some(Err(e)) = self.control_attr(ino, name, true) {
            return reply.error(e);
        }
        let at = route!(self, ino, reply);
        let r = {
            let mut fs = at.fs();
            fs.setxattr(at.ino, name.as_bytes(), value, flags).and_then(|()| {
                // An access ACL sets the mode; setgid goes, as with chmod, unless the caller
                // is privileged or in the file's group (posix_acl_update_mode).
                if name.as_bytes() != scion_fs::acl::ACCESS || req.uid() == 0 {
                    return Ok(false);
                }
                let a = fs.getattr(at.ino)?;
                if u32::from(a.perm) & libc::S_ISGID == 0 || caller_in_group(req, a.gid) {
                    return Ok(false);
                }
                let mode = Some(u32::from(a.perm) & !libc::S_ISGID);
                fs.setattr(at.ino, SetAttr { mode, ..Default::default() }).map(|_| true)
            })
        };
        match self.told(ino, r) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        note(req);
        let r = match self.control_attr(ino, name, false) {
            Some(r) => r,
            None => {
                let at = route!(self, ino, reply);
                let r = at.fs().getxattr(at.ino, name.as_bytes());
                r.map_err(err)
            }
        };
        match r {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        note(req);
        let at = route!(self, ino, reply);
        let r = at.fs().listxattr(at.ino);
        match r {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if size == 0 {
                    reply.size(buf.len() as u32)
                } else if buf.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&buf)
                }
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        note(req);
        if let Some(Err(e)) = self.control_attr(ino, name, true) {
            return reply.error(e);
        }
        let at = route!(self, ino, reply);
        let r = at.fs().removexattr(at.ino, name.as_bytes());
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permissions are checked by the kernel (default_permissions).
        reply.ok()
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        note(req);
        let at = route!(self, parent, reply);
        let mut fs = at.fs();
        let r = fs.mknod(
            at.ino,
            name.as_bytes(),
            Kind::File,
            mode,
            umask,
            req.uid(),
            req.gid(),
            0,
            &[],
        );
        created(&at, &mut fs, r, reply);
    }

    fn tmpfile(&self, req: &Request, parent: INodeNo, mode: u32, umask: u32, _flags: i32, reply: ReplyCreate) {
        note(req);
        let at = route!(self, parent, reply);
        let mut fs = at.fs();
        let r = fs.tmpfile(at.ino, mode, umask, req.uid(), req.gid());
        created(&at, &mut fs, r, reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        note(req);
        let at = route!(self, ino, reply);
        let r = {
            let mut fs = at.fs();
            // Every mode changes the file's data or allocation: setuid and setgid go as after
            // a write, unless the caller may keep them (the kernel asks only for writes).
            fs.fallocate(at.ino, mode, offset, length).and_then(|()| match req.uid() {
                0 => Ok(false),
                _ => kill_privs(&mut fs, at.ino, req),
            })
        };
        match self.told(ino, r) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // No ioctls (isatty's TCGETS is the usual caller): "not a terminal", quietly; fuser's
        // default logged a warning for each.
        reply.error(Errno::ENOTTY)
    }

    fn lseek(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        note(req);
        if offset < 0 {
            return reply.error(Errno::EINVAL);
        }
        let at = route!(self, ino, reply);
        let r = at.fs().lseek(at.ino, offset as u64, whence);
        match r {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(err(e)),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        note(req);
        let len = len.min(u32::MAX as u64 / 2);
        let at = route!(self, ino_in, reply);
        let r = at
            .same_volume(ino_out)
            .and_then(|out| at.fs().copy_range(at.ino, offset_in, out, offset_out, len));
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(err(e)),
        }
    }
}
