//! Pack files: append-only sequences of blocks.
//!
//! Every block starts on a `BLOCK_ALIGN` boundary with a 16-byte header (magic, kind, codec,
//! payload length, crc32c) followed by its payload and zero padding. Blocks are never
//! rewritten in place; a freed block's bytes are returned to the host filesystem by punching
//! a hole over them, so a pack shrinks on disk as its blocks die without any block moving.

use crate::deferred::{Deferred, Waiting, RUN_MAX};
use crate::host::{Host, HostFile, OpenMode};
use crate::ptr::{BlockKind, BlockPtr};
use crate::relocate::{self, Relocation, Relocations};
use crate::remote::{is_remote_pack, RemotePacks};
use crate::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

pub const BLOCK_ALIGN: u64 = 4096;
pub const BLOCK_HEADER_LEN: usize = 16;
/// Largest payload a block may carry. Bounds every allocation made from a pointer read off
/// disk.
pub const MAX_BLOCK_LEN: usize = 16 << 20;
pub(crate) const BLOCK_MAGIC: &[u8; 4] = b"SCBK";
/// Packs are rolled over when they reach this size.
const PACK_ROLL_BYTES: u64 = 4 << 30;
/// Blocks `read_shared` keeps after verifying them (64 KiB each at most: 4 MiB).
const RECENT_BLOCKS: usize = 64;
/// How far ahead of the append position direct writes allocate the pack (see `Active`).
const PREALLOC_BYTES: u64 = 16 << 20;
/// Shorter runs go through the host's page cache even where direct writes work. A direct
/// write waits for the device (0.3-3 ms here), and the kernel waits for a file's last WRITE
/// at every `close`, so an untar of files of a few chunks each waited on the device once per
/// file (2,733 such WRITEs of the Linux tree: 3.2 s of a 21 s untar, traced). Long runs come
/// from streaming writeback, where the copy into the host's page cache costs more.
const DIRECT_WRITE_MIN: usize = 512 << 10;

/// Bytes one page sum covers (`page_sums`).
pub const PAGE: usize = 4096;

/// The page sums of a data block's payload: the crc32c of each 4 KiB page (the last one
/// possibly shorter). Kept beside the block's pointer in a file's content tree, they let a
/// 4 KiB read verify 4 KiB (`BlockStore::read_pages`) instead of reading and hashing the
/// whole 64 KiB block, and a whole block read for a file verify at crc32c's speed instead of
/// BLAKE3's (`verify_with`).
pub fn page_sums(payload: &[u8]) -> Vec<u32> {
    payload.chunks(PAGE).map(crc32c::crc32c).collect()
}

/// Checks a raw block against its pointer, as `verify` does, or, for a data block whose page
/// sums are given (one per page), against those: they came from the same bytes as the
/// pointer's hash and are stored beside it, so a damaged, stale or misdirected block fails
/// them as it fails the hash (short of a crafted collision, which only someone able to
/// rewrite the content tree as well could plant), at about a third of BLAKE3's cost on the
/// read path (design.md, "Page sums"). Sums of the wrong count are not trusted: the hash.
pub fn verify_with<'a>(ptr: &BlockPtr, sums: Option<&[u32]>, buf: &'a [u8]) -> Result<&'a [u8]> {
    let Some(sums) = sums.filter(|s| header_len(ptr.kind) == 0 && s.len() == buf.len().div_ceil(PAGE)) else {
        return verify(ptr, buf);
    };
    if buf.len() != ptr.len as usize {
        return Err(Error::corrupt("block", ptr, format!("{} bytes read", buf.len())));
    }
    for (i, (page, sum)) in buf.chunks(PAGE).zip(sums).enumerate() {
        if crc32c::crc32c(page) != *sum {
            return Err(Error::corrupt(
                "block",
                ptr,
                format!("page {i}: checksum differs from the pointer's page sums (damaged, stale or misdirected)"),
            ));
        }
    }
    Ok(buf)
}

/// Bytes of header a block of this kind carries. File data has none: its pointer's hash
/// verifies it, and a 64 KiB chunk then fills exactly 16 pages, aligned, instead of 17.
pub(crate) fn header_len(kind: BlockKind) -> usize {
    if kind == BlockKind::Data {
        0
    } else {
        BLOCK_HEADER_LEN
    }
}

/// The stretches of packs `ptrs` occupy, blocks lying back to back in one pack taken as one:
/// (pack, start, end), in `ptrs`' order.
fn stored_runs(ptrs: &[BlockPtr]) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let first = ptrs.get(i)?;
        let (pack, start) = (first.pack(), first.offset());
        let mut end = start + first.footprint();
        i += 1;
        while i < ptrs.len() && ptrs[i].pack() == pack && ptrs[i].offset() == end {
            end += ptrs[i].footprint();
            i += 1;
        }
        Some((pack, start, end))
    })
}

pub(crate) fn footprint(kind: BlockKind, len: usize) -> u64 {
    let raw = (header_len(kind) + len) as u64;
    raw.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN
}

fn header_crc(header12: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header12), payload)
}

pub fn pack_path(dir: &Path, id: u32) -> PathBuf {
    dir.join("packs").join(format!("{id:08}.pack"))
}

/// Opens pack `id` and checks it holds at least `end` bytes (what the superblock or the
/// journal says was written); returns it with its length.
fn open_pack(host: &Host, dir: &Path, id: u32, mode: OpenMode, end: u64) -> Result<(Arc<dyn HostFile>, u64)> {
    let path = pack_path(dir, id);
    let file = host
        .open(&path, mode)
        .map_err(|e| Error::io(format!("open of pack {}", path.display()), e))?;
    let len = file.len().map_err(|e| Error::io("stat of pack", e))?;
    if len < end {
        return Err(Error::corrupt(
            "pack file",
            path.display(),
            format!("is {len} bytes long, {end} bytes were committed (truncated store?)"),
        ));
    }
    Ok((file, len))
}

struct Active {
    id: u32,
    file: Arc<dyn HostFile>,
    end: u64,
    /// Packs written to since the last `sync`.
    unsynced: Vec<Arc<dyn HostFile>>,
    /// Writes done since open (each counted once on `unsynced`): a sync that takes the list
    /// covers every write counted before (`BlockStore::synced_through`).
    writes: u64,
    /// The active pack opened for direct writes (`write_data_run`).
    direct: Direct,
    /// The pack is allocated (and sized) up to here, past `end` while direct writes stream
    /// in. A direct write that extends its file is serialized by the host (ext4 takes the
    /// inode lock exclusively and waits for the device), one that lands in allocated space
    /// is not, so writers allocate ahead and overlap. `sync` cuts the unused part off again:
    /// the store's size on the host says what it holds once it is durable, and a crash leaves
    /// at most this much past the committed end, which the next open cuts off.
    allocated: u64,
    /// Each writing file's run of whole chunks (`write_data_run_for`), at most `MAX_STREAMS`.
    streams: HashMap<StreamKey, Stream>,
    /// Counts placements; the stream placed least recently goes first.
    tick: u64,
    /// Places kept for writes that never came (a file with holes, a write refused), dropped
    /// from their streams: given back by the next `write_run` (the pack may be allocated there).
    unkept: Vec<(u32, u64, u64)>,
    /// Places just kept past the budget for held ones (`HELD_MAX`): made holes before the
    /// lock is let go (after the allocation ahead), so that they hold no host space until a
    /// write fills them.
    kept: Vec<(u32, u64, u64)>,
    /// Bytes of kept places left allocated (held) for the writes to come, at most
    /// `HELD_MAX`. A direct write into a hole is serialized by the host (ext4 takes the inode
    /// lock exclusively for a write that allocates, and waits for the device under it), one
    /// into allocated space is not: a 1 GiB file written back through holes punched ahead of
    /// it went one write at a time (~850 MB/s here), through held places at the device's
    /// speed (1.6-2 GB/s). A crash leaves held places allocated and unreferenced; the next
    /// open gives them back with the rest (`unreferenced` sees allocated space, written or not).
    held: u64,
    /// The bound on `held` now: `HELD_MAX`, or a sixteenth of the host's available space if
    /// that is less (set at each run written, `write_run`), so that on a nearly full host
    /// places kept ahead of writers do not take the space the writes themselves need.
    held_max: u64,
    /// When the store was opened: kept places carry their age from it, in milliseconds.
    since: std::time::Instant,
}

/// A stream follows one file's chunks within one region of this many (64 MiB): the kernel
/// writes a large file back from two places at once (the flusher behind, the writer's own
/// throttled writeback ahead), each in order, and each region's writes go on in their own run.
const REGION_CHUNKS: u64 = 1024;
/// A file and one of its regions.
type StreamKey = (u64, u64);

/// Files' streams of whole chunks followed at once; more streams than this and the one
/// written least recently is forgotten.
const MAX_STREAMS: usize = 256;
/// Chunks a write may run ahead of its file's next one and still take its place in the run:
/// the kernel sends a file's writeback WRITEs in order, but several are served at once and
/// a later one may reach the pack first. The earlier ones' places are kept for them.
const MAX_GAP_CHUNKS: u64 = 1024;
/// The same for a file whose writes have not run on for `AHEAD_MIN_CHUNKS` (a first write
/// near the start of a file, or chunks written here and there): a random writer's runs
/// keep little pack address space this way.
const MAX_GAP_SHORT: u64 = 16;
/// A stream keeps places ahead of its writes once it has placed this many chunks (1 MiB):
/// smaller files never do.
const AHEAD_MIN_CHUNKS: u64 = 16;
/// At most this many (16 MiB).
const AHEAD_MAX_CHUNKS: u64 = 256;
/// How long a place is kept for a write that has not come. The kernel sends a file's dirty
/// pages over seconds (some at background writeback, the rest at fsync).
const GAP_WAIT_MS: u64 = 10_000;
/// Places kept for earlier writes, per stream.
const MAX_GAPS: usize = 512;
/// Bytes of kept places held allocated at once, over all streams (`Active::held`): two
/// sequential writers' places kept ahead (`AHEAD_MAX_CHUNKS`) and their late writes' gaps.
const HELD_MAX: u64 = 64 << 20;

/// A place kept in a stream: first and end chunk, pack offset, when it was kept
/// (milliseconds from `Active::since`), and whether it is held allocated (`Active::held`)
/// rather than a hole.
type Gap = (u64, u64, u64, u64, bool);

