//! `scion check`: verifies an unmounted store without changing it.
//!
//! Checked: both superblock copies and the checkpoint record; every reachable block's
//! header, checksum and content hash; tree structure (key order, separator bounds, uniform
//! depth); reference counts (each block's count in the table equals the number of pointers
//! to it, and no table entry is left for a dead block); no reachable block is on the freed
//! list; filesystem invariants (directory link counts, hard-link counts against the entries
//! that refer to the link table, chunk extents within file sizes, chunk patches (sorted,
//! disjoint, within the chunk, at most PATCH_MAX bytes), stored byte counts,
//! object ids below the namespace's counter, inode counts); and the journal's records.

use crate::checkpoint::{ns_from_value, read_record};
use crate::delta::StoredChunk;
use crate::fs::ROOT_OID;
use crate::inode::*;
use crate::journal;
use scion_store::{BlockKind, BlockPtr, BlockStore, Host, Result, Superblock};
use scion_tree::{Forest, RefTable};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Default, Debug)]
pub struct Report {
    pub generation: u64,
    pub namespaces: u64,
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub specials: u64,
    pub hardlinked: u64,
    pub file_bytes: u64,
    pub blocks: u64,
    pub block_bytes: u64,
    pub shared_blocks: u64,
    /// Chunks kept as a block with patches over it (copy-on-abundant-write), and their bytes.
    pub patched_chunks: u64,
    pub patch_bytes: u64,
    /// Chunk values carrying page sums (format 6), each checked against its block.
    pub page_summed_chunks: u64,
    /// Files whose bytes live in their inode record (counted once per record), and the bytes.
    pub inline_files: u64,
    pub inline_bytes: u64,
    /// Files whose one chunk's block the record names itself, without a content tree.
    pub direct_files: u64,
    /// Data blocks kept compressed elsewhere (`compress.rs`), and the bytes they occupy.
    pub relocated_blocks: u64,
    pub relocated_bytes: u64,
    /// Data blocks of trees pulled from remotes: verified when fetched, not read here.
    pub remote_blocks: u64,
    pub journal_records: u64,
    pub journal_tail: Option<String>,
    /// Pack bytes past the checkpoint's append position that no journal record names: left
    /// by a crash (blocks written behind, reserved, or of unlinked files), given back by the
    /// next open.
    pub unnamed_tail_bytes: u64,
    /// Commands of several steps a crash cut short (`records::intents`): not damage, and
    /// finished or undone at the next mount.
    pub leftovers: Vec<String>,
    /// Pack bytes below the checkpoint's append position that hold data nothing reachable
    /// (nor the freed list) names: left by a crash between writing blocks and committing or
    /// freeing them; given back by the next mount after a crash (`Fs::open`).
    pub unreferenced_bytes: u64,
    pub problems: Vec<String>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "checkpoint generation {}", self.generation)?;
        writeln!(
            f,
            "{} namespace(s): {} directories, {} files ({} with several names), {} symlinks, {} special files",
            self.namespaces, self.dirs, self.files, self.hardlinked, self.symlinks, self.specials
        )?;
        writeln!(f, "{} bytes of file content", self.file_bytes)?;
        writeln!(
            f,
            "{} live blocks ({} payload bytes), {} shared, all checksums verified",
            self.blocks, self.block_bytes, self.shared_blocks
        )?;
        if self.remote_blocks > 0 {
            writeln!(f, "{} of them on remotes (pulled trees): verified when fetched, not read by check", self.remote_blocks)?;
        }
        if self.inline_files > 0 {
            writeln!(
                f,
                "{} files kept inline in their records ({} bytes)",
                self.inline_files, self.inline_bytes
            )?;
        }
        if self.direct_files > 0 {
            writeln!(f, "{} files of one chunk without a content tree", self.direct_files)?;
        }
        if self.patched_chunks > 0 {
            writeln!(
                f,
                "{} chunks patched ({} patch bytes)",
                self.patched_chunks, self.patch_bytes
            )?;
        }
        if self.page_summed_chunks > 0 {
            writeln!(
                f,
                "{} chunks with page sums (each checked against its block)",
                self.page_summed_chunks
            )?;
        }
        if self.relocated_blocks > 0 {
            writeln!(
                f,
                "{} blocks of old versions kept compressed ({} bytes in the packs)",
                self.relocated_blocks, self.relocated_bytes
            )?;
        }
        write!(f, "journal: {} records to replay at next mount", self.journal_records)?;
        if let Some(t) = &self.journal_tail {
            write!(f, "; torn tail ignored ({t})")?;
        }
        writeln!(f)?;
        if self.unnamed_tail_bytes > 0 {
            writeln!(
                f,
                "{} bytes of pack space past the checkpoint hold nothing the journal names (left by a crash; given back at the next mount)",
                self.unnamed_tail_bytes
            )?;
        }
        for l in &self.leftovers {
            writeln!(f, "left by a crash: {l}")?;
        }
        if self.unreferenced_bytes > 0 {
            writeln!(
                f,
                "left by a crash: {} bytes of pack space that nothing references (given back at the next mount)",
                self.unreferenced_bytes
            )?;
        }
        if self.problems.is_empty() {
            writeln!(f, "clean")
        } else {
            writeln!(f, "{} problem(s):", self.problems.len())?;
            for p in &self.problems {
                writeln!(f, "  - {p}")?;
            }
            Ok(())
        }
    }
}

