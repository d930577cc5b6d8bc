//! Small writes that fill a chunk reach the disk once, as the chunk's block.
//!
//! A write shorter than a chunk is journaled as its bytes, and the chunk it leaves in memory
//! goes to a pack later (write-behind or the checkpoint). A stream of such writes, as an NFS
//! client sends (fuse-nfs: 4 KiB WRITEs) or an `O_DIRECT` writer, so put every byte on the
//! disk twice. But while a chunk's run of `Write` records is still the tail of the journal's
//! buffer (nothing appended after it, none of it written to the file yet), nothing can have
//! seen those records: once the run fills the chunk, the chunk is written to a pack and the
//! run replaced by one `PutChunks` record naming the block (`Journal::retract_to`).
//!
//! Only a stream: the run's writes follow one another and end at the chunk's end, having
//! written at least half of it. Or, at an `fsync` (an NFS COMMIT), a run that ends at the
//! file's end in its last chunk and wrote at least half of what that chunk holds: a small
//! file written in pieces and then committed, as NFS clients write one and close it. The
//! chunk goes to a pack as the file's tail block (`Put::Tail`) before the journal is synced,
//! where the sync would have made the run's bytes durable and the checkpoint then written
//! them again; but only when that sync syncs the packs anyway (some other record names a
//! block not yet synced). Otherwise the block would add a sync of the packs to the fsync,
//! on ext4 a commit of the host's journal for the pack's new block: 7 ms at the median
//! beside another cube's bulk writer, against 0.3 ms for the journal's overwrite alone
//! (`bench/cubes`, WHAT=fsync, 2026-12-07). The half keeps an appender that syncs often (a
//! log) from rewriting its chunk at every sync. Small writes here and there in a buffered chunk (a random
//! overwrite, the kernel writing a dirty page back) stay in memory and in the journal as
//! before: writing the chunk's 64 KiB for each would multiply what they cost.
//!
//! Replaying that record leaves what replaying the run did. The run's records touch only
//! this chunk of this file, the file's size and its times. The block is the whole chunk as
//! the run left it (what it held before the run does not matter); the size after the run is
//! at least the chunk's end, which is what `PutChunks` sets it to at least; and both kinds of
//! record set mtime to their time and ctime to at least it, the record carrying the run's
//! last. Any other record (another file's, a `setattr` of this one) ends the run, and so
//! does a journal write or sync (the bytes left the buffer), a checkpoint (a new journal)
//! and a `writeback` volume (its `PutChunks` may outlive their blocks in a crash, and replay
//! then keeps the chunk's older bytes, which the run's records would have replaced).

use crate::error::FsResult;
use crate::fs::{write_ahead, write_tail, Chunk, Fs, Ino, Put, WrittenAhead};
use crate::inode::{CHUNK, INLINE_MAX};
use crate::inode::Ts;
use crate::journal::Record;

/// Journal bytes `from..upto` of journal `journal`: `Write` records of chunk `idx` of `ino`
/// only, appended back to back, for writes one after another over bytes `start..end` of
/// the chunk.
pub(crate) struct ChunkRun {
    journal: u64,
    ino: Ino,
    idx: u64,
    from: u64,
    upto: u64,
    start: u64,
    end: u64,
    /// The run's last write's time, which its record carries.
    time: Ts,
}

/// Bytes of its chunk a run must have written to be replaced: a stream's, not a few pages'.
const RUN_MIN: u64 = CHUNK / 2;

impl Fs {
    /// After a write of bytes `at..at + len` of chunk `idx` of `ino` whose records took the
    /// journal from `before` to its current length: extends or starts the chunk's run, and
    /// replaces it with the chunk's block if the run is a stream that filled the chunk.
    pub(crate) fn chunk_written(&mut self, ino: Ino, idx: u64, at: u64, len: u64, before: u64, now: Ts) -> FsResult<()> {
        assert!(at + len <= CHUNK, "a write within one chunk");
        let Some(j) = self.vol.journal.as_ref() else {
            return Ok(());
        };
        let (journal, upto) = (j.id(), j.len);
        if upto == before || !self.keeps_runs() {
            // Nothing journaled (an unlinked file), or a volume whose records must stay.
            return Ok(());
        }
        let run = match self.chunk_run.take() {
            Some(r) if (r.journal, r.ino, r.idx, r.upto, r.end) == (journal, ino, idx, before, at) => {
                ChunkRun { upto, end: at + len, time: now, ..r }
            }
            _ => ChunkRun { journal, ino, idx, from: before, upto, start: at, end: at + len, time: now },
        };
        let stream = run.end == CHUNK && run.end - run.start >= RUN_MIN;
        let full = matches!(self.node(ino)?.chunks.get(&idx), Some(Chunk::Buf(b)) if b.len() as u64 == CHUNK);
        if !(stream && full) {
            self.chunk_run = Some(run);
            return Ok(());
        }
        self.replace_run(run, Put::Ahead)
    }