/// Where a file's next whole chunks go so that a file written front to back lands back to
/// back in its pack (and repack has nothing to do for it), whatever else is written
/// meanwhile between its runs: chunk `next_idx` at `next_off` while nothing else has been
/// appended since, and places kept for writes still in flight (`gaps`: first and end chunk,
/// pack offset, and when it was kept: milliseconds from `Active::since`).
struct Stream {
    pack: u32,
    /// Bytes per chunk.
    unit: u64,
    next_idx: u64,
    next_off: u64,
    gaps: Vec<Gap>,
    tick: u64,
    /// Chunks placed for it since its run began.
    placed: u64,
}

impl Stream {
    fn new(pack: u32, unit: u64) -> Stream {
        Stream { pack, unit, next_idx: 0, next_off: 0, gaps: Vec::new(), tick: 0, placed: 0 }
    }

    /// The place kept for chunks `idx..idx + n`, if one is (taken out of the kept ones);
    /// `held` loses its bytes if it was held.
    fn fill(&mut self, idx: u64, n: u64, held: &mut u64) -> Option<u64> {
        let k = self.gaps.iter().position(|g| g.0 <= idx && idx + n <= g.1)?;
        let (gs, ge, goff, born, h) = self.gaps.swap_remove(k);
        let off = goff + (idx - gs) * self.unit;
        if gs < idx {
            self.gaps.push((gs, idx, goff, born, h));
        }
        if idx + n < ge {
            self.gaps.push((idx + n, ge, off + n * self.unit, born, h));
        }
        if h {
            *held -= n * self.unit;
        }
        Some(off)
    }

    /// Keeps a place: held allocated while the budget allows (`HELD_MAX`), else onto `kept`,
    /// to be made a hole. Past `MAX_GAPS` the oldest is given up (onto `unkept`).
    fn keep(&mut self, (first, end, off, born): (u64, u64, u64, u64), a: &mut Places) {
        if self.gaps.len() >= MAX_GAPS {
            let old = self.gaps.remove(0);
            self.give_up(&old, a);
        }
        let bytes = (end - first) * self.unit;
        let hold = *a.held + bytes <= a.held_max;
        let gap = (first, end, off, born, hold);
        if hold {
            *a.held += bytes;
        } else {
            a.kept.push(self.span(&gap));
        }
        self.gaps.push(gap);
    }

    /// A place no write will come to any more: onto `unkept`, to be made a hole.
    fn give_up(&self, g: &Gap, a: &mut Places) {
        if g.4 {
            *a.held -= (g.1 - g.0) * self.unit;
        }
        a.unkept.push(self.span(g));
    }

    /// The pack span of a kept place: pack, start and end offset.
    fn span(&self, g: &Gap) -> (u32, u64, u64) {
        (self.pack, g.2, g.2 + (g.1 - g.0) * self.unit)
    }
}

/// What keeping and giving up places changes in `Active`, borrowed apart from its streams
/// (`places!`).
struct Places<'a> {
    unkept: &'a mut Vec<(u32, u64, u64)>,
    kept: &'a mut Vec<(u32, u64, u64)>,
    held: &'a mut u64,
    held_max: u64,
}

macro_rules! places {
    ($a:expr) => {
        &mut Places { unkept: &mut $a.unkept, kept: &mut $a.kept, held: &mut $a.held, held_max: $a.held_max }
    };
}

impl Active {
    /// Puts `file` on the list the next `sync` covers.
    fn to_sync(&mut self, file: Arc<dyn HostFile>) {
        self.writes += 1;
        if !self.unsynced.iter().any(|f| Arc::ptr_eq(f, &file)) {
            self.unsynced.push(file);
        }
    }
}

/// Whether runs of whole data blocks bypass the host's page cache. Copying a large write
/// into the host's page cache was two thirds of the daemon's CPU time while a 1 GiB file was
/// written (0.75 GB/s into fresh page-cache pages on this VM), and the host then wrote it out
/// only at fsync, after the copy instead of during it. A direct write goes to the device as
/// it is made, and the data it writes is not cached twice (the mount's page cache holds it).
enum Direct {
    /// Not opened yet for the active pack.
    Untried,
    Open(Arc<dyn HostFile>),
    /// The host has no direct writes, or one failed: the page cache from now on.
    Off,
}

/// Reads of at least this many bytes, page-aligned, bypass the host's page cache (see
/// `read_whole_into`).
const DIRECT_READ_MIN: usize = 256 << 10;

pub struct BlockStore {
    host: Host,
    dir: PathBuf,
    /// Pack handles are opened for writing too, so freed blocks can be punched.
    writable: bool,
    readers: RwLock<HashMap<u32, Arc<dyn HostFile>>>,
    /// The blocks `read_shared` read last, verified, newest at the back. A block's bytes never
    /// change while a pointer (which holds its hash) names it, so no entry goes stale.
    recent: Mutex<VecDeque<(BlockPtr, Arc<[u8]>)>>,
    /// Handles without readahead for random reads of single blocks, per pack (`None`: the
    /// host has none).
    random_readers: RwLock<HashMap<u32, Option<Arc<dyn HostFile>>>>,
    /// `O_DIRECT` handles for long in-place reads, per pack (`None`: the host has none).
    direct_readers: RwLock<HashMap<u32, Option<Arc<dyn HostFile>>>>,
    active: Mutex<Active>,
    /// Held while a sync runs, so syncs run one at a time; holds why one failed, after which
    /// every later one fails too (see `sync_then`).
    sync_io: Mutex<Option<String>>,
    /// Data blocks recompressed elsewhere (`relocate.rs`); every read looks here first.
    moved: Relocations,
    /// Bytes written to the packs since open, by what they hold (`written`).
    wrote: Written,
    /// Where remote packs are read from (`set_remote`); none until a pull attaches some.
    remote: RwLock<Option<Arc<dyn RemotePacks>>>,
    /// Blocks placed and written out by the next `sync` (`write_deferred`, `deferred.rs`).
    deferred: Mutex<Deferred>,
    /// The writes (`Active::writes`) the last successful sync covered.
    synced: std::sync::atomic::AtomicU64,
    /// Set when a sync failed (as `sync_io` holds why): read without waiting for a sync.
    sync_failed: std::sync::atomic::AtomicBool,
}

/// Bytes written to the packs since the store was opened: data blocks, other blocks (the
/// trees: metadata), and compressed forms of old versions (`write_relocated`).
#[derive(Default)]
struct Written {
    data: std::sync::atomic::AtomicU64,
    meta: std::sync::atomic::AtomicU64,
    relocated: std::sync::atomic::AtomicU64,
}

impl Written {
    fn add(&self, kind: Option<BlockKind>, bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        match kind {
            Some(BlockKind::Data) => self.data.fetch_add(bytes as u64, Relaxed),
            Some(_) => self.meta.fetch_add(bytes as u64, Relaxed),
            None => self.relocated.fetch_add(bytes as u64, Relaxed),
        };
    }
}

impl BlockStore {
    /// Opens the packs of the store at `dir`, appending from `(pack, end)`, the position the
    /// newest superblock recorded. Nothing is cut off yet: the journal may name blocks past
    /// that position; the owner calls [`BlockStore::resume_at`] once it knows where to append.
    pub fn open(host: &Host, dir: &Path, pack: u32, end: u64, writable: bool) -> Result<BlockStore> {
        let mode = if writable { OpenMode::Create } else { OpenMode::Read };
        let (file, _) = open_pack(host, dir, pack, mode, end)?;
        let mut readers = HashMap::new();
        readers.insert(pack, file.clone());
        Ok(BlockStore {
            host: host.clone(),
            dir: dir.to_path_buf(),
            writable,
            readers: RwLock::new(readers),
            recent: Default::default(),
            random_readers: Default::default(),
            direct_readers: Default::default(),
            sync_io: Mutex::new(None),
            moved: Relocations::default(),
            wrote: Written::default(),
            remote: RwLock::new(None),
            deferred: Mutex::default(),
            synced: Default::default(),
            sync_failed: Default::default(),
            active: Mutex::new(Active {
                id: pack,
                file,
                end,
                unsynced: Vec::new(),
                writes: 0,
                direct: Direct::Untried,
                allocated: end,
                streams: HashMap::new(),
                tick: 0,
                unkept: Vec::new(),
                kept: Vec::new(),
                held: 0,
                held_max: HELD_MAX,
                since: std::time::Instant::now(),
            }),
        })
    }

    /// Sets the append position to `(pack, end)`, cutting off everything written after it
    /// (blocks of a checkpoint that never committed, or written ahead and never journaled)
    /// and removing later packs.
    pub fn resume_at(&self, pack: u32, end: u64) -> Result<()> {
        let (file, len) = open_pack(&self.host, &self.dir, pack, OpenMode::Create, end)?;
        if len > end {
            file.set_len(end)
                .map_err(|e| Error::io("truncation of uncommitted pack tail", e))?;
            file.sync_data().map_err(|e| Error::io("fsync of pack", e))?;
        }
        let mut removed = false;
        for id in self.pack_ids()? {
            if id > pack {
                let p = pack_path(&self.dir, id);
                self.host
                    .remove_file(&p)
                    .map_err(|e| Error::io(format!("removal of {}", p.display()), e))?;
                removed = true;
            }
        }
        if removed {
            crate::sync_dir(&self.host, &self.dir.join("packs"))?;
        }
        self.readers.write().unwrap().insert(pack, file.clone());
        let mut a = self.active.lock().unwrap();
        a.id = pack;
        a.file = file;
        a.end = end;
        a.allocated = end;
        // (At open, before any stream; places kept past `end` are gone.)
        a.streams.clear();
        a.held = 0;
        if let Direct::Open(_) = a.direct {
            a.direct = Direct::Untried;
        }
        Ok(())
    }

    /// The append position: `(pack, end)`. Recorded in the superblock at each checkpoint.
    pub fn position(&self) -> (u32, u64) {
        let a = self.active.lock().unwrap();
        (a.id, a.end)
    }

    /// Gives the source of remote packs' bytes (`remote.rs`).
    pub fn set_remote(&self, packs: Arc<dyn RemotePacks>) {
        *self.remote.write().unwrap() = Some(packs);
    }

