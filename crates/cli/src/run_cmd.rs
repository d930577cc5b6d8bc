//! `scion run SRC -- COMMAND ARGS...` (Prism's sandbox, issue 19): COMMAND runs in a
//! throwaway clone of SRC, as the caller, and what it changed there is listed as
//! `scion diff SRC CLONE` lists it; the clone is destroyed after, or kept with `--keep`.
//! SRC itself is never touched.

use crate::tree_cmds::{call, locate, store_path};
use scion_daemon::control::{Op, Reply, Target};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Runs `command` in a clone of `src`; COMMAND's exit status is the result (128 + the
/// signal that ended it), 2 if scion itself failed.
pub fn run(src: PathBuf, keep: bool, command: Vec<String>) -> Result<ExitCode, String> {
    let Some((program, args)) = command.split_first() else {
        return Err("no command given: scion run SRC -- COMMAND ARGS...".into());
    };
    let at = locate(&src, true, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", src.display()));
    };
    let clone = throwaway_name(&mnt, &store_path(&at))?;
    let clone_rel = clone.strip_prefix(&mnt).map_err(|e| e.to_string())?;
    let clone_rel = clone_rel.as_os_str().as_encoded_bytes().to_vec();
    call(
        &at,
        &Op::Clone {
            src: store_path(&at),
            dst: clone_rel.clone(),
            excludes: Vec::new(),
        },
    )?;
    eprintln!("scion run: {} in {}", command.join(" "), clone.display());
    let status = std::process::Command::new(program).args(args).current_dir(&clone).status();
    let result = finish(&at, &clone, &clone_rel, keep);
    let status = status.map_err(|e| format!("{program}: {e}"))?;
    result?;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 2,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Lists what the command changed, then destroys the clone unless it is to be kept.
fn finish(at: &crate::tree_cmds::Located, clone: &Path, clone_rel: &[u8], keep: bool) -> Result<(), String> {
    let diff = call(
        at,
        &Op::Diff {
            a: store_path(at),
            b: clone_rel.to_vec(),
            times: false,
            recursive: false,
            no_renames: false,
        },
    );
    match diff {
        Ok(Reply::Diff(changes)) => {
            eprintln!("scion run: {} changes", changes.len());
            print!("{}", crate::control::render_diff(&changes, false, false));
        }
        Ok(_) => eprintln!("scion run: the daemon answered something else to diff"),
        Err(e) => eprintln!("scion run: diff: {e}"),
    }
    if keep {
        eprintln!("scion run: kept {}", clone.display());
        return Ok(());
    }
    call(at, &Op::Destroy(Target::Path(clone_rel.to_vec()))).map(drop)
}

/// A free name beside SRC for the throwaway clone: `SRC.scion-run-PID` (then `-2`, `-3`...).
fn throwaway_name(mnt: &Path, src_rel: &[u8]) -> Result<PathBuf, String> {
    let src = mnt.join(String::from_utf8_lossy(src_rel).as_ref());
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
