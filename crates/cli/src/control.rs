//! The control socket: while a store is mounted, `scion clone`, `snapshot`, `destroy` and
//! `list` ask its daemon to do the work (the store is locked by it), through a Unix socket
//! in the store directory (mode 0600: only the user who mounted it may ask).
//!
//! Messages are framed: `u32 length (LE)` then the body. A request body is `b"SCNC"`, a
//! version byte, an op byte, a u32 field count and the fields (u32 length + bytes); a reply
//! body is a status byte (0, or the errno) and a UTF-8 text. Decoding is bounded: at most
//! `MAX_MESSAGE` bytes and `MAX_FIELDS` fields, every length checked against what remains.

use scion_daemon::Engine;
use scion_fs::{Fs, NsKind};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use scion::wire::{read_frame, write_frame, Op, Request};

pub fn socket_path(store: &Path) -> PathBuf {
    store.join("control.sock")
}

/// Sends a request to the daemon of `store`; the reply's text on success, or an error.
pub fn call(store: &Path, req: &Request) -> Result<String, String> {
    let sock = socket_path(store);
    let mut s =
        UnixStream::connect(&sock).map_err(|e| format!("cannot reach the daemon at {}: {e}", sock.display()))?;
    write_frame(&mut s, &req.encode()).map_err(|e| format!("sending to the daemon: {e}"))?;
    let reply = read_frame(&mut s).map_err(|e| format!("reading the daemon's reply: {e}"))?;
    let (status, text) = reply.split_first().ok_or("empty reply from the daemon")?;
    let text = String::from_utf8_lossy(text).into_owned();
    if *status == 0 {
        Ok(text)
    } else {
        Err(text)
    }
}

pub use scion_fs::Inval as Invalidate;

/// How long a client may take to send its request or read its reply: an idle or stuck
/// client must not hold a serving thread (nor, through it, the engine) for ever.
const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Clients served at once; more wait in the listen queue.
const MAX_CLIENTS: usize = 16;

/// Tells the kernel to forget what changes behind its back made wrong (without the engine
/// lock: the kernel may call back into the daemon meanwhile).
pub fn invalidate(notifier: &fuser::Notifier, inval: &[Invalidate]) {
    for i in inval {
        let r = match i {
            Invalidate::Entry(p, n) => notifier.inval_entry(fuser::INodeNo(*p), std::ffi::OsStr::from_bytes(n)),
            Invalidate::Inode(p) => notifier.inval_inode(fuser::INodeNo(*p), 0, 0),
        };
        // ENOENT: the kernel had already dropped it.
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::debug!("invalidation {i:?}: {e}");
            }
        }
    }
}

