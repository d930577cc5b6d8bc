//! Mounting, the background daemon, and unmounting.

use fuser::{Config, MountOption, SessionACL};
use scion_daemon::{Background, BackgroundOptions, Engine, Router};
use scion_fs::{Fs, MountOptions};
use scion_store::StoreLock;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const READY_FD: &str = "SCION_READY_FD";
/// Changes older than this are checkpointed even without memory pressure.
const CHECKPOINT_AFTER: Duration = Duration::from_secs(30);

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn canonical(p: &Path) -> Result<PathBuf, String> {
    p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))
}

/// A mount point, made absolute. One left behind by a daemon that died ("transport endpoint
/// is not connected") cannot be resolved; if the kernel lists it as a scion mount, it is
/// detached so it can be mounted again.
fn mount_point(p: &Path) -> Result<PathBuf, String> {
    let abs = std::env::current_dir().map_err(|e| e.to_string())?.join(p);
    if is_dead_mount(&abs) && store_of(&abs).is_some() {
        log::warn!("{} was left by a scion daemon that died; detaching it", abs.display());
        unmount_path(&abs, true)?;
    }
    let mnt = canonical(&abs)?;
    // A mount over a live scion mount would hide it, and `scion umount` would then take
    // both down while naming one.
    if let Some(other) = store_of(&mnt) {
        return Err(format!(
            "{} is already a scion mount (of {}): unmount it first (scion umount {})",
            mnt.display(),
            other.display(),
            mnt.display()
        ));
    }
    Ok(mnt)
}

