//! The schedules file (`STORE/schedules`, `docs/format.md` "Schedules"): the snapshot
//! schedules of a store, kept beside its packs so that they survive unmount, remount and a
//! crash. Two slots of `SLOT` bytes, each `magic "SCSC", version u32 = 1, sequence u64,
//! length u32, crc32c u32 (of the payload), payload`; a change writes the slot the last one
//! did not, with the next sequence number, and syncs it, so a crash while writing leaves the
//! other slot, the previous state, readable. The payload is text, one schedule per line:
//! `EVERY_SECONDS KEEP KEEP_WHILE_FREE MIN_FREE DIR`, thresholds as a percentage or `-`, the
//! directory as a path from the mount root with bytes outside `!`..`~` and `%` written `%XX`.

use crate::schedule::retention::{Keep, Thresholds};
use crate::schedule::Schedule;
use scion_store::{Error, Host, OpenMode, Result};
use std::path::Path;

pub const FILE: &str = "schedules";
/// Bytes a slot holds, header included.
pub const SLOT: usize = 64 << 10;
const MAGIC: &[u8; 4] = b"SCSC";
const VERSION: u32 = 1;
const HEADER: usize = 4 + 4 + 8 + 4 + 4;

/// The schedules, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub schedules: Vec<Schedule>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("schedules file", FILE, why.to_string())
}

fn escape(p: &[u8]) -> String {
    let mut s = String::with_capacity(p.len());
    for &b in p {
        if (b'!'..=b'~').contains(&b) && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

fn unescape(s: &str) -> Result<Vec<u8>> {
    if s == "/" {
        return Ok(Vec::new());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| bad("a cut %XX escape"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad(format!("escape %{hex}")))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
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
    let payload = encode_payload(list);
    if HEADER + payload.len() > SLOT {
        return Err(Error::Format(format!(
            "{} schedules do not fit in the schedules file ({} bytes)",
            list.len(),
            payload.len()
        )));
    }
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// A slot's state, if it holds a whole, valid one (`None`: never written, or torn).
pub fn decode_slot(b: &[u8]) -> Result<Option<Stored>> {
    if b.len() < HEADER || &b[..4] != MAGIC {
        return Ok(None);
    }
    let version = u32::from_le_bytes(b[4..8].try_into().unwrap());
    if version != VERSION {
        return Err(bad(format!("version {version} (this scion reads version {VERSION})")));
    }
    let seq = u64::from_le_bytes(b[8..16].try_into().unwrap());
    let len = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(b[20..24].try_into().unwrap());
    let Some(payload) = b.get(HEADER..HEADER + len).filter(|_| HEADER + len <= SLOT) else {
        return Ok(None);
    };
    if crc32c::crc32c(payload) != crc {
        return Ok(None);
    }
    Ok(Some(Stored {
        seq,
        schedules: decode_payload(payload)?,
    }))
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: no schedules.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    let a = decode_slot(b.get(..SLOT.min(b.len())).unwrap_or(&[]))?;
    let c = decode_slot(b.get(SLOT..).unwrap_or(&[]))?;
    Ok(match (a, c) {
        (Some(a), Some(c)) => {
            if a.seq >= c.seq {
                a
            } else {
                c
            }
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => Stored::default(),
    })
}

/// Reads the schedules of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    let path = dir.join(FILE);
    if !host.exists(&path) {
        return Ok(Stored::default());
    }
    let b = host
        .read(&path)
        .map_err(|e| Error::io(format!("read of {}", path.display()), e))?;
    decode_file(&b)
}

/// Writes `list` as the state after `prev`, into the slot `prev` was not read from, and
/// syncs it. Returns the new state.
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Schedule>) -> Result<Stored> {
    let seq = prev.seq + 1;
    let slot = encode_slot(seq, &list)?;
    let path = dir.join(FILE);
    let existed = host.exists(&path);
    let f = host
        .open(&path, OpenMode::Create)
        .map_err(|e| Error::io(format!("open of {}", path.display()), e))?;
    let at = (seq % 2) * SLOT as u64;
    f.write_all_at(&slot, at)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io(format!("write of {}", path.display()), e))?;
    if !existed {
        scion_store::sync_dir(host, dir)?;
    }
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
        b[torn + HEADER - 1] ^= 1; // the crc
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
