//! Applying a send stream's frames to a tree in the engine (`scion receive`): what the
//! receiver has checked (checksums, order) becomes files without a round trip through the
//! kernel per operation. Frames come in batches (a control request each, under the engine
//! lock); a file whose data runs past a batch stays open into the next (`Applied::open`).
//!
//! Paths are walked from the tree's top one name at a time and never through a symlink: a
//! name on the way that is not a directory refuses the frame (ENOTDIR), so a stream cannot
//! make a symlink and write through it. Everything held between steps holds a lookup
//! reference (a write may take a checkpoint, which drops unreferenced inodes).

use crate::error::errno;
use crate::fs::{Fs, Ino};
use crate::inode::{Kind, Ts};
use crate::stream::{Frame, Meta};
use crate::{FsResult, SetAttr};

/// Directories nest at most this deep in a path of a stream.
const MAX_DEPTH: usize = 2048;

/// Where a pull's `Block` frames lie: a remote block, and whether it is installed already.
pub type Resolve<'a> = &'a mut dyn FnMut(&[u8; 32]) -> FsResult<Option<(scion_store::BlockPtr, bool)>>;

/// A file open across batches: its File frame (path, size, metadata).
pub type OpenFile = Frame;

impl Fs {
    /// Applies `frames` below directory `top`; `base` is the base tree copies come from,
    /// `open` the file a previous batch left open (its `File` frame). Returns the file left
    /// open at the end, if any (its metadata is set when a later frame closes it).
    pub fn apply_frames(&mut self, top: Ino, base: Option<Ino>, open: Option<OpenFile>, frames: Vec<Frame>) -> FsResult<Option<OpenFile>> {
        self.apply_frames_with(top, base, open, frames, None)
    }

    /// `apply_frames`, with `Block` frames resolved by `remote` (a pull, issue 41) to a
    /// remote block and whether it is installed already, instead of a block held here.
    pub fn apply_frames_with(&mut self, top: Ino, base: Option<Ino>, open: Option<OpenFile>, frames: Vec<Frame>, mut remote: Option<Resolve<'_>>) -> FsResult<Option<OpenFile>> {
        self.remember(top)?;
        if let Some(b) = base {
            self.remember(b)?;
        }
        let mut cur: Option<(Ino, Frame)> = None;
        let r = (|| {
            if let Some(f) = open {
                let Frame::File { path, .. } = &f else { return Err(errno::EINVAL.with("an open file that is not a File frame")) };
                let ino = self.walk_held(top, path)?;
                cur = Some((ino, f));
            }
            for f in frames {
                if !matches!(f, Frame::Data { .. } | Frame::Hole { .. } | Frame::Block { .. }) {
                    if let Some((ino, ff)) = cur.take() {
                        self.close_file(ino, &ff)?;
                    }
                }
                if let (Frame::Block { offset, hash }, Some(r)) = (&f, remote.as_mut()) {
                    self.attach_block(*offset, hash, &cur, r)?;
                    continue;
                }
                if let Some(c) = self.apply_frame(top, base, f, &cur)? {
                    cur = Some(c);
                }
            }
            Ok(())
        })();
        let left = match (r, cur) {
            (Ok(()), Some((ino, f))) => {
                self.forget(ino, 1);
                Ok(Some(f))
            }
            (Ok(()), None) => Ok(None),
            (Err(e), c) => {
                if let Some((ino, _)) = c {
                    self.forget(ino, 1);
                }
                Err(e)
            }
        };
        self.forget(top, 1);
        if let Some(b) = base {
            self.forget(b, 1);
        }
        left
    }

    /// A `Block` frame of a pull: the remote block it names becomes the chunk at `offset`.
    fn attach_block(&mut self, offset: u64, hash: &[u8; 32], cur: &Option<(Ino, Frame)>, resolve: &mut Resolve<'_>) -> FsResult<()> {
        let Some((ino, _)) = cur else { return Err(errno::EINVAL.with("a block with no file open")) };
        if offset % crate::records::inode::CHUNK != 0 {
            return Err(errno::EINVAL.with(format!("a block at {offset}, not at a chunk's start")));
        }
        let Some((ptr, shared)) = resolve(hash)? else {
            return Err(errno::EINVAL.with(format!("the tree names block {} and does not say where it is", hash[..8].iter().map(|b| format!("{b:02x}")).collect::<String>())));
        };
        self.attach_chunk(*ino, offset / crate::records::inode::CHUNK, ptr, shared)
    }

