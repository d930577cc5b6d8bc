//! Blocks named by their content across a two-way channel (`scion send --dedup --through`,
//! issue 20): the sender offers the BLAKE3 hashes of the blocks a stream would carry (each
//! holding exactly a chunk's bytes: 64 KiB, or a file's tail), the receiver answers which it
//! already holds anywhere in its store, and those travel as `Block` frames (a hash) instead
//! of their bytes.
//!
//! A data block's pointer carries the hash of its 64 KiB (`BlockPtr::hash`), so neither side
//! reads data to negotiate: the sender looks at its files' content trees (`plain_block`), the
//! receiver walks its committed trees' pointers (`find_blocks`). The receiver copies a named
//! block's bytes into the new file (reading it back verifies its hash) rather than sharing
//! it: between the answer and the frame the block may have been freed, and a copy of bytes
//! checked against their hash can never be wrong.

use crate::error::{eio, errno};
use crate::fs::{Chunk, Fs};
use crate::inode::CHUNK;
use crate::{FsResult, Ino};
use scion_store::{BlockKind, BlockPtr};
use std::collections::{HashMap, HashSet};

/// Hashes one `find_blocks` remembers at most (the blocks of 2 TiB): what a receive of an
/// offer that large asks about.
pub const MAX_REMEMBERED: usize = 32 << 20;

impl Fs {
    /// The block holding chunk `idx` of file `ino` exactly, unpatched and as long as the
    /// chunk's bytes (64 KiB, or the file's tail), so that its hash is the chunk's, if there
    /// is one: not for inline bytes, buffered or patched chunks.
    pub fn plain_block(&mut self, ino: Ino, idx: u64) -> FsResult<Option<BlockPtr>> {
        let n = self.node(ino)?;
        let len = n.inode.size.saturating_sub(idx * CHUNK).min(CHUNK);
        let ptr = match n.chunks.get(&idx) {
            Some(Chunk::Block(p) | Chunk::Shared(p)) => Some(*p),
            Some(_) => None,
            None if idx == 0 && (n.inline_cold || !n.inode.inline.is_empty()) => None,
            None => self.stored_value(n, idx)?.filter(|s| s.is_plain()).map(|s| s.block),
        };
        Ok(ptr.filter(|p| p.kind == BlockKind::Data && len > 0 && u64::from(p.len) == len))
    }

    /// Which of `hashes` name a whole data block somewhere in the store's committed trees
    /// (every clone and snapshot): a walk of tree nodes, no data read. Those found are
    /// remembered for `block_by_hash`.
    pub fn find_blocks(&mut self, hashes: &[[u8; 32]]) -> FsResult<Vec<bool>> {
        let wanted: HashSet<[u8; 32]> = hashes.iter().copied().collect();
        // Everything into the trees first: the walk reads committed pointers only.
        self.checkpoint()?;
        let mut roots: Vec<BlockPtr> = Vec::new();
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        for id in ids {
            let ns = &self.namespaces[&id];
            let (root, links) = (ns.root, ns.link_root);
            roots.extend(self.node(root)?.inode.ptrs());
            roots.extend(links);
        }
        let mut found: HashMap<[u8; 32], BlockPtr> = HashMap::new();
        let mut seen = HashSet::new();
        for r in &roots {
            crate::clone::walk_blocks(&self.vol.forest, &self.vol.forest.refs, r, false, &mut seen, &mut |p| {
                if p.kind == BlockKind::Data && wanted.contains(&p.hash) {
                    found.entry(p.hash).or_insert(*p);
                }
            })
            .map_err(eio)?;
        }
        let held = hashes.iter().map(|h| found.contains_key(h)).collect();
        if self.dedup_index.len() + found.len() > MAX_REMEMBERED {
            self.dedup_index.clear();
        }
        self.dedup_index.extend(found);
        Ok(held)
    }

    /// The 64 KiB of the block with content hash `hash`, which `find_blocks` found; read
    /// back and verified against the hash.
    pub fn block_by_hash(&self, hash: &[u8; 32]) -> FsResult<Vec<u8>> {
        let Some(p) = self.dedup_index.get(hash) else {
            return Err(errno::ENOENT.with(format!(
                "the stream names block {} as held here, and it is not (was the stream made for another store?)",
                short(hash)
            )));
        };
        let bytes = self.vol.forest.store.read(p).map_err(|e| {
            errno::EIO.with(format!("block {} said to be held here cannot be read ({e}): send again", short(hash)))
        })?;
        if blake3::hash(&bytes).as_bytes() != hash {
            return Err(errno::EIO.with(format!("block {} changed since the offer: send again", short(hash))));
        }
        Ok(bytes)
    }
}

fn short(h: &[u8; 32]) -> String {
    h[..8].iter().map(|b| format!("{b:02x}")).collect()
}
