//! `scion push`'s remote half: the frames of a full `scion send` stream of the snapshot come
//! in (`frame`); each chunk's bytes the remote lacks go into packs of `PACK_TARGET` bytes,
//! uploaded as they fill, and become `Block` frames of the tree object; at the end the tree
//! object, then the manifest, go up (`finish`).
//!
//! What the remote holds is learnt from its pack indexes (kept in `STORE/remote/NAME/idx/`
//! once fetched: objects never change). A push that was cut finds the packs it uploaded and
//! sends only the rest; a pack uploaded without its index is sent again under the same name,
//! which is the same bytes. The manifest is written last and only if its version is new,
//! so a cut push leaves the remote as it was, plus objects `remote gc` may remove.

use crate::client::Client;
use crate::layout::{self, hex, Entry, Hash, Manifest, PackIndex, TreeBlock, TreeObject, CHUNK, PACK_TARGET};
use scion_fs::stream::{write_header, Frame, StreamWriter, FLAG_ZSTD};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What a push did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Distinct blocks the tree uses, and those the remote lacked.
    pub blocks: u64,
    pub new_blocks: u64,
    /// Bytes of the new blocks, and bytes of every object uploaded.
    pub new_bytes: u64,
    pub sent_bytes: u64,
    pub objects: u64,
    /// Packs the remote held before.
    pub known_packs: u64,
    /// Bytes of the tree's chunks gone through so far (for progress).
    pub done_bytes: u64,
}

/// Manifest versions tried after one a concurrent push took.
const VERSION_TRIES: u64 = 16;

pub struct Pusher<'a> {
    client: Client,
    /// `locks/push-ID`, held until the push ends (`lock.rs`).
    _lock: crate::lock::Lock,
    /// Every block the remote holds or this push uploaded: its pack (index in `packs`), its
    /// slot there and place.
    known: HashMap<Hash, (u32, u32, Entry)>,
    packs: Vec<(Hash, u64)>,
    /// Packs this push uploaded (they exist).
    uploaded: HashSet<u32>,
    used: HashSet<Hash>,
    /// The blocks of the pack being filled, as they are, and their bytes.
    open: Vec<(Hash, Vec<u8>)>,
    open_bytes: u64,
    tree: Option<StreamWriter<Vec<u8>>>,
    stats: PushStats,
    progress: &'a mut dyn FnMut(&PushStats),
    /// Progress is told each time this many more bytes were gone through (and at each pack).
    report_at: u64,
}

