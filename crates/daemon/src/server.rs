//! The control socket of a mounted store (in a runtime directory private to the user who
//! mounted it, mode 0600, named by `STORE/control`: only that user may ask) and, on a mount made by root for everyone, the users' socket (an
//! abstract socket with a random name, `new_user_socket_name`, that the mount's root
//! directory names, `CONTROL_XATTR`), where other local users ask with the rights
//! `rights.rs` gives them. Who asks is what the kernel says of the connection (SO_PEERCRED,
//! SO_PEERGROUPS), on either socket. Each client is served on a thread of its own: at most
//! `MAX_CLIENTS` at once per socket and `MAX_CLIENTS_PER_USER` per ordinary user, more are
//! refused at once (EAGAIN); a client has `CLIENT_TIMEOUT` to send its whole request and to
//! take each frame of its reply. Operations still take the engine lock one at a time, except
//! scrub, repack's copy and list, which read a pinned committed state without it.

use crate::control::{execute, Failure, Op, Reply, Step};
use crate::cubes::Cubes;
use crate::router::VolumeId;
use scion_fs::records::cubes::{Mode, OnError};
use crate::rights::{self, Rights};
use crate::wire::{self, read_frame, write_frame};
use crate::Engine;
use scion_fs::Inval;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send its whole request, and to take each frame of its
/// reply: an idle or stuck client must not hold a serving thread (nor, through it, the
/// engine) for ever, however it trickles its bytes.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Clients served at once on each socket; more are refused at once (EAGAIN), never queued:
/// root's socket and the users' socket have their own, so users never hold root back.
const MAX_CLIENTS: usize = 16;
/// Clients one ordinary user may have served at once on the users' socket.
const MAX_CLIENTS_PER_USER: usize = 4;

/// The file in a mounted store that names its daemon's control socket. The socket itself
/// lives in a runtime directory (`runtime_socket`), not in the store: a store may sit on a
/// filesystem without Unix sockets (exFAT, vfat, SMB, most object-store mounts).
pub const SOCKET_NAME_FILE: &str = "control";
/// Where daemons before format 11's runtime sockets listened, and where a client looks when
/// the store names no socket (or is not the client's to read: then the connect's EACCES sends
/// it to the users' socket).
const OLD_SOCKET: &str = "control.sock";

/// The control socket of the daemon serving `store`, as the store names it.
pub fn socket_path(store: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    match std::fs::read(store.join(SOCKET_NAME_FILE)) {
        Ok(b) if b.starts_with(b"/") => PathBuf::from(std::ffi::OsStr::from_bytes(b.trim_ascii_end())),
        _ => store.join(OLD_SOCKET),
    }
}

/// Where a daemon of this user serving `store` binds its control socket: `/run/scion` for
/// root, `$XDG_RUNTIME_DIR/scion` for others (else `/tmp/scion-UID`), each private to its
/// user; the name is a hash of the store's path, short enough for any runtime directory.
pub fn runtime_socket(store: &Path) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        _ if uid == 0 => PathBuf::from("/run/scion"),
        Some(x) if x.is_absolute() && std::fs::metadata(&x).is_ok_and(|m| m.uid() == uid) => x.join("scion"),
        _ => PathBuf::from(format!("/tmp/scion-{uid}")),
    };
    let mk = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if let Some(e) = mk.as_ref().err().filter(|e| e.kind() != std::io::ErrorKind::AlreadyExists) {
        return Err(format!("runtime directory {}: {e}", dir.display()));
    }
    // Another user's directory (or one others may enter) would let them reach the socket,
    // or put theirs in its place.
    let m = std::fs::symlink_metadata(&dir).map_err(|e| format!("runtime directory {}: {e}", dir.display()))?;
    if !m.is_dir() || m.uid() != uid || m.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "runtime directory {} is not a directory private to uid {uid}: remove it, or set XDG_RUNTIME_DIR",
            dir.display()
        ));
    }
    let store = std::fs::canonicalize(store).map_err(|e| format!("store {}: {e}", store.display()))?;
    let id = blake3::hash(store.as_os_str().as_bytes()).to_hex();
    Ok(dir.join(format!("{}.sock", &id[..32])))
}

/// Removes the socket `serve` bound for `store` and the store's note of it (a clean
/// unmount: no one is listening any more).
pub fn forget_socket(store: &Path) {
    let _ = std::fs::remove_file(socket_path(store));
    let _ = std::fs::remove_file(store.join(SOCKET_NAME_FILE));
}

/// The extended attribute of a mount's root directory that names its users' socket. Only
/// the daemon holding the mount's FUSE connection can answer it, so what a command reads
/// there the kernel vouches for: the socket of this mount's daemon, not of one that held the
/// mount's device number before, nor of a process that bound a guessed name first.
pub const CONTROL_XATTR: &[u8] = b"user.scion.control";

