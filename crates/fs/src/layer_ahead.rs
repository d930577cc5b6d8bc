//! Random overwrites of a large file reach the disk once, as layers written ahead.
//!
//! A small overwrite of a committed chunk of a file of several chunks stays runs over the
//! chunk's block (`Chunk::Patched`), and the checkpoint writes the runs new since the last one
//! as a layer (format 16, `Fs::patched_value`). Journaled as bytes, those runs reach the disk
//! twice: in the journal, and in the layer. Here the write's runs go to a pack at once, as a
//! layer block of their own, and the journal gets one `PutLayer` record naming the block
//! (type 25, format 17); the checkpoint then makes the chunk's layers the committed ones and
//! these, and writes no data at all. This is `retract.rs`'s record 20 for pages.
//!
//! The rule that keeps it right: a chunk whose overlay names layers written ahead (`ahead`)
//! holds no run new since the checkpoint that is not in one of them. So only a chunk with no
//! overlay yet (committed), a block written ahead (`Chunk::Block`, no runs yet) or one whose
//! every run went ahead takes a layer; a write whose runs are journaled as bytes lets the
//! chunk's layers written ahead go (`Fs::patched` with `keep_ahead` false), and the checkpoint
//! writes the chunk's new runs as one layer, as without this module. Replay applies the same
//! rule to the same records, so it rebuilds the same layers.
//!
//! Not writes of a few bytes (`LAYER_AHEAD_MIN`), nor a stream's writes: a write starting where the file's last one ended goes on as bytes,
//! so that its chunk's run can become the chunk's block (`retract.rs`) instead of eight layers
//! rewritten whole at the ninth write. Nor a volume that journals data or writes back (its
//! journal may reach the disk before the packs), nor replay itself.

use crate::delta::{Layer, Patches, LAYERED_MAX, LAYERS_MAX};
use crate::error::{eio, FsResult};
use crate::fs::{Chunk, Fs, Ino};
use crate::inode::{Kind, Ts, CHUNK};
use crate::journal::Record;
use scion_store::BlockKind;

/// `(offset, len)` of each chunk's piece of `len` bytes at `offset`, in order, if there are
/// one or two: a write over three chunks has a whole one in the middle, which is never a
/// layer. `None` too for an empty write or one past the end of the offsets.
fn chunk_pieces(offset: u64, len: u64) -> Option<Vec<(u64, u64)>> {
    let end = offset.checked_add(len).filter(|_| len > 0)?;
    let (first, last) = (offset / CHUNK, (end - 1) / CHUNK);
    match last - first {
        0 => Some(vec![(offset, len)]),
        1 => {
            let cut = last * CHUNK;
            Some(vec![(offset, cut - offset), (cut, end - cut)])
        }
        _ => None,
    }
}

/// Changed bytes a write must have to go ahead as a layer: a block costs the disk a page
/// whatever it holds, while a few bytes journaled cost that few, and small runs of a file
/// are carried from journal to journal at checkpoints (`Fs::carry`) without any block.
const LAYER_AHEAD_MIN: u64 = 2048;

