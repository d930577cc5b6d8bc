//! `scion scan PATH... -- COMMAND ARGS... {}` (Prism's scan, issue 19 item 2): COMMAND runs
//! once per distinct file content found below all the PATHs, in parallel, and its result is
//! reported for every path that holds that content.
//!
//! The daemon lists the files and their content keys from block hashes (no data read) and
//! the results kept for this command line; this side runs COMMAND on one path per content
//! not kept, through the mount, as the caller, and sends the new results back to be kept.
//! A result is shown for each path as if COMMAND had run on it: the path COMMAND was given
//! is replaced by each holder's path in its output; output that does not name it is shown
//! with the path before each line, as `grep` does with several files.

use crate::tree_cmds::{call, call_parts, locate, store_path, Located};
use scion_daemon::control::{Op, Reply, ScanCounts};
use scion_daemon::scan_cache::ScanResult;
use scion_daemon::wire::{Part, MAX_MESSAGE};
use std::collections::VecDeque;
use std::io::{Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};

/// What `scion scan` was asked.
pub struct ScanArgs {
    pub paths: Vec<PathBuf>,
    pub since: Option<String>,
    pub jobs: Option<usize>,
    pub json: bool,
    pub no_cache: bool,
    pub command: Vec<String>,
}

/// Exit 0: every run exited 0; 1: some exited otherwise; 2: trouble (a directory that could
/// not be read, a command that could not start).
pub fn scan(a: ScanArgs) -> Result<ExitCode, String> {
    if a.command.is_empty() {
        return Err("no command given: scion scan PATH... -- COMMAND ARGS... {}".into());
    }
    let at: Vec<Located> = a.paths.iter().map(|p| locate(p, true, &None)).collect::<Result<_, _>>()?;
    let first = &at[0];
    let Some(mnt) = first.mnt.clone() else {
        return Err("scan runs COMMAND on files through the mount; mount the store".into());
    };
    if let Some(i) = at.iter().position(|x| x.store != first.store) {
        return Err(format!("{} is not in the same store as {}", a.paths[i].display(), a.paths[0].display()));
    }
    let since = match &a.since {
        Some(s) if s.contains('/') => Some(store_path(&locate(Path::new(s), true, &None)?)),
        Some(s) => Some(s.clone().into_bytes()),
        None => None,
    };
    let line = command_line(&a.command);
    let op = Op::Scan {
        paths: at.iter().map(store_path).collect(),
        since,
        command: (!a.no_cache).then(|| line.clone()),
    };
    let mut got = Listing::new().map_err(|e| format!("a temporary file for the listing: {e}"))?;
    let reply = call_parts(first, &op, &mut |p| got.take(p, &mnt));
    // (A scan that failed had its pins undone by the daemon.)
    let reply = reply?;
    // COMMAND reads each content where the daemon pinned it for the scan (the bytes its key
    // names, whatever happens to the live file meanwhile); the pins go when the scan ends.
    let pins = got.pins.take().unwrap_or_default();
    let _unpin = Unpin { at: first, pins: &pins };
    let Reply::Scanned(n) = reply else {
        return Err("the daemon answered something else".into());
    };
    got.check(&n)?;
    // The contents to run on: one holder each (its first path), unless kept.
    let todo: Vec<(usize, PathBuf)> = got
        .first_path
        .iter_mut()
        .enumerate()
        .filter_map(|(i, p)| p.take().map(|p| (i, mnt.join(rel(&p)))))
        .collect();
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())).max(1);
    let cmd = Scanner::new(&a.command);
    if cmd.batched && a.command.iter().filter(|w| w.contains("{}")).count() > 1 {
        return Err("with `{} +`, `{}` may appear only once, as its own word before `+`".into());
    }
    let ran = run_all(&cmd, todo, jobs, &got.contents)?;
    let fresh: Vec<ScanResult> = ran.iter().filter(|(_, _, k)| *k).map(|(_, r, _)| r.clone()).collect();
    let n_ran = ran.len();
    for (i, r, _) in ran {
        got.results[i] = Some((r, false));
    }
    if !a.no_cache {
        keep(first, &line, &fresh);
    }
    let status = report(&mut got, &mnt, a.json)?;
    let kept = got.results.iter().flatten().filter(|(_, c)| *c).count();
    eprintln!(
        "scion scan: {} files, {} distinct contents: {} run, {} from the cache",
        n.files, n.contents, n_ran, kept
    );
    let code = if n.denied > 0 { 2 } else { status };
    Ok(ExitCode::from(code))
}