    fn reader(&self, pack: u32) -> Result<Arc<dyn HostFile>> {
        if is_remote_pack(pack) {
            let r = self.remote.read().unwrap();
            return r.as_ref().and_then(|r| r.pack(pack)).ok_or_else(|| {
                Error::io(format!("read of remote pack {pack}"), std::io::Error::other("no remote holds it here"))
            });
        }
        if let Some(f) = self.readers.read().unwrap().get(&pack) {
            return Ok(f.clone());
        }
        let path = pack_path(&self.dir, pack);
        let mode = if self.writable {
            OpenMode::ReadWrite
        } else {
            OpenMode::Read
        };
        let f = self
            .host
            .open(&path, mode)
            .map_err(|e| Error::io(format!("open of pack {}", path.display()), e))?;
        self.readers.write().unwrap().insert(pack, f.clone());
        Ok(f)
    }

    /// Appends a block and returns its pointer. Not durable until `sync`.
    pub fn write(&self, kind: BlockKind, payload: &[u8]) -> Result<BlockPtr> {
        assert!(
            payload.len() <= MAX_BLOCK_LEN,
            "block payload of {} bytes",
            payload.len()
        );
        let fp = footprint(kind, payload.len()) as usize;
        let hash = *blake3::hash(payload).as_bytes();
        // A whole data block is written as it is; others get their header and padding.
        let framed;
        let bytes: &[u8] = if header_len(kind) == 0 && fp == payload.len() {
            payload
        } else {
            framed = frame(kind, payload, fp);
            &framed
        };

        let addr = self.append(bytes)?;
        self.wrote.add(Some(kind), bytes.len());
        Ok(BlockPtr {
            addr,
            len: payload.len() as u32,
            kind,
            hash,
        })
    }

    /// `write`, except that the bytes are written by the next `sync` (or `write_out_deferred`)
    /// rather than now: the block is placed, and reads find it meanwhile (`deferred.rs`). For
    /// tree nodes, which a fold makes under the engine lock. Written at once, as `write`,
    /// when `DEFERRED_MAX` bytes already wait.
    pub fn write_deferred(&self, kind: BlockKind, payload: &[u8]) -> Result<BlockPtr> {
        self.write_deferred_with(kind, payload.len(), |buf| buf.extend_from_slice(payload))
    }

    /// `write_deferred` of the payload `fill` appends to a buffer already framed for it (about
    /// `len` bytes): a tree node is encoded where it waits. Encoded apart, framed, then moved
    /// into its shared buffer, each of a fold's leaves was copied twice, and those copies took
    /// half of a fold's time under the engine lock (`examples/fold_cost` under `perf`).
    pub fn write_deferred_with(&self, kind: BlockKind, len: usize, fill: impl FnOnce(&mut Vec<u8>)) -> Result<BlockPtr> {
        let hl = header_len(kind);
        let mut framed = self.deferred.lock().unwrap().buffer(footprint(kind, len) as usize);
        framed.resize(hl, 0);
        fill(&mut framed);
        let payload_len = framed.len() - hl;
        assert!(payload_len <= MAX_BLOCK_LEN, "block payload of {payload_len} bytes");
        let fp = footprint(kind, payload_len) as usize;
        if !self.deferred.lock().unwrap().has_room(fp) {
            return self.write(kind, &framed[hl..]);
        }
        let hash = *blake3::hash(&framed[hl..]).as_bytes();
        let (header, payload) = framed.split_at_mut(hl);
        write_header(header, kind, payload);
        framed.resize(fp, 0);
        let (id, off, file) = {
            let mut a = self.active.lock().unwrap();
            let off = self.reserve(&mut a, fp as u64)?;
            (a.id, off, a.file.clone())
        };
        self.wrote.add(Some(kind), fp);
        let addr = BlockPtr::make_addr(id, off);
        self.deferred.lock().unwrap().put(addr, Waiting { file, framed: Arc::new(framed) });
        Ok(BlockPtr {
            addr,
            len: payload_len as u32,
            kind,
            hash,
        })
    }

