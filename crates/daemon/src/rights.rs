//! What a caller of the control socket may ask (issue 18 item 6, CCFS' point: old versions
//! without an administrator).
//!
//! Root and the user who mounted the store have every right (`Rights::Full`). On a mount made
//! by root for everyone (`allow_other`), other local users reach the daemon through a second
//! socket (`server::user_socket_name`) and are known by the kernel's word for who connected
//! (SO_PEERCRED, SO_PEERGROUPS). They help themselves on what they own: snapshot it, destroy
//! its snapshots and clones, put it on a schedule, roll their clones back; they clone what
//! they can read into a directory they can write; they see the versions of what they can
//! reach and the clones and snapshots they can reach. Every path is resolved as they would
//! walk it: search permission on each directory, a snapshot's as it was when taken. What they
//! make is made for them (`NsInfo::masked_for`): the setuid and setgid bits and capabilities
//! of files they do not own are hidden in it, so a copy gives them no privilege `cp -a` would
//! not. Their restores are made as their own `cp -a` would (`Fs::restore_as`); their diffs
//! and scans read what their `diff -r` and `find` would (`Fs::diff_as`, `scan_contents`).
//! Refused:
//! scrub, repack and compress (they work on the whole store).

use crate::control::{Failure, Op, Target};
use scion_fs::access::{Caller, R, W, X};
use scion_fs::schedule::ScheduleRow;
use scion_fs::clone::split_path;
use scion_fs::{Fs, Ino, Listing};

/// Schedules an ordinary user may keep on one mount.
pub const MAX_USER_SCHEDULES: usize = 16;
/// Snapshots an ordinary user may own on one mount (their top directory is theirs).
pub const MAX_USER_SNAPSHOTS: usize = 1000;
/// Command lines an ordinary user may keep scan results for on one mount.
pub const MAX_USER_SCAN_CACHES: usize = 32;

/// Who asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rights {
    /// Root, or the user who mounted the store.
    Full,
    /// Any other local user.
    User(Caller),
}

