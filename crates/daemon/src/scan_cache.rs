//! The results `scion scan` keeps (issue 19 item 2): per command line and content, so that a
//! second scan of unchanged content runs nothing.
//!
//! One file per caller and command line in the store's directory,
//! `scan-cache/{owner,u<uid>}-<hex of BLAKE3(caller, command line)>`: the mount's owner and
//! root share one
//! (they may do anything to the store anyway), every other user has their own, so no user's
//! results stand for another's. Format: `magic "SCSC", version u8 = 1`, then records
//! `content key [32], status u32 (i32 LE), shown_as, stdout, stderr` (u32 length + bytes
//! each). Records are appended; a record cut short (a crash mid-append) ends the file, and
//! the next load writes it again without it. The cache is a hint: damage loses results,
//! never fails a scan; a file that grows past `MAX_FILE` starts again.

use scion_fs::scan::ContentKey;
use scion_store::codec::{Reader, Writer};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MAGIC: &[u8; 4] = b"SCSC";
const VERSION: u8 = 1;
/// A result whose output is longer than this is not kept (it is run again next time).
pub const MAX_OUTPUT: usize = 64 << 10;
/// A cache file past this size starts again.
pub const MAX_FILE: u64 = 64 << 20;
/// An ordinary user's cache file past this size starts again: what users may keep in the
/// store's directory is bounded (at most `rights::MAX_USER_SCAN_CACHES` files of this and
/// one request's results more each).
pub const MAX_USER_FILE: u64 = 2 << 20;
/// Longest command line that keys a cache.
pub const MAX_COMMAND: usize = 64 << 10;

/// What running the command on one content gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanResult {
    pub key: ContentKey,
    /// The exit status (128 + the signal if a signal ended it).
    pub status: i32,
    /// The path the command was given (`{}`), which its output may name.
    pub shown_as: Vec<u8>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ScanResult {
    /// Whether it may be kept (its output is not too long).
    pub fn keepable(&self) -> bool {
        self.stdout.len() + self.stderr.len() + self.shown_as.len() <= MAX_OUTPUT
    }

    pub fn encode(&self, w: &mut Writer) {
        w.raw(&self.key).u32(self.status as u32);
        w.bytes(&self.shown_as).bytes(&self.stdout).bytes(&self.stderr);
    }

    pub fn decode(r: &mut Reader) -> scion_store::Result<ScanResult> {
        Ok(ScanResult {
            key: r.array()?,
            status: r.u32()? as i32,
            shown_as: r.bytes()?.to_vec(),
            stdout: r.bytes()?.to_vec(),
            stderr: r.bytes()?.to_vec(),
        })
    }
}

/// Appends are whole records, one writer at a time.
static APPEND: Mutex<()> = Mutex::new(());

/// The cache file of `command` for caller `uid` (None: the mount's owner or root).
pub fn file_for(store: &Path, uid: Option<u32>, command: &[u8]) -> PathBuf {
    let mut h = blake3::Hasher::new();
    h.update(b"scion scan cache v1");
    h.update(&uid.map_or(u64::MAX, u64::from).to_le_bytes());
    h.update(command);
    dir(store).join(format!("{}{}", prefix(uid), h.finalize().to_hex()))
}

/// How many cache files user `uid` has.
pub fn files_of(store: &Path, uid: u32) -> usize {
    let p = prefix(Some(uid));
    std::fs::read_dir(dir(store))
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&p)).count())
        .unwrap_or(0)
}

fn dir(store: &Path) -> PathBuf {
    store.join("scan-cache")
}

fn prefix(uid: Option<u32>) -> String {
    match uid {
        Some(u) => format!("u{u}-"),
        None => "owner-".into(),
    }
}

/// The records of a cache file's bytes, and whether they end cleanly (false: damaged or
/// cut short; the records before the damage are kept). Never trusts the bytes.
pub fn decode(b: &[u8]) -> (Vec<ScanResult>, bool) {
    if b.len() < 5 || &b[..4] != MAGIC || b[4] != VERSION {
        return (Vec::new(), b.is_empty());
    }
    let mut r = Reader::new(&b[5..], "scan cache");
    let mut out = Vec::new();
    while r.remaining() > 0 {
        match ScanResult::decode(&mut r) {
            Ok(x) => out.push(x),
            Err(_) => return (out, false),
        }
    }
    (out, true)
}

