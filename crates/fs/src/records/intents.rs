//! Commands of several steps under way (`STORE/intents`, `docs/format.md` "Intents"): what a
//! crash of the daemon or of the command in the middle would leave half done, recorded before
//! the first step, so that the next open (or the next command on the same path) finishes or
//! undoes it and `scion check` names it meanwhile. A two-slot file (`slots.rs`; magic "SCIN",
//! version 1); the payload is text, one intent per line, paths escaped as in the schedules
//! file:
//!
//! ```text
//! replace PID TMP                           a restore --replace: TMP is removed
//! refill PID STEP DIR TMP OLD               a restore --replace of directory DIR in place
//! convert PID STAGE CUBE TARGET HIDDEN      cube create --convert of TARGET into cube CUBE
//! uncube PID STAGE CUBE DIR TMP             cube remove of cube CUBE at DIR, copied to TMP
//! ```
//!
//! PID is the process that runs the command (the command's own steps go on while it lives).
//! STAGE is `copy` while the copy is under way (undone after a crash: what was copied so far
//! is removed, the source stays) or `swap` once the copy is whole and durable (finished after
//! a crash: the copy put in the source's place, the source removed).
//!
//! A refill keeps DIR itself (its object, so its snapshots, and its inode number) and
//! changes what is in it: STEP is `copy` while the restored tree is built at TMP (undone:
//! TMP removed), `empty` once TMP is whole and durable, while DIR's entries move into OLD,
//! and `fill` once they all have, while TMP's entries move into DIR (both finished after a
//! crash; then DIR takes TMP's attributes and TMP and OLD are removed).

use super::slots::{escape, unescape, SlotFile};
use scion_store::{Error, Host, Result};
use std::path::Path;

pub const FILE: &str = "intents";
/// Intents under way at once, at most.
pub const MAX_INTENTS: usize = 64;
const SLOTS: SlotFile = SlotFile {
    name: FILE,
    magic: b"SCIN",
    version: 1,
};

/// How far a copy-then-swap command got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The copy is under way: undone after a crash.
    Copy,
    /// The copy is whole and durable: finished after a crash.
    Swap,
}

/// How far a restore in place (`Intent::Refill`) got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The restored tree is being built at `tmp`: undone after a crash.
    Copy,
    /// The directory's entries are moving into `old`: finished after a crash.
    Empty,
    /// `tmp`'s entries are moving into the directory: finished after a crash.
    Fill,
}

/// A command of several steps under way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// `restore --replace`: the restored tree is built at `tmp` (a hidden sibling of the
    /// destination) and exchanged with the destination in one step; what is at `tmp` after
    /// either (a partial copy, or the tree it replaced) is removed.
    Replace { pid: u32, tmp: Vec<u8> },
    /// `restore --replace` of directory `dir` in place: the restored tree is built at `tmp`,
    /// `dir`'s entries move into `old`, `tmp`'s into `dir`; `tmp` and `old` are removed.
    Refill { pid: u32, step: Step, dir: Vec<u8>, tmp: Vec<u8>, old: Vec<u8> },
    /// `cube create --convert`: cube `cube`, made at `hidden`, takes a copy of `target`;
    /// then it is exchanged with `target` and the original (then at `hidden`) removed.
    Convert { pid: u32, stage: Stage, cube: u32, target: Vec<u8>, hidden: Vec<u8> },
    /// `cube remove`: cube `cube` at `dir` is copied to `tmp` in the main tree; then `tmp`
    /// is exchanged with the cube's directory and the cube ended.
    Uncube { pid: u32, stage: Stage, cube: u32, dir: Vec<u8>, tmp: Vec<u8> },
}

impl Intent {
    pub fn pid(&self) -> u32 {
        match self {
            Intent::Replace { pid, .. } | Intent::Refill { pid, .. } | Intent::Convert { pid, .. } | Intent::Uncube { pid, .. } => *pid,
        }
    }

