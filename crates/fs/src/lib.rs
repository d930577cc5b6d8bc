//! scion's filesystem model.
//!
//! Directories are trees of entries; an entry holds its inode record and, for a directory
//! or a file, the root of that inode's own content tree. The whole filesystem is therefore a
//! tree of trees, and any subtree is one pointer. Files with several names live in a
//! per-namespace link table and their entries refer to it by object id.
//!
//! Changes are applied to in-memory *overlays* (per directory: name -> entry; per file:
//! chunk -> bytes) and appended to the journal before they are acknowledged. A checkpoint
//! folds the overlays into new tree versions bottom-up, writes them, and commits them with a
//! new superblock. This crate knows nothing of FUSE: the adapter and the tests drive [`Fs`]
//! through plain method calls that return errno values.

pub mod access;
pub mod acl;
pub mod apply;
mod attr_merge;
pub mod check;
mod checkpoint;
pub mod clone;
pub mod compress;
pub mod dedup;
pub mod delta;
pub mod diff;
mod error;
mod evict;
pub mod failpoint;
pub mod mirror;
mod node_table;
mod flush;
mod fs;
pub mod journal;
mod pieces;
pub mod fold_policy;
pub use fold_policy::set_fold_batch;
mod layer_ahead;
mod lock_stats;
pub mod pinned;
mod punch;
pub mod prealloc;
pub mod reach;
pub mod records;
/// Inode records, directory entries and keys (`records::inode`, under its old name).
pub use records::inode;
pub mod repack;
pub mod repair;
pub mod reserve;
mod refill;
mod whiteout;
pub mod restore;
mod retract;
pub mod rollback;
pub mod schedule;
pub mod scan;
pub mod stream;
pub mod treehash;
mod tmpfile;
pub mod scrub;
pub mod status;
pub mod versions;
mod view;
mod volume;

pub use clone::Listing;
pub use error::{errno, FsError, FsResult};
pub use flush::{FlushBatch, FlushedBatch, FLUSH_FROM};
pub use fs::{
    make_ino, read_only_refusal, write_ahead, Attr, DirEntry, Fs, Ino, Inval, MountOptions, NsInfo, NsKind, ReadPlan, StatFs, SyncTicket,
    Stamp, WrittenAhead, MAIN_NS_LIMIT, ROOT_INO,
};
pub use inode::{Kind, Ts, INLINE_MAX};
pub use scion_tree::{set_node_cache_limit, NODE_CACHE_BYTES};
pub use treehash::{set_hash_memo_limit, HASH_MEMO_ENTRIES};
pub use punch::PunchBatch;
pub use checkpoint::PackSync;
pub use repack::RepackReport;

pub use lock_stats::{lock, LockReport, Locked, LongHold};

/// Attribute changes of a `setattr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Ts>,
    pub mtime: Option<Ts>,
    /// Set by the kernel when it keeps times itself (writeback caching); otherwise now.
    pub ctime: Option<Ts>,
}

/// Flags of `rename`, as renameat2 has them.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
/// Leaves a whiteout (a character device 0/0) at the old name: overlayfs's upper layer.
pub const RENAME_WHITEOUT: u32 = 4;