    /// Writes every deferred block to its place (not durable until the packs are synced):
    /// neighbours in one write each, up to `RUN_MAX` bytes. A block stays deferred (and
    /// readable) until its write succeeds.
    fn write_out_deferred(&self) -> Result<()> {
        let mut blocks = self.deferred.lock().unwrap().all();
        let none: Arc<Vec<u8>> = Arc::default();
        let mut i = 0;
        while i < blocks.len() {
            // The run of blocks lying back to back in one pack from block i.
            let (addr, file, first) = &blocks[i];
            let mut j = i + 1;
            let mut len = first.len();
            while j < blocks.len()
                && Arc::ptr_eq(&blocks[j].1, file)
                && blocks[j].0 == addr + (len as u64 / BLOCK_ALIGN)
                && len + blocks[j].2.len() <= RUN_MAX
            {
                len += blocks[j].2.len();
                j += 1;
            }
            let at = BlockPtr::offset_of(*addr);
            let r = if j == i + 1 {
                file.write_all_at(first.as_slice(), at)
            } else {
                let mut buf = Vec::with_capacity(len);
                blocks[i..j].iter().for_each(|b| buf.extend_from_slice(&b.2));
                file.write_all_at(&buf, at)
            };
            r.map_err(|e| Error::io(format!("write to pack {}", *addr >> BlockPtr::OFFSET_BITS), e))?;
            self.active.lock().unwrap().to_sync(file.clone());
            let mut d = self.deferred.lock().unwrap();
            blocks[i..j].iter_mut().for_each(|b| d.written(b.0, std::mem::replace(&mut b.2, none.clone())));
            drop(d);
            i = j;
            // Between runs, a request's thread woken on this CPU goes first. The daemon's
            // background writes out at the FUSE queue threads' own priority (SCHED_IDLE), and
            // the scheduler lets the running one of two such threads finish its slice: a
            // woken queue thread waited behind several runs' copies, milliseconds each.
            if i < blocks.len() {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// How many deferred blocks lie below `(pack, end)` (none once a sync has run since they
    /// were placed: what a commit asserts).
    pub fn deferred_below(&self, (pack, end): (u32, u64)) -> usize {
        self.deferred.lock().unwrap().count_below(BlockPtr::make_addr(pack, end))
    }

    /// Lets the deferred blocks' spare buffers go if none was used since the last call: the
    /// daemon's background calls it every round (`deferred.rs`).
    pub fn release_idle_buffers(&self) {
        self.deferred.lock().unwrap().release_idle();
    }

    /// Bytes of spare buffers kept for deferred blocks (`deferred.rs`).
    pub fn deferred_spare_bytes(&self) -> usize {
        self.deferred.lock().unwrap().spare_bytes()
    }

    /// How many blocks are deferred now.
    pub fn deferred_count(&self) -> usize {
        self.deferred.lock().unwrap().len()
    }

    /// Appends framed, padded bytes at the append position; their address.
    fn append(&self, bytes: &[u8]) -> Result<u64> {
        debug_assert!(bytes.len() as u64 % BLOCK_ALIGN == 0);
        let mut a = self.active.lock().unwrap();
        if a.end + bytes.len() as u64 > PACK_ROLL_BYTES && a.end > 0 {
            self.roll(&mut a)?;
        }
        let off = a.end;
        a.file
            .write_all_at(bytes, off)
            .map_err(|e| Error::io(format!("write to pack {}", a.id), e))?;
        a.end += bytes.len() as u64;
        let f = a.file.clone();
        a.to_sync(f);
        Ok(BlockPtr::make_addr(a.id, off))
    }

    /// Appends the compressed forms of blocks (`relocate::compress`), packed into frames, and
    /// returns where each lies. Nothing reads them until `install_relocation`; not durable
    /// until `sync`.
    pub fn write_relocated(&self, forms: &[(BlockPtr, Vec<u8>)]) -> Result<Vec<Relocation>> {
        for (ptr, c) in forms {
            assert!(relocate::relocatable(ptr.kind), "{ptr} may not be relocated");
            assert!(c.len() < ptr.len as usize, "a compressed form longer than {ptr}");
        }
        let list: Vec<(BlockKind, &[u8])> = forms.iter().map(|(p, c)| (p.kind, c.as_slice())).collect();
        let mut out = Vec::with_capacity(forms.len());
        let mut sizes = forms.iter().map(|(_, c)| c.len() as u32);
        for (bytes, offsets) in relocate::frames(&list) {
            let addr = self.append(&bytes)?;
            self.wrote.add(None, bytes.len());
            for at in offsets {
                out.push(Relocation {
                    addr,
                    at,
                    stored: sizes.next().expect("one offset per form"),
                });
            }
        }
        assert_eq!(out.len(), forms.len());
        Ok(out)
    }

    /// From now on `ptr` is read from `r`. Its old place is the caller's to punch, once a
    /// committed checkpoint holds the relocation (`punch_original`).
    pub fn install_relocation(&self, ptr: &BlockPtr, r: Relocation) {
        assert!(relocate::relocatable(ptr.kind), "{ptr} may not be relocated");
        self.moved.install(ptr.addr, r);
    }

    /// Punches the place `ptr` had before it was relocated. A read that planned to read it
    /// there and finds it gone reads the relocated form (`reread_if_moved`).
    pub fn punch_original(&self, ptr: &BlockPtr) -> Result<()> {
        assert!(self.moved.get(ptr.addr).is_some(), "{ptr} is not relocated");
        self.punch_run(ptr.pack(), ptr.offset(), ptr.footprint())
    }

    /// Where `ptr` was relocated, if it was.
    pub fn relocation(&self, ptr: &BlockPtr) -> Option<Relocation> {
        self.moved.get(ptr.addr)
    }

    /// The span `(pack, start, end)` of the frame holding `ptr`'s compressed form, if it was
    /// relocated: a frame is kept whole while any member lives (punched with its last).
    pub fn relocation_frame(&self, ptr: &BlockPtr) -> Option<(u32, u64, u64)> {
        self.moved.frame_span(ptr.addr)
    }

    /// Sets the relocation map, as the committed checkpoint records it (at open).
    pub fn load_relocations(&self, entries: Vec<(u64, Relocation)>) {
        self.moved.load(entries);
    }

    /// Relocations made and dropped since the last call, in order, for the checkpoint that
    /// persists them.
    pub fn take_relocation_changes(&self) -> Vec<(u64, Option<Relocation>)> {
        self.moved.take_changes()
    }

    /// Whether relocations were made or dropped since the last `take_relocation_changes`.
    pub fn has_relocation_changes(&self) -> bool {
        self.moved.has_changes()
    }

    /// How many blocks are relocated, and the bytes their compressed forms occupy.
    pub fn relocation_stats(&self) -> (u64, u64) {
        self.moved.stats()
    }

    /// Bytes block `ptr` occupies in the packs: its compressed form's, if relocated.
    pub fn stored_footprint(&self, ptr: &BlockPtr) -> u64 {
        self.moved.get(ptr.addr).map_or(ptr.footprint(), |r| r.footprint())
    }

    /// Appends blocks of any length back to back with one write, each framed and padded as
    /// `write` would, and returns their pointers. Like `write_data_run`, the space is
    /// reserved under the lock and written outside it, and the pack joins the list `sync`
    /// covers once the write is done. Not durable until `sync`.
    pub fn write_batch(&self, kind: BlockKind, payloads: &[&[u8]]) -> Result<Vec<BlockPtr>> {
        let mut buf = Vec::with_capacity(payloads.iter().map(|p| footprint(kind, p.len()) as usize).sum());
        let mut blocks = Vec::with_capacity(payloads.len()); // (offset in buf, len, hash)
        for p in payloads {
            assert!(p.len() <= MAX_BLOCK_LEN, "block payload of {} bytes", p.len());
            let fp = footprint(kind, p.len()) as usize;
            blocks.push((buf.len() as u64, p.len() as u32, *blake3::hash(p).as_bytes()));
            frame_into(&mut buf, kind, p, fp);
        }
        assert!(buf.len() as u64 <= PACK_ROLL_BYTES, "a batch of {} bytes", buf.len());
        let (id, off, file) = {
            let mut a = self.active.lock().unwrap();
            let off = self.reserve(&mut a, buf.len() as u64)?;
            (a.id, off, a.file.clone())
        };
        file.write_all_at(&buf, off)
            .map_err(|e| Error::io(format!("write to pack {id}"), e))?;
        self.wrote.add(Some(kind), buf.len());
        self.active.lock().unwrap().to_sync(file);
        Ok(blocks
            .into_iter()
            .map(|(at, len, hash)| BlockPtr {
                addr: BlockPtr::make_addr(id, off + at),
                len,
                kind,
                hash,
            })
            .collect())
    }

    /// Reserves `len` bytes at the active pack's end (rolling to a new pack first if they do
    /// not fit), for a caller that writes them after releasing the lock; returns the offset.
    fn reserve(&self, a: &mut Active, len: u64) -> Result<u64> {
        if a.end + len > PACK_ROLL_BYTES && a.end > 0 {
            self.roll(a)?;
        }
        let off = a.end;
        a.end += len;
        Ok(off)
    }

    fn roll(&self, a: &mut Active) -> Result<()> {
        self.trim(a);
        // Places kept in this pack are given up: writes go to the next one now.
        Self::forget_streams(a);
        let id = a.id + 1;
        let path = pack_path(&self.dir, id);
        let f = self
            .host
            .open(&path, OpenMode::Truncate)
            .map_err(|e| Error::io(format!("creation of pack {}", path.display()), e))?;
        crate::sync_dir(&self.host, &self.dir.join("packs"))?;
        self.readers.write().unwrap().insert(id, f.clone());
        a.id = id;
        a.file = f;
        a.end = 0;
        a.allocated = 0;
        if let Direct::Open(_) = a.direct {
            a.direct = Direct::Untried;
        }
        Ok(())
    }

    /// Appends whole data blocks lying back to back in `data` (each `block_len` bytes, a
    /// multiple of `BLOCK_ALIGN`, so each fills its pages alone) with one write, bypassing
    /// the host's page cache where it can if the run is long (see `Direct`,
    /// `DIRECT_WRITE_MIN`). Not durable until `sync`.
    ///
    /// The space is reserved under the lock and written outside it, so writers overlap. The
    /// pack joins the list `sync` covers only once the write is done: a caller journals the
    /// blocks after this returns, and the next `sync` then covers them.
    pub fn write_data_run(&self, data: &[u8], block_len: usize) -> Result<Vec<BlockPtr>> {
        let (ptrs, _) = self.write_run(data, block_len, false, |s, a, len| Ok((s.reserve(a, len)?, len)))?;
        Ok(ptrs)
    }

    /// `write_data_run` of chunks `first..` of file `key` (chunks of `block_len`): placed
    /// where the file's run of chunks in the pack goes on (`Stream`) when it can, else
    /// appended as `write_data_run` does.
    /// Each block's page sums come back with it (made beside the write, `write_run`).
    pub fn write_data_run_for(&self, key: u64, first: u64, data: &[u8], block_len: usize) -> Result<(Vec<BlockPtr>, Vec<Vec<u32>>)> {
        let unit = block_len.max(1);
        let mut out = Vec::with_capacity(data.len() / unit);
        let mut sums = Vec::with_capacity(data.len() / unit);
        // Each pass places the longest first part that goes to one place, within one region.
        while out.len() * unit < data.len() {
            let idx = first + out.len() as u64;
            let region = idx / REGION_CHUNKS;
            let n = ((data.len() / unit - out.len()) as u64).min((region + 1) * REGION_CHUNKS - idx);
            let part = &data[out.len() * unit..out.len() * unit + n as usize * unit];
            let (ptrs, part_sums) = self.write_run(part, block_len, true, |s, a, len| s.place(a, (key, region), idx, n, len))?;
            out.extend(ptrs);
            sums.extend(part_sums);
        }
        Ok((out, sums))
    }

    /// Chunks `first..end` of file `key` are zeros (holes): its run goes on past them
    /// without keeping them a place.
    pub fn note_zero_chunks(&self, key: u64, first: u64, end: u64) {
        let mut a = self.active.lock().unwrap();
        if let Some(s) = a.streams.get_mut(&(key, first / REGION_CHUNKS)) {
            if s.next_idx == first {
                s.next_idx = end;
            }
        }
    }

    /// The pack offset for chunks `idx..idx + n` (`len` bytes) of file `key`, or for the first
    /// of them (the bytes taken are returned too): a place kept for them, the run's next
    /// place if nothing was appended since, or a new run at the end. A write that meets a
    /// place kept for part of it is cut there.
    fn place(&self, a: &mut Active, key: StreamKey, idx: u64, n: u64, len: u64) -> Result<(u64, u64)> {
        assert!(n > 0 && len % n == 0, "{n} chunks in {len} bytes");
        let unit = len / n;
        let n = match a.streams.get(&key).filter(|s| s.unit == unit) {
            Some(s) => s.gaps.iter().fold(n, |n, g| match () {
                _ if g.0 <= idx && idx < g.1 => n.min(g.1 - idx),
                _ if idx < g.0 && g.0 < idx + n => n.min(g.0 - idx),
                _ => n,
            }),
            None => n,
        };
        let len = n * unit;
        self.place_whole(a, key, idx, n, len).map(|off| (off, len))
    }

    /// `place` of chunks none of which a kept place covers but wholly.
    fn place_whole(&self, a: &mut Active, key: StreamKey, idx: u64, n: u64, len: u64) -> Result<u64> {
        let unit = len / n;
        a.tick += 1;
        let (tick, id, end) = (a.tick, a.id, a.end);
        let epoch = a.since.elapsed().as_millis() as u64;
        let mine = a.streams.get_mut(&key).filter(|s| s.pack == id && s.unit == unit);
        let off = match mine {
            Some(s) => {
                s.tick = tick;
                if let Some(off) = s.fill(idx, n, &mut a.held) {
                    off
                } else if let Some(gap) = idx.checked_sub(s.next_idx).filter(|g| *g <= MAX_GAP_CHUNKS && end == s.next_off) {
                    // The run goes on (past places kept for writes still on their way).
                    if gap > 0 {
                        s.keep((s.next_idx, idx, end, epoch), places!(a));
                    }
                    let off = end + gap * unit;
                    s.next_idx = idx + n;
                    s.next_off = off + len;
                    a.end = off + len;
                    off
                } else if idx + n <= s.next_idx {
                    return self.reserve(a, len); // a write that came late, its place not kept
                } else {
                    self.new_run(a, key, idx, n, unit, epoch)?
                }
            }
            None => self.new_run(a, key, idx, n, unit, epoch)?,
        };
        self.keep_ahead(a, key, n, epoch);
        Ok(off)
    }

    /// A new run of file `key`'s chunks at the end: its first here, or something else was
    /// appended since its last. The writes between its last and this one may still be on
    /// their way (with the whole cache written back at once, some are served far behind):
    /// their places are kept ahead of this one. Places kept before stay kept.
    fn new_run(&self, a: &mut Active, key: StreamKey, idx: u64, n: u64, unit: u64, epoch: u64) -> Result<u64> {
        let mine = a.streams.get(&key).filter(|s| s.pack == a.id && s.unit == unit);
        let start = key.1 * REGION_CHUNKS;
        let from = mine.map_or(start, |s| s.next_idx);
        let reach = match mine {
            Some(s) if s.placed >= AHEAD_MIN_CHUNKS => MAX_GAP_CHUNKS,
            None if idx - start <= MAX_GAP_CHUNKS / 4 => MAX_GAP_CHUNKS / 4,
            _ => MAX_GAP_SHORT,
        };
        let lead = idx.checked_sub(from).filter(|g| *g <= reach).unwrap_or(0);
        let base = self.reserve(a, (lead + n) * unit)?;
        let mut stream = match a.streams.remove(&key) {
            Some(s) if s.pack == a.id && s.unit == unit => s,
            Some(s) => {
                a.streams.insert(key, s);
                Self::unkeep(a, key);
                Stream::new(a.id, unit)
            }
            None => Stream::new(a.id, unit),
        };
        if lead > 0 {
            stream.keep((from, idx, base, epoch), places!(a));
        }
        if a.streams.len() >= MAX_STREAMS {
            if let Some(old) = a.streams.iter().min_by_key(|(_, s)| s.tick).map(|(k, _)| *k) {
                Self::unkeep(a, old);
            }
        }
        let off = base + lead * unit;
        (stream.next_idx, stream.next_off, stream.tick, stream.placed) = (idx + n, off + n * unit, a.tick, 0);
        a.streams.insert(key, stream);
        Ok(off)
    }

    /// Counts `n` chunks placed for `key`, and once its writes have run on for a while keeps
    /// the places of as many chunks again past its run's end (at most `AHEAD_MAX_CHUNKS`), so
    /// that what else is appended meanwhile (checkpoints, late writes, other files) goes after
    /// them rather than between its runs.
    fn keep_ahead(&self, a: &mut Active, key: StreamKey, n: u64, epoch: u64) {
        let (id, end) = (a.id, a.end);
        let Some(s) = a.streams.get_mut(&key) else { return };
        s.placed += n;
        let kept_ahead = s.gaps.iter().filter(|g| g.1 == s.next_idx).map(|g| g.1 - g.0).sum::<u64>();
        // (Not past the region's end: the next region's writes go to a stream of their own.)
        let want = s.placed.min(AHEAD_MAX_CHUNKS).min(((key.1 + 1) * REGION_CHUNKS).saturating_sub(s.next_idx));
        if s.pack != id || end != s.next_off || want < AHEAD_MIN_CHUNKS || kept_ahead * 2 > want {
            return;
        }
        let bytes = want * s.unit;
        if end + bytes > PACK_ROLL_BYTES {
            return;
        }
        let (from, at) = (s.next_idx, s.next_off);
        s.keep((from, from + want, at, epoch), places!(a));
        s.next_idx = from + want;
        s.next_off = at + bytes;
        a.end = at + bytes;
    }

    /// Forgets file `key`'s stream; the places it kept are to be given back.
    fn unkeep(a: &mut Active, key: StreamKey) {
        if let Some(s) = a.streams.remove(&key) {
            assert_eq!(s.pack, a.id, "a stream outlived its pack");
            for g in &s.gaps {
                s.give_up(g, places!(a));
            }
        }
    }

    /// Gives back the places kept for writes that have not come in `GAP_WAIT_MS`; the owner
    /// calls this at each checkpoint. Without it, a file written with holes, or from the
    /// middle, would keep allocated pack space that nothing will ever fill.
    pub fn settle_streams(&self) {
        self.give_back_kept(GAP_WAIT_MS);
    }

    /// Gives back every place kept and forgets the streams: at unmount, so that a closed
    /// store holds no space that nothing references.
    pub fn end_streams(&self) {
        let unkept = {
            let mut a = self.active.lock().unwrap();
            Self::forget_streams(&mut a);
            std::mem::take(&mut a.unkept)
        };
        self.punch_unkept(unkept);
    }

    /// File `key` was closed by its last user: its streams are forgotten and the places they
    /// kept given up, to be made holes by the next run written or checkpoint (`unkept`), as
    /// XFS trims a file's speculative preallocation at close. Its write-back came before the
    /// close (the kernel flushes a file's pages then), so no write is on its way to them;
    /// held, they would take host space for up to `GAP_WAIT_MS` (an 8 MiB file: 6 MiB more).
    pub fn end_file(&self, key: u64) {
        let mut a = self.active.lock().unwrap();
        let keys: Vec<StreamKey> = a.streams.keys().filter(|k| k.0 == key).copied().collect();
        for k in keys {
            Self::unkeep(&mut a, k);
        }
    }

    /// Forgets every stream, its places given up (onto `unkept`).
    fn forget_streams(a: &mut Active) {
        let keys: Vec<StreamKey> = a.streams.keys().copied().collect();
        for key in keys {
            Self::unkeep(a, key);
        }
        assert_eq!(a.held, 0, "held places outside any stream");
    }

    /// Gives back the places kept at least `age_ms` ago.
    fn give_back_kept(&self, age_ms: u64) {
        let unkept = {
            let mut guard = self.active.lock().unwrap();
            let a = &mut *guard;
            let now = a.since.elapsed().as_millis() as u64;
            for s in a.streams.values_mut() {
                let (old, kept): (Vec<_>, Vec<_>) = s.gaps.drain(..).partition(|g| g.3 + age_ms <= now);
                for g in &old {
                    s.give_up(g, places!(a));
                }
                s.gaps = kept;
            }
            std::mem::take(&mut a.unkept)
        };
        self.punch_unkept(unkept);
    }

    /// Punches places given up (no longer in any stream, so no write will come there).
    fn punch_unkept(&self, unkept: Vec<(u32, u64, u64)>) {
        for (pack, start, end) in unkept {
            // Never written (the pack may be allocated there): a leak of space, not of data.
            if let Err(e) = self.punch_run(pack, start, end - start) {
                log::warn!("a place kept for a write that never came stays allocated: {e}");
            }
        }
    }

    /// Writes whole blocks at the offset `place` gives (under the active pack's lock), with
    /// each block's page sums if `sums` (else none).
    fn write_run(
        &self,
        data: &[u8],
        block_len: usize,
        sums: bool,
        place: impl FnOnce(&Self, &mut Active, u64) -> Result<(u64, u64)>,
    ) -> Result<(Vec<BlockPtr>, Vec<Vec<u32>>)> {
        assert!(
            block_len > 0 && block_len as u64 % BLOCK_ALIGN == 0 && block_len <= MAX_BLOCK_LEN,
            "data block of {block_len} bytes"
        );
        assert_eq!(data.len() % block_len, 0, "a run of whole blocks");
        let unkept;
        let held_max = match self.host.space(&self.dir) {
            Ok(sp) => HELD_MAX.min(sp.available.saturating_mul(sp.block_size) / 16),
            Err(_) => 0,
        };
        let (id, off, file, direct, data) = {
            let mut a = self.active.lock().unwrap();
            a.held_max = held_max;
            let (off, taken) = place(self, &mut a, data.len() as u64)?;
            assert!(taken > 0 && taken <= data.len() as u64 && taken % block_len as u64 == 0);
            let data = &data[..taken as usize];
            unkept = std::mem::take(&mut a.unkept);
            let direct = if data.len() >= DIRECT_WRITE_MIN {
                self.direct_handle(&mut a)
            } else {
                None
            };
            if direct.is_some() && a.end > a.allocated {
                let to = a.end + PREALLOC_BYTES;
                match a.file.allocate(a.allocated, to - a.allocated) {
                    Ok(()) => a.allocated = to,
                    // A host without it, or short of space: the write extends the file.
                    Err(e) => log::debug!("allocation ahead in pack {}: {e}", a.id),
                }
            }
            // Under the lock: a write may fill a kept place as soon as it is let go.
            for (pack, start, end) in std::mem::take(&mut a.kept) {
                if let Err(e) = self.punch_run(pack, start, end - start) {
                    log::debug!("a kept place in pack {pack} stays allocated: {e}");
                }
            }
            (a.id, off, a.file.clone(), direct, data)
        };
        // (Hashed outside the lock.)
        let hash = || -> (Vec<[u8; 32]>, Vec<Vec<u32>>) {
            let blocks = data.chunks(block_len);
            let sums = if sums { blocks.clone().map(page_sums).collect() } else { Vec::new() };
            (blocks.map(|b| *blake3::hash(b).as_bytes()).collect(), sums)
        };
        self.punch_unkept(unkept);
        let mut hashed = None;
        if let Some(f) = direct {
            // The device takes 1-3 ms for a direct write of 1 MiB, BLAKE3 and the page sums
            // ~0.35 ms of CPU: they are made while the device writes (both only read `data`). Done in turn,
            // a FUSE queue thread's write-back of a 1 GiB file spent that CPU with no write
            // in flight.
            let (written, (hashes, sums)) = alongside(hash, || write_aligned(&*f, data, off));
            match written {
                Ok(()) => return Ok((self.written_run(id, off, file, block_len, hashes), sums)),
                Err(e) => {
                    // Whatever part of it reached the file is written again below.
                    log::warn!("direct write to pack {id}: {e}; pack data goes through the page cache from now on");
                    self.active.lock().unwrap().direct = Direct::Off;
                    hashed = Some((hashes, sums));
                }
            }
        }
        let (hashes, sums) = hashed.unwrap_or_else(hash);
        file.write_all_at(data, off)
            .map_err(|e| Error::io(format!("write to pack {id}"), e))?;
        Ok((self.written_run(id, off, file, block_len, hashes), sums))
    }

    /// Bytes written to the packs since open: data blocks, metadata blocks, compressed forms
    /// of old versions.
    pub fn written(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let w = &self.wrote;
        (w.data.load(Relaxed), w.meta.load(Relaxed), w.relocated.load(Relaxed))
    }

    /// The end of `write_data_run`: the pack is now one `sync` must cover.
    fn written_run(
        &self,
        id: u32,
        off: u64,
        file: Arc<dyn HostFile>,
        block_len: usize,
        hashes: Vec<[u8; 32]>,
    ) -> Vec<BlockPtr> {
        self.active.lock().unwrap().to_sync(file);
        self.wrote.add(Some(BlockKind::Data), hashes.len() * block_len);
        hashes
            .into_iter()
            .enumerate()
            .map(|(i, hash)| BlockPtr {
                addr: BlockPtr::make_addr(id, off + (i * block_len) as u64),
                len: block_len as u32,
                kind: BlockKind::Data,
                hash,
            })
            .collect()
    }

    /// The active pack's handle for direct writes, opened on first use; `None` where the
    /// host has none.
    fn direct_handle(&self, a: &mut Active) -> Option<Arc<dyn HostFile>> {
        if let Direct::Untried = a.direct {
            let path = pack_path(&self.dir, a.id);
            a.direct = match self.host.open_direct(&path, true) {
                Ok(Some(f)) => Direct::Open(f),
                Ok(None) => {
                    log::info!("the host filesystem has no direct I/O: pack data goes through its page cache");
                    Direct::Off
                }
                Err(e) => {
                    log::warn!(
                        "direct open of {}: {e}; pack data goes through the page cache",
                        path.display()
                    );
                    Direct::Off
                }
            };
        }
        match &a.direct {
            Direct::Open(f) => Some(f.clone()),
            _ => None,
        }
    }

    /// Cuts the active pack's allocation ahead back to its append position. Space reserved
    /// by writers still writing lies below `end`, so nothing of theirs is cut. A failure
    /// costs only space (the next sync tries again; reopening the store cuts it anyway), so
    /// it fails nothing.
    fn trim(&self, a: &mut Active) {
        if a.allocated > a.end {
            match a.file.set_len(a.end) {
                Ok(()) => a.allocated = a.end,
                Err(e) => log::warn!("cutting the allocation ahead of pack {} at {}: {e}", a.id, a.end),
            }
        }
    }

    /// Makes every block written so far durable.
    pub fn sync(&self) -> Result<()> {
        self.sync_then(&|| Ok(()))
    }

    /// Makes every block written so far durable, then runs `then` (the journal's fsync: its
    /// records name these blocks, so they must not be durable before the blocks are). Callers
    /// need not hold any lock of theirs: syncs run one at a time here, and a block written
    /// before this call is either on the list this sync takes or was taken by an earlier
    /// sync that has finished. Once one fails, every later one fails too: the host may have
    /// dropped the pages it could not write while telling only that one caller, so a later
    /// fsync that "succeeds" would prove nothing. A remount (a new store) starts afresh.
    pub fn sync_then(&self, then: &dyn Fn() -> Result<()>) -> Result<()> {
        let mut failed = self.sync_io.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = &*failed {
            return Err(Error::io(
                format!("fsync refused: an earlier one failed ({why})"),
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        // Deferred blocks first: the blocks this sync makes durable include them.
        let r = self.write_out_deferred().and_then(|()| {
            let (files, writes) = {
                let mut a = self.active.lock().unwrap();
                self.trim(&mut a);
                (std::mem::take(&mut a.unsynced), a.writes)
            };
            files
                .iter()
                .try_for_each(|f| f.sync_data().map_err(|e| Error::io("fsync of pack", e)))
                .map(|()| self.synced.fetch_max(writes, std::sync::atomic::Ordering::SeqCst))
        });
        let r = r.and_then(|_| then());
        if let Err(e) = &r {
            *failed = Some(e.to_string());
            self.sync_failed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        r
    }

    /// How many writes to the packs were done so far: what a journal record naming blocks
    /// just written needs synced (`synced_through`).
    pub fn writes(&self) -> u64 {
        self.active.lock().unwrap().writes
    }

    /// Whether a finished sync covered the first `writes` writes, and no sync failed: then a
    /// journal whose records name no block written since needs no pack synced before its own
    /// fsync, and need not wait for a sync in progress (a checkpoint's, which writes out its
    /// trees and syncs the packs for tens of milliseconds, or a bulk writer's).
    pub fn synced_through(&self, writes: u64) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        !self.sync_failed.load(SeqCst) && self.synced.load(SeqCst) >= writes
    }

    /// Reads a block and verifies its header, checksum and content hash.
    pub fn read(&self, ptr: &BlockPtr) -> Result<Vec<u8>> {
        let waiting = self.deferred.lock().unwrap().get(ptr.addr);
        if let Some(framed) = waiting {
            let n = (header_len(ptr.kind) + ptr.len as usize).min(framed.len());
            return verify(ptr, &framed[..n]).map(|p| p.to_vec());
        }
        if let Some(r) = self.moved.get(ptr.addr) {
            return self.read_moved(ptr, &r);
        }
        self.read_in_place(ptr).or_else(|e| self.reread_if_moved(ptr, e))
    }

    /// After a read of `ptr` where it was written failed with `e`: if the block has been
    /// relocated meanwhile (and its old place punched), its relocated form; else `e`.
    fn reread_if_moved<T: From<Vec<u8>>>(&self, ptr: &BlockPtr, e: Error) -> Result<T> {
        match self.moved.get(ptr.addr) {
            Some(r) => self.read_moved(ptr, &r).map(T::from),
            None => Err(e),
        }
    }

    /// Reads relocated block `ptr` from `r`: checked, decompressed, its hash verified.
    fn read_moved(&self, ptr: &BlockPtr, r: &Relocation) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; BLOCK_HEADER_LEN + r.stored as usize];
        self.reader(r.pack())?.read_exact_at(&mut buf, r.offset()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt("compressed block", ptr, "lies past the end of its pack (truncated pack?)")
            } else {
                Error::io(format!("read of compressed {ptr}"), e)
            }
        })?;
        relocate::open(ptr, r, &buf)
    }

    fn read_in_place(&self, ptr: &BlockPtr) -> Result<Vec<u8>> {
        let f = self.reader(ptr.pack())?;
        let mut buf = vec![0u8; header_len(ptr.kind) + ptr.len as usize];
        f.read_exact_at(&mut buf, ptr.offset()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt("block", ptr, "lies past the end of its pack (truncated pack?)")
            } else {
                Error::io(format!("read of {ptr}"), e)
            }
        })?;
        let payload = verify(ptr, &buf)?;
        Ok(payload.to_vec())
    }

