//! Copy-on-abundant-write (BetrFS, "How to Not Copy Files"): a small overwrite of a committed
//! chunk is kept as *patches* beside the chunk's block instead of rewriting the block, so a
//! 16-byte write to a file shared by a hundred clones costs a few dozen bytes, and the block,
//! with its place in the pack, stays shared. Only when a chunk's patches grow past
//! [`PATCH_MAX`] is the chunk folded into a new block ("abundant" writes).
//!
//! A file content tree value is `[patches][page sums][one block pointer]`; no patch bytes
//! means the plain block (format version 2 wrote only those), and page sums (format 6) are
//! there when the block's writer computed them (`scion_store::page_sums`). The chunk's bytes are the block's, extended with
//! zeros to the last patched byte, with the patches laid over them.

use scion_store::{BlockPtr, Error, Result};
use scion_tree::Value;

use crate::inode::CHUNK;

/// The most patch bytes one chunk keeps; a write that would exceed it folds the chunk into a
/// new block. A sixteenth of a chunk: one 4 KiB page rewritten in place still fits.
pub const PATCH_MAX: usize = 4096;

/// The most bytes a chunk's layers hold in all (format 16): random overwrites of a large
/// file's committed chunk stay runs over its block up to half a chunk, each checkpoint writing
/// only the runs new since the last one as a layer block, instead of rewriting the whole
/// 64 KiB block for every 4 KiB page (the write amplification of 4 KiB random overwrites:
/// docs/benchmarks.md). Past it the chunk is rewritten whole, as past `PATCH_MAX` before.
pub const LAYERED_MAX: usize = CHUNK as usize / 2;

/// The most layers a chunk's value names: a checkpoint that would add one more writes the
/// chunk's runs as one layer instead (at most `LAYERED_MAX` bytes), so a read of the chunk
/// never reads more than this many blocks beside its own.
pub const LAYERS_MAX: usize = 8;

/// The most runs a chunk's layers name in all (8 bytes each in the value): more runs and the
/// chunk is rewritten whole, so a content value stays small beside its leaf's others.
pub const LAYER_RUNS_MAX: usize = 256;

/// Writes of at most this many bytes to a committed chunk become patches without being
/// compared with the chunk's block first (`Fs::patched`): a blind write, as BetrFS makes them.
pub const BLIND_MAX: usize = 512;

/// Changed runs closer than this are kept as one (a run costs 8 bytes of header).
const MERGE_GAP: usize = 16;

/// The byte ranges of `new` (to be written at `at`) that differ from `cur`, the chunk's
/// current bytes (zeros past its end), with runs closer than `MERGE_GAP` merged. The kernel
/// writes whole pages back (a 16-byte write arrives as 4 KiB of the page around it), so only
/// what changed is worth a patch.
pub fn changed_runs(cur: &[u8], at: usize, new: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, b) in new.iter().enumerate() {
        if *b != cur.get(at + i).copied().unwrap_or(0) {
            match runs.last_mut() {
                Some((_, end)) if i - *end < MERGE_GAP => *end = i + 1,
                _ => runs.push((i, i + 1)),
            }
        }
    }
    runs
}

/// Tag of an encoded patch list (the first byte of a content value that has patches).
const TAG_PATCHES: u8 = 1;
/// Tag of the page sums section of a content value, after the patches if any (format 6).
const TAG_SUMS: u8 = 2;
/// Tag of the layers section of a content value, last (format 16): `count u8`, then per
/// layer `runs u16` and per run `offset u32, length u32`.
const TAG_LAYERS: u8 = 3;

/// Byte runs laid over a chunk. Invariant (kept by [`Patches::write`], checked by
/// [`Patches::decode`]): runs are non-empty, sorted, disjoint, end within the chunk, and hold
/// at most [`PATCH_MAX`] bytes in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Patches {
    runs: Vec<(u32, Vec<u8>)>,
}

