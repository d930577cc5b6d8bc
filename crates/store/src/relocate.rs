//! Relocated blocks: data blocks and tree nodes recompressed (zstd) and written again
//! elsewhere.
//!
//! A pointer names a block by address and by the BLAKE3 hash of its logical bytes, and
//! neither changes when the block is recompressed: the store keeps a map from the block's
//! address to where its compressed form lies, and every read looks there first (the
//! indirect mapping ZFS keeps after a device removal). No tree above is rewritten, so a
//! snapshot stays exactly what it was, Merkle hashes included, and diff, scan and send see
//! the same pointers; choosing which blocks to relocate is a matter of space, never of
//! correctness (`scion_fs::compress` chooses blocks only snapshots hold). Checkpoint metadata
//! (kind 3) is never relocated: the checkpoint record is read before the map is loaded.
//!
//! The compressed form has the usual 16-byte block header (the block's kind, codec 1 = zstd,
//! the compressed length, crc32c over header and compressed bytes) and is packed with others
//! into a frame (`frames`), which is punched when its last member's block is freed; a read
//! checks it,
//! decompresses to exactly the pointer's length and checks the pointer's hash, so a flipped
//! bit gives an error, never wrong bytes. The map is persisted by the layer above (a tree
//! named by the checkpoint record) from the changes `take_changes` hands it.

use crate::codec::{Reader, Writer};
use crate::pack::{BLOCK_ALIGN, BLOCK_HEADER_LEN, BLOCK_MAGIC};
use crate::ptr::{BlockKind, BlockPtr};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

/// The codec byte of a zstd-compressed block.
pub const CODEC_ZSTD: u8 = 1;
/// Encoded size of a relocation value: frame address u64, offset in the frame u32, stored
/// length u32, codec u8.
pub const RELOCATION_LEN: usize = 17;
/// Compressed forms are packed back to back into frames of at most this many bytes (one
/// larger than this gets a frame of its own), so a directory's one-page tree leaf that
/// compresses to 600 bytes takes 616, not a page.
pub const FRAME_MAX: usize = 256 << 10;

/// Where a relocated block's compressed form lies: the frame (as `BlockPtr::addr`: pack and
/// page-aligned offset), the form's byte offset in it, and its compressed length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    pub addr: u64,
    pub at: u32,
    pub stored: u32,
}

impl Relocation {
    pub fn pack(&self) -> u32 {
        (self.addr >> BlockPtr::OFFSET_BITS) as u32
    }
    /// Offset in its pack of the frame holding the compressed form.
    pub fn frame_offset(&self) -> u64 {
        (self.addr & ((1u64 << BlockPtr::OFFSET_BITS) - 1)) * BLOCK_ALIGN
    }
    /// Offset in its pack of the compressed form (its header).
    pub fn offset(&self) -> u64 {
        self.frame_offset() + self.at as u64
    }
    /// Bytes the compressed form occupies in its frame: header and compressed bytes.
    pub fn footprint(&self) -> u64 {
        (BLOCK_HEADER_LEN + self.stored as usize) as u64
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(RELOCATION_LEN);
        w.u64(self.addr).u32(self.at).u32(self.stored).u8(CODEC_ZSTD);
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Relocation> {
        let mut r = Reader::new(bytes, "relocation");
        let addr = r.u64()?;
        let at = r.u32()?;
        let stored = r.u32()?;
        let codec = r.u8()?;
        r.expect_end()?;
        let bad = |what: String| Error::corrupt("relocation", format!("addr {addr:#x}"), what);
        if codec != CODEC_ZSTD {
            return Err(bad(format!("unknown codec {codec}")));
        }
        if stored as usize > crate::MAX_BLOCK_LEN || at as usize > FRAME_MAX {
            return Err(bad(format!("offset {at} or length {stored} too large")));
        }
        Ok(Relocation { addr, at, stored })
    }
}

/// The key of a relocation in the persisted tree: the original address, big-endian, so the
/// tree is in address order.
pub fn relocation_key(addr: u64) -> [u8; 8] {
    addr.to_be_bytes()
}

/// A frame's live members and where its last one ends: it is punched whole when the last
/// member goes.
#[derive(Default, Clone, Copy)]
struct Frame {
    members: u32,
    end: u64,
}

#[derive(Default)]
struct Map {
    moved: HashMap<u64, Relocation>,
    frames: HashMap<u64, Frame>,
}

impl Map {
    fn insert(&mut self, orig: u64, r: Relocation) {
        let old = self.moved.insert(orig, r);
        assert!(old.is_none(), "block {orig:#x} relocated twice");
        let f = self.frames.entry(r.addr).or_default();
        f.members += 1;
        f.end = f.end.max(r.at as u64 + r.footprint());
    }
}

/// The relocation map in memory, and its changes since the layer above last took them.
#[derive(Default)]
pub(crate) struct Relocations {
    map: RwLock<Map>,
    /// In the order made: `Some` added, `None` removed (its block was punched).
    changes: Mutex<Vec<(u64, Option<Relocation>)>>,
}

impl Relocations {
    pub(crate) fn get(&self, addr: u64) -> Option<Relocation> {
        // Most stores have none: no hashing on every read then.
        let map = self.map.read().unwrap();
        if map.moved.is_empty() {
            return None;
        }
        map.moved.get(&addr).copied()
    }

