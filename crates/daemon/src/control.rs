//! Control operations: what `scion clone`, `snapshot`, `destroy`, `list`, `scrub` and
//! `repack` ask of a store, typed, and what each means. A mounted store's daemon runs them
//! for the control socket; a command on an unmounted store runs them on the store it opened.
//! Replies are typed too: the CLI decides how to print them.

use scion_fs::repack::RepackReport;
use scion_fs::restore::RestoreReport;
use scion_fs::schedule::{Schedule, ScheduleRow};
use scion_fs::scrub::ScrubReport;
use scion_fs::versions::{Deleted, Version};
use crate::scan_cache::{self, ScanResult};
use scion_fs::treehash::ChunkChange;
use scion_fs::{Fs, FsError, Inval, Listing};

/// What `scion status` shows of a store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub facts: scion_fs::status::StatusFacts,
    pub store: Vec<u8>,
    /// The daemon serving the mount, and seconds since it mounted (0 and 0: not mounted).
    pub pid: u32,
    pub uptime_s: u64,
    /// The host filesystem under the store, as `df` on the mount shows it.
    pub host_total: u64,
    pub host_free: u64,
    pub clones: u64,
    pub snapshots: u64,
    /// Bytes only snapshots hold: what destroying every snapshot would give back.
    pub snapshots_only: u64,
    /// Mirrors whose last transfer failed.
    pub mirrors_failing: u64,
    /// Snapshots whose directory is gone (removed by `rm -rf`), and the bytes only they hold:
    /// `scion list --orphaned` names them, `scion destroy @ID` frees them.
    pub orphaned: u64,
    pub orphaned_bytes: u64,
    /// The daemon's resident set, and its open directory handles' listings (count, bytes)
    /// (`crate::memory`; 0 when not mounted).
    pub rss_bytes: u64,
    pub listings: u64,
    pub listing_bytes: u64,
    /// What the daemon serves over NFS (`NfsService::describe`); empty: nothing.
    pub nfs: String,
    /// Trees pulled from remotes: how the remotes answered since the mount (`None`: nothing
    /// attached, or not mounted).
    pub remote: Option<RemoteStatus>,
}

/// `scion status`'s remote line (`scion_remote::Health`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteStatus {
    pub fetches: u64,
    pub fetched_bytes: u64,
    pub failures: u64,
    /// The last failure, while no fetch has worked since (empty: none), and when.
    pub failing: String,
    pub failing_since: u64,
    pub cache_bytes: u64,
    pub cache_limit: u64,
}

impl From<scion_remote::Health> for RemoteStatus {
    fn from(h: scion_remote::Health) -> RemoteStatus {
        let (failing, failing_since) = h.failing.unwrap_or_default();
        RemoteStatus { fetches: h.fetches, fetched_bytes: h.fetched_bytes, failures: h.failures, failing, failing_since, cache_bytes: h.cache_bytes, cache_limit: h.cache_limit }
    }
}

/// `scion serve nfs`: serve the mount over NFSv3 as `NfsSpec` says, or stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NfsRequest {
    Start(NfsSpec),
    Stop,
}

/// What `scion serve nfs` asks for (the `scion-nfs` crate's options, as they travel).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NfsSpec {
    /// ADDR:PORT.
    pub listen: String,
    /// Directories to export, paths from the mount root (none: the root).
    pub exports: Vec<Vec<u8>>,
    /// Directories below which changes are refused.
    pub read_only: Vec<Vec<u8>>,
    /// `root`, `all` or `none`.
    pub squash: String,
    pub anon_uid: u32,
    pub anon_gid: u32,
    /// Inodes held for clients at most after each sweep (0: the server's default).
    pub max_held: u32,
}

/// `Status` from the engine, and its listing (which counts space without the engine lock
/// when the daemon asks).
pub fn status(fs: &Fs, rows: &[Listing]) -> Status {
    let st = fs.statfs();
    let bs = u64::from(st.bsize);
    let snaps = rows.iter().filter(|l| l.kind == scion_fs::NsKind::Snapshot);
    Status {
        facts: fs.status_facts(),
        store: fs.store_dir().as_os_str().as_encoded_bytes().to_vec(),
        host_total: st.blocks * bs,
        host_free: st.bavail * bs,
        clones: rows.iter().filter(|l| l.kind == scion_fs::NsKind::Clone).count() as u64,
        snapshots: snaps.clone().count() as u64,
        snapshots_only: snaps.map(|l| l.exclusive).sum(),
        orphaned: rows.iter().filter(|l| l.orphaned).count() as u64,
        orphaned_bytes: rows.iter().filter(|l| l.orphaned).map(|l| l.exclusive).sum(),
        ..Default::default()
    }
}

/// A mirror as `scion mirror status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorRow {
    pub mirror: scion_fs::records::mirrors::Mirror,
    /// The snapshot it sends next, and how many wait (that one included).
    pub next: Option<Vec<u8>>,
    pub behind: u32,
    /// What it is doing: `idle`, `sending NAME`, `failed: ... (retrying)`, `not mounted`.
    pub state: String,
}

