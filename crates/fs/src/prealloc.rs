//! Preallocation (`fallocate` mode 0, with or without KEEP_SIZE): what `st_blocks` counts of
//! a file beyond its stored bytes (issue 36, xfstests generic/568 and 701). ZERO_RANGE
//! neither adds nor frees ranges; PUNCH_HOLE frees those it covers.
//!
//! A copy-on-write store writes every block anew, so there is nothing to allocate ahead:
//! `fallocate` checks that the host has the room (ENOSPC otherwise, `Fs::fallocate`) and
//! records the byte ranges it covered that store nothing yet, in the file's inode
//! (`Inode::prealloc`). `st_blocks` counts them with the stored bytes, so that a program
//! that preallocates sees its blocks, and writing into them does not grow the count: a range
//! starts where its chunk's stored bytes end (a write there stores the chunk from its start,
//! `Chunk::Buf`), and a chunk's stored bytes leave the ranges as they are stored
//! (`Fs::set_chunk`). Truncating below a range drops it, a hole punched through one removes
//! it.

use crate::error::{errno, FsResult};
use crate::fs::{Fs, Ino};
use crate::inode::{CHUNK, MAX_FILE_SIZE};

/// Ranges one file may have: past this, `fallocate` is refused (EOPNOTSUPP, on which
/// `posix_fallocate` writes zeros instead), so an inode record stays small.
pub const MAX_RANGES: usize = 64;

/// Sorted, disjoint, non-adjacent byte ranges `[start, end)`.
pub type Ranges = Vec<(u64, u64)>;

/// Whether `r` is well formed (sorted, disjoint, not touching, none empty, within bounds).
pub fn valid(r: &[(u64, u64)]) -> bool {
    r.len() <= MAX_RANGES
        && r.iter().all(|(s, e)| s < e && *e <= MAX_FILE_SIZE)
        && r.windows(2).all(|w| w[0].1 < w[1].0)
}

/// Bytes the ranges cover.
pub fn total(r: &[(u64, u64)]) -> u64 {
    r.iter().map(|(s, e)| e - s).sum()
}

/// `r` with `[start, end)` added (merged with what it touches).
pub fn add(r: &[(u64, u64)], start: u64, end: u64) -> Ranges {
    if start >= end {
        return r.to_vec();
    }
    let (mut s, mut e) = (start, end);
    let mut out = Vec::with_capacity(r.len() + 1);
    for &(a, b) in r {
        if b < s || a > e {
            out.push((a, b));
        } else {
            (s, e) = (s.min(a), e.max(b));
        }
    }
    out.push((s, e));
    out.sort_unstable();
    out
}

/// `r` without `[start, end)`.
pub fn remove(r: &[(u64, u64)], start: u64, end: u64) -> Ranges {
    if start >= end {
        return r.to_vec();
    }
    let mut out = Vec::with_capacity(r.len() + 1);
    for &(a, b) in r {
        if b <= start || a >= end {
            out.push((a, b));
            continue;
        }
        if a < start {
            out.push((a, start));
        }
        if b > end {
            out.push((end, b));
        }
    }
    out
}

impl Fs {
    /// Records `[offset, end)` of file `ino` as preallocated where it stores nothing, each
    /// chunk's range starting at its stored bytes' end. EOPNOTSUPP past `MAX_RANGES`.
    pub(crate) fn preallocate(&mut self, ino: Ino, offset: u64, end: u64) -> FsResult<()> {
        let n = self.node(ino)?;
        let mut r = n.inode.prealloc.clone();
        let empty = n.inode.content.is_none() && n.inode.inline.is_empty() && n.chunks.is_empty();
        if empty {
            // Nothing stored: one range, from its first chunk's start.
            r = add(&r, offset / CHUNK * CHUNK, end);
        } else {
            for idx in offset / CHUNK..end.div_ceil(CHUNK) {
                let from = idx * CHUNK + self.chunk_len(self.node(ino)?, idx)?;
                r = add(&r, from, end.min((idx + 1) * CHUNK));
                if r.len() > MAX_RANGES {
                    break;
                }
            }
        }
        if r.len() > MAX_RANGES {
            return Err(errno::EOPNOTSUPP.with(format!("a file keeps at most {MAX_RANGES} preallocated ranges")));
        }
        debug_assert!(valid(&r), "{r:?}");
        self.node_mut(ino)?.inode.prealloc = r;
        Ok(())
    }

    /// Forgets what file `ino` had preallocated in `[start, end)`.
    pub(crate) fn unpreallocate(&mut self, ino: Ino, start: u64, end: u64) -> FsResult<()> {
        let n = self.node_mut(ino)?;
        if !n.inode.prealloc.is_empty() {
            n.inode.prealloc = remove(&n.inode.prealloc, start, end);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges as a set of bytes, for a model of small offsets.
    fn bytes(r: &[(u64, u64)]) -> std::collections::BTreeSet<u64> {
        r.iter().flat_map(|&(s, e)| s..e).collect()
    }

    #[test]
    fn adding_and_removing_match_a_set_of_bytes() {
        let mut state: u64 = 7;
        let mut next = |m: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        let mut r: Ranges = Vec::new();
        let mut model = std::collections::BTreeSet::new();
        for _ in 0..5000 {
            let (s, len) = (next(200), next(20));
            if next(3) == 0 {
                r = remove(&r, s, s + len);
                for b in s..s + len {
                    model.remove(&b);
                }
            } else {
                r = add(&r, s, s + len);
                model.extend(s..s + len);
            }
            assert_eq!(bytes(&r), model);
            assert!(r.windows(2).all(|w| w[0].1 < w[1].0), "{r:?}");
            assert_eq!(total(&r), model.len() as u64);
            if r.len() > MAX_RANGES {
                r = remove(&r, 0, u64::MAX);
                model.clear();
            }
            assert!(valid(&r));
        }
    }
}
