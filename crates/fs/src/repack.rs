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

use crate::delta::{StoredChunk, Sums};
use crate::error::errno;
use crate::fs::*;
use crate::inode::*;
use crate::pinned::Pin;
use scion_store::{BlockKind, BlockPtr, BlockStore, Result};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// When the daemon repacks on its own: the store has been quiet this long...
pub const IDLE: Duration = Duration::from_secs(60);
/// ... and the last pass is this old (a pass that stopped at its budget is followed by the
/// next one as soon as the store is quiet again).
pub const EVERY: Duration = Duration::from_secs(600);
/// Bytes a background pass moves at most.
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

/// A pass's files, chosen under the engine lock (`Fs::repack_begin`). `run` copies their
/// blocks without the lock, reading the committed state the plan pinned; `Fs::repack_end`
/// installs the copies under the lock again, for the files that did not change meanwhile.
pub struct RepackPlan {
    store: Arc<BlockStore>,
    files: Vec<Planned>,
    report: RepackReport,
    /// `next_ns` when planned: a clone or snapshot taken since may share the blocks, and
    /// moving them would copy them.
    ns_mark: u32,
    background: bool,
    _pin: Pin,
}

/// A scattered file the plan moves, as it was when planned.
struct Planned {
    /// Found as `name` in directory `dir`: the file is looked up again at the end, as a
    /// checkpoint meanwhile may have dropped it from memory.
    dir: Ino,
    name: Vec<u8>,
    ino: Ino,
    content: Option<BlockPtr>,
    size: u64,
    blocks: Vec<(u64, BlockPtr)>,
}

/// A plan's copies, to be installed with `Fs::repack_end`.
pub struct RepackCopies {
    copied: Vec<(Planned, Vec<BlockPtr>, Vec<Sums>)>,
    error: Option<FsError>,
    report: RepackReport,
    ns_mark: u32,
    background: bool,
}

/// Bytes read and written per pack write while copying a file.
const COPY_BATCH: usize = 16 << 20;