    /// `read` for callers that read parts of one block several times in a row: the kernel
    /// filling one page before a small write and then writing the page back (whose changed
    /// bytes are found by comparing it with the block), or a reader going through a file
    /// page by page. The last `RECENT_BLOCKS` blocks read this way are kept, verified.
    /// `random`: the caller wants a little of this block on its own (a page filled before a
    /// small write, a 4 KiB random read), so a data block is read without the host's
    /// readahead, which would only read what nobody asked for (`read_random`).
    pub fn read_shared(&self, ptr: &BlockPtr, random: bool) -> Result<Arc<[u8]>> {
        if let Some((_, data)) = self.recent.lock().unwrap().iter().rev().find(|(p, _)| p == ptr) {
            return Ok(data.clone());
        }
        let data: Arc<[u8]> = match random.then(|| self.read_random(ptr)).flatten() {
            Some(r) => r?.into(),
            None => self.read(ptr)?.into(),
        };
        let mut recent = self.recent.lock().unwrap();
        if recent.len() == RECENT_BLOCKS {
            recent.pop_front();
        }
        recent.push_back((*ptr, data.clone()));
        Ok(data)
    }

    /// Pages `first..first + count` of a data block (the last one cut at the block's end),
    /// read alone and each verified against `sums`, the block's page sums: a small read
    /// reads and verifies the pages it needs, not the whole block. Through the handle
    /// without readahead, as `read_shared` reads for random accesses.
    pub fn read_pages(&self, ptr: &BlockPtr, sums: &[u32], first: usize, count: usize) -> Result<Vec<u8>> {
        let len = ptr.len as usize;
        if header_len(ptr.kind) != 0 || sums.len() != len.div_ceil(PAGE) || count == 0 || first + count > sums.len() {
            return Err(Error::corrupt(
                "page sums",
                ptr,
                format!("{} sums for {len} bytes, pages {first}+{count} asked", sums.len()),
            ));
        }
        let whole = |b: &[u8]| b[first * PAGE..((first + count) * PAGE).min(len)].to_vec();
        if self.moved.get(ptr.addr).is_some() {
            // A compressed block is read and verified whole; its page sums describe the
            // logical bytes, not what lies in the pack.
            return self.read_shared(ptr, true).map(|b| whole(&b));
        }
        match self.read_pages_in_place(ptr, sums, first, count) {
            Err(_) if self.moved.get(ptr.addr).is_some() => self.read(ptr).map(|b| whole(&b)),
            r => r,
        }
    }