/// Refuses `op` if `who` may not ask it (EPERM, EACCES, EDQUOT), saying why. Called under
/// the engine lock, right before the operation runs, so nothing changes in between.
pub fn authorize(fs: &mut Fs, who: &Caller, op: &Op) -> Result<(), Failure> {
    match op {
        Op::Snapshot { path, .. } => {
            owned(fs, who, path)?;
            if fs.snapshots_made_by(who.uid) >= MAX_USER_SNAPSHOTS {
                return Err(Failure::new(
                    libc::EDQUOT,
                    format!("you own {MAX_USER_SNAPSHOTS} snapshots on this mount, the most a user may; destroy some first"),
                ));
            }
            Ok(())
        }
        Op::Destroy { target, recursive } => {
            let id = match target {
                Target::Path(p) => {
                    let ino = reach(fs, who, p)?;
                    // Not a clone or snapshot: the operation says so, as to anyone.
                    let Some(id) = fs.ns_at(ino) else { return Ok(()) };
                    id
                }
                Target::Id(id) => {
                    let gone = || Failure::new(libc::ENOENT, format!("no clone or snapshot with id {id}"));
                    // By id as by path: only what they could reach by its path.
                    let path = fs.ns_path(*id).ok_or_else(gone)?;
                    if fs.resolve_path_as(&path, Some(who)).ok() != fs.ns_root(*id) {
                        return Err(gone());
                    }
                    *id
                }
            };
            made_by_them(fs, who, id, &describe(target))?;
            // What goes with it must be theirs too.
            if *recursive {
                for n in fs.nested_namespaces(id) {
                    made_by_them(fs, who, n, &format!("@{n}, which it holds,"))?;
                }
            }
            Ok(())
        }
        Op::ScheduleSet(s) => {
            owned(fs, who, &s.dir)?;
            let rows = fs.schedule_rows().map_err(from_fs("schedules"))?;
            let mine = own_schedules(fs, who, rows);
            if mine.len() >= MAX_USER_SCHEDULES && !mine.iter().any(|r| r.schedule.dir == s.dir) {
                return Err(Failure::new(
                    libc::EDQUOT,
                    format!("you have {MAX_USER_SCHEDULES} schedules on this mount, the most a user may"),
                ));
            }
            Ok(())
        }
        Op::ScheduleRemove { dir } => owned(fs, who, dir).map(drop),
        Op::Rollback { dir, .. } => {
            let ino = reach(fs, who, dir)?;
            match fs.ns_at(ino) {
                Some(id) => made_by_them(fs, who, id, &show(dir)),
                // Not a clone: the operation says so, as to anyone (if they own it).
                None => owner_is(fs, who, ino, &show(dir)).map(drop),
            }
        }
        Op::Versions { path } => {
            // The path may be gone from the live tree; its directory must be reachable and
            // searchable, as `ls -l PATH` needs (EACCES otherwise, never whether it exists).
            let dir = split_path(path).0;
            let d = reach(fs, who, dir)?;
            allowed(fs, who, d, X, dir, "search")
        }
        Op::Deleted { dir } => {
            let d = reach(fs, who, dir)?;
            allowed(fs, who, d, R | X, dir, "list")
        }
        // Filtered to what the caller can reach (`visible_listing`, `own_schedules`).
        Op::List { .. } | Op::ScheduleList => Ok(()),
        Op::Clone { src, dst, .. } => {
            // As `cp -a SRC DST` would need: to read and search SRC, to write and search
            // DST's directory. Files below SRC keep their owners and modes in the clone (one
            // they could not read stays unreadable) and lose their privileges to them.
            let s = reach(fs, who, src)?;
            allowed(fs, who, s, R | X, src, "read")?;
            let (dir, _) = split_path(dst);
            let d = reach(fs, who, dir)?;
            allowed(fs, who, d, W | X, dir, "write in")
        }
        Op::Restore { path, to, .. } => {
            // As `cp -a` into the destination's directory: they must write and search it.
            // The copy itself is made as theirs (`Fs::restore_as`), readable files only.
            let dst = to.as_deref().unwrap_or(path);
            let dir = split_path(dst).0;
            let d = reach(fs, who, dir)?;
            allowed(fs, who, d, W | X, dir, "write in")
        }
        // Walked and compared as their `diff -r` would (`Fs::diff_as`); scanned as their
        // `find` would list (`Fs::scan_contents` with the caller).
        Op::Diff { .. } | Op::Scan { .. } => Ok(()),
        // Their own cache, of a bounded number of command lines.
        Op::ScanRecord { command, .. } => {
            let store = fs.store_dir();
            let new = !crate::scan_cache::file_for(store, Some(who.uid), command).exists();
            if new && crate::scan_cache::files_of(store, who.uid) >= MAX_USER_SCAN_CACHES {
                return Err(Failure::new(
                    libc::EDQUOT,
                    format!("you keep scan results for {MAX_USER_SCAN_CACHES} command lines, the most a user may"),
                ));
            }
            Ok(())
        }
        // They would tell about files the caller may not read (whether they are equal to
        // others, where they changed).
        Op::TreeHash { .. } | Op::FindTree { .. } | Op::ChunkChanges { .. } | Op::Apply { .. } | Op::Send { .. } | Op::FindBlocks { .. } | Op::Checkpoint { .. } | Op::ReadOnly { .. } => Err(Failure::new(
            libc::EPERM,
            "send and receive are root's and the store owner's for now",
        )),
        Op::Nfs(_) => Err(Failure::new(libc::EPERM, "serving over NFS is root's and the store owner's")),
        // It names files open below a directory, which the caller may not be allowed to
        // list; their CLI flushes the whole mount instead.
        Op::OpenBelow { .. } => Err(Failure::new(libc::EPERM, "the open files below a directory are root's and the store owner's to ask")),
        // A remote is the store's, used by its daemon with the daemon's credentials.
        Op::RemoteAdd(_) | Op::RemoteRemove { .. } | Op::RemoteList => {
            Err(Failure::new(libc::EPERM, "a store's remotes are root's and the store owner's"))
        }
        // A push publishes files the caller may not read; a pull brings in blocks as the
        // store's.
        Op::Push { .. } | Op::PullOpen { .. } | Op::PullDone { .. } | Op::Prefetch { .. } | Op::RemoteGc { .. } => Err(Failure::new(libc::EPERM, "push and pull are root's and the store owner's")),
        Op::MirrorSet { .. } | Op::MirrorRemove { .. } | Op::MirrorStatus | Op::Status => Err(Failure::new(
            libc::EPERM,
            "mirrors send the store's snapshots to another store as root: root's or the store owner's",
        )),
        Op::Scrub | Op::Repack { .. } | Op::Compress { .. } => Err(Failure::new(
            libc::EPERM,
            "scrub, repack and compress work on the whole store: root's or the store owner's",
        )),
        Op::CubeCreate { .. } | Op::CubeSet { .. } | Op::CubeList | Op::CubeRecover { .. } | Op::CubeCheck { .. } | Op::CubeRemove { .. } | Op::CubeConvert { .. } | Op::CubeUncube { .. } => Err(Failure::new(
            libc::EPERM,
            "cubes are stores of their own inside the store: root's or the store owner's",
        )),
    }
}

