//! The daemon's background worker: every half second, write-behind of buffered data, the
//! journal's sync, punching of freed space, the checkpoint when changes are old enough,
//! repack when the store is idle, and the snapshot schedules (`scheduler.rs`); then what the
//! kernel must forget, handed to the front end.

use crate::Engine;
use scion_fs::Inval;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the worker does.
#[derive(Clone, Debug)]
pub struct BackgroundOptions {
    /// How often it wakes.
    pub period: Duration,
    /// A checkpoint is taken once changes are this old.
    pub checkpoint_after: Duration,
    /// Repack scattered files when the store is idle (mount option `repack=idle`).
    pub repack: bool,
    /// Run the store's snapshot schedules.
    pub schedules: bool,
    /// Compress blocks only snapshots hold when the store is idle (mount option
    /// `compress_old=idle`).
    pub compress_old: bool,
    /// Run the store's mirrors (a mounted store: transfers need its mount point).
    pub mirrors: Option<crate::mirror::MirrorOptions>,
    /// Told what schedules take and remove (the main volume's: the cubes below).
    pub companions: Option<SharedCompanions>,
}

/// The schedules' companions, shared with the worker.
#[derive(Clone)]
pub struct SharedCompanions(pub Arc<dyn crate::scheduler::Companions>);

impl std::fmt::Debug for SharedCompanions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedCompanions")
    }
}

impl Default for BackgroundOptions {
    fn default() -> Self {
        BackgroundOptions {
            period: Duration::from_millis(500),
            checkpoint_after: Duration::from_secs(30),
            repack: true,
            schedules: true,
            compress_old: true,
            mirrors: None,
            companions: None,
        }
    }
}

/// Tells the front end what the kernel must forget (called without the engine lock).
pub type Invalidator = Box<dyn Fn(&[Inval]) + Send>;

/// The running worker; `stop` ends it.
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    engine: Engine,
}

impl Background {
    pub fn start(engine: Engine, opts: BackgroundOptions, invalidate: Invalidator) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let kept = engine.clone();
        let thread = std::thread::spawn(move || {
            let mut first = true;
            // A panic in the worker (a bug) must not silently end background syncs and
            // checkpoints: it is logged, the volume is marked failed (so changes get EIO and
            // the log says why), and the loop goes on with what a failed volume does.
            let guarded = |f: &mut dyn FnMut()| {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                    engine
                        .lock()
                        .fail("a panic in the background thread (see the panic above in this log)");
                }
            };
            while !flag.load(Ordering::Relaxed) {
                // Between rounds, a checkpoint as soon as `FOLD_BATCH` inodes wait: a fast
                // writer would otherwise leave a round's checkpoint several times that many
                // to fold while every request waits.
                for _ in 0..FOLD_CHECKS {
                    // Woken early when a request leaves it a commit (`Fs::take_handoff`).
                    std::thread::park_timeout(opts.period / FOLD_CHECKS);
                    guarded(&mut || engine.checkpoint_if(|fs: &mut scion_fs::Fs| fs.fold_due()));
                }
                guarded(&mut || tick(&engine, &opts, &invalidate, first));
                first = false;
            }
        });
        kept.lock().set_background_thread(Some(thread.thread().clone()));
        Background {
            stop,
            thread: Some(thread),
            engine: kept,
        }
    }

    /// Ends the worker after its current round.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.engine.lock().set_background_thread(None);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.engine.mirror_jobs().stop();
    }
}

/// How many times a round looks whether enough waits to be folded (`Fs::fold_due`).
const FOLD_CHECKS: u32 = 5;

/// One round of background work.
fn tick(engine: &Engine, opts: &BackgroundOptions, invalidate: &Invalidator, first: bool) {
    // Read-only (remounted so): nothing to write, nothing to start; the checkpoint that made
    // it so left nothing waiting.
    if engine.lock().read_only {
        return;
    }
    // Buffered data of closed files goes to the packs now, without the engine lock, so the
    // checkpoint that folds it holds requests up for less. Bounded, so that the sync below
    // still comes every half second or so.
    engine.write_behind(8);
    // The journal is synced every half second, without holding up requests while the disk
    // flushes; a failure is logged and remembered by the engine.
    if engine.lock().needs_sync() {
        let _ = engine.sync_background();
    }
    // Space freed by checkpoints goes back to the host without the engine lock: a punch can
    // wait seconds for the device's discard.
    engine.punch(false);
    let (sync, mut inval) = {
        let mut fs = engine.lock();
        let sync = fs.tick_begin(opts.checkpoint_after).unwrap_or_else(|e| {
            log::error!("background checkpoint: {e}");
            None
        });
        (sync, fs.take_invalidations())
    };
    if let Some(sync) = sync {
        engine.commit(sync);
        inval.extend(engine.lock().take_invalidations());
    }
    if !inval.is_empty() {
        invalidate(&inval);
    }
    if opts.repack {
        if let Err(e) = engine.background_repack() {
            log::error!("background repack: {e}");
        }
    }
    if opts.compress_old {
        if let Err(e) = engine.background_compress() {
            log::error!("background compression of old versions: {e}");
        }
    }
    if let Some(m) = &opts.mirrors {
        crate::mirror::tick(engine, m);
    }
    // Snapshots that are due, then retention (for every schedule in the first round: at
    // mount). Each step takes the lock on its own; counting space walks without it.
    if opts.schedules {
        let companions = opts.companions.as_ref().map(|c| &*c.0);
        let inval = crate::scheduler::run(engine, crate::scheduler::now(), first, companions);
        if !inval.is_empty() {
            invalidate(&inval);
        }
    }
}
