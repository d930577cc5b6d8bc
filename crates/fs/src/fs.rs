//! The engine: inodes in memory, their overlays, and every POSIX operation.

use crate::acl;
use crate::checkpoint::Fold;
use crate::clone::{SNAPDIR_BIT, SNAPDIR_NAME};
use crate::delta::{changed_runs, Layer, Patches, StoredChunk, BLIND_MAX, LAYERED_MAX, LAYER_RUNS_MAX, PATCH_MAX};
use crate::error::errno;
use crate::inode::*;
use crate::journal::{JournalSync, Record, Target};
use crate::volume::Volume;
use crate::pieces::Completed;
use crate::{SetAttr, RENAME_EXCHANGE, RENAME_NOREPLACE};
use scion_store::{BlockPtr, BlockStore, Error, Host, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub type Ino = u64;

/// Maps and sets keyed by inode number hash with FxHash rather than SipHash: the keys are
/// numbers this daemon hands out, and inode lookups lie on every request's path (SipHash
/// was a tenth of a checkpoint's time with a few thousand carried files).
pub(crate) type InoMap<V> = HashMap<Ino, V, rustc_hash::FxBuildHasher>;
pub(crate) type InoSet = std::collections::HashSet<Ino, rustc_hash::FxBuildHasher>;
pub use crate::error::{FsError, FsResult};

pub const ROOT_INO: Ino = 1;
pub(crate) const ROOT_OID: u64 = 1;
pub(crate) const MAX_NLINK: u32 = 65000;
/// A checkpoint is taken when this much changed file data waits in memory.
const DIRTY_LIMIT: u64 = 256 << 20;
/// ... or when this many chunks were written ahead (bounds recovery time and memory).
const PENDING_CHUNK_LIMIT: u64 = 65536;
/// ... or when the journal grows past this.
const JOURNAL_LIMIT: u64 = 1 << 30;
/// While folds are kept small (`fold_policy`), batches of inodes waiting (of `fold_batch`,
/// not of a batch fitted to the fold's cost: this bounds memory) past which a request takes
/// the whole checkpoint itself rather than wait for the background's commit in flight.
const BEHIND_MAX: usize = 16;
/// Uncommitted whole chunks in a copy_file_range source worth a checkpoint so that the copy
/// shares their blocks (4 MiB: a checkpoint costs a few milliseconds, about what copying
/// that many bytes does).
const COMMIT_TO_SHARE: u64 = 64;

/// Object ids are below this: st_ino keeps them in its low 40 bits.
pub(crate) const MAX_OID: u64 = 1 << 40;

/// Namespace ids of a store's main volume stay below this: its st_ino (`make_ino`) then
/// leaves bit 62 clear, the bit the service layer's routing sets for every other volume.
pub const MAIN_NS_LIMIT: u32 = 1 << 22;

/// st_ino of an object: the namespace in the high bits, the object id in the low 40.
pub fn make_ino(ns: u32, oid: u64) -> Ino {
    assert!(oid < MAX_OID, "object id {oid} of namespace {ns} past 2^40");
    (((ns - 1) as u64) << 40) | oid
}

/// Where an inode's record is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    /// The root directory of a namespace: in the namespace table.
    Root,
    /// In the entry `name` of directory `parent` (a file with one name, or a directory).
    Entry { parent: Ino, name: Vec<u8> },
    /// In the namespace's link table (a file with several names).
    Linked,
    /// Nowhere any more: removed, perhaps still open.
    Gone,
}

/// A chunk of a file changed since the last checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// New bytes, held in memory (partial writes).
    Buf(Vec<u8>),
    /// A block in a pack that no checkpoint has taken yet: a whole chunk written ahead (the
    /// journal names the block), or buffered bytes written behind (`flush.rs`; the journal
    /// holds the bytes).
    Block(BlockPtr),
    /// Zeros.
    Hole,
    /// A committed block of another file, shared by copy_file_range; this overlay holds one
    /// reference to it, which the checkpoint hands to the tree.
    Shared(BlockPtr),
    /// Small overwrites of the committed chunk `base` (copy-on-abundant-write, `delta.rs`):
    /// the block stays as it is, shared with whatever else holds it, and the patches (at most
    /// `PATCH_MAX` bytes, or `LAYERED_MAX` in a file of several chunks; the stored ones and
    /// the layers' included) are laid over it. The checkpoint stores the patches beside it,
    /// or what is new of them as a layer. `owned`: `base` is a block written ahead that no
    /// checkpoint has taken yet, whose one reference this overlay holds (as `Block` does, which
    /// it was); otherwise the stored tree owns it. `ahead`: layers written ahead since the
    /// last checkpoint (`layer_ahead.rs`), oldest first, whose references this overlay holds;
    /// when there are any, every run new since the checkpoint is in one of them.
    Patched { base: BlockPtr, patches: Patches, owned: bool, ahead: Vec<Layer> },
}

impl Chunk {
    /// The chunk's length in the file (what `alloc` counts).
    fn len(&self) -> u64 {
        match self {
            Chunk::Buf(b) => b.len() as u64,
            Chunk::Block(p) | Chunk::Shared(p) => p.len as u64,
            Chunk::Hole => 0,
            Chunk::Patched { base, patches, .. } => (base.len as u64).max(patches.end() as u64),
        }
    }

    /// The blocks whose references this overlay holds: a block written ahead (under patches
    /// or not) and layers written ahead. Given up to the garbage when the chunk is replaced.
    pub(crate) fn owned_blocks(&self) -> Vec<BlockPtr> {
        match self {
            Chunk::Block(p) => vec![*p],
            Chunk::Patched { base, owned, ahead, .. } => {
                let base = owned.then_some(*base);
                base.into_iter().chain(ahead.iter().map(|l| l.block)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Bytes this overlay holds in memory (what `Fs::dirty_bytes` counts).
    fn memory(&self) -> u64 {
        match self {
            Chunk::Buf(b) => b.len() as u64,
            Chunk::Patched { patches, .. } => patches.bytes() as u64,
            _ => 0,
        }
    }
}

/// A change waiting in a directory's overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ent {
    /// The entry holds the record of this loaded inode.
    Node(Ino),
    /// The entry refers to the link table.
    Link { oid: u64, kind: Kind },
    /// The entry is a clone's mount point.
    Mount { oid: u64 },
}

pub(crate) struct Node {
    pub inode: Inode,
    pub ns: u32,
    pub loc: Loc,
    pub lookups: u64,
    pub opens: u32,
    /// Directory overlay: `None` removes the name.
    pub entries: BTreeMap<Vec<u8>, Option<Ent>>,
    /// File overlay: chunk index -> its new content.
    pub chunks: BTreeMap<u64, Chunk>,
    /// The record was placed in an overlay since the last checkpoint: keep the node loaded.
    pub pinned: bool,
    /// A file loaded for a lookup whose inline bytes were left in its committed record (its
    /// parent's tree, at `loc`), so that a walk of small files does not hold their bytes:
    /// read from there when needed (`Fs::inline_bytes`), and loaded (`Fs::warm`) before the
    /// node is opened, changed or moved. Never set on an open, changed or moved node.
    pub inline_cold: bool,
    /// A content reference this inode holds while unlinked but open.
    pub orphan_ref: Option<BlockPtr>,
    /// Made by `tmpfile` and never named yet: `Loc::Gone`, but `link` may give it its first
    /// name (`tmpfile.rs`).
    pub nameless: bool,
    /// Checkpoint scratch: the old content root this checkpoint took a reference on.
    pub prepass: Option<BlockPtr>,
    /// ... and the old summary root.
    pub prepass_sum: Option<BlockPtr>,
    /// Directories: changes to the subtree summary not yet folded into `inode.summary`.
    pub sum_delta: BTreeMap<Vec<u8>, i64>,
}

impl Node {
    /// Roughly the memory the node takes: the structure and what its vectors and maps hold
    /// (an entry of a map counted at its key and value plus three words).
    /// Chunk `idx` now stores `new` bytes where it stored `old`: the allocated bytes follow,
    /// and what it stores is no longer only preallocated (`Fs::set_chunk`, `Fs::write_in_buf`).
    fn stored_len_changed(&mut self, idx: u64, old: u64, new: u64) {
        self.inode.alloc = self.inode.alloc + new - old.min(self.inode.alloc);
        if !self.inode.prealloc.is_empty() && new > 0 {
            self.inode.prealloc = crate::prealloc::remove(&self.inode.prealloc, idx * CHUNK, idx * CHUNK + new);
        }
    }

    pub(crate) fn memory(&self) -> usize {
        const ENTRY: usize = 3 * std::mem::size_of::<usize>();
        let i = &self.inode;
        let xattrs: usize = i.xattrs.iter().map(|(k, v)| ENTRY + 48 + k.capacity() + v.capacity()).sum();
        let name = match &self.loc {
            Loc::Entry { name, .. } => name.capacity(),
            _ => 0,
        };
        let entries: usize = self.entries.keys().map(|k| ENTRY + std::mem::size_of::<Option<Ent>>() + k.capacity()).sum();
        let chunks: usize = self
            .chunks
            .values()
            .map(|c| {
                ENTRY + std::mem::size_of::<Chunk>() + match c {
                    Chunk::Buf(b) => b.capacity(),
                    Chunk::Patched { patches, .. } => patches.bytes(),
                    _ => 0,
                }
            })
            .sum();
        let sums: usize = self.sum_delta.keys().map(|k| ENTRY + 8 + k.capacity()).sum();
        std::mem::size_of::<Node>() + i.target.capacity() + i.inline.capacity() + xattrs + name + entries + chunks + sums
    }

    pub(crate) fn new(inode: Inode, ns: u32, loc: Loc) -> Node {
        Node {
            inode,
            ns,
            loc,
            lookups: 0,
            opens: 0,
            entries: BTreeMap::new(),
            chunks: BTreeMap::new(),
            pinned: false,
            inline_cold: false,
            orphan_ref: None,
            nameless: false,
            prepass: None,
            prepass_sum: None,
            sum_delta: BTreeMap::new(),
        }
    }
}

pub(crate) struct Namespace {
    pub root: Ino,
    pub link_root: Option<BlockPtr>,
    /// Link table overlay: oid -> loaded inode, `None` removes.
    pub links: BTreeMap<u64, Option<Ino>>,
    pub next_oid: u64,
    pub inodes: u64,
    pub dirty: bool,
    pub info: NsInfo,
    /// Mount table: oid of a mount entry in this namespace's tree -> the clone's namespace.
    pub mounts: BTreeMap<u64, u32>,
    /// Where the kernel last reached this namespace's root (its mount entry), for "..".
    pub mounted_at: Option<(Ino, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NsKind {
    /// The store's own tree (namespace 1).
    Main = 0,
    /// A writable clone, reached through a mount entry in its parent namespace.
    Clone = 1,
    /// A read-only clone, reached through `.snapshot` of the directory it was taken of.
    Snapshot = 2,
}

/// What a namespace is and where it hangs.
#[derive(Clone, Debug)]
pub struct NsInfo {
    pub kind: NsKind,
    /// Clone: the namespace whose tree holds its mount entry. Snapshot: the namespace of the
    /// directory it was taken of. 0 for the main tree.
    pub parent: u32,
    /// Clone: the mount entry's oid in `parent`. Snapshot: the snapshotted directory's oid.
    pub anchor: u64,
    /// Snapshot name (empty for clones).
    pub name: Vec<u8>,
    /// The source's path when it was made (informational, for `scion list`).
    pub origin: Vec<u8>,
    pub created: Ts,
    /// A snapshot taken by its directory's schedule, which its retention policy may remove
    /// (snapshots taken by hand never are). Namespace records of version 3 on.
    pub scheduled: bool,
    /// Made for an ordinary user (uid): the setuid and setgid bits and file capabilities of
    /// files they do not own are hidden, so a copy they asked for hands them no privilege
    /// they could not take with `cp -a`. Clones and snapshots of it inherit it. Namespace
    /// records of version 4 on.
    pub masked_for: Option<u32>,
    /// The ordinary user who asked for it (None: root or the store's owner). It is who may
    /// destroy it, roll it back, and snapshot a clone's top (`docs/design.md`, "Who may do
    /// what"). Equal to `masked_for` when set; a copy that inherited its source's mask was
    /// made with full rights. Namespace records of version 5 on (version 4 records read as
    /// made by whom they were masked for).
    pub made_by: Option<u32>,
}

impl NsInfo {
    pub fn main() -> NsInfo {
        NsInfo {
            kind: NsKind::Main,
            parent: 0,
            anchor: 0,
            name: Vec::new(),
            origin: Vec::new(),
            created: Ts::now(),
            scheduled: false,
            masked_for: None,
            made_by: None,
        }
    }
    /// Without `scheduled`, `masked_for` and `made_by`, which the namespace record keeps in
    /// its flags.
    pub(crate) fn encode(&self, w: &mut scion_store::codec::Writer) {
        w.u8(self.kind as u8).u32(self.parent).u64(self.anchor);
        self.created.encode(w);
        w.bytes(&self.name).bytes(&self.origin);
    }
    /// `scheduled`, `masked_for` and `made_by` come back unset; the namespace record sets them.
    pub(crate) fn decode(r: &mut scion_store::codec::Reader<'_>) -> Result<NsInfo> {
        let kind = match r.u8()? {
            0 => NsKind::Main,
            1 => NsKind::Clone,
            2 => NsKind::Snapshot,
            k => return Err(Error::corrupt("namespace record", "kind", format!("unknown kind {k}"))),
        };
        let parent = r.u32()?;
        let anchor = r.u64()?;
        let created = Ts::decode(r)?;
        let name = r.bytes()?.to_vec();
        let origin = r.bytes()?.to_vec();
        Ok(NsInfo {
            kind,
            parent,
            anchor,
            name,
            origin,
            created,
            scheduled: false,
            masked_for: None,
            made_by: None,
        })
    }
}

/// Attributes as `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub btime: Ts,
    /// The file has (or had) several names: it lives in its namespace's link table.
    pub linked: bool,
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: Ino,
    pub kind: Kind,
}

#[derive(Clone, Debug, Default)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

#[derive(Clone)]
pub struct MountOptions {
    /// Who holds the store, recorded in its lock file (for example the mount point).
    pub holder: String,
    /// The filesystem the store lives on: the real one, or a test's simulation of it.
    pub host: Host,
}

impl MountOptions {
    /// Options for a store on the real filesystem.
    pub fn new(holder: impl Into<String>) -> MountOptions {
        MountOptions {
            holder: holder.into(),
            host: scion_store::os_host(),
        }
    }
}

/// The filesystem model over one volume: inodes loaded in memory and their overlays, the
/// namespaces (main tree, clones, snapshots), and what the next checkpoint must fold. The
/// durable state it works on is its `Volume`.
pub struct Fs {
    pub(crate) vol: Volume,
    /// Boxed: a hash table's empty slots (up to half of them after it grows) then cost a
    /// pointer, not a whole node (~600 bytes), which had doubled the daemon's memory for a
    /// walk of a million files.
    pub(crate) nodes: crate::node_table::NodeTable,
    pub(crate) namespaces: BTreeMap<u32, Namespace>,
    pub(crate) next_ns: u32,
    /// Namespace ids stay below this, so that st_ino leaves room for the volume bits of the
    /// service layer's routing (`ns_limit`).
    pub(crate) ns_limit: u32,
    /// Root of the namespace table (ns id -> namespace record).
    pub(crate) ns_root: Option<BlockPtr>,
    /// Root of the relocation tree (`compress.rs`): where recompressed data blocks lie.
    pub(crate) relocations: Option<BlockPtr>,
    /// Root of the reference tree (format 18): the counts above one, by block address.
    pub(crate) refs_root: Option<BlockPtr>,
    /// Blocks a compression pass found incompressible: not tried again while mounted.
    pub(crate) incompressible: HashSet<u64>,
    pub(crate) replaying: bool,
    pub(crate) dirty_bytes: u64,
    /// Buffered bytes written behind (`flush.rs`) since the last checkpoint: with
    /// `dirty_bytes`, what decides when the next checkpoint is due.
    pub(crate) flushed_bytes: u64,
    /// Whole chunks written ahead since the last checkpoint.
    pub(crate) pending_chunks: u64,
    /// Orphan content references to drop at the next checkpoint.
    pub(crate) orphan_releases: Vec<BlockPtr>,
    pub(crate) last_checkpoint: Instant,
    /// When a change last marked an inode dirty (background repack waits for quiet).
    pub(crate) last_change: Instant,
    /// When the last background repack pass ran, and whether it stopped at its budget.
    pub(crate) last_repack: Option<(Instant, bool)>,
    /// Bytes written since mount, for `status` (`status::Written`).
    pub(crate) io: crate::status::IoCounts,
    /// When the last background compression pass ran, and whether it left blocks for later.
    pub(crate) last_compress: Option<(Instant, bool)>,
    /// Namespaces destroyed since the last checkpoint: their records leave the table then.
    pub(crate) dropped_ns: Vec<u32>,
    /// Namespaces a rollback replaced: their files still open keep working (as files
    /// unlinked while open do), where a destroyed namespace's are stale. Forgotten once none
    /// of their inodes is loaded.
    pub(crate) replaced_ns: HashSet<u32>,
    /// List `.snapshot` in directory listings (mount option `snapdir=visible`).
    pub show_snapdir: bool,
    /// Mounted `-o ro`: every change is refused (EROFS), those asked through the control
    /// socket (clone, snapshot, destroy, cubes...) as much as those through the kernel.
    pub read_only: bool,
    /// What a change gets once the volume failed: EIO (the store's main volume), or EROFS
    /// (a cube whose failure policy is `readonly`).
    pub failed_errno: FsError,
    /// Changes are journaled (the default). Off (a cube of mode `nojournal`): they reach the
    /// disk only at checkpoints, and `fsync` takes one.
    pub(crate) journaled: bool,
    /// File data goes into the journal with the metadata (a cube of mode `data`), whole
    /// chunks included, instead of being written ahead to the packs; the packs get it at
    /// write-behind and checkpoints.
    pub(crate) journal_data: bool,
    /// A `writeback` cube: the background sync writes the journal without syncing the packs
    /// first, and whole chunks are journaled as `PutChunks { unordered }` records, whose
    /// blocks replay verifies (`fsync` still syncs both, packs first).
    pub(crate) writeback: bool,
    /// The run of `Write` records at the journal's tail for one chunk (`retract.rs`).
    pub(crate) chunk_run: Option<crate::retract::ChunkRun>,
    /// When a caller last synced this volume (fsync, an NFS COMMIT): while callers sync,
    /// small files' tails are journaled rather than written ahead (`tail_ahead`).
    pub(crate) synced_at: Option<std::time::Instant>,
    /// The last `SetAttr` journaled, which the next one of the same inode may replace
    /// (`attr_merge.rs`).
    pub(crate) last_attr: Option<crate::attr_merge::LastAttr>,
    /// Pieces of chunks long writes journaled, which a later write may complete (`pieces.rs`).
    pub(crate) pieces: crate::pieces::Pieces,
    /// The file and the offset the last write ended at: a write starting there is a stream's
    /// next, never a layer written ahead (`layer_ahead.rs`).
    pub(crate) last_write: Option<(Ino, u64)>,
    /// While replaying: blocks of unordered `PutChunks` records that never reached the disk
    /// (by address); their chunks keep their older content.
    pub(crate) lost_blocks: HashSet<u64>,
    /// Blocks a receive's negotiation found by content hash (`dedup.rs`).
    pub(crate) dedup_index: HashMap<[u8; 32], BlockPtr>,
    /// Tree and content hashes computed so far (`treehash`), keyed by what they hash: valid
    /// for as long as the store lives.
    pub(crate) hash_memo: crate::treehash::HashMemo,
    /// Per schedule (by directory), bytes its `--keep-while-free` snapshots would give back:
    /// `statfs` counts them as available, as snapper's and CCFS' users expect of space the
    /// filesystem frees by itself when it runs short.
    pub(crate) reclaimable: BTreeMap<Vec<u8>, u64>,
    /// Inodes changed since the last checkpoint (records, overlays, chunks): what the next
    /// checkpoint visits, so its cost follows the changes, not the inodes in memory.
    pub(crate) dirty: InoSet,
    /// Directories the kernel forgot that may be idle, and how many wait before a sweep
    /// (`evict.rs`).
    pub(crate) idle_dirs: Vec<Ino>,
    pub(crate) idle_fresh: usize,
    /// Where recently evicted inodes were (`reach.rs`).
    pub(crate) whereabouts: crate::reach::Whereabouts,
    pub(crate) idle_sweep_at: usize,
    /// Files whose small overwrites the last checkpoint carried forward at the head of the
    /// new journal instead of folding them into their trees (`checkpoint.rs`, "carry"). They
    /// stay in `dirty`, so each checkpoint decides again.
    pub(crate) carried: InoSet,
    /// The record each carried file was last carried with, and what it was made from: the
    /// next checkpoint reuses it while none of that changed (most carried files are
    /// untouched from one checkpoint to the next; rebuilding each record cost ~3 us).
    pub(crate) carry_memo: InoMap<crate::checkpoint::CarryMemo>,
    /// Journal length after the carried records: anything past it is a change.
    pub(crate) journal_floor: u64,
    /// Removed inodes still open (their content is kept by an orphan reference).
    pub(crate) orphans: InoSet,
    /// Files open through the kernel (`Node::opens` above zero; some may have been dropped
    /// since, with their namespace): what `open_below` looks through.
    pub(crate) open: InoSet,
    /// Inodes loaded since the last full sweep of unused ones, and how many trigger the next
    /// at a checkpoint (`evict.rs`).
    pub(crate) sweep_at: usize,
    pub(crate) loaded_since_sweep: usize,
    pub(crate) room: Room,
    /// The host's reserve for checkpoints (`reserve.rs`).
    pub(crate) reserve: crate::reserve::Reserve,
    /// What the kernel must forget after changes it did not make itself (a destroyed
    /// clone's inodes): sent by the daemon outside the engine lock (`take_invalidations`).
    pub(crate) kernel_inval: Vec<Inval>,
    /// Set on a view of the committed state (`view.rs`): the pin that keeps its blocks
    /// readable. A view changes nothing and has nothing to commit.
    pub(crate) view: Option<crate::pinned::Pin>,
    /// A background checkpoint folded and written whose packs are being synced without
    /// the engine lock (`checkpoint_begin`); committed by `checkpoint_end`, or by the next
    /// checkpoint first.
    pub(crate) committing: Option<crate::checkpoint::InFlight>,
    /// The commit in flight when a request began it, for the background to finish
    /// (`take_handoff`).
    pub(crate) handoff: Option<crate::PackSync>,
    /// The daemon's background thread, unparked when a commit is handed to it.
    pub(crate) background: Option<std::thread::Thread>,
    /// What this volume's folds cost per inode: early folds come in batches that fit.
    pub(crate) fold_cost: crate::fold_policy::FoldCost,
    /// The background was woken for the batch waiting (`maybe_checkpoint`); cleared by a fold.
    pub(crate) background_woken: bool,
    /// Inside `with_sync_owed`: whether a command's closing fsync was left to its caller.
    pub(crate) sync_owed: Option<bool>,
    /// The packs' write count (`BlockStore::writes`) when a record naming blocks was last
    /// journaled: an fsync needs the packs synced through it, and no further (`SyncTicket`).
    pub(crate) named_writes: u64,
    /// How long the engine lock was held and waited for (`lock_stats.rs`).
    pub(crate) lock_stats: crate::lock_stats::LockStats,
}

/// Something the kernel cached that a change behind its back made wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inval {
    /// The name `name` in directory `parent`.
    Entry(Ino, Vec<u8>),
    /// An inode's attributes and cached pages.
    Inode(Ino),
}

/// Host space kept free for the checkpoint that must follow any change: without it, a full
/// host would fail a checkpoint half way and the filesystem would refuse changes until a
/// remount. Changes that would eat into it get ENOSPC; removals never do.
const HOST_RESERVE: u64 = 16 << 20;

/// How much room was left at the last look at the host, so most changes need no statvfs.
#[derive(Debug)]
pub(crate) struct Room {
    checked_at: Instant,
    /// Bytes changes may still add before the next look.
    slack: u64,
}

impl Default for Room {
    fn default() -> Self {
        Room {
            checked_at: Instant::now(),
            slack: 0,
        }
    }
}

pub(crate) use crate::error::eio;

pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(errno::EINVAL);
    }
    // Reserved for the virtual directory of snapshots.
    if name == crate::clone::SNAPDIR_NAME {
        return Err(errno::EINVAL);
    }
    if name.len() > MAX_NAME {
        return Err(errno::ENAMETOOLONG);
    }
    Ok(())
}

/// What a change to a store mounted `-o ro` gets (`Fs::read_only`), wherever it is asked.
pub fn read_only_refusal() -> FsError {
    errno::EROFS.with("the store is mounted read-only (-o ro)")
}

/// setuid and setgid: what a namespace made for a user hides on files of others.
const PRIVILEGE_BITS: u16 = 0o6000;
/// A file capability (`setcap`): a privilege as setuid is.
const CAPABILITY_XATTR: &[u8] = b"security.capability";

impl Fs {
    // ----- inode table -------------------------------------------------------------------