    /// What it is, for `scion check` and the logs.
    pub fn describe(&self) -> String {
        let s = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
        match self {
            Intent::Replace { tmp, .. } => format!("a restore --replace or a pull left /{}", s(tmp)),
            Intent::Refill { step, dir, .. } => format!(
                "a restore --replace of /{} {}",
                s(dir),
                if *step == Step::Copy { "was copying (undone at the next mount)" } else { "was putting the restored entries in place (finished at the next mount)" }
            ),
            Intent::Convert { stage, target, .. } => format!(
                "a cube create --convert of /{} {}",
                s(target),
                if *stage == Stage::Copy { "was copying (undone at the next mount)" } else { "was putting the cube in place (finished at the next mount)" }
            ),
            Intent::Uncube { stage, dir, .. } => format!(
                "a cube remove of /{} {}",
                s(dir),
                if *stage == Stage::Copy { "was copying (undone at the next mount)" } else { "was putting the copy in place (finished at the next mount)" }
            ),
        }
    }
}

/// The intents, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub intents: Vec<Intent>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("intents", FILE, why.to_string())
}

fn stage_name(s: Stage) -> &'static str {
    match s {
        Stage::Copy => "copy",
        Stage::Swap => "swap",
    }
}

pub fn encode_payload(list: &[Intent]) -> Vec<u8> {
    let mut out = String::new();
    for i in list {
        let line = match i {
            Intent::Replace { pid, tmp } => format!("replace {pid} {}", escape(tmp)),
            Intent::Refill { pid, step, dir, tmp, old } => {
                let step = match step {
                    Step::Copy => "copy",
                    Step::Empty => "empty",
                    Step::Fill => "fill",
                };
                format!("refill {pid} {step} {} {} {}", escape(dir), escape(tmp), escape(old))
            }
            Intent::Convert { pid, stage, cube, target, hidden } => {
                format!("convert {pid} {} {cube} {} {}", stage_name(*stage), escape(target), escape(hidden))
            }
            Intent::Uncube { pid, stage, cube, dir, tmp } => {
                format!("uncube {pid} {} {cube} {} {}", stage_name(*stage), escape(dir), escape(tmp))
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Intent>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |s: &str, what: &str| s.parse::<u32>().map_err(|_| bad(format!("{what} {s:?} in {line:?}")));
        let stage = |s: &str| match s {
            "copy" => Ok(Stage::Copy),
            "swap" => Ok(Stage::Swap),
            _ => Err(bad(format!("stage {s:?} in {line:?}"))),
        };
        let path = |s: &str| -> Result<Vec<u8>> {
            let p = unescape(s)?;
            if p.is_empty() || p.starts_with(b"/") {
                return Err(bad(format!("path {s:?} in {line:?}: empty or absolute")));
            }
            Ok(p)
        };
        let i = match f[..] {
            ["replace", pid, tmp] => Intent::Replace { pid: num(pid, "pid")?, tmp: path(tmp)? },
            ["refill", pid, step, dir, tmp, old] => Intent::Refill {
                pid: num(pid, "pid")?,
                step: match step {
                    "copy" => Step::Copy,
                    "empty" => Step::Empty,
                    "fill" => Step::Fill,
                    _ => return Err(bad(format!("step {step:?} in {line:?}"))),
                },
                dir: path(dir)?,
                tmp: path(tmp)?,
                old: path(old)?,
            },
            ["convert", pid, st, cube, target, hidden] => Intent::Convert {
                pid: num(pid, "pid")?,
                stage: stage(st)?,
                cube: num(cube, "cube")?,
                target: path(target)?,
                hidden: path(hidden)?,
            },
            ["uncube", pid, st, cube, dir, tmp] => Intent::Uncube {
                pid: num(pid, "pid")?,
                stage: stage(st)?,
                cube: num(cube, "cube")?,
                dir: path(dir)?,
                tmp: path(tmp)?,
            },
            _ => return Err(bad(format!("line {line:?}"))),
        };
        list.push(i);
    }
    if list.len() > MAX_INTENTS {
        return Err(bad(format!("{} intents (at most {MAX_INTENTS})", list.len())));
    }
    Ok(list)
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: nothing under way.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, intents: decode_payload(&p)? },
        None => Stored::default(),
    })
}

