//! The calls that change the tree: each checked (`rules.rs`), made through the engine, and
//! told to the mount's kernel after, without the engine lock.

use super::*;

impl ScionNfs {
    /// A new entry's handle and attributes; `r` is the engine's answer to making it.
    fn made(&self, at: &At, fs: &mut Fs, r: scion_fs::FsResult<Attr>) -> Result<(Handle, fattr3), nfsstat3> {
        let a = r.map_err(status)?;
        let h = self.hold(at, fs, &a);
        Ok((h, fattr(&a, at.vol)))
    }
}

/// The permission bits a CREATE or MKDIR asks for, or `default`.
fn mode_or(attr: &sattr3, default: u32) -> u32 {
    match attr.mode {
        Nfs3Option::Some(m) => m & 0o7777,
        Nfs3Option::None => default,
    }
}

/// The changes that make a name, without the engine lock's holder telling the kernel
/// (`ScionNfs::made_in` does, after).
impl ScionNfs {
    fn create_now(&self, dirid: &Handle, filename: &filename3<'_>, attr: sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let mode = mode_or(&attr, 0o644);
        let n = name(filename);
        let made = fs.mknod(at.ino, n, Kind::File, libc::S_IFREG | mode, 0, caller.uid, caller.gid, 0, &[]);
        let (h, a) = match made {
            // UNCHECKED: an existing file is opened, as O_CREAT without O_EXCL does (GUARDED
            // is refused by the server before it gets here).
            Err(e) if e.errno() == libc::EEXIST => {
                let a = fs.lookup(at.ino, n).map_err(status)?;
                if a.kind != Kind::File {
                    fs.forget(a.ino, 1);
                    return Err(nfsstat3::NFS3ERR_EXIST);
                }
                self.made(&at, &mut fs, Ok(a))?
            }
            r => self.made(&at, &mut fs, r)?,
        };
        if let Nfs3Option::Some(size) = attr.size {
            let child = At { vol: at.vol, engine: at.engine.clone(), ino: VolumeId::local(a.fileid) };
            let set = sattr3 { size: Nfs3Option::Some(size), ..Default::default() };
            let a = self.set(&child, &mut fs, &set, &caller)?;
            return Ok((h, fattr(&a, at.vol)));
        }
        Ok((h, a))
    }

    fn create_exclusive_now(&self, dirid: &Handle, filename: &filename3<'_>, verf: createverf3) -> Result<Handle, nfsstat3> {
        // The verifier is kept in the new file's times, as knfsd does, so that a
        // retransmitted CREATE finds its own file rather than EEXIST.
        let v = verf.0;
        let stamp = Ts {
            sec: i64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
            nsec: u32::from_be_bytes([v[4], v[5], v[6], v[7]]) % 1_000_000_000,
        };
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let n = name(filename);
        match fs.mknod(at.ino, n, Kind::File, libc::S_IFREG | 0o600, 0, caller.uid, caller.gid, 0, &[]) {
            Ok(a) => {
                let h = self.hold(&at, &mut fs, &a);
                fs.setattr(a.ino, SetAttr { atime: Some(stamp), mtime: Some(stamp), ..Default::default() })
                    .map_err(status)?;
                Ok(h)
            }
            Err(e) if e.errno() == libc::EEXIST => {
                let a = fs.lookup(at.ino, n).map_err(status)?;
                let h = self.hold(&at, &mut fs, &a);
                if a.kind == Kind::File && a.mtime == stamp && a.atime == stamp {
                    Ok(h)
                } else {
                    Err(nfsstat3::NFS3ERR_EXIST)
                }
            }
            Err(e) => Err(status(e)),
        }
    }

    fn mkdir_now(&self, dirid: &Handle, dirname: &filename3<'_>, attr: &sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        // The client applied its umask; the engine adds what the parent passes down.
        let mode = mode_or(attr, 0o755);
        let r = fs.mknod(at.ino, name(dirname), Kind::Dir, libc::S_IFDIR | mode, 0, caller.uid, caller.gid, 0, &[]);
        self.made(&at, &mut fs, r)
    }