    /// A loaded inode. ESTALE for one the kernel may still hold whose namespace was
    /// destroyed: nothing may read or change it through a request (its node stays loaded
    /// only until the kernel forgets it and its handles close; the engine reaches it
    /// through `nodes` directly for that).
    pub(crate) fn node(&self, ino: Ino) -> FsResult<&Node> {
        let n = self.nodes.get(&ino).ok_or(errno::ESTALE)?;
        if !self.namespaces.contains_key(&n.ns) && !self.open_in_replaced(n) {
            return Err(errno::ESTALE);
        }
        Ok(n)
    }

    pub(crate) fn node_mut(&mut self, ino: Ino) -> FsResult<&mut Node> {
        let n = self.nodes.get(&ino).ok_or(errno::ESTALE)?;
        if !self.namespaces.contains_key(&n.ns) && !self.open_in_replaced(n) {
            return Err(errno::ESTALE);
        }
        Ok(self.nodes.get_mut(&ino).expect("just found"))
    }

    /// A file held open in a namespace a rollback replaced: an orphan, served until closed.
    fn open_in_replaced(&self, n: &Node) -> bool {
        n.loc == Loc::Gone && n.opens > 0 && self.replaced_ns.contains(&n.ns)
    }

    pub(crate) fn dir_node(&self, ino: Ino) -> FsResult<&Node> {
        let n = self.node(ino)?;
        if n.inode.kind != Kind::Dir {
            return Err(errno::ENOTDIR);
        }
        Ok(n)
    }

    fn attr_of(&self, n: &Node, ino: Ino) -> Attr {
        let i = &n.inode;
        let hide = self.hides_privileges(n);
        let perm = if hide { i.perm & !PRIVILEGE_BITS } else { i.perm };
        // A device node is a privilege too (only root makes one): in a copy made for a user
        // it names no device (0:0, which open(2) answers with ENXIO).
        let rdev = if hide && matches!(i.kind, Kind::CharDev | Kind::BlockDev) { 0 } else { i.rdev };
        Attr {
            ino,
            kind: i.kind,
            perm,
            nlink: i.nlink,
            uid: i.uid,
            gid: i.gid,
            rdev,
            size: if i.kind == Kind::Symlink {
                i.target.len() as u64
            } else {
                i.size
            },
            blocks: (i.alloc + crate::prealloc::total(&i.prealloc)).div_ceil(512),
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            btime: i.btime,
            linked: n.loc == Loc::Linked,
        }
    }

    /// True if `n` is a file of a namespace made for a user who does not own it: its setuid
    /// and setgid bits, capabilities and device number are not shown (`NsInfo::masked_for`).
    /// Directories keep their setgid bit, which gives no privilege.
    pub(crate) fn hides_privileges(&self, n: &Node) -> bool {
        n.inode.kind != Kind::Dir
            && self
                .namespaces
                .get(&n.ns)
                .and_then(|ns| ns.info.masked_for)
                .is_some_and(|uid| uid != n.inode.uid)
    }

    /// Loads the inode a directory entry names, from the overlay or the stored tree.
    pub(crate) fn child(&mut self, parent: Ino, name: &[u8]) -> FsResult<Option<Ino>> {
        let p = self.dir_node(parent)?;
        let ns = p.ns;
        match p.entries.get(name) {
            Some(None) => return Ok(None),
            Some(Some(Ent::Node(ino))) => return Ok(Some(*ino)),
            Some(Some(Ent::Link { oid, .. })) => {
                let oid = *oid;
                return self.linked(ns, oid).map(Some);
            }
            Some(Some(Ent::Mount { oid })) => {
                let oid = *oid;
                return self.mount_root(ns, oid, parent, name).map(Some);
            }
            None => {}
        }
        let content = p.inode.content;
        let Some(v) = self.vol.forest.get(content.as_ref(), name).map_err(eio)? else {
            return Ok(None);
        };
        match EntryRecord::from_value(&v).map_err(eio)? {
            EntryRecord::Inline(inode) => {
                let ino = make_ino(ns, inode.oid);
                if !self.nodes.contains_key(&ino) {
                    let loc = Loc::Entry {
                        parent,
                        name: name.to_vec(),
                    };
                    let mut inode = inode;
                    let cold = inode.kind == Kind::File && !inode.inline.is_empty();
                    if cold {
                        inode.inline = Vec::new();
                    }
                    let mut n = Node::new(inode, ns, loc);
                    n.inline_cold = cold;
                    self.nodes.insert(ino, Box::new(n));
                    self.loaded_since_sweep += 1;
                }
                Ok(Some(ino))
            }
            EntryRecord::Linked { oid, .. } => self.linked(ns, oid).map(Some),
            EntryRecord::Mount { oid } => self.mount_root(ns, oid, parent, name).map(Some),
        }
    }

    /// The root of the clone mounted at entry `oid` of namespace `ns`.
    fn mount_root(&mut self, ns: u32, oid: u64, parent: Ino, name: &[u8]) -> FsResult<Ino> {
        let Some(&child) = self.namespaces.get(&ns).and_then(|n| n.mounts.get(&oid)) else {
            log::error!("mount entry {oid} of namespace {ns} names no clone");
            return Err(errno::EIO);
        };
        let c = self.namespaces.get_mut(&child).ok_or(errno::EIO)?;
        c.mounted_at = Some((parent, name.to_vec()));
        Ok(c.root)
    }

    /// The namespace a node's *name* lives in: a clone's root is named in its parent's tree.
    pub(crate) fn home_ns(&self, ino: Ino) -> FsResult<u32> {
        let n = self.node(ino)?;
        if n.loc == Loc::Root {
            let info = &self.namespaces.get(&n.ns).ok_or(errno::EIO)?.info;
            if info.kind == NsKind::Clone {
                return Ok(info.parent);
            }
        }
        Ok(n.ns)
    }

    /// Refuses changes to anything reachable under a snapshot (EROFS), and to an inode of a
    /// destroyed namespace (ESTALE).
    pub(crate) fn rw(&self, ino: Ino) -> FsResult<()> {
        // A `.snapshot` directory is made up from the snapshot table: nothing to change.
        if ino & SNAPDIR_BIT != 0 {
            return Err(errno::EROFS);
        }
        let n = self.node(ino)?;
        if self.open_in_replaced(n) {
            // A clone's file, open when a rollback replaced the clone: writable as it was.
            return Ok(());
        }
        self.ns_rw(n.ns)
    }

    /// Whether namespace `ns` may change: not a snapshot, nor a clone nested (at any depth)
    /// in one, which a snapshot of a directory holding clones makes.
    pub(crate) fn ns_rw(&self, ns: u32) -> FsResult<()> {
        let mut cur = ns;
        // Each step goes to the namespace holding the clone's mount entry; the chain ends at
        // the main tree or a snapshot, and is never longer than the namespace table.
        for _ in 0..=self.namespaces.len() {
            let n = self.namespaces.get(&cur).ok_or(errno::ESTALE)?;
            match n.info.kind {
                NsKind::Main => return Ok(()),
                NsKind::Snapshot => return Err(errno::EROFS),
                NsKind::Clone => cur = n.info.parent,
            }
        }
        log::error!("namespace {ns}: its chain of parents loops");
        Err(errno::EIO)
    }

    // ----- subtree summaries -----------------------------------------------------------------

    /// Adds `d` to summary entry `key` of `dir` and of every directory above it in its
    /// namespace. Each is touched, so the checkpoint rewrites its record.
    pub(crate) fn bump(&mut self, dir: Ino, key: &[u8], d: i64) -> FsResult<()> {
        if d == 0 {
            return Ok(());
        }
        let mut cur = dir;
        loop {
            let n = self.node_mut(cur)?;
            let e = n.sum_delta.entry(key.to_vec()).or_insert(0);
            *e += d;
            if *e == 0 {
                n.sum_delta.remove(key);
            }
            let next = match &n.loc {
                Loc::Entry { parent, .. } => Some(*parent),
                _ => None,
            };
            self.touch(cur);
            match next {
                Some(p) => cur = p,
                None => return Ok(()),
            }
        }
    }

    /// The counts of a stored summary tree.
    pub(crate) fn stored_summary(&self, root: Option<&BlockPtr>) -> FsResult<BTreeMap<Vec<u8>, i64>> {
        let mut out: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut err = None;
        self.vol
            .forest
            .scan(root, &[], &mut |k, v| match summary_count(v) {
                Ok(c) => {
                    out.insert(k.to_vec(), c as i64);
                    true
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            })
            .map_err(eio)?;
        match err {
            Some(e) => Err(eio(e)),
            None => Ok(out),
        }
    }

    /// A directory's whole summary: the stored tree plus pending changes.
    pub(crate) fn summary_of(&self, dir: Ino) -> FsResult<BTreeMap<Vec<u8>, i64>> {
        let n = self.node(dir)?;
        let mut out = self.stored_summary(n.inode.summary.as_ref())?;
        for (k, d) in &n.sum_delta {
            let e = out.entry(k.clone()).or_insert(0);
            *e += d;
            if *e == 0 {
                out.remove(k);
            }
        }
        Ok(out)
    }

    /// What a name contributes to the summaries above it.
    pub(crate) fn summary_of_name(&self, ino: Ino) -> FsResult<BTreeMap<Vec<u8>, i64>> {
        let n = self.node(ino)?;
        Ok(match self.ent_for(ino)? {
            Ent::Link { oid, .. } => [(summary_link_key(oid), 1)].into(),
            Ent::Mount { oid } => [(summary_mount_key(oid), 1)].into(),
            Ent::Node(_) if n.inode.kind == Kind::Dir => self.summary_of(ino)?,
            Ent::Node(_) => BTreeMap::new(),
        })
    }

    fn bump_all(&mut self, dir: Ino, sum: &BTreeMap<Vec<u8>, i64>, sign: i64) -> FsResult<()> {
        for (k, d) in sum {
            self.bump(dir, k, d * sign)?;
        }
        Ok(())
    }

    /// Loads a file of the link table.
    pub(crate) fn linked(&mut self, ns: u32, oid: u64) -> FsResult<Ino> {
        let ino = make_ino(ns, oid);
        if self.nodes.contains_key(&ino) {
            return Ok(ino);
        }
        let n = self.namespaces.get(&ns).ok_or(errno::EIO)?;
        if let Some(e) = n.links.get(&oid) {
            // A loaded inode is never evicted while it sits in an overlay.
            log::error!("link table overlay names oid {oid} of ns {ns} ({e:?}) but it is not loaded");
            return Err(errno::EIO);
        }
        let root = n.link_root;
        let v = self
            .vol
            .forest
            .get(root.as_ref(), &oid_key(oid))
            .map_err(eio)?
            .ok_or_else(|| {
                log::error!("directory entry refers to oid {oid} of ns {ns}, absent from the link table");
                errno::EIO
            })?;
        let inode = inode_from_value(&v).map_err(eio)?;
        self.nodes.insert(ino, Box::new(Node::new(inode, ns, Loc::Linked)));
        self.loaded_since_sweep += 1;
        Ok(ino)
    }

    /// Records that an inode's record changed: its location's overlay gets the new record at
    /// the next checkpoint.
    pub(crate) fn touch(&mut self, ino: Ino) {
        self.last_change = Instant::now();
        // (A changed record is written whole at the checkpoint, which refuses a cold one.)
        if let Err(e) = self.warm(ino) {
            log::error!("inline bytes of inode {ino:#x} not loaded before a change: {e}");
        }
        let Some(n) = self.nodes.get_mut(&ino) else { return };
        n.pinned = true;
        self.dirty.insert(ino);
        let (loc, ns, oid) = (n.loc.clone(), n.ns, n.inode.oid);
        match loc {
            Loc::Root => {
                if let Some(ns) = self.namespaces.get_mut(&ns) {
                    ns.dirty = true;
                }
            }
            Loc::Entry { parent, name } => {
                if let Some(p) = self.nodes.get_mut(&parent) {
                    p.entries.insert(name, Some(Ent::Node(ino)));
                    self.dirty.insert(parent);
                }
            }
            Loc::Linked => {
                if let Some(ns) = self.namespaces.get_mut(&ns) {
                    ns.links.insert(oid, Some(ino));
                }
            }
            Loc::Gone => {}
        }
    }

    /// The journal's name for an inode; `None` for one that has no name any more (its
    /// changes cannot outlive a crash, so they are not journaled).
    pub(crate) fn target(&self, ino: Ino) -> Option<Target> {
        let mut names = Vec::new();
        let mut cur = ino;
        loop {
            let n = self.nodes.get(&cur)?;
            match &n.loc {
                Loc::Root => {
                    names.reverse();
                    return Some(Target::Path { ns: n.ns, names });
                }
                Loc::Entry { parent, name } => {
                    names.push(name.clone());
                    cur = *parent;
                }
                Loc::Linked if cur == ino => {
                    return Some(Target::Linked {
                        ns: n.ns,
                        oid: n.inode.oid,
                    })
                }
                _ => return None,
            }
        }
    }

    /// Finds the inode a journal record names (during recovery).
    pub(crate) fn resolve(&mut self, t: &Target) -> FsResult<Ino> {
        match t {
            Target::Linked { ns, oid } => self.linked(*ns, *oid),
            Target::Path { ns, names } => {
                let mut cur = self.namespaces.get(ns).ok_or(errno::ENOENT)?.root;
                for n in names {
                    cur = self.child(cur, n)?.ok_or(errno::ENOENT)?;
                }
                Ok(cur)
            }
        }
    }

    pub(crate) fn log(&mut self, rec: impl FnOnce() -> Option<Record>) -> FsResult<()> {
        self.log_part(false, rec)
    }

    /// Journals one record of an operation that needs several; `more`: others follow, and
    /// recovery replays them all or none.
    pub(crate) fn log_part(&mut self, more: bool, rec: impl FnOnce() -> Option<Record>) -> FsResult<()> {
        if self.replaying || !self.journaled {
            return Ok(());
        }
        if let Some(r) = rec() {
            if let Some(j) = self.vol.journal.as_mut() {
                let before = j.len;
                let appended = j.append(&r, more);
                if appended.is_ok() && r.names_blocks() {
                    // Every block it names was written before (and counted).
                    self.named_writes = self.vol.forest.store.writes();
                }
                self.io.journal += j.len.saturating_sub(before);
                if let Err(e) = appended {
                    // The change is already applied in memory, and its caller is told it
                    // failed: that memory must never reach a checkpoint. The journal holds
                    // neither this record nor anything after it, so a remount replays the
                    // state without the change (an operation cut short after a record
                    // flagged MORE is dropped whole by replay, nothing follows it).
                    self.fail(&format!(
                        "a journal write failed ({e}), so a change was refused after it was made in memory"
                    ));
                    return Err(eio(e));
                }
            }
        }
        Ok(())
    }

    /// Marks the volume failed (the first reason is kept): changes and fsync are refused
    /// and no checkpoint is taken until a remount replays the journal.
    pub fn fail(&mut self, why: &str) {
        self.vol.fail(why);
    }

    /// Why the volume refuses changes, if it does.
    pub fn failure(&self) -> Option<&str> {
        self.vol.failed.as_deref()
    }

    /// Whether changes are taken now: refused on a failed volume or a read-only mount.
    pub fn writable(&self) -> FsResult<()> {
        if let Some(why) = &self.vol.failed {
            log::warn!("refusing a change: {why}");
            return Err(self.failed_errno.clone());
        }
        if self.read_only {
            return Err(read_only_refusal());
        }
        Ok(())
    }

    /// ENOSPC unless the host has room for `bytes` more now (and for what waits for the
    /// next checkpoint): what `fallocate` promises. Blocks are written at checkpoints, never
    /// in place, so nothing is set aside: the promise is checked when made, as ZFS does. A
    /// request too large is no full host (`room_for`'s state is left alone).
    fn room_for_allocation(&mut self, bytes: u64) -> FsResult<()> {
        if self.replaying {
            return Ok(());
        }
        let Ok(sp) = self.vol.host.space(&self.vol.dir) else {
            return Ok(()); // a host that cannot say is not refused
        };
        let avail = sp.available.saturating_mul(sp.block_size);
        let margin = if self.reserve_held() { 0 } else { HOST_RESERVE };
        if avail < self.dirty_bytes.saturating_add(bytes).saturating_add(margin) {
            return Err(errno::ENOSPC.with(format!("fallocate of {bytes} bytes: the host has {avail} free")));
        }
        Ok(())
    }

    /// ENOSPC if a change adding about `bytes` would leave the host less than the next
    /// checkpoint needs (the data waiting in memory, the journal and data copies of these
    /// bytes, and `HOST_RESERVE` for metadata).
    pub(crate) fn room_for(&mut self, bytes: u64) -> FsResult<()> {
        if self.replaying {
            return Ok(());
        }
        let cost = 2 * bytes;
        // (While the host is full every change looks: the first that finds room takes the
        // reserve back and ends the state.)
        if !self.reserve.host_full && cost <= self.room.slack && self.room.checked_at.elapsed() < std::time::Duration::from_secs(1) {
            self.room.slack -= cost;
            return Ok(());
        }
        let Ok(sp) = self.vol.host.space(&self.vol.dir) else {
            return Ok(()); // a host that cannot say is not refused
        };
        let avail = sp.available.saturating_mul(sp.block_size);
        // The margin for the next checkpoint's metadata: held back already while the reserve
        // file is (`reserve.rs`), which a checkpoint short of room gives back first.
        let margin = if self.reserve_held() { 0 } else { HOST_RESERVE };
        let need = self.dirty_bytes + cost + margin;
        self.room.checked_at = Instant::now();
        if avail < need {
            self.room.slack = 0;
            if !self.reserve.host_full {
                log::warn!("host filesystem nearly full ({avail} bytes free): refusing changes (ENOSPC) until there is room");
            }
            self.reserve.host_full = true;
            return Err(errno::ENOSPC);
        }
        self.room_is_back(avail - need);
        // Half the margin: the host may be filled by others meanwhile.
        self.room.slack = (avail - need) / 2;
        Ok(())
    }

    /// Takes a checkpoint if enough has accumulated.
    pub(crate) fn maybe_checkpoint(&mut self) -> FsResult<()> {
        if self.replaying {
            return Ok(());
        }
        let jl = self.vol.journal.as_ref().map(|j| j.len).unwrap_or(0);
        if self.dirty_bytes + self.flushed_bytes > DIRTY_LIMIT
            || jl > JOURNAL_LIMIT
            || self.pending_chunks > PENDING_CHUNK_LIMIT
        {
            // Bounds on memory and the journal: the checkpoint is taken here, whole.
            return self.checkpoint().map_err(eio);
        }
        let Some((set, batch)) = self.fold_cost.batches() else { return Ok(()) };
        let waiting = self.unfolded();
        if waiting >= batch && !self.background_woken {
            // The background looks five times a round; woken, it folds this batch now, not
            // the larger one it would find (or right after the commit it may be finishing).
            if let Some(t) = &self.background {
                t.unpark();
                self.background_woken = true;
            }
        }
        let stuck = self.committing.is_some() && waiting > BEHIND_MAX * set;
        if stuck || (waiting > 4 * batch && self.background.is_none()) {
            // Far behind, its commit's pack sync stuck on a busy disk, or no background to
            // leave a commit to (the engine used as a library): the whole checkpoint here.
            // Not merely many waiting: folds were not early while nobody waited on them, and
            // this request's pack sync under the lock would only add to the fold's pause
            // (a 14,000-inode pile held the lock 633 ms that way, 363 ms handed over).
            return self.checkpoint().map_err(eio);
        }
        if waiting > 4 * batch {
            self.fold_for_the_background().map_err(eio)?;
        }
        Ok(())
    }

    /// The background fell behind on small folds (`fold_policy`): this request folds and
    /// writes them (`checkpoint_begin`) and hands the pack sync and the commit to the
    /// background (`take_handoff`), so that every request waits for the fold only, not for
    /// the disk. Taking the whole checkpoint here once held the lock 100 ms
    /// (`bench/latency`). Nothing while a commit is in flight: the background is then syncing
    /// one, and folds again as soon as it is committed (up to `BEHIND_MAX` batches).
    fn fold_for_the_background(&mut self) -> Result<()> {
        if self.committing.is_some() || self.vol.failed.is_some() {
            return Ok(());
        }
        let waiting = self.unfolded();
        if let Some(sync) = self.checkpoint_begin()? {
            log::debug!(target: "scion_fs::checkpoint", "a request folded {waiting} inodes for the background, which fell behind");
            self.handoff = Some(sync);
            if let Some(t) = &self.background {
                t.unpark();
            }
        }
        Ok(())
    }

    /// A commit a request began and left to the background (`fold_for_the_background`): its
    /// packs to sync without the engine lock, then `checkpoint_end`. None if there is none,
    /// or if another checkpoint committed it meanwhile.
    pub fn take_handoff(&mut self) -> Option<crate::PackSync> {
        let sync = self.handoff.take()?;
        (self.committing.as_ref().map(|f| f.generation()) == Some(sync.generation())).then_some(sync)
    }

    /// The thread that runs the background's checkpoints, woken when a request leaves it a
    /// commit (`take_handoff`).
    pub fn set_background_thread(&mut self, thread: Option<std::thread::Thread>) {
        self.background = thread;
    }

    // ----- lookups and attributes ----------------------------------------------------------

    pub fn root(&self) -> Ino {
        ROOT_INO
    }

    /// Looks up a name and counts one kernel reference to the result.
    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        if name.len() > MAX_NAME {
            return Err(errno::ENAMETOOLONG);
        }
        if parent & SNAPDIR_BIT != 0 {
            let ino = self.snapdir_child(parent & !SNAPDIR_BIT, name, None)?;
            return self.remember(ino);
        }
        if name == SNAPDIR_NAME {
            return self.snapdir_attr(parent);
        }
        let ino = self.child(parent, name)?.ok_or(errno::ENOENT)?;
        self.remember(ino)
    }