/// A fresh name for the abstract socket where other users reach this daemon: unguessable
/// (128 random bits), so no one can bind it first, and new at every start, so a daemon
/// still exiting never answers for the mount that follows it.
pub fn new_user_socket_name() -> String {
    let mut b = [0u8; 16];
    getrandom(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("scion-control/{hex}")
}

fn getrandom(b: &mut [u8]) {
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    assert_eq!(n, b.len() as isize, "getrandom: {}", std::io::Error::last_os_error());
}

/// Tells the front end what the kernel must forget (called without the engine lock).
pub type SharedInvalidator = Arc<dyn Fn(&[Inval]) + Send + Sync>;

/// The daemon's NFS server, started and stopped by `scion serve nfs` through the control
/// socket. Provided by the binary (`scion-nfs` depends on this crate, not the reverse).
pub trait NfsService: Send + Sync {
    /// Starts serving (an error if it already does); what it serves.
    fn start(&self, spec: &crate::control::NfsSpec) -> Result<String, String>;
    /// Stops serving (an error if it does not).
    fn stop(&self) -> Result<String, String>;
    /// What it serves, if it does.
    fn describe(&self) -> Option<String>;
}

static NFS: std::sync::OnceLock<Arc<dyn NfsService>> = std::sync::OnceLock::new();

/// Gives the daemon its NFS service (once, before the control socket serves).
pub fn set_nfs_service(svc: Arc<dyn NfsService>) {
    let _ = NFS.set(svc);
}

/// Serves the control socket of a mounted store until the process ends. `device` is the
/// mount's device number (`major:minor`): a request naming another is refused, so that a
/// FUSE mount that only claims the store's name cannot steer a command into this store.
///
/// `for_users`: the abstract socket name (`new_user_socket_name`) where other users ask,
/// with their own rights, on a mount made by root for everyone (`allow_other`). The mount's
/// root directory names it (`CONTROL_XATTR`).
pub fn serve(
    store: &Path,
    engine: Engine,
    cubes: Arc<Cubes>,
    device: String,
    invalidate: SharedInvalidator,
    for_users: Option<&str>,
) -> Result<(), String> {
    let path = runtime_socket(store)?;
    // We hold the store's lock, so a socket left at this store's name is a dead daemon's
    // (and so is an old daemon's in the store).
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(store.join(OLD_SOCKET));
    let listener = UnixListener::bind(&path).map_err(|e| format!("control socket {}: {e}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    // Only the user who mounted the store may ask here: a socket left open to others would
    // let any local user clone, snapshot and destroy with the owner's rights. (Its directory
    // is private too; the mode is a second lock.)
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(&path);
        return Err(format!(
            "control socket {}: cannot make it private: {e}",
            path.display()
        ));
    }
    // Written whole or not at all: a client reads it to find the socket.
    let note = store.join(SOCKET_NAME_FILE);
    let tmp = store.join(format!("{SOCKET_NAME_FILE}.tmp"));
    std::fs::write(&tmp, format!("{}\n", path.display()))
        .and_then(|()| std::fs::rename(&tmp, &note))
        .map_err(|e| format!("{}: {e}", note.display()))?;
    let serving = Serving { engine, cubes, device, invalidate };
    accept(listener, serving.clone(), Arc::new(Limits::default()));
    if let Some(name) = for_users {
        // Abstract: no file to leave behind or to protect; each caller's rights come from
        // the kernel's account of who connected. The name is random: taken, it is a bug.
        let l = SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a))
            .map_err(|e| format!("users' control socket @{name}: {e}"))?;
        accept(l, serving, Arc::new(Limits::default()));
    }
    Ok(())
}

/// What serving a client needs.
#[derive(Clone)]
struct Serving {
    engine: Engine,
    cubes: Arc<Cubes>,
    device: String,
    invalidate: SharedInvalidator,
}

/// Clients being served on one socket: in all, and per ordinary user.
#[derive(Default)]
struct Limits {
    state: std::sync::Mutex<(usize, std::collections::HashMap<u32, usize>)>,
}

impl Limits {
    /// Counts a client of `uid` (None: full rights) in, or says why not.
    fn admit(&self, uid: Option<u32>) -> Result<(), String> {
        let mut st = self.state.lock().unwrap();
        if st.0 >= MAX_CLIENTS {
            return Err(format!("the daemon serves {MAX_CLIENTS} commands on this socket already; try again"));
        }
        if let Some(u) = uid {
            let n = st.1.entry(u).or_default();
            if *n >= MAX_CLIENTS_PER_USER {
                return Err(format!("you have {MAX_CLIENTS_PER_USER} commands running on this mount already; try again"));
            }
            *n += 1;
        }
        st.0 += 1;
        Ok(())
    }

    fn leave(&self, uid: Option<u32>) {
        let mut st = self.state.lock().unwrap();
        assert!(st.0 > 0, "a client left that was not counted");
        st.0 -= 1;
        if let Some(u) = uid {
            let n = st.1.get_mut(&u).expect("a user's client left that was not counted");
            *n -= 1;
            if *n == 0 {
                st.1.remove(&u);
            }
        }
    }
}

fn accept(listener: UnixListener, serving: Serving, limits: Arc<Limits>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else {
                // (EMFILE and the like: wait a little rather than spin on the error.)
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            let who = rights_of(&s);
            let uid = match &who {
                Some(Rights::User(c)) => Some(c.uid),
                _ => None,
            };
            if let Err(why) = limits.admit(uid) {
                // Refused at once, never queued: the reply is small, the socket's buffer holds it.
                let _ = s.set_nonblocking(true);
                let _ = write_frame(&mut s, &wire::encode_failure(&Failure::new(libc::EAGAIN, why)));
                continue;
            }
            let (serving, limits) = (serving.clone(), limits.clone());
            std::thread::spawn(move || {
                serve_client(s, &serving, who);
                limits.leave(uid);
            });
        }
    });
}

/// Who is at the other end of `s`, as the kernel recorded it when they connected: every
/// right for root and for this daemon's own user, a user's rights for anyone else. None if
/// the kernel does not say.
fn rights_of(s: &UnixStream) -> Option<Rights> {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    let cred = peer_cred(s)?;
    // SAFETY: geteuid has no preconditions.
    if cred.uid == 0 || cred.uid == unsafe { libc::geteuid() } {
        return Some(Rights::Full);
    }
    let mut groups = vec![0 as libc::gid_t; 256];
    let mut glen = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
    // SAFETY: as above, into a buffer of `glen` bytes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERGROUPS, groups.as_mut_ptr().cast(), &mut glen) };
    if r != 0 {
        // Fewer rights rather than guessed ones: no supplementary groups.
        groups.clear();
    } else {
        groups.truncate(glen as usize / std::mem::size_of::<libc::gid_t>());
    }
    Some(Rights::User(scion_fs::access::Caller { uid: cred.uid, gid: cred.gid, groups }))
}

/// The request frame, read within `limit` in all (not per read: a client trickling a byte
/// at a time is cut off when the time is up).
fn read_request(s: &mut UnixStream, limit: Duration) -> std::io::Result<Vec<u8>> {
    struct Deadline<'a>(&'a mut UnixStream, std::time::Instant);
    impl std::io::Read for Deadline<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let left = self.1.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            self.0.set_read_timeout(Some(left))?;
            self.0.read(b)
        }
    }
    let mut d = Deadline(s, std::time::Instant::now() + limit);
    let body = read_frame(&mut d)?;
    // The reply's reads (a stream's acknowledgements) get the usual per-read bound.
    s.set_read_timeout(Some(limit))?;
    Ok(body)
}