/// The results kept in `path`, by content key (the last record of a key wins). A damaged
/// file is written again with the records before the damage, so appends land after them.
pub fn load(path: &Path) -> HashMap<ContentKey, ScanResult> {
    let _one = APPEND.lock().unwrap_or_else(|e| e.into_inner());
    let b = std::fs::read(path).unwrap_or_default();
    let (records, clean) = decode(&b);
    if !clean {
        log::warn!("{}: damaged or cut short after {} results; kept those", path.display(), records.len());
        if let Err(e) = rewrite(path, &records) {
            log::warn!("{}: {e}", path.display());
        }
    }
    records.into_iter().map(|x| (x.key, x)).collect()
}

/// Appends `results` (those short enough to keep) to the cache file `path`, which starts
/// again past `max_file` bytes (`MAX_FILE`, or `MAX_USER_FILE` for an ordinary user).
pub fn append(path: &Path, results: &[ScanResult], max_file: u64) -> std::io::Result<()> {
    let _one = APPEND.lock().unwrap_or_else(|e| e.into_inner());
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size == 0 || size > max_file {
        return rewrite(path, results);
    }
    let mut w = Writer::new();
    for x in results.iter().filter(|x| x.keepable()) {
        x.encode(&mut w);
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(&w.finish())
}

/// Writes the cache file `path` anew with `results`.
fn rewrite(path: &Path, results: &[ScanResult]) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut w = Writer::new();
    w.raw(MAGIC).u8(VERSION);
    for x in results.iter().filter(|x| x.keepable()) {
        x.encode(&mut w);
    }
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, w.finish())?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(k: u8, out: &str) -> ScanResult {
        ScanResult {
            key: [k; 32],
            status: k as i32 - 2,
            shown_as: b"/m/a/f".to_vec(),
            stdout: out.as_bytes().to_vec(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn appended_results_come_back_and_a_torn_tail_loses_only_itself() {
        let d = tempfile::tempdir().unwrap();
        let p = file_for(d.path(), Some(1000), b"sha256sum {}");
        assert!(load(&p).is_empty());
        append(&p, &[result(1, "one"), result(2, "two")], MAX_FILE).unwrap();
        append(&p, &[result(3, "three")], MAX_FILE).unwrap();
        let got = load(&p);
        assert_eq!(got.len(), 3);
        assert_eq!(got[&[2; 32]], result(2, "two"));
        // Cut mid-record: the first results stay, and appends land after them.
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() - 3]).unwrap();
        assert_eq!(load(&p).len(), 2);
        append(&p, &[result(4, "four")], MAX_FILE).unwrap();
        let mut keys: Vec<_> = load(&p).keys().copied().collect();
        keys.sort();
        assert_eq!(keys, [[1; 32], [2; 32], [4; 32]]);
        // Too long to keep.
        let big = result(5, &"x".repeat(MAX_OUTPUT + 1));
        append(&p, &[big], MAX_FILE).unwrap();
        assert!(!load(&p).contains_key(&[5; 32]));
        // Another user, another file.
        assert_ne!(p, file_for(d.path(), Some(1001), b"sha256sum {}"));
        assert_ne!(p, file_for(d.path(), None, b"sha256sum {}"));
    }

    #[test]
    fn a_users_file_starts_again_past_its_smaller_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("u1000-x");
        let mut big = result(1, "");
        big.stdout = vec![b'x'; MAX_OUTPUT - 64];
        for k in 0..(MAX_USER_FILE as usize / MAX_OUTPUT + 2) {
            big.key = [k as u8; 32];
            append(&p, std::slice::from_ref(&big), MAX_USER_FILE).unwrap();
            assert!(std::fs::metadata(&p).unwrap().len() <= MAX_USER_FILE + MAX_OUTPUT as u64);
        }
        assert!(load(&p).len() < MAX_USER_FILE as usize / MAX_OUTPUT + 2, "it started again");
    }
}
