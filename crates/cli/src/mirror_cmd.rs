//! `scion mirror add|remove|status` (issue 20 item 4), and `send-one`, the transfer the
//! daemon's mirror worker runs (`scion_daemon::mirror`): `scion send` piped into
//! `scion receive --resumable`, the same commands a user runs by hand.

use crate::control::rfc3339;
use crate::tree_cmds::{call, locate, optional_path, store_path};
use scion_daemon::control::{MirrorRow, Op, Reply};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether `p` is a store's directory (its superblock reads), not a directory in a mount.
fn is_store(p: &Path) -> bool {
    scion_store::Superblock::read(&scion_store::os_host(), p).is_ok()
}

/// The target as the mirror records it: absolute, and a directory now (it may be on a
/// store that is not mounted yet, when the source is given with --store). A store's own
/// directory names its root: the store is mounted for each transfer if it is not mounted.
fn target_path(to: &Path, must_exist: bool) -> Result<Vec<u8>, String> {
    let abs = if to.is_absolute() {
        to.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| e.to_string())?.join(to)
    };
    if is_store(&abs) {
        let abs = abs.canonicalize().map_err(|e| format!("{}: {e}", abs.display()))?;
        return Ok(abs.as_os_str().as_bytes().to_vec());
    }
    if must_exist && !abs.is_dir() {
        let what = if abs.exists() { "is not a directory" } else { "does not exist" };
        return Err(format!("{} {what}: the mirror's target is a directory in a mounted scion store, or a store", abs.display()));
    }
    if must_exist {
        // The target is in a scion mount other than the source's.
        let t = locate(&abs, true, &None)?;
        let mnt = t.mnt.clone().ok_or_else(|| format!("{}: not in a scion mount", abs.display()))?;
        return Ok(mnt.join(Path::new(std::ffi::OsStr::from_bytes(&store_path(&t)))).as_os_str().as_bytes().to_vec());
    }
    Ok(abs.as_os_str().as_bytes().to_vec())
}

pub fn add(dir: PathBuf, to: PathBuf, keep_unmirrored: bool, store: Option<PathBuf>) -> Result<(), String> {
    let at = locate(&dir, true, &store)?;
    let target = target_path(&to, store.is_none())?;
    if let (Some(mnt), None) = (&at.mnt, &store) {
        // By whole path components: /m2/x is not inside /m.
        if Path::new(std::ffi::OsStr::from_bytes(&target)).starts_with(mnt) {
            return Err(format!(
                "{} is in the mount of the same store ({}): a mirror goes to another store (another device, ideally)",
                String::from_utf8_lossy(&target),
                mnt.display()
            ));
        }
    }
    let same = |s: &Path| s.canonicalize().ok() == Path::new(std::ffi::OsStr::from_bytes(&target)).canonicalize().ok();
    if same(&at.store) {
        return Err("the target is the same store: a mirror goes to another store (another device, ideally)".into());
    }
    call(&at, &Op::MirrorSet { dir: store_path(&at), target: target.clone(), keep_unmirrored })?;
    println!(
        "mirroring /{} to {}{}",
        String::from_utf8_lossy(&store_path(&at)),
        String::from_utf8_lossy(&target),
        if keep_unmirrored { " (snapshots not sent yet are kept)" } else { "" }
    );
    Ok(())
}

pub fn remove(dir: PathBuf, to: Option<PathBuf>, store: Option<PathBuf>) -> Result<bool, String> {
    // The directory may be gone (its mirror then has nothing to send, but stays listed).
    let at = locate(&dir, store.is_some() || dir.symlink_metadata().is_ok(), &store)?;
    let target = to.map(|t| target_path(&t, false)).transpose()?;
    let Reply::MirrorRemoved(n) = call(&at, &Op::MirrorRemove { dir: store_path(&at), target })? else {
        return Err("the daemon answered something else".into());
    };
    if n > 0 {
        println!("removed {n} mirror(s) of /{}", String::from_utf8_lossy(&store_path(&at)));
    }
    Ok(n > 0)
}

pub fn status(path: Option<PathBuf>, json: bool, store: Option<PathBuf>, scripted: bool, exact: bool) -> Result<(), String> {
    let at = optional_path(path, &store)?;
    let Reply::Mirrors(rows) = call(&at, &Op::MirrorStatus)? else {
        return Err("the daemon answered something else".into());
    };
    print!("{}", render(&rows, json, scripted, exact));
    Ok(())
}

