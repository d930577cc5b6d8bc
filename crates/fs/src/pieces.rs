//! Long writes off the chunk grid: the write that brings the rest of a chunk puts the chunk
//! in a pack whole, and its other piece is journaled once at most (issue 37).
//!
//! The kernel writes a large file back in 1 MiB WRITEs. One write-back of an odd size (the
//! kernel caught the writer in the middle of a megabyte) shifts every later WRITE off the
//! 64 KiB chunk grid, so each begins and ends inside a chunk, and each such chunk gets its
//! two pieces from two WRITEs, taken under the engine lock in either order. Each piece used
//! to be journaled as bytes and the chunk then written again by the checkpoint: 35-64 MB of
//! journal for a GiB, in about half the runs of `bench/write-amp`.
//!
//! Now each piece a long write journals is noted (`Pieces`), with where its record is. When
//! a later long write of the same file brings the rest of that chunk, the chunk goes to a
//! pack whole (at its place in the file's stream, so the file stays contiguous) and into
//! that write's `PutChunks` record with its whole chunks; its own piece is not journaled.
//! If the first piece's record is still the journal's last, in its buffer (nothing else
//! appended since, no checkpoint copying records), it is taken back, and the new write's
//! records continue the operation it ended: recovery replays both writes or neither, as
//! the block holds bytes of both. A noted piece whose record is last and which a long write
//! of the same file does not touch *floats*: taken back and journaled again (from memory,
//! with that write's time) as the last record of that write's operation, so that the write
//! that completes its chunk later can still take it back. The kernel's WRITEs come from
//! several threads, so a stream's k, k+2, k+1 is common: k's tail floats over k+2's records
//! until k+1 comes. A piece stays journaled once something else comes between (another
//! file's record, a sync, a checkpoint) or when the later write came first (its head
//! piece is then in the middle of its records).
//!
//! Replaying stays right. Without a take-back the first piece's record comes before the
//! block's, and the block is the chunk as both writes left it. With one, the writes are one
//! operation, whole or not at all, and what the operation leaves is the state after its
//! last write (a floated piece's bytes are the chunk's then, its time that write's). A
//! record is known by its serial number (`Journal::last_serial`), not only by its place: a
//! record taken back by someone else and another appended in the same bytes is not it.
//! Not for volumes whose records must stay as written (`Fs::keeps_runs`).

use crate::error::FsResult;
use crate::fs::{write_ahead, Chunk, Fs, Ino};
use crate::inode::{Ts, CHUNK};
use crate::journal::{Record, Target};
use scion_store::BlockPtr;
use std::collections::HashMap;

/// Pieces noted at most; past it the notes start again (they only save writes).
const MAX_PIECES: usize = 256;

/// The pieces of chunks that long writes journaled, by file and chunk.
#[derive(Default)]
pub(crate) struct Pieces {
    by_chunk: HashMap<(Ino, u64), Piece>,
}

/// Bytes `start..end` of a chunk, journaled by a long write.
struct Piece {
    start: u64,
    end: u64,
    /// Where its record is (None: it was journaled as several, or not at all).
    record: Option<RecordAt>,
}

/// A record's place in a journal.
#[derive(Clone, Copy)]
pub(crate) struct RecordAt {
    journal: u64,
    from: u64,
    /// Its serial number (`Journal::last_serial`), which says where it ends too.
    serial: u64,
}

impl RecordAt {
    /// Whether it is `j`'s last record and can still be taken back.
    fn is_last_in(&self, j: &crate::journal::Journal) -> bool {
        j.id() == self.journal && j.last_serial() == Some(self.serial) && j.can_retract_to(self.from)
    }
}

impl Pieces {
    /// Forgets every piece (a checkpoint folded them into blocks).
    pub(crate) fn clear(&mut self) {
        self.by_chunk.clear();
    }
}

/// What a piece of a long write became.
pub(crate) enum Completed {
    /// Nothing: journal it.
    No,
    /// Its chunk, whole, in a pack (`None`: all zeros); the record of the chunk's other piece,
    /// if it may be taken back.
    Chunk(Option<BlockPtr>, Option<RecordAt>),
}

impl Fs {
    /// For the piece `bytes` of a long write at `at` (within one chunk, touching the chunk's
    /// start or end): if a noted piece and it fill the chunk, which memory holds as bytes,
    /// writes the chunk with this piece laid over it to a pack. The caller installs the
    /// block (`op_put_chunks`) and journals it in place of the piece.
    pub(crate) fn complete_chunk(&mut self, ino: Ino, at: u64, bytes: &[u8]) -> FsResult<Completed> {
        let (idx, start) = (at / CHUNK, at % CHUNK);
        let end = start + bytes.len() as u64;
        assert!(end <= CHUNK && !bytes.is_empty(), "a piece within one chunk");
        if !self.keeps_runs() || self.replaying {
            return Ok(Completed::No);
        }
        let Some(p) = self.pieces.by_chunk.get(&(ino, idx)) else {
            return Ok(Completed::No);
        };
        let fills = (start == 0 && end == p.start && p.end == CHUNK) || (p.start == 0 && p.end == start && end == CHUNK);
        if !fills {
            return Ok(Completed::No);
        }
        let Some(Chunk::Buf(held)) = self.node(ino)?.chunks.get(&idx) else {
            return Ok(Completed::No);
        };
        let mut whole = Vec::with_capacity(CHUNK as usize);
        whole.extend_from_slice(held);
        whole.resize(CHUNK as usize, 0);
        whole[start as usize..end as usize].copy_from_slice(bytes);
        let ahead = match write_ahead(&self.vol.forest.store, ino, idx * CHUNK, &whole) {
            Ok(a) => a,
            // No room for the block, say: the piece is journaled as before.
            Err(e) => {
                log::debug!("chunk {idx} of inode {ino}: not completed in a pack ({e})");
                return Ok(Completed::No);
            }
        };
        assert!(ahead.first == idx && ahead.chunks.len() == 1, "one chunk written");
        self.vol.fresh_sums.extend(ahead.sums);
        let record = self.pieces.by_chunk.remove(&(ino, idx)).and_then(|p| p.record);
        log::trace!("chunk {idx} of inode {ino} completed by a long write's piece");
        Ok(Completed::Chunk(ahead.chunks[0], record))
    }

