//! Clones and snapshots: new namespaces that share a directory's tree.
//!
//! A clone of directory S is a new namespace whose root record is a copy of S's record, so
//! it shares S's whole tree by pointer (one reference-count increment). Object ids are kept,
//! and `st_ino` carries the namespace, so every file of the clone is a different file to
//! the kernel. What cannot be shared is per-namespace state, and S's *subtree summary* says
//! what that is without walking the files:
//!
//! - hard-linked files (`L` + oid -> names inside S): the clone's link table gets one record
//!   per such file, with `nlink` set to the names inside the clone (as `cp -a` counts);
//! - clones nested inside S (`M` + oid): each is cloned in turn, so the copy is independent;
//! - directories that have snapshots (`S` + oid), used to find their paths.
//!
//! The work is therefore proportional to the hard-linked files and nested clones of S, never
//! to its files. A clone (or snapshot) is made only from committed trees (a checkpoint folds
//! its source first when needed), so one journal record, fsynced before it is answered,
//! rebuilds it after a crash.

use crate::access::{may_search, Caller};
use crate::checkpoint::{ns_key, ns_to_value, Fold, NsRecord};
use crate::error::errno;
use crate::fs::*;
use crate::inode::*;
use crate::journal::Record;
use scion_store::{BlockKind, BlockPtr, Result};
use scion_tree::Op;
use std::collections::{BTreeMap, HashMap, HashSet};

/// High bit of the inode number of a directory's virtual `.snapshot` directory.
pub const SNAPDIR_BIT: u64 = 1 << 63;
pub const SNAPDIR_NAME: &[u8] = b".snapshot";

/// A clone or snapshot, as `scion list` shows it.
#[derive(Clone, Debug)]
pub struct Listing {
    pub ns: u32,
    pub kind: NsKind,
    /// Path from the mount root. For an orphaned snapshot, where it is browsed:
    /// `.snapshot/@ID` of its namespace's root (`None` if that is gone too).
    pub path: Option<Vec<u8>>,
    /// A snapshot whose directory is gone (`rm -rf`): it holds its space until destroyed.
    pub orphaned: bool,
    pub origin: Vec<u8>,
    pub created: Ts,
    /// Bytes of blocks reachable from it.
    pub referenced: u64,
    /// Bytes of blocks only it holds: what destroying it frees.
    pub exclusive: u64,
    /// What the blocks it references occupy in the packs: `referenced`, less what
    /// compression of old versions saved (`compress.rs`).
    pub stored: u64,
    /// A snapshot taken by its directory's schedule.
    pub scheduled: bool,
}

pub fn summary_snap_key(oid: u64) -> Vec<u8> {
    let mut k = vec![b'S'];
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

/// Snapshots whose names begin so are the system's own, taken for the span of one command
/// (a scan's pins): reachable by name under `.snapshot` as any other, but no version of
/// their directory (`dir_snapshots` leaves them out: versions, retention, mirrors). Names
/// users give may not begin so.
pub const TRANSIENT_SNAPSHOT: &[u8] = b".scion-";

/// Whether snapshot `name` is the system's own, for one command (`TRANSIENT_SNAPSHOT`).
pub fn is_transient(name: &[u8]) -> bool {
    name.starts_with(TRANSIENT_SNAPSHOT)
}

/// The ordinary user a clone is made for, and the group its top directory gets: theirs,
/// as their own `cp -a` would make it (the source's group if they are in it, else their
/// own; the daemon decides, knowing their groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForUser {
    pub uid: u32,
    pub gid: u32,
}

impl ForUser {
    /// Makes the top directory record `top` theirs, as `chown` by `cp -a` would: the setuid
    /// and setgid bits go with an owner or group that changes.
    fn own(&self, top: &mut crate::inode::Inode) {
        if top.uid != self.uid {
            top.uid = self.uid;
            top.perm &= !0o6000;
        }
        if top.gid != self.gid {
            top.gid = self.gid;
            top.perm &= !0o2000;
        }
    }
}

impl Fs {
    /// Clones directory `src` to a new directory `name` in `parent`, leaving out the paths
    /// in `excludes` (each a list of names below `src`).
    pub fn clone_dir(
        &mut self,
        src: Ino,
        parent: Ino,
        name: &[u8],
        excludes: &[Vec<Vec<u8>>],
        origin: &[u8],
    ) -> FsResult<Ino> {
        self.clone_dir_for(src, parent, name, excludes, origin, None)
    }

    /// `clone_dir` made for an ordinary user `for_user` (`NsInfo::masked_for`): the
    /// privileges of files they do not own are hidden in the clone, and its top is theirs,
    /// as their `cp -a` would make it (`ForUser`).
    pub fn clone_dir_for(
        &mut self,
        src: Ino,
        parent: Ino,
        name: &[u8],
        excludes: &[Vec<Vec<u8>>],
        origin: &[u8],
        for_user: Option<ForUser>,
    ) -> FsResult<Ino> {
        self.writable()?;
        self.rw(parent)?;
        check_name(name)?;
        if self.node(src)?.inode.kind != Kind::Dir {
            return Err(errno::ENOTDIR);
        }
        if self.node(src)?.loc == Loc::Gone {
            return Err(errno::ENOENT);
        }
        if self.child(parent, name)?.is_some() {
            return Err(errno::EEXIST);
        }
        if self.dir_node(parent)?.inode.nlink >= MAX_NLINK {
            return Err(errno::EMLINK);
        }
        // Fold every overlay, so S's record names its whole current tree.
        self.fold(src)?;
        let (Some(src_t), Some(parent_t)) = (self.target(src), self.target(parent)) else {
            return Err(errno::ENOENT);
        };
        let now = Ts::now();
        let (root, ns, oid) = self.op_clone(src, parent, name, excludes, origin, now, for_user.map(|u| u.uid), for_user)?;
        // Journaled, not checkpointed: everything below S is committed, so replaying the
        // record after a crash makes the same clone from the same trees (one fsync instead
        // of a checkpoint's three).
        self.log(|| {
            Some(Record::Clone {
                src: src_t,
                parent: parent_t,
                name: name.to_vec(),
                excludes: excludes.to_vec(),
                origin: origin.to_vec(),
                ns,
                oid,
                time: now,
                masked_for: for_user.map(|u| u.uid),
                top_gid: for_user.map(|u| u.gid),
            })
        })?;
        self.fsync_or_owe()?;
        Ok(root)
    }

