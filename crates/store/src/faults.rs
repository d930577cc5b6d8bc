//! Fault injection: a host that makes chosen calls of another host fail or return flipped
//! bits. The daemon runs on one when `SCION_FAULTS` is set (see `docs/testing.md`); tests
//! build one directly.
//!
//! A spec is rules separated by `;`, each `CALL:PATH:EFFECT[:after=N][:count=N][:every=N]`:
//! - CALL: `read`, `write` (also set_len), `sync` (files and directories), `punch`, `open`,
//!   or `any`;
//! - PATH: a substring of the host path the call is about (`packs/`, `journal/`,
//!   `superblock`), or `*` for every path;
//! - EFFECT: `eio`, `enospc`, or `flip` (reads only: the call succeeds, one bit of the
//!   returned bytes is inverted);
//! - `after=N`: the first N matching calls pass (default 0); `count=N`: at most N calls are
//!   hit, then the rule is spent (default: no limit); `every=N`: of the calls after `after`,
//!   every Nth is hit (default 1: all).

use crate::host::{Host, HostFile, HostFs, HostSpace, OpenMode};
use crate::Result;
use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Read,
    Write,
    Sync,
    Punch,
    Open,
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Errno(i32),
    Flip,
}

#[derive(Debug)]
pub struct Rule {
    pub call: Call,
    pub path: String,
    pub effect: Effect,
    pub after: u64,
    pub count: u64,
    pub every: u64,
    seen: AtomicU64,
    hit: AtomicU64,
}

impl Rule {
    pub fn new(call: Call, path: &str, effect: Effect) -> Rule {
        Rule {
            call,
            path: path.to_string(),
            effect,
            after: 0,
            count: u64::MAX,
            every: 1,
            seen: AtomicU64::new(0),
            hit: AtomicU64::new(0),
        }
    }

    /// Calls this rule has hit so far.
    pub fn hits(&self) -> u64 {
        self.hit.load(Ordering::Relaxed)
    }

    fn matches(&self, call: Call, path: &str) -> bool {
        (self.call == Call::Any || self.call == call) && (self.path == "*" || path.contains(&self.path))
    }

    /// Counts a matching call; true if it is to be hit.
    fn fires(&self) -> bool {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        if n < self.after || (n - self.after) % self.every != 0 {
            return false;
        }
        self.hit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                (h < self.count).then_some(h + 1)
            })
            .is_ok()
    }
}

