//! Inode records: what a directory entry (or the link table) stores for a file.

use crate::delta::{Patches, StoredChunk};
use scion_store::codec::{Reader, Writer};
use scion_store::{BlockKind, BlockPtr, Error, Result};
use scion_tree::Value;
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Bytes of file content per data block. Large enough that reads stay sequential, small
/// enough that a small overwrite copies little.
pub const CHUNK: u64 = 64 << 10;
pub const MAX_NAME: usize = 255;
pub const MAX_XATTR_NAME: usize = 255;
pub const MAX_XATTR_VALUE: usize = 64 << 10;
pub const MAX_XATTR_TOTAL: usize = 256 << 10;
pub const MAX_SYMLINK: usize = 4095;
/// A file whose only data is the first `INLINE_MAX` bytes keeps them in its inode record
/// (format version 5), in its directory's tree node, instead of in a data block and a
/// one-entry content tree: two 4 KiB pages for as little as one byte. btrfs inlines up to
/// the same size by default (`max_inline=2048`); larger, and directory nodes would carry
/// much more than names for `ls` and `find` to read.
pub const INLINE_MAX: usize = 2048;
/// Largest file size: the chunk index must fit the tree's 8-byte key, and offsets an i64.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    Socket = 5,
    CharDev = 6,
    BlockDev = 7,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDev,
            7 => Kind::BlockDev,
            _ => return None,
        })
    }
    /// From the S_IFMT bits of a mode.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            _ => return None,
        })
    }
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Ts {
    pub sec: i64,
    pub nsec: u32,
}

impl Ts {
    /// The kernel's clock for file times: `CLOCK_REALTIME_COARSE`, the clock `current_time()`
    /// reads. Under the writeback cache the kernel stamps writes itself; times from a finer
    /// clock here could be later than a change the kernel stamps after them (xfstests
    /// generic/423: a file written after a reference was made must not look older).
    pub fn now() -> Ts {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) } != 0 {
            return Ts::from_system(SystemTime::now());
        }
        Ts { sec: t.tv_sec, nsec: t.tv_nsec as u32 }
    }
    pub fn from_system(t: SystemTime) -> Ts {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Ts {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Ts {
                        sec: -(d.as_secs() as i64),
                        nsec: 0,
                    }
                } else {
                    Ts {
                        sec: -(d.as_secs() as i64) - 1,
                        nsec: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }
    pub fn to_system(self) -> SystemTime {
        if self.sec >= 0 {
            UNIX_EPOCH + std::time::Duration::new(self.sec as u64, self.nsec)
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs((-self.sec) as u64)
                + std::time::Duration::from_nanos(self.nsec as u64)
        }
    }
    pub fn encode(&self, w: &mut Writer) {
        w.i64(self.sec).u32(self.nsec);
    }
    pub fn decode(r: &mut Reader<'_>) -> Result<Ts> {
        let sec = r.i64()?;
        let nsec = r.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(Error::corrupt("inode", "timestamp", format!("nanoseconds {nsec}")));
        }
        Ok(Ts { sec, nsec })
    }
}

/// One file's metadata. `content` is the root of its content tree: chunk index -> data
/// block for a regular file, name -> entry for a directory; `None` when empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub oid: u64,
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Bytes of content actually stored (for st_blocks).
    pub alloc: u64,
    pub atime: Ts,
    pub mtime: Ts,
    pub ctime: Ts,
    pub btime: Ts,
    pub rdev: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Symlink target.
    pub target: Vec<u8>,
    pub content: Option<BlockPtr>,
    /// Regular files only: the file's bytes from offset 0 when they are all it stores (at most
    /// `INLINE_MAX`, never with `content`; the rest up to `size` reads as zeros). Empty when
    /// the content, if any, is in the content tree.
    pub inline: Vec<u8>,
    /// Regular files only: `Some` when the file stores nothing past chunk 0 and `content` is
    /// not a content tree but chunk 0's data block, with these patches over it: the one
    /// entry such a tree would hold, kept in the record instead of a 4 KiB leaf.
    pub direct: Option<Patches>,
    /// Directories only: root of the subtree summary, the tree that says which hard-linked
    /// files (`L` + oid -> names inside this subtree) and which clone mount points (`M` +
    /// oid) lie below. It is what lets a clone know its link counts and nested clones
    /// without walking the files. `None` when both are empty.
    pub summary: Option<BlockPtr>,
    /// Regular files only: byte ranges `fallocate` covered that store nothing yet, which
    /// `st_blocks` counts (`prealloc.rs`). Format 13, mask bit 16.
    pub prealloc: crate::prealloc::Ranges,
}