/// True for a FUSE mount point whose daemon is gone (stat says ENOTCONN).
fn is_dead_mount(p: &Path) -> bool {
    matches!(std::fs::metadata(p), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// Tells the parent of a background mount how it went, if there is one.
fn report_ready(msg: &str) {
    if let Some(fd) = std::env::var(READY_FD).ok().and_then(|v| v.parse::<RawFd>().ok()) {
        let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
        let _ = writeln!(f, "{msg}");
        std::env::remove_var(READY_FD);
    }
}

/// The mount's source when the store was named `scion:STORE` (set by `scion mount` for the
/// daemon it starts): the mount table shows that, not the path.
pub const SOURCE_ENV: &str = "SCION_MOUNT_SOURCE";

fn mount_options(store: &Path, user: &[String]) -> Config {
    let mut cfg = Config::default();
    let source = std::env::var(SOURCE_ENV).unwrap_or_else(|_| store.display().to_string());
    let mut opts = vec![
        // The store as given is the mount's source, as `findmnt -S STORE` and tools comparing
        // what they mounted with the mount table expect.
        MountOption::FSName(source),
        MountOption::Subtype("scion".into()),
        MountOption::DefaultPermissions,
    ];
    let mut allow_other = is_root();
    // Mounted by root, setuid programs and device nodes work, as on ext4, btrfs or ZFS: a
    // clone used as a container or chroot root needs both (sudo, /dev/null). FUSE would
    // otherwise default to nosuid,nodev, which fusermount3 imposes on ordinary users anyway
    // (and refuses "suid" and "dev" from them).
    let (mut suid, mut dev) = (is_root(), is_root());
    for o in user.iter().filter(|o| !o.is_empty()) {
        match o.as_str() {
            "allow_other" => allow_other = true,
            "ro" => opts.push(MountOption::RO),
            "rw" => opts.push(MountOption::RW),
            "noexec" => opts.push(MountOption::NoExec),
            "exec" => opts.push(MountOption::Exec),
            "nosuid" => suid = false,
            "suid" => suid = true,
            "nodev" => dev = false,
            "dev" => dev = true,
            "noatime" => opts.push(MountOption::NoAtime),
            "atime" => opts.push(MountOption::Atime),
            // The daemon keeps atime (`scion_fuse::Atime`); the kernel's flags do nothing for FUSE.
            "relatime" | "strictatime" | "nodiratime" | "diratime" => {}
            "sync" => opts.push(MountOption::Sync),
            "async" => opts.push(MountOption::Async),
            "dirsync" => opts.push(MountOption::DirSync),
            "default_permissions" => {}
            // `max_read=N` and `blksize=N`, for the kernel (`scion_options` let nothing else by).
            other => opts.push(MountOption::CUSTOM(other.to_string())),
        }
    }
    if suid {
        opts.push(MountOption::Suid);
    }
    if dev {
        opts.push(MountOption::Dev);
    }
    if allow_other {
        cfg.acl = SessionACL::All;
    }
    cfg.mount_options = opts;
    cfg.n_threads = Some(2);
    cfg
}

pub fn foreground(store: &Path, mountpoint: &Path, options: &[String]) -> Result<(), String> {
    let r = serve(store, mountpoint, options);
    if let Err(e) = &r {
        report_ready(&format!("error: {e}"));
    }
    r
}

/// The mount options that are scion's own, checked, and the kernel's (the rest).
struct ScionOptions {
    /// List `.snapshot` in directory listings (`snapdir=visible`; `hidden` by default).
    snapdir_visible: bool,
    /// FUSE over io_uring when the kernel offers it (`uring=off`: /dev/fuse only).
    uring: bool,
    /// Repack scattered files when the store is idle (`repack=off`: only `scion repack`).
    background_repack: bool,
    /// Compress blocks only snapshots hold when the store is idle (`compress_old=off`: only
    /// `scion compress`).
    compress_old: bool,
    /// The kernel's writeback cache of file data (`cache=writethrough`: every write is sent
    /// as it is made; see ScionFuse::with_writeback).
    writeback: bool,
    /// Self-service for other users on root's mount for everyone (`users=off`: none).
    users: bool,
    /// The bound of each volume's cache of tree nodes, in bytes (`node_cache=SIZE`).
    node_cache: Option<usize>,
    /// The bound of each volume's memo of tree hashes, in entries (`hash_memo=N`).
    hash_memo: Option<usize>,
    /// The bound of each volume's places of evicted inodes (`whereabouts=N`).
    whereabouts: Option<usize>,
    /// Background requests the kernel keeps in flight (`max_background=N`).
    max_background: Option<u16>,
    /// Inodes waiting to be folded that make the background checkpoint (`fold_batch=N`).
    fold_batch: Option<usize>,
    /// The bound of the local cache of blocks of trees pulled from remotes (`remote_cache=SIZE`).
    remote_cache: Option<u64>,
    /// The mount's dirty page limit (`dirty_max=SIZE`; 0: the kernel's), see `tune_bdi`.
    dirty_max: Option<u64>,
    /// Serve the mount over NFSv3 too (`nfs=ADDR:PORT`, `nfs_squash=`, `nfs_anon=`, `nfs_access=`,
    /// `nfs_max_held=`).
    nfs: Option<scion_nfs::NfsOptions>,
    kernel: Vec<String>,
}

/// The kernel's mount options scion passes on (`mount_options`); `max_read=` and `blksize=`
/// take a number.
const KERNEL_OPTIONS: &[&str] = &[
    "ro", "rw", "allow_other", "noexec", "exec", "nosuid", "suid", "nodev", "dev", "noatime", "atime", "relatime",
    "strictatime", "nodiratime", "diratime", "sync", "async", "dirsync", "default_permissions",
];

/// Parses scion's own options (`snapdir=`, `uring=`, `repack=`, `compress_old=`, `cache=`,
/// `users=`), refusing a value
/// it does not know by name, before anything is opened or mounted; so is an option that is
/// neither scion's nor one of the kernel's it passes on.
/// scion's own options' names (each `NAME=VALUE`).
const OURS: &[&str] = &[
    "snapdir", "uring", "repack", "compress_old", "cache", "users", "node_cache", "hash_memo", "whereabouts", "max_background", "fold_batch", "remote_cache", "dirty_max", "nfs",
    "nfs_squash", "nfs_anon", "nfs_access", "nfs_max_held",
];

/// `nfs=ADDR:PORT` with `nfs_squash=root|all|none`, `nfs_anon=UID:GID`,
/// `nfs_access=rw|ro` and `nfs_max_held=N`: what the daemon serves over NFSv3 beside the
/// mount.
fn nfs_options(options: &[String]) -> Result<Option<scion_nfs::NfsOptions>, String> {
    let last = |key: &str| options.iter().rev().find_map(|o| o.strip_prefix(key).and_then(|v| v.strip_prefix('=')));
    let Some(listen) = last("nfs") else {
        if let Some(k) = ["nfs_squash", "nfs_anon", "nfs_access", "nfs_max_held"].iter().find(|k| last(k).is_some()) {
            return Err(format!("{k}= is an option of the NFS server: give nfs=ADDR:PORT too"));
        }
        return Ok(None);
    };
    listen
        .parse::<std::net::SocketAddr>()
        .map_err(|_| format!("nfs={listen}: expected ADDR:PORT (127.0.0.1:2049, [::1]:2049; port 0 for any)"))?;
    let mut o = scion_nfs::NfsOptions::new(listen);
    if let Some(v) = last("nfs_squash") {
        o.identity.squash = v.parse().map_err(|e| format!("nfs_squash={v}: {e}"))?;
    }
    if let Some(v) = last("nfs_anon") {
        let ids = v.split_once(':').and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
        o.identity.anon = ids.ok_or_else(|| format!("nfs_anon={v}: expected UID:GID (numbers)"))?;
    }
    if let Some(v) = last("nfs_max_held") {
        o.max_held = scion_nfs::parse_max_held(v).map_err(|e| format!("nfs_max_held={v}: {e}"))?;
    }
    match last("nfs_access") {
        None | Some("rw") => {}
        Some("ro") => o.read_only = true,
        Some(v) => return Err(format!("nfs_access={v}: expected nfs_access=rw or nfs_access=ro")),
    }
    Ok(Some(o))
}

/// The last `KEY=N` of `options`, a count that `allowed` accepts; refused saying `expected`.
fn count_option(options: &[String], key: &str, allowed: impl Fn(usize) -> bool, expected: &str) -> Result<Option<usize>, String> {
    let Some(v) = options.iter().rev().find_map(|o| o.strip_prefix(key)?.strip_prefix('=')) else { return Ok(None) };
    match v.parse::<usize>() {
        Ok(n) if allowed(n) => Ok(Some(n)),
        _ => Err(format!("{key}={v}: expected {expected}")),
    }
}

/// `fold_batch=N`: inodes, 0 (checkpoints only by age and size) or 64 to 2^20.
fn fold_batch(options: &[String]) -> Result<Option<usize>, String> {
    count_option(options, "fold_batch", |n| n == 0 || (64..=1 << 20).contains(&n), "0 or a number of inodes from 64 to 1048576")
}

/// `max_background=N`: background requests (writeback, readahead) in flight, 1 to 1024.
fn max_background(options: &[String]) -> Result<Option<u16>, String> {
    let n = count_option(options, "max_background", |n| (1..=1024).contains(&n), "a number of requests from 1 to 1024")?;
    Ok(n.map(|n| n as u16))
}

/// `whereabouts=N`: evicted inodes whose place is kept for handles, 0 to 2^24.
fn whereabouts_entries(options: &[String]) -> Result<Option<usize>, String> {
    count_option(options, "whereabouts", |n| n <= 1 << 24, "a number of inodes from 0 to 16777216")
}

/// `hash_memo=N`: entries, 1,024 to 2^28.
fn hash_memo_entries(options: &[String]) -> Result<Option<usize>, String> {
    count_option(options, "hash_memo", |n| (1024..=1 << 28).contains(&n), "a number of entries from 1024 to 268435456")
}

/// `node_cache=SIZE`: bytes, or a number with K, M or G (powers of 1024), at least 1M.
fn node_cache_size(options: &[String]) -> Result<Option<usize>, String> {
    size_option(options, "node_cache", 1 << 20)
}

/// The last `KEY=SIZE` of `options`: bytes, or a number with K, M or G (powers of 1024),
/// from `min` to 1024G.
fn size_option(options: &[String], key: &str, min: u64) -> Result<Option<usize>, String> {
    let Some(v) = options.iter().rev().find_map(|o| o.strip_prefix(key)?.strip_prefix('=')) else { return Ok(None) };
    let (digits, shift) = match v.char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 10),
        Some((i, 'M' | 'm')) => (&v[..i], 20),
        Some((i, 'G' | 'g')) => (&v[..i], 30),
        _ => (v, 0),
    };
    match digits.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift)) {
        Some(n) if n >= min && n <= 1 << 40 => Ok(Some(n as usize)),
        _ => Err(format!("{key}={v}: expected a size from {} to 1024G (bytes, or a number with K, M or G)", if min == 0 { "0".to_string() } else { format!("{}M", min >> 20) })),
    }
}

