//! The checkpoint record (block kind 3, `docs/format.md` "Checkpoint record"): what a
//! superblock names. The record block holds the generation, the namespace table's root, the
//! next namespace id, the relocation tree's root (version 2), the reference tree's root
//! (version 3) and the pointers of its pages; the pages hold the orphan references and the
//! freed list (before version 3, the whole reference table first).

use scion_store::codec::{Reader, Writer};
use scion_store::{BlockKind, BlockPtr, BlockStore, Error, Result};
use scion_tree::{Forest, RefTable};
use std::sync::Arc;

const RECORD_MAGIC: &[u8; 4] = b"SCCK";
/// Version 2 added the relocation tree's root (compressed blocks); version 1 is read as
/// having none. Version 3 keeps the reference counts in a tree of their own (`refs_root`),
/// rewritten where they changed, instead of a flat list in the pages rewritten whole at
/// every checkpoint.
const RECORD_VERSION: u32 = 3;
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
    /// The tree `refs` was read from (version 3); `None` with `flat` before it.
    pub refs_root: Option<BlockPtr>,
    /// `refs` came from a flat list (a record before version 3): the next checkpoint writes
    /// it whole as a tree.
    pub flat: bool,
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
pub fn read_record(store: &Arc<BlockStore>, ptr: &BlockPtr) -> Result<CheckpointRecord> {
    let bytes = store.read(ptr)?;
    let Head {
        version,
        generation,
        ns_root,
        next_ns,
        relocations,
        refs_root,
        pages,
    } = decode_head(&bytes, ptr)?;
    let mut body = Vec::new();
    for p in &pages {
        body.extend_from_slice(&store.read(p)?);
    }
    let flat = version < 3;
    let (refs, orphans, freed) = if flat {
        decode_lists(&body)?
    } else {
        let (orphans, freed) = decode_lists_v3(&body)?;
        (load_refs(store, refs_root.as_ref())?, orphans, freed)
    };
    let mut meta = vec![*ptr];
    meta.extend(pages);
    Ok(CheckpointRecord {
        generation,
        ns_root,
        next_ns,
        relocations,
        refs,
        refs_root,
        flat,
        orphans,
        freed,
        meta,
    })
}

/// The reference counts the tree at `root` holds (version 3).
pub fn load_refs(store: &Arc<BlockStore>, root: Option<&BlockPtr>) -> Result<RefTable> {
    let forest = Forest::new(store.clone(), RefTable::default());
    let mut entries = Vec::new();
    let mut bad = None;
    forest.scan(root, &[], &mut |k, v| {
        match RefTable::decode_entry(k, &v.bytes) {
            Ok(e) if v.ptrs.is_empty() => entries.push(e),
            Ok(_) => bad = Some(Error::corrupt("reference tree", "entry", "a count with pointers")),
            Err(e) => bad = Some(e),
        }
        bad.is_none()
    })?;
    match bad {
        Some(e) => Err(e),
        None => Ok(RefTable::from_entries(entries)),
    }
}

/// What the record block holds.
pub struct Head {
    pub version: u32,
    pub generation: u64,
    pub ns_root: Option<BlockPtr>,
    pub next_ns: u32,
    pub relocations: Option<BlockPtr>,
    pub refs_root: Option<BlockPtr>,
    pub pages: Vec<BlockPtr>,
}

/// The record block: generation, namespace table root, next namespace id, relocation tree
/// root (version 2), reference tree root (version 3), page pointers.
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
    let refs_root = if v >= 3 { get_opt_ptr(&mut r)? } else { None };
    let pages = get_ptrs(&mut r)?;
    r.expect_end()?;
    Ok(Head {
        version: v,
        generation,
        ns_root,
        next_ns,
        relocations,
        refs_root,
        pages,
    })
}

/// The lists the pages of a version 3 record hold: orphan references, freed blocks.
pub fn decode_lists_v3(body: &[u8]) -> Result<(Vec<BlockPtr>, Vec<BlockPtr>)> {
    let mut r = Reader::new(body, "checkpoint lists");
    let orphans = get_ptrs(&mut r)?;
    let freed = get_ptrs(&mut r)?;
    r.expect_end()?;
    Ok((orphans, freed))
}

