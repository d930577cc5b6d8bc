//! What a remote holds (`docs/format.md`, "Remote layout"): immutable objects named by the
//! BLAKE3 hash of their bytes, and one small manifest per published version of a tree.
//!
//! - `packs/HASH`: file data blocks back to back, each as it is or compressed with zstd
//!   where that saves an eighth, a few MiB in all;
//! - `packs/HASH.idx`: which blocks a pack holds and where ([`PackIndex`]), written after
//!   its pack, so an index names a pack that is whole;
//! - `trees/HASH`: a published tree ([`TreeObject`]): the packs and blocks it uses and a
//!   `scion send` stream of it whose file data are `Block` frames;
//! - `manifests/NAME/VERSION`: a name's versions ([`Manifest`]), written last, each with a
//!   conditional put that fails if the version exists, so two pushes never overwrite each
//!   other and no object another host reads ever changes.
//!
//! Every decoder here takes bytes from the network: each checks its length limits, its
//! checksum and every rule below before anything is used (fuzz targets in `scion-fuzzing`).

use scion_store::codec::{Reader, Writer};
use scion_store::{Error, Result};

/// Bytes of a file chunk, and at most of a block.
pub const CHUNK: u64 = 64 << 10;
/// Packs are closed once they hold this many bytes of blocks (before compression).
pub const PACK_TARGET: u64 = 16 << 20;
/// The zstd level of blocks in packs: compressed one by one at 9, blocks come out about as
/// small as whole files at 3 (measured on a Debian root's /usr/lib, `docs/benchmarks.md`).
pub const PACK_ZSTD_LEVEL: i32 = 9;
/// The largest pack a remote may hold (a decoder refuses others).
pub const PACK_MAX: u64 = 64 << 20;
/// The most blocks a published tree names (1 TiB of distinct 64 KiB chunks).
pub const TREE_BLOCKS_MAX: usize = 16 << 20;
/// The most packs a published tree names.
pub const TREE_PACKS_MAX: usize = 1 << 20;
/// The longest stream a tree object carries.
pub const TREE_STREAM_MAX: u64 = 1 << 30;
/// The longest name a tree is published under.
pub const NAME_MAX: usize = 128;

const PACK_INDEX_MAGIC: &[u8; 8] = b"SCIONIDX";
const TREE_MAGIC: &[u8; 8] = b"SCIONTRE";
const MANIFEST_MAGIC: &[u8; 8] = b"SCIONMAN";
const VERSION: u8 = 1;

pub type Hash = [u8; 32];

pub fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Hash> {
    if s.len() != 64 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut h = [0u8; 32];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(h)
}

pub fn pack_key(h: &Hash) -> String {
    format!("packs/{}", hex(h))
}
pub fn index_key(h: &Hash) -> String {
    format!("packs/{}.idx", hex(h))
}
pub fn tree_key(h: &Hash) -> String {
    format!("trees/{}", hex(h))
}
/// A lock: `locks/push-ID` while a push runs, `locks/gc-ID` while a gc does (`lock.rs`).
pub fn lock_key(kind: &str, id: &str) -> String {
    format!("locks/{kind}-{id}")
}
pub fn manifest_dir(name: &str) -> String {
    format!("manifests/{name}/")
}
pub fn manifest_key(name: &str, version: u64) -> String {
    format!("manifests/{name}/{version:020}")
}

/// The version a manifest key names (`manifests/NAME/VERSION`), if it is one.
pub fn manifest_version(key: &str, name: &str) -> Option<u64> {
    let v = key.strip_prefix(&manifest_dir(name))?;
    (v.len() == 20 && v.bytes().all(|c| c.is_ascii_digit())).then(|| v.parse().ok()).flatten()
}

/// A name trees are published under: as a remote's name, a path component in the bucket.
pub fn check_name(n: &str) -> std::result::Result<(), String> {
    if n.is_empty() || n.len() > NAME_MAX || n.starts_with(['.', '-']) || !n.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) {
        return Err(format!("name {n:?}: 1 to {NAME_MAX} letters, digits, '.', '_' or '-', not first '.' or '-'"));
    }
    Ok(())
}

fn bad(what: &'static str, why: impl std::fmt::Display) -> Error {
    Error::corrupt("remote object", what, why.to_string())
}

