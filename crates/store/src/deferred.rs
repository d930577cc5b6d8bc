//! Blocks given their place in a pack at once and written to it later.
//!
//! A checkpoint's fold runs under the engine lock, and every request waits for it (issue 38).
//! Of what it does, copying each new tree node into the host's page cache (a `pwrite` of
//! 16 KiB per leaf) is the one part nothing under the lock needs: a node's pointer is its
//! place and its hash, both known before a byte is written. So tree nodes are placed and
//! kept here, and written out by the next `BlockStore::sync`, which the background runs
//! without the lock before it commits the checkpoint. Reads of a node not written yet are
//! served from here.
//!
//! Invariants:
//! - a deferred block's place is reserved below the pack's append position, so nothing else
//!   is ever written there;
//! - every `sync` writes out all blocks deferred before it began, before its fsyncs: a
//!   superblock or journal record written after a sync never names a block that is not on
//!   the disk;
//! - at most `DEFERRED_MAX` bytes wait; past that blocks are written at once, so a large
//!   fold costs no more memory than before (and at most as much again in spare buffers,
//!   kept while folds go on).

use crate::host::HostFile;
use std::collections::HashMap;
use std::sync::Arc;

/// Bytes of blocks kept waiting at most (a fold of 1,024 scattered small files places about
/// 16 MiB of leaves).
pub(crate) const DEFERRED_MAX: usize = 32 << 20;

/// A block placed and not written yet: its pack's handle and its bytes as they lie there
/// (header, payload, padding).
pub(crate) struct Waiting {
    pub(crate) file: Arc<dyn HostFile>,
    pub(crate) framed: Arc<Vec<u8>>,
}

/// The blocks waiting, by address (`BlockPtr::addr`), and buffers of blocks written out,
/// kept for the next ones.
#[derive(Default)]
pub(crate) struct Deferred {
    blocks: HashMap<u64, Waiting>,
    bytes: usize,
    /// Buffers of blocks written out, at most `DEFERRED_MAX` bytes of them, for the next
    /// fold's: the daemon's allocator gives freed pages back at once (issue 39), so a fresh
    /// buffer for each node faulted its pages in again, a fifth of a fold's time under the
    /// engine lock (`examples/fold_cost` under `perf`). Let go when a round of the background
    /// drew none (`release_idle`).
    spares: Vec<Vec<u8>>,
    spare_bytes: usize,
    drawn: bool,
}

impl Deferred {
    /// Whether `len` more bytes may wait.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.bytes + len <= DEFERRED_MAX
    }

    pub(crate) fn put(&mut self, addr: u64, w: Waiting) {
        self.bytes += w.framed.len();
        let old = self.blocks.insert(addr, w);
        assert!(old.is_none(), "two blocks deferred at address {addr:#x}");
    }

    /// The bytes of the block at `addr`, if it waits.
    pub(crate) fn get(&self, addr: u64) -> Option<Arc<Vec<u8>>> {
        self.blocks.get(&addr).map(|w| w.framed.clone())
    }

    /// Every block waiting, in address order (so that neighbours are written as one run).
    pub(crate) fn all(&self) -> Vec<(u64, Arc<dyn HostFile>, Arc<Vec<u8>>)> {
        let mut v: Vec<_> = self.blocks.iter().map(|(a, w)| (*a, w.file.clone(), w.framed.clone())).collect();
        v.sort_unstable_by_key(|b| b.0);
        v
    }

    /// The block at `addr` is on the disk now; `ours` is the writer's handle on its bytes,
    /// whose buffer is kept for another block if no reader holds it too.
    pub(crate) fn written(&mut self, addr: u64, ours: Arc<Vec<u8>>) {
        if let Some(w) = self.blocks.remove(&addr) {
            self.bytes -= w.framed.len();
        }
        if let Ok(mut buf) = Arc::try_unwrap(ours) {
            if self.spare_bytes + buf.capacity() <= DEFERRED_MAX {
                buf.clear();
                self.spare_bytes += buf.capacity();
                self.spares.push(buf);
            }
        }
    }

    /// An empty buffer for a block of about `len` bytes: a spare one if there is one.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.drawn = true;
        match self.spares.pop() {
            Some(mut b) => {
                self.spare_bytes -= b.capacity();
                debug_assert!(b.is_empty());
                b.reserve(len);
                b
            }
            None => Vec::with_capacity(len),
        }
    }

    /// Lets the spare buffers go if none was drawn since the last call (the background calls
    /// it every round): memory kept for folds in progress, not for an idle volume.
    pub(crate) fn release_idle(&mut self) {
        if !self.drawn {
            self.spares = Vec::new();
            self.spare_bytes = 0;
        }
        self.drawn = false;
    }

    /// How many blocks wait below address `addr`.
    pub(crate) fn count_below(&self, addr: u64) -> usize {
        self.blocks.keys().filter(|a| **a < addr).count()
    }

    pub(crate) fn spare_bytes(&self) -> usize {
        self.spare_bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}

/// Longest run written with one call: neighbours are copied into one buffer first.
pub(crate) const RUN_MAX: usize = 1 << 20;