    /// Whether any of `ptrs` is relocated: one look at the map for a whole run of blocks.
    pub(crate) fn any(&self, ptrs: &[BlockPtr]) -> bool {
        let map = self.map.read().unwrap();
        !map.moved.is_empty() && ptrs.iter().any(|p| map.moved.contains_key(&p.addr))
    }

    pub(crate) fn load(&self, entries: Vec<(u64, Relocation)>) {
        let mut map = self.map.write().unwrap();
        *map = Map::default();
        for (orig, r) in entries {
            map.insert(orig, r);
        }
    }

    pub(crate) fn install(&self, orig: u64, r: Relocation) {
        self.map.write().unwrap().insert(orig, r);
        self.changes.lock().unwrap().push((orig, Some(r)));
    }

    /// Forgets `orig` (its block was freed); the span of its frame `(pack, offset, bytes)`
    /// when it was the frame's last member, to be punched.
    pub(crate) fn remove(&self, orig: u64) -> Option<(u32, u64, u64)> {
        // Most punches are of blocks never relocated: no write lock for them.
        if !self.map.read().unwrap().moved.contains_key(&orig) {
            return None;
        }
        let mut map = self.map.write().unwrap();
        let r = map.moved.remove(&orig)?;
        self.changes.lock().unwrap().push((orig, None));
        let f = map.frames.get_mut(&r.addr).expect("a relocation's frame is known");
        f.members -= 1;
        if f.members > 0 {
            return None;
        }
        let end = f.end;
        map.frames.remove(&r.addr);
        Some((r.pack(), r.frame_offset(), end.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN))
    }

    /// The span `(pack, start, end)` of the frame holding `addr`'s compressed form: kept
    /// whole while any of its members lives.
    pub(crate) fn frame_span(&self, addr: u64) -> Option<(u32, u64, u64)> {
        let map = self.map.read().unwrap();
        let r = map.moved.get(&addr)?;
        let f = map.frames.get(&r.addr)?;
        Some((r.pack(), r.frame_offset(), r.frame_offset() + f.end.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN))
    }

    pub(crate) fn has_changes(&self) -> bool {
        !self.changes.lock().unwrap().is_empty()
    }

    pub(crate) fn take_changes(&self) -> Vec<(u64, Option<Relocation>)> {
        std::mem::take(&mut *self.changes.lock().unwrap())
    }

