//! `scion check --repair` (issue 21 item 6): a store (a cube's, or the main one) whose file
//! data is damaged is made consistent again by removing the files that cannot be read,
//! naming each. A damaged data block is reached through a readable tree, so removing every
//! name of the files that hold it frees it the ordinary way (its reference count drops to
//! nothing; nothing needs to read it). Damage to a tree node or a record is not repaired:
//! what lies below it cannot be walked, so neither its files nor its blocks' counts can be
//! known; the report names it, and the way back is a snapshot, a mirror or a backup.

use crate::fs::Fs;
use crate::pinned::Visit;
use crate::FsResult;
use scion_store::{BlockKind, BlockPtr};

/// What a repair did and could not do.
#[derive(Default, Debug)]
pub struct RepairReport {
    /// Files removed because their data could not be read (paths from the mount root).
    pub lost: Vec<String>,
    /// Damage left: (path, what), for tree nodes and records, and for files only snapshots
    /// hold (a snapshot is not changed: destroy it to let the damage go).
    pub left: Vec<(String, String)>,
}

/// Rounds at most: each removes every file a scrub finds damaged first by some path; a
/// block shared by several files (clones, hard links) is found again under its next path.
const MAX_ROUNDS: usize = 64;

#[derive(Default)]
struct Damage {
    /// Files whose data blocks failed to read (first path that reached each block).
    files: Vec<String>,
    other: Vec<(String, String)>,
}

impl Visit for Damage {
    fn block(&mut self, path: &str, ptr: &BlockPtr, read: &scion_store::Result<Vec<u8>>) {
        if let Err(e) = read {
            if ptr.kind == BlockKind::Data {
                self.files.push(path.to_string());
            } else {
                self.other.push((path.to_string(), e.to_string()));
            }
        }
    }

    fn damaged(&mut self, path: &str, what: String) {
        self.other.push((path.to_string(), what));
    }
}

fn in_snapshot(path: &str) -> bool {
    path.contains("/.snapshot/") || path.starts_with("(namespace")
}

impl Fs {
    /// Removes every file whose data cannot be read, round after round until a scrub finds
    /// no damaged file data it can remove, taking a checkpoint after each round.
    pub fn repair(&mut self) -> FsResult<RepairReport> {
        let mut rep = RepairReport::default();
        for _ in 0..MAX_ROUNDS {
            let mut d = Damage::default();
            self.pin_committed()?.walk(&mut d);
            rep.left = d.other;
            let mut removed = 0;
            d.files.sort();
            d.files.dedup();
            for p in d.files {
                if in_snapshot(&p) {
                    rep.left.push((p, "file data damaged in a snapshot (destroy the snapshot to let it go)".into()));
                    continue;
                }
                let rel = p.trim_start_matches('/');
                let (dir, name) = match rel.rfind('/') {
                    Some(i) => (&rel[..i], &rel[i + 1..]),
                    None => ("", rel),
                };
                let parent = self.resolve_path(dir.as_bytes())?;
                self.unlink(parent, name.as_bytes())?;
                log::warn!("repair: removed {p}: its data could not be read");
                rep.lost.push(p);
                removed += 1;
            }
            if removed == 0 {
                break;
            }
            self.checkpoint().map_err(crate::error::eio)?;
        }
        Ok(rep)
    }
}
