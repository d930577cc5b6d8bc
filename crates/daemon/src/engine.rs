//! One mounted store's engine, shared by the request threads, the background worker and
//! the control socket.

use scion_fs::{Fs, FsResult, Ino};
use std::sync::{Arc, Mutex};

/// A shared engine. Cloning shares it. Every lock goes through `scion_fs::lock`, so a panic
/// while it was held fails the volume instead of being ignored.
#[derive(Clone)]
pub struct Engine {
    fs: Arc<Mutex<Fs>>,
    /// The mirrors' transfers (`mirror.rs`).
    mirrors: Arc<crate::mirror::Jobs>,
    /// Trees pulled from remotes, read from there (`remote.rs`).
    remote: Arc<crate::remote::RemoteState>,
    started: std::time::Instant,
}

impl Engine {
    pub fn new(fs: Fs) -> Engine {
        Engine {
            fs: Arc::new(Mutex::new(fs)),
            mirrors: Default::default(),
            remote: Default::default(),
            started: std::time::Instant::now(),
        }
    }

    /// Whether this handle is the engine's last (nothing else can reach it).
    pub fn is_last(&self) -> bool {
        Arc::strong_count(&self.fs) == 1
    }

    /// When the engine was made (the mount's uptime).
    pub fn started(&self) -> std::time::Instant {
        self.started
    }

    pub(crate) fn remote(&self) -> &crate::remote::RemoteState {
        &self.remote
    }

    /// The mirrors' transfers under way or failed.
    pub fn mirror_jobs(&self) -> &crate::mirror::Jobs {
        &self.mirrors
    }

    /// Inode `ino` of this volume found by its number alone, as a file handle names it, with
    /// one reference counted as `lookup` counts: through `hint` (names from its namespace's
    /// root) or what the engine remembers, else by `walk`. ESTALE if it is gone.
    pub fn reach(&self, ino: Ino, hint: &[Vec<u8>]) -> FsResult<scion_fs::Attr> {
        // (Bound first: a guard in the match would be held into the walk.)
        let reached = self.lock().reach(ino, hint)?;
        match reached {
            Some(a) => Ok(a),
            None => self.walk(ino),
        }
    }

    /// A walk of `ino`'s namespace for it (`Fs::walk_step`), the lock let go between steps
    /// so that other requests go on. One reference counted once found; ESTALE if not there.
    pub fn walk(&self, ino: Ino) -> FsResult<scion_fs::Attr> {
        let mut w = scion_fs::reach::Walk::new(ino);
        loop {
            if let Some(a) = self.lock().walk_step(&mut w)? {
                return Ok(a);
            }
        }
    }

