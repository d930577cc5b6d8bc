//! What a command that only asks a mounted store's daemon needs: the mount behind a path,
//! the kernel's cached writes below it flushed, the request and its reply. In the library so
//! that the small front binary (`front.rs`, the `scion` users run) links only this, not the
//! engine: starting the whole binary cost `scion clone` 3-4 ms of its 5 (issue 38 item 3).

use scion_daemon::control::{Op, Reply};
use scion_daemon::server;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The store a mount-table line names, if it is a scion mount: type `fuse.scion` (the store's
/// path as given is its source), or an older scion's `scion:PATH` source.
pub fn mounted_store(fstype: &str, source: &str) -> Option<String> {
    if let Some(p) = source.strip_prefix("scion:") {
        return fstype.starts_with("fuse").then(|| p.to_string());
    }
    (fstype == "fuse.scion").then(|| source.to_string())
}

/// A path resolved to its store: the store directory, the path inside it, and the mount
/// point when the store is mounted (then the daemon does the work).
#[derive(Clone)]
pub struct Located {
    pub store: PathBuf,
    pub rel: Vec<u8>,
    pub mnt: Option<PathBuf>,
    /// The mount's device (`major:minor`), which its daemon must confirm.
    pub device: String,
}

/// Scion mounts: (mount point, store, device), from the kernel's mount table. The store is
/// what the mount *claims* (any FUSE filesystem may call itself `fuse.scion`): a request
/// names the device (`call_mounted`), and the store's daemon refuses one that is not its own.
pub fn scion_mounts() -> Vec<(PathBuf, PathBuf, String)> {
    // Read in one go: the file says its size is 0, so `fs::read_to_string` would begin with
    // reads of 32 bytes and double them, eight reads for this machine's 23 mounts.
    let mut table = String::with_capacity(64 << 10);
    if let Ok(mut f) = std::fs::File::open("/proc/self/mountinfo") {
        use std::io::Read;
        if f.read_to_string(&mut table).is_err() {
            table.clear();
        }
    }
    let unescape = |s: &str| s.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\");
    let mut out = Vec::new();
    for line in table.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(dash) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let src = mounted_store(f.get(dash + 1).unwrap_or(&""), f.get(dash + 2).unwrap_or(&""));
        if let (Some(mp), Some(src)) = (f.get(4), src) {
            out.push((
                PathBuf::from(unescape(mp)),
                PathBuf::from(unescape(&src)),
                f[2].to_string(),
            ));
        }
    }
    out
}

/// The store behind `path` (which must exist, or with `exists` false must not while its
/// parent does), or `store` itself with `path` taken as a store path.
pub fn locate(path: &Path, exists: bool, store: &Option<PathBuf>) -> Result<Located, String> {
    match store {
        Some(_) => locate_in(path, exists, store, &[]),
        None => locate_in(path, exists, store, &scion_mounts()),
    }
}

/// `locate` with the mount table read once for several paths (`scion_mounts`): the kernel
/// writes it out afresh for each read.
pub fn locate_in(path: &Path, exists: bool, store: &Option<PathBuf>, mounts: &[(PathBuf, PathBuf, String)]) -> Result<Located, String> {
    if let Some(store) = store {
        return Ok(Located {
            store: store.clone(),
            rel: path.as_os_str().as_bytes().to_vec(),
            mnt: None,
            device: String::new(),
        });
    }
    let abs = if exists {
        std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        let name = path
            .file_name()
            .ok_or_else(|| format!("{}: not a name for a new directory", path.display()))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let parent = std::fs::canonicalize(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        // (A dangling symlink is there too: not followed.)
        if path.symlink_metadata().is_ok() {
            return Err(format!("{} already exists", path.display()));
        }
        parent.join(name)
    };
    let best = mounts
        .iter()
        .filter(|(mp, _, _)| abs.starts_with(mp))
        .max_by_key(|(mp, _, _)| mp.as_os_str().len())
        .cloned();
    let Some((mp, store, device)) = best else {
        return Err(format!(
            "{} is not inside a scion mount (for an unmounted store, give --store STORE and store paths)",
            abs.display()
        ));
    };
    let rel = abs.strip_prefix(&mp).unwrap();
    Ok(Located {
        store,
        rel: rel.as_os_str().as_bytes().to_vec(),
        mnt: Some(mp),
        device,
    })
}

impl Located {
    /// An unmounted store (what --store names).
    pub fn unmounted(store: PathBuf) -> Located {
        Located { store, rel: Vec::new(), mnt: None, device: String::new() }
    }
    /// The root of a mount from the mount table.
    pub fn mount_root(mnt: PathBuf, store: PathBuf, device: String) -> Located {
        Located { store, rel: Vec::new(), mnt: Some(mnt), device }
    }
}

/// The kernel may hold written data the daemon has not seen yet (writeback caching, a file
/// still open or mapped): a clone is of what processes see, and a diff or scan compares it,
/// so it is flushed first. Only the files open below the command's directories are flushed
/// (`Op::OpenBelow`), so that a clone beside a bulk writer elsewhere in the mount does not
/// wait for the writer's pages; the whole mount (`syncfs`) when the daemon cannot tell them
/// (too many, a file with several names, a caller who may not ask) or one cannot be synced.
pub fn sync_mount(at: &Located, op: &Op) {
    let Some(mnt) = &at.mnt else { return };
    let dirs = scion_daemon::control::settle_dirs(op);
    if !dirs.iter().all(|d| flush_open_below(at, mnt, d)) {
        if let Ok(d) = std::fs::File::open(mnt) {
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs of an open descriptor.
            unsafe { libc::syncfs(d.as_raw_fd()) };
        }
    }
}

/// `fsync` of each file open below `dir` (a path from the mount's root); false if the
/// daemon did not name them or one could not be synced.
fn flush_open_below(at: &Located, mnt: &Path, dir: &[u8]) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let op = Op::OpenBelow { path: dir.to_vec() };
    let Ok(scion_daemon::control::Reply::OpenBelow(files)) = server::call(&at.store, &at.device, Some(mnt), &op, &mut |_, _, _| {}) else {
        return false;
    };
    let top = mnt.join(std::ffi::OsStr::from_bytes(dir));
    files.iter().all(|f| {
        // Read-only, not following a symlink put there meanwhile; an fsync of any
        // descriptor writes the file's cached pages back.
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOATIME)
            .open(top.join(std::ffi::OsStr::from_bytes(f)))
            .and_then(|h| h.sync_all())
            .is_ok()
    })
}