/// An operation. Paths are from the mount root, names separated by `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A clone of directory `src` as the new directory `dst`, without the paths in
    /// `excludes` (each a list of names below `src`).
    Clone {
        src: Vec<u8>,
        dst: Vec<u8>,
        excludes: Vec<Vec<Vec<u8>>>,
    },
    /// A read-only snapshot `name` of directory `path`.
    Snapshot { path: Vec<u8>, name: Vec<u8> },
    /// Destroys a clone or snapshot, by path (`D/.snapshot/NAME` for a snapshot) or by the
    /// id `scion list` shows; one that holds others (clones inside it, snapshots of its
    /// directories) only with `recursive`, which destroys them too (`zfs destroy -r`).
    Destroy { target: Target, recursive: bool },
    /// Clones and snapshots at or below `under` (all of them without it).
    List { under: Option<Vec<u8>> },
    /// Reads and verifies every block of the committed state.
    Scrub,
    /// Rewrites scattered files below `path` back to back, up to `budget` bytes moved.
    Repack { path: Vec<u8>, budget: u64 },
    /// Compresses blocks only snapshots hold, up to `budget` bytes of them, at zstd `level`
    /// (0: the default).
    Compress { budget: u64, level: u8 },
    /// Adds the mirror of directory `dir` to `target` (an absolute path in another scion
    /// mount), or changes its `keep_unmirrored`.
    MirrorSet { dir: Vec<u8>, target: Vec<u8>, keep_unmirrored: bool },
    /// Removes the mirrors of `dir` (to `target` only, if given).
    MirrorRemove { dir: Vec<u8>, target: Option<Vec<u8>> },
    /// Every mirror, with what it must send and how it is doing.
    MirrorStatus,
    /// Adds an object store the store reaches by name (`scion remote add`; issue 41).
    RemoteAdd(scion_fs::records::remotes::Remote),
    /// Removes the remote of that name.
    RemoteRemove { name: String },
    /// The store's remotes.
    RemoteList,
    /// Publishes snapshot `snap` to remote `remote` as a new version of `name` (`scion push`).
    Push { snap: Vec<u8>, remote: String, name: String },
    /// Fetches and records the tree published as `name` (`version`, or the newest) on
    /// `remote`; its stream goes to the caller as stream parts (`scion pull`).
    /// `tmp` is where the command builds the tree (a `replace` intent until `PullDone`: a
    /// crash leaves nothing there after the next mount), `pid` the command's.
    PullOpen { remote: String, name: String, version: Option<u64>, tmp: Vec<u8>, pid: u32 },
    /// The pull building at `tmp` ended (the tree renamed into place, or removed): its intent
    /// goes, once what it did is durable.
    PullDone { tmp: Vec<u8> },
    /// Fetches every block of the tree attached at pack id `attach` into the cache.
    Prefetch { attach: u32 },
    /// Removes what no manifest on `remote` needs, older than `grace_s` (listed only: `dry`).
    RemoteGc { remote: String, grace_s: u64, dry: bool },
    /// The store's state: daemon, space, commit state, background work, failures.
    Status,
    /// Adds the snapshot schedule of a directory, or replaces it.
    ScheduleSet(Schedule),
    /// Removes the schedule of directory `dir` (its snapshots stay).
    ScheduleRemove { dir: Vec<u8> },
    /// Every schedule, with its last and next run.
    ScheduleList,
    /// The distinct versions of a path across the snapshots that hold it, and the live one.
    Versions { path: Vec<u8> },
    /// What snapshots of a directory hold that the live directory no longer does.
    Deleted { dir: Vec<u8> },
    /// Puts `path` back as snapshot `from` held it, at `to` (default: `path`); what stood
    /// there is set aside, or removed with `replace`. `from` is a snapshot name (of `path`'s
    /// directory or one above it) or, containing a `/`, a path into a snapshot.
    Restore {
        path: Vec<u8>,
        from: Vec<u8>,
        to: Option<Vec<u8>>,
        replace: bool,
    },
    /// Makes clone `dir` exactly its snapshot `to` again, in one step.
    Rollback { dir: Vec<u8>, to: Vec<u8> },
    /// What differs between `a` and `b` (directories or files).
    Diff {
        a: Vec<u8>,
        b: Vec<u8>,
        times: bool,
        recursive: bool,
        no_renames: bool,
    },
    /// Every regular file below `paths`, keyed by content (`Fs::scan_contents`); with
    /// `since` (a snapshot name of each path, or a path into a snapshot), only the files
    /// that differ from it. With `command`, the results kept for that command line for the
    /// contents found (`scan_cache`).
    Scan {
        paths: Vec<Vec<u8>>,
        since: Option<Vec<u8>>,
        command: Option<Vec<u8>>,
    },
    /// Keeps the results of `command` for their contents.
    ScanRecord {
        command: Vec<u8>,
        results: Vec<ScanResult>,
    },
    /// The content hash of the tree at `path` (`Fs::content_hash_of`).
    TreeHash { path: Vec<u8> },
    /// The snapshots or clones whose tree has content hash `hash`, those named `hint` first.
    FindTree { hash: [u8; 32], hint: Vec<u8> },
    /// What changed chunk by chunk from file `old` to file `new`.
    ChunkChanges { old: Vec<u8>, new: Vec<u8> },
    /// The send stream of snapshot `snap` (from `base`), in part frames; with `resume`, from
    /// that frame on (its number and the chain hash before it). Run by a mounted store's
    /// daemon only (`crate::send`).
    Send {
        snap: Vec<u8>,
        base: Option<Vec<u8>>,
        resume: Option<(u64, [u8; 32])>,
        /// Blocks named by their hash (`scion send --dedup`).
        dedup: SendDedup,
    },
    /// Which of these block hashes the store holds (`scion receive` answering an offer).
    FindBlocks { hashes: Vec<[u8; 32]> },
    /// A checkpoint of the volume holding `path`, so that the space of what was removed is
    /// given back to the host now (`scion receive` after removing a tree it failed to build).
    Checkpoint { path: Vec<u8> },
    /// The files below directory `path` that are open through the kernel, as paths relative
    /// to it (`Fs::open_below`): what the CLI flushes before a clone, snapshot, diff or scan
    /// of `path`, instead of the whole mount. Failure `E2BIG`: too many to tell (or one
    /// without a single path), flush the whole mount.
    OpenBelow { path: Vec<u8> },
    /// The store read-only (`on`: every volume checkpointed, then changes refused and
    /// background work paused) or writable again: `mount -o remount,ro|rw`.
    ReadOnly { on: bool },
    /// `scion serve nfs`: start or stop the daemon's NFS server (root's and the owner's).
    Nfs(NfsRequest),
    /// Applies a batch of send-stream frames (`frames`, encoded back to back) to the tree
    /// at `top`, copies coming from `base`; `open` is the File frame of a file a previous
    /// batch left open.
    Apply {
        top: Vec<u8>,
        base: Option<Vec<u8>>,
        open: Option<Vec<u8>>,
        frames: Vec<u8>,
        /// A pull's: `Block` frames name blocks of the tree attached at this pack id.
        attach: Option<u32>,
    },
    /// Makes the new directory `path` a cube (`cubes.rs`), with a mode and failure policy by
    /// name.
    CubeCreate { path: Vec<u8>, mode: String, on_error: String },
    /// Changes a cube's mode or policy (empty: unchanged).
    CubeSet { path: Vec<u8>, mode: String, on_error: String },
    /// Every cube, with its state and space.
    CubeList,
    /// Serves a cube again from its store.
    CubeRecover { path: Vec<u8> },
    /// Checks a cube's store while the rest of the mount serves (the cube fenced meanwhile).
    CubeCheck { path: Vec<u8> },
    /// Ends a cube, deleting what it holds (`scion cube remove` copies it out first).
    CubeRemove { path: Vec<u8> },
    /// `cube create --convert TARGET`, all or nothing (`cube_moves.rs`): begun, the cube made
    /// at `hidden` (a hidden sibling of `target`) to take a copy of it; finished, the copy
    /// whole: put in `target`'s place, the original removed. `pid`: the command's process.
    CubeConvert { hidden: Vec<u8>, target: Vec<u8>, mode: String, on_error: String, pid: u32, step: Step },
    /// `cube remove PATH`, all or nothing: begun, recorded with the hidden sibling `tmp` the
    /// command copies the cube into; finished, the copy put in the cube's place and the cube
    /// ended.
    CubeUncube { path: Vec<u8>, tmp: Vec<u8>, pid: u32, step: Step },
}