    /// The engine, locked: for operations that need nothing done outside the lock. The
    /// hold is counted against the caller's line (`scion_fs::lock`).
    #[track_caller]
    pub fn lock(&self) -> scion_fs::Locked<'_> {
        scion_fs::lock(&self.fs)
    }

    /// `write(2)`: the write's whole chunks go to a pack before the lock is taken (writers
    /// overlap there), then the write is applied and journaled under it; `then` runs under
    /// the same lock after a successful write (dropping privileges, say). `stamp`: whether
    /// the write sets the file's times (not when the kernel's writeback cache keeps them).
    pub fn write(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        stamp: scion_fs::Stamp,
        then: impl FnOnce(&mut Fs) -> FsResult<()>,
    ) -> FsResult<u32> {
        let (store, journal_data) = {
            let fs = self.lock();
            (fs.store_for_write(ino)?, fs.journals_data())
        };
        // Mode `data`: the bytes go into the journal, nothing is written ahead.
        let ahead = if journal_data { Default::default() } else { scion_fs::write_ahead(&store, ino, offset, data)? };
        let mut fs = self.lock();
        // Takes the blocks written ahead (or frees them if the write is refused).
        let n = fs.write_with(ino, offset, data, ahead, stamp)?;
        then(&mut fs)?;
        Ok(n)
    }

    /// `fsync`: everything acknowledged so far made durable, the lock held only to begin and
    /// to end the sync, not while the disk flushes (`Fs::sync_begin`), so other requests go
    /// on meanwhile: an fsync, and the half-second background sync, held every request up
    /// for its 20-30 ms before.
    pub fn fsync(&self) -> FsResult<()> {
        self.sync(false)
    }

    /// The background worker's sync of the journal: `fsync`, except on a `writeback` volume,
    /// whose journal is synced without its packs (its records say so, and replay keeps the
    /// older content of a chunk whose block did not reach the disk).
    pub fn sync_background(&self) -> FsResult<()> {
        self.sync(true)
    }

    /// `fsync`; with `background`, the journal alone on a `writeback` volume.
    fn sync(&self, background: bool) -> FsResult<()> {
        let (ticket, journal_only) = {
            let mut fs = self.lock();
            if !fs.journaled() {
                // No journal (a `nojournal` cube): a checkpoint is what makes changes durable.
                return fs.checkpoint_for_sync();
            }
            (fs.sync_begin(!background)?, background && fs.writes_back())
        };
        let r = if journal_only { ticket.run_journal_only() } else { ticket.run() };
        self.lock().sync_end(ticket, r)
    }

    /// Punches the freed blocks waiting in the engine (scion-fs `punch.rs`) without holding
    /// the lock while the host works: a punch may wait seconds for the device's discard.
    /// With `all`, until none is left, waiting out a batch another thread holds.
    pub fn punch(&self, all: bool) {
        loop {
            let (batch, waiting) = {
                let mut fs = self.lock();
                (fs.punch_begin(), fs.unpunched_blocks())
            };
            match batch {
                Some(batch) => {
                    let done = batch.run();
                    self.lock().punch_end(done);
                    if !all {
                        return;
                    }
                }
                None if waiting == 0 || !all => return,
                None => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    }

    /// Buffered data of closed files to the packs, without the lock (`flush.rs`), at most
    /// `batches` batches of it, so that a caller's other periodic work still comes.
    pub fn write_behind(&self, batches: usize) {
        for _ in 0..batches {
            let Some(batch) = self.lock().flush_begin(scion_fs::FLUSH_FROM) else {
                break;
            };
            let done = batch.run();
            if !self.lock().flush_end(done) {
                break;
            }
        }
    }

    /// `scion scrub` of a mounted store: the committed state is pinned under the lock (a
    /// checkpoint first) and read without it, so requests go on while every block is read;
    /// `progress` hears (blocks, bytes) read so far every 4,096 blocks.
    pub fn scrub(&self, progress: &mut dyn FnMut(u64, u64)) -> FsResult<scion_fs::scrub::ScrubReport> {
        self.commit_first();
        let pinned = self.lock().pin_committed()?;
        Ok(pinned.scrub_with_progress(4096, progress))
    }

    /// `scion repack DIR` of a mounted store: the files to move are chosen under the lock, their
    /// blocks copied without it (reading the committed state the plan pinned), and the copies
    /// of the files that did not change meanwhile installed under it again.
    pub fn repack(&self, path: &[u8], budget: u64) -> FsResult<scion_fs::repack::RepackReport> {
        let plan = {
            let mut fs = self.lock();
            let dir = fs.resolve_path(path)?;
            fs.repack_begin(dir, budget)?
        };
        let copies = plan.run();
        self.lock().repack_end(copies)
    }

    /// The background pass, when one is due (`Fs::background_repack`), copying without the lock
    /// as `repack` does.
    pub fn background_repack(&self) -> FsResult<Option<scion_fs::repack::RepackReport>> {
        let Some(plan) = self.lock().background_repack_begin()? else {
            return Ok(None);
        };
        let copies = plan.run();
        self.lock().repack_end(copies).map(Some)
    }

    /// `scion compress` of a mounted store: blocks chosen and compressed without the lock
    /// (over a pinned state, on every CPU), installed under it (`scion_fs::compress`).
    pub fn compress(&self, budget: u64, level: i32) -> FsResult<scion_fs::compress::CompressReport> {
        let plan = self.lock().compress_begin()?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        plan.run(budget, level, threads, &mut |b| self.lock().compress_end(b))
    }

    /// The background pass of compression of old versions, when one is due (the store has
    /// been quiet; one thread, so the other CPUs stay free).
    pub fn background_compress(&self) -> FsResult<Option<scion_fs::compress::CompressReport>> {
        let Some(plan) = self.lock().background_compress_begin()? else {
            return Ok(None);
        };
        plan.run(scion_fs::compress::BACKGROUND_BUDGET, scion_fs::compress::DEFAULT_LEVEL, 1, &mut |b| self.lock().compress_end(b)).map(Some)
    }

    /// A view of the committed state (`scion_fs` `view.rs`) for a read-only command to walk
    /// without the engine lock: the lock is held to take it (a checkpoint of what is in
    /// memory, which the background keeps small) and to give it back, not while it is used.
    pub fn view(&self) -> FsResult<Fs> {
        self.commit_first();
        self.lock().view()
    }

    /// Commits what is in memory with the packs synced without the lock
    /// (`Fs::checkpoint_begin`), before an operation that pins the committed state (a view,
    /// `list`, `scrub`): the checkpoint it would otherwise take under the lock, pack sync
    /// included, then finds little or nothing left. Beside a bulk writer that sync is what
    /// took longest.
    pub fn commit_first(&self) {
        self.checkpoint_if(|fs: &mut Fs| fs.uncommitted());
    }

    /// Folds what waits with the packs synced without the lock (`Fs::checkpoint_begin`),
    /// before an operation that must fold under it (a clone, a snapshot), when that
    /// fold would hold requests up for more than a few milliseconds (`Fs::much_to_fold`):
    /// the operation then finds little left.
    /// Only when the operation would fold (`Fs::would_fold_below` of the directory it reads):
    /// a clone beside a writer elsewhere in the mount otherwise folded the writer's files
    /// first and waited for their pack sync.
    pub fn prefold(&self, op: &crate::control::Op) {
        let dirs = crate::control::settle_dirs(op);
        self.checkpoint_if(|fs: &mut Fs| fs.much_to_fold() && dirs.iter().any(|d| fs.would_fold_below(d)));
    }

    /// A checkpoint overlapped with requests (`Fs::checkpoint_begin`, `commit`) if `due`
    /// says one is wanted. Failures are the volume's (logged, and refused from then on).
    pub fn checkpoint_if(&self, due: impl FnOnce(&mut Fs) -> bool) {
        // A commit a request began, finding the background behind: finished here first.
        let handed = self.lock().take_handoff();
        if let Some(sync) = handed {
            self.commit(sync);
        }
        let sync = {
            let mut fs = self.lock();
            if fs.read_only || !due(&mut fs) {
                return;
            }
            match fs.checkpoint_begin() {
                Ok(s) => s,
                Err(e) => return log::error!("checkpoint: {e}"),
            }
        };
        if let Some(sync) = sync {
            self.commit(sync);
        }
    }

    /// Commits a checkpoint begun under the lock (`Fs::checkpoint_begin`): its packs synced
    /// without the lock, then its journal and superblock written under it. A failure fails
    /// the volume (logged here).
    pub fn commit(&self, sync: scion_fs::PackSync) {
        let r = crate::background::aside(|| sync.run());
        if let Err(e) = self.lock().checkpoint_end(sync, r) {
            log::error!("checkpoint: {e}");
        }
    }

    /// Gives a view back (`Fs::end_view`) and drops it without the lock: dropping the
    /// nodes a long walk loaded takes tens of milliseconds.
    pub fn end_view(&self, mut view: Fs) {
        self.lock().end_view(&mut view);
        drop(view);
    }

    /// `scion list` of a mounted store: the committed state is pinned under the lock and
    /// each clone's space counted without it.
    pub fn list(&self) -> FsResult<Vec<scion_fs::Listing>> {
        self.commit_first();
        let pinned = self.lock().list_pinned()?;
        Ok(pinned.count()?)
    }

    /// The final checkpoint, through the lock: another holder of the engine (a control
    /// command finishing its reply) does not keep it from happening. Changes are refused
    /// afterwards.
    pub fn close(&self) -> scion_store::Result<()> {
        self.lock().close_in_place()
    }
}