impl RepackPlan {
    /// Copies each planned file's blocks to the append point, a batch per pack write, without
    /// the engine lock. Stops at the first failure; what was copied before it is kept.
    pub fn run(self) -> RepackCopies {
        let mut copied = Vec::with_capacity(self.files.len());
        let mut error = None;
        for f in self.files {
            match copy_blocks(&self.store, &f) {
                Ok((blocks, sums)) => copied.push((f, blocks, sums)),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        RepackCopies {
            copied,
            error,
            report: self.report,
            ns_mark: self.ns_mark,
            background: self.background,
        }
    }
}

fn copy_blocks(store: &BlockStore, f: &Planned) -> FsResult<(Vec<BlockPtr>, Vec<Sums>)> {
    let mut blocks = Vec::with_capacity(f.blocks.len());
    let mut sums = Vec::with_capacity(f.blocks.len());
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    let write = |batch: &mut Vec<Vec<u8>>, blocks: &mut Vec<BlockPtr>| -> FsResult<()> {
        let refs: Vec<&[u8]> = batch.iter().map(|b| b.as_slice()).collect();
        blocks.extend(store.write_batch(BlockKind::Data, &refs).map_err(eio)?);
        batch.clear();
        Ok(())
    };
    for (idx, old) in &f.blocks {
        let data = store
            .read(old)
            .map_err(|e| FsError::from(e).with(format!("repack: read of chunk {idx} of ino {}", f.ino)))?;
        sums.push(scion_store::page_sums(&data).into());
        bytes += data.len();
        batch.push(data);
        if bytes >= COPY_BATCH {
            write(&mut batch, &mut blocks)?;
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        write(&mut batch, &mut blocks)?;
    }
    assert_eq!(blocks.len(), f.blocks.len(), "a copy per block");
    Ok((blocks, sums))
}

impl Fs {
    /// Repacks the files below directory `dir` (see the module comment), stopping before the
    /// next file once `budget` bytes of data are planned, and commits with a checkpoint: plan,
    /// copy and install in one go. A daemon runs the copy without its lock (`repack_begin`).
    pub fn repack(&mut self, dir: Ino, budget: u64) -> FsResult<RepackReport> {
        let plan = self.repack_begin(dir, budget)?;
        self.repack_end(plan.run())
    }

    /// Chooses the files a repack of `dir` moves (a checkpoint first: exclusivity is read from
    /// the committed trees' counts), and pins the committed state for the copy.
    pub fn repack_begin(&mut self, dir: Ino, budget: u64) -> FsResult<RepackPlan> {
        self.writable()?;
        // A snapshot's blocks are not moved: it is read-only, even where nothing would show.
        self.rw(dir)?;
        if self.dir_node(dir)?.loc == Loc::Gone {
            return Err(errno::ENOENT);
        }
        self.checkpoint().map_err(eio)?;
        let mut plan = self.empty_plan(false);
        self.plan_below(dir, budget, &mut plan)?;
        Ok(plan)
    }

    fn empty_plan(&self, background: bool) -> RepackPlan {
        RepackPlan {
            store: self.vol.forest.store.clone(),
            files: Vec::new(),
            report: RepackReport::default(),
            ns_mark: self.next_ns,
            background,
            _pin: Pin::hold(&self.vol.pins),
        }
    }

    /// Installs the copies of the files that are as they were planned, in one checkpoint
    /// taken under the same lock (so no journaled operation falls between); the others'
    /// copies are garbage, freed by that checkpoint or the next.
    pub fn repack_end(&mut self, copies: RepackCopies) -> FsResult<RepackReport> {
        let mut report = copies.report;
        let shared_since = self.next_ns != copies.ns_mark;
        for (f, blocks, sums) in copies.copied {
            if shared_since || !self.unchanged(&f) {
                self.vol.garbage.extend(blocks);
                report.busy += 1;
                continue;
            }
            let mut bytes = 0;
            for (new, sums) in blocks.iter().zip(sums) {
                self.vol.fresh_sums.insert(new.addr, sums);
                bytes += new.len as u64;
            }
            let n = self.node_mut(f.ino)?;
            for ((idx, _), new) in f.blocks.iter().zip(blocks) {
                n.chunks.insert(*idx, Chunk::Block(new));
            }
            self.touch(f.ino);
            report.moved_files += 1;
            report.moved_bytes += bytes;
            self.io.repack += bytes;
        }
        // Installed copies are committed even if the copy stopped on an error: left in memory,
        // their blocks could end up behind a later written-ahead block, unreferenced for ever.
        if report.moved_files > 0 || !self.vol.garbage.is_empty() {
            self.checkpoint().map_err(eio)?;
        }
        if copies.background {
            // (Its own changes restart the quiet period: the next pass waits IDLE at least.)
            self.last_repack = Some((Instant::now(), report.budget_reached));
        }
        // The plan loaded every inode it looked at, holding none: they go now, not at some
        // later checkpoint (a store left idle after a pass kept ~1 KB per file).
        self.sweep_unheld();
        if let Some(e) = copies.error {
            return Err(e);
        }
        log::info!("repack: {report:?}");
        Ok(report)
    }

    /// True if planned file `f` is still there, under the same name, with the same committed
    /// content and nothing pending.
    fn unchanged(&mut self, f: &Planned) -> bool {
        if !matches!(self.child(f.dir, &f.name), Ok(Some(i)) if i == f.ino) {
            return false;
        }
        let Ok(n) = self.node(f.ino) else { return false };
        n.chunks.is_empty()
            && matches!(n.loc, Loc::Entry { .. })
            && n.inode.content == f.content
            && n.inode.size == f.size
    }

    /// Adds the scattered files below `dir` to `plan`, depth first in name order (a
    /// directory's files are moved next to each other), until `budget` bytes are planned.
    fn plan_below(&mut self, dir: Ino, budget: u64, plan: &mut RepackPlan) -> FsResult<()> {
        let ns = self.node(dir)?.ns;
        let exclusive = self.exclusive_blocks(ns).map_err(eio)?;
        let mut planned: u64 = plan.files.iter().flat_map(|f| &f.blocks).map(|(_, p)| p.len as u64).sum();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let entries = self.readdir_real(d)?;
            let mut subdirs = Vec::new();
            for e in entries {
                match e.kind {
                    Kind::Dir => subdirs.push(e.name),
                    Kind::File => {
                        let Some(ino) = self.child(d, &e.name)? else { continue };
                        if planned >= budget {
                            plan.report.budget_reached = true;
                            return Ok(());
                        }
                        plan.report.files += 1;
                        if let Some(f) = self.plan_file(d, e.name, ino, ns, &exclusive, &mut plan.report)? {
                            planned += f.blocks.iter().map(|(_, p)| p.len as u64).sum::<u64>();
                            plan.files.push(f);
                        }
                        // Loaded only to be looked at: unloaded again, so that planning holds
                        // no inode per file (~670 bytes each; `repack_end` reloads the ones
                        // it installs by name).
                        self.maybe_evict(ino);
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
    /// not time. Plan, copy and install in one go; a daemon runs the copy without its lock
    /// (`background_repack_begin`).
    pub fn background_repack(&mut self) -> FsResult<Option<RepackReport>> {
        match self.background_repack_begin()? {
            Some(plan) => self.repack_end(plan.run()).map(Some),
            None => Ok(None),
        }
    }

    /// The plan of a background pass, if one is due (see `background_repack`).
    pub fn background_repack_begin(&mut self) -> FsResult<Option<RepackPlan>> {
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
        let planned = (|| {
            self.checkpoint().map_err(eio)?;
            let mut plan = self.empty_plan(true);
            for root in roots {
                match self.plan_below(root, BACKGROUND_BUDGET, &mut plan) {
                    Ok(()) => {}
                    // A clone destroyed or unloaded meanwhile: the others still get their turn.
                    Err(e) if e == errno::ENOENT || e == errno::ESTALE => {}
                    Err(e) => return Err(e),
                }
                if plan.report.budget_reached {
                    break;
                }
            }
            Ok(plan)
        })();
        if planned.is_err() {
            self.last_repack = Some((Instant::now(), false));
        }
        planned.map(Some)
    }

    /// File `ino` (`name` in `dir`) as the plan moves it, or None (counted in `report`): it is
    /// contiguous already, busy, or shares blocks.
    fn plan_file(
        &mut self,
        dir: Ino,
        name: Vec<u8>,
        ino: Ino,
        ns: u32,
        exclusive: &HashSet<u64>,
        report: &mut RepackReport,
    ) -> FsResult<Option<Planned>> {
        let n = self.node(ino)?;
        if n.ns != ns || !n.chunks.is_empty() || !matches!(n.loc, Loc::Entry { .. }) {
            report.busy += 1;
            return Ok(None);
        }
        let (content, size) = (n.inode.content, n.inode.size);
        let stored = self.stored_chunks(ino)?;
        let patched = stored.iter().any(|(_, c)| !c.is_plain());
        let blocks: Vec<(u64, BlockPtr)> = stored.into_iter().map(|(i, c)| (i, c.block)).collect();
        if is_laid_out(&blocks) {
            report.contiguous += 1;
            return Ok(None);
        }
        if patched {
            report.busy += 1;
            return Ok(None);
        }
        // A pulled file's blocks are the remote's (moving them would download them).
        if !blocks.iter().all(|(_, p)| exclusive.contains(&p.addr) && !p.is_remote()) {
            report.shared += 1;
            return Ok(None);
        }
        Ok(Some(Planned { dir, name, ino, content, size, blocks }))
    }

    /// The committed chunks of file `ino` (block and patches), in chunk order; the changes
    /// waiting in memory are not included.
    pub fn stored_chunks(&self, ino: Ino) -> FsResult<Vec<(u64, StoredChunk)>> {
        self.stored_chunks_of(&self.node(ino)?.inode)
    }

    /// The chunks record `i` names (block and patches, layers merged), in chunk order; none
    /// for inline bytes.
    pub fn stored_chunks_of(&self, i: &crate::inode::Inode) -> FsResult<Vec<(u64, StoredChunk)>> {
        if let Some(c) = i.direct_chunk() {
            return Ok(vec![(0, c)]);
        }
        let mut out = Vec::new();
        let mut bad = None;
        self.vol
            .forest
            .scan(i.tree(), &chunk_key(0), &mut |k, v| {
                match (chunk_index(k), StoredChunk::from_value(v)) {
                    (Ok(idx), Ok(mut c)) => match c.load_layers(&self.vol.forest.store) {
                        Ok(()) => out.push((idx, c)),
                        Err(e) => bad = Some(e),
                    },
                    (Err(e), _) | (_, Err(e)) => bad = Some(e),
                }
                bad.is_none()
            })
            .map_err(eio)?;
        if let Some(e) = bad {
            log::error!("content tree of oid {}: {e}", i.oid);
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
    breaks(blocks) == 0
}

/// Blocks per break in a file's layout that leave nothing for repack to do: runs of 4 MiB on
/// average are read at the disk's streaming speed. A large file written front to back while
/// checkpoints append their metadata breaks once per checkpoint; moving it would write it all
/// twice for nothing (issue 37). Smaller files must be contiguous.
const BLOCKS_PER_BREAK: usize = 64;

/// True if the file's blocks need no repack: contiguous, or in runs of `BLOCKS_PER_BREAK`
/// blocks on average.
pub fn is_laid_out(blocks: &[(u64, BlockPtr)]) -> bool {
    breaks(blocks) * BLOCKS_PER_BREAK <= blocks.len().saturating_sub(1)
}

/// Places where the next block does not follow the last one in its pack.
fn breaks(blocks: &[(u64, BlockPtr)]) -> usize {
    blocks
        .windows(2)
        .filter(|w| !(w[0].1.pack() == w[1].1.pack() && w[1].1.offset() == w[0].1.offset() + w[0].1.footprint()))
        .count()
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
