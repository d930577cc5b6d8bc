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
        if bytes.is_empty() {
            return Ok(Patches::default());
        }
        let mut r = scion_store::codec::Reader::new(bytes, "chunk patches");
        let p = Patches::decode_from(&mut r)?;
        r.expect_end()?;
        Ok(p)
    }

    /// Decodes a patch list (tag first) from `r`, leaving what follows it.
    fn decode_from(r: &mut scion_store::codec::Reader<'_>) -> Result<Patches> {
        let bad = |why: String| Error::corrupt("chunk patches", "file content value", why);
        let tag = r.u8()?;
        if tag != TAG_PATCHES {
            return Err(bad(format!("unknown tag {tag}")));
        }
        let count = r.u32()? as usize;
        if count == 0 || count > PATCH_MAX {
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
            if total > PATCH_MAX {
                return Err(bad(format!("more than {PATCH_MAX} bytes")));
            }
            runs.push((off, r.raw(len)?.to_vec()));
            prev_end = off as u64 + len as u64;
        }
        Ok(Patches { runs })
    }
}

/// A chunk as the content tree stores it: a data block and the patches laid over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    pub block: BlockPtr,
    pub patches: Patches,
    /// The block's page sums, if its writer kept them (reads of a few pages verify those
    /// pages alone, `BlockStore::read_pages`).
    pub sums: Option<Sums>,
}

/// A data block's page sums (`scion_store::page_sums`), shared as it is passed around.
pub type Sums = std::sync::Arc<[u32]>;

impl StoredChunk {
    pub fn from_value(v: &Value) -> Result<StoredChunk> {
        let block = match v.ptrs.as_slice() {
            [p] => *p,
            ps => {
                return Err(Error::corrupt(
                    "file content value",
                    "content tree",
                    format!("{} pointers, not one", ps.len()),
                ))
            }
        };
        let bad = |why: String| Error::corrupt("file content value", &block, why);
        let mut r = scion_store::codec::Reader::new(&v.bytes, "file content value");
        let patches = if v.bytes.first() == Some(&TAG_PATCHES) {
            Patches::decode_from(&mut r)?
        } else {
            Patches::default()
        };
        let sums = if r.is_empty() {
            None
        } else {
            let tag = r.u8()?;
            if tag != TAG_SUMS {
                return Err(bad(format!("unknown section {tag}")));
            }
            let n = r.u16()? as usize;
            let pages = (block.len as usize).div_ceil(scion_store::PAGE);
            if n != pages {
                return Err(bad(format!("{n} page sums for a block of {pages} pages")));
            }
            let mut s = Vec::with_capacity(n);
            for _ in 0..n {
                s.push(r.u32()?);
            }
            Some(Sums::from(s))
        };
        r.expect_end()?;
        Ok(StoredChunk { block, patches, sums })
    }

    /// The value owning one reference to `block`.
    pub fn to_value(&self) -> Value {
        let mut bytes = self.patches.encode();
        if let Some(s) = &self.sums {
            debug_assert_eq!(s.len(), (self.block.len as usize).div_ceil(scion_store::PAGE));
            bytes.push(TAG_SUMS);
            bytes.extend_from_slice(&(s.len() as u16).to_le_bytes());
            for x in s.iter() {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        Value::new(bytes, vec![self.block])
    }

    /// The chunk's length: its block's, or up to its last patched byte.
    pub fn len(&self) -> u64 {
        (self.block.len as u64).max(self.patches.end() as u64)
    }

    /// A whole chunk that is exactly its block (what copy_file_range can share).
    pub fn plain_full(&self) -> Option<BlockPtr> {
        (self.patches.is_empty() && self.block.len as u64 == CHUNK).then_some(self.block)
    }
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
