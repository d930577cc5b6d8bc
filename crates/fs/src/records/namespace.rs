//! The namespace record: a value of the namespace table (`docs/format.md` "Namespace
//! table"), and the key it is stored under.

use crate::fs::NsInfo;
use crate::inode::Inode;
use scion_store::codec::{Reader, Writer};
use scion_store::{BlockPtr, Error, Result};
use scion_tree::Value;
use std::collections::BTreeMap;

const NS_RECORD_VERSION: u8 = 2;

/// A namespace as the namespace table stores it: what it is (the main tree, a clone, a
/// snapshot) and where it hangs, its next object id and inode count, its mount table (mount
/// entry oid -> clone namespace), its root directory's record and its link table root.
/// Value pointers: the root record's (content?, summary?), then the link table root if any.
pub fn ns_to_value(ns: &NsRecord) -> Value {
    let mut w = Writer::new();
    w.u8(NS_RECORD_VERSION).u64(ns.next_oid).u64(ns.inodes);
    w.u8(ns.link_root.is_some() as u8);
    ns.info.encode(&mut w);
    w.u32(ns.mounts.len() as u32);
    for (oid, id) in &ns.mounts {
        w.u64(*oid).u32(*id);
    }
    ns.root.encode_record(&mut w);
    Value::new(w.finish(), ns.root.ptrs().into_iter().chain(ns.link_root).collect())
}

pub struct NsRecord {
    pub root: Inode,
    pub link_root: Option<BlockPtr>,
    pub next_oid: u64,
    pub inodes: u64,
    pub info: NsInfo,
    pub mounts: BTreeMap<u64, u32>,
}

pub fn ns_from_value(v: &Value) -> Result<NsRecord> {
    let mut r = Reader::new(&v.bytes, "namespace record");
    let ver = r.u8()?;
    if ver != NS_RECORD_VERSION {
        return Err(Error::corrupt("namespace record", "header", format!("version {ver}")));
    }
    let next_oid = r.u64()?;
    let inodes = r.u64()?;
    let has_link = r.u8()?;
    if has_link > 1 || v.ptrs.len() < has_link as usize {
        return Err(Error::corrupt(
            "namespace record",
            "pointers",
            "link table flag disagrees with pointers",
        ));
    }
    let info = NsInfo::decode(&mut r)?;
    let n = r.count(12)?;
    let mut mounts = BTreeMap::new();
    for _ in 0..n {
        let oid = r.u64()?;
        mounts.insert(oid, r.u32()?);
    }
    let split = v.ptrs.len() - has_link as usize;
    let root = Inode::decode_record(&mut r, &v.ptrs[..split])?;
    let link_root = v.ptrs.get(split).copied();
    r.expect_end()?;
    Ok(NsRecord {
        root,
        link_root,
        next_oid,
        inodes,
        info,
        mounts,
    })
}

pub fn ns_key(ns: u32) -> Vec<u8> {
    ns.to_be_bytes().to_vec()
}