impl Patches {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Runs held (what [`LAYER_RUNS_MAX`] bounds for a layered chunk).
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Bytes held (what [`PATCH_MAX`] bounds).
    pub fn bytes(&self) -> usize {
        self.runs.iter().map(|(_, d)| d.len()).sum()
    }

    /// One past the last patched byte (0 when empty).
    pub fn end(&self) -> u32 {
        self.runs.last().map_or(0, |(o, d)| o + d.len() as u32)
    }

    /// Lays `data` at `at`, merging it with the runs it overlaps or touches (so the list stays
    /// short). The caller keeps `at + data.len()` within the chunk.
    pub fn write(&mut self, at: u32, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let (a, b) = (at, at + data.len() as u32);
        assert!(b as u64 <= CHUNK, "patch past the chunk");
        // Runs are sorted and disjoint, so those touching [a, b] are consecutive.
        let first = self.runs.partition_point(|(o, d)| o + (d.len() as u32) < a);
        let last = self.runs.partition_point(|(o, _)| *o <= b);
        if first == last {
            self.runs.insert(first, (a, data.to_vec()));
            return;
        }
        let lo = a.min(self.runs[first].0);
        let (lo_last, d_last) = &self.runs[last - 1];
        let hi = b.max(lo_last + d_last.len() as u32);
        let mut merged = vec![0u8; (hi - lo) as usize];
        // Every gap between touching runs lies inside [a, b], which `data` covers.
        for (o, d) in &self.runs[first..last] {
            merged[(o - lo) as usize..(o - lo) as usize + d.len()].copy_from_slice(d);
        }
        merged[(a - lo) as usize..(b - lo) as usize].copy_from_slice(data);
        self.runs.splice(first..last, [(lo, merged)]);
    }

    /// Lays the patches over a chunk's block bytes.
    pub fn apply(&self, buf: &mut Vec<u8>) {
        let end = self.end() as usize;
        if buf.len() < end {
            buf.resize(end, 0);
        }
        for (o, d) in &self.runs {
            buf[*o as usize..*o as usize + d.len()].copy_from_slice(d);
        }
    }

    /// The parts of the runs inside `[from, from + len)`: (offset from `from`, bytes).
    pub fn within(&self, from: usize, len: usize) -> impl Iterator<Item = (usize, &[u8])> {
        let to = from + len;
        self.runs.iter().filter_map(move |(o, d)| {
            let (a, b) = ((*o as usize).max(from), (*o as usize + d.len()).min(to));
            (a < b).then(|| (a - from, &d[a - *o as usize..b - *o as usize]))
        })
    }