    /// The change a clone makes, from the state `clone_dir` checked: the clone's namespace
    /// and the mount entry in `parent`. Also the replay of a clone record. Returns the
    /// clone's root, its namespace and the mount entry's oid.
    pub(crate) fn op_clone(
        &mut self,
        src: Ino,
        parent: Ino,
        name: &[u8],
        excludes: &[Vec<Vec<u8>>],
        origin: &[u8],
        now: Ts,
        masked_for: Option<u32>,
        top: Option<ForUser>,
    ) -> FsResult<(Ino, u32, u64)> {
        debug_assert!(top.is_none_or(|u| Some(u.uid) == masked_for), "a top made theirs, not masked for them");
        let pns = self.node(parent)?.ns;
        // Taken only once the clone is made: a refused clone must change nothing.
        let oid = self.namespaces.get(&pns).ok_or(errno::EIO)?.next_oid;
        if oid >= MAX_OID {
            return Err(errno::ENOSPC);
        }
        let info = NsInfo {
            kind: NsKind::Clone,
            parent: pns,
            anchor: oid,
            name: Vec::new(),
            origin: origin.to_vec(),
            created: now,
            scheduled: false,
            masked_for,
            made_by: masked_for,
        };
        let id = self.make_clone_or_fail(src, excludes, info, top)?;
        let p = self.namespaces.get_mut(&pns).ok_or(errno::EIO)?;
        p.next_oid += 1;
        p.dirty = true;
        p.mounts.insert(oid, id);
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_vec(), Some(Ent::Mount { oid }));
        p.inode.nlink += 1;
        p.inode.mtime = now;
        p.inode.ctime = now;
        self.touch(parent);
        self.bump(parent, &summary_mount_key(oid), 1)?;
        let c = self.namespaces.get_mut(&id).ok_or(errno::EIO)?;
        c.mounted_at = Some((parent, name.to_vec()));
        Ok((c.root, id, oid))
    }

    /// Takes a read-only snapshot of directory `dir`, reachable as `dir/.snapshot/name` (and
    /// as `.snapshot/name/...` of every directory below it).
    pub fn snapshot(&mut self, dir: Ino, name: &[u8], origin: &[u8]) -> FsResult<u32> {
        self.snapshot_as(dir, name, origin, false, Ts::now())
    }

    /// `snapshot` made at time `now`, marked as taken by the directory's schedule when
    /// `scheduled` (its retention policy may then remove it).
    pub fn snapshot_as(&mut self, dir: Ino, name: &[u8], origin: &[u8], scheduled: bool, now: Ts) -> FsResult<u32> {
        self.snapshot_for(dir, name, origin, scheduled, now, None)
    }

    /// `snapshot_as` made for an ordinary user `masked_for` (`NsInfo::masked_for`).
    pub fn snapshot_for(
        &mut self,
        dir: Ino,
        name: &[u8],
        origin: &[u8],
        scheduled: bool,
        now: Ts,
        masked_for: Option<u32>,
    ) -> FsResult<u32> {
        self.writable()?;
        // The snapshot's mark goes into the summaries of `dir` and the directories above it.
        self.rw(dir)?;
        check_name(name)?;
        let n = self.dir_node(dir)?;
        if n.loc == Loc::Gone {
            return Err(errno::ENOENT);
        }
        let (ns, oid) = (n.ns, n.inode.oid);
        if self.snapshots_of(ns, oid).iter().any(|(_, s)| s.as_slice() == name) {
            return Err(errno::EEXIST);
        }
        self.fold(dir)?;
        let Some(dir_t) = self.target(dir) else {
            return Err(errno::ENOENT);
        };
        let id = self.op_snapshot(dir, name, origin, now, scheduled, masked_for)?;
        // Journaled like a clone: it was made from committed trees only.
        self.log(|| {
            Some(Record::Snapshot {
                dir: dir_t,
                name: name.to_vec(),
                origin: origin.to_vec(),
                ns: id,
                time: now,
                scheduled,
                masked_for,
            })
        })?;
        self.fsync_or_owe()?;
        Ok(id)
    }

    /// The change a snapshot makes: its namespace and the mark in the directory's summary.
    /// Also the replay of a snapshot record.
    pub(crate) fn op_snapshot(
        &mut self,
        dir: Ino,
        name: &[u8],
        origin: &[u8],
        now: Ts,
        scheduled: bool,
        masked_for: Option<u32>,
    ) -> FsResult<u32> {
        let n = self.dir_node(dir)?;
        let (ns, oid) = (n.ns, n.inode.oid);
        let info = NsInfo {
            kind: NsKind::Snapshot,
            parent: ns,
            anchor: oid,
            name: name.to_vec(),
            origin: origin.to_vec(),
            created: now,
            scheduled,
            masked_for,
            made_by: masked_for,
        };
        // A snapshot's top stays its directory's: the user snapshots only what they own.
        let id = self.make_clone_or_fail(dir, &[], info, None)?;
        self.bump(dir, &summary_snap_key(oid), 1)?;
        Ok(id)
    }

    /// Checkpoints if `dir`'s record does not name its whole current tree yet (a clone copies
    /// that record), folding the carried changes of files below `dir` too. Changes elsewhere
    /// wait for the clone's own checkpoint, so a clone after writes to other trees (a new
    /// clone after writing to the last one) takes one checkpoint, not two.
    pub fn fold(&mut self, dir: Ino) -> FsResult<()> {
        // (Committing the checkpoint in flight changes no namespace.)
        let inside = self.namespaces_inside(dir);
        // What a background checkpoint in flight folded is in the trees but not committed:
        // a clone record journaled over it would be replayed, after a crash before that
        // commit, over the checkpoint before, where those trees are not.
        if self.in_flight_below(dir, inside.as_ref()) {
            self.commit_in_flight().map_err(eio)?;
        }
        if self.changed_below(dir, inside.as_ref()) {
            self.checkpoint_with(Fold::Under(dir)).map_err(eio)?;
        }
        Ok(())
    }

    /// Whether a clone or snapshot of the directory at `path` would fold first (`fold`): it
    /// would if something below it is not committed, or cannot be told (a path that does not
    /// resolve: the operation refuses it, or finds it by other means).
    pub fn would_fold_below(&mut self, path: &[u8]) -> bool {
        let Ok(dir) = self.resolve_path(path) else { return true };
        let inside = self.namespaces_inside(dir);
        self.in_flight_below(dir, inside.as_ref()) || self.changed_below(dir, inside.as_ref())
    }

    /// True if something below `dir` (itself included) is not in the committed trees: a
    /// dirty or carried inode (`lies_under` says yes when unsure: hard-linked, removed or
    /// unloaded inodes), or staged link-table changes of `dir`'s namespace or of a clone
    /// nested below it (make_clone reads their committed link tables). `inside`: what
    /// `namespaces_inside(dir)` says.
    fn changed_below(&self, dir: Ino, inside: Option<&HashSet<u32>>) -> bool {
        let Some(inside) = inside else { return true };
        self.any_below(dir, inside, self.dirty.iter().chain(&self.carried))
            || inside.iter().any(|id| self.namespaces.get(id).is_some_and(|n| !n.links.is_empty()))
    }

    /// True if the checkpoint in flight folded or carried something below `dir`: then what
    /// `dir`'s record names in memory is not committed yet.
    fn in_flight_below(&self, dir: Ino, inside: Option<&HashSet<u32>>) -> bool {
        if self.committing.is_none() {
            return false;
        }
        let Some(inside) = inside else { return true };
        self.any_below(dir, inside, self.in_flight_inos())
    }

    /// The namespaces that can hold something below `dir`: its own, the clones mounted in
    /// its tree below `dir` (or that may be: `lies_under` says yes when unsure), and every
    /// clone mounted in one of those, and so on. Found from `dir`'s namespace's mount
    /// table, not by asking every namespace: a snapshot hangs in no tree, and a store with
    /// 3,500 of them spent 41% of a clone's time in `lies_under` (issue 38 item 3). None:
    /// `dir` is not loaded; anything may be below it.
    fn namespaces_inside(&self, dir: Ino) -> Option<HashSet<u32>> {
        let ns = self.nodes.get(&dir)?.ns;
        let mut todo: Vec<u32> = self
            .namespaces
            .get(&ns)?
            .mounts
            .values()
            .copied()
            .filter(|c| self.namespaces.get(c).is_some_and(|n| self.lies_under(n.root, dir)))
            .collect();
        let mut inside = HashSet::from([ns]);
        while let Some(c) = todo.pop() {
            if inside.insert(c) {
                todo.extend(self.namespaces.get(&c).into_iter().flat_map(|n| n.mounts.values().copied()));
            }
        }
        Some(inside)
    }

    /// Whether one of `inos` lies below `dir`. An inode of a namespace not `inside` is
    /// passed over without a walk (after many clones, most carried files are in other clones).
    fn any_below<'a>(&self, dir: Ino, inside: &HashSet<u32>, mut inos: impl Iterator<Item = &'a Ino>) -> bool {
        let maybe_below = |i: &Ino| self.nodes.get(i).is_none_or(|n| inside.contains(&n.ns));
        inos.any(|i| maybe_below(i) && self.lies_under(*i, dir))
    }

    /// Snapshots taken of directory `oid` of namespace `ns`: (namespace, name).
    pub(crate) fn snapshots_of(&self, ns: u32, oid: u64) -> Vec<(u32, Vec<u8>)> {
        self.namespaces
            .iter()
            .filter(|(_, n)| n.info.kind == NsKind::Snapshot && n.info.parent == ns && n.info.anchor == oid)
            .map(|(id, n)| (*id, n.info.name.clone()))
            .collect()
    }

    /// Keeps namespace ids below `limit` (ENOSPC for a clone past it), for a volume whose
    /// st_ino has fewer bits than the main volume's; refused if ids at or past it exist.
    pub fn limit_namespaces(&mut self, limit: u32) -> FsResult<()> {
        assert!(limit >= 2, "a volume has at least its main namespace");
        if self.next_ns > limit {
            return Err(errno::EOVERFLOW.with(format!(
                "the volume has namespace ids up to {}, past the limit of {limit}",
                self.next_ns - 1
            )));
        }
        self.ns_limit = limit;
        Ok(())
    }

    /// `make_clone`, and if it fails after it began changing the namespace table and the
    /// reference counts, the filesystem refuses changes until a remount replays the journal
    /// (which holds everything acknowledged), as after a failed checkpoint.
    pub(crate) fn make_clone_or_fail(
        &mut self,
        src: Ino,
        excludes: &[Vec<Vec<u8>>],
        info: NsInfo,
        top: Option<ForUser>,
    ) -> FsResult<u32> {
        let before = self.next_ns;
        let r = self.make_clone(src, excludes, info, top);
        if let Err(e) = &r {
            if self.next_ns != before {
                let why = format!("a clone failed half way (errno {e})");
                log::error!("{why}; refusing changes until remount");
                self.vol.failed = Some(why);
            }
        }
        r
    }

    /// Builds the namespace of a clone of `src` and stages its record in the namespace table.
    /// Refusals (bad excluded paths, too many namespaces) come before anything changes.
    /// With `top`, the clone's top directory is that user's (`ForUser::own`).
    fn make_clone(&mut self, src: Ino, excludes: &[Vec<Vec<u8>>], mut info: NsInfo, top: Option<ForUser>) -> FsResult<u32> {
        let sns = self.node(src)?.ns;
        // What hides privileges in the source hides them in its copies (a user's snapshot
        // of their clone, anyone's clone of it); who made the copy stays who asked for it.
        debug_assert!(info.made_by.is_none() || info.made_by == info.masked_for, "made by one user, for another");
        if info.masked_for.is_none() {
            info.masked_for = self.namespaces.get(&sns).and_then(|n| n.info.masked_for);
        }
        // What the clone's summary will hold: S's, less what the excluded names bring.
        let mut sum = self.summary_of(src)?;
        let mut cut: Vec<Vec<Vec<u8>>> = Vec::new();
        for ex in excludes {
            let Some((last, dirs)) = ex.split_last() else { continue };
            let mut cur = src;
            for d in dirs {
                cur = self.child(cur, d)?.ok_or(errno::ENOENT)?;
                if self.node(cur)?.inode.kind != Kind::Dir {
                    return Err(errno::ENOTDIR);
                }
                if self.node(cur)?.ns != sns {
                    // Inside a nested clone: exclude the clone itself instead.
                    return Err(errno::EXDEV);
                }
            }
            let Some(x) = self.child(cur, last)? else {
                if cut.iter().any(|c| ex.starts_with(c)) {
                    continue;
                }
                return Err(errno::ENOENT);
            };
            if cut.iter().any(|c| ex.starts_with(c)) {
                continue;
            }
            for (k, d) in self.summary_of_name(x)? {
                let e = sum.entry(k.clone()).or_insert(0);
                *e -= d;
                if *e == 0 {
                    sum.remove(&k);
                }
            }
            cut.retain(|c| !c.starts_with(ex));
            cut.push(ex.clone());
        }

        let id = self.next_ns;
        // st_ino is (namespace - 1) << 40 | oid below the bits the volume's routing keeps.
        if id >= self.ns_limit {
            return Err(errno::ENOSPC);
        }
        self.next_ns += 1;
        let s = self.node(src)?;
        let mut root = s.inode.clone();
        if let Some(u) = top {
            u.own(&mut root);
        }
        let a = &self.namespaces[&sns];
        let (a_links, next_oid) = (a.link_root, a.next_oid);
        let mut link_ops: Vec<Op> = Vec::new();
        let mut nested: Vec<(u64, u32)> = Vec::new();
        let mut inodes: u64 = if root.oid == ROOT_OID { a.inodes } else { 0 };
        // Whether every hard-linked file of the source namespace lies in the clone with all
        // its names: then the clone's link table is the source's, shared by one reference.
        // Otherwise it gets its own records, which copy the small files' inline bytes.
        let mut same_links = true;
        let mut linked = Vec::new();
        for (k, c) in &sum {
            let (tag, oid) = summary_key_parts(k).map_err(eio)?;
            match tag {
                b'L' => {
                    let v = self
                        .vol
                        .forest
                        .get(a_links.as_ref(), &oid_key(oid))
                        .map_err(eio)?
                        .ok_or_else(|| {
                            log::error!(
                                "summary names linked oid {oid} of namespace {sns}, absent from its link table"
                            );
                            errno::EIO
                        })?;
                    let mut i = inode_from_value(&v).map_err(eio)?;
                    same_links &= i.nlink as i64 == *c;
                    i.nlink = *c as u32;
                    linked.push(i);
                }
                b'M' => {
                    let child = *self.namespaces[&sns].mounts.get(&oid).ok_or(errno::EIO)?;
                    nested.push((oid, child));
                }
                _ => {}
            }
        }
        if root.oid != ROOT_OID || !cut.is_empty() {
            // Not the whole namespace: the count is unknown without a walk; it starts from
            // the files that carry their own count and is corrected by `scion check --fix`.
            inodes = 1;
        }
        let mut table_len = 0;
        if same_links && !linked.is_empty() {
            self.vol
                .forest
                .scan(a_links.as_ref(), &[], &mut |_, _| {
                    table_len += 1;
                    table_len <= linked.len()
                })
                .map_err(eio)?;
        }
        let link_root = if same_links && !linked.is_empty() && table_len == linked.len() {
            self.vol
                .forest
                .inc(a_links.as_ref().expect("linked files have a table"));
            a_links
        } else {
            for i in &linked {
                for p in i.ptrs() {
                    self.vol.forest.refs.inc(&p);
                }
                link_ops.push((oid_key(i.oid), Some(inode_to_value(i))));
            }
            self.vol.forest.apply(None, link_ops).map_err(eio)?
        };
        for p in root.ptrs() {
            self.vol.forest.refs.inc(&p);
        }
        let mut mounts = BTreeMap::new();
        for (oid, child) in nested {
            let croot = self.namespaces[&child].root;
            let cinfo = self.namespaces[&child].info.clone();
            // Nested clones come along as they are, tops included (as their own `cp -a`
            // would copy them: the tops of what it copies keep their owners too).
            let new = self.make_clone(
                croot,
                &[],
                NsInfo {
                    kind: NsKind::Clone,
                    parent: id,
                    anchor: oid,
                    name: Vec::new(),
                    origin: cinfo.origin,
                    created: Ts::now(),
                    scheduled: false,
                    masked_for: info.made_by,
                    made_by: info.made_by,
                },
                None,
            )?;
            mounts.insert(oid, new);
        }
        let rec = NsRecord {
            root: root.clone(),
            link_root,
            next_oid,
            inodes,
            info: info.clone(),
            mounts: mounts.clone(),
        };
        // Staged in the table now (the record owns the references taken above); committed
        // by the caller's checkpoint.
        let old = self.ns_root;
        self.ns_root = self
            .vol
            .forest
            .apply(old.as_ref(), vec![(ns_key(id), Some(ns_to_value(&rec)))])
            .map_err(eio)?;
        if let Some(old) = old {
            self.vol.forest.release(&old).map_err(eio)?;
        }
        let rino = make_ino(id, root.oid);
        self.nodes.insert(rino, Box::new(Node::new_root(root, id)));
        self.namespaces.insert(
            id,
            Namespace {
                root: rino,
                link_root,
                links: BTreeMap::new(),
                next_oid,
                inodes,
                dirty: false,
                info,
                mounts,
                mounted_at: None,
            },
        );
        // Excluded names leave the clone's copy of their directories (path copying only).
        for ex in cut {
            let (last, dirs) = ex.split_last().unwrap();
            let mut cur = rino;
            for d in dirs {
                cur = self.child(cur, d)?.ok_or(errno::EIO)?;
            }
            let contrib = self.raw_contribution(cur, last)?;
            let is_dir = contrib.1;
            let q = self.node_mut(cur)?;
            q.entries.insert(last.clone(), None);
            if is_dir {
                q.inode.nlink -= 1;
            }
            self.touch(cur);
            for (k, d) in contrib.0 {
                self.bump(cur, &k, -d)?;
            }
        }
        Ok(id)
    }

    /// What the stored entry `name` of `dir` adds to the summaries above it, and whether it
    /// is a directory (read without loading it: in a clone being built, a linked name may
    /// have no record in the new link table).
    fn raw_contribution(&self, dir: Ino, name: &[u8]) -> FsResult<(BTreeMap<Vec<u8>, i64>, bool)> {
        let n = self.node(dir)?;
        let v = self
            .vol
            .forest
            .get(n.inode.content.as_ref(), name)
            .map_err(eio)?
            .ok_or(errno::EIO)?;
        Ok(match EntryRecord::from_value(&v).map_err(eio)? {
            EntryRecord::Inline(i) if i.kind == Kind::Dir => (self.stored_summary(i.summary.as_ref())?, true),
            EntryRecord::Inline(_) => (BTreeMap::new(), false),
            EntryRecord::Linked { oid, .. } => ([(summary_link_key(oid), 1)].into(), false),
            EntryRecord::Mount { oid } => ([(summary_mount_key(oid), 1)].into(), true),
        })
    }

    /// Forgets a namespace and everything nested in it; its record leaves the namespace
    /// table at the next checkpoint, which releases what only it held.
    pub(crate) fn destroy_ns(&mut self, id: u32) -> FsResult<()> {
        if id == 1 {
            return Err(errno::EPERM);
        }
        let Some(ns) = self.namespaces.remove(&id) else {
            return Err(errno::ENOENT);
        };
        let snaps: Vec<u32> = self
            .namespaces
            .iter()
            .filter(|(_, n)| n.info.kind == NsKind::Snapshot && n.info.parent == id)
            .map(|(i, _)| *i)
            .collect();
        for child in ns.mounts.values().copied().chain(snaps) {
            self.destroy_ns(child)?;
        }
        for ino in self.nodes.in_ns(id) {
            let n = self.nodes.get_mut(&ino).unwrap();
            // The kernel must drop what it cached of the clone (names, attributes, pages):
            // a process inside it finds its directory stale instead of writing into it.
            if n.lookups > 0 {
                if let Loc::Entry { parent, name } = &n.loc {
                    self.kernel_inval.push(Inval::Entry(*parent, name.clone()));
                }
                self.kernel_inval.push(Inval::Inode(ino));
            }
            n.loc = Loc::Gone;
            n.entries.clear();
            n.sum_delta.clear();
            n.inode.nlink = 0;
            if n.opens > 0 {
                self.orphans.insert(ino);
            }
            self.dirty.insert(ino);
            self.maybe_evict(ino);
        }
        self.dropped_ns.push(id);
        Ok(())
    }

    /// The top directory of clone or snapshot `id`.
    pub fn ns_root(&self, id: u32) -> Option<Ino> {
        self.namespaces.get(&id).filter(|_| id != 1).map(|n| n.root)
    }

    /// The ids of every clone and snapshot.
    pub fn namespace_ids(&self) -> Vec<u32> {
        self.namespaces.keys().copied().filter(|id| *id != 1).collect()
    }

    /// What clone or snapshot `id` is, who made it and for whom.
    pub fn ns_info(&self, id: u32) -> Option<&NsInfo> {
        self.namespaces.get(&id).filter(|_| id != 1).map(|n| &n.info)
    }

    /// Where clone or snapshot `id` is seen from the mount root: its path, or
    /// `.snapshot/@ID` for an orphaned snapshot (None if neither: it hangs nowhere).
    pub fn ns_path(&mut self, id: u32) -> Option<Vec<u8>> {
        let n = self.namespaces.get(&id).filter(|_| id != 1)?;
        let (root, info) = (n.root, n.info.clone());
        match self.path_of_dir(root) {
            Ok(p) => Some(p),
            Err(_) if info.kind == NsKind::Snapshot => self.orphan_path(info.parent, id),
            Err(_) => None,
        }
    }

    /// Snapshots `uid` made: a user's share of the snapshot table.
    pub fn snapshots_made_by(&self, uid: u32) -> usize {
        self.namespaces
            .values()
            .filter(|n| n.info.kind == NsKind::Snapshot && n.info.made_by == Some(uid))
            .count()
    }

    /// The clones and snapshots a destroy of namespace `id` takes with it: clones mounted in
    /// its tree and snapshots of its directories, and theirs, and so on.
    pub fn nested_namespaces(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut todo = vec![id];
        while let Some(p) = todo.pop() {
            let Some(n) = self.namespaces.get(&p) else { continue };
            let snaps = self
                .namespaces
                .iter()
                .filter(|(_, s)| s.info.kind == NsKind::Snapshot && s.info.parent == p)
                .map(|(i, _)| *i);
            let below: Vec<u32> = n.mounts.values().copied().chain(snaps).collect();
            out.extend(&below);
            todo.extend(below);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The namespace whose root `ino` is, if it is one (a clone's or snapshot's top).
    pub fn ns_at(&mut self, ino: Ino) -> Option<u32> {
        let n = self.node(ino).ok()?;
        (n.loc == Loc::Root && n.ns != 1).then_some(n.ns)
    }

    /// Destroys a clone or snapshot by namespace id.
    pub fn destroy_id(&mut self, id: u32) -> FsResult<()> {
        if id == 1 {
            return Err(errno::EINVAL);
        }
        let root = self.namespaces.get(&id).ok_or(errno::ENOENT)?.root;
        self.destroy(root)
    }

    /// Destroys the clone or snapshot whose root is `ino`.
    pub fn destroy(&mut self, ino: Ino) -> FsResult<()> {
        self.writable()?;
        let n = self.node(ino)?;
        if n.loc != Loc::Root || n.ns == 1 {
            return Err(errno::EINVAL);
        }
        let id = n.ns;
        let info = self.namespaces.get(&id).ok_or(errno::ENOENT)?.info.clone();
        match info.kind {
            NsKind::Clone => {
                // Its mount entry: where the kernel reached it, or found through summaries.
                let (parent, name) = match self.namespaces[&id].mounted_at.clone() {
                    Some(m) => m,
                    None => self.find_named(info.parent, &summary_mount_key(info.anchor))?,
                };
                self.rw(parent)?;
                let now = Ts::now();
                self.kernel_inval.push(Inval::Entry(parent, name.clone()));
                self.kernel_inval.push(Inval::Inode(parent));
                self.drop_name(parent, ino, now)?;
                let p = self.node_mut(parent)?;
                p.entries.insert(name, None);
                p.inode.mtime = now;
                p.inode.ctime = now;
                self.touch(parent);
            }
            NsKind::Snapshot => {
                self.destroy_ns(id)?;
                if let Ok((parent, name)) = self.find_named(info.parent, &summary_snap_key(info.anchor)) {
                    if let Some(dir) = self.child(parent, &name)? {
                        self.bump(dir, &summary_snap_key(info.anchor), -1)?;
                        self.kernel_inval
                            .push(Inval::Entry(dir | SNAPDIR_BIT, info.name.clone()));
                    }
                } else if let Some(dir) = self.namespaces.get(&info.parent).map(|n| n.root) {
                    // The snapshot of a namespace root.
                    if self.node(dir)?.inode.oid == info.anchor {
                        self.bump(dir, &summary_snap_key(info.anchor), -1)?;
                        self.kernel_inval
                            .push(Inval::Entry(dir | SNAPDIR_BIT, info.name.clone()));
                    }
                }
            }
            NsKind::Main => return Err(errno::EINVAL),
        }
        self.checkpoint().map_err(eio)?;
        Ok(())
    }

    /// Finds, below the root of namespace `ns`, the entry that a summary key points at (the
    /// mount entry of `M` + oid, the directory of `S` + oid): (its directory, its name).
    /// Follows the summaries down, so it reads one path, not the tree.
    pub(crate) fn find_named(&mut self, ns: u32, key: &[u8]) -> FsResult<(Ino, Vec<u8>)> {
        let (tag, oid) = summary_key_parts(key).map_err(eio)?;
        let mut cur = self.namespaces.get(&ns).ok_or(errno::ENOENT)?.root;
        'down: loop {
            let names: Vec<(Vec<u8>, Kind)> = self
                .readdir(cur)?
                .into_iter()
                .filter(|e| e.kind == Kind::Dir)
                .map(|e| (e.name, e.kind))
                .collect();
            for (name, _) in names {
                let Some(c) = self.child(cur, &name)? else { continue };
                let cn = self.node(c)?;
                if cn.loc == Loc::Root && cn.ns != ns {
                    // A clone's mount entry, seen on the way: where it hangs is noted, as a
                    // lookup through it would (`connect`), so that naming it later needs no
                    // search; `scion list` searched once per clone, each a walk of the
                    // directory the clones hang in.
                    let id = cn.ns;
                    if let Some(m) = self.namespaces.get_mut(&id).filter(|m| m.mounted_at.is_none() && m.info.kind == NsKind::Clone && m.info.parent == ns) {
                        m.mounted_at = Some((cur, name.clone()));
                    }
                }
                let cn = self.node(c)?;
                let here = match tag {
                    b'M' => cn.loc == Loc::Root && self.namespaces.get(&cn.ns).map(|n| n.info.anchor) == Some(oid),
                    _ => cn.ns == ns && cn.inode.oid == oid,
                };
                if here {
                    return Ok((cur, name));
                }
                if cn.ns == ns && self.summary_of(c)?.contains_key(key) {
                    cur = c;
                    continue 'down;
                }
            }
            return Err(errno::ENOENT);
        }
    }

    /// The directory snapshot `info` was taken of, found by the mark in the summaries of its
    /// namespace (ENOENT: it is gone, the snapshot orphaned).
    fn snapshotted_dir(&mut self, info: &NsInfo) -> FsResult<Ino> {
        let ns = info.parent;
        let root = self.namespaces.get(&ns).ok_or(errno::ENOENT)?.root;
        if self.node(root)?.inode.oid == info.anchor {
            return Ok(root);
        }
        let (p, name) = self.find_named(ns, &summary_snap_key(info.anchor))?;
        self.child(p, &name)?.ok_or(errno::ENOENT)
    }

    /// Every namespace's path (`path_of_dir` of its root; None where it has none, a
    /// snapshot orphaned). The directory of many snapshots is found once for all of them:
    /// each search of the summaries costs ~0.2 ms under the engine lock, and `scion list`
    /// of 3,400 snapshots of one directory held every request up 0.65-0.75 s (issue 38).
    pub(crate) fn namespace_paths(&mut self) -> HashMap<u32, Option<Vec<u8>>> {
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        let mut snapshotted: HashMap<(u32, u64), Option<Vec<u8>>> = HashMap::new();
        let mut out = HashMap::with_capacity(ids.len());
        for id in ids {
            let (info, root) = {
                let n = &self.namespaces[&id];
                (n.info.clone(), n.root)
            };
            let path = match info.kind {
                NsKind::Snapshot => {
                    let key = (info.parent, info.anchor);
                    if !snapshotted.contains_key(&key) {
                        let dir = self.snapshotted_dir(&info).and_then(|d| self.path_of_dir(d)).ok();
                        snapshotted.insert(key, dir);
                    }
                    snapshotted[&key].as_ref().map(|d| snapshot_path(d, &info.name))
                }
                _ => self.path_of_dir(root).ok(),
            };
            out.insert(id, path);
        }
        out
    }

    /// Path of a loaded directory from the mount root ("" for the root).
    pub fn path_of_dir(&mut self, mut dir: Ino) -> FsResult<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        loop {
            let n = self.node(dir)?;
            match &n.loc {
                Loc::Entry { parent, name } => {
                    names.push(name.clone());
                    dir = *parent;
                }
                Loc::Root if n.ns == 1 => break,
                Loc::Root => {
                    let info = self.namespaces.get(&n.ns).ok_or(errno::EIO)?.info.clone();
                    match info.kind {
                        NsKind::Clone => {
                            let (p, name) = match self.namespaces[&n.ns].mounted_at.clone() {
                                Some(m) => m,
                                None => self.find_named(info.parent, &summary_mount_key(info.anchor))?,
                            };
                            names.push(name);
                            dir = p;
                        }
                        _ => {
                            names.push(info.name.clone());
                            names.push(SNAPDIR_NAME.to_vec());
                            dir = self.snapshotted_dir(&info)?;
                        }
                    }
                }
                _ => return Err(errno::ENOENT),
            }
        }
        names.reverse();
        Ok(names.join(&b'/'))
    }

    /// Every clone and snapshot, with its space: referenced bytes and the bytes only it holds.
    pub fn list(&mut self) -> FsResult<Vec<Listing>> {
        self.list_pinned()?.count().map_err(eio)
    }

    /// `list` in two steps, so that a daemon holds its engine only for the first: the
    /// committed state is pinned (a checkpoint first) with what accounting needs (each
    /// namespace's roots, a copy of the reference counts); `PinnedList::count` then walks
    /// the trees without the engine.
    pub fn list_pinned(&mut self) -> FsResult<PinnedList> {
        let (pinned, mut paths) = self.pin_with_paths()?;
        let ids: Vec<u32> = self.namespaces.keys().copied().filter(|i| *i != 1).collect();
        // Small overwrites the checkpoint carried in the journal instead of the trees
        // (copy-on-abundant-write) are the clone's own too: its files' patches.
        let mut carried_of: HashMap<u32, u64> = HashMap::new();
        for n in self.carried.iter().filter_map(|i| self.nodes.get(i)) {
            *carried_of.entry(n.ns).or_default() += chunk_bytes(n);
        }
        let mut rows = Vec::new();
        for id in ids {
            let n = &self.namespaces[&id];
            let info = n.info.clone();
            let root = n.root;
            let link_root = n.link_root;
            let mut path = paths.remove(&id).flatten();
            let orphaned = path.is_none() && info.kind == NsKind::Snapshot;
            if orphaned {
                path = self.orphan_path(info.parent, id);
            }
            let mut roots: Vec<BlockPtr> = self.node(root)?.inode.ptrs();
            roots.extend(link_root);
            let carried = carried_of.get(&id).copied().unwrap_or(0);
            let listing = Listing {
                ns: id,
                kind: info.kind,
                path,
                origin: info.origin,
                created: info.created,
                referenced: carried,
                exclusive: carried,
                stored: carried,
                scheduled: info.scheduled,
                orphaned,
            };
            rows.push((listing, roots));
        }
        Ok(PinnedList {
            forest: self.vol.forest.view(),
            refs: self.vol.forest.refs.clone(),
            rows,
            _pinned: pinned,
        })
    }
}

