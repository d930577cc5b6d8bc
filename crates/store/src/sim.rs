//! An in-memory host filesystem that records every change and sync made to it.
//!
//! Tests and the crash harness put a [`SimHost`] under a store. From its [`Image`] at the
//! start of a workload and the [`HostOp`] log of the workload, [`crash_image`] rebuilds any
//! state a power cut could leave on a POSIX host: an operation survives for certain only if
//! a later sync covers it (`fdatasync` of its file for data, `fsync` of the parent directory
//! for a name), and every operation not so covered may or may not have reached the disk,
//! independently of the others and, for writes, independently for each 512-byte sector.

use crate::host::{HostFile, HostFs, HostSpace, OpenMode};
use crate::{Error, Result};
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Sector size of the simulated disk: the unit in which a write can be torn. 512 bytes, the
/// logical sector of most disks: a 4 KiB write (a superblock slot, a page of a pack) is not
/// atomic on them either.
pub const SECTOR: u64 = 512;
/// Allocation unit of the simulated filesystem (what `allocated_bytes` and `space` count).
pub const FS_BLOCK: u64 = 4096;

/// One change or sync, as the store issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostOp {
    /// A new file `ino` named `path`.
    Create {
        path: PathBuf,
        ino: u64,
    },
    Write {
        ino: u64,
        offset: u64,
        data: Vec<u8>,
    },
    SetLen {
        ino: u64,
        len: u64,
    },
    Punch {
        ino: u64,
        offset: u64,
        len: u64,
    },
    Remove {
        path: PathBuf,
    },
    MkDir {
        path: PathBuf,
    },
    SyncFile {
        ino: u64,
    },
    SyncDir {
        path: PathBuf,
    },
    /// A label the test puts in the log (where a workload step began, say); no effect.
    Mark(u64),
}

impl HostOp {
    pub fn is_sync(&self) -> bool {
        matches!(self, HostOp::SyncFile { .. } | HostOp::SyncDir { .. })
    }
    /// True if this operation changes the disk.
    pub fn is_change(&self) -> bool {
        !self.is_sync() && !matches!(self, HostOp::Mark(_))
    }
}

/// The files and directories of a host, in memory.
#[derive(Clone, Debug, Default)]
pub struct Image {
    files: HashMap<u64, Vec<u8>>,
    names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    next_ino: u64,
}

impl Image {
    /// The files by path, with their inode numbers (those `HostOp`s name).
    pub fn names(&self) -> impl Iterator<Item = (&PathBuf, u64)> {
        self.names.iter().map(|(p, i)| (p, *i))
    }

    /// Applies one operation; `sectors`, for a write, says which of the 512-byte sectors it
    /// touches reach the disk (all if `None`).
    pub fn apply(&mut self, op: &HostOp, sectors: Option<&[bool]>) {
        match op {
            HostOp::Create { path, ino } => {
                self.files.entry(*ino).or_default();
                self.names.insert(path.clone(), *ino);
                self.next_ino = self.next_ino.max(ino + 1);
            }
            HostOp::Write { ino, offset, data } => {
                let f = self.files.entry(*ino).or_default();
                let end = offset + data.len() as u64;
                for (i, (lo, hi)) in sector_spans(*offset, end).enumerate() {
                    if sectors.is_none_or(|s| s[i]) {
                        if f.len() < hi as usize {
                            f.resize(hi as usize, 0);
                        }
                        f[lo as usize..hi as usize]
                            .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
                    }
                }
            }
            HostOp::SetLen { ino, len } => {
                self.files.entry(*ino).or_default().resize(*len as usize, 0);
            }
            HostOp::Punch { ino, offset, len } => {
                let f = self.files.entry(*ino).or_default();
                let lo = (*offset as usize).min(f.len());
                let hi = ((offset + len) as usize).min(f.len());
                f[lo..hi].fill(0);
            }
            HostOp::Remove { path } => {
                self.names.remove(path);
            }
            HostOp::MkDir { path } => {
                self.dirs.insert(path.clone());
            }
            HostOp::SyncFile { .. } | HostOp::SyncDir { .. } | HostOp::Mark(_) => {}
        }
    }

