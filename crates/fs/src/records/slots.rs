//! Two-slot files: a store's small state files beside its packs (`STORE/schedules`,
//! `STORE/mirrors`), which a crash while writing never loses. Each is two slots of `SLOT`
//! bytes, each `magic [4], version u32, sequence u64, length u32, crc32c u32 (of the
//! payload), payload`; a change writes the slot the last one did not, with the next sequence
//! number, and syncs it, so a crash while writing leaves the other slot, the previous state,
//! readable. Payloads are text; paths in them are escaped by `escape`.

use scion_store::{Error, Host, OpenMode, Result};
use std::path::Path;

/// Bytes a slot holds, header included.
pub const SLOT: usize = 64 << 10;
pub(crate) const HEADER: usize = 4 + 4 + 8 + 4 + 4;

/// One kind of two-slot file.
pub struct SlotFile {
    /// The file's name in the store directory.
    pub name: &'static str,
    pub magic: &'static [u8; 4],
    pub version: u32,
}

impl SlotFile {
    fn bad(&self, why: impl std::fmt::Display) -> Error {
        Error::corrupt("state file", self.name, why.to_string())
    }

    /// One slot's bytes.
    pub fn encode_slot(&self, seq: u64, payload: &[u8]) -> Result<Vec<u8>> {
        if HEADER + payload.len() > SLOT {
            return Err(Error::Format(format!(
                "{} bytes do not fit in the {} file",
                payload.len(),
                self.name
            )));
        }
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        out.extend_from_slice(payload);
        Ok(out)
    }

    /// A slot's sequence number and payload, if it holds a whole, valid one (`None`: never
    /// written, or torn).
    pub fn decode_slot<'a>(&self, b: &'a [u8]) -> Result<Option<(u64, &'a [u8])>> {
        if b.len() < HEADER || &b[..4] != self.magic {
            return Ok(None);
        }
        let version = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if version != self.version {
            return Err(self.bad(format!("version {version} (this scion reads version {})", self.version)));
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
        Ok(Some((seq, payload)))
    }

    /// The newest whole slot of a file's bytes (`None`: no whole slot).
    pub fn decode_file(&self, b: &[u8]) -> Result<Option<(u64, Vec<u8>)>> {
        let a = self.decode_slot(b.get(..SLOT.min(b.len())).unwrap_or(&[]))?;
        let c = self.decode_slot(b.get(SLOT..).unwrap_or(&[]))?;
        Ok(match (a, c) {
            (Some(a), Some(c)) => Some(if a.0 >= c.0 { a } else { c }),
            (Some(x), None) | (None, Some(x)) => Some(x),
            (None, None) => None,
        }
        .map(|(seq, p)| (seq, p.to_vec())))
    }

    /// The file's bytes in the store at `dir` (none if it does not exist).
    pub fn read(&self, host: &Host, dir: &Path) -> Result<Vec<u8>> {
        let path = dir.join(self.name);
        if !host.exists(&path) {
            return Ok(Vec::new());
        }
        host.read(&path)
            .map_err(|e| Error::io(format!("read of {}", path.display()), e))
    }

    /// Writes `payload` as state `seq` into its slot and syncs it.
    pub fn write(&self, host: &Host, dir: &Path, seq: u64, payload: &[u8]) -> Result<()> {
        let slot = self.encode_slot(seq, payload)?;
        let path = dir.join(self.name);
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
        Ok(())
    }
}

/// A path in a payload: bytes outside `!`..`~` and `%` written `%XX`, the empty path `/`.
pub(crate) fn escape(p: &[u8]) -> String {
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

pub(crate) fn unescape(s: &str) -> Result<Vec<u8>> {
    let bad = |why: String| Error::corrupt("state file", "path", why);
    if s == "/" {
        return Ok(Vec::new());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| bad("a cut %XX escape".into()))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad(format!("escape %{hex}")))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}
