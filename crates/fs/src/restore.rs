//! Restore: a file or directory put back as a snapshot held it (`scion restore`), sharing
//! the snapshot's blocks. Each file costs its records and one reference per chunk
//! (`copy_range` shares committed chunks), never a copy of its data; the tree is rebuilt with
//! every owner, mode, time, extended attribute and hard link (within what is restored) as
//! the snapshot holds them, as `cp -a` would. What stood at the destination is kept beside it
//! (`NAME.scion-restore-<time>`) unless it is to be replaced.
//!
//! Each step is journaled as the operation it is (create, copy, setattr), so a crash part
//! way leaves a partly restored tree at the destination and the set-aside original intact.
//! A restore that fails (refused part way, or the disk full) removes what it made and puts
//! back what it set aside.
//!
//! For an ordinary user (`restore_as`), the copy is what their own `cp -a` would make: every
//! file and directory copied must be readable to them (EACCES names the first that is not),
//! what they do not own becomes theirs (the group stays if they are in it) and loses its
//! setuid and setgid bits, `security.*` and `trusted.*` attributes are left out, and a
//! device node refuses the whole restore (EPERM), as only root may make one.

use crate::access::{Caller, R, X};
use crate::clone::SNAPDIR_NAME;
use crate::error::errno;
use crate::fs::{Fs, Ino, Loc};
use crate::inode::{Kind, Ts};
use crate::{FsResult, SetAttr};
use std::collections::HashMap;

/// Directories nest at most this deep in what is restored.
const MAX_DEPTH: usize = 2048;

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub files: u64,
    pub dirs: u64,
    pub others: u64,
    /// Bytes of file data now shared with the snapshot.
    pub bytes: u64,
    /// Where what stood at the destination was put (`None`: nothing was there, or it was
    /// replaced).
    pub kept_as: Option<Vec<u8>>,
}

impl Fs {
    /// Puts `src` (a path from the mount root, usually inside a `.snapshot`) at `dst`.
    /// Whatever is at `dst` is renamed to `dst.scion-restore-<stamp>`, or removed with
    /// `replace`.
    pub fn restore(&mut self, src: &[u8], dst: &[u8], replace: bool, stamp: &str) -> FsResult<RestoreReport> {
        self.restore_as(src, dst, replace, stamp, None)
    }

    /// `restore` for ordinary user `who` if given (see the module comment): paths walked
    /// with their search permissions, the copy as their `cp -a` would make it. For them,
    /// what stands at the destination must be theirs, and is never removed (`replace`
    /// refused with EPERM).
    pub fn restore_as(
        &mut self,
        src: &[u8],
        dst: &[u8],
        replace: bool,
        stamp: &str,
        who: Option<&Caller>,
    ) -> FsResult<RestoreReport> {
        self.writable()?;
        if who.is_some() && replace {
            return Err(errno::EPERM.with("restore --replace is root's and the store owner's"));
        }
        // Every inode the restore works on is held by a lookup reference while it does:
        // the changes it makes may take a checkpoint, which drops unreferenced inodes.
        let from = self.resolve_path_as(src, who)?;
        self.remember(from)?;
        let r = self.restore_from(from, dst, replace, stamp, who);
        self.forget(from, 1);
        r
    }

    fn restore_from(
        &mut self,
        from: Ino,
        dst: &[u8],
        replace: bool,
        stamp: &str,
        who: Option<&Caller>,
    ) -> FsResult<RestoreReport> {
        // Walked as the user, for their search permissions on the way.
        let (parent, name) = self.resolve_parent_as(dst, who)?;
        if let (Some(w), Some(there)) = (who, self.child(parent, &name)?) {
            if self.getattr(there)?.uid != w.uid {
                return Err(errno::EPERM.with("what stands at the destination is not yours"));
            }
        }
        self.remember(parent)?;
        let r = self.restore_into(from, parent, dst, &name, replace, stamp, who);
        self.forget(parent, 1);
        r
    }

