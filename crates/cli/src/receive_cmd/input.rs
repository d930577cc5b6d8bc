//! The stream as `scion receive` reads it: the header, a negotiated stream's offer answered,
//! then the frames' bytes read ahead by a thread and decompressed.

use crate::tree_cmds::{call, Located};
use scion::stream::{StreamReader, FLAG_ZSTD};
use scion_daemon::control::{Op, Reply};
use std::io::Read;
use std::path::PathBuf;

/// The largest zstd window a stream may use (128 MiB, zstd's default limit; the sender's is
/// `send_cmd::ZSTD_WINDOW_LOG`): a stream asking for more is refused, not given the memory.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;
const _: () = assert!(crate::send_cmd::ZSTD_WINDOW_LOG <= ZSTD_WINDOW_LOG_MAX, "a stream this scion sends must be one it receives");

/// The stream from `input` (or stdin), its header read; a negotiated stream's offer answered
/// on stdout with what the store `at` holds.
pub(super) fn open_stream(input: &Option<PathBuf>, at: &Located) -> Result<StreamReader<Box<dyn Read>>, String> {
    let mut input: Box<dyn Read + Send> = match input {
        Some(f) => Box::new(std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None => Box::new(std::io::stdin()),
    };
    let flags = scion::stream::read_header(&mut input)?;
    if flags & scion::stream::FLAG_NEGOTIATE != 0 {
        answer_offer(&mut input, at)?;
    }
    Ok(StreamReader::new(body(Box::new(ReadAhead::start(input)), flags)?))
}

/// The frames' bytes of a stream whose header said `flags`, read from `input`.
pub(super) fn body(input: Box<dyn Read>, flags: u8) -> Result<Box<dyn Read>, String> {
    Ok(if flags & FLAG_ZSTD != 0 {
        let mut d = zstd::stream::read::Decoder::new(input).map_err(|e| e.to_string())?;
        d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(|e| e.to_string())?;
        Box::new(d)
    } else {
        Box::new(std::io::BufReader::with_capacity(1 << 20, input))
    })
}

/// The stream's bytes read ahead by a thread, up to `READ_AHEAD` of them: while this side
/// finds the base (hashing its trees) or applies a batch, the sender goes on making and
/// sending the stream instead of waiting on a full pipe. Each read is handed on as it comes
/// (a slow sender's first bytes are applied without waiting for more), copied out of one
/// buffer kept for the reads: memory held is the bytes read, not a buffer per read.
struct ReadAhead {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    /// Bytes read and not yet taken, and the reader thread's wait for them to go down.
    held: std::sync::Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>,
    cur: Vec<u8>,
    at: usize,
}

/// Bytes read ahead at most, and at most per read.
const READ_AHEAD: usize = 256 << 20;
const READ_PIECE: usize = 1 << 20;

impl ReadAhead {
    fn start(mut input: Box<dyn Read + Send>) -> ReadAhead {
        let (tx, rx) = std::sync::mpsc::channel();
        let held = std::sync::Arc::new((std::sync::Mutex::new(0usize), std::sync::Condvar::new()));
        let room = held.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; READ_PIECE];
            loop {
                let r = match input.read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => r.map(|n| buf[..n].to_vec()),
                };
                let (end, n) = match &r {
                    Ok(b) => (b.is_empty(), b.len()),
                    Err(_) => (true, 0),
                };
                {
                    let (lock, cv) = &*room;
                    let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
                    while *g > 0 && *g + n > READ_AHEAD {
                        g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                    }
                    *g += n;
                }
                // The reader is gone (the receive ended): stop reading.
                if tx.send(r).is_err() || end {
                    return;
                }
            }
        });
        ReadAhead { rx, held, cur: Vec::new(), at: 0 }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.cur.len() {
            match self.rx.recv() {
                Ok(Ok(b)) => {
                    let (lock, cv) = &*self.held;
                    *lock.lock().unwrap_or_else(|p| p.into_inner()) -= b.len();
                    cv.notify_one();
                    (self.cur, self.at) = (b, 0);
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0), // the end was read already
            }
        }
        let n = out.len().min(self.cur.len() - self.at);
        out[..n].copy_from_slice(&self.cur[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads the sender's offer of block hashes and says on stdout which the store holds (the
/// other end of `scion send --dedup --through`); those then come as their hashes.
fn answer_offer(input: &mut impl Read, at: &Located) -> Result<(), String> {
    let offer = scion::stream::read_offer(input)?;
    let mut held = Vec::with_capacity(offer.len());
    for batch in offer.chunks(scion_daemon::control::MAX_HASHES_PER_REQUEST) {
        match call(at, &Op::FindBlocks { hashes: batch.to_vec() })? {
            Reply::Blocks(h) if h.len() == batch.len() => held.extend(h),
            _ => return Err("the daemon answered something else".into()),
        }
    }
    let mut out = std::io::stdout().lock();
    scion::stream::write_answer(&mut out, &held).map_err(|e| format!("answering the sender: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use scion::stream::{Frame, StreamWriter};
    use std::io::Write;

    /// Frames compressed with a zstd window of 2^`window_log` bytes.
    fn compressed(window_log: u32) -> Vec<u8> {
        let mut w = StreamWriter::new(Vec::new());
        w.put(&Frame::Dir { path: b"d".to_vec() }).unwrap();
        let frames = w.finish([0; 32]).unwrap();
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), crate::send_cmd::ZSTD_LEVEL).unwrap();
        e.long_distance_matching(true).unwrap();
        e.window_log(window_log).unwrap();
        e.write_all(&frames).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn the_senders_window_is_read_a_larger_one_is_refused_by_name() {
        let read = |window_log| {
            let mut r = StreamReader::new(body(Box::new(std::io::Cursor::new(compressed(window_log))), FLAG_ZSTD).unwrap());
            r.next().map(|f| f.is_some()).map_err(String::from)
        };
        assert_eq!(read(crate::send_cmd::ZSTD_WINDOW_LOG), Ok(true));
        let e = read(ZSTD_WINDOW_LOG_MAX + 1).unwrap_err();
        assert!(e.contains("zstd window is over 128 MiB"), "{e}");
    }
}