    /// `lookup` for `caller`: the same, except that `D/.snapshot/NAME` is found only if the
    /// caller could search the directories above `D` in that snapshot as they were then
    /// (`snapdir_child`). The mount looks names up this way; the kernel must not cache such
    /// an entry (it would serve it to the next caller without asking).
    pub fn lookup_as(&mut self, parent: Ino, name: &[u8], caller: &crate::access::Caller) -> FsResult<Attr> {
        if parent & SNAPDIR_BIT != 0 {
            if name.len() > MAX_NAME {
                return Err(errno::ENAMETOOLONG);
            }
            let ino = self.snapdir_child(parent & !SNAPDIR_BIT, name, Some(caller))?;
            return self.remember(ino);
        }
        self.lookup(parent, name)
    }

    /// Counts one kernel reference and returns the attributes.
    pub fn remember(&mut self, ino: Ino) -> FsResult<Attr> {
        if ino & SNAPDIR_BIT != 0 {
            return self.snapdir_attr(ino & !SNAPDIR_BIT);
        }
        let n = self.node_mut(ino)?;
        n.lookups += 1;
        let n = self.node(ino)?;
        Ok(self.attr_of(n, ino))
    }

    /// True if the kernel holds a reference to `ino` (it has the inode cached, attributes and
    /// all, since this daemon tells it of every change it did not make itself).
    pub fn kernel_holds(&self, ino: Ino) -> bool {
        ino & SNAPDIR_BIT == 0 && self.nodes.get(&ino).is_some_and(|n| n.lookups > 0)
    }

    /// The references counted to `ino` (`remember`): the kernel's, and the NFS adapter's one
    /// per inode it handed out (it asks, to tell the kernel only of what the kernel holds).
    pub fn references(&self, ino: Ino) -> u64 {
        if ino & SNAPDIR_BIT != 0 {
            return 0;
        }
        self.nodes.get(&ino).map_or(0, |n| n.lookups)
    }

    /// The references the kernel holds to this volume's inodes, in all: what its FORGETs
    /// will give back.
    pub fn kernel_references(&self) -> u64 {
        self.nodes.values().map(|n| n.lookups).sum()
    }

    /// The kernel dropped `count` references.
    pub fn forget(&mut self, ino: Ino, count: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
        }
        self.maybe_evict(ino);
    }

    /// Drops an inode from memory when nothing needs it: no kernel reference, not open, no
    /// pending change. Directories stay (their children point at them).
    pub(crate) fn maybe_evict(&mut self, ino: Ino) {
        let Some(n) = self.nodes.get(&ino) else { return };
        if ino == ROOT_INO || n.lookups > 0 || n.opens > 0 {
            return;
        }
        let gone = n.loc == Loc::Gone;
        self.orphans.remove(&ino);
        if gone {
            if let Some(r) = n.orphan_ref {
                self.orphan_releases.push(r);
            }
            self.dirty_bytes = self.dirty_bytes.saturating_sub(chunk_bytes(n));
            let n = self.nodes.remove(&ino).unwrap();
            for c in n.chunks.values() {
                self.vol.garbage.extend(c.owned_blocks());
                match c {
                    Chunk::Shared(p) => {
                        if let Err(e) = self.vol.forest.release(p) {
                            log::error!("release of a shared chunk: {e}");
                        }
                    }
                    _ => {}
                }
            }
        } else if !n.pinned && n.inode.kind != Kind::Dir && n.chunks.is_empty() {
            self.unload(ino);
            // Its directory may have waited only for it.
            self.idle_fresh += !self.idle_dirs.is_empty() as usize;
            self.shrink_nodes();
        } else if n.inode.kind == Kind::Dir {
            self.note_idle_dir(ino);
        }
    }

    pub fn getattr(&mut self, ino: Ino) -> FsResult<Attr> {
        if ino & SNAPDIR_BIT != 0 {
            return self.snapdir_attr(ino & !SNAPDIR_BIT);
        }
        let n = self.node(ino)?;
        Ok(self.attr_of(n, ino))
    }

    pub fn setattr(&mut self, ino: Ino, attr: SetAttr) -> FsResult<Attr> {
        self.writable()?;
        self.rw(ino)?;
        let now = Ts::now();
        self.op_setattr(ino, &attr, now)?;
        self.log_setattr(ino, attr, now)?;
        self.maybe_checkpoint()?;
        self.getattr(ino)
    }

    pub(crate) fn op_setattr(&mut self, ino: Ino, a: &SetAttr, now: Ts) -> FsResult<()> {
        // (The kernel refuses such times; a caller that is not the kernel is refused here, before
        // an inode holds what its record cannot encode.)
        if [a.atime, a.mtime, a.ctime].iter().flatten().any(|t| t.nsec >= 1_000_000_000) {
            return Err(errno::EINVAL.with("a time of 10^9 nanoseconds or more"));
        }
        let kind = self.node(ino)?.inode.kind;
        if let Some(size) = a.size {
            match kind {
                Kind::File => {}
                Kind::Dir => return Err(errno::EISDIR),
                _ => return Err(errno::EINVAL),
            }
            if size > MAX_FILE_SIZE {
                return Err(errno::EFBIG);
            }
            self.truncate(ino, size)?;
            let n = self.node_mut(ino)?;
            n.inode.mtime = now;
        }
        let n = self.node_mut(ino)?;
        if let Some(m) = a.mode {
            n.inode.perm = (m & 0o7777) as u16;
            // An access ACL follows the mode (posix_acl_chmod).
            if let Some(mut e) = n.inode.xattrs.get(acl::ACCESS).and_then(|v| acl::parse(v)) {
                acl::chmod(&mut e, n.inode.perm);
                n.inode.xattrs.insert(acl::ACCESS.to_vec(), acl::encode(&e));
            }
        }
        if let Some(u) = a.uid {
            n.inode.uid = u;
        }
        if let Some(g) = a.gid {
            n.inode.gid = g;
        }
        if let Some(t) = a.atime {
            n.inode.atime = t;
        }
        if let Some(t) = a.mtime {
            n.inode.mtime = t;
        }
        n.inode.ctime = a.ctime.unwrap_or(now);
        self.touch(ino);
        Ok(())
    }

    pub fn readlink(&mut self, ino: Ino) -> FsResult<Vec<u8>> {
        let n = self.node(ino)?;
        if n.inode.kind != Kind::Symlink {
            return Err(errno::EINVAL);
        }
        Ok(n.inode.target.clone())
    }

    // ----- namespace changes ---------------------------------------------------------------