fn scion_options(options: &[String]) -> Result<ScionOptions, String> {
    for o in options.iter().filter(|o| !o.is_empty()) {
        let (key, value) = o.split_once('=').unwrap_or((o, ""));
        let ours = OURS.contains(&key);
        let numeric = ["max_read", "blksize"].contains(&key) && value.parse::<u32>().is_ok_and(|n| n > 0);
        if !ours && !numeric && !KERNEL_OPTIONS.contains(&o.as_str()) {
            return Err(format!(
                "mount option {o:?} is unknown: scion takes {}, max_read=N, blksize=N, and its own snapdir=, uring=, \
                 repack=, compress_old=, cache=, users=, node_cache=, hash_memo=, whereabouts=, max_background=, fold_batch=, remote_cache=, dirty_max=, nfs=, nfs_squash=, \
                 nfs_anon=, nfs_access= and nfs_max_held= (see scion mount --help)",
                KERNEL_OPTIONS.join(", ")
            ));
        }
    }
    let value = |key: &str, default: &'static str, other: &'static str| -> Result<bool, String> {
        match options.iter().rev().find_map(|o| o.strip_prefix(key).and_then(|v| v.strip_prefix('='))) {
            None => Ok(true),
            Some(v) if v == default => Ok(true),
            Some(v) if v == other => Ok(false),
            Some(v) => Err(format!("{key}={v}: expected {key}={default} or {key}={other}")),
        }
    };
    Ok(ScionOptions {
        snapdir_visible: !value("snapdir", "hidden", "visible")?,
        uring: value("uring", "auto", "off")?,
        background_repack: value("repack", "idle", "off")?,
        compress_old: value("compress_old", "idle", "off")?,
        writeback: value("cache", "writeback", "writethrough")?,
        users: value("users", "on", "off")?,
        node_cache: node_cache_size(options)?,
        hash_memo: hash_memo_entries(options)?,
        whereabouts: whereabouts_entries(options)?,
        max_background: max_background(options)?,
        fold_batch: fold_batch(options)?,
        remote_cache: size_option(options, "remote_cache", 0)?.map(|n| n as u64),
        dirty_max: size_option(options, "dirty_max", 0)?.map(|n| n as u64),
        nfs: nfs_options(options)?,
        kernel: options
            .iter()
            .filter(|o| !OURS.iter().any(|p| o.strip_prefix(p).is_some_and(|v| v.starts_with('='))))
            .cloned()
            .collect(),
    })
}

/// Destroys the snapshots scans killed part way left (no scan runs before the mount serves).
pub(crate) fn clear_scan_pins(fs: &mut Fs, what: &str) {
    match scion_daemon::control::destroy_scan_pins(fs) {
        Ok(0) => {}
        Ok(n) => log::info!("{what}destroyed {n} snapshot(s) that scans killed part way left"),
        Err(e) => log::warn!("{what}snapshots that killed scans left not destroyed: {e}"),
    }
}

/// Trees pulled from remotes read from there (and `remote_cache=` bounds their cache) before
/// any request comes.
fn attach_remotes(engine: &Engine, cache: Option<u64>) -> Result<(), String> {
    if let Some(n) = cache {
        engine.set_remote_cache(n);
    }
    engine.remote_source(false).map(drop).map_err(|e| format!("remote trees: {}", e.message))
}