/// `DIR/.snapshot/NAME`, as `path_of_dir` names a snapshot's root (`DIR` a path from the
/// mount's root, empty for the root itself).
fn snapshot_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(SNAPDIR_NAME);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// The committed state `list` accounts for, pinned, with what the accounting needs.
pub struct PinnedList {
    forest: scion_tree::Forest,
    refs: scion_tree::RefTable,
    rows: Vec<(Listing, Vec<BlockPtr>)>,
    _pinned: crate::pinned::Pinned,
}

impl PinnedList {
    /// Walks each clone's and snapshot's trees (no engine lock needed): REFER is every block
    /// reachable from it, USED the blocks reachable only through blocks with a single
    /// reference, which is what destroying it frees.
    pub fn count(self) -> Result<Vec<Listing>> {
        let mut out = Vec::with_capacity(self.rows.len());
        for (mut l, roots) in self.rows {
            let (mut seen, mut seen_x) = (HashSet::new(), HashSet::new());
            for r in &roots {
                let store = &self.forest.store;
                walk_blocks(&self.forest, &self.refs, r, false, &mut seen, &mut |p| {
                    l.referenced += p.footprint();
                    l.stored += store.stored_footprint(p);
                })?;
                walk_blocks(&self.forest, &self.refs, r, true, &mut seen_x, &mut |p| {
                    l.exclusive += p.footprint()
                })?;
            }
            out.push(l);
        }
        Ok(out)
    }
}

