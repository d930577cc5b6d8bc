//! Returning freed blocks' space to the host, outside the engine lock.
//!
//! A checkpoint frees the blocks its new trees no longer reach. Once it is durable, and once
//! the reads planned before it have finished (`ReadGate`), nothing can read those blocks
//! again and packs are never rewritten in place, so their ranges can be punched at any later
//! time, by any thread. Punching can be slow: on a host filesystem mounted with `discard`,
//! each punch waits for the device to discard the range, and freeing a large file took
//! seconds, during which every request waited for the engine lock.
//!
//! So a daemon sets `punch_later`: checkpoints keep their freed blocks in `Fs::unpunched`,
//! and a background thread takes them (`punch_begin`), punches them without the lock
//! (`PunchBatch::run`) and reports back (`punch_end`). Until then they stay on the freed list
//! of every checkpoint record written, so an open after a crash punches them (invariant: a
//! freed block is in the latest record's freed list until it has been punched).

use crate::fs::Fs;
use scion_store::{BlockPtr, BlockStore};
use std::sync::Arc;

/// Past this many waiting blocks (64 GiB of 64 KiB blocks), a checkpoint punches them itself
/// rather than let the list, which every checkpoint record repeats, grow without bound.
const UNPUNCHED_MAX: usize = 1 << 20;

/// Freed blocks taken by `Fs::punch_begin`, to be punched without the engine lock.
pub struct PunchBatch {
    store: Arc<BlockStore>,
    blocks: Vec<BlockPtr>,
}

impl PunchBatch {
    /// Punches the batch; returns how many blocks it covered, for `Fs::punch_end`. A failed
    /// punch only leaves space allocated (logged; the next open tries again).
    pub fn run(self) -> usize {
        punch_logged(&self.store, &self.blocks);
        self.blocks.len()
    }
}

/// Punches `blocks`; a failure only leaves space allocated, so it is logged, not returned.
fn punch_logged(store: &BlockStore, blocks: &[BlockPtr]) {
    if let Err(e) = store.punch_all(blocks) {
        log::warn!("{e}: the freed space stays allocated until the next open");
    }
}

impl Fs {
    /// Leave freed blocks to `punch_begin` (a daemon with a background thread) instead of
    /// punching them at the end of each checkpoint, under the engine lock.
    pub fn set_punch_later(&mut self, later: bool) {
        self.vol.punch_later = later;
    }

    /// The freed blocks waiting to be punched, if any. They stay listed (and in the next
    /// checkpoint record) until `punch_end` reports them done.
    /// One batch at a time: None while another is out, or when nothing waits.
    pub fn punch_begin(&mut self) -> Option<PunchBatch> {
        if self.vol.unpunched.is_empty() || self.vol.punching || self.vol.pinned() {
            return None;
        }
        self.vol.punching = true;
        Some(PunchBatch {
            store: self.vol.forest.store.clone(),
            blocks: self.vol.unpunched.clone(),
        })
    }

    /// The first `done` waiting blocks have been punched. A checkpoint in between keeps the
    /// older blocks first, so these are still the ones at the front.
    pub fn punch_end(&mut self, done: usize) {
        assert!(self.vol.punching, "punch_end without punch_begin");
        assert!(
            done <= self.vol.unpunched.len(),
            "punched {done} of {} waiting blocks",
            self.vol.unpunched.len()
        );
        self.vol.unpunched.drain(..done);
        self.vol.punching = false;
    }

    /// Blocks freed by committed checkpoints and not punched yet.
    pub fn unpunched_blocks(&self) -> usize {
        self.vol.unpunched.len()
    }

    /// Called by a checkpoint once it is committed and no earlier read is in flight.
    pub(crate) fn punch_now_unless_later(&mut self) {
        // Not past the limit while a batch is out: `punch_end` counts on the list's front.
        // A pinned walk may still read freed blocks: they wait (and stay listed).
        if self.vol.pinned() {
            return;
        }
        if !self.vol.punch_later || (self.vol.unpunched.len() > UNPUNCHED_MAX && !self.vol.punching) {
            let blocks = std::mem::take(&mut self.vol.unpunched);
            punch_logged(&self.vol.forest.store, &blocks);
        }
    }
}
