//! Repack: rewriting scattered files so that each file's data, and a directory's files, lie
//! together in the packs again.
//!
//! Blocks are placed where the pack's append point is when they are written, so a file
//! written a chunk at a time beside other files (parallel writers, a download manager, a
//! VM image written at random) ends up interleaved with them, and a later cold read of it
//! seeks. Copy-on-abundant-write keeps small overwrites off the packs, so clones keep reading
//! their original, contiguous blocks; repack is for what was written in abundance.
//!
//! A pass walks a directory tree in name order, and for each regular file whose blocks are
//! not back to back in one pack, and are all held by this file alone, reads the blocks and
//! writes them again at the append point, one file after another. Blocks shared with a clone
//! or snapshot are never moved: moving them would copy them, and sharing is what clones are
//! for. Files with pending changes, patches or several names are left as they are.
//!
//! Safety: the new blocks go into the file's overlay as written-ahead chunks with the same
//! bytes, and the pass ends with a checkpoint taken under the same engine lock, so no
//! journaled operation can come between. After a crash before that checkpoint the committed
//! trees still name the old blocks, and the new ones lie past the last block the journal
//! names, so opening the store truncates them away.

use crate::delta::StoredChunk;
use crate::error::errno;
use crate::fs::*;
use crate::inode::*;
use scion_store::{BlockKind, BlockPtr, Result};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// When the daemon repacks on its own: the store has been quiet this long...
pub const IDLE: Duration = Duration::from_secs(60);
/// ... and the last pass is this old (a pass that stopped at its budget is followed by the
/// next one as soon as the store is quiet again).
pub const EVERY: Duration = Duration::from_secs(600);
/// Bytes a background pass moves at most (it holds the engine lock: ~0.3 s here).
pub const BACKGROUND_BUDGET: u64 = 64 << 20;

/// What a repack pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepackReport {
    /// Regular files looked at.
    pub files: u64,
    /// Files whose blocks were already back to back (or that have fewer than two blocks).
    pub contiguous: u64,
    /// Scattered files left alone: blocks shared with a clone or snapshot.
    pub shared: u64,
    /// Scattered files left alone: pending changes, patches or several names.
    pub busy: u64,
    /// Files rewritten, and the bytes of data moved.
    pub moved_files: u64,
    pub moved_bytes: u64,
    /// The byte budget ran out before the walk ended.
    pub budget_reached: bool,
}

impl RepackReport {
    fn add(&mut self, r: &RepackReport) {
        self.files += r.files;
        self.contiguous += r.contiguous;
        self.shared += r.shared;
        self.busy += r.busy;
        self.moved_files += r.moved_files;
        self.moved_bytes += r.moved_bytes;
        self.budget_reached |= r.budget_reached;
    }
}

impl Fs {
    /// Repacks the files below directory `dir` (see the module comment), stopping before the
    /// next file once `budget` bytes of data were moved, and commits with a checkpoint.
    pub fn repack(&mut self, dir: Ino, budget: u64) -> FsResult<RepackReport> {
        self.writable()?;
        // A snapshot's blocks are not moved: it is read-only, even where nothing would show.
        self.rw(dir)?;
        if self.dir_node(dir)?.loc == Loc::Gone {
            return Err(errno::ENOENT);
        }
        // The committed trees must be current: exclusivity is read from their counts.
        self.checkpoint().map_err(eio)?;
        let ns = self.node(dir)?.ns;
        let exclusive = self.exclusive_blocks(ns).map_err(eio)?;
        let mut report = RepackReport::default();
        let walked = self.repack_walk(dir, ns, &exclusive, budget, &mut report);
        // Moved files are committed even if the walk stopped on an error: uncommitted, their
        // new blocks could end up behind a later written-ahead block, unreferenced for ever.
        if report.moved_files > 0 {
            self.checkpoint().map_err(eio)?;
        }
        walked?;
        log::info!("repack: {report:?}");
        Ok(report)
    }