/// Calls `f` on every block reachable from `root` that is not in `seen` yet, and adds it
/// there (with `exclusive`, only blocks with a single reference, reached through blocks with
/// a single reference).
pub(crate) fn walk_blocks(
    forest: &scion_tree::Forest,
    refs: &scion_tree::RefTable,
    root: &BlockPtr,
    exclusive: bool,
    seen: &mut HashSet<u64>,
    f: &mut dyn FnMut(&BlockPtr),
) -> Result<()> {
    let mut stack = vec![*root];
    while let Some(p) = stack.pop() {
        if (exclusive && refs.get(p.addr) > 1) || !seen.insert(p.addr) {
            continue;
        }
        f(&p);
        if p.kind != BlockKind::Node {
            continue;
        }
        let (mut nodes, mut values) = (Vec::new(), Vec::new());
        let mut first = true;
        forest.walk(
            &p,
            &mut |q| {
                if std::mem::replace(&mut first, false) {
                    return true;
                }
                nodes.push(*q);
                false
            },
            &mut |_, v| {
                values.extend(v.ptrs.iter().copied());
                Ok(())
            },
        )?;
        stack.extend(nodes);
        stack.extend(values);
    }
    Ok(())
}

// ----- the virtual `.snapshot` directories ------------------------------------------------

