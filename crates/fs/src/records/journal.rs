//! Journal records: what one change of the filesystem looks like in the journal
//! (`docs/format.md` "Journal"). The journal file around them (header, frames, the MORE
//! flag, reuse by parity) is `crate::journal`.

use crate::inode::{Kind, Ts};
use scion_store::codec::{Reader, Writer};
use scion_store::{Error, Result};

/// How a journal record names the inode it changes: by path from its namespace root (a
/// directory entry), or by object id in the namespace's link table (a file with several
/// names). Inode numbers are not used because recovery starts from a checkpoint in which
/// nothing is loaded yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Path { ns: u32, names: Vec<Vec<u8>> },
    Linked { ns: u32, oid: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Mknod {
        parent: Target,
        name: Vec<u8>,
        kind: Kind,
        perm: u16,
        uid: u32,
        gid: u32,
        rdev: u32,
        target: Vec<u8>,
        /// Inherited ACLs.
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        oid: u64,
        time: Ts,
    },
    Link {
        ino: Target,
        parent: Target,
        name: Vec<u8>,
        time: Ts,
    },
    Remove {
        parent: Target,
        name: Vec<u8>,
        dir: bool,
        time: Ts,
    },
    Rename {
        parent: Target,
        name: Vec<u8>,
        newparent: Target,
        newname: Vec<u8>,
        flags: u32,
        time: Ts,
    },
    SetAttr {
        ino: Target,
        attr: crate::SetAttr,
        time: Ts,
    },
    Write {
        ino: Target,
        offset: u64,
        data: Vec<u8>,
        time: Ts,
    },
    /// Whole chunks written to packs ahead of the checkpoint (`None`: zeros).
    PutChunks {
        ino: Target,
        first: u64,
        chunks: Vec<Option<scion_store::BlockPtr>>,
        time: Ts,
        /// Written by a `writeback` volume (type 18), whose journal may reach the disk
        /// before the packs: a block that did not is not the end of replay, its chunk keeps
        /// its older content. Otherwise (type 10) the blocks were written first, and the
        /// first one missing ends replay there.
        unordered: bool,
        /// The last block is the file's tail (types 20 and 21, format 12): its chunk holds
        /// exactly the block's bytes, which may be fewer than a chunk's, and the file ends
        /// there unless it was longer. A small file's bytes so reach the disk once.
        tail: bool,
    },
    /// Runs of chunk `idx` of a file overwritten within its size, their bytes written ahead
    /// as one block (type 25, format 17): the chunk's next layer (`layer_ahead.rs`).
    PutLayer {
        ino: Target,
        idx: u64,
        layer: crate::delta::Layer,
        time: Ts,
    },
    /// Whole chunks made to share committed blocks of another file (copy_file_range): the
    /// blocks gain a reference (`None`: a hole).
    ShareChunks {
        ino: Target,
        first: u64,
        chunks: Vec<Option<scion_store::BlockPtr>>,
        time: Ts,
    },
    /// A block of a remote pack made chunk `idx` of a file (a pull, issue 41); `shared`: the
    /// block was installed before, and gains a reference.
    AttachChunk {
        ino: Target,
        idx: u64,
        ptr: scion_store::BlockPtr,
        shared: bool,
        time: Ts,
    },
    Fallocate {
        ino: Target,
        mode: i32,
        offset: u64,
        len: u64,
        time: Ts,
    },
    SetXattr {
        ino: Target,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: i32,
        time: Ts,
    },
    RemoveXattr {
        ino: Target,
        name: Vec<u8>,
        time: Ts,
    },
    /// A clone of directory `src` (whose whole subtree is committed when the record is
    /// written) made as entry `name` of `parent`: namespace `ns`, mount entry `oid` in the
    /// parent's namespace. Replay makes the same clone from the same committed trees.
    Clone {
        src: Target,
        parent: Target,
        name: Vec<u8>,
        excludes: Vec<Vec<Vec<u8>>>,
        origin: Vec<u8>,
        ns: u32,
        oid: u64,
        time: Ts,
        /// Made for this ordinary user, hiding others' privileges (tag 16; tag 13 without).
        masked_for: Option<u32>,
        /// With `masked_for`: the clone's top is theirs, with this group (tag 19: format 11).
        /// Tag 16 clones keep their source's top.
        top_gid: Option<u32>,
    },
    /// A snapshot `name` of directory `dir` (committed below it when the record is written):
    /// namespace `ns`; `scheduled` if its directory's schedule took it (tag 15; tag 14, which
    /// format 5 wrote, is a snapshot taken by hand).
    Snapshot {
        dir: Target,
        name: Vec<u8>,
        origin: Vec<u8>,
        ns: u32,
        time: Ts,
        scheduled: bool,
        /// Made for this ordinary user, hiding others' privileges (tag 17, with a flags byte
        /// for both; tags 14 and 15 without).
        masked_for: Option<u32>,
    },
    /// A file made without a name (O_TMPFILE) took object id `oid` of namespace `ns`
    /// (type 22, format 14). Replay takes the id, and makes nothing: the file dies with a
    /// crash unless an `Adopt` names it.
    Reserve { ns: u32, oid: u64 },
    /// A file made without a name given its first name (`linkat`), empty, with the id it
    /// reserved (type 23, format 14). The records that follow in the same operation give it
    /// its content, size and times (`crate::tmpfile`).
    Adopt {
        parent: Target,
        name: Vec<u8>,
        perm: u16,
        uid: u32,
        gid: u32,
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        oid: u64,
        time: Ts,
    },
    /// Written by a checkpoint at the head of the new journal: the file's small overwrites,
    /// carried forward instead of folded into its trees (copy-on-abundant-write). Replay lays
    /// each chunk's whole patch list over its committed block and sets the size and times
    /// that differ from the committed record (`None`: unchanged).
    Carry {
        ino: Target,
        size: Option<u64>,
        atime: Option<Ts>,
        mtime: Option<Ts>,
        ctime: Option<Ts>,
        chunks: Vec<(u64, crate::delta::Patches)>,
    },
}