/// Checks the trailing crc32c of `b` and returns what it covers.
fn body<'a>(b: &'a [u8], magic: &[u8; 8], what: &'static str) -> Result<&'a [u8]> {
    if b.len() < 8 + 1 + 4 || &b[..8] != magic {
        return Err(bad(what, "not one (wrong magic or too short)"));
    }
    if b[8] != VERSION {
        return Err(bad(what, format!("version {} (this scion reads version {VERSION})", b[8])));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(bad(what, "checksum mismatch"));
    }
    Ok(&body[9..])
}

fn sealed(w: Writer) -> Vec<u8> {
    let mut out = w.finish();
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn opened(magic: &[u8; 8]) -> Writer {
    let mut w = Writer::new();
    w.raw(magic).u8(VERSION);
    w
}

/// Where a block lies in a pack: `stored` bytes at `offset`, which are its `len` bytes
/// compressed with zstd if `stored < len`, else the bytes themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub hash: Hash,
    pub offset: u64,
    pub len: u32,
    pub stored: u32,
}

impl Entry {
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.stored)
    }
}

fn check_entry(e: &Entry, pack_len: u64, what: &'static str) -> Result<()> {
    if e.len == 0 || u64::from(e.len) > CHUNK || e.stored == 0 || e.stored > e.len || e.end() > pack_len {
        return Err(bad(what, format!("block at {} of {} bytes ({} stored) in a pack of {pack_len}", e.offset, e.len, e.stored)));
    }
    Ok(())
}

/// A block's bytes as a pack stores them: compressed (`PACK_ZSTD_LEVEL`) where that saves
/// at least an eighth.
pub fn stored_form(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match zstd::bulk::compress(bytes, PACK_ZSTD_LEVEL) {
        Ok(c) if c.len() < bytes.len() - bytes.len() / 8 => std::borrow::Cow::Owned(c),
        _ => std::borrow::Cow::Borrowed(bytes),
    }
}

/// A block's bytes from what its pack stores (`None`: they do not decompress to exactly
/// `len` bytes; the caller's hash check catches any other damage).
pub fn block_bytes(e: &Entry, stored: &[u8]) -> Option<Vec<u8>> {
    if stored.len() != e.stored as usize {
        return None;
    }
    if e.stored == e.len {
        return Some(stored.to_vec());
    }
    zstd::bulk::decompress(stored, e.len as usize).ok().filter(|b| b.len() == e.len as usize)
}

/// The blocks a pack holds, in the order they lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackIndex {
    pub pack: Hash,
    pub len: u64,
    pub entries: Vec<Entry>,
}

impl PackIndex {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = opened(PACK_INDEX_MAGIC);
        w.raw(&self.pack).u64(self.len).u32(self.entries.len() as u32);
        for e in &self.entries {
            w.raw(&e.hash).u64(e.offset).u32(e.len).u32(e.stored);
        }
        sealed(w)
    }

    pub fn decode(b: &[u8]) -> Result<PackIndex> {
        const WHAT: &str = "pack index";
        let mut r = Reader::new(body(b, PACK_INDEX_MAGIC, WHAT)?, WHAT);
        let pack = r.array()?;
        let len = r.u64()?;
        if len > PACK_MAX {
            return Err(bad(WHAT, format!("a pack of {len} bytes")));
        }
        let n = r.count(48)?;
        let mut entries = Vec::with_capacity(n);
        let mut end = 0;
        for _ in 0..n {
            let e = Entry { hash: r.array()?, offset: r.u64()?, len: r.u32()?, stored: r.u32()? };
            check_entry(&e, len, WHAT)?;
            if e.offset < end {
                return Err(bad(WHAT, "blocks out of order or overlapping"));
            }
            end = e.end();
            entries.push(e);
        }
        r.expect_end()?;
        Ok(PackIndex { pack, len, entries })
    }
}

/// A block of a published tree: its hash, the pack (an index into the tree's packs), its
/// slot there (its place in the pack's index: a pulled tree's pointer names the block at
/// `slot * CHUNK` of its pack) and where its stored bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeBlock {
    pub hash: Hash,
    pub pack: u32,
    pub slot: u32,
    pub offset: u64,
    pub len: u32,
    pub stored: u32,
}

impl TreeBlock {
    pub fn entry(&self) -> Entry {
        Entry { hash: self.hash, offset: self.offset, len: self.len, stored: self.stored }
    }
}

/// Slots a pack holds at most (a pack of 64 MiB of one-byte blocks would need more, and is
/// refused).
pub const SLOTS_MAX: u32 = 1 << 20;

