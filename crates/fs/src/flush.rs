//! Write-behind: buffered file data goes to the packs before the checkpoint that folds it.
//!
//! Partial writes wait in memory (`Chunk::Buf`) and in the journal until a checkpoint writes
//! them as blocks. A checkpoint runs under the engine lock, and writing the 256 MiB of small
//! files it may find took most of the ~1 s it held every request up during an untar. So the
//! mount's background thread takes the buffers of closed files in batches, writes them to a
//! pack without the lock, and hands the blocks back (`Chunk::Block`): the checkpoint then
//! only builds trees, and the half-second background sync has made the blocks durable
//! already.
//!
//! Nothing about recovery changes. The journal still holds the bytes; a block written
//! behind is referenced by nothing durable until a checkpoint takes it into a tree, so after
//! a crash it is part of the uncommitted pack tail that opening the store cuts off. A block
//! whose chunk changed while it was being written is garbage, freed by the next checkpoint
//! like a superseded block written ahead.

use crate::fs::{Chunk, Fs, Ino, Loc};
use crate::inode::{Kind, INLINE_MAX};
use scion_store::{BlockKind, BlockPtr, BlockStore, Result};
use std::sync::Arc;

/// Write-behind starts when this much file data waits in memory: below it the checkpoint's
/// own writes are short, and data still being rewritten is best left in memory.
pub const FLUSH_FROM: u64 = 16 << 20;
/// Bytes copied out per batch, which bounds the lock hold of `flush_begin`/`flush_end`.
pub const FLUSH_BATCH: u64 = 16 << 20;

/// Copies of buffered chunks, to be written without the engine lock (`FlushBatch::run`).
pub struct FlushBatch {
    store: Arc<BlockStore>,
    chunks: Vec<(Ino, u64, Vec<u8>)>,
}

/// A written batch, to be handed back with `Fs::flush_end`.
pub struct FlushedBatch {
    chunks: Vec<(Ino, u64, Vec<u8>)>,
    blocks: Result<Vec<BlockPtr>>,
    sums: Vec<crate::delta::Sums>,
}

/// Page sums of each chunk of a batch, computed outside the lock with the write.
fn sums_of(chunks: &[(Ino, u64, Vec<u8>)]) -> Vec<crate::delta::Sums> {
    chunks
        .iter()
        .map(|(_, _, b)| scion_store::page_sums(b).into())
        .collect()
}

impl FlushBatch {
    /// Bytes in the batch.
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|(_, _, b)| b.len() as u64).sum()
    }

    /// Writes the batch to a pack with one write (no engine lock needed).
    pub fn run(self) -> FlushedBatch {
        let payloads: Vec<&[u8]> = self.chunks.iter().map(|(_, _, b)| b.as_slice()).collect();
        let blocks = self.store.write_batch(BlockKind::Data, &payloads);
        let sums = sums_of(&self.chunks);
        FlushedBatch {
            chunks: self.chunks,
            blocks: blocks.map(|b| {
                debug_assert_eq!(b.len(), sums.len());
                b
            }),
            sums,
        }
    }
}

impl Fs {
    /// Copies out up to `FLUSH_BATCH` bytes of buffered chunks of closed files, in inode
    /// order (which keeps a directory's new files together in the pack), if at least `from`
    /// bytes (the mount uses `FLUSH_FROM`) wait in memory. `None`: nothing to do.
    pub fn flush_begin(&mut self, from: u64) -> Option<FlushBatch> {
        if self.vol.failed.is_some() || self.replaying || self.dirty_bytes < from.max(1) {
            return None;
        }
        let mut inos: Vec<Ino> = self
            .dirty
            .iter()
            .chain(&self.orphans)
            .copied()
            .filter(|i| {
                // (`dirty` may name inodes already dropped.) Open files may still be
                // rewriting their buffers, except unlinked ones: they are open as long as
                // they live, and their data must not live in memory (a tmpfile may be
                // hundreds of MiB). Their blocks are garbage once the last handle closes.
                self.nodes.get(i).is_some_and(|n| {
                    n.inode.kind == Kind::File
                        && (n.opens == 0 || n.loc == Loc::Gone)
                        && n.chunks.values().any(|c| matches!(c, Chunk::Buf(_)))
                })
            })
            .collect();
        inos.sort_unstable();
        inos.dedup();
        let mut chunks = Vec::new();
        let mut bytes = 0;
        'files: for ino in inos {
            let overlay = &self.nodes[&ino].chunks;
            // A small file's only chunk will likely be kept inline in its record.
            let small = overlay.iter().all(|(&i, c)| match c {
                Chunk::Buf(b) => i == 0 && b.len() <= INLINE_MAX,
                c => i > 0 && *c == Chunk::Hole,
            });
            if small {
                continue;
            }
            for (&idx, c) in overlay {
                // All zeros: the checkpoint stores a hole.
                if let Chunk::Buf(b) = c {
                    if b.iter().any(|x| *x != 0) {
                        bytes += b.len() as u64;
                        chunks.push((ino, idx, b.clone()));
                        if bytes >= FLUSH_BATCH {
                            break 'files;
                        }
                    }
                }
            }
        }
        if chunks.is_empty() {
            return None;
        }
        Some(FlushBatch {
            store: self.vol.forest.store.clone(),
            chunks,
        })
    }

    /// Takes the blocks of a written batch for the chunks that still hold what was written;
    /// the others (changed, truncated or removed meanwhile) are garbage. False if the batch
    /// could not be written (the caller stops for now).
    pub fn flush_end(&mut self, done: FlushedBatch) -> bool {
        let blocks = match done.blocks {
            Ok(b) => b,
            Err(e) => {
                // The data is still in memory and the journal; the checkpoint writes it.
                log::warn!("writing buffered data ahead of the checkpoint: {e}");
                return false;
            }
        };
        for (((ino, idx, bytes), ptr), sums) in done.chunks.into_iter().zip(blocks).zip(done.sums) {
            self.vol.fresh_sums.insert(ptr.addr, sums);
            let same = self
                .nodes
                .get(&ino)
                .is_some_and(|n| matches!(n.chunks.get(&idx), Some(Chunk::Buf(b)) if *b == bytes));
            // Counted either way, so that the next checkpoint, which frees the garbage, comes
            // after at most DIRTY_LIMIT bytes written behind.
            self.flushed_bytes += bytes.len() as u64;
            if !same {
                self.vol.garbage.push(ptr);
                continue;
            }
            // set_chunk keeps the counts: the bytes leave memory, the length stays the same.
            if let Err(e) = self.set_chunk(ino, idx, Chunk::Block(ptr)) {
                log::warn!("ino {ino}: keeping chunk {idx} in memory: errno {e}");
                self.vol.garbage.push(ptr);
            }
        }
        true
    }
}
