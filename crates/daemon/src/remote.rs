//! The daemon's half of `scion push` and `scion pull` (issue 41), and the remote packs its
//! main volume reads (`scion_remote::Source`, installed in the block store at the mount when
//! the store has attached trees, or at its first pull).
//!
//! A push reads the snapshot from a view (`send::frames`), the mount going on meanwhile. A
//! pull here only fetches and records the tree (`pull_open`); the command then builds it as
//! `scion receive` builds a stream, each batch through `apply` with the attachment's blocks.

use crate::control::{show, Failure, PushSummary};
use crate::Engine;
use scion_remote::layout::Hash;
use scion_remote::push::{self, PushStats, Pusher};
use scion_remote::Source;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// An engine's remote state: the cache's bound, and the source once there is one.
pub struct RemoteState {
    cache_limit: AtomicU64,
    source: OnceLock<Arc<Source>>,
}

impl Default for RemoteState {
    fn default() -> Self {
        RemoteState { cache_limit: AtomicU64::new(scion_remote::cache::DEFAULT_LIMIT), source: OnceLock::new() }
    }
}

fn failed(m: String) -> Failure {
    Failure::new(libc::EIO, m)
}

impl Engine {
    /// `-o remote_cache=SIZE`: the bound of the local cache of remote blocks.
    pub fn set_remote_cache(&self, bytes: u64) {
        self.remote().cache_limit.store(bytes, Relaxed);
    }

    /// The remote packs this volume reads, made and installed in its block store if
    /// `create` (a pull) or if the store has attached trees (at the mount); `None` otherwise.
    pub fn remote_source(&self, create: bool) -> Result<Option<Arc<Source>>, Failure> {
        let st = self.remote();
        if let Some(s) = st.source.get() {
            return Ok(Some(s.clone()));
        }
        let fs = self.lock();
        let (host, dir) = (fs.host(), fs.store_dir().to_path_buf());
        if !create && !Source::has_attachments(&host, &dir) {
            return Ok(None);
        }
        let s = Source::open(&host, &dir, st.cache_limit.load(Relaxed)).map_err(failed)?;
        let s = st.source.get_or_init(|| s).clone();
        fs.block_store().set_remote(Arc::new(scion_remote::Packs(s.clone())));
        Ok(Some(s))
    }

    /// How the remotes have answered since the mount (`None`: nothing attached).
    pub fn remote_health(&self) -> Option<scion_remote::Health> {
        self.remote().source.get().map(|s| s.health())
    }
}

/// `scion push SNAPSHOT REMOTE --name NAME`: the snapshot at `snap` published as a new
/// version of `name`; `progress` hears how far it got.
pub fn push(engine: &Engine, snap: &[u8], remote: &str, name: &str, progress: &mut dyn FnMut(&PushStats)) -> Result<PushSummary, Failure> {
    scion_remote::layout::check_name(name).map_err(|e| Failure::new(libc::EINVAL, e))?;
    if !is_snapshot_path(snap) {
        return Err(Failure::new(libc::EINVAL, format!("{}: push takes a snapshot (DIR/.snapshot/NAME): what is pushed must not change while it goes", show(snap))));
    }
    let source = engine.remote_source(true)?.expect("made");
    let client = source.client(remote).map_err(|e| Failure::new(libc::ENOENT, e))?;
    let idx_dir = engine.lock().store_dir().join("remote").join(remote).join("idx");
    let mut pusher = Pusher::start(client, &idx_dir, progress).map_err(failed)?;
    let held = pusher.known_hashes();
    let mut out = |f| pusher.frame(f).map_err(failed);
    let root = crate::send::frames(engine, snap, held, &mut out)?;
    let (m, stats) = pusher.finish(root, name, &show(snap)).map_err(failed)?;
    Ok(PushSummary { version: m.version, root: m.root, tree: m.tree, stats })
}

fn is_snapshot_path(p: &[u8]) -> bool {
    let parts: Vec<&[u8]> = p.split(|&c| c == b'/').filter(|s| !s.is_empty()).collect();
    parts.len() >= 2 && parts[parts.len() - 2] == b".snapshot"
}

/// What `pull_open` fetched: the attachment's first pack id, the manifest and its tree's
/// stream (a `scion send` stream whose data are `Block` frames).
pub struct Opened {
    pub first: u32,
    pub manifest: scion_remote::layout::Manifest,
    pub stream: Vec<u8>,
    pub blocks: u64,
}

