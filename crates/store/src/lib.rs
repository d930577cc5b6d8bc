//! scion's block store.
//!
//! A store is a directory on any host filesystem. It holds append-only *pack files* of
//! immutable, checksummed blocks, a double-buffered *superblock* that names the newest
//! checkpoint, the journal files of the layer above, and a lock file. This crate knows
//! nothing of trees or files: it stores and verifies blocks, and says which checkpoint
//! block is current. The format is described in `docs/format.md`.

pub mod codec;
mod deferred;
mod error;
pub mod faults;
pub mod host;
mod lock;
mod pack;
mod ptr;
pub mod relocate;
pub mod remote;
pub mod sim;
mod superblock;

pub use error::{Error, Result};
pub use host::{os_host, sync_dir, Host, HostFs, OpenMode};
pub use lock::StoreLock;
pub use pack::{
    pack_path, page_sums, verify as verify_block, BlockStore, BLOCK_ALIGN, BLOCK_HEADER_LEN, MAX_BLOCK_LEN, PAGE,
};
pub use relocate::{Relocation, RELOCATION_LEN};
pub use remote::{is_remote_pack, RemotePacks, REMOTE_PACK_FIRST};
pub use ptr::{BlockKind, BlockPtr, HASH_LEN, PTR_LEN};
pub use superblock::{Superblock, FORMAT_VERSION, SUPERBLOCK_FILE, SUPERBLOCK_SLOT};
