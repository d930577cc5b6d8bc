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
//! mount with `fold_batch=N` folds early always; `fold_batch=0` never. Either way a volume
//! whose folds cost more per inode than most folds fewer at a time (`FoldCost`). While nobody
//! would wait, what piles up is still bounded by what folding it would cost (`PILE_NS`): the
//! caller who arrives next waits for that fold. And a pile saves writes only where a fold
//! rewrites leaves the fold before it wrote (a directory's last leaf as an untar fills it,
//! names scattered over a directory of few leaves); where it does not (files rewritten across
//! directories, each leaf changed in one fold whatever its size), folds are early whoever
//! uses the mount (`FoldCost::nothing_saved_by_waiting`), and nobody meets a pile.

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

/// The default's policy with a batch of `inodes`: early folds only while someone would wait
/// on them, or while nothing is saved by waiting. For tests of the policy (`fold_batch=N`
/// folds early always).
#[doc(hidden)]
pub fn set_early_batch(inodes: usize) {
    BATCH.store(inodes, Relaxed);
    ALWAYS.store(false, Relaxed);
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

/// While nobody would wait on a fold, changes pile up until folding them would hold the
/// engine lock about this long; a second caller arriving then waits for no more. Unbounded
/// (until the checkpoint after 30 s, or the bounds on memory and the journal), a pile of
/// 14,000 rewritten files held the caller who met it 0.3-0.6 s (`bench/latency`'s diff row).
/// Each fold rewrites the leaves of the directories it touches, so smaller piles cost an
/// untar more metadata: write amplification 2.55-2.61 unbounded, 2.95 at 100 ms, 2.92-3.40
/// at 50 ms, 2.73-2.81 at 200 ms (docs/benchmarks.md, "Folds without copies").
const PILE_NS: u64 = 100_000_000;
/// A pile's bounds in inodes, whatever its folds cost; and the cost assumed before any fold
/// was timed.
const MIN_PILE: usize = 2 * DEFAULT_BATCH;
const MAX_PILE: usize = 64 * DEFAULT_BATCH;
const PILE_GUESS_NS: u64 = 20_000;

/// About how long an early fold may hold the engine lock: a volume whose folds cost more per
/// inode folds fewer at a time (`FoldCost`). A caller can meet two holds in one small
/// operation (an open, then its fsync): in `bench/latency`'s scatter row (folds of 15-45 µs
/// an inode), the loop's maximum was 47-50 ms with folds of 15 ms, 31-32 ms with folds of
/// 10 ms, for 5-7% more metadata written in that row (a smaller fold rewrites a leaf for
/// fewer names). Folds that cost under 10 µs an inode, most of them, stay at `DEFAULT_BATCH`.
const FOLD_TARGET_NS: u64 = 10_000_000;
/// The fewest inodes an early fold waits for, however costly: below it each fold's fixed
/// costs (the namespace table, the checkpoint record, the commit's syncs) would dominate.
const MIN_BATCH: usize = 128;
/// Folds of fewer inodes are not timed: their fixed costs would count as the inodes'.
const MIN_SAMPLE: usize = 64;
/// Below this share (per mille) of an early fold's new nodes replacing the fold before's,
/// waiting for a larger fold would save too little to be worth its pause
/// (`FoldCost::nothing_saved_by_waiting`). Early folds (1,024) measured: files rewritten
/// across directories 6-185, new names in order 12-46, an untar of /usr/share/man 515,
/// names scattered over a directory 126-260 (small) to 490-725 (few leaves); a pile of the
/// first wrote 8% fewer tree bytes than its early folds, and held every request 118 ms.
const AGAIN_PER_MILLE: u64 = 200;

/// What a volume's folds cost per inode, so that its early folds stay near `FOLD_TARGET_NS`.
/// A dearer fold counts at once, a cheaper one by half: a cost that rises as a directory
/// grows (each new name a leaf of its own) is followed without a lag, which an even
/// average had (one fold of 40 ms in `bench/latency`'s scatter row, its batch fitted to
/// the folds before).
/// Most folds cost 5-20 µs an inode here; one whose new files have names scattered over a
/// large directory costs about 45 µs, as each of them rewrites a leaf of its own (16 KiB,
/// its records holding small files' bytes): 1,024 of them held every request up ~47 ms
/// (`examples/fold_cost`), and 400 held it 45% as long as 1,024 in the same conditions.
#[derive(Debug, Default)]
pub(crate) struct FoldCost {
    /// The last fold's cost if it was the dearest, else an average over the last folds,
    /// weighting the latest half (0: none timed yet).
    ns_per_inode: u64,
    /// Of the tree nodes the last folds made, the share (per mille) that replaced nodes the
    /// fold before had made, the latest weighing half (None: no fold noted yet).
    again_per_mille: Option<u64>,
}

impl FoldCost {
    /// A fold of `inodes` took `took` and made `made` tree nodes, `again` of them in place
    /// of nodes the fold before had made (`Forest::fold_rewrites`; None: there was none).
    pub(crate) fn note(&mut self, inodes: usize, took: std::time::Duration, made: u64, again: Option<u64>) {
        if inodes < MIN_SAMPLE {
            return;
        }
        let sample = (took.as_nanos() / inodes as u128).min(u64::MAX as u128) as u64;
        self.ns_per_inode = if sample >= self.ns_per_inode { sample } else { (self.ns_per_inode + sample) / 2 };
        // Only a fold of about the early batch tells what folding early costs: a pile's
        // share, against the fold before it, is smaller whatever the pattern.
        let early_sized = inodes <= 2 * BATCH.load(Relaxed);
        if let Some(again) = again.filter(|_| made > 0 && early_sized) {
            let share = (again * 1000 / made).min(1000);
            self.again_per_mille = Some(self.again_per_mille.map_or(share, |s| (s + share) / 2));
        }
    }

    /// Whether folding early costs this volume's folds few more writes: its early folds
    /// have replaced few of the nodes the fold before them made (`AGAIN_PER_MILLE`), so
    /// each change rewrites leaves of its own however long it waits (files rewritten across
    /// directories: each leaf rewritten in one fold or two). Then early folds are taken even
    /// while nobody would wait on them: the pile they would otherwise leave is what the
    /// next caller waits for, and would save about that share of the tree's writes. Piles
    /// teach nothing here (`note`), so a volume that piles up keeps piling until its early
    /// folds (while someone waits) say otherwise.
    fn nothing_saved_by_waiting(&self) -> bool {
        self.again_per_mille.is_some_and(|s| s < AGAIN_PER_MILLE)
    }

    /// `early_batch`, fitted to this volume's cost.
    pub(crate) fn batch(&self) -> Option<usize> {
        self.batches().map(|(_, fitted)| fitted)
    }

    /// How many waiting inodes make a fold now, as set and as fitted to this volume's cost:
    /// `early_batch` while someone would wait on a fold, else a pile (`pile`). None with
    /// `fold_batch=0` (folds by age and size only).
    pub(crate) fn batches(&self) -> Option<(usize, usize)> {
        let set = BATCH.load(Relaxed);
        let free = (set > 0 && self.nothing_saved_by_waiting()).then_some(set);
        match early_batch().or(free) {
            Some(n) => Some((n, fit(n, self.ns_per_inode))),
            None if set > 0 => {
                let pile = self.pile();
                Some((pile, pile))
            }
            None => None,
        }
    }

    /// The most inodes left to pile up while nobody would wait on their fold: about
    /// `PILE_NS` of folding at this volume's cost.
    fn pile(&self) -> usize {
        let ns = if self.ns_per_inode == 0 { PILE_GUESS_NS } else { self.ns_per_inode };
        ((PILE_NS / ns).min(usize::MAX as u64) as usize).clamp(MIN_PILE, MAX_PILE)
    }
}

/// The batch of at most `n` inodes whose fold takes about `FOLD_TARGET_NS` at `ns_per_inode`,
/// and at least `MIN_BATCH` (or `n`, if smaller).
fn fit(n: usize, ns_per_inode: u64) -> usize {
    if ns_per_inode == 0 {
        return n;
    }
    let fits = (FOLD_TARGET_NS / ns_per_inode).min(usize::MAX as u64) as usize;
    fits.clamp(MIN_BATCH.min(n), n)
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

    /// Costly folds come in smaller batches, never below `MIN_BATCH` nor above the batch set.
    #[test]
    fn batches_fit_the_fold_cost() {
        assert_eq!(fit(1024, 0), 1024, "nothing timed yet");
        assert_eq!(fit(1024, 6_000), 1024, "cheap folds: the batch set");
        assert_eq!(fit(1024, 40_000), 250, "10 ms of folds at 40 µs an inode");
        assert_eq!(fit(1024, 10_000_000), MIN_BATCH);
        assert_eq!(fit(16, 10_000_000), 16, "a batch set below MIN_BATCH stays");
        let mut c = FoldCost::default();
        c.note(10, std::time::Duration::from_secs(1), 0, None);
        assert_eq!(c.ns_per_inode, 0, "too small a fold to time");
        c.note(1000, std::time::Duration::from_millis(40), 0, None);
        assert_eq!(c.ns_per_inode, 40_000);
        c.note(1000, std::time::Duration::from_millis(10), 0, None);
        assert_eq!(c.ns_per_inode, 25_000, "a cheaper fold weighs half");
        c.note(1000, std::time::Duration::from_millis(60), 0, None);
        assert_eq!(c.ns_per_inode, 60_000, "a dearer fold counts at once");
    }

    /// Waiting for a larger fold saves writes only where folds replace the nodes the fold
    /// before made.
    #[test]
    fn waiting_saves_writes_only_where_folds_rewrite_the_last_ones() {
        let ms = std::time::Duration::from_millis;
        let mut c = FoldCost::default();
        assert!(!c.nothing_saved_by_waiting(), "nothing noted");
        let early = 2 * BATCH.load(Relaxed);
        c.note(early, ms(10), 300, None);
        assert!(!c.nothing_saved_by_waiting(), "no fold before it to tell by");
        c.note(early, ms(10), 300, Some(3));
        assert!(c.nothing_saved_by_waiting(), "1% of its nodes replaced the last fold's");
        c.note(early, ms(10), 300, Some(270));
        assert_eq!(c.again_per_mille, Some(455), "the latest weighs half");
        assert!(!c.nothing_saved_by_waiting());
        c.note(10, ms(10), 300, Some(0));
        c.note(early + 1, ms(10), 300, Some(0));
        c.note(early, ms(10), 0, Some(0));
        assert_eq!(c.again_per_mille, Some(455), "too small a fold, a pile, a fold that made no node: nothing noted");
        c.note(early, ms(10), 300, Some(0));
        assert!(!c.nothing_saved_by_waiting(), "227");
        c.note(early, ms(10), 300, Some(0));
        assert!(c.nothing_saved_by_waiting(), "113");
    }

    /// A pile nobody waits on is bounded by what folding it would cost.
    #[test]
    fn piles_are_bounded_by_their_fold_cost() {
        let mut c = FoldCost::default();
        assert_eq!(c.pile(), 5_000, "nothing timed yet: an assumed cost");
        c.note(1000, std::time::Duration::from_millis(10), 0, None);
        assert_eq!(c.pile(), 10_000, "10 µs an inode");
        c.note(1000, std::time::Duration::from_millis(1), 0, None);
        c.note(1000, std::time::Duration::from_millis(1), 0, None);
        c.note(1000, std::time::Duration::from_millis(1), 0, None);
        assert_eq!(c.ns_per_inode, 2_125);
        assert_eq!(c.pile(), 47_058, "cheap folds: larger piles");
        c.note(1000, std::time::Duration::from_secs(1), 0, None);
        assert_eq!(c.pile(), MIN_PILE, "however dear, not below MIN_PILE");
        let cheap = FoldCost { ns_per_inode: 1, ..Default::default() };
        assert_eq!(cheap.pile(), MAX_PILE);
    }
}
