//! `scion run SRC -- COMMAND ARGS...` (Prism's sandbox, issue 19 item 3): COMMAND runs in a
//! throwaway clone of SRC, as the caller, and what it changed there is listed as `scion diff`
//! lists it; the clone is destroyed after, kept with `--keep`, or with `--apply` its changes
//! are put into SRC, file by file, each appearing at once (a copy sharing the clone's blocks,
//! renamed into place). With `--sandbox` COMMAND sees the clone as its root directory (a root
//! filesystem) or as the only writable directory (any other), through `bwrap`.
//!
//! `--apply` compares against a snapshot of SRC taken when the clone was made (the clone is
//! made from it): what COMMAND changed is the clone against that snapshot, what others
//! changed meanwhile is SRC against it. If both touched a path (or one is inside the other),
//! nothing is applied and the clone is kept; nor if COMMAND failed.

use crate::tree_cmds::{call, locate, store_path, Located};
use scion_daemon::control::{Op, Reply, Target};
use scion_fs::diff::{Change, Difference};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `scion run` was asked.
pub struct RunArgs {
    pub src: PathBuf,
    pub keep: bool,
    pub apply: bool,
    pub sandbox: bool,
    pub command: Vec<String>,
}

/// A throwaway clone and what it was made from.
struct Trial {
    at: Located,
    clone: PathBuf,
    clone_rel: Vec<u8>,
    /// With `--apply`: SRC's snapshot the clone was made from.
    base: Option<Vec<u8>>,
}

/// Runs `command` in a clone of `src`; COMMAND's exit status is the result (128 + the
/// signal that ended it), 2 if scion itself failed or refused to apply.
pub fn run(a: RunArgs) -> Result<ExitCode, String> {
    let Some((program, args)) = a.command.split_first() else {
        return Err("no command given: scion run SRC -- COMMAND ARGS...".into());
    };
    let at = locate(&a.src, true, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", a.src.display()));
    };
    let src_rel = store_path(&at);
    let clone = throwaway_name(&mnt, &src_rel)?;
    let clone_rel = crate::tree_cmds::below_mount(&mnt, &clone)?;
    let base = if a.apply {
        let name = format!("scion-run-{}", std::process::id()).into_bytes();
        call(&at, &Op::Snapshot { path: src_rel.clone(), name: name.clone() })?;
        Some([&src_rel[..], b"/.snapshot/", &name].concat())
    } else {
        None
    };
    let t = Trial { at, clone, clone_rel, base };
    let from = t.base.clone().unwrap_or_else(|| src_rel.clone());
    if let Err(e) = call(&t.at, &Op::Clone { src: from, dst: t.clone_rel.clone(), excludes: Vec::new() }) {
        drop_base(&t);
        return Err(e);
    }
    eprintln!("scion run: {} in {}", a.command.join(" "), t.clone.display());
    let mut cmd = if a.sandbox {
        sandboxed(&t.clone, program, args)
    } else {
        let mut c = std::process::Command::new(program);
        c.args(args).current_dir(&t.clone);
        c
    };
    let status = cmd.status();
    let code = match &status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            _ => 2,
        },
        Err(_) => 2,
    };
    let result = finish(&t, a.keep, a.apply && code == 0, &src_rel);
    drop_base(&t);
    let status = status.map_err(|e| format!("{program}: {e}"))?;
    if a.apply && !status.success() {
        eprintln!("scion run: COMMAND failed; nothing applied, the clone is kept: {}", t.clone.display());
    }
    match result? {
        true => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        false => Ok(ExitCode::from(2)),
    }
}

/// `bwrap` running `program` with the clone as its root (a root filesystem: it holds `usr`
/// and `etc`) or as the only writable directory, with /proc, /dev and a fresh /tmp.
fn sandboxed(clone: &Path, program: &str, args: &[String]) -> std::process::Command {
    let mut c = std::process::Command::new("bwrap");
    let rootfs = clone.join("usr").is_dir() && clone.join("etc").is_dir();
    let usual = ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"];
    if rootfs {
        c.arg("--bind").arg(clone).arg("/").args(usual).args(["--chdir", "/"]);
    } else {
        // The clone is bound after the fresh /tmp, which would hide it if it lies below.
        c.args(["--ro-bind", "/", "/"]).args(usual);
        c.arg("--bind").arg(clone).arg(clone).arg("--chdir").arg(clone);
    }
    c.args(["--die-with-parent", "--"]);
    c.arg(program).args(args);
    c
}