    /// `tag u8 = 1, count u32, then per run: offset u32, length u32, bytes` (docs/format.md).
    pub fn encode(&self) -> Vec<u8> {
        if self.runs.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(5 + self.runs.len() * 8 + self.bytes());
        out.push(TAG_PATCHES);
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for (o, d) in &self.runs {
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&(d.len() as u32).to_le_bytes());
            out.extend_from_slice(d);
        }
        out
    }

    /// Decodes and checks every invariant; empty bytes are no patches.
    pub fn decode(bytes: &[u8]) -> Result<Patches> {
        Patches::decode_at_most(bytes, PATCH_MAX)
    }

    /// As `decode`, for a list of up to `max` bytes (a layer block's: `LAYERED_MAX`).
    pub fn decode_at_most(bytes: &[u8], max: usize) -> Result<Patches> {
        if bytes.is_empty() {
            return Ok(Patches::default());
        }
        let mut r = scion_store::codec::Reader::new(bytes, "chunk patches");
        let p = Patches::decode_from(&mut r, max)?;
        r.expect_end()?;
        Ok(p)
    }

    /// The runs of `self` that `older` lacks (bytes it does not cover, or covers with other
    /// bytes): what a layer laid over `older` must hold for the two to read as `self`. `None`
    /// when `older` covers a byte `self` does not (a chunk cut by a truncate since), which no
    /// layer over it can undo.
    pub fn since(&self, older: &Patches) -> Option<Patches> {
        // Runs touching each other are merged (`write`), so a run of `older` inside `self`'s
        // coverage lies inside one run of `self`.
        let covered = older.runs.iter().all(|(o, d)| {
            let end = o + d.len() as u32;
            let i = self.runs.partition_point(|(so, _)| *so <= *o);
            i > 0 && {
                let (so, sd) = &self.runs[i - 1];
                so + sd.len() as u32 >= end
            }
        });
        if !covered {
            return None;
        }
        let mut out = Patches::default();
        for (o, d) in &self.runs {
            let mut differs = vec![true; d.len()];
            for (at, od) in older.within(*o as usize, d.len()) {
                for (k, b) in od.iter().enumerate() {
                    differs[at + k] = *b != d[at + k];
                }
            }
            let mut k = 0;
            while k < d.len() {
                if !differs[k] {
                    k += 1;
                    continue;
                }
                let start = k;
                while k < d.len() && differs[k] {
                    k += 1;
                }
                out.write(o + start as u32, &d[start..k]);
            }
        }
        Some(out)
    }

    /// The runs' places and their bytes back to back: a layer's value entry and its block.
    pub fn to_layer(&self) -> (Vec<(u32, u32)>, Vec<u8>) {
        let places = self.runs.iter().map(|(o, d)| (*o, d.len() as u32)).collect();
        (places, self.runs.iter().flat_map(|(_, d)| d.iter().copied()).collect())
    }

    /// The runs of a layer: `places` as its value names them over `bytes`, its block's.
    pub fn from_layer(places: &[(u32, u32)], bytes: &[u8]) -> Result<Patches> {
        let total: u64 = places.iter().map(|(_, l)| *l as u64).sum();
        if total != bytes.len() as u64 {
            return Err(Error::corrupt("chunk layer", "file content value", format!(
                "runs of {total} bytes over a block of {}",
                bytes.len()
            )));
        }
        let mut runs = Vec::with_capacity(places.len());
        let mut at = 0;
        for (o, l) in places {
            runs.push((*o, bytes[at..at + *l as usize].to_vec()));
            at += *l as usize;
        }
        Ok(Patches { runs })
    }

    /// Decodes a patch list (tag first) of at most `max` bytes from `r`, leaving what follows.
    fn decode_from(r: &mut scion_store::codec::Reader<'_>, max: usize) -> Result<Patches> {
        let bad = |why: String| Error::corrupt("chunk patches", "file content value", why);
        let tag = r.u8()?;
        if tag != TAG_PATCHES {
            return Err(bad(format!("unknown tag {tag}")));
        }
        let count = r.u32()? as usize;
        if count == 0 || count > max {
            return Err(bad(format!("{count} runs")));
        }
        let mut runs = Vec::with_capacity(count);
        let (mut prev_end, mut total) = (0u64, 0usize);
        for i in 0..count {
            let off = r.u32()?;
            let len = r.u32()? as usize;
            if len == 0 || (i > 0 && (off as u64) < prev_end) || off as u64 + len as u64 > CHUNK {
                return Err(bad(format!(
                    "run {i} at {off}+{len} is empty, unsorted, overlapping or past the chunk"
                )));
            }
            total += len;
            if total > max {
                return Err(bad(format!("more than {max} bytes")));
            }
            runs.push((off, r.raw(len)?.to_vec()));
            prev_end = off as u64 + len as u64;
        }
        Ok(Patches { runs })
    }
}

/// A chunk as the content tree stores it: a data block, and the runs laid over it, either as
/// a patch list in the value itself or (format 16) as *layers*, laid over the block in order.
/// A value has one or the other, never both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    pub block: BlockPtr,
    /// The runs laid over the block: the value's patch list, or, for a layered chunk, its
    /// layers' runs merged once `load_layers` has read them (empty until then).
    pub patches: Patches,
    /// The block's page sums, if its writer kept them (reads of a few pages verify those
    /// pages alone, `BlockStore::read_pages`).
    pub sums: Option<Sums>,
    /// The layers, oldest first (empty: the runs, if any, are in the value).
    pub layers: Vec<Layer>,
}

