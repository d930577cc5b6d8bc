//! Who may do what over NFS: the kernel's rules (`generic_permission`, `may_delete`,
//! `setattr_prepare`, `should_remove_suid`) applied by the adapter, since no kernel checks an
//! NFS call, and the read-only rules of exports.

use super::*;

/// Whether `caller` has `want` on the file or directory `a` is, by its record and ACL; for
/// reads and writes of a regular file its owner always has (knfsd's owner override).
pub(super) fn may(fs: &Fs, a: &Attr, caller: &Caller, want: u16) -> Result<(), nfsstat3> {
    if a.kind == Kind::File && want & X == 0 && caller.uid == a.uid {
        return Ok(());
    }
    match fs.permits(a.ino, caller, want) {
        Ok(true) => Ok(()),
        Ok(false) => Err(nfsstat3::NFS3ERR_ACCES),
        Err(e) => Err(status(e)),
    }
}

/// The sticky-bit rule of `may_delete`: in a directory with the sticky bit, only the owner
/// of the entry or of the directory (or root) removes or renames it.
fn sticky_allows(dir: &Attr, victim: &Attr, caller: &Caller) -> bool {
    dir.perm & 0o1000 == 0 || caller.uid == 0 || caller.uid == dir.uid || caller.uid == victim.uid
}

/// The mode of a file written or truncated by someone other than root: setuid goes, and
/// setgid with group execute (without it, setgid marks mandatory locking and stays).
pub(super) fn without_privs(perm: u16) -> u16 {
    let mut p = perm & !0o4000;
    if p & 0o2010 == 0o2010 {
        p &= !0o2000;
    }
    p
}

