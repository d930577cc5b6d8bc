//! The host filesystem, as scion sees it.
//!
//! Every byte scion reads from or writes to the directory that holds a store goes through
//! [`HostFs`]. In production that is [`OsHost`], a thin layer over `std::fs`. The tests put
//! other hosts in its place: [`crate::sim::SimHost`] keeps the files in memory and records
//! every write and sync, so the crash harness can rebuild each state a power cut could
//! leave; [`crate::faults::FaultyHost`] wraps any host and makes chosen calls fail or
//! return flipped bits. The interface is the few calls the store needs, nothing more.

use crate::{Error, Result};
use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// A shared handle on a host filesystem.
pub type Host = Arc<dyn HostFs>;

/// The real filesystem.
pub fn os_host() -> Host {
    Arc::new(OsHost)
}

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Must exist; reads only.
    Read,
    /// Must exist; reads and writes.
    ReadWrite,
    /// Created if absent, content kept.
    Create,
    /// Created if absent, emptied if present.
    Truncate,
}

/// An open host file. Positions are explicit: scion never relies on a file offset.
pub trait HostFile: Send + Sync {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data and size durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Deallocates a range, which then reads as zeros; the size stays.
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Allocates a range (reading as zeros), growing the file to cover it (`fallocate`
    /// mode 0). Hosts without it say `Unsupported`.
    fn allocate(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// The ranges `[start, end)` that hold host space, in order: written data, and space
    /// allocated but never written (`fallocate`), which `SEEK_DATA` counts as a hole on ext4
    /// (`FIEMAP`; `SEEK_DATA` and `SEEK_HOLE` where the host has no `FIEMAP`). `None` where
    /// the host cannot tell.
    fn data_ranges(&self) -> io::Result<Option<Vec<(u64, u64)>>> {
        Ok(None)
    }
    /// Asks the host to start reading a range into its cache (`POSIX_FADV_WILLNEED`), for
    /// a read expected soon; returns at once. A hint: hosts without it do nothing.
    fn will_need(&self, _offset: u64, _len: u64) {}
    /// True if every page of a range is in the host's cache, so that reading it will not wait
    /// for a disk (`cachestat`, Linux 6.5). A hint, stale as soon as it is given; false where
    /// the host cannot tell.
    fn cached(&self, _offset: u64, _len: u64) -> bool {
        false
    }
}

/// Space of the host filesystem, as `statvfs` gives it.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostSpace {
    pub block_size: u64,
    pub blocks: u64,
    pub free: u64,
    pub available: u64,
}

pub trait HostFs: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>>;
    /// An existing file opened for reads (and writes if `write`) that bypass the host's page
    /// cache (`O_DIRECT`): offsets, lengths and buffers must be multiples of 4096. `None`
    /// where the host has no such I/O; the caller then goes through `open`'s handle.
    fn open_direct(&self, _path: &Path, _write: bool) -> io::Result<Option<Arc<dyn HostFile>>> {
        Ok(None)
    }
    /// An existing file opened for reads through the page cache but without the host's
    /// readahead (`POSIX_FADV_RANDOM`), for reads that want one block and nothing after it.
    /// `None` where the host has no such hint; the caller then reads through `open`'s handle.
    fn open_random(&self, _path: &Path) -> io::Result<Option<Arc<dyn HostFile>>> {
        Ok(None)
    }
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, OpenMode::Read)?;
        let mut buf = vec![0; f.len()? as usize];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Names in a directory (`.` and `..` excluded), unsorted.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// Makes the entries created and removed in a directory durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Bytes a file occupies (holes excluded).
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64>;
    fn space(&self, path: &Path) -> io::Result<HostSpace>;
    /// Takes the store's exclusive lock; dropping the returned value releases it.
    fn lock(&self, dir: &Path, holder: &str) -> Result<Box<dyn Any + Send>>;
}

/// The real filesystem, through `std::fs` and a few `libc` calls.
pub struct OsHost;

struct OsFile(File);

