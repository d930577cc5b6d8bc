//! The journal: every change the filesystem acknowledges is appended here as a logical
//! record before it is answered; `fsync` makes the file durable. A journal belongs to one
//! checkpoint generation (`journal/<gen>.log`); the next checkpoint covers all its records
//! and deletes it. Recovery replays the records of the newest checkpoint's journal, stopping
//! at the first record that is torn or fails its checksum.
//!
//! One operation may need several records (a write: its unaligned head as bytes, its whole
//! chunks as pointers, its tail as bytes). They are replayed all or none: every record but
//! the last of an operation carries the `MORE` flag, and recovery drops an operation whose
//! last record is missing, so a power cut never leaves half a write.
//!
//! A store keeps two journal files, `journal/0.log` and `journal/1.log`, and the journal of
//! generation g is written over the file of g - 2 (same parity), zeros ahead of it: a sync
//! then overwrites bytes the host filesystem has already allocated, which costs it no
//! metadata commit (fdatasync of a 4 KiB overwrite ~0.25 ms vs ~0.85 ms for an append on
//! ext4 here).
//!
//! File layout (version 4): header (magic `SCIONJL1`, version u32, generation u64, store id
//! 16 bytes, nonce u64, crc32c u32), then records: `len u32 (bit 31: MORE), tag u32 (the
//! nonce's low half), crc32c u32 (of len, tag and payload), payload`, then whatever the file
//! held before (zeros, or an earlier journal's records, whose tag differs). Versions 1-3 (one
//! file per generation, `journal/<generation as 16 hex digits>.log`; no nonce, no tag; 1 has
//! no MORE flag) are read in stores of format 3 and older.

pub use crate::records::journal::{Record, Target};
use scion_store::codec::Writer;
use scion_store::host::{HostFile, OpenMode};
use scion_store::{Error, Host, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"SCIONJL1";
/// Version 3 added the clone and snapshot records (types 13, 14); version 4 a nonce in the
/// header and its tag in every record's frame, so a journal file can be reused (store
/// format 4). Versions 1-3 are read in stores of format 3 and older. Older builds refuse a
/// newer journal instead of ending it at a record they do not know.
const VERSION: u32 = 4;
/// Flag in a record's length field: more records of the same operation follow.
const MORE: u32 = 1 << 31;
/// magic, version, generation, store id, nonce, crc32c.
const HEADER_LEN: usize = 8 + 4 + 8 + 16 + 8 + 4;
/// Versions 1-3: no nonce.
const OLD_HEADER_LEN: usize = 8 + 4 + 8 + 16 + 4;
/// length, tag, crc32c.
pub const FRAME_LEN: usize = 12;
/// Versions 1-3: length, crc32c.
const OLD_FRAME_LEN: usize = 8;
/// The file is extended with zeros by a quarter of what it holds, at least `GROW_MIN` and at
/// most `GROW_MAX`, rounded up to a multiple of `GROW_MIN`.
const GROW_MIN: u64 = 64 << 10;
const GROW_MAX: u64 = 1 << 20;
/// A reused file longer than this is cut to it.
const REUSE_LIMIT: u64 = 64 << 20;
/// Reading a journal reads the file this much at a time, as far as its records go.
const READ_STEP: usize = 1 << 20;
/// Bounds one record, so a garbled length cannot ask for a huge buffer.
pub const MAX_RECORD: usize = 64 << 20;
const BUFFER_FLUSH: usize = 4 << 20;
/// A sync that makes more than this durable writes no zeros ahead (`prepare_sync`). Zeros
/// ahead save the host's metadata commit (~0.6 ms on ext4 here) on each small sync that
/// follows; a burst that grows the journal by megabytes between syncs (an untar: about 2 MiB
/// each half second) would write over them at once, after the disk had taken them: 4-10 MB
/// of zeros, a quarter of the journal, in `bench/write-amp`'s untar row.
const ZEROS_BURST: u64 = 256 << 10;

/// Where the journal of `generation` is, in a store of format version `format`: from
/// version 4 one of two files picked by the generation's parity and reused (`journal/0.log`,
/// `journal/1.log`); before, one file per generation.
pub fn journal_path(dir: &Path, generation: u64, format: u32) -> PathBuf {
    if format >= 4 {
        dir.join("journal").join(format!("{}.log", generation % 2))
    } else {
        dir.join("journal").join(format!("{generation:016x}.log"))
    }
}

/// True for the name of a version 1-3 journal file (one per generation).
pub fn is_legacy_journal_name(name: &str) -> bool {
    name.len() == 20 && name.ends_with(".log") && name[..16].bytes().all(|b| b.is_ascii_hexdigit())
}

fn header(version: u32, generation: u64, store_id: &[u8; 16], nonce: u64) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(MAGIC).u32(version).u64(generation).raw(store_id);
    if version >= 4 {
        w.u64(nonce);
    }
    let crc = crc32c::crc32c(&w.buf);
    w.u32(crc);
    w.finish()
}

