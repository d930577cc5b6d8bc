//! `scion diff A B`: the changes stream from the daemon in two runs, each in walk order
//! (`scion_fs::diff::Run`); the first is spooled to an unlinked temporary file as it comes,
//! the second (files added or deleted, paired into renames) is spooled too, and the two are
//! merged on the way out, so memory does not grow with the number of changes.

use crate::control::{human, kind_word};
use crate::tree_cmds::{call, call_parts, locate, store_path};
use scion_daemon::control::{Op, Reply};
use scion_daemon::wire::{self, Part};
use scion_fs::diff::{Change, Difference, Merged};
use scion_store::codec::{Reader, Writer};
use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `scion diff` prints and compares.
pub struct DiffFlags {
    pub json: bool,
    pub stat: bool,
    pub recursive: bool,
    pub times: bool,
    pub no_renames: bool,
    pub patch: bool,
}

/// `scion diff A B`: 0 no differences, 1 differences, 2 trouble (as `diff`).
pub fn diff(a: PathBuf, b: PathBuf, f: DiffFlags, store: Option<PathBuf>) -> Result<ExitCode, String> {
    let (x, y) = (locate(&a, true, &store)?, locate(&b, true, &store)?);
    if x.store != y.store {
        return Err(format!("{} and {} are not in one store", a.display(), b.display()));
    }
    if f.patch && x.mnt.is_none() {
        return Err("--patch reads the files through the mount; mount the store first".into());
    }
    let op = Op::Diff {
        a: store_path(&x),
        b: store_path(&y),
        times: f.times,
        recursive: f.recursive,
        no_renames: f.no_renames,
    };
    let spooled = |e: std::io::Error| format!("spooling the changes: {e}");
    let (mut walk, mut held) = (Spool::new().map_err(spooled)?, Spool::new().map_err(spooled)?);
    if x.mnt.is_none() {
        // (An unmounted store is diffed in this process: the changes are here already.)
        let Reply::Diff(changes) = call(&x, &op)? else {
            return Err("the daemon answered something else".into());
        };
        for d in &changes {
            walk.push(d).map_err(spooled)?;
        }
    } else {
        let mut take = |p: Part| -> Result<(), String> {
            let (to, v) = match p {
                Part::Diff(_) if held.count > 0 => return Err("the daemon's diff went on after its held changes".into()),
                Part::Diff(v) => (&mut walk, v),
                Part::DiffHeld(v) => (&mut held, v),
                _ => return Err("the daemon sent parts of something other than a diff".into()),
            };
            v.iter().try_for_each(|d| to.push(d)).map_err(spooled)
        };
        let Reply::DiffCount(n) = call_parts(&x, &op, &mut take)? else {
            return Err("the daemon answered something else".into());
        };
        if n != walk.count + held.count {
            return Err(format!("the daemon announced {n} changes; {} came", walk.count + held.count));
        }
    }
    let reread = |e: std::io::Error| format!("reading the spooled changes: {e}");
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut shown = Shown::new(f.json, f.stat);
    for d in Merged::new(walk.read().map_err(reread)?, held.read().map_err(reread)?) {
        shown.one(&d, &mut out).map_err(|e| e.to_string())?;
    }
    shown.end(&mut out).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    for s in [&walk, &held] {
        if let Some(e) = s.failed.take() {
            return Err(reread(e));
        }
    }
    if f.patch {
        for d in Merged::new(walk.read().map_err(reread)?, held.read().map_err(reread)?) {
            patch(&a, &b, &d)?;
        }
    }
    Ok(ExitCode::from(if shown.changes == 0 { 0 } else { 1 }))
}