impl ScionNfs {
    /// NFS3ERR_ROFS if `at` lies in a `--read-only` directory (or is one), found by walking
    /// its parents; a file with several names, whose parent is not one, counts as inside
    /// when any directory is read-only.
    pub(super) fn thawed(&self, fs: &mut Fs, at: &At) -> Result<(), nfsstat3> {
        if self.frozen.is_empty() {
            return Ok(());
        }
        match self.frozen_above(fs, at.vol, at.ino)? {
            // A cube's root: the walk goes on from its graft, in the main volume (whose
            // lock is taken after the cube's, as everywhere).
            Some(graft) => self.frozen_above(&mut self.router.main().lock(), VolumeId::MAIN, graft).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Walks up from `ino` of volume `vol`: NFS3ERR_ROFS at a read-only directory; else the
    /// graft the volume hangs at if the walk reached a cube's root, None at the mount's root.
    fn frozen_above(&self, fs: &mut Fs, vol: VolumeId, mut ino: u64) -> Result<Option<u64>, nfsstat3> {
        for _ in 0..MAX_DEPTH {
            if self.frozen.contains(&vol.global(ino)) {
                return Err(nfsstat3::NFS3ERR_ROFS);
            }
            let p = fs.parent_of(ino);
            if p == ino {
                if ino == scion_fs::ROOT_INO && vol != VolumeId::MAIN {
                    // A cube hanging nowhere is one being removed: nothing there changes.
                    return self.router.graft_of(vol).map(Some).ok_or(nfsstat3::NFS3ERR_STALE);
                }
                let top = ino == scion_fs::ROOT_INO || fs.getattr(ino).is_ok_and(|a| a.kind == Kind::Dir);
                return if top { Ok(None) } else { Err(nfsstat3::NFS3ERR_ROFS) };
            }
            ino = p;
        }
        Err(nfsstat3::NFS3ERR_ROFS)
    }

    /// Checks a change of directory `dir` by `caller` (write and search), and that the
    /// directory takes changes (not a snapshot, not a read-only store).
    pub(super) fn may_change(&self, fs: &mut Fs, dir: &At, caller: &Caller) -> Result<Attr, nfsstat3> {
        self.writable()?;
        let a = getattr(fs, dir.ino)?;
        if a.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        fs.check_writable(dir.ino).map_err(status)?;
        self.thawed(fs, dir)?;
        may(fs, &a, caller, W | X)?;
        Ok(a)
    }

    /// A removal or rename of `victim` from `dir` (which `may_change` allowed): the sticky
    /// rule, and EBUSY for a directory a command holds (as through the mount).
    pub(super) fn may_unlink(&self, fs: &mut Fs, at: &At, dir: &Attr, victim: &[u8], caller: &Caller) -> Result<u64, nfsstat3> {
        let v = fs.lookup(at.ino, victim).map_err(status)?;
        fs.forget(v.ino, 1);
        if !sticky_allows(dir, &v, caller) {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        if v.kind == Kind::Dir && self.router.pinned(at.vol, v.ino) {
            return Err(nfsstat3::NFS3ERR_ACCES);
        }
        Ok(v.ino)
    }

    /// Applies `set` to `at` for `caller`, with the kernel's rules for who may change what
    /// (`notify_change` and `setattr_prepare`).
    pub(super) fn set(&self, at: &At, fs: &mut Fs, set: &sattr3, caller: &Caller) -> Result<Attr, nfsstat3> {
        let cur = getattr(fs, at.ino)?;
        let asks = matches!(set.mode, Nfs3Option::Some(_))
            || matches!(set.uid, Nfs3Option::Some(_))
            || matches!(set.gid, Nfs3Option::Some(_))
            || matches!(set.size, Nfs3Option::Some(_))
            || !matches!(set.atime, set_atime::DONT_CHANGE)
            || !matches!(set.mtime, set_mtime::DONT_CHANGE);
        if asks {
            // A read-only filesystem answers EROFS before any permission check, as the
            // kernel's `mnt_want_write` comes first.
            fs.check_writable(at.ino).map_err(status)?;
            self.thawed(fs, at)?;
        }
        let root = caller.uid == 0;
        let owner = caller.uid == cur.uid;
        let mut s = SetAttr::default();
        if let Nfs3Option::Some(mode) = set.mode {
            if !root && !owner {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            let mut m = mode & 0o7777;
            // setattr_should_drop_sgid: a caller outside the group cannot set setgid.
            let gid = match set.gid {
                Nfs3Option::Some(g) => g,
                Nfs3Option::None => cur.gid,
            };
            if !root && !caller.in_group(gid) && cur.kind != Kind::Dir {
                m &= !0o2000;
            }
            s.mode = Some(m);
        }
        if let Nfs3Option::Some(uid) = set.uid {
            if uid != cur.uid && !root {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            s.uid = Some(uid);
        }
        if let Nfs3Option::Some(gid) = set.gid {
            if gid != cur.gid && !root && !(owner && caller.in_group(gid)) {
                return Err(nfsstat3::NFS3ERR_PERM);
            }
            s.gid = Some(gid);
        }
        if let Nfs3Option::Some(size) = set.size {
            if cur.kind == Kind::Dir {
                return Err(nfsstat3::NFS3ERR_ISDIR);
            }
            may(fs, &cur, caller, W)?;
            s.size = Some(size);
        }
        let now = Ts::now();
        let may_touch = |fs: &Fs| if owner || root { Ok(()) } else { may(fs, &cur, caller, W).map_err(|_| nfsstat3::NFS3ERR_ACCES) };
        match set.atime {
            set_atime::DONT_CHANGE => {}
            set_atime::SET_TO_SERVER_TIME => {
                may_touch(fs)?;
                s.atime = Some(now);
            }
            set_atime::SET_TO_CLIENT_TIME(t) => {
                if !owner && !root {
                    return Err(nfsstat3::NFS3ERR_PERM);
                }
                s.atime = Some(ts(t));
            }
        }
        match set.mtime {
            set_mtime::DONT_CHANGE => {}
            set_mtime::SET_TO_SERVER_TIME => {
                may_touch(fs)?;
                s.mtime = Some(now);
            }
            set_mtime::SET_TO_CLIENT_TIME(t) => {
                if !owner && !root {
                    return Err(nfsstat3::NFS3ERR_PERM);
                }
                s.mtime = Some(ts(t));
            }
        }
        if s == SetAttr::default() {
            return Ok(cur);
        }
        // A chown or a truncate by someone other than root drops setuid and setgid, as the
        // kernel's `should_remove_suid` does.
        let changes_owner = s.uid.is_some_and(|u| u != cur.uid) || s.gid.is_some_and(|g| g != cur.gid);
        if cur.kind == Kind::File && s.mode.is_none() && (changes_owner || (s.size.is_some() && !root)) {
            let kept = without_privs(cur.perm);
            if kept != cur.perm {
                s.mode = Some(u32::from(kept));
            }
        }
        fs.setattr(at.ino, s).map_err(status)
    }
}