/// Runs laid over a chunk at one checkpoint: their places, named in the content value, and
/// their bytes back to back in a data block of their own, which holds nothing else (so a
/// page's run is a page-sized block, as a 4 KiB random write is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub block: BlockPtr,
    /// (offset in the chunk, length): non-empty, sorted, disjoint, within the chunk.
    pub runs: Vec<(u32, u32)>,
}

impl Layer {
    fn end(&self) -> u32 {
        self.runs.last().map_or(0, |(o, l)| o + l)
    }

    /// As a journal record names it (`PutLayer`, format 17): the block, then the runs.
    pub fn encode(&self, w: &mut scion_store::codec::Writer) {
        assert!(!self.runs.is_empty() && self.runs.len() <= LAYER_RUNS_MAX, "{} runs", self.runs.len());
        self.block.encode(w);
        w.u16(self.runs.len() as u16);
        for (o, l) in &self.runs {
            w.u32(*o).u32(*l);
        }
    }

    /// What `encode` wrote, checked as a content value's layer is.
    pub fn decode(r: &mut scion_store::codec::Reader<'_>) -> Result<Layer> {
        let block = BlockPtr::decode(r)?;
        if block.kind != scion_store::BlockKind::Data {
            return Err(Error::corrupt("chunk layer", &block, "not a data block".to_string()));
        }
        let runs = decode_layer_runs(r, &block)?;
        Ok(Layer { block, runs })
    }
}

/// A data block's page sums (`scion_store::page_sums`), shared as it is passed around.
pub type Sums = std::sync::Arc<[u32]>;

impl StoredChunk {
    /// A chunk that is its block with `patches` (at most `PATCH_MAX` bytes) laid over it.
    pub fn new(block: BlockPtr, patches: Patches, sums: Option<Sums>) -> StoredChunk {
        StoredChunk {
            block,
            patches,
            sums,
            layers: Vec::new(),
        }
    }

    /// Decodes a content value. A layered chunk's runs are not read here (`patches` stays
    /// empty): `load_layers` reads them.
    pub fn from_value(v: &Value) -> Result<StoredChunk> {
        let Some((&block, layer_blocks)) = v.ptrs.split_first() else {
            return Err(Error::corrupt("file content value", "content tree", "no pointer".to_string()));
        };
        let bad = |why: String| Error::corrupt("file content value", &block, why);
        let mut r = scion_store::codec::Reader::new(&v.bytes, "file content value");
        let patches = if v.bytes.first() == Some(&TAG_PATCHES) {
            Patches::decode_from(&mut r, PATCH_MAX)?
        } else {
            Patches::default()
        };
        let mut tag = if r.is_empty() { None } else { Some(r.u8()?) };
        let mut sums = None;
        if tag == Some(TAG_SUMS) {
            let n = r.u16()? as usize;
            let pages = (block.len as usize).div_ceil(scion_store::PAGE);
            if n != pages {
                return Err(bad(format!("{n} page sums for a block of {pages} pages")));
            }
            let mut s = Vec::with_capacity(n);
            for _ in 0..n {
                s.push(r.u32()?);
            }
            sums = Some(Sums::from(s));
            tag = if r.is_empty() { None } else { Some(r.u8()?) };
        }
        let mut layers = Vec::new();
        if tag == Some(TAG_LAYERS) {
            let n = r.u8()? as usize;
            if n == 0 || n > LAYERS_MAX || n != layer_blocks.len() || !patches.is_empty() {
                return Err(bad(format!(
                    "{n} layers for {} pointers beside the block, or beside a patch list",
                    layer_blocks.len()
                )));
            }
            let mut total_runs = 0;
            for b in layer_blocks {
                let runs = decode_layer_runs(&mut r, b)?;
                total_runs += runs.len();
                if total_runs > LAYER_RUNS_MAX {
                    return Err(bad(format!("layers of more than {LAYER_RUNS_MAX} runs")));
                }
                layers.push(Layer { block: *b, runs });
            }
            tag = None;
        }
        if let Some(t) = tag {
            return Err(bad(format!("unknown section {t}")));
        }
        if layers.len() != layer_blocks.len() {
            return Err(bad(format!("{} pointers, not one", v.ptrs.len())));
        }
        r.expect_end()?;
        Ok(StoredChunk {
            block,
            patches,
            sums,
            layers,
        })
    }