    fn symlink_now<'a>(
        &self,
        dirid: &Handle,
        linkname: &filename3<'a>,
        symlink: &nfspath3<'a>,
        _attr: &sattr3,
    ) -> Result<(Handle, fattr3), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        self.may_change(&mut fs, &at, &caller)?;
        let r = fs.mknod(at.ino, name(linkname), Kind::Symlink, 0o777, 0, caller.uid, caller.gid, 0, symlink.as_ref());
        self.made(&at, &mut fs, r)
    }

    /// Tells the mount's kernel of a name made in `dirid` (its cached absence, the
    /// directory's times and size).
    /// REMOVE and RMDIR: `drop` takes name `n` out of directory `dirid` once the caller may;
    /// the kernel is told, and the victim's reference given back if it has no name left.
    fn unlink_by(&self, dirid: &Handle, n: &[u8], drop: fn(&mut Fs, u64, &[u8]) -> scion_fs::FsResult<()>) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let victim = {
            let mut fs = at.fs();
            let dir = self.may_change(&mut fs, &at, &caller)?;
            let victim = self.may_unlink(&mut fs, &at, &dir, n, &caller)?;
            drop(&mut fs, at.ino, n).map_err(status)?;
            victim
        };
        self.told(at.vol, &[Inval::Entry(at.ino, n.to_vec()), Inval::Inode(at.ino), Inval::Inode(victim)]);
        self.release(&[at.vol.global(victim)]);
        Ok(())
    }

    fn made_in(&self, dirid: &Handle, n: &filename3<'_>, ok: bool) {
        if let (true, Ok(at)) = (ok, self.at(dirid)) {
            self.told(at.vol, &[Inval::Entry(at.ino, name(n).to_vec()), Inval::Inode(at.ino)]);
        }
    }
}

impl NfsFileSystem for ScionNfs {
    fn capabilities(&self) -> VFSCapabilities {
        if self.read_only {
            VFSCapabilities::ReadOnly
        } else {
            VFSCapabilities::ReadWrite
        }
    }

