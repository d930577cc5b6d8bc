//! Compression of old versions (CCFS' idle-time recompression): blocks that only snapshots
//! hold (file data, and the tree nodes of their directories and files, where small files'
//! bytes live inline) are recompressed with zstd at a high level and relocated
//! (`scion_store::relocate`), without touching any tree.
//!
//! A pass has three steps, like a repack. `compress_begin`, under the engine lock, takes a
//! checkpoint and pins the committed state. `CompressPlan::run`, without the lock, walks
//! every live tree (the main tree and clones), then every snapshot, skipping what the live
//! trees reach: the blocks left are held by snapshots alone. Those not relocated yet
//! are read (verified), compressed, and kept if they shrink by an eighth and by a page.
//! `compress_end`, under the lock, appends the compressed forms, installs their
//! relocations, commits them with a checkpoint and only then punches the blocks' old places.
//!
//! Which blocks are chosen is a matter of space only: a relocated block reads back the same
//! bytes, verified against the same pointer, from wherever it is read. So a file restored
//! from a snapshot meanwhile, which shares the block, still reads it right (a little slower).
//! A crash before the checkpoint leaves the compressed forms past the committed append
//! position, where the next open cuts them off; after it, the old places are punched again
//! by nobody: at most one round's worth stays allocated (see design.md).
//!
//! `run` and `compress_end` alternate in rounds of `ROUND` bytes of blocks: a round's
//! compressed forms are installed and committed before the next round is read, so a pass
//! holds one round in memory, whatever its budget (issue 39; before, a pass held every
//! compressed form until its end: the size of the store's old versions, compressed).

use crate::clone::walk_blocks;
use crate::fs::*;
use crate::pinned::Pinned;
use scion_store::relocate::{self, relocation_key, Relocation};
use scion_store::{BlockPtr, BlockStore, Error, Result};
use scion_tree::{Forest, RefTable, Value};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// zstd level for old versions: high, since it runs when the store is idle and only once
/// per block (level 19 on source trees: ~4x smaller than the blocks, a few MB/s per core).
pub const DEFAULT_LEVEL: i32 = 19;
/// Bytes of blocks compressed per round of a pass (what a pass holds in memory at most,
/// before compression).
pub const ROUND: u64 = 32 << 20;
/// Incompressible block addresses remembered between passes, at most.
const INCOMPRESSIBLE_MAX: usize = 1 << 20;
/// Bytes of blocks a background pass compresses at most (~15 s of one CPU at level 19).
pub const BACKGROUND_BUDGET: u64 = 64 << 20;
/// The store must have been quiet this long before a background pass.
const IDLE: Duration = Duration::from_secs(60);
/// Background passes come this far apart (one minute apart while a pass stops at its
/// budget, until the backlog is done).
const EVERY: Duration = Duration::from_secs(600);

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CompressReport {
    /// Data blocks only snapshots hold and not compressed yet (before the budget cut).
    pub candidates: u64,
    /// Blocks compressed and relocated, their bytes before and their footprint after.
    pub compressed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Blocks that did not shrink enough and stay as they are.
    pub incompressible: u64,
    /// Candidates left for a later pass (the budget was reached).
    pub left: u64,
}

/// A pinned committed state and the roots to walk, taken by `compress_begin`.
pub struct CompressPlan {
    forest: Forest,
    live: Vec<BlockPtr>,
    snapshots: Vec<BlockPtr>,
    skip: HashSet<u64>,
    background: bool,
    _pinned: Pinned,
}

/// What a round of `CompressPlan::run` compressed, for `compress_end`.
pub struct CompressBatch {
    items: Vec<(BlockPtr, Vec<u8>)>,
    incompressible: Vec<u64>,
    /// In the last round: the plan's `skip`, handed back to the engine.
    skip: Option<HashSet<u64>>,
    /// This round's counts; the last round's also the pass's candidates and what it left.
    report: CompressReport,
    error: Option<Error>,
    /// A background pass's last round (which sets when the next pass is due).
    background_end: bool,
}

impl Fs {
    /// A whole pass (begin, run, end) over at most `budget` bytes of blocks, at zstd `level`.
    pub fn compress_old(&mut self, budget: u64, level: i32) -> FsResult<CompressReport> {
        let plan = self.compress_begin()?;
        plan.run(budget, level, 1, &mut |b| self.compress_end(b))
    }

    /// The plan of a background pass, if one is due: the store has been quiet for a minute
    /// and the last pass is ten minutes old (one, if it left blocks for later).
    pub fn background_compress_begin(&mut self) -> FsResult<Option<CompressPlan>> {
        self.compress_begin_if_due(IDLE, EVERY)
    }

    /// `background_compress_begin` with its two delays given (tests give short ones).
    pub fn compress_begin_if_due(&mut self, idle: Duration, every: Duration) -> FsResult<Option<CompressPlan>> {
        let due = match self.last_compress {
            None => true,
            Some((at, more)) => at.elapsed() >= if more { idle } else { every },
        };
        if !due || self.last_change.elapsed() < idle || self.vol.failed.is_some() {
            return Ok(None);
        }
        // Set now: a pass that fails is not retried at every tick.
        self.last_compress = Some((Instant::now(), false));
        let mut plan = self.compress_begin()?;
        plan.background = true;
        Ok(Some(plan))
    }