    /// Reads the layers' runs into `patches`, each layer over those before it (a no-op for a
    /// chunk without layers).
    pub fn load_layers(&mut self, store: &scion_store::BlockStore) -> Result<()> {
        self.load_layers_over(store, 0, CHUNK as usize)?;
        if self.patches.bytes() > LAYERED_MAX {
            return Err(Error::corrupt(
                "chunk layers",
                &self.block,
                format!("{} bytes of runs", self.patches.bytes()),
            ));
        }
        Ok(())
    }

    /// As `load_layers`, for a read of bytes `from..from + len` of the chunk: only the layers
    /// with a run there are read (the others lay nothing over those bytes), so a 4 KiB random
    /// read of a layered chunk reads one layer or none, not all of them.
    pub fn load_layers_over(&mut self, store: &scion_store::BlockStore, from: usize, len: usize) -> Result<()> {
        if self.layers.is_empty() {
            return Ok(());
        }
        let (from, to) = (from as u64, from as u64 + len as u64);
        let touches = |l: &&Layer| l.runs.iter().any(|(o, n)| (*o as u64) < to && from < *o as u64 + *n as u64);
        let mut merged = Patches::default();
        for l in self.layers.iter().filter(touches) {
            let bytes = store.read_shared(&l.block, true)?;
            for (o, d) in &Patches::from_layer(&l.runs, &bytes)?.runs {
                merged.write(*o, d);
            }
        }
        self.patches = merged;
        Ok(())
    }