/// The rows of a listing whose paths `who` can reach.
pub fn visible_listing(fs: &mut Fs, who: &Caller, rows: Vec<Listing>) -> Vec<Listing> {
    rows.into_iter()
        .filter(|l| l.path.as_ref().is_some_and(|p| fs.resolve_path_as(p, Some(who)).is_ok()))
        .collect()
}

/// The schedules of directories `who` owns.
pub fn own_schedules(fs: &mut Fs, who: &Caller, rows: Vec<ScheduleRow>) -> Vec<ScheduleRow> {
    rows.into_iter().filter(|r| owned(fs, who, &r.schedule.dir).is_ok()).collect()
}

/// The inode at `path`, walked as `who`.
fn reach(fs: &mut Fs, who: &Caller, path: &[u8]) -> Result<Ino, Failure> {
    fs.resolve_path_as(path, Some(who)).map_err(from_fs(&show(path)))
}

/// The inode at `path`, walked as `who`, if it is theirs (`theirs`).
fn owned(fs: &mut Fs, who: &Caller, path: &[u8]) -> Result<Ino, Failure> {
    let ino = reach(fs, who, path)?;
    theirs(fs, who, ino, &show(path))
}

/// Refuses unless directory `ino` is `who`'s to snapshot and schedule: the top of a clone
/// they made, or a plain directory they own. A clone's top is its maker's whoever owns it
/// (root's clone of their tree is root's; theirs of another's is theirs).
fn theirs(fs: &mut Fs, who: &Caller, ino: Ino, what: &str) -> Result<Ino, Failure> {
    match fs.ns_at(ino) {
        Some(id) => made_by_them(fs, who, id, what).map(|()| ino),
        None => owner_is(fs, who, ino, what),
    }
}

/// Refuses unless clone or snapshot `id` was made by `who` (recorded when it was made).
fn made_by_them(fs: &mut Fs, who: &Caller, id: u32, what: &str) -> Result<(), Failure> {
    match fs.ns_info(id).map(|i| i.made_by) {
        Some(Some(uid)) if uid == who.uid => Ok(()),
        Some(Some(uid)) => Err(Failure::new(libc::EPERM, format!("{what}: not yours (made by uid {uid})"))),
        Some(None) => Err(Failure::new(libc::EPERM, format!("{what}: not yours (made by root)"))),
        None => Err(Failure::new(libc::ENOENT, format!("{what}: no such clone or snapshot"))),
    }
}

/// Refuses unless `who` owns `ino`.
fn owner_is(fs: &mut Fs, who: &Caller, ino: Ino, what: &str) -> Result<Ino, Failure> {
    let a = fs.getattr(ino).map_err(from_fs(what))?;
    if a.uid != who.uid {
        return Err(Failure::new(libc::EPERM, format!("{what}: not yours (owned by uid {})", a.uid)));
    }
    Ok(ino)
}

fn describe(t: &Target) -> String {
    match t {
        Target::Path(p) => show(p),
        Target::Id(id) => format!("@{id}"),
    }
}

/// Refuses unless `who` has the `bits` on directory `ino` (at `path`), as the kernel decides.
fn allowed(fs: &mut Fs, who: &Caller, ino: Ino, bits: u16, path: &[u8], verb: &str) -> Result<(), Failure> {
    if !fs.permits(ino, who, bits).map_err(from_fs(&show(path)))? {
        return Err(Failure::new(libc::EACCES, format!("{}: you may not {verb} it", show(path))));
    }
    Ok(())
}

fn show(p: &[u8]) -> String {
    crate::control::show(p)
}

fn from_fs(what: &str) -> impl FnOnce(scion_fs::FsError) -> Failure + '_ {
    move |e| Failure::from_fs(what.to_string())(e)
}