/// A scan's listing as it streams from the daemon: what there is one of per distinct
/// content (its key and size, its result, the path COMMAND will run on) in memory, the
/// files (one record each: content index, path) spooled to an unlinked temporary file in the
/// order they come, which is the order they are shown in. So the memory grows with the
/// contents, not with the files.
struct Listing {
    pins: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    contents: Vec<([u8; 32], u64)>,
    results: Vec<Option<(ScanResult, bool)>>,
    /// For each content not kept, the path (pinned) COMMAND runs on: its first holder's.
    first_path: Vec<Option<Vec<u8>>>,
    /// The contents the last batch listed first, and whether its files have come since.
    batch: std::ops::Range<usize>,
    batch_done: bool,
    spool: std::io::BufWriter<std::fs::File>,
    files: u64,
    denied: u64,
    cached: u64,
}

impl Listing {
    fn new() -> std::io::Result<Listing> {
        Ok(Listing {
            pins: None,
            contents: Vec::new(),
            results: Vec::new(),
            first_path: Vec::new(),
            batch: 0..0,
            batch_done: false,
            spool: std::io::BufWriter::with_capacity(1 << 20, tempfile::tempfile()?),
            files: 0,
            denied: 0,
            cached: 0,
        })
    }

    /// One part from the daemon.
    fn take(&mut self, part: Part, mnt: &Path) -> Result<(), String> {
        if self.pins.is_none() && !matches!(part, Part::ScanPins(_)) {
            return Err("a scan's listing before its pins".into());
        }
        match part {
            Part::ScanPins(p) if self.pins.is_none() => self.pins = Some(p),
            Part::ScanPins(_) => return Err("a scan's pins twice".into()),
            Part::ScanContents(v) => {
                // (A batch's contents may come in several frames: the range grows until files come.)
                let start = if self.batch.end == self.contents.len() && !self.batch_done { self.batch.start } else { self.contents.len() };
                self.batch = start..self.contents.len() + v.len();
                self.batch_done = false;
                self.contents.extend(v);
                self.results.resize(self.contents.len(), None);
                self.first_path.resize(self.contents.len(), None);
            }
            Part::ScanCached(v) if !v.is_empty() => {
                // Kept results come right after the contents their batch lists first.
                let index: std::collections::HashMap<[u8; 32], usize> =
                    self.batch.clone().map(|i| (self.contents[i].0, i)).collect();
                for x in v {
                    let i = *index.get(&x.key).ok_or("a kept result of a content its batch does not list")?;
                    self.results[i] = Some((x, true));
                    self.cached += 1;
                }
            }
            Part::ScanCached(_) => {}
            Part::ScanFiles(v) => {
                self.batch_done = true;
                for (p, k) in v {
                    let k = k as usize;
                    if k >= self.contents.len() {
                        return Err(format!("a file of content {k}, of {} contents", self.contents.len()));
                    }
                    if self.results[k].is_none() && self.first_path[k].is_none() {
                        self.first_path[k] = Some(pinned(&p, self.pins.as_deref().unwrap_or_default()));
                    }
                    self.spool(k as u32, &p).map_err(|e| format!("spooling the listing: {e}"))?;
                    self.files += 1;
                }
            }
            Part::ScanDenied(v) => {
                self.batch_done = true;
                for d in v {
                    eprintln!("scion scan: {}: permission denied", mnt.join(rel(&d)).display());
                    self.denied += 1;
                }
            }
            p => return Err(format!("unexpected part in a scan: {p:?}")),
        }
        Ok(())
    }

