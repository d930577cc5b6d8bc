//! Snapshot schedules (CCFS, snapper's timeline, sanoid): a directory snapshotted every so
//! often, its scheduled snapshots thinned by a retention policy and by the host's free
//! space. What a schedule is (`Schedule`), the policy (`retention`), the calendar
//! (`clock`), and what the filesystem model answers about a directory's scheduled
//! snapshots. The schedules are kept in `STORE/schedules` (`records::schedules`); the
//! daemon's scheduler (`scion_daemon::scheduler`) runs them.

pub mod clock;
pub mod retention;

use crate::error::errno;
use crate::fs::{Fs, Ino};
use crate::{FsResult, NsKind};
use retention::{Keep, Thresholds};

/// Schedules a store keeps at most.
pub const MAX_SCHEDULES: usize = 256;
/// The longest interval: a year.
pub const MAX_EVERY: u64 = 366 * 86_400;

/// A directory's schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The directory, as a path from the mount root (names separated by `/`; empty: the
    /// root).
    pub dir: Vec<u8>,
    /// Seconds between snapshots.
    pub every: u64,
    pub keep: Keep,
    pub limits: Thresholds,
}

impl Schedule {
    pub fn validate(&self) -> Result<(), String> {
        if self.every == 0 || self.every > MAX_EVERY {
            return Err(format!("an interval of {} s (1 s to a year)", self.every));
        }
        if self.limits.keep_while_free.is_some_and(|p| p > 100) || self.limits.min_free.is_some_and(|p| p > 100) {
            return Err("a threshold above 100%".into());
        }
        if self.dir.split(|b| *b == b'/').any(|c| c == b".." || c == b".") || self.dir.starts_with(b"/") {
            return Err(format!(
                "directory {:?} is not a plain path from the mount root",
                String::from_utf8_lossy(&self.dir)
            ));
        }
        Ok(())
    }
}

/// `90s`, `15m`, `2h`, `7d` (a bare number is seconds) as seconds.
pub fn parse_every(s: &str) -> Result<u64, String> {
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("interval {s:?}: expected a number and s, m, h or d (15m)"))?;
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        u => return Err(format!("interval {s:?}: unknown unit {u:?} (s, m, h, d)")),
    };
    let secs = n.checked_mul(mult).filter(|&v| v > 0 && v <= MAX_EVERY);
    secs.ok_or_else(|| format!("interval {s:?}: between 1s and 366d"))
}

/// A snapshot of a directory, as its schedule sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirSnapshot {
    pub id: u32,
    pub name: Vec<u8>,
    /// Seconds since the epoch.
    pub created: i64,
    pub scheduled: bool,
}

/// A schedule with what its directory's snapshots say of it (`scion snapshot schedule
/// --list`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRow {
    pub schedule: Schedule,
    /// The newest scheduled snapshot's time.
    pub last_run: Option<i64>,
    /// When the next one is due (`None`: the directory is gone, nothing runs).
    pub next_run: Option<i64>,
    /// Scheduled snapshots kept now.
    pub kept: usize,
}

impl Fs {
    fn stored_schedules(&self) -> FsResult<&crate::records::schedules::Stored> {
        self.vol
            .schedules
            .as_ref()
            .map_err(|e| errno::EIO.with(format!("the schedules file cannot be read: {e}")))
    }

    /// The store's schedules, as kept.
    pub fn schedule_list(&self) -> FsResult<Vec<Schedule>> {
        Ok(self.stored_schedules()?.schedules.clone())
    }

    /// Every schedule with its last and next run and the scheduled snapshots it keeps.
    pub fn schedule_rows(&mut self) -> FsResult<Vec<ScheduleRow>> {
        let mut rows = Vec::new();
        for s in self.schedule_list()? {
            let snaps = self.resolve_path(&s.dir).and_then(|d| self.dir_snapshots(d));
            let (last_run, next_run, kept) = match snaps {
                Ok(v) => {
                    let sched: Vec<&DirSnapshot> = v.iter().filter(|x| x.scheduled).collect();
                    let last = sched.last().map(|x| x.created);
                    (
                        last,
                        Some(last.map_or(clock::now_secs(), |l| l + s.every as i64)),
                        sched.len(),
                    )
                }
                Err(_) => (None, None, 0),
            };
            rows.push(ScheduleRow {
                schedule: s,
                last_run,
                next_run,
                kept,
            });
        }
        Ok(rows)
    }

