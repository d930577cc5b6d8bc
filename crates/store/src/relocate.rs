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
//! The compressed form is a block with the usual 16-byte header (the block's kind, codec 1 = zstd,
//! the compressed length, crc32c over header and compressed bytes); a read checks it,
//! decompresses to exactly the pointer's length and checks the pointer's hash, so a flipped
//! bit gives an error, never wrong bytes. The map is persisted by the layer above (a tree
//! named by the checkpoint record) from the changes `take_changes` hands it.

use crate::codec::{Reader, Writer};
use crate::pack::{BLOCK_ALIGN, BLOCK_HEADER_LEN, BLOCK_MAGIC};
use crate::ptr::{BlockKind, BlockPtr};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

/// The codec byte of a zstd-compressed data block.
pub const CODEC_ZSTD: u8 = 1;
/// Encoded size of a relocation value: new address u64, stored length u32, codec u8.
pub const RELOCATION_LEN: usize = 13;

/// Where a relocated block's compressed form lies: its address (as `BlockPtr::addr`) and
/// its compressed length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relocation {
    pub addr: u64,
    pub stored: u32,
}

impl Relocation {
    pub fn pack(&self) -> u32 {
        (self.addr >> BlockPtr::OFFSET_BITS) as u32
    }
    pub fn offset(&self) -> u64 {
        (self.addr & ((1u64 << BlockPtr::OFFSET_BITS) - 1)) * BLOCK_ALIGN
    }
    /// Bytes the compressed form occupies in its pack, header and padding included.
    pub fn footprint(&self) -> u64 {
        ((BLOCK_HEADER_LEN + self.stored as usize) as u64).div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(RELOCATION_LEN);
        w.u64(self.addr).u32(self.stored).u8(CODEC_ZSTD);
        w.finish()
    }
    pub fn decode(bytes: &[u8]) -> Result<Relocation> {
        let mut r = Reader::new(bytes, "relocation");
        let addr = r.u64()?;
        let stored = r.u32()?;
        let codec = r.u8()?;
        r.expect_end()?;
        if codec != CODEC_ZSTD {
            return Err(Error::corrupt("relocation", format!("addr {addr:#x}"), format!("unknown codec {codec}")));
        }
        if stored as usize > crate::MAX_BLOCK_LEN {
            return Err(Error::corrupt("relocation", format!("addr {addr:#x}"), format!("length {stored} too large")));
        }
        Ok(Relocation { addr, stored })
    }
}

/// The key of a relocation in the persisted tree: the original address, big-endian, so the
/// tree is in address order.
pub fn relocation_key(addr: u64) -> [u8; 8] {
    addr.to_be_bytes()
}

/// The relocation map in memory, and its changes since the layer above last took them.
#[derive(Default)]
pub(crate) struct Relocations {
    map: RwLock<HashMap<u64, Relocation>>,
    /// In the order made: `Some` added, `None` removed (its block was punched).
    changes: Mutex<Vec<(u64, Option<Relocation>)>>,
}

impl Relocations {
    pub(crate) fn get(&self, addr: u64) -> Option<Relocation> {
        // Most stores have none: no hashing on every read then.
        let map = self.map.read().unwrap();
        if map.is_empty() {
            return None;
        }
        map.get(&addr).copied()
    }

    pub(crate) fn load(&self, entries: Vec<(u64, Relocation)>) {
        let mut map = self.map.write().unwrap();
        map.clear();
        map.extend(entries);
    }

    pub(crate) fn install(&self, orig: u64, r: Relocation) {
        let old = self.map.write().unwrap().insert(orig, r);
        assert!(old.is_none(), "block {orig:#x} relocated twice");
        self.changes.lock().unwrap().push((orig, Some(r)));
    }

    /// Forgets `orig` (its block was freed and punched); its compressed form, if any.
    pub(crate) fn remove(&self, orig: u64) -> Option<Relocation> {
        let r = self.map.write().unwrap().remove(&orig)?;
        self.changes.lock().unwrap().push((orig, None));
        Some(r)
    }

    pub(crate) fn take_changes(&self) -> Vec<(u64, Option<Relocation>)> {
        std::mem::take(&mut *self.changes.lock().unwrap())
    }

    pub(crate) fn stats(&self) -> (u64, u64) {
        let map = self.map.read().unwrap();
        (map.len() as u64, map.values().map(|r| r.footprint()).sum())
    }
}

/// The compressed form of block `ptr`'s payload at zstd `level`, if it is worth keeping: at
/// least an eighth smaller, and at least one 4 KiB page less in its pack.
pub fn compress(ptr: &BlockPtr, payload: &[u8], level: i32) -> Option<Vec<u8>> {
    if !relocatable(ptr.kind) {
        return None;
    }
    let c = zstd::bulk::compress(payload, level).ok()?;
    let before = ptr.footprint();
    let after = ((BLOCK_HEADER_LEN + c.len()) as u64).div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN;
    (c.len() * 8 <= payload.len() * 7 && after < before).then_some(c)
}

/// Whether blocks of this kind may be relocated: data and tree nodes, not checkpoint metadata.
pub fn relocatable(kind: BlockKind) -> bool {
    kind != BlockKind::Meta
}

/// The framed compressed form of a block of `kind` (header, compressed bytes, zero padding to
/// a page).
pub(crate) fn frame(kind: BlockKind, compressed: &[u8]) -> Vec<u8> {
    let fp = ((BLOCK_HEADER_LEN + compressed.len()) as u64).div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN;
    let mut buf = Vec::with_capacity(fp as usize);
    buf.extend_from_slice(BLOCK_MAGIC);
    buf.push(kind as u8);
    buf.push(CODEC_ZSTD);
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[..12]), compressed);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(compressed);
    buf.resize(fp as usize, 0);
    buf
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