/// Lists what the command changed, then applies it, keeps the clone or destroys it.
/// `Ok(false)`: applying was refused (the clone is kept).
fn finish(t: &Trial, keep: bool, apply: bool, src_rel: &[u8]) -> Result<bool, String> {
    let from = t.base.clone().unwrap_or_else(|| src_rel.to_vec());
    let changes = match diff(&t.at, &from, &t.clone_rel) {
        Ok(c) => {
            eprintln!("scion run: {} changes", c.len());
            print!("{}", crate::diff_cmd::lines(&c));
            c
        }
        Err(e) => {
            eprintln!("scion run: diff: {e}; the clone is kept: {}", t.clone.display());
            return Ok(!apply);
        }
    };
    if apply {
        let base = t.base.as_deref().expect("a base to apply against");
        let theirs = diff(&t.at, base, src_rel)?;
        let clash = clashes(&changes, &theirs);
        if !clash.is_empty() {
            eprintln!(
                "scion run: not applied: {} changed meanwhile where the command changed it too: {}\nscion run: the clone is kept: {}",
                String::from_utf8_lossy(src_rel),
                clash.join(", "),
                t.clone.display()
            );
            return Ok(false);
        }
        let mnt = t.at.mnt.as_deref().expect("a mounted store");
        let src = mnt.join(Path::new(std::ffi::OsStr::from_bytes(src_rel)));
        if let Err(e) = apply_all(t, &src, &changes) {
            eprintln!("scion run: applying stopped: {e}\nscion run: the clone is kept: {}", t.clone.display());
            return Ok(false);
        }
        eprintln!("scion run: {} changes applied to {}", changes.len(), src.display());
    } else if keep {
        eprintln!("scion run: kept {}", t.clone.display());
        return Ok(true);
    }
    call(&t.at, &Op::Destroy { target: Target::Path(t.clone_rel.clone()), recursive: true }).map(|_| true)
}

fn diff(at: &Located, a: &[u8], b: &[u8]) -> Result<Vec<Difference>, String> {
    let op = Op::Diff {
        a: a.to_vec(),
        b: b.to_vec(),
        times: false,
        recursive: false,
        no_renames: false,
    };
    match call(at, &op)? {
        Reply::Diff(c) => Ok(c),
        _ => Err("the daemon answered something else to diff".into()),
    }
}

fn drop_base(t: &Trial) {
    if let Some(b) = &t.base {
        if let Err(e) = call(&t.at, &Op::Destroy { target: Target::Path(b.clone()), recursive: true }) {
            eprintln!("scion run: the snapshot {} stays: {e}", String::from_utf8_lossy(b));
        }
    }
}

/// The paths both sides changed (equal, or one inside the other).
fn clashes(ours: &[Difference], theirs: &[Difference]) -> Vec<String> {
    let paths = |d: &Difference| {
        let mut v = vec![d.path.clone()];
        v.extend(d.old_path.clone());
        v
    };
    let within = |p: &[u8], q: &[u8]| p == q || (p.starts_with(q) && p.get(q.len()) == Some(&b'/'));
    let mut out = Vec::new();
    for o in ours.iter().flat_map(paths) {
        if theirs.iter().flat_map(paths).any(|t| within(&o, &t) || within(&t, &o)) {
            out.push(String::from_utf8_lossy(&o).into_owned());
        }
    }
    out.dedup();
    out
}

