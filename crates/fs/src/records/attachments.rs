//! The attachments file (`STORE/attachments`, `docs/format.md` "Attachments"): the trees
//! pulled from remotes (issue 41) whose blocks this store reads from there. A pull gives its
//! tree's packs the pack ids `first .. first + count` (at `REMOTE_PACK_FIRST` and above: a
//! tree's pointers name its blocks in those packs), in the order the tree object lists them.
//! A two-slot file (`slots.rs`; magic "SCAT", version 1); the payload is text, one
//! attachment per line: `FIRST COUNT REMOTE TREE`, TREE the tree object's hash in hex.
//!
//! An attachment is recorded (synced) before any pointer into its packs can be journaled,
//! and never reused: a pull that a crash cut short leaves one that nothing references.

use super::slots::SlotFile;
use scion_store::{Error, Host, Result, REMOTE_PACK_FIRST};
use std::path::Path;

pub const FILE: &str = "attachments";
/// Pack ids end here (24 bits, `BlockPtr::addr`).
pub const PACK_ID_END: u32 = 1 << 24;
const SLOTS: SlotFile = SlotFile { name: FILE, magic: b"SCAT", version: 1 };

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub first: u32,
    pub count: u32,
    pub remote: String,
    /// The tree object's hash (its key on the remote, its name in `STORE/remote/trees/`).
    pub tree: [u8; 32],
}

impl Attachment {
    pub fn holds(&self, pack: u32) -> bool {
        pack >= self.first && pack - self.first < self.count
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub list: Vec<Attachment>,
}

impl Stored {
    /// The first pack id a new attachment of `count` packs gets, or why none is left.
    pub fn next_first(&self, count: u32) -> Result<u32> {
        let first = self.list.iter().map(|a| a.first + a.count).max().unwrap_or(REMOTE_PACK_FIRST);
        if u64::from(first) + u64::from(count) > u64::from(PACK_ID_END) {
            return Err(Error::Format(format!("no pack ids left for a tree of {count} packs (the store has attached {} trees)", self.list.len())));
        }
        Ok(first)
    }

    pub fn find(&self, pack: u32) -> Option<&Attachment> {
        self.list.iter().find(|a| a.holds(pack))
    }
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("attachments file", FILE, why.to_string())
}

fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn encode_payload(list: &[Attachment]) -> Vec<u8> {
    let mut out = String::new();
    for a in list {
        out.push_str(&format!("{} {} {} {}\n", a.first, a.count, a.remote, hex(&a.tree)));
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Attachment>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list: Vec<Attachment> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [first, count, remote, tree] = f[..] else {
            return Err(bad(format!("line {line:?} does not have four fields")));
        };
        let num = |s: &str| s.parse::<u32>().map_err(|_| bad(format!("{s:?} is not a number")));
        let (first, count) = (num(first)?, num(count)?);
        if first < REMOTE_PACK_FIRST || u64::from(first) + u64::from(count) > u64::from(PACK_ID_END) {
            return Err(bad(format!("pack ids {first} + {count} outside the remote packs' range")));
        }
        if list.iter().any(|a| first < a.first + a.count && a.first < first + count) {
            return Err(bad(format!("pack ids {first} + {count} overlap another attachment's")));
        }
        if remote.is_empty() || remote.len() > 64 || !remote.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) {
            return Err(bad(format!("remote name {remote:?}")));
        }
        if tree.len() != 64 || !tree.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
            return Err(bad(format!("tree {tree:?} is not a hash")));
        }
        let mut h = [0u8; 32];
        for (i, b) in h.iter_mut().enumerate() {
            *b = u8::from_str_radix(&tree[2 * i..2 * i + 2], 16).map_err(|_| bad("tree hash"))?;
        }
        list.push(Attachment { first, count, remote: remote.to_string(), tree: h });
    }
    Ok(list)
}

pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, list: decode_payload(&p)? },
        None => Stored::default(),
    })
}

pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Records `a` after `prev` (synced); the new state. Fails if the file is full (a slot holds
/// some 600 attachments).
pub fn add(host: &Host, dir: &Path, prev: &Stored, a: Attachment) -> Result<Stored> {
    let mut list = prev.list.clone();
    assert!(a.first >= prev.next_first(0)?, "attachment {a:?} below the next free pack id");
    list.push(a);
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, list })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_round_trip_and_bad_ones_are_refused() {
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        let s0 = load(&host, tmp.path()).unwrap();
        let first = s0.next_first(3).unwrap();
        assert_eq!(first, REMOTE_PACK_FIRST);
        let s1 = add(&host, tmp.path(), &s0, Attachment { first, count: 3, remote: "r".into(), tree: [0xab; 32] }).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s1);
        assert_eq!(s1.next_first(1).unwrap(), first + 3);
        assert!(s1.find(first + 2).is_some() && s1.find(first + 3).is_none());
        assert!(s1.next_first(PACK_ID_END).is_err());
        let h = "ab".repeat(32);
        for bad in [format!("1 2 r {h}\n"), format!("{first} 2 r {h}\n{} 2 r {h}\n", first + 1), format!("{first} 2 r/x {h}\n"), format!("{first} 2 r abc\n"), format!("{first} 2 r\n")] {
            assert!(decode_payload(bad.as_bytes()).is_err(), "{bad:?} accepted");
        }
    }
}