impl Fs {
    /// Attributes of `dir/.snapshot`: read-only, owned as `dir` is.
    pub(crate) fn snapdir_attr(&self, dir: Ino) -> FsResult<Attr> {
        let n = self.dir_node(dir)?;
        let i = &n.inode;
        Ok(Attr {
            ino: dir | SNAPDIR_BIT,
            kind: Kind::Dir,
            perm: 0o555,
            nlink: 2,
            uid: i.uid,
            gid: i.gid,
            rdev: 0,
            size: 0,
            blocks: 0,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            btime: i.btime,
            linked: false,
        })
    }

    /// The snapshots that contain `dir`: (name, the names leading from the snapshotted
    /// directory down to `dir`, snapshot namespace), nearest first.
    fn snapshots_containing(&self, dir: Ino) -> FsResult<Vec<(Vec<u8>, Vec<Vec<u8>>, u32)>> {
        self.snapshots_containing_named(dir, None)
    }

    /// `snapshots_containing`, only those named `only` when given (what a lookup needs: the
    /// nearest one of that name). A directory may have thousands of scheduled snapshots, so
    /// names are checked against a set, not against the list so far.
    fn snapshots_containing_named(&self, dir: Ino, only: Option<&[u8]>) -> FsResult<Vec<(Vec<u8>, Vec<Vec<u8>>, u32)>> {
        let mut out = Vec::new();
        let mut names: HashSet<Vec<u8>> = HashSet::new();
        let mut below: Vec<Vec<u8>> = Vec::new();
        let mut cur = dir;
        loop {
            let n = self.node(cur)?;
            for (id, name) in self.snapshots_of(n.ns, n.inode.oid) {
                if only.is_some_and(|o| o != name.as_slice()) {
                    continue;
                }
                if names.insert(name.clone()) {
                    let mut path = below.clone();
                    path.reverse();
                    out.push((name, path, id));
                    if only.is_some() {
                        return Ok(out);
                    }
                }
            }
            match &n.loc {
                Loc::Entry { parent, name } => {
                    below.push(name.clone());
                    cur = *parent;
                }
                _ => return Ok(out),
            }
        }
    }

