//! Runs a store's snapshot schedules (scion-fs `schedule`): takes the snapshots that are due,
//! then thins each schedule's scheduled snapshots by its retention policy and the host's
//! free space. A schedule is due when its newest scheduled snapshot is `every` old, or it has
//! none, so a mount that was down when one was due takes one at mount, not one for each
//! that it missed. Retention runs after each scheduled snapshot and, for every schedule, at
//! the first round after mount. The background worker calls [`run`] every round.

use crate::Engine;
use scion_fs::clone::SNAPDIR_BIT;
use scion_fs::schedule::retention::{self, Snap, Space};
use scion_fs::schedule::{clock, Schedule};
use scion_fs::{FsResult, Inval};
use std::collections::{HashMap, HashSet};

/// What else a schedule's snapshots stand for: the cubes below a scheduled directory, each
/// snapshotted under the same name with it and thinned with it (`Cubes`). Called without
/// the engine lock.
pub trait Companions: Send + Sync {
    /// Snapshot `name` of directory `dir` (a path from the volume's root) was taken at `now`.
    fn taken(&self, dir: &[u8], name: &[u8], now: i64);
    /// Snapshot `name` of `dir` was removed by retention.
    fn removed(&self, dir: &[u8], name: &[u8]);
}

/// One round at time `now` (seconds since the epoch); `all`: apply retention to every
/// schedule (the first round after mount); `companions` are told what each schedule took
/// and removed. Returns what the kernel must forget.
pub fn run(engine: &Engine, now: i64, all: bool, companions: Option<&dyn Companions>) -> Vec<Inval> {
    let mut inval = Vec::new();
    let schedules = match engine.lock().schedule_list() {
        Ok(l) => l,
        // Logged once at mount (the file could not be read); nothing runs.
        Err(_) => return inval,
    };
    for s in schedules {
        let took = match take_if_due(engine, &s, now, &mut inval) {
            Ok(took) => took,
            Err(e) => {
                log::error!("schedule of /{}: snapshot failed: {e}", show(&s.dir));
                None
            }
        };
        if let (Some(name), Some(c)) = (&took, companions) {
            c.taken(&s.dir, name, now);
        }
        if took.is_some() || all {
            if let Err(e) = retain(engine, &s, &mut inval, companions) {
                log::error!("schedule of /{}: retention failed: {e}", show(&s.dir));
            }
        }
    }
    inval
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Takes the schedule's snapshot if one is due; its name if it did.
fn take_if_due(engine: &Engine, s: &Schedule, now: i64, inval: &mut Vec<Inval>) -> FsResult<Option<Vec<u8>>> {
    let mut fs = engine.lock();
    // A directory that is gone (or not writable: a read-only mount) is skipped quietly;
    // `--list` shows it has no next run.
    let Ok(dir) = fs.resolve_path(&s.dir) else {
        return Ok(None);
    };
    if fs.check_writable(dir).is_err() {
        return Ok(None);
    }
    let last = fs
        .dir_snapshots(dir)?
        .iter()
        .filter(|x| x.scheduled)
        .map(|x| x.created)
        .max();
    if last.is_some_and(|l| now < l.saturating_add(s.every as i64)) {
        return Ok(None);
    }
    let origin = format!("/{}", show(&s.dir)).into_bytes();
    // Its closing sync is made without the engine lock, as a snapshot asked for is.
    let (taken, owed) = fs.with_sync_owed(|fs| fs.scheduled_snapshot(dir, now, &origin));
    inval.extend(fs.take_invalidations());
    drop(fs);
    if owed {
        engine.fsync()?;
    }
    let (_, name) = taken?;
    log::info!("schedule of /{}: took snapshot {}", show(&s.dir), show(&name));
    let snapdir = dir | SNAPDIR_BIT;
    inval.extend([Inval::Entry(snapdir, name.clone()), Inval::Inode(snapdir)]);
    Ok(Some(name))
}

/// Removes the scheduled snapshots of `s.dir` that its policy and thresholds give up,
/// logging each with its reason.
fn retain(engine: &Engine, s: &Schedule, inval: &mut Vec<Inval>, companions: Option<&dyn Companions>) -> FsResult<()> {
    let (snaps, space) = {
        let mut fs = engine.lock();
        let Ok(dir) = fs.resolve_path(&s.dir) else {
            return Ok(());
        };
        let snaps: Vec<_> = fs.dir_snapshots(dir)?.into_iter().filter(|x| x.scheduled).collect();
        let st = fs.statfs();
        let bs = u64::from(st.bsize);
        let space = Space {
            total: st.blocks.saturating_mul(bs),
            available: st.bavail.saturating_mul(bs),
        };
        (snaps, space)
    };
    if snaps.is_empty() {
        engine.lock().set_reclaimable(&s.dir, 0);
        return Ok(());
    }
    // What each snapshot alone holds, counted over a pinned state without the engine lock;
    // only needed when space decides.
    let thresholds = s.limits.keep_while_free.is_some() || s.limits.min_free.is_some();
    let exclusive: HashMap<u32, u64> = if thresholds {
        let ids: HashSet<u32> = snaps.iter().map(|x| x.id).collect();
        engine
            .list()?
            .into_iter()
            .filter(|l| ids.contains(&l.ns))
            .map(|l| (l.ns, l.exclusive))
            .collect()
    } else {
        HashMap::new()
    };
    let input: Vec<Snap> = snaps
        .iter()
        .map(|x| Snap {
            id: x.id,
            created: x.created,
            exclusive: exclusive.get(&x.id).copied().unwrap_or(0),
        })
        .collect();
    let names: HashMap<u32, &[u8]> = snaps.iter().map(|x| (x.id, x.name.as_slice())).collect();
    let mut plan = retention::plan(&input, &s.keep, s.limits, space);
    // A mirror's base (the newest snapshot it holds) stays, and with `--keep-unmirrored`
    // what it has not been sent yet.
    let protected = engine.lock().mirror_protected(&s.dir).unwrap_or_default();
    plan.retain(|(id, reason)| {
        let keep = protected.contains(names[id]);
        if keep {
            log::info!("schedule of /{}: snapshot {} kept for its mirror ({reason} otherwise)", show(&s.dir), show(names[id]));
        }
        !keep
    });
    // What stays only because space is plentiful is space the host can have back.
    let kept = retention::kept(&input, &s.keep);
    let reclaimable: u64 = input
        .iter()
        .filter(|x| !kept.contains(&x.id) && !plan.iter().any(|(id, _)| *id == x.id))
        .map(|x| x.exclusive)
        .sum();
    engine.lock().set_reclaimable(&s.dir, reclaimable);
    for (id, reason) in plan {
        let mut fs = engine.lock();
        let removed = fs.destroy_id(id);
        inval.extend(fs.take_invalidations());
        drop(fs);
        match removed {
            Ok(()) => {
                log::info!("schedule of /{}: removed snapshot {}: {reason}", show(&s.dir), show(names[&id]));
                if let Some(c) = companions {
                    c.removed(&s.dir, names[&id]);
                }
            }
            Err(e) => log::error!(
                "schedule of /{}: removing snapshot {} ({reason}) failed: {e}",
                show(&s.dir),
                show(names[&id])
            ),
        }
    }
    Ok(())
}

/// Now, for the background worker (tests pass their own clock to [`run`]).
pub fn now() -> i64 {
    clock::now_secs()
}