/// A record's frame, version 4: length (bit 31: MORE), the journal's tag (the low half of
/// its nonce: bytes of an earlier journal in the same file carry another), and a crc32c of
/// the length, tag and payload.
pub fn frame(payload: &[u8], more: bool, tag: u32) -> [u8; FRAME_LEN] {
    let len = (payload.len() as u32 | if more { MORE } else { 0 }).to_le_bytes();
    let tag = tag.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&len), &tag), payload);
    let mut f = [0; FRAME_LEN];
    f[..4].copy_from_slice(&len);
    f[4..8].copy_from_slice(&tag);
    f[8..].copy_from_slice(&crc.to_le_bytes());
    f
}

/// The journal being appended to.
pub struct Journal {
    file: Arc<dyn HostFile>,
    tag: u32,
    /// Bytes in the file: where the buffer goes next.
    written: u64,
    /// Bytes of the file already written once (by an earlier journal, or zeros this one
    /// wrote ahead): overwriting them changes no file size, so their fdatasync needs no
    /// metadata commit from the host filesystem.
    allocated: u64,
    buf: Vec<u8>,
    /// Bytes in the file plus the buffer.
    pub len: u64,
    /// Bytes of the file a completed sync made durable.
    synced: u64,
    /// Tells this journal's syncs from another's (`JournalSync` outlives a checkpoint).
    id: u64,
    /// Length after the records it was created with (a checkpoint's carried records).
    pub head_len: u64,
    /// Zeros written ahead of the records so far (`prepare_sync`): bytes the host was given
    /// that no record counts.
    zeros_written: u64,
    /// While a checkpoint's packs sync without the engine lock: every record appended
    /// since it was folded (payload, `more`), which its commit copies into the next journal.
    pub window: Option<Vec<(Vec<u8>, bool)>>,
    /// Records appended so far (taking records back does not lower it): each record's
    /// serial number.
    appended: u64,
    /// The last records' ends and serials, newest last (at most `TAIL_KEPT`): which record
    /// the journal ends with, also after some were taken back (`pieces.rs`).
    tail: std::collections::VecDeque<(u64, u64)>,
}

/// Records whose ends and serials a journal keeps (`Journal::tail`).
const TAIL_KEPT: usize = 64;

/// An fdatasync of the journal that `Journal::prepare_sync` found needed, to be run without
/// the engine lock held (`JournalSync::run`) and reported back with `Journal::synced`.
pub struct JournalSync {
    file: Arc<dyn HostFile>,
    upto: u64,
    journal: u64,
}

impl JournalSync {
    pub fn run(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("journal fsync", e))
    }
}