    /// The value owning one reference to `block` and to each layer's. A layered chunk's
    /// `patches` are its layers' (not encoded again).
    pub fn to_value(&self) -> Value {
        let mut bytes = if self.layers.is_empty() { self.patches.encode() } else { Vec::new() };
        if let Some(s) = &self.sums {
            debug_assert_eq!(s.len(), (self.block.len as usize).div_ceil(scion_store::PAGE));
            bytes.push(TAG_SUMS);
            bytes.extend_from_slice(&(s.len() as u16).to_le_bytes());
            for x in s.iter() {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        if !self.layers.is_empty() {
            assert!(self.layers.len() <= LAYERS_MAX, "{} layers", self.layers.len());
            bytes.push(TAG_LAYERS);
            bytes.push(self.layers.len() as u8);
            for l in &self.layers {
                bytes.extend_from_slice(&(l.runs.len() as u16).to_le_bytes());
                for (o, len) in &l.runs {
                    bytes.extend_from_slice(&o.to_le_bytes());
                    bytes.extend_from_slice(&len.to_le_bytes());
                }
            }
        }
        let mut ptrs = Vec::with_capacity(1 + self.layers.len());
        ptrs.push(self.block);
        ptrs.extend(self.layers.iter().map(|l| l.block));
        Value::new(bytes, ptrs)
    }

    /// The chunk's length: its block's, or up to its last patched byte.
    pub fn len(&self) -> u64 {
        let layers = self.layers.iter().map(Layer::end).max().unwrap_or(0);
        (self.block.len as u64)
            .max(self.patches.end() as u64)
            .max(layers as u64)
    }

    /// Runs the layers name in all.
    pub fn layer_runs(&self) -> usize {
        self.layers.iter().map(|l| l.runs.len()).sum()
    }

    /// True if the chunk is its block alone, nothing laid over it.
    pub fn is_plain(&self) -> bool {
        self.patches.is_empty() && self.layers.is_empty()
    }

    /// A whole chunk that is exactly its block (what copy_file_range can share).
    pub fn plain_full(&self) -> Option<BlockPtr> {
        (self.is_plain() && self.block.len as u64 == CHUNK).then_some(self.block)
    }
}

/// One layer's runs from a content value: non-empty, sorted, disjoint, within the chunk, as
/// many bytes as its block holds.
fn decode_layer_runs(r: &mut scion_store::codec::Reader<'_>, block: &BlockPtr) -> Result<Vec<(u32, u32)>> {
    let bad = |why: String| Error::corrupt("chunk layer", block, why);
    let n = r.u16()? as usize;
    if n == 0 || n > LAYER_RUNS_MAX {
        return Err(bad(format!("{n} runs")));
    }
    let mut runs: Vec<(u32, u32)> = Vec::with_capacity(n);
    let mut total = 0u64;
    for i in 0..n {
        let (o, l) = (r.u32()?, r.u32()?);
        let prev_end = runs.last().map_or(0, |(po, pl)| *po as u64 + *pl as u64);
        if l == 0 || (i > 0 && (o as u64) < prev_end) || o as u64 + l as u64 > CHUNK {
            return Err(bad(format!("run {i} at {o}+{l} is empty, unsorted, overlapping or past the chunk")));
        }
        total += l as u64;
        runs.push((o, l));
    }
    if total != block.len as u64 || total > LAYERED_MAX as u64 {
        return Err(bad(format!("runs of {total} bytes in a block of {}", block.len)));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Patches laid over a block read the same as the writes applied to a plain buffer,
        /// and survive encoding.
        #[test]
        fn patches_match_a_buffer(base_len in 0usize..4000, writes in proptest::collection::vec((0u32..4090, proptest::collection::vec(any::<u8>(), 1..40)), 0..60)) {
            let base: Vec<u8> = (0..base_len).map(|i| (i % 251) as u8 + 1).collect();
            let mut model = base.clone();
            let mut p = Patches::default();
            for (at, data) in &writes {
                p.write(*at, data);
                let end = *at as usize + data.len();
                if model.len() < end { model.resize(end, 0); }
                model[*at as usize..end].copy_from_slice(data);
            }
            let mut got = base.clone();
            p.apply(&mut got);
            prop_assert_eq!(&got, &model);
            prop_assert!(p.bytes() <= writes.iter().map(|(_, d)| d.len()).sum::<usize>());
            if p.bytes() <= PATCH_MAX {
                prop_assert_eq!(Patches::decode(&p.encode()).unwrap(), p.clone());
            }
            // `within` gives the same bytes as `apply` for any window.
            let mut win = base.clone();
            win.resize(model.len(), 0);
            for (o, d) in p.within(0, model.len()) { win[o..o + d.len()].copy_from_slice(d); }
            prop_assert_eq!(win, model);
        }
    }

    proptest! {
        /// Writing only the changed runs gives the same chunk as writing everything.
        #[test]
        fn changed_runs_are_enough(cur in proptest::collection::vec(0u8..3, 0..300), at in 0usize..300, new in proptest::collection::vec(0u8..3, 1..200)) {
            let mut whole = cur.clone();
            if whole.len() < at + new.len() { whole.resize(at + new.len(), 0); }
            whole[at..at + new.len()].copy_from_slice(&new);
            let mut p = Patches::default();
            for (a, b) in changed_runs(&cur, at, &new) {
                p.write((at + a) as u32, &new[a..b]);
            }
            let mut got = cur.clone();
            p.apply(&mut got);
            got.resize(whole.len().max(got.len()), 0);
            prop_assert_eq!(got, whole);
        }
    }

    proptest! {
        /// What `since` leaves out of the newer list is what the older one already holds: the
        /// older list with the layer laid over reads as the newer one.
        #[test]
        fn a_layer_over_the_older_runs_reads_as_the_newer(
            first in proptest::collection::vec((0u32..60_000, proptest::collection::vec(0u8..3, 1..300)), 0..8),
            then in proptest::collection::vec((0u32..60_000, proptest::collection::vec(0u8..3, 1..300)), 0..8),
        ) {
            let mut older = Patches::default();
            for (at, d) in &first { older.write(*at, d); }
            let mut newer = older.clone();
            for (at, d) in &then { newer.write(*at, d); }
            let layer = newer.since(&older).expect("writes only add coverage");
            prop_assert!(layer.bytes() <= then.iter().map(|(_, d)| d.len()).sum::<usize>());
            let (places, bytes) = layer.to_layer();
            let mut got = older.clone();
            for (o, d) in &Patches::from_layer(&places, &bytes).unwrap().runs { got.write(*o, d); }
            let (mut a, mut b) = (vec![7u8; 1 << 16], vec![7u8; 1 << 16]);
            got.apply(&mut a);
            newer.apply(&mut b);
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn layered_values_round_trip() {
        let ptr = |i: u64, len: u32| BlockPtr {
            addr: BlockPtr::make_addr(1, 4096 * i),
            len,
            kind: scion_store::BlockKind::Data,
            hash: [i as u8; 32],
        };
        let c = StoredChunk {
            block: ptr(1, 65536),
            patches: Patches::default(),
            sums: None,
            layers: vec![
                Layer { block: ptr(20, 150), runs: vec![(0, 100), (200, 50)] },
                Layer { block: ptr(21, 4096), runs: vec![(8192, 4096)] },
            ],
        };
        let v = c.to_value();
        assert_eq!(v.ptrs.len(), 3);
        assert_eq!(StoredChunk::from_value(&v).unwrap(), c);
        assert_eq!(c.len(), 65536);
        assert!(!c.is_plain() && c.plain_full().is_none());
        // A layer whose runs do not add up to its block, one past the chunk, and a patch list
        // beside layers are damage.
        for bad in [
            Layer { block: ptr(20, 151), runs: vec![(0, 100), (200, 50)] },
            Layer { block: ptr(20, 4096), runs: vec![(65000, 4096)] },
            Layer { block: ptr(20, 150), runs: vec![(200, 50), (0, 100)] },
        ] {
            let mut d = c.clone();
            d.layers[0] = bad;
            assert!(StoredChunk::from_value(&d.to_value()).is_err());
        }
        let mut v2 = v.clone();
        v2.ptrs.pop();
        assert!(StoredChunk::from_value(&v2).is_err(), "a layer without its pointer");
        let mut both = Patches::default();
        both.write(5, b"x");
        let mut v3 = v.clone();
        v3.bytes = [both.encode(), v.bytes.to_vec()].concat().into();
        assert!(StoredChunk::from_value(&v3).is_err(), "a patch list beside layers");
    }

    #[test]
    fn decode_refuses_broken_lists() {
        let mut p = Patches::default();
        p.write(10, b"abc");
        p.write(100, b"de");
        let good = p.encode();
        assert!(Patches::decode(&good).is_ok());
        // Overlapping runs: the second starts inside the first.
        let mut bad = good.clone();
        bad[5 + 8 + 3..5 + 8 + 3 + 4].copy_from_slice(&11u32.to_le_bytes());
        assert!(Patches::decode(&bad).is_err());
        // Past the chunk.
        let mut bad = good.clone();
        bad[5 + 8 + 3..5 + 8 + 3 + 4].copy_from_slice(&(CHUNK as u32 - 1).to_le_bytes());
        assert!(Patches::decode(&bad).is_err());
        assert!(Patches::decode(&good[..good.len() - 1]).is_err());
        assert!(Patches::decode(&[2, 0, 0, 0, 0]).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(Patches::decode(&long).is_err());
    }
}
