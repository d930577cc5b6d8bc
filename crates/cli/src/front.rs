//! `scion`, the command users run: a small front for the whole binary (`scion-full`, built
//! from `main.rs`), which it runs in its own place (exec: the same process, arguments and
//! `argv[0]`) for everything but the commands that only ask a mounted store's daemon and are
//! run often from scripts: today `scion clone SRC DST`, `scion snapshot DIR [--name NAME]`
//! and `scion --version`.
//!
//! Why. The whole binary (the engine, FUSE, NFS, S3 and every command) is 21 MB; starting
//! it costs the dynamic loader 26,000 relocations and ~370 page faults, 3-4 ms here, more
//! than a clone itself (issue 38 item 3). This front links only `scion::client` and starts
//! as fast as any small program.
//!
//! What it does itself, it does exactly as the whole binary would (the same functions, the
//! same output, errors and exit codes); anything else, including every option of `clone`,
//! `--help` and a mistake in the arguments, goes to `scion-full`, so there is one parser and
//! one help text.
//!
//! Exit codes: as `scion-full` (0 done, 2 refused or failed); 127 if `scion-full` cannot
//! be run (`full_binary` says where it is looked for).

use scion::client;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the package installs the whole binary.
const INSTALLED: &str = "/usr/lib/scion/scion-full";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    match fast(&args) {
        Some(code) => code,
        None => run_full(&args),
    }
}

/// What the front serves itself; None: `scion-full`'s work.
fn fast(args: &[OsString]) -> Option<ExitCode> {
    // Called by another name (`mount.fuse.scion`, the mount helper): the whole binary's.
    if Path::new(args.first()?).file_name() != Some(OsStr::new("scion")) {
        return None;
    }
    let rest: Vec<&[u8]> = args[1..].iter().map(|a| a.as_bytes()).collect();
    match rest.as_slice() {
        [b"--version"] | [b"-V"] => {
            println!("scion {}", env!("CARGO_PKG_VERSION"));
            Some(ExitCode::SUCCESS)
        }
        [b"clone", src, dst] if plain(src) && plain(dst) => clone(path(src), path(dst)),
        // (`schedule` and `help` are subcommands of `snapshot`.)
        [b"snapshot", dir] if plain(dir) && !SNAPSHOT_SUBCOMMANDS.contains(dir) => snapshot(path(dir), None),
        [b"snapshot", dir, b"--name", name] if plain(dir) && plain(name) && !SNAPSHOT_SUBCOMMANDS.contains(dir) => {
            snapshot(path(dir), Some(name))
        }
        _ => None,
    }
}

const SNAPSHOT_SUBCOMMANDS: [&[u8]; 2] = [b"schedule", b"help"];

fn path(a: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(a))
}

/// An argument that is a path, not an option (`--` and options go to the full parser).
fn plain(a: &[u8]) -> bool {
    !a.is_empty() && !a.starts_with(b"-")
}

/// `scion clone SRC DST` on a mounted store, as `tree_cmds::clone` does it without options.
/// None where the whole binary must take over: a path that is not in a mount (its error
/// message, or `--store`'s hint, is the full binary's), or a clone across a cube's edge
/// (which it copies, with progress).
fn clone(src: &Path, dst: &Path) -> Option<ExitCode> {
    let mounts = client::scion_mounts();
    let s = client::locate_in(src, true, &None, &mounts).ok()?;
    let d = client::locate_in(dst, false, &None, &mounts).ok()?;
    if s.store != d.store || s.mnt.is_none() {
        return None;
    }
    let op = scion_daemon::control::Op::Clone { src: s.rel.clone(), dst: d.rel.clone(), excludes: Vec::new() };
    Some(match client::call_mounted(&s, &op) {
        Ok(_) => {
            println!("{}", client::cloned(&s.rel, &d.rel));
            ExitCode::SUCCESS
        }
        Err((libc::EXDEV, _)) => return None,
        Err((_, m)) => fail(&m),
    })
}

/// `scion snapshot DIR [--name NAME]` on a mounted store, as `tree_cmds::snapshot` does it.
fn snapshot(dir: &Path, name: Option<&[u8]>) -> Option<ExitCode> {
    let at = client::locate(dir, true, &None).ok()?;
    at.mnt.as_ref()?;
    let name = name.map(<[u8]>::to_vec).unwrap_or_else(|| client::utc_now_name().into_bytes());
    let op = scion_daemon::control::Op::Snapshot { path: at.rel.clone(), name: name.clone() };
    Some(match client::call_mounted(&at, &op) {
        Ok(_) => {
            println!("{}", client::snapshotted(&at.rel, &name));
            ExitCode::SUCCESS
        }
        Err((_, m)) => fail(&m),
    })
}

fn fail(m: &str) -> ExitCode {
    eprintln!("scion: {}", client::humane(m));
    ExitCode::from(2)
}

/// Runs the whole binary in this process's place, with the same arguments and name.
fn run_full(args: &[OsString]) -> ExitCode {
    let full = full_binary();
    let mut cmd = std::process::Command::new(&full);
    cmd.args(&args[1..]);
    if let Some(name) = args.first() {
        cmd.arg0(name);
    }
    let e = cmd.exec();
    eprintln!("scion: cannot run {}: {e} (it is installed with scion: beside this binary, or in lib/scion of its prefix)", full.display());
    ExitCode::from(127)
}

/// `scion-full` beside this binary (a cargo build, `cargo install`), else in `lib/scion` of
/// its prefix (the package: `/usr/bin/scion`, `/usr/lib/scion/scion-full`; also an
/// unpacked package or a `/usr/local` install), else where the package puts it.
fn full_binary() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(Path::parent);
    let candidates = [
        dir.map(|d| d.join("scion-full")),
        dir.and_then(Path::parent).map(|p| p.join("lib/scion/scion-full")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(INSTALLED))
}