    /// One frame; a `File` frame returns the file it opened (held).
    fn apply_frame(&mut self, top: Ino, base: Option<Ino>, f: Frame, cur: &Option<(Ino, Frame)>) -> FsResult<Option<(Ino, Frame)>> {
        let f = match f {
            // A block held here (`dedup.rs`): its bytes, cut at the file's size.
            Frame::Block { offset, hash } => {
                let Some((_, Frame::File { size, .. })) = cur else { return Err(errno::EINVAL.with("a block with no file open")) };
                let mut bytes = self.block_by_hash(&hash)?;
                bytes.truncate(size.saturating_sub(offset).min(bytes.len() as u64) as usize);
                Frame::Data { offset, bytes }
            }
            f => f,
        };
        match f {
            Frame::Data { offset, bytes } => {
                let Some((ino, _)) = cur else { return Err(errno::EINVAL.with("data with no file open")) };
                let mut done = 0;
                while done < bytes.len() {
                    let n = self.write(*ino, offset + done as u64, &bytes[done..])? as usize;
                    if n == 0 {
                        return Err(errno::EIO.with("a write that wrote nothing"));
                    }
                    done += n;
                }
            }
            Frame::Hole { offset, len } => {
                let Some((ino, _)) = cur else { return Err(errno::EINVAL.with("a hole with no file open")) };
                self.fallocate(*ino, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len)?;
            }
            Frame::Delete { ref path } => self.in_parent(top, path, |fs, p, name| fs.remove_tree(p, name, 0))?,
            Frame::Dir { ref path } => self.in_parent(top, path, |fs, p, name| {
                let a = fs.mknod(p, name, Kind::Dir, 0o700, 0, 0, 0, 0, &[])?;
                fs.forget(a.ino, 1);
                Ok(())
            })?,
            Frame::File { ref path, size, fresh, ref meta } => {
                let ino = self.in_parent(top, path, |fs, p, name| {
                    let a = if fresh {
                        fs.make_way(p, name)?;
                        fs.mknod(p, name, Kind::File, u32::from(meta.perm), 0, meta.uid, meta.gid, 0, &[])?
                    } else {
                        fs.lookup(p, name)?
                    };
                    if a.kind != Kind::File {
                        fs.forget(a.ino, 1);
                        return Err(errno::EISDIR.with("a File frame for what is not a file"));
                    }
                    // (A new file gets its size when it is closed, with its times: one change
                    // fewer. One already there is cut now, before its data is written.)
                    if a.size != size && !fresh {
                        if let Err(e) = fs.setattr(a.ino, SetAttr { size: Some(size), ..Default::default() }) {
                            fs.forget(a.ino, 1);
                            return Err(e);
                        }
                    }
                    Ok(a.ino)
                })?;
                return Ok(Some((ino, f)));
            }
            Frame::Symlink { ref path, ref target, ref meta } => self.in_parent(top, path, |fs, p, name| {
                fs.make_way(p, name)?;
                let a = fs.mknod(p, name, Kind::Symlink, 0o777, 0, meta.uid, meta.gid, 0, target)?;
                let r = fs.set_meta(a.ino, meta, None);
                fs.forget(a.ino, 1);
                r
            })?,
            Frame::Special { ref path, kind, rdev, ref meta } => self.in_parent(top, path, |fs, p, name| {
                let k = Kind::from_u8(kind).ok_or(errno::EINVAL)?;
                fs.make_way(p, name)?;
                let a = fs.mknod(p, name, k, u32::from(meta.perm), 0, meta.uid, meta.gid, rdev, &[])?;
                let r = fs.set_meta(a.ino, meta, None);
                fs.forget(a.ino, 1);
                r
            })?,
            Frame::Link { ref path, ref target } => {
                let t = self.walk_held(top, target)?;
                let r = self.in_parent(top, path, |fs, p, name| {
                    fs.make_way(p, name)?;
                    fs.link(t, p, name).map(drop)
                });
                self.forget(t, 1);
                r?;
            }
            Frame::Copy { ref path, ref from } => {
                let Some(b) = base else { return Err(errno::EINVAL.with("a copy from the base in a full stream")) };
                let src = self.walk_held(b, from)?;
                let r = (|| {
                    if self.getattr(src)?.kind != Kind::File {
                        return Err(errno::EINVAL.with("a copy of what is not a file"));
                    }
                    self.in_parent(top, path, |fs, p, name| {
                        fs.make_way(p, name)?;
                        let mut report = crate::restore::RestoreReport::default();
                        fs.copy_tree(src, p, name, &mut Default::default(), &mut report, 0, None)
                    })
                })();
                self.forget(src, 1);
                r?;
            }
            Frame::Meta { ref path, ref meta } => {
                let ino = self.walk_held(top, path)?;
                let r = self.set_meta(ino, meta, None);
                self.forget(ino, 1);
                r?;
            }
            Frame::Begin { .. } | Frame::End { .. } | Frame::Resume { .. } | Frame::Block { .. } => {
                return Err(errno::EINVAL.with("a Begin, Resume or End frame among the operations"))
            }
        }
        Ok(None)
    }