    /// Whether runs may be replaced here: not where the records must stay (a volume that
    /// journals data, or writes back: see the module's comment) or there is no journal.
    pub(crate) fn keeps_runs(&self) -> bool {
        self.journaled && !self.journal_data && !self.writeback
    }

    /// Before an `fsync`'s journal sync (`Fs::sync_begin`): the run in progress, if it is a
    /// small file's tail written in pieces (see the module's comment), goes to a pack in
    /// place of its records.
    pub(crate) fn settle_run(&mut self) -> FsResult<()> {
        let Some(run) = self.chunk_run.take() else {
            return Ok(());
        };
        // Only if this sync syncs the packs anyway: otherwise the block would cost it a sync
        // of the packs before the journal's, on ext4 a commit of the host's own journal.
        if !self.keeps_runs() || self.vol.forest.store.synced_through(self.named_writes) {
            return Ok(());
        }
        let Ok(n) = self.node(run.ino) else {
            return Ok(());
        };
        let held = match n.chunks.get(&run.idx) {
            Some(Chunk::Buf(b)) => b.len() as u64,
            _ => return Ok(()),
        };
        let base = run.idx * CHUNK;
        let tail = n.inode.size.checked_sub(base) == Some(held)
            && held < CHUNK
            && n.inode.size > INLINE_MAX as u64
            && run.end == held
            && (run.end - run.start) * 2 >= held;
        if tail {
            self.replace_run(run, Put::Tail)?;
        }
        Ok(())
    }

    /// Writes the chunk of `run` to a pack (whole, or as the file's tail) and puts one
    /// `PutChunks` record in the run's place; leaves everything as it was where that cannot
    /// be done.
    fn replace_run(&mut self, run: ChunkRun, how: Put) -> FsResult<()> {
        let Some(target) = self.target(run.ino) else {
            return Ok(());
        };
        // Only if the run can still be taken back: checked before the block is written.
        let j = self.vol.journal.as_ref().expect("a run is in a journal");
        if j.id() != run.journal || j.len != run.upto || !j.can_retract_to(run.from) {
            return Ok(());
        }
        // Written from the chunk's buffer itself (no copy of it).
        let store = &self.vol.forest.store;
        let written = match (self.node(run.ino)?.chunks.get(&run.idx), how) {
            (Some(Chunk::Buf(b)), Put::Ahead) => write_ahead(store, run.ino, run.idx * CHUNK, b),
            (Some(Chunk::Buf(b)), Put::Tail) if b.iter().any(|x| *x != 0) => write_tail(store, b)
                .map(|(p, sums)| WrittenAhead { first: run.idx, sums: vec![(p.addr, sums)], chunks: vec![Some(p)] }),
            (Some(Chunk::Buf(_)), Put::Tail) => return Ok(()), // zeros: a hole, not a tail block
            _ => unreachable!("a run's chunk is in memory"),
        };
        let ahead = match written {
            Ok(a) => a,
            // No room for the block, say: the run stays, journaled as it is.
            Err(e) => {
                log::debug!("chunk {} of inode {}: not written ahead ({e})", run.idx, run.ino);
                return Ok(());
            }
        };
        assert!(ahead.first == run.idx && ahead.chunks.len() == 1, "one chunk written ahead");
        let j = self.vol.journal.as_mut().expect("a run is in a journal");
        assert!(j.retract_to(run.from), "a run checked retractable could not be taken back");
        self.io.journal = self.io.journal.saturating_sub(run.upto - run.from);
        self.vol.fresh_sums.extend(ahead.sums);
        let chunks = ahead.chunks;
        let now = run.time;
        if let Err(e) = self.op_put_chunks(run.ino, run.idx, &chunks, now, how) {
            // The run is out of the journal and its block not in the file: memory holds
            // what the journal does not, so it must never reach a checkpoint.
            self.fail(&format!("chunk {} of inode {}: its block could not replace its writes ({e})", run.idx, run.ino));
            return Err(e);
        }
        self.log(|| {
            Some(Record::PutChunks {
                ino: target,
                first: run.idx,
                chunks,
                time: now,
                unordered: false,
                tail: how == Put::Tail,
            })
        })
    }
}