    async fn setattr(&self, id: &Handle, set: sattr3) -> Result<fattr3, nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        self.writable()?;
        let a = self.set(&at, &mut at.fs(), &set, &caller)?;
        self.told(at.vol, &[Inval::Inode(at.ino)]);
        Ok(fattr(&a, at.vol))
    }

    async fn write(&self, id: &Handle, offset: u64, data: &[u8], stable: stable_how) -> Result<(fattr3, stable_how), nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        self.writable()?;
        {
            let mut fs = at.fs();
            let a = regular_file(&mut fs, at.ino)?;
            fs.check_writable(at.ino).map_err(status)?;
            self.thawed(&mut fs, &at)?;
            may(&fs, &a, &caller, W)?;
            fs.open_file(at.ino).map_err(status)?;
        }
        let r = at.engine.write(at.ino, offset, data, Stamp::Now, |fs| {
            // A write by anyone but root drops setuid (and setgid with group execute).
            if caller.uid != 0 {
                let cur = fs.getattr(at.ino)?;
                let kept = without_privs(cur.perm);
                if kept != cur.perm {
                    fs.setattr(at.ino, SetAttr { mode: Some(u32::from(kept)), ..Default::default() })?;
                }
            }
            Ok(())
        });
        at.fs().release(at.ino);
        r.map_err(status)?;
        self.told(at.vol, &[Inval::Inode(at.ino)]);
        // UNSTABLE is answered as the mount answers a write: journaled, durable at the next
        // COMMIT (or fsync, or checkpoint). The others are synced first.
        let committed = if stable == stable_how::UNSTABLE || self.router.serving(at.vol).nofsync {
            stable_how::UNSTABLE
        } else {
            sync(&at.engine).await?;
            stable_how::FILE_SYNC
        };
        let a = getattr(&mut at.fs(), at.ino)?;
        Ok((fattr(&a, at.vol), committed))
    }

    async fn create(&self, dirid: &Handle, filename: &filename3<'_>, attr: sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.create_now(dirid, filename, attr);
        self.made_in(dirid, filename, r.is_ok());
        r
    }

    async fn create_exclusive(&self, dirid: &Handle, filename: &filename3<'_>, verf: createverf3) -> Result<Handle, nfsstat3> {
        let r = self.create_exclusive_now(dirid, filename, verf);
        self.made_in(dirid, filename, r.is_ok());
        r
    }

    async fn mkdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Result<(Handle, fattr3), nfsstat3> {
        self.mkdir_with(dirid, dirname, &sattr3::default()).await
    }

    async fn mkdir_with(&self, dirid: &Handle, dirname: &filename3<'_>, attr: &sattr3) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.mkdir_now(dirid, dirname, attr);
        self.made_in(dirid, dirname, r.is_ok());
        r
    }

    async fn remove(&self, dirid: &Handle, filename: &filename3<'_>) -> Result<(), nfsstat3> {
        self.unlink_by(dirid, name(filename), Fs::unlink)
    }

    async fn rmdir(&self, dirid: &Handle, dirname: &filename3<'_>) -> Result<(), nfsstat3> {
        self.unlink_by(dirid, name(dirname), Fs::rmdir)
    }

    async fn rename<'a>(
        &self,
        from_dirid: &Handle,
        from_filename: &filename3<'a>,
        to_dirid: &Handle,
        to_filename: &filename3<'a>,
    ) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let from = self.at(from_dirid)?;
        let to = self.at(to_dirid)?;
        if from.vol != to.vol {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        let changed = {
            let mut fs = from.fs();
            let src_dir = self.may_change(&mut fs, &from, &caller)?;
            let dst_dir = self.may_change(&mut fs, &to, &caller)?;
            let moved = self.may_unlink(&mut fs, &from, &src_dir, name(from_filename), &caller)?;
            let replaced = match self.may_unlink(&mut fs, &to, &dst_dir, name(to_filename), &caller) {
                Ok(v) => Some(v),
                Err(nfsstat3::NFS3ERR_NOENT) => None,
                Err(e) => return Err(e),
            };
            fs.rename(from.ino, name(from_filename), to.ino, name(to_filename), 0).map_err(status)?;
            let mut v = vec![
                Inval::Entry(from.ino, name(from_filename).to_vec()),
                Inval::Entry(to.ino, name(to_filename).to_vec()),
                Inval::Inode(from.ino),
                Inval::Inode(to.ino),
                Inval::Inode(moved),
            ];
            v.extend(replaced.map(Inval::Inode));
            (v, replaced)
        };
        self.told(from.vol, &changed.0);
        if let Some(r) = changed.1 {
            self.release(&[from.vol.global(r)]);
        }
        Ok(())
    }

    async fn symlink<'a>(
        &self,
        dirid: &Handle,
        linkname: &filename3<'a>,
        symlink: &nfspath3<'a>,
        attr: &sattr3,
    ) -> Result<(Handle, fattr3), nfsstat3> {
        let r = self.symlink_now(dirid, linkname, symlink, attr);
        self.made_in(dirid, linkname, r.is_ok());
        r
    }

    async fn link(&self, id: &Handle, dirid: &Handle, newname: &filename3<'_>) -> Result<(), nfsstat3> {
        let caller = self.caller();
        let file = self.at(id)?;
        let dir = self.at(dirid)?;
        if file.vol != dir.vol {
            return Err(nfsstat3::NFS3ERR_XDEV);
        }
        let mut fs = dir.fs();
        self.may_change(&mut fs, &dir, &caller)?;
        if getattr(&mut fs, file.ino)?.kind == Kind::Dir {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        }
        // A name in a writable directory would make a frozen file writable.
        self.thawed(&mut fs, &file)?;
        let a = fs.link(file.ino, dir.ino, name(newname)).map_err(status)?;
        self.reached_by(&fs, &dir, name(newname), &a);
        // The engine counted a reference for the new name; the adapter holds one already.
        self.hold(&file, &mut fs, &a);
        drop(fs);
        self.told(dir.vol, &[Inval::Entry(dir.ino, name(newname).to_vec()), Inval::Inode(dir.ino), Inval::Inode(file.ino)]);
        Ok(())
    }

    async fn commit(&self, id: &Handle, _offset: u64, _count: u32) -> Result<(), nfsstat3> {
        // What fsync means through the mount: everything acknowledged so far in the volume.
        let at = self.at(id)?;
        if self.router.serving(at.vol).nofsync {
            return Ok(());
        }
        sync(&at.engine).await
    }
}
