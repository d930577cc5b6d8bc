//! What `scion status` reports of a store's engine: its commit state, what waits to be
//! written or given back, background work and failures. Space per clone and snapshot comes
//! from `list` (`clone.rs`), the daemon's own facts (pid, uptime) from the daemon.

use crate::Fs;
use std::time::Instant;

/// The engine's side of `scion status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusFacts {
    /// The committed checkpoint, and seconds since the last one.
    pub generation: u64,
    pub checkpoint_age_s: u64,
    /// Journal bytes since it (replayed after a crash), and buffered bytes not yet folded.
    pub journal_bytes: u64,
    pub dirty_bytes: u64,
    /// Freed blocks not punched yet.
    pub unpunched_blocks: u64,
    /// Blocks of old versions kept compressed, and the bytes their frames take.
    pub compressed_blocks: u64,
    pub compressed_bytes: u64,
    /// Bytes the packs take on the host.
    pub pack_bytes: u64,
    /// Seconds since the last background repack and compression pass (none yet: `None`).
    pub repack_age_s: Option<u64>,
    pub compress_age_s: Option<u64>,
    pub schedules: u64,
    pub mirrors: u64,
    /// Why the store refuses changes until it is mounted again, if it does.
    pub failed: Option<String>,
    /// The host filesystem is full: changes get ENOSPC until there is room (`reserve.rs`).
    pub host_full: bool,
    /// Bytes written since mount.
    pub written: Written,
    /// What the engine holds in memory.
    pub memory: Memory,
    /// How long the engine lock was held and waited for since mount (`lock_stats.rs`).
    pub lock: crate::LockReport,
}

/// What the engine holds in memory (issue 39): per inode in proportion to the inodes the
/// kernel holds or that have changes, and caches with bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Inodes loaded; those the kernel holds references to; their bytes (an estimate: the
    /// structures and what they point to, allocator rounding not counted).
    pub inodes: u64,
    pub kernel_inodes: u64,
    pub inode_bytes: u64,
    /// The tree node cache: its decoded nodes' bytes and its bound (`node_cache=`).
    pub node_cache_bytes: u64,
    pub node_cache_limit: u64,
    /// Tree and content hashes kept between diffs, sends and receives, and their bound
    /// (`hash_memo=`).
    pub hash_memo_entries: u64,
    pub hash_memo_limit: u64,
    /// Evicted inodes whose place is kept for handles, and their bound (`whereabouts=`).
    pub whereabouts_entries: u64,
    pub whereabouts_limit: u64,
}

/// Bytes written since mount: by users (through the mount), and to the host by what they
/// hold. Their ratio is the store's write amplification.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub user: u64,
    /// Data blocks, but for repack's copies.
    pub data: u64,
    pub journal: u64,
    /// Tree blocks: directories, inodes, content trees, namespaces.
    pub meta: u64,
    /// Data blocks repack copied.
    pub repack: u64,
    /// Compressed forms of old versions.
    pub compress: u64,
}

impl Written {
    /// Bytes written to the host.
    pub fn host(&self) -> u64 {
        self.data + self.journal + self.meta + self.repack + self.compress
    }
}

impl Fs {
    /// `Memory` now: one pass over the loaded inodes (a status is rare; the engine keeps no
    /// running total that every change would have to maintain).
    pub fn memory(&self) -> Memory {
        let (cache, limit) = self.vol.forest.cache_usage();
        let mut m = Memory {
            inodes: self.nodes.len() as u64,
            node_cache_bytes: cache as u64,
            node_cache_limit: limit as u64,
            hash_memo_entries: self.hash_memo.len() as u64,
            hash_memo_limit: crate::treehash::hash_memo_limit() as u64,
            whereabouts_entries: self.whereabouts.len() as u64,
            whereabouts_limit: crate::reach::whereabouts_limit() as u64,
            ..Memory::default()
        };
        for n in self.nodes.values() {
            m.kernel_inodes += (n.lookups > 0) as u64;
            m.inode_bytes += n.memory() as u64;
        }
        // The map's own table: a key, a pointer and a control byte per slot.
        let slot = std::mem::size_of::<(crate::Ino, Box<crate::fs::Node>)>() + 1;
        m.inode_bytes += (self.nodes.capacity() * slot + self.nodes.index_bytes()) as u64;
        m
    }
}

/// The engine's own counts behind `Written` (the block store counts the rest).
#[derive(Debug, Default)]
pub(crate) struct IoCounts {
    pub user: u64,
    pub journal: u64,
    pub repack: u64,
}

impl Fs {
    pub fn status_facts(&self) -> StatusFacts {
        let store = &self.vol.forest.store;
        let (compressed_blocks, compressed_bytes) = store.relocation_stats();
        let age = |t: Instant| t.elapsed().as_secs();
        StatusFacts {
            generation: self.vol.generation,
            checkpoint_age_s: age(self.last_checkpoint),
            journal_bytes: self.vol.journal.as_ref().map_or(0, |j| j.len),
            dirty_bytes: self.dirty_bytes,
            unpunched_blocks: self.vol.unpunched.len() as u64,
            compressed_blocks,
            compressed_bytes,
            pack_bytes: store.allocated_bytes().unwrap_or(0),
            repack_age_s: self.last_repack.map(|(t, _)| age(t)),
            compress_age_s: self.last_compress.map(|(t, _)| age(t)),
            schedules: self.schedule_list().map_or(0, |l| l.len() as u64),
            mirrors: self.mirror_list().map_or(0, |l| l.len() as u64),
            failed: self.vol.failed.clone(),
            host_full: self.host_full(),
            memory: self.memory(),
            lock: self.lock_stats.report(),
            written: {
                let (data, meta, compress) = store.written();
                Written {
                    user: self.io.user,
                    data: data.saturating_sub(self.io.repack),
                    journal: self.io.journal,
                    meta,
                    repack: self.io.repack,
                    compress,
                }
            },
        }
    }
}