static JOURNAL_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Journal {
    /// Creates the (empty) journal of `generation` and makes its existence durable.
    pub fn create(host: &Host, dir: &Path, generation: u64, store_id: &[u8; 16]) -> Result<Journal> {
        Self::create_with(host, dir, generation, store_id, &[], &[])
    }

    /// `create` with records (encoded, with their `more` flags) at its head, written and
    /// synced with the header: one fdatasync for all (a checkpoint's carried records, each a
    /// whole operation, then those of the requests served while its packs synced, `rest`).
    ///
    /// The file of generation - 2 is reused: it is no longer needed once the superblock of
    /// generation - 1 is durable, and the superblock naming this one is written only after
    /// this returns. Its old bytes stay past this journal's end; their frames carry another
    /// nonce's tag and fail this journal's checksums, so reading stops at them.
    pub fn create_with(
        host: &Host,
        dir: &Path,
        generation: u64,
        store_id: &[u8; 16],
        head: &[(&[u8], bool)],
        rest: &[(&[u8], bool)],
    ) -> Result<Journal> {
        let path = journal_path(dir, generation, scion_store::FORMAT_VERSION);
        let existed = host.exists(&path);
        let file = host
            .open(&path, OpenMode::Create)
            .map_err(|e| Error::io(format!("creation of {}", path.display()), e))?;
        let mut allocated = file
            .len()
            .map_err(|e| Error::io(format!("size of {}", path.display()), e))?;
        if allocated > REUSE_LIMIT {
            // A burst left it long; keep what the next journals are likely to need.
            file.set_len(REUSE_LIMIT)
                .map_err(|e| Error::io(format!("truncation of {}", path.display()), e))?;
            allocated = REUSE_LIMIT;
        }
        let nonce: u64 = rand::random();
        let h = header(VERSION, generation, store_id, nonce);
        let mut j = Journal {
            file,
            tag: nonce as u32,
            written: 0,
            allocated,
            buf: h,
            len: 0,
            synced: 0,
            id: JOURNAL_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            head_len: 0,
            zeros_written: 0,
            window: None,
            appended: 0,
            tail: Default::default(),
        };
        j.len = j.buf.len() as u64;
        for (payload, more) in head {
            j.append_encoded(payload, *more)?;
        }
        j.head_len = j.len;
        for (payload, more) in rest {
            j.append_encoded(payload, *more)?;
        }
        j.sync()?;
        if !existed {
            scion_store::sync_dir(host, &dir.join("journal"))?;
        }
        Ok(j)
    }

    /// Gives back the space past what was written (the zeros written ahead, a reused file's
    /// old bytes): a store at rest keeps no journal space it does not use.
    pub fn trim(&mut self) -> Result<()> {
        self.flush()?;
        self.file
            .set_len(self.written)
            .map_err(|e| Error::io("truncation of the journal", e))?;
        self.allocated = self.written;
        Ok(())
    }

    /// Appends a record; `more`: further records of the same operation follow.
    pub fn append(&mut self, rec: &Record, more: bool) -> Result<()> {
        self.append_encoded(&rec.encode(), more)
    }

    /// `append` of a record encoded beforehand (`Record::encode`).
    pub fn append_encoded(&mut self, payload: &[u8], more: bool) -> Result<()> {
        assert!(payload.len() <= MAX_RECORD, "journal record of {} bytes", payload.len());
        let (buf_len, len) = (self.buf.len(), self.len);
        self.buf.extend_from_slice(&frame(payload, more, self.tag));
        self.buf.extend_from_slice(payload);
        self.len += (FRAME_LEN + payload.len()) as u64;
        if self.buf.len() >= BUFFER_FLUSH {
            if let Err(e) = self.flush() {
                // The caller is told the change failed: its record must not become durable
                // with a later flush.
                self.buf.truncate(buf_len);
                self.len = len;
                return Err(e);
            }
        }
        if let Some(w) = &mut self.window {
            w.push((payload.to_vec(), more));
        }
        self.appended += 1;
        if self.tail.len() == TAIL_KEPT {
            self.tail.pop_front();
        }
        self.tail.push_back((self.len, self.appended));
        Ok(())
    }

    /// The serial number of the record the journal ends with (records are numbered as they
    /// are appended; one taken back leaves its number unused), if known.
    pub fn last_serial(&self) -> Option<u64> {
        self.tail.back().filter(|(end, _)| *end == self.len).map(|(_, n)| *n)
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            // On failure nothing advances: the next flush writes the same bytes again.
            self.file
                .write_all_at(&self.buf, self.written)
                .map_err(|e| Error::io("journal write", e))?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    /// Makes every appended record durable.
    pub fn sync(&mut self) -> Result<()> {
        if let Some(s) = self.prepare_sync()? {
            s.run()?;
            self.synced(&s);
        }
        Ok(())
    }

    /// The part of `sync` that needs the journal itself: writes the buffer out and says what
    /// an fdatasync must cover (`None`: everything appended is durable already).
    pub fn prepare_sync(&mut self) -> Result<Option<JournalSync>> {
        self.flush()?;
        if self.written <= self.synced {
            return Ok(None);
        }
        if self.written > self.allocated && self.written - self.synced <= ZEROS_BURST {
            // This sync commits a new file size anyway: write zeros ahead, so the syncs
            // that follow only overwrite (a quarter of the cost on ext4 here). Only an
            // optimisation: on a full host the records are synced without it. In proportion
            // to the journal, so that a fresh file's few records do not cost the disk a MiB
            // of zeros (1.1 of the 3.8 MB beyond the data in bench/write-amp's clone row
            // when it was always 0.5-1.5 MiB); a long one still grows in large steps.
            // Not for a sync of a burst (`ZEROS_BURST`): the records would soon overwrite the
            // zeros, so the disk would get the burst's bytes twice.
            let ahead = (self.written / 4).clamp(GROW_MIN, GROW_MAX);
            let end = (self.written + ahead).next_multiple_of(GROW_MIN);
            match self
                .file
                .write_all_at(&vec![0; (end - self.written) as usize], self.written)
            {
                Ok(()) => {
                    self.zeros_written += end - self.written;
                    self.allocated = end;
                }
                Err(e) => log::debug!("journal zeros ahead: {e}"),
            }
        }
        Ok(Some(JournalSync {
            file: self.file.clone(),
            upto: self.written,
            journal: self.id,
        }))
    }

    /// `s` (prepared by this journal or by one a checkpoint has since replaced) completed.
    pub fn synced(&mut self, s: &JournalSync) {
        if s.journal == self.id {
            self.synced = self.synced.max(s.upto);
        }
    }

    /// Tells this journal from another (a checkpoint replaces the journal).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether `retract_to(len)` would take the records back.
    pub fn can_retract_to(&self, len: u64) -> bool {
        len >= self.written && len >= self.head_len && len <= self.len && self.window.is_none()
    }

    /// Takes back every record appended after `len` (a length this journal had, at a record's
    /// boundary), if none of those bytes has left the buffer and no checkpoint is copying
    /// records (`window`): bytes never written anywhere, so nothing can have seen them.
    /// Returns whether it did. For a run of records that a shorter one replaces (`retract.rs`).
    pub fn retract_to(&mut self, len: u64) -> bool {
        if !self.can_retract_to(len) {
            return false;
        }
        let cut = (self.len - len) as usize;
        assert!(cut <= self.buf.len(), "retracting bytes already written");
        self.buf.truncate(self.buf.len() - cut);
        self.len = len;
        while self.tail.back().is_some_and(|(end, _)| *end > len) {
            self.tail.pop_back();
        }
        true
    }

    /// Zeros written ahead of the records so far (`prepare_sync`).
    pub fn zeros_written(&self) -> u64 {
        self.zeros_written
    }

    /// Bytes appended but not yet written to the file (the buffer).
    pub fn unwritten(&self) -> u64 {
        self.len - self.written
    }

    pub fn has_unsynced(&self) -> bool {
        self.len > self.synced
    }

    /// The tag every record frame of this journal carries.
    pub fn tag(&self) -> u32 {
        self.tag
    }
}

/// What reading a journal found.
pub struct JournalContents {
    /// The records of the operations that are whole, in order.
    pub records: Vec<Record>,
    /// For each record, whether it begins an operation.
    pub op_start: Vec<bool>,
    /// Bytes after the last whole operation that were written for this journal but are not
    /// usable (a torn tail after a crash, or damage); 0 when it ends cleanly.
    pub tail_bytes: u64,
    pub tail_reason: Option<String>,
}

/// A journal file read as far as parsing needs it: a reused file is mostly an earlier
/// journal's bytes, which need not be read.
struct Window {
    file: Arc<dyn HostFile>,
    size: u64,
    data: Vec<u8>,
}

impl Window {
    /// Makes `data` hold the file's first `end` bytes, or all of it if it is shorter;
    /// false if it is shorter.
    fn need(&mut self, end: usize) -> std::io::Result<bool> {
        if self.data.len() < end && (self.data.len() as u64) < self.size {
            let to = (end.max(self.data.len() + READ_STEP) as u64).min(self.size) as usize;
            let from = self.data.len();
            self.data.resize(to, 0);
            self.file.read_exact_at(&mut self.data[from..], from as u64)?;
        }
        Ok(self.data.len() >= end)
    }
}

/// Reads the journal of `generation` in a store of format version `format`. A missing file
/// or a bad header is an error (the checkpoint names this journal, so it must exist); a bad
/// record ends the journal there.
pub fn read(host: &Host, dir: &Path, generation: u64, store_id: &[u8; 16], format: u32) -> Result<JournalContents> {
    let path = journal_path(dir, generation, format);
    let io_err = |e| Error::io(format!("read of journal {}", path.display()), e);
    let file = host.open(&path, OpenMode::Read).map_err(io_err)?;
    let size = file.len().map_err(io_err)?;
    let mut w = Window {
        file,
        size,
        data: Vec::new(),
    };
    let bad_header = || {
        Error::corrupt(
            "journal",
            path.display(),
            "bad header (wrong magic, version, generation, store or checksum)",
        )
    };
    // Version 4 journals (one per file reused by parity) have a nonce; 1-3 (one file per
    // generation) do not, and frame records without the tag.
    let (header_len, tag) = if format >= 4 {
        if !w.need(HEADER_LEN).map_err(io_err)? {
            return Err(bad_header());
        }
        let nonce = u64::from_le_bytes(w.data[HEADER_LEN - 12..HEADER_LEN - 4].try_into().unwrap());
        if w.data[..HEADER_LEN] != header(VERSION, generation, store_id, nonce)[..] {
            return Err(bad_header());
        }
        (HEADER_LEN, Some(nonce as u32))
    } else {
        let known = [1, 2, 3].map(|v| header(v, generation, store_id, 0));
        if !w.need(OLD_HEADER_LEN).map_err(io_err)? || !known.iter().any(|h| w.data[..OLD_HEADER_LEN] == h[..]) {
            return Err(bad_header());
        }
        (OLD_HEADER_LEN, None)
    };
    let frame_len = if tag.is_some() { FRAME_LEN } else { OLD_FRAME_LEN };
    let mut pos = header_len;
    let mut records = Vec::new();
    let mut op_start = Vec::new();
    // End of the last whole operation: (bytes, records).
    let mut whole = (pos, 0);
    let mut more = false;
    let mut tail_reason = None;
    loop {
        if !w.need(pos + frame_len).map_err(io_err)? {
            if w.data.len() > pos {
                tail_reason = Some("torn record header".to_string());
            }
            break;
        }
        let f = &w.data[pos..pos + frame_len];
        let field = u32::from_le_bytes(f[..4].try_into().unwrap());
        let len = (field & !MORE) as usize;
        let crc = u32::from_le_bytes(f[frame_len - 4..].try_into().unwrap());
        if let Some(tag) = tag {
            // Zeros written ahead, or an earlier journal's records: the end.
            if u32::from_le_bytes(f[4..8].try_into().unwrap()) != tag || field == 0 {
                break;
            }
        }
        if len > MAX_RECORD || !w.need(pos + frame_len + len).map_err(io_err)? {
            tail_reason = Some(format!("record at byte {pos} is cut short"));
            break;
        }
        let payload = &w.data[pos + frame_len..pos + frame_len + len];
        let expect = match tag {
            Some(tag) => u32::from_le_bytes(frame(payload, field & MORE != 0, tag)[8..].try_into().unwrap()),
            None => crc32c::crc32c_append(crc32c::crc32c(&w.data[pos..pos + 4]), payload),
        };
        if expect != crc {
            tail_reason = Some(format!("record at byte {pos} fails its checksum"));
            break;
        }
        match Record::decode(payload) {
            Ok(r) => {
                op_start.push(!more);
                records.push(r);
            }
            Err(e) => {
                tail_reason = Some(format!("record at byte {pos} does not decode: {e}"));
                break;
            }
        }
        pos += frame_len + len;
        more = field & MORE != 0;
        if !more {
            whole = (pos, records.len());
        }
    }
    if records.len() > whole.1 {
        tail_reason.get_or_insert_with(|| "the last operation's records are incomplete".to_string());
        records.truncate(whole.1);
        op_start.truncate(whole.1);
    }
    // A version 1-3 file is this journal's alone: all of it after the last whole operation
    // is unusable. A reused file: the operation cut short and the frame that ended it.
    let tail_bytes = match (&tail_reason, tag) {
        (None, _) => 0,
        (Some(_), None) => size - whole.0 as u64,
        (Some(_), Some(_)) => ((pos + frame_len) as u64).min(size) - whole.0 as u64,
    };
    Ok(JournalContents {
        records,
        op_start,
        tail_bytes,
        tail_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::Patches;
    use crate::inode::Ts;

    #[test]
    fn carry_records_round_trip() {
        let mut p = Patches::default();
        p.write(4096, &[7; 16]);
        let t = Ts {
            sec: 1_700_000_000,
            nsec: 5,
        };
        let u = Ts {
            sec: 1_700_000_001,
            nsec: 6,
        };
        let target = Target::Path {
            ns: 3,
            names: vec![b"d3".to_vec(), b"f5".to_vec()],
        };
        for (size, atime, mtime, ctime) in [
            (None, None, Some(t), Some(t)),
            (Some(9), Some(u), Some(t), Some(u)),
            (None, None, None, Some(t)),
            (None, None, None, None),
        ] {
            let rec = Record::Carry {
                ino: target.clone(),
                size,
                atime,
                mtime,
                ctime,
                chunks: vec![(2, p.clone())],
            };
            let bytes = rec.encode();
            assert_eq!(Record::decode(&bytes).unwrap(), rec);
            // Every shorter prefix is refused, never misread.
            for cut in 0..bytes.len() {
                assert!(Record::decode(&bytes[..cut]).is_err());
            }
        }
        // A 16-byte overwrite with new mtime = ctime: what a checkpoint carries per file.
        let rec = Record::Carry {
            ino: target,
            size: None,
            atime: None,
            mtime: Some(t),
            ctime: Some(t),
            chunks: vec![(2, p)],
        };
        assert!(rec.encode().len() < 100, "{} bytes", rec.encode().len());
    }

    #[test]
    fn clone_and_snapshot_records_round_trip() {
        let t = Ts {
            sec: 1_700_000_000,
            nsec: 5,
        };
        let exclude_sets = [vec![], vec![vec![b"a".to_vec()], vec![b"b".to_vec(), b"c".to_vec()]]];
        let users = [(None, None), (Some(1001), None), (Some(1001), Some(100))];
        for ((masked_for, top_gid), excludes) in users.into_iter().zip(exclude_sets.into_iter().cycle()) {
            let rec = Record::Clone {
                src: Target::Path {
                    ns: 1,
                    names: vec![b"src".to_vec()],
                },
                parent: Target::Path { ns: 2, names: vec![] },
                name: b"new".to_vec(),
                excludes,
                origin: b"/mnt/src".to_vec(),
                ns: 7,
                oid: 42,
                time: t,
                masked_for,
                top_gid,
            };
            let bytes = rec.encode();
            assert_eq!(Record::decode(&bytes).unwrap(), rec);
            for cut in 0..bytes.len() {
                assert!(Record::decode(&bytes[..cut]).is_err());
            }
        }
        for (scheduled, masked_for) in [(false, None), (true, None), (false, Some(7)), (true, Some(1001))] {
            let rec = Record::Snapshot {
                dir: Target::Path {
                    ns: 3,
                    names: vec![b"d".to_vec()],
                },
                name: b"before-upgrade".to_vec(),
                origin: b"/mnt/d".to_vec(),
                ns: 9,
                time: t,
                scheduled,
                masked_for,
            };
            let bytes = rec.encode();
            assert_eq!(Record::decode(&bytes).unwrap(), rec);
            for cut in 0..bytes.len() {
                assert!(Record::decode(&bytes[..cut]).is_err());
            }
        }
    }

    fn sim() -> (Host, PathBuf) {
        let host: Host = Arc::new(scion_store::sim::SimHost::default());
        let dir = PathBuf::from("/s");
        host.create_dir_all(&dir.join("journal")).unwrap();
        (host, dir)
    }

    fn write_rec(n: u8) -> Record {
        Record::Write {
            ino: Target::Linked { ns: 1, oid: n as u64 },
            offset: n as u64 * 100,
            data: vec![n; n as usize * 10],
            time: Ts {
                sec: 1_700_000_000,
                nsec: n as u32,
            },
        }
    }

    fn offsets(recs: &[Record]) -> Vec<u64> {
        recs.iter()
            .map(|r| match r {
                Record::Write { offset, .. } => *offset,
                r => panic!("{r:?}"),
            })
            .collect()
    }

    /// A journal file is reused two generations later, and by a checkpoint retried after a
    /// crash (same generation, same file): reading stops at the old bytes, silently.
    #[test]
    fn reused_files_end_at_the_old_records() {
        let (host, dir) = sim();
        let id = [3u8; 16];
        let mut j = Journal::create(&host, &dir, 2, &id).unwrap();
        for n in 1..=9 {
            j.append(&write_rec(n), false).unwrap();
        }
        j.sync().unwrap();
        // Written ahead with zeros: the file is longer than the journal, by whole steps.
        let path = journal_path(&dir, 2, scion_store::FORMAT_VERSION);
        let size = host.open(&path, OpenMode::Read).unwrap().len().unwrap();
        assert!(size >= j.len + GROW_MIN && size % GROW_MIN == 0, "{size}");
        let c = read(&host, &dir, 2, &id, scion_store::FORMAT_VERSION).unwrap();
        assert_eq!(offsets(&c.records), (1..=9).map(|n| n * 100).collect::<Vec<_>>());
        assert!(c.tail_reason.is_none(), "{:?}", c.tail_reason);

        // Generation 4 over the same file, shorter: generation 2's later records remain past it.
        // The second attempt (a checkpoint retried after a crash) writes fewer records than
        // the first: the first's last one must not be read as the second's.
        for last in [7, 6] {
            let mut j = Journal::create(&host, &dir, 4, &id).unwrap();
            for n in 5..=last {
                j.append(&write_rec(n), n == 5).unwrap();
            }
            j.sync().unwrap();
            let c = read(&host, &dir, 4, &id, scion_store::FORMAT_VERSION).unwrap();
            assert_eq!(
                offsets(&c.records),
                (5..=last as u64).map(|n| n * 100).collect::<Vec<_>>()
            );
            assert_eq!((c.tail_reason, c.tail_bytes), (None, 0));
            // The file did not grow: the syncs only overwrote.
            assert_eq!(host.open(&path, OpenMode::Read).unwrap().len().unwrap(), size);
        }
        assert!(
            read(&host, &dir, 2, &id, scion_store::FORMAT_VERSION).is_err(),
            "the header names generation 4"
        );

        // A torn record of this journal is reported as such.
        let mut j = Journal::create(&host, &dir, 6, &id).unwrap();
        j.append(&write_rec(7), false).unwrap();
        j.append(&write_rec(8), false).unwrap();
        j.sync().unwrap();
        let f = host.open(&path, OpenMode::ReadWrite).unwrap();
        f.write_all_at(&[0xff], j.len - 3).unwrap();
        let c = read(&host, &dir, 6, &id, scion_store::FORMAT_VERSION).unwrap();
        assert_eq!(offsets(&c.records), vec![700]);
        assert!(c.tail_reason.unwrap().contains("checksum"));
        assert!(c.tail_bytes > 0);
    }

    /// A small sync past the file's end writes zeros ahead, so the next ones overwrite; a
    /// sync of a burst does not, since its records would land on the zeros at once. Either
    /// way the journal reads back whole.
    #[test]
    fn zeros_ahead_of_small_syncs_only() {
        let (host, dir) = sim();
        let id = [5u8; 16];
        let path = journal_path(&dir, 2, scion_store::FORMAT_VERSION);
        let size = |host: &Host| host.open(&path, OpenMode::Read).unwrap().len().unwrap();
        let mut j = Journal::create(&host, &dir, 2, &id).unwrap();
        let after_create = size(&host);
        assert!(after_create >= j.len + GROW_MIN, "a small first sync writes zeros ahead");
        let mut n = 0u64;
        while j.len < after_create + ZEROS_BURST + (1 << 20) {
            n += 1;
            j.append(&write_rec((n % 200 + 1) as u8), false).unwrap();
        }
        j.sync().unwrap();
        assert_eq!(size(&host), j.len, "a burst's sync writes no zeros ahead");
        j.append(&write_rec(9), false).unwrap();
        j.sync().unwrap();
        assert!(size(&host) >= j.len + GROW_MIN, "a small sync after it does again");
        let c = read(&host, &dir, 2, &id, scion_store::FORMAT_VERSION).unwrap();
        assert_eq!(c.records.len() as u64, n + 1);
        assert!(c.tail_reason.is_none(), "{:?}", c.tail_reason);
    }

    /// A store of format 3 has one journal file per generation, version 3, frames without a
    /// tag: it is still read.
    #[test]
    fn version_3_journals_are_read() {
        let (host, dir) = sim();
        let id = [4u8; 16];
        let mut bytes = header(3, 7, &id, 0);
        for (n, more) in [(1, true), (2, false), (3, true)] {
            let payload = write_rec(n).encode();
            let len = (payload.len() as u32 | if more { MORE } else { 0 }).to_le_bytes();
            bytes.extend_from_slice(&len);
            bytes.extend_from_slice(&crc32c::crc32c_append(crc32c::crc32c(&len), &payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
        }
        let path = journal_path(&dir, 7, 3);
        assert!(is_legacy_journal_name(path.file_name().unwrap().to_str().unwrap()));
        host.open(&path, OpenMode::Create)
            .unwrap()
            .write_all_at(&bytes, 0)
            .unwrap();
        let c = read(&host, &dir, 7, &id, 3).unwrap();
        assert_eq!(offsets(&c.records), vec![100, 200]);
        assert_eq!(c.op_start, vec![true, false]);
        assert!(c.tail_reason.unwrap().contains("incomplete"));
        // The same bytes are not a format 4 journal.
        assert!(read(&host, &dir, 7, &id, 4).is_err());
    }
}