    /// A digest of the names, directories and contents, to tell states apart.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        for d in &self.dirs {
            h.update(d.as_os_str().as_encoded_bytes());
            h.update(b"\0d");
        }
        for (p, ino) in &self.names {
            h.update(p.as_os_str().as_encoded_bytes());
            h.update(b"\0f");
            let data = &self.files[ino];
            h.update(&(data.len() as u64).to_le_bytes());
            h.update(data);
        }
        *h.finalize().as_bytes()
    }

    /// Total bytes of the named files.
    pub fn bytes(&self) -> u64 {
        self.names.values().map(|i| self.files[i].len() as u64).sum()
    }
}

/// The sector-aligned pieces `[lo, hi)` of the byte range `[start, end)`.
pub fn sector_spans(start: u64, end: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut lo = start;
    std::iter::from_fn(move || {
        if lo >= end {
            return None;
        }
        let hi = ((lo / SECTOR + 1) * SECTOR).min(end);
        let span = (lo, hi);
        lo = hi;
        Some(span)
    })
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// For each of the first `upto` operations of `log`, whether a sync later in that prefix
/// makes it durable.
pub fn durable(log: &[HostOp], upto: usize) -> Vec<bool> {
    let mut synced_files = BTreeSet::new();
    let mut synced_dirs = BTreeSet::new();
    let mut out = vec![false; upto];
    for i in (0..upto).rev() {
        out[i] = match &log[i] {
            HostOp::SyncFile { ino } => {
                synced_files.insert(*ino);
                true
            }
            HostOp::SyncDir { path } => {
                synced_dirs.insert(path.clone());
                true
            }
            HostOp::Mark(_) => true,
            HostOp::Write { ino, .. } | HostOp::SetLen { ino, .. } | HostOp::Punch { ino, .. } => {
                synced_files.contains(ino)
            }
            HostOp::Create { path, .. } | HostOp::Remove { path } | HostOp::MkDir { path } => {
                synced_dirs.contains(&parent(path))
            }
        };
    }
    out
}

/// What reaches the disk of one operation not yet durable at the crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    Lost,
    Kept,
    /// A write of which only the sectors marked true reached the disk.
    Torn(Vec<bool>),
}

/// The host state after a power cut just before operation `upto` of `log`, starting from
/// `base`: durable operations are applied; each other one as `fate(index, op)` decides.
/// Operations are applied in log order, so a kept later write wins over an earlier one.
pub fn crash_image(base: &Image, log: &[HostOp], upto: usize, mut fate: impl FnMut(usize, &HostOp) -> Fate) -> Image {
    let durable = durable(log, upto);
    let mut img = base.clone();
    for (i, op) in log[..upto].iter().enumerate() {
        if durable[i] {
            img.apply(op, None);
            continue;
        }
        match fate(i, op) {
            Fate::Lost => {}
            Fate::Kept => img.apply(op, None),
            Fate::Torn(mask) => img.apply(op, Some(&mask)),
        }
    }
    img
}

struct State {
    img: Image,
    log: Option<Vec<HostOp>>,
    locked: BTreeSet<PathBuf>,
    capacity: u64,
}

impl State {
    fn record(&mut self, op: HostOp) {
        self.img.apply(&op, None);
        if let Some(log) = &mut self.log {
            log.push(op);
        }
    }
}

/// The in-memory host. Cloning it gives another handle on the same files.
#[derive(Clone)]
pub struct SimHost {
    state: Arc<Mutex<State>>,
}

impl Default for SimHost {
    fn default() -> Self {
        SimHost::from_image(Image::default())
    }
}

