//! The control socket of a mounted store (`STORE/control.sock`, mode 0600: only the user
//! who mounted it may ask). Each client is served on a thread of its own (at most
//! `MAX_CLIENTS` at once), with `CLIENT_TIMEOUT` to send its request and take its reply;
//! operations still take the engine lock one at a time, except scrub and list, which read
//! a pinned committed state without it (scrub streaming its progress).

use crate::control::{execute, Failure, Op, Reply};
use crate::wire::{self, read_frame, write_frame};
use crate::Engine;
use scion_fs::Inval;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send its request or read a frame of its reply: an idle
/// or stuck client must not hold a serving thread (nor, through it, the engine) for ever.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Clients served at once; more wait in the listen queue.
const MAX_CLIENTS: usize = 16;

pub fn socket_path(store: &Path) -> PathBuf {
    store.join("control.sock")
}

/// Tells the front end what the kernel must forget (called without the engine lock).
pub type SharedInvalidator = Arc<dyn Fn(&[Inval]) + Send + Sync>;

/// Serves the control socket of a mounted store until the process ends. `device` is the
/// mount's device number (`major:minor`): a request naming another is refused, so that a
/// FUSE mount that only claims the store's name cannot steer a command into this store.
pub fn serve(store: &Path, engine: Engine, device: String, invalidate: SharedInvalidator) -> Result<(), String> {
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
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(s) = conn else { continue };
            while busy.load(Ordering::Acquire) >= MAX_CLIENTS {
                std::thread::sleep(Duration::from_millis(10));
            }
            busy.fetch_add(1, Ordering::AcqRel);
            let (engine, device, busy, invalidate) = (engine.clone(), device.clone(), busy.clone(), invalidate.clone());
            std::thread::spawn(move || {
                serve_client(s, &engine, &device, &*invalidate);
                busy.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    Ok(())
}

fn serve_client(mut s: UnixStream, engine: &Engine, device: &str, invalidate: &(dyn Fn(&[Inval]) + Send + Sync)) {
    let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
    let Ok(body) = read_frame(&mut s) else { return };
    if body.len() > 4 && &body[..4] == wire::MAGIC && body[4] == 1 {
        // A command of an older scion: answered in its own terms (status byte, text).
        let msg = format!(
            "this daemon speaks control protocol {}; use the scion that mounted the store",
            wire::VERSION
        );
        let _ = write_frame(&mut s, &[&[1u8][..], msg.as_bytes()].concat());
        return;
    }
    let r = match wire::decode_request(&body) {
        Err(e) => Err(Failure::new(libc::EINVAL, e)),
        Ok((_, asked)) if !asked.is_empty() && asked != device => Err(Failure::new(
            libc::ENODEV,
            format!("this store's daemon serves the mount of device {device}, not {asked}"),
        )),
        Ok((op, _)) => {
            let r = run(&mut s, engine, invalidate, &op);
            // (Test only: the command keeps the engine a while longer, as one finishing its
            // reply when the unmount comes would.)
            scion_fs::failpoint::pause("control.hold");
            r
        }
    };
    let frame = match &r {
        Ok(reply) => wire::encode_reply(reply),
        Err(f) => wire::encode_failure(f),
    };
    let _ = write_frame(&mut s, &frame);
}

fn run(
    s: &mut UnixStream,
    engine: &Engine,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    op: &Op,
) -> Result<Reply, Failure> {
    match op {
        Op::Scrub => {
            let mut progress = |blocks: u64, bytes: u64| {
                let what = format!("{blocks} blocks, {} MiB read", bytes >> 20);
                let _ = write_frame(s, &wire::encode_progress(blocks, 0, &what));
            };
            let rep = engine.scrub(&mut progress).map_err(Failure::from_fs("scrub".into()))?;
            Ok(Reply::Scrubbed(rep))
        }
        // Copies blocks without the engine lock.
        Op::Repack { path, budget } => {
            let what = format!("repack of {}", crate::control::show(path));
            Ok(Reply::Repacked(engine.repack(path, *budget).map_err(Failure::from_fs(what))?))
        }
        // Counts every clone's blocks: without the engine lock, over a pinned state.
        Op::List { under } => {
            let rows = engine.list().map_err(Failure::from_fs("list".into()))?;
            Ok(Reply::Listing(crate::control::below(rows, under.as_deref())))
        }
        op => {
            let (reply, inval) = execute(&mut engine.lock(), op)?;
            // Outside the engine lock: the kernel may call back into the daemon.
            invalidate(&inval);
            // Space a command freed (a destroy, or a checkpoint) is back on the host when it
            // returns, as after a checkpoint of an unmounted store.
            engine.punch(true);
            Ok(reply)
        }
    }
}

/// Asks the daemon of `store` to run `op`, if it serves the mount of `device` (empty: any);
/// `progress` hears the progress frames.
pub fn call(store: &Path, device: &str, op: &Op, progress: &mut dyn FnMut(u64, u64, &str)) -> Result<Reply, Failure> {
    let sock = socket_path(store);
    let io =
        |what: &str, e: std::io::Error| Failure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{what}: {e}"));
    let mut s =
        UnixStream::connect(&sock).map_err(|e| io(&format!("cannot reach the daemon at {}", sock.display()), e))?;
    write_frame(&mut s, &wire::encode_request(op, device)).map_err(|e| io("sending to the daemon", e))?;
    loop {
        let body = read_frame(&mut s).map_err(|e| io("reading the daemon's reply", e))?;
        match wire::decode_frame(&body).map_err(|e| Failure::new(libc::EPROTO, e))? {
            wire::Frame::Progress { done, total, what } => progress(done, total, &what),
            wire::Frame::Reply(r) => return Ok(r),
            wire::Frame::Failure(f) => return Err(f),
        }
    }
}