const RECORD_VERSION: u8 = 2;

impl Inode {
    pub fn new(oid: u64, kind: Kind, perm: u16, uid: u32, gid: u32, now: Ts) -> Inode {
        Inode {
            oid,
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: 0,
            alloc: 0,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            rdev: 0,
            xattrs: BTreeMap::new(),
            target: Vec::new(),
            content: None,
            inline: Vec::new(),
            direct: None,
            summary: None,
            prealloc: Vec::new(),
        }
    }

    /// The pointers a stored record owns, in stored order (see `encode_record`).
    pub fn ptrs(&self) -> Vec<BlockPtr> {
        self.content.into_iter().chain(self.summary).collect()
    }

    /// The root of the file's or directory's tree, if it has one (a file whose `content` is
    /// its chunk 0's block has none).
    pub fn tree(&self) -> Option<&BlockPtr> {
        if self.direct.is_some() {
            None
        } else {
            self.content.as_ref()
        }
    }

    /// Chunk 0 as the record holds it, when `content` is its block (see `direct`).
    pub fn direct_chunk(&self) -> Option<StoredChunk> {
        let patches = self.direct.as_ref()?;
        Some(StoredChunk::new(
            self.content.expect("a direct chunk has its block"),
            patches.clone(),
            None,
        ))
    }

    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm as u32
    }

    /// The record bytes, without `content` and `summary` (which travel as the value's
    /// pointers, in that order; a mask byte says which are present, and whether inline bytes
    /// or a direct chunk's patches end the record).
    pub fn encode_record(&self, w: &mut Writer) {
        debug_assert!(self.inline.is_empty() || (self.kind == Kind::File && self.content.is_none()));
        debug_assert!(self.direct.is_none() || (self.kind == Kind::File && self.content.is_some()));
        let mask = self.content.is_some() as u8
            | (self.summary.is_some() as u8) << 1
            | (!self.inline.is_empty() as u8) << 2
            | (self.direct.is_some() as u8) << 3
            | (!self.prealloc.is_empty() as u8) << 4;
        w.u8(RECORD_VERSION).u8(mask);
        w.u64(self.oid).u8(self.kind as u8).u16(self.perm);
        w.u32(self.uid)
            .u32(self.gid)
            .u32(self.nlink)
            .u64(self.size)
            .u64(self.alloc);
        for t in [&self.atime, &self.mtime, &self.ctime, &self.btime] {
            t.encode(w);
        }
        w.u32(self.rdev).bytes(&self.target).u32(self.xattrs.len() as u32);
        for (k, v) in &self.xattrs {
            w.bytes(k).bytes(v);
        }
        if !self.inline.is_empty() {
            w.bytes(&self.inline);
        }
        if let Some(p) = &self.direct {
            w.bytes(&p.encode());
        }
        if !self.prealloc.is_empty() {
            debug_assert!(self.kind == Kind::File && crate::prealloc::valid(&self.prealloc));
            w.u32(self.prealloc.len() as u32);
            for (s, e) in &self.prealloc {
                w.u64(*s).u64(*e);
            }
        }
    }

    pub fn decode_record(r: &mut Reader<'_>, ptrs: &[BlockPtr]) -> Result<Inode> {
        let v = r.u8()?;
        if v != RECORD_VERSION {
            return Err(Error::corrupt("inode", "record", format!("unknown record version {v}")));
        }
        let mask = r.u8()?;
        if mask > 31 || ptrs.len() != (mask & 1) as usize + (mask >> 1 & 1) as usize {
            return Err(Error::corrupt(
                "inode",
                "record",
                "pointer mask disagrees with pointers",
            ));
        }
        let content = if mask & 1 != 0 { Some(ptrs[0]) } else { None };
        let summary = if mask & 2 != 0 { ptrs.last().copied() } else { None };
        let oid = r.u64()?;
        let k = r.u8()?;
        let kind =
            Kind::from_u8(k).ok_or_else(|| Error::corrupt("inode", format!("oid {oid}"), format!("kind {k}")))?;
        let perm = r.u16()? & 0o7777;
        let uid = r.u32()?;
        let gid = r.u32()?;
        let nlink = r.u32()?;
        let size = r.u64()?;
        let alloc = r.u64()?;
        let atime = Ts::decode(r)?;
        let mtime = Ts::decode(r)?;
        let ctime = Ts::decode(r)?;
        let btime = Ts::decode(r)?;
        let rdev = r.u32()?;
        let target = r.bytes()?.to_vec();
        let n = r.count(8)?;
        let mut xattrs = BTreeMap::new();
        for _ in 0..n {
            let k = r.bytes()?.to_vec();
            let v = r.bytes()?.to_vec();
            xattrs.insert(k, v);
        }
        let mut inline = Vec::new();
        if mask & 4 != 0 {
            inline = r.bytes()?.to_vec();
            if inline.is_empty() || inline.len() > INLINE_MAX || kind != Kind::File || content.is_some() {
                return Err(Error::corrupt(
                    "inode",
                    format!("oid {oid}"),
                    format!(
                        "{} inline bytes in a {kind:?} record{}",
                        inline.len(),
                        if content.is_some() { " with a content tree" } else { "" }
                    ),
                ));
            }
        }
        let mut direct = None;
        if mask & 8 != 0 {
            let p = Patches::decode(r.bytes()?)?;
            match content {
                Some(c) if kind == Kind::File && c.kind == BlockKind::Data && mask & 4 == 0 => {}
                _ => {
                    return Err(Error::corrupt(
                        "inode",
                        format!("oid {oid}"),
                        format!("a direct chunk in a {kind:?} record without a data block"),
                    ))
                }
            }
            direct = Some(p);
        } else if content.is_some_and(|c| c.kind != BlockKind::Node) {
            return Err(Error::corrupt(
                "inode",
                format!("oid {oid}"),
                "content root is not a tree node",
            ));
        }
        let mut prealloc = Vec::new();
        if mask & 16 != 0 {
            let n = r.count(16)?;
            for _ in 0..n {
                prealloc.push((r.u64()?, r.u64()?));
            }
            if kind != Kind::File || prealloc.is_empty() || !crate::prealloc::valid(&prealloc) {
                return Err(Error::corrupt(
                    "inode",
                    format!("oid {oid}"),
                    format!("preallocated ranges {prealloc:?} in a {kind:?} record"),
                ));
            }
        }
        Ok(Inode {
            oid,
            kind,
            perm,
            uid,
            gid,
            nlink,
            size,
            alloc,
            atime,
            mtime,
            ctime,
            btime,
            rdev,
            xattrs,
            target,
            content,
            inline,
            direct,
            summary,
            prealloc,
        })
    }

    pub fn xattr_bytes(&self) -> usize {
        self.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// What a directory entry holds: the inode itself (the common case), or, for a file with
/// several names, the object id under which the namespace's link table holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryRecord {
    Inline(Inode),
    Linked {
        oid: u64,
        kind: Kind,
    },
    /// The root of a clone: the namespace's mount table maps `oid` to the clone's namespace.
    /// The indirection is what lets a clone of a tree that holds clones give the copies new
    /// namespaces without touching the shared tree.
    Mount {
        oid: u64,
    },
}

