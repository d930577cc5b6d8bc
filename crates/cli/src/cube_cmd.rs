//! `scion cube create|set|list|recover` (issue 21): directories that are stores of their
//! own, served by the mount's daemon (`scion_daemon::cubes`), and `scion check --cube`.

use crate::control::human;
use crate::tree_cmds::{call, locate, optional_path, store_path};
use scion_daemon::control::{Op, Reply, Step};
use scion_daemon::cubes::CubeRow;
use scion_fs::records::cubes;
use std::path::{Path, PathBuf};

fn one(reply: Reply) -> Result<CubeRow, String> {
    match reply {
        Reply::Cube(r) => Ok(r),
        _ => Err("the daemon answered something else".into()),
    }
}

/// DIR in its mount. A cube that exists may give EIO when walked (failed, unavailable):
/// then its parent is walked instead.
fn mounted(dir: &Path, exists: bool) -> Result<crate::tree_cmds::Located, String> {
    let at = match locate(dir, exists, &None) {
        Err(_) if exists && dir.symlink_metadata().is_err() => locate(dir, false, &None)?,
        r => r?,
    };
    if at.mnt.is_none() {
        return Err(format!("{}: cubes are served by a mounted store's daemon: mount the store", dir.display()));
    }
    Ok(at)
}

pub fn create(dir: PathBuf, mode: String, on_error: String, convert: bool, progress: bool) -> Result<(), String> {
    cubes::Mode::parse(&mode)?;
    cubes::OnError::parse(&on_error)?;
    if convert {
        return convert_dir(dir, mode, on_error, progress);
    }
    if dir.symlink_metadata().is_ok() {
        return Err(format!("{} exists: a cube is a new directory (or give --convert)", dir.display()));
    }
    let at = mounted(&dir, false)?;
    let r = one(call(&at, &Op::CubeCreate { path: store_path(&at), mode, on_error })?)?;
    println!("cube {} at {} ({}, on error {})", r.id, dir.display(), r.mode, r.on_error);
    Ok(())
}

/// A hidden sibling of `dir` for a copy on its way (`.NAME.scion-WHAT-PID`).
fn beside(dir: &Path, what: &str) -> Result<PathBuf, String> {
    let name = dir.file_name().ok_or_else(|| format!("{}: not a directory's name", dir.display()))?;
    Ok(dir.with_file_name(format!(".{}.scion-{what}-{}", name.to_string_lossy(), std::process::id())))
}

/// `create --convert`, all or nothing across a crash (`scion_daemon::cubes` `cube_moves.rs`):
/// the cube is made at a hidden sibling of DIR (recorded first), what DIR holds is copied in
/// through the mount, then the daemon puts the cube in DIR's place in one step and removes
/// the original. A failure on the way ends the cube; DIR is never touched until the copy is
/// whole and durable.
fn convert_dir(dir: PathBuf, mode: String, on_error: String, progress: bool) -> Result<(), String> {
    let m = dir.symlink_metadata().map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    let at = mounted(&dir, true)?;
    let hidden = beside(&dir, "convert")?;
    let hat = mounted(&hidden, false)?;
    let op = |step| Op::CubeConvert {
        hidden: store_path(&hat),
        target: store_path(&at),
        mode: mode.clone(),
        on_error: on_error.clone(),
        pid: std::process::id(),
        step,
    };
    one(call(&at, &op(Step::Begin))?)?;
    let mut p = crate::send_cmd::Progress::new(progress);
    let copied = crate::copy::copy_contents(&dir, &hidden, &mut p).and_then(|done| {
        // What the kernel still caches of the copy reaches the daemon before it is synced.
        sync_mount(&hidden)?;
        Ok(done)
    });
    let done = match copied {
        Ok(d) => d,
        Err(e) => {
            let e = format!("copying into the cube: {e}");
            return Err(match call(&at, &op(Step::Abandon)) {
                Ok(_) => format!("{e}; {} stays as it was", dir.display()),
                Err(u) => format!("{e}; undoing it failed too ({u}): the next mount undoes it"),
            });
        }
    };
    p.done(done.bytes);
    let r = one(call(&at, &op(Step::Finish))?)?;
    println!(
        "cube {} at {} ({}, on error {}): {} entries, {} copied in",
        r.id,
        dir.display(),
        r.mode,
        r.on_error,
        done.entries,
        human(done.bytes)
    );
    Ok(())
}