    fn repack_walk(
        &mut self,
        dir: Ino,
        ns: u32,
        exclusive: &HashSet<u64>,
        budget: u64,
        report: &mut RepackReport,
    ) -> FsResult<()> {
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let entries = self.readdir_real(d)?;
            // Depth first, in name order: a directory's files are moved next to each other.
            let mut subdirs = Vec::new();
            for e in entries {
                match e.kind {
                    Kind::Dir => subdirs.push(e.name),
                    Kind::File => {
                        let Some(ino) = self.child(d, &e.name)? else { continue };
                        if report.moved_bytes >= budget {
                            report.budget_reached = true;
                            return Ok(());
                        }
                        report.files += 1;
                        self.repack_file(ino, ns, exclusive, report)?;
                    }
                    _ => {}
                }
            }
            for name in subdirs.into_iter().rev() {
                if let Some(sub) = self.child(d, &name)? {
                    // A nested clone is another namespace, repacked on its own.
                    if self.node(sub)?.ns == ns {
                        stack.push(sub);
                    }
                }
            }
        }
        Ok(())
    }

    /// The daemon's background pass over the main tree and every clone (not snapshots), when
    /// the store has been quiet for `IDLE` and the last pass is `EVERY` old; None when it is
    /// not time.
    pub fn background_repack(&mut self) -> FsResult<Option<RepackReport>> {
        let due = match self.last_repack {
            None => true,
            Some((at, budget_reached)) => at.elapsed() >= if budget_reached { IDLE } else { EVERY },
        };
        if !due || self.last_change.elapsed() < IDLE || self.vol.failed.is_some() {
            return Ok(None);
        }
        let roots: Vec<Ino> = self
            .namespaces
            .values()
            .filter(|n| matches!(n.info.kind, NsKind::Main | NsKind::Clone))
            .map(|n| n.root)
            .collect();
        let mut total = RepackReport::default();
        let mut result = Ok(());
        for root in roots {
            match self.repack(root, BACKGROUND_BUDGET - total.moved_bytes.min(BACKGROUND_BUDGET)) {
                Ok(r) => total.add(&r),
                // A clone destroyed or unloaded meanwhile: the others still get their turn.
                Err(e) if e == errno::ENOENT || e == errno::ESTALE => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            if total.budget_reached {
                break;
            }
        }
        // (Its own changes restart the quiet period: the next pass waits IDLE at least.)
        self.last_repack = Some((Instant::now(), total.budget_reached));
        result.map(|()| Some(total))
    }

    fn repack_file(&mut self, ino: Ino, ns: u32, exclusive: &HashSet<u64>, report: &mut RepackReport) -> FsResult<()> {
        let n = self.node(ino)?;
        if n.ns != ns || !n.chunks.is_empty() || !matches!(n.loc, Loc::Entry { .. }) {
            report.busy += 1;
            return Ok(());
        }
        let stored = self.stored_chunks(ino)?;
        let patched = stored.iter().any(|(_, c)| !c.patches.is_empty());
        let blocks: Vec<(u64, BlockPtr)> = stored.into_iter().map(|(i, c)| (i, c.block)).collect();
        if is_contiguous(&blocks) {
            report.contiguous += 1;
            return Ok(());
        }
        if patched {
            report.busy += 1;
            return Ok(());
        }
        if !blocks.iter().all(|(_, p)| exclusive.contains(&p.addr)) {
            report.shared += 1;
            return Ok(());
        }
        let mut moved = Vec::with_capacity(blocks.len());
        let mut bytes = 0;
        for (idx, old) in &blocks {
            let data = self
                .vol
                .forest
                .store
                .read(old)
                .map_err(|e| FsError::from(e).with(format!("repack: read of chunk {idx} of ino {ino}")))?;
            let new = self.vol.forest.store.write(BlockKind::Data, &data).map_err(eio)?;
            self.vol
                .fresh_sums
                .insert(new.addr, scion_store::page_sums(&data).into());
            bytes += data.len() as u64;
            moved.push((*idx, new));
        }
        let n = self.node_mut(ino)?;
        for (idx, new) in moved {
            n.chunks.insert(idx, Chunk::Block(new));
        }
        self.touch(ino);
        report.moved_files += 1;
        report.moved_bytes += bytes;
        Ok(())
    }

    /// The committed chunks of file `ino` (block and patches), in chunk order; the changes
    /// waiting in memory are not included.
    pub fn stored_chunks(&self, ino: Ino) -> FsResult<Vec<(u64, StoredChunk)>> {
        let n = self.node(ino)?;
        if let Some(c) = n.inode.direct_chunk() {
            return Ok(vec![(0, c)]);
        }
        let mut out = Vec::new();
        let mut bad = None;
        self.vol
            .forest
            .scan(n.inode.tree(), &chunk_key(0), &mut |k, v| {
                match (chunk_index(k), StoredChunk::from_value(v)) {
                    (Ok(idx), Ok(c)) => out.push((idx, c)),
                    (Err(e), _) | (_, Err(e)) => bad = Some(e),
                }
                bad.is_none()
            })
            .map_err(eio)?;
        if let Some(e) = bad {
            log::error!("content tree of ino {ino}: {e}");
            return Err(errno::EIO);
        }
        Ok(out)
    }

    /// Addresses of the blocks that namespace `ns` alone holds: reachable from its roots
    /// through blocks with a single reference each (as `scion list` counts exclusive space).
    fn exclusive_blocks(&self, ns: u32) -> Result<HashSet<u64>> {
        let info = &self.namespaces[&ns];
        let mut roots: Vec<BlockPtr> = self.nodes.get(&info.root).map(|n| n.inode.ptrs()).unwrap_or_default();
        roots.extend(info.link_root);
        let mut seen = HashSet::new();
        for r in &roots {
            crate::clone::walk_blocks(&self.vol.forest, &self.vol.forest.refs, r, true, &mut seen, &mut |_| {})?;
        }
        Ok(seen)
    }
}

