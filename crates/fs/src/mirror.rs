//! Mirrors (issue 20, CCFS' backup device): a directory's snapshots sent, each as an increment
//! on the one before, to a directory of a second store. This module keeps what the store
//! records of them (`records::mirrors`) and answers what a mirror must send next and what
//! retention must keep for it; the daemon's worker (`scion_daemon::mirror`) does the sending.

use crate::error::errno;
use crate::records::mirrors::{Mirror, Stored, MAX_MIRRORS};
use crate::schedule::DirSnapshot;
use crate::{Fs, FsResult};
use std::collections::HashSet;

/// What a mirror must send next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Next {
    /// The snapshot to send (a name in the directory's `.snapshot`).
    pub name: Vec<u8>,
    /// The base it is sent as an increment on: the newest snapshot already on the mirror,
    /// while the source still has it.
    pub base: Option<Vec<u8>>,
    /// Snapshots waiting, this one included.
    pub behind: usize,
}

impl Fs {
    fn stored_mirrors(&self) -> FsResult<&Stored> {
        self.vol
            .mirrors
            .as_ref()
            .map_err(|e| errno::EIO.with(format!("the mirrors file cannot be read: {e}")))
    }

    /// The store's mirrors, as kept.
    pub fn mirror_list(&self) -> FsResult<Vec<Mirror>> {
        Ok(self.stored_mirrors()?.mirrors.clone())
    }

    fn save_mirrors(&mut self, list: Vec<Mirror>) -> FsResult<()> {
        let prev = self.stored_mirrors()?.clone();
        let saved = crate::records::mirrors::save(&self.vol.host, &self.vol.dir, &prev, list)?;
        self.vol.mirrors = Ok(saved);
        Ok(())
    }

    /// Adds the mirror of directory `dir` to `target` (an absolute path), or changes its
    /// `keep_unmirrored`; what it has sent so far is kept. The directory must exist.
    pub fn set_mirror(&mut self, dir: &[u8], target: &[u8], keep_unmirrored: bool) -> FsResult<()> {
        self.writable()?;
        if !target.starts_with(b"/") {
            return Err(errno::EINVAL.with("a mirror's target is an absolute path"));
        }
        let d = self.resolve_path(dir)?;
        self.dir_node(d)?;
        let mut list = self.mirror_list()?;
        let n = list.len();
        match list.iter_mut().find(|m| m.dir == dir && m.target == target) {
            Some(m) => m.keep_unmirrored = keep_unmirrored,
            None if n >= MAX_MIRRORS => {
                return Err(errno::ENOSPC.with(format!("a store keeps at most {MAX_MIRRORS} mirrors")))
            }
            None => list.push(Mirror {
                dir: dir.to_vec(),
                target: target.to_vec(),
                keep_unmirrored,
                last: None,
                last_time: 0,
            }),
        }
        self.save_mirrors(list)
    }

    /// Removes the mirrors of `dir` (to `target` only, if given); how many there were. What
    /// they sent stays on the mirror.
    pub fn remove_mirror(&mut self, dir: &[u8], target: Option<&[u8]>) -> FsResult<usize> {
        self.writable()?;
        let mut list = self.mirror_list()?;
        let before = list.len();
        list.retain(|m| !(m.dir == dir && target.is_none_or(|t| t == m.target)));
        let removed = before - list.len();
        if removed > 0 {
            self.save_mirrors(list)?;
        }
        Ok(removed)
    }

    /// Snapshot `name` of `dir` is on the mirror to `target` now, verified (at `time`).
    pub fn mirror_arrived(&mut self, dir: &[u8], target: &[u8], name: &[u8], time: i64) -> FsResult<()> {
        let mut list = self.mirror_list()?;
        let Some(m) = list.iter_mut().find(|m| m.dir == dir && m.target == target) else {
            return Err(errno::ENOENT.with("the mirror was removed meanwhile"));
        };
        m.last = Some(name.to_vec());
        m.last_time = time;
        self.save_mirrors(list)
    }

    /// The snapshots of mirror `m`'s directory, oldest first (ENOENT: the directory is gone).
    fn mirror_snapshots(&mut self, m: &Mirror) -> FsResult<Vec<DirSnapshot>> {
        let d = self.resolve_path(&m.dir)?;
        self.dir_snapshots(d)
    }

    /// What mirror `m` must send next, if anything: the oldest snapshot newer than the last
    /// one sent; for a mirror that has sent nothing yet, the newest snapshot (a mirror takes
    /// the snapshots taken from when it was added on, starting from the latest state).
    pub fn mirror_next(&mut self, m: &Mirror) -> FsResult<Option<Next>> {
        let snaps = self.mirror_snapshots(m)?;
        let (last, unsent) = unsent(m, &snaps);
        let pending = if m.last.is_none() { &unsent[unsent.len().saturating_sub(1)..] } else { unsent };
        Ok(pending.first().map(|s| Next {
            name: s.name.clone(),
            base: last.map(|i| snaps[i].name.clone()),
            behind: pending.len(),
        }))
    }

    /// The snapshot names of directory `dir` that retention must keep for its mirrors: the
    /// newest one on each mirror (the base of the next increment) and, for a mirror with
    /// `keep_unmirrored`, every one not sent yet.
    pub fn mirror_protected(&mut self, dir: &[u8]) -> FsResult<HashSet<Vec<u8>>> {
        let mut keep = HashSet::new();
        for m in self.mirror_list()?.into_iter().filter(|m| m.dir == dir) {
            keep.extend(m.last.clone());
            if m.keep_unmirrored {
                let snaps = self.mirror_snapshots(&m)?;
                keep.extend(unsent(&m, &snaps).1.iter().map(|s| s.name.clone()));
            }
        }
        Ok(keep)
    }
}

/// Where mirror `m`'s last sent snapshot is among `snaps` (oldest first), and the snapshots
/// not sent yet: all of them before the first send; those after the last one sent, or, if
/// that one is gone here, those taken after it arrived.
fn unsent<'a>(m: &Mirror, snaps: &'a [DirSnapshot]) -> (Option<usize>, &'a [DirSnapshot]) {
    let last = m.last.as_ref().and_then(|l| snaps.iter().position(|s| &s.name == l));
    let from = match (&m.last, last) {
        (None, _) => 0,
        (Some(_), Some(i)) => i + 1,
        (Some(_), None) => snaps.partition_point(|s| s.created <= m.last_time),
    };
    (last, &snaps[from..])
}
