//! The send stream (`scion send` / `scion receive`, issue 20), version 1: what a tree is, or
//! what changed from a base, as a sequence of checked frames. Decoded without trusting the
//! other side: every length is checked against a limit and what remains, every frame against
//! its checksum and sequence number, the whole against a final hash.
//!
//! ```text
//! stream   "SCIONSTR", version u8 = 1, flags u8 (bit 0: the rest is zstd-compressed), frames
//! frame    kind u8, seq u64, len u32, payload (len bytes), crc32c u32 of all before it
//! ```
//!
//! Frames, in this order: `Begin`; then the operations that make the tree (copies from the
//! base, deletions, directories, files with their data, symlinks, special files, hard links,
//! metadata); then `End`, which gives the number of frames before it and their chain hash
//! (`chain(n + 1) = BLAKE3(chain(n), frame n's bytes)`, from 32 zero bytes), and the tree's
//! content hash again. Paths are relative to the tree's top, names separated by `/`, never
//! empty names, `.` or `..`; the empty path is the top itself.
//!
//! A resumed stream (`scion send --resume`) begins with a `Resume` frame instead, outside the
//! numbering: the frame number it goes on from and the chain hash before it, which the
//! receiver checks against what it kept; then frames from that number on, as the whole stream
//! would have them.

use scion_store::codec::{Reader, Writer};
use std::io::{Read, Write};

pub const MAGIC: &[u8; 8] = b"SCIONSTR";
pub const VERSION: u8 = 1;
pub const FLAG_ZSTD: u8 = 1;
/// The stream goes over a two-way channel (`scion send --dedup --through CMD`): an offer of
/// block hashes follows the header, the receiver answers which it holds, and the frames may
/// then name those blocks (`Block`) instead of carrying their bytes.
pub const FLAG_NEGOTIATE: u8 = 2;
/// Block hashes one offer holds at most (a tree of 1 TiB in 64 KiB blocks).
pub const MAX_OFFER: usize = 16 << 20;
const OFFER_MAGIC: &[u8; 8] = b"SCIONOFR";
const ANSWER_MAGIC: &[u8; 8] = b"SCIONHAV";
/// Largest frame payload.
pub const MAX_PAYLOAD: usize = (1 << 20) + 4096;
/// Bytes of file data per `Data` frame, at most.
pub const DATA_MAX: usize = 1 << 20;
const MAX_PATH: usize = 4096;
const MAX_XATTRS: usize = 1024;

/// What a user sees of an entry besides its content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// One operation of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The base the stream applies to (its content hash; `None`: a full stream), the tree it
    /// makes, the sent snapshot's name, and totals for progress.
    Begin {
        base: Option<[u8; 32]>,
        root: [u8; 32],
        name: Vec<u8>,
        entries: u64,
        bytes: u64,
    },
    /// Removes what is at `path` (a whole directory).
    Delete { path: Vec<u8> },
    /// A directory (its metadata comes in a `Meta` frame at the end).
    Dir { path: Vec<u8> },
    /// Opens a file: a new empty one (`fresh`), or the one already there; then cut or
    /// extended to `size`. `Data` and `Hole` frames that follow write into it; `meta` is set
    /// after them.
    File { path: Vec<u8>, size: u64, fresh: bool, meta: Meta },
    Data { offset: u64, bytes: Vec<u8> },
    Hole { offset: u64, len: u64 },
    Symlink { path: Vec<u8>, target: Vec<u8>, meta: Meta },
    /// A FIFO, socket or device (`kind` as scion's: 4 FIFO, 5 socket, 6 char, 7 block).
    Special { path: Vec<u8>, kind: u8, rdev: u32, meta: Meta },
    /// Another name for the file at `target` (in the tree being made).
    Link { path: Vec<u8>, target: Vec<u8> },
    /// A copy of the base's file at `from` (sharing its blocks), before any deletion.
    Copy { path: Vec<u8>, from: Vec<u8> },
    /// The chunk at `offset` of the file last opened (64 KiB, or the file's tail) is the
    /// block whose BLAKE3 hash is `hash`, which the receiver said it holds (a negotiated
    /// stream).
    Block { offset: u64, hash: [u8; 32] },
    /// Metadata set on what is at `path`.
    Meta { path: Vec<u8>, meta: Meta },
    /// The end: how many frames came before, their chain hash, the tree's hash.
    End { frames: u64, hash: [u8; 32], root: [u8; 32] },
    /// The start of a resumed stream: the tree, and where it goes on (frame `from`, with
    /// chain hash `chain` before it).
    Resume { root: [u8; 32], from: u64, chain: [u8; 32] },
}

