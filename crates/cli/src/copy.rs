//! Copying a tree through the mount, as `cp -a` does, with progress: where blocks may not be
//! shared because cubes keep them apart (`scion cube create --convert`, `scion cube
//! remove`, a clone from one cube into another). Regular files, directories, symlinks,
//! FIFOs, sockets and devices; modes, owners, mtimes and extended attributes; hard links
//! kept as links; sparse regions left as holes (SEEK_DATA/SEEK_HOLE).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What a copy has done, for its progress line and its summary.
#[derive(Default)]
pub struct Copied {
    pub entries: u64,
    pub bytes: u64,
}

/// Copies what is inside directory `src` into the existing directory `dst`, then sets
/// `dst`'s own metadata as `src`'s. Progress on stderr when `progress`.
pub fn copy_contents(src: &Path, dst: &Path, progress: &mut crate::send_cmd::Progress) -> Result<Copied, String> {
    let mut c = Copier { links: HashMap::new(), done: Copied::default(), progress };
    c.dir_contents(src, dst)?;
    set_meta(src, dst)?;
    Ok(c.done)
}

struct Copier<'a> {
    /// Files with several names already copied: (device, inode) -> the copy's path.
    links: HashMap<(u64, u64), std::path::PathBuf>,
    done: Copied,
    progress: &'a mut crate::send_cmd::Progress,
}

fn err(p: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", p.display())
}

impl Copier<'_> {
    fn dir_contents(&mut self, src: &Path, dst: &Path) -> Result<(), String> {
        let mut names: Vec<_> = std::fs::read_dir(src).map_err(err(src))?.collect::<Result<_, _>>().map_err(err(src))?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let (s, d) = (e.path(), dst.join(e.file_name()));
            self.entry(&s, &d)?;
        }
        Ok(())
    }

    fn entry(&mut self, s: &Path, d: &Path) -> Result<(), String> {
        let m = s.symlink_metadata().map_err(err(s))?;
        let t = m.file_type();
        if !t.is_dir() && m.nlink() > 1 {
            if let Some(first) = self.links.get(&(m.dev(), m.ino())) {
                return std::fs::hard_link(first, d).map_err(err(d));
            }
            self.links.insert((m.dev(), m.ino()), d.to_path_buf());
        }
        if t.is_dir() {
            std::fs::create_dir(d).map_err(err(d))?;
            self.dir_contents(s, d)?;
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(s).map_err(err(s))?, d).map_err(err(d))?;
        } else if t.is_file() {
            self.file(s, d, m.len())?;
        } else if t.is_fifo() || t.is_socket() || t.is_char_device() || t.is_block_device() {
            let c = std::ffi::CString::new(d.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
            // SAFETY: c is a NUL-terminated path; mknod only reads it.
            if unsafe { libc::mknod(c.as_ptr(), m.mode(), m.rdev()) } != 0 {
                return Err(format!("{}: {}", d.display(), std::io::Error::last_os_error()));
            }
        }
        set_meta(s, d)?;
        self.done.entries += 1;
        self.progress.tick(self.done.bytes);
        Ok(())
    }

    /// The file's data regions, copied at their offsets; holes stay holes.
    fn file(&mut self, s: &Path, d: &Path, len: u64) -> Result<(), String> {
        let mut from = File::open(s).map_err(err(s))?;
        let mut to = File::create(d).map_err(err(d))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < len {
            // A filesystem that cannot say gives the offset itself for data and the end for
            // the hole; one that says something impossible is not believed.
            let data = match seek(&from, at, libc::SEEK_DATA) {
                Ok(d) => d.max(at),
                Err(libc::ENXIO) => break, // nothing but a hole to the end
                Err(_) => at,
            };
            if data >= len {
                break;
            }
            let hole = match seek(&from, data, libc::SEEK_HOLE) {
                Ok(h) if h > data => h.min(len),
                _ => len,
            };
            from.seek(SeekFrom::Start(data)).map_err(err(s))?;
            to.seek(SeekFrom::Start(data)).map_err(err(d))?;
            let mut left = hole - data;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = from.read(&mut buf[..want]).map_err(err(s))?;
                if n == 0 {
                    break; // the file shrank meanwhile
                }
                to.write_all(&buf[..n]).map_err(err(d))?;
                left -= n as u64;
                self.done.bytes += n as u64;
                self.progress.tick(self.done.bytes);
            }
            at = hole;
        }
        to.set_len(len).map_err(err(d))
    }
}

/// `lseek`, or its errno.
fn seek(f: &File, at: u64, whence: libc::c_int) -> Result<u64, i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on an open descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), at as libc::off_t, whence) };
    if r >= 0 {
        Ok(r as u64)
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Owner, mode, extended attributes and mtime of `s`, set on `d` (not following symlinks).
fn set_meta(s: &Path, d: &Path) -> Result<(), String> {
    let m = crate::meta::read(s)?;
    crate::meta::apply(d, &m)?;
    let c = std::ffi::CString::new(d.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: m.mtime_sec, tv_nsec: m.mtime_nsec as i64 },
    ];
    // SAFETY: c is a NUL-terminated path and times two timespecs.
    if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(format!("{}: {}", d.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}
