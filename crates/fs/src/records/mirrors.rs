//! The mirrors file (`STORE/mirrors`, `docs/format.md` "Mirrors"): which directories of a
//! store send their snapshots to a second store, and how far each has got, kept beside the
//! packs so that a mirror goes on after unmount, remount and a crash. A two-slot file
//! (`slots.rs`; magic "SCMR", version 1); the payload is text, one mirror per line:
//! `FLAGS LAST_TIME DIR TARGET LAST`: flags as a number (bit 0: keep snapshots not mirrored
//! yet), the time the newest mirrored snapshot arrived (seconds since the epoch, 0 if none),
//! the directory as a path from the mount root and the target as an absolute path (both
//! escaped as in the schedules file), and the newest mirrored snapshot's name: `-` for none,
//! else `=` and the escaped name.

use super::slots::{escape, unescape, SlotFile};
use scion_store::{Error, Host, Result};
use std::path::Path;

pub const FILE: &str = "mirrors";
/// Mirrors a store keeps at most.
pub const MAX_MIRRORS: usize = 64;
const SLOTS: SlotFile = SlotFile {
    name: FILE,
    magic: b"SCMR",
    version: 1,
};

/// One mirror: directory `dir` of this store sends each new snapshot to `target`, a
/// directory in another scion mount, where snapshot NAME arrives as `target/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    pub dir: Vec<u8>,
    pub target: Vec<u8>,
    /// Retention keeps the snapshots not mirrored yet (sanoid#741).
    pub keep_unmirrored: bool,
    /// The newest snapshot on the mirror (the base of the next increment), and when it
    /// arrived.
    pub last: Option<Vec<u8>>,
    pub last_time: i64,
}

/// The mirrors, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub mirrors: Vec<Mirror>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("mirrors file", FILE, why.to_string())
}

pub fn encode_payload(list: &[Mirror]) -> Vec<u8> {
    let mut out = String::new();
    for m in list {
        let last = match &m.last {
            None => "-".to_string(),
            Some(n) => format!("={}", escape(n)),
        };
        out.push_str(&format!(
            "{} {} {} {} {}\n",
            u8::from(m.keep_unmirrored),
            m.last_time,
            escape(&m.dir),
            escape(&m.target),
            last
        ));
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Mirror>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list: Vec<Mirror> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [flags, time, dir, target, last] = f[..] else {
            return Err(bad(format!("line {line:?} does not have five fields")));
        };
        let flags: u8 = flags.parse().map_err(|_| bad(format!("flags {flags:?}")))?;
        if flags > 1 {
            return Err(bad(format!("unknown flags {flags}")));
        }
        let m = Mirror {
            dir: unescape(dir)?,
            target: unescape(target)?,
            keep_unmirrored: flags & 1 != 0,
            last_time: time.parse().map_err(|_| bad(format!("time {time:?}")))?,
            last: match last {
                "-" => None,
                l => Some(unescape(l.strip_prefix('=').ok_or_else(|| bad(format!("last {l:?}")))?)?),
            },
        };
        if !m.target.starts_with(b"/") || m.last.as_ref().is_some_and(|n| n.is_empty()) {
            return Err(bad(format!("line {line:?}: the target is not absolute, or the name empty")));
        }
        if list.iter().any(|o| o.dir == m.dir && o.target == m.target) {
            return Err(bad(format!("two mirrors of {} to {}", escape(&m.dir), escape(&m.target))));
        }
        list.push(m);
    }
    if list.len() > MAX_MIRRORS {
        return Err(bad(format!("{} mirrors", list.len())));
    }
    Ok(list)
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: no mirrors.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, mirrors: decode_payload(&p)? },
        None => Stored::default(),
    })
}

/// Reads the mirrors of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Writes `list` as the state after `prev` (synced). Returns the new state.
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Mirror>) -> Result<Stored> {
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, mirrors: list })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Mirror> {
        vec![
            Mirror {
                dir: b"home/ann/my docs".to_vec(),
                target: b"/mnt/backup/ann".to_vec(),
                keep_unmirrored: true,
                last: Some(b"2026-11-24T201502Z".to_vec()),
                last_time: 1_795_551_302,
            },
            Mirror {
                dir: Vec::new(),
                target: b"/b".to_vec(),
                keep_unmirrored: false,
                last: None,
                last_time: 0,
            },
        ]
    }

    #[test]
    fn round_trips_keeps_the_last_whole_state_and_refuses_bad_lines() {
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        let s0 = load(&host, tmp.path()).unwrap();
        assert!(s0.mirrors.is_empty());
        let s1 = save(&host, tmp.path(), &s0, sample()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s1);
        let s2 = save(&host, tmp.path(), &s1, sample()[1..].to_vec()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s2);
        // A torn write of the next state leaves this one.
        let path = tmp.path().join(FILE);
        let mut b = std::fs::read(&path).unwrap();
        let torn = ((s2.seq + 1) % 2) as usize * super::super::slots::SLOT;
        let next = SLOTS.encode_slot(s2.seq + 1, b"").unwrap();
        b[torn..torn + next.len()].copy_from_slice(&next);
        b[torn + 23] ^= 1;
        std::fs::write(&path, &b).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s2);
        for bad in [
            &b"0 0 d /t\n"[..],
            b"2 0 d /t -\n",
            b"0 x d /t -\n",
            b"0 0 d t -\n",
            b"0 0 d /t x\n",
            b"0 0 d /t =\n",
            b"0 0 d /t -\n0 0 d /t -\n",
        ] {
            assert!(decode_payload(bad).is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }
}