/// True if the blocks lie back to back in one pack, in chunk order (holes between chunks
/// do not count).
pub fn is_contiguous(blocks: &[(u64, BlockPtr)]) -> bool {
    blocks
        .windows(2)
        .all(|w| w[0].1.pack() == w[1].1.pack() && w[1].1.offset() == w[0].1.offset() + w[0].1.footprint())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_pass_covers_clones_and_waits_for_quiet() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        Fs::create(&scion_store::os_host(), &store).unwrap();
        let mut fs = Fs::open(&store, MountOptions::new("test")).unwrap();
        let root = fs.root();
        let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let clone = fs.clone_dir(src, root, b"c", &[], b"test").unwrap();
        // Two files written a chunk at a time side by side, inside the clone: scattered.
        let a = fs.mknod(clone, b"a", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        let b = fs.mknod(clone, b"b", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        let chunk = vec![5u8; 64 << 10];
        for c in 0..4u64 {
            fs.write(a, c << 16, &chunk).unwrap();
            fs.write(b, c << 16, &chunk).unwrap();
        }
        fs.checkpoint().unwrap();
        let blocks = |fs: &Fs, ino| {
            fs.stored_chunks(ino)
                .unwrap()
                .into_iter()
                .map(|(i, c)| (i, c.block))
                .collect::<Vec<_>>()
        };
        assert!(!is_contiguous(&blocks(&fs, a)));
        // Not quiet yet: nothing happens.
        assert_eq!(fs.background_repack().unwrap(), None);
        // Quiet for IDLE: the pass runs over the main tree and the clone.
        fs.last_change = Instant::now().checked_sub(IDLE * 2).unwrap_or_else(Instant::now);
        if fs.last_change.elapsed() < IDLE {
            return; // a machine up for less than two minutes: cannot fake the quiet period
        }
        let r = fs.background_repack().unwrap().expect("due");
        assert_eq!(r.moved_files, 2, "{r:?}");
        assert!(is_contiguous(&blocks(&fs, a)) && is_contiguous(&blocks(&fs, b)));
        // Not due again until EVERY has passed.
        fs.last_change = Instant::now().checked_sub(IDLE * 2).unwrap_or_else(Instant::now);
        assert_eq!(fs.background_repack().unwrap(), None);
    }
}