fn serve_client(mut s: UnixStream, serving: &Serving, who: Option<Rights>) {
    let Serving { engine, cubes, device, invalidate } = serving;
    let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
    let Ok(body) = read_request(&mut s, CLIENT_TIMEOUT) else { return };
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
        Ok(wire::Request { device: asked, .. }) if !asked.is_empty() && asked != *device => Err(Failure::new(
            libc::ENODEV,
            format!("this store's daemon serves the mount of device {device}, not {asked}"),
        )),
        Ok(wire::Request { op, settled, .. }) => {
            let r = match who {
                Some(who) => (if settled { settle(&mut s, serving, &op, &who) } else { Ok(()) })
                    .and_then(|()| run_routed(&mut s, engine, cubes, &**invalidate, &op, &who)),
                None => Err(Failure::new(libc::EACCES, "the kernel did not say who is asking")),
            };
            // (Test only: the command keeps the engine a while longer, as one finishing its
            // reply when the unmount comes would.)
            scion_fs::failpoint::pause("control.hold");
            r
        }
    };
    let frames = match &r {
        Ok(reply) => wire::encode_reply_frames(reply),
        Err(f) => vec![wire::encode_failure(f)],
    };
    for f in frames {
        if write_frame(&mut s, &f).is_err() {
            break;
        }
    }
}

/// For a settled request (`wire::encode_settled_request`): refuses it (EBUSY) if a file is
/// open below a directory `op` reads, as `Op::OpenBelow` on the volume each lies in would
/// name (E2BIG where that cannot be told, EPERM for a caller who may not ask it).
fn settle(s: &mut UnixStream, serving: &Serving, op: &Op, who: &Rights) -> Result<(), Failure> {
    let Serving { engine, cubes, invalidate, .. } = serving;
    for dir in crate::control::settle_dirs(op) {
        let below = Op::OpenBelow { path: dir.to_vec() };
        match run_routed(s, engine, cubes, &**invalidate, &below, who)? {
            Reply::OpenBelow(files) if files.is_empty() => {}
            Reply::OpenBelow(files) => {
                let why = format!("{} files open below {}: write them back first", files.len(), crate::control::show(dir));
                return Err(Failure::new(libc::EBUSY, why));
            }
            r => return Err(Failure::new(libc::EPROTO, format!("open files below {}: answered {r:?}", crate::control::show(dir)))),
        }
    }
    Ok(())
}

/// `run` on the volume the operation's paths lie in: a cube's (its paths made the cube's
/// own), or the main one. Paths in two volumes: EXDEV, as between two filesystems. The
/// cube commands themselves are answered here.
fn run_routed(
    s: &mut UnixStream,
    main: &Engine,
    cubes: &Cubes,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    op: &Op,
    who: &Rights,
) -> Result<Reply, Failure> {
    if matches!(
        op,
        Op::CubeCreate { .. } | Op::CubeSet { .. } | Op::CubeList | Op::CubeRecover { .. } | Op::CubeCheck { .. } | Op::CubeRemove { .. } | Op::CubeConvert { .. } | Op::CubeUncube { .. }
    ) {
        if let Rights::User(c) = who {
            let mut fs = main.lock();
            return Err(rights::authorize(&mut fs, c, op).err().unwrap_or_else(|| Failure::new(libc::EPERM, "cubes are root's")));
        }
        return cube_op(cubes, op);
    }
    // The NFS server lives in the daemon but is the CLI's to start (`set_nfs_service`).
    if let Op::Nfs(req) = op {
        if let Rights::User(_) = who {
            return Err(Failure::new(libc::EPERM, "serving over NFS is root's and the store owner's"));
        }
        let svc = NFS.get().ok_or_else(|| Failure::new(libc::ENOTSUP, "this daemon does not serve NFS"))?;
        let r = match req {
            crate::control::NfsRequest::Start(spec) => svc.start(spec),
            crate::control::NfsRequest::Stop => svc.stop(),
        };
        return r.map(Reply::Nfs).map_err(|e| Failure::new(libc::EINVAL, e));
    }
    // Read-only or writable: the whole store, every volume (main last going read-only,
    // first going back).
    if let Op::ReadOnly { on } = op {
        if let Rights::User(c) = who {
            let mut fs = main.lock();
            return Err(rights::authorize(&mut fs, c, op).err().unwrap_or_else(|| Failure::new(libc::EPERM, "remount is root's")));
        }
        let mut vols = cubes.volumes();
        if !*on {
            vols.reverse();
        }
        for (_, engine) in vols {
            crate::control::set_read_only(&mut engine.lock(), *on)?;
        }
        return Ok(Reply::Checkpointed);
    }
    // `@ID` of a cube's clone or snapshot (`cubes::global_id`): its own id, in its cube.
    if let Op::Destroy { target: crate::control::Target::Id(id), recursive } = op {
        if let Some((cube, ns)) = crate::cubes::split_global_id(*id) {
            let path = cubes.path_of_id(cube).ok_or_else(|| Failure::new(libc::ENOENT, format!("no clone or snapshot with id {id}")))?;
            let op = Op::Destroy { target: crate::control::Target::Id(ns), recursive: *recursive };
            return in_cube(s, cubes, invalidate, &path, &op, who);
        }
    }
    let (vol, engine, op) = route(cubes, main, op)?;
    if vol != VolumeId::MAIN {
        let global = |i: &[Inval]| invalidate(&vol.global_invals(i));
        return on_cube_volume(s, cubes, vol, &engine, &global, &op, who);
    }
    let reply = run(s, None, &engine, invalidate, &op, who)?;
    match (&op, reply) {
        (Op::Snapshot { path, name }, reply) => {
            snapshot_cubes(s, cubes, invalidate, path, name, who)?;
            Ok(reply)
        }
        // Above cubes, a listing holds theirs too (each cube's whole listing).
        (Op::List { under }, Reply::Listing(mut rows)) => {
            for c in cubes.below(under.as_deref().unwrap_or_default()) {
                match in_cube(s, cubes, invalidate, &c, &Op::List { under: None }, who) {
                    Ok(Reply::Listing(more)) => rows.extend(more),
                    Ok(_) => {}
                    // (An unavailable cube: `scion cube list` says why.)
                    Err(f) => log::info!("list: cube {} left out: {}", crate::control::show(&c), f.message),
                }
            }
            Ok(Reply::Listing(rows))
        }
        (_, reply) => Ok(reply),
    }
}

