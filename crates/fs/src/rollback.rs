//! Rollback: a clone becomes exactly one of its snapshots again, in one step (ZFS `rollback`).
//!
//! A clone is a namespace reached through a mount entry in its parent namespace. Rolling it
//! back to snapshot S makes a new clone of S (one reference-count increment, as any clone)
//! and points the same mount entry at it; the old namespace is destroyed as `destroy` does,
//! so a process holding one of its files open keeps the file it opened (an orphan, freed
//! when closed), as after a rename over it. The clone's snapshots move to the new namespace
//! (their anchor is the clone root's object id, which the new clone keeps), so
//! `.snapshot` still lists them all, S included. Everything happens in memory under the
//! engine lock and is committed by one checkpoint: after a crash the store holds either the
//! clone as it was or the rolled-back one.
//!
//! The new clone's files are new files to the kernel (their inode numbers carry the new
//! namespace), which is what lets open files of the old one keep their bytes, and why the
//! work does not depend on the size of the tree.
//!
//! Only clones roll back this way: a plain directory's files share their namespace with the
//! rest of its tree, so its snapshot's object ids could name files moved out of it since.
//! `scion restore DIR --from SNAP --replace` is the way back for those.

use crate::clone::summary_snap_key;
use crate::error::errno;
use crate::fs::*;
use crate::inode::{summary_key_parts, Ts};

impl Fs {
    /// Rolls clone `dir` (a clone's root) back to its snapshot `name`. Returns the new root.
    /// EINVAL: `dir` is not a clone's root; ENOENT: no such snapshot of it; EBUSY: snapshots
    /// of the clone's subdirectories, which the rollback cannot carry over, exist (now or in
    /// the snapshot's record).
    pub fn rollback(&mut self, dir: Ino, name: &[u8]) -> FsResult<Ino> {
        self.writable()?;
        self.rw(dir)?;
        let n = self.node(dir)?;
        let old = n.ns;
        if n.loc != Loc::Root || self.namespaces.get(&old).map(|n| n.info.kind) != Some(NsKind::Clone) {
            return Err(errno::EINVAL);
        }
        let root_oid = n.inode.oid;
        let snaps = self.snapshots_under(old);
        let Some(&(snap, _)) = snaps.iter().find(|(_, (anchor, n))| *anchor == root_oid && n == name) else {
            return Err(errno::ENOENT);
        };
        if snaps.iter().any(|(_, (anchor, _))| *anchor != root_oid) {
            return Err(errno::EBUSY);
        }
        let snap_root = self.namespaces[&snap].root;
        if self.summary_of(snap_root)?.keys().any(|k| is_other_snapshot_mark(k, root_oid)) {
            return Err(errno::EBUSY);
        }
        let info = self.namespaces[&old].info.clone();
        let (parent, entry) = match self.namespaces[&old].mounted_at.clone() {
            Some(m) => m,
            None => self.find_named(info.parent, &crate::inode::summary_mount_key(info.anchor))?,
        };
        self.rw(parent)?;
        let now = Ts::now();
        let new_info = NsInfo { created: now, ..info.clone() };
        let new = self.make_clone_or_fail(snap_root, &[], new_info, None)?;
        // From here on nothing is refused: every step only moves what the checks above found.
        let moved: Vec<u32> = snaps.iter().map(|(id, _)| *id).collect();
        for id in &moved {
            let s = self.namespaces.get_mut(id).ok_or(errno::EIO)?;
            s.info.parent = new;
            s.dirty = true;
        }
        let new_root = self.namespaces[&new].root;
        let key = summary_snap_key(root_oid);
        let marked = self.summary_of(new_root)?.get(&key).copied().unwrap_or(0);
        self.bump(new_root, &key, moved.len() as i64 - marked)?;
        self.destroy_ns(old)?;
        if self.nodes.has_ns(old) {
            self.replaced_ns.insert(old);
        }
        let p = self.namespaces.get_mut(&info.parent).ok_or(errno::EIO)?;
        p.mounts.insert(info.anchor, new);
        p.dirty = true;
        self.namespaces.get_mut(&new).ok_or(errno::EIO)?.mounted_at = Some((parent, entry.clone()));
        // The entry now names another directory, as after a rename over it.
        let p = self.node_mut(parent)?;
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(parent);
        self.kernel_inval.push(Inval::Entry(parent, entry));
        self.kernel_inval.push(Inval::Inode(parent));
        self.checkpoint().map_err(eio)?;
        Ok(new_root)
    }

    /// Snapshots of directories of namespace `ns`: id -> (anchor oid, name).
    fn snapshots_under(&self, ns: u32) -> Vec<(u32, (u64, Vec<u8>))> {
        self.namespaces
            .iter()
            .filter(|(_, n)| n.info.kind == NsKind::Snapshot && n.info.parent == ns)
            .map(|(id, n)| (*id, (n.info.anchor, n.info.name.clone())))
            .collect()
    }
}

/// A summary key marking a snapshot of some directory other than the root `root_oid`.
fn is_other_snapshot_mark(key: &[u8], root_oid: u64) -> bool {
    matches!(summary_key_parts(key), Ok((b'S', oid)) if oid != root_oid)
}
