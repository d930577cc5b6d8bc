//! `scion receive DIR [-i FILE]` (issue 20): makes the tree a `scion send` stream describes
//! appear as the new directory DIR, all at once, or not at all.
//!
//! The tree is built beside DIR, under a hidden name (`.DIR.scion-receive-PID`): an empty
//! directory for a full stream, or a clone of the base, which is found in this store by its
//! content hash (any snapshot or clone with that tree: received before, or copied here by
//! other means). Each frame is checked (checksum, order) before it is applied; at the end
//! the stream's own hash and the built tree's content hash must match what the sender said,
//! and only then is the tree renamed to DIR and snapshotted under the sent snapshot's name
//! (the base for the next increment). Anything wrong, and the hidden tree is removed.
//!
//! Every path a stream names is checked to stay inside the tree: no `..`, and no directory on
//! the way that is a symlink (a stream could otherwise make one and write through it).

use crate::tree_cmds::{call, locate, store_path, Located};
use scion::stream::{Frame, Meta, ReadError, StreamReader, FLAG_ZSTD};
use scion_daemon::control::{Op, Reply, Target};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub struct ReceiveArgs {
    pub dir: PathBuf,
    pub input: Option<PathBuf>,
    pub progress: bool,
    /// Keep what arrived if the stream stops short, for `--resume`.
    pub resumable: bool,
    /// Go on with a receive that stopped short.
    pub resume: bool,
    /// Remove what a receive that stopped short kept.
    pub abort: bool,
}

/// The extended attribute on a kept partial tree's top naming where it stopped.
const KEPT: &[u8] = b"user.scion.receive";

/// Where the tree is being built, and how to take it away.
struct Staging {
    at: Located,
    path: PathBuf,
    rel: Vec<u8>,
    /// A clone of the base (destroyed), or a plain directory (removed).
    clone: bool,
}

impl Staging {
    fn remove(&self) {
        let r = if self.clone {
            call(&self.at, &Op::Destroy(Target::Path(self.rel.clone()))).map(drop)
        } else {
            std::fs::remove_dir_all(&self.path).map_err(|e| e.to_string())
        };
        if let Err(e) = r {
            eprintln!("scion receive: {} stays: {e}", self.path.display());
        }
    }

    /// Marks the partial tree with where the stream stopped (`Kept`).
    fn keep(&self, k: &Kept) -> Result<(), String> {
        let v = format!("{}\n{}\n{}\n{}", k.token, u8::from(self.clone), hex(&k.name), hex(&k.base));
        crate::meta::set_xattr(&self.path, KEPT, Some(v.as_bytes()))
    }
}

/// What a kept partial tree records: the resume token, the sent snapshot's name, the base's
/// path in the store (empty for a full stream).
struct Kept {
    token: String,
    name: Vec<u8>,
    base: Vec<u8>,
}