    fn spool(&mut self, k: u32, p: &[u8]) -> std::io::Result<()> {
        self.spool.write_all(&k.to_le_bytes())?;
        self.spool.write_all(&(p.len() as u32).to_le_bytes())?;
        self.spool.write_all(p)
    }

    /// The counts the daemon's reply gives must be what came.
    fn check(&self, n: &ScanCounts) -> Result<(), String> {
        let got = [self.contents.len() as u64, self.files, self.denied, self.cached];
        let want = [n.contents, n.files, n.denied, n.cached];
        if got != want {
            return Err(format!("the daemon announced {want:?} contents, files, denied and kept results; {got:?} came"));
        }
        Ok(())
    }

    /// The spooled files again, in order: (content index, path).
    fn files(&mut self) -> std::io::Result<impl Iterator<Item = std::io::Result<(usize, Vec<u8>)>> + '_> {
        self.spool.flush()?;
        let f = self.spool.get_mut();
        f.seek(std::io::SeekFrom::Start(0))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, &*f);
        let mut left = self.files;
        Ok(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let mut head = [0u8; 8];
            Some(r.read_exact(&mut head).and_then(|()| {
                let k = u32::from_le_bytes(head[..4].try_into().unwrap()) as usize;
                let mut p = vec![0u8; u32::from_le_bytes(head[4..].try_into().unwrap()) as usize];
                r.read_exact(&mut p)?;
                Ok((k, p))
            }))
        }))
    }
}

/// Destroys a scan's pins when it ends, however it ends (a killed scan's are destroyed
/// when the store is next mounted).
struct Unpin<'a> {
    at: &'a Located,
    pins: &'a [(Vec<u8>, Vec<u8>)],
}

impl Drop for Unpin<'_> {
    fn drop(&mut self) {
        for (_, pin) in self.pins {
            // Recursive: a pin holds the clones nested in what it pinned, frozen with it.
            let op = Op::Destroy { target: scion_daemon::control::Target::Path(pin.clone()), recursive: true };
            if let Err(e) = call(self.at, &op) {
                eprintln!("scion scan: its snapshot /{} not destroyed: {e}", String::from_utf8_lossy(pin));
            }
        }
    }
}

/// Where `path` (from the mount root) is read: in the pin of the scanned directory it lies
/// in, if that was pinned.
fn pinned(path: &[u8], pins: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let below = |dir: &[u8]| dir.is_empty() || path == dir || (path.starts_with(dir) && path[dir.len()] == b'/');
    match pins.iter().filter(|(d, _)| below(d)).max_by_key(|(d, _)| d.len()) {
        Some((d, pin)) if d.is_empty() => [&pin[..], b"/", path].concat(),
        Some((d, pin)) => [&pin[..], &path[d.len()..]].concat(),
        None => path.to_vec(),
    }
}

/// A path COMMAND was given, as the live path it pinned (`/.snapshot/.scion-scan-HEX` left
/// out): where the content was when it ran.
fn unpinned(p: &[u8]) -> Vec<u8> {
    let mark = [b"/", scion_fs::clone::SNAPDIR_NAME, b"/", scion_daemon::control::SCAN_PIN].concat();
    let Some(at) = p.windows(mark.len()).position(|w| w == mark) else { return p.to_vec() };
    let rest = &p[at + mark.len()..];
    let end = rest.iter().position(|&c| c == b'/').unwrap_or(rest.len());
    [&p[..at], &rest[end..]].concat()
}

/// The command line as the cache knows it: its words, each ended by a NUL.
fn command_line(command: &[String]) -> Vec<u8> {
    command.iter().flat_map(|w| w.bytes().chain([0])).collect()
}

fn rel(p: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(p))
}

