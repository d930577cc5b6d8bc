//! `scion receive DIR [-i FILE]` (issue 20): makes the tree a `scion send` stream describes
//! appear as the new directory DIR, all at once, or not at all.
//!
//! The tree is built beside DIR, under a hidden name (`.DIR.scion-receive-PID`): an empty
//! directory for a full stream, or a clone of the base, which is found in this store by its
//! content hash (any snapshot or clone with that tree: received before, or copied here by
//! other means). Each frame is checked (checksum, order) before it is applied; at the end
//! the stream's own hash and the built tree's content hash must match what the sender said,
//! and only then is the tree renamed to DIR and snapshotted under the sent snapshot's name
//! (the base for the next increment). Anything wrong, and the hidden tree is removed.
//!
//! Every path a stream names is checked to stay inside the tree: no `..`, and no directory on
//! the way that is a symlink (a stream could otherwise make one and write through it).

mod batch;
mod input;

use crate::tree_cmds::{call, locate, store_path, Located};
use batch::Batcher;
use input::open_stream;
use scion::stream::{Frame, ReadError, StreamReader};
use scion_daemon::control::{Op, Reply, Target};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct ReceiveArgs {
    pub dir: PathBuf,
    pub input: Option<PathBuf>,
    pub progress: bool,
    /// Keep what arrived if the stream stops short, for `--resume`.
    pub resumable: bool,
    /// Go on with a receive that stopped short.
    pub resume: bool,
    /// Remove what a receive that stopped short kept.
    pub abort: bool,
    /// The store DIR is in (DIR is then a path in the store), mounted for the receive if it
    /// is not mounted.
    pub store: Option<PathBuf>,
    /// How DIR is named in messages, when it is not the path the receive works on.
    pub shown: Option<String>,
    /// A pull's attachment: the stream's `Block` frames name its blocks (`scion pull`).
    pub attach: Option<u32>,
}

/// The extended attribute on a kept partial tree's top naming where it stopped.
const KEPT: &[u8] = b"user.scion.receive";

/// Where the tree is being built, and how to take it away.
struct Staging {
    at: Located,
    path: PathBuf,
    rel: Vec<u8>,
    /// A clone of the base (destroyed), or a plain directory (removed).
    clone: bool,
}

impl Staging {
    fn remove(&self) {
        if let Err(e) = remove_tree(&self.at, &self.path, &self.rel, Some(self.clone)) {
            eprintln!("scion receive: {} stays: {e}", self.path.display());
        }
    }

    /// Marks the partial tree with where the stream stopped (`Kept`).
    fn keep(&self, k: &Kept) -> Result<(), String> {
        let v = format!("{}\n{}\n{}\n{}", k.token, u8::from(self.clone), hex(&k.name), hex(&k.base));
        crate::meta::set_xattr(&self.path, KEPT, Some(v.as_bytes()))
    }
}

/// A clone of the base that copies come from, private to this receive and destroyed when it
/// ends (`Drop`). The base found in the store is not held: it may be destroyed while the
/// receive goes on (a send of a live directory into its own store destroys the snapshot it
/// took when it ends, and that snapshot can be the base found here).
struct HeldBase<'a> {
    at: &'a Located,
    rel: Vec<u8>,
}

impl<'a> HeldBase<'a> {
    /// Clones `from` beside the tree being built (`STAGING.base`), replacing one a receive
    /// that died left there.
    fn take(at: &'a Located, staging_rel: &[u8], from: &[u8]) -> Result<HeldBase<'a>, String> {
        let rel = [staging_rel, b".base"].concat();
        HeldBase::drop_leftover(at, staging_rel);
        call(at, &Op::Clone { src: from.to_vec(), dst: rel.clone(), excludes: Vec::new() })
            .map_err(|e| format!("holding the base {}: {e}", String::from_utf8_lossy(from)))?;
        Ok(HeldBase { at, rel })
    }

    /// Destroys a held base a receive that died left beside `staging_rel`, if any.
    fn drop_leftover(at: &Located, staging_rel: &[u8]) {
        let rel = [staging_rel, b".base"].concat();
        let _ = call(at, &Op::Destroy { target: Target::Path(rel), recursive: true });
    }
}

impl Drop for HeldBase<'_> {
    fn drop(&mut self) {
        if let Err(e) = call(self.at, &Op::Destroy { target: Target::Path(self.rel.clone()), recursive: true }) {
            eprintln!("scion receive: the base held for the receive, {}, stays: {e}", String::from_utf8_lossy(&self.rel));
        }
    }
}