impl Frame {
    fn kind(&self) -> u8 {
        match self {
            Frame::Begin { .. } => 1,
            Frame::Delete { .. } => 2,
            Frame::Dir { .. } => 3,
            Frame::File { .. } => 4,
            Frame::Data { .. } => KIND_DATA,
            Frame::Hole { .. } => 6,
            Frame::Symlink { .. } => 7,
            Frame::Special { .. } => 8,
            Frame::Link { .. } => 9,
            Frame::Copy { .. } => 10,
            Frame::Meta { .. } => 11,
            Frame::End { .. } => 12,
            Frame::Resume { .. } => 13,
            Frame::Block { .. } => 14,
        }
    }

    /// Writes the frame's payload.
    fn put_payload(&self, w: &mut Writer) {
        match self {
            Frame::Begin { base, root, name, entries, bytes } => {
                w.u8(base.is_some() as u8).raw(&base.unwrap_or_default()).raw(root).bytes(name);
                w.u64(*entries).u64(*bytes);
            }
            Frame::Delete { path } | Frame::Dir { path } => {
                w.bytes(path);
            }
            Frame::File { path, size, fresh, meta } => {
                w.bytes(path).u64(*size).u8(*fresh as u8);
                put_meta(w, meta);
            }
            Frame::Data { offset, bytes } => data_payload(w, *offset, bytes),
            Frame::Hole { offset, len } => {
                w.u64(*offset).u64(*len);
            }
            Frame::Symlink { path, target, meta } => {
                w.bytes(path).bytes(target);
                put_meta(w, meta);
            }
            Frame::Special { path, kind, rdev, meta } => {
                w.bytes(path).u8(*kind).u32(*rdev);
                put_meta(w, meta);
            }
            Frame::Link { path, target } => {
                w.bytes(path).bytes(target);
            }
            Frame::Copy { path, from } => {
                w.bytes(path).bytes(from);
            }
            Frame::Meta { path, meta } => {
                w.bytes(path);
                put_meta(w, meta);
            }
            Frame::End { frames, hash, root } => {
                w.u64(*frames).raw(hash).raw(root);
            }
            Frame::Resume { root, from, chain } => {
                w.raw(root).u64(*from).raw(chain);
            }
            Frame::Block { offset, hash } => {
                w.u64(*offset).raw(hash);
            }
        }
    }