/// Performs a request on an open filesystem: the reply text, and what to invalidate.
pub fn execute(fs: &mut Fs, req: &Request) -> Result<(String, Vec<Invalidate>), String> {
    let f = |i: usize| -> Result<&[u8], String> {
        req.fields
            .get(i)
            .map(|v| v.as_slice())
            .ok_or_else(|| "missing argument".to_string())
    };
    let show = |p: &[u8]| format!("/{}", String::from_utf8_lossy(p).trim_start_matches('/'));
    let errno = |what: String| move |e: i32| format!("{what}: {}", std::io::Error::from_raw_os_error(e));
    match req.op {
        Op::Clone => {
            let (src, dst) = (f(0)?, f(1)?);
            let excludes: Vec<Vec<Vec<u8>>> = req.fields[2..]
                .iter()
                .map(|e| {
                    e.split(|b| *b == b'/')
                        .filter(|c| !c.is_empty() && *c != b".")
                        .map(|c| c.to_vec())
                        .collect()
                })
                .filter(|v: &Vec<Vec<u8>>| !v.is_empty())
                .collect();
            if excludes.iter().any(|e| e.iter().any(|c| c == b"..")) {
                return Err("an excluded path may not contain '..'".into());
            }
            let s = fs.resolve_path(src).map_err(errno(show(src)))?;
            let (p, name) = fs.resolve_parent(dst).map_err(errno(show(dst)))?;
            fs.clone_dir(s, p, &name, &excludes, &show(src).into_bytes())
                .map_err(errno(format!("clone of {} to {}", show(src), show(dst))))?;
            Ok((
                format!("cloned {} to {}", show(src), show(dst)),
                vec![Invalidate::Entry(p, name), Invalidate::Inode(p)],
            ))
        }
        Op::Snapshot => {
            let (path, name) = (f(0)?, f(1)?);
            let d = fs.resolve_path(path).map_err(errno(show(path)))?;
            fs.snapshot(d, name, &show(path).into_bytes())
                .map_err(errno(format!("snapshot of {}", show(path))))?;
            let snapdir = d | scion_fs::clone::SNAPDIR_BIT;
            Ok((
                format!(
                    "snapshot {} of {} (at {}/.snapshot/{})",
                    String::from_utf8_lossy(name),
                    show(path),
                    show(path).trim_end_matches('/'),
                    String::from_utf8_lossy(name)
                ),
                vec![Invalidate::Entry(snapdir, name.to_vec()), Invalidate::Inode(snapdir)],
            ))
        }
        Op::Destroy if f(0)?.starts_with(b"@") => {
            // By id, as `scion list` shows it (a snapshot whose directory is gone has no path).
            let id: u32 = std::str::from_utf8(&f(0)?[1..])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("a clone id is @ and a number, as `scion list` shows it")?;
            fs.destroy_id(id).map_err(|e| {
                if e == libc::EINVAL || e == libc::ENOENT {
                    format!("no clone or snapshot with id {id}")
                } else {
                    errno(format!("destroy of @{id}"))(e)
                }
            })?;
            Ok((format!("destroyed @{id}"), Vec::new()))
        }
        Op::Destroy => {
            let path = f(0)?;
            let (p, name) = fs.resolve_parent(path).map_err(errno(show(path)))?;
            let ino = fs.resolve_path(path).map_err(errno(show(path)))?;
            fs.destroy(ino).map_err(|e| {
                if e == libc::EINVAL {
                    format!("{} is not a clone or snapshot", show(path))
                } else {
                    errno(format!("destroy of {}", show(path)))(e)
                }
            })?;
            Ok((
                format!("destroyed {}", show(path)),
                vec![Invalidate::Entry(p, name), Invalidate::Inode(p)],
            ))
        }
        Op::Repack => {
            let path = f(0)?;
            let budget: u64 = std::str::from_utf8(f(1)?)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("the budget is a number of bytes")?;
            let d = fs.resolve_path(path).map_err(errno(show(path)))?;
            let r = fs
                .repack(d, budget)
                .map_err(errno(format!("repack of {}", show(path))))?;
            Ok((
                format!(
                    "repacked {}: {} files looked at, {} moved ({} MiB), {} already contiguous, {} left (blocks shared with a clone or snapshot), {} left (changes pending, patches or hard links){}",
                    show(path),
                    r.files,
                    r.moved_files,
                    r.moved_bytes >> 20,
                    r.contiguous,
                    r.shared,
                    r.busy,
                    if r.budget_reached { "; stopped at the budget" } else { "" }
                ),
                Vec::new(),
            ))
        }
        Op::Identify => Err("identify is answered by a mounted store's daemon only".into()),
        Op::Scrub => scrub_reply(fs.scrub()).map(|t| (t, Vec::new())),
        Op::List => {
            let mut out = format!(
                "{:<9} {:>4} {:<40} {:<30} {:>20} {:>12} {:>12}\n",
                "KIND", "ID", "PATH", "ORIGIN", "CREATED (UTC)", "REFER", "USED"
            );
            // With a path: the clones and snapshots at or below it.
            let under = req.fields.first().map(|p| show(p)).filter(|p| p != "/");
            for l in fs.list().map_err(errno("list".into()))? {
                if let Some(u) = &under {
                    let p = l.path.as_ref().map(|p| show(p)).unwrap_or_default();
                    if !(p == *u || p.starts_with(&format!("{u}/"))) {
                        continue;
                    }
                }
                let kind = match l.kind {
                    NsKind::Clone => "clone",
                    NsKind::Snapshot => "snapshot",
                    NsKind::Main => "main",
                };
                let path = l.path.map(|p| show(&p)).unwrap_or_else(|| "(directory gone)".into());
                out += &format!(
                    "{:<9} {:>4} {:<40} {:<30} {:>20} {:>12} {:>12}\n",
                    kind,
                    l.ns,
                    path,
                    String::from_utf8_lossy(&l.origin),
                    utc(l.created.sec),
                    human(l.referenced),
                    human(l.exclusive)
                );
            }
            Ok((out, Vec::new()))
        }
    }
}