    /// Checkpoints and pins the committed state; the roots of live trees and of snapshots.
    pub fn compress_begin(&mut self) -> FsResult<CompressPlan> {
        self.writable()?;
        let pinned = self.pin_committed()?;
        let (mut live, mut snapshots) = (Vec::new(), Vec::new());
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        for id in ids {
            let n = &self.namespaces[&id];
            let (kind, root, link_root) = (n.info.kind, n.root, n.link_root);
            let mut roots = self.node(root)?.inode.ptrs();
            roots.extend(link_root);
            match kind {
                NsKind::Snapshot => snapshots.extend(roots),
                _ => live.extend(roots),
            }
        }
        // Files unlinked while open are live too.
        live.extend(self.orphans.iter().filter_map(|i| self.nodes.get(i)).filter_map(|n| n.orphan_ref));
        Ok(CompressPlan {
            forest: self.vol.forest.view(),
            live,
            snapshots,
            skip: std::mem::take(&mut self.incompressible),
            background: false,
            _pinned: pinned,
        })
    }

    /// Appends and installs the compressed forms, commits them, then punches the blocks'
    /// old places.
    pub fn compress_end(&mut self, batch: CompressBatch) -> FsResult<CompressReport> {
        let store = self.vol.forest.store.clone();
        if let Some(skip) = batch.skip {
            // The plan's set back, with what the rounds before added.
            let added = std::mem::replace(&mut self.incompressible, skip);
            self.incompressible.extend(added);
        }
        if self.incompressible.len() + batch.incompressible.len() > INCOMPRESSIBLE_MAX {
            self.incompressible.clear();
        }
        self.incompressible.extend(batch.incompressible);
        let mut report = batch.report;
        let mut installed = Vec::new();
        // (Another pass may have got there first.)
        let forms: Vec<(BlockPtr, Vec<u8>)> =
            batch.items.into_iter().filter(|(p, _)| store.relocation(p).is_none()).collect();
        let places = store.write_relocated(&forms).map_err(eio)?;
        for ((ptr, _), r) in forms.iter().zip(places) {
            store.install_relocation(ptr, r);
            report.compressed += 1;
            report.bytes_before += ptr.footprint();
            report.bytes_after += r.footprint();
            installed.push(*ptr);
        }
        if !installed.is_empty() {
            // Commits the relocations (the packs are synced first): from here the compressed
            // forms are what a restart reads, and the old places may go.
            self.checkpoint().map_err(eio)?;
            for p in &installed {
                if let Err(e) = store.punch_original(p) {
                    log::warn!("{e}: the old place of a compressed block stays allocated");
                }
            }
        }
        if let Some(e) = batch.error {
            return Err(eio(e));
        }
        if report.compressed > 0 {
            log::info!("compression of old versions: {report:?}");
        }
        if batch.background_end {
            // Its own checkpoint restarts nothing: `last_change` counts changes only.
            self.last_compress = Some((Instant::now(), report.left > 0));
        }
        Ok(report)
    }

    /// Where data block `ptr` was relocated by a pass, if it was.
    pub fn relocation(&self, ptr: &BlockPtr) -> Option<Relocation> {
        self.vol.forest.store.relocation(ptr)
    }

    /// Step 4 of a checkpoint: the relocations made and dropped since the last one go into
    /// the relocation tree.
    pub(crate) fn persist_relocations(&mut self) -> Result<()> {
        let changes = self.vol.forest.store.take_relocation_changes();
        let mut last: BTreeMap<u64, Option<Relocation>> = BTreeMap::new();
        for (addr, r) in changes {
            last.insert(addr, r);
        }
        let ops: Vec<scion_tree::Op> = last
            .into_iter()
            // A relocation made and dropped since the last checkpoint was never in the tree.
            .filter(|(_, r)| r.is_some() || self.relocations.is_some())
            .map(|(a, r)| (relocation_key(a).to_vec(), r.map(|r| Value::new(r.encode(), Vec::new()))))
            .collect();
        if ops.is_empty() {
            return Ok(());
        }
        let old = self.relocations;
        self.relocations = self.vol.forest.apply(old.as_ref(), ops)?;
        if let Some(old) = old {
            self.vol.forest.release(&old)?;
        }
        Ok(())
    }
}

/// Reads the relocation tree at `root` into the store's map (at open, and for `check`).
pub(crate) fn load_relocations(store: &Arc<BlockStore>, root: Option<&BlockPtr>) -> Result<u64> {
    let forest = Forest::new(store.clone(), RefTable::default());
    let mut entries = Vec::new();
    let mut bad = None;
    forest.scan(root, &[], &mut |k, v| {
        match (<[u8; 8]>::try_from(k), Relocation::decode(&v.bytes)) {
            (Ok(k), Ok(r)) if v.ptrs.is_empty() => entries.push((u64::from_be_bytes(k), r)),
            (_, Err(e)) => bad = Some(e),
            _ => bad = Some(Error::corrupt("relocation tree", "entry", "malformed key or value")),
        }
        bad.is_none()
    })?;
    if let Some(e) = bad {
        return Err(e);
    }
    let n = entries.len() as u64;
    store.load_relocations(entries);
    Ok(n)
}