    /// Creates a file, directory, symlink or special file with the requested `mode` bits.
    /// A parent with a default ACL passes it on (and decides the mode with it, as
    /// `posix_acl_create` does); otherwise `umask` applies.
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: Kind,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: &[u8],
    ) -> FsResult<Attr> {
        let ino = self.make_node(parent, name, kind, mode, umask, uid, gid, rdev, target)?;
        self.remember(ino)
    }

    /// `mknod` but for the kernel's reference to the new node, which a whiteout never gets.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_node(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: Kind,
        mode: u32,
        umask: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: &[u8],
    ) -> FsResult<Ino> {
        self.writable()?;
        check_name(name)?;
        self.rw(parent)?;
        self.room_for(4096 + target.len() as u64)?;
        if kind == Kind::Symlink && (target.is_empty() || target.len() > MAX_SYMLINK) {
            return Err(if target.is_empty() {
                errno::ENOENT
            } else {
                errno::ENAMETOOLONG
            });
        }
        let (perm, xattrs) = self.new_mode(parent, kind, mode, umask)?;
        let oid = self.new_oid(self.dir_node(parent)?.ns)?;
        let now = Ts::now();
        let ptarget = self.target(parent);
        let ino = self.op_mknod(parent, name, kind, perm, uid, gid, rdev, target, &xattrs, oid, now)?;
        self.log(|| {
            ptarget.map(|parent| Record::Mknod {
                parent,
                name: name.to_vec(),
                kind,
                perm,
                uid,
                gid,
                rdev,
                target: target.to_vec(),
                xattrs,
                oid,
                time: now,
            })
        })?;
        Ok(ino)
    }

    /// The permission bits and inherited ACLs of a new inode of `kind` in directory `parent`:
    /// its default ACL if it has one (the umask is then ignored), else `mode` less `umask`.
    pub(crate) fn new_mode(&self, parent: Ino, kind: Kind, mode: u32, umask: u32) -> FsResult<(u16, Vec<(Vec<u8>, Vec<u8>)>)> {
        let p = self.dir_node(parent)?;
        let default = p
            .inode
            .xattrs
            .get(acl::DEFAULT)
            .filter(|_| kind != Kind::Symlink)
            .cloned();
        let mut xattrs = Vec::new();
        let perm = match default.as_deref().and_then(acl::parse) {
            Some(d) => {
                let (perm, access) = acl::create(&d, (mode & 0o7777) as u16);
                if let Some(a) = access {
                    xattrs.push((acl::ACCESS.to_vec(), acl::encode(&a)));
                }
                if kind == Kind::Dir {
                    xattrs.push((acl::DEFAULT.to_vec(), default.unwrap()));
                }
                perm
            }
            None => (mode & !umask & 0o7777) as u16,
        };
        Ok((perm, xattrs))
    }

    /// The object id the next new inode of namespace `ns` gets (ENOSPC when all are used).
    pub(crate) fn new_oid(&self, ns: u32) -> FsResult<u64> {
        let oid = self.namespaces.get(&ns).ok_or(errno::ESTALE)?.next_oid;
        if oid >= MAX_OID {
            // Past it, st_ino would name an object of the next namespace.
            log::warn!("namespace {ns} has used all 2^40 object ids");
            return Err(errno::ENOSPC);
        }
        Ok(oid)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: Kind,
        perm: u16,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: &[u8],
        xattrs: &[(Vec<u8>, Vec<u8>)],
        oid: u64,
        now: Ts,
    ) -> FsResult<Ino> {
        if self.child(parent, name)?.is_some() {
            return Err(errno::EEXIST);
        }
        let p = self.dir_node(parent)?;
        let ns = p.ns;
        if p.inode.kind == Kind::Dir && p.inode.nlink >= MAX_NLINK && kind == Kind::Dir {
            return Err(errno::EMLINK);
        }
        let mut inode = Inode::new(oid, kind, perm, uid, gid, now);
        // A setgid directory gives new entries its group, and new directories its setgid bit.
        if p.inode.perm & libc::S_ISGID as u16 != 0 {
            inode.gid = p.inode.gid;
            if kind == Kind::Dir {
                inode.perm |= libc::S_ISGID as u16;
            }
        }
        inode.rdev = rdev;
        inode.target = target.to_vec();
        inode.xattrs.extend(xattrs.iter().cloned());
        let nsr = self.namespaces.get_mut(&ns).ok_or(errno::EIO)?;
        if oid != nsr.next_oid {
            log::error!("object id {oid} replayed where {} was due", nsr.next_oid);
            return Err(errno::EIO);
        }
        nsr.next_oid += 1;
        nsr.inodes += 1;
        let ino = make_ino(ns, oid);
        let mut node = Node::new(
            inode,
            ns,
            Loc::Entry {
                parent,
                name: name.to_vec(),
            },
        );
        node.pinned = true;
        self.nodes.insert(ino, Box::new(node));
        self.dirty.insert(ino);
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_vec(), Some(Ent::Node(ino)));
        if kind == Kind::Dir {
            p.inode.nlink += 1;
        }
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(parent);
        Ok(ino)
    }

    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(parent, name, false)
    }

    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(parent, name, true)
    }

    fn remove(&mut self, parent: Ino, name: &[u8], dir: bool) -> FsResult<()> {
        self.writable()?;
        self.rw(parent)?;
        let now = Ts::now();
        let ptarget = self.target(parent);
        self.op_remove(parent, name, dir, now)?;
        self.log(|| {
            ptarget.map(|parent| Record::Remove {
                parent,
                name: name.to_vec(),
                dir,
                time: now,
            })
        })?;
        self.maybe_checkpoint()
    }

    pub(crate) fn op_remove(&mut self, parent: Ino, name: &[u8], dir: bool, now: Ts) -> FsResult<()> {
        let ino = self.child(parent, name)?.ok_or(errno::ENOENT)?;
        let is_dir = self.node(ino)?.inode.kind == Kind::Dir;
        if dir && !is_dir {
            return Err(errno::ENOTDIR);
        }
        if !dir && is_dir {
            return Err(errno::EISDIR);
        }
        if is_dir && !self.dir_is_empty(ino)? {
            return Err(errno::ENOTEMPTY);
        }
        self.drop_name(parent, ino, now)?;
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_vec(), None);
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(parent);
        Ok(())
    }

    /// Takes one name away from `ino` (the entry itself is removed by the caller).
    pub(crate) fn drop_name(&mut self, parent: Ino, ino: Ino, now: Ts) -> FsResult<()> {
        self.warm(ino)?;
        let n = self.node_mut(ino)?;
        let ns = n.ns;
        let oid = n.inode.oid;
        n.inode.ctime = now;
        if n.loc == Loc::Root {
            // The root of a clone: its mount entry goes, and the clone with it.
            let info = self.namespaces.get(&ns).ok_or(errno::EIO)?.info.clone();
            let oid = info.anchor;
            if let Some(p) = self.namespaces.get_mut(&info.parent) {
                p.mounts.remove(&oid);
                p.dirty = true;
            }
            self.destroy_ns(ns)?;
            self.node_mut(parent)?.inode.nlink -= 1;
            self.bump(parent, &summary_mount_key(oid), -1)?;
            return Ok(());
        }
        let n = self.node_mut(ino)?;
        if n.inode.kind == Kind::Dir {
            n.inode.nlink = 0;
            n.loc = Loc::Gone;
            n.entries.clear();
            let p = self.node_mut(parent)?;
            p.inode.nlink -= 1;
        } else {
            n.inode.nlink = n.inode.nlink.saturating_sub(1);
            let last = n.inode.nlink == 0;
            match n.loc.clone() {
                Loc::Entry { .. } => {
                    debug_assert!(last);
                    n.loc = Loc::Gone;
                    n.inode.nlink = 0;
                }
                Loc::Linked => {
                    self.bump(parent, &summary_link_key(oid), -1)?;
                    let n = self.node_mut(ino)?;
                    if last {
                        n.loc = Loc::Gone;
                        self.namespaces.get_mut(&ns).ok_or(errno::EIO)?.links.insert(oid, None);
                    } else {
                        self.touch(ino);
                    }
                }
                _ => return Err(errno::EIO),
            }
        }
        if self.node(ino)?.loc == Loc::Gone {
            let c = &mut self.namespaces.get_mut(&ns).ok_or(errno::EIO)?.inodes;
            *c = c.saturating_sub(1);
            self.dirty.insert(ino);
            if self.node(ino)?.opens > 0 {
                self.orphans.insert(ino);
            }
            self.maybe_evict(ino);
        }
        Ok(())
    }

    fn dir_is_empty(&mut self, ino: Ino) -> FsResult<bool> {
        let n = self.dir_node(ino)?;
        if n.entries.values().any(|e| e.is_some()) {
            return Ok(false);
        }
        let mut empty = true;
        let removed: Vec<&Vec<u8>> = n.entries.keys().collect();
        self.vol
            .forest
            .scan(n.inode.content.as_ref(), &[], &mut |k, _| {
                if removed.iter().any(|r| r.as_slice() == k) {
                    true
                } else {
                    empty = false;
                    false
                }
            })
            .map_err(eio)?;
        Ok(empty)
    }

    pub fn rename(&mut self, parent: Ino, name: &[u8], newparent: Ino, newname: &[u8], flags: u32) -> FsResult<()> {
        self.writable()?;
        self.rw(parent)?;
        self.rw(newparent)?;
        check_name(newname)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0
        {
            return Err(errno::EINVAL);
        }
        self.rename_part(false, parent, name, newparent, newname, flags)?;
        self.maybe_checkpoint()
    }

    /// `rename`, journaled as the first record of several when `more` (`whiteout.rs`).
    pub(crate) fn rename_part(
        &mut self,
        more: bool,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let now = Ts::now();
        let (pt, npt) = (self.target(parent), self.target(newparent));
        self.op_rename(parent, name, newparent, newname, flags, now)?;
        self.log_part(more, || match (pt, npt) {
            (Some(parent), Some(newparent)) => Some(Record::Rename {
                parent,
                name: name.to_vec(),
                newparent,
                newname: newname.to_vec(),
                flags,
                time: now,
            }),
            _ => None,
        })
    }

    /// The overlay entry that puts `ino` under a name.
    pub(crate) fn ent_for(&self, ino: Ino) -> FsResult<Ent> {
        let n = self.node(ino)?;
        Ok(match n.loc {
            Loc::Linked => Ent::Link {
                oid: n.inode.oid,
                kind: n.inode.kind,
            },
            Loc::Root => Ent::Mount {
                oid: self.namespaces.get(&n.ns).ok_or(errno::EIO)?.info.anchor,
            },
            _ => Ent::Node(ino),
        })
    }

    pub(crate) fn place(&mut self, ino: Ino, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.warm(ino)?;
        let ent = self.ent_for(ino)?;
        match ent {
            Ent::Node(_) => {
                self.node_mut(ino)?.loc = Loc::Entry {
                    parent,
                    name: name.to_vec(),
                };
                self.node_mut(ino)?.pinned = true;
                self.dirty.insert(ino);
            }
            Ent::Mount { .. } => {
                let ns = self.node(ino)?.ns;
                self.namespaces.get_mut(&ns).ok_or(errno::EIO)?.mounted_at = Some((parent, name.to_vec()));
            }
            Ent::Link { .. } => {}
        }
        self.node_mut(parent)?.entries.insert(name.to_vec(), Some(ent));
        Ok(())
    }

    pub(crate) fn op_rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
        now: Ts,
    ) -> FsResult<()> {
        let src = self.child(parent, name)?.ok_or(errno::ENOENT)?;
        let home = self.dir_node(newparent)?.ns;
        let dst = self.child(newparent, newname)?;
        // Names never cross between a clone and the tree around it: `mv` copies instead.
        if self.home_ns(src)? != home || dst.is_some_and(|d| self.home_ns(d).ok() != Some(home)) {
            return Err(errno::EXDEV);
        }
        let src_dir = self.node(src)?.inode.kind == Kind::Dir;
        if src_dir && self.is_ancestor(src, newparent)? {
            return Err(errno::EINVAL);
        }
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(errno::ENOENT)?;
            let dst_dir = self.node(dst)?.inode.kind == Kind::Dir;
            if dst_dir && self.is_ancestor(dst, parent)? {
                return Err(errno::EINVAL);
            }
            if src == dst {
                return Ok(());
            }
            if parent != newparent {
                let (ss, ds) = (self.summary_of_name(src)?, self.summary_of_name(dst)?);
                self.bump_all(parent, &ss, -1)?;
                self.bump_all(newparent, &ds, -1)?;
                self.bump_all(newparent, &ss, 1)?;
                self.bump_all(parent, &ds, 1)?;
            }
            self.place(src, newparent, newname)?;
            self.place(dst, parent, name)?;
            if parent != newparent && src_dir != dst_dir {
                let (gains, loses) = if src_dir {
                    (newparent, parent)
                } else {
                    (parent, newparent)
                };
                self.node_mut(gains)?.inode.nlink += 1;
                self.node_mut(loses)?.inode.nlink -= 1;
            }
            for i in [src, dst] {
                self.node_mut(i)?.inode.ctime = now;
                self.touch(i);
            }
        } else {
            if let Some(dst) = dst {
                if flags & RENAME_NOREPLACE != 0 {
                    return Err(errno::EEXIST);
                }
                if dst == src {
                    // Two names of one file: rename does nothing.
                    return Ok(());
                }
                let dst_dir = self.node(dst)?.inode.kind == Kind::Dir;
                match (src_dir, dst_dir) {
                    (true, false) => return Err(errno::ENOTDIR),
                    (false, true) => return Err(errno::EISDIR),
                    (true, true) if !self.dir_is_empty(dst)? => return Err(errno::ENOTEMPTY),
                    _ => {}
                }
                self.drop_name(newparent, dst, now)?;
            }
            if parent != newparent {
                let ss = self.summary_of_name(src)?;
                self.bump_all(parent, &ss, -1)?;
                self.bump_all(newparent, &ss, 1)?;
            }
            self.node_mut(parent)?.entries.insert(name.to_vec(), None);
            self.place(src, newparent, newname)?;
            if src_dir && parent != newparent {
                self.node_mut(parent)?.inode.nlink -= 1;
                self.node_mut(newparent)?.inode.nlink += 1;
            }
            self.node_mut(src)?.inode.ctime = now;
            self.touch(src);
        }
        for p in [parent, newparent] {
            let n = self.node_mut(p)?;
            n.inode.mtime = now;
            n.inode.ctime = now;
            self.touch(p);
        }
        Ok(())
    }

    /// True if `a` is `b` or one of its ancestors.
    fn is_ancestor(&self, a: Ino, b: Ino) -> FsResult<bool> {
        let mut cur = b;
        loop {
            if cur == a {
                return Ok(true);
            }
            match &self.node(cur)?.loc {
                Loc::Entry { parent, .. } => cur = *parent,
                _ => return Ok(false),
            }
        }
    }

    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        if self.nodes.get(&ino).is_some_and(|n| n.nameless) {
            return self.name_tmpfile(ino, newparent, newname);
        }
        self.writable()?;
        self.rw(ino)?;
        self.rw(newparent)?;
        check_name(newname)?;
        let now = Ts::now();
        let (it, pt) = (self.target(ino), self.target(newparent));
        self.op_link(ino, newparent, newname, now)?;
        self.log(|| match (it, pt) {
            (Some(ino), Some(parent)) => Some(Record::Link {
                ino,
                parent,
                name: newname.to_vec(),
                time: now,
            }),
            _ => None,
        })?;
        self.remember(ino)
    }

    pub(crate) fn op_link(&mut self, ino: Ino, newparent: Ino, newname: &[u8], now: Ts) -> FsResult<()> {
        self.warm(ino)?;
        let n = self.node(ino)?;
        if n.inode.kind == Kind::Dir {
            return Err(errno::EPERM);
        }
        if n.loc == Loc::Gone {
            return Err(errno::ENOENT);
        }
        if n.inode.nlink >= MAX_NLINK {
            return Err(errno::EMLINK);
        }
        if self.dir_node(newparent)?.ns != n.ns {
            return Err(errno::EXDEV);
        }
        if self.child(newparent, newname)?.is_some() {
            return Err(errno::EEXIST);
        }
        let n = self.node(ino)?;
        let (ns, oid, kind) = (n.ns, n.inode.oid, n.inode.kind);
        if let Loc::Entry { parent, name } = n.loc.clone() {
            // A second name: the inode moves to the link table, its entry becomes a reference.
            self.node_mut(ino)?.loc = Loc::Linked;
            self.node_mut(parent)?
                .entries
                .insert(name, Some(Ent::Link { oid, kind }));
            self.touch(parent);
            self.bump(parent, &summary_link_key(oid), 1)?;
        }
        self.bump(newparent, &summary_link_key(oid), 1)?;
        self.namespaces
            .get_mut(&ns)
            .ok_or(errno::EIO)?
            .links
            .insert(oid, Some(ino));
        let n = self.node_mut(ino)?;
        n.inode.nlink += 1;
        n.inode.ctime = now;
        self.touch(ino);
        let p = self.node_mut(newparent)?;
        p.entries.insert(newname.to_vec(), Some(Ent::Link { oid, kind }));
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(newparent);
        Ok(())
    }

    // ----- directories ---------------------------------------------------------------------

    /// All entries of a directory, in name order (without "." and "..").
    pub fn readdir(&mut self, ino: Ino) -> FsResult<Vec<DirEntry>> {
        if ino & SNAPDIR_BIT != 0 {
            return self.snapdir_list(ino & !SNAPDIR_BIT);
        }
        let mut out = self.readdir_real(ino)?;
        if self.show_snapdir {
            let at = out.partition_point(|e| e.name.as_slice() < SNAPDIR_NAME);
            out.insert(
                at,
                DirEntry {
                    name: SNAPDIR_NAME.to_vec(),
                    ino: ino | SNAPDIR_BIT,
                    kind: Kind::Dir,
                },
            );
        }
        Ok(out)
    }

    /// The entries of directory `ino` in name order, without the virtual `.snapshot`.
    pub(crate) fn readdir_real(&mut self, ino: Ino) -> FsResult<Vec<DirEntry>> {
        let n = self.dir_node(ino)?;
        let ns = n.ns;
        let mut out: BTreeMap<Vec<u8>, (Ino, Kind)> = BTreeMap::new();
        let mut mounts = Vec::new();
        let mut err = None;
        self.vol
            .forest
            .scan(
                n.inode.content.as_ref(),
                &[],
                &mut |k, v| match EntryRecord::from_value(v) {
                    Ok(EntryRecord::Inline(i)) => {
                        out.insert(k.to_vec(), (make_ino(ns, i.oid), i.kind));
                        true
                    }
                    Ok(EntryRecord::Linked { oid, kind }) => {
                        out.insert(k.to_vec(), (make_ino(ns, oid), kind));
                        true
                    }
                    Ok(EntryRecord::Mount { oid }) => {
                        mounts.push((k.to_vec(), oid));
                        true
                    }
                    Err(e) => {
                        err = Some(e);
                        false
                    }
                },
            )
            .map_err(eio)?;
        if let Some(e) = err {
            return Err(eio(e));
        }
        for (name, e) in &n.entries {
            match e {
                None => {
                    out.remove(name);
                }
                Some(Ent::Node(c)) => {
                    let kind = self.node(*c)?.inode.kind;
                    out.insert(name.clone(), (*c, kind));
                }
                Some(Ent::Link { oid, kind }) => {
                    out.insert(name.clone(), (make_ino(ns, *oid), *kind));
                }
                Some(Ent::Mount { oid }) => mounts.push((name.clone(), *oid)),
            }
        }
        for (name, oid) in mounts {
            if n.entries
                .get(&name)
                .is_some_and(|e| !matches!(e, Some(Ent::Mount { .. })))
            {
                continue;
            }
            let child = self.namespaces[&ns].mounts.get(&oid).copied().ok_or(errno::EIO)?;
            let root = self.namespaces.get(&child).ok_or(errno::EIO)?.root;
            out.insert(name, (root, Kind::Dir));
        }
        Ok(out
            .into_iter()
            .map(|(name, (ino, kind))| DirEntry { name, ino, kind })
            .collect())
    }

    /// The parent directory of a directory (itself for a namespace root).
    pub fn parent_of(&self, ino: Ino) -> Ino {
        if ino & SNAPDIR_BIT != 0 {
            return ino & !SNAPDIR_BIT;
        }
        match self.nodes.get(&ino).map(|n| (&n.loc, n.ns)) {
            Some((Loc::Entry { parent, .. }, _)) => *parent,
            Some((Loc::Root, ns)) => self
                .namespaces
                .get(&ns)
                .and_then(|n| n.mounted_at.as_ref())
                .map(|m| m.0)
                .unwrap_or(ino),
            _ => ino,
        }
    }

    // ----- file content --------------------------------------------------------------------

    pub fn open_file(&mut self, ino: Ino) -> FsResult<()> {
        self.warm(ino)?;
        self.node_mut(ino)?.opens += 1;
        self.open.insert(ino);
        Ok(())
    }

    pub fn release(&mut self, ino: Ino) {
        let open = match self.nodes.get_mut(&ino) {
            Some(n) => {
                n.opens = n.opens.saturating_sub(1);
                n.opens > 0
            }
            None => false,
        };
        if !open {
            self.open.remove(&ino);
            // (The inode number is the key of its file's streams: `write_ahead`.)
            self.vol.forest.store.end_file(ino);
        }
        self.maybe_evict(ino);
    }

    /// The regular files below directory `dir` that are open, as paths relative to it. With
    /// writeback caching the kernel may hold pages written to them that the engine has not
    /// seen (a file's pages are written back when it is closed), so a clone, snapshot, diff
    /// or scan of `dir` has the kernel flush these (`fsync` of each) rather than the whole
    /// mount (`syncfs`, which waits for every writer's pages: seconds beside a bulk writer
    /// elsewhere). None past `limit` files, or when one that may lie below `dir` has no one
    /// path (a file with several names): then the whole mount is flushed.
    pub fn open_below(&mut self, dir: Ino, limit: usize) -> FsResult<Option<Vec<Vec<u8>>>> {
        if self.node(dir)?.inode.kind != Kind::Dir {
            return Err(errno::ENOTDIR);
        }
        let base = self.path_of_dir(dir)?;
        let open: Vec<Ino> = self.open.iter().copied().collect();
        let mut paths = Vec::new();
        for ino in open {
            let Some(n) = self.nodes.get(&ino).filter(|n| n.opens > 0 && n.inode.kind == Kind::File) else {
                continue;
            };
            let (parent, name) = match &n.loc {
                Loc::Entry { parent, name } => (*parent, name.clone()),
                // Not in any tree: nothing of it is cloned, compared or scanned.
                Loc::Gone | Loc::Root => continue,
                // Its names are in the link table, not found from here: whether one lies
                // below is not known, so the caller flushes everything.
                Loc::Linked => return Ok(None),
            };
            if !self.lies_under(ino, dir) {
                continue;
            }
            let Ok(mut path) = self.path_of_dir(parent) else { return Ok(None) };
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let rel = if base.is_empty() {
                path
            } else {
                match path.strip_prefix(base.as_slice()).and_then(|p| p.strip_prefix(b"/")) {
                    Some(r) => r.to_vec(),
                    None => return Ok(None),
                }
            };
            paths.push(rel);
            if paths.len() > limit {
                return Ok(None);
            }
        }
        paths.sort();
        Ok(Some(paths))
    }

    /// Whether the file's committed chunk 0 is inline bytes (and `idx` is 0).
    pub(crate) fn has_inline(n: &Node, idx: u64) -> bool {
        idx == 0 && (n.inline_cold || !n.inode.inline.is_empty())
    }

    /// The file's inline bytes: in the node, or for a cold one (`Node::inline_cold`) read
    /// from its record in its parent's committed tree.
    pub(crate) fn inline_bytes<'a>(&self, n: &'a Node) -> FsResult<std::borrow::Cow<'a, [u8]>> {
        if !n.inline_cold {
            return Ok(std::borrow::Cow::Borrowed(n.inode.inline.as_slice()));
        }
        let stored = match &n.loc {
            Loc::Entry { parent, name } => {
                let p = self.nodes.get(parent).ok_or(errno::EIO)?;
                self.vol.forest.get(p.inode.content.as_ref(), name).map_err(eio)?
            }
            _ => None,
        };
        match stored.map(|v| EntryRecord::from_value(&v)) {
            Some(Ok(EntryRecord::Inline(i))) if i.oid == n.inode.oid && !i.inline.is_empty() => {
                Ok(std::borrow::Cow::Owned(i.inline))
            }
            _ => {
                log::error!("the inline bytes of oid {} are not in its committed record", n.inode.oid);
                Err(errno::EIO)
            }
        }
    }

    /// A copy of `ino`'s record as stored: with its inline bytes, also for a cold node (the
    /// walks that hash and compare records read them).
    pub(crate) fn inode_full(&self, ino: Ino) -> FsResult<crate::inode::Inode> {
        let n = self.node(ino)?;
        let mut i = n.inode.clone();
        if n.inline_cold {
            i.inline = self.inline_bytes(n)?.into_owned();
        }
        Ok(i)
    }

    /// Loads a cold node's inline bytes into it: before it is opened, changed or moved, after
    /// which its committed record is no longer where they are read from.
    pub(crate) fn warm(&mut self, ino: Ino) -> FsResult<()> {
        let Some(n) = self.nodes.get(&ino).filter(|n| n.inline_cold) else { return Ok(()) };
        let bytes = self.inline_bytes(n)?.into_owned();
        let n = self.nodes.get_mut(&ino).expect("just found");
        (n.inode.inline, n.inline_cold) = (bytes, false);
        Ok(())
    }

    /// Committed chunk `idx`: its block and patches (a layered chunk's layers read and merged),
    /// from the content tree or, for a file of one chunk, from the record (`Inode::direct`).
    /// Inline bytes are not blocks: see `inline_chunk`.
    pub(crate) fn stored_chunk(&self, n: &Node, idx: u64) -> FsResult<Option<StoredChunk>> {
        let Some(mut c) = self.stored_value(n, idx)? else { return Ok(None) };
        c.load_layers(&self.vol.forest.store)
            .map_err(|e| FsError::from(e).with(format!("layers of chunk {idx} of file oid {}", n.inode.oid)))?;
        Ok(Some(c))
    }

    /// `stored_chunk` without reading a layered chunk's layers (its `patches` empty).
    pub(crate) fn stored_value(&self, n: &Node, idx: u64) -> FsResult<Option<StoredChunk>> {
        if n.inode.direct.is_some() {
            return Ok(if idx == 0 { n.inode.direct_chunk() } else { None });
        }
        let Some(v) = self
            .vol
            .forest
            .get(n.inode.content.as_ref(), &chunk_key(idx))
            .map_err(eio)?
        else {
            return Ok(None);
        };
        StoredChunk::from_value(&v).map(Some).map_err(|e| {
            log::error!("content entry {idx} of oid {}: {e}", n.inode.oid);
            errno::EIO
        })
    }

    /// The page sums of `block`, chunk `idx`'s block (or its patches' base), if kept: since
    /// it was written, or beside it in the content tree.
    fn block_sums(&self, n: &Node, idx: u64, block: &BlockPtr) -> FsResult<Option<crate::delta::Sums>> {
        if let Some(s) = self.vol.fresh_sums.get(&block.addr) {
            return Ok(Some(s.clone()));
        }
        if n.inode.direct.is_some() {
            return Ok(None);
        }
        Ok(self
            .stored_value(n, idx)?
            .filter(|s| s.block == *block)
            .and_then(|s| s.sums))
    }

    /// Bytes `from..from + len` of chunk `idx`'s block `block` (zeros past its end): its
    /// pages alone, verified by `sums`, when the block has them; the whole block otherwise.
    fn read_window(
        &self,
        n: &Node,
        idx: u64,
        block: &BlockPtr,
        sums: Option<&crate::delta::Sums>,
        from: usize,
        len: usize,
    ) -> FsResult<Vec<u8>> {
        let mut out = vec![0u8; len];
        let end = (from + len).min(block.len as usize);
        if from >= end {
            return Ok(out);
        }
        let data = match sums {
            Some(s) => self
                .vol
                .forest
                .store
                .read_range(block, s, from, end - from)
                .map_err(|e| FsError::from(e).with(format!("read of chunk {idx} of file oid {}", n.inode.oid)))?,
            None => self.read_block(n, idx, block)?[from..end].to_vec(),
        };
        out[..end - from].copy_from_slice(&data);
        Ok(out)
    }

    fn read_block(&self, n: &Node, idx: u64, ptr: &BlockPtr) -> FsResult<Vec<u8>> {
        // One block on its own: a write into part of a committed chunk, a truncate into one.
        self.vol
            .forest
            .store
            .read_shared(ptr, true)
            .map(|b| b.to_vec())
            .map_err(|e| FsError::from(e).with(format!("read of chunk {idx} of file oid {}", n.inode.oid)))
    }

    /// The bytes of chunk `idx` (`None` for a hole).
    pub(crate) fn chunk(&self, n: &Node, idx: u64) -> FsResult<Option<Vec<u8>>> {
        match n.chunks.get(&idx) {
            Some(Chunk::Buf(b)) => Ok(Some(b.clone())),
            Some(Chunk::Block(p) | Chunk::Shared(p)) => self.read_block(n, idx, p).map(Some),
            Some(Chunk::Hole) => Ok(None),
            Some(Chunk::Patched { base, patches, .. }) => {
                let mut b = self.read_block(n, idx, base)?;
                patches.apply(&mut b);
                Ok(Some(b))
            }
            None if Self::has_inline(n, idx) => Ok(Some(self.inline_bytes(n)?.into_owned())),
            None => match self.stored_chunk(n, idx)? {
                Some(s) => {
                    let mut b = self.read_block(n, idx, &s.block)?;
                    s.patches.apply(&mut b);
                    Ok(Some(b))
                }
                None => Ok(None),
            },
        }
    }

    pub(crate) fn chunk_len(&self, n: &Node, idx: u64) -> FsResult<u64> {
        match n.chunks.get(&idx) {
            Some(c) => Ok(c.len()),
            None if Self::has_inline(n, idx) => Ok(self.inline_bytes(n)?.len() as u64),
            None => Ok(self.stored_value(n, idx)?.map(|s| s.len()).unwrap_or(0)),
        }
    }

    /// Replaces chunk `idx`, keeping `alloc`, the dirty byte count and the garbage list right.
    pub(crate) fn set_chunk(&mut self, ino: Ino, idx: u64, c: Chunk) -> FsResult<()> {
        let n = self.node(ino)?;
        let old = self.chunk_len(n, idx)?;
        let new = c.len();
        let n = self.node_mut(ino)?;
        n.stored_len_changed(idx, old, new);
        let new_mem = c.memory();
        // Blocks written ahead (a chunk, layers) that stay in the new chunk are not let go of;
        // the others go to the garbage: the journal still names them until the next
        // checkpoint, which then frees them.
        let keeps = c.owned_blocks();
        let old = n.chunks.insert(idx, c);
        if let Some(old) = &old {
            let dropped = old.owned_blocks().into_iter().filter(|p| !keeps.contains(p));
            self.vol.garbage.extend(dropped);
        }
        match old {
            Some(c @ (Chunk::Buf(_) | Chunk::Patched { .. })) => {
                self.dirty_bytes = self.dirty_bytes.saturating_sub(c.memory());
            }
            Some(Chunk::Shared(p)) => self.vol.forest.release(&p).map_err(eio)?,
            _ => {}
        }
        self.dirty_bytes += new_mem;
        self.dirty.insert(ino);
        Ok(())
    }

    pub fn read(&mut self, ino: Ino, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        self.read_plan(ino, offset, size)?.execute()
    }

    /// Resolves a read into bytes from memory and block ranges to fetch. The plan holds the
    /// read gate, so no block it names is punched until it is done; run it with
    /// [`ReadPlan::execute`] after releasing the engine, so reads proceed in parallel.
    pub fn read_plan(&mut self, ino: Ino, offset: u64, size: u32) -> FsResult<ReadPlan> {
        let n = self.node(ino)?;
        match n.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(errno::EISDIR),
            _ => return Err(errno::EINVAL),
        }
        let end = (offset.saturating_add(size as u64)).min(n.inode.size);
        let mut plan = ReadPlan {
            len: end.saturating_sub(offset) as usize,
            parts: Vec::new(),
            streaming: offset >= STREAM_FROM,
            store: self.vol.forest.store.clone(),
            gate: self.vol.read_gate.enter(),
        };
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let take = ((CHUNK - within as u64).min(end - pos)) as usize;
            let at = (pos - offset) as usize;
            let stored;
            // Page sums verify the block at crc32c's cost: a few pages of it for a short read,
            // the whole block for a long one (`ReadPlan::fill_run`).
            let mut sums = None;
            let (block, patches) = match n.chunks.get(&idx) {
                Some(Chunk::Buf(b)) => {
                    if within < b.len() {
                        let avail = (b.len() - within).min(take);
                        plan.parts.push((at, Part::Bytes(b[within..within + avail].to_vec())));
                    }
                    (None, None)
                }
                Some(Chunk::Block(p) | Chunk::Shared(p)) => {
                    sums = self.vol.fresh_sums.get(&p.addr).cloned();
                    (Some(*p), None)
                }
                Some(Chunk::Hole) => (None, None),
                Some(Chunk::Patched { base, patches, .. }) => {
                    sums = self.block_sums(n, idx, base)?;
                    (Some(*base), Some(patches))
                }
                None if Self::has_inline(n, idx) => {
                    let b = self.inline_bytes(n)?;
                    if within < b.len() {
                        let avail = (b.len() - within).min(take);
                        plan.parts.push((at, Part::Bytes(b[within..within + avail].to_vec())));
                    }
                    (None, None)
                }
                None => match self.stored_value(n, idx)? {
                    Some(mut s) => {
                        s.load_layers_over(&self.vol.forest.store, within, take).map_err(|e| {
                            FsError::from(e).with(format!("layers of chunk {idx} of file oid {}", n.inode.oid))
                        })?;
                        stored = s;
                        sums = stored.sums.clone();
                        (Some(stored.block), Some(&stored.patches))
                    }
                    None => (None, None),
                },
            };
            // A range the patches cover whole (a page rewritten since, in a layer) needs no
            // read of the block under them.
            let covered = patches.is_some_and(|p| p.within(within, take).map(|(_, d)| d.len()).sum::<usize>() == take);
            if let Some(ptr) = block.filter(|_| !covered) {
                if within < ptr.len as usize {
                    let avail = (ptr.len as usize - within).min(take);
                    plan.parts.push((
                        at,
                        Part::Block {
                            ptr,
                            within,
                            len: avail,
                            oid: n.inode.oid,
                            sums,
                        },
                    ));
                }
            }
            // Patches after their block: `execute` lays parts in order.
            for (o, d) in patches.into_iter().flat_map(|p| p.within(within, take)) {
                plan.parts.push((at + o, Part::Bytes(d.to_vec())));
            }
            pos += take as u64;
        }
        Ok(plan)
    }

    /// Writes bytes. Whole chunks go straight to a pack and the journal records only their
    /// pointers, so large writes reach the disk once; partial chunks are journaled as bytes
    /// and folded into blocks at the checkpoint.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> FsResult<u32> {
        let ahead = if self.replaying || self.journal_data {
            WrittenAhead::default()
        } else {
            write_ahead(&*self.store_for_write(ino)?, ino, offset, data)?
        };
        self.write_with(ino, offset, data, ahead, Stamp::Now)
    }

    /// The block store, for `write_ahead` of a write to `ino` (refused here if the write
    /// will be: a snapshot, a filesystem that refuses changes, not a regular file).
    pub fn store_for_write(&self, ino: Ino) -> FsResult<Arc<BlockStore>> {
        self.writable()?;
        self.rw(ino)?;
        Ok(self.vol.forest.store.clone())
    }

    /// `write` with the whole chunks already in a pack (`write_ahead`, called without the
    /// engine lock so that writers' pack writes overlap). Blocks written ahead that end up
    /// unused (the write is refused, or the file was unlinked meanwhile and keeps its data
    /// in memory) are garbage, freed by the next checkpoint.
    /// `stamp` says whether the write sets the file's mtime and ctime to now.
    pub fn write_with(&mut self, ino: Ino, offset: u64, data: &[u8], mut ahead: WrittenAhead, stamp: Stamp) -> FsResult<u32> {
        // (Kept even for blocks that turn out garbage: the next checkpoint drops them all.)
        self.vol.fresh_sums.extend(std::mem::take(&mut ahead.sums));
        let checks = (|| {
            self.writable()?;
            self.rw(ino)?;
            self.room_for(data.len() as u64)
        })();
        if let Err(e) = checks {
            self.vol.garbage.extend(ahead.chunks.into_iter().flatten());
            return Err(e);
        }
        // The record's time is what the write leaves as mtime (and ctime at least): the file's
        // own mtime when the kernel stamps, so that a replay leaves the times as they were.
        let now = match stamp {
            Stamp::Now => Ts::now(),
            Stamp::Kernel => self.node(ino)?.inode.mtime,
        };
        let target = self.target(ino);
        let end = offset.checked_add(data.len() as u64).ok_or(errno::EFBIG)?;
        // Whole chunks go to the packs, an unlinked file's too (not journaled: its data dies
        // with it, and its blocks become garbage when it is last closed), so that a large
        // tmpfile-style file does not live in the daemon's memory.
        let direct = !self.replaying;
        let first_full = offset.div_ceil(CHUNK);
        let last_full = end / CHUNK; // exclusive
        // A page overwritten here and there in a large file: a layer written ahead.
        if direct && ahead.chunks.is_empty() && self.write_layer_ahead(ino, offset, data, now)? {
            self.last_write = Some((ino, end));
            self.io.user += data.len() as u64;
            self.maybe_checkpoint()?;
            return Ok(data.len() as u32);
        }
        let tail = match self.tail_ahead(ino, offset, data) {
            Ok(t) => t,
            Err(e) => {
                self.vol.garbage.extend(ahead.chunks.into_iter().flatten());
                return Err(e);
            }
        };
        let mut pieces: Vec<(u64, u64)> = Vec::new(); // byte ranges journaled as bytes
        let mut long = false; // whole chunks written ahead
        let mut floats = Vec::new(); // pieces journaled again after this write's records (`pieces.rs`)
        if !direct || (ahead.chunks.is_empty() && tail.is_none()) {
            self.vol.garbage.extend(ahead.chunks.into_iter().flatten());
            pieces.push((offset, end));
        } else {
            let mut chunks = ahead.chunks;
            long = !chunks.is_empty();
            let mut first = if long { first_full } else { last_full };
            assert!(
                !long || (ahead.first, chunks.len() as u64) == (first_full, last_full - first_full),
                "chunks written ahead for another write"
            );
            // A piece that fills a chunk with one an earlier long write journaled puts the
            // chunk in a pack with this write's whole chunks (`pieces.rs`).
            let complete = |fs: &mut Fs, a: u64, b: u64| match long {
                true => fs.complete_chunk(ino, a, &data[(a - offset) as usize..(b - offset) as usize]),
                false => Ok(Completed::No),
            };
            let mut done = Vec::new(); // the completed chunks' other pieces' records
            if offset < first * CHUNK {
                match complete(self, offset, first * CHUNK)? {
                    Completed::Chunk(c, r) => {
                        chunks.insert(0, c);
                        first -= 1;
                        done.extend(r);
                    }
                    Completed::No => pieces.push((offset, first * CHUNK)),
                }
            }
            if last_full * CHUNK < end && tail.is_none() {
                match complete(self, last_full * CHUNK, end)? {
                    Completed::Chunk(c, r) => {
                        chunks.push(c);
                        done.extend(r);
                    }
                    Completed::No => pieces.push((last_full * CHUNK, end)),
                }
            }
            let how = if tail.is_some() { Put::Tail } else { Put::Ahead };
            chunks.extend(tail.map(Some));
            self.op_put_chunks(ino, first, &chunks, now, how)?;
            // The records at the journal's end of pieces this write completed or replaced are
            // taken back, and of other pieces of this file float (journaled again after this
            // write's): this write's records continue the operation they ended, so recovery
            // replays all of its writes or none (`pieces.rs`).
            if long && target.is_some() {
                let put = first..first + chunks.len() as u64;
                floats = self.take_back_trailing(ino, put, &done);
            }
            let unordered = self.writeback;
            self.log_part(!pieces.is_empty() || !floats.is_empty(), || {
                target.clone().map(|ino| Record::PutChunks {
                    ino,
                    first,
                    chunks,
                    time: now,
                    unordered,
                    tail: how == Put::Tail,
                })
            })?;
        }
        // What the journal gets: each piece, or only the bytes it changed. The kernel writes
        // whole 4 KiB pages back, so a 16-byte write to a committed chunk would otherwise put
        // 4 KiB in the journal; replaying only the changed runs over the same prior state
        // gives the same bytes. A piece that extends the file is journaled whole (the zeros
        // it adds past the end are not "changed" but set the size).
        let mut records: Vec<(u64, &[u8])> = Vec::new();
        for &(a, b) in &pieces {
            let bytes = &data[(a - offset) as usize..(b - offset) as usize];
            let size_before = self.node(ino)?.inode.size;
            let runs = self.op_write(ino, a, bytes, now)?;
            if b > size_before || runs == [(a, b)] {
                records.push((a, bytes));
            } else if runs.is_empty() {
                records.push((a, &[])); // the same bytes again: only the times change
            } else {
                records.extend(
                    runs.iter()
                        .map(|&(x, y)| (x, &data[(x - offset) as usize..(y - offset) as usize])),
                );
            }
        }
        let n = records.len();
        // Each piece of a long write journaled as one record is noted, with its record's
        // place, for the write that may complete its chunk (`pieces.rs`).
        let note = long && n == pieces.len();
        let before = self.journal_len();
        let mut at = Vec::with_capacity(n);
        for (i, (a, bytes)) in records.into_iter().enumerate() {
            let from = self.journal_len();
            self.log_part(i + 1 < n || !floats.is_empty(), || {
                target.clone().map(|ino| Record::Write {
                    ino,
                    offset: a,
                    data: bytes.to_vec(),
                    time: now,
                })
            })?;
            at.push(self.record_at(from));
        }
        if note {
            for (&(a, b), r) in pieces.iter().zip(at) {
                self.note_piece(ino, a, b, r);
            }
        }
        let count = floats.len();
        for (i, (a, b)) in floats.into_iter().enumerate() {
            self.journal_piece_again(ino, a, b, i + 1 < count, target.clone(), now)?;
        }
        if !self.replaying {
            self.last_write = Some((ino, end));
            self.io.user += data.len() as u64;
            // A write within one chunk, journaled as bytes: part of a run the chunk's block
            // may replace once the chunk is full.
            if end > offset && offset / CHUNK == (end - 1) / CHUNK {
                self.chunk_written(ino, offset / CHUNK, offset % CHUNK, end - offset, before, now)?;
            }
        }
        self.maybe_checkpoint()?;
        Ok(data.len() as u32)
    }

    /// The tail of a write that gives a file its last, partial chunk whole (from the chunk's
    /// start to the file's new end), written to a pack now: the journal then names the block
    /// instead of holding the bytes, which a checkpoint would write a second time. Untar's
    /// files arrive so, each in one WRITE (the kernel writes a file's cache back at close).
    /// `None` for anything else: a write that ends on a chunk boundary or does not start its
    /// last chunk, one that leaves bytes of the file past it, a file small enough to live in
    /// its inode record (`INLINE_MAX`), zeros, or a volume that journals data. Nor a short
    /// write past a file's start (`TAIL_AHEAD_MIN`): that is a stream of small writes (an NFS
    /// client's 4-32 KiB WRITEs, O_DIRECT), whose next write would read the block back and
    /// make it garbage, one pack write per chunk for nothing.
    fn tail_ahead(&mut self, ino: Ino, offset: u64, data: &[u8]) -> FsResult<Option<BlockPtr>> {
        let end = offset + data.len() as u64;
        let start = end / CHUNK * CHUNK;
        if self.replaying || self.journal_data || end % CHUNK == 0 || start < offset || end <= INLINE_MAX as u64 {
            return Ok(None);
        }
        if offset > 0 && data.len() < TAIL_AHEAD_MIN {
            return Ok(None);
        }
        // While callers sync, a small file's tail written ahead would cost the next fsync a
        // sync of the packs before the journal's: on ext4 a commit of the host's own journal
        // (a new block), which beside another cube's bulk writer took 7 ms at the median
        // against 0.3 ms for the journal's overwrite alone (bench/cubes, WHAT=fsync).
        // Journaled, the bytes reach the disk twice (the checkpoint writes them again), as
        // a journaling filesystem's fsync of a new small file does.
        // (A write of at least TAIL_AHEAD_MIN still goes ahead: its tail is a small part of
        // what its fsync waits for.)
        if data.len() < TAIL_AHEAD_MIN && self.synced_at.is_some_and(|t| t.elapsed() < SYNCING) {
            return Ok(None);
        }
        // A long write off the chunk grid (one of a stream shifted by an odd write-back):
        // the next write is likely to fill its last chunk, and a piece journaled can then
        // be taken back (`pieces.rs`), where a tail block would be left as garbage.
        if offset % CHUNK != 0 && self.keeps_runs() {
            return Ok(None);
        }
        let n = self.node(ino)?;
        if n.inode.kind != Kind::File || n.inode.size > end {
            return Ok(None);
        }
        let bytes = &data[(start - offset) as usize..];
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let (p, sums) = write_tail(&self.vol.forest.store, bytes)?;
        self.vol.fresh_sums.insert(p.addr, sums);
        Ok(Some(p))
    }

    /// Installs whole chunks (`None`: zeros): blocks written ahead for this file (the last
    /// one perhaps its tail, `Put::Tail`), or committed blocks of another file, which gain a
    /// reference (`Put::Shared`).
    pub(crate) fn op_put_chunks(&mut self, ino: Ino, first: u64, chunks: &[Option<BlockPtr>], now: Ts, how: Put) -> FsResult<()> {
        let n = self.node(ino)?;
        if n.inode.kind != Kind::File {
            return Err(errno::EINVAL);
        }
        let count = chunks.len() as u64;
        let end = match (how, chunks.last()) {
            // A tail ends where its bytes do.
            (Put::Tail, Some(Some(p))) if p.len > 0 && p.len as u64 <= CHUNK => (first + count - 1)
                .checked_mul(CHUNK)
                .and_then(|e| e.checked_add(p.len as u64)),
            (Put::Tail, _) => return Err(errno::EINVAL),
            _ => (first + count).checked_mul(CHUNK),
        }
        .ok_or(errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(errno::EFBIG);
        }
        let shared = how == Put::Shared;
        let whole = |i: usize, p: &BlockPtr| p.len as u64 == CHUNK || (how == Put::Tail && i as u64 == count - 1);
        let lost = |p: &BlockPtr| self.replaying && self.lost_blocks.contains(&p.addr);
        // All checked before any is installed: a refusal changes nothing.
        if chunks.iter().enumerate().any(|(i, c)| c.is_some_and(|p| !lost(&p) && !(whole(i, &p) && p.kind == scion_store::BlockKind::Data))) {
            return Err(errno::EINVAL);
        }
        for (i, c) in chunks.iter().enumerate() {
            let idx = first + i as u64;
            let c = match c {
                Some(p) if self.replaying && self.lost_blocks.contains(&p.addr) => self.older_chunk(ino, idx)?,
                Some(p) if whole(i, p) && p.kind == scion_store::BlockKind::Data => {
                    if shared {
                        self.vol.forest.refs.inc(p);
                        Chunk::Shared(*p)
                    } else {
                        Chunk::Block(*p)
                    }
                }
                Some(_) => return Err(errno::EINVAL),
                None => Chunk::Hole,
            };
            self.set_chunk(ino, idx, c)?;
        }
        let n = self.node_mut(ino)?;
        n.inode.size = n.inode.size.max(end);
        n.inode.mtime = now;
        n.inode.ctime = n.inode.ctime.max(now); // (`Stamp::Kernel`: unchanged)
        self.touch(ino);
        if !shared {
            self.pending_chunks += chunks.len() as u64;
        }
        Ok(())
    }

    /// What chunk `idx` of a file becomes when the block a `writeback` record put there never
    /// reached the disk: its content before that record, zeros to the chunk's end (a hole if
    /// it had none).
    fn older_chunk(&self, ino: Ino, idx: u64) -> FsResult<Chunk> {
        let n = self.node(ino)?;
        let size = n.inode.size;
        Ok(match self.chunk(n, idx)? {
            Some(mut b) if idx * CHUNK < size => {
                b.truncate((size - idx * CHUNK).min(CHUNK) as usize);
                b.resize(CHUNK as usize, 0);
                Chunk::Buf(b)
            }
            _ => Chunk::Hole,
        })
    }

    /// Writes bytes into the file's chunks; returns the ranges that changed content (a piece
    /// laid as patches over a committed chunk changes only the bytes that differ).
    pub(crate) fn op_write(&mut self, ino: Ino, offset: u64, data: &[u8], now: Ts) -> FsResult<Vec<(u64, u64)>> {
        self.op_write_with(ino, offset, data, now, false)
    }

    /// `op_write`; `keep_ahead`: see `Fs::patched`.
    pub(crate) fn op_write_with(&mut self, ino: Ino, offset: u64, data: &[u8], now: Ts, keep_ahead: bool) -> FsResult<Vec<(u64, u64)>> {
        let n = self.node(ino)?;
        match n.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(errno::EISDIR),
            _ => return Err(errno::EINVAL),
        }
        let end = offset.checked_add(data.len() as u64).ok_or(errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(errno::EFBIG);
        }
        let mut changed = Vec::new();
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let take = ((CHUNK - within as u64).min(end - pos)) as usize;
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + take];
            let whole = within == 0 && take as u64 == CHUNK;
            let patched = if whole {
                None
            } else {
                self.patched(ino, idx, within as u32, src, keep_ahead)?
            };
            let c = if let Some((c, runs)) = patched {
                changed.extend(runs.into_iter().map(|(a, b)| (pos + a as u64, pos + b as u64)));
                c
            } else if whole {
                changed.push((pos, pos + take as u64));
                Chunk::Buf(src.to_vec())
            } else if matches!(self.node(ino)?.chunks.get(&idx), Some(Chunk::Buf(_))) {
                changed.push((pos, pos + take as u64));
                self.write_in_buf(ino, idx, within, src)?;
                pos += take as u64;
                continue;
            } else {
                changed.push((pos, pos + take as u64));
                let mut buf = self.chunk(self.node(ino)?, idx)?.unwrap_or_default();
                if buf.len() < within + take {
                    buf.resize(within + take, 0);
                }
                buf[within..within + take].copy_from_slice(src);
                Chunk::Buf(buf)
            };
            self.set_chunk(ino, idx, c)?;
            pos += take as u64;
        }
        let n = self.node_mut(ino)?;
        n.inode.size = n.inode.size.max(end);
        n.inode.mtime = now;
        n.inode.ctime = n.inode.ctime.max(now); // (`Stamp::Kernel`: unchanged)
        self.touch(ino);
        // Back-to-back ranges (a piece spanning chunks) as one.
        changed.dedup_by(|next, prev| {
            let joins = prev.1 == next.0;
            if joins {
                prev.1 = next.1;
            }
            joins
        });
        Ok(changed)
    }

    /// A write into a chunk the overlay holds as bytes, in place: what `set_chunk` would do
    /// with a copy of the chunk, without the copy (a stream of 4 KiB writes, as NFS clients
    /// send, copied the growing chunk at each one). A chunk grown past its first write is
    /// given its whole size at once, so that a stream does not reallocate it four times.
    fn write_in_buf(&mut self, ino: Ino, idx: u64, within: usize, src: &[u8]) -> FsResult<()> {
        let n = self.node_mut(ino)?;
        let Some(Chunk::Buf(b)) = n.chunks.get_mut(&idx) else {
            unreachable!("write_in_buf of a chunk that is not bytes")
        };
        let (old, end) = (b.len(), within + src.len());
        assert!(end as u64 <= CHUNK, "a write past its chunk");
        if end > old {
            if end > b.capacity() && within > 0 {
                b.reserve_exact(CHUNK as usize - old);
            }
            if within > old {
                b.resize(within, 0); // a gap after the chunk's bytes reads as zeros
            }
        }
        let over = (b.len() - within).min(src.len());
        b[within..within + over].copy_from_slice(&src[..over]);
        b.extend_from_slice(&src[over..]);
        let (old, new) = (old as u64, b.len() as u64);
        n.stored_len_changed(idx, old, new);
        self.dirty_bytes += new - old;
        self.dirty.insert(ino);
        Ok(())
    }

    /// A small write to a committed chunk as patches over its block (copy-on-abundant-write),
    /// or `None` when the chunk has no block (committed or written ahead) or its runs would
    /// exceed `PATCH_MAX` (`LAYERED_MAX` in a file of several chunks): then the chunk is
    /// rewritten whole.
    /// `keep_ahead`: the chunk's layers written ahead stay (the write's runs go ahead too,
    /// `layer_ahead.rs`); otherwise the runs are journaled as bytes, and those layers are
    /// let go of, the next checkpoint writing the chunk's new runs as one layer.
    fn patched(&self, ino: Ino, idx: u64, within: u32, src: &[u8], keep_ahead: bool) -> FsResult<Option<(Chunk, Vec<(usize, usize)>)>> {
        let n = self.node(ino)?;
        let (base, mut patches, sums, owned, ahead) = match n.chunks.get(&idx) {
            Some(Chunk::Patched { base, patches, owned, ahead }) => {
                let ahead = if keep_ahead { ahead.clone() } else { Vec::new() };
                (*base, patches.clone(), None, *owned, ahead)
            }
            // A block written ahead that no checkpoint has taken yet (a file written and then
            // overwritten in places, as a database or a VM image is): patches over it too.
            Some(Chunk::Block(p)) => (*p, Patches::default(), None, true, Vec::new()),
            // Inline bytes are rewritten whole: a record that changes anyway, and small.
            None if Self::has_inline(n, idx) => return Ok(None),
            None => match self.stored_chunk(n, idx)? {
                Some(s) => (s.block, s.patches, Some(s.sums), false, Vec::new()),
                None => return Ok(None),
            },
            Some(_) => return Ok(None),
        };
        // A small write is kept as it came: comparing it with the block would cost a read of
        // the whole block (64 KiB, perhaps from the disk) to save at most BLIND_MAX patch
        // bytes. Such writes come with `-o cache=writethrough` or O_DIRECT; the writeback cache
        // sends whole pages, of which often only a few bytes changed, so those are compared.
        let runs = if src.len() <= BLIND_MAX {
            vec![(0, src.len())]
        } else {
            // What the written range holds now: those pages of the block (verified by their
            // sums where it has them), with the patches laid over.
            // (The stored chunk's sums came with it; an overlay's base looks its up.)
            let sums = match sums {
                Some(s) => s,
                None => self.block_sums(n, idx, &base)?,
            };
            let mut cur = self.read_window(n, idx, &base, sums.as_ref(), within as usize, src.len())?;
            for (o, d) in patches.within(within as usize, src.len()) {
                cur[o..o + d.len()].copy_from_slice(d);
            }
            changed_runs(&cur, 0, src)
        };
        // A file of several chunks keeps up to LAYERED_MAX bytes of runs a chunk (stored as
        // layers, `Fs::patched_value`); a file of one keeps its runs in its record, PATCH_MAX.
        let layered = n.inode.size > CHUNK;
        let max = if layered { LAYERED_MAX } else { PATCH_MAX };
        for &(a, b) in &runs {
            patches.write(within + a as u32, &src[a..b]);
            if patches.bytes() > max || (layered && patches.run_count() > LAYER_RUNS_MAX) {
                return Ok(None);
            }
        }
        Ok(Some((Chunk::Patched { base, patches, owned, ahead }, runs)))
    }

    /// Replays a carried record: each chunk's patch list over its committed block.
    pub(crate) fn op_carry(
        &mut self,
        ino: Ino,
        size: Option<u64>,
        times: [Option<Ts>; 3],
        chunks: &[(u64, Patches)],
    ) -> FsResult<()> {
        if self.node(ino)?.inode.kind != Kind::File {
            return Err(errno::EINVAL);
        }
        for (idx, patches) in chunks {
            let Some(s) = self.stored_value(self.node(ino)?, *idx)? else {
                log::error!(
                    "carried patches of oid {} name chunk {idx}, which is not stored",
                    self.node(ino)?.inode.oid
                );
                return Err(errno::EIO);
            };
            let c = Chunk::Patched {
                base: s.block,
                patches: patches.clone(),
                owned: false,
                ahead: Vec::new(),
            };
            self.set_chunk(ino, *idx, c)?;
        }
        let n = self.node_mut(ino)?;
        let i = &mut n.inode;
        i.size = size.unwrap_or(i.size);
        for (t, new) in [&mut i.atime, &mut i.mtime, &mut i.ctime].into_iter().zip(times) {
            *t = new.unwrap_or(*t);
        }
        self.touch(ino);
        Ok(())
    }

    /// Whether `ino` lies in directory `dir`'s subtree, following clone roots to their mount
    /// entries; `true` when unsure (what it guards is folding, which is always safe).
    pub(crate) fn lies_under(&self, ino: Ino, dir: Ino) -> bool {
        let mut cur = ino;
        for _ in 0..1 << 16 {
            if cur == dir {
                return true;
            }
            let Some(n) = self.nodes.get(&cur) else { return true };
            cur = match &n.loc {
                Loc::Entry { parent, .. } => *parent,
                Loc::Root if n.ns == 1 => return false,
                Loc::Root => match self.namespaces.get(&n.ns).and_then(|ns| ns.mounted_at.as_ref()) {
                    Some((parent, _)) => *parent,
                    None => return true,
                },
                Loc::Linked | Loc::Gone => return true,
            };
        }
        true
    }

    /// Chunk indexes at or after `from` that hold data, stored or in the overlay.
    fn data_chunks_from(&self, n: &Node, from: u64, limit: usize) -> FsResult<Vec<u64>> {
        let mut stored = Vec::new();
        let mut err = None;
        self.vol
            .forest
            .scan(n.inode.tree(), &chunk_key(from), &mut |k, _| match chunk_index(k) {
                Ok(i) => {
                    stored.push(i);
                    stored.len() < limit + n.chunks.len()
                }
                Err(e) => {
                    err = Some(e);
                    false
                }
            })
            .map_err(eio)?;
        if let Some(e) = err {
            return Err(eio(e));
        }
        if from == 0 && (Self::has_inline(n, 0) || n.inode.direct.is_some()) {
            stored.push(0);
        }
        let mut all: std::collections::BTreeSet<u64> =
            stored.into_iter().filter(|i| !n.chunks.contains_key(i)).collect();
        for (i, c) in n.chunks.range(from..) {
            if *c != Chunk::Hole {
                all.insert(*i);
            }
        }
        Ok(all.into_iter().take(limit).collect())
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> FsResult<()> {
        let n = self.node(ino)?;
        let old = n.inode.size;
        if size < old {
            let first_dead = size.div_ceil(CHUNK);
            loop {
                let n = self.node(ino)?;
                let dead = self.data_chunks_from(n, first_dead, 4096)?;
                if dead.is_empty() {
                    break;
                }
                for idx in dead {
                    self.set_chunk(ino, idx, Chunk::Hole)?;
                }
            }
            let within = (size % CHUNK) as usize;
            if within > 0 {
                let idx = size / CHUNK;
                if let Some(mut buf) = self.chunk(self.node(ino)?, idx)? {
                    if buf.len() > within {
                        buf.truncate(within);
                        self.set_chunk(ino, idx, Chunk::Buf(buf))?;
                    }
                }
            }
        }
        if size < old {
            // Truncating frees what was preallocated past the new end, as on ext4.
            self.unpreallocate(ino, size, u64::MAX)?;
        }
        let n = self.node_mut(ino)?;
        n.inode.size = size;
        n.inode.ctime = Ts::now().max(n.inode.ctime);
        self.touch(ino);
        Ok(())
    }

    /// Zeroes `[offset, end)` of a file without changing its size.
    fn zero_range(&mut self, ino: Ino, offset: u64, end: u64) -> FsResult<()> {
        let size = self.node(ino)?.inode.size;
        let end = end.min(size);
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK;
            let within = (pos % CHUNK) as usize;
            let take = ((CHUNK - within as u64).min(end - pos)) as usize;
            let n = self.node(ino)?;
            if within == 0 && (take as u64 == CHUNK || pos + take as u64 >= size) {
                if self.chunk_len(n, idx)? > 0 || n.chunks.contains_key(&idx) {
                    self.set_chunk(ino, idx, Chunk::Hole)?;
                }
            } else if let Some(mut buf) = self.chunk(n, idx)? {
                if within < buf.len() {
                    let stop = (within + take).min(buf.len());
                    buf[within..stop].fill(0);
                    self.set_chunk(ino, idx, Chunk::Buf(buf))?;
                }
            }
            pos += take as u64;
        }
        Ok(())
    }

    pub fn fallocate(&mut self, ino: Ino, mode: i32, offset: u64, len: u64) -> FsResult<()> {
        self.writable()?;
        self.rw(ino)?;
        let now = Ts::now();
        let target = self.target(ino);
        self.op_fallocate(ino, mode, offset, len, now)?;
        self.log(|| {
            target.map(|ino| Record::Fallocate {
                ino,
                mode,
                offset,
                len,
                time: now,
            })
        })?;
        self.maybe_checkpoint()
    }

    pub(crate) fn op_fallocate(&mut self, ino: Ino, mode: i32, offset: u64, len: u64, now: Ts) -> FsResult<()> {
        let n = self.node(ino)?;
        match n.inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(errno::EISDIR),
            _ => return Err(errno::ENODEV),
        }
        if len == 0 {
            return Err(errno::EINVAL);
        }
        let end = offset.checked_add(len).ok_or(errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(errno::EFBIG);
        }
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        if mode & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(errno::EOPNOTSUPP);
        }
        if punch && (!keep || zero) {
            return Err(errno::EINVAL);
        }
        if !punch && !zero {
            self.room_for_allocation(len)?;
        }
        if punch || zero {
            self.zero_range(ino, offset, end)?;
            let n = self.node_mut(ino)?;
            n.inode.mtime = now;
            n.inode.ctime = now;
        }
        // Nothing is written ahead (blocks are written at checkpoints, never in place): the
        // ranges are noted for st_blocks (`prealloc.rs`). A punched hole frees them; a zeroed
        // range keeps what it had.
        if punch {
            self.unpreallocate(ino, offset, end)?;
        } else if !zero {
            self.preallocate(ino, offset, end)?;
        }
        let n = self.node_mut(ino)?;
        if !keep && end > n.inode.size {
            n.inode.size = end;
            n.inode.ctime = now;
        }
        self.touch(ino);
        Ok(())
    }

    /// SEEK_DATA and SEEK_HOLE, at chunk granularity.
    pub fn lseek(&mut self, ino: Ino, offset: u64, whence: i32) -> FsResult<u64> {
        let n = self.node(ino)?;
        let size = n.inode.size;
        if offset >= size {
            return Err(errno::ENXIO);
        }
        let idx = offset / CHUNK;
        match whence {
            libc::SEEK_DATA => {
                let next = self.data_chunks_from(n, idx, 1)?;
                match next.first() {
                    Some(&i) if i * CHUNK < size => Ok(offset.max(i * CHUNK)),
                    _ => Err(errno::ENXIO),
                }
            }
            libc::SEEK_HOLE => {
                let mut want = idx;
                loop {
                    let got = self.data_chunks_from(n, want, 256)?;
                    for i in &got {
                        if *i != want {
                            return Ok(offset.max(want * CHUNK).min(size));
                        }
                        want += 1;
                    }
                    if got.len() < 256 {
                        return Ok(offset.max(want * CHUNK).min(size));
                    }
                }
            }
            _ => Err(errno::EINVAL),
        }
    }

    /// Copies a byte range between files of the store. Whole chunks at chunk-aligned
    /// offsets share the source's committed blocks (a reflink); the rest is copied.
    pub fn copy_range(&mut self, from: Ino, off_in: u64, to: Ino, off_out: u64, len: u64) -> FsResult<u64> {
        self.writable()?;
        self.rw(to)?;
        let size = self.node(from)?.inode.size;
        let len = len.min(size.saturating_sub(off_in));
        // Only committed blocks can be shared. When enough of the range was written since
        // the last checkpoint (`cp` of a file just made: coreutils copies with
        // copy_file_range), it is committed first, as btrfs writes back a range it is about
        // to clone; below that, copying the bytes costs less than the checkpoint.
        if off_in % CHUNK == off_out % CHUNK {
            let (first, end) = (off_in.div_ceil(CHUNK), (off_in + len) / CHUNK);
            let n = self.node(from)?;
            let pending = n
                .chunks
                .range(first..end.max(first))
                .filter(|(_, c)| matches!(c, Chunk::Buf(_) | Chunk::Block(_) | Chunk::Shared(_)))
                .count() as u64;
            if pending >= COMMIT_TO_SHARE {
                self.checkpoint().map_err(eio)?;
            }
        }
        let mut done = 0;
        while done < len {
            let (pin, pout) = (off_in + done, off_out + done);
            if pin % CHUNK == 0 && pout % CHUNK == 0 && len - done >= CHUNK {
                let want = ((len - done) / CHUNK).min(1024);
                let n = self.node(from)?;
                let mut run = Vec::new();
                let mut sums = Vec::new();
                for i in 0..want {
                    let idx = pin / CHUNK + i;
                    let c = match n.chunks.get(&idx) {
                        None if Self::has_inline(n, idx) => break,
                        None => match self.stored_value(n, idx)? {
                            // A plain whole block is shared; a patched one is copied below.
                            // Its page sums go along.
                            Some(s) => match s.plain_full() {
                                Some(p) => {
                                    sums.extend(s.sums.map(|x| (p.addr, x)));
                                    Some(p)
                                }
                                None => break,
                            },
                            None => None,
                        },
                        Some(Chunk::Hole) => None,
                        // Not committed yet (or partial): copied below.
                        Some(_) => break,
                    };
                    run.push(c);
                }
                self.vol.fresh_sums.extend(sums);
                if !run.is_empty() {
                    self.share_chunks(to, pout / CHUNK, &run)?;
                    done += run.len() as u64 * CHUNK;
                    continue;
                }
            }
            let step = (CHUNK - pin % CHUNK).min(len - done).min(4 << 20) as u32;
            let data = self.read(from, pin, step)?;
            if data.is_empty() {
                break;
            }
            self.write(to, pout, &data)?;
            done += data.len() as u64;
        }
        Ok(done)
    }

    /// Makes block `ptr` of a remote pack chunk `idx` of file `ino` (a pull, issue 41): the
    /// file then reads it from the remote. `shared`: the block is installed elsewhere already
    /// and gains a reference; the first installation holds the block's one reference.
    pub fn attach_chunk(&mut self, ino: Ino, idx: u64, ptr: BlockPtr, shared: bool) -> FsResult<()> {
        self.writable()?;
        self.rw(ino)?;
        let now = Ts::now();
        let target = self.target(ino);
        self.op_attach_chunk(ino, idx, ptr, shared, now)?;
        self.log(|| target.map(|ino| Record::AttachChunk { ino, idx, ptr, shared, time: now }))?;
        self.maybe_checkpoint()
    }

    pub(crate) fn op_attach_chunk(&mut self, ino: Ino, idx: u64, ptr: BlockPtr, shared: bool, now: Ts) -> FsResult<()> {
        let n = self.node(ino)?;
        if n.inode.kind != Kind::File || !ptr.is_remote() || ptr.kind != scion_store::BlockKind::Data || ptr.len == 0 || u64::from(ptr.len) > CHUNK {
            return Err(errno::EINVAL.with(format!("{ptr} is not a remote data block")));
        }
        let end = idx.checked_mul(CHUNK).and_then(|e| e.checked_add(u64::from(ptr.len))).filter(|e| *e <= MAX_FILE_SIZE).ok_or(errno::EFBIG)?;
        if shared {
            self.vol.forest.refs.inc(&ptr);
        }
        self.set_chunk(ino, idx, Chunk::Shared(ptr))?;
        let n = self.node_mut(ino)?;
        n.inode.size = n.inode.size.max(end);
        n.inode.mtime = now;
        n.inode.ctime = n.inode.ctime.max(now);
        self.touch(ino);
        Ok(())
    }

    fn share_chunks(&mut self, ino: Ino, first: u64, chunks: &[Option<BlockPtr>]) -> FsResult<()> {
        let now = Ts::now();
        let target = self.target(ino);
        self.op_put_chunks(ino, first, chunks, now, Put::Shared)?;
        self.log(|| {
            target.map(|ino| Record::ShareChunks {
                ino,
                first,
                chunks: chunks.to_vec(),
                time: now,
            })
        })?;
        self.maybe_checkpoint()
    }

    // ----- extended attributes -------------------------------------------------------------

    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        if ino & SNAPDIR_BIT != 0 {
            return Err(errno::ENODATA); // `.snapshot` has no record, so no xattrs
        }
        let n = self.node(ino)?;
        if name == CAPABILITY_XATTR && self.hides_privileges(n) {
            return Err(errno::ENODATA);
        }
        n.inode.xattrs.get(name).cloned().ok_or(errno::ENODATA)
    }

    pub fn listxattr(&mut self, ino: Ino) -> FsResult<Vec<Vec<u8>>> {
        if ino & SNAPDIR_BIT != 0 {
            return Ok(Vec::new());
        }
        let n = self.node(ino)?;
        let hide = self.hides_privileges(n);
        Ok(n.inode.xattrs.keys().filter(|k| !(hide && k.as_slice() == CAPABILITY_XATTR)).cloned().collect())
    }

    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        self.writable()?;
        self.rw(ino)?;
        self.room_for((name.len() + value.len()) as u64)?;
        let now = Ts::now();
        let target = self.target(ino);
        self.op_setxattr(ino, name, value, flags, now)?;
        self.log(|| {
            target.map(|ino| Record::SetXattr {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
                flags,
                time: now,
            })
        })
    }

    pub(crate) fn op_setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], flags: i32, now: Ts) -> FsResult<()> {
        if name.is_empty() || name.len() > MAX_XATTR_NAME {
            return Err(errno::ERANGE);
        }
        if value.len() > MAX_XATTR_VALUE {
            return Err(errno::E2BIG);
        }
        let n = self.node_mut(ino)?;
        let exists = n.inode.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(errno::ENODATA);
        }
        let old = n.inode.xattrs.get(name).map(|v| name.len() + v.len()).unwrap_or(0);
        if n.inode.xattr_bytes() - old + name.len() + value.len() > MAX_XATTR_TOTAL {
            return Err(errno::ENOSPC);
        }
        if name == acl::ACCESS || name == acl::DEFAULT {
            let e = acl::parse(value).ok_or(errno::EINVAL)?;
            if name == acl::ACCESS {
                // The mode follows the ACL; an ACL that says no more than a mode is not kept.
                let (bits, equiv) = acl::equiv_mode(&e);
                n.inode.perm = (n.inode.perm & 0o7000) | bits;
                if equiv {
                    n.inode.xattrs.remove(name);
                    n.inode.ctime = now;
                    self.touch(ino);
                    return Ok(());
                }
            }
        }
        n.inode.xattrs.insert(name.to_vec(), value.to_vec());
        n.inode.ctime = now;
        self.touch(ino);
        Ok(())
    }

    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> FsResult<()> {
        self.writable()?;
        self.rw(ino)?;
        let now = Ts::now();
        let target = self.target(ino);
        self.op_removexattr(ino, name, now)?;
        self.log(|| {
            target.map(|ino| Record::RemoveXattr {
                ino,
                name: name.to_vec(),
                time: now,
            })
        })
    }

    pub(crate) fn op_removexattr(&mut self, ino: Ino, name: &[u8], now: Ts) -> FsResult<()> {
        let n = self.node_mut(ino)?;
        n.inode.xattrs.remove(name).ok_or(errno::ENODATA)?;
        n.inode.ctime = now;
        self.touch(ino);
        Ok(())
    }

    // ----- durability and space ------------------------------------------------------------

    /// Bytes of the current journal (header and records, synced or not): what replay would
    /// read. The journal's file is longer (it is reused and written ahead).
    pub fn journal_len(&self) -> u64 {
        self.vol.journal.as_ref().map_or(0, |j| j.len)
    }

    /// Makes every acknowledged change durable (the journal is fsynced).
    pub fn fsync(&mut self) -> FsResult<()> {
        if !self.journaled {
            return self.checkpoint_for_sync();
        }
        let t = self.sync_begin(true)?;
        let r = t.run();
        self.sync_end(t, r)
    }

    /// Runs `f` with the fsync that ends a clone or a snapshot owed rather than done
    /// (`fsync_or_owe`); returns what `f` returned and whether a sync is owed. The caller
    /// makes it before telling anyone the command is done (the daemon without the engine
    /// lock, `Engine::fsync`): until then the change is made, and seen, but a crash may undo
    /// it, as for any change not yet synced. Done under the lock, that sync waited for every
    /// pack write before it (a bulk writer's), and every request waited with it.
    pub fn with_sync_owed<R>(&mut self, f: impl FnOnce(&mut Fs) -> R) -> (R, bool) {
        assert!(self.sync_owed.is_none(), "with_sync_owed within with_sync_owed");
        self.sync_owed = Some(false);
        let r = f(self);
        let owed = self.sync_owed.take() == Some(true);
        (r, owed)
    }

    /// The fsync that ends a command whose change is one journaled record (a clone, a
    /// snapshot): done here, or owed to the caller of `with_sync_owed`.
    pub(crate) fn fsync_or_owe(&mut self) -> FsResult<()> {
        match &mut self.sync_owed {
            Some(owed) if self.journaled => {
                *owed = true;
                Ok(())
            }
            _ => self.fsync(),
        }
    }

    /// Stops (or starts again) journaling changes: without a journal, a crash goes back to
    /// the last checkpoint, and `fsync` takes a checkpoint (`journaled` false: mode
    /// `nojournal` of a cube). A switch either way takes a checkpoint first: turning it off,
    /// so nothing journaled before waits on a journal that is no longer written; turning it
    /// on, so the journal starts from a committed state that holds every change made
    /// without it (a record replayed over a checkpoint that lacks what it builds on, a file
    /// in a directory made unjournaled, fails replay; and an fsync acknowledged after the
    /// switch must keep what was written before it).
    pub fn set_journaled(&mut self, on: bool) -> FsResult<()> {
        if on != self.journaled {
            self.checkpoint_for_sync()?;
        }
        self.journaled = on;
        Ok(())
    }

    /// Journals file data with the metadata (mode `data`: see `journal_data`), or not.
    pub fn set_journal_data(&mut self, on: bool) {
        self.journal_data = on;
    }

    /// Says in the store's lock file that this owner is finishing an unmount (a mount of
    /// the store waits for it: `scion_store::StoreLock`).
    pub fn note_unmounting(&mut self, holder: &str) {
        if let Some(l) = self.vol._lock.downcast_mut::<scion_store::StoreLock>() {
            if let Err(e) = l.describe(holder) {
                log::warn!("lock file: {e}");
            }
        }
    }

    /// The filesystem the store lives on.
    pub fn host(&self) -> Host {
        self.vol.host.clone()
    }

    /// Journals whole chunks as unordered and syncs the journal alone in the background
    /// (mode `writeback`: see `writeback`), or not.
    pub fn set_writeback(&mut self, on: bool) {
        self.writeback = on;
    }

    /// Whether the volume is in `writeback` mode.
    pub fn writes_back(&self) -> bool {
        self.writeback
    }

    /// Whether file data is journaled (then nothing is written ahead to the packs).
    pub fn journals_data(&self) -> bool {
        self.journal_data
    }

    /// Whether changes are journaled (see `set_journaled`).
    pub fn journaled(&self) -> bool {
        self.journaled
    }

    /// The fsync of a volume without a journal: a checkpoint, which makes everything durable.
    pub fn checkpoint_for_sync(&mut self) -> FsResult<()> {
        if let Some(why) = &self.vol.failed {
            log::warn!("refusing fsync: {why}");
            return Err(errno::EIO);
        }
        self.checkpoint().map_err(eio)
    }

    /// `fsync` in three steps, so that the engine lock need not be held while the disk
    /// flushes: `sync_begin` (under the lock) writes the journal's buffer out and notes what
    /// must become durable, `SyncTicket::run` (without it) makes it so, `sync_end` (under the
    /// lock again) records the outcome. Everything acknowledged before `sync_begin` is durable
    /// once `sync_end` returns Ok. `settle`: a sync a caller asked for (fsync, COMMIT), not
    /// the background's, which first settles a small file written in pieces (`settle_run`).
    pub fn sync_begin(&mut self, settle: bool) -> FsResult<SyncTicket> {
        if let Some(why) = &self.vol.failed {
            log::warn!("refusing fsync: {why}");
            return Err(errno::EIO);
        }
        if settle {
            crate::fold_policy::note_sync();
            self.settle_run()?;
            self.synced_at = Some(std::time::Instant::now());
        }
        let zeros = self.vol.journal.as_ref().map_or(0, |j| j.zeros_written());
        let prepared = self.vol.journal.as_mut().map(|j| j.prepare_sync()).transpose();
        self.io.journal += self.vol.journal.as_ref().map_or(0, |j| j.zeros_written() - zeros);
        let journal = match prepared {
            Ok(j) => j.flatten(),
            Err(e) => {
                self.sync_failed(&e);
                return Err(eio(e));
            }
        };
        Ok(SyncTicket {
            store: self.vol.forest.store.clone(),
            journal,
            named_writes: self.named_writes,
        })
    }

    /// See `sync_begin`.
    pub fn sync_end(&mut self, t: SyncTicket, r: Result<()>) -> FsResult<()> {
        if let Err(e) = r {
            self.sync_failed(&e);
            return Err(eio(e));
        }
        if let (Some(j), Some(s)) = (self.vol.journal.as_mut(), &t.journal) {
            j.synced(s);
        }
        Ok(())
    }

    /// File data waiting in the daemon's memory (buffered partial chunks and patches).
    pub fn buffered_bytes(&self) -> u64 {
        self.dirty_bytes
    }

    /// What the kernel must be told to forget, oldest first; the caller sends it without
    /// the engine lock (the kernel may call back into the daemon while it invalidates).
    pub fn take_invalidations(&mut self) -> Vec<Inval> {
        std::mem::take(&mut self.kernel_inval)
    }

    /// Whether an `fsync` would have anything to do.
    pub fn needs_sync(&self) -> bool {
        self.vol.failed.is_none() && self.vol.journal.as_ref().is_some_and(|j| j.has_unsynced())
    }

    /// After a failed fsync the host may have dropped the unsynced data while marking it
    /// clean, so a retry could "succeed" without it: the filesystem refuses changes until a
    /// remount replays what the disk really holds. A failed write of the journal buffer
    /// (ENOSPC, say) reached no sync and is retried instead.
    fn sync_failed(&mut self, e: &Error) {
        let sync_call = matches!(e, Error::Io { context, .. } | Error::NoSpace(context) if context.contains("fsync"));
        if sync_call {
            let why = format!("fsync failed ({e}); unsynced changes may be lost");
            log::error!("{why}; refusing changes until remount");
            self.vol.failed = Some(why);
        }
    }

    /// Periodic work: checkpoints when changes are old enough. (The caller syncs the journal
    /// first, without the engine lock: `sync_begin`.)
    /// The background's periodic work under the engine lock: idle directories swept, and a
    /// checkpoint begun when one is due (changes older than `checkpoint_after`, or more than
    /// `fold_policy`: `fold_batch` inodes waiting while someone would wait on the fold), for the caller to sync without the lock and commit
    /// (`checkpoint_end`).
    pub fn tick_begin(&mut self, checkpoint_after: std::time::Duration) -> Result<Option<crate::PackSync>> {
        if self.vol.failed.is_some() {
            return Ok(None);
        }
        self.sweep_noted_if_due();
        self.vol.forest.store.release_idle_buffers();
        let due = self.last_checkpoint.elapsed() >= checkpoint_after && self.has_changes();
        if due || self.fold_due() {
            return self.checkpoint_begin();
        }
        Ok(None)
    }

    /// Whether a checkpoint now would commit nothing the committed state lacks: no change in
    /// memory or the journal past its carried head, no count, relocation or freed block a
    /// checkpoint would write, and a volume that has not failed (whose checkpoint fails).
    pub(crate) fn committed_is_current(&self) -> bool {
        !self.has_changes()
            && !self.vol.forest.refs.has_changes()
            && self.vol.forest.freed.is_empty()
            && !self.vol.forest.store.has_relocation_changes()
            && self.vol.failed.is_none()
            && self.committing.is_none()
    }

    /// Whether a checkpoint would commit something (`committed_is_current`'s opposite), on
    /// a volume that has not failed: what the daemon commits, its packs synced without the
    /// engine lock, before pinning the committed state for a command.
    pub fn uncommitted(&self) -> bool {
        !self.committed_is_current() && self.vol.failed.is_none()
    }

    pub fn has_changes(&self) -> bool {
        self.vol.journal.as_ref().is_some_and(|j| j.len > self.journal_floor) || self.pending()
    }

    /// Whether enough waits to be folded for the background to checkpoint now, however young
    /// the changes: inodes (`fold_policy::early_batch`), or a quarter of the chunks written
    /// ahead at which a request would take the checkpoint itself (`maybe_checkpoint`), under
    /// the lock with its pack sync: beside a bulk writer that held every request up 80-100 ms
    /// each 4 GiB. Folded by the background, a fold of 1 GiB of them held it 21-30 ms.
    pub fn fold_due(&self) -> bool {
        let inodes = self.fold_cost.batch().is_some_and(|n| self.unfolded() >= n);
        (inodes || self.pending_chunks >= PENDING_CHUNK_LIMIT / 4) && self.vol.failed.is_none()
    }

    /// Whether the next checkpoint's fold would hold requests up for more than a few
    /// milliseconds (256 inodes: about 5 ms here).
    pub fn much_to_fold(&self) -> bool {
        self.unfolded() >= 256 && self.vol.failed.is_none()
    }

    /// How many inodes the next checkpoint folds (carried files cost it little: their
    /// records are reused while they do not change).
    pub(crate) fn unfolded(&self) -> usize {
        self.dirty.len().saturating_sub(self.carried.len())
    }

    /// Something in memory is not in the committed trees (nor carried in the journal) yet.
    pub(crate) fn pending(&self) -> bool {
        self.dirty.iter().any(|i| !self.carried.contains(i))
            || !self.orphan_releases.is_empty()
            || !self.vol.garbage.is_empty()
            || !self.dropped_ns.is_empty()
            || self.namespaces.values().any(|n| n.dirty || !n.links.is_empty())
    }

    pub fn statfs(&self) -> StatFs {
        let st = self.vol.host.space(&self.vol.dir).unwrap_or_default();
        let bsize = st.block_size.max(512);
        let extra = self.reclaimable.values().sum::<u64>() / bsize;
        let st = scion_store::host::HostSpace {
            free: st.free + extra,
            available: st.available + extra,
            ..st
        };
        let inodes: u64 = self.namespaces.values().map(|n| n.inodes).sum();
        // Inodes cost no host inodes; a small record each, so free space bounds them.
        let ffree = st.available * bsize / 256;
        StatFs {
            blocks: st.blocks,
            bfree: st.free,
            bavail: st.available,
            files: inodes + ffree,
            ffree,
            bsize: bsize as u32,
            namelen: MAX_NAME as u32,
        }
    }

    pub fn store_dir(&self) -> &Path {
        &self.vol.dir
    }

    pub fn block_store(&self) -> &Arc<BlockStore> {
        &self.vol.forest.store
    }

    /// Flushes everything into a final checkpoint.
    pub fn close(mut self) -> Result<()> {
        self.close_in_place()
    }

    /// `close` through a reference (the daemon's engine may still be shared with a control
    /// command when the mount ends): the final checkpoint, then every later change is
    /// refused.
    pub fn close_in_place(&mut self) -> Result<()> {
        let r = self.close_inner();
        self.vol
            .failed
            .get_or_insert_with(|| "the filesystem is unmounted".to_string());
        r
    }

    fn close_inner(&mut self) -> Result<()> {
        // The last checkpoint punches everything still waiting: no thread is left to do it.
        self.vol.punch_later = false;
        if self.vol.failed.is_none() {
            // Everything into the trees: an unmounted store has an empty journal.
            self.checkpoint_with(Fold::All)?;
            // ... and needs no journal space: the current journal holds nothing, and the
            // other file held the generation before, which the checkpoint made dead. Up to
            // 64 MiB each otherwise (journal.rs, `REUSE_LIMIT`).
            if let Some(j) = &mut self.vol.journal {
                j.trim()?;
            }
            let old = crate::journal::journal_path(
                &self.vol.dir,
                self.vol.generation.wrapping_sub(1),
                scion_store::FORMAT_VERSION,
            );
            if self.vol.host.exists(&old) {
                self.vol
                    .host
                    .open(&old, scion_store::OpenMode::ReadWrite)
                    .and_then(|f| f.set_len(0))
                    .map_err(|e| Error::io(format!("truncation of {}", old.display()), e))?;
            }
            // Pack space kept for writes that will not come now.
            self.vol.forest.store.end_streams();
            // The content hashes computed, for the next mount (a cache: a failure is logged).
            if !self.read_only {
                if let Err(e) = self.hash_memo.save(&self.vol.host, &self.vol.dir) {
                    log::warn!("{e}: the next mount computes content hashes again");
                }
            }
            // Closed whole: the next open need not look for what a crash leaves.
            crate::checkpoint::mark_closed(&self.vol.host, &self.vol.dir, true)?;
        }
        Ok(())
    }
}