    fn restore_into(
        &mut self,
        from: Ino,
        parent: Ino,
        dst: &[u8],
        name: &[u8],
        replace: bool,
        stamp: &str,
        who: Option<&Caller>,
    ) -> FsResult<RestoreReport> {
        let name = name.to_vec();
        if name.is_empty() || name == SNAPDIR_NAME {
            return Err(errno::EINVAL.with("the destination must be a name in a directory"));
        }
        let mut report = RestoreReport::default();
        let mut aside = None;
        if self.child(parent, &name)?.is_some() {
            if replace {
                return self.replace_tree(from, parent, dst, &name, stamp, who);
            } else {
                // Two restores in one second: `-2`, `-3`... after the stamp.
                let mut suffix = None;
                for i in 1..1000u32 {
                    let s = if i == 1 { format!(".scion-restore-{stamp}") } else { format!(".scion-restore-{stamp}-{i}") };
                    let aside = [&name[..], s.as_bytes()].concat();
                    if self.child(parent, &aside)?.is_none() {
                        self.rename(parent, &name, parent, &aside, crate::RENAME_NOREPLACE)?;
                        suffix = Some(s);
                        break;
                    }
                }
                let s = suffix.ok_or_else(|| errno::EEXIST.with("a thousand earlier copies are kept beside the destination"))?;
                let mut p = dst.strip_suffix(b"/").unwrap_or(dst).to_vec();
                p.extend_from_slice(s.as_bytes());
                report.kept_as = Some(p);
                aside = Some(s.into_bytes());
            }
        }
        let mut links = HashMap::new();
        let r = self.copy_tree(from, parent, &name, &mut links, &mut report, 0, who);
        for made in links.into_values() {
            self.forget(made, 1);
        }
        if let Err(e) = r {
            self.undo_restore(parent, &name, aside);
            return Err(e);
        }
        Ok(report)
    }

    /// `restore --replace` of what stands at `parent/name` (at `dst`), all or nothing across
    /// a crash: the tree is built at a hidden sibling, exchanged with the old one in one step
    /// (`RENAME_EXCHANGE`, one journal record), and the old one, now at the hidden name,
    /// removed. The hidden name is recorded first (`records::intents`, synced), so what a
    /// crash leaves there, a partial copy or the old tree, is removed at the next open.
    fn replace_tree(
        &mut self,
        from: Ino,
        parent: Ino,
        dst: &[u8],
        name: &[u8],
        stamp: &str,
        who: Option<&Caller>,
    ) -> FsResult<RestoreReport> {
        use crate::records::intents::{self, Intent};
        let there = self.lookup(parent, name)?.ino;
        let in_place = self.dir_node(there).is_ok_and(|n| n.loc != Loc::Root) && self.getattr(from)?.kind == Kind::Dir;
        self.forget(there, 1);
        if in_place {
            return self.refill_dir(from, parent, dst, name, stamp);
        }
        let tmp = self.hidden_sibling(parent, name, &format!("restore-{stamp}"))?;
        let tmp_path = beside(dst)(&tmp);
        let intent = Intent::Replace { pid: std::process::id(), tmp: tmp_path.clone() };
        let (host, store) = (self.vol.host.clone(), self.vol.dir.clone());
        intents::add(&host, &store, intent.clone()).map_err(|e| errno::EIO.with(format!("restore --replace: {e}")))?;
        let mut report = RestoreReport::default();
        let mut links = HashMap::new();
        let r = self.copy_tree(from, parent, &tmp, &mut links, &mut report, 0, who);
        for made in links.into_values() {
            self.forget(made, 1);
        }
        let at = self.vol.dir.to_string_lossy().into_owned();
        crate::failpoint::hit_at("restore.copied", &at);
        let r = r.and_then(|()| self.rename(parent, &tmp, parent, name, crate::RENAME_EXCHANGE));
        crate::failpoint::hit_at("restore.exchanged", &at);
        // Either way, what is at the hidden name now goes: the old tree, or a partial copy.
        let gone = self.remove_tree(parent, &tmp, 0);
        if let Err(e) = &gone {
            log::warn!("restore --replace: /{} stays for the next mount to remove: {e}", String::from_utf8_lossy(&tmp_path));
        }
        r?;
        gone?;
        // Durable before the intent goes: the journal must not replay to a state where the
        // hidden tree is back and nothing says to remove it.
        self.fsync()?;
        intents::update(&host, &store, &intent, None).map_err(|e| errno::EIO.with(format!("restore --replace: {e}")))?;
        Ok(report)
    }