/// A scrub's reply: its report, as an error if it found damage.
fn scrub_reply(r: scion_fs::FsResult<scion_fs::scrub::ScrubReport>) -> Result<String, String> {
    let rep = r.map_err(|e| format!("scrub: {}", std::io::Error::from_raw_os_error(e)))?;
    let text = rep.to_string();
    if rep.damaged_total > 0 {
        return Err(text);
    }
    Ok(text)
}

/// Seconds since the epoch as UTC, formatted as `fmt` does with
/// (year, month, day, hour, minute, second).
pub fn utc_with(sec: i64, fmt: fn(i32, i32, i32, i32, i32, i32) -> String) -> String {
    let t = sec as libc::time_t;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return sec.to_string();
    }
    fmt(
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
    )
}

fn utc(sec: i64) -> String {
    utc_with(sec, |y, mo, d, h, mi, s| {
        format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
    })
}

pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Serves the control socket of a mounted store until the process ends. Each client is
/// served on a thread of its own (at most `MAX_CLIENTS` at once), with `CLIENT_TIMEOUT` to
/// send its request and take its reply; requests still take the engine lock one at a time.
/// `device` is the mount's device number (`major:minor`, as in /proc/self/mountinfo), which
/// `Op::Identify` answers so that a client can tell this daemon's mount from another FUSE
/// mount that only claims the store's name.
pub fn serve(store: &Path, engine: Engine, notifier: fuser::Notifier, device: String) -> Result<(), String> {
    let path = socket_path(store);
    // We hold the store's lock, so a socket left here is a dead daemon's.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("control socket {}: {e}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    // Only the user who mounted the store may ask: a socket left open to others would let
    // any local user clone, snapshot and destroy.
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(&path);
        return Err(format!(
            "control socket {}: cannot make it private: {e}",
            path.display()
        ));
    }
    let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(s) = conn else { continue };
            use std::sync::atomic::Ordering;
            while busy.load(Ordering::Acquire) >= MAX_CLIENTS {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            busy.fetch_add(1, Ordering::AcqRel);
            let (engine, notifier, device, busy) = (engine.clone(), notifier.clone(), device.clone(), busy.clone());
            std::thread::spawn(move || {
                serve_client(s, &engine, &notifier, &device);
                busy.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    Ok(())
}

fn serve_client(mut s: UnixStream, engine: &Engine, notifier: &fuser::Notifier, device: &str) {
    let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
    let reply = match read_frame(&mut s)
        .map_err(|e| e.to_string())
        .and_then(|b| Request::decode(&b))
    {
        Err(e) => Err(e),
        Ok(req) if req.op == Op::Identify => Ok(device.to_string()),
        // Reads every block: without the engine lock, over a pinned committed state.
        Ok(req) if req.op == Op::Scrub => scrub_reply(engine.scrub()),
        Ok(req) => {
            let r = {
                let mut fs = engine.lock();
                execute(&mut fs, &req).map(|(t, mut inval)| {
                    inval.extend(fs.take_invalidations());
                    (t, inval)
                })
            };
            // (Test only: the command keeps the engine a while longer, as one finishing its
            // reply when the unmount comes would.)
            scion_fs::failpoint::pause("control.hold");
            // Outside the engine lock: the kernel may call back into the daemon.
            if let Ok((_, inval)) = &r {
                invalidate(notifier, inval);
            }
            // Space a command freed (a destroy, or a checkpoint) is back on the host when it
            // returns, as after a checkpoint of an unmounted store.
            engine.punch(true);
            r.map(|(t, _)| t)
        }
    };
    let body = match reply {
        Ok(t) => [&[0u8][..], t.as_bytes()].concat(),
        Err(t) => [&[1u8][..], t.as_bytes()].concat(),
    };
    let _ = write_frame(&mut s, &body);
}

use std::os::unix::ffi::OsStrExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let r = Request {
            op: Op::Clone,
            fields: vec![b"a/b".to_vec(), b"c".to_vec(), b"x".to_vec()],
        };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let b = r.encode();
        for cut in 0..b.len() {
            assert!(Request::decode(&b[..cut]).is_err());
        }
        let mut huge = b[..6].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::decode(&huge).is_err());
    }
}