/// A request to the daemon of the mount `at` is in (`at.mnt` must be set), after the kernel's
/// cached writes below the paths it names are flushed (`sync_mount`); the errno of a refusal
/// beside its message. Progress of long operations goes to stderr on a terminal.
pub fn call_mounted(at: &Located, op: &Op) -> Result<Reply, (i32, String)> {
    let mnt = at.mnt.as_ref().expect("call_mounted of an unmounted store");
    // SAFETY: isatty only looks at the descriptor.
    let tty = unsafe { libc::isatty(2) } == 1;
    let mut progress = |_done: u64, _total: u64, what: &str| {
        if tty {
            eprint!("\r{what}\x1b[K");
        }
    };
    // The mount table says which store a mount is, but any FUSE filesystem can claim a
    // name there: the request names the mount's device, and a daemon serving another
    // mount refuses it, so a user's mount cannot steer root's command into root's store.
    let r = match call_settled(at, mnt, op, &mut progress) {
        Some(r) => r,
        None => {
            sync_mount(at, op);
            server::call(&at.store, &at.device, Some(mnt), op, &mut progress)
        }
    };
    if tty {
        eprint!("\r\x1b[K");
    }
    r.map_err(|e| {
        if e.errno == libc::ENODEV {
            let m = format!(
                "{} claims to be store {} but is not that store's mount ({}); refusing",
                mnt.display(),
                at.store.display(),
                e.message
            );
            (e.errno, m)
        } else {
            (e.errno, e.message)
        }
    })
}

/// `op` asked settled (`server::call_settled`): run at once if nothing is open below the
/// directories it reads, so that nothing needs writing back first. None where it must be
/// asked the usual way, after `sync_mount`: files are open there (EBUSY), too many to tell
/// (E2BIG), or the caller may not ask (EPERM). The operation's own refusals with these
/// errnos come back the same way, and are met again when it is asked the usual way.
fn call_settled(at: &Located, mnt: &Path, op: &Op, progress: &mut dyn FnMut(u64, u64, &str)) -> Option<Result<Reply, scion_daemon::control::Failure>> {
    if scion_daemon::control::settle_dirs(op).is_empty() {
        return None;
    }
    match server::call_settled(&at.store, &at.device, Some(mnt), op, progress) {
        Err(e) if matches!(e.errno, libc::EBUSY | libc::E2BIG | libc::EPERM) => None,
        r => Some(r),
    }
}

/// What `scion clone` prints once done.
pub fn cloned(src: &[u8], dst: &[u8]) -> String {
    use scion_daemon::control::show;
    format!("cloned {} to {}", show(src), show(dst))
}

/// What `scion snapshot` prints once done.
pub fn snapshotted(path: &[u8], name: &[u8]) -> String {
    use scion_daemon::control::show;
    let name = String::from_utf8_lossy(name);
    format!("snapshot {name} of {} (at {}/.snapshot/{name})", show(path), show(path).trim_end_matches('/'))
}

/// A snapshot's default name: the UTC time, as `2026-11-24T201502Z`.
pub fn utc_now_name() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    utc_with(now, |y, mo, d, h, mi, s| format!("{y:04}-{mo:02}-{d:02}T{h:02}{mi:02}{s:02}Z"))
}

/// Seconds since the epoch as UTC, formatted as `fmt` does with
/// (year, month, day, hour, minute, second).
pub fn utc_with(sec: i64, fmt: fn(i32, i32, i32, i32, i32, i32) -> String) -> String {
    let t = sec as libc::time_t;
    // SAFETY: tm is plain data, filled by gmtime_r or left unread.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals.
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return sec.to_string();
    }
    fmt(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// A message for a person: the system's " (os error N)" tails dropped (the words before
/// them say the same).
pub fn humane(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find(" (os error ") {
        let tail = &rest[i + 11..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            out.push_str(&rest[..i]);
            rest = &tail[digits + 1..];
        } else {
            out.push_str(&rest[..i + 11]);
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn humane_drops_os_error_tails_only() {
        assert_eq!(super::humane("m/x: No such file or directory (os error 2)"), "m/x: No such file or directory");
        assert_eq!(
            super::humane("a: Input/output error (os error 5); then b: Permission denied (os error 13)"),
            "a: Input/output error; then b: Permission denied"
        );
        assert_eq!(super::humane("kept (os error x) and (os error )"), "kept (os error x) and (os error )");
        assert_eq!(super::humane("nothing to drop"), "nothing to drop");
    }
}
