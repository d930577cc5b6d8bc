//! How long the engine lock is held, and waited for (issue 38): what every request feels as
//! a stall. Every lock goes through [`lock`], whose guard notes where it was taken
//! (`#[track_caller]`: the file and line of the caller, through the adapters' helpers) and,
//! when dropped, how long it was held. `scion status` shows the counts by length and the
//! longest holds with where they were taken, so a user who sees a pause can tell what held
//! the mount, and a bench can tell which command's step a row's maximum was. Holds of 50 ms
//! or more are logged too (at info, the daemon's level), with the same place.
//!
//! The counts live in the engine itself (`Fs::lock_stats`): the guard writes them while it
//! still holds the lock, so they need no lock or atomic of their own.

use crate::Fs;
use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Upper bounds of the length buckets, in microseconds: up to 1 ms, 10 ms, 50 ms, 250 ms,
/// and longer.
pub const BUCKETS_US: [u64; 4] = [1_000, 10_000, 50_000, 250_000];

/// The longest holds kept, each with where it was taken.
const LONGEST_KEPT: usize = 8;

/// One long hold: how long, where the lock was taken, and when it was let go.
#[derive(Clone, Copy, Debug)]
struct Hold {
    us: u64,
    at: &'static Location<'static>,
    ended: Instant,
}

/// Holds and waits of one engine's lock since it was made.
#[derive(Debug)]
pub(crate) struct LockStats {
    since: Instant,
    holds: u64,
    held: [u64; 5],
    waited: [u64; 5],
    longest_wait_us: u64,
    /// The longest holds, longest first, at most `LONGEST_KEPT`.
    longest: Vec<Hold>,
}

impl Default for LockStats {
    fn default() -> Self {
        LockStats {
            since: Instant::now(),
            holds: 0,
            held: [0; 5],
            waited: [0; 5],
            longest_wait_us: 0,
            longest: Vec::with_capacity(LONGEST_KEPT + 1),
        }
    }
}

fn bucket(us: u64) -> usize {
    BUCKETS_US.iter().position(|b| us <= *b).unwrap_or(BUCKETS_US.len())
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl LockStats {
    fn waited(&mut self, d: Duration) {
        let us = micros(d);
        self.waited[bucket(us)] += 1;
        self.longest_wait_us = self.longest_wait_us.max(us);
    }

    fn held(&mut self, d: Duration, at: &'static Location<'static>) {
        let us = micros(d);
        self.holds += 1;
        self.held[bucket(us)] += 1;
        // Most holds are microseconds: one comparison with the shortest kept.
        let full = self.longest.len() == LONGEST_KEPT;
        if full && self.longest.last().is_some_and(|h| h.us >= us) {
            return;
        }
        let i = self.longest.partition_point(|h| h.us >= us);
        self.longest.insert(i, Hold { us, at, ended: Instant::now() });
        self.longest.truncate(LONGEST_KEPT);
        debug_assert!(self.longest.windows(2).all(|w| w[0].us >= w[1].us), "longest holds out of order");
    }

    /// What `scion status` shows.
    pub(crate) fn report(&self) -> LockReport {
        LockReport {
            holds: self.holds,
            held: self.held,
            waited: self.waited,
            longest_wait_us: self.longest_wait_us,
            longest: self
                .longest
                .iter()
                .map(|h| LongHold {
                    us: h.us,
                    at: format!("{}:{}", h.at.file(), h.at.line()),
                    ended_s: h.ended.saturating_duration_since(self.since).as_secs(),
                })
                .collect(),
        }
    }
}

/// The engine lock's holds and waits since mount, for `scion status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockReport {
    pub holds: u64,
    /// Holds, and waits for the lock, by length (`BUCKETS_US`, then longer).
    pub held: [u64; 5],
    pub waited: [u64; 5],
    pub longest_wait_us: u64,
    /// The longest holds, longest first.
    pub longest: Vec<LongHold>,
}

/// One of the longest holds of the engine lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LongHold {
    pub us: u64,
    /// Where the lock was taken (file:line of the source).
    pub at: String,
    /// When it was let go, in seconds since mount.
    pub ended_s: u64,
}

/// The engine, locked: derefs to `Fs`; when dropped, notes how long it was held and where
/// it was taken.
pub struct Locked<'a> {
    guard: MutexGuard<'a, Fs>,
    since: Instant,
    at: &'static Location<'static>,
}

impl Deref for Locked<'_> {
    type Target = Fs;
    fn deref(&self) -> &Fs {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Fs {
        &mut self.guard
    }
}

/// Holds at least this long are logged (each is a pause every request felt): 50 ms, or
/// `SCION_LOCK_LOG_MS` milliseconds from the daemon's environment (`bench/latency` logs
/// every hold of 5 ms).
fn log_from() -> Duration {
    static FROM: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *FROM.get_or_init(|| {
        let ms = std::env::var("SCION_LOCK_LOG_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
        Duration::from_millis(ms)
    })
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let held = self.since.elapsed();
        self.guard.lock_stats.held(held, self.at);
        // A view's lock (`view.rs`) is the command's own: it holds no request up.
        if held >= log_from() && self.guard.view.is_none() {
            let dir = self.guard.vol.dir.display();
            log::info!("{dir}: engine lock held {:.1} ms, taken at {}", held.as_secs_f64() * 1e3, self.at);
        }
    }
}

/// Locks the engine. A panic while the lock was held (a bug) left the in-memory state
/// half changed: the volume is marked failed (changes and fsync refused, reads go on, as
/// after a failed fsync) and the poison cleared, so that every later caller sees a failed
/// volume instead of a state it cannot trust. Nothing acknowledged is lost: no checkpoint
/// is taken from that state, and a remount replays the journal.
#[track_caller]
pub fn lock(m: &Mutex<Fs>) -> Locked<'_> {
    let at = Location::caller();
    let asked = Instant::now();
    let mut guard = match m.lock() {
        Ok(g) => g,
        Err(p) => {
            let mut g = p.into_inner();
            g.fail("a panic while the engine lock was held (see the panic above in this log)");
            m.clear_poison();
            g
        }
    };
    let since = Instant::now();
    guard.lock_stats.waited(since - asked);
    Locked { guard, since, at }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_counted_by_length_and_the_longest_kept_in_order() {
        let mut s = LockStats::default();
        let here = Location::caller();
        for us in [5, 2_000, 70_000, 400_000, 900, 12_000, 60_000, 3, 8, 9, 10, 11] {
            s.held(Duration::from_micros(us), here);
        }
        s.waited(Duration::from_micros(20_000));
        let r = s.report();
        assert_eq!(r.holds, 12);
        assert_eq!(r.held, [7, 1, 1, 2, 1]);
        assert_eq!(r.waited, [0, 0, 1, 0, 0]);
        assert_eq!(r.longest_wait_us, 20_000);
        let us: Vec<u64> = r.longest.iter().map(|h| h.us).collect();
        assert_eq!(us, [400_000, 70_000, 60_000, 12_000, 2_000, 900, 11, 10]);
        assert!(r.longest[0].at.ends_with(&format!("lock_stats.rs:{}", here.line())));
    }

    #[test]
    fn bucket_bounds_are_inclusive() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1_000), 0);
        assert_eq!(bucket(1_001), 1);
        assert_eq!(bucket(250_000), 3);
        assert_eq!(bucket(250_001), 4);
    }
}