#[derive(Clone, Copy)]
enum Ctx {
    Dir { ns: u32, oid: u64 },
    File { oid: u64, size: u64, root: u64 },
    Links { ns: u32 },
    Summary,
}

/// Checks the store at `dir`. Takes the store's lock, so it refuses a mounted store.
pub fn check(host: &Host, dir: &Path) -> Result<Report> {
    // Nothing is written into a directory that is not a store (the lock is a file).
    scion_store::Superblock::read(host, dir)?;
    let _lock = host.lock(dir, "scion check")?;
    check_committed(host, dir)
}

/// Checks the newest committed checkpoint without taking the lock. Safe while the store is
/// mounted (committed blocks are never rewritten), though blocks the owner frees meanwhile
/// may show up as damage; used by tests to audit every checkpoint as it is taken.
pub fn check_committed(host: &Host, dir: &Path) -> Result<Report> {
    walk_committed(host, dir).map(|(rep, _)| rep)
}

/// The page runs of the packs below the committed append position that nothing reachable
/// names (`Report::unreferenced_bytes`), to give back; `None` where the host cannot tell
/// data from holes, or the walk found damage (then nothing is given back).
pub fn unreferenced_runs(host: &Host, dir: &Path) -> Result<Option<Vec<(u32, u64, u64)>>> {
    let (rep, runs) = walk_committed(host, dir)?;
    Ok(runs.filter(|_| rep.is_clean()))
}