    fn decode(kind: u8, payload: &[u8]) -> Result<Frame, String> {
        let mut r = Reader::new(payload, "stream frame");
        let f = match kind {
            1 => {
                let has = r.u8().map_err(bad)? != 0;
                let base: [u8; 32] = r.array().map_err(bad)?;
                Frame::Begin {
                    base: has.then_some(base),
                    root: r.array().map_err(bad)?,
                    name: name(&mut r)?,
                    entries: r.u64().map_err(bad)?,
                    bytes: r.u64().map_err(bad)?,
                }
            }
            2 => Frame::Delete { path: path(&mut r)? },
            3 => Frame::Dir { path: path(&mut r)? },
            4 => Frame::File {
                path: path(&mut r)?,
                size: r.u64().map_err(bad)?,
                fresh: flag(&mut r)?,
                meta: get_meta(&mut r)?,
            },
            5 => {
                let offset = r.u64().map_err(bad)?;
                let bytes = r.bytes().map_err(bad)?.to_vec();
                if bytes.len() > DATA_MAX || offset.checked_add(bytes.len() as u64).is_none() {
                    return Err(format!("a data frame of {} bytes at {offset}", bytes.len()));
                }
                Frame::Data { offset, bytes }
            }
            6 => {
                let (offset, len) = (r.u64().map_err(bad)?, r.u64().map_err(bad)?);
                if offset.checked_add(len).is_none() {
                    return Err(format!("a hole of {len} bytes at {offset}"));
                }
                Frame::Hole { offset, len }
            }
            7 => Frame::Symlink {
                path: path(&mut r)?,
                target: {
                    let t = r.bytes().map_err(bad)?.to_vec();
                    if t.is_empty() || t.len() > MAX_PATH || t.contains(&0) {
                        return Err("a symlink target that is empty, too long or holds a NUL".into());
                    }
                    t
                },
                meta: get_meta(&mut r)?,
            },
            8 => {
                let p = path(&mut r)?;
                let kind = r.u8().map_err(bad)?;
                if !(4..=7).contains(&kind) {
                    return Err(format!("special file of kind {kind}"));
                }
                Frame::Special {
                    path: p,
                    kind,
                    rdev: r.u32().map_err(bad)?,
                    meta: get_meta(&mut r)?,
                }
            }
            9 => Frame::Link { path: path(&mut r)?, target: path(&mut r)? },
            10 => Frame::Copy { path: path(&mut r)?, from: path(&mut r)? },
            11 => Frame::Meta {
                path: path(&mut r)?,
                meta: get_meta(&mut r)?,
            },
            12 => Frame::End {
                frames: r.u64().map_err(bad)?,
                hash: r.array().map_err(bad)?,
                root: r.array().map_err(bad)?,
            },
            13 => Frame::Resume {
                root: r.array().map_err(bad)?,
                from: r.u64().map_err(bad)?,
                chain: r.array().map_err(bad)?,
            },
            14 => {
                let offset = r.u64().map_err(bad)?;
                if offset % (64 << 10) != 0 {
                    return Err(format!("a block frame at offset {offset}, not a chunk's start"));
                }
                Frame::Block { offset, hash: r.array().map_err(bad)? }
            }
            k => return Err(format!("unknown frame kind {k}")),
        };
        r.expect_end().map_err(bad)?;
        Ok(f)
    }
}

fn bad(e: scion_store::Error) -> String {
    e.to_string()
}

fn flag(r: &mut Reader) -> Result<bool, String> {
    match r.u8().map_err(bad)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(format!("flag {v}")),
    }
}

fn name(r: &mut Reader) -> Result<Vec<u8>, String> {
    let n = r.bytes().map_err(bad)?;
    if n.len() > 255 || n.contains(&b'/') || n.contains(&0) {
        return Err("a snapshot name that is too long or holds '/' or NUL".into());
    }
    Ok(n.to_vec())
}

/// A path inside the tree: no empty, `.` or `..` names, no NUL, no leading `/`.
fn path(r: &mut Reader) -> Result<Vec<u8>, String> {
    let p = r.bytes().map_err(bad)?;
    check_path(p)?;
    Ok(p.to_vec())
}

pub fn check_path(p: &[u8]) -> Result<(), String> {
    if p.len() > MAX_PATH || p.contains(&0) {
        return Err("a path that is too long or holds a NUL".into());
    }
    if !p.is_empty() && p.split(|&c| c == b'/').any(|n| n.is_empty() || n == b"." || n == b".." || n.len() > 255) {
        return Err(format!("path {:?} leaves the tree or has an empty name", String::from_utf8_lossy(p)));
    }
    Ok(())
}

fn put_meta(w: &mut Writer, m: &Meta) {
    w.u32(u32::from(m.perm)).u32(m.uid).u32(m.gid).u64(m.mtime_sec as u64).u32(m.mtime_nsec);
    w.u32(m.xattrs.len() as u32);
    for (k, v) in &m.xattrs {
        w.bytes(k).bytes(v);
    }
}

fn get_meta(r: &mut Reader) -> Result<Meta, String> {
    let perm = r.u32().map_err(bad)?;
    if perm > 0o7777 {
        return Err(format!("mode {perm:o}"));
    }
    let mut m = Meta {
        perm: perm as u16,
        uid: r.u32().map_err(bad)?,
        gid: r.u32().map_err(bad)?,
        mtime_sec: r.u64().map_err(bad)? as i64,
        mtime_nsec: r.u32().map_err(bad)?,
        xattrs: Vec::new(),
    };
    if m.mtime_nsec >= 1_000_000_000 {
        return Err(format!("{} nanoseconds", m.mtime_nsec));
    }
    let n = r.count(8).map_err(bad)?;
    if n > MAX_XATTRS {
        return Err(format!("{n} extended attributes"));
    }
    for _ in 0..n {
        let k = r.bytes().map_err(bad)?.to_vec();
        if k.is_empty() || k.len() > 255 || k.contains(&0) {
            return Err("an extended attribute name that is empty, too long or holds a NUL".into());
        }
        m.xattrs.push((k, r.bytes().map_err(bad)?.to_vec()));
    }
    Ok(m)
}

