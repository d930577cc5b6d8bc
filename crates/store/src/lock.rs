//! One owner per store: an exclusive `flock` on the file `lock`, which also records who holds
//! it, so that a refused second owner can be told which process to look at.

use crate::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub struct StoreLock {
    file: File,
}

impl StoreLock {
    /// Takes the lock of the store at `dir`; `holder` describes this owner (for example the
    /// mount point). Fails at once, naming the current holder, if another process has it.
    pub fn acquire(dir: &Path, holder: &str) -> Result<StoreLock> {
        let path = dir.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(format!("open of {}", path.display()), e))?;
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut who = String::new();
            let _ = file.read_to_string(&mut who);
            let who = who.lines().collect::<Vec<_>>().join(", ");
            return Err(Error::InUse(format!(
                "store {} is in use by another scion process ({}): work through its mount, or unmount it first",
                dir.display(),
                if who.is_empty() { "holder unknown" } else { &who }
            )));
        }
        file.set_len(0).map_err(|e| Error::io("lock file", e))?;
        file.rewind().map_err(|e| Error::io("lock file", e))?;
        write!(file, "pid={}\n{}\n", std::process::id(), holder).map_err(|e| Error::io("lock file", e))?;
        Ok(StoreLock { file })
    }

    /// Rewrites the holder description (the pid line stays first).
    pub fn describe(&mut self, holder: &str) -> Result<()> {
        self.file.set_len(0).map_err(|e| Error::io("lock file", e))?;
        self.file.rewind().map_err(|e| Error::io("lock file", e))?;
        write!(self.file, "pid={}\n{}\n", std::process::id(), holder).map_err(|e| Error::io("lock file", e))
    }

    /// True if some process holds the lock of the store at `dir`.
    pub fn is_held(dir: &Path) -> bool {
        match File::open(dir.join("lock")) {
            Ok(f) => {
                let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                if r == 0 {
                    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
                    false
                } else {
                    true
                }
            }
            Err(_) => false,
        }
    }
}