fn walk_committed(host: &Host, dir: &Path) -> Result<(Report, Option<Vec<(u32, u64, u64)>>)> {
    let sb = Superblock::read(host, dir)?;
    let store = Arc::new(BlockStore::open(host, dir, sb.pack, sb.pack_end, false)?);
    let mut rep = Report {
        generation: sb.generation,
        ..Default::default()
    };
    let Some(cp) = sb.checkpoint else {
        rep.problems
            .push("the superblock names no checkpoint (store never initialised?)".into());
        return Ok((rep, None));
    };
    let rec = read_record(&store, &cp)?;
    // Compressed blocks are read (and verified) through the relocation map.
    if let Err(e) = crate::compress::load_relocations(&store, rec.relocations.as_ref()) {
        rep.problems.push(format!("relocation tree: {e}"));
    }
    (rep.relocated_blocks, rep.relocated_bytes) = store.relocation_stats();
    let forest = Forest::new(store.clone(), RefTable::default());
    let mut c = Checker {
        forest: &forest,
        rep: &mut rep,
        refs_found: HashMap::new(),
        link_nlink: HashMap::new(),
        file_alloc: HashMap::new(),
        oids: HashSet::new(),
        next_oid: HashMap::new(),
        inodes: HashMap::new(),
        work: Vec::new(),
        ns_list: Vec::new(),
        aggs: HashMap::new(),
        sum_prints: HashMap::new(),
    };
    for o in &rec.orphans {
        c.reference(o, None);
    }
    if let Some(root) = rec.ns_root {
        c.walk_ns_table(&root);
    }
    if let Some(root) = rec.relocations {
        c.walk_relocations(&root);
    }
    if let Some(root) = rec.refs_root {
        c.walk_tree_nodes(&root, "reference tree");
    }
    while let Some((ptr, ctx)) = c.work.pop() {
        c.walk(&ptr, ctx);
    }
    c.namespaces();
    c.finish(&rec.refs, &rec.freed);
    // Every span the packs must keep below the append position: reachable blocks (and the
    // whole frame a relocated one's compressed form lies in, kept until its last member
    // goes), the freed list (given back at the next checkpoint), the checkpoint's own pages.
    let mut live: Vec<(u32, u64, u64)> = Vec::with_capacity(c.refs_found.len() + rec.freed.len() + rec.meta.len());
    let span = |p: &BlockPtr| (p.pack(), p.offset(), p.offset() + p.footprint());
    for (_, p) in c.refs_found.values() {
        live.push(span(p));
        if let Some(frame) = store.relocation_frame(p) {
            live.push(frame);
        }
    }
    live.extend(rec.freed.iter().chain(&rec.meta).map(span));
    let runs = match store.unreferenced((sb.pack, sb.pack_end), &live) {
        Ok(r) => r,
        Err(e) => {
            rep.problems.push(format!("packs: {e}"));
            None
        }
    };
    rep.unreferenced_bytes = runs.iter().flatten().map(|(_, s, e)| e - s).sum();
    match journal::read(host, dir, sb.generation, &sb.store_id, sb.version) {
        Ok(j) => {
            rep.journal_records = j.records.len() as u64;
            rep.journal_tail = j.tail_reason.map(|r| format!("{} bytes: {r}", j.tail_bytes));
            let from = (sb.pack, sb.pack_end);
            let named: u64 = j
                .records
                .iter()
                .flat_map(journal::Record::blocks)
                .filter(|p| (p.pack(), p.offset()) >= from)
                .map(|p| p.footprint())
                .sum();
            match store.bytes_past(from) {
                Ok(past) => rep.unnamed_tail_bytes = past.saturating_sub(named),
                Err(e) => rep.problems.push(format!("packs: {e}")),
            }
        }
        Err(e) => rep.problems.push(format!("journal: {e}")),
    }
    match crate::records::intents::load(host, dir) {
        Ok(s) => rep.leftovers = s.intents.iter().map(|i| i.describe()).collect(),
        Err(e) => rep.problems.push(format!("intents: {e}")),
    }
    Ok((rep, runs))
}

struct Checker<'a> {
    forest: &'a Forest,
    rep: &'a mut Report,
    refs_found: HashMap<u64, (u32, BlockPtr)>,
    link_nlink: HashMap<(u32, u64), u32>,
    file_alloc: HashMap<u64, (u32, u64, u64, u64)>,
    oids: HashSet<(u32, u64)>,
    next_oid: HashMap<u32, u64>,
    inodes: HashMap<u32, (u64, u64)>,
    work: Vec<(BlockPtr, Ctx)>,
    ns_list: Vec<NsFacts>,
    /// Subtree aggregates by directory content root (shared trees are counted once).
    aggs: HashMap<u64, Rc<Agg>>,
    /// Blocks whose page sums were checked, and a checksum of those sums.
    sum_prints: HashMap<u64, u32>,
}

type NsFacts = (u32, Inode, Option<BlockPtr>, BTreeMap<u64, u32>, crate::NsInfo);

/// What a directory subtree holds that is per namespace: names of hard-linked files and
/// clone mount points. It is what the stored subtree summaries must say.
#[derive(Default, PartialEq, Eq, Debug)]
struct Agg {
    links: BTreeMap<u64, u64>,
    mounts: BTreeMap<u64, u64>,
    /// Directly below: subdirectories and mount points (for the directory's nlink).
    subdirs: u64,
    /// Records held inline in the subtree (hard-linked files live in the link table).
    inodes: u64,
}