    /// Relocated blocks, and the bytes their frames occupy.
    pub(crate) fn stats(&self) -> (u64, u64) {
        let map = self.map.read().unwrap();
        let frames = map.frames.values().map(|f| f.end.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN).sum();
        (map.moved.len() as u64, frames)
    }
}

/// The compressed form of block `ptr`'s payload at zstd `level`, if it is worth keeping: it
/// is shorter than the payload, and what it occupies in its frame (header included) is at
/// least an eighth less than what the block occupies in its pack (padding to a page
/// included).
pub fn compress(ptr: &BlockPtr, payload: &[u8], level: i32) -> Option<Vec<u8>> {
    if !relocatable(ptr.kind) {
        return None;
    }
    let c = zstd::bulk::compress(payload, level).ok()?;
    let after = (BLOCK_HEADER_LEN + c.len()) as u64;
    (c.len() < payload.len() && after * 8 <= ptr.footprint() * 7).then_some(c)
}

/// Whether blocks of this kind may be relocated: data and tree nodes, not checkpoint metadata.
pub fn relocatable(kind: BlockKind) -> bool {
    kind != BlockKind::Meta
}

/// Frames of compressed forms, each at most `FRAME_MAX` bytes unless one form alone is
/// larger: per frame its bytes (padded to a page) and each form's offset in it, in order.
pub(crate) fn frames(forms: &[(BlockKind, &[u8])]) -> Vec<(Vec<u8>, Vec<u32>)> {
    let mut out: Vec<(Vec<u8>, Vec<u32>)> = Vec::new();
    for (kind, c) in forms {
        let need = BLOCK_HEADER_LEN + c.len();
        match out.last_mut() {
            Some((buf, _)) if buf.len() + need <= FRAME_MAX => {}
            _ => out.push((Vec::new(), Vec::new())),
        }
        let (buf, at) = out.last_mut().unwrap();
        at.push(buf.len() as u32);
        let start = buf.len();
        buf.extend_from_slice(BLOCK_MAGIC);
        buf.push(*kind as u8);
        buf.push(CODEC_ZSTD);
        buf.extend_from_slice(&[0, 0]);
        buf.extend_from_slice(&(c.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[start..start + 12]), c);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf.extend_from_slice(c);
    }
    for (buf, _) in &mut out {
        buf.resize((buf.len() as u64).div_ceil(BLOCK_ALIGN) as usize * BLOCK_ALIGN as usize, 0);
    }
    out
}

/// Checks a compressed block read from `r`'s place (`raw`: header and compressed bytes)
/// and returns the logical bytes, which must hash to `ptr`'s hash.
pub(crate) fn open(ptr: &BlockPtr, r: &Relocation, raw: &[u8]) -> Result<Vec<u8>> {
    let bad = |what: String| Error::corrupt("compressed block", ptr, what);
    let h = &raw[..BLOCK_HEADER_LEN];
    if &h[..4] != BLOCK_MAGIC || h[4] != ptr.kind as u8 || h[5] != CODEC_ZSTD {
        return Err(bad(format!("bad header at pack {} offset {}", r.pack(), r.offset())));
    }
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap());
    if len != r.stored {
        return Err(bad(format!("header length {len}, relocation says {}", r.stored)));
    }
    let body = &raw[BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + len as usize];
    let crc = u32::from_le_bytes(h[12..16].try_into().unwrap());
    if crc != crc32c::crc32c_append(crc32c::crc32c(&h[..12]), body) {
        return Err(bad("checksum mismatch".into()));
    }
    let data = zstd::bulk::decompress(body, ptr.len as usize).map_err(|e| bad(format!("does not decompress: {e}")))?;
    if data.len() != ptr.len as usize || blake3::hash(&data).as_bytes() != &ptr.hash {
        return Err(bad("content hash differs from pointer after decompression".into()));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_pack_into_frames_and_a_frame_goes_with_its_last_member() {
        let (a, b, big, c) = (vec![1u8; 100], vec![2u8; 200], vec![3u8; FRAME_MAX + 10], vec![4u8; 50]);
        let forms = [
            (BlockKind::Node, a.as_slice()),
            (BlockKind::Data, b.as_slice()),
            (BlockKind::Data, big.as_slice()),
            (BlockKind::Node, c.as_slice()),
        ];
        let fr = frames(&forms);
        assert_eq!(fr.len(), 3, "two small forms share a frame; the large one is alone");
        assert_eq!(fr[0].1, vec![0, 116]);
        assert_eq!((fr[1].1.clone(), fr[2].1.clone()), (vec![0], vec![0]));
        assert!(fr.iter().all(|(buf, _)| buf.len() as u64 % BLOCK_ALIGN == 0));
        assert_eq!(&fr[0].0[116..120], BLOCK_MAGIC);
        assert_eq!(fr[0].0[116 + 4], BlockKind::Data as u8);

        let m = Relocations::default();
        let frame = BlockPtr::make_addr(3, 8192);
        m.install(10, Relocation { addr: frame, at: 0, stored: 100 });
        m.install(11, Relocation { addr: frame, at: 116, stored: 200 });
        m.install(12, Relocation { addr: BlockPtr::make_addr(3, 16384), at: 0, stored: 50 });
        assert_eq!(m.stats(), (3, 8192));
        assert_eq!(m.remove(10), None, "the frame still holds block 11");
        assert_eq!(m.remove(10), None, "not relocated any more");
        assert_eq!(m.remove(11), Some((3, 8192, 4096)));
        assert_eq!(m.remove(12), Some((3, 16384, 4096)));
        assert_eq!(m.stats(), (0, 0));
        let changes = m.take_changes();
        assert_eq!(changes.len(), 6);
        assert_eq!(changes[5], (12, None));
        let r = Relocation { addr: frame, at: 116, stored: 200 };
        assert_eq!(Relocation::decode(&r.encode()).unwrap(), r);
        assert!(Relocation::decode(&r.encode()[..16]).is_err());
    }
}