/// Runs `op` (its paths the cube's own) on the cube at `path`.
fn in_cube(
    s: &mut UnixStream,
    cubes: &Cubes,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    path: &[u8],
    op: &Op,
    who: &Rights,
) -> Result<Reply, Failure> {
    let shown = crate::control::show(path);
    let Some((vol, engine, _)) = cubes.route_path(path).map_err(Failure::from_fs(shown.clone()))? else {
        return Err(Failure::new(libc::ENOENT, format!("{shown} is not a cube")));
    };
    let global = |i: &[Inval]| invalidate(&vol.global_invals(i));
    on_cube_volume(s, cubes, vol, &engine, &global, op, who)
}

/// `run` on cube volume `vol`: a refusal says which cube, a reply's paths and ids are made
/// the mount's.
fn on_cube_volume(
    s: &mut UnixStream,
    cubes: &Cubes,
    vol: VolumeId,
    engine: &Engine,
    global: &(dyn Fn(&[Inval]) + Send + Sync),
    op: &Op,
    who: &Rights,
) -> Result<Reply, Failure> {
    let top = cubes.path_of(vol);
    let reply = run(s, top.as_ref().map(|(t, _)| &t[..]), engine, global, op, who).map_err(|f| match &top {
        Some((top, _)) => Failure::new(f.errno, format!("in cube {}: {}", crate::control::show(top), f.message)),
        None => f,
    })?;
    Ok(match top {
        Some((top, id)) => from_cube(reply, &top, id),
        None => reply,
    })
}

/// A reply of an operation run in cube `cube` at `top`, its paths (from the cube's root) made
/// paths from the mount root again, and its clones' and snapshots' ids the mount's.
fn from_cube(reply: Reply, top: &[u8], cube: u32) -> Reply {
    let up = |p: &mut Vec<u8>| {
        let mut q = top.to_vec();
        if !p.is_empty() {
            q.push(b'/');
            q.extend_from_slice(p);
        }
        *p = q;
    };
    match reply {
        Reply::Listing(mut rows) => {
            for r in &mut rows {
                r.path.iter_mut().for_each(up);
                r.ns = crate::cubes::global_id(cube, r.ns);
                // An origin is a path from the cube's root then (a received tree's is a name).
                if r.origin.starts_with(b"/") {
                    r.origin = [b"/", top, &r.origin].concat();
                }
            }
            Reply::Listing(rows)
        }
        Reply::Versions(mut vs) => {
            for v in &mut vs {
                v.snapshots.iter_mut().for_each(up);
            }
            Reply::Versions(vs)
        }
        Reply::Deleted(mut ds) => {
            for d in &mut ds {
                up(&mut d.snapshot);
            }
            Reply::Deleted(ds)
        }
        Reply::Restored(mut r) => {
            r.kept_as.iter_mut().for_each(up);
            Reply::Restored(r)
        }
        Reply::Found(mut ps) => {
            ps.iter_mut().for_each(up);
            Reply::Found(ps)
        }
        r => r,
    }
}

/// A snapshot of a directory that holds cubes holds their directories empty; each cube
/// below it is snapshotted under the same name (atomic within each cube, not across them).
fn snapshot_cubes(
    s: &mut UnixStream,
    cubes: &Cubes,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    path: &[u8],
    name: &[u8],
    who: &Rights,
) -> Result<(), Failure> {
    let mut failed = Vec::new();
    for c in cubes.below(path) {
        if let Err(f) = in_cube(s, cubes, invalidate, &c, &Op::Snapshot { path: Vec::new(), name: name.to_vec() }, who) {
            failed.push(f.message);
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        libc::EIO,
        format!("snapshot {} of {} taken, but not of its cubes {}", String::from_utf8_lossy(name), crate::control::show(path), failed.join("; ")),
    ))
}

/// The volume `op` runs on, and `op` with its paths made that volume's.
fn route(cubes: &Cubes, main: &Engine, op: &Op) -> Result<(VolumeId, Engine, Op), Failure> {
    let mut op = op.clone();
    // `DIR/.snapshot` is the list of DIR's snapshots, not a tree a command can work on.
    if !matches!(op, Op::List { .. }) {
        for p in crate::control::op_paths(&mut op) {
            if p.rsplit(|&c| c == b'/').find(|c| !c.is_empty()) == Some(scion_fs::clone::SNAPDIR_NAME) {
                let shown = crate::control::show(p);
                return Err(Failure::new(
                    libc::EINVAL,
                    format!("{shown} lists the snapshots, it is not one: name one, {shown}/NAME"),
                ));
            }
        }
    }
    if let Op::Restore { path, to, .. } = &op {
        for p in std::iter::once(path).chain(to.as_ref()) {
            if cubes.route_path(p).map_err(Failure::from_fs("restore".into()))?.is_none() {
                if let Some(c) = cubes.below(p).first() {
                    return Err(Failure::new(libc::EBUSY, format!("{} holds cube {}: restore inside it, or below", crate::control::show(p), crate::control::show(c))));
                }
            }
        }
    }
    let mut to: Option<(VolumeId, Engine)> = None;
    let mut in_main = false;
    for p in crate::control::op_paths(&mut op) {
        let shown = crate::control::show(p);
        match cubes.route_path(p).map_err(Failure::from_fs(shown.clone()))? {
            Some((vol, engine, rel)) => {
                if in_main || to.as_ref().is_some_and(|(v, _)| *v != vol) {
                    return Err(exdev());
                }
                *p = rel;
                to = Some((vol, engine));
            }
            None if to.is_some() => return Err(exdev()),
            None => in_main = true,
        }
    }
    Ok(match to {
        Some((vol, engine)) => (vol, engine, op),
        None => (VolumeId::MAIN, main.clone(), op),
    })
}

fn exdev() -> Failure {
    Failure::new(
        libc::EXDEV,
        "the paths lie in different cubes (or a cube and the rest of the store), which keep their blocks apart: copy with cp -a",
    )
}