    /// Adds the schedule of `s.dir`, or replaces it; the directory must exist. Kept in the
    /// schedules file before this returns.
    pub fn set_schedule(&mut self, s: Schedule) -> FsResult<()> {
        s.validate().map_err(|e| errno::EINVAL.with(e))?;
        self.writable()?;
        let d = self.resolve_path(&s.dir)?;
        self.dir_node(d)?;
        // A snapshot never changes: each run would fail. Its directory is what to schedule.
        if self.check_writable(d).is_err() {
            return Err(errno::EROFS.with(format!(
                "/{} is in a snapshot, which never changes: schedule the directory it was taken of",
                String::from_utf8_lossy(&s.dir)
            )));
        }
        let prev = self.stored_schedules()?.clone();
        let mut list = prev.schedules.clone();
        match list.iter().position(|o| o.dir == s.dir) {
            Some(i) => list[i] = s,
            None if list.len() >= MAX_SCHEDULES => {
                return Err(errno::ENOSPC.with(format!("a store keeps at most {MAX_SCHEDULES} schedules")))
            }
            None => list.push(s),
        }
        self.save_schedules(&prev, list)?;
        Ok(())
    }

    /// Writes `list` as the schedules after `prev` (synced before this returns).
    fn save_schedules(&mut self, prev: &crate::records::schedules::Stored, list: Vec<Schedule>) -> FsResult<()> {
        let saved = crate::records::schedules::save(&self.vol.host, &self.vol.dir, prev, list)?;
        self.vol.schedules = Ok(saved);
        Ok(())
    }

    /// Removes the schedule of `dir` (its snapshots stay, as snapshots taken by hand would);
    /// false if it had none.
    pub fn remove_schedule(&mut self, dir: &[u8]) -> FsResult<bool> {
        self.writable()?;
        let prev = self.stored_schedules()?.clone();
        let mut list = prev.schedules.clone();
        let before = list.len();
        list.retain(|s| s.dir != dir);
        if list.len() == before {
            return Ok(false);
        }
        self.reclaimable.remove(dir);
        self.save_schedules(&prev, list)?;
        Ok(true)
    }

    /// Records what the `--keep-while-free` snapshots of `dir`'s schedule would give back
    /// (`statfs` counts it as available); 0 forgets it.
    pub fn set_reclaimable(&mut self, dir: &[u8], bytes: u64) {
        if bytes == 0 {
            self.reclaimable.remove(dir);
        } else {
            self.reclaimable.insert(dir.to_vec(), bytes);
        }
    }

    /// The snapshots of directory `dir` (by hand and scheduled), oldest first.
    pub fn dir_snapshots(&self, dir: Ino) -> FsResult<Vec<DirSnapshot>> {
        let n = self.dir_node(dir)?;
        let (ns, oid) = (n.ns, n.inode.oid);
        let mut v: Vec<DirSnapshot> = self
            .namespaces
            .iter()
            .filter(|(_, s)| s.info.kind == NsKind::Snapshot && s.info.parent == ns && s.info.anchor == oid)
            .filter(|(_, s)| !crate::clone::is_transient(&s.info.name))
            .map(|(id, s)| DirSnapshot {
                id: *id,
                name: s.info.name.clone(),
                created: s.info.created.sec,
                scheduled: s.info.scheduled,
            })
            .collect();
        v.sort_by_key(|s| (s.created, s.id));
        Ok(v)
    }

    /// Takes the scheduled snapshot of `dir` for time `now`: named by that time, with `-1`,
    /// `-2`... if the name is taken. Returns its id and name.
    pub fn scheduled_snapshot(&mut self, dir: Ino, now: i64, origin: &[u8]) -> FsResult<(u32, Vec<u8>)> {
        let base = clock::snapshot_name(now);
        let taken: Vec<Vec<u8>> = self.dir_snapshots(dir)?.into_iter().map(|s| s.name).collect();
        let name = (0..1000)
            .map(|i| if i == 0 { base.clone() } else { format!("{base}-{i}") })
            .map(String::into_bytes)
            .find(|n| !taken.contains(n))
            .ok_or(errno::EEXIST)?;
        // A schedule an ordinary user may have set (rights.rs): the snapshots of a directory
        // someone other than root owns are made for that owner, hiding others' privileges,
        // as the snapshots they take by hand are.
        let owner = self.node(dir)?.inode.uid;
        let masked_for = (owner != 0).then_some(owner);
        let id = self.snapshot_for(dir, &name, origin, true, crate::Ts { sec: now, nsec: 0 }, masked_for)?;
        Ok((id, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(parse_every("90"), Ok(90));
        assert_eq!(parse_every("15m"), Ok(900));
        assert_eq!(parse_every("2h"), Ok(7200));
        assert_eq!(parse_every("7d"), Ok(604_800));
        for bad in ["", "0s", "m", "5w", "-1s", "367d", "1.5h"] {
            assert!(parse_every(bad).is_err(), "{bad:?} accepted");
        }
    }
}