fn put_target(w: &mut Writer, t: &Target) {
    match t {
        Target::Path { ns, names } => {
            w.u8(0).u32(*ns).u32(names.len() as u32);
            for n in names {
                w.bytes(n);
            }
        }
        Target::Linked { ns, oid } => {
            w.u8(1).u32(*ns).u64(*oid);
        }
    }
}

fn get_target(r: &mut Reader<'_>) -> Result<Target> {
    Ok(match r.u8()? {
        0 => {
            let ns = r.u32()?;
            let n = r.count(4)?;
            let mut names = Vec::with_capacity(n);
            for _ in 0..n {
                names.push(r.bytes()?.to_vec());
            }
            Target::Path { ns, names }
        }
        1 => Target::Linked {
            ns: r.u32()?,
            oid: r.u64()?,
        },
        t => return Err(Error::corrupt("journal record", "target", format!("tag {t}"))),
    })
}

fn put_xattrs(w: &mut Writer, xattrs: &[(Vec<u8>, Vec<u8>)]) {
    w.u32(xattrs.len() as u32);
    for (k, v) in xattrs {
        w.bytes(k).bytes(v);
    }
}
fn get_xattrs(r: &mut Reader<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let n = r.count(8)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push((r.bytes()?.to_vec(), r.bytes()?.to_vec()));
    }
    Ok(v)
}

fn put_ts(w: &mut Writer, t: Ts) {
    w.i64(t.sec).u32(t.nsec);
}
fn get_ts(r: &mut Reader<'_>) -> Result<Ts> {
    let sec = r.i64()?;
    let nsec = r.u32()?;
    if nsec >= 1_000_000_000 {
        return Err(Error::corrupt(
            "journal record",
            "timestamp",
            format!("nanoseconds {nsec}"),
        ));
    }
    Ok(Ts { sec, nsec })
}
fn put_opt_u64(w: &mut Writer, v: Option<u64>) {
    match v {
        Some(v) => w.u8(1).u64(v),
        None => w.u8(0),
    };
}
fn get_opt_u64(r: &mut Reader<'_>) -> Result<Option<u64>> {
    Ok(match r.u8()? {
        0 => None,
        1 => Some(r.u64()?),
        t => return Err(Error::corrupt("journal record", "option", format!("tag {t}"))),
    })
}
fn put_opt_ts(w: &mut Writer, v: Option<Ts>) {
    match v {
        Some(t) => {
            w.u8(1);
            put_ts(w, t)
        }
        None => {
            w.u8(0);
        }
    }
}
fn get_opt_ts(r: &mut Reader<'_>) -> Result<Option<Ts>> {
    Ok(match r.u8()? {
        0 => None,
        1 => Some(get_ts(r)?),
        t => return Err(Error::corrupt("journal record", "option", format!("tag {t}"))),
    })
}