pub fn receive(a: ReceiveArgs) -> Result<(), String> {
    let at = locate(&a.dir, false, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", a.dir.display()));
    };
    let dst = mnt.join(Path::new(std::ffi::OsStr::from_bytes(&store_path(&at))));
    let file_name = dst.file_name().ok_or("DIR needs a name")?.to_string_lossy().into_owned();
    let kept_path = dst.with_file_name(format!(".{file_name}.scion-receive"));
    let path = if a.resumable || a.resume || a.abort {
        kept_path.clone()
    } else {
        dst.with_file_name(format!(".{file_name}.scion-receive-{}", std::process::id()))
    };
    let rel = path.strip_prefix(&mnt).map_err(|e| e.to_string())?.as_os_str().as_bytes().to_vec();
    if a.abort || a.resume {
        return resume_or_abort(a, at, &mnt, dst, path, rel);
    }
    if kept_path.symlink_metadata().is_ok() {
        return Err(format!(
            "{} holds a receive that stopped short: `scion receive {} --resume` or `--abort`",
            kept_path.display(),
            a.dir.display()
        ));
    }
    let mut frames = open_stream(&a.input)?;
    let Some(Frame::Begin { base, root, name, .. }) = frames.next()? else {
        return Err("the stream does not begin with its Begin frame".into());
    };
    let mut base_rel = Vec::new();
    let base_dir = match base {
        Some(h) => {
            let found = match call(&at, &Op::FindTree { hash: h, hint: name.clone() })? {
                Reply::Found(f) => f,
                _ => return Err("the daemon answered something else".into()),
            };
            // The first that can still be cloned (one may be destroyed meanwhile).
            let mut cloned = None;
            let mut last = None;
            for b in found {
                match call(&at, &Op::Clone { src: b.clone(), dst: rel.clone(), excludes: Vec::new() }) {
                    Ok(_) => {
                        cloned = Some(b);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            let Some(b) = cloned else {
                return Err(match last {
                    Some(e) => e,
                    None => format!(
                        "no snapshot or clone in this store holds the stream's base (a tree of content hash {}); receive a full stream of it first, or snapshot a copy of it",
                        hex(&h)
                    ),
                });
            };
            base_rel = b.clone();
            Some(mnt.join(Path::new(std::ffi::OsStr::from_bytes(&b))))
        }
        None => {
            std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            None
        }
    };
    let staging = Staging {
        at,
        path,
        rel,
        clone: base_dir.is_some(),
    };
    let builder = Builder {
        top: staging.path.clone(),
        checked: Default::default(),
        base: base_dir,
        open: None,
    };
    build(&a, &staging, builder, frames, root, (name, base_rel), &dst)
}

/// The stream from `input` (or stdin), its header read.
fn open_stream(input: &Option<PathBuf>) -> Result<StreamReader<Box<dyn Read>>, String> {
    let mut input: Box<dyn Read> = match input {
        Some(f) => Box::new(std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Box::new(std::io::stdin().lock()),
    };
    let flags = scion::stream::read_header(&mut input)?;
    let body: Box<dyn Read> = if flags & FLAG_ZSTD != 0 {
        Box::new(zstd::stream::read::Decoder::new(input).map_err(|e| e.to_string())?)
    } else {
        Box::new(std::io::BufReader::with_capacity(1 << 20, input))
    };
    Ok(StreamReader::new(body))
}

/// `--abort`: removes a kept partial tree; `--resume`: goes on building it.
fn resume_or_abort(a: ReceiveArgs, at: Located, mnt: &Path, dst: PathBuf, path: PathBuf, rel: Vec<u8>) -> Result<(), String> {
    let kept = crate::meta::xattrs(&path)
        .map_err(|e| format!("{}: {e} (no receive of {} stopped short here)", path.display(), a.dir.display()))?
        .into_iter()
        .find(|(k, _)| k == KEPT)
        .map(|(_, v)| String::from_utf8_lossy(&v).into_owned())
        .ok_or_else(|| format!("{} does not say where its stream stopped; `--abort` and receive again", path.display()))?;
    let mut parts = kept.split('\n');
    let (token, clone) = (parts.next().unwrap_or_default(), parts.next() == Some("1"));
    let unhex = |h: &str| -> Vec<u8> { (0..h.len() / 2).filter_map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok()).collect() };
    let (name, base_rel) = (unhex(parts.next().unwrap_or_default()), unhex(parts.next().unwrap_or_default()));
    let staging = Staging { at, path, rel, clone };
    if a.abort {
        staging.remove();
        eprintln!("scion receive: removed {}", staging.path.display());
        return Ok(());
    }
    let (from, chain, root) = scion::stream::parse_token(token)?;
    let mut frames = open_stream(&a.input)?;
    match frames.next()? {
        Some(Frame::Resume { root: r, from: f, chain: c }) if (r, f, c) == (root, from, chain) => {}
        Some(Frame::Resume { .. }) => return Err("the stream goes on from another place than this receive stopped; send with the token it printed".into()),
        _ => return Err("not a resumed stream: `scion send ... --resume TOKEN` makes one".into()),
    }
    // Copies come from the base; the rest of an increment may hold some.
    let base = (!base_rel.is_empty()).then(|| mnt.join(Path::new(std::ffi::OsStr::from_bytes(&base_rel))));
    let builder = Builder {
        top: staging.path.clone(),
        checked: Default::default(),
        base,
        open: None,
    };
    build(&a, &staging, builder, frames, root, (name, base_rel), &dst)
}

/// Applies the frames, checks the end and the tree, puts it in place and snapshots it. What
/// goes wrong removes the tree, except a stream that stops short with `--resumable`: then
/// the tree stays, marked with where it stopped, and the token to go on is printed.
fn build(
    a: &ReceiveArgs,
    staging: &Staging,
    mut b: Builder,
    mut frames: StreamReader<Box<dyn Read>>,
    root: [u8; 32],
    (name, base): (Vec<u8>, Vec<u8>),
    dst: &Path,
) -> Result<(), String> {
    let mut progress = crate::send_cmd::Progress::new(a.progress);
    let mut resume_at = frames.position_next();
    let mut open_at: Option<(u64, [u8; 32])> = None;
    let r: Result<(), ReadError> = (|| {
        loop {
            let Some(f) = frames.next()? else { break };
            if let Frame::End { root: end_root, .. } = &f {
                b.close().map_err(ReadError::Bad)?;
                if *end_root != root {
                    return Err(ReadError::Bad("the stream's end names another tree than its beginning".into()));
                }
                break;
            }
            match &f {
                Frame::File { .. } => open_at = Some(frames.position()),
                Frame::Data { .. } | Frame::Hole { .. } => {}
                _ => open_at = None,
            }
            b.apply(f).map_err(ReadError::Bad)?;
            resume_at = open_at.unwrap_or_else(|| frames.position_next());
            progress.tick(frames.read);
        }
        frames.expect_eof().map_err(ReadError::Bad)?;
        Ok(())
    })();
    match r {
        Ok(()) => {}
        Err(ReadError::Cut(e)) if a.resumable || a.resume => {
            let _ = b.close();
            let k = Kept {
                token: scion::stream::resume_token(resume_at.0, &resume_at.1, &root),
                name,
                base,
            };
            staging.keep(&k)?;
            return Err(format!(
                "{e}; what arrived is kept in {}. To go on: scion send SNAPSHOT [--base BASE] --resume {} | scion receive {} --resume (or --abort)",
                staging.path.display(),
                k.token,
                a.dir.display()
            ));
        }
        Err(e) => {
            staging.remove();
            return Err(e.to_string());
        }
    }
    let r = (|| {
        if a.resume {
            crate::meta::set_xattr(&staging.path, KEPT, None).or_else(|e| if e.contains("No data") { Ok(()) } else { Err(e) })?;
        }
        let got = match call(&staging.at, &Op::TreeHash { path: staging.rel.clone() })? {
            Reply::TreeHash(h) => h,
            _ => return Err("the daemon answered something else".into()),
        };
        if got != root {
            return Err(format!(
                "the tree received does not match the stream's (content hash {} against {})",
                hex(&got),
                hex(&root)
            ));
        }
        std::fs::rename(&staging.path, dst).map_err(|e| format!("{}: {e}", dst.display()))
    })();
    if let Err(e) = r {
        staging.remove();
        return Err(e);
    }
    progress.done(frames.read);
    if !name.is_empty() {
        let dat = locate(dst, true, &None)?;
        call(&dat, &Op::Snapshot { path: store_path(&dat), name: name.clone() })?;
    }
    eprintln!(
        "scion receive: {} ({}, snapshot {})",
        dst.display(),
        if staging.clone { "an increment on a base found here" } else { "a full tree" },
        String::from_utf8_lossy(&name)
    );
    Ok(())
}

pub fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies frames to the tree being built.
struct Builder {
    top: PathBuf,
    /// Directories inside the tree checked to be directories (not symlinks) so far; emptied
    /// by a deletion, the only frame that can turn one into something else.
    checked: std::collections::HashSet<PathBuf>,
    /// The base tree (for copies), if any.
    base: Option<PathBuf>,
    /// The file `Data` and `Hole` frames go to, and its metadata, set when it is done.
    open: Option<(std::fs::File, PathBuf, Meta)>,
}

/// Makes way for a new file, symlink or special file at `p`: what is there, unless a
/// directory (which only a Delete frame removes), goes.
fn replace_file(p: &Path) -> Result<(), String> {
    match p.symlink_metadata() {
        Ok(m) if !m.is_dir() => std::fs::remove_file(p).map_err(io(p)),
        _ => Ok(()),
    }
}

/// An I/O error named by its path.
fn io(p: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", p.display())
}

impl Builder {
    /// `p` inside the tree at `top`, every directory on the way a real directory.
    fn inside(top: &Path, p: &[u8]) -> Result<PathBuf, String> {
        scion::stream::check_path(p)?;
        let mut at = top.to_path_buf();
        let names: Vec<&[u8]> = p.split(|&c| c == b'/').filter(|n| !n.is_empty()).collect();
        for (k, n) in names.iter().enumerate() {
            at.push(std::ffi::OsStr::from_bytes(n));
            if k + 1 < names.len() {
                match at.symlink_metadata() {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => return Err(format!("{}: not a directory on the way", at.display())),
                    Err(e) => return Err(format!("{}: {e}", at.display())),
                }
            }
        }
        Ok(at)
    }

    fn path(&mut self, p: &[u8]) -> Result<PathBuf, String> {
        if p.is_empty() {
            return Err("the stream names the tree's top where an entry is due".into());
        }
        scion::stream::check_path(p)?;
        let full = self.top.join(std::ffi::OsStr::from_bytes(p));
        let parent = full.parent().unwrap_or(&self.top).to_path_buf();
        if parent != self.top && !self.checked.contains(&parent) {
            Self::inside(&self.top, p)?;
            self.checked.insert(parent);
        }
        Ok(full)
    }

    fn close(&mut self) -> Result<(), String> {
        if let Some((f, p, meta)) = self.open.take() {
            crate::meta::apply_open(&f, &p, &meta)?;
        }
        Ok(())
    }

    fn apply(&mut self, f: Frame) -> Result<(), String> {
        if !matches!(f, Frame::Data { .. } | Frame::Hole { .. }) {
            self.close()?;
        }
        match f {
            Frame::Begin { .. } | Frame::End { .. } | Frame::Resume { .. } => {
                return Err("a Begin, Resume or End frame in the middle".into())
            }
            Frame::Delete { path } => {
                let p = self.path(&path)?;
                self.checked.clear();
                match p.symlink_metadata() {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p).map_err(io(&p))?,
                    Ok(_) => std::fs::remove_file(&p).map_err(io(&p))?,
                    Err(e) => return Err(format!("{}: {e} (the stream deletes what its base holds)", p.display())),
                }
            }
            Frame::Dir { path } => {
                let p = self.path(&path)?;
                std::fs::create_dir(&p).map_err(io(&p))?;
            }
            Frame::File { path, size, fresh, meta } => {
                let p = self.path(&path)?;
                let create = || {
                    use std::os::unix::fs::OpenOptionsExt;
                    let mode = u32::from(meta.perm) & 0o777;
                    std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&p)
                };
                let file = if fresh {
                    create().or_else(|e| {
                        if e.kind() != std::io::ErrorKind::AlreadyExists {
                            return Err(e);
                        }
                        replace_file(&p).map_err(std::io::Error::other)?;
                        create()
                    })
                } else {
                    std::fs::OpenOptions::new().write(true).open(&p)
                }
                .map_err(io(&p))?;
                file.set_len(size).map_err(io(&p))?;
                self.open = Some((file, p, meta));
            }
            Frame::Data { offset, bytes } => {
                let Some((file, p, _)) = &self.open else {
                    return Err("data with no file open".into());
                };
                file.write_all_at(&bytes, offset).map_err(io(p))?;
            }
            Frame::Hole { offset, len } => {
                let Some((file, p, _)) = &self.open else {
                    return Err("a hole with no file open".into());
                };
                use std::os::fd::AsRawFd;
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                // SAFETY: a valid descriptor; offset and length checked to fit by the decoder.
                let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, len as i64) };
                if r != 0 {
                    return Err(io(p)(std::io::Error::last_os_error()));
                }
            }
            Frame::Symlink { path, target, meta } => {
                let p = self.path(&path)?;
                replace_file(&p)?;
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), &p).map_err(io(&p))?;
                crate::meta::apply(&p, &meta, true)?;
            }
            Frame::Special { path, kind, rdev, meta } => {
                let p = self.path(&path)?;
                replace_file(&p)?;
                let fmt = match kind {
                    4 => libc::S_IFIFO,
                    5 => libc::S_IFSOCK,
                    6 => libc::S_IFCHR,
                    _ => libc::S_IFBLK,
                };
                let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
                // SAFETY: a valid C string.
                if unsafe { libc::mknod(c.as_ptr(), fmt | 0o600, libc::dev_t::from(rdev)) } != 0 {
                    return Err(io(&p)(std::io::Error::last_os_error()));
                }
                crate::meta::apply(&p, &meta, true)?;
            }
            Frame::Link { path, target } => {
                let (p, t) = (self.path(&path)?, self.path(&target)?);
                std::fs::hard_link(&t, &p).map_err(io(&p))?;
            }
            Frame::Copy { path, from } => {
                let p = self.path(&path)?;
                let Some(base) = &self.base else {
                    return Err("a copy from the base in a full stream".into());
                };
                let src = Self::inside(base, &from)?;
                if !src.symlink_metadata().map_err(io(&src))?.is_file() {
                    return Err(format!("{}: not a file to copy", src.display()));
                }
                // copy_file_range: the copy shares the base's blocks.
                std::fs::copy(&src, &p).map_err(io(&p))?;
            }
            Frame::Meta { path, meta } => {
                let p = if path.is_empty() { self.top.clone() } else { self.path(&path)? };
                crate::meta::apply(&p, &meta, true)?;
            }
        }
        Ok(())
    }
}