    /// Finishes what `replace_tree`s cut short by a crash left: the tree at each recorded
    /// hidden name is removed (part of the open, after the journal is replayed).
    pub(crate) fn finish_replacements(&mut self) -> FsResult<()> {
        use crate::records::intents::{self, Intent};
        let (host, store) = (self.vol.host.clone(), self.vol.dir.clone());
        let eio = |e: scion_store::Error| errno::EIO.with(format!("intents: {e}"));
        for i in intents::load(&host, &store).map_err(eio)?.intents {
            if matches!(i, Intent::Refill { .. }) {
                self.settle_refill(&i)?;
                continue;
            }
            let Intent::Replace { tmp, .. } = &i else { continue };
            if let Ok((parent, name)) = self.resolve_parent(tmp) {
                if self.child(parent, &name)?.is_some() {
                    self.remember(parent)?;
                    let r = self.remove_tree(parent, &name, 0);
                    self.forget(parent, 1);
                    r?;
                    log::info!("removed /{}, which a restore --replace cut short left", String::from_utf8_lossy(tmp));
                }
            }
            self.fsync()?;
            intents::update(&host, &store, &i, None).map_err(eio)?;
        }
        Ok(())
    }

    /// After a failed restore into `parent/name`: what it made is removed and what it set
    /// aside (as `name` + `aside`) is put back, so a refused restore (a file the user may
    /// not read, a device node they may not make, a full disk) leaves the destination as
    /// it was. Best effort: what cannot be undone is logged and left for the user to see.
    fn undo_restore(&mut self, parent: Ino, name: &[u8], aside: Option<Vec<u8>>) {
        if self.child(parent, name).ok().flatten().is_some() {
            if let Err(e) = self.remove_tree(parent, name, 0) {
                log::warn!("restore failed, and removing its partial copy failed too: {e}");
                return;
            }
        }
        if let Some(suffix) = aside {
            let set_aside = [name, &suffix[..]].concat();
            if let Err(e) = self.rename(parent, &set_aside, parent, name, crate::RENAME_NOREPLACE) {
                log::warn!("restore failed, and putting back what it set aside failed too: {e}");
            }
        }
    }