/// Which step of a command of several steps a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Recorded, and the first change made.
    Begin,
    /// The command's own part done: finished.
    Finish,
    /// The command's own part failed: undone.
    Abandon,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Path(Vec<u8>),
    Id(u32),
}

/// What an operation did.
#[derive(Debug)]
pub enum Reply {
    Cloned,
    Snapshotted,
    Destroyed,
    Listing(Vec<Listing>),
    Scrubbed(ScrubReport),
    Repacked(RepackReport),
    Compressed(scion_fs::compress::CompressReport),
    MirrorSet,
    /// How many mirrors were removed.
    MirrorRemoved(u32),
    Mirrors(Vec<MirrorRow>),
    RemoteAdded,
    RemoteRemoved,
    Remotes(Vec<scion_fs::records::remotes::Remote>),
    Pushed(PushSummary),
    /// The attachment's first pack id, the version pulled, the tree's content hash and its
    /// distinct blocks.
    PullOpened { attach: u32, version: u64, root: [u8; 32], blocks: u64 },
    /// Bytes fetched.
    Prefetched(u64),
    PullDone,
    RemoteGc(scion_remote::gc::GcReport),
    Status(Box<Status>),
    ScheduleSet,
    /// Whether there was a schedule to remove.
    ScheduleRemoved(bool),
    Schedules(Vec<ScheduleRow>),
    Versions(Vec<Version>),
    Deleted(Vec<Deleted>),
    Restored(RestoreReport),
    RolledBack,
    /// The differences, in walk order (`scion_fs::diff::walk_cmp`).
    Diff(Vec<scion_fs::diff::Difference>),
    /// The end of a diff whose changes went to the caller as parts (`wire::Part::Diff`,
    /// `DiffHeld`) as found: how many there were.
    DiffCount(u64),
    /// The files found, and the results kept for their contents. With a command line to
    /// keep results for, each scanned directory that could change is pinned: listed from a
    /// snapshot taken for the scan, `pins` (each scanned path and its pin's path), where the
    /// command must read what the keys name (`scan_cmd`); the caller destroys the pins.
    /// A scan's end: what its parts held (`wire::Part::Scan*`, which came before).
    Scanned(ScanCounts),
    ScanRecorded,
    TreeHash([u8; 32]),
    Found(Vec<Vec<u8>>),
    ChunkChanges(Vec<ChunkChange>),
    Applied,
    /// The cube made, changed or recovered.
    Cube(crate::cubes::CubeRow),
    Cubes(Vec<crate::cubes::CubeRow>),
    /// A cube's check report.
    Checked(Box<scion_fs::check::Report>),
    /// The stream was sent (its bytes came in part frames); the tree's content hash.
    Sent([u8; 32]),
    /// Per hash asked, whether the store holds it.
    Blocks(Vec<bool>),
    Checkpointed,
    /// What the NFS server does now (`scion serve nfs`).
    Nfs(String),
    /// The open files below a directory (`Op::OpenBelow`).
    OpenBelow(Vec<Vec<u8>>),
}

/// What a send does with blocks the receiver may hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SendDedup {
    /// Every block's bytes go in the stream.
    #[default]
    Off,
    /// No stream: the part frames carry the hashes of the whole blocks it would carry (32
    /// bytes each, each once), to offer the receiver.
    Offer,
    /// The blocks with these hashes, which the receiver holds, go as `Block` frames.
    Use(Vec<[u8; 32]>),
}

/// Hashes a request names at most (`Use`, `FindBlocks`): what fits in one request frame.
pub const MAX_HASHES_PER_REQUEST: usize = (crate::wire::MAX_MESSAGE - 4096) / 32;

/// What a scan's parts held, as its reply tells the caller at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCounts {
    pub contents: u64,
    pub files: u64,
    pub denied: u64,
    pub cached: u64,
}

/// What `scion push` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushSummary {
    pub version: u64,
    pub root: [u8; 32],
    /// The tree object's hash.
    pub tree: [u8; 32],
    pub stats: scion_remote::push::PushStats,
}

/// Why an operation failed: the errno, if the engine gave one, and a message saying what
/// was refused and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub errno: i32,
    pub message: String,
}

impl Failure {
    pub fn new(errno: i32, message: impl Into<String>) -> Failure {
        Failure {
            errno,
            message: message.into(),
        }
    }

    /// `what: <the failure>` (its context, if any, and the errno's text). A failure of the
    /// store underneath is logged here, once, as it leaves the engine.
    pub fn from_fs(what: String) -> impl FnOnce(FsError) -> Failure {
        move |e| {
            // The daemon's log keeps what a command was refused (the requester gets it in
            // the reply); a command working on an unmounted store in-process does not print
            // it a second time on the terminal.
            if let Some(c) = e.context() {
                log::info!("{what}: {c}");
            }
            if e.errno() == libc::EROFS && e.context().is_none() && what.contains("/.snapshot/") {
                return Failure::new(
                    libc::EROFS,
                    format!("{what}: a snapshot is read-only; clone it to change it (scion clone SNAPSHOT DIR)"),
                );
            }
            Failure::new(e.errno(), format!("{what}: {e}"))
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A clone of `src` at `dst`, made for ordinary user `user` if given: the privileges of
/// files they do not own hidden in it, and its top theirs, its group kept if they are in it
/// (as their `cp -a` would make it).
fn clone(
    fs: &mut Fs,
    src: &[u8],
    dst: &[u8],
    excludes: &[Vec<Vec<u8>>],
    user: Option<&scion_fs::access::Caller>,
) -> Result<(Reply, Vec<Inval>), Failure> {
    if excludes.iter().any(|e| e.iter().any(|c| c == b"..")) {
        return Err(Failure::new(libc::EINVAL, "an excluded path may not contain '..'"));
    }
    let s = fs.resolve_path(src).map_err(Failure::from_fs(show(src)))?;
    let (p, name) = fs.resolve_parent(dst).map_err(Failure::from_fs(show(dst)))?;
    let for_user = match user {
        Some(c) => {
            let g = fs.getattr(s).map_err(Failure::from_fs(show(src)))?.gid;
            Some(scion_fs::clone::ForUser { uid: c.uid, gid: if c.in_group(g) { g } else { c.gid } })
        }
        None => None,
    };
    fs.clone_dir_for(s, p, &name, excludes, &show(src).into_bytes(), for_user)
        .map_err(Failure::from_fs(format!("clone of {} to {}", show(src), show(dst))))?;
    Ok((Reply::Cloned, vec![Inval::Entry(p, name), Inval::Inode(p)]))
}

/// A snapshot `name` of `path`, made for ordinary user `masked_for` if given.
fn snapshot(fs: &mut Fs, path: &[u8], name: &[u8], masked_for: Option<u32>) -> Result<(Reply, Vec<Inval>), Failure> {
    if name.is_empty() || name.len() > 255 || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{:?} is not a snapshot name: 1 to 255 bytes, no '/', not '.' or '..'",
                String::from_utf8_lossy(name)
            ),
        ));
    }
    if name.starts_with(b"@") {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{:?} is not a snapshot name: names beginning with '@' are kept for .snapshot/@ID, \
                 where the snapshots of removed directories are found",
                String::from_utf8_lossy(name)
            ),
        ));
    }
    if scion_fs::clone::is_transient(name) {
        return Err(Failure::new(
            libc::EINVAL,
            format!(
                "{:?} is not a snapshot name: names beginning with '.scion-' are kept for scion's own",
                String::from_utf8_lossy(name)
            ),
        ));
    }
    let d = fs.resolve_path(path).map_err(Failure::from_fs(show(path)))?;
    fs.snapshot_for(d, name, &show(path).into_bytes(), false, scion_fs::Ts::now(), masked_for)
        .map_err(|e| {
            if e == libc::EEXIST {
                Failure::new(
                    libc::EEXIST,
                    format!("{} already has a snapshot named {}", show(path), String::from_utf8_lossy(name)),
                )
            } else {
                Failure::from_fs(format!("snapshot of {}", show(path)))(e)
            }
        })?;
    let snapdir = d | scion_fs::clone::SNAPDIR_BIT;
    Ok((
        Reply::Snapshotted,
        vec![Inval::Entry(snapdir, name.to_vec()), Inval::Inode(snapdir)],
    ))
}

