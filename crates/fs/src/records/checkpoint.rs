//! The checkpoint record (block kind 3, `docs/format.md` "Checkpoint record"): what a
//! superblock names. The record block holds the generation, the namespace table's root, the
//! next namespace id, the relocation tree's root (version 2) and the pointers of its pages;
//! the pages hold the reference table, the orphan references and the freed list.

use scion_store::codec::{Reader, Writer};
use scion_store::{BlockKind, BlockPtr, BlockStore, Error, Result};
use scion_tree::RefTable;

const RECORD_MAGIC: &[u8; 4] = b"SCCK";
/// Version 2 added the relocation tree's root (compressed blocks); version 1 is read as
/// having none.
const RECORD_VERSION: u32 = 2;
/// Bytes of the lists per meta page.
const PAGE: usize = 4 << 20;

/// What a checkpoint record holds.
pub struct CheckpointRecord {
    pub generation: u64,
    pub ns_root: Option<BlockPtr>,
    pub next_ns: u32,
    /// The relocation tree (`compress.rs`): where recompressed data blocks lie now.
    pub relocations: Option<BlockPtr>,
    pub refs: RefTable,
    /// Content references held by files that were unlinked while open.
    pub orphans: Vec<BlockPtr>,
    /// Blocks that died in this checkpoint: punched once it is durable (again at open).
    pub freed: Vec<BlockPtr>,
    /// The record block and its pages.
    pub meta: Vec<BlockPtr>,
}

fn put_opt_ptr(w: &mut Writer, p: &Option<BlockPtr>) {
    match p {
        Some(p) => {
            w.u8(1);
            p.encode(w);
        }
        None => {
            w.u8(0);
        }
    }
}

fn get_opt_ptr(r: &mut Reader<'_>) -> Result<Option<BlockPtr>> {
    Ok(match r.u8()? {
        0 => None,
        1 => Some(BlockPtr::decode(r)?),
        t => return Err(Error::corrupt("checkpoint record", "pointer", format!("tag {t}"))),
    })
}

fn put_ptrs(w: &mut Writer, v: &[BlockPtr]) {
    w.u32(v.len() as u32);
    for p in v {
        p.encode(w);
    }
}

fn get_ptrs(r: &mut Reader<'_>) -> Result<Vec<BlockPtr>> {
    let n = r.count(scion_store::PTR_LEN)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(BlockPtr::decode(r)?);
    }
    Ok(v)
}

/// Reads the checkpoint record a superblock names.
pub fn read_record(store: &BlockStore, ptr: &BlockPtr) -> Result<CheckpointRecord> {
    let bytes = store.read(ptr)?;
    let Head {
        generation,
        ns_root,
        next_ns,
        relocations,
        pages,
    } = decode_head(&bytes, ptr)?;
    let mut body = Vec::new();
    for p in &pages {
        body.extend_from_slice(&store.read(p)?);
    }
    let (refs, orphans, freed) = decode_lists(&body)?;
    let mut meta = vec![*ptr];
    meta.extend(pages);
    Ok(CheckpointRecord {
        generation,
        ns_root,
        next_ns,
        relocations,
        refs,
        orphans,
        freed,
        meta,
    })
}

/// What the record block holds.
pub struct Head {
    pub generation: u64,
    pub ns_root: Option<BlockPtr>,
    pub next_ns: u32,
    pub relocations: Option<BlockPtr>,
    pub pages: Vec<BlockPtr>,
}