const REPORT_EVERY: u64 = 32 << 20;

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl<'a> Pusher<'a> {
    /// Learns what the remote holds (`idx_dir`: where fetched indexes are kept).
    pub fn start(client: Client, idx_dir: &Path, progress: &'a mut dyn FnMut(&PushStats)) -> Result<Pusher<'a>, String> {
        let lock = crate::lock::Lock::take(&client, "push")?;
        wait_for_gc(&client, &lock)?;
        let mut p = Pusher {
            _lock: lock,
            client,
            known: HashMap::new(),
            packs: Vec::new(),
            uploaded: HashSet::new(),
            used: HashSet::new(),
            open: Vec::new(),
            open_bytes: 0,
            tree: Some(StreamWriter::new(Vec::new())),
            stats: PushStats::default(),
            progress,
            report_at: REPORT_EVERY,
        };
        std::fs::create_dir_all(idx_dir).map_err(|e| format!("{}: {e}", idx_dir.display()))?;
        for o in p.client.list("packs/").map_err(failed)? {
            let Some(h) = o.key.strip_prefix("packs/").and_then(|k| k.strip_suffix(".idx")).and_then(layout::unhex) else { continue };
            let idx = read_index(&p.client, idx_dir, &h)?;
            let slot = p.packs.len() as u32;
            p.packs.push((h, idx.len));
            for (i, e) in idx.entries.into_iter().enumerate() {
                p.known.entry(e.hash).or_insert((slot, i as u32, e));
            }
        }
        p.stats.known_packs = p.packs.len() as u64;
        Ok(p)
    }

    /// The hashes of the blocks the remote holds: chunks that are these go as their hash.
    pub fn known_hashes(&self) -> HashSet<Hash> {
        self.known.keys().copied().collect()
    }

    /// One frame of the snapshot's stream.
    pub fn frame(&mut self, f: Frame) -> Result<(), String> {
        if self.stats.done_bytes >= self.report_at {
            (self.progress)(&self.stats);
            self.report_at = self.stats.done_bytes + REPORT_EVERY;
        }
        match f {
            Frame::Data { offset, bytes } => {
                if offset % CHUNK != 0 {
                    return Err(format!("a data frame at {offset}, not at a chunk's start"));
                }
                for (j, piece) in bytes.chunks(CHUNK as usize).enumerate() {
                    if piece.iter().all(|&b| b == 0) {
                        continue; // a new file reads zeros where nothing is
                    }
                    let hash = *blake3::hash(piece).as_bytes();
                    self.stats.done_bytes += piece.len() as u64;
                    self.block(hash, Some(piece))?;
                    self.put(Frame::Block { offset: offset + j as u64 * CHUNK, hash })?;
                }
                Ok(())
            }
            Frame::Block { offset, hash } => {
                self.stats.done_bytes += self.known.get(&hash).map_or(0, |k| u64::from(k.2.len));
                self.block(hash, None)?;
                self.put(Frame::Block { offset, hash })
            }
            f => self.put(f),
        }
    }

    fn put(&mut self, f: Frame) -> Result<(), String> {
        self.tree.as_mut().expect("open until finish").put(&f).map_err(failed)
    }

    /// Notes that the tree uses block `hash`, adding its bytes to the open pack if the
    /// remote lacks it.
    fn block(&mut self, hash: Hash, bytes: Option<&[u8]>) -> Result<(), String> {
        if self.used.insert(hash) {
            self.stats.blocks += 1;
        }
        if self.known.contains_key(&hash) {
            return Ok(());
        }
        let Some(bytes) = bytes else {
            return Err("a block the remote lacks came without its bytes".into());
        };
        // The pack's index is the one it will have once uploaded; its place, once compressed.
        let e = Entry { hash, offset: 0, len: bytes.len() as u32, stored: 0 };
        self.known.insert(hash, (self.packs.len() as u32, self.open.len() as u32, e));
        self.open.push((hash, bytes.to_vec()));
        self.open_bytes += bytes.len() as u64;
        self.stats.new_blocks += 1;
        self.stats.new_bytes += bytes.len() as u64;
        if self.open_bytes >= PACK_TARGET || self.open.len() as u32 >= layout::SLOTS_MAX {
            self.close_pack()?;
        }
        Ok(())
    }

    /// The open pack's blocks compressed (on every CPU) and laid back to back: the pack's
    /// bytes and index entries.
    fn lay_out(&self) -> (Vec<u8>, Vec<Entry>) {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
        let per = self.open.len().div_ceil(threads).max(1);
        let forms: Vec<Vec<u8>> = std::thread::scope(|s| {
            let parts: Vec<_> = self.open.chunks(per).map(|part| s.spawn(move || part.iter().map(|(_, b)| layout::stored_form(b).into_owned()).collect::<Vec<_>>())).collect();
            parts.into_iter().flat_map(|h| h.join().expect("a compressing thread")).collect()
        });
        let mut bytes = Vec::with_capacity(forms.iter().map(Vec::len).sum());
        let mut entries = Vec::with_capacity(forms.len());
        for ((hash, raw), form) in self.open.iter().zip(forms) {
            entries.push(Entry { hash: *hash, offset: bytes.len() as u64, len: raw.len() as u32, stored: form.len() as u32 });
            bytes.extend_from_slice(&form);
        }
        (bytes, entries)
    }

    /// Uploads the open pack, then its index.
    fn close_pack(&mut self) -> Result<(), String> {
        if self.open.is_empty() {
            return Ok(());
        }
        let (bytes, entries) = self.lay_out();
        self.open.clear();
        self.open_bytes = 0;
        for e in &entries {
            self.known.get_mut(&e.hash).expect("known when added").2 = *e;
        }
        let h = *blake3::hash(&bytes).as_bytes();
        let idx = PackIndex { pack: h, len: bytes.len() as u64, entries };
        let idx_bytes = idx.encode();
        self.stats.sent_bytes += (bytes.len() + idx_bytes.len()) as u64;
        self.client.put_new(&layout::pack_key(&h), bytes).map_err(failed)?;
        self.client.put_new(&layout::index_key(&h), idx_bytes).map_err(failed)?;
        self.stats.objects += 2;
        self.uploaded.insert(self.packs.len() as u32);
        self.packs.push((h, idx.len));
        (self.progress)(&self.stats);
        Ok(())
    }

    /// Uploads what is left, the tree object of content hash `root`, and a new version of
    /// `name` naming it (`source`: the snapshot, for people).
    pub fn finish(mut self, root: Hash, name: &str, source: &str) -> Result<(Manifest, PushStats), String> {
        self.close_pack()?;
        let body = self.tree.take().expect("open until finish").finish(root).map_err(failed)?;
        let mut stream = Vec::with_capacity(body.len() / 4);
        write_header(&mut stream, FLAG_ZSTD).map_err(failed)?;
        stream.extend(zstd::encode_all(&body[..], 3).map_err(failed)?);
        // The packs this tree uses, in the order the remote learnt them.
        let mut slots: Vec<u32> = self.used.iter().map(|h| self.known[h].0).collect::<HashSet<_>>().into_iter().collect();
        slots.sort_unstable();
        let index: HashMap<u32, u32> = slots.iter().enumerate().map(|(i, s)| (*s, i as u32)).collect();
        for s in &slots {
            if !self.uploaded.contains(s) && !self.client.exists(&layout::pack_key(&self.packs[*s as usize].0)).map_err(failed)? {
                return Err(format!("pack {} went from the remote during the push (a gc?): push again", hex(&self.packs[*s as usize].0)));
            }
        }
        let mut blocks: Vec<TreeBlock> = self
            .used
            .iter()
            .map(|h| {
                let (s, slot, e) = self.known[h];
                TreeBlock { hash: *h, pack: index[&s], slot, offset: e.offset, len: e.len, stored: e.stored }
            })
            .collect();
        blocks.sort_unstable_by(|a, b| a.hash.cmp(&b.hash));
        let tree = TreeObject { root, packs: slots.iter().map(|s| self.packs[*s as usize]).collect(), blocks, stream };
        let bytes = tree.encode().map_err(failed)?;
        let key = *blake3::hash(&bytes).as_bytes();
        let tree_len = bytes.len() as u64;
        self.stats.sent_bytes += tree_len;
        self.stats.objects += 1;
        self.client.put_new(&layout::tree_key(&key), bytes).map_err(failed)?;
        let mut version = latest_version(&self.client, name)?.map_or(1, |v| v + 1);
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        for _ in 0..VERSION_TRIES {
            let m = Manifest { name: name.to_string(), version, root, tree: key, tree_len, created, source: source.to_string() };
            if self.client.put_new(&layout::manifest_key(name, version), m.encode()).map_err(failed)? {
                self.stats.objects += 1;
                (self.progress)(&self.stats);
                return Ok((m, self.stats));
            }
            version += 1;
        }
        Err(format!("{VERSION_TRIES} versions of {name} were taken while this push tried to write one: push again"))
    }
}

/// How long a push waits for a gc on the remote to end.
const GC_WAIT_S: u64 = 900;

/// Waits while a gc runs on the remote (its lock, not stale): what the push learns of the
/// remote must be what the gc left.
fn wait_for_gc(client: &Client, mine: &crate::lock::Lock) -> Result<(), String> {
    for waited in 0..=GC_WAIT_S {
        let (live, _) = crate::lock::held(client, "gc", crate::lock::now(), Some(mine))?;
        if live.is_empty() {
            return Ok(());
        }
        if waited == 0 {
            log::info!("remote {}: a gc runs ({}); the push waits for it", client.name(), live.join(", "));
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    Err(format!("remote {}: a gc has run for {GC_WAIT_S} s; push again once it is done", client.name()))
}

/// The newest version of `name` on the remote, if any.
pub fn latest_version(client: &Client, name: &str) -> Result<Option<u64>, String> {
    Ok(client.list(&layout::manifest_dir(name)).map_err(failed)?.iter().filter_map(|o| layout::manifest_version(&o.key, name)).max())
}

/// The manifest of version `version` of `name` (the newest if `None`).
pub fn manifest(client: &Client, name: &str, version: Option<u64>) -> Result<Manifest, String> {
    layout::check_name(name)?;
    let v = match version {
        Some(v) => v,
        None => latest_version(client, name)?.ok_or_else(|| format!("remote {}: nothing is published as {name}", client.name()))?,
    };
    let b = client.get(&layout::manifest_key(name, v)).map_err(|e| match e {
        crate::client::Error::NotFound => format!("remote {}: {name} has no version {v}", client.name()),
        e => e.to_string(),
    })?;
    let m = Manifest::decode(&b).map_err(failed)?;
    if m.name != name || m.version != v {
        return Err(format!("remote {}: the manifest of {name} version {v} names {} version {}", client.name(), m.name, m.version));
    }
    Ok(m)
}

/// The tree object a manifest names, checked against its name: the object and its bytes.
pub fn tree_object(client: &Client, m: &Manifest) -> Result<(TreeObject, Vec<u8>), String> {
    let b = client.get(&layout::tree_key(&m.tree)).map_err(failed)?.to_vec();
    if blake3::hash(&b).as_bytes() != &m.tree {
        return Err(format!("remote {}: tree object {} came back with other bytes", client.name(), hex(&m.tree)));
    }
    let t = TreeObject::decode(&b).map_err(failed)?;
    if t.root != m.root {
        return Err(format!("remote {}: tree object {} is of another tree than its manifest says", client.name(), hex(&m.tree)));
    }
    Ok((t, b))
}

/// The index of pack `h`: kept in `dir` once fetched (and checked: it names its pack).
fn read_index(client: &Client, dir: &Path, h: &Hash) -> Result<PackIndex, String> {
    let path: PathBuf = dir.join(format!("{}.idx", hex(h)));
    if let Ok(b) = std::fs::read(&path) {
        if let Ok(i) = PackIndex::decode(&b) {
            if &i.pack == h {
                return Ok(i);
            }
        }
    }
    let b = client.get(&layout::index_key(h)).map_err(failed)?;
    let i = PackIndex::decode(&b).map_err(failed)?;
    if &i.pack != h {
        return Err(format!("remote {}: the index of pack {} names pack {}", client.name(), hex(h), hex(&i.pack)));
    }
    // A cache: losing it costs a fetch.
    let tmp = dir.join(format!(".{}.idx.tmp", hex(h)));
    if std::fs::write(&tmp, &b).and_then(|()| std::fs::rename(&tmp, &path)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(i)
}