    /// `read_pages` of a block where it was written (arguments checked by the caller).
    fn read_pages_in_place(&self, ptr: &BlockPtr, sums: &[u32], first: usize, count: usize) -> Result<Vec<u8>> {
        let len = ptr.len as usize;
        if let Some((_, data)) = self.recent.lock().unwrap().iter().rev().find(|(p, _)| p == ptr) {
            return Ok(data[first * PAGE..((first + count) * PAGE).min(len)].to_vec());
        }
        let (start, end) = (first * PAGE, ((first + count) * PAGE).min(len));
        let mut buf = vec![0u8; end - start];
        let f = match self.random_reader(ptr.pack()) {
            Some(f) => f,
            None => self.reader(ptr.pack())?,
        };
        f.read_exact_at(&mut buf, ptr.offset() + start as u64).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupt("block", ptr, "lies past the end of its pack (truncated pack?)")
            } else {
                Error::io(format!("read of {ptr}"), e)
            }
        })?;
        for (i, page) in buf.chunks(PAGE).enumerate() {
            if crc32c::crc32c(page) != sums[first + i] {
                return Err(Error::corrupt(
                    "block",
                    ptr,
                    format!(
                        "page {} differs from its checksum (damaged, stale or misdirected)",
                        first + i
                    ),
                ));
            }
        }
        Ok(buf)
    }

    /// Bytes `from..from + len` of a data block, which must lie within it: the pages that
    /// hold them, read and verified by `read_pages`.
    pub fn read_range(&self, ptr: &BlockPtr, sums: &[u32], from: usize, len: usize) -> Result<Vec<u8>> {
        assert!(
            len > 0 && from + len <= ptr.len as usize,
            "range {from}+{len} outside {ptr}"
        );
        let first = from / PAGE;
        let last = (from + len - 1) / PAGE;
        let mut data = self.read_pages(ptr, sums, first, last - first + 1)?;
        let skip = from - first * PAGE;
        data.drain(..skip);
        data.truncate(len);
        Ok(data)
    }

    /// A data block read through a handle without readahead (`HostFs::open_random`), for
    /// random accesses (`read_shared`). The block stays in the host's page cache, so the
    /// next small read of it costs no disk read: reading past the cache (`O_DIRECT`) made
    /// fio's cold 4 KiB random reads of a 1 GiB file three times slower (design.md).
    /// Sequential reads keep the host's readahead, which a cold `grep -r` of many files
    /// needs. `None`: not a data block, or no such handle; the caller reads the usual way.
    fn read_random(&self, ptr: &BlockPtr) -> Option<Result<Vec<u8>>> {
        if header_len(ptr.kind) != 0 || self.moved.get(ptr.addr).is_some() {
            return None;
        }
        let f = self.random_reader(ptr.pack())?;
        let mut buf = vec![0u8; ptr.len as usize];
        match f.read_exact_at(&mut buf, ptr.offset()) {
            Ok(()) => {
                let ok = verify(ptr, &buf).map(|_| ());
                Some(ok.map(|()| buf))
            }
            // The usual read says which block is missing or unreadable.
            Err(_) => None,
        }
    }

    /// A handle on `pack` without readahead, opened on first use; `None` where the host has
    /// none.
    fn random_reader(&self, pack: u32) -> Option<Arc<dyn HostFile>> {
        self.special_handle(&self.random_readers, pack, |p| self.host.open_random(p))
    }

    /// A handle on `pack` that reads past the host's page cache, opened on first use; `None`
    /// where the host has none.
    fn direct_reader(&self, pack: u32) -> Option<Arc<dyn HostFile>> {
        self.special_handle(&self.direct_readers, pack, |p| self.host.open_direct(p, false))
    }

    /// The handle of `pack` in `cache`, opened with `open` on first use (and `None`, kept,
    /// where the host has no such handle or cannot open it).
    fn special_handle(
        &self,
        cache: &RwLock<HashMap<u32, Option<Arc<dyn HostFile>>>>,
        pack: u32,
        open: impl FnOnce(&Path) -> std::io::Result<Option<Arc<dyn HostFile>>>,
    ) -> Option<Arc<dyn HostFile>> {
        if is_remote_pack(pack) {
            return None;
        }
        if let Some(f) = cache.read().unwrap().get(&pack) {
            return f.clone();
        }
        let f = open(&pack_path(&self.dir, pack)).unwrap_or(None);
        cache.write().unwrap().insert(pack, f.clone());
        f
    }

    /// Reads blocks that lie back to back in one pack with a single read, then verifies
    /// each. Sequential file reads are served this way, so the host sees large requests.
    pub fn read_run(&self, ptrs: &[BlockPtr]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(ptrs.len());
        self.read_run_each(ptrs, &mut |_, payload| out.push(payload.to_vec()))?;
        Ok(out)
    }

    /// `read_run` without a copy per block: hands each verified payload to `f` with its index
    /// in `ptrs`, in order, straight from one read buffer kept per thread (a 1 MiB file read
    /// would otherwise allocate, zero and copy 17 buffers).
    pub fn read_run_each(&self, ptrs: &[BlockPtr], f: &mut dyn FnMut(usize, &[u8])) -> Result<()> {
        let Some(first) = ptrs.first() else { return Ok(()) };
        let contiguous = ptrs
            .windows(2)
            .all(|w| w[1].pack() == w[0].pack() && w[1].offset() == w[0].offset() + w[0].footprint());
        let one_by_one = |f: &mut dyn FnMut(usize, &[u8])| -> Result<()> {
            for (i, p) in ptrs.iter().enumerate() {
                f(i, &self.read(p)?);
            }
            Ok(())
        };
        if !contiguous || ptrs.len() == 1 || self.moved.any(ptrs) {
            return one_by_one(f);
        }
        let last = ptrs.last().unwrap();
        let total = (last.offset() + header_len(last.kind) as u64 + last.len as u64 - first.offset()) as usize;
        let file = self.reader(first.pack())?;
        RUN_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            buf.resize(total, 0);
            if let Err(e) = file.read_exact_at(&mut buf[..total], first.offset()) {
                // Let the block-by-block path say which block is missing or unreadable.
                log::debug!("run read of {} blocks at {first}: {e}", ptrs.len());
                drop(buf);
                return one_by_one(f);
            }
            for (i, p) in ptrs.iter().enumerate() {
                let at = (p.offset() - first.offset()) as usize;
                match verify(p, &buf[at..at + header_len(p.kind) + p.len as usize]) {
                    Ok(payload) => f(i, payload),
                    // Relocated (and punched) since the check above.
                    Err(e) => f(i, &self.reread_if_moved::<Vec<u8>>(p, e)?),
                }
            }
            // A thread that once read a huge run does not keep the buffer for ever.
            if buf.capacity() > RUN_BUF_KEEP {
                *buf = Vec::new();
            }
            Ok(())
        })
    }

    /// Reads whole headerless blocks whose payloads lie back to back in one pack straight into
    /// `out` (their payloads concatenated, `out.len()` bytes) with one read, and verifies each
    /// in place. Returns false, having read nothing, when the blocks do not lie so. `stream`:
    /// the caller is deep in a long sequential read, and a long page-aligned run may bypass
    /// the host's page cache. `sums`: the blocks' page sums where known (empty, or one entry
    /// per block), which verify those blocks instead of their hashes (`verify_with`).
    /// Asks the host to start reading `ptrs`' bytes into its cache (ranges adjacent in a
    /// pack as one), for reads expected soon; returns at once.
    pub fn will_need(&self, ptrs: &[BlockPtr]) {
        for (pack, start, end) in stored_runs(ptrs) {
            if let Ok(f) = self.reader(pack) {
                f.will_need(start, end - start);
            }
        }
    }

    /// True if the host holds every one of `ptrs`' stored bytes in its cache, so that reading
    /// them will not wait for a disk or a remote (a hint, stale as soon as it is given).
    pub fn cached(&self, ptrs: &[BlockPtr]) -> bool {
        if ptrs.iter().any(|p| is_remote_pack(p.pack())) || self.moved.any(ptrs) {
            return false;
        }
        stored_runs(ptrs).all(|(pack, start, end)| self.reader(pack).is_ok_and(|f| f.cached(start, end - start)))
    }

    pub fn read_whole_into(
        &self,
        ptrs: &[BlockPtr],
        sums: &[Option<&[u32]>],
        out: &mut [u8],
        stream: bool,
    ) -> Result<bool> {
        assert!(sums.is_empty() || sums.len() == ptrs.len(), "page sums for some blocks only");
        let Some(first) = ptrs.first() else {
            return Ok(out.is_empty());
        };
        let adjacent = ptrs.iter().all(|p| header_len(p.kind) == 0)
            && ptrs
                .windows(2)
                .all(|w| w[1].pack() == w[0].pack() && w[1].offset() == w[0].offset() + w[0].len as u64);
        if !adjacent
            || ptrs.iter().map(|p| p.len as usize).sum::<usize>() != out.len()
            || self.moved.any(ptrs)
        {
            return Ok(false);
        }
        // The body of a long stream goes past the host's page cache when the buffer allows:
        // the kernel caches these bytes in the mount's page cache anyway, and the host's copy
        // cost the daemon a second memory copy of every byte (a cold 1 GiB read: ~1.1 s of
        // daemon CPU through the host's cache, ~0.4 s past it; docs/benchmarks.md).
        let direct = stream
            && out.len() >= DIRECT_READ_MIN
            && out.as_ptr() as usize % 4096 == 0
            && out.len() % 4096 == 0
            && first.offset() % 4096 == 0;
        let mut read = Err(std::io::Error::from(std::io::ErrorKind::Unsupported));
        if let Some(f) = direct.then(|| self.direct_reader(first.pack())).flatten() {
            read = f.read_exact_at(out, first.offset());
        }
        if read.is_err() {
            read = self.reader(first.pack())?.read_exact_at(out, first.offset());
        }
        if let Err(e) = read {
            // Let the block-by-block path say which block is missing or unreadable.
            log::debug!("in-place read of {} blocks at {first}: {e}", ptrs.len());
            let mut at = 0;
            for p in ptrs {
                let data = self.read(p)?;
                out[at..at + data.len()].copy_from_slice(&data);
                at += data.len();
            }
            return Ok(true);
        }
        let mut at = 0;
        for (i, p) in ptrs.iter().enumerate() {
            let place = &mut out[at..at + p.len as usize];
            if let Err(e) = verify_with(p, sums.get(i).copied().flatten(), place) {
                // Relocated (and punched) since the check above.
                place.copy_from_slice(&self.reread_if_moved::<Vec<u8>>(p, e)?);
            }
            at += p.len as usize;
        }
        Ok(true)
    }

    /// Returns a freed block's space to the host filesystem. Only called once no committed
    /// checkpoint can reach the block any more.
    pub fn punch(&self, ptr: &BlockPtr) -> Result<()> {
        self.punch_all(std::slice::from_ref(ptr))
    }

    /// Punches freed blocks, one host call per run of blocks lying back to back in a pack
    /// (a deleted 1 GiB file is one call instead of 16,384: on a host mounted with `discard`
    /// each call may wait for the device). Every run is tried; the first failure is returned.
    pub fn punch_all(&self, ptrs: &[BlockPtr]) -> Result<()> {
        let mut spans: Vec<(u32, u64, u64)> = ptrs.iter().map(|p| (p.pack(), p.offset(), p.footprint())).collect();
        // A relocated block takes its compressed form's frame with it when it is the frame's
        // last member (its old place may be punched already: a second punch is harmless).
        for p in ptrs {
            if let Some(frame) = self.moved.remove(p.addr) {
                spans.push(frame);
            }
        }
        spans.sort_unstable();
        let mut first_error = None;
        let mut i = 0;
        while i < spans.len() {
            let (pack, start, mut end) = (spans[i].0, spans[i].1, spans[i].1 + spans[i].2);
            i += 1;
            // Blocks may repeat (a list carried from checkpoint to checkpoint): overlaps merge.
            while i < spans.len() && spans[i].0 == pack && spans[i].1 <= end {
                end = end.max(spans[i].1 + spans[i].2);
                i += 1;
            }
            if let Err(e) = self.punch_run(pack, start, end - start) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn punch_run(&self, pack: u32, offset: u64, len: u64) -> Result<()> {
        if is_remote_pack(pack) {
            // Shared by every host that attached it: the remote's gc frees it.
            return Ok(());
        }
        let f = self.reader(pack)?;
        if let Err(e) = f.punch_hole(offset, len) {
            // A host filesystem without hole punching keeps the bytes; nothing is lost.
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(Error::io(
                    format!("hole punch of pack {pack} at {offset}, {len} bytes"),
                    e,
                ));
            }
        }
        Ok(())
    }

    /// Gives back the space from append position `from` to `to` that no block of `keep`
    /// covers, and returns how many bytes that was. After a crash, the blocks between the
    /// last checkpoint's append position and the last block the journal names are those the
    /// journal replays, and others that nothing durable references (written behind, reserved
    /// by a writer whose record never made it, an unlinked file's data, an uncommitted
    /// checkpoint's meta blocks): without this they would hold host space for ever.
    pub fn punch_unnamed(&self, from: (u32, u64), to: (u32, u64), keep: &[BlockPtr]) -> Result<u64> {
        assert!(from <= to, "punch_unnamed from {from:?} past {to:?}");
        let mut spans: Vec<(u32, u64, u64)> = keep
            .iter()
            .map(|p| (p.pack(), p.offset(), p.offset() + p.footprint()))
            .filter(|&(pack, start, _)| (pack, start) >= from && (pack, start) < to)
            .collect();
        spans.sort_unstable();
        let mut punched = 0;
        for pack in from.0..=to.0 {
            let start = if pack == from.0 { from.1 } else { 0 };
            let end = if pack == to.0 {
                to.1
            } else {
                self.reader(pack)?.len().map_err(|e| Error::io("stat of pack", e))?
            };
            let mut gaps = Vec::new();
            let mut at = start;
            for &(_, s, e) in spans.iter().filter(|x| x.0 == pack) {
                if s > at {
                    gaps.push((at, s));
                }
                at = at.max(e);
            }
            if end > at {
                gaps.push((at, end));
            }
            for (a, b) in gaps {
                self.punch_run(pack, a, b - a)?;
                punched += b - a;
            }
        }
        Ok(punched)
    }

    /// The page runs of the packs below append position `below` that hold data no span of
    /// `live` (pack, start, end) touches: space nothing references, which a crash between
    /// writing blocks and committing or freeing them leaves. `None` where the host cannot
    /// tell data from holes.
    pub fn unreferenced(&self, below: (u32, u64), live: &[(u32, u64, u64)]) -> Result<Option<Vec<(u32, u64, u64)>>> {
        if !self.host_punches_holes() {
            return Ok(None);
        }
        let mut spans: Vec<(u32, u64, u64)> = live
            .iter()
            .map(|&(p, s, e)| (p, s / BLOCK_ALIGN * BLOCK_ALIGN, e.div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN))
            .collect();
        spans.sort_unstable();
        let mut out = Vec::new();
        for pack in self.pack_ids()?.into_iter().filter(|p| *p <= below.0) {
            let limit = if pack == below.0 { below.1 } else { u64::MAX };
            let Some(data) = self.reader(pack)?.data_ranges().map_err(|e| Error::io("data ranges of a pack", e))? else {
                return Ok(None);
            };
            let mine: Vec<(u64, u64)> = spans.iter().filter(|x| x.0 == pack).map(|x| (x.1, x.2)).collect();
            for (s, e) in data {
                let (mut at, end) = (s, e.min(limit));
                for &(ls, le) in &mine {
                    if le <= at || ls >= end {
                        continue;
                    }
                    if ls > at {
                        out.push((pack, at, ls));
                    }
                    at = at.max(le);
                }
                if end > at {
                    out.push((pack, at, end));
                }
            }
        }
        Ok(Some(out))
    }

    /// Whether the host gives space back through hole punches, tried on a scratch file
    /// beside the packs. One that does not (exFAT and vfat through FUSE) keeps every byte
    /// written to a pack, freed or not, and its lseek sees no holes: there is no leak to
    /// count there, only space that repack gives back. Unknown (a read-only store): no.
    fn host_punches_holes(&self) -> bool {
        let p = self.dir.join("packs").join(".punch-probe");
        let probe = || -> std::io::Result<()> {
            let f = self.host.open(&p, OpenMode::Truncate)?;
            f.write_all_at(&[1u8; 2 * BLOCK_ALIGN as usize], 0)?;
            f.punch_hole(0, BLOCK_ALIGN)
        };
        let r = probe();
        let _ = self.host.remove_file(&p);
        r.is_ok()
    }

    /// Gives back the runs `unreferenced` found (after a crash).
    pub fn punch_runs(&self, runs: &[(u32, u64, u64)]) -> Result<()> {
        for &(pack, s, e) in runs {
            self.punch_run(pack, s, e - s)?;
        }
        Ok(())
    }

    /// Bytes of pack files past append position `from` (an uncommitted tail).
    pub fn bytes_past(&self, from: (u32, u64)) -> Result<u64> {
        let mut total = 0;
        for id in self.pack_ids()?.into_iter().filter(|id| *id >= from.0) {
            let len = self.reader(id)?.len().map_err(|e| Error::io("stat of pack", e))?;
            total += if id == from.0 { len.saturating_sub(from.1) } else { len };
        }
        Ok(total)
    }

    /// Ids of all pack files present in the store, sorted.
    pub fn pack_ids(&self) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        let dir = self.dir.join("packs");
        for name in self.host.list_dir(&dir).map_err(|e| Error::io("listing of packs", e))? {
            if let Some(id) = name.strip_suffix(".pack").and_then(|s| s.parse().ok()) {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Bytes the packs occupy on the host filesystem (holes excluded).
    pub fn allocated_bytes(&self) -> Result<u64> {
        let mut total = 0;
        for id in self.pack_ids()? {
            total += self
                .host
                .allocated_bytes(&pack_path(&self.dir, id))
                .map_err(|e| Error::io("stat of pack", e))?;
        }
        Ok(total)
    }
}

/// Runs `side` on a thread of its own while `main` runs on this one: CPU work beside a wait
/// on the device. Both run here, one after the other, if no thread can be made.
fn alongside<S: Send, M>(side: impl FnOnce() -> S + Send, main: impl FnOnce() -> M) -> (M, S) {
    let cell = Mutex::new(Some(side));
    let take = || cell.lock().unwrap_or_else(|p| p.into_inner()).take().expect("side work run once");
    std::thread::scope(|s| match std::thread::Builder::new().spawn_scoped(s, || take()()) {
        Ok(h) => {
            let m = main();
            (m, h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        }
        Err(e) => {
            log::debug!("no thread for work beside a write ({e}): done in turn");
            let m = main();
            (m, take()())
        }
    })
}

/// A direct write of page-aligned `data` at the page-aligned `off`: from `data` itself when it
/// is page-aligned in memory (a WRITE's payload over io_uring is), else from an aligned copy
/// (cheap next to the copy into the page cache it replaces; the buffer is reused, warm).
fn write_aligned(f: &dyn HostFile, data: &[u8], off: u64) -> std::io::Result<()> {
    if data.as_ptr().align_offset(BLOCK_ALIGN as usize) == 0 {
        return f.write_all_at(data, off);
    }
    with_aligned(data.len(), |buf| {
        buf.copy_from_slice(data);
        f.write_all_at(buf, off)
    })
}

/// Runs `f` on a `BLOCK_ALIGN`-aligned buffer of `len` bytes (holding stale bytes), the
/// calling thread's own, which direct I/O needs.
fn with_aligned<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    ALIGNED_BUF.with(|cell| {
        let mut buf = cell.borrow_mut();
        buf.resize(len + BLOCK_ALIGN as usize, 0);
        let at = buf.as_ptr().align_offset(BLOCK_ALIGN as usize);
        let r = f(&mut buf[at..at + len]);
        if buf.capacity() > RUN_BUF_KEEP {
            *buf = Vec::new();
        }
        r
    })
}

thread_local! {
    /// The read buffer of `read_run_each`, one per reading thread (FUSE queue threads).
    static RUN_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The aligned buffer of `with_aligned` (direct writes), one per thread.
    static ALIGNED_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest run buffer a thread keeps between reads (a FUSE read is at most 1 MiB of data).
const RUN_BUF_KEEP: usize = 4 << 20;

/// A block as it lies in its pack (`fp` bytes): header (for kinds that have one), payload,
/// zero padding.
fn frame(kind: BlockKind, payload: &[u8], fp: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(fp);
    frame_into(&mut buf, kind, payload, fp);
    buf
}

/// Appends the block `frame` makes to `buf`.
fn frame_into(buf: &mut Vec<u8>, kind: BlockKind, payload: &[u8], fp: usize) {
    let start = buf.len();
    let hl = header_len(kind);
    buf.resize(start + hl, 0);
    write_header(&mut buf[start..], kind, payload);
    buf.extend_from_slice(payload);
    buf.resize(start + fp, 0);
}

/// Fills a block's header (`header_len(kind)` bytes, none for data) for `payload`.
fn write_header(h: &mut [u8], kind: BlockKind, payload: &[u8]) {
    debug_assert_eq!(h.len(), header_len(kind));
    if h.is_empty() {
        return;
    }
    h[..4].copy_from_slice(BLOCK_MAGIC);
    h[4] = kind as u8;
    h[5] = 0; // codec: 0 = stored as is
    h[6..8].copy_from_slice(&[0, 0]);
    h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let crc = header_crc(&h[..12], payload);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Checks a raw block (header + payload) against its pointer; returns the payload.
pub fn verify<'a>(ptr: &BlockPtr, buf: &'a [u8]) -> Result<&'a [u8]> {
    if header_len(ptr.kind) == 0 {
        if blake3::hash(buf).as_bytes() != &ptr.hash {
            return Err(Error::corrupt(
                "block",
                ptr,
                "content hash differs from pointer (damaged, stale or misdirected)",
            ));
        }
        return Ok(buf);
    }
    let h = &buf[..BLOCK_HEADER_LEN];
    if &h[..4] != BLOCK_MAGIC {
        return Err(Error::corrupt("block", ptr, "bad magic (not a block, or overwritten)"));
    }
    if h[4] != ptr.kind as u8 {
        return Err(Error::corrupt(
            "block",
            ptr,
            format!("kind {} where {:?} was expected", h[4], ptr.kind),
        ));
    }
    if h[5] != 0 {
        return Err(Error::corrupt("block", ptr, format!("unknown codec {}", h[5])));
    }
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap());
    if len != ptr.len {
        return Err(Error::corrupt(
            "block",
            ptr,
            format!("header length {len} differs from pointer"),
        ));
    }
    let payload = &buf[BLOCK_HEADER_LEN..BLOCK_HEADER_LEN + len as usize];
    let crc = u32::from_le_bytes(h[12..16].try_into().unwrap());
    if crc != header_crc(&h[..12], payload) {
        return Err(Error::corrupt("block", ptr, "checksum mismatch"));
    }
    if blake3::hash(payload).as_bytes() != &ptr.hash {
        return Err(Error::corrupt(
            "block",
            ptr,
            "content hash differs from pointer (stale or misdirected block)",
        ));
    }
    Ok(payload)
}