/// A cube command's refusal or failure, as its message says it (it names the cube).
fn refused(e: scion_fs::FsError) -> Failure {
    match e.context() {
        Some(c) => {
            if e.errno() == libc::EIO {
                log::error!("{c}"); // a failure of the store underneath, logged once here
            }
            Failure::new(e.errno(), c.to_string())
        }
        None => Failure::new(e.errno(), e.to_string()),
    }
}

fn cube_op(cubes: &Cubes, op: &Op) -> Result<Reply, Failure> {
    let row = |path: &[u8]| -> Result<Reply, Failure> {
        let path = path.strip_prefix(b"/").unwrap_or(path);
        cubes.list().into_iter().find(|r| r.path == path).map(Reply::Cube).ok_or_else(|| Failure::new(libc::ENOENT, "the cube is gone"))
    };
    let parse = |m: &str, o: &str| -> Result<(Option<Mode>, Option<OnError>), Failure> {
        let bad = |e: String| Failure::new(libc::EINVAL, e);
        let mode = (!m.is_empty()).then(|| Mode::parse(m)).transpose().map_err(bad)?;
        let on_error = (!o.is_empty()).then(|| OnError::parse(o)).transpose().map_err(bad)?;
        Ok((mode, on_error))
    };
    match op {
        Op::CubeCreate { path, mode, on_error } => {
            let (m, o) = parse(mode, on_error)?;
            let c = cubes
                .create(path, m.unwrap_or(Mode::Ordered), o.unwrap_or(OnError::ReadOnly))
                .map_err(refused)?;
            row(&c.path)
        }
        Op::CubeSet { path, mode, on_error } => {
            let (m, o) = parse(mode, on_error)?;
            let c = cubes.set(path, m, o).map_err(refused)?;
            row(&c.path)
        }
        Op::CubeRecover { path } => {
            let c = cubes.recover(path).map_err(refused)?;
            row(&c.path)
        }
        Op::CubeRemove { path } => {
            let before = row(path)?;
            cubes.remove(path).map_err(refused)?;
            Ok(before)
        }
        Op::CubeConvert { hidden, target, mode, on_error, pid, step } => {
            let c = match step {
                Step::Begin => {
                    let (m, o) = parse(mode, on_error)?;
                    cubes.convert_begin(hidden, target, m.unwrap_or(Mode::Ordered), o.unwrap_or(OnError::ReadOnly), *pid)
                }
                Step::Finish => cubes.convert_end(hidden, *pid),
                // (The cube is gone: the cubes that are left.)
                Step::Abandon => return cubes.convert_abandon(hidden).map(|_| Reply::Cubes(cubes.list())).map_err(refused),
            }
            .map_err(refused)?;
            row(&c.path)
        }
        Op::CubeUncube { path, tmp, pid, step } => {
            let before = row(path)?;
            match step {
                Step::Begin => cubes.uncube_begin(path, tmp, *pid).map(drop),
                Step::Finish => cubes.uncube_end(path, *pid).map(drop),
                Step::Abandon => cubes.uncube_abandon(path),
            }
            .map_err(refused)?;
            Ok(before)
        }
        Op::CubeCheck { path } => {
            let rep = cubes.check(path).map_err(refused)?;
            Ok(Reply::Checked(Box::new(rep)))
        }
        _ => Ok(Reply::Cubes(cubes.list())),
    }
}