/// Reads the intents of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Writes `list` as the state after `prev` (synced: durable before the step it announces).
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Intent>) -> Result<Stored> {
    if list.len() > MAX_INTENTS {
        return Err(Error::Format(format!("{} commands of several steps under way (at most {MAX_INTENTS})", list.len())));
    }
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, intents: list })
}

/// Adds `i` to the store's intents (read, changed, written: the caller serialises).
pub fn add(host: &Host, dir: &Path, i: Intent) -> Result<()> {
    let prev = load(host, dir)?;
    let mut list = prev.intents.clone();
    list.push(i);
    save(host, dir, &prev, list).map(drop)
}

/// Replaces intent `old` by `new` (None: removes it); a missing `old` is left so.
pub fn update(host: &Host, dir: &Path, old: &Intent, new: Option<Intent>) -> Result<()> {
    let prev = load(host, dir)?;
    let mut list = prev.intents.clone();
    let Some(at) = list.iter().position(|i| i == old) else { return Ok(()) };
    match new {
        Some(n) => list[at] = n,
        None => {
            list.remove(at);
        }
    }
    save(host, dir, &prev, list).map(drop)
}

/// Whether process `pid` still runs (its steps then go on: not finished or undone by others).
pub fn alive(pid: u32) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Intent> {
        vec![
            Intent::Replace { pid: 7, tmp: b"home/a/.docs.scion-restore-x".to_vec() },
            Intent::Convert { pid: 8, stage: Stage::Copy, cube: 3, target: b"srv/db".to_vec(), hidden: b"srv/.db.scion-convert-8".to_vec() },
            Intent::Uncube { pid: 9, stage: Stage::Swap, cube: 4, dir: b"ci cache".to_vec(), tmp: b".ci cache.scion-uncube-9".to_vec() },
            Intent::Refill { pid: 6, step: Step::Fill, dir: b"home/a b".to_vec(), tmp: b"home/.a b.scion-restore-x".to_vec(), old: b"home/.a b.scion-restore-old-x".to_vec() },
        ]
    }

    #[test]
    fn round_trips_keeps_the_last_whole_state_and_refuses_bad_lines() {
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), Stored::default());
        for i in sample() {
            add(&host, tmp.path(), i).unwrap();
        }
        assert_eq!(load(&host, tmp.path()).unwrap().intents, sample());
        let s = sample();
        let swapped = Intent::Convert { pid: 8, stage: Stage::Swap, cube: 3, target: b"srv/db".to_vec(), hidden: b"srv/.db.scion-convert-8".to_vec() };
        update(&host, tmp.path(), &s[1], Some(swapped.clone())).unwrap();
        update(&host, tmp.path(), &s[0], None).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap().intents, vec![swapped, s[2].clone(), s[3].clone()]);
        assert_eq!(decode_payload(&encode_payload(&s)).unwrap(), s);
        for bad_line in ["replace 7", "replace x a", "convert 1 half 3 a b", "uncube 1 copy 3 /abs b", "move 1 a b", "replace 7 /", "refill 1 move a b c", "refill 1 fill a b"] {
            assert!(decode_payload(bad_line.as_bytes()).is_err(), "{bad_line}");
        }
        // A cut write of the newer slot leaves the older state.
        let f = tmp.path().join(FILE);
        let mut b = std::fs::read(&f).unwrap();
        let newer = if load(&host, tmp.path()).unwrap().seq % 2 == 0 { 0 } else { super::super::slots::SLOT };
        b[newer + super::super::slots::HEADER] ^= 0xff;
        std::fs::write(&f, &b).unwrap();
        assert_eq!(decode_file(&b).unwrap().intents.len(), 4);
    }
}