/// A published tree: its content hash (`Fs::tree_hash`), the packs and blocks it uses,
/// and a `scion send` stream of it (`docs/format.md`, "Send stream") whose file data are
/// `Block` frames naming those blocks by hash.
///
/// On the remote the blocks' places are listed without their hashes, in the order the
/// stream first names each block, and all but the magic, version and checksum is one zstd
/// frame: the hashes are in the stream already, and a tenth of a tree changed costs a tree
/// object of a few hundred bytes per file rather than 60 per block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeObject {
    pub root: Hash,
    /// Each pack's key (hash) and length.
    pub packs: Vec<(Hash, u64)>,
    /// Sorted by hash, each hash once.
    pub blocks: Vec<TreeBlock>,
    pub stream: Vec<u8>,
}

/// The largest zstd window a tree object's body or stream may use (as `scion receive`).
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// The distinct blocks a stream's `Block` frames name, in the order it first names them.
pub fn block_order(stream: &[u8]) -> Result<Vec<Hash>> {
    use scion_fs::stream::{read_header, Frame, ReadError, StreamReader, FLAG_ZSTD};
    let bad_stream = |e: String| bad("tree object", format!("its stream: {e}"));
    let mut input: &[u8] = stream;
    let flags = read_header(&mut input).map_err(bad_stream)?;
    let body: Box<dyn std::io::Read + '_> = if flags & FLAG_ZSTD != 0 {
        let mut d = zstd::stream::read::Decoder::new(input).map_err(|e| bad_stream(e.to_string()))?;
        d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(|e| bad_stream(e.to_string()))?;
        Box::new(d)
    } else {
        Box::new(input)
    };
    let mut frames = StreamReader::new(body);
    let mut seen = std::collections::HashSet::new();
    let mut order = Vec::new();
    loop {
        match frames.next() {
            Ok(Some(Frame::Block { hash, .. })) => {
                if seen.insert(hash) {
                    if order.len() >= TREE_BLOCKS_MAX {
                        return Err(bad("tree object", "too many blocks"));
                    }
                    order.push(hash);
                }
            }
            Ok(Some(Frame::End { .. })) => return Ok(order),
            Ok(Some(_)) => {}
            Ok(None) => return Err(bad_stream("no End frame".into())),
            Err(ReadError::Cut(e) | ReadError::Bad(e)) => return Err(bad_stream(e)),
        }
    }
}

impl TreeObject {
    pub fn encode(&self) -> Result<Vec<u8>> {
        let order = block_order(&self.stream)?;
        let mut w = Writer::new();
        w.raw(&self.root).u32(self.packs.len() as u32);
        for (h, len) in &self.packs {
            w.raw(h).u64(*len);
        }
        w.u32(order.len() as u32);
        for h in &order {
            let b = self.block(h).ok_or_else(|| bad("tree object", "its stream names a block it does not place"))?;
            w.u32(b.pack).u32(b.slot).u64(b.offset).u32(b.len).u32(b.stored);
        }
        if order.len() != self.blocks.len() {
            return Err(bad("tree object", "it places blocks its stream does not name"));
        }
        w.u64(self.stream.len() as u64).raw(&self.stream);
        let body = zstd::bulk::compress(&w.finish(), 3).map_err(|e| Error::Format(e.to_string()))?;
        let mut out = opened(TREE_MAGIC);
        out.raw(&body);
        Ok(sealed(out))
    }

