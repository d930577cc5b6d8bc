//! The calls that change nothing: lookups, attributes, reads, listings, ACCESS.

use super::*;

/// A directory listing already made, served from the position a cookie names.
pub struct Listing {
    entries: std::vec::IntoIter<DirEntryPlus<Handle>>,
}

impl ReadDirPlusIterator<Handle> for Listing {
    async fn next(&mut self) -> NextResult<DirEntryPlus<Handle>> {
        match self.entries.next() {
            Some(e) => NextResult::Ok(e),
            None => NextResult::Eof,
        }
    }
}

/// Bytes past each READ the host is asked to fetch ahead.
const READ_AHEAD: u32 = 4 << 20;
/// ... asked for in pieces of this size, each when a READ crosses into the next.
const READ_AHEAD_STEP: u32 = 1 << 20;

/// Entries listed per READDIRPLUS at most: the client asks again from the last cookie.
const LIST_BATCH: usize = 1024;

impl NfsReadFileSystem for ScionNfs {
    type Handle = Handle;

    fn root_dir(&self) -> Handle {
        self.handle(VolumeId::MAIN.global(scion_fs::ROOT_INO))
    }

    async fn lookup(&self, dirid: &Handle, filename: &filename3<'_>) -> Result<Handle, nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let n = name(filename);
        let mut fs = at.fs();
        let dir = getattr(&mut fs, at.ino)?;
        if dir.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        may(&fs, &dir, &caller, X)?;
        if n == b"." {
            return Ok(*dirid);
        }
        if n == b".." {
            return Ok(self.handle(self.parent_global(&mut fs, &at)));
        }
        let a = if at.ino & SNAPDIR_BIT != 0 {
            fs.lookup_as(at.ino, n, &caller)
        } else {
            fs.lookup(at.ino, n)
        }
        .map_err(status)?;
        if let Some(cube) = self.router.grafted(at.vol, a.ino) {
            // A cube's directory shows the cube's root, as through the mount.
            fs.forget(a.ino, 1);
            return Ok(self.handle(cube.global(scion_fs::ROOT_INO)));
        }
        self.reached_by(&fs, &at, n, &a);
        Ok(self.hold(&at, &mut fs, &a))
    }

    /// MNT: `path` must be an export or lie below one; it is walked as the caller, from
    /// the export's root.
    async fn lookup_by_path(&self, path: &str) -> Result<Handle, nfsstat3> {
        let names = components(path.as_bytes());
        let export = self
            .exports
            .iter()
            .filter(|(p, _)| names.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        let mut h = self.handle(export.1);
        for n in &names[export.0.len()..] {
            if n == b".." {
                return Err(nfsstat3::NFS3ERR_NOENT);
            }
            h = self.lookup(&h, &n.as_slice().into()).await?;
        }
        Ok(h)
    }

    async fn getattr(&self, id: &Handle) -> Result<fattr3, nfsstat3> {
        let at = self.at(id)?;
        let a = getattr(&mut at.fs(), at.ino)?;
        Ok(fattr(&a, at.vol))
    }

    async fn read(&self, id: &Handle, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        let caller = self.caller();
        let at = self.at(id)?;
        let (plan, size) = {
            let mut fs = at.fs();
            let a = regular_file(&mut fs, at.ino)?;
            may(&fs, &a, &caller, R)?;
            fs.open_file(at.ino).map_err(status)?;
            let plan = fs.read_plan(at.ino, offset, count.min(MAX_IO)).map(|p| p.through_host_cache());
            // The client asks for one range at a time and waits for each (no kernel
            // readahead keeps several in flight, as through the mount): the host is asked
            // to fetch what follows while this one is answered. The first read asks for the
            // whole window; later ones ask for the next 1 MiB each time a READ crosses into
            // another 1 MiB of the file, so that a sequential reader has each range asked for
            // once (asking again costs a walk of the host's cache for every page of the
            // window), in requests the disk serves well: 2 MiB ahead in 128 KiB steps read a
            // cold file through fuse-nfs at 465-496 MiB/s, 4 MiB in 1 MiB steps at 516-545,
            // 8 MiB in 2 MiB steps no faster (docs/benchmarks.md).
            let n = u64::from(count.min(MAX_IO));
            let step = u64::from(READ_AHEAD_STEP);
            let (from, len) = match offset {
                0 => (n, u64::from(READ_AHEAD) + step - n),
                _ if offset % step < n => ((offset - offset % step).saturating_add(u64::from(READ_AHEAD)), step),
                _ => (u64::MAX, 0),
            };
            if from < a.size {
                if let Ok(ahead) = fs.read_plan(at.ino, from, len as u32) {
                    ahead.will_need();
                }
            }
            fs.release(at.ino);
            (plan.map_err(status)?, a.size)
        };
        // The blocks are read without the engine lock, as the mount reads them. Blocks the
        // host holds in its cache (most, behind the read-ahead above) are read on the server's
        // one thread (`lib.rs`): a hand-off to the blocking pool and back cost a quarter of a
        // cached 128 KiB READ. The rest are read off it, where a disk read would hold up
        // every other request.
        let data = if plan.cached() {
            plan.execute()
        } else {
            tokio::task::spawn_blocking(move || plan.execute())
                .await
                .map_err(|_| nfsstat3::NFS3ERR_IO)?
        }
        .map_err(status)?;
        let eof = offset.saturating_add(data.len() as u64) >= size;
        Ok((data, eof))
    }

    #[allow(refining_impl_trait)]
    async fn readdirplus(&self, dirid: &Handle, cookie: u64) -> Result<Listing, nfsstat3> {
        let caller = self.caller();
        let at = self.at(dirid)?;
        let mut fs = at.fs();
        let dir = getattr(&mut fs, at.ino)?;
        if dir.kind != Kind::Dir {
            return Err(nfsstat3::NFS3ERR_NOTDIR);
        }
        may(&fs, &dir, &caller, R)?;
        let list = fs.readdir(at.ino).map_err(status)?;
        let parent = self.parent_global(&mut fs, &at);
        // Cookies are positions: 1 and 2 are "." and "..", then the entries in name order.
        let mut out = Vec::new();
        let start = cookie as usize;
        let dots = [(b".".to_vec(), at.vol.global(at.ino)), (b"..".to_vec(), parent)];
        for (i, (n, global)) in dots.into_iter().enumerate().skip(start) {
            // (A cube root's ".." is the main volume's: its attributes are left to a GETATTR.)
            let a = (VolumeId::of(global) == at.vol).then(|| fs.getattr(VolumeId::local(global)).ok()).flatten();
            out.push(DirEntryPlus {
                fileid: global,
                name: n.into(),
                cookie: i as u64 + 1,
                name_attributes: a.map(|a| fattr(&a, at.vol)),
                name_handle: Some(self.handle(global)),
            });
        }
        for (i, e) in list.into_iter().enumerate().skip(start.saturating_sub(2)).take(LIST_BATCH) {
            let cookie = i as u64 + 3;
            let found = if at.ino & SNAPDIR_BIT != 0 {
                fs.lookup_as(at.ino, &e.name, &caller)
            } else {
                fs.lookup(at.ino, &e.name)
            };
            // Gone since the listing, or a snapshot the caller may not see: left out.
            let Ok(a) = found else { continue };
            let (handle, a, vol) = match self.router.grafted(at.vol, a.ino) {
                Some(cube) => {
                    fs.forget(a.ino, 1);
                    let root = self.router.engine(cube).and_then(|e| e.lock().getattr(scion_fs::ROOT_INO));
                    let Ok(root) = root else { continue };
                    (self.handle(cube.global(scion_fs::ROOT_INO)), root, cube)
                }
                None => {
                    self.reached_by(&fs, &at, &e.name, &a);
                    (self.hold(&at, &mut fs, &a), a, at.vol)
                }
            };
            out.push(DirEntryPlus {
                fileid: vol.global(a.ino),
                name: e.name.into(),
                cookie,
                name_attributes: Some(fattr(&a, vol)),
                name_handle: Some(handle),
            });
        }
        Ok(Listing { entries: out.into_iter() })
    }

    async fn readlink(&self, id: &Handle) -> Result<nfspath3<'_>, nfsstat3> {
        let at = self.at(id)?;
        let t = at.fs().readlink(at.ino).map_err(status)?;
        Ok(t.into())
    }

