//! The namespace record: a value of the namespace table (`docs/format.md` "Namespace
//! table"), and the key it is stored under.

use crate::fs::NsInfo;
use crate::inode::Inode;
use scion_store::codec::{Reader, Writer};
use scion_store::{BlockPtr, Error, Result};
use scion_tree::Value;
use std::collections::BTreeMap;

/// Version 3 (format 6) added the flags byte after the link table flag; version 2 records
/// are read as having no flags set. Version 4 (format 7) added `FLAG_MASKED` and the uid
/// that follows the flags when it is set. Version 5 (format 8) added `FLAG_INHERITED`.
const NS_RECORD_VERSION: u8 = 5;
/// Flags: the snapshot was taken by its directory's schedule.
const FLAG_SCHEDULED: u8 = 1;
/// Flags: made for an ordinary user, whose uid follows (`NsInfo::masked_for`).
const FLAG_MASKED: u8 = 2;
/// Flags: the mask was inherited from the source; made with full rights (`NsInfo::made_by`
/// is None). Without it, a masked namespace was made by the user it is masked for.
const FLAG_INHERITED: u8 = 4;

/// A namespace as the namespace table stores it: what it is (the main tree, a clone, a
/// snapshot) and where it hangs, its next object id and inode count, its mount table (mount
/// entry oid -> clone namespace), its root directory's record and its link table root.
/// Value pointers: the root record's (content?, summary?), then the link table root if any.
pub fn ns_to_value(ns: &NsRecord) -> Value {
    let mut w = Writer::new();
    w.u8(NS_RECORD_VERSION).u64(ns.next_oid).u64(ns.inodes);
    w.u8(ns.link_root.is_some() as u8);
    let mut flags = 0;
    if ns.info.scheduled {
        flags |= FLAG_SCHEDULED;
    }
    if ns.info.masked_for.is_some() {
        flags |= FLAG_MASKED;
    }
    assert!(
        ns.info.made_by.is_none() || ns.info.made_by == ns.info.masked_for,
        "made by a user ({:?}) other than it is masked for ({:?})",
        ns.info.made_by,
        ns.info.masked_for
    );
    if ns.info.masked_for.is_some() && ns.info.made_by.is_none() {
        flags |= FLAG_INHERITED;
    }
    w.u8(flags);
    if let Some(uid) = ns.info.masked_for {
        w.u32(uid);
    }
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
    if !(2..=NS_RECORD_VERSION).contains(&ver) {
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
    let flags = if ver >= 3 { r.u8()? } else { 0 };
    let known = match ver {
        5.. => FLAG_SCHEDULED | FLAG_MASKED | FLAG_INHERITED,
        4 => FLAG_SCHEDULED | FLAG_MASKED,
        _ => FLAG_SCHEDULED,
    };
    if flags & !known != 0 {
        return Err(Error::corrupt(
            "namespace record",
            "flags",
            format!("unknown flags {flags:#x}"),
        ));
    }
    let masked_for = if flags & FLAG_MASKED != 0 { Some(r.u32()?) } else { None };
    let mut info = NsInfo::decode(&mut r)?;
    info.scheduled = flags & FLAG_SCHEDULED != 0;
    info.masked_for = masked_for;
    if flags & FLAG_INHERITED != 0 && masked_for.is_none() {
        return Err(Error::corrupt("namespace record", "flags", "an inherited mask without a user"));
    }
    info.made_by = if flags & FLAG_INHERITED != 0 { None } else { masked_for };
    if masked_for.is_some() && info.kind == crate::NsKind::Main {
        return Err(Error::corrupt("namespace record", "flags", "the main tree marked as made for a user"));
    }
    if info.scheduled && info.kind != crate::NsKind::Snapshot {
        return Err(Error::corrupt(
            "namespace record",
            "flags",
            "a clone marked as scheduled",
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::NsKind;
    use crate::inode::{Kind, Ts};

    /// Changes a value's bytes in place (they are shared, `Value::bytes`).
    fn edit(v: &mut Value, f: impl FnOnce(&mut Vec<u8>)) {
        let mut b = v.bytes.to_vec();
        f(&mut b);
        v.bytes = b.into();
    }

    fn record(scheduled: bool) -> NsRecord {
        let t = Ts {
            sec: 1_790_000_000,
            nsec: 5,
        };
        NsRecord {
            root: Inode::new(7, Kind::Dir, 0o755, 0, 0, t),
            link_root: None,
            next_oid: 9,
            inodes: 3,
            info: NsInfo {
                kind: NsKind::Snapshot,
                parent: 1,
                anchor: 7,
                name: b"2026-11-24T201502Z".to_vec(),
                origin: b"/d".to_vec(),
                created: t,
                scheduled,
                masked_for: None,
                made_by: None,
            },
            mounts: BTreeMap::from([(4, 2)]),
        }
    }

    #[test]
    fn scheduled_flag_round_trips_and_version_2_reads_as_by_hand() {
        for scheduled in [false, true] {
            let v = ns_to_value(&record(scheduled));
            let back = ns_from_value(&v).unwrap();
            assert_eq!(back.info.scheduled, scheduled);
            assert_eq!(back.info.name, record(false).info.name);
            assert_eq!(back.mounts, record(false).mounts);
        }
        // A version 2 record (format 5): no flags byte.
        let mut v = ns_to_value(&record(true));
        edit(&mut v, |b| {
            b[0] = 2;
            b.remove(1 + 8 + 8 + 1);
        });
        let back = ns_from_value(&v).unwrap();
        assert!(!back.info.scheduled);
        assert_eq!(back.next_oid, 9);
        // Unknown flags, and a scheduled clone, are refused.
        let mut v = ns_to_value(&record(true));
        edit(&mut v, |b| b[1 + 8 + 8 + 1] = 0x80);
        assert!(ns_from_value(&v).is_err());
        let mut r = record(true);
        r.info.kind = NsKind::Clone;
        assert!(ns_from_value(&ns_to_value(&r)).is_err());
    }

    #[test]
    fn made_for_a_user_round_trips_from_version_4_only() {
        let mut r = record(true);
        r.info.masked_for = Some(1001);
        let v = ns_to_value(&r);
        let back = ns_from_value(&v).unwrap();
        assert_eq!((back.info.masked_for, back.info.scheduled), (Some(1001), true));
        // The same bytes called version 3: the flag is unknown there.
        let mut old = v.clone();
        edit(&mut old, |b| b[0] = 3);
        assert!(ns_from_value(&old).is_err());
        // A version 3 record (format 6) without it reads as made by no one in particular.
        let mut v3 = ns_to_value(&record(true));
        edit(&mut v3, |b| b[0] = 3);
        let back = ns_from_value(&v3).unwrap();
        assert_eq!((back.info.masked_for, back.info.scheduled), (None, true));
        // Cut before the uid: refused.
        let mut cut = v.clone();
        edit(&mut cut, |b| b.truncate(1 + 8 + 8 + 1 + 1 + 2));
        assert!(ns_from_value(&cut).is_err());
        // The main tree is never made for a user.
        r.info.kind = NsKind::Main;
        r.info.scheduled = false;
        assert!(ns_from_value(&ns_to_value(&r)).is_err());
    }

    #[test]
    fn who_made_it_round_trips_and_version_4_reads_as_made_by_the_masked_user() {
        let mut r = record(false);
        r.info.kind = NsKind::Clone;
        r.info.masked_for = Some(1001);
        for made_by in [Some(1001), None] {
            r.info.made_by = made_by;
            let back = ns_from_value(&ns_to_value(&r)).unwrap();
            assert_eq!((back.info.masked_for, back.info.made_by), (Some(1001), made_by));
        }
        // A version 4 record (format 7) has no inherited flag: made by the masked user.
        r.info.made_by = Some(1001);
        let mut v4 = ns_to_value(&r);
        edit(&mut v4, |b| b[0] = 4);
        assert_eq!(ns_from_value(&v4).unwrap().info.made_by, Some(1001));
        // The inherited flag in a version 4 record, or without a user: refused.
        r.info.made_by = None;
        let mut v = ns_to_value(&r);
        edit(&mut v, |b| b[0] = 4);
        assert!(ns_from_value(&v).is_err());
        let mut v = ns_to_value(&record(false));
        edit(&mut v, |b| b[1 + 8 + 8 + 1] = FLAG_INHERITED);
        assert!(ns_from_value(&v).is_err());
    }
}