/// Bytes of a node's overlay held in memory.
/// Counts reads in flight outside the engine lock. A checkpoint waits for them to finish
/// before punching freed blocks; new reads cannot start meanwhile, because planning one
/// needs the engine, which the checkpoint holds.
#[derive(Default)]
pub(crate) struct ReadGate {
    state: std::sync::Mutex<GateState>,
    idle: std::sync::Condvar,
}

#[derive(Default)]
struct GateState {
    reads: usize,
    /// Threads in `wait_idle`: the last read out wakes them only if there are any (a
    /// `notify_all` is a futex syscall whether or not anyone waits, one per read).
    waiters: usize,
}

impl ReadGate {
    fn enter(self: &Arc<Self>) -> GatePass {
        self.state.lock().unwrap().reads += 1;
        GatePass(self.clone())
    }
    pub(crate) fn wait_idle(&self) {
        let mut s = self.state.lock().unwrap();
        s.waiters += 1;
        while s.reads > 0 {
            s = self.idle.wait(s).unwrap();
        }
        s.waiters -= 1;
    }
}

struct GatePass(Arc<ReadGate>);

impl Drop for GatePass {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap();
        assert!(s.reads > 0, "a read left the gate twice");
        s.reads -= 1;
        if s.reads == 0 && s.waiters > 0 {
            self.0.idle.notify_all();
        }
    }
}

