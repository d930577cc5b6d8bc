//! `scion clone`, `snapshot`, `destroy`, `list`: find the store behind a path, then ask its
//! daemon (mounted) or open it directly (unmounted, with `--store`).

use crate::control;
pub(crate) use scion::client::{locate, scion_mounts, Located};
use scion::client;
use scion::wire::Template;
use scion_daemon::control::{execute, Op, Target};
use scion_daemon::server;
use scion_fs::{Fs, MountOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `locate` of what `path`'s last name itself is, as `lstat` and `cp -a` take it: the
/// directories above are resolved, a symlink at the end is not followed (nor need anything
/// be there: a path gone from the live tree still names its versions).
pub(crate) fn locate_entry(path: &Path, store: &Option<PathBuf>) -> Result<Located, String> {
    let (Some(name), None) = (path.file_name(), store) else {
        return locate(path, store.is_some() || path.exists(), store);
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut l = locate(&parent, true, store)?;
    if !l.rel.is_empty() {
        l.rel.push(b'/');
    }
    l.rel.extend_from_slice(name.as_bytes());
    Ok(l)
}

fn run(at: &Located, op: Op) -> Result<(), String> {
    let reply = call(at, &op)?;
    let text = control::render(&op, &reply)?;
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(())
}

/// `path` as a store path: its part below the mount point `mnt`.
pub(crate) fn below_mount(mnt: &Path, path: &Path) -> Result<Vec<u8>, String> {
    use std::os::unix::ffi::OsStrExt;
    path.strip_prefix(mnt)
        .map(|p| p.as_os_str().as_bytes().to_vec())
        .map_err(|_| format!("{} is not below the mount point {}", path.display(), mnt.display()))
}

/// Runs `op` on the store `at` names: through its daemon when mounted, or on the store
/// opened here.
pub(crate) fn call(at: &Located, op: &Op) -> Result<scion_daemon::control::Reply, String> {
    call_errno(at, op).map_err(|(_, m)| m)
}

/// `call` for a send stream: its bytes go to `sink` as the daemon makes them (a mounted
/// store only).
pub(crate) fn call_streaming(
    at: &Located,
    op: &Op,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<scion_daemon::control::Reply, String> {
    if at.mnt.is_none() {
        return Err("a stream is sent by a mounted store's daemon: mount the store".into());
    }
    server::call_streaming(&at.store, &at.device, at.mnt.as_deref(), op, &mut |_, _, _| {}, Some(sink)).map_err(|e| e.message)
}

/// `call` of a scan: its parts go to `parts` as they come (a mounted store only).
pub(crate) fn call_parts(
    at: &Located,
    op: &Op,
    parts: &mut dyn FnMut(scion_daemon::wire::Part) -> Result<(), String>,
) -> Result<scion_daemon::control::Reply, String> {
    if at.mnt.is_none() {
        return Err("a scan or streamed diff is served by a mounted store's daemon: mount the store".into());
    }
    client::sync_mount(at, op);
    server::call_parts(&at.store, &at.device, at.mnt.as_deref(), op, parts).map_err(|e| e.message)
}

/// `call`, with the errno of a refusal beside its message (0 where there is none).
fn call_errno(at: &Located, op: &Op) -> Result<scion_daemon::control::Reply, (i32, String)> {
    let reply = if at.mnt.is_some() {
        client::call_mounted(at, op)?
    } else {
        let mut fs = Fs::open(&at.store, MountOptions::new("scion (clone/snapshot/destroy/list)"))
            .map_err(|e| (0, e.to_string()))?;
        let r = execute(&mut fs, &op, None).map(|(reply, _)| reply);
        fs.close().map_err(|e| (0, e.to_string()))?;
        r.map_err(|e| (e.errno, e.message))?
    };
    Ok(reply)
}

pub fn clone(
    src: Option<PathBuf>,
    dst: Option<PathBuf>,
    mut exclude: Vec<PathBuf>,
    template: Option<PathBuf>,
    store: Option<PathBuf>,
) -> Result<(), String> {
    let (src, dst) = match template {
        Some(t) => {
            let text = std::fs::read_to_string(&t).map_err(|e| format!("{}: {e}", t.display()))?;
            let tp = Template::parse(&text).map_err(|e| format!("template {}: {e}", t.display()))?;
            // Relative paths in a template are taken from the template's directory.
            let base = t.parent().map(Path::to_path_buf).unwrap_or_default();
            let fix = |p: PathBuf| {
                if p.is_absolute() || store.is_some() {
                    p
                } else {
                    base.join(p)
                }
            };
            exclude.extend(tp.exclude);
            (
                src.unwrap_or_else(|| fix(tp.source)),
                dst.unwrap_or_else(|| fix(tp.destination)),
            )
        }
        None => (
            src.ok_or("clone needs SRC and DST (or --template FILE)")?,
            dst.ok_or("clone needs DST")?,
        ),
    };
    let s = locate(&src, true, &store)?;
    let d = locate(&dst, false, &store)?;
    if s.store != d.store {
        return Err(format!(
            "{} and {} are on different stores: a clone is made on the same mount",
            src.display(),
            dst.display()
        ));
    }
    let mut excludes = Vec::new();
    for e in &exclude {
        // Absolute: must lie inside SRC. Relative: taken from SRC.
        let rel = if e.is_absolute() && store.is_none() {
            let abs = std::fs::canonicalize(e).map_err(|err| format!("excluded path {}: {err}", e.display()))?;
            let srcabs = std::fs::canonicalize(&src).map_err(|err| format!("{}: {err}", src.display()))?;
            abs.strip_prefix(&srcabs)
                .map_err(|_| format!("excluded path {} is not inside {}", e.display(), src.display()))?
                .to_path_buf()
        } else if e.is_absolute() {
            let sp = Path::new(std::str::from_utf8(&s.rel).unwrap_or(""));
            e.strip_prefix(sp)
                .map_err(|_| format!("excluded path {} is not inside {}", e.display(), src.display()))?
                .to_path_buf()
        } else {
            e.clone()
        };
        let names: Vec<Vec<u8>> = rel
            .as_os_str()
            .as_bytes()
            .split(|b| *b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| c.to_vec())
            .collect();
        if !names.is_empty() {
            excludes.push(names);
        }
    }
    let op = Op::Clone {
        src: s.rel.clone(),
        dst: d.rel.clone(),
        excludes,
    };
    match call_errno(&s, &op) {
        Ok(reply) => {
            let text = crate::control::render(&op, &reply)?;
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            Ok(())
        }
        // Across the edge of a cube: cubes keep their blocks apart, so the tree is copied.
        Err((libc::EXDEV, _)) if s.mnt.is_some() && exclude.is_empty() => copy_across(&src, &dst),
        Err((_, m)) => Err(m),
    }
}

/// A clone from one cube into another (or between a cube and the rest of the store): a
/// copy of the tree, with progress, since a cube's blocks are its own.
fn copy_across(src: &Path, dst: &Path) -> Result<(), String> {
    std::fs::create_dir(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    let mut p = crate::send_cmd::Progress::new(false);
    match crate::copy::copy_contents(src, dst, &mut p) {
        Ok(done) => {
            p.done(done.bytes);
            println!(
                "copied {} to {} ({} entries, {}): a cube's edge lies between them, and cubes keep their blocks apart",
                src.display(),
                dst.display(),
                done.entries,
                crate::control::human(done.bytes)
            );
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(dst);
            Err(format!("copying across cubes: {e} (nothing left at {})", dst.display()))
        }
    }
}

pub fn snapshot(path: PathBuf, name: Option<String>, store: Option<PathBuf>) -> Result<(), String> {
    let at = locate(&path, true, &store)?;
    let name = name.unwrap_or_else(client::utc_now_name);
    run(
        &at,
        Op::Snapshot {
            path: at.rel.clone(),
            name: name.into_bytes(),
        },
    )
}

pub fn destroy(path: PathBuf, store: Option<PathBuf>, recursive: bool, mount: Option<PathBuf>) -> Result<(), String> {
    // `@ID` names a clone or snapshot by the id `scion list` shows.
    if let Some(id) = path.to_str().filter(|p| p.starts_with('@')) {
        let at = match &store {
            Some(s) => Located::unmounted(s.clone()),
            None => locate(mount.as_deref().unwrap_or(Path::new(".")), true, &store)?,
        };
        let id: u32 = id[1..]
            .parse()
            .map_err(|_| "a clone id is @ and a number, as `scion list` shows it".to_string())?;
        return run(&at, Op::Destroy { target: Target::Id(id), recursive });
    }
    if mount.is_some() {
        return Err("--mount goes with @ID; a path names its mount itself".into());
    }
    // Not canonicalised: the last name is the clone itself, not what a symlink points at.
    let at = if store.is_some() {
        locate(&path, true, &store)?
    } else {
        if path.file_name().is_none() {
            return Err(format!("{}: not a clone", path.display()));
        }
        locate_entry(&path, &store)?
    };
    // Clones made from a snapshot keep their files: said, as `zfs destroy` would refuse.
    let made: Vec<String> = match call(&at, &Op::List { under: None }) {
        Ok(scion_daemon::control::Reply::Listing(rows)) => {
            let me = rows.iter().find(|l| l.path.as_deref() == Some(&at.rel[..]));
            me.map(|l| control::clones_of(&rows, l).iter().filter_map(|c| c.path.as_ref().map(|p| scion_daemon::control::show(p))).collect())
                .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    run(&at, Op::Destroy { target: Target::Path(at.rel.clone()), recursive })?;
    if !made.is_empty() {
        println!(
            "clones made from it keep their files (they share its blocks; none depends on it): {}",
            made.join(", ")
        );
    }
    Ok(())
}

/// An optional path: inside the store given with --store (taken as is), or in a mount
/// (default: the current directory).
pub(crate) fn optional_path(path: Option<PathBuf>, store: &Option<PathBuf>) -> Result<Located, String> {
    match (store, path) {
        (Some(s), p) => Ok(Located {
            store: s.clone(),
            rel: p.map(|p| p.as_os_str().as_bytes().to_vec()).unwrap_or_default(),
            mnt: None,
            device: String::new(),
        }),
        (None, p) => locate(&p.unwrap_or_else(|| PathBuf::from(".")), true, store),
    }
}

/// `scion list`: a table, or JSON Lines with `json`.
pub fn list(path: Option<PathBuf>, store: Option<PathBuf>, json: bool, scripted: bool, exact: bool, orphaned: bool) -> Result<(), String> {
    let at = optional_path(path, &store)?;
    let under = (!at.rel.is_empty()).then(|| at.rel.clone());
    let scion_daemon::control::Reply::Listing(mut rows) = call(&at, &Op::List { under })? else {
        return Err("the daemon answered something else".into());
    };
    if orphaned {
        rows.retain(|l| l.orphaned);
    }
    if json {
        print!("{}", control::render_listing_json(&rows));
    } else {
        print!("{}", control::listing_table(&rows, scripted, exact));
    }
    Ok(())
}

/// `scion scrub`: true if nothing was damaged (the text report of damage is an `Err`).
pub fn scrub(path: Option<PathBuf>, store: Option<PathBuf>, json: bool) -> Result<bool, String> {
    let at = match (&store, path) {
        (Some(s), _) => Located::unmounted(s.clone()),
        (None, p) => locate(&p.unwrap_or_else(|| PathBuf::from(".")), true, &store)?,
    };
    if !json {
        return run(&at, Op::Scrub).map(|()| true);
    }
    let scion_daemon::control::Reply::Scrubbed(rep) = call(&at, &Op::Scrub)? else {
        return Err("the daemon answered something else".into());
    };
    let v = serde_json::json!({
        "blocks": rep.blocks,
        "bytes": rep.bytes,
        "damaged_total": rep.damaged_total,
        "damage": rep.damage.iter().map(|(p, e)| serde_json::json!({"path": p, "error": e})).collect::<Vec<_>>(),
    });
    println!("{v}");
    Ok(rep.damaged_total == 0)
}

pub fn repack(path: Option<PathBuf>, store: Option<PathBuf>, budget: u64) -> Result<(), String> {
    let at = optional_path(path, &store)?;
    run(
        &at,
        Op::Repack {
            path: at.rel.clone(),
            budget,
        },
    )
}

/// What `scion compress` was asked.
pub struct CompressArgs {
    pub path: Option<PathBuf>,
    pub store: Option<PathBuf>,
    /// zstd level (0: the daemon's default).
    pub level: u8,
    pub budget: u64,
    pub json: bool,
    pub progress: bool,
}

/// Bytes of blocks one request compresses: the command asks again until nothing is left, so
/// it can say how far it got, and the daemon's lock is taken briefly between rounds.
const COMPRESS_ROUND: u64 = 256 << 20;

pub fn compress(a: CompressArgs) -> Result<(), String> {
    let at = optional_path(a.path, &a.store)?;
    let show_progress = a.progress || unsafe { libc::isatty(2) } == 1;
    let mut total = scion_fs::compress::CompressReport::default();
    let mut left = a.budget;
    let started = std::time::Instant::now();
    loop {
        let budget = left.min(COMPRESS_ROUND);
        let r = match call(&at, &Op::Compress { budget, level: a.level })? {
            scion_daemon::control::Reply::Compressed(r) => r,
            other => return Err(format!("unexpected reply {other:?}")),
        };
        if total.candidates == 0 {
            total.candidates = r.candidates;
        }
        total.compressed += r.compressed;
        total.incompressible += r.incompressible;
        total.bytes_before += r.bytes_before;
        total.bytes_after += r.bytes_after;
        total.left = r.left;
        left = left.saturating_sub(budget);
        if show_progress {
            let done = total.compressed + total.incompressible;
            eprint!(
                "\rcompress: {done} of {} blocks, {} -> {}, {:.0} s   ",
                total.candidates,
                control::human(total.bytes_before),
                control::human(total.bytes_after),
                started.elapsed().as_secs_f64()
            );
        }
        // A round that did nothing (every block already tried) ends it too.
        if r.left == 0 || left == 0 || r.compressed + r.incompressible == 0 {
            break;
        }
    }
    if show_progress {
        eprintln!();
    }
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "candidates": total.candidates,
                "compressed": total.compressed,
                "incompressible": total.incompressible,
                "bytes_before": total.bytes_before,
                "bytes_after": total.bytes_after,
                "left": total.left,
            })
        );
    } else {
        println!(
            "compressed {} blocks of old versions: {} -> {} ({} incompressible, kept as they were; {} left)",
            total.compressed,
            control::human(total.bytes_before),
            control::human(total.bytes_after),
            total.incompressible,
            total.left
        );
    }
    Ok(())
}

/// What `scion snapshot schedule` was asked.
pub struct ScheduleArgs {
    pub dir: Option<PathBuf>,
    pub every: Option<String>,
    pub keep: Option<String>,
    pub keep_while_free: Option<u8>,
    pub min_free: Option<u8>,
    pub list: bool,
    pub remove: bool,
    pub json: bool,
    pub scripted: bool,
    pub exact: bool,
    pub store: Option<PathBuf>,
}

/// A path as the store's operations take it: from the mount root, no leading or trailing
/// `/`.
pub(crate) fn store_path(at: &Located) -> Vec<u8> {
    let s = String::from_utf8_lossy(&at.rel).into_owned();
    s.trim_matches('/').as_bytes().to_vec()
}

/// `scion snapshot schedule`: 0 done; 1 nothing to remove; 2 bad usage or failure.
pub fn schedule(a: ScheduleArgs) -> Result<std::process::ExitCode, String> {
    use scion_daemon::control::Reply;
    use scion_fs::schedule::retention::{Keep, Thresholds};
    use scion_fs::schedule::{parse_every, Schedule};
    let setting = a.every.is_some() || a.keep.is_some() || a.keep_while_free.is_some() || a.min_free.is_some();
    if a.list {
        if a.remove || setting {
            return Err("--list takes no other option but --json, -H, -p (and a path or --store)".into());
        }
        let at = optional_path(a.dir, &a.store)?;
        let Reply::Schedules(rows) = call(&at, &Op::ScheduleList)? else {
            return Err("the daemon answered something else".into());
        };
        print!("{}", control::render_schedules(&rows, a.json, a.scripted, a.exact));
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let dir = a
        .dir
        .ok_or("which directory? (scion snapshot schedule DIR --every 15m)")?;
    let at = locate(&dir, true, &a.store)?;
    if a.remove {
        if setting {
            return Err("--remove takes no other option".into());
        }
        let Reply::ScheduleRemoved(had) = call(&at, &Op::ScheduleRemove { dir: store_path(&at) })? else {
            return Err("the daemon answered something else".into());
        };
        if !had {
            eprintln!("scion: {} has no schedule", dir.display());
            return Ok(std::process::ExitCode::from(1));
        }
        println!("removed the schedule of {} (its snapshots stay)", dir.display());
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let every = parse_every(a.every.as_deref().ok_or("--every DURATION is needed (15m, 1h, 1d)")?)?;
    let keep = match &a.keep {
        Some(k) => Keep::parse(k)?,
        None => Keep::default(),
    };
    for (what, v) in [("--keep-while-free", a.keep_while_free), ("--min-free", a.min_free)] {
        if v.is_some_and(|p| p > 100) {
            return Err(format!("{what}: a percentage, 0 to 100"));
        }
    }
    let s = Schedule {
        dir: store_path(&at),
        every,
        keep,
        limits: Thresholds {
            keep_while_free: a.keep_while_free,
            min_free: a.min_free,
        },
    };
    call(&at, &Op::ScheduleSet(s.clone()))?;
    println!(
        "{} is snapshotted every {}, keeping {}",
        dir.display(),
        control::duration(s.every),
        s.keep
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// `scion versions PATH` (or `--deleted DIR`): 0 listed; 1 nothing holds the path / nothing
/// deleted; 2 bad usage or failure.
pub fn versions(
    path: PathBuf,
    deleted: bool,
    json: bool,
    store: Option<PathBuf>,
) -> Result<std::process::ExitCode, String> {
    use scion_daemon::control::Reply;
    // The path may be gone from the live tree: its parent is what must exist. A symlink is
    // the link's versions, as `ls -l` shows the link.
    let at = locate_entry(&path, &store)?;
    let rel = store_path(&at);
    if deleted {
        let Reply::Deleted(rows) = call(&at, &Op::Deleted { dir: rel })? else {
            return Err("the daemon answered something else".into());
        };
        print!("{}", control::render_deleted(&rows, json));
        return Ok(if rows.is_empty() {
            std::process::ExitCode::from(1)
        } else {
            std::process::ExitCode::SUCCESS
        });
    }
    match call(&at, &Op::Versions { path: rel }) {
        Ok(Reply::Versions(v)) => {
            print!("{}", control::render_versions(&v, json));
            Ok(std::process::ExitCode::SUCCESS)
        }
        Ok(_) => Err("the daemon answered something else".into()),
        Err(e) if e.contains("neither the live tree nor any snapshot") => {
            eprintln!("scion: {e}");
            Ok(std::process::ExitCode::from(1))
        }
        Err(e) => Err(e),
    }
}

/// `scion restore PATH --from SNAPSHOT [--to DEST] [--replace]`.
/// `scion rollback DIR --to SNAP`. Err: the errno of a refusal (ENOENT: no such snapshot)
/// and the message.
pub fn rollback(dir: PathBuf, to: String, store: Option<PathBuf>) -> Result<(), (i32, String)> {
    use scion_daemon::control::Reply;
    if to.contains('/') {
        return Err((libc::EINVAL, format!("--to takes a snapshot name (in {}/.snapshot), not a path", dir.display())));
    }
    let at = locate(&dir, true, &store).map_err(|e| (0, e))?;
    let op = Op::Rollback {
        dir: store_path(&at),
        to: to.clone().into_bytes(),
    };
    let Reply::RolledBack = call_errno(&at, &op)? else {
        return Err((0, "the daemon answered something else".into()));
    };
    println!("rolled back {} to snapshot {to}", dir.display());
    Ok(())
}

pub fn restore(
    path: PathBuf,
    from: String,
    to: Option<PathBuf>,
    replace: bool,
    store: Option<PathBuf>,
) -> Result<(), String> {
    use scion_daemon::control::Reply;
    // PATH may be gone from the live tree: its parent must exist. A symlink, here or in the
    // snapshot, is restored as the link, as `cp -a` copies it.
    let at = locate_entry(&path, &store)?;
    let rel = store_path(&at);
    let from_rel = if from.contains('/') {
        let f = locate_entry(Path::new(&from), &store)?;
        if f.store != at.store {
            return Err(format!("{from} is not in the same store as {}", path.display()));
        }
        store_path(&f)
    } else {
        from.clone().into_bytes()
    };
    let to_rel = match &to {
        Some(t) => {
            let d = locate(t, false, &store).or_else(|_| locate(t, true, &store))?;
            if d.store != at.store {
                return Err(format!(
                    "{} is not in the same store as {}",
                    t.display(),
                    path.display()
                ));
            }
            Some(store_path(&d))
        }
        None => None,
    };
    let op = Op::Restore {
        path: rel,
        from: from_rel,
        to: to_rel,
        replace,
    };
    let Reply::Restored(r) = call(&at, &op)? else {
        return Err("the daemon answered something else".into());
    };
    let dst = to.unwrap_or(path);
    println!(
        "restored {} from {from}: {} files ({} MiB shared with the snapshot, none copied), {} directories, {} others",
        dst.display(),
        r.files,
        r.bytes >> 20,
        r.dirs,
        r.others
    );
    if let Some(k) = r.kept_as {
        let shown = match &at.mnt {
            Some(m) => m.join(String::from_utf8_lossy(&k).as_ref()).display().to_string(),
            None => scion_daemon::control::show(&k),
        };
        println!("what was there is now {shown}");
    }
    Ok(())
}