impl CompressPlan {
    /// Finds the data blocks only snapshots hold and compresses up to `budget` bytes of them
    /// at `level` on `threads` threads, without the engine lock (the state is pinned), in
    /// rounds of `ROUND` bytes, each handed to `end` (`Fs::compress_end`, under the lock)
    /// before the next is read. The pass's report: the rounds' counts summed. It stops at the
    /// first round `end` refuses.
    pub fn run(
        self,
        budget: u64,
        level: i32,
        threads: usize,
        end: &mut dyn FnMut(CompressBatch) -> FsResult<CompressReport>,
    ) -> FsResult<CompressReport> {
        let store = self.forest.store.clone();
        let (candidates, mut error) = self.candidates(&store);
        let mut pass = CompressReport { candidates: candidates.len() as u64, ..Default::default() };
        let mut chosen = Vec::new();
        let mut planned = 0u64;
        for p in candidates {
            if planned >= budget {
                pass.left += 1;
                continue;
            }
            planned += p.len as u64;
            chosen.push(p);
        }
        let mut rounds = rounds(&chosen).peekable();
        let mut skip = Some(self.skip);
        let mut total = CompressReport::default();
        loop {
            let round = rounds.next().unwrap_or(&[]);
            let last = rounds.peek().is_none();
            let mut batch = compress_round(&store, round, level, threads);
            batch.error = batch.error.or(if last { error.take() } else { None });
            if last {
                (batch.report.candidates, batch.report.left) = (pass.candidates, pass.left);
                batch.skip = skip.take();
                batch.background_end = self.background;
            }
            total.add(&end(batch)?);
            if last {
                return Ok(total);
            }
        }
    }

    /// Blocks (data and tree nodes) reachable from snapshots and not from live trees, not relocated yet and
    /// not known incompressible, in address order (so compressed forms keep a file's order).
    fn candidates(&self, store: &BlockStore) -> (Vec<BlockPtr>, Option<Error>) {
        let refs = RefTable::default();
        let mut seen = HashSet::new();
        let mut error = None;
        for r in &self.live {
            if let Err(e) = walk_blocks(&self.forest, &refs, r, false, &mut seen, &mut |_| {}) {
                // Without the whole live set, nothing can be told snapshot-only.
                return (Vec::new(), Some(e));
            }
        }
        let mut out = Vec::new();
        for r in &self.snapshots {
            let r = walk_blocks(&self.forest, &refs, r, false, &mut seen, &mut |p| {
                // A remote block is the remote's to store: nothing of it is here to compress.
                if relocate::relocatable(p.kind) && !p.is_remote() && !self.skip.contains(&p.addr) && store.relocation(p).is_none() {
                    out.push(*p);
                }
            });
            if let Err(e) = r {
                error.get_or_insert(e);
            }
        }
        out.sort_by_key(|p| p.addr);
        (out, error)
    }
}

/// `chosen` cut into rounds of about `ROUND` bytes (a block larger than a round is one).
fn rounds(chosen: &[BlockPtr]) -> impl Iterator<Item = &[BlockPtr]> {
    let mut rest = chosen;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0u64;
        let n = rest.iter().take_while(|p| {
            bytes += p.len as u64;
            bytes <= ROUND
        });
        let n = n.count().max(1);
        let (round, more) = rest.split_at(n);
        rest = more;
        Some(round)
    })
}

/// One round: `round`'s blocks read (verified) and compressed on `threads` threads.
fn compress_round(store: &Arc<BlockStore>, round: &[BlockPtr], level: i32, threads: usize) -> CompressBatch {
    let per = round.len().div_ceil(threads.max(1)).max(1);
    let results: Vec<Vec<(BlockPtr, Result<Option<Vec<u8>>>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = round
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(|p| (*p, store.read(p).map(|b| relocate::compress(p, &b, level)))).collect()))
            .collect();
        handles.into_iter().map(|h| h.join().expect("compression thread")).collect()
    });
    let mut batch = CompressBatch {
        items: Vec::new(),
        incompressible: Vec::new(),
        skip: None,
        report: CompressReport::default(),
        error: None,
        background_end: false,
    };
    for (p, r) in results.into_iter().flatten() {
        match r {
            Ok(Some(c)) => batch.items.push((p, c)),
            Ok(None) => {
                batch.report.incompressible += 1;
                batch.incompressible.push(p.addr);
            }
            // A damaged block is scrub's to report; it is left as it is.
            Err(e) => {
                batch.error.get_or_insert(e);
            }
        }
    }
    batch
}

impl CompressReport {
    /// `other`'s counts added to these.
    fn add(&mut self, other: &CompressReport) {
        self.candidates += other.candidates;
        self.compressed += other.compressed;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
        self.incompressible += other.incompressible;
        self.left += other.left;
    }
}