/// `path` put back as snapshot `from` held it, at `to` (default: `path`), as ordinary user
/// `who` would copy it if given (`Fs::restore_as`).
fn restore(
    fs: &mut Fs,
    path: &[u8],
    from: &[u8],
    to: Option<&[u8]>,
    replace: bool,
    who: Option<&scion_fs::access::Caller>,
) -> Result<(Reply, Vec<Inval>), Failure> {
    let src = if from.contains(&b'/') {
        from.to_vec()
    } else {
        fs.in_snapshot(path, from).map_err(Failure::from_fs(show(path)))?
    };
    let dst = to.unwrap_or(path);
    let stamp = scion_fs::restore::stamp(scion_fs::Ts::now());
    let r = fs
        .restore_as(&src, dst, replace, &stamp, who)
        .map_err(Failure::from_fs(format!("restore of {} from {}", show(dst), show(&src))))?;
    let (p, name) = fs.resolve_parent(dst).map_err(Failure::from_fs(show(dst)))?;
    let mut inval = vec![Inval::Entry(p, name), Inval::Inode(p)];
    if let Some(k) = &r.kept_as {
        if let Ok((kp, kn)) = fs.resolve_parent(k) {
            inval.push(Inval::Entry(kp, kn));
        }
    }
    Ok((Reply::Restored(r), inval))
}