fn serve(store: &Path, mountpoint: &Path, options: &[String]) -> Result<(), String> {
    crate::return_freed_memory();
    let store = canonical(store)?;
    require_store(&store)?;
    let ours = scion_options(options)?;
    let mnt = mount_point(mountpoint)?;
    if !mnt.is_dir() {
        return Err(format!("{} is not a directory", mnt.display()));
    }
    if let Some(w) = open_store_warning(&store) {
        log::warn!("{w}");
    }
    // Signals are taken by a dedicated thread; block them before any thread starts.
    let sigs = block_signals();
    if let Some(n) = ours.node_cache {
        scion_fs::set_node_cache_limit(n);
    }
    if let Some(n) = ours.hash_memo {
        scion_fs::set_hash_memo_limit(n);
    }
    if let Some(n) = ours.whereabouts {
        scion_fs::reach::set_whereabouts_limit(n);
    }
    if let Some(n) = ours.fold_batch {
        scion_fs::set_fold_batch(n);
    }
    let mut opts = MountOptions::new(format!("mounted at {}", mnt.display()));
    // The test mode of the reliability harness: once mounted, host calls fail as the spec
    // says (faults at mount time are tested on the engine).
    let mut faults = None;
    if let Ok(spec) = std::env::var("SCION_FAULTS") {
        let rules = scion_store::faults::parse(&spec)?;
        log::warn!(
            "SCION_FAULTS set: injecting {} fault rule(s) once mounted: {spec}",
            rules.len()
        );
        let host = std::sync::Arc::new(scion_store::faults::FaultyHost::new(opts.host, rules));
        host.arm(false);
        opts.host = host.clone();
        faults = Some(host);
    }
    let fs = Fs::open(&store, opts).map_err(|e| e.to_string())?;
    // The panic test's failpoints (scion_fs::failpoint), armed once mounted.
    if let Ok(spec) = std::env::var("SCION_FAILPOINTS") {
        log::warn!("SCION_FAILPOINTS set: the engine panics at {spec}");
        scion_fs::failpoint::arm_spec(&spec)?;
    }
    if let Some(h) = faults {
        h.arm(true);
    }
    let mut fs = fs;
    // Freed space is punched by the ticker thread below, not under the engine lock.
    fs.set_punch_later(true);
    let ScionOptions {
        snapdir_visible,
        uring,
        background_repack,
        compress_old,
        writeback,
        users,
        node_cache: _,
        hash_memo: _,
        whereabouts: _,
        max_background: background,
        fold_batch: _,
        remote_cache,
        dirty_max,
        nfs,
        kernel: options,
    } = ours;
    fs.show_snapdir = snapdir_visible;
    // `-o ro` (the last of ro and rw given): changes asked through the control socket are
    // refused too, and no background work writes (checkpoints find nothing to write).
    let read_only = options.iter().rev().find(|o| *o == "ro" || *o == "rw").is_some_and(|o| o == "ro");
    fs.read_only = read_only;
    if !read_only {
        clear_scan_pins(&mut fs, "");
    }
    let engine = Engine::new(fs);
    attach_remotes(&engine, remote_cache)?;
    // The store's main volume; each cube is one more (opened below, before any request).
    let router = std::sync::Arc::new(Router::new(engine.clone()).map_err(|e| format!("{}: {e}", store.display()))?);
    let cfg = mount_options(&store, &options);
    // Root's mount for everyone: other users may help themselves (rights.rs), through a
    // socket the mount's root directory names; `users=off` offers them nothing.
    let users_socket = (users && is_root() && cfg.acl == SessionACL::All).then(scion_daemon::server::new_user_socket_name);
    let front = scion_fuse::ScionFuse::new(router.clone())
        .with_atime(scion_fuse::Atime::from_options(options.iter().map(String::as_str)))
        .with_uring(uring)
        .with_max_background(background.unwrap_or(scion_fuse::DEFAULT_MAX_BACKGROUND))
        .with_writeback(writeback)
        .with_control_socket(users_socket.clone());
    let stale_attrs = front.attr_invalidator();
    let session = fuser::Session::new(front, &mnt, &cfg).map_err(|e| format!("mount of {} failed: {e}", mnt.display()))?;
    {
        // Offset -1: the attributes only, never the page cache.
        let notifier = session.notifier();
        let _ = stale_attrs.set(Box::new(move |ino| {
            if let Err(e) = notifier.inval_inode(fuser::INodeNo(ino), -1, 0) {
                log::debug!("attribute invalidation of {ino}: {e}");
            }
        }));
    }
    // The mount's device number: read from the mount table, not by stat (the session does
    // not serve requests yet, so a stat would wait for itself).
    let device = mount_field(&mnt, 2).ok_or_else(|| format!("{} is not in the mount table", mnt.display()))?;
    let cubes = {
        let notifier = std::sync::Arc::new(std::sync::Mutex::new(session.notifier()));
        let n2 = notifier.clone();
        let invalidate: scion_daemon::cubes::GlobalInvalidator =
            std::sync::Arc::new(move |inval: &[scion_fs::Inval]| crate::control::invalidate(&n2.lock().unwrap(), inval));
        let opts = BackgroundOptions {
            repack: background_repack && !read_only,
            compress_old: compress_old && !read_only,
            schedules: !read_only,
            checkpoint_after: CHECKPOINT_AFTER,
            ..Default::default()
        };
        let start: scion_daemon::cubes::StartBackground = Box::new(move |engine, inval| Background::start(engine, opts.clone(), inval));
        std::sync::Arc::new(
            scion_daemon::cubes::Cubes::open(&store, router.clone(), start, invalidate).map_err(|e| format!("{}: cubes: {e}", store.display()))?,
        )
    };
    {
        let notifier = session.notifier();
        let invalidate =
            std::sync::Arc::new(move |inval: &[scion_fs::Inval]| crate::control::invalidate(&notifier, inval));
        scion_daemon::server::serve(&store, engine.clone(), cubes.clone(), device, invalidate, users_socket.as_deref())?;
    }
    // NFS beside the mount (`-o nfs=`, `scion serve nfs`): its changes are told to the
    // kernel as the control socket's are.
    let nfs_server = {
        let notifier = session.notifier();
        let tell: scion_nfs::Invalidator =
            std::sync::Arc::new(move |inval: &[scion_fs::Inval]| crate::control::invalidate(&notifier, inval));
        std::sync::Arc::new(crate::serve_cmd::DaemonNfs::new(router.clone(), Some(tell), read_only))
    };
    scion_daemon::server::set_nfs_service(nfs_server.clone());
    if let Some(o) = nfs {
        let listen = o.listen.clone();
        nfs_server.start_with(o).map_err(|e| format!("nfs={listen}: {e}"))?;
    }
    log::info!("mounted {} at {}", store.display(), mnt.display());
    tune_bdi(&mnt, dirty_max.unwrap_or(DIRTY_MAX_BYTES));
    report_ready("ok");

    let background = {
        let notifier = session.notifier();
        let opts = BackgroundOptions {
            repack: background_repack && !read_only,
            compress_old: compress_old && !read_only,
            schedules: !read_only,
            // Transfers run `scion mirror send-one` (this binary) on paths of this mount.
            mirrors: std::env::current_exe().ok().filter(|_| !read_only).map(|exe| scion_daemon::mirror::MirrorOptions {
                mountpoint: mnt.clone(),
                store: store.clone(),
                exe,
            }),
            checkpoint_after: CHECKPOINT_AFTER,
            companions: Some(scion_daemon::SharedCompanions(cubes.clone())),
            ..Default::default()
        };
        Background::start(
            engine.clone(),
            opts,
            Box::new(move |inval| crate::control::invalidate(&notifier, inval)),
        )
    };
    {
        let mnt = mnt.clone();
        std::thread::spawn(move || {
            let mut sig = 0;
            unsafe { libc::sigwait(&sigs, &mut sig) };
            log::info!("signal {sig}: unmounting {}", mnt.display());
            let _ = unmount_path(&mnt, true);
        });
    }
    let r = session.run();
    // The mount is gone: a mount of this store from now on waits for the final checkpoint
    // instead of refusing the store as in use (`scion_store::lock`).
    engine.lock().note_unmounting(&format!("unmounting (was mounted at {})", mnt.display()));
    nfs_server.shut();
    background.stop();
    if let Err(e) = cubes.close() {
        log::error!("{e}");
    }
    // Through the lock, not by taking the engine out of its Arc: a control command may hold
    // it at this moment, and the final checkpoint must happen all the same.
    let closed = engine.close();
    // No one is listening any more; the store's lock still keeps another daemon out until
    // this process exits.
    scion_daemon::server::forget_socket(&store);
    closed.map_err(|e| format!("final checkpoint failed: {e}"))?;
    log::info!("unmounted {}; store flushed", mnt.display());
    r.map_err(|e| format!("FUSE session ended with an error: {e}"))
}

