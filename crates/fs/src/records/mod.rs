//! Every on-disk encoding of the filesystem layer, and where it lives. A stream format (send
//! and receive) reuses these; each has a fuzz entry point in `crates/fuzzing`.
//!
//! | record | module | fuzz entry point |
//! |---|---|---|
//! | checkpoint record and its lists | `records::checkpoint` | `checkpoint_record` |
//! | namespace record (namespace table value) | `records::namespace` | `ns_record` |
//! | inode record, directory entry, keys, summary values | `records::inode` | `inode_record` |
//! | journal record | `records::journal` | `journal_record` |
//! | journal file: header, frames, MORE flag | `crate::journal` | `journal_file` |
//! | patch list of a chunk (copy-on-abundant-write) | `crate::delta` | `chunk_patches` |
//! | schedules file (`STORE/schedules`) | `records::schedules` | `schedules_file` |
//! | mirrors file (`STORE/mirrors`) | `records::mirrors` | `mirrors_file` |
//! | cube table (`STORE/cubes`) | `records::cubes` | `cubes_file` |
//! | commands under way (`STORE/intents`) | `records::intents` | `intents_file` |
//! | content hashes kept across mounts (`STORE/hash-memo`) | `records::hash_memo` | `hash_memo_file` |
//! | object stores by name (`STORE/remotes`) | `records::remotes` | `remotes_file` |
//!
//! (Block framing, superblock and tree nodes are the lower layers': `scion-store` and
//! `scion-tree`, fuzzed as `pack_block`, `superblock`, `tree_node` and `ref_table`.)

pub mod attachments;
pub mod checkpoint;
pub mod cubes;
pub mod hash_memo;
pub mod inode;
pub mod intents;
pub mod journal;
pub mod namespace;
pub mod mirrors;
pub mod remotes;
pub mod schedules;
pub mod slots;