/// Writes frames: numbers them, checks them, chains their hashes for `End`. For a resumed
/// stream (`resume_at`), frames before the resume point are counted and chained but not
/// written, and the chain there must be what the receiver kept.
pub struct StreamWriter<W: Write> {
    out: W,
    seq: u64,
    chain: [u8; 32],
    resume: Option<(u64, [u8; 32], [u8; 32])>,
    /// Bytes of frames written (before compression).
    pub written: u64,
    /// The last frame's encoding (a buffer kept: fresh memory costs its zeroing).
    buf: Vec<u8>,
}

/// Writes a stream's header (before its body, which `flags` say is compressed or not).
pub fn write_header(raw: &mut impl Write, flags: u8) -> std::io::Result<()> {
    raw.write_all(MAGIC)?;
    raw.write_all(&[VERSION, flags])
}

/// The next chain hash: `BLAKE3(chain, frame bytes)`.
pub fn chain_next(chain: &[u8; 32], frame: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(chain);
    h.update(frame);
    *h.finalize().as_bytes()
}

impl<W: Write> StreamWriter<W> {
    /// A writer of frames into `body` (after the header).
    pub fn new(body: W) -> StreamWriter<W> {
        StreamWriter {
            out: body,
            seq: 0,
            chain: [0; 32],
            resume: None,
            written: 0,
            buf: Vec::new(),
        }
    }

    /// A writer of the rest of a stream from frame `from` on, where the chain must be
    /// `chain`: it writes a `Resume` frame there, for the tree of hash `root`.
    pub fn resume_at(body: W, from: u64, chain: [u8; 32], root: [u8; 32]) -> StreamWriter<W> {
        let mut w = StreamWriter::new(body);
        w.resume = Some((from, chain, root));
        w
    }

    pub fn put(&mut self, f: &Frame) -> std::io::Result<()> {
        let mut b = std::mem::take(&mut self.buf);
        b.clear();
        encode_frame_into(f, self.seq, &mut b);
        self.resume_point()?;
        if self.resume.is_none_or(|(from, _, _)| self.seq >= from) {
            self.out.write_all(&b)?;
            self.written += b.len() as u64;
        }
        self.chain = chain_next(&self.chain, &b);
        self.buf = b;
        self.seq += 1;
        Ok(())
    }

    /// At the resume point: checks the chain and writes the `Resume` frame.
    fn resume_point(&mut self) -> std::io::Result<()> {
        if let Some((from, chain, root)) = self.resume {
            if self.seq == from {
                if self.chain != chain {
                    return Err(std::io::Error::other(
                        "this stream does not go on from the interrupted one (another tree, base or scion?)",
                    ));
                }
                let b = encode_frame(&Frame::Resume { root, from, chain }, u64::MAX);
                self.out.write_all(&b)?;
                self.written += b.len() as u64;
            }
        }
        Ok(())
    }

    /// Writes `End` and returns the inner writer.
    pub fn finish(mut self, root: [u8; 32]) -> std::io::Result<W> {
        self.resume_point()?;
        if let Some((from, _, _)) = self.resume {
            if from > self.seq {
                return Err(std::io::Error::other("the interrupted stream was longer than this one"));
            }
        }
        let end = Frame::End {
            frames: self.seq,
            hash: self.chain,
            root,
        };
        let b = encode_frame(&end, self.seq);
        self.out.write_all(&b)?;
        self.written += b.len() as u64;
        Ok(self.out)
    }
}

pub fn encode_frame(f: &Frame, seq: u64) -> Vec<u8> {
    let mut b = Vec::new();
    encode_frame_into(f, seq, &mut b);
    b
}

/// `encode_frame`, appended to `out` (the payload written in place: no copy of it).
pub fn encode_frame_into(f: &Frame, seq: u64, out: &mut Vec<u8>) {
    match f {
        Frame::Data { offset, bytes } => encode_data_into(*offset, bytes, seq, out),
        f => put_frame(f.kind(), seq, out, |w| f.put_payload(w)),
    }
}