/// COMMAND's words for `paths`: a word that is exactly `{}` becomes the paths, `{}` inside a
/// word becomes the (first) path; with no `{}` at all, the paths go last.
fn expand(command: &[String], paths: &[&Path]) -> Vec<std::ffi::OsString> {
    if !command.iter().any(|w| w.contains("{}")) {
        let mut v: Vec<std::ffi::OsString> = command.iter().map(Into::into).collect();
        v.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
        return v;
    }
    let mut v = Vec::new();
    for w in command {
        if w == "{}" {
            v.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
            continue;
        }
        let mut o = std::ffi::OsString::new();
        for (i, s) in w.split("{}").enumerate() {
            if i > 0 {
                o.push(paths[0].as_os_str());
            }
            o.push(s);
        }
        v.push(o);
    }
    v
}

/// Most paths one run of a batched COMMAND (`{} +`) is given, and most bytes of them.
const BATCH_PATHS: usize = 256;
const BATCH_BYTES: usize = 64 << 10;

/// COMMAND as asked: its words, and whether it takes many paths at once (`{} +`, as
/// `find -exec` does).
pub(crate) struct Scanner {
    words: Vec<String>,
    batched: bool,
}

impl Scanner {
    pub(crate) fn new(command: &[String]) -> Scanner {
        let n = command.len();
        let batched = n >= 2 && command[n - 1] == "+" && command[n - 2] == "{}";
        let words = if batched { command[..n - 1].to_vec() } else { command.to_vec() };
        Scanner { words, batched }
    }
}

/// What one run gave, before it is told apart per content.
struct Ran {
    status: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs COMMAND on each path of `todo` (one per run, or in batches with `{} +`), `jobs` at a
/// time; progress on stderr. Each content's result, and whether it may be kept.
fn run_all(
    cmd: &Scanner,
    todo: Vec<(usize, PathBuf)>,
    jobs: usize,
    contents: &[([u8; 32], u64)],
) -> Result<Vec<(usize, ScanResult, bool)>, String> {
    let total = todo.len();
    let batches = batches(todo, if cmd.batched { BATCH_PATHS } else { 1 }, jobs);
    let queue = Arc::new(Mutex::new(batches));
    let done = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let failed: Arc<Mutex<Option<String>>> = Arc::default();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(total.max(1)) {
            let (queue, done, failed) = (queue.clone(), done.clone(), failed.clone());
            s.spawn(move || loop {
                let Some(batch) = queue.lock().unwrap().pop_front() else { return };
                if failed.lock().unwrap().is_some() {
                    return;
                }
                let paths: Vec<&Path> = batch.iter().map(|(_, p)| p.as_path()).collect();
                let ran = match run_one(&cmd.words, &paths) {
                    Ok(r) => r,
                    Err(e) => {
                        *failed.lock().unwrap() = Some(e);
                        return;
                    }
                };
                let results = split(&batch, ran, contents);
                let mut d = done.lock().unwrap();
                d.extend(results);
                if tty {
                    eprint!("\rscion scan: {}/{} contents scanned", d.len(), total);
                    if d.len() == total {
                        eprintln!();
                    }
                }
            });
        }
    });
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(e);
    }
    let v = std::mem::take(&mut *done.lock().unwrap());
    Ok(v)
}