/// Puts each change of the clone into SRC: deletions first, then each added or changed
/// entry as a copy (sharing blocks) beside its place, renamed over it.
fn apply_all(t: &Trial, src: &Path, changes: &[Difference]) -> Result<(), String> {
    let p = |b: &[u8]| Path::new(std::ffi::OsStr::from_bytes(b)).to_path_buf();
    for d in changes {
        let gone = match d.change {
            Change::Deleted => Some(&d.path),
            Change::Renamed => d.old_path.as_ref(),
            _ => None,
        };
        if let Some(g) = gone {
            remove(&src.join(p(g)))?;
        }
    }
    for d in changes {
        let to = src.join(p(&d.path));
        match d.change {
            Change::Deleted => {}
            Change::Metadata if d.kind == scion_fs::Kind::Dir => copy_meta(&t.clone.join(p(&d.path)), &to)?,
            _ => put(t, &d.path, &to)?,
        }
    }
    Ok(())
}

/// The clone's entry at `rel` copied beside `to` (restore, sharing blocks), then renamed
/// over it: a file is replaced at once; a directory in the way is removed first.
fn put(t: &Trial, rel: &[u8], to: &Path) -> Result<(), String> {
    let name = to.file_name().ok_or("no name")?.to_string_lossy().into_owned();
    let tmp = to.with_file_name(format!(".{name}.scion-apply-{}", std::process::id()));
    let mnt = t.at.mnt.as_deref().expect("a mounted store");
    let tmp_rel = tmp.strip_prefix(mnt).map_err(|e| e.to_string())?.as_os_str().as_bytes().to_vec();
    remove(&tmp)?;
    let op = Op::Restore {
        path: tmp_rel,
        from: [&t.clone_rel[..], b"/", rel].concat(),
        to: None,
        replace: false,
    };
    call(&t.at, &op)?;
    if to.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        remove(to)?;
    }
    std::fs::rename(&tmp, to).map_err(|e| format!("{}: {e}", to.display()))
}

fn remove(p: &Path) -> Result<(), String> {
    let r = match p.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(|e| format!("{}: {e}", p.display()))
}

/// A directory's mode, owner and extended attributes, as the clone's.
fn copy_meta(from: &Path, to: &Path) -> Result<(), String> {
    let m = crate::meta::read(from)?;
    crate::meta::apply(to, &m)
}

/// A free name beside SRC for the throwaway clone: `SRC.scion-run-PID` (then `-2`, `-3`...).
fn throwaway_name(mnt: &Path, src_rel: &[u8]) -> Result<PathBuf, String> {
    if src_rel.split(|b| *b == b'/').all(|c| c.is_empty() || c == b".") {
        return Err(format!(
            "{} is the mount's root: scion run works on a directory below it (its clone is made beside it)",
            mnt.display()
        ));
    }
    let src = mnt.join(Path::new(std::ffi::OsStr::from_bytes(src_rel)));
    let base = match src.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => return Err("scion run needs a directory below the mount point, not the mount root".into()),
    };
    let parent = src.parent().unwrap_or(mnt);
    for i in 1..1000 {
        let suffix = if i == 1 { String::new() } else { format!("-{i}") };
        let p = parent.join(format!("{base}.scion-run-{}{suffix}", std::process::id()));
        if p.symlink_metadata().is_err() {
            return Ok(p);
        }
    }
    Err(format!("no free name beside {}", src.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(change: Change, path: &str, old: Option<&str>) -> Difference {
        Difference {
            change,
            path: path.as_bytes().to_vec(),
            old_path: old.map(|o| o.as_bytes().to_vec()),
            kind: scion_fs::Kind::File,
            old_size: 0,
            new_size: 0,
        }
    }

    #[test]
    fn clashes_are_equal_or_nested_paths() {
        let ours = [d(Change::Modified, "a/b", None), d(Change::Renamed, "x/new", Some("y/old")), d(Change::Added, "c", None)];
        let theirs = [d(Change::Deleted, "a", None), d(Change::Modified, "y/old", None), d(Change::Modified, "cc", None)];
        assert_eq!(clashes(&ours, &theirs), ["a/b", "y/old"]);
        assert!(clashes(&ours, &[d(Change::Added, "c2", None)]).is_empty());
        assert_eq!(clashes(&[d(Change::Added, "dir", None)], &[d(Change::Modified, "dir/f", None)]), ["dir"]);
    }
}