/// `encode_frame_into` of `Frame::Data { offset, bytes }`, from borrowed bytes.
pub fn encode_data_into(offset: u64, bytes: &[u8], seq: u64, out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 29);
    put_frame(KIND_DATA, seq, out, |w| data_payload(w, offset, bytes));
}

const KIND_DATA: u8 = 5;

fn data_payload(w: &mut Writer, offset: u64, bytes: &[u8]) {
    w.u64(offset).bytes(bytes);
}

/// Appends to `out` a frame of `kind` numbered `seq` whose payload `payload` writes in place:
/// the header, the payload, its length filled in, the checksum.
fn put_frame(kind: u8, seq: u64, out: &mut Vec<u8>, payload: impl FnOnce(&mut Writer)) {
    let start = out.len();
    out.push(kind);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer { buf: std::mem::take(out) };
    payload(&mut w);
    let mut b = w.buf;
    let len = b.len() - start - 13;
    assert!(len <= MAX_PAYLOAD, "frame payload of {len} bytes");
    b[start + 9..start + 13].copy_from_slice(&(len as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b[start..]);
    b.extend_from_slice(&crc.to_le_bytes());
    *out = b;
}

/// Frames encoded back to back (`encode_frame`), each checked by its checksum, in a batch
/// the receiver has already checked in its stream (numbers not checked again).
pub fn decode_frames(mut b: &[u8]) -> Result<Vec<Frame>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 17 {
            return Err("a frame cut short in a batch".into());
        }
        let len = u32::from_le_bytes(b[9..13].try_into().unwrap()) as usize;
        if len > MAX_PAYLOAD || b.len() < 17 + len {
            return Err("a frame cut short in a batch".into());
        }
        let crc = u32::from_le_bytes(b[13 + len..17 + len].try_into().unwrap());
        if crc32c::crc32c(&b[..13 + len]) != crc {
            return Err("a damaged frame in a batch".into());
        }
        out.push(Frame::decode(b[0], &b[13..13 + len])?);
        b = &b[17 + len..];
    }
    Ok(out)
}

/// Reads a stream's header: its flags.
pub fn read_header(r: &mut impl Read) -> Result<u8, String> {
    let mut h = [0u8; 10];
    r.read_exact(&mut h).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the input ends before a stream header: it is empty or cut short (is it the output of scion send?)".to_string(),
        _ => format!("no stream header: {e}"),
    })?;
    if &h[..8] != MAGIC {
        return Err("not a scion send stream".into());
    }
    if h[8] != VERSION {
        return Err(format!("stream version {} (this scion reads version {VERSION})", h[8]));
    }
    if h[9] & !(FLAG_ZSTD | FLAG_NEGOTIATE) != 0 {
        return Err(format!("unknown stream flags {:#x}", h[9]));
    }
    Ok(h[9])
}

// ----- the negotiation of a two-way channel (`FLAG_NEGOTIATE`) -----------------------------
//
// offer    "SCIONOFR", count u32, count block hashes (32 bytes each), crc32c u32 of all before
// answer   "SCIONHAV", count u32, a bitmap of count bits (bit i of byte i/8: hash i is held),
//          crc32c u32 of all before
//
// The offer follows the header uncompressed; the answer goes the other way, before the
// receiver reads the frames.

/// Writes the offer of `hashes` (the blocks the stream would carry).
pub fn write_offer(w: &mut impl Write, hashes: &[[u8; 32]]) -> std::io::Result<()> {
    assert!(hashes.len() <= MAX_OFFER, "an offer of {} hashes", hashes.len());
    let mut b = Vec::with_capacity(16 + hashes.len() * 32);
    b.extend_from_slice(OFFER_MAGIC);
    b.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
    for h in hashes {
        b.extend_from_slice(h);
    }
    b.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
    w.write_all(&b)
}