/// Removes a tree a receive built at `path` (`rel` in the store): a clone is destroyed, a
/// plain directory removed (`clone`: which it is, `None`: not known). Either way its space is
/// back on the host at once, not at the next checkpoint, so a receive that filled the host
/// can be tried again right away (destroying a clone takes a checkpoint itself).
fn remove_tree(at: &Located, path: &Path, rel: &[u8], clone: Option<bool>) -> Result<(), String> {
    if clone != Some(false) {
        let r = call(at, &Op::Destroy { target: Target::Path(rel.to_vec()), recursive: true }).map(drop);
        if r.is_ok() || clone == Some(true) {
            return r;
        }
    }
    std::fs::remove_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let parent = rel.rsplitn(2, |&c| c == b'/').nth(1).unwrap_or_default().to_vec();
    if let Err(e) = call(at, &Op::Checkpoint { path: parent }) {
        eprintln!("scion receive: the space it took comes back at the next checkpoint ({e})");
    }
    Ok(())
}

/// What a kept partial tree records: the resume token, the sent snapshot's name, the base's
/// path in the store (empty for a full stream).
struct Kept {
    token: String,
    name: Vec<u8>,
    base: Vec<u8>,
}

pub fn receive(mut a: ReceiveArgs) -> Result<(), String> {
    // Unmounted, the store is mounted for the receive and unmounted after it (flushed):
    // the tree is built and checked through the mount as it would be in a mounted store.
    let _mounted = match a.store.take() {
        Some(store) => {
            let (mnt, t) = crate::mount::Transient::mount(&store)?;
            let rel = a.dir.strip_prefix("/").unwrap_or(&a.dir).to_path_buf();
            a.shown = Some(format!("{}:/{}", store.display(), rel.display()));
            a.dir = mnt.join(rel);
            t
        }
        None => None,
    };
    receive_mounted(a)
}

/// Where `scion pull` builds a tree for `dir`: beside it, as a receive does.
pub(crate) struct PullStaging {
    pub at: Located,
    dir: PathBuf,
    dst: PathBuf,
    path: PathBuf,
    /// The tree's path in the store.
    pub rel: Vec<u8>,
}

impl PullStaging {
    /// The place for `dir`, after removing what receives or pulls of it that were killed left.
    pub(crate) fn new(dir: &Path) -> Result<PullStaging, String> {
        let at = locate(dir, false, &None)?;
        let Some(mnt) = at.mnt.clone() else {
            return Err(format!("{} is not in a mounted scion store", dir.display()));
        };
        let dst = mnt.join(Path::new(std::ffi::OsStr::from_bytes(&store_path(&at))));
        let file_name = dst.file_name().ok_or("DIR needs a name")?.to_string_lossy().into_owned();
        remove_killed_receives(&at, &mnt, &dst)?;
        let path = dst.with_file_name(format!(".{file_name}.scion-receive-{}", std::process::id()));
        let rel = crate::tree_cmds::below_mount(&mnt, &path)?;
        Ok(PullStaging { at, dir: dir.to_path_buf(), dst, path, rel })
    }
}

/// `scion pull`'s building of the tree: the stream `stream` of a tree pulled as attachment
/// `attach` is received at `s` as a full stream, renamed into place and snapshotted under
/// the name the stream gives; that name.
pub(crate) fn build_pulled(s: &PullStaging, stream: Vec<u8>, attach: u32, progress: bool) -> Result<Vec<u8>, String> {
    let (at, dir, dst, path, rel) = (s.at.clone(), s.dir.as_path(), s.dst.as_path(), s.path.clone(), s.rel.clone());
    let mut input: Box<dyn Read> = Box::new(std::io::Cursor::new(stream));
    let flags = scion::stream::read_header(&mut input)?;
    let mut frames = StreamReader::new(input::body(input, flags)?);
    let Some(Frame::Begin { base: None, root, name, .. }) = frames.next()? else {
        return Err("the pulled tree's stream does not begin with a full stream's Begin frame".into());
    };
    if dst.symlink_metadata().is_ok() {
        return Err(format!("{} exists", dst.display()));
    }
    std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let a = ReceiveArgs { dir: dir.to_path_buf(), input: None, progress, resumable: false, resume: false, abort: false, store: None, shown: None, attach: Some(attach) };
    let staging = Staging { at, path, rel, clone: false };
    build(&a, &staging, None, frames, root, (name.clone(), Vec::new()), dst)?;
    Ok(name)
}