    pub fn decode(b: &[u8]) -> Result<TreeObject> {
        const WHAT: &str = "tree object";
        const BODY_MAX: u64 = TREE_STREAM_MAX + (TREE_BLOCKS_MAX as u64) * 24 + (TREE_PACKS_MAX as u64) * 40 + 4096;
        let packed = body(b, TREE_MAGIC, WHAT)?;
        let mut d = zstd::stream::read::Decoder::new(packed).map_err(|e| bad(WHAT, e))?;
        d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(|e| bad(WHAT, e))?;
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(d, BODY_MAX + 1), &mut raw).map_err(|e| bad(WHAT, format!("its body: {e}")))?;
        if raw.len() as u64 > BODY_MAX {
            return Err(bad(WHAT, "its body is too long"));
        }
        let mut r = Reader::new(&raw, WHAT);
        let root = r.array()?;
        let n = r.count(40)?;
        if n > TREE_PACKS_MAX {
            return Err(bad(WHAT, format!("{n} packs")));
        }
        let mut packs = Vec::with_capacity(n);
        for _ in 0..n {
            let h = r.array()?;
            let len = r.u64()?;
            if len > PACK_MAX {
                return Err(bad(WHAT, format!("a pack of {len} bytes")));
            }
            packs.push((h, len));
        }
        let n = r.count(24)?;
        if n > TREE_BLOCKS_MAX {
            return Err(bad(WHAT, format!("{n} blocks")));
        }
        let mut places = Vec::with_capacity(n);
        for _ in 0..n {
            let b = TreeBlock { hash: [0; 32], pack: r.u32()?, slot: r.u32()?, offset: r.u64()?, len: r.u32()?, stored: r.u32()? };
            let Some(&(_, pack_len)) = packs.get(b.pack as usize) else {
                return Err(bad(WHAT, format!("block in pack {} of {}", b.pack, packs.len())));
            };
            if b.slot >= SLOTS_MAX {
                return Err(bad(WHAT, format!("block in slot {}", b.slot)));
            }
            check_entry(&b.entry(), pack_len, WHAT)?;
            places.push(b);
        }
        let len = r.u64()?;
        if len > TREE_STREAM_MAX || len as usize != r.remaining() {
            return Err(bad(WHAT, format!("a stream of {len} bytes where {} remain", r.remaining())));
        }
        let stream = r.raw(len as usize)?.to_vec();
        let order = block_order(&stream)?;
        if order.len() != places.len() {
            return Err(bad(WHAT, format!("its stream names {} blocks and it places {}", order.len(), places.len())));
        }
        let mut blocks: Vec<TreeBlock> = order.into_iter().zip(places).map(|(hash, p)| TreeBlock { hash, ..p }).collect();
        blocks.sort_unstable_by(|a, b| a.hash.cmp(&b.hash));
        Ok(TreeObject { root, packs, blocks, stream })
    }

    /// The block of hash `h`, if the tree names it.
    pub fn block(&self, h: &Hash) -> Option<&TreeBlock> {
        self.blocks.binary_search_by(|b| b.hash.cmp(h)).ok().map(|i| &self.blocks[i])
    }
}

