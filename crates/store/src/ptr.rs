use crate::codec::{Reader, Writer};
use crate::{Error, Result};
use std::fmt;

pub const HASH_LEN: usize = 32;
/// Encoded size of a block pointer: addr u64, len u32, kind u8, blake3 hash.
pub const PTR_LEN: usize = 8 + 4 + 1 + HASH_LEN;

/// What a block holds. The kind is part of every pointer, so that freeing a data block
/// never needs to read it, and a pointer to the wrong kind of block is caught on read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BlockKind {
    /// A node of a persistent tree (scion-tree).
    Node = 1,
    /// File content.
    Data = 2,
    /// Checkpoint metadata (checkpoint record, refcount and free lists).
    Meta = 3,
}

impl BlockKind {
    pub fn from_u8(v: u8) -> Option<BlockKind> {
        match v {
            1 => Some(BlockKind::Node),
            2 => Some(BlockKind::Data),
            3 => Some(BlockKind::Meta),
            _ => None,
        }
    }
}

/// A pointer to an immutable block: where it is, how long its payload is, what kind it is
/// and the blake3 hash of its payload. Trees of pointers are therefore Merkle trees: a
/// misdirected, stale or rotten block is detected when it is read.
///
/// `addr` packs the pack file number (high 24 bits) and the block's offset in that pack
/// in units of `BLOCK_ALIGN` (low 40 bits). Addresses are never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockPtr {
    pub addr: u64,
    pub len: u32,
    pub kind: BlockKind,
    pub hash: [u8; HASH_LEN],
}

impl BlockPtr {
    pub const OFFSET_BITS: u32 = 40;
    pub fn make_addr(pack: u32, offset: u64) -> u64 {
        debug_assert!(offset % crate::BLOCK_ALIGN == 0);
        ((pack as u64) << Self::OFFSET_BITS) | (offset / crate::BLOCK_ALIGN)
    }
    pub fn pack(&self) -> u32 {
        (self.addr >> Self::OFFSET_BITS) as u32
    }
    pub fn offset(&self) -> u64 {
        Self::offset_of(self.addr)
    }
    /// The pack offset of address `addr` (`make_addr`'s inverse, with `pack`).
    pub fn offset_of(addr: u64) -> u64 {
        (addr & ((1u64 << Self::OFFSET_BITS) - 1)) * crate::BLOCK_ALIGN
    }
    /// Whether the block lies in a pack of a remote object store (`remote.rs`).
    pub fn is_remote(&self) -> bool {
        crate::remote::is_remote_pack(self.pack())
    }
    /// Bytes the block occupies in its pack, header and padding included.
    pub fn footprint(&self) -> u64 {
        crate::pack::footprint(self.kind, self.len as usize)
    }
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.addr).u32(self.len).u8(self.kind as u8).raw(&self.hash);
    }
    pub fn decode(r: &mut Reader<'_>) -> Result<BlockPtr> {
        let addr = r.u64()?;
        let len = r.u32()?;
        let k = r.u8()?;
        let kind = BlockKind::from_u8(k).ok_or_else(|| {
            Error::corrupt(
                "block pointer",
                format!("addr {addr:#x}"),
                format!("unknown block kind {k}"),
            )
        })?;
        if len as usize > crate::MAX_BLOCK_LEN {
            return Err(Error::corrupt(
                "block pointer",
                format!("addr {addr:#x}"),
                format!("length {len} too large"),
            ));
        }
        let hash = r.array()?;
        Ok(BlockPtr { addr, len, kind, hash })
    }
}

impl fmt::Debug for BlockPtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl fmt::Display for BlockPtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} block pack {} offset {} len {} hash {:02x}{:02x}{:02x}{:02x}",
            self.kind,
            self.pack(),
            self.offset(),
            self.len,
            self.hash[0],
            self.hash[1],
            self.hash[2],
            self.hash[3]
        )
    }
}
