//! When a checkpoint is folded early: as soon as `fold_batch` changed inodes wait, but only
//! while someone would wait on the fold.
//!
//! A fold holds the engine lock for about 20 µs per changed inode, so folding every 1,024
//! keeps the pause every request waits at tens of milliseconds (issue 38). But each fold
//! rewrites the tree leaves of the directories its inodes are in, and a busy directory's
//! leaves are rewritten at every one: an untar of 21,000 small files wrote 126 MB of metadata
//! for 37 MB with folds of 1,024, 25 MB with folds by age and size only (docs/benchmarks.md,
//! "Latency under load"). Only the caller's own requests wait on a fold while one process is
//! alone on the mount, and a process that does not sync waits for nothing but throughput. So
//! by default folds come early only while the pause can hurt someone: a caller synced in the
//! last `RECENT` (fsync, fdatasync, an NFS COMMIT: it is waiting on the disk), or requests
//! came from more than one caller in it (the FUSE adapter notes each request's caller,
//! `note_caller`; requests the kernel makes on its own, such as write-back, are not noted). A
//! mount with `fold_batch=N` folds early always; `fold_batch=0` never.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::Instant;

/// Inodes waiting that make an early fold (`fold_batch=N`).
static BATCH: AtomicUsize = AtomicUsize::new(DEFAULT_BATCH);
const DEFAULT_BATCH: usize = 1024;
/// Set by `fold_batch=N`: early folds whoever uses the mount.
static ALWAYS: AtomicBool = AtomicBool::new(false);
static ACTIVITY: Activity = Activity::new();
/// How long a second caller or a sync keeps folds early (milliseconds).
const RECENT_MS: u64 = 2000;

/// Who used the mount lately: the last caller noted, and when (milliseconds since `EPOCH`,
/// 0: never) a second one was, or a sync.
struct Activity {
    last_caller: AtomicU32,
    shared_at: AtomicU64,
    synced_at: AtomicU64,
}

impl Activity {
    const fn new() -> Activity {
        Activity { last_caller: AtomicU32::new(0), shared_at: AtomicU64::new(0), synced_at: AtomicU64::new(0) }
    }

    fn caller(&self, pid: u32, now: u64) {
        if pid == 0 {
            return;
        }
        let before = self.last_caller.swap(pid, Relaxed);
        if before != 0 && before != pid {
            self.shared_at.store(now, Relaxed);
        }
    }

    fn sync(&self, now: u64) {
        self.synced_at.store(now, Relaxed);
    }

    /// Whether someone would wait on a fold at `now`.
    fn busy(&self, now: u64) -> bool {
        let recent = |at: &AtomicU64| {
            let t = at.load(Relaxed);
            t != 0 && now.saturating_sub(t) < RECENT_MS
        };
        recent(&self.synced_at) || recent(&self.shared_at)
    }
}

fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // +1: 0 means "never".
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// `fold_batch=N`: early folds once `inodes` wait, always (0: never, by age and size only).
pub fn set_fold_batch(inodes: usize) {
    BATCH.store(inodes, Relaxed);
    ALWAYS.store(true, Relaxed);
}

/// A request made by process (thread) `pid` (0: the kernel's own, not noted).
pub fn note_caller(pid: u32) {
    ACTIVITY.caller(pid, now_ms());
}

/// A sync a caller asked for.
pub(crate) fn note_sync() {
    ACTIVITY.sync(now_ms());
}

/// How many waiting inodes make a fold now (`None`: none, folds by age and size only).
pub(crate) fn early_batch() -> Option<usize> {
    let n = BATCH.load(Relaxed);
    let wanted = ALWAYS.load(Relaxed) || ACTIVITY.busy(now_ms());
    (n > 0 && wanted).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One caller alone is not waited on; a second caller or a sync is, for a while.
    #[test]
    fn busy_only_while_someone_would_wait() {
        let a = Activity::new();
        for pid in [7, 7, 0, 7] {
            a.caller(pid, 100);
        }
        assert!(!a.busy(150), "one caller, no sync");
        a.caller(8, 200);
        assert!(a.busy(250), "a second caller");
        assert!(!a.busy(200 + RECENT_MS), "a second caller long ago");
        a.sync(5000);
        assert!(a.busy(5000 + RECENT_MS - 1), "a sync");
        assert!(!a.busy(5000 + RECENT_MS), "a sync long ago");
        a.caller(8, 9000);
        assert!(!a.busy(9001), "the same caller again");
    }
}