enum Part {
    Bytes(Vec<u8>),
    Block {
        ptr: BlockPtr,
        within: usize,
        len: usize,
        oid: u64,
        /// The block's page sums, if known: a short read then reads and verifies its pages
        /// only, a long one verifies the whole block by them instead of its hash.
        sums: Option<crate::delta::Sums>,
    },
}

/// A read resolved by [`Fs::read_plan`].
/// What one `fsync` must make durable; see `Fs::sync_begin`.
pub struct SyncTicket {
    store: Arc<BlockStore>,
    journal: Option<JournalSync>,
    /// The packs' writes the journal's records name blocks of (`Fs::named_writes`).
    named_writes: u64,
}

impl SyncTicket {
    /// The disk work of an `fsync`: the packs, then the journal whose records name their
    /// blocks. Needs no lock of the caller's (`BlockStore::sync_then` orders syncs). When
    /// a finished sync already covered every block the journal names, the journal alone:
    /// an fsync of metadata and small writes (journaled as bytes) then waits neither for the
    /// background's checkpoint, whose sync writes out its trees and syncs the packs, nor
    /// for a bulk writer's pages in the same packs (issue 38).
    pub fn run(&self) -> Result<()> {
        if self.store.synced_through(self.named_writes) {
            return self.journal.as_ref().map_or(Ok(()), |j| j.run());
        }
        self.store
            .sync_then(&|| self.journal.as_ref().map_or(Ok(()), |j| j.run()))
    }