/// `scion remote gc REMOTE`: what no manifest needs removed, if older than `grace_s`.
pub fn gc(engine: &Engine, remote: &str, grace_s: u64, dry: bool, progress: &mut dyn FnMut(&scion_remote::gc::GcReport)) -> Result<scion_remote::gc::GcReport, Failure> {
    let source = engine.remote_source(true)?.expect("made");
    let client = source.client(remote).map_err(|e| Failure::new(libc::ENOENT, e))?;
    scion_remote::gc::gc(&client, grace_s, scion_remote::lock::now(), dry, progress).map_err(failed)
}

/// `scion pull REMOTE NAME DIR`, first step: the manifest of `name` (`version`, or the
/// newest) and its tree object fetched, the tree recorded as an attachment of this store.
/// `tmp` (a store path) is where the command builds the tree: recorded as a `replace`
/// intent of process `pid` before anything is there, so that a crash of the command or the
/// daemon leaves nothing there after the next mount (`Fs::finish_replacements`).
pub fn pull_open(engine: &Engine, remote: &str, name: &str, version: Option<u64>, tmp: &[u8], pid: u32) -> Result<Opened, Failure> {
    use scion_fs::records::intents::{self, Intent};
    let source = engine.remote_source(true)?.expect("made");
    {
        let mut fs = engine.lock();
        let (host, dir) = (fs.host(), fs.store_dir().to_path_buf());
        // What pulls that were killed left, once their trees are gone (the command removes
        // them before it asks): settled here rather than at the next mount.
        let stored = intents::load(&host, &dir).map_err(|e| failed(format!("pull: {e}")))?;
        for i in &stored.intents {
            if let Intent::Replace { pid: p, tmp: t } = i {
                if !intents::alive(*p) && fs.resolve_path(t).is_err() {
                    intents::update(&host, &dir, i, None).map_err(|e| failed(format!("pull: {e}")))?;
                }
            }
        }
        let intent = Intent::Replace { pid, tmp: tmp.to_vec() };
        intents::add(&fs.host(), fs.store_dir(), intent).map_err(|e| failed(format!("pull: {e}")))?;
    }
    let client = source.client(remote).map_err(|e| Failure::new(libc::ENOENT, e))?;
    let m = push::manifest(&client, name, version).map_err(|e| Failure::new(libc::ENOENT, e))?;
    let (tree, bytes) = push::tree_object(&client, &m).map_err(failed)?;
    let first = source.attach(remote, &m.tree, &bytes, &tree).map_err(failed)?;
    Ok(Opened { first, blocks: tree.blocks.len() as u64, manifest: m, stream: tree.stream })
}

/// `Op::PullDone`: the pull at `tmp` ended; made durable, then its intent goes.
pub fn pull_done(engine: &Engine, tmp: &[u8]) -> Result<(), Failure> {
    use scion_fs::records::intents::{self, Intent};
    let mut fs = engine.lock();
    fs.fsync().map_err(Failure::from_fs("pull".into()))?;
    let (host, dir) = (fs.host(), fs.store_dir().to_path_buf());
    let stored = intents::load(&host, &dir).map_err(|e| failed(format!("pull: {e}")))?;
    for i in stored.intents.iter().filter(|i| matches!(i, Intent::Replace { tmp: t, .. } if t == tmp)) {
        intents::update(&host, &dir, i, None).map_err(|e| failed(format!("pull: {e}")))?;
    }
    Ok(())
}

/// Where block `hash` of the tree attached at `first` lies, for `Op::Apply` of a pull.
pub fn resolver(engine: &Engine, first: u32) -> Result<impl FnMut(&Hash) -> scion_fs::FsResult<Option<(scion_store::BlockPtr, bool)>>, Failure> {
    let Some(source) = engine.remote_source(false)? else {
        return Err(Failure::new(libc::EINVAL, "this volume has no attached trees (a pull goes into the store's main volume, not a cube)"));
    };
    Ok(move |h: &Hash| source.resolve(first, h).map_err(|e| scion_fs::errno::EIO.with(e)))
}

/// `scion pull --prefetch`: every block of the tree attached at `first` fetched into the
/// cache; the bytes fetched.
pub fn prefetch(engine: &Engine, first: u32, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, Failure> {
    let Some(source) = engine.remote_source(false)? else {
        return Err(Failure::new(libc::ENOENT, "nothing is attached to this store"));
    };
    source.prefetch(first, progress).map_err(|e| failed(e.to_string()))
}