/// Reads an offer, checked.
pub fn read_offer(r: &mut impl Read) -> Result<Vec<[u8; 32]>, String> {
    let (mut head, cut) = ([0u8; 12], |e: std::io::Error| format!("the block offer is cut short: {e}"));
    r.read_exact(&mut head).map_err(cut)?;
    if &head[..8] != OFFER_MAGIC {
        return Err("no block offer after a negotiated stream's header".into());
    }
    let n = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
    if n > MAX_OFFER {
        return Err(format!("an offer of {n} blocks (at most {MAX_OFFER})"));
    }
    let mut body = vec![0u8; n * 32 + 4];
    r.read_exact(&mut body).map_err(cut)?;
    let (hashes, sum) = body.split_at(n * 32);
    let mut c = crc32c::crc32c(&head);
    c = crc32c::crc32c_append(c, hashes);
    if c.to_le_bytes() != sum {
        return Err("the block offer is damaged (checksum)".into());
    }
    Ok(hashes.chunks(32).map(|h| h.try_into().expect("32 bytes")).collect())
}

/// Writes the answer to an offer: which hashes are held.
pub fn write_answer(w: &mut impl Write, held: &[bool]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(16 + held.len() / 8);
    b.extend_from_slice(ANSWER_MAGIC);
    b.extend_from_slice(&(held.len() as u32).to_le_bytes());
    let mut bits = vec![0u8; held.len().div_ceil(8)];
    for (i, h) in held.iter().enumerate() {
        bits[i / 8] |= u8::from(*h) << (i % 8);
    }
    b.extend_from_slice(&bits);
    b.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
    w.write_all(&b)?;
    w.flush()
}

/// Reads the answer to an offer of `n` hashes, checked.
pub fn read_answer(r: &mut impl Read, n: usize) -> Result<Vec<bool>, String> {
    let (mut head, cut) = ([0u8; 12], |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the receiver stopped before it answered the block offer (its messages say why)".to_string(),
        _ => format!("the receiver's answer could not be read: {e}"),
    });
    r.read_exact(&mut head).map_err(cut)?;
    if &head[..8] != ANSWER_MAGIC {
        return Err("the receiver did not answer the block offer (is it `scion receive`?)".into());
    }
    let got = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as usize;
    if got != n {
        return Err(format!("the receiver answered for {got} blocks, {n} were offered"));
    }
    let mut body = vec![0u8; n.div_ceil(8) + 4];
    r.read_exact(&mut body).map_err(cut)?;
    let (bits, sum) = body.split_at(n.div_ceil(8));
    if crc32c::crc32c_append(crc32c::crc32c(&head), bits).to_le_bytes() != sum {
        return Err("the receiver's answer is damaged (checksum)".into());
    }
    Ok((0..n).map(|i| bits[i / 8] >> (i % 8) & 1 == 1).collect())
}

/// Why a stream could not be read on.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// It stopped (cut short, or the input failed): what came so far is sound.
    Cut(String),
    /// Something in it is wrong (damaged, out of order, malformed, inconsistent).
    Bad(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Cut(m) | ReadError::Bad(m) => f.write_str(m),
        }
    }
}

impl From<ReadError> for String {
    fn from(e: ReadError) -> String {
        e.to_string()
    }
}

/// Reads frames in order, checking each and, at `End`, the whole.
pub struct StreamReader<R: Read> {
    input: R,
    seq: u64,
    chain: [u8; 32],
    /// The chain hash before the frame last returned.
    chain_before: [u8; 32],
    done: bool,
    /// Bytes of frames read.
    pub read: u64,
    /// The last frame as it was read (header, payload, checksum): `raw`.
    last: Vec<u8>,
}

impl<R: Read> StreamReader<R> {
    pub fn new(input: R) -> StreamReader<R> {
        StreamReader {
            input,
            seq: 0,
            chain: [0; 32],
            chain_before: [0; 32],
            done: false,
            read: 0,
            last: Vec::new(),
        }
    }

    /// The frame last returned by `next`, as it was read and checked.
    pub fn raw(&self) -> &[u8] {
        &self.last
    }

    /// The number of the frame last returned, and the chain hash before it: where a
    /// resumed stream would go on from to repeat it.
    pub fn position(&self) -> (u64, [u8; 32]) {
        (self.seq.saturating_sub(1), self.chain_before)
    }

    /// The number of the next frame, and the chain hash before it.
    pub fn position_next(&self) -> (u64, [u8; 32]) {
        (self.seq, self.chain)
    }