/// What a scan walks: each path's top (a pin of it when a command will run: a snapshot, so
/// that the command reads what was listed) and the snapshot to compare it with, by path:
/// the walk resolves them again where it runs (the engine, or a view taken after).
pub(crate) struct ScanPlan {
    roots: Vec<(Vec<u8>, Vec<u8>, Option<Vec<u8>>)>,
    pins: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A scan's first step, in the engine: paths checked, pins taken (undone on failure).
pub(crate) fn scan_begin(
    fs: &mut Fs,
    paths: &[Vec<u8>],
    since: Option<&[u8]>,
    command: Option<&[u8]>,
    user: Option<&scion_fs::access::Caller>,
) -> Result<ScanPlan, Failure> {
    let mut plan = ScanPlan { roots: Vec::with_capacity(paths.len()), pins: Vec::new() };
    let r = (|| {
        for p in paths {
            let ino = fs.resolve_path_as(p, user).map_err(Failure::from_fs(show(p)))?;
            let base = match since {
                None => None,
                Some(s) => {
                    let snap = if s.contains(&b'/') {
                        s.to_vec()
                    } else {
                        fs.in_snapshot(p, s).map_err(Failure::from_fs(show(p)))?
                    };
                    let what = format!("{} (the snapshot to compare {} with)", show(&snap), show(p));
                    fs.resolve_path_as(&snap, user).map_err(Failure::from_fs(what))?;
                    Some(snap)
                }
            };
            let rel = String::from_utf8_lossy(p).trim_matches('/').as_bytes().to_vec();
            let mut top = p.clone();
            if command.is_some() {
                if let Some((pin, _)) = pin_for_scan(fs, ino, &rel, user)? {
                    plan.pins.push((rel.clone(), pin.clone()));
                    top = pin;
                }
            }
            plan.roots.push((top, rel, base));
        }
        Ok(())
    })();
    if let Err(f) = r {
        unpin_all(fs, &plan.pins);
        return Err(f);
    }
    Ok(plan)
}

/// `Op::Diff` in `fs` (a view, in a daemon), its changes handed to `sink` a batch at a time
/// (`Fs::diff_each`). Its paths are resolved as `user` would reach them.
pub fn diff_each(
    fs: &mut Fs,
    op: &Op,
    user: Option<&scion_fs::access::Caller>,
    sink: &mut scion_fs::diff::DiffSink<'_>,
) -> Result<(), Failure> {
    let Op::Diff { a, b, times, recursive, no_renames } = op else { unreachable!("diff_each of {op:?}") };
    let x = fs.resolve_path_as(a, user).map_err(Failure::from_fs(show(a)))?;
    let y = fs.resolve_path_as(b, user).map_err(Failure::from_fs(show(b)))?;
    let opts = scion_fs::diff::DiffOptions {
        times: *times,
        recursive: *recursive,
        no_renames: *no_renames,
    };
    fs.diff_each(x, y, opts, user, sink).map(drop).map_err(Failure::from_fs(format!("diff of {} and {}", show(a), show(b))))
}

/// Where a scan's parts go as its walk finds them: the caller's socket (`server.rs`).
pub type ScanOut<'a> = dyn FnMut(crate::wire::Part) -> Result<(), Failure> + 'a;

/// The results kept for `command` run by `user` in the store at `store`, by content (read
/// once per scan, without the engine lock; what the walk finds is taken out and sent with
/// its contents).
pub(crate) fn scan_kept(
    store: &std::path::Path,
    command: &[u8],
    user: Option<&scion_fs::access::Caller>,
) -> std::collections::HashMap<scion_fs::scan::ContentKey, ScanResult> {
    scan_cache::load(&scan_cache::file_for(store, user.map(|u| u.uid), command))
}

/// A scan's walk, in a view of the engine taken after `scan_begin`: its files go to `out`
/// in parts as they are found (each batch's new contents first, with their kept results),
/// so that neither side holds the whole listing.
pub(crate) fn scan_walk(
    fs: &mut Fs,
    plan: &ScanPlan,
    paths: &[Vec<u8>],
    user: Option<&scion_fs::access::Caller>,
    kept: &mut std::collections::HashMap<scion_fs::scan::ContentKey, ScanResult>,
    out: &mut ScanOut,
) -> Result<ScanCounts, Failure> {
    use crate::wire::Part;
    let mut roots = Vec::with_capacity(plan.roots.len());
    for (top, rel, base) in &plan.roots {
        let ino = fs.resolve_path_as(top, user).map_err(Failure::from_fs(show(top)))?;
        let base = match base {
            Some(b) => Some(fs.resolve_path_as(b, user).map_err(Failure::from_fs(show(b)))?),
            None => None,
        };
        roots.push((ino, rel.clone(), base));
    }
    let mut n = ScanCounts::default();
    // (The caller's failure, kept whole: the walk is only told to stop.)
    let mut gone: Option<Failure> = None;
    let r = fs.scan_each(&roots, user, &mut |b| {
        let cached: Vec<ScanResult> = b.contents.iter().filter_map(|(k, _)| kept.remove(k)).collect();
        n.contents += b.contents.len() as u64;
        n.files += b.files.len() as u64;
        n.denied += b.denied.len() as u64;
        n.cached += cached.len() as u64;
        let parts = [Part::ScanContents(b.contents), Part::ScanCached(cached), Part::ScanFiles(b.files), Part::ScanDenied(b.denied)];
        for p in parts {
            if let Err(f) = out(p) {
                gone = Some(f);
                return Err(scion_fs::errno::EIO);
            }
        }
        Ok(())
    });
    if let Some(f) = gone {
        return Err(f);
    }
    r.map_err(Failure::from_fs(format!("scan of {}", paths.iter().map(|p| show(p)).collect::<Vec<_>>().join(" "))))?;
    Ok(n)
}

/// A scan's last step, in the engine: its pins undone if the walk failed.
pub(crate) fn scan_end(fs: &mut Fs, plan: ScanPlan, walked: Result<ScanCounts, Failure>) -> Result<Reply, Failure> {
    match walked {
        Ok(n) => Ok(Reply::Scanned(n)),
        Err(f) => {
            unpin_all(fs, &plan.pins);
            Err(f)
        }
    }
}

/// The snapshots the scan reads its directories from: (directory, pin).
pub(crate) fn scan_pins(plan: &ScanPlan) -> Vec<(Vec<u8>, Vec<u8>)> {
    plan.pins.clone()
}

/// Snapshots taken to pin a scan's directories are named `SCAN_PIN` + random hex; `scion
/// scan` destroys its own when done, and a mount destroys those a killed scan left.
pub const SCAN_PIN: &[u8] = b".scion-scan-";

/// A snapshot of directory `ino` (at `path`, without a leading `/`) for a scan to read,
/// made for `user`: its path and top. None where nothing can change: a directory inside a snapshot, or a read-only
/// mount.
fn pin_for_scan(
    fs: &mut Fs,
    ino: scion_fs::Ino,
    path: &[u8],
    user: Option<&scion_fs::access::Caller>,
) -> Result<Option<(Vec<u8>, scion_fs::Ino)>, Failure> {
    if fs.read_only || fs.check_writable(ino).is_err() {
        return Ok(None);
    }
    // A directory the caller may not list gives them nothing to run on (and a pin there
    // they could not reach to destroy).
    if let Some(u) = user {
        if !fs.permits(ino, u, scion_fs::access::R | scion_fs::access::X).map_err(Failure::from_fs(show(path)))? {
            return Ok(None);
        }
    }
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    assert_eq!(n, 8, "getrandom");
    let name: Vec<u8> = [SCAN_PIN, b.iter().map(|x| format!("{x:02x}")).collect::<String>().as_bytes()].concat();
    assert!(scion_fs::clone::is_transient(&name), "a scan's pin is no version of its directory");
    let what = || format!("a snapshot of {} to scan", show(path));
    fs.snapshot_for(ino, &name, &show(path).into_bytes(), false, scion_fs::Ts::now(), user.map(|u| u.uid))
        .map_err(Failure::from_fs(what()))?;
    let pin = [path, if path.is_empty() { b"" } else { b"/" }, scion_fs::clone::SNAPDIR_NAME, b"/", &name].concat();
    let at = fs.resolve_path(&pin).map_err(Failure::from_fs(what()))?;
    Ok(Some((pin, at)))
}

/// Destroys every pin of a scan that failed (`unpin`).
fn unpin_all(fs: &mut Fs, pins: &[(Vec<u8>, Vec<u8>)]) {
    for (_, pin) in pins {
        unpin(fs, pin);
    }
}

/// Destroys a scan's pin (best effort: a mount destroys what is left).
fn unpin(fs: &mut Fs, pin: &[u8]) {
    if let Ok(ino) = fs.resolve_path(pin) {
        if let Err(e) = fs.destroy(ino) {
            log::warn!("{}: a scan's snapshot not destroyed: {e}", show(pin));
        }
    }
}

/// Destroys the snapshots killed scans left (`SCAN_PIN`); at mount, when no scan runs.
pub fn destroy_scan_pins(fs: &mut Fs) -> Result<usize, FsError> {
    let pins: Vec<u32> = fs
        .namespace_ids()
        .into_iter()
        .filter(|id| fs.ns_info(*id).is_some_and(|i| i.kind == scion_fs::NsKind::Snapshot && i.name.starts_with(SCAN_PIN)))
        .collect();
    for id in &pins {
        match fs.destroy_id(*id) {
            // (Taken already with a pin it was nested in.)
            Err(e) if e == libc::ENOENT => {}
            r => r?,
        }
    }
    Ok(pins.len())
}

/// `Op::ChunkChanges`: patches beyond `MAX_PATCH_REPLY` bytes in all are sent as data, so
/// the reply fits a frame.
fn chunk_changes(fs: &mut Fs, old: &[u8], new: &[u8]) -> Result<Reply, Failure> {
    const MAX_PATCH_REPLY: usize = 512 << 10;
    let mut rec = |p: &[u8]| -> Result<scion_fs::inode::Inode, Failure> {
        let ino = fs.resolve_path(p).map_err(Failure::from_fs(show(p)))?;
        fs.remember(ino).map_err(Failure::from_fs(show(p)))?;
        let r = fs.file_record(ino).map_err(Failure::from_fs(show(p)));
        fs.forget(ino, 1);
        r
    };
    let (a, b) = (rec(old)?, rec(new)?);
    if a.kind != scion_fs::Kind::File || b.kind != scion_fs::Kind::File {
        return Err(Failure::new(libc::EINVAL, format!("{} and {} are not both files", show(old), show(new))));
    }
    let mut changes = fs
        .chunk_changes(&a, &b)
        .map_err(Failure::from_fs(format!("chunks of {} and {}", show(old), show(new))))?;
    let mut total = 0;
    for c in &mut changes {
        if let ChunkChange::Patch(i, runs) = c {
            total += runs.iter().map(|(_, d)| d.len() + 8).sum::<usize>();
            if total > MAX_PATCH_REPLY {
                *c = ChunkChange::Data(*i);
            }
        }
    }
    Ok(Reply::ChunkChanges(changes))
}

/// Bytes of received data buffered in the engine before the tree being received is folded.
const FOLD_RECEIVED: u64 = 16 << 20;

/// `Op::Apply`: a batch of a stream's frames applied to the tree being received.
pub fn apply(fs: &mut Fs, top: &[u8], base: Option<&[u8]>, open: Option<&[u8]>, frames: &[u8], remote: Option<scion_fs::apply::Resolve<'_>>) -> Result<Reply, Failure> {
    let bad = |e: String| Failure::new(libc::EINVAL, format!("a batch of a stream: {e}"));
    let t = fs.resolve_path(top).map_err(Failure::from_fs(show(top)))?;
    let b = match base {
        Some(b) => Some(fs.resolve_path(b).map_err(Failure::from_fs(show(b)))?),
        None => None,
    };
    let open = match open {
        Some(o) => match scion_fs::stream::decode_frames(o).map_err(bad)?.pop() {
            Some(f) => Some(f),
            None => return Err(bad("an empty open file".into())),
        },
        None => None,
    };
    let frames = scion_fs::stream::decode_frames(frames).map_err(bad)?;
    fs.apply_frames_with(t, b, open, frames, remote)
        .map_err(Failure::from_fs(format!("receiving into {}", show(top))))?;
    // The tree is folded (a checkpoint) each time this much is buffered, while the receiver
    // reads and checks its next batch, rather than all at the end, where the receive waits
    // for it: 8% faster on bench/send's 146 MiB increment (1.09 s to 1.01 s) and its 1.4 GiB
    // full tree (8.6 s to 7.9 s).
    if fs.buffered_bytes() >= FOLD_RECEIVED {
        fs.fold(t).map_err(Failure::from_fs(format!("receiving into {}", show(top))))?;
    }
    Ok(Reply::Applied)
}

/// Why a rollback was refused, in words.
/// One volume read-only (after a checkpoint, so that nothing waits in memory or the
/// journal) or writable again.
pub(crate) fn set_read_only(fs: &mut Fs, on: bool) -> Result<(), Failure> {
    if on && !fs.read_only {
        fs.checkpoint().map_err(|e| Failure::new(libc::EIO, format!("checkpoint before going read-only: {e}")))?;
    }
    fs.read_only = on;
    Ok(())
}

fn rollback_failure(e: scion_fs::FsError, dir: &[u8], to: &[u8]) -> Failure {
    let (d, t) = (show(dir), String::from_utf8_lossy(to).into_owned());
    match e.errno() {
        libc::EINVAL => Failure::new(
            libc::EINVAL,
            format!("{d} is not a clone: rollback works on clones (for another directory, `scion restore {d} --from {t} --replace`)"),
        ),
        libc::ENOENT => Failure::new(libc::ENOENT, format!("{d} has no snapshot {t}")),
        libc::EBUSY => Failure::new(
            libc::EBUSY,
            format!("{d} has (or had, when {t} was taken) snapshots of its subdirectories, which a rollback would lose; destroy them first"),
        ),
        _ => Failure::from_fs(format!("rollback of {d} to {t}"))(e),
    }
}

/// `/a/b` for the path `a/b`, as messages show paths.
/// Without `recursive`, refuses to destroy the clone or snapshot at `ino` if it holds others,
/// naming them (as `zfs destroy` does without -r).
fn refuse_nested(fs: &mut Fs, ino: scion_fs::Ino, what: &str, recursive: bool) -> Result<(), Failure> {
    let Some(id) = fs.ns_at(ino) else { return Ok(()) };
    let nested = fs.nested_namespaces(id);
    if recursive || nested.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = nested
        .iter()
        .take(8)
        .map(|n| match fs.ns_root(*n).and_then(|r| fs.path_of_dir(r).ok()) {
            Some(p) => show(&p),
            None => format!("@{n}"),
        })
        .collect();
    Err(Failure::new(
        libc::EBUSY,
        format!(
            "{what} holds {} clone(s) or snapshot(s) that would go with it ({}{}): `scion destroy -r` destroys them too",
            nested.len(),
            names.join(", "),
            if nested.len() > names.len() { ", ..." } else { "" }
        ),
    ))
}

/// Every mirror of the store with what it sends next; `state` says what its worker is doing.
pub fn mirror_rows(fs: &mut Fs, state: &dyn Fn(&scion_fs::records::mirrors::Mirror) -> String) -> Vec<MirrorRow> {
    let Ok(list) = fs.mirror_list() else { return Vec::new() };
    list.into_iter()
        .map(|m| {
            let (next, behind, gone) = match fs.mirror_next(&m) {
                Ok(Some(n)) => (Some(n.name), n.behind as u32, false),
                Ok(None) => (None, 0, false),
                Err(_) => (None, 0, true),
            };
            let state = if gone { format!("/{} is gone", show(&m.dir)) } else { state(&m) };
            MirrorRow { mirror: m, next, behind, state }
        })
        .collect()
}

pub fn show(p: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(p).trim_start_matches('/'))
}