    /// A file's data is all there: its metadata (times last). Drops its reference.
    fn close_file(&mut self, ino: Ino, f: &Frame) -> FsResult<()> {
        let r = match f {
            Frame::File { meta, size, .. } => self.set_meta(ino, meta, Some(*size)),
            _ => Ok(()),
        };
        self.forget(ino, 1);
        r
    }

    /// `len` bytes of file `ino` from `off` (fewer only at its end), a megabyte per read.
    pub fn read_exact(&mut self, ino: Ino, off: u64, len: u64) -> FsResult<Vec<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let n = (len - out.len() as u64).min(1 << 20) as u32;
            let got = self.read(ino, off + out.len() as u64, n)?;
            if got.is_empty() {
                break;
            }
            out.extend_from_slice(&got);
        }
        Ok(out)
    }

    /// What is at `path` below `top` (held: the caller forgets it; the empty path is `top`),
    /// walked name by name through directories only.
    pub fn walk_held(&mut self, top: Ino, path: &[u8]) -> FsResult<Ino> {
        if path.is_empty() {
            self.remember(top)?;
            return Ok(top);
        }
        let (p, name) = self.parent_held(top, path)?;
        let r = self.lookup(p, &name).map(|a| a.ino);
        self.forget(p, 1);
        r
    }

    /// The directory holding `path` below `top` (held) and the last name.
    fn parent_held(&mut self, top: Ino, path: &[u8]) -> FsResult<(Ino, Vec<u8>)> {
        let names: Vec<&[u8]> = path.split(|&c| c == b'/').collect();
        if path.is_empty() || names.len() > MAX_DEPTH || names.iter().any(|n| n.is_empty() || *n == b"." || *n == b"..") {
            return Err(errno::EINVAL.with(format!("path {:?} in a stream", String::from_utf8_lossy(path))));
        }
        let (last, dirs) = names.split_last().expect("not empty");
        self.remember(top)?;
        let mut at = top;
        for n in dirs {
            let next = self.lookup(at, n);
            self.forget(at, 1);
            let a = next?;
            if a.kind != Kind::Dir {
                self.forget(a.ino, 1);
                return Err(errno::ENOTDIR.with(format!("{:?} on the way to a stream's path", String::from_utf8_lossy(n))));
            }
            at = a.ino;
        }
        Ok((at, last.to_vec()))
    }

    /// Runs `f` on the directory holding `path` (held while it runs) and the last name.
    fn in_parent<T>(&mut self, top: Ino, path: &[u8], f: impl FnOnce(&mut Fs, Ino, &[u8]) -> FsResult<T>) -> FsResult<T> {
        let (p, name) = self.parent_held(top, path)?;
        let r = f(self, p, &name);
        self.forget(p, 1);
        r
    }

    /// Removes what is at `name` in `p` unless it is a directory (only a Delete frame
    /// removes one), for a new file, symlink or special file there.
    fn make_way(&mut self, p: Ino, name: &[u8]) -> FsResult<()> {
        match self.lookup(p, name) {
            Ok(a) => {
                self.forget(a.ino, 1);
                if a.kind == Kind::Dir {
                    return Err(errno::EISDIR.with("a directory where a stream puts a file"));
                }
                self.unlink(p, name)
            }
            Err(e) if e == errno::ENOENT => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Owner, mode, exactly these extended attributes, then the mtime (the atime too) and,
    /// for a file, its `size` with them.
    pub(crate) fn set_meta(&mut self, ino: Ino, m: &Meta, size: Option<u64>) -> FsResult<()> {
        let a = self.getattr(ino)?;
        if (a.uid, a.gid) != (m.uid, m.gid) {
            self.setattr(ino, SetAttr { uid: Some(m.uid), gid: Some(m.gid), ..Default::default() })?;
        }
        if a.kind != Kind::Symlink {
            // (A new file has its mode from its mknod already, unless a default ACL changed it.)
            if a.perm != m.perm {
                self.setattr(ino, SetAttr { mode: Some(u32::from(m.perm)), ..Default::default() })?;
            }
            let have = self.listxattr(ino)?;
            for k in have.iter().filter(|k| !m.xattrs.iter().any(|(w, _)| w == *k)) {
                self.removexattr(ino, k)?;
            }
            for (k, v) in &m.xattrs {
                self.setxattr(ino, k, v, 0)?;
            }
        }
        let t = Ts {
            sec: m.mtime_sec,
            nsec: m.mtime_nsec,
        };
        let size = size.filter(|s| *s != a.size);
        self.setattr(ino, SetAttr { size, mtime: Some(t), atime: Some(t), ..Default::default() })?;
        Ok(())
    }
}