/// The paths in runs of at most `most` (and `BATCH_BYTES`), small enough that every job
/// gets some.
fn batches(todo: Vec<(usize, PathBuf)>, most: usize, jobs: usize) -> VecDeque<Vec<(usize, PathBuf)>> {
    let most = most.min(todo.len().div_ceil(jobs.max(1))).max(1);
    let mut out = VecDeque::new();
    let mut cur: Vec<(usize, PathBuf)> = Vec::new();
    let mut bytes = 0;
    for t in todo {
        let n = t.1.as_os_str().len() + 1;
        if !cur.is_empty() && (cur.len() >= most || bytes + n > BATCH_BYTES) {
            out.push_back(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += n;
        cur.push(t);
    }
    if !cur.is_empty() {
        out.push_back(cur);
    }
    out
}

/// One run of COMMAND on `paths`.
fn run_one(words: &[String], paths: &[&Path]) -> Result<Ran, String> {
    let w = expand(words, paths);
    let out = Command::new(&w[0])
        .args(&w[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", words[0]))?;
    let status = match (out.status.code(), out.status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 2,
    };
    Ok(Ran {
        status,
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

/// A run's result per content. Alone, the content gets it whole. In a batch, each gets the
/// output lines that name its path (the longest path a line names), and the batch's exit
/// status; what names no path is shown now, and the results are kept only if the batch
/// exited 0 (a failure cannot be pinned on one content).
fn split(batch: &[(usize, PathBuf)], ran: Ran, contents: &[([u8; 32], u64)]) -> Vec<(usize, ScanResult, bool)> {
    let result = |i: usize, p: &Path, stdout: Vec<u8>, stderr: Vec<u8>| ScanResult {
        key: contents[i].0,
        status: ran.status,
        shown_as: p.as_os_str().as_bytes().to_vec(),
        stdout,
        stderr,
    };
    if let [(i, p)] = batch {
        return vec![(*i, result(*i, p, ran.stdout.clone(), ran.stderr.clone()), true)];
    }
    let mut outs: Vec<Vec<u8>> = vec![Vec::new(); batch.len()];
    let mut unnamed = Vec::new();
    for line in ran.stdout.split_inclusive(|&c| c == b'\n') {
        let named = batch
            .iter()
            .enumerate()
            .filter(|(_, (_, p))| contains(line, p.as_os_str().as_bytes()))
            .max_by_key(|(_, (_, p))| p.as_os_str().len());
        match named {
            Some((k, _)) => outs[k].extend_from_slice(line),
            None => unnamed.extend_from_slice(line),
        }
    }
    let _ = std::io::stdout().write_all(&unnamed);
    let _ = std::io::stderr().write_all(&ran.stderr);
    let keep = ran.status == 0;
    batch
        .iter()
        .zip(outs)
        .map(|((i, p), out)| (*i, result(*i, p, out, Vec::new()), keep))
        .collect()
}

/// Sends new results to be kept, in requests that fit a frame. A failure to keep them
/// costs only a run next time: said, not fatal.
fn keep(at: &Located, line: &[u8], fresh: &[ScanResult]) {
    let mut batch = Vec::new();
    let mut size = 0;
    let send = |batch: &mut Vec<ScanResult>| {
        if batch.is_empty() {
            return;
        }
        let op = Op::ScanRecord {
            command: line.to_vec(),
            results: std::mem::take(batch),
        };
        if let Err(e) = call(at, &op) {
            eprintln!("scion scan: results not kept: {e}");
        }
    };
    for r in fresh.iter().filter(|r| r.keepable()) {
        let n = 64 + r.shown_as.len() + r.stdout.len() + r.stderr.len();
        if size + n > MAX_MESSAGE - line.len() - 1024 {
            send(&mut batch);
            size = 0;
        }
        batch.push(r.clone());
        size += n;
    }
    send(&mut batch);
}

/// Prints each file's result, in the order listed; the exit status: 0 if every run exited 0.
fn report(got: &mut Listing, mnt: &Path, json: bool) -> Result<u8, String> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut err_shown = vec![false; got.results.len()];
    let mut status = 0;
    let results = std::mem::take(&mut got.results);
    let contents = std::mem::take(&mut got.contents);
    for f in got.files().map_err(|e| format!("reading the spooled listing: {e}"))? {
        let (k, p) = f.map_err(|e| format!("reading the spooled listing: {e}"))?;
        let Some((r, cached)) = &results[k] else { continue };
        let path = mnt.join(rel(&p));
        let path_b = path.as_os_str().as_bytes();
        let stdout = shown_for(&r.stdout, &r.shown_as, path_b);
        if r.status != 0 {
            status = 1;
        }
        if json {
            let v = serde_json::json!({
                "path": path.to_string_lossy(),
                "content": crate::receive_cmd::hex(&r.key),
                "size": contents[k].1,
                "status": r.status,
                "stdout": String::from_utf8_lossy(&stdout),
                "stderr": String::from_utf8_lossy(&r.stderr),
                "cached": cached,
                "ran_on": String::from_utf8_lossy(&unpinned(&r.shown_as)),
            });
            writeln!(out, "{v}").map_err(|e| e.to_string())?;
            continue;
        }
        out.write_all(&stdout).map_err(|e| e.to_string())?;
        if !std::mem::replace(&mut err_shown[k], true) && !r.stderr.is_empty() {
            let _ = std::io::stderr().write_all(&r.stderr);
        }
    }
    out.flush().map_err(|e| e.to_string())?;
    got.results = results;
    got.contents = contents;
    Ok(status)
}

/// A result's output as shown for the file at `path`: the path it ran on replaced by
/// `path`, or, if it does not name that path, `path: ` before each line.
fn shown_for(stdout: &[u8], shown_as: &[u8], path: &[u8]) -> Vec<u8> {
    if stdout.is_empty() {
        return Vec::new();
    }
    if !shown_as.is_empty() && contains(stdout, shown_as) {
        return replace(stdout, shown_as, path);
    }
    let mut o = Vec::with_capacity(stdout.len() + path.len() + 2);
    for line in stdout.split_inclusive(|&c| c == b'\n') {
        o.extend_from_slice(path);
        o.extend_from_slice(b": ");
        o.extend_from_slice(line);
    }
    if !o.ends_with(b"\n") {
        o.push(b'\n');
    }
    o
}

fn contains(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

fn replace(h: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut o = Vec::with_capacity(h.len());
    let mut i = 0;
    while i < h.len() {
        if h[i..].starts_with(from) {
            o.extend_from_slice(to);
            i += from.len();
        } else {
            o.push(h[i]);
            i += 1;
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_shown_for_each_holder() {
        assert_eq!(shown_for(b"abc  /m/a/f\n", b"/m/a/f", b"/m/b/f"), b"abc  /m/b/f\n");
        assert_eq!(shown_for(b"ASCII text\nmore", b"/m/a/f", b"/m/b/f"), b"/m/b/f: ASCII text\n/m/b/f: more\n");
        assert_eq!(shown_for(b"", b"/m/a/f", b"/m/b/f"), b"");
        let f = [Path::new("/m/f")];
        let w = expand(&["rg".into(), "-l".into(), "x".into(), "--".into(), "{}".into()], &f);
        assert_eq!(w.last().unwrap(), "/m/f");
        let w = expand(&["sha256sum".into()], &f);
        assert_eq!(w, ["sha256sum", "/m/f"]);
        let w = expand(&["sh".into(), "-c".into(), "wc -c < {}".into()], &f);
        assert_eq!(w[2], "wc -c < /m/f");
        let two = [Path::new("/m/a"), Path::new("/m/b")];
        assert_eq!(expand(&["sha256sum".into(), "{}".into()], &two), ["sha256sum", "/m/a", "/m/b"]);
    }

    #[test]
    fn a_batch_is_told_apart_by_the_paths_its_lines_name() {
        let c = Scanner::new(&["sha256sum".into(), "{}".into(), "+".into()]);
        assert!(c.batched && c.words == ["sha256sum", "{}"]);
        assert!(!Scanner::new(&["echo".into(), "+".into()]).batched);
        let batch = vec![(0, PathBuf::from("/m/a/b")), (1, PathBuf::from("/m/a/b2"))];
        let contents = [([1; 32], 1), ([2; 32], 2)];
        let ran = Ran { status: 0, stdout: b"x  /m/a/b2\ny  /m/a/b\n".to_vec(), stderr: Vec::new() };
        let got = split(&batch, ran, &contents);
        assert_eq!(got[0].1.stdout, b"y  /m/a/b\n");
        assert_eq!(got[1].1.stdout, b"x  /m/a/b2\n");
        assert!(got.iter().all(|(_, r, keep)| *keep && r.status == 0));
        let ran = Ran { status: 1, stdout: Vec::new(), stderr: Vec::new() };
        assert!(split(&batch, ran, &contents).iter().all(|(_, r, keep)| !keep && r.status == 1));
        let b = batches((0..10).map(|i| (i, PathBuf::from(format!("/p{i}")))).collect(), 256, 2);
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [5, 5]);
    }
}
