//! O_TMPFILE: a regular file made without a name, which `linkat` may name later (overlayfs
//! copies a file up this way; `systemd`, `git` and editors write a file whole before it
//! appears).
//!
//! Until it is named the file is an orphan like a file removed while open: its changes are
//! not journaled, and a crash ends it (its blocks are given back as garbage). Two journal
//! records make it durable:
//! - `Reserve` when it is made: replay takes its object id, so that the ids of the files
//!   made after it replay where they were made.
//! - `Adopt` when `link` names it, followed in the same operation (the MORE flag: all or
//!   nothing) by what it holds, as the records its writes would have made had it had a name
//!   (`Write` for bytes in memory, `PutChunks` for blocks already in a pack, `ShareChunks`
//!   for blocks shared by copy_file_range, `Fallocate` for preallocated ranges), then a
//!   `SetAttr` with its size and times.

use crate::fs::{check_name, make_ino, Chunk, Fs, Loc, Node};
use crate::inode::{Inode, Kind, Ts, CHUNK};
use crate::journal::{Record, Target};
use crate::{errno, Attr, FsResult, Ino, SetAttr};
use scion_store::BlockPtr;

impl Fs {
    /// Makes a regular file without a name in directory `parent` (which decides its
    /// namespace, default ACL and setgid group), as `mknod` would make it there. The kernel
    /// holds one reference to it, and the caller opens it.
    pub fn tmpfile(&mut self, parent: Ino, mode: u32, umask: u32, uid: u32, gid: u32) -> FsResult<Attr> {
        self.writable()?;
        self.rw(parent)?;
        self.room_for(4096)?;
        let (perm, xattrs) = self.new_mode(parent, Kind::File, mode, umask)?;
        let p = self.dir_node(parent)?;
        let ns = p.ns;
        // As op_mknod: a setgid directory gives its group.
        let gid = if p.inode.perm & libc::S_ISGID as u16 != 0 { p.inode.gid } else { gid };
        let oid = self.new_oid(ns)?;
        let ino = self.op_reserve(ns, oid)?;
        self.put_nameless(ns, oid, perm, uid, gid, &xattrs, Ts::now());
        // An orphan from the start: its buffered bytes are written behind as an unlinked
        // file's are (`flush_begin`), not kept in memory.
        self.orphans.insert(ino);
        self.log(|| Some(Record::Reserve { ns, oid }))?;
        self.remember(ino)
    }

    /// Replays (and makes) the reservation of object id `oid` in namespace `ns` for a file
    /// without a name; returns its inode number.
    pub(crate) fn op_reserve(&mut self, ns: u32, oid: u64) -> FsResult<Ino> {
        let nsr = self.namespaces.get_mut(&ns).ok_or(errno::EIO)?;
        if oid != nsr.next_oid {
            log::error!("object id {oid} reserved where {} was due", nsr.next_oid);
            return Err(errno::EIO);
        }
        nsr.next_oid += 1;
        Ok(make_ino(ns, oid))
    }

    /// `link` of a file `tmpfile` made: its first name, `newparent/newname`.
    pub(crate) fn name_tmpfile(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        self.writable()?;
        self.rw(newparent)?;
        check_name(newname)?;
        self.room_for(4096)?;
        let n = self.node(ino)?;
        assert!(n.nameless && n.loc == Loc::Gone && n.inode.nlink == 0, "ino {ino:#x}: named twice");
        if self.dir_node(newparent)?.ns != n.ns {
            return Err(errno::EXDEV);
        }
        if self.child(newparent, newname)?.is_some() {
            return Err(errno::EEXIST);
        }
        let records = self.content_records(ino)?;
        let now = Ts::now();
        let ptarget = self.target(newparent);
        self.op_adopt(ino, newparent, newname, now)?;
        self.orphans.remove(&ino);
        // Named by path from here on, as every later record names it.
        if let (Some(parent), Some(target)) = (ptarget, self.target(ino)) {
            let i = &self.node(ino)?.inode;
            let adopt = Record::Adopt {
                parent,
                name: newname.to_vec(),
                perm: i.perm,
                uid: i.uid,
                gid: i.gid,
                xattrs: i.xattrs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                oid: i.oid,
                time: now,
            };
            let attr = SetAttr {
                size: Some(i.size),
                atime: Some(i.atime),
                mtime: Some(i.mtime),
                ctime: Some(now),
                ..SetAttr::default()
            };
            self.log_part(true, || Some(adopt))?;
            for r in records {
                self.log_part(true, || Some(r(target.clone())))?;
            }
            self.log(|| Some(Record::SetAttr { ino: target, attr, time: now }))?;
        }
        self.remember(ino)
    }