    /// `dir/.snapshot/name`: `dir` as it was in that snapshot. With a `caller`, only if it
    /// could then search every directory from the snapshot's root down to `dir` (EACCES
    /// otherwise): the kernel checks today's path and the snapshot's `dir` itself, not the
    /// directories between them as they were.
    pub(crate) fn snapdir_child(&mut self, dir: Ino, name: &[u8], caller: Option<&Caller>) -> FsResult<Ino> {
        let Some((_, path, id)) = self.snapshots_containing_named(dir, Some(name))?.into_iter().next() else {
            return self.orphan_child(dir, name, caller);
        };
        self.snapshot_child(dir, name, &path, id, caller)
    }

    /// `snapdir_child` of snapshot `id` named `name`, found `path` above `dir` (the names
    /// from the snapshotted directory down to `dir`).
    fn snapshot_child(&mut self, dir: Ino, name: &[u8], path: &[Vec<u8>], id: u32, caller: Option<&Caller>) -> FsResult<Ino> {
        let mut cur = self.namespaces.get(&id).ok_or(errno::ENOENT)?.root;
        for n in path {
            if let Some(c) = caller {
                if !may_search(c, &self.dir_node(cur)?.inode) {
                    return Err(errno::EACCES);
                }
            }
            cur = self.child(cur, n)?.ok_or(errno::ENOENT)?;
        }
        // `path` is today's names. The snapshot's directory there is `dir` as it was only if
        // it is the same directory: same object, in the snapshot's own tree (not a clone
        // nested in it). Otherwise another directory now has that path: one made since
        // (perhaps by another user, below a directory that was private then), and showing
        // the snapshot's old directory through it would skip the permissions that guarded
        // the path when the snapshot was taken.
        let (then, now) = (self.node(cur)?, self.dir_node(dir)?);
        if then.inode.kind != Kind::Dir || then.ns != id || then.inode.oid != now.inode.oid {
            return Err(errno::ENOENT);
        }
        if path.is_empty() {
            self.namespaces.get_mut(&id).ok_or(errno::EIO)?.mounted_at = Some((dir | SNAPDIR_BIT, name.to_vec()));
        }
        Ok(cur)
    }