/// `top`: the cube the operation runs in, at that path from the mount's root (None: the
/// main volume), for the paths of what streams to the caller before the reply.
fn run(
    s: &mut UnixStream,
    top: Option<&[u8]>,
    engine: &Engine,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    op: &Op,
    who: &Rights,
) -> Result<Reply, Failure> {
    if let Rights::User(c) = who {
        return run_for_user(s, top, engine, invalidate, op, c);
    }
    if let Op::Scan { paths, since, command } = op {
        return run_scan(engine, paths, since.as_deref(), command.as_deref(), None, &mut scan_out(s, top));
    }
    if let Op::Diff { .. } = op {
        return run_diff(engine, op, None, s);
    }
    if on_view(op) {
        return run_on_view(engine, op, None);
    }
    match op {
        Op::Scrub => {
            let mut progress = |blocks: u64, bytes: u64| {
                let what = format!("{blocks} blocks, {} MiB read", bytes >> 20);
                let _ = write_frame(s, &wire::encode_progress(blocks, 0, &what));
            };
            let rep = engine.scrub(&mut progress).map_err(Failure::from_fs("scrub".into()))?;
            Ok(Reply::Scrubbed(rep))
        }
        // Made step by step, the engine lock taken per step; the bytes go out as made, as
        // fast as the caller takes them (no write timeout: a slow pipe is not a hung client).
        Op::Send { snap, base, resume, dedup } => {
            let _ = s.set_write_timeout(None);
            let req = crate::send::SendRequest {
                snap,
                base: base.as_deref(),
                resume: *resume,
                dedup,
            };
            let mut sink = |b: &[u8]| -> std::io::Result<()> {
                for piece in b.chunks(wire::MAX_MESSAGE - 64) {
                    wire::write_stream_part(s, piece)?;
                }
                Ok(())
            };
            Ok(Reply::Sent(crate::send::send(engine, &req, &mut sink)?))
        }
        // Reads a view; uploads without the engine lock.
        Op::Push { snap, remote, name } => {
            let _ = s.set_write_timeout(None);
            let started = std::time::Instant::now();
            // The snapshot's bytes, for an ETA (blocks shared within it counted once).
            let total = engine.list().ok().and_then(|rows| rows.into_iter().find(|r| r.path.as_deref().map(|p| p.strip_prefix(b"/").unwrap_or(p)) == Some(snap.strip_prefix(b"/").unwrap_or(snap))).map(|r| r.referenced)).unwrap_or(0);
            let mut progress = |p: &scion_remote::push::PushStats| {
                let secs = started.elapsed().as_secs_f64().max(1e-3);
                let rate = p.sent_bytes as f64 / secs / (1 << 20) as f64;
                let eta = match (p.done_bytes, total) {
                    (d, t) if d > 0 && t > d => format!(", ETA {:.0} s", secs * (t - d) as f64 / d as f64),
                    _ => String::new(),
                };
                let what = format!(
                    "{} of {} MiB gone through; {} MiB sent in {} objects, {rate:.1} MiB/s{eta}",
                    p.done_bytes >> 20,
                    total >> 20,
                    p.sent_bytes >> 20,
                    p.objects
                );
                let _ = write_frame(s, &wire::encode_progress(p.done_bytes, total, &what));
            };
            Ok(Reply::Pushed(crate::remote::push(engine, snap, remote, name, &mut progress)?))
        }
        // The tree's stream goes to the caller, which builds it as a receive does.
        Op::PullOpen { remote, name, version, tmp, pid } => {
            let o = crate::remote::pull_open(engine, remote, name, *version, tmp, *pid)?;
            for piece in o.stream.chunks(wire::MAX_MESSAGE - 64) {
                wire::write_stream_part(s, piece).map_err(|e| Failure::new(libc::EPIPE, format!("sending the tree: {e}")))?;
            }
            Ok(Reply::PullOpened { attach: o.first, version: o.manifest.version, root: o.manifest.root, blocks: o.blocks })
        }
        Op::PullDone { tmp } => {
            crate::remote::pull_done(engine, tmp)?;
            Ok(Reply::PullDone)
        }
        Op::Prefetch { attach } => {
            let mut progress = |done: u64, total: u64| {
                let _ = write_frame(s, &wire::encode_progress(done, total, &format!("{done} of {total} blocks fetched")));
            };
            Ok(Reply::Prefetched(crate::remote::prefetch(engine, *attach, &mut progress)?))
        }
        Op::RemoteGc { remote, grace_s, dry } => {
            let mut progress = |g: &scion_remote::gc::GcReport| {
                let what = format!("{} objects ({} MiB) {}", g.removed, g.removed_bytes >> 20, if *dry { "to remove" } else { "removed" });
                let _ = write_frame(s, &wire::encode_progress(g.removed, 0, &what));
            };
            Ok(Reply::RemoteGc(crate::remote::gc(engine, remote, *grace_s, *dry, &mut progress)?))
        }
        Op::Apply { top, base, open, frames, attach: Some(a) } => {
            let mut resolve = crate::remote::resolver(engine, *a)?;
            let mut fs = engine.lock();
            crate::control::apply(&mut fs, top, base.as_deref(), open.as_deref(), frames, Some(&mut resolve))
        }
        // Copies blocks without the engine lock.
        Op::Repack { path, budget } => {
            let what = format!("repack of {}", crate::control::show(path));
            Ok(Reply::Repacked(engine.repack(path, *budget).map_err(Failure::from_fs(what))?))
        }
        // Space counted over a pinned state without the engine lock, as `list` does.
        Op::Status => {
            let rows = engine.list().map_err(Failure::from_fs("status".into()))?;
            let mut st = crate::control::status(&engine.lock(), &rows);
            st.pid = std::process::id();
            st.uptime_s = engine.started().elapsed().as_secs();
            st.mirrors_failing = engine.mirror_jobs().failing();
            st.rss_bytes = crate::memory::rss_bytes();
            (st.listings, st.listing_bytes) = crate::memory::listings();
            st.nfs = NFS.get().and_then(|n| n.describe()).unwrap_or_default();
            st.remote = engine.remote_health().map(Into::into);
            Ok(Reply::Status(Box::new(st)))
        }
        // With what the worker is doing.
        Op::MirrorStatus => {
            let mut fs = engine.lock();
            Ok(Reply::Mirrors(crate::control::mirror_rows(&mut fs, &|m| engine.mirror_jobs().state(m))))
        }
        // Compresses without the engine lock.
        Op::Compress { budget, level } => Ok(Reply::Compressed(
            engine
                .compress(*budget, crate::compress_level(*level))
                .map_err(Failure::from_fs("compression of old versions".into()))?,
        )),
        // Counts every clone's blocks: without the engine lock, over a pinned state.
        Op::List { under } => {
            let rows = engine.list().map_err(Failure::from_fs("list".into()))?;
            Ok(Reply::Listing(crate::control::below(rows, under.as_deref())))
        }
        op => {
            if matches!(op, Op::Clone { .. } | Op::Snapshot { .. }) {
                // They fold their source under the lock; most of it is folded before.
                engine.prefold(op);
            }
            let (done, owed) = engine.lock().with_sync_owed(|fs| execute(fs, op, None));
            sync_owed(engine, owed)?;
            let (reply, inval) = done?;
            // Outside the engine lock: the kernel may call back into the daemon.
            invalidate(&inval);
            // Space a command freed (a destroy, or a checkpoint) is back on the host when it
            // returns, as after a checkpoint of an unmounted store.
            engine.punch(true);
            Ok(reply)
        }
    }
}

/// The fsync a command left owed (`Fs::with_sync_owed`: a clone's or a snapshot's record),
/// made without the engine lock before the command is answered, so that requests go on
/// while the disk flushes what was written before it.
fn sync_owed(engine: &Engine, owed: bool) -> Result<(), Failure> {
    if owed {
        engine.fsync().map_err(Failure::from_fs("sync of the command's record".into()))?;
    }
    Ok(())
}

/// The read-only commands that walk a view of the committed state (`Engine::view`) rather
/// than the engine, so that requests go on while they run (issue 38).
fn on_view(op: &Op) -> bool {
    matches!(
        op,
        Op::Diff { .. }
            | Op::Scan { .. }
            | Op::Versions { .. }
            | Op::Deleted { .. }
            | Op::TreeHash { .. }
            | Op::FindTree { .. }
            | Op::ChunkChanges { .. }
    )
}

