//! The cube table (`STORE/cubes`, `docs/format.md` "Cubes"): which directories of a store
//! are cubes, each a store of its own (`STORE/cubes.d/ID`: its own packs, journal,
//! superblock and checkpoints) served as its own volume. A two-slot file (`slots.rs`; magic
//! "SCCB", version 1): two checksummed copies, so a torn write leaves the other. The payload
//! is text, one cube per line: `ID MODE ON_ERROR GRAFT PATH`: the id (1-255, its directory's
//! name), the durability mode and failure policy by name, the inode number of its directory
//! in the main volume (so the cube is served, and reachable at `MNT/.cubes/ID`, even when a
//! directory above it cannot be read), and the directory as a path from the mount root
//! (escaped as in the schedules file).

use super::slots::{escape, unescape, SlotFile};
use scion_store::{Error, Host, Result};
use std::path::{Path, PathBuf};

pub const FILE: &str = "cubes";
/// Where the cubes' stores live, each in a directory named by its id.
pub const DIR: &str = "cubes.d";
/// Cubes a store holds at most (a mount serves 255 volumes besides the main one).
pub const MAX_CUBES: u32 = 255;
const SLOTS: SlotFile = SlotFile {
    name: FILE,
    magic: b"SCCB",
    version: 1,
};

/// When a cube's changes reach its disk (IceFS' per-cube journaling modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Today's behaviour: data written before the metadata that names it; fsync makes
    /// everything before it durable.
    Ordered,
    /// As ordered, but fsync returns at once without syncing: a crash may lose what was
    /// written since the last checkpoint (never older data, never the tree's consistency).
    NoFsync,
    /// Nothing is journaled: changes reach the disk only at checkpoints (taken on the
    /// cube's own schedule, and by fsync); a crash goes back to the last one.
    NoJournal,
    /// File data is journaled with the metadata (whole chunks too), not written ahead to
    /// the packs: one sequential stream per fsync.
    Data,
    /// Metadata journaled, data not ordered before it: the background sync writes the
    /// journal without syncing the packs, so after a crash a file's bytes written since
    /// its last fsync may be older ones (never another file's); fsync syncs both.
    Writeback,
}

/// What a failure inside a cube (a bad checksum, a failed host I/O, a broken invariant)
/// does to it; the rest of the store goes on either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Reads of what is undamaged go on; changes get EROFS.
    ReadOnly,
    /// Every access gets EIO.
    Fence,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ordered => "ordered",
            Mode::NoFsync => "nofsync",
            Mode::NoJournal => "nojournal",
            Mode::Data => "data",
            Mode::Writeback => "writeback",
        }
    }
    pub fn parse(s: &str) -> std::result::Result<Mode, String> {
        match s {
            "ordered" => Ok(Mode::Ordered),
            "nofsync" => Ok(Mode::NoFsync),
            "nojournal" => Ok(Mode::NoJournal),
            "data" => Ok(Mode::Data),
            "writeback" => Ok(Mode::Writeback),
            _ => Err(format!("unknown mode {s:?} (ordered, data, writeback, nofsync or nojournal)")),
        }
    }
}

impl OnError {
    pub fn name(self) -> &'static str {
        match self {
            OnError::ReadOnly => "readonly",
            OnError::Fence => "fence",
        }
    }
    pub fn parse(s: &str) -> std::result::Result<OnError, String> {
        match s {
            "readonly" => Ok(OnError::ReadOnly),
            "fence" => Ok(OnError::Fence),
            _ => Err(format!("unknown failure policy {s:?} (readonly or fence)")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cube {
    pub id: u32,
    pub mode: Mode,
    pub on_error: OnError,
    /// Its directory's inode number in the main volume.
    pub graft: u64,
    /// The directory, as a path from the mount root (never empty: the root is no cube).
    pub path: Vec<u8>,
}

impl Cube {
    /// The cube's own store.
    pub fn store_dir(&self, store: &Path) -> PathBuf {
        store.join(DIR).join(self.id.to_string())
    }
}

/// The cubes, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub cubes: Vec<Cube>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("cube table", FILE, why.to_string())
}

pub fn encode_payload(list: &[Cube]) -> Vec<u8> {
    let mut out = String::new();
    for c in list {
        out.push_str(&format!("{} {} {} {} {}\n", c.id, c.mode.name(), c.on_error.name(), c.graft, escape(&c.path)));
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Cube>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list: Vec<Cube> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [id, mode, on_error, graft, path] = f[..] else {
            return Err(bad(format!("line {line:?} does not have five fields")));
        };
        let c = Cube {
            id: id.parse().map_err(|_| bad(format!("id {id:?}")))?,
            mode: Mode::parse(mode).map_err(bad)?,
            on_error: OnError::parse(on_error).map_err(bad)?,
            graft: graft.parse().map_err(|_| bad(format!("graft {graft:?}")))?,
            path: unescape(path)?,
        };
        if c.id == 0 || c.id > MAX_CUBES || c.path.is_empty() || c.path.starts_with(b"/") {
            return Err(bad(format!("line {line:?}: id out of range, or the path empty or absolute")));
        }
        if let Some(o) = list.iter().find(|o| o.id == c.id || nested(&o.path, &c.path) || nested(&c.path, &o.path)) {
            return Err(bad(format!("cubes {} and {} collide (same id, or one inside the other)", o.id, c.id)));
        }
        list.push(c);
    }
    Ok(list)
}

/// Whether `inner` is `outer` or below it.
pub fn nested(outer: &[u8], inner: &[u8]) -> bool {
    inner.starts_with(outer) && (inner.len() == outer.len() || inner[outer.len()] == b'/')
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: no cubes.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, cubes: decode_payload(&p)? },
        None => Stored::default(),
    })
}

/// Reads the cube table of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Writes `list` as the state after `prev` (synced). Returns the new state.
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Cube>) -> Result<Stored> {
    assert!(list.len() <= MAX_CUBES as usize, "{} cubes", list.len());
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, cubes: list })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Cube> {
        vec![
            Cube { id: 1, mode: Mode::Ordered, on_error: OnError::ReadOnly, graft: 12, path: b"srv/db".to_vec() },
            Cube { id: 7, mode: Mode::NoFsync, on_error: OnError::Fence, graft: 1 << 40 | 3, path: b"ci cache".to_vec() },
            Cube { id: 9, mode: Mode::NoJournal, on_error: OnError::ReadOnly, graft: 5, path: b"scratch".to_vec() },
        ]
    }

    #[test]
    fn round_trips_keeps_the_last_whole_state_and_refuses_bad_lines() {
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), Stored::default());
        let s1 = save(&host, tmp.path(), &Stored::default(), sample()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s1);
        let s2 = save(&host, tmp.path(), &s1, sample()[..1].to_vec()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s2);
        assert_eq!(decode_payload(&encode_payload(&sample())).unwrap(), sample());
        for bad in [
            "0 ordered readonly 5 a\n",
            "256 ordered readonly 5 a\n",
            "1 ordered readonly 5 /a\n",
            "1 fast readonly 5 a\n",
            "1 ordered never 5 a\n",
            "1 ordered readonly x a\n",
            "1 ordered readonly 5 a\n2 ordered readonly 6 a/b\n",
            "1 ordered readonly 5 a\n1 ordered readonly 6 b\n",
            "1 ordered readonly a\n",
        ] {
            assert!(decode_payload(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(decode_payload(b"1 ordered readonly 5 a\n2 ordered readonly 6 ab\n").is_ok());
    }
}