/// The lines of `changes` as `scion diff` shows them (for `scion run`'s list).
pub fn lines(changes: &[Difference]) -> String {
    let mut s = Shown::new(false, false);
    let mut out = Vec::new();
    for d in changes {
        s.one(d, &mut out).expect("writes to memory");
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Changes kept in an unlinked temporary file, read back in the order they came.
struct Spool {
    file: std::io::BufWriter<std::fs::File>,
    count: u64,
    /// A read back that failed (the iterator ends there).
    failed: std::cell::Cell<Option<std::io::Error>>,
}

impl Spool {
    fn new() -> std::io::Result<Spool> {
        Ok(Spool {
            file: std::io::BufWriter::with_capacity(1 << 20, tempfile::tempfile()?),
            count: 0,
            failed: std::cell::Cell::new(None),
        })
    }

    fn push(&mut self, d: &Difference) -> std::io::Result<()> {
        let mut w = Writer::new();
        wire::encode_change(&mut w, d);
        let b = w.finish();
        self.file.write_all(&(b.len() as u32).to_le_bytes())?;
        self.file.write_all(&b)?;
        self.count += 1;
        Ok(())
    }

    /// The changes from the first (each read takes its own handle on the file).
    fn read(&mut self) -> std::io::Result<impl Iterator<Item = Difference> + '_> {
        self.file.flush()?;
        let mut f = self.file.get_ref().try_clone()?;
        // (The clone shares the offset; each pass starts from the beginning.)
        f.seek(std::io::SeekFrom::Start(0))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        let (mut left, failed) = (self.count, &self.failed);
        let mut body = Vec::new();
        Ok(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            match next(&mut r, &mut body) {
                Ok(d) => Some(d),
                Err(e) => {
                    failed.set(Some(e));
                    left = 0;
                    None
                }
            }
        }))
    }
}

fn next(r: &mut impl BufRead, body: &mut Vec<u8>) -> std::io::Result<Difference> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    body.resize(u32::from_le_bytes(n) as usize, 0);
    r.read_exact(body)?;
    wire::decode_change(&mut Reader::new(body, "a spooled change")).map_err(std::io::Error::other)
}

/// The output, a change at a time: a line per change (`A path`, `D`, `M`, `m`, `T`,
/// `R old new`), JSON Lines (`{"change", "path", "kind"}`, with `--stat` also `"old_size"`,
/// `"new_size"`), or with `--stat` alone a summary at the end.
struct Shown {
    json: bool,
    stat: bool,
    changes: u64,
    /// By `Change` as a number.
    by_change: [u64; 6],
    /// Sizes of the files and others (not directories) in A and B.
    old: u64,
    new: u64,
}

impl Shown {
    fn new(json: bool, stat: bool) -> Shown {
        Shown { json, stat, changes: 0, by_change: [0; 6], old: 0, new: 0 }
    }

    fn one(&mut self, d: &Difference, out: &mut impl Write) -> std::io::Result<()> {
        self.changes += 1;
        self.by_change[d.change as usize] += 1;
        if d.kind != scion_fs::Kind::Dir {
            self.old += d.old_size;
            self.new += d.new_size;
        }
        let path = if d.path.is_empty() { ".".to_string() } else { String::from_utf8_lossy(&d.path).into_owned() };
        if self.json {
            let mut j = serde_json::json!({
                "change": d.change.word(),
                "path": path,
                "kind": kind_word(d.kind),
            });
            if let Some(old) = &d.old_path {
                j["old_path"] = String::from_utf8_lossy(old).into_owned().into();
            }
            if self.stat {
                j["old_size"] = d.old_size.into();
                j["new_size"] = d.new_size.into();
            }
            writeln!(out, "{j}")
        } else if self.stat {
            Ok(())
        } else {
            match &d.old_path {
                Some(old) => writeln!(out, "R {} {path}", String::from_utf8_lossy(old)),
                None => writeln!(out, "{} {path}", d.change.letter()),
            }
        }
    }