/// The rows of a listing at or below `under` (all of them without it).
pub fn below(rows: Vec<Listing>, under: Option<&[u8]>) -> Vec<Listing> {
    let Some(u) = under.map(show).filter(|p| p != "/") else {
        return rows;
    };
    rows.into_iter()
        .filter(|l| {
            let p = l.path.as_ref().map(|p| show(p)).unwrap_or_default();
            p == u || p.starts_with(&format!("{u}/"))
        })
        .collect()
}

/// Runs an operation on an open engine: its reply, and what the kernel must forget. `user`:
/// an ordinary user asks (`rights::authorize` let them), for whom clones, snapshots and
/// restores are made (others' privileges hidden, restored files theirs).
pub fn execute(fs: &mut Fs, op: &Op, user: Option<&scion_fs::access::Caller>) -> Result<(Reply, Vec<Inval>), Failure> {
    let uid = user.map(|c| c.uid);
    let (reply, mut inval) = match op {
        Op::Clone { src, dst, excludes } => clone(fs, src, dst, excludes, user)?,
        Op::Snapshot { path, name } => snapshot(fs, path, name, uid)?,
        Op::Destroy { target: Target::Id(id), recursive } => {
            if let Some(ino) = fs.ns_root(*id) {
                refuse_nested(fs, ino, &format!("@{id}"), *recursive)?;
            }
            fs.destroy_id(*id).map_err(|e| {
                if e == libc::EINVAL || e == libc::ENOENT {
                    Failure::new(libc::ENOENT, format!("no clone or snapshot with id {id}"))
                } else {
                    Failure::from_fs(format!("destroy of @{id}"))(e)
                }
            })?;
            (Reply::Destroyed, Vec::new())
        }
        Op::Destroy { target: Target::Path(path), recursive } => {
            if path.rsplit(|&c| c == b'/').next() == Some(scion_fs::clone::SNAPDIR_NAME) {
                return Err(Failure::new(
                    libc::EINVAL,
                    format!("{} shows the snapshots, it is not one: destroy {}/NAME", show(path), show(path)),
                ));
            }
            let (p, name) = fs.resolve_parent(path).map_err(Failure::from_fs(show(path)))?;
            let ino = fs.resolve_path(path).map_err(Failure::from_fs(show(path)))?;
            refuse_nested(fs, ino, &show(path), *recursive)?;
            fs.destroy(ino).map_err(|e| {
                if e == libc::EINVAL {
                    Failure::new(e.errno(), format!("{} is not a clone or snapshot", show(path)))
                } else {
                    Failure::from_fs(format!("destroy of {}", show(path)))(e)
                }
            })?;
            (Reply::Destroyed, vec![Inval::Entry(p, name), Inval::Inode(p)])
        }
        Op::List { under } => {
            let rows = fs.list().map_err(Failure::from_fs("list".into()))?;
            (Reply::Listing(below(rows, under.as_deref())), Vec::new())
        }
        Op::Scrub => (
            Reply::Scrubbed(fs.scrub().map_err(Failure::from_fs("scrub".into()))?),
            Vec::new(),
        ),
        Op::Repack { path, budget } => {
            let d = fs.resolve_path(path).map_err(Failure::from_fs(show(path)))?;
            let r = fs
                .repack(d, *budget)
                .map_err(Failure::from_fs(format!("repack of {}", show(path))))?;
            (Reply::Repacked(r), Vec::new())
        }
        Op::Compress { budget, level } => {
            let r = fs
                .compress_old(*budget, crate::compress_level(*level))
                .map_err(Failure::from_fs("compression of old versions".into()))?;
            (Reply::Compressed(r), Vec::new())
        }
        Op::MirrorSet { dir, target, keep_unmirrored } => {
            fs.set_mirror(dir, target, *keep_unmirrored)
                .map_err(Failure::from_fs(format!("mirror of {}", show(dir))))?;
            (Reply::MirrorSet, Vec::new())
        }
        Op::MirrorRemove { dir, target } => {
            let n = fs
                .remove_mirror(dir, target.as_deref())
                .map_err(Failure::from_fs(format!("mirror of {}", show(dir))))?;
            (Reply::MirrorRemoved(n as u32), Vec::new())
        }
        Op::RemoteAdd(r) => {
            scion_fs::records::remotes::add(&fs.host(), fs.store_dir(), r.clone()).map_err(Failure::from_fs(format!("remote {}", r.name)))?;
            (Reply::RemoteAdded, Vec::new())
        }
        Op::RemoteRemove { name } => {
            scion_fs::records::remotes::remove(&fs.host(), fs.store_dir(), name).map_err(Failure::from_fs(format!("remote {name}")))?;
            (Reply::RemoteRemoved, Vec::new())
        }
        Op::RemoteList => {
            let stored = scion_fs::records::remotes::load(&fs.host(), fs.store_dir()).map_err(|e| Failure::from_fs("remotes".into())(e.into()))?;
            (Reply::Remotes(stored.remotes), Vec::new())
        }
        Op::Status => {
            let rows = fs.list().map_err(Failure::from_fs("status".into()))?;
            (Reply::Status(Box::new(status(fs, &rows))), Vec::new())
        }
        Op::MirrorStatus => (
            Reply::Mirrors(mirror_rows(fs, &|_| "not mounted: it runs while the store is mounted".into())),
            Vec::new(),
        ),
        Op::ScheduleSet(s) => {
            fs.set_schedule(s.clone())
                .map_err(Failure::from_fs(format!("schedule of {}", show(&s.dir))))?;
            (Reply::ScheduleSet, Vec::new())
        }
        Op::ScheduleRemove { dir } => {
            let had = fs
                .remove_schedule(dir)
                .map_err(Failure::from_fs(format!("schedule of {}", show(dir))))?;
            (Reply::ScheduleRemoved(had), Vec::new())
        }
        Op::ScheduleList => (
            Reply::Schedules(fs.schedule_rows().map_err(Failure::from_fs("schedules".into()))?),
            Vec::new(),
        ),
        Op::Versions { path } => {
            let v = fs.versions(path).map_err(|e| {
                if e == libc::ENOENT {
                    Failure::new(
                        libc::ENOENT,
                        format!("{}: neither the live tree nor any snapshot holds it", show(path)),
                    )
                } else {
                    Failure::from_fs(show(path))(e)
                }
            })?;
            (Reply::Versions(v), Vec::new())
        }
        Op::Deleted { dir } => (
            Reply::Deleted(fs.deleted(dir).map_err(Failure::from_fs(show(dir)))?),
            Vec::new(),
        ),
        Op::Restore {
            path,
            from,
            to,
            replace,
        } => restore(fs, path, from, to.as_deref(), *replace, user)?,
        // (In a daemon its changes stream: `server::run_diff`.)
        Op::Diff { .. } => {
            let mut all = scion_fs::diff::Gather::default();
            diff_each(fs, op, user, &mut |run, v| all.take(run, v))?;
            (Reply::Diff(all.changes()), Vec::new())
        }
        // (Its listing streams: the daemon's socket serves it, `server::run_scan`.)
        Op::Scan { .. } => return Err(Failure::new(libc::EINVAL, "a scan is served by a mounted store's daemon: mount the store")),
        Op::ScanRecord { command, results } => {
            let f = scan_cache::file_for(fs.store_dir(), uid, command);
            let most = if uid.is_some() { scan_cache::MAX_USER_FILE } else { scan_cache::MAX_FILE };
            scan_cache::append(&f, results, most)
                .map_err(|e| Failure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{}: {e}", f.display())))?;
            (Reply::ScanRecorded, Vec::new())
        }
        Op::TreeHash { path } => {
            let d = fs.resolve_path(path).map_err(Failure::from_fs(show(path)))?;
            let h = fs.content_hash_of(d).map_err(Failure::from_fs(format!("content hash of {}", show(path))))?;
            (Reply::TreeHash(h), Vec::new())
        }
        Op::FindTree { hash, hint } => {
            let found = fs.find_tree(hash, hint, 8).map_err(Failure::from_fs("search for a base".into()))?;
            (Reply::Found(found), Vec::new())
        }
        Op::ChunkChanges { old, new } => (chunk_changes(fs, old, new)?, Vec::new()),
        Op::Send { .. } => {
            return Err(Failure::new(libc::EINVAL, "a stream is sent by a mounted store's daemon: mount the store"))
        }
        Op::CubeCreate { .. }
        | Op::CubeSet { .. }
        | Op::CubeList
        | Op::CubeRecover { .. }
        | Op::CubeCheck { .. }
        | Op::CubeRemove { .. }
        | Op::CubeConvert { .. }
        | Op::CubeUncube { .. } => {
            return Err(Failure::new(libc::EINVAL, "cubes are served by a mounted store's daemon: mount the store"))
        }
        Op::Apply { top, base, open, frames, attach: None } => (apply(fs, top, base.as_deref(), open.as_deref(), frames, None)?, Vec::new()),
        // Made by the server, which has the engine's remote source.
        Op::Apply { attach: Some(_), .. } | Op::Push { .. } | Op::PullOpen { .. } | Op::PullDone { .. } | Op::Prefetch { .. } | Op::RemoteGc { .. } => {
            return Err(Failure::new(libc::EINVAL, "a remote's operation needs the mount's daemon"))
        }
        Op::FindBlocks { hashes } => (
            Reply::Blocks(fs.find_blocks(hashes).map_err(Failure::from_fs("blocks offered".into()))?),
            Vec::new(),
        ),
        Op::ReadOnly { on } => {
            set_read_only(fs, *on)?;
            (Reply::Checkpointed, Vec::new())
        }
        // The server's own (`server::NfsService`), never an engine's.
        Op::Nfs(_) => return Err(Failure::new(libc::ENOTSUP, "serving over NFS is the daemon's, not a store's")),
        Op::OpenBelow { path } => {
            let d = fs.resolve_path(path).map_err(Failure::from_fs(show(path)))?;
            match fs.open_below(d, OPEN_BELOW_MAX).map_err(Failure::from_fs(show(path)))? {
                Some(files) => (Reply::OpenBelow(files), Vec::new()),
                None => {
                    let why = format!("more than {OPEN_BELOW_MAX} files, or one with several names, open below {}", show(path));
                    return Err(Failure::new(libc::E2BIG, why));
                }
            }
        }
        Op::Checkpoint { .. } => {
            fs.writable().map_err(Failure::from_fs("checkpoint".into()))?;
            fs.checkpoint().map_err(|e| Failure::new(libc::EIO, format!("checkpoint: {e}")))?;
            (Reply::Checkpointed, Vec::new())
        }
        Op::Rollback { dir, to } => {
            let d = fs.resolve_path(dir).map_err(Failure::from_fs(show(dir)))?;
            if fs.ns_at(d).is_none() && d != fs.root() {
                // A plain directory: restored in place from its snapshot, in time with its
                // size (its snapshots, inode number and path stay; see `refill.rs`).
                if !fs.in_snapshot(dir, to).is_ok_and(|p| fs.resolve_path(&p).is_ok()) {
                    return Err(rollback_failure(scion_fs::FsError::new(libc::ENOENT), dir, to));
                }
                let (_, inval) = restore(fs, dir, to, None, true, user)?;
                (Reply::RolledBack, inval)
            } else {
                fs.rollback(d, to).map_err(|e| rollback_failure(e, dir, to))?;
                // The engine queued what the kernel must forget (the mount entry, the old files).
                (Reply::RolledBack, Vec::new())
            }
        }
    };
    inval.extend(fs.take_invalidations());
    Ok((reply, inval))
}

/// The most open files `Op::OpenBelow` names; past it the CLI flushes the whole mount.
pub const OPEN_BELOW_MAX: usize = 1024;

/// The directories whose files the kernel must have written back before `op` runs, so that
/// it sees what processes see (the CLI's `sync_mount`, or a settled request,
/// `wire::Request::settled`); empty for an operation that reads no files' data.
pub fn settle_dirs(op: &Op) -> Vec<&[u8]> {
    match op {
        Op::Clone { src, .. } => vec![src],
        Op::Snapshot { path, .. } => vec![path],
        Op::Diff { a, b, .. } => vec![a, b],
        Op::Scan { paths, .. } => paths.iter().map(|p| p.as_slice()).collect(),
        _ => Vec::new(),
    }
}

/// The paths an operation names in the store (not a mirror's target, which is another
/// store's), for the daemon to route it to the cube they lie in (`server::route`).
pub fn op_paths(op: &mut Op) -> Vec<&mut Vec<u8>> {
    match op {
        Op::Clone { src, dst, .. } => vec![src, dst],
        Op::Snapshot { path, .. } | Op::Repack { path, .. } | Op::Versions { path } | Op::TreeHash { path } => vec![path],
        Op::Destroy { target: Target::Path(p), .. } => vec![p],
        Op::List { under: Some(p) } => vec![p],
        Op::MirrorSet { dir, .. } | Op::MirrorRemove { dir, .. } | Op::ScheduleRemove { dir } | Op::Deleted { dir } => vec![dir],
        Op::ScheduleSet(s) => vec![&mut s.dir],
        Op::Restore { path, from, to, .. } => {
            let mut v = vec![path];
            if from.contains(&b'/') {
                v.push(from);
            }
            v.extend(to.as_mut());
            v
        }
        Op::Rollback { dir, .. } => vec![dir],
        Op::Diff { a, b, .. } => vec![a, b],
        Op::Scan { paths, since, .. } => paths.iter_mut().chain(since.as_mut()).collect(),
        Op::ChunkChanges { old, new } => vec![old, new],
        Op::Send { snap, base, .. } => std::iter::once(snap).chain(base.as_mut()).collect(),
        Op::FindBlocks { .. } | Op::ReadOnly { .. } | Op::Nfs(_) => Vec::new(),
        Op::Checkpoint { path } | Op::OpenBelow { path } => vec![path],
        Op::Apply { top, base, .. } => std::iter::once(top).chain(base.as_mut()).collect(),
        Op::Push { snap, .. } => vec![snap],
        Op::PullOpen { tmp, .. } | Op::PullDone { tmp } => vec![tmp],
        Op::Prefetch { .. } | Op::RemoteGc { .. } => Vec::new(),
        Op::CubeCreate { path, .. } | Op::CubeSet { path, .. } | Op::CubeRecover { path } | Op::CubeCheck { path } | Op::CubeRemove { path } => vec![path],
        Op::CubeConvert { hidden, target, .. } => vec![hidden, target],
        Op::CubeUncube { path, tmp, .. } => vec![path, tmp],
        Op::Destroy { target: Target::Id(_), .. }
        | Op::List { under: None }
        | Op::Scrub
        | Op::Compress { .. }
        | Op::MirrorStatus
        | Op::RemoteAdd(_)
        | Op::RemoteRemove { .. }
        | Op::RemoteList
        | Op::Status
        | Op::ScheduleList
        | Op::ScanRecord { .. }
        | Op::FindTree { .. }
        | Op::CubeList => Vec::new(),
    }
}
