//! The receiver's batches: checked frames sent to the daemon to apply (`Op::Apply`).

use crate::tree_cmds::{call, Located};
use scion::stream::Frame;
use scion_daemon::control::Op;

/// Sends frames to the daemon in batches (`Op::Apply`), which applies them in the engine.
/// Frames are sent only whole and checked; a batch is cut anywhere, a file open at a cut
/// goes on in the next batch (its `File` frame sent along). A thread sends the batches, one
/// at a time and in order, so the next batch is read, decompressed and checked while the
/// daemon applies the last; `wait` says how the last one went.
pub(super) struct Batcher<'a> {
    at: &'a Located,
    top: Vec<u8>,
    base: Option<Vec<u8>>,
    buf: Vec<u8>,
    /// The file open where `buf` begins, and where it ends.
    open: Option<Frame>,
    cur: Option<Frame>,
    applier: Option<Applier>,
    /// A pull's attachment (`Op::Apply`).
    attach: Option<u32>,
}

/// The thread that sends batches: one waits in `tx` while one is applied. It stops at the
/// first refusal, which `done` gives.
struct Applier {
    tx: std::sync::mpsc::SyncSender<Op>,
    done: std::thread::JoinHandle<Result<(), String>>,
}

impl Applier {
    fn start(at: Located) -> Applier {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Op>(1);
        let done = std::thread::spawn(move || rx.into_iter().try_for_each(|op| call(&at, &op).map(drop)));
        Applier { tx, done }
    }
}

/// Bytes of frames per batch (a control request holds 1 MiB).
const BATCH: usize = 768 << 10;
/// A data frame longer than this is cut in pieces to fit a batch.
const PIECE: usize = 256 << 10;

impl<'a> Batcher<'a> {
    /// A batcher of frames to apply below `top` (a store path), copies coming from `base`.
    pub(super) fn new(at: &'a Located, top: Vec<u8>, base: Option<Vec<u8>>, attach: Option<u32>) -> Batcher<'a> {
        Batcher {
            at,
            top,
            base,
            buf: Vec::new(),
            open: None,
            cur: None,
            applier: None,
            attach,
        }
    }

    /// Adds frame `f`, read as `raw` (checked already), to the batch.
    pub(super) fn push(&mut self, f: Frame, raw: &[u8]) -> Result<(), String> {
        if let Frame::Data { offset, bytes } = &f {
            if bytes.len() > PIECE {
                for (k, piece) in bytes.chunks(PIECE).enumerate() {
                    self.room(piece.len() + 32)?;
                    scion::stream::encode_data_into(offset + (k * PIECE) as u64, piece, 0, &mut self.buf);
                }
                return Ok(());
            }
        }
        self.room(raw.len())?;
        match &f {
            Frame::File { .. } => self.cur = Some(f),
            Frame::Data { .. } | Frame::Hole { .. } | Frame::Block { .. } => {}
            _ => self.cur = None,
        }
        // (A batch's frames are checked again by the daemon, their numbers are not.)
        self.buf.extend_from_slice(raw);
        Ok(())
    }

    /// Sends the batch if `n` more bytes would not fit in it.
    fn room(&mut self, n: usize) -> Result<(), String> {
        if self.buf.len() + n > BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// The end: the last file's metadata (a frame that closes it), and what is left, applied.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        if let Some(Frame::File { path, meta, .. }) = self.cur.clone() {
            let f = Frame::Meta { path, meta };
            let raw = scion::stream::encode_frame(&f, 0);
            self.push(f, &raw)?;
        }
        self.flush()?;
        self.wait()
    }

    /// Hands the batch to the applier thread (waiting while it holds one already).
    pub(super) fn flush(&mut self) -> Result<(), String> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let op = Op::Apply {
            top: self.top.clone(),
            base: self.base.clone(),
            open: self.open.as_ref().map(|f| scion::stream::encode_frame(f, 0)),
            frames: std::mem::replace(&mut self.buf, Vec::with_capacity(BATCH)),
            attach: self.attach,
        };
        let at = self.at;
        let applier = self.applier.get_or_insert_with(|| Applier::start(at.clone()));
        if applier.tx.send(op).is_err() {
            // The applier stopped at a refusal: that is the answer.
            return self.wait();
        }
        self.open = self.cur.clone();
        Ok(())
    }

    /// Waits until every batch handed over is applied; the first refusal, if any.
    pub(super) fn wait(&mut self) -> Result<(), String> {
        match self.applier.take() {
            None => Ok(()),
            Some(Applier { tx, done }) => {
                drop(tx);
                done.join().unwrap_or_else(|_| Err("the thread applying batches panicked".into()))
            }
        }
    }
}