    fn end(&self, out: &mut impl Write) -> std::io::Result<()> {
        if !self.stat || self.json {
            return Ok(());
        }
        let n = |c: Change| self.by_change[c as usize];
        writeln!(
            out,
            "{} changed: {} added, {} deleted, {} modified, {} metadata only, {} changed kind, {} renamed; files {} -> {}",
            self.changes,
            n(Change::Added),
            n(Change::Deleted),
            n(Change::Modified),
            n(Change::Metadata),
            n(Change::Type),
            n(Change::Renamed),
            human(self.old),
            human(self.new),
        )
    }
}

/// `diff -u` of a changed file (a renamed one against its old path), through the mount.
fn patch(a: &Path, b: &Path, d: &Difference) -> Result<(), String> {
    if d.kind != scion_fs::Kind::File || !matches!(d.change, Change::Modified | Change::Renamed) {
        return Ok(());
    }
    let rel = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    let new = rel(&d.path);
    let old = d.old_path.as_deref().map(rel).unwrap_or_else(|| new.clone());
    let (pa, pb) = if new.is_empty() { (a.to_path_buf(), b.to_path_buf()) } else { (a.join(&old), b.join(&new)) };
    let out = std::process::Command::new("diff")
        .args(["-u", "--label", &format!("a/{old}"), "--label", &format!("b/{new}")])
        .arg(&pa)
        .arg(&pb)
        .output()
        .map_err(|e| format!("diff -u: {e} (is diffutils installed?)"))?;
    if out.status.code() == Some(2) {
        return Err(format!("diff -u {} {}: {}", pa.display(), pb.display(), String::from_utf8_lossy(&out.stderr)));
    }
    std::io::stdout().write_all(&out.stdout).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use scion_fs::Kind;

    fn d(change: Change, path: &str, old: Option<&str>) -> Difference {
        Difference {
            change,
            path: path.as_bytes().to_vec(),
            old_path: old.map(|o| o.as_bytes().to_vec()),
            kind: Kind::File,
            old_size: 3,
            new_size: 5,
        }
    }

    #[test]
    fn a_spool_gives_back_what_it_took_twice_and_the_runs_merge_in_walk_order() {
        let walk = [d(Change::Modified, "a", None), d(Change::Metadata, "a/z", None), d(Change::Modified, "b", None)];
        let held = [d(Change::Renamed, "a/y", Some("c")), d(Change::Added, "a.b", None), d(Change::Deleted, "c.d", None)];
        let (mut w, mut h) = (Spool::new().unwrap(), Spool::new().unwrap());
        walk.iter().for_each(|x| w.push(x).unwrap());
        held.iter().for_each(|x| h.push(x).unwrap());
        for _ in 0..2 {
            let got: Vec<String> = Merged::new(w.read().unwrap(), h.read().unwrap())
                .map(|x| String::from_utf8(x.path).unwrap())
                .collect();
            assert_eq!(got, ["a", "a/y", "a/z", "a.b", "b", "c.d"]);
        }
        assert!(w.failed.take().is_none() && h.failed.take().is_none());
    }

    #[test]
    fn a_spool_cut_short_says_so() {
        let mut w = Spool::new().unwrap();
        w.push(&d(Change::Added, "x", None)).unwrap();
        w.count = 2; // one more announced than written
        assert_eq!(w.read().unwrap().count(), 1);
        assert!(w.failed.take().is_some());
    }

    #[test]
    fn the_output_counts_and_shows_each_change() {
        let mut s = Shown::new(false, false);
        let mut out = Vec::new();
        s.one(&d(Change::Renamed, "n", Some("o")), &mut out).unwrap();
        s.one(&d(Change::Added, "", None), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "R o n\nA .\n");
        let mut s = Shown::new(false, true);
        let mut out = Vec::new();
        s.one(&d(Change::Modified, "m", None), &mut out).unwrap();
        s.end(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1 changed: 0 added, 0 deleted, 1 modified, 0 metadata only, 0 changed kind, 0 renamed; files 3 B -> 5 B\n"
        );
    }
}