/// The kernel gives a FUSE mount a 128 KiB readahead window, which keeps sequential reads
/// small, and a dirty page limit that does not suit the daemon (below). As root, set both.
fn tune_bdi(mnt: &Path, dirty_max: u64) {
    // Not stat(): the session does not serve requests yet, so that would wait for itself.
    let Some(dev) = mount_field(mnt, 2) else { return };
    let bdi = format!("/sys/class/bdi/{dev}");
    let set = |knob: &str, value: &str| match std::fs::write(format!("{bdi}/{knob}"), value) {
        Ok(()) => true,
        Err(e) => {
            log::debug!("{bdi}/{knob}: {e} (left as the kernel set it)");
            false
        }
    };
    set("read_ahead_kb", "4096");
    // The kernel gives a FUSE mount a strict 1% share of the dirty pages, which throttles a
    // large write long before the daemon is busy; with no limit at all, the kernel starts
    // writing a file back only at its fsync or close (below the global background
    // threshold), so the daemon idles while the writer fills the cache, then works alone.
    // A limit of its own (`max_bytes`, Linux 6.2) sets the write-back going from half of it
    // on, beside the writer (docs/benchmarks.md, `bench/seq-write`). `dirty_max=0`: no limit.
    if dirty_max == 0 || !(set("max_bytes", &dirty_max.to_string()) && set("strict_limit", "1")) {
        set("strict_limit", "0");
        set("max_ratio", "40");
    }
}

/// The dirty page cache a mount may hold before its writers wait for write-back (`tune_bdi`,
/// `dirty_max=SIZE`).
const DIRTY_MAX_BYTES: u64 = 256 << 20;

/// Field `i` of the newest /proc/self/mountinfo line for mount point `mnt`.
fn mount_field(mnt: &Path, i: usize) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mnt.to_str()?;
    table
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f.get(4) == Some(&want))
        .last()
        .and_then(|f| f.get(i).map(|s| s.to_string()))
}