impl Record {
    /// The blocks the record names: whole chunks written ahead, or shared, and layers
    /// written ahead.
    pub fn blocks(&self) -> Vec<scion_store::BlockPtr> {
        match self {
            Record::PutChunks { chunks, .. } | Record::ShareChunks { chunks, .. } => chunks.iter().flatten().copied().collect(),
            Record::PutLayer { layer, .. } => vec![layer.block],
            _ => Vec::new(),
        }
    }

    /// Whether the record names blocks in the packs, whose sync must then come before the
    /// journal's (`SyncTicket::run`). Every variant is listed, so that a new one decides.
    pub fn names_blocks(&self) -> bool {
        match self {
            Record::PutChunks { .. }
            | Record::PutLayer { .. }
            | Record::ShareChunks { .. }
            | Record::AttachChunk { .. }
            | Record::Carry { .. } => true,
            // Clone and Snapshot name committed trees, which their commit synced.
            Record::Mknod { .. }
            | Record::Link { .. }
            | Record::Remove { .. }
            | Record::Rename { .. }
            | Record::SetAttr { .. }
            | Record::Write { .. }
            | Record::Fallocate { .. }
            | Record::SetXattr { .. }
            | Record::RemoveXattr { .. }
            | Record::Clone { .. }
            | Record::Snapshot { .. }
            | Record::Reserve { .. }
            | Record::Adopt { .. } => false,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Record::Mknod {
                parent,
                name,
                kind,
                perm,
                uid,
                gid,
                rdev,
                target,
                xattrs,
                oid,
                time,
            } => {
                w.u8(1);
                put_target(&mut w, parent);
                w.bytes(name)
                    .u8(*kind as u8)
                    .u16(*perm)
                    .u32(*uid)
                    .u32(*gid)
                    .u32(*rdev)
                    .bytes(target);
                put_xattrs(&mut w, xattrs);
                w.u64(*oid);
                put_ts(&mut w, *time);
            }
            Record::Link {
                ino,
                parent,
                name,
                time,
            } => {
                w.u8(2);
                put_target(&mut w, ino);
                put_target(&mut w, parent);
                w.bytes(name);
                put_ts(&mut w, *time);
            }
            Record::Remove {
                parent,
                name,
                dir,
                time,
            } => {
                w.u8(3);
                put_target(&mut w, parent);
                w.bytes(name).u8(*dir as u8);
                put_ts(&mut w, *time);
            }
            Record::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
                time,
            } => {
                w.u8(4);
                put_target(&mut w, parent);
                w.bytes(name);
                put_target(&mut w, newparent);
                w.bytes(newname).u32(*flags);
                put_ts(&mut w, *time);
            }
            Record::SetAttr { ino, attr, time } => {
                w.u8(5);
                put_target(&mut w, ino);
                put_opt_u64(&mut w, attr.mode.map(u64::from));
                put_opt_u64(&mut w, attr.uid.map(u64::from));
                put_opt_u64(&mut w, attr.gid.map(u64::from));
                put_opt_u64(&mut w, attr.size);
                put_opt_ts(&mut w, attr.atime);
                put_opt_ts(&mut w, attr.mtime);
                put_opt_ts(&mut w, attr.ctime);
                put_ts(&mut w, *time);
            }
            Record::Write {
                ino,
                offset,
                data,
                time,
            } => {
                w.u8(6);
                put_target(&mut w, ino);
                w.u64(*offset).bytes(data);
                put_ts(&mut w, *time);
            }
            Record::Fallocate {
                ino,
                mode,
                offset,
                len,
                time,
            } => {
                w.u8(7);
                put_target(&mut w, ino);
                w.u32(*mode as u32).u64(*offset).u64(*len);
                put_ts(&mut w, *time);
            }
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                time,
            } => {
                w.u8(8);
                put_target(&mut w, ino);
                w.bytes(name).bytes(value).u32(*flags as u32);
                put_ts(&mut w, *time);
            }
            Record::PutChunks {
                ino,
                first,
                chunks,
                time,
                ..
            }
            | Record::ShareChunks {
                ino,
                first,
                chunks,
                time,
            } => {
                w.u8(match self {
                    Record::PutChunks { unordered: false, tail: false, .. } => 10,
                    Record::PutChunks { unordered: true, tail: false, .. } => 18,
                    Record::PutChunks { unordered: false, tail: true, .. } => 20,
                    Record::PutChunks { unordered: true, tail: true, .. } => 21,
                    _ => 11,
                });
                put_target(&mut w, ino);
                w.u64(*first).u32(chunks.len() as u32);
                for c in chunks {
                    match c {
                        Some(p) => {
                            w.u8(1);
                            p.encode(&mut w);
                        }
                        None => {
                            w.u8(0);
                        }
                    }
                }
                put_ts(&mut w, *time);
            }
            Record::Clone {
                src,
                parent,
                name,
                excludes,
                origin,
                ns,
                oid,
                time,
                masked_for,
                top_gid,
            } => {
                assert!(top_gid.is_none() || masked_for.is_some(), "a clone's top made a user's without the user");
                w.u8(match (masked_for, top_gid) {
                    (Some(_), Some(_)) => 19,
                    (Some(_), None) => 16,
                    (None, _) => 13,
                });
                put_target(&mut w, src);
                put_target(&mut w, parent);
                w.bytes(name).u32(excludes.len() as u32);
                for path in excludes {
                    w.u32(path.len() as u32);
                    for n in path {
                        w.bytes(n);
                    }
                }
                w.bytes(origin).u32(*ns).u64(*oid);
                put_ts(&mut w, *time);
                if let Some(uid) = masked_for {
                    w.u32(*uid);
                }
                if let Some(gid) = top_gid {
                    w.u32(*gid);
                }
            }
            Record::Snapshot {
                dir,
                name,
                origin,
                ns,
                time,
                scheduled,
                masked_for,
            } => {
                w.u8(match (masked_for, scheduled) {
                    (Some(_), _) => 17,
                    (None, true) => 15,
                    (None, false) => 14,
                });
                put_target(&mut w, dir);
                w.bytes(name).bytes(origin).u32(*ns);
                put_ts(&mut w, *time);
                if let Some(uid) = masked_for {
                    w.u8(*scheduled as u8).u32(*uid);
                }
            }
            Record::Reserve { ns, oid } => {
                w.u8(22).u32(*ns).u64(*oid);
            }
            Record::PutLayer { ino, idx, layer, time } => {
                w.u8(25);
                put_target(&mut w, ino);
                w.u64(*idx);
                layer.encode(&mut w);
                put_ts(&mut w, *time);
            }
            Record::AttachChunk { ino, idx, ptr, shared, time } => {
                w.u8(24);
                put_target(&mut w, ino);
                w.u64(*idx);
                ptr.encode(&mut w);
                w.u8(u8::from(*shared));
                put_ts(&mut w, *time);
            }
            Record::Adopt {
                parent,
                name,
                perm,
                uid,
                gid,
                xattrs,
                oid,
                time,
            } => {
                w.u8(23);
                put_target(&mut w, parent);
                w.bytes(name).u16(*perm).u32(*uid).u32(*gid);
                put_xattrs(&mut w, xattrs);
                w.u64(*oid);
                put_ts(&mut w, *time);
            }
            Record::RemoveXattr { ino, name, time } => {
                w.u8(9);
                put_target(&mut w, ino);
                w.bytes(name);
                put_ts(&mut w, *time);
            }
            Record::Carry {
                ino,
                size,
                atime,
                mtime,
                ctime,
                chunks,
            } => {
                // Flags: size, atime, mtime, ctime present; ctime equal to mtime (not repeated).
                let same_c = mtime.is_some() && ctime == mtime;
                let flags = size.is_some() as u8
                    | (atime.is_some() as u8) << 1
                    | (mtime.is_some() as u8) << 2
                    | ((ctime.is_some() && !same_c) as u8) << 3
                    | (same_c as u8) << 4;
                w.u8(12);
                put_target(&mut w, ino);
                w.u8(flags);
                if let Some(s) = size {
                    w.u64(*s);
                }
                for t in [atime, mtime].into_iter().flatten() {
                    put_ts(&mut w, *t);
                }
                if let (Some(t), false) = (ctime, same_c) {
                    put_ts(&mut w, *t);
                }
                w.u32(chunks.len() as u32);
                for (idx, p) in chunks {
                    w.u64(*idx).bytes(&p.encode());
                }
            }
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<Record> {
        let mut r = Reader::new(bytes, "journal record");
        let tag = r.u8()?;
        let rec = match tag {
            1 => {
                let parent = get_target(&mut r)?;
                let name = r.bytes()?.to_vec();
                let k = r.u8()?;
                let kind =
                    Kind::from_u8(k).ok_or_else(|| Error::corrupt("journal record", "mknod", format!("kind {k}")))?;
                Record::Mknod {
                    parent,
                    name,
                    kind,
                    perm: r.u16()?,
                    uid: r.u32()?,
                    gid: r.u32()?,
                    rdev: r.u32()?,
                    target: r.bytes()?.to_vec(),
                    xattrs: get_xattrs(&mut r)?,
                    oid: r.u64()?,
                    time: get_ts(&mut r)?,
                }
            }
            2 => Record::Link {
                ino: get_target(&mut r)?,
                parent: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                time: get_ts(&mut r)?,
            },
            3 => Record::Remove {
                parent: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                dir: r.u8()? != 0,
                time: get_ts(&mut r)?,
            },
            4 => Record::Rename {
                parent: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                newparent: get_target(&mut r)?,
                newname: r.bytes()?.to_vec(),
                flags: r.u32()?,
                time: get_ts(&mut r)?,
            },
            5 => {
                let ino = get_target(&mut r)?;
                let attr = crate::SetAttr {
                    mode: get_opt_u64(&mut r)?.map(|v| v as u32),
                    uid: get_opt_u64(&mut r)?.map(|v| v as u32),
                    gid: get_opt_u64(&mut r)?.map(|v| v as u32),
                    size: get_opt_u64(&mut r)?,
                    atime: get_opt_ts(&mut r)?,
                    mtime: get_opt_ts(&mut r)?,
                    ctime: get_opt_ts(&mut r)?,
                };
                Record::SetAttr {
                    ino,
                    attr,
                    time: get_ts(&mut r)?,
                }
            }
            6 => Record::Write {
                ino: get_target(&mut r)?,
                offset: r.u64()?,
                data: r.bytes()?.to_vec(),
                time: get_ts(&mut r)?,
            },
            7 => Record::Fallocate {
                ino: get_target(&mut r)?,
                mode: r.u32()? as i32,
                offset: r.u64()?,
                len: r.u64()?,
                time: get_ts(&mut r)?,
            },
            8 => Record::SetXattr {
                ino: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                value: r.bytes()?.to_vec(),
                flags: r.u32()? as i32,
                time: get_ts(&mut r)?,
            },
            12 => {
                let ino = get_target(&mut r)?;
                let flags = r.u8()?;
                if flags & !0x1f != 0 || (flags & 0x10 != 0 && flags & 0x0c != 0x04) {
                    return Err(Error::corrupt("journal record", "carry", format!("flags {flags:#x}")));
                }
                let size = if flags & 1 != 0 { Some(r.u64()?) } else { None };
                let atime = if flags & 2 != 0 { Some(get_ts(&mut r)?) } else { None };
                let mtime = if flags & 4 != 0 { Some(get_ts(&mut r)?) } else { None };
                let ctime = if flags & 8 != 0 {
                    Some(get_ts(&mut r)?)
                } else if flags & 0x10 != 0 {
                    mtime
                } else {
                    None
                };
                let n = r.count(12)?;
                let mut chunks = Vec::with_capacity(n);
                for _ in 0..n {
                    let idx = r.u64()?;
                    let p = crate::delta::Patches::decode(r.bytes()?)?;
                    if p.is_empty() {
                        return Err(Error::corrupt("journal record", "carry", "a chunk without patches"));
                    }
                    chunks.push((idx, p));
                }
                Record::Carry {
                    ino,
                    size,
                    atime,
                    mtime,
                    ctime,
                    chunks,
                }
            }
            10 | 11 | 18 | 20 | 21 => {
                let ino = get_target(&mut r)?;
                let first = r.u64()?;
                let n = r.count(1)?;
                let mut chunks = Vec::with_capacity(n);
                for _ in 0..n {
                    chunks.push(match r.u8()? {
                        0 => None,
                        1 => Some(scion_store::BlockPtr::decode(&mut r)?),
                        t => return Err(Error::corrupt("journal record", "chunk", format!("tag {t}"))),
                    });
                }
                let time = get_ts(&mut r)?;
                let tail = tag >= 20;
                if tail && !matches!(chunks.last(), Some(Some(_))) {
                    return Err(Error::corrupt("journal record", "tail", "no tail block"));
                }
                if tag != 11 {
                    Record::PutChunks {
                        ino,
                        first,
                        chunks,
                        time,
                        unordered: tag == 18 || tag == 21,
                        tail,
                    }
                } else {
                    Record::ShareChunks {
                        ino,
                        first,
                        chunks,
                        time,
                    }
                }
            }
            t @ (13 | 16 | 19) => Record::Clone {
                src: get_target(&mut r)?,
                parent: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                excludes: {
                    let n = r.count(4)?;
                    let mut paths = Vec::with_capacity(n);
                    for _ in 0..n {
                        let m = r.count(4)?;
                        let mut path = Vec::with_capacity(m);
                        for _ in 0..m {
                            path.push(r.bytes()?.to_vec());
                        }
                        paths.push(path);
                    }
                    paths
                },
                origin: r.bytes()?.to_vec(),
                ns: r.u32()?,
                oid: r.u64()?,
                time: get_ts(&mut r)?,
                masked_for: if t != 13 { Some(r.u32()?) } else { None },
                top_gid: if t == 19 { Some(r.u32()?) } else { None },
            },
            t @ (14 | 15) => Record::Snapshot {
                dir: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                origin: r.bytes()?.to_vec(),
                ns: r.u32()?,
                time: get_ts(&mut r)?,
                scheduled: t == 15,
                masked_for: None,
            },
            17 => {
                let (dir, name, origin, ns, time) = (
                    get_target(&mut r)?,
                    r.bytes()?.to_vec(),
                    r.bytes()?.to_vec(),
                    r.u32()?,
                    get_ts(&mut r)?,
                );
                let scheduled = match r.u8()? {
                    0 => false,
                    1 => true,
                    f => return Err(Error::corrupt("journal record", "snapshot", format!("flag {f}"))),
                };
                Record::Snapshot {
                    dir,
                    name,
                    origin,
                    ns,
                    time,
                    scheduled,
                    masked_for: Some(r.u32()?),
                }
            }
            9 => Record::RemoveXattr {
                ino: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                time: get_ts(&mut r)?,
            },
            22 => Record::Reserve {
                ns: r.u32()?,
                oid: r.u64()?,
            },
            25 => Record::PutLayer {
                ino: get_target(&mut r)?,
                idx: r.u64()?,
                layer: crate::delta::Layer::decode(&mut r)?,
                time: get_ts(&mut r)?,
            },
            24 => Record::AttachChunk {
                ino: get_target(&mut r)?,
                idx: r.u64()?,
                ptr: scion_store::BlockPtr::decode(&mut r)?,
                shared: match r.u8()? {
                    0 => false,
                    1 => true,
                    t => return Err(Error::corrupt("journal record", "attach", format!("shared flag {t}"))),
                },
                time: get_ts(&mut r)?,
            },
            23 => Record::Adopt {
                parent: get_target(&mut r)?,
                name: r.bytes()?.to_vec(),
                perm: r.u16()?,
                uid: r.u32()?,
                gid: r.u32()?,
                xattrs: get_xattrs(&mut r)?,
                oid: r.u64()?,
                time: get_ts(&mut r)?,
            },
            t => {
                return Err(Error::corrupt(
                    "journal record",
                    "header",
                    format!("unknown record type {t}"),
                ))
            }
        };
        r.expect_end()?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scion_store::{BlockKind, BlockPtr};

    /// Whole chunks of a `writeback` volume are type 18, of any other type 10, and 21 and 20
    /// when the last block is the file's tail: each decodes to what was encoded, and the type
    /// says whether replay may keep an older chunk and whether the last block may be short.
    #[test]
    fn put_chunks_round_trip_ordered_and_not() {
        for (unordered, tail) in [(false, false), (true, false), (false, true), (true, true)] {
            let rec = Record::PutChunks {
                ino: Target::Linked { ns: 1, oid: 7 },
                first: 3,
                chunks: vec![
                    Some(BlockPtr { addr: BlockPtr::make_addr(2, 4096), len: 65536, kind: BlockKind::Data, hash: [9; 32] }),
                    None,
                    Some(BlockPtr { addr: BlockPtr::make_addr(2, 8192), len: 5000, kind: BlockKind::Data, hash: [8; 32] }),
                ],
                time: Ts { sec: 1_790_000_000, nsec: 1 },
                unordered,
                tail,
            };
            let bytes = rec.encode();
            assert_eq!(bytes[0], [[10, 20], [18, 21]][unordered as usize][tail as usize]);
            assert_eq!(Record::decode(&bytes).unwrap(), rec);
        }
    }

    /// A layer written ahead (type 25) decodes to what was encoded; a cut one, or one whose
    /// runs do not add up to its block, or overlap, is refused.
    #[test]
    fn put_layer_round_trip() {
        let block = BlockPtr { addr: BlockPtr::make_addr(3, 12288), len: 4100, kind: BlockKind::Data, hash: [5; 32] };
        let rec = Record::PutLayer {
            ino: Target::Linked { ns: 1, oid: 9 },
            idx: 17,
            layer: crate::delta::Layer { block, runs: vec![(0, 4), (8192, 4096)] },
            time: Ts { sec: 1_790_000_000, nsec: 2 },
        };
        let bytes = rec.encode();
        assert_eq!(bytes[0], 25);
        // The fuzz corpus's seed is this record.
        assert_eq!(bytes, include_bytes!("../../../../fuzz/corpus/journal_record/seed-put-layer"));
        assert_eq!(Record::decode(&bytes).unwrap(), rec);
        for cut in 0..bytes.len() {
            assert!(Record::decode(&bytes[..cut]).is_err());
        }
        for runs in [vec![(0, 4), (8192, 4095)], vec![(0, 4096), (4000, 4)], vec![(65534, 4100)]] {
            let bad = Record::PutLayer { ino: Target::Linked { ns: 1, oid: 9 }, idx: 17, layer: crate::delta::Layer { block, runs }, time: Ts::default() };
            assert!(Record::decode(&bad.encode()).is_err());
        }
    }

    /// A file made without a name: its reservation (type 22) and its naming (type 23) decode
    /// to what was encoded, and a truncated one is refused.
    #[test]
    fn tmpfile_records_round_trip() {
        let adopt = Record::Adopt {
            parent: Target::Path { ns: 1, names: vec![b"a".to_vec(), b"b".to_vec()] },
            name: b"named".to_vec(),
            perm: 0o640,
            uid: 1000,
            gid: 100,
            xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
            oid: 42,
            time: Ts { sec: 1_790_000_000, nsec: 5 },
        };
        // The fuzz corpus's seeds are these records (written by hand from docs/format.md).
        let seeds: [&[u8]; 2] = [
            include_bytes!("../../../../fuzz/corpus/journal_record/seed-reserve"),
            include_bytes!("../../../../fuzz/corpus/journal_record/seed-adopt"),
        ];
        for ((rec, tag), seed) in [(Record::Reserve { ns: 3, oid: 42 }, 22), (adopt, 23)].into_iter().zip(seeds) {
            let bytes = rec.encode();
            assert_eq!(bytes, seed);
            assert_eq!(bytes[0], tag);
            assert_eq!(Record::decode(&bytes).unwrap(), rec);
            assert!(Record::decode(&bytes[..bytes.len() - 1]).is_err());
        }
    }
}