/// The record block: generation, namespace table root, next namespace id, relocation tree
/// root (version 2), page pointers.
pub fn decode_head(bytes: &[u8], at: &dyn std::fmt::Display) -> Result<Head> {
    let mut r = Reader::new(bytes, "checkpoint record");
    if r.raw(4)? != RECORD_MAGIC {
        return Err(Error::corrupt("checkpoint record", at, "bad magic"));
    }
    let v = r.u32()?;
    if !(1..=RECORD_VERSION).contains(&v) {
        return Err(Error::Format(format!("checkpoint record version {v} is not supported")));
    }
    let generation = r.u64()?;
    let ns_root = get_opt_ptr(&mut r)?;
    let next_ns = r.u32()?;
    let relocations = if v >= 2 { get_opt_ptr(&mut r)? } else { None };
    let pages = get_ptrs(&mut r)?;
    r.expect_end()?;
    Ok(Head {
        generation,
        ns_root,
        next_ns,
        relocations,
        pages,
    })
}

/// The lists the pages hold: reference table, orphan references, freed blocks.
pub fn decode_lists(body: &[u8]) -> Result<(RefTable, Vec<BlockPtr>, Vec<BlockPtr>)> {
    let mut r = Reader::new(body, "checkpoint lists");
    let refs = RefTable::decode(&mut r)?;
    let orphans = get_ptrs(&mut r)?;
    let freed = get_ptrs(&mut r)?;
    r.expect_end()?;
    Ok((refs, orphans, freed))
}

/// Writes a checkpoint's meta blocks (pages, then the record): the record's pointer and the
/// pages'. Nothing is durable until the store is synced and a superblock names the record.
#[allow(clippy::too_many_arguments)]
pub fn write(
    store: &BlockStore,
    generation: u64,
    ns_root: Option<&BlockPtr>,
    next_ns: u32,
    relocations: Option<&BlockPtr>,
    refs: &RefTable,
    orphans: &[BlockPtr],
    freed: &[BlockPtr],
) -> Result<(BlockPtr, Vec<BlockPtr>)> {
    let mut body = Writer::new();
    refs.encode(&mut body);
    put_ptrs(&mut body, orphans);
    put_ptrs(&mut body, freed);
    let body = body.finish();
    let mut pages = Vec::new();
    for part in body.chunks(PAGE) {
        pages.push(store.write(BlockKind::Meta, part)?);
    }
    let mut w = Writer::new();
    w.raw(RECORD_MAGIC).u32(RECORD_VERSION).u64(generation);
    put_opt_ptr(&mut w, &ns_root.copied());
    w.u32(next_ns);
    put_opt_ptr(&mut w, &relocations.copied());
    put_ptrs(&mut w, &pages);
    let record = store.write(BlockKind::Meta, &w.finish())?;
    Ok((record, pages))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(version: u32, relocations: Option<Option<BlockPtr>>) -> Vec<u8> {
        let ns = BlockPtr {
            addr: BlockPtr::make_addr(1, 4096),
            len: 100,
            kind: BlockKind::Node,
            hash: [7; 32],
        };
        let mut w = Writer::new();
        w.raw(RECORD_MAGIC).u32(version).u64(9);
        put_opt_ptr(&mut w, &Some(ns));
        w.u32(12);
        if let Some(r) = relocations {
            put_opt_ptr(&mut w, &r);
        }
        put_ptrs(&mut w, &[ns]);
        w.finish()
    }

    #[test]
    fn version_1_records_have_no_relocation_tree_and_version_2_names_one() {
        let h = decode_head(&head(1, None), &"test").unwrap();
        assert_eq!((h.generation, h.next_ns, h.relocations, h.pages.len()), (9, 12, None, 1));
        let tree = BlockPtr {
            addr: BlockPtr::make_addr(2, 8192),
            len: 50,
            kind: BlockKind::Node,
            hash: [1; 32],
        };
        let h = decode_head(&head(2, Some(Some(tree))), &"test").unwrap();
        assert_eq!(h.relocations, Some(tree));
        assert_eq!(decode_head(&head(2, Some(None)), &"test").unwrap().relocations, None);
        // A version 1 record read as version 2 (or the reverse) does not decode.
        assert!(decode_head(&head(2, None), &"test").is_err());
        assert!(decode_head(&head(1, Some(Some(tree))), &"test").is_err());
        assert!(decode_head(&head(3, Some(None)), &"test").is_err());
    }
}