impl Checker<'_> {
    fn problem(&mut self, p: String) {
        if self.rep.problems.len() < 1000 {
            self.rep.problems.push(p);
        }
    }

    /// Page sums kept beside a block must be the block's: a wrong one would fail good
    /// reads of its page. Each block's pages are read and summed once (by `read_pages`,
    /// which verifies each); later values naming the block must carry the same sums.
    fn check_sums(&mut self, oid: u64, idx: u64, block: &BlockPtr, sums: &[u32]) {
        let print = crc32c::crc32c(&sums.iter().flat_map(|s| s.to_le_bytes()).collect::<Vec<u8>>());
        match self.sum_prints.get(&block.addr) {
            Some(p) if *p == print => {}
            Some(_) => self.problem(format!(
                "file oid {oid}: chunk {idx}: other page sums than another value's for {block}"
            )),
            None => {
                self.sum_prints.insert(block.addr, print);
                if sums.is_empty() {
                    return;
                }
                if let Err(e) = self.forest.store.read_pages(block, sums, 0, sums.len()) {
                    self.problem(format!("file oid {oid}: chunk {idx}: page sums: {e}"));
                }
            }
        }
    }

    /// Counts one pointer to `p`; true the first time (so the caller descends once).
    fn reference(&mut self, p: &BlockPtr, then: Option<Ctx>) -> bool {
        let e = self.refs_found.entry(p.addr).or_insert((0, *p));
        e.0 += 1;
        if e.0 > 1 {
            if e.1 != *p {
                let m = format!("two different pointers name the block at {}", p);
                self.problem(m);
            }
            return false;
        }
        self.rep.blocks += 1;
        self.rep.block_bytes += p.len as u64;
        match (p.kind, then) {
            (BlockKind::Node, Some(ctx)) => self.work.push((*p, ctx)),
            // An interior node, checked by the walk of its tree.
            (BlockKind::Node, None) => {}
            // A remote block is verified when it is fetched; reading it here would fetch it.
            (BlockKind::Data, _) if p.is_remote() => self.rep.remote_blocks += 1,
            (BlockKind::Data, _) => {
                if let Err(e) = self.forest.store.read(p) {
                    self.problem(format!("{e}"));
                }
            }
            (k, _) => self.problem(format!("unexpected {k:?} block referenced: {p}")),
        }
        true
    }

    /// The relocation tree's nodes are referenced like any tree's (its entries were read
    /// when the map was loaded).
    fn walk_relocations(&mut self, root: &BlockPtr) {
        self.walk_tree_nodes(root, "relocation tree")
    }

    /// References every node of the tree at `root`, whose values hold no pointers.
    fn walk_tree_nodes(&mut self, root: &BlockPtr, what: &str) {
        let mut nodes = Vec::new();
        let r = self.forest.walk(
            root,
            &mut |p| {
                nodes.push(*p);
                true
            },
            &mut |_, _| Ok(()),
        );
        for p in nodes {
            self.reference(&p, None);
        }
        if let Err(e) = r {
            self.problem(format!("{what}: {e}"));
        }
    }

    fn walk_ns_table(&mut self, root: &BlockPtr) {
        let mut found = Vec::new();
        let forest = self.forest;
        let mut refs = Vec::new();
        let r = forest.walk(
            root,
            &mut |p| {
                refs.push(*p);
                true
            },
            &mut |k, v| {
                found.push((k.to_vec(), v.clone()));
                Ok(())
            },
        );
        for p in refs {
            self.reference(&p, None);
        }
        if let Err(e) = r {
            self.problem(format!("namespace table: {e}"));
        }
        for (k, v) in found {
            let Ok(id) = <[u8; 4]>::try_from(k.as_slice()).map(u32::from_be_bytes) else {
                self.problem("namespace table: malformed key".into());
                continue;
            };
            self.rep.namespaces += 1;
            match ns_from_value(&v) {
                Ok(ns) => {
                    // Invariant 8 (design.md): st_ino keeps object ids in 40 bits.
                    if ns.next_oid > crate::fs::MAX_OID {
                        self.problem(format!("namespace {id}: next object id {} is past 2^40", ns.next_oid));
                    }
                    self.next_oid.insert(id, ns.next_oid);
                    if ns.info.kind == crate::NsKind::Main {
                        // Clones start from an estimate (counting would mean walking them).
                        self.inodes.insert(id, (ns.inodes, 0));
                    }
                    self.ns_list
                        .push((id, ns.root.clone(), ns.link_root, ns.mounts.clone(), ns.info.clone()));
                    self.inode(id, &ns.root);
                    if ns.info.kind == crate::NsKind::Main && ns.root.oid != ROOT_OID {
                        self.problem(format!("namespace {id}: root has oid {}", ns.root.oid));
                    }
                    if let Some(l) = ns.link_root {
                        self.reference(&l, Some(Ctx::Links { ns: id }));
                    }
                }
                Err(e) => self.problem(format!("namespace {id}: {e}")),
            }
        }
    }

    /// Accounts for one inode record found in a directory (`parent`) or the link table.
    fn inode(&mut self, ns: u32, i: &Inode) {
        if !self.oids.insert((ns, i.oid)) {
            self.problem(format!("namespace {ns}: oid {} appears twice", i.oid));
        }
        if i.oid >= self.next_oid.get(&ns).copied().unwrap_or(u64::MAX) {
            self.problem(format!("namespace {ns}: oid {} is not below the next oid", i.oid));
        }
        match i.kind {
            Kind::Dir => {
                self.rep.dirs += 1;
                if let Some(c) = i.content {
                    self.reference(&c, Some(Ctx::Dir { ns, oid: i.oid }));
                }
                if let Some(c) = i.summary {
                    self.reference(&c, Some(Ctx::Summary));
                }
            }
            Kind::File => {
                self.rep.files += 1;
                self.rep.file_bytes += i.size;
                match i.content {
                    // Invariants of a direct chunk 0 (the record's decoder checked that it is
                    // a data block): it lies within the size, and is what the file stores.
                    Some(c) if i.direct.is_some() => {
                        let d = i.direct_chunk().expect("a direct chunk");
                        self.rep.direct_files += 1;
                        self.reference(&c, None);
                        if d.len() > i.size || i.alloc != d.len() {
                            self.problem(format!(
                                "namespace {ns}: file oid {} of size {} storing {} bytes has a chunk 0 of {}",
                                i.oid,
                                i.size,
                                i.alloc,
                                d.len()
                            ));
                        }
                        if !d.patches.is_empty() {
                            self.rep.patched_chunks += 1;
                            self.rep.patch_bytes += d.patches.bytes() as u64;
                        }
                    }
                    // Keyed by content root: records that share content are checked once.
                    Some(c) => {
                        let ctx = Ctx::File {
                            oid: i.oid,
                            size: i.size,
                            root: c.addr,
                        };
                        if self.reference(&c, Some(ctx)) {
                            self.file_alloc.insert(c.addr, (ns, i.oid, i.alloc, 0));
                        }
                    }
                    // Invariants of inline bytes (the record's decoder checked the rest).
                    None if !i.inline.is_empty() => {
                        self.rep.inline_files += 1;
                        self.rep.inline_bytes += i.inline.len() as u64;
                        if i.alloc != i.inline.len() as u64 {
                            self.problem(format!(
                                "namespace {ns}: file oid {} says {} bytes stored, has {} inline",
                                i.oid,
                                i.alloc,
                                i.inline.len()
                            ));
                        }
                        if i.inline.len() as u64 > i.size {
                            self.problem(format!(
                                "namespace {ns}: file oid {} has {} inline bytes, past its size {}",
                                i.oid,
                                i.inline.len(),
                                i.size
                            ));
                        }
                    }
                    None if i.alloc != 0 => {
                        self.problem(format!(
                            "namespace {ns}: file oid {} says {} bytes stored, has none",
                            i.oid, i.alloc
                        ));
                    }
                    None => {}
                }
            }
            k => {
                match k {
                    Kind::Symlink => self.rep.symlinks += 1,
                    _ => self.rep.specials += 1,
                }
                if i.content.is_some() {
                    self.problem(format!("namespace {ns}: {k:?} oid {} has content", i.oid));
                }
            }
        }
    }

    fn walk(&mut self, ptr: &BlockPtr, ctx: Ctx) {
        let forest = self.forest;
        let mut node_refs = Vec::new();
        let mut values = Vec::new();
        let first = std::cell::Cell::new(true);
        let skipped = std::cell::Cell::new(false);
        let seen = &self.refs_found;
        let r = forest.walk(
            ptr,
            &mut |p| {
                // The root was counted by whoever pointed at it.
                if first.replace(false) {
                    return true;
                }
                node_refs.push(*p);
                // Invariant: a block's count is the number of blocks and records pointing at
                // it. A node two versions of a tree share (a directory changed in a clone
                // keeps the leaves the change did not touch) was walked with the version
                // that reached it first, so the pointers in it are counted once.
                let fresh = !seen.contains_key(&p.addr);
                skipped.set(skipped.get() || !fresh);
                fresh
            },
            &mut |k, v| {
                values.push((k.to_vec(), v.clone()));
                Ok(())
            },
        );
        if let Err(e) = r {
            self.problem(format!("{e}"));
        }
        for p in node_refs {
            // Interior nodes are walked with their tree, so no further work is queued.
            self.reference(&p, None);
        }
        for (k, v) in values {
            match ctx {
                Ctx::Dir { ns, oid } => match EntryRecord::from_value(&v) {
                    Ok(EntryRecord::Inline(i)) => self.inode(ns, &i),
                    Ok(EntryRecord::Linked { oid: l, kind }) => {
                        if kind == Kind::Dir {
                            self.problem(format!("namespace {ns}: directory oid {l} in the link table"));
                        }
                    }
                    Ok(EntryRecord::Mount { .. }) => {}
                    Err(e) => self.problem(format!(
                        "entry {:?} of directory oid {oid}: {e}",
                        String::from_utf8_lossy(&k)
                    )),
                },
                Ctx::File { oid, size, root, .. } => {
                    let idx = match chunk_index(&k) {
                        Ok(i) => i,
                        Err(e) => {
                            self.problem(format!("file oid {oid}: {e}"));
                            continue;
                        }
                    };
                    if v.ptrs.is_empty() {
                        self.problem(format!("file oid {oid}: chunk {idx} without data"));
                        continue;
                    }
                    // Counted even when the patches are damaged, so it is not also unreachable;
                    // so are a layered chunk's layers (format 16).
                    for p in &v.ptrs {
                        self.reference(p, None);
                    }
                    let c = match StoredChunk::from_value(&v) {
                        Ok(c) => c,
                        Err(e) => {
                            self.problem(format!("file oid {oid}: chunk {idx}: {e}"));
                            continue;
                        }
                    };
                    if let Some(p) = v.ptrs.iter().find(|p| p.kind != BlockKind::Data) {
                        self.problem(format!("file oid {oid}: chunk {idx} points at a {:?} block", p.kind));
                    }
                    if idx * CHUNK + c.len() > size {
                        self.problem(format!(
                            "file oid {oid}: chunk {idx} ({} bytes) lies past the size {size}",
                            c.len()
                        ));
                    }
                    if !c.is_plain() {
                        self.rep.patched_chunks += 1;
                        self.rep.patch_bytes += c.patches.bytes() as u64;
                    }
                    if let Some(sums) = &c.sums {
                        self.rep.page_summed_chunks += 1;
                        self.check_sums(oid, idx, &c.block, sums);
                    }
                    if let Some(e) = self.file_alloc.get_mut(&root) {
                        e.3 += c.len();
                    }
                }
                // Checked against the tree by `agg`.
                Ctx::Summary => {}
                Ctx::Links { ns } => match inode_from_value(&v) {
                    Ok(i) => {
                        if chunk_index(&k).ok() != Some(i.oid) {
                            self.problem(format!("namespace {ns}: link table key differs from oid {}", i.oid));
                        }
                        self.rep.hardlinked += 1;
                        self.link_nlink.insert((ns, i.oid), i.nlink);
                        self.inode(ns, &i);
                    }
                    Err(e) => self.problem(format!("namespace {ns}: link table: {e}")),
                },
            }
        }
        // A file tree that shares nodes walked before lacks their chunks above: the bytes it
        // stores are summed again over all of them.
        if let (Ctx::File { root, .. }, true) = (&ctx, skipped.get()) {
            let mut stored = 0;
            let r = forest.scan(Some(ptr), &[], &mut |_, v| {
                stored += StoredChunk::from_value(v).map(|c| c.len()).unwrap_or(0);
                true
            });
            if let Err(e) = r {
                self.problem(format!("{e}"));
            }
            if let Some(e) = self.file_alloc.get_mut(root) {
                e.3 = stored;
            }
        }
        // Ptrs held by values whose kind is Node (subtrees) were queued by `inode`.
    }

    /// The aggregate of the directory tree at `content`, checking each subdirectory's stored
    /// summary against what lies below it. Memoised, so shared subtrees are read once.
    fn agg(&mut self, content: Option<&BlockPtr>) -> Rc<Agg> {
        let Some(c) = content else {
            return Rc::new(Agg::default());
        };
        if let Some(a) = self.aggs.get(&c.addr) {
            return a.clone();
        }
        let mut entries = Vec::new();
        if let Err(e) = self.forest.scan(Some(c), &[], &mut |k, v| {
            entries.push((k.to_vec(), v.clone()));
            true
        }) {
            self.problem(format!("{e}"));
        }
        let mut out = Agg::default();
        for (_, v) in entries {
            match EntryRecord::from_value(&v) {
                Ok(EntryRecord::Inline(i)) if i.kind == Kind::Dir => {
                    let sub = self.agg(i.content.as_ref());
                    self.compare_summary(&i, &sub);
                    out.subdirs += 1;
                    out.inodes += 1 + sub.inodes;
                    for (o, n) in &sub.links {
                        *out.links.entry(*o).or_default() += n;
                    }
                    for (o, n) in &sub.mounts {
                        *out.mounts.entry(*o).or_default() += n;
                    }
                }
                Ok(EntryRecord::Linked { oid, .. }) => *out.links.entry(oid).or_default() += 1,
                Ok(EntryRecord::Mount { oid }) => {
                    *out.mounts.entry(oid).or_default() += 1;
                    out.subdirs += 1;
                }
                Ok(EntryRecord::Inline(_)) => out.inodes += 1,
                Err(_) => {}
            }
        }
        let out = Rc::new(out);
        self.aggs.insert(c.addr, out.clone());
        out
    }

    /// A directory record's stored summary must list exactly the linked names and mount points
    /// below it (snapshot marks, `S` keys, are hints and not checked).
    fn compare_summary(&mut self, dir: &Inode, want: &Agg) {
        let mut got = Agg::default();
        let mut bad = None;
        if let Err(e) = self.forest.scan(dir.summary.as_ref(), &[], &mut |k, v| {
            match (summary_key_parts(k), summary_count(v)) {
                (Ok((b'L', o)), Ok(n)) => {
                    got.links.insert(o, n);
                }
                (Ok((b'M', o)), Ok(n)) => {
                    got.mounts.insert(o, n);
                }
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => bad = Some(e),
            }
            true
        }) {
            bad = Some(e);
        }
        if let Some(e) = bad {
            self.problem(format!("summary of directory oid {}: {e}", dir.oid));
        }
        if dir.nlink as u64 != 2 + want.subdirs {
            self.problem(format!(
                "directory oid {} has nlink {}, expected {}",
                dir.oid,
                dir.nlink,
                2 + want.subdirs
            ));
        }
        if (&got.links, &got.mounts) != (&want.links, &want.mounts) {
            self.problem(format!(
                "summary of directory oid {} says {:?} but the tree below holds {:?}",
                dir.oid, got, want
            ));
        }
    }

    /// Per-namespace facts: link counts are the names inside the namespace, mount points
    /// match the mount table, and every clone and snapshot hangs where it says.
    fn namespaces(&mut self) {
        let list = std::mem::take(&mut self.ns_list);
        let ids: HashMap<u32, crate::NsInfo> = list.iter().map(|f| (f.0, f.4.clone())).collect();
        for (id, root, link_root, mounts, info) in &list {
            let a = self.agg(root.content.as_ref());
            self.compare_summary(root, &a);
            let mut links = BTreeMap::new();
            if let Some(l) = link_root {
                if let Err(e) = self.forest.scan(Some(l), &[], &mut |_, v| {
                    if let Ok(i) = inode_from_value(v) {
                        links.insert(i.oid, i.nlink as u64);
                    }
                    true
                }) {
                    self.problem(format!("namespace {id}: link table: {e}"));
                }
            }
            if info.kind == crate::NsKind::Main {
                let found = 1 + a.inodes + links.len() as u64;
                if let Some(e) = self.inodes.get_mut(id) {
                    e.1 = found;
                }
            }
            if links != a.links {
                for (oid, n) in &links {
                    let names = a.links.get(oid).copied().unwrap_or(0);
                    if names != *n {
                        self.problem(format!(
                            "namespace {id}: file oid {oid} has nlink {n} but {names} names"
                        ));
                    }
                }
                for oid in a.links.keys().filter(|o| !links.contains_key(o)) {
                    self.problem(format!(
                        "namespace {id}: entries refer to oid {oid}, absent from the link table"
                    ));
                }
            }
            let want: BTreeMap<u64, u64> = mounts.keys().map(|o| (*o, 1)).collect();
            if want != a.mounts {
                self.problem(format!(
                    "namespace {id}: mount table {:?} but the tree holds mount points {:?}",
                    mounts, a.mounts
                ));
            }
            for (oid, child) in mounts {
                match ids.get(child) {
                    Some(ci) if ci.kind == crate::NsKind::Clone && ci.parent == *id && ci.anchor == *oid => {}
                    _ => self.problem(format!(
                        "namespace {id}: mount point {oid} names namespace {child}, which does not hang there"
                    )),
                }
            }
            match info.kind {
                crate::NsKind::Main if *id != 1 => self.problem(format!("namespace {id} claims to be the main tree")),
                crate::NsKind::Clone => {
                    let ok = list
                        .iter()
                        .any(|f| f.0 == info.parent && f.3.get(&info.anchor) == Some(id));
                    if !ok {
                        self.problem(format!(
                            "clone namespace {id} is not mounted in namespace {}",
                            info.parent
                        ));
                    }
                }
                crate::NsKind::Snapshot if !ids.contains_key(&info.parent) => self.problem(format!(
                    "snapshot namespace {id} belongs to missing namespace {}",
                    info.parent
                )),
                _ => {}
            }
            // Invariant 9 (design.md): a clone's chain of parents ends at the main tree or a
            // snapshot, within as many steps as there are namespaces.
            let mut cur = *id;
            let mut steps = 0;
            while let Some(i) = ids.get(&cur).filter(|i| i.kind == crate::NsKind::Clone) {
                cur = i.parent;
                steps += 1;
                if steps > ids.len() {
                    self.problem(format!("namespace {id}: its chain of parents loops"));
                    break;
                }
            }
        }
    }

    fn finish(&mut self, refs: &RefTable, freed: &[BlockPtr]) {
        // (Problems gathered, not pushed as found: the table is borrowed, and a copy of it
        // would double what a check holds.)
        let mut wrong = Vec::new();
        for (&addr, &(found, p)) in &self.refs_found {
            let want = refs.get(addr);
            if want != found && wrong.len() < 1000 {
                wrong.push(format!("{p}: reference count {want} but {found} pointer(s) to it"));
            }
            self.rep.shared_blocks += (found > 1) as u64;
        }
        wrong.into_iter().for_each(|m| self.problem(m));
        for (addr, n) in refs.iter() {
            if !self.refs_found.contains_key(&addr) {
                self.problem(format!(
                    "reference table keeps count {n} for unreachable block {addr:#x}"
                ));
            }
        }
        for p in freed {
            if self.refs_found.contains_key(&p.addr) {
                self.problem(format!("{p} is reachable but on the freed list"));
            }
        }
        let allocs: Vec<_> = self.file_alloc.values().copied().collect();
        for (ns, oid, said, found) in allocs {
            if said != found {
                self.problem(format!(
                    "namespace {ns}: file oid {oid} says {said} bytes stored, has {found}"
                ));
            }
        }
        let counts: Vec<_> = self.inodes.iter().map(|(k, v)| (*k, *v)).collect();
        for (ns, (said, found)) in counts {
            if said != found {
                self.problem(format!("namespace {ns}: inode count {said}, found {found}"));
            }
        }
    }
}