impl SimHost {
    pub fn from_image(img: Image) -> SimHost {
        SimHost {
            state: Arc::new(Mutex::new(State {
                img,
                log: None,
                locked: BTreeSet::new(),
                capacity: u64::MAX,
            })),
        }
    }

    /// Makes writes that would take the named files past `bytes` fail with ENOSPC.
    pub fn set_capacity(&self, bytes: u64) {
        self.state.lock().unwrap().capacity = bytes;
    }

    /// The files as they are now (everything issued, as if all of it had been synced).
    pub fn image(&self) -> Image {
        self.state.lock().unwrap().img.clone()
    }

    /// Starts recording (clearing any earlier log).
    pub fn record(&self) {
        self.state.lock().unwrap().log = Some(Vec::new());
    }

    /// Stops recording and returns the log.
    pub fn take_log(&self) -> Vec<HostOp> {
        self.state.lock().unwrap().log.take().unwrap_or_default()
    }

    /// Puts a label in the log.
    pub fn mark(&self, label: u64) {
        if let Some(log) = &mut self.state.lock().unwrap().log {
            log.push(HostOp::Mark(label));
        }
    }

    /// Length of the log so far.
    pub fn log_len(&self) -> usize {
        self.state.lock().unwrap().log.as_ref().map_or(0, Vec::len)
    }

    fn host_err(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }
}

struct SimFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    writable: bool,
    /// Opened with `open_direct`: offsets and lengths must be 4 KiB multiples, as O_DIRECT
    /// requires (EINVAL otherwise). The crash model is the same: a direct write is durable
    /// only once a sync of the file covers it.
    direct: bool,
}

impl SimFile {
    fn aligned(&self, offset: u64, len: usize) -> io::Result<()> {
        if self.direct && (offset % 4096 != 0 || len % 4096 != 0) {
            return Err(SimHost::host_err(libc::EINVAL));
        }
        Ok(())
    }
}

impl HostFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.aligned(offset, buf.len())?;
        let st = self.state.lock().unwrap();
        let f = &st.img.files[&self.ino];
        let end = offset as usize + buf.len();
        if end > f.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        buf.copy_from_slice(&f[offset as usize..end]);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(SimHost::host_err(libc::EBADF));
        }
        self.aligned(offset, buf.len())?;
        let mut st = self.state.lock().unwrap();
        let len = st.img.files[&self.ino].len() as u64;
        let grow = (offset + buf.len() as u64).saturating_sub(len);
        if grow > 0 && st.img.bytes() + grow > st.capacity {
            return Err(SimHost::host_err(libc::ENOSPC));
        }
        st.record(HostOp::Write {
            ino: self.ino,
            offset,
            data: buf.to_vec(),
        });
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().unwrap().img.files[&self.ino].len() as u64)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(SimHost::host_err(libc::EBADF));
        }
        self.state.lock().unwrap().record(HostOp::SetLen { ino: self.ino, len });
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.state.lock().unwrap().record(HostOp::SyncFile { ino: self.ino });
        Ok(())
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(SimHost::host_err(libc::EBADF));
        }
        self.state.lock().unwrap().record(HostOp::Punch {
            ino: self.ino,
            offset,
            len,
        });
        Ok(())
    }
    /// `fallocate` mode 0: the file grows to cover the range (zeros); like a write, the new
    /// size is durable only once a sync of the file covers it.
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(SimHost::host_err(libc::EBADF));
        }
        let mut st = self.state.lock().unwrap();
        let cur = st.img.files[&self.ino].len() as u64;
        let end = offset + len;
        if end > cur {
            if st.img.bytes() + (end - cur) > st.capacity {
                return Err(SimHost::host_err(libc::ENOSPC));
            }
            st.record(HostOp::SetLen {
                ino: self.ino,
                len: end,
            });
        }
        Ok(())
    }
}