    pub(crate) fn snapdir_list(&mut self, dir: Ino) -> FsResult<Vec<DirEntry>> {
        // Each snapshot resolved as found, not looked up again by name: a lookup goes
        // through every namespace, and a `.snapshot` of 3,000 held the engine lock 150-190 ms.
        let mut found: Vec<(Vec<u8>, FsResult<Ino>)> = Vec::new();
        for (name, path, id) in self.snapshots_containing(dir)? {
            let ino = self.snapshot_child(dir, &name, &path, id, None);
            found.push((name, ino));
        }
        if self.dir_node(dir)?.loc == Loc::Root {
            for name in self.orphans_of(self.node(dir)?.ns)?.into_iter().map(orphan_name) {
                let ino = self.snapdir_child(dir, &name, None);
                found.push((name, ino));
            }
        }
        let mut out: Vec<DirEntry> = found
            .into_iter()
            .filter_map(|(name, ino)| Some(DirEntry { name, ino: ino.ok()?, kind: Kind::Dir }))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

// ----- orphaned snapshots: their directory was removed -----------------------------------

/// The name an orphaned snapshot has in `.snapshot` of its namespace's root: `@ID`, the id
/// `scion list` shows and `scion destroy @ID` takes. New snapshot names may not begin with
/// '@'; one an older build let through is found first.
pub fn orphan_name(id: u32) -> Vec<u8> {
    format!("@{id}").into_bytes()
}

impl Fs {
    /// Snapshots of directories of namespace `ns` that are no longer in its tree (`rm -rf`
    /// of a directory that had snapshots), in id order. A directory's snapshot marks are
    /// counted in the summaries of every directory above it: a mark missing from the root's
    /// summary is a directory gone. Marks are hints (a removed directory's may linger), so
    /// one that is there is followed down to its directory.
    pub fn orphans_of(&mut self, ns: u32) -> FsResult<Vec<u32>> {
        let Some(n) = self.namespaces.get(&ns) else { return Ok(Vec::new()) };
        let marks = self.summary_of(n.root)?;
        let mut ids: Vec<u32> = self
            .namespaces
            .iter()
            .filter(|(_, s)| s.info.kind == NsKind::Snapshot && s.info.parent == ns)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        for id in ids {
            if self.orphaned_by(ns, id, &marks)? {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Whether snapshot `id` is one of `orphans_of(ns)`.
    fn is_orphan_of(&mut self, ns: u32, id: u32) -> FsResult<bool> {
        let Some(n) = self.namespaces.get(&ns) else { return Ok(false) };
        let marks = self.summary_of(n.root)?;
        self.orphaned_by(ns, id, &marks)
    }

    /// Whether snapshot `id` was taken of a directory of namespace `ns` that is gone, given
    /// the marks of `ns`'s root summary.
    fn orphaned_by(&mut self, ns: u32, id: u32, marks: &BTreeMap<Vec<u8>, i64>) -> FsResult<bool> {
        let (Some(s), Some(p)) = (self.namespaces.get(&id), self.namespaces.get(&ns)) else { return Ok(false) };
        let (kind, parent, anchor, root) = (s.info.kind, s.info.parent, s.info.anchor, p.root);
        if kind != NsKind::Snapshot || parent != ns || self.node(root)?.inode.oid == anchor {
            return Ok(false);
        }
        let key = summary_snap_key(anchor);
        Ok(!marks.contains_key(&key) || self.find_named(ns, &key).is_err())
    }

    /// Where orphaned snapshot `id` of namespace `ns` is browsed, from the mount root.
    fn orphan_path(&mut self, ns: u32, id: u32) -> Option<Vec<u8>> {
        let root = self.namespaces.get(&ns)?.root;
        let mut p = self.path_of_dir(root).ok()?;
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(SNAPDIR_NAME);
        p.push(b'/');
        p.extend(orphan_name(id));
        Some(p)
    }

    /// `ROOT/.snapshot/@ID`, the tree of orphaned snapshot ID of the namespace whose root is
    /// `dir`. The directories that guarded its path are gone with it, so a `caller` other
    /// than root must own the snapshotted directory (EACCES otherwise).
    fn orphan_child(&mut self, dir: Ino, name: &[u8], caller: Option<&Caller>) -> FsResult<Ino> {
        let id: u32 = match name.strip_prefix(b"@").map(std::str::from_utf8) {
            Some(Ok(digits)) if !digits.starts_with('+') => digits.parse().map_err(|_| errno::ENOENT)?,
            _ => return Err(errno::ENOENT),
        };
        let n = self.dir_node(dir)?;
        if n.loc != Loc::Root || !self.is_orphan_of(n.ns, id)? {
            return Err(errno::ENOENT);
        }
        let root = self.namespaces.get(&id).ok_or(errno::ENOENT)?.root;
        if let Some(c) = caller {
            if c.uid != 0 && c.uid != self.dir_node(root)?.inode.uid {
                return Err(errno::EACCES);
            }
        }
        self.namespaces.get_mut(&id).ok_or(errno::EIO)?.mounted_at = Some((dir | SNAPDIR_BIT, name.to_vec()));
        Ok(root)
    }
}

/// The directory part and the last name of a path from the mount root (`a/b` and `c` of
/// `a/b/c/`; an empty directory part for a name alone).
pub fn split_path(path: &[u8]) -> (&[u8], &[u8]) {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    }
}

impl Fs {
    /// The inode at `path` (names separated by '/', from the mount root; `.snapshot` and
    /// `..` understood). Takes no kernel reference.
    pub fn resolve_path(&mut self, path: &[u8]) -> FsResult<Ino> {
        self.resolve_path_as(path, None)
    }

    /// `resolve_path` as `caller` would walk it: EACCES where a directory on the way does not
    /// let them search it (a snapshot's as it was when taken, as a lookup through
    /// `.snapshot` checks it).
    pub fn resolve_path_as(&mut self, path: &[u8], caller: Option<&Caller>) -> FsResult<Ino> {
        let mut cur = ROOT_INO;
        for name in path.split(|b| *b == b'/') {
            if let (Some(c), false, true) = (caller, name.is_empty() || name == b".", cur & SNAPDIR_BIT == 0) {
                if !may_search(c, &self.dir_node(cur)?.inode) {
                    return Err(errno::EACCES);
                }
            }
            match name {
                b"" | b"." => {}
                b".." => {
                    if cur & SNAPDIR_BIT == 0 {
                        self.dir_node(cur)?;
                    }
                    cur = self.parent_of(cur)
                }
                _ if cur & SNAPDIR_BIT != 0 => cur = self.snapdir_child(cur & !SNAPDIR_BIT, name, caller)?,
                SNAPDIR_NAME => {
                    self.dir_node(cur)?;
                    cur |= SNAPDIR_BIT;
                }
                _ => {
                    if self.node(cur)?.inode.kind != Kind::Dir {
                        return Err(errno::ENOTDIR);
                    }
                    cur = self.child(cur, name)?.ok_or(errno::ENOENT)?;
                }
            }
        }
        Ok(cur)
    }

    /// The directory and last name of `path`.
    pub fn resolve_parent(&mut self, path: &[u8]) -> FsResult<(Ino, Vec<u8>)> {
        self.resolve_parent_as(path, None)
    }

    /// `resolve_parent`, the directory walked as `caller` would (see `resolve_path_as`).
    pub fn resolve_parent_as(&mut self, path: &[u8], caller: Option<&Caller>) -> FsResult<(Ino, Vec<u8>)> {
        let (dir, name) = split_path(path);
        if name.is_empty() || name == b"." || name == b".." {
            return Err(errno::EINVAL);
        }
        Ok((self.resolve_path_as(dir, caller)?, name.to_vec()))
    }

    /// Refuses writes to a read-only namespace (checked at open, since with writeback
    /// caching a write error would only surface at writeback, too late).
    pub fn check_writable(&self, ino: Ino) -> FsResult<()> {
        if ino & SNAPDIR_BIT != 0 {
            return Err(errno::EROFS);
        }
        self.rw(ino)
    }
}