/// `syncfs` of the filesystem holding `path`: written data the kernel caches goes to the
/// daemon (the mount's writeback cache).
fn sync_mount(path: &Path) -> Result<(), String> {
    let d = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY: syncfs of an open descriptor.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(format!("{}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `cube remove`, all or nothing across a crash: recorded first, what the cube holds copied
/// into a hidden sibling in the main tree through the mount, then the daemon puts the copy in
/// the cube's place in one step and ends the cube. A failure on the way removes the partial
/// copy; the cube stays as it was.
pub fn remove(dir: PathBuf, progress: bool) -> Result<(), String> {
    let at = mounted(&dir, true)?;
    let row = match call(&at, &Op::CubeList)? {
        Reply::Cubes(rows) => rows.into_iter().find(|r| r.path == store_path(&at)),
        _ => return Err("the daemon answered something else".into()),
    };
    let row = row.ok_or_else(|| format!("{} is not a cube", dir.display()))?;
    let tmp = beside(&dir, "uncube")?;
    let tat = mounted(&tmp, false)?;
    let op = |step| Op::CubeUncube { path: store_path(&at), tmp: store_path(&tat), pid: std::process::id(), step };
    call(&at, &op(Step::Begin))?;
    let mut p = crate::send_cmd::Progress::new(progress);
    let copied = std::fs::create_dir(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))
        .and_then(|()| crate::copy::copy_contents(&dir, &tmp, &mut p))
        .and_then(|done| {
            sync_mount(&tmp)?;
            Ok(done)
        });
    let done = match copied {
        Ok(d) => d,
        Err(e) => {
            let e = format!("copying out of the cube: {e}");
            return Err(match call(&at, &op(Step::Abandon)) {
                Ok(_) => format!("{e}; the cube stays as it was"),
                Err(u) => format!("{e}; undoing it failed too ({u}): the next mount undoes it"),
            });
        }
    };
    p.done(done.bytes);
    call(&at, &op(Step::Finish))?;
    println!("{} is an ordinary directory again (cube {} removed): {} entries, {} copied", dir.display(), row.id, done.entries, human(done.bytes));
    Ok(())
}

pub fn set(dir: PathBuf, mode: Option<String>, on_error: Option<String>) -> Result<(), String> {
    if mode.is_none() && on_error.is_none() {
        return Err("nothing to change: give --mode or --on-error".into());
    }
    if let Some(m) = &mode {
        cubes::Mode::parse(m)?;
    }
    if let Some(o) = &on_error {
        cubes::OnError::parse(o)?;
    }
    let at = mounted(&dir, true)?;
    let op = Op::CubeSet { path: store_path(&at), mode: mode.unwrap_or_default(), on_error: on_error.unwrap_or_default() };
    let r = one(call(&at, &op)?)?;
    println!("cube {} at {}: {}, on error {}", r.id, dir.display(), r.mode, r.on_error);
    Ok(())
}

pub fn recover(dir: PathBuf) -> Result<(), String> {
    let at = mounted(&dir, true)?;
    let r = one(call(&at, &Op::CubeRecover { path: store_path(&at) })?)?;
    println!("cube {} at {} served again: {}", r.id, dir.display(), r.state);
    Ok(())
}

/// Whether the cube's store is clean.
pub fn check(dir: PathBuf, json: bool) -> Result<bool, String> {
    let at = mounted(&dir, true)?;
    let Reply::Checked(rep) = call(&at, &Op::CubeCheck { path: store_path(&at) })? else {
        return Err("the daemon answered something else".into());
    };
    print_report(&rep, json);
    Ok(rep.is_clean())
}

pub fn list(path: Option<PathBuf>, json: bool, scripted: bool, exact: bool) -> Result<(), String> {
    let at = optional_path(path, &None)?;
    let mnt = at.mnt.clone().ok_or("cubes are listed by a mounted store's daemon: mount the store")?;
    let Reply::Cubes(rows) = call(&at, &Op::CubeList)? else {
        return Err("the daemon answered something else".into());
    };
    print!("{}", render(&rows, &mnt, json, scripted, exact));
    Ok(())
}

fn render(rows: &[CubeRow], mnt: &Path, json: bool, scripted: bool, exact: bool) -> String {
    let path = |r: &CubeRow| mnt.join(String::from_utf8_lossy(&r.path).as_ref()).display().to_string();
    let mut out = String::new();
    if json {
        for r in rows {
            let v = serde_json::json!({
                "path": path(r),
                "id": r.id,
                "mode": r.mode,
                "on_error": r.on_error,
                "state": r.state,
                "why": (!r.why.is_empty()).then_some(&r.why),
                "used": r.used,
            });
            out.push_str(&format!("{v}\n"));
        }
        return out;
    }
    let used = |b: u64| if exact { b.to_string() } else { human(b) };
    if scripted {
        for r in rows {
            out.push_str(&[r.id.to_string(), r.mode.clone(), r.on_error.clone(), r.state.clone(), used(r.used), path(r)].join("\t"));
            out.push('\n');
        }
        return out;
    }
    out.push_str(&format!("{:<4} {:<9} {:<9} {:<11} {:>9}  {}\n", "ID", "MODE", "ON ERROR", "STATE", "USED", "PATH"));
    for r in rows {
        out.push_str(&format!("{:<4} {:<9} {:<9} {:<11} {:>9}  {}\n", r.id, r.mode, r.on_error, r.state, used(r.used), path(r)));
        if !r.why.is_empty() {
            out.push_str(&format!("     why: {}\n", r.why));
        }
    }
    out
}

/// The store of cube `path` (a path from the root of the unmounted `store`).
pub fn cube_store(store: &Path, path: &Path) -> Result<PathBuf, String> {
    let table = cubes::load(&scion_store::os_host(), store).map_err(|e| e.to_string())?;
    let want = path.to_string_lossy();
    let want = want.trim_matches('/');
    table
        .cubes
        .iter()
        .find(|c| c.path == want.as_bytes())
        .map(|c| c.store_dir(store))
        .ok_or_else(|| format!("/{want} is not a cube of {}", store.display()))
}

/// `scion check STORE [--cube PATH]` of an unmounted store: the store and each of its cubes
/// (each a store of its own), or the one cube. Whether all are clean.
pub fn check_offline(store: &Path, cube: Option<&Path>, json: bool) -> Result<bool, String> {
    let host = scion_store::os_host();
    if let Some(c) = cube {
        let rep = scion_fs::check::check(&host, &cube_store(store, c)?).map_err(|e| e.to_string())?;
        print_report(&rep, json);
        return Ok(rep.is_clean());
    }
    let main = scion_fs::check::check(&host, store).map_err(|e| e.to_string())?;
    let table = cubes::load(&host, store).map_err(|e| e.to_string())?;
    let mut clean = main.is_clean();
    let mut rows = Vec::new();
    for c in &table.cubes {
        let shown = format!("/{}", String::from_utf8_lossy(&c.path));
        match scion_fs::check::check(&host, &c.store_dir(store)) {
            Ok(rep) => {
                clean &= rep.is_clean();
                rows.push((shown, Ok(rep)));
            }
            Err(e) => {
                clean = false;
                rows.push((shown, Err(e.to_string())));
            }
        }
    }
    if json {
        let mut v = crate::control::check_json(&main);
        // "clean" is the whole store's verdict, cubes included (the exit status's);
        // "problems" are the main volume's own.
        v["clean"] = clean.into();
        v["cubes"] = rows
            .iter()
            .map(|(p, r)| match r {
                Ok(rep) => serde_json::json!({"path": p, "report": crate::control::check_json(rep)}),
                Err(e) => serde_json::json!({"path": p, "error": e}),
            })
            .collect();
        println!("{v}");
        return Ok(clean);
    }
    print!("{main}");
    for ((p, r), c) in rows.iter().zip(&table.cubes) {
        match r {
            Ok(rep) if rep.is_clean() && !main.is_clean() => println!(
                "cube {p}: clean ({} files, {} blocks); its own store shares nothing with the damage above, and if its path cannot be walked the mount serves it at MNT/.cubes/{}",
                rep.files, rep.blocks, c.id
            ),
            Ok(rep) if rep.is_clean() => println!("cube {p}: clean ({} files, {} blocks)", rep.files, rep.blocks),
            Ok(rep) => print!("cube {p}:\n{rep}"),
            Err(e) => println!("cube {p}: cannot be checked: {e}"),
        }
    }
    Ok(clean)
}

fn print_report(rep: &scion_fs::check::Report, json: bool) {
    if json {
        println!("{}", crate::control::check_json(rep));
    } else {
        print!("{rep}");
    }
}

/// `scion check STORE [--cube PATH] --repair`: the files whose data cannot be read removed
/// from the store (or the cube), then a check. Whether it is clean after.
pub fn repair(store: &Path, cube: Option<&Path>, json: bool) -> Result<bool, String> {
    let dir = match cube {
        Some(c) => cube_store(store, c)?,
        None => store.to_path_buf(),
    };
    let mut fs = scion_fs::Fs::open(&dir, scion_fs::MountOptions::new("scion check --repair")).map_err(|e| e.to_string())?;
    let rep = fs.repair();
    let closed = fs.close();
    let rep = rep.map_err(|e| format!("repair of {}: {e}", dir.display()))?;
    closed.map_err(|e| format!("repair of {}: {e}", dir.display()))?;
    let after = scion_fs::check::check(&scion_store::os_host(), &dir).map_err(|e| e.to_string())?;
    if json {
        let v = serde_json::json!({
            "lost": rep.lost,
            "left": rep.left.iter().map(|(p, w)| serde_json::json!({"path": p, "what": w})).collect::<Vec<_>>(),
            "report": crate::control::check_json(&after),
        });
        println!("{v}");
    } else {
        for p in &rep.lost {
            println!("removed {p}: its data could not be read");
        }
        for (p, w) in &rep.left {
            println!("left {p}: {w}");
        }
        println!("{} file(s) removed; then:", rep.lost.len());
        print!("{after}");
    }
    Ok(after.is_clean())
}