impl HostFile for OsFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn will_need(&self, offset: u64, len: u64) {
        // SAFETY: an advice on an open descriptor; its failure costs only the hint.
        unsafe { libc::posix_fadvise(self.0.as_raw_fd(), offset as libc::off_t, len as libc::off_t, libc::POSIX_FADV_WILLNEED) };
    }
    fn cached(&self, offset: u64, len: u64) -> bool {
        // include/uapi/linux/mman.h; the syscall's number is 451 on every architecture.
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        const SYS_CACHESTAT: libc::c_long = 451;
        if len == 0 {
            return true;
        }
        let range = Range { off: offset, len };
        let mut stat = Stat::default();
        // SAFETY: the kernel reads `range` and writes `stat`, both live for the call; an
        // older kernel answers ENOSYS.
        let r = unsafe { libc::syscall(SYS_CACHESTAT, self.0.as_raw_fd(), &range as *const Range, &mut stat as *mut Stat, 0u32) };
        let pages = (offset + len).div_ceil(4096) - offset / 4096;
        r == 0 && stat.nr_cache >= pages
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn data_ranges(&self) -> io::Result<Option<Vec<(u64, u64)>>> {
        if let Some(r) = fiemap(self.0.as_raw_fd())? {
            return Ok(Some(r));
        }
        let fd = self.0.as_raw_fd();
        let len = self.len()? as libc::off_t;
        let mut out = Vec::new();
        let mut at: libc::off_t = 0;
        while at < len {
            // SAFETY: lseek on an open descriptor.
            let start = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
            if start < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::ENXIO) => Ok(Some(out)), // no data past `at`
                    Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(None),
                    _ => Err(e),
                };
            }
            // SAFETY: as above.
            let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
            if end < 0 {
                return Err(io::Error::last_os_error());
            }
            out.push((start as u64, end as u64));
            at = end;
        }
        Ok(Some(out))
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let r = unsafe {
            libc::fallocate(
                self.0.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let r = unsafe { libc::fallocate(self.0.as_raw_fd(), 0, offset as libc::off_t, len as libc::off_t) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl HostFs for OsHost {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        let mut o = OpenOptions::new();
        o.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                o.write(true);
            }
            OpenMode::Create => {
                o.write(true).create(true).truncate(false);
            }
            OpenMode::Truncate => {
                o.write(true).create(true).truncate(true);
            }
        }
        Ok(Arc::new(OsFile(o.open(path)?)))
    }
    fn open_direct(&self, path: &Path, write: bool) -> io::Result<Option<Arc<dyn HostFile>>> {
        use std::os::unix::fs::OpenOptionsExt;
        match OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => Ok(Some(Arc::new(OsFile(f)))),
            // A filesystem without direct I/O refuses the flag.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn open_random(&self, path: &Path) -> io::Result<Option<Arc<dyn HostFile>>> {
        use std::os::fd::AsRawFd;
        let f = OpenOptions::new().read(true).open(path)?;
        // The hint belongs to this open file description alone: the store's other handle on
        // the pack keeps its readahead for sequential reads.
        match unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) } {
            0 => Ok(Some(Arc::new(OsFile(f)))),
            _ => Ok(None),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(path)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(path)?.blocks() * 512)
    }
    fn space(&self, path: &Path) -> io::Result<HostSpace> {
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(HostSpace {
            block_size: st.f_frsize.max(512),
            blocks: st.f_blocks,
            free: st.f_bfree,
            available: st.f_bavail,
        })
    }
    fn lock(&self, dir: &Path, holder: &str) -> Result<Box<dyn Any + Send>> {
        Ok(Box::new(crate::StoreLock::acquire(dir, holder)?))
    }
}

/// Fsyncs a directory so that entries created or removed in it are durable.
pub fn sync_dir(host: &Host, dir: &Path) -> Result<()> {
    host.sync_dir(dir)
        .map_err(|e| Error::io(format!("fsync of directory {}", dir.display()), e))
}

/// The extents of an open file (`FS_IOC_FIEMAP`), merged into ranges: written, unwritten
/// (allocated ahead) and delayed-allocation ones alike. `None` where the host has no FIEMAP.
fn fiemap(fd: std::os::fd::RawFd) -> io::Result<Option<Vec<(u64, u64)>>> {
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_EXTENT_LAST: u32 = 0x1;
    const BATCH: usize = 256;
    // struct fiemap (32 bytes) and then BATCH struct fiemap_extent (56 bytes each).
    const HEAD: usize = 32;
    const EXT: usize = 56;
    let u64_at = |b: &[u64], off: usize| -> u64 {
        let bytes: &[u8] = as_bytes(b);
        u64::from_ne_bytes(bytes[off..off + 8].try_into().unwrap())
    };
    let u32_at = |b: &[u64], off: usize| -> u32 {
        let bytes: &[u8] = as_bytes(b);
        u32::from_ne_bytes(bytes[off..off + 4].try_into().unwrap())
    };
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut at = 0u64;
    // (u64s, for the struct's alignment.)
    let mut buf = vec![0u64; (HEAD + BATCH * EXT) / 8];
    loop {
        buf.fill(0);
        {
            let b = as_bytes_mut(&mut buf);
            b[0..8].copy_from_slice(&at.to_ne_bytes()); // fm_start
            b[8..16].copy_from_slice(&(u64::MAX - at).to_ne_bytes()); // fm_length
            b[24..28].copy_from_slice(&(BATCH as u32).to_ne_bytes()); // fm_extent_count
        }
        // SAFETY: the buffer is a struct fiemap with room for BATCH extents, as the kernel
        // expects from fm_extent_count; it writes only within it.
        let r = unsafe { libc::ioctl(fd, FS_IOC_FIEMAP as _, buf.as_mut_ptr()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY) | Some(libc::EINVAL) => Ok(None),
                _ => Err(e),
            };
        }
        let mapped = (u32_at(&buf, 20) as usize).min(BATCH); // fm_mapped_extents
        let mut last = mapped == 0;
        for i in 0..mapped {
            let x = HEAD + i * EXT;
            let (start, len, flags) = (u64_at(&buf, x), u64_at(&buf, x + 16), u32_at(&buf, x + 40));
            match out.last_mut() {
                Some(l) if l.1 >= start => l.1 = l.1.max(start + len),
                _ => out.push((start, start + len)),
            }
            at = start + len;
            last |= flags & FIEMAP_EXTENT_LAST != 0;
        }
        if last {
            return Ok(Some(out));
        }
    }
}

fn as_bytes(b: &[u64]) -> &[u8] {
    // SAFETY: any u64 is 8 plain bytes; the slice covers exactly the same memory.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast(), b.len() * 8) }
}

fn as_bytes_mut(b: &mut [u64]) -> &mut [u8] {
    // SAFETY: as above, and any byte pattern is a valid u64.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast(), b.len() * 8) }
}