impl HostFs for SimHost {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        let mut st = self.state.lock().unwrap();
        let ino = match (st.img.names.get(path).copied(), mode) {
            (Some(ino), OpenMode::Truncate) => {
                st.record(HostOp::SetLen { ino, len: 0 });
                ino
            }
            (Some(ino), _) => ino,
            (None, OpenMode::Read | OpenMode::ReadWrite) => return Err(SimHost::host_err(libc::ENOENT)),
            (None, OpenMode::Create | OpenMode::Truncate) => {
                if !st.img.dirs.contains(&parent(path)) {
                    return Err(SimHost::host_err(libc::ENOENT));
                }
                let ino = st.img.next_ino.max(1);
                st.record(HostOp::Create {
                    path: path.to_path_buf(),
                    ino,
                });
                ino
            }
        };
        Ok(Arc::new(SimFile {
            state: self.state.clone(),
            ino,
            writable: mode != OpenMode::Read,
            direct: false,
        }))
    }
    fn open_direct(&self, path: &Path, write: bool) -> io::Result<Option<Arc<dyn HostFile>>> {
        let st = self.state.lock().unwrap();
        let ino = *st.img.names.get(path).ok_or_else(|| SimHost::host_err(libc::ENOENT))?;
        Ok(Some(Arc::new(SimFile {
            state: self.state.clone(),
            ino,
            writable: write,
            direct: true,
        })))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock().unwrap();
        if !st.img.names.contains_key(path) {
            return Err(SimHost::host_err(libc::ENOENT));
        }
        st.record(HostOp::Remove {
            path: path.to_path_buf(),
        });
        Ok(())
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let st = self.state.lock().unwrap();
        if !st.img.dirs.contains(path) {
            return Err(SimHost::host_err(libc::ENOENT));
        }
        let files = st.img.names.keys();
        let dirs = st.img.dirs.iter();
        Ok(files
            .chain(dirs)
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock().unwrap();
        let mut missing = Vec::new();
        let mut p = Some(path);
        while let Some(d) = p {
            if d.as_os_str().is_empty() || st.img.dirs.contains(d) {
                break;
            }
            missing.push(d.to_path_buf());
            p = d.parent();
        }
        for d in missing.into_iter().rev() {
            st.record(HostOp::MkDir { path: d });
        }
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock().unwrap();
        st.img.dirs.contains(path) || st.img.names.contains_key(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock().unwrap();
        if !st.img.dirs.contains(path) {
            return Err(SimHost::host_err(libc::ENOENT));
        }
        st.record(HostOp::SyncDir {
            path: path.to_path_buf(),
        });
        Ok(())
    }
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64> {
        let st = self.state.lock().unwrap();
        let ino = st.img.names.get(path).ok_or_else(|| SimHost::host_err(libc::ENOENT))?;
        // Whole sectors holding anything but zeros: punched ranges read as zeros.
        let f = &st.img.files[ino];
        Ok(f.chunks(FS_BLOCK as usize)
            .filter(|s| s.iter().any(|b| *b != 0))
            .count() as u64
            * FS_BLOCK)
    }
    fn space(&self, _path: &Path) -> io::Result<HostSpace> {
        let st = self.state.lock().unwrap();
        let cap = if st.capacity == u64::MAX { 1 << 40 } else { st.capacity };
        let free = cap.saturating_sub(st.img.bytes()) / FS_BLOCK;
        Ok(HostSpace {
            block_size: FS_BLOCK,
            blocks: cap / FS_BLOCK,
            free,
            available: free,
        })
    }
    fn lock(&self, dir: &Path, holder: &str) -> Result<Box<dyn Any + Send>> {
        let mut st = self.state.lock().unwrap();
        if !st.locked.insert(dir.to_path_buf()) {
            return Err(Error::InUse(format!(
                "store {} is in use by another owner (wanted by {holder})",
                dir.display()
            )));
        }
        Ok(Box::new(SimLock {
            state: self.state.clone(),
            dir: dir.to_path_buf(),
        }))
    }
}

struct SimLock {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.state.lock().unwrap().locked.remove(&self.dir);
    }
}
