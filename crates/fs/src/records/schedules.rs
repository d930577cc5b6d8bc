//! The schedules file (`STORE/schedules`, `docs/format.md` "Schedules"): the snapshot
//! schedules of a store, kept beside its packs so that they survive unmount, remount and a
//! crash: a two-slot file (`slots.rs`; magic "SCSC", version 1). The payload is text, one
//! schedule per line:
//! `EVERY_SECONDS KEEP KEEP_WHILE_FREE MIN_FREE DIR`, thresholds as a percentage or `-`, the
//! directory as a path from the mount root with bytes outside `!`..`~` and `%` written `%XX`.

use crate::schedule::retention::{Keep, Thresholds};
use crate::schedule::Schedule;
use scion_store::{Error, Host, Result};
use std::path::Path;

use super::slots::{escape, unescape, SlotFile};

pub const FILE: &str = "schedules";
pub use super::slots::SLOT;
const SLOTS: SlotFile = SlotFile {
    name: FILE,
    magic: b"SCSC",
    version: 1,
};

/// The schedules, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub schedules: Vec<Schedule>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("schedules file", FILE, why.to_string())
}

fn pct(v: Option<u8>) -> String {
    v.map_or("-".into(), |p| p.to_string())
}

fn parse_pct(s: &str) -> Result<Option<u8>> {
    if s == "-" {
        return Ok(None);
    }
    match s.parse::<u8>() {
        Ok(p) if p <= 100 => Ok(Some(p)),
        _ => Err(bad(format!("threshold {s:?} is not a percentage"))),
    }
}

/// The payload: one line per schedule.
pub fn encode_payload(list: &[Schedule]) -> Vec<u8> {
    let mut out = String::new();
    for s in list {
        out.push_str(&format!(
            "{} {} {} {} {}\n",
            s.every,
            s.keep,
            pct(s.limits.keep_while_free),
            pct(s.limits.min_free),
            escape(&s.dir)
        ));
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Schedule>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list: Vec<Schedule> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [every, keep, kwf, mf, dir] = f[..] else {
            return Err(bad(format!("line {line:?} does not have five fields")));
        };
        let every: u64 = every.parse().map_err(|_| bad(format!("interval {every:?}")))?;
        let s = Schedule {
            dir: unescape(dir)?,
            every,
            keep: Keep::parse(keep).map_err(bad)?,
            limits: Thresholds {
                keep_while_free: parse_pct(kwf)?,
                min_free: parse_pct(mf)?,
            },
        };
        s.validate().map_err(bad)?;
        if list.iter().any(|o| o.dir == s.dir) {
            return Err(bad(format!("two schedules for {}", escape(&s.dir))));
        }
        list.push(s);
    }
    if list.len() > crate::schedule::MAX_SCHEDULES {
        return Err(bad(format!("{} schedules", list.len())));
    }
    Ok(list)
}

/// One slot's bytes.
pub fn encode_slot(seq: u64, list: &[Schedule]) -> Result<Vec<u8>> {
    SLOTS.encode_slot(seq, &encode_payload(list))
}

/// A slot's state, if it holds a whole, valid one (`None`: never written, or torn).
pub fn decode_slot(b: &[u8]) -> Result<Option<Stored>> {
    SLOTS
        .decode_slot(b)?
        .map(|(seq, p)| Ok(Stored { seq, schedules: decode_payload(p)? }))
        .transpose()
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: no schedules.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, schedules: decode_payload(&p)? },
        None => Stored::default(),
    })
}

/// Reads the schedules of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Writes `list` as the state after `prev`, into the slot `prev` was not read from, and
/// syncs it. Returns the new state.
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Schedule>) -> Result<Stored> {
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, schedules: list })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Schedule> {
        vec![
            Schedule {
                dir: b"home/ann/my docs".to_vec(),
                every: 900,
                keep: Keep::default(),
                limits: Thresholds::default(),
            },
            Schedule {
                dir: Vec::new(),
                every: 1,
                keep: Keep::parse("last=2,yearly=3").unwrap(),
                limits: Thresholds {
                    keep_while_free: Some(20),
                    min_free: Some(5),
                },
            },
        ]
    }

    #[test]
    fn round_trips_and_survives_a_torn_slot() {
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        let s0 = load(&host, tmp.path()).unwrap();
        assert!(s0.schedules.is_empty());
        let s1 = save(&host, tmp.path(), &s0, sample()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s1);
        let s2 = save(&host, tmp.path(), &s1, sample()[..1].to_vec()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap().schedules.len(), 1);
        // A crash while writing the next state tears its slot: the last one stays.
        let path = tmp.path().join(FILE);
        let mut b = std::fs::read(&path).unwrap();
        let torn = ((s2.seq + 1) % 2) as usize * SLOT;
        let next = encode_slot(s2.seq + 1, &[]).unwrap();
        b[torn..torn + next.len()].copy_from_slice(&next);
        b[torn + super::super::slots::HEADER - 1] ^= 1; // the crc
        std::fs::write(&path, &b).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s2);
    }

    #[test]
    fn bad_payloads_are_refused() {
        let ok = encode_payload(&sample());
        assert_eq!(decode_payload(&ok).unwrap(), sample());
        for bad in [
            &b"900 last=1 - -\n"[..],
            b"x last=1 - - d\n",
            b"0 last=1 - - d\n",
            b"900 last=0 - - d\n",
            b"900 last=1 101 - d\n",
            b"900 last=1 - - d%4\n",
            b"900 last=1 - - d\n900 last=2 - - d\n",
        ] {
            assert!(
                decode_payload(bad).is_err(),
                "{:?} accepted",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