const ENTRY_INLINE: u8 = 0;
const ENTRY_LINKED: u8 = 1;
const ENTRY_MOUNT: u8 = 2;

impl EntryRecord {
    pub fn oid(&self) -> u64 {
        match self {
            EntryRecord::Inline(i) => i.oid,
            EntryRecord::Linked { oid, .. } => *oid,
            EntryRecord::Mount { oid } => *oid,
        }
    }
    pub fn to_value(&self) -> Value {
        let mut w = Writer::new();
        match self {
            EntryRecord::Inline(i) => EntryRecord::inline_value(i),
            EntryRecord::Linked { oid, kind } => {
                w.u8(ENTRY_LINKED).u64(*oid).u8(*kind as u8);
                Value::new(w.finish(), Vec::new())
            }
            EntryRecord::Mount { oid } => {
                w.u8(ENTRY_MOUNT).u64(*oid);
                Value::new(w.finish(), Vec::new())
            }
        }
    }
    /// `EntryRecord::Inline(i.clone()).to_value()` without the clone (a fold encodes every
    /// changed file's record, inline bytes and all), in a buffer sized for it at once.
    pub fn inline_value(i: &Inode) -> Value {
        let xattrs: usize = i.xattrs.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
        // The fixed fields (about 100 bytes) and a direct block's pointer, generously.
        let fixed = 192 + 16 * i.prealloc.len();
        let mut w = Writer::with_capacity(fixed + i.inline.len() + i.target.len() + xattrs);
        w.u8(ENTRY_INLINE);
        i.encode_record(&mut w);
        Value::new(w.finish(), i.ptrs())
    }
    pub fn from_value(v: &Value) -> Result<EntryRecord> {
        let mut r = Reader::new(&v.bytes, "directory entry");
        let rec = match r.u8()? {
            ENTRY_INLINE => EntryRecord::Inline(Inode::decode_record(&mut r, &v.ptrs)?),
            ENTRY_MOUNT => {
                let oid = r.u64()?;
                if !v.ptrs.is_empty() {
                    return Err(Error::corrupt("directory entry", "value", "mount point with a pointer"));
                }
                EntryRecord::Mount { oid }
            }
            ENTRY_LINKED => {
                let oid = r.u64()?;
                let k = r.u8()?;
                let kind =
                    Kind::from_u8(k).ok_or_else(|| Error::corrupt("directory entry", "value", format!("kind {k}")))?;
                if !v.ptrs.is_empty() {
                    return Err(Error::corrupt(
                        "directory entry",
                        "value",
                        "link reference with a pointer",
                    ));
                }
                EntryRecord::Linked { oid, kind }
            }
            t => {
                return Err(Error::corrupt(
                    "directory entry",
                    "value",
                    format!("unknown entry tag {t}"),
                ))
            }
        };
        r.expect_end()?;
        Ok(rec)
    }
}

