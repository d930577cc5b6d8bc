//! The hash memo kept across mounts (`STORE/hash-memo`, `docs/format.md` "Hash memo"): the
//! content hashes of directories and files (`treehash`) already computed, so that the first
//! `scion send` or `receive` after a mount does not walk a whole base again (issue 38).
//!
//! Every entry is a pure function of content-addressed keys (a content tree's root hash and
//! metadata, a file's content root and size), so an entry can never be stale: the file is a
//! cache. It is written whole at a clean unmount and read at open; one that is absent, cut
//! short, damaged (its BLAKE3 trailer), of another version or of another hash scheme is
//! ignored, and the memo starts empty.
//!
//! ```text
//! "SCHM" version u8 (1) scheme u8 (treehash::SCHEME)
//! dirs u32, contents u32
//! dirs × (content tree hash [32], metadata hash [32], tree hash [32])
//! contents × (content root hash [32], size u64, content hash [32])
//! BLAKE3 of everything before [32]
//! ```

use scion_store::codec::{Reader, Writer};

pub const FILE: &str = "hash-memo";
const MAGIC: &[u8; 4] = b"SCHM";
const VERSION: u8 = 1;
/// Entries of each kind a file may hold, at most (the memo's own bound is lower).
pub const MAX_ENTRIES: usize = 1 << 24;

/// A directory's (content tree hash, metadata hash) and its tree hash.
pub type DirEntry = (([u8; 32], [u8; 32]), [u8; 32]);
/// A file's (content root hash, size) and its content hash.
pub type ContentEntry = (([u8; 32], u64), [u8; 32]);

/// The file's bytes for these entries, under hash scheme `scheme`.
pub fn encode(scheme: u8, dirs: &[DirEntry], contents: &[ContentEntry]) -> Vec<u8> {
    assert!(dirs.len() <= MAX_ENTRIES && contents.len() <= MAX_ENTRIES, "a memo over its bound");
    let mut w = Writer::new();
    w.raw(MAGIC).u8(VERSION).u8(scheme).u32(dirs.len() as u32).u32(contents.len() as u32);
    for ((tree, meta), h) in dirs {
        w.raw(tree).raw(meta).raw(h);
    }
    for ((root, size), h) in contents {
        w.raw(root).u64(*size).raw(h);
    }
    let mut b = w.finish();
    let sum = *blake3::hash(&b).as_bytes();
    b.extend_from_slice(&sum);
    b
}

/// The entries of a file written under hash scheme `scheme`; Err says why it is not used.
pub fn decode(scheme: u8, b: &[u8]) -> Result<(Vec<DirEntry>, Vec<ContentEntry>), String> {
    let (body, sum) = b.split_at_checked(b.len().saturating_sub(32)).filter(|(_, s)| s.len() == 32).ok_or("shorter than its trailer")?;
    if blake3::hash(body).as_bytes() != sum {
        return Err("its checksum does not match (cut short or damaged)".into());
    }
    let bad = |e: scion_store::Error| e.to_string();
    let mut r = Reader::new(body, "hash memo");
    if r.array::<4>().map_err(bad)? != *MAGIC {
        return Err("not a hash memo".into());
    }
    let (version, s) = (r.u8().map_err(bad)?, r.u8().map_err(bad)?);
    if version != VERSION || s != scheme {
        return Err(format!("version {version}, hash scheme {s} (this scion: {VERSION}, {scheme})"));
    }
    let (nd, nc) = (r.u32().map_err(bad)? as usize, r.u32().map_err(bad)? as usize);
    // (Checked against what is there before anything is allocated for them.)
    if nd > MAX_ENTRIES || nc > MAX_ENTRIES || r.remaining() != nd * 96 + nc * 72 {
        return Err(format!("{nd} directories and {nc} files do not fit its {} bytes", r.remaining()));
    }
    let mut dirs = Vec::with_capacity(nd);
    for _ in 0..nd {
        dirs.push(((r.array().map_err(bad)?, r.array().map_err(bad)?), r.array().map_err(bad)?));
    }
    let mut contents = Vec::with_capacity(nc);
    for _ in 0..nc {
        contents.push(((r.array().map_err(bad)?, r.u64().map_err(bad)?), r.array().map_err(bad)?));
    }
    Ok((dirs, contents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_round_trips_and_damage_is_refused() {
        let dirs = vec![(([1; 32], [2; 32]), [3; 32]), (([4; 32], [5; 32]), [6; 32])];
        let contents = vec![(([7; 32], 1 << 40), [8; 32])];
        let b = encode(1, &dirs, &contents);
        assert_eq!(b.len(), 4 + 2 + 8 + 2 * 96 + 72 + 32);
        assert_eq!(decode(1, &b), Ok((dirs.clone(), contents.clone())));
        assert!(decode(2, &b).unwrap_err().contains("hash scheme 1"));
        for cut in [0, 10, b.len() - 1] {
            assert!(decode(1, &b[..cut]).is_err());
        }
        let mut flipped = b.clone();
        flipped[20] ^= 1;
        assert!(decode(1, &flipped).unwrap_err().contains("checksum"));
        assert_eq!(decode(1, &encode(1, &[], &[])), Ok((vec![], vec![])));
    }
}