    /// Notes the piece `at..upto` (within one chunk) a long write journaled as one record,
    /// at `record`.
    pub(crate) fn note_piece(&mut self, ino: Ino, at: u64, upto: u64, record: Option<RecordAt>) {
        assert!(at < upto && (upto - 1) / CHUNK == at / CHUNK, "a piece within one chunk");
        if !self.keeps_runs() || self.replaying {
            return;
        }
        if self.pieces.by_chunk.len() >= MAX_PIECES {
            self.pieces.clear();
        }
        let (idx, start) = (at / CHUNK, at % CHUNK);
        let piece = Piece { start, end: start + (upto - at), record };
        self.pieces.by_chunk.insert((ino, idx), piece);
    }

    /// After a long write of `ino` put chunks `put` (whole), among them the chunks of noted
    /// pieces whose records are `done`: takes back, from the journal's end, each record
    /// that is one of those, or a noted piece of `ino` in `put` (the chunk it lay in is
    /// replaced), or one whose chunk memory still holds as bytes. Returns the last kind's
    /// file ranges, in journal order: they *float*, journaled again after the write's
    /// records as the last of its operation (`journal_piece_again`), so that the write that
    /// completes their chunks later can still take them back. (A stream's WRITEs taken k,
    /// k+2, k+1: k's tail floats over k+2's records until k+1 brings the rest.)
    pub(crate) fn take_back_trailing(&mut self, ino: Ino, put: std::ops::Range<u64>, done: &[RecordAt]) -> Vec<(u64, u64)> {
        let mut floats = Vec::new();
        while let Some(j) = self.vol.journal.as_ref() {
            if let Some(&r) = done.iter().find(|r| r.is_last_in(j)) {
                assert!(self.take_back(r), "a last record could not be taken back");
                continue;
            }
            let held = |idx: u64, end: u64| match self.node(ino).map(|n| n.chunks.get(&idx)) {
                Ok(Some(Chunk::Buf(b))) => b.len() as u64 >= end,
                _ => false,
            };
            let found = self.pieces.by_chunk.iter().find(|((i, idx), p)| {
                *i == ino
                    && p.record.as_ref().is_some_and(|r| r.is_last_in(j))
                    && (put.contains(idx) || held(*idx, p.end))
            });
            let Some((&(_, idx), p)) = found else { break };
            let (r, range) = (p.record.expect("just found"), (idx * CHUNK + p.start, idx * CHUNK + p.end));
            assert!(self.take_back(r), "a last record could not be taken back");
            if put.contains(&idx) {
                self.pieces.by_chunk.remove(&(ino, idx));
                continue;
            }
            self.pieces.by_chunk.get_mut(&(ino, idx)).expect("just found").record = None;
            log::trace!("chunk {idx} of inode {ino}: its piece floats");
            floats.push(range);
        }
        floats.reverse();
        floats
    }

    /// Journals bytes `at..upto` of `ino` again (a floated piece, `take_back_trailing`) from
    /// its chunk in memory, with the time of the write it now ends, and notes it there.
    pub(crate) fn journal_piece_again(&mut self, ino: Ino, at: u64, upto: u64, more: bool, target: Option<Target>, now: Ts) -> FsResult<()> {
        let (idx, start, end) = (at / CHUNK, (at % CHUNK) as usize, (upto - at / CHUNK * CHUNK) as usize);
        let data = match self.node(ino)?.chunks.get(&idx) {
            Some(Chunk::Buf(b)) => b[start..end].to_vec(),
            _ => unreachable!("a floated piece's chunk is held as bytes (`take_back_trailing`)"),
        };
        let from = self.journal_len();
        self.log_part(more, || target.map(|ino| Record::Write { ino, offset: at, data, time: now }))?;
        let record = self.record_at(from);
        self.note_piece(ino, at, upto, record);
        Ok(())
    }

    /// Where the record just appended is, appended from journal length `from`.
    pub(crate) fn record_at(&self, from: u64) -> Option<RecordAt> {
        let j = self.vol.journal.as_ref()?;
        let serial = j.last_serial()?;
        (j.len > from).then_some(RecordAt { journal: j.id(), from, serial })
    }

    /// Takes back the record at `r` if it is still the journal's last and in its buffer;
    /// returns whether it did. The caller then journals at once the records that continue
    /// the operation it ended (see the module's comment).
    pub(crate) fn take_back(&mut self, r: RecordAt) -> bool {
        let Some(j) = self.vol.journal.as_mut() else {
            return false;
        };
        if !r.is_last_in(j) {
            return false;
        }
        let taken = j.len - r.from;
        assert!(j.retract_to(r.from), "a record checked retractable could not be taken back");
        self.io.journal = self.io.journal.saturating_sub(taken);
        true
    }
}