/// Parses a fault spec (the module documentation gives the syntax).
pub fn parse(spec: &str) -> std::result::Result<Vec<Rule>, String> {
    let mut rules = Vec::new();
    for text in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() < 3 {
            return Err(format!(
                "fault rule {text:?}: expected CALL:PATH:EFFECT[:after=N][:count=N][:every=N]"
            ));
        }
        let call = match parts[0] {
            "read" => Call::Read,
            "write" => Call::Write,
            "sync" => Call::Sync,
            "punch" => Call::Punch,
            "open" => Call::Open,
            "any" => Call::Any,
            c => {
                return Err(format!(
                    "fault rule {text:?}: unknown call {c:?} (read, write, sync, punch, open, any)"
                ))
            }
        };
        let effect = match parts[2] {
            "eio" => Effect::Errno(libc::EIO),
            "enospc" => Effect::Errno(libc::ENOSPC),
            "flip" if call == Call::Read => Effect::Flip,
            "flip" => return Err(format!("fault rule {text:?}: flip applies to reads only")),
            e => return Err(format!("fault rule {text:?}: unknown effect {e:?} (eio, enospc, flip)")),
        };
        let mut rule = Rule::new(call, parts[1], effect);
        for opt in &parts[3..] {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| format!("fault rule {text:?}: option {opt:?} is not KEY=N"))?;
            let n: u64 = v
                .parse()
                .map_err(|_| format!("fault rule {text:?}: {k}={v:?} is not a number"))?;
            match k {
                "after" => rule.after = n,
                "count" => rule.count = n,
                "every" if n > 0 => rule.every = n,
                _ => {
                    return Err(format!(
                        "fault rule {text:?}: unknown option {k:?} (after, count, every>0)"
                    ))
                }
            }
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// A host whose calls go to `inner` unless a rule hits them.
pub struct FaultyHost {
    inner: Host,
    rules: Arc<Rules>,
}

/// The rules and whether they apply yet.
struct Rules {
    list: Vec<Rule>,
    armed: AtomicBool,
}

impl FaultyHost {
    /// A host with these rules, armed.
    pub fn new(inner: Host, rules: Vec<Rule>) -> FaultyHost {
        FaultyHost {
            inner,
            rules: Arc::new(Rules {
                list: rules,
                armed: AtomicBool::new(true),
            }),
        }
    }

    /// Turns the rules on or off (tests open a store first, then arm its faults).
    pub fn arm(&self, on: bool) {
        self.rules.armed.store(on, Ordering::SeqCst);
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules.list
    }
}

/// The effect of the first rule hitting this call, if any (every matching rule counts it).
fn check(rules: &Rules, call: Call, path: &str) -> Option<Effect> {
    if !rules.armed.load(Ordering::SeqCst) {
        return None;
    }
    let rules = &rules.list;
    let mut effect = None;
    for r in rules.iter().filter(|r| r.matches(call, path)) {
        if r.fires() && effect.is_none() {
            log::warn!("fault injected: {call:?} of {path}: {:?}", r.effect);
            effect = Some(r.effect);
        }
    }
    effect
}

fn fail(rules: &Rules, call: Call, path: &str) -> io::Result<()> {
    match check(rules, call, path) {
        Some(Effect::Errno(e)) => Err(io::Error::from_raw_os_error(e)),
        _ => Ok(()),
    }
}

struct FaultyFile {
    inner: Arc<dyn HostFile>,
    rules: Arc<Rules>,
    path: String,
}

impl HostFile for FaultyFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let effect = check(&self.rules, Call::Read, &self.path);
        if let Some(Effect::Errno(e)) = effect {
            return Err(io::Error::from_raw_os_error(e));
        }
        self.inner.read_exact_at(buf, offset)?;
        if effect == Some(Effect::Flip) && !buf.is_empty() {
            // A bit in the middle: past any header, inside the payload.
            let at = buf.len() / 2;
            buf[at] ^= 0x10;
        }
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        fail(&self.rules, Call::Write, &self.path)?;
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        fail(&self.rules, Call::Write, &self.path)?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        fail(&self.rules, Call::Sync, &self.path)?;
        self.inner.sync_data()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        fail(&self.rules, Call::Punch, &self.path)?;
        self.inner.punch_hole(offset, len)
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        fail(&self.rules, Call::Write, &self.path)?;
        self.inner.allocate(offset, len)
    }
    fn data_ranges(&self) -> io::Result<Option<Vec<(u64, u64)>>> {
        self.inner.data_ranges()
    }
}

impl HostFs for FaultyHost {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        let p = path.to_string_lossy().into_owned();
        fail(&self.rules, Call::Open, &p)?;
        Ok(Arc::new(FaultyFile {
            inner: self.inner.open(path, mode)?,
            rules: self.rules.clone(),
            path: p,
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let p = path.to_string_lossy();
        let effect = check(&self.rules, Call::Read, &p);
        if let Some(Effect::Errno(e)) = effect {
            return Err(io::Error::from_raw_os_error(e));
        }
        let mut data = self.inner.read(path)?;
        if effect == Some(Effect::Flip) && !data.is_empty() {
            let at = data.len() / 2;
            data[at] ^= 0x10;
        }
        Ok(data)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fail(&self.rules, Call::Write, &path.to_string_lossy())?;
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fail(&self.rules, Call::Write, &path.to_string_lossy())?;
        self.inner.create_dir_all(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        fail(&self.rules, Call::Sync, &path.to_string_lossy())?;
        self.inner.sync_dir(path)
    }
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64> {
        self.inner.allocated_bytes(path)
    }
    fn space(&self, path: &Path) -> io::Result<HostSpace> {
        self.inner.space(path)
    }
    fn lock(&self, dir: &Path, holder: &str) -> Result<Box<dyn Any + Send>> {
        self.inner.lock(dir, holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_counts() {
        let rules = parse("write:packs/:eio:after=2:count=1; read:*:flip:every=3").unwrap();
        assert_eq!(rules.len(), 2);
        let w = &rules[0];
        assert!(w.matches(Call::Write, "/s/packs/00000001.pack"));
        assert!(!w.matches(Call::Write, "/s/journal/0.log"));
        assert_eq!(
            (0..5).map(|_| w.fires()).collect::<Vec<_>>(),
            [false, false, true, false, false]
        );
        let r = &rules[1];
        assert_eq!(
            (0..7).map(|_| r.fires()).collect::<Vec<_>>(),
            [true, false, false, true, false, false, true]
        );
        for bad in [
            "write:x",
            "fly:x:eio",
            "write:x:boom",
            "write:x:flip",
            "read:x:eio:after",
            "read:x:eio:every=0",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