    /// Copies `from` as `name` in `parent`, sharing file data. The caller holds `from`
    /// and `parent` (lookup references); this holds each child while it copies it.
    pub(crate) fn copy_tree(
        &mut self,
        from: Ino,
        parent: Ino,
        name: &[u8],
        links: &mut HashMap<Ino, Ino>,
        report: &mut RestoreReport,
        depth: usize,
        who: Option<&Caller>,
    ) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let mut a = self.getattr(from)?;
        if let Some(w) = who {
            self.readable_to(from, &a, w)?;
            // (A character device 0:0 is a whiteout, which anyone may make: overlayfs's mark
            // of a removed name, and what a device hidden in a user's copy shows as.)
            let whiteout = a.kind == Kind::CharDev && a.rdev == 0;
            if matches!(a.kind, Kind::CharDev | Kind::BlockDev) && !whiteout {
                // Their `cp -a` fails at mknod(2): only root makes device nodes.
                let path = self.path_of_dir(parent).unwrap_or_default();
                return Err(errno::EPERM.with(format!(
                    "restore: /{}/{} is a device node, which only root may make",
                    String::from_utf8_lossy(&path),
                    String::from_utf8_lossy(name)
                )));
            }
            a = as_their_copy(a, w);
        }
        if a.kind != Kind::Dir && a.nlink > 1 {
            // Another name of a file already restored: a hard link again.
            if let Some(&made) = links.get(&from) {
                self.link(made, parent, name)?;
                return Ok(());
            }
        }
        let target = if a.kind == Kind::Symlink {
            self.readlink(from)?
        } else {
            Vec::new()
        };
        // Held by mknod's lookup reference until the end.
        let made = self
            .mknod(
                parent,
                name,
                a.kind,
                u32::from(a.perm),
                0,
                a.uid,
                a.gid,
                a.rdev,
                &target,
            )?
            .ino;
        let r = self.fill(from, made, &a, links, report, depth, who);
        if r.is_ok() && a.kind != Kind::Dir && a.nlink > 1 {
            // Kept referenced (forgotten at the end of the restore) for its other names.
            links.insert(from, made);
            return Ok(());
        }
        self.forget(made, 1);
        r
    }

    /// The content, attributes and times of `made`, a copy of `from`.
    fn fill(
        &mut self,
        from: Ino,
        made: Ino,
        a: &crate::Attr,
        links: &mut HashMap<Ino, Ino>,
        report: &mut RestoreReport,
        depth: usize,
        who: Option<&Caller>,
    ) -> FsResult<()> {
        for x in self.listxattr(from)? {
            if who.is_some() && (x.starts_with(b"security.") || x.starts_with(b"trusted.")) {
                continue; // attributes an ordinary user cannot set
            }
            let v = self.getxattr(from, &x)?;
            self.setxattr(made, &x, &v, 0)?;
        }
        match a.kind {
            Kind::Dir => {
                report.dirs += 1;
                for e in self.readdir(from)? {
                    if e.name == SNAPDIR_NAME {
                        continue;
                    }
                    let child = self.lookup(from, &e.name)?.ino;
                    let r = self.copy_tree(child, made, &e.name, links, report, depth + 1, who);
                    self.forget(child, 1);
                    r?;
                }
            }
            Kind::File => {
                report.files += 1;
                let mut at = 0;
                while at < a.size {
                    let n = self.copy_range(from, at, made, at, a.size - at)?;
                    if n == 0 {
                        return Err(errno::EIO.with(format!("restore: copy of oid {from:#x} stopped at {at}")));
                    }
                    at += n;
                }
                report.bytes += a.size;
            }
            _ => report.others += 1,
        }
        // Mode again (mknod masks it with a default ACL), owner, and times, last.
        let set = same_attrs(a);
        if a.kind == Kind::Symlink {
            self.setattr(made, SetAttr { mode: None, ..set })?;
        } else {
            self.setattr(made, set)?;
        }
        Ok(())
    }

    /// EACCES unless `who` may read `from` (and search it, a directory), as their `cp -a`
    /// must. A symlink, FIFO or socket is made anew, not read: nothing to check.
    fn readable_to(&mut self, from: Ino, a: &crate::Attr, who: &Caller) -> FsResult<()> {
        if !matches!(a.kind, Kind::File | Kind::Dir) {
            return Ok(());
        }
        let want = if a.kind == Kind::Dir { R | X } else { R };
        if !self.permits(from, who, want)? {
            let path = self.path_of_dir(from).unwrap_or_default();
            return Err(errno::EACCES.with(format!("restore: /{} is not readable to you", String::from_utf8_lossy(&path))));
        }
        Ok(())
    }

    /// `rm -rf parent/name`, for the commands that put one tree in another's place.
    pub fn remove_all(&mut self, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remember(parent)?;
        let r = self.remove_tree(parent, name, 0);
        self.forget(parent, 1);
        r
    }

    /// `rm -rf parent/name`.
    pub(crate) fn remove_tree(&mut self, parent: Ino, name: &[u8], depth: usize) -> FsResult<()> {
        if depth > MAX_DEPTH {
            return Err(errno::ELOOP);
        }
        let a = self.lookup(parent, name)?;
        let r = if a.kind == Kind::Dir {
            for e in self.readdir(a.ino)? {
                if e.name != SNAPDIR_NAME {
                    self.remove_tree(a.ino, &e.name, depth + 1)?;
                }
            }
            self.rmdir(parent, name)
        } else {
            self.unlink(parent, name)
        };
        self.forget(a.ino, 1);
        r
    }
}

