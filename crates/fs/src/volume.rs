//! A volume: one store's durable state and nothing else. Its block store (inside the
//! forest of trees), its journal, the generation of its last committed checkpoint, the
//! blocks waiting to be freed or punched, and whether it failed. The filesystem model
//! (`Fs`) works on one; a failure marks the volume, not the process. (Cubes, later, are
//! more volumes.)

use crate::fs::ReadGate;
use crate::journal::Journal;
use scion_store::{BlockPtr, Host};
use scion_tree::Forest;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) struct Volume {
    /// The store's directory on the host.
    pub(crate) dir: PathBuf,
    pub(crate) store_id: [u8; 16],
    /// Generation of the last committed checkpoint (the superblock's).
    pub(crate) generation: u64,
    pub(crate) host: Host,
    /// The store's lock, held as long as the volume is open.
    pub(crate) _lock: Box<dyn std::any::Any + Send>,
    /// The trees, their block store and reference counts.
    pub(crate) forest: Forest,
    pub(crate) journal: Option<Journal>,
    /// Blocks written ahead that no checkpoint will reference; freed by the next checkpoint.
    pub(crate) garbage: Vec<BlockPtr>,
    /// Reads of blocks in flight without the engine lock (`ReadPlan`): a checkpoint waits
    /// for them before its freed blocks may be punched.
    pub(crate) read_gate: Arc<ReadGate>,
    /// Meta blocks of the committed checkpoint, freed by the next one.
    pub(crate) meta_blocks: Vec<BlockPtr>,
    /// Blocks freed by committed checkpoints and not punched yet, oldest first (`punch.rs`).
    pub(crate) unpunched: Vec<BlockPtr>,
    /// Whether checkpoints leave their freed blocks to `punch_begin` instead of punching them
    /// under the engine lock.
    pub(crate) punch_later: bool,
    /// A `PunchBatch` is out (between `punch_begin` and `punch_end`).
    pub(crate) punching: bool,
    /// Walks of a pinned committed state in progress (`pinned.rs`): while there are any, no
    /// freed block is punched (they stay listed, and readable, until the last pin goes).
    pub(crate) pins: Arc<std::sync::atomic::AtomicUsize>,
    /// Why the volume refuses changes, if it does: the in-memory state may not match the
    /// store (a checkpoint or journal write failed half way, an fsync failed, a panic), so
    /// nothing more is committed until a remount replays the journal.
    pub(crate) failed: Option<String>,
    /// The store's snapshot schedules (`STORE/schedules`), or why they could not be read:
    /// then none run and none may be changed, so nothing overwrites what is there.
    pub(crate) schedules: Result<crate::records::schedules::Stored, String>,
    /// The store's mirrors (`STORE/mirrors`), or why they could not be read (then none runs
    /// and none may be changed).
    pub(crate) mirrors: Result<crate::records::mirrors::Stored, String>,
    /// Page sums of data blocks written (or taken up by an overlay) since the last
    /// checkpoint, by block address: what the checkpoint stores beside each block it puts in
    /// a content tree, and what reads of a few pages of such a block verify. Lost in a crash
    /// (the blocks are then stored without, and read whole).
    pub(crate) fresh_sums: std::collections::HashMap<u64, crate::delta::Sums>,
}

impl Volume {
    pub(crate) fn new(
        dir: PathBuf,
        store_id: [u8; 16],
        generation: u64,
        host: Host,
        lock: Box<dyn std::any::Any + Send>,
        forest: Forest,
    ) -> Volume {
        Volume {
            dir,
            store_id,
            generation,
            host,
            _lock: lock,
            forest,
            journal: None,
            garbage: Vec::new(),
            read_gate: Default::default(),
            meta_blocks: Vec::new(),
            unpunched: Vec::new(),
            punch_later: false,
            punching: false,
            pins: Default::default(),
            failed: None,
            schedules: Ok(Default::default()),
            mirrors: Ok(Default::default()),
            fresh_sums: Default::default(),
        }
    }

    /// Whether a pinned walk is in progress (freed blocks must not be punched yet).
    pub(crate) fn pinned(&self) -> bool {
        self.pins.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// Marks the volume failed (the first reason is kept).
    pub(crate) fn fail(&mut self, why: &str) {
        if self.failed.is_none() {
            log::error!("VOLUME FAILED: {why}; refusing changes until it is remounted (reads go on)");
            self.failed = Some(why.to_string());
        }
    }
}
