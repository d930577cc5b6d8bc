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
            BACKGROUND.set(true);
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

/// See `requests_served_at_idle`.
static REQUESTS_AT_IDLE: AtomicBool = AtomicBool::new(false);

/// Says that this process serves requests at `SCHED_IDLE` (FUSE over io_uring), so that the
/// background worker's unlocked work runs at that priority too (`aside`).
pub fn requests_served_at_idle(on: bool) {
    REQUESTS_AT_IDLE.store(on, Ordering::Relaxed);
}

thread_local! {
    /// Set on the background worker's thread (`aside`).
    static BACKGROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` at `SCHED_IDLE` when called from the background worker's thread (on a thread of
/// its own, which the worker waits for), elsewhere as it is: work done without the engine
/// lock that no caller is waiting on (a checkpoint's write-out of its tree nodes and its
/// pack sync). The FUSE queue threads serve requests at `SCHED_IDLE` on their CPU
/// (`vendor/fuser/src/uring.rs`), and a normal task on that CPU keeps them off it: at
/// normal priority that work, copying a fold's megabytes of nodes into the host's page
/// cache, kept requests waiting up to 36 ms for a CPU after the engine lock was free (`perf
/// sched timehist` in `bench/latency`'s scatter row). A thread of its own, because an
/// unprivileged thread may lower itself to `SCHED_IDLE` but not come back (RLIMIT_NICE).
/// Work under the engine lock is never lowered: every request waits on it.
///
/// Only while requests are served at `SCHED_IDLE` (`requests_served_at_idle`): over
/// `/dev/fuse` they are served at normal priority, and one waiting on the sync (an fsync whose
/// records name its blocks, a request committing the checkpoint in flight) would then wait
/// on a thread that any busy CPU starves.
pub(crate) fn aside<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if !BACKGROUND.get() || !REQUESTS_AT_IDLE.load(Ordering::Relaxed) {
        return f();
    }
    let mut f = Some(f);
    let done = std::thread::scope(|s| {
        let t = std::thread::Builder::new().name("scion-sync".into()).spawn_scoped(s, || {
            let p = libc::sched_param { sched_priority: 0 };
            // SAFETY: changes this thread's own policy; `p` lives for the call.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
                log::debug!("background: SCHED_IDLE: {}", std::io::Error::last_os_error());
            }
            f.take().map(|f| f())
        });
        // (A panic in `f` goes on in this thread, as it would have run here.)
        t.ok().map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    // No thread to be had: the work is done here, at normal priority.
    done.flatten().or_else(|| f.take().map(|f| f())).expect("the work ran once")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: reads this thread's own policy.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// The background worker's unlocked work runs at SCHED_IDLE on a thread of its own; the
    /// worker itself, and any other caller, keep their policy.
    #[test]
    fn only_the_workers_unlocked_work_runs_at_sched_idle() {
        std::thread::spawn(move || {
            let before = policy();
            let here = std::thread::current().id();
            assert_eq!(aside(policy), before, "a caller other than the worker: as it is");
            assert_eq!(aside(move || std::thread::current().id()), here, "and where it is");
            BACKGROUND.set(true);
            requests_served_at_idle(false);
            assert_eq!(aside(policy), before, "requests served at normal priority: as it is");
            requests_served_at_idle(true);
            assert_eq!(aside(policy), libc::SCHED_IDLE);
            assert_ne!(aside(move || std::thread::current().id()), here, "a thread of its own");
            assert_eq!(policy(), before, "the worker keeps its own policy");
            requests_served_at_idle(false);
        })
        .join()
        .unwrap();
    }
}