impl Fs {
    /// Where snapshot `name` holds `path`: the path into the snapshot of the nearest
    /// directory at or above `path` that has a snapshot of that name (`d/.snapshot/name/..`).
    pub fn in_snapshot(&mut self, path: &[u8], name: &[u8]) -> FsResult<Vec<u8>> {
        let names = crate::versions::clean(path)?;
        for depth in (0..=names.len()).rev() {
            let dir = names[..depth].join(&b'/');
            let Ok(ino) = self.resolve_path(&dir) else { continue };
            if self.getattr(ino)?.kind != Kind::Dir {
                continue;
            }
            if self.dir_snapshots(ino)?.iter().any(|s| s.name == name) {
                let mut p = dir.clone();
                for part in [SNAPDIR_NAME, name]
                    .into_iter()
                    .chain(names[depth..].iter().map(Vec::as_slice))
                {
                    if !p.is_empty() {
                        p.push(b'/');
                    }
                    p.extend_from_slice(part);
                }
                return Ok(p);
            }
        }
        Err(errno::ENOENT.with(format!(
            "no snapshot named {} of /{} or of a directory above it",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(path)
        )))
    }
}

/// The attributes of a copy `who` makes of a file with attributes `a`, as their `cp -a`
/// leaves them: theirs, the group kept if they are in it, setuid and setgid gone from what
/// was not theirs.
fn as_their_copy(mut a: crate::Attr, who: &Caller) -> crate::Attr {
    if a.uid != who.uid {
        a.perm &= !0o6000;
        a.uid = who.uid;
    }
    if !who.in_group(a.gid) {
        a.gid = who.gid;
        a.perm &= !0o2000;
    }
    a
}

/// `2026-11-24T201502Z` for a time, as restore names what it sets aside.
/// What makes a copy's mode, owner and times those of `a`.
pub(crate) fn same_attrs(a: &crate::Attr) -> SetAttr {
    SetAttr {
        mode: Some(u32::from(a.perm)),
        uid: Some(a.uid),
        gid: Some(a.gid),
        atime: Some(a.atime),
        mtime: Some(a.mtime),
        ..Default::default()
    }
}

/// For the destination path `dst`: the path from the volume's root of a sibling named `n`
/// (as `records::intents` keeps paths: no leading slash).
pub(crate) fn beside(dst: &[u8]) -> impl Fn(&[u8]) -> Vec<u8> {
    let dir = crate::clone::split_path(dst.strip_suffix(b"/").unwrap_or(dst)).0;
    let dir = String::from_utf8_lossy(dir).trim_matches('/').as_bytes().to_vec();
    move |n: &[u8]| if dir.is_empty() { n.to_vec() } else { [&dir[..], b"/", n].concat() }
}

/// The last component of a path.
pub(crate) fn last_component(p: &[u8]) -> Vec<u8> {
    p.rsplit(|&b| b == b'/').next().map(<[u8]>::to_vec).unwrap_or_default()
}

impl Fs {
    /// A name `.NAME.scion-WHAT` (or with `-2`, `-3`...) free in `parent`, for a tree a
    /// command builds beside `parent/name`.
    pub(crate) fn hidden_sibling(&mut self, parent: Ino, name: &[u8], what: &str) -> FsResult<Vec<u8>> {
        for i in 1..1000u32 {
            let n = format!(".{}.scion-{what}{}", String::from_utf8_lossy(name), if i == 1 { String::new() } else { format!("-{i}") });
            if n.len() <= 255 && self.child(parent, n.as_bytes())?.is_none() {
                return Ok(n.into_bytes());
            }
        }
        Err(errno::EEXIST.with("no hidden name left beside the destination for the restored tree"))
    }
}

pub fn stamp(t: Ts) -> String {
    crate::schedule::clock::snapshot_name(t.sec)
}