/// The lists the pages of a record before version 3 hold: reference table, orphan
/// references, freed blocks.
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
    refs_root: Option<&BlockPtr>,
    orphans: &[BlockPtr],
    freed: &[BlockPtr],
) -> Result<(BlockPtr, Vec<BlockPtr>)> {
    let mut body = Writer::new();
    put_ptrs(&mut body, orphans);
    put_ptrs(&mut body, freed);
    let pages = write_pages(store, &body.finish())?;
    let mut w = Writer::new();
    w.raw(RECORD_MAGIC).u32(RECORD_VERSION).u64(generation);
    put_opt_ptr(&mut w, &ns_root.copied());
    w.u32(next_ns);
    put_opt_ptr(&mut w, &relocations.copied());
    put_opt_ptr(&mut w, &refs_root.copied());
    put_ptrs(&mut w, &pages);
    let record = store.write(BlockKind::Meta, &w.finish())?;
    Ok((record, pages))
}

/// The record's lists, cut into meta pages of at most `PAGE` bytes.
fn write_pages(store: &BlockStore, body: &[u8]) -> Result<Vec<BlockPtr>> {
    body.chunks(PAGE).map(|part| store.write(BlockKind::Meta, part)).collect()
}

/// Writes `rec` as a record of version 2, its reference table a flat list in its pages, as
/// a build before format 18 did: for tests that a store of such a build is read and
/// upgraded. Returns the record's pointer.
#[doc(hidden)]
pub fn write_version_2(store: &BlockStore, rec: &CheckpointRecord) -> Result<BlockPtr> {
    let mut body = Writer::new();
    rec.refs.encode(&mut body);
    put_ptrs(&mut body, &rec.orphans);
    put_ptrs(&mut body, &rec.freed);
    let pages = write_pages(store, &body.finish())?;
    let mut w = Writer::new();
    w.raw(RECORD_MAGIC).u32(2).u64(rec.generation);
    put_opt_ptr(&mut w, &rec.ns_root);
    w.u32(rec.next_ns);
    put_opt_ptr(&mut w, &rec.relocations);
    put_ptrs(&mut w, &pages);
    store.write(BlockKind::Meta, &w.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(n: u8) -> BlockPtr {
        BlockPtr {
            addr: BlockPtr::make_addr(2, 8192 * n as u64),
            len: 50,
            kind: BlockKind::Node,
            hash: [n; 32],
        }
    }

    /// A record block of `version`, with the relocation root field (`Some`) or not, and the
    /// reference root field (`Some`) or not.
    fn head(version: u32, relocations: Option<Option<BlockPtr>>, refs: Option<Option<BlockPtr>>) -> Vec<u8> {
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
        if let Some(r) = refs {
            put_opt_ptr(&mut w, &r);
        }
        put_ptrs(&mut w, &[ns]);
        w.finish()
    }

    #[test]
    fn each_version_has_its_fields() {
        let h = decode_head(&head(1, None, None), &"test").unwrap();
        assert_eq!((h.version, h.generation, h.next_ns, h.relocations, h.pages.len()), (1, 9, 12, None, 1));
        let h = decode_head(&head(2, Some(Some(tree(1))), None), &"test").unwrap();
        assert_eq!((h.relocations, h.refs_root), (Some(tree(1)), None));
        assert_eq!(decode_head(&head(2, Some(None), None), &"test").unwrap().relocations, None);
        let h = decode_head(&head(3, Some(None), Some(Some(tree(2)))), &"test").unwrap();
        assert_eq!((h.version, h.relocations, h.refs_root), (3, None, Some(tree(2))));
        // A record read as another version than its own does not decode.
        assert!(decode_head(&head(2, None, None), &"test").is_err());
        assert!(decode_head(&head(1, Some(Some(tree(1))), None), &"test").is_err());
        assert!(decode_head(&head(3, Some(Some(tree(1))), None), &"test").is_err());
        assert!(decode_head(&head(4, Some(None), Some(None)), &"test").is_err());
    }

    #[test]
    fn lists_before_and_from_version_3() {
        let (a, b) = (tree(3), tree(4));
        let mut w = Writer::new();
        put_ptrs(&mut w, &[a]);
        put_ptrs(&mut w, &[b]);
        let v3 = w.finish();
        assert_eq!(decode_lists_v3(&v3).unwrap(), (vec![a], vec![b]));
        let mut w = Writer::new();
        let mut refs = RefTable::default();
        refs.inc(&a);
        refs.encode(&mut w);
        put_ptrs(&mut w, &[a]);
        put_ptrs(&mut w, &[b]);
        let (r, o, f) = decode_lists(&w.finish()).unwrap();
        assert_eq!((r.get(a.addr), o, f), (2, vec![a], vec![b]));
        // A version 3 body read as an older one (or the reverse) does not decode.
        assert!(decode_lists(&v3).is_err());
    }
}