    /// Gives nameless file `ino` its first name (live, or replaying an `Adopt` record whose
    /// inode `Fs::adopted` made).
    pub(crate) fn op_adopt(&mut self, ino: Ino, parent: Ino, name: &[u8], now: Ts) -> FsResult<()> {
        if self.child(parent, name)?.is_some() {
            return Err(errno::EEXIST);
        }
        let n = self.node_mut(ino)?;
        let ns = n.ns;
        n.nameless = false;
        n.loc = Loc::Entry { parent, name: name.to_vec() };
        n.inode.nlink = 1;
        n.inode.ctime = now;
        self.namespaces.get_mut(&ns).ok_or(errno::EIO)?.inodes += 1;
        self.touch(ino);
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_vec(), Some(crate::fs::Ent::Node(ino)));
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(parent);
        Ok(())
    }

    /// Replays an `Adopt` record: the file as it was when named, empty; the records after it
    /// fill it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replay_adopt(
        &mut self,
        parent: Ino,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
        xattrs: &[(Vec<u8>, Vec<u8>)],
        oid: u64,
        time: Ts,
    ) -> FsResult<()> {
        let ns = self.dir_node(parent)?.ns;
        // Its id was reserved before (a `Reserve` record, or a checkpoint after one).
        if oid >= self.namespaces.get(&ns).ok_or(errno::EIO)?.next_oid {
            log::error!("a file named with object id {oid} that was never reserved");
            return Err(errno::EIO);
        }
        if self.nodes.contains_key(&make_ino(ns, oid)) {
            log::error!("a file named with object id {oid}, which is in use");
            return Err(errno::EIO);
        }
        let ino = self.put_nameless(ns, oid, perm, uid, gid, xattrs, time);
        self.op_adopt(ino, parent, name, time)
    }

    /// A new, empty regular file without a name (nlink 0, `Loc::Gone`) loaded as object
    /// `oid` of namespace `ns`; its inode number.
    #[allow(clippy::too_many_arguments)]
    fn put_nameless(&mut self, ns: u32, oid: u64, perm: u16, uid: u32, gid: u32, xattrs: &[(Vec<u8>, Vec<u8>)], time: Ts) -> Ino {
        let mut inode = Inode::new(oid, Kind::File, perm, uid, gid, time);
        inode.nlink = 0;
        inode.xattrs.extend(xattrs.iter().cloned());
        let mut node = Node::new(inode, ns, Loc::Gone);
        node.nameless = true;
        let ino = make_ino(ns, oid);
        self.nodes.insert(ino, Box::new(node));
        ino
    }

    /// The records that rebuild nameless file `ino`'s content on an empty file of its name,
    /// each waiting for that name. Its content is all in its overlay: it was never folded.
    #[allow(clippy::type_complexity)]
    fn content_records(&self, ino: Ino) -> FsResult<Vec<Box<dyn FnOnce(Target) -> Record>>> {
        let n = self.node(ino)?;
        assert!(n.inode.content.is_none() && n.inode.inline.is_empty(), "a nameless file with committed content");
        let time = n.inode.mtime;
        let unordered = self.writeback;
        let mut out: Vec<Box<dyn FnOnce(Target) -> Record>> = Vec::new();
        for (&idx, c) in &n.chunks {
            match c {
                Chunk::Hole => {}
                Chunk::Block(p) => {
                    let (p, tail) = (*p, u64::from(p.len) < CHUNK);
                    out.push(Box::new(move |ino| Record::PutChunks { ino, first: idx, chunks: vec![Some(p)], time, unordered, tail }));
                }
                Chunk::Shared(p) => {
                    let p: BlockPtr = *p;
                    out.push(Box::new(move |ino| Record::ShareChunks { ino, first: idx, chunks: vec![Some(p)], time }));
                }
                Chunk::Buf(_) | Chunk::Patched { .. } => {
                    let data = self.chunk(n, idx)?.unwrap_or_default();
                    out.push(Box::new(move |ino| Record::Write { ino, offset: idx * CHUNK, data, time }));
                }
            }
        }
        for &(start, end) in &n.inode.prealloc {
            out.push(Box::new(move |ino| Record::Fallocate {
                ino,
                mode: libc::FALLOC_FL_KEEP_SIZE,
                offset: start,
                len: end - start,
                time,
            }));
        }
        Ok(out)
    }
}
