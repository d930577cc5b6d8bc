//! The superblock: two 4 KiB slots in the file `superblock`, written alternately (generation
//! parity picks the slot), each with its own crc32c. Opening picks the valid slot with the
//! highest generation, so a torn superblock write leaves the previous one in force.

use crate::codec::{Reader, Writer};
use crate::host::{Host, OpenMode};
use crate::ptr::BlockPtr;
use crate::{Error, Result};
use std::path::Path;

pub const SUPERBLOCK_FILE: &str = "superblock";
pub const SUPERBLOCK_SLOT: usize = 4096;
/// The version this build writes. Version 3 added patches beside file chunks
/// (copy-on-abundant-write); version 4 keeps the journal in two files reused by generation
/// parity instead of one new file per generation (docs/format.md, "Journal"); version 5 lets
/// a small file's bytes live in its inode record; version 6 marks snapshots taken by a
/// schedule (namespace records of version 3, journal record 15); version 7 marks clones made
/// for ordinary users, whose copies hide others' privileges (namespace records of version 4,
/// journal record 16); version 8 lets data blocks of old versions be recompressed and
/// relocated (checkpoint records of version 2 name the relocation tree); version 9 may hold
/// cubes (`STORE/cubes`, `STORE/cubes.d/ID`), which an older build would show as empty
/// directories it lets be removed; version 10 journals a `writeback` cube's whole chunks
/// (record 18); version 11 records who made a clone or snapshot apart from whom it is
/// masked for (namespace records of version 5) and a user's clone whose top is theirs
/// (journal record 19); version 12 journals a small file's tail block written ahead
/// (records 20 and 21: the last block may be shorter than a chunk); version 13 keeps a
/// file's preallocated ranges in its inode record (mask bit 16); version 14 journals files
/// made without a name (O_TMPFILE): records 22 (an object id reserved) and 23 (such a file
/// named); version 15 holds trees pulled from remotes: pointers into remote packs (ids from
/// 2^23, `remote.rs`) and journal record 24; version 16 lays runs over a chunk's block in
/// layers (a content value of several pointers, `delta.rs`); version 17 journals layers
/// written ahead (record 25, `layer_ahead.rs`); version 18 keeps reference counts in a tree
/// named by the checkpoint record (version 3), written where they changed. An older store is read as
/// is and becomes the current version at its next checkpoint (every open makes one), after
/// which older builds refuse it.
pub const FORMAT_VERSION: u32 = 18;
/// The oldest version this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 2;
const MAGIC: &[u8; 8] = b"SCIONSB\0";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The format version this superblock was written with; one written by this build is
    /// always `FORMAT_VERSION`.
    pub version: u32,
    pub generation: u64,
    pub store_id: [u8; 16],
    /// Append position of the packs at the checkpoint.
    pub pack: u32,
    pub pack_end: u64,
    /// The checkpoint record (layer above); `None` only in a store that never checkpointed.
    pub checkpoint: Option<BlockPtr>,
}

impl Superblock {
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(SUPERBLOCK_SLOT);
        w.raw(MAGIC)
            .u32(FORMAT_VERSION)
            .u32(SUPERBLOCK_SLOT as u32)
            .u64(self.generation);
        w.raw(&self.store_id).u32(self.pack).u32(0).u64(self.pack_end);
        match &self.checkpoint {
            Some(p) => {
                w.u8(1);
                p.encode(&mut w);
            }
            None => {
                w.u8(0);
            }
        }
        let mut buf = w.finish();
        buf.resize(SUPERBLOCK_SLOT - 4, 0);
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes one slot. `Ok(None)` for a slot that is blank or fails its checksum (a torn
    /// write); `Err` for a valid slot of a version this build cannot read.
    pub fn decode(slot: &[u8]) -> Result<Option<Superblock>> {
        if slot.len() != SUPERBLOCK_SLOT || &slot[..8] != MAGIC {
            return Ok(None);
        }
        let crc = u32::from_le_bytes(slot[SUPERBLOCK_SLOT - 4..].try_into().unwrap());
        if crc != crc32c::crc32c(&slot[..SUPERBLOCK_SLOT - 4]) {
            return Ok(None);
        }
        let mut r = Reader::new(&slot[8..], "superblock");
        let version = r.u32()?;
        if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::Format(format!(
                "store format version {version} is not supported by this scion (it reads versions {OLDEST_READABLE_VERSION} to {FORMAT_VERSION})"
            )));
        }
        let slot_len = r.u32()?;
        if slot_len as usize != SUPERBLOCK_SLOT {
            return Ok(None);
        }
        let generation = r.u64()?;
        let store_id = r.array()?;
        let pack = r.u32()?;
        let _ = r.u32()?;
        let pack_end = r.u64()?;
        let checkpoint = match r.u8()? {
            0 => None,
            1 => Some(BlockPtr::decode(&mut r)?),
            _ => return Ok(None),
        };
        Ok(Some(Superblock {
            version,
            generation,
            store_id,
            pack,
            pack_end,
            checkpoint,
        }))
    }

    /// Reads the newest valid superblock of the store at `dir`.
    pub fn read(host: &Host, dir: &Path) -> Result<Superblock> {
        let path = dir.join(SUPERBLOCK_FILE);
        let data = match host.read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Format(format!(
                    "{} is not a scion store (it has no {SUPERBLOCK_FILE} file; `scion init` makes one)",
                    dir.display()
                )))
            }
            Err(e) => return Err(Error::io(format!("read of {}", path.display()), e)),
        };
        let mut best: Option<Superblock> = None;
        let mut versions_err = None;
        for i in 0..2 {
            let slot = data.get(i * SUPERBLOCK_SLOT..(i + 1) * SUPERBLOCK_SLOT).unwrap_or(&[]);
            match Superblock::decode(slot) {
                Ok(Some(sb)) => {
                    if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Ok(None) => {}
                Err(e) => versions_err = Some(e),
            }
        }
        if let Some(e) = versions_err {
            return Err(e);
        }
        best.ok_or_else(|| {
            Error::corrupt(
                "superblock",
                path.display(),
                "neither of its two copies has a valid magic number and checksum",
            )
        })
    }

    /// Writes this superblock into its slot and makes it durable.
    pub fn write(&self, host: &Host, dir: &Path) -> Result<()> {
        let path = dir.join(SUPERBLOCK_FILE);
        let f = host
            .open(&path, OpenMode::Create)
            .map_err(|e| Error::io(format!("open of {}", path.display()), e))?;
        let slot = (self.generation % 2) as u64;
        f.write_all_at(&self.encode(), slot * SUPERBLOCK_SLOT as u64)
            .map_err(|e| Error::io("superblock write", e))?;
        f.sync_data().map_err(|e| Error::io("superblock fsync", e))?;
        Ok(())
    }

    /// Creates the superblock file of a new store: this superblock in its slot, the other
    /// slot blank (invalid), so it is the one in force.
    pub fn create(&self, host: &Host, dir: &Path) -> Result<()> {
        let path = dir.join(SUPERBLOCK_FILE);
        let f = host
            .open(&path, OpenMode::Truncate)
            .map_err(|e| Error::io(format!("creation of {}", path.display()), e))?;
        let mut buf = vec![0u8; 2 * SUPERBLOCK_SLOT];
        let s = (self.generation % 2) as usize;
        buf[s * SUPERBLOCK_SLOT..(s + 1) * SUPERBLOCK_SLOT].copy_from_slice(&self.encode());
        f.write_all_at(&buf, 0).map_err(|e| Error::io("superblock write", e))?;
        f.sync_data().map_err(|e| Error::io("superblock fsync", e))?;
        Ok(())
    }
}