    /// The journal alone, packs unsynced: the background sync of a `writeback` volume,
    /// whose records say their blocks may not be on the disk yet.
    pub fn run_journal_only(&self) -> Result<()> {
        self.journal.as_ref().map_or(Ok(()), |j| j.run())
    }
}

/// What blocks `op_put_chunks` installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// Whole chunks written ahead for the file.
    Ahead,
    /// The same, the last block the file's tail: as long as the file's bytes in its chunk.
    Tail,
    /// Committed blocks of another file (copy_file_range): each gains a reference.
    Shared,
}

/// Who stamps a write's mtime and ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// The engine, now.
    Now,
    /// The kernel: with the writeback cache it keeps a file's times, stamps writes from its own
    /// clock and sends the times in a SETATTR (before an fsync returns, at close, at
    /// writeback). Stamping here too would store a time the kernel never showed: a remount
    /// would change the file's mtime, and the kernel, seeing no change of its own in the same
    /// clock tick, would never send its time to correct it.
    Kernel,
}

/// The whole chunks of one write, in a pack ahead of the write itself (`write_ahead`).
#[derive(Debug, Default)]
pub struct WrittenAhead {
    /// Index of the first whole chunk.
    pub(crate) first: u64,
    /// Each whole chunk's block (`None`: zeros, a hole); empty if the write has none.
    pub(crate) chunks: Vec<Option<BlockPtr>>,
    /// The blocks' page sums, by block address (computed here, outside the engine lock).
    pub(crate) sums: Vec<(u64, crate::delta::Sums)>,
}