/// A scan: its pins taken in the engine and sent first, its walk in a view (no engine lock
/// held), its parts sent to `out` as found, its pins undone in the engine if it fails.
fn run_scan(
    engine: &Engine,
    paths: &[Vec<u8>],
    since: Option<&[u8]>,
    command: Option<&[u8]>,
    user: Option<&scion_fs::access::Caller>,
    out: &mut crate::control::ScanOut,
) -> Result<Reply, Failure> {
    use crate::control::{scan_begin, scan_end, scan_kept, scan_pins, scan_walk};
    let plan = scan_begin(&mut engine.lock(), paths, since, command, user)?;
    let walked = (|| {
        out(wire::Part::ScanPins(scan_pins(&plan)))?;
        let mut kept = match command {
            Some(c) => {
                let store = engine.lock().store_dir().to_path_buf();
                scan_kept(&store, c, user)
            }
            None => Default::default(),
        };
        let mut view = engine.view().map_err(Failure::from_fs("a view of the committed state".into()))?;
        let r = scan_walk(&mut view, &plan, paths, user, &mut kept, out);
        engine.end_view(view);
        r
    })();
    scan_end(&mut engine.lock(), plan, walked)
}

/// A diff: walked in a view (no engine lock held), its changes written to the caller at `s`
/// a batch at a time as found (`wire::encode_diff_part`); the reply gives their count.
fn run_diff(engine: &Engine, op: &Op, user: Option<&scion_fs::access::Caller>, s: &mut UnixStream) -> Result<Reply, Failure> {
    let mut view = engine.view().map_err(Failure::from_fs("a view of the committed state".into()))?;
    let mut sent = 0u64;
    let mut out = |run, changes: Vec<scion_fs::diff::Difference>| -> scion_fs::FsResult<()> {
        sent += changes.len() as u64;
        for f in wire::encode_diff_part(run, &changes) {
            write_frame(s, &f).map_err(|e| scion_fs::FsError::new(libc::EPIPE).with(format!("the diff's caller went away: {e}")))?;
        }
        Ok(())
    };
    let r = crate::control::diff_each(&mut view, op, user, &mut out);
    engine.end_view(view);
    r?;
    Ok(Reply::DiffCount(sent))
}

/// Where a scan's parts go: to the caller at `s`, as frames, with their paths made the
/// mount's where the scan ran in the cube at `top`.
fn scan_out<'a>(s: &'a mut UnixStream, top: Option<&'a [u8]>) -> impl FnMut(wire::Part) -> Result<(), Failure> + 'a {
    use wire::Part;
    let up = move |p: Vec<u8>| match top {
        Some(t) if p.is_empty() => t.to_vec(),
        Some(t) => [t, b"/", &p[..]].concat(),
        None => p,
    };
    move |part| {
        let part = match part {
            Part::ScanFiles(v) => Part::ScanFiles(v.into_iter().map(|(p, k)| (up(p), k)).collect()),
            Part::ScanDenied(v) => Part::ScanDenied(v.into_iter().map(up).collect()),
            Part::ScanPins(v) => Part::ScanPins(v.into_iter().map(|(d, p)| (up(d), up(p))).collect()),
            p => p,
        };
        for f in wire::encode_scan_part(&part) {
            write_frame(s, &f).map_err(|e| Failure::new(libc::EPIPE, format!("the scan's caller went away: {e}")))?;
        }
        Ok(())
    }
}

/// Runs an `on_view` command: the engine lock is held to take the view and give it back,
/// not while it walks.
fn run_on_view(engine: &Engine, op: &Op, user: Option<&scion_fs::access::Caller>) -> Result<Reply, Failure> {
    let view_failed = |e| Failure::from_fs("a view of the committed state".into())(e);
    let mut view = engine.view().map_err(view_failed)?;
    let r = execute(&mut view, op, user);
    engine.end_view(view);
    let (reply, inval) = r?;
    debug_assert!(inval.is_empty(), "a read-only command changed what the kernel caches");
    Ok(reply)
}

/// The users' socket of the daemon serving the mount at `mnt`: named by the mount's root
/// directory (`CONTROL_XATTR`), which only that daemon answers, and served by root.
fn users_socket(mnt: &Path) -> Result<UnixStream, Failure> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).map_err(|_| Failure::new(libc::EINVAL, "a mount point with a NUL"))?;
    let attr = std::ffi::CString::new(CONTROL_XATTR).expect("no NUL");
    let mut buf = [0u8; 128];
    // SAFETY: both names are NUL-terminated; getxattr writes at most `buf.len()` bytes.
    let n = unsafe { libc::getxattr(c.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::ENODATA) => "the mount offers no self-service (only root's mounts for everyone do)".to_string(),
            _ => format!("{}: {e}", String::from_utf8_lossy(CONTROL_XATTR)),
        };
        return Err(Failure::new(libc::EACCES, why));
    }
    let name = &buf[..n as usize];
    if !name.starts_with(b"scion-control/") {
        return Err(Failure::new(libc::EACCES, "the mount names no scion control socket"));
    }
    let shown = String::from_utf8_lossy(name).into_owned();
    let s = SocketAddr::from_abstract_name(name)
        .and_then(|a| UnixStream::connect_addr(&a))
        .map_err(|e| Failure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("@{shown}: {e}")))?;
    if peer_cred(&s).map(|c| c.uid) != Some(0) {
        return Err(Failure::new(libc::EACCES, format!("@{shown} is not served by root; refusing to talk to it")));
    }
    Ok(s)
}

/// What the kernel recorded of the process at the other end of `s` when it connected.
fn peer_cred(s: &UnixStream) -> Option<libc::ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is that large.
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    (r == 0).then_some(cred)
}

/// `run` for an ordinary user: the operation is checked against their rights under the
/// same engine lock it then runs under, and listings are cut to what they can reach.
fn run_for_user(
    s: &mut UnixStream,
    top: Option<&[u8]>,
    engine: &Engine,
    invalidate: &(dyn Fn(&[Inval]) + Send + Sync),
    op: &Op,
    who: &scion_fs::access::Caller,
) -> Result<Reply, Failure> {
    if let Op::List { under } = op {
        let rows = engine.list().map_err(Failure::from_fs("list".into()))?;
        let rows = rights::visible_listing(&mut engine.lock(), who, rows);
        return Ok(Reply::Listing(crate::control::below(rows, under.as_deref())));
    }
    if on_view(op) {
        rights::authorize(&mut engine.lock(), who, op)?;
        if let Op::Scan { paths, since, command } = op {
            return run_scan(engine, paths, since.as_deref(), command.as_deref(), Some(who), &mut scan_out(s, top));
        }
        if let Op::Diff { .. } = op {
            return run_diff(engine, op, Some(who), s);
        }
        return run_on_view(engine, op, Some(who));
    }
    if matches!(op, Op::Clone { .. } | Op::Snapshot { .. }) {
        engine.prefold(op);
    }
    let (done, owed) = {
        let mut fs = engine.lock();
        rights::authorize(&mut fs, who, op)?;
        fs.with_sync_owed(|fs| {
            let (reply, inval) = execute(fs, op, Some(who))?;
            let reply = match reply {
                Reply::Schedules(rows) => Reply::Schedules(rights::own_schedules(fs, who, rows)),
                r => r,
            };
            Ok::<_, Failure>((reply, inval))
        })
    };
    sync_owed(engine, owed)?;
    let (reply, inval) = done?;
    invalidate(&inval);
    engine.punch(true);
    Ok(reply)
}