fn block_signals() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// A warning when other users may look into the store (a store made before `scion init`
/// set mode 0700, or opened up since): they can read every file's bytes from its packs.
fn open_store_warning(store: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(store).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "warning: {} has mode {mode:04o}: other users can read every file's bytes from its \
             packs, whatever the files' own permissions (chmod 700 {} to close it)",
            store.display(),
            store.display()
        )
    })
}

/// Refuses a directory that is not a store before anything is written into it or said
/// about it (a log, a lock, advice on its mode).
fn require_store(store: &Path) -> Result<(), String> {
    scion_store::Superblock::read(&scion_store::os_host(), store).map(drop).map_err(|e| e.to_string())
}

pub fn background(store: &Path, mountpoint: &Path, options: &[String], quiet: bool) -> Result<(), String> {
    let (store, mnt, pid) = spawn_daemon(store, mountpoint, options, false)?;
    if !quiet {
        println!("mounted {} at {} (daemon pid {pid})", store.display(), mnt.display());
    }
    Ok(())
}

/// A store as given to `mount`: a path, or `scion:PATH`.
pub fn store_arg(p: &Path) -> PathBuf {
    match p.to_str().and_then(|s| s.strip_prefix("scion:")) {
        Some(rest) if !Path::new(p).exists() => PathBuf::from(rest),
        _ => p.to_path_buf(),
    }
}

use scion::client::mounted_store;

/// A store mounted for one command that works through a mount (`receive --store`, a
/// mirror's transfer to a store that is not mounted): at a private directory, by a daemon
/// that unmounts (flushing, as `scion umount` does) when this process ends, however it
/// ends: the kernel sends the daemon SIGTERM when its parent dies (`PR_SET_PDEATHSIG`).
pub struct Transient {
    mnt: PathBuf,
}