impl Fs {
    /// A write of `data` at `offset` as a layer written ahead, if it is one this module
    /// takes: the write is then done and journaled (true). False: nothing was changed, and the
    /// write goes on as bytes.
    ///
    /// A write across a chunk boundary goes ahead piece by piece, one per chunk, if both
    /// pieces fit: the kernel's write-back merges neighbouring dirty pages into one write,
    /// and such a write journaled as bytes would also let both chunks' layers go.
    pub(crate) fn write_layer_ahead(&mut self, ino: Ino, offset: u64, data: &[u8], now: Ts) -> FsResult<bool> {
        let Some(pieces) = chunk_pieces(offset, data.len() as u64) else {
            return Ok(false);
        };
        for &(at, len) in &pieces {
            let piece = &data[(at - offset) as usize..(at - offset + len) as usize];
            if !self.layer_ahead_fits(ino, at, piece)? {
                return Ok(false);
            }
        }
        for (i, &(at, len)) in pieces.iter().enumerate() {
            let piece = &data[(at - offset) as usize..(at - offset + len) as usize];
            // Each piece changes only its own chunk, so whether the next fits is unchanged;
            // only an unlinked file (the first piece) declines. (An error after the first
            // piece leaves it written and journaled, as a short write would.)
            let done = self.piece_ahead(ino, at, piece, now)?;
            assert!(done || i == 0, "piece {i} of a write declined after the first was taken");
            if !done {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One chunk's piece of `write_layer_ahead`, which has found it fits.
    fn piece_ahead(&mut self, ino: Ino, offset: u64, data: &[u8], now: Ts) -> FsResult<bool> {
        let Some(target) = self.target(ino) else {
            return Ok(false); // unlinked: not journaled, nothing to write ahead of
        };
        let idx = offset / CHUNK;
        let runs = self.op_write_with(ino, offset, data, now, true)?;
        let layer = match self.node(ino)?.chunks.get(&idx) {
            // Past LAYERED_MAX the chunk became bytes (its layers garbage), rewritten whole.
            Some(Chunk::Patched { .. }) if runs.iter().map(|(x, y)| y - x).sum::<u64>() >= LAYER_AHEAD_MIN => {
                self.write_layer(idx, offset, data, &runs)
            }
            _ => None,
        };
        if let Some(layer) = layer {
            let rec = Record::PutLayer { ino: target, idx, layer: layer.clone(), time: now };
            self.attach_layer(ino, idx, layer)?;
            self.log(|| Some(rec))?;
            return Ok(true);
        }
        // Journaled as bytes: the chunk's runs are no longer all in its layers.
        if !runs.is_empty() {
            self.let_layers_go(ino, idx)?;
        }
        let recs: Vec<(u64, &[u8])> = if runs.is_empty() {
            vec![(offset, &[])] // the same bytes again: only the times change
        } else {
            runs.iter().map(|&(x, y)| (x, &data[(x - offset) as usize..(y - offset) as usize])).collect()
        };
        let n = recs.len();
        for (i, (at, bytes)) in recs.into_iter().enumerate() {
            let ino = target.clone();
            self.log_part(i + 1 < n, || Some(Record::Write { ino, offset: at, data: bytes.to_vec(), time: now }))?;
        }
        Ok(true)
    }

    /// Replays a `PutLayer` record: the layer's runs written over the chunk, and the layer
    /// taken as the chunk's next one where the rule lets it be (as when it was written).
    pub(crate) fn op_put_layer(&mut self, ino: Ino, idx: u64, layer: &Layer, now: Ts) -> FsResult<()> {
        let n = self.node(ino)?;
        let end = idx.checked_mul(CHUNK).ok_or(crate::errno::EFBIG)? + CHUNK;
        if n.inode.kind != Kind::File || end > crate::inode::MAX_FILE_SIZE {
            return Err(crate::errno::EINVAL);
        }
        let takes = self.takes_layers(ino, idx)?;
        let bytes = self.vol.forest.store.read(&layer.block).map_err(eio)?;
        let runs = Patches::from_layer(&layer.runs, &bytes).map_err(eio)?;
        for (o, d) in runs.within(0, CHUNK as usize) {
            self.op_write_with(ino, idx * CHUNK + o as u64, d, now, takes)?;
        }
        if takes && matches!(self.node(ino)?.chunks.get(&idx), Some(Chunk::Patched { .. })) {
            self.attach_layer(ino, idx, layer.clone())
        } else {
            self.vol.garbage.push(layer.block);
            self.let_layers_go(ino, idx)
        }
    }

    /// Whether a write of `data` at `offset` may go ahead as a layer: an overwrite within one
    /// chunk of a file of several, not a stream's next write, on a volume whose packs reach
    /// the disk before its journal, into a chunk that `takes_layers`.
    fn layer_ahead_fits(&self, ino: Ino, offset: u64, data: &[u8]) -> FsResult<bool> {
        if self.replaying || !self.keeps_runs() || (data.len() as u64) < LAYER_AHEAD_MIN || data.len() > LAYERED_MAX {
            return Ok(false);
        }
        if self.last_write == Some((ino, offset)) {
            return Ok(false);
        }
        let (idx, end) = (offset / CHUNK, offset + data.len() as u64);
        let n = self.node(ino)?;
        let size = n.inode.size;
        // (A write of a last chunk from its start to the end is a tail: `Fs::tail_ahead`.)
        let tail = offset % CHUNK == 0 && end == size;
        if n.inode.kind != Kind::File || size <= CHUNK || end > size || (end - 1) / CHUNK != idx || tail {
            return Ok(false);
        }
        let room = match n.chunks.get(&idx) {
            None if Self::has_inline(n, idx) => false,
            None => self.stored_value(n, idx)?.is_some_and(|s| s.layers.len() < LAYERS_MAX),
            _ => true,
        };
        Ok(room && self.takes_layers(ino, idx)?)
    }

    /// The rule (see the module's comment): chunk `idx` has no run new since the checkpoint
    /// that is not in a layer written ahead, and room for one more. (Replay too: the records
    /// of a checkpoint's window after a crash before its commit are replayed over those
    /// before its fold, into one overlay, which may so reach LAYERS_MAX.)
    fn takes_layers(&self, ino: Ino, idx: u64) -> FsResult<bool> {
        Ok(match self.node(ino)?.chunks.get(&idx) {
            None | Some(Chunk::Block(_)) => true,
            Some(Chunk::Patched { ahead, .. }) => !ahead.is_empty() && ahead.len() < LAYERS_MAX,
            Some(_) => false,
        })
    }

    /// The write's changed runs (file offsets `runs`, within chunk `idx`) as a layer block in
    /// a pack; `None` if it could not be written (a full host, say: the write is journaled
    /// as bytes instead).
    fn write_layer(&self, idx: u64, offset: u64, data: &[u8], runs: &[(u64, u64)]) -> Option<Layer> {
        let base = idx * CHUNK;
        let places: Vec<(u32, u32)> = runs.iter().map(|&(x, y)| ((x - base) as u32, (y - x) as u32)).collect();
        let bytes: Vec<u8> = runs
            .iter()
            .flat_map(|&(x, y)| &data[(x - offset) as usize..(y - offset) as usize])
            .copied()
            .collect();
        match self.vol.forest.store.write(BlockKind::Data, &bytes) {
            Ok(block) => Some(Layer { block, runs: places }),
            Err(e) => {
                log::debug!("a layer of chunk {idx}: not written ahead ({e})");
                None
            }
        }
    }

    /// Makes `layer` the newest layer written ahead of chunk `idx` (a `Patched` chunk), its
    /// reference the overlay's.
    fn attach_layer(&mut self, ino: Ino, idx: u64, layer: Layer) -> FsResult<()> {
        let Some(Chunk::Patched { ahead, patches, .. }) = self.node_mut(ino)?.chunks.get_mut(&idx) else {
            unreachable!("a layer attached to a chunk that is not runs over a block")
        };
        assert!(ahead.len() < LAYERS_MAX, "{} layers written ahead", ahead.len() + 1);
        assert!(patches.bytes() <= LAYERED_MAX, "layers of {} bytes", patches.bytes());
        ahead.push(layer);
        Ok(())
    }

    /// Lets chunk `idx`'s layers written ahead go (to the garbage): its runs are journaled.
    fn let_layers_go(&mut self, ino: Ino, idx: u64) -> FsResult<()> {
        if let Some(Chunk::Patched { ahead, .. }) = self.node_mut(ino)?.chunks.get_mut(&idx) {
            let gone: Vec<_> = std::mem::take(ahead).into_iter().map(|l| l.block).collect();
            self.vol.garbage.extend(gone);
        }
        Ok(())
    }

    /// The layers of chunk value `old` (`None`: the block was written ahead, `owned`) with
    /// `ahead` stacked on them: the chunk's layers after this checkpoint, each holding a
    /// reference for the value (a committed layer gains one; `ahead`'s move from the
    /// overlay). `None` if they do not fit in one value (`LAYERS_MAX`, `LAYER_RUNS_MAX`).
    pub(crate) fn stack_ahead(
        &mut self,
        old: Option<&crate::delta::StoredChunk>,
        owned: bool,
        ahead: &[Layer],
    ) -> scion_store::Result<Option<Vec<Layer>>> {
        use crate::delta::LAYER_RUNS_MAX;
        let under: &[Layer] = match old {
            _ if owned => &[],
            Some(c) => &c.layers,
            None => return Ok(None), // not over the committed block: written again whole
        };
        // Runs the committed value holds in itself (no layers) become a layer of their own.
        let inline = old.filter(|c| !owned && c.layers.is_empty() && !c.patches.is_empty());
        let count = under.len() + usize::from(inline.is_some()) + ahead.len();
        let runs: usize = under.iter().chain(ahead).map(|l| l.runs.len()).sum::<usize>()
            + inline.map_or(0, |c| c.patches.run_count());
        if count > LAYERS_MAX || runs > LAYER_RUNS_MAX {
            return Ok(None);
        }
        let mut layers = Vec::with_capacity(count);
        for l in under {
            self.vol.forest.refs.inc(&l.block);
            layers.push(l.clone());
        }
        if let Some(c) = inline {
            let (runs, bytes) = c.patches.to_layer();
            let block = self.vol.forest.store.write(BlockKind::Data, &bytes)?;
            layers.push(Layer { block, runs });
        }
        layers.extend(ahead.iter().cloned());
        Ok(Some(layers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_one_or_two_and_never_overflow() {
        assert_eq!(chunk_pieces(100, 200), Some(vec![(100, 200)]));
        assert_eq!(chunk_pieces(CHUNK - 4096, 8192), Some(vec![(CHUNK - 4096, 4096), (CHUNK, 4096)]));
        assert_eq!(chunk_pieces(CHUNK - 1, CHUNK + 2), None); // a whole chunk between
        assert_eq!(chunk_pieces(5, 0), None);
        assert_eq!(chunk_pieces(u64::MAX - 10, 100), None);
        let near = u64::MAX - 5;
        assert_eq!(chunk_pieces(near, 5), Some(vec![(near, 5)]));
    }
}