fn receive_mounted(a: ReceiveArgs) -> Result<(), String> {
    let at = locate(&a.dir, false, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", a.dir.display()));
    };
    let dst = mnt.join(Path::new(std::ffi::OsStr::from_bytes(&store_path(&at))));
    let file_name = dst.file_name().ok_or("DIR needs a name")?.to_string_lossy().into_owned();
    let kept_path = dst.with_file_name(format!(".{file_name}.scion-receive"));
    let path = if a.resumable || a.resume || a.abort {
        kept_path.clone()
    } else {
        dst.with_file_name(format!(".{file_name}.scion-receive-{}", std::process::id()))
    };
    let rel = crate::tree_cmds::below_mount(&mnt, &path)?;
    if a.abort || a.resume {
        return resume_or_abort(a, at, &mnt, dst, path, rel);
    }
    if kept_path.symlink_metadata().is_ok() {
        return Err(format!(
            "{} holds a receive that stopped short: `scion receive {} --resume` or `--abort`",
            kept_path.display(),
            a.dir.display()
        ));
    }
    let mut frames = open_stream(&a.input, &at)?;
    let Some(Frame::Begin { base, root, name, .. }) = frames.next()? else {
        return Err("the stream does not begin with its Begin frame".into());
    };
    let mut base_rel = Vec::new();
    let base_dir = match base {
        Some(h) => {
            let found = match call(&at, &Op::FindTree { hash: h, hint: name.clone() })? {
                Reply::Found(f) => f,
                _ => return Err("the daemon answered something else".into()),
            };
            // The first that can still be cloned (one may be destroyed meanwhile).
            let mut cloned = None;
            let mut last = None;
            for b in found {
                match call(&at, &Op::Clone { src: b.clone(), dst: rel.clone(), excludes: Vec::new() }) {
                    Ok(_) => {
                        cloned = Some(b);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            let Some(b) = cloned else {
                return Err(match last {
                    Some(e) => e,
                    None => format!(
                        "no snapshot or clone in this store holds the stream's base (a tree of content hash {}); receive a full stream of it first, or snapshot a copy of it",
                        hex(&h)
                    ),
                });
            };
            base_rel = b.clone();
            Some(mnt.join(Path::new(std::ffi::OsStr::from_bytes(&b))))
        }
        None => {
            std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            None
        }
    };
    let staging = Staging {
        at,
        path,
        rel,
        clone: base_dir.is_some(),
    };
    // (The staging clone is still the base's tree: held from it, the base cannot be gone.)
    let hold_from = base_dir.map(|_| staging.rel.clone());
    build(&a, &staging, hold_from, frames, root, (name, base_rel), &dst)
}

/// `--abort`: removes a kept partial tree; `--resume`: goes on building it.
fn resume_or_abort(a: ReceiveArgs, at: Located, mnt: &Path, dst: PathBuf, path: PathBuf, rel: Vec<u8>) -> Result<(), String> {
    let killed = if a.abort { remove_killed_receives(&at, mnt, &dst)? } else { 0 };
    if a.abort && killed > 0 && path.symlink_metadata().is_err() {
        return Ok(());
    }
    if a.abort && path.symlink_metadata().is_ok() && !has_kept_mark(&path) {
        // A receive that died without saying where it stopped (its daemon went away): the
        // tree is a clone of its base, or a plain directory for a full stream.
        HeldBase::drop_leftover(&at, &rel);
        remove_tree(&at, &path, &rel, None)?;
        eprintln!("scion receive: removed {}", path.display());
        return Ok(());
    }
    let kept = crate::meta::xattrs(&path)
        .map_err(|e| format!("{}: {e} (no receive of {} stopped short here)", path.display(), a.dir.display()))?
        .into_iter()
        .find(|(k, _)| k == KEPT)
        .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
        .ok_or_else(|| format!("{} does not say where its stream stopped; `--abort` and receive again", path.display()))?;
    let mut parts = kept.split('\n');
    let (token, clone) = (parts.next().unwrap_or_default(), parts.next() == Some("1"));
    let unhex = |h: &str| -> Vec<u8> { (0..h.len() / 2).filter_map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()).collect() };
    let (name, base_rel) = (unhex(parts.next().unwrap_or_default()), unhex(parts.next().unwrap_or_default()));
    let staging = Staging { at, path, rel, clone };
    if a.abort {
        HeldBase::drop_leftover(&staging.at, &staging.rel);
        staging.remove();
        eprintln!("scion receive: removed {}", staging.path.display());
        return Ok(());
    }
    let (from, chain, root) = scion::stream::parse_token(token)?;
    let mut frames = open_stream(&a.input, &staging.at)?;
    match frames.next()? {
        Some(Frame::Resume { root: r, from: f, chain: c }) if (r, f, c) == (root, from, chain) => {}
        Some(Frame::Resume { .. }) => return Err("the stream goes on from another place than this receive stopped; send with the token it printed".into()),
        _ => return Err("not a resumed stream: `scion send ... --resume TOKEN` makes one".into()),
    }
    // Copies come from the base; the rest of an increment may hold some.
    let hold_from = (!base_rel.is_empty()).then(|| base_rel.clone());
    build(&a, &staging, hold_from, frames, root, (name, base_rel), &dst)
}

/// `--abort`: removes what receives into `dst` that were killed left beside it (their
/// trees `.NAME.scion-receive-PID` and held bases `.NAME.scion-receive-PID.base`, of a PID
/// no process has now); how many. A receive that is still running is left alone.
fn remove_killed_receives(at: &Located, mnt: &Path, dst: &Path) -> Result<usize, String> {
    let (Some(parent), Some(name)) = (dst.parent(), dst.file_name()) else { return Ok(0) };
    let prefix = format!(".{}.scion-receive-", name.to_string_lossy());
    let entries = std::fs::read_dir(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let mut names: Vec<String> = entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    // A held base before its tree, so that destroying the tree leaves no clone of it behind.
    names.sort_by_key(|n| !n.ends_with(".base"));
    let mut removed = 0;
    for n in names {
        let Some(pid) = n.strip_prefix(&prefix).map(|r| r.trim_end_matches(".base")) else { continue };
        if pid.is_empty() || !pid.bytes().all(|c| c.is_ascii_digit()) || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = parent.join(&n);
        let rel = crate::tree_cmds::below_mount(mnt, &path)?;
        remove_tree(at, &path, &rel, None)?;
        eprintln!("scion receive: removed {} (left by a receive that was killed)", path.display());
        removed += 1;
    }
    Ok(removed)
}

fn has_kept_mark(path: &Path) -> bool {
    crate::meta::xattrs(path).is_ok_and(|x| x.iter().any(|(k, _)| k == KEPT))
}

/// Applies the frames, checks the end and the tree, puts it in place and snapshots it. What
/// goes wrong removes the tree, except a stream that stops short with `--resumable`: then
/// the tree stays, marked with where it stopped, and the token to go on is printed.
fn build(
    a: &ReceiveArgs,
    staging: &Staging,
    hold_from: Option<Vec<u8>>,
    mut frames: StreamReader<Box<dyn Read>>,
    root: [u8; 32],
    (name, base): (Vec<u8>, Vec<u8>),
    dst: &Path,
) -> Result<(), String> {
    // (Declared before the batcher: dropped, so destroyed, after its last batch applied.)
    let held = match hold_from.map(|from| HeldBase::take(&staging.at, &staging.rel, &from)).transpose() {
        Ok(h) => h,
        Err(e) if a.resume => return Err(format!("{e}; what arrived stays in {} (`--abort` it and receive again)", staging.path.display())),
        Err(e) => {
            staging.remove();
            return Err(e);
        }
    };
    let mut progress = crate::send_cmd::Progress::new(a.progress);
    let mut b = Batcher::new(&staging.at, staging.rel.clone(), held.as_ref().map(|h| h.rel.clone()), a.attach);
    let mut resume_at = frames.position_next();
    let r = apply_stream(&mut frames, &mut b, root, &mut progress, &mut resume_at);
    match r {
        Ok(()) => {}
        Err(ReadError::Cut(e)) if a.resumable || a.resume => {
            // What arrived whole is applied; the rest comes again from the resume point.
            if let Err(f) = b.flush().and_then(|()| b.wait()) {
                staging.remove();
                return Err(format!("{e}; then {f}"));
            }
            let k = Kept {
                token: scion::stream::resume_token(resume_at.0, &resume_at.1, &root),
                name,
                base,
            };
            staging.keep(&k)?;
            return Err(format!(
                "{e}; what arrived is kept in {}. To go on: scion send SNAPSHOT [--base BASE] --resume {} | scion receive {} --resume (or --abort)",
                staging.path.display(),
                k.token,
                a.dir.display()
            ));
        }
        Err(e) => {
            // (Nothing may still be applying into the tree that is removed.)
            let _ = b.wait();
            staging.remove();
            return Err(e.to_string());
        }
    }
    if let Err(e) = check_and_place(a, staging, root, dst) {
        staging.remove();
        return Err(e);
    }
    progress.done(frames.read);
    if !name.is_empty() {
        let dat = locate(dst, true, &None)?;
        call(&dat, &Op::Snapshot { path: store_path(&dat), name: name.clone() })?;
    }
    if a.attach.is_some() {
        return Ok(());
    }
    eprintln!(
        "scion receive: {} ({}, snapshot {})",
        a.shown.clone().unwrap_or_else(|| dst.display().to_string()),
        if staging.clone { "an increment on a base found here" } else { "a full tree" },
        String::from_utf8_lossy(&name)
    );
    Ok(())
}

/// Reads the frames up to the End into batches, and the input to its end; the End must name
/// `root`. `resume_at` follows where a resumed stream would go on if this one stops short
/// (the open file's File frame, or the next frame).
fn apply_stream(
    frames: &mut StreamReader<Box<dyn Read>>,
    b: &mut Batcher,
    root: [u8; 32],
    progress: &mut crate::send_cmd::Progress,
    resume_at: &mut (u64, [u8; 32]),
) -> Result<(), ReadError> {
    let mut open_at: Option<(u64, [u8; 32])> = None;
    while let Some(f) = frames.next()? {
        if let Frame::End { root: end_root, .. } = &f {
            b.finish().map_err(ReadError::Bad)?;
            if *end_root != root {
                return Err(ReadError::Bad("the stream's end names another tree than its beginning".into()));
            }
            break;
        }
        match &f {
            Frame::File { .. } => open_at = Some(frames.position()),
            Frame::Data { .. } | Frame::Hole { .. } | Frame::Block { .. } => {}
            _ => open_at = None,
        }
        b.push(f, frames.raw()).map_err(ReadError::Bad)?;
        *resume_at = open_at.unwrap_or_else(|| frames.position_next());
        progress.tick(frames.read);
    }
    frames.expect_eof().map_err(ReadError::Bad)
}

/// The built tree's content hash checked against the stream's `root`, then the tree renamed
/// to `dst`, where it appears whole.
fn check_and_place(a: &ReceiveArgs, staging: &Staging, root: [u8; 32], dst: &Path) -> Result<(), String> {
    if a.resume {
        crate::meta::set_xattr(&staging.path, KEPT, None).or_else(|e| if e.contains("No data") { Ok(()) } else { Err(e) })?;
    }
    let got = match call(&staging.at, &Op::TreeHash { path: staging.rel.clone() })? {
        Reply::TreeHash(h) => h,
        _ => return Err("the daemon answered something else".into()),
    };
    if got != root {
        return Err(format!(
            "the tree received does not match the stream's (content hash {} against {})",
            hex(&got),
            hex(&root)
        ));
    }
    std::fs::rename(&staging.path, dst).map_err(|e| format!("{}: {e}", dst.display()))
}

pub fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}