    async fn access(&self, id: &Handle, mask: u32) -> u32 {
        let caller = self.caller();
        let Ok(at) = self.at(id) else { return 0 };
        let mut fs = at.fs();
        let Ok(a) = fs.getattr(at.ino) else { return 0 };
        let changes = !self.read_only && fs.check_writable(at.ino).is_ok();
        let mut granted = 0;
        let checks = [
            (ACCESS3_READ, R),
            (ACCESS3_LOOKUP, X),
            (ACCESS3_EXECUTE, X),
            (ACCESS3_MODIFY, W),
            (ACCESS3_EXTEND, W),
            (ACCESS3_DELETE, W),
        ];
        for (bit, want) in checks {
            if mask & bit == 0 {
                continue;
            }
            let dir_only = bit == ACCESS3_LOOKUP || bit == ACCESS3_DELETE;
            let file_only = bit == ACCESS3_EXECUTE;
            if (dir_only && a.kind != Kind::Dir) || (file_only && a.kind == Kind::Dir) {
                continue;
            }
            if want == W && !changes {
                continue;
            }
            // Execute of a file is not the owner's by override.
            let ok = if want == X { fs.permits(at.ino, &caller, X).unwrap_or(false) } else { may(&fs, &a, &caller, want).is_ok() };
            if ok {
                granted |= bit;
            }
        }
        granted
    }

    async fn space(&self) -> [u64; 6] {
        let s = self.router.main().lock().statfs();
        let b = u64::from(s.bsize);
        [s.blocks * b, s.bfree * b, s.bavail * b, s.files, s.ffree, s.ffree]
    }

    async fn fsinfo(&self, root: &Handle) -> Result<FSINFO3resok, nfsstat3> {
        let attrs = self.getattr(root).await.map_or(post_op_attr::None, post_op_attr::Some);
        Ok(FSINFO3resok {
            obj_attributes: attrs,
            rtmax: MAX_IO,
            rtpref: MAX_IO,
            rtmult: 4096,
            wtmax: MAX_IO,
            wtpref: MAX_IO,
            wtmult: 4096,
            dtpref: 64 << 10,
            maxfilesize: i64::MAX as u64,
            time_delta: nfstime3 { seconds: 0, nseconds: 1 },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }
}