fn render(rows: &[MirrorRow], json: bool, scripted: bool, exact: bool) -> String {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut out = String::new();
    if json {
        for r in rows {
            let m = &r.mirror;
            let v = serde_json::json!({
                "dir": format!("/{}", s(&m.dir)),
                "target": s(&m.target),
                "last": m.last.as_deref().map(s),
                "last_time": m.last.as_ref().map(|_| rfc3339(m.last_time)),
                "behind": r.behind,
                "next": r.next.as_deref().map(s),
                "keep_unmirrored": m.keep_unmirrored,
                "state": r.state,
            });
            out += &format!("{v}\n");
        }
        return out;
    }
    if scripted {
        for r in rows {
            let m = &r.mirror;
            let when = match (&m.last, exact) {
                (None, true) => "0".to_string(),
                (None, false) => "-".to_string(),
                (Some(_), true) => m.last_time.to_string(),
                (Some(_), false) => rfc3339(m.last_time),
            };
            let last = m.last.as_deref().map(s).unwrap_or_else(|| "-".into());
            out += &[format!("/{}", s(&m.dir)), s(&m.target), last, when, r.behind.to_string(), r.state.clone()].join("\t");
            out.push('\n');
        }
        return out;
    }
    out += &format!("{:<30} {:<30} {:<24} {:>6}  {}\n", "DIR", "TARGET", "LAST SENT", "BEHIND", "STATE");
    for r in rows {
        let m = &r.mirror;
        out += &format!(
            "{:<30} {:<30} {:<24} {:>6}  {}\n",
            format!("/{}", s(&m.dir)),
            s(&m.target),
            m.last.as_deref().map(s).unwrap_or_else(|| "-".into()),
            r.behind,
            r.state
        );
    }
    out
}

/// One transfer of `snapshot` (a path `DIR/.snapshot/NAME` in a mount) to `to/NAME`, on
/// `base`: nothing if it is there already with the same content; going on from a receive
/// that stopped short; checking the content hash of what arrived.
pub fn send_one(snapshot: PathBuf, base: Option<PathBuf>, to: PathBuf) -> Result<(), String> {
    let name = snapshot.file_name().ok_or("the snapshot has no name")?.to_os_string();
    // A store's directory: its root, through its mount, or one made for this transfer
    // (refused while another process holds the store, and tried again later).
    let (to, _mounted) = if is_store(&to) {
        crate::mount::Transient::mount(&to).map_err(|e| format!("the mirror's store {}: {e}", to.display()))?
    } else {
        (to, None)
    };
    if !to.is_dir() {
        return Err(format!("{}: not a directory (is the mirror's store mounted?)", to.display()));
    }
    let dst = to.join(&name);
    let want = tree_hash(&snapshot)?;
    if dst.symlink_metadata().is_ok() {
        return if tree_hash(&dst)? == want {
            eprintln!("scion mirror: {} is there already", dst.display());
            Ok(())
        } else {
            Err(format!("{} exists and differs from {}", dst.display(), snapshot.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let kept = to.join(format!(".{}.scion-receive", name.to_string_lossy()));
    let mut token = None;
    if kept.symlink_metadata().is_ok() {
        token = crate::meta::xattrs(&kept)
            .ok()
            .and_then(|x| x.into_iter().find(|(k, _)| k == b"user.scion.receive"))
            .and_then(|(_, v)| String::from_utf8_lossy(&v).lines().next().map(str::to_string));
        if token.is_none() {
            // A receive that died without saying where it stopped: start again.
            run(Command::new(&exe).arg("receive").arg(&dst).arg("--abort"))?;
        }
    }
    let mut send = Command::new(&exe);
    send.arg("send").arg(&snapshot);
    if let Some(b) = &base {
        send.arg("--base").arg(b);
    }
    let mut receive = Command::new(&exe);
    receive.arg("receive").arg(&dst);
    match &token {
        Some(t) => {
            send.arg("--resume").arg(t);
            receive.arg("--resume");
        }
        None => {
            receive.arg("--resumable");
        }
    }
    let mut sender = send.stdout(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    let pipe = sender.stdout.take().expect("piped");
    let received = receive.stdin(Stdio::from(pipe)).status().map_err(|e| e.to_string());
    // Our end of the pipe goes with the command: a sender whose receiver died then gets
    // EPIPE instead of waiting for ever on a full pipe.
    drop(receive);
    let sent = sender.wait().map_err(|e| e.to_string())?;
    let received = received?;
    if !received.success() {
        return Err(format!("receive of {} failed ({received}; send: {sent})", dst.display()));
    }
    let got = tree_hash(&dst)?;
    if got != want {
        return Err(format!("{} arrived with another content hash than {}", dst.display(), snapshot.display()));
    }
    eprintln!("scion mirror: {} arrived{}", dst.display(), if token.is_some() { " (resumed)" } else { "" });
    Ok(())
}

fn tree_hash(p: &Path) -> Result<[u8; 32], String> {
    let at = locate(p, true, &None)?;
    match call(&at, &Op::TreeHash { path: store_path(&at) })? {
        Reply::TreeHash(h) => Ok(h),
        _ => Err("the daemon answered something else".into()),
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let st = cmd.status().map_err(|e| e.to_string())?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {st}"))
    }
}
