//! One owner per store: an exclusive `flock` on the file `lock`, which also records who holds
//! it, so that a refused second owner can be told which process to look at.

use crate::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// How long a lock held by a process that is exiting is waited for. A daemon killed with
/// SIGKILL is a zombie while its threads end (one waiting on the kernel for FUSE can take a
/// moment), and it holds the lock until the last of them is gone; a mount right after the
/// kill should not be refused for that.
const DYING_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a lock held by a daemon whose mount is gone is waited for: after a plain
/// `umount MNT` (mount(8), systemd, a test harness) the daemon still writes its final
/// checkpoint, and `mount` right after must wait for it, as any filesystem's remount does.
const UNMOUNTED_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(300);
/// How long a holder whose mount point left the mount table may take to say it is
/// unmounting (it notices when the kernel ends its session).
const GONE_MOUNT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
        if !take_or_wait_for_the_dying(&mut file) {
            let mut who = String::new();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut who);
            let who = who.lines().collect::<Vec<_>>().join(", ");
            return Err(Error::InUse(format!(
                "store {} is in use by another scion process ({}): work through its mount, or unmount it first",
                dir.display(),
                if who.is_empty() { "holder unknown" } else { &who }
            )));
        }
        record(&mut file, holder)?;
        Ok(StoreLock { file })
    }

    /// Rewrites the holder description (the pid line stays first).
    pub fn describe(&mut self, holder: &str) -> Result<()> {
        record(&mut self.file, holder)
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

/// Writes this process as the lock's holder: over the old text, then cut to length, never
/// truncated first, so that a process waiting for the lock always reads a pid line. Read
/// between a truncation and the write, an empty file made `mount` right after a `umount`
/// refuse the store as held by an unknown process instead of waiting for its daemon.
fn record(file: &mut File, holder: &str) -> Result<()> {
    let text = format!("pid={}\n{}\n", std::process::id(), holder);
    file.rewind().map_err(|e| Error::io("lock file", e))?;
    file.write_all(text.as_bytes()).map_err(|e| Error::io("lock file", e))?;
    file.set_len(text.len() as u64).map_err(|e| Error::io("lock file", e))
}

/// Takes the lock at once, or after its holder (the pid the file names) has finished exiting,
/// waiting at most `DYING_HOLDER_WAIT` for that. False if a live process holds it.
fn take_or_wait_for_the_dying(file: &mut File) -> bool {
    let try_lock = |f: &File| unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if try_lock(file) {
        return true;
    }
    let mut who = String::new();
    let _ = file.read_to_string(&mut who);
    let Some(pid) = who.lines().next().and_then(|l| l.strip_prefix("pid=")).and_then(|p| p.trim().parse::<u32>().ok()) else {
        return false;
    };
    let start = std::time::Instant::now();
    let mut said = false;
    loop {
        let waited = start.elapsed();
        // The holder rewrites the file when its mount goes: read it afresh each time.
        let _ = file.rewind();
        let mut now = String::new();
        if file.read_to_string(&mut now).is_ok() && !now.is_empty() {
            who = now;
        }
        let dying = exiting(pid) && waited < DYING_HOLDER_WAIT;
        let finishing = waited < UNMOUNTED_HOLDER_WAIT && unmounted_holder(pid, &who);
        // `umount MNT; mount ...` at once: the kernel let the mount go before its daemon saw
        // it and said so in the file; give it a moment to.
        let unmounting_soon = waited < GONE_MOUNT_GRACE && mount_gone(pid, &who);
        if !dying && !finishing && !unmounting_soon {
            return try_lock(file);
        }
        if finishing && !said && waited > std::time::Duration::from_secs(2) {
            eprintln!("scion: waiting for process {pid}, which is finishing the unmount of this store (its final checkpoint)");
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        if try_lock(file) {
            return true;
        }
    }
}

/// True if process `pid` lives and says, in the lock file, that it is finishing an unmount
/// (`unmounting ...`: a daemon whose mount is gone, writing its final checkpoint).
fn unmounted_holder(pid: u32, who: &str) -> bool {
    pid != std::process::id()
        && who.lines().nth(1).is_some_and(|l| l.starts_with("unmounting"))
        && std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// True if process `pid` lives and says it is mounted at a mount point that is not in the
/// mount table any more.
fn mount_gone(pid: u32, who: &str) -> bool {
    let Some(mnt) = who.lines().nth(1).and_then(|l| l.strip_prefix("mounted at ")) else { return false };
    // mountinfo escapes space, tab, newline and backslash as octal.
    let escaped: String = mnt
        .chars()
        .map(|c| match c {
            ' ' | '\t' | '\n' | '\\' => format!("\\{:03o}", c as u32),
            c => c.to_string(),
        })
        .collect();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    pid != std::process::id()
        && std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !table.lines().any(|l| l.split(' ').nth(4) == Some(escaped.as_str()))
}

/// True if process `pid` is a zombie: it is exiting, and its other threads may still be
/// ending (a killed process keeps its files, and so the lock, until the last is gone). A pid
/// that is gone holds nothing, and one reused by now is not a zombie: either way the lock is
/// tried once more and refused if held.
fn exiting(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        // The state follows the command name in parentheses, which may hold anything.
        Ok(s) => s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|st| st == "Z" || st == "X"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_holder(dir: &Path, pid: u32) {
        std::fs::write(dir.join("lock"), format!("pid={pid}\nsomewhere\n")).unwrap();
    }

    #[test]
    fn a_live_or_gone_holder_is_refused_at_once_an_exiting_one_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let held = StoreLock::acquire(dir.path(), "first").unwrap();
        // This process is alive: refused without waiting, naming it.
        let t = std::time::Instant::now();
        let e = StoreLock::acquire(dir.path(), "second").err().expect("refused");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        assert!(e.to_string().contains(&format!("pid={}", std::process::id())), "{e}");
        // The file now names a zombie (as a killed daemon is while its threads end): the
        // second owner waits, and gets the lock once it is let go.
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let pid = zombie.id();
        while !exiting(pid) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        name_holder(dir.path(), pid);
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || StoreLock::acquire(&path, "second").map(drop));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!waiter.is_finished(), "took a lock still held");
        drop(held);
        waiter.join().unwrap().expect("the lock, once let go");
        zombie.wait().unwrap();
        // A pid that is gone holds nothing: a lock held anyway is refused at once.
        let held = StoreLock::acquire(dir.path(), "first").unwrap();
        name_holder(dir.path(), pid);
        let t = std::time::Instant::now();
        assert!(StoreLock::acquire(dir.path(), "second").is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        drop(held);
    }
}