/// One published version of a name: which tree, made when and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub version: u64,
    /// The tree's content hash.
    pub root: Hash,
    /// The tree object's key (hash) and length.
    pub tree: Hash,
    pub tree_len: u64,
    /// Seconds since the epoch.
    pub created: u64,
    /// The snapshot it was pushed from, as the pushing host named it (for people).
    pub source: String,
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = opened(MANIFEST_MAGIC);
        w.bytes(self.name.as_bytes()).u64(self.version).raw(&self.root).raw(&self.tree).u64(self.tree_len).u64(self.created).bytes(self.source.as_bytes());
        sealed(w)
    }

    pub fn decode(b: &[u8]) -> Result<Manifest> {
        const WHAT: &str = "manifest";
        let mut r = Reader::new(body(b, MANIFEST_MAGIC, WHAT)?, WHAT);
        let text = |b: &[u8], max: usize| -> Result<String> {
            if b.len() > max {
                return Err(bad(WHAT, "a field too long"));
            }
            String::from_utf8(b.to_vec()).map_err(|_| bad(WHAT, "a field not text"))
        };
        let name = text(r.bytes()?, NAME_MAX)?;
        check_name(&name).map_err(|e| bad(WHAT, e))?;
        let m = Manifest {
            name,
            version: r.u64()?,
            root: r.array()?,
            tree: r.array()?,
            tree_len: r.u64()?,
            created: r.u64()?,
            source: text(r.bytes()?, 4096)?,
        };
        if m.tree_len > TREE_STREAM_MAX + (TREE_BLOCKS_MAX as u64) * 60 + (TREE_PACKS_MAX as u64) * 40 + 4096 {
            return Err(bad(WHAT, format!("a tree object of {} bytes", m.tree_len)));
        }
        r.expect_end()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of one file whose chunks are `Block` frames naming `hashes`.
    fn stream_naming(hashes: &[Hash]) -> Vec<u8> {
        use scion_fs::stream::{write_header, Frame, Meta, StreamWriter};
        let mut out = Vec::new();
        write_header(&mut out, 0).unwrap();
        let mut w = StreamWriter::new(out);
        let meta = Meta { perm: 0o644, uid: 0, gid: 0, mtime_sec: 0, mtime_nsec: 0, xattrs: Vec::new() };
        w.put(&Frame::Begin { base: None, root: [9; 32], name: b"v1".to_vec(), entries: 0, bytes: 0 }).unwrap();
        w.put(&Frame::File { path: b"f".to_vec(), size: hashes.len() as u64 * CHUNK, fresh: true, meta }).unwrap();
        for (i, h) in hashes.iter().enumerate() {
            w.put(&Frame::Block { offset: i as u64 * CHUNK, hash: *h }).unwrap();
        }
        w.finish([9; 32]).unwrap()
    }

    #[test]
    fn objects_round_trip_and_damage_is_refused() {
        let idx = PackIndex {
            pack: [7; 32],
            len: 3 * 4096 + 65536,
            entries: vec![Entry { hash: [1; 32], offset: 0, len: 10, stored: 10 }, Entry { hash: [2; 32], offset: 4096, len: 65536, stored: 30000 }],
        };
        let tree = TreeObject {
            root: [9; 32],
            packs: vec![([7; 32], idx.len)],
            blocks: vec![TreeBlock { hash: [1; 32], pack: 0, slot: 0, offset: 0, len: 10, stored: 10 }, TreeBlock { hash: [2; 32], pack: 0, slot: 1, offset: 4096, len: 65536, stored: 30000 }],
            stream: stream_naming(&[[2; 32], [1; 32], [2; 32]]),
        };
        let man = Manifest { name: "debian-12".into(), version: 3, root: [9; 32], tree: [4; 32], tree_len: 1000, created: 1_700_000_000, source: "/a/.snapshot/v1".into() };
        assert_eq!(PackIndex::decode(&idx.encode()).unwrap(), idx);
        assert_eq!(TreeObject::decode(&tree.encode().unwrap()).unwrap(), tree);
        assert_eq!(Manifest::decode(&man.encode()).unwrap(), man);
        assert_eq!(tree.block(&[2; 32]).unwrap().offset, 4096);
        assert!(tree.block(&[3; 32]).is_none());
        for enc in [idx.encode(), tree.encode().unwrap(), man.encode()] {
            for i in 0..enc.len() {
                let mut b = enc.clone();
                b[i] ^= 0x10;
                assert!(PackIndex::decode(&b).is_err() && TreeObject::decode(&b).is_err() && Manifest::decode(&b).is_err());
            }
            for n in 0..enc.len() {
                assert!(PackIndex::decode(&enc[..n]).is_err() && TreeObject::decode(&enc[..n]).is_err() && Manifest::decode(&enc[..n]).is_err());
            }
        }
        // A stream naming a block the tree does not place, or not naming one it does.
        let mut short = tree.clone();
        short.stream = stream_naming(&[[2; 32]]);
        assert!(short.encode().is_err());
        short.stream = stream_naming(&[[2; 32], [1; 32], [3; 32]]);
        assert!(short.encode().is_err());
        let mut past = idx.clone();
        past.entries[1].offset = 12 * 4096; // its end past the pack's
        assert!(PackIndex::decode(&past.encode()).is_err());
        let mut overlap = idx.clone();
        overlap.entries[1].offset = 5;
        assert!(PackIndex::decode(&overlap.encode()).is_err());
        let mut grown = idx.clone();
        grown.entries[0].stored = 11; // more stored than its length
        assert!(PackIndex::decode(&grown.encode()).is_err());
        let text = vec![b'a'; 65536];
        let stored = stored_form(&text);
        assert!(stored.len() < 1000);
        let e = Entry { hash: [0; 32], offset: 0, len: 65536, stored: stored.len() as u32 };
        assert_eq!(block_bytes(&e, &stored).unwrap(), text);
        assert!(block_bytes(&Entry { len: 65535, ..e }, &stored).is_none());
        let mut noise = vec![0u8; 4096];
        blake3::Hasher::new().finalize_xof().fill(&mut noise);
        assert_eq!(&*stored_form(&noise), &noise[..]);
        assert!(PackIndex::decode(&past.encode()).is_err());
        assert_eq!(manifest_version(&manifest_key("x", 12), "x"), Some(12));
        assert_eq!(manifest_version("manifests/x/12", "x"), None);
        assert_eq!(unhex(&hex(&[0xab; 32])), Some([0xab; 32]));
    }
}