/// An inode as the link table stores it.
pub fn inode_to_value(i: &Inode) -> Value {
    let mut w = Writer::new();
    i.encode_record(&mut w);
    Value::new(w.finish(), i.ptrs())
}

pub fn inode_from_value(v: &Value) -> Result<Inode> {
    let mut r = Reader::new(&v.bytes, "link table entry");
    let i = Inode::decode_record(&mut r, &v.ptrs)?;
    r.expect_end()?;
    Ok(i)
}

pub fn chunk_key(idx: u64) -> Vec<u8> {
    idx.to_be_bytes().to_vec()
}

pub fn chunk_index(key: &[u8]) -> Result<u64> {
    let a: [u8; 8] = key
        .try_into()
        .map_err(|_| Error::corrupt("content tree", "key", format!("key of {} bytes", key.len())))?;
    Ok(u64::from_be_bytes(a))
}

pub fn oid_key(oid: u64) -> Vec<u8> {
    oid.to_be_bytes().to_vec()
}

/// Keys of the subtree summary (see [`Inode::summary`]).
pub fn summary_link_key(oid: u64) -> Vec<u8> {
    let mut k = vec![b'L'];
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

pub fn summary_mount_key(oid: u64) -> Vec<u8> {
    let mut k = vec![b'M'];
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

/// A summary key back to its kind (`b'L'` or `b'M'`) and oid.
pub fn summary_key_parts(k: &[u8]) -> Result<(u8, u64)> {
    if k.len() != 9 || !matches!(k[0], b'L' | b'M' | b'S') {
        return Err(Error::corrupt(
            "subtree summary",
            "key",
            format!("malformed key of {} bytes", k.len()),
        ));
    }
    Ok((k[0], u64::from_be_bytes(k[1..].try_into().unwrap())))
}

/// A summary count: a u64 in the value's bytes.
pub fn summary_value(n: u64) -> Value {
    Value::new(n.to_be_bytes().to_vec(), Vec::new())
}

pub fn summary_count(v: &Value) -> Result<u64> {
    let a: [u8; 8] = v
        .bytes
        .as_ref()
        .try_into()
        .map_err(|_| Error::corrupt("subtree summary", "value", "not a count"))?;
    if !v.ptrs.is_empty() {
        return Err(Error::corrupt("subtree summary", "value", "count with a pointer"));
    }
    Ok(u64::from_be_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptr(kind: BlockKind) -> BlockPtr {
        BlockPtr {
            addr: BlockPtr::make_addr(1, 8192),
            len: 3000,
            kind,
            hash: [7; 32],
        }
    }

    fn round_trip(i: &Inode) -> Result<Inode> {
        let mut w = Writer::new();
        i.encode_record(&mut w);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes, "test");
        let back = Inode::decode_record(&mut r, &i.ptrs())?;
        r.expect_end()?;
        Ok(back)
    }

    /// A file's content in each of its forms survives encoding.
    #[test]
    fn content_forms_round_trip() {
        let mut f = Inode::new(9, Kind::File, 0o644, 1, 2, Ts { sec: 5, nsec: 6 });
        f.size = 100_000;
        f.xattrs.insert(b"user.a".to_vec(), b"b".to_vec());
        let mut inline = f.clone();
        inline.inline = b"hello".to_vec();
        inline.alloc = 5;
        let mut tree = f.clone();
        tree.content = Some(ptr(BlockKind::Node));
        let mut direct = f.clone();
        direct.content = Some(ptr(BlockKind::Data));
        let mut p = Patches::default();
        p.write(10, b"abc");
        direct.direct = Some(p);
        let mut plain = direct.clone();
        plain.direct = Some(Patches::default());
        let mut prealloc = tree.clone();
        prealloc.prealloc = vec![(0, 4097), (1 << 20, 5 << 30)];
        for i in [f, inline, tree, direct, plain, prealloc] {
            assert_eq!(round_trip(&i).unwrap(), i);
        }
    }

    /// Records whose content fields contradict each other are refused as corrupt.
    #[test]
    fn contradictory_content_is_refused() {
        let base = Inode::new(9, Kind::File, 0o644, 1, 2, Ts::default());
        let mut bad = Vec::new();
        // Inline bytes in a directory; beside a content tree; longer than INLINE_MAX.
        let mut d = Inode::new(3, Kind::Dir, 0o755, 0, 0, Ts::default());
        d.inline = b"x".to_vec();
        bad.push(d);
        let mut both = base.clone();
        both.inline = b"x".to_vec();
        both.content = Some(ptr(BlockKind::Node));
        bad.push(both);
        let mut long = base.clone();
        long.inline = vec![1; INLINE_MAX + 1];
        bad.push(long);
        // A direct chunk naming a tree node; a content tree rooted at a data block.
        let mut direct_node = base.clone();
        direct_node.content = Some(ptr(BlockKind::Node));
        direct_node.direct = Some(Patches::default());
        bad.push(direct_node);
        let mut tree_data = base.clone();
        tree_data.content = Some(ptr(BlockKind::Data));
        bad.push(tree_data);
        // Preallocated ranges in a directory; overlapping, touching, empty or unsorted.
        let mut dir_pre = Inode::new(3, Kind::Dir, 0o755, 0, 0, Ts::default());
        dir_pre.prealloc = vec![(0, 10)];
        bad.push(dir_pre);
        for r in [vec![(0, 10), (5, 20)], vec![(0, 10), (10, 20)], vec![(7, 7)], vec![(30, 40), (0, 10)]] {
            let mut f = base.clone();
            f.prealloc = r;
            bad.push(f);
        }
        for i in bad {
            // (Encoding asserts the same invariants in debug builds.)
            let r = std::panic::catch_unwind(|| round_trip(&i));
            assert!(!matches!(r, Ok(Ok(_))), "accepted: {i:?}");
        }
    }
}