/// Asks the daemon of `store` to run `op`, if it serves the mount of `device` (empty: any)
/// at `mnt` (through which an ordinary user finds it); `progress` hears the progress frames.
pub fn call(store: &Path, device: &str, mnt: Option<&Path>, op: &Op, progress: &mut dyn FnMut(u64, u64, &str)) -> Result<Reply, Failure> {
    call_streaming(store, device, mnt, op, progress, None)
}

/// `call` of a settled request (`wire::encode_settled_request`): `op` runs only if no file
/// is open below the directories it reads, else it is refused (EBUSY) having done nothing.
/// EPERM, without asking, where only the users' socket reaches the daemon: an ordinary user
/// may not ask which files are open.
pub fn call_settled(store: &Path, device: &str, mnt: Option<&Path>, op: &Op, progress: &mut dyn FnMut(u64, u64, &str)) -> Result<Reply, Failure> {
    request(store, device, mnt, op, true, progress, None, None)
}

/// `call`, with the bytes of a send stream handed to `stream` as they come.
pub fn call_streaming(
    store: &Path,
    device: &str,
    mnt: Option<&Path>,
    op: &Op,
    progress: &mut dyn FnMut(u64, u64, &str),
    stream: Option<&mut dyn FnMut(&[u8]) -> Result<(), String>>,
) -> Result<Reply, Failure> {
    request(store, device, mnt, op, false, progress, stream, None)
}

/// `call` of a scan or a diff: its parts handed to `parts` as they come (a failure there
/// ends the call with EPIPE, and the daemon's walk with it). A diff ends in
/// `Reply::DiffCount`.
pub fn call_parts(
    store: &Path,
    device: &str,
    mnt: Option<&Path>,
    op: &Op,
    parts: &mut dyn FnMut(wire::Part) -> Result<(), String>,
) -> Result<Reply, Failure> {
    request(store, device, mnt, op, false, &mut |_, _, _| {}, None, Some(parts))
}

fn request(
    store: &Path,
    device: &str,
    mnt: Option<&Path>,
    op: &Op,
    settled: bool,
    progress: &mut dyn FnMut(u64, u64, &str),
    mut stream: Option<&mut dyn FnMut(&[u8]) -> Result<(), String>>,
    mut scan: Option<&mut dyn FnMut(wire::Part) -> Result<(), String>>,
) -> Result<Reply, Failure> {
    let sock = socket_path(store);
    let io =
        |what: &str, e: std::io::Error| Failure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{what}: {e}"));
    let mut s = match UnixStream::connect(&sock) {
        Ok(s) => s,
        // The store is not ours to open (a mount made by root): the users' socket, if the
        // daemon keeps one, as its mount names it.
        Err(e) if e.raw_os_error() == Some(libc::EACCES) && mnt.is_some() && settled => {
            return Err(Failure::new(libc::EPERM, format!("{e}: an ordinary user may not ask which files are open")));
        }
        Err(e) if e.raw_os_error() == Some(libc::EACCES) && mnt.is_some() => {
            users_socket(mnt.expect("just checked")).map_err(|f| Failure::new(f.errno, format!("cannot reach the daemon at {} ({e}): {}", sock.display(), f.message)))?
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT)) => {
            return Err(Failure::new(
                libc::ENOTCONN,
                format!(
                    "no daemon answers for the store {} (it stopped or was killed): unmount its mount point \
                     (scion umount MOUNTPOINT) and mount the store again; the journal is replayed",
                    store.display()
                ),
            ))
        }
        Err(e) => return Err(io(&format!("cannot reach the daemon at {}", sock.display()), e)),
    };
    let body = if settled { wire::encode_settled_request(op, device) } else { wire::encode_request(op, device) };
    write_frame(&mut s, &body).map_err(|e| io("sending to the daemon", e))?;
    let mut parts = wire::Parts::default();
    let proto = |e| Failure::new(libc::EPROTO, e);
    let mut body = Vec::new();
    loop {
        wire::read_frame_into(&mut s, &mut body).map_err(|e| io("reading the daemon's reply", e))?;
        if let (Some(b), Some(f)) = (wire::stream_part(&body), stream.as_mut()) {
            // (The bulk of a send: handed on as read.)
            f(b).map_err(|e| Failure::new(libc::EPIPE, e))?;
            continue;
        }
        match wire::decode_frame(&body).map_err(proto)? {
            wire::Frame::Progress { done, total, what } => progress(done, total, &what),
            wire::Frame::Part(wire::Part::Stream(b)) => match stream.as_mut() {
                Some(f) => f(&b).map_err(|e| Failure::new(libc::EPIPE, e))?,
                None => return Err(proto("stream bytes where none were asked for".into())),
            },
            wire::Frame::Part(p) => match scan.as_mut() {
                Some(f) => f(p).map_err(|e| Failure::new(libc::EPIPE, e))?,
                None if p.is_scan() => return Err(proto("a scan's parts where none were asked for".into())),
                None => parts.add(p).map_err(proto)?,
            },
            // (Its parts went to the caller, who counts them.)
            wire::Frame::Gathered(wire::Gathered::Diff(n)) if scan.is_some() => return Ok(Reply::DiffCount(n)),
            wire::Frame::Gathered(end) => return parts.complete(end).map_err(proto),
            wire::Frame::Reply(r) => return Ok(r),
            wire::Frame::Failure(f) => return Err(f),
        }
    }
}