/// Writes the whole 64 KiB chunks of a write of `data` at `offset` to the packs, each stretch
/// of non-zero ones with one write. Needs only the block store, not the engine: the FUSE
/// adapter calls it before taking the engine lock, so two writers' pack writes overlap (a
/// direct write of 1 MiB waits ~1 ms for the device here). `Fs::write_with` then journals them.
/// `key` names the file (its inode number): its chunks go on from where its last ones lie
/// in the pack, so that a file written front to back lands back to back.
pub fn write_ahead(store: &BlockStore, key: u64, offset: u64, data: &[u8]) -> FsResult<WrittenAhead> {
    let end = offset.checked_add(data.len() as u64).ok_or(errno::EFBIG)?;
    let first_full = offset.div_ceil(CHUNK);
    let last_full = end / CHUNK; // exclusive
    let mut ahead = WrittenAhead {
        first: first_full,
        chunks: Vec::new(),
        sums: Vec::new(),
    };
    let at = |idx: u64| (idx * CHUNK - offset) as usize;
    let mut idx = first_full;
    while idx < last_full {
        let zero = |i: u64| data[at(i)..at(i + 1)].iter().all(|b| *b == 0);
        if zero(idx) {
            let mut stop = idx + 1;
            while stop < last_full && zero(stop) {
                stop += 1;
            }
            ahead.chunks.extend((idx..stop).map(|_| None));
            store.note_zero_chunks(key, idx, stop);
            idx = stop;
            continue;
        }
        let mut stop = idx + 1;
        while stop < last_full && !zero(stop) {
            stop += 1;
        }
        let run = &data[at(idx)..at(stop)];
        // (The page sums are made beside the pack write.)
        let (ptrs, sums) = store.write_data_run_for(key, idx, run, CHUNK as usize).map_err(FsError::from)?;
        ahead.sums.extend(ptrs.iter().map(|p| p.addr).zip(sums.into_iter().map(Into::into)));
        ahead.chunks.extend(ptrs.into_iter().map(Some));
        idx = stop;
    }
    Ok(ahead)
}

/// A file's last, partial chunk written to a pack as its tail block (`Put::Tail`), with the
/// block's page sums.
pub(crate) fn write_tail(store: &BlockStore, bytes: &[u8]) -> FsResult<(BlockPtr, crate::delta::Sums)> {
    let p = store.write(scion_store::BlockKind::Data, bytes)?;
    Ok((p, scion_store::page_sums(bytes).into()))
}

/// A block part of a read: where it goes in the reply, the block, where in it and how much,
/// and the block's page sums if known.
type RunPart = (usize, BlockPtr, usize, usize, Option<crate::delta::Sums>);

/// READs up to this long are taken for random accesses (the kernel filling a page before a
/// small write, a 4 KiB random read): a partial block they need is read past the host's page
/// cache (`BlockStore::read_shared`). Longer ones come from readahead, which the host's own
/// readahead of the pack serves well.
const RANDOM_READ_MAX: usize = 16 << 10;
/// A write past a file's start gives its tail to a pack at once (`Fs::tail_ahead`) only when
/// at least this long: the kernel's writeback of a file longer than a FUSE WRITE (1 MiB)
/// ends in such a piece; shorter ones past the start are a stream of small writes.
const TAIL_AHEAD_MIN: usize = 256 << 10;
/// How long after a caller's sync its volume counts as one whose callers sync (`tail_ahead`).
const SYNCING: std::time::Duration = std::time::Duration::from_secs(2);
/// Reads from this far into a file on are the body of a long sequential read, whose long runs
/// go past the host's page cache (`BlockStore::read_whole_into`): the mount's readahead already
/// streams ahead, and the host's cache only cost the daemon a second copy of every byte. Reads
/// nearer the start keep it: the host's readahead of a pack then fetches the files laid out
/// after this one, which a cold `grep -r` over many small files lives on.
const STREAM_FROM: u64 = 8 << 20;

pub struct ReadPlan {
    len: usize,
    parts: Vec<(usize, Part)>,
    /// Deep into a file: long runs are read past the host's page cache (see `STREAM_FROM`).
    streaming: bool,
    store: Arc<BlockStore>,
    #[allow(dead_code)]
    gate: GatePass,
}

impl ReadPlan {
    /// Bytes the read returns (the request, cut at the end of the file).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The plan, reading through the host's page cache however deep into the file it lies.
    /// For readers with no page cache of their own in this kernel (NFS clients): for them the
    /// host's cache is the only one, and what `will_need` asked the host to fetch ahead is
    /// there, where a read past the cache would go to the disk for every request.
    pub fn through_host_cache(mut self) -> Self {
        self.streaming = false;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if the host holds every stored byte this plan reads in its cache: executing it
    /// then waits for no disk (a hint, stale as soon as it is given).
    pub fn cached(&self) -> bool {
        self.store.cached(&self.stored())
    }

    /// The stored blocks this plan reads, in order.
    fn stored(&self) -> Vec<BlockPtr> {
        self.parts
            .iter()
            .filter_map(|(_, p)| match p {
                Part::Block { ptr, .. } => Some(*ptr),
                Part::Bytes(_) => None,
            })
            .collect()
    }

    /// Asks the host to start reading the stored blocks this plan would read (a readahead
    /// for a reader that asks for one range at a time, as an NFS client does); returns at once.
    pub fn will_need(&self) {
        self.store.will_need(&self.stored());
    }

    /// Fetches and verifies the blocks into a new buffer; see [`ReadPlan::fill`].
    pub fn execute(self) -> FsResult<Vec<u8>> {
        let mut out = vec![0u8; self.len];
        self.fill(&mut out)?;
        Ok(out)
    }

    /// Fetches and verifies the blocks into `out` (exactly `len()` bytes, whatever they hold:
    /// the FUSE adapter passes the reply buffer itself). Ranges no part covers are holes and
    /// become zeros. Whole blocks lying back to back in a pack are read straight into `out` in
    /// one read and verified there; the rest goes through a per-thread buffer and a copy.
    pub fn fill(&self, out: &mut [u8]) -> FsResult<()> {
        assert_eq!(out.len(), self.len, "read buffer of the wrong size");
        // Parts start in ascending order (patches lie at or after their block's start).
        let mut covered = 0;
        for (at, p) in &self.parts {
            if *at > covered {
                out[covered..*at].fill(0);
            }
            covered = covered.max(at + p.len());
        }
        out[covered.min(self.len)..].fill(0);
        let mut i = 0;
        while i < self.parts.len() {
            match &self.parts[i].1 {
                Part::Bytes(b) => {
                    let at = self.parts[i].0;
                    out[at..at + b.len()].copy_from_slice(b);
                    i += 1;
                }
                Part::Block { oid, .. } => {
                    let run: Vec<RunPart> = self.parts[i..]
                        .iter()
                        .map_while(|(at, p)| match p {
                            Part::Block {
                                ptr, within, len, sums, ..
                            } => Some((*at, *ptr, *within, *len, sums.clone())),
                            Part::Bytes(_) => None,
                        })
                        .collect();
                    self.fill_run(&run, out)
                        .map_err(|e| FsError::from(e).with(format!("read of file oid {oid}")))?;
                    i += run.len();
                }
            }
        }
        Ok(())
    }

    /// One run of consecutive block parts: stretches of whole blocks adjacent in `out` go
    /// through `read_whole_into` (no copy); a partial block through `read_shared` (kept for
    /// the next part of it); stretches the store cannot read in place through `read_run_each`.
    fn fill_run(&self, run: &[RunPart], out: &mut [u8]) -> scion_store::Result<()> {
        let whole = |r: &RunPart| r.2 == 0 && r.3 == r.1.len as usize;
        let mut j = 0;
        while j < run.len() {
            let mut k = j + 1;
            if whole(&run[j]) {
                while k < run.len() && whole(&run[k]) && run[k].0 == run[k - 1].0 + run[k - 1].3 {
                    k += 1;
                }
            }
            let ptrs: Vec<BlockPtr> = run[j..k].iter().map(|r| r.1).collect();
            let (at, end) = (run[j].0, run[k - 1].0 + run[k - 1].3);
            if !whole(&run[j]) {
                let (at, ptr, within, len, sums) = &run[j];
                if let Some(sums) = sums.as_ref().filter(|_| self.len <= RANDOM_READ_MAX) {
                    // A short read of a block with page sums: its pages alone, verified.
                    out[*at..at + len].copy_from_slice(&self.store.read_range(ptr, sums, *within, *len)?);
                    j = k;
                    continue;
                }
                // Part of a block: likely read again soon (the rest of its pages, or the
                // page written back after the kernel filled it).
                let data = self.store.read_shared(&ptrs[0], self.len <= RANDOM_READ_MAX)?;
                out[*at..at + len].copy_from_slice(&data[*within..within + len]);
                j = k;
                continue;
            }
            let sums: Vec<Option<&[u32]>> = run[j..k].iter().map(|r| r.4.as_deref()).collect();
            if self.store.read_whole_into(&ptrs, &sums, &mut out[at..end], self.streaming)? {
                j = k;
                continue;
            }
            self.store.read_run_each(&ptrs, &mut |n, data| {
                let (at, _, within, len, _) = run[j + n];
                out[at..at + len].copy_from_slice(&data[within..within + len]);
            })?;
            j = k;
        }
        Ok(())
    }
}

impl Part {
    /// Bytes of the read this part supplies.
    fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Block { len, .. } => *len,
        }
    }
}

pub(crate) fn chunk_bytes(n: &Node) -> u64 {
    n.chunks.values().map(Chunk::memory).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh store opened in a temporary directory (kept while the first value lives),
    /// its path, and an empty file `f` in its root.
    fn store_with_file() -> (tempfile::TempDir, std::path::PathBuf, Fs, Ino) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        Fs::create(&scion_store::os_host(), &dir).unwrap();
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        let f = fs.mknod(ROOT_INO, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        (tmp, dir, fs, f)
    }

    /// A stream of small writes into a chunk the overlay holds as bytes (an NFS client's
    /// 4 KiB WRITEs): written in place, with gaps read as zeros, overwrites, the size and
    /// the allocated bytes right, no tail written ahead past the file's start, and the same
    /// bytes after a checkpoint and a reopen.
    #[test]
    fn small_writes_into_a_buffered_chunk_read_back_as_written() {
        let (_tmp, dir, mut fs, f) = store_with_file();
        let mut model = Vec::new();
        let put = |fs: &mut Fs, model: &mut Vec<u8>, off: usize, len: usize, seed: u8| {
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect();
            assert_eq!(fs.write(f, off as u64, &data).unwrap() as usize, len);
            if model.len() < off + len {
                model.resize(off + len, 0);
            }
            model[off..off + len].copy_from_slice(&data);
        };
        let journal_before = fs.journal_len();
        for i in 0..40 {
            put(&mut fs, &mut model, i * 4096, 4096, i as u8); // across chunks 0-2
        }
        // Chunks 0 and 1, filled, are in the journal as their blocks' pointers (retract.rs);
        // chunk 2's 32 KiB as bytes.
        let journaled = fs.journal_len() - journal_before;
        assert!((32 << 10..40 << 10).contains(&journaled), "{journaled} journal bytes for 160 KiB of writes");
        put(&mut fs, &mut model, 200_000, 100, 7); // past the end: a gap of zeros in chunk 3
        put(&mut fs, &mut model, 196_000, 3000, 9); // into the gap, and over its end
        put(&mut fs, &mut model, 5000, 70_000, 11); // over two chunks' bytes
        // The first write, which may have been the whole file, went to a pack ahead, and so
        // did chunks 0 and 1 once the stream filled them; the writes at the starts of chunks
        // 1 and 2 did not (before `TAIL_AHEAD_MIN`, they did: 12,288 bytes, not 4,096).
        assert_eq!(fs.vol.forest.store.written().0, 4096 + 2 * CHUNK, "small writes past the start went to a pack");
        let check = |fs: &mut Fs, model: &[u8]| {
            let a = fs.lookup(ROOT_INO, b"f").unwrap();
            assert_eq!(a.size, model.len() as u64);
            assert_eq!(fs.read(a.ino, 0, model.len() as u32 + 10).unwrap(), model);
        };
        check(&mut fs, &model);
        assert_eq!(fs.node(f).unwrap().inode.alloc, model.len() as u64);
        fs.checkpoint().unwrap();
        check(&mut fs, &model);
        drop(fs);
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        check(&mut fs, &model);
    }

    /// Small writes here and there in a buffered chunk stay in memory and in the journal
    /// however full the chunk gets; a stream that fills at least half of it, to its end, puts
    /// the chunk in a pack in place of its journaled writes (`retract.rs`).
    #[test]
    fn only_a_stream_puts_a_buffered_chunk_in_a_pack() {
        let (_tmp, dir, mut fs, f) = store_with_file();
        let mut model = vec![0u8; CHUNK as usize];
        let mut put = |fs: &mut Fs, page: usize, seed: u8| {
            let data = vec![seed; 4096];
            fs.write(f, (page * 4096) as u64, &data).unwrap();
            model[page * 4096..(page + 1) * 4096].copy_from_slice(&data);
            model.clone()
        };
        // Every page, out of order (none at offset 0 first: no tail goes ahead), then the
        // last page again: the chunk is full in memory, no run a stream.
        for (i, page) in [5, 1, 9, 3, 15, 0, 2, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15].into_iter().enumerate() {
            put(&mut fs, page, i as u8 + 1);
        }
        assert!(matches!(fs.node(f).unwrap().chunks.get(&0), Some(Chunk::Buf(b)) if b.len() as u64 == CHUNK));
        assert_eq!(fs.vol.forest.store.written().0, 0, "scattered writes put the chunk in a pack");
        // The second half again, in order: a stream to the chunk's end.
        let mut want = Vec::new();
        for page in 8..16 {
            want = put(&mut fs, page, 100 + page as u8);
        }
        assert!(matches!(fs.node(f).unwrap().chunks.get(&0), Some(Chunk::Block(_))));
        assert_eq!(fs.vol.forest.store.written().0, CHUNK, "the stream's chunk is not in a pack");
        assert_eq!(fs.read(f, 0, CHUNK as u32).unwrap(), want);
        // Replayed from the journal: the scattered writes' records, then the block's.
        fs.fsync().unwrap();
        drop(fs);
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        let f = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        assert_eq!(fs.read(f, 0, CHUNK as u32 + 1).unwrap(), want, "after a reopen");
    }

    /// At an fsync, a small file written in pieces (an NFS client's WRITEs, then COMMIT) goes
    /// to a pack once as its tail block instead of through the journal; an appender that
    /// syncs after each short write keeps its writes in the journal.
    #[test]
    fn an_fsync_puts_a_small_file_written_in_pieces_in_a_pack_once() {
        let (_tmp, dir, mut fs, f) = store_with_file();
        let want: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for piece in want.chunks(4096).enumerate() {
            fs.write(f, (piece.0 * 4096) as u64, piece.1).unwrap();
        }
        // The first piece went ahead as the file's tail (4 KiB); the rest is journaled.
        assert_eq!(fs.vol.forest.store.written().0, 4096);
        let journaled = fs.journal_len();
        fs.fsync().unwrap();
        assert!(matches!(fs.node(f).unwrap().chunks.get(&0), Some(Chunk::Block(p)) if p.len == 10_000));
        assert_eq!(fs.vol.forest.store.written().0, 4096 + 12288, "the file's tail is not in a pack");
        assert!(fs.journal_len() < journaled, "the pieces' bytes stayed in the journal");
        assert_eq!(fs.read(f, 0, 20_000).unwrap(), want);

        // An appender: 100 bytes and an fsync, 30 times, after a 16 KiB start.
        let g = fs.mknod(ROOT_INO, b"log", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        let mut log = vec![9u8; 16 << 10];
        fs.write(g, 0, &log).unwrap();
        fs.fsync().unwrap();
        let packed = fs.vol.forest.store.written().0;
        for i in 0..30u8 {
            let line = vec![i; 100];
            fs.write(g, log.len() as u64, &line).unwrap();
            log.extend_from_slice(&line);
            fs.fsync().unwrap();
        }
        assert_eq!(fs.vol.forest.store.written().0, packed, "an appender's syncs rewrote its chunk");
        assert_eq!(fs.read(g, 0, 1 << 20).unwrap(), log);

        // Replayed from the journal: the tail's record in place of the pieces'.
        drop(fs);
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        let f = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        assert_eq!(fs.read(f, 0, 20_000).unwrap(), want, "after a reopen");
        assert_eq!(fs.getattr(f).unwrap().size, 10_000);
        let g = fs.lookup(ROOT_INO, b"log").unwrap().ino;
        assert_eq!(fs.read(g, 0, 1 << 20).unwrap(), log, "the appender after a reopen");
    }

    /// Object ids stop short of 2^40, where st_ino would name another namespace's object.
    #[test]
    fn object_ids_past_2_to_the_40_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        Fs::create(&scion_store::os_host(), &dir).unwrap();
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        fs.namespaces.get_mut(&1).unwrap().next_oid = MAX_OID - 1;
        let last = fs.mknod(ROOT_INO, b"last", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
        assert_eq!(last.ino, MAX_OID - 1);
        for kind in [Kind::File, Kind::Dir] {
            assert_eq!(
                fs.mknod(ROOT_INO, b"one-too-many", kind, 0o644, 0, 0, 0, 0, &[])
                    .map(|_| ()),
                Err(errno::ENOSPC)
            );
        }
        assert_eq!(
            fs.clone_dir(last.ino, ROOT_INO, b"c", &[], b"t").map(|_| ()),
            Err(errno::ENOSPC)
        );
        assert!(fs.failure().is_none(), "a refusal, not a failure");
        // `scion check` holds the same line: a table whose counter went past it is damage.
        fs.namespaces.get_mut(&1).unwrap().next_oid = MAX_OID + 1;
        fs.namespaces.get_mut(&1).unwrap().dirty = true;
        fs.checkpoint().unwrap();
        let rep = crate::check::check_committed(&scion_store::os_host(), &dir).unwrap();
        assert!(rep.problems.iter().any(|p| p.contains("past 2^40")), "{rep}");
    }

    /// A time of 10^9 nanoseconds or more is refused whole, before any part of the change:
    /// an inode holding one could not be written (the fuzzed receiver found it).
    #[test]
    fn times_past_a_second_of_nanoseconds_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        Fs::create(&scion_store::os_host(), &dir).unwrap();
        let mut fs = Fs::open(&dir, MountOptions::new("test")).unwrap();
        let f = fs.mknod(ROOT_INO, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap();
        let bad = Ts { sec: 1, nsec: 1_000_000_000 };
        for a in [
            SetAttr { mtime: Some(bad), size: Some(10), ..Default::default() },
            SetAttr { atime: Some(bad), ..Default::default() },
            SetAttr { ctime: Some(bad), mode: Some(0o600), ..Default::default() },
        ] {
            assert_eq!(fs.setattr(f.ino, a).map(drop), Err(errno::EINVAL));
        }
        let now = fs.getattr(f.ino).unwrap();
        assert_eq!((now.size, now.perm), (0, 0o644), "nothing of a refused change is made");
        let good = Ts { sec: 1, nsec: 999_999_999 };
        fs.setattr(f.ino, SetAttr { mtime: Some(good), ..Default::default() }).unwrap();
        fs.checkpoint().unwrap();
        let rep = crate::check::check_committed(&scion_store::os_host(), &dir).unwrap();
        assert!(rep.is_clean(), "{rep}");
    }
}