impl Transient {
    /// Mounts `store`, or `None` and its mount point if it is mounted already.
    pub fn mount(store: &Path) -> Result<(PathBuf, Option<Transient>), String> {
        let store = canonical(store)?;
        if let Some((mnt, _, _)) = crate::tree_cmds::scion_mounts().into_iter().find(|(_, s, _)| *s == store) {
            return Ok((mnt, None));
        }
        let dir = std::env::temp_dir().join(format!("scion-transient-{}-{}", std::process::id(), unique()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // Only this user may reach into the store through it.
        let _ = std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        match spawn_daemon(&store, &dir, &["compress_old=off".to_string()], true) {
            Ok((_, mnt, _)) => Ok((mnt.clone(), Some(Transient { mnt }))),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }
}

impl Drop for Transient {
    fn drop(&mut self) {
        if let Err(e) = umount_quiet(&self.mnt) {
            eprintln!("scion: {e}");
        }
        let _ = std::fs::remove_dir(&self.mnt);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Starts a daemon serving `store` at `mountpoint` and waits until it serves (or failed):
/// the store and mount point made absolute, and the daemon's pid. A `transient` daemon
/// unmounts when this process dies.
fn spawn_daemon(store: &Path, mountpoint: &Path, options: &[String], transient: bool) -> Result<(PathBuf, PathBuf, u32), String> {
    let store = canonical(store)?;
    require_store(&store)?;
    scion_options(options)?;
    let mnt = mount_point(mountpoint)?;
    if let Some(w) = open_store_warning(&store) {
        eprintln!("{w}");
    }
    // Refuse early, with the holder's name, rather than from inside the daemon.
    if StoreLock::is_held(&store) {
        if let Err(e) = StoreLock::acquire(&store, "probe") {
            return Err(e.to_string());
        }
    }
    let mut fds = [0 as RawFd; 2];
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let (rfd, wfd) = (fds[0], fds[1]);
    let log_path = store.join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg("--foreground").arg(&store).arg(&mnt);
    if !options.is_empty() {
        cmd.arg("-o").arg(options.join(","));
    }
    cmd.env(READY_FD, wfd.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    unsafe {
        cmd.pre_exec(move || {
            libc::close(rfd);
            libc::setsid();
            if transient {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("could not start the daemon: {e}"))?;
    unsafe { libc::close(wfd) };
    let mut line = String::new();
    let _ = BufReader::new(unsafe { std::fs::File::from_raw_fd(rfd) }).read_line(&mut line);
    let line = line.trim();
    if line == "ok" {
        return Ok((store, mnt, child.id()));
    }
    let _ = child.wait();
    match line.strip_prefix("error: ") {
        Some(e) => Err(e.to_string()),
        None => Err(format!("the daemon exited before mounting; see {}", log_path.display())),
    }
}

/// The store behind a scion mount point, from the kernel's mount table.
fn store_of(mnt: &Path) -> Option<PathBuf> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mnt.to_str()?;
    for line in table.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        if f.get(4) == Some(&want) {
            if let Some(src) = mounted_store(f.get(dash + 1).unwrap_or(&""), f.get(dash + 2).unwrap_or(&"")) {
                return Some(PathBuf::from(src.replace("\\040", " ")));
            }
        }
    }
    None
}

fn unmount_path(mnt: &Path, lazy: bool) -> Result<(), String> {
    if is_root() {
        let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        if unsafe { libc::umount2(c.as_ptr(), flags) } != 0 {
            return Err(format!(
                "unmount of {}: {}",
                mnt.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    } else {
        let mut cmd = Command::new("fusermount3");
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        let out = cmd.arg(mnt).output().map_err(|e| format!("fusermount3: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(())
    }
}

pub fn umount(mountpoint: &Path) -> Result<(), String> {
    let abs = std::env::current_dir().map_err(|e| e.to_string())?.join(mountpoint);
    if is_dead_mount(&abs) {
        // Its daemon died: there is nothing to flush; the next mount replays the journal.
        unmount_path(&abs, true)?;
        println!(
            "detached {} (its daemon had died; the next mount replays the journal)",
            abs.display()
        );
        return Ok(());
    }
    let (mnt, store) = umount_quiet(&abs)?;
    println!("unmounted {}; store {} flushed", mnt.display(), store.display());
    Ok(())
}

/// Unmounts the scion mount at `abs` and waits until its daemon flushed the store: the
/// mount point and the store.
fn umount_quiet(abs: &Path) -> Result<(PathBuf, PathBuf), String> {
    let mnt = canonical(abs)?;
    let store = store_of(&mnt).ok_or_else(|| format!("{} is not a scion mount", mnt.display()))?;
    unmount_path(&mnt, false)?;
    // The daemon holds the store's lock until its final checkpoint is durable.
    let start = Instant::now();
    while StoreLock::is_held(&store) {
        if start.elapsed() > Duration::from_secs(600) {
            return Err(format!(
                "unmounted, but the daemon of {} has not finished after 10 minutes",
                store.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((mnt, store))
}

/// `scion mount -o remount,OPTIONS [STORE] MOUNTPOINT` (what `mount -o remount,ro MNT`
/// runs through the helper): the mount's kernel flags changed in place, read-only and back
/// included. Going read-only, the kernel stops taking changes first and then the daemon
/// checkpoints every volume and pauses its background work; going writable, the daemon
/// first. Options other than the kernel's flags (FUSE's, scion's own) are fixed at mount
/// and ignored here, as mount(8) passes them all again.
pub fn remount(mountpoint: &Path, options: &[String]) -> Result<(), String> {
    let mnt = std::fs::canonicalize(mountpoint).map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // After the optional fields, "-", then the type and the source.
    let line = table.lines().map(|l| l.split(' ').collect::<Vec<_>>()).filter(|f| f.get(4).copied() == mnt.to_str()).last();
    let tail = line.as_ref().and_then(|f| f.iter().position(|x| *x == "-").map(|i| &f[i + 1..]));
    let (fstype, source) = match tail {
        Some([t, s, ..]) => (*t, *s),
        _ => ("", ""),
    };
    if mounted_store(fstype, source).is_none() {
        return Err(format!("{} is not a scion mount", mnt.display()));
    }
    // The flags the mount has now, changed by those asked for (a remount sets them all).
    let now = mount_field(&mnt, 5).unwrap_or_default();
    let mut flags: std::collections::BTreeMap<libc::c_ulong, bool> = now.split(',').filter_map(kernel_flag).collect();
    for o in options.iter().flat_map(|o| o.split(',')).filter(|o| !o.is_empty() && *o != "remount") {
        match kernel_flag(o) {
            Some((f, on)) => {
                flags.insert(f, on);
                // The atime modes exclude each other.
                if on && matches!(f, libc::MS_NOATIME | libc::MS_RELATIME | libc::MS_STRICTATIME) {
                    for g in [libc::MS_NOATIME, libc::MS_RELATIME, libc::MS_STRICTATIME] {
                        if g != f {
                            flags.insert(g, false);
                        }
                    }
                }
            }
            // Options fixed at mount, FUSE's and scion's own: mount(8) passes all the
            // mount's options again (and fstab's); they stay as they are.
            None => {}
        }
    }
    let ro = flags.get(&libc::MS_RDONLY).copied().unwrap_or(false);
    let bits = flags.iter().filter(|(_, on)| **on).fold(libc::MS_REMOUNT, |b, (f, _)| b | f);
    let at = crate::tree_cmds::locate(&mnt, true, &None)?;
    let ask = |on: bool| crate::tree_cmds::call(&at, &scion_daemon::control::Op::ReadOnly { on }).map(drop);
    if !ro {
        ask(false)?;
    }
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).map_err(|_| "a mount point with a NUL".to_string())?;
    // SAFETY: a NUL-terminated path; no source, type or data (a remount of flags).
    let r = unsafe { libc::mount(std::ptr::null(), c.as_ptr(), std::ptr::null(), bits, std::ptr::null()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        if !ro {
            let _ = ask(flags_ro(&now));
        }
        return Err(format!("remount of {}: {e}", mnt.display()));
    }
    if ro {
        ask(true)?;
    }
    Ok(())
}

/// Whether the mount options `opts` (mountinfo's) say read-only.
fn flags_ro(opts: &str) -> bool {
    opts.split(',').any(|o| o == "ro")
}

/// A kernel mount flag an option names, and whether it sets it.
fn kernel_flag(o: &str) -> Option<(libc::c_ulong, bool)> {
    Some(match o {
        "ro" => (libc::MS_RDONLY, true),
        "rw" => (libc::MS_RDONLY, false),
        "nosuid" => (libc::MS_NOSUID, true),
        "suid" => (libc::MS_NOSUID, false),
        "nodev" => (libc::MS_NODEV, true),
        "dev" => (libc::MS_NODEV, false),
        "noexec" => (libc::MS_NOEXEC, true),
        "exec" => (libc::MS_NOEXEC, false),
        "sync" => (libc::MS_SYNCHRONOUS, true),
        "async" => (libc::MS_SYNCHRONOUS, false),
        "dirsync" => (libc::MS_DIRSYNC, true),
        "noatime" => (libc::MS_NOATIME, true),
        "atime" => (libc::MS_NOATIME, false),
        "nodiratime" => (libc::MS_NODIRATIME, true),
        "diratime" => (libc::MS_NODIRATIME, false),
        "relatime" => (libc::MS_RELATIME, true),
        "norelatime" => (libc::MS_RELATIME, false),
        "strictatime" => (libc::MS_STRICTATIME, true),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{fold_batch, hash_memo_entries, max_background, node_cache_size, size_option, whereabouts_entries};

    #[test]
    fn node_cache_takes_a_size_and_refuses_nonsense() {
        let size = |o: &str| node_cache_size(&[o.to_string()]);
        assert_eq!(size("node_cache=64M"), Ok(Some(64 << 20)));
        assert_eq!(size("node_cache=2g"), Ok(Some(2 << 30)));
        assert_eq!(size("node_cache=1048576"), Ok(Some(1 << 20)));
        assert_eq!(size("ro"), Ok(None));
        for bad in ["node_cache=", "node_cache=512K", "node_cache=lots", "node_cache=-1M", "node_cache=99999999G"] {
            assert!(size(bad).is_err(), "{bad}");
        }
        let memo = |o: &str| hash_memo_entries(&[o.to_string()]);
        assert_eq!(memo("hash_memo=100000"), Ok(Some(100_000)));
        assert_eq!(memo("ro"), Ok(None));
        for bad in ["hash_memo=", "hash_memo=10", "hash_memo=1e6", "hash_memo=999999999999"] {
            assert!(memo(bad).is_err(), "{bad}");
        }
        let places = |o: &str| whereabouts_entries(&[o.to_string()]);
        assert_eq!(places("whereabouts=0"), Ok(Some(0)));
        assert_eq!(places("whereabouts=100000"), Ok(Some(100_000)));
        for bad in ["whereabouts=", "whereabouts=-1", "whereabouts=lots", "whereabouts=99999999"] {
            assert!(places(bad).is_err(), "{bad}");
        }
        let bg = |o: &str| max_background(&[o.to_string()]);
        assert_eq!(bg("max_background=16"), Ok(Some(16)));
        for bad in ["max_background=0", "max_background=2000", "max_background=x"] {
            assert!(bg(bad).is_err(), "{bad}");
        }
        let dirty = |o: &str| size_option(&[o.to_string()], "dirty_max", 0);
        assert_eq!(dirty("dirty_max=0"), Ok(Some(0)));
        assert_eq!(dirty("dirty_max=64M"), Ok(Some(64 << 20)));
        assert!(dirty("dirty_max=lots").is_err());
        let batch = |o: &str| fold_batch(&[o.to_string()]);
        assert_eq!(batch("fold_batch=0"), Ok(Some(0)));
        assert_eq!(batch("fold_batch=4096"), Ok(Some(4096)));
        for bad in ["fold_batch=", "fold_batch=10", "fold_batch=many", "fold_batch=2000000"] {
            assert!(batch(bad).is_err(), "{bad}");
        }
    }
}

/// `scion serve nfs --store STORE`: the store served over NFS only, in the foreground, until
/// SIGINT or SIGTERM; then the final checkpoint, as at an unmount.
pub fn serve_nfs_foreground(store: &Path, o: scion_nfs::NfsOptions) -> Result<(), String> {
    crate::return_freed_memory();
    let store = canonical(store)?;
    require_store(&store)?;
    if let Some(w) = open_store_warning(&store) {
        log::warn!("{w}");
    }
    let sigs = block_signals();
    let mut fs = Fs::open(&store, MountOptions::new("served over NFS (scion serve nfs --store)")).map_err(|e| e.to_string())?;
    fs.set_punch_later(true);
    clear_scan_pins(&mut fs, "");
    let engine = Engine::new(fs);
    attach_remotes(&engine, None)?;
    let router = std::sync::Arc::new(Router::new(engine.clone()).map_err(|e| format!("{}: {e}", store.display()))?);
    let opts = BackgroundOptions { checkpoint_after: CHECKPOINT_AFTER, ..Default::default() };
    let cubes = {
        let bg = opts.clone();
        let start: scion_daemon::cubes::StartBackground = Box::new(move |engine, inval| Background::start(engine, bg.clone(), inval));
        let none: scion_daemon::cubes::GlobalInvalidator = std::sync::Arc::new(|_: &[scion_fs::Inval]| {});
        std::sync::Arc::new(
            scion_daemon::cubes::Cubes::open(&store, router.clone(), start, none).map_err(|e| format!("{}: cubes: {e}", store.display()))?,
        )
    };
    let background = Background::start(
        engine.clone(),
        BackgroundOptions { companions: Some(scion_daemon::SharedCompanions(cubes.clone())), ..opts },
        Box::new(|_| {}),
    );
    let server = scion_nfs::serve(router.clone(), o).map_err(|e| format!("NFS: {e}"))?;
    eprintln!("serving {} over {} (Ctrl-C to stop)", store.display(), server.describe());
    let mut sig = 0;
    unsafe { libc::sigwait(&sigs, &mut sig) };
    log::info!("signal {sig}: stopping the NFS server");
    server.stop();
    background.stop();
    if let Err(e) = cubes.close() {
        log::error!("{e}");
    }
    engine.close().map_err(|e| format!("final checkpoint failed: {e}"))?;
    eprintln!("stopped; store {} flushed", store.display());
    Ok(())
}