    /// The next frame; `Ok(None)` only after a valid `End` (checked: frame count, chain).
    /// A `Resume` frame may come first only: the reader then goes on from where it says.
    pub fn next(&mut self) -> Result<Option<Frame>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let bad = ReadError::Bad;
        let mut head = [0u8; 13];
        read_all(&mut self.input, &mut head, self.seq)?;
        let (kind, seq, len) = (
            head[0],
            u64::from_le_bytes(head[1..9].try_into().unwrap()),
            u32::from_le_bytes(head[9..13].try_into().unwrap()) as usize,
        );
        if len > MAX_PAYLOAD {
            return Err(bad(format!("frame {} claims {len} bytes, more than a frame holds", self.seq)));
        }
        // (The buffer is kept from frame to frame: fresh memory costs its zeroing.)
        let whole = &mut self.last;
        whole.clear();
        whole.extend_from_slice(&head);
        whole.resize(13 + len + 4, 0);
        read_all(&mut self.input, &mut whole[13..], self.seq)?;
        let crc = u32::from_le_bytes(whole[13 + len..].try_into().unwrap());
        if crc32c::crc32c(&whole[..13 + len]) != crc {
            return Err(bad(format!("frame {} is damaged (checksum)", self.seq)));
        }
        let f = Frame::decode(kind, &whole[13..13 + len]).map_err(|e| bad(format!("frame {seq}: {e}")))?;
        self.read += (13 + len + 4) as u64;
        if let Frame::Resume { from, chain, .. } = &f {
            if self.read != (13 + len + 4) as u64 || seq != u64::MAX {
                return Err(bad("a Resume frame that is not the stream's first".into()));
            }
            (self.seq, self.chain, self.chain_before) = (*from, *chain, *chain);
            return Ok(Some(f));
        }
        if seq != self.seq {
            return Err(bad(format!("frame {seq} came where frame {} was due (reordered or duplicated)", self.seq)));
        }
        if let Frame::End { frames, hash, .. } = &f {
            if *frames != self.seq || *hash != self.chain {
                return Err(bad("the stream's end does not match what came before it".into()));
            }
            self.done = true;
        } else {
            self.chain_before = self.chain;
            self.chain = chain_next(&self.chain, &self.last);
        }
        self.seq += 1;
        Ok(Some(f))
    }
}

impl<R: Read> StreamReader<R> {
    /// After `End`: the input must end there too (a compressed stream's own end included).
    pub fn expect_eof(&mut self) -> Result<(), String> {
        let mut b = [0u8; 1];
        match self.input.read(&mut b) {
            Ok(0) => Ok(()),
            Ok(_) => Err("bytes after the stream's end".into()),
            Err(e) => Err(format!("after the stream's end: {e}")),
        }
    }
}

/// The resume token `scion receive --resumable` prints for an interrupted stream: where it
/// goes on (frame number, chain hash before it) and the tree's hash, as `scion1:` and hex.
pub fn resume_token(from: u64, chain: &[u8; 32], root: &[u8; 32]) -> String {
    let mut b = from.to_be_bytes().to_vec();
    b.extend_from_slice(chain);
    b.extend_from_slice(root);
    format!("scion1:{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>())
}

/// A resume token's frame number, chain hash and tree hash.
pub fn parse_token(t: &str) -> Result<(u64, [u8; 32], [u8; 32]), String> {
    let hex = t.trim().strip_prefix("scion1:").ok_or("a resume token begins with scion1:")?;
    if hex.len() != 2 * 72 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err("a resume token holds 144 hex digits after scion1:".into());
    }
    let b: Vec<u8> = (0..72).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
    Ok((
        u64::from_be_bytes(b[..8].try_into().unwrap()),
        b[8..40].try_into().unwrap(),
        b[40..].try_into().unwrap(),
    ))
}

fn read_all(r: &mut impl Read, buf: &mut [u8], seq: u64) -> Result<(), ReadError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ReadError::Cut(format!("the stream is cut short (in frame {seq})"))
        } else if e.to_string().contains("too much memory for decoding") {
            ReadError::Bad(format!(
                "reading frame {seq}: its zstd window is over 128 MiB, more than a receiver gives (scion sends at most that: was it compressed by another tool?)"
            ))
        } else if e.kind() == std::io::ErrorKind::Other || e.kind() == std::io::ErrorKind::InvalidData {
            // A compressed stream's decoder saying its input is damaged.
            ReadError::Bad(format!("reading frame {seq}: {e}"))
        } else {
            ReadError::Cut(format!("reading frame {seq}: {e}"))
        }
    })
}

