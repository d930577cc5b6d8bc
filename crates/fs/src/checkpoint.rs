//! Creating and opening a store, checkpoints, and recovery.
//!
//! A checkpoint folds every overlay into new tree versions, bottom-up, and commits them:
//!
//! 1. *prepass*: every inode whose record will be rewritten takes a reference on its current
//!    content root, before any tree is changed. A record that moves between directories (a
//!    rename) is thereby never freed by its old directory before its new one holds it.
//! 2. file overlays become new content trees;
//! 3. directories with overlays are applied deepest first, each placing its new record in
//!    its parent's overlay, up to the namespace roots;
//! 4. link tables and the namespace table are applied;
//! 5. the reference table, orphan list and freed list are written as meta blocks, packs are
//!    fsynced, the next journal is created, and the superblock is written and fsynced;
//! 6. only then are freed blocks punched out of their packs and the old journal deleted.

use crate::delta::{Layer, Patches, StoredChunk, LAYERED_MAX, LAYERS_MAX, LAYER_RUNS_MAX, PATCH_MAX};
use crate::error::errno;
use crate::fs::*;
use crate::inode::*;
use crate::journal::{self, Journal, Record};
pub(crate) use crate::records::checkpoint::read_record;
pub(crate) use crate::records::namespace::{ns_from_value, ns_key, ns_to_value, NsRecord};
use crate::volume::Volume;
use scion_store::page_sums;
use scion_store::{BlockKind, BlockPtr, BlockStore, Error, Host, Result, Superblock};
use scion_tree::{Forest, Op, RefTable, Value};
use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The most journal bytes a checkpoint carries forward (see `Fs::carry`).
const CARRY_MAX: usize = 1 << 20;

/// What a checkpoint must fold into the trees.
pub(crate) enum Fold {
    /// Everything but the files it may carry.
    Carry,
    /// As `Carry`, but nothing below this directory (about to be cloned or snapshotted).
    Under(Ino),
    /// Everything (at open and close).
    All,
}

impl Fs {
    /// Makes a new, empty store in `dir` (which must be absent or empty).
    pub fn create(host: &Host, dir: &Path) -> Result<()> {
        if host.exists(dir) {
            let names = host
                .list_dir(dir)
                .map_err(|e| Error::io(format!("listing of {}", dir.display()), e))?;
            if !names.is_empty() {
                return Err(Error::Format(format!(
                    "{} is not empty; a store is made in a new or empty directory",
                    dir.display()
                )));
            }
        }
        for sub in ["", "packs", "journal"] {
            host.create_dir_all(&dir.join(sub))
                .map_err(|e| Error::io(format!("creation of {}", dir.join(sub).display()), e))?;
        }
        let store_id: [u8; 16] = rand::random();
        BlockStore::open(host, dir, 1, 0, true)?;
        Journal::create(host, dir, 0, &store_id)?;
        let sb = Superblock {
            version: scion_store::FORMAT_VERSION,
            generation: 0,
            store_id,
            pack: 1,
            pack_end: 0,
            checkpoint: None,
        };
        sb.create(host, dir)?;
        scion_store::sync_dir(host, &dir.join("packs"))?;
        scion_store::sync_dir(host, dir)?;
        // The first open builds the root directory and commits generation 1.
        let fs = Fs::open(
            dir,
            MountOptions {
                holder: "scion init".into(),
                host: host.clone(),
            },
        )?;
        fs.close()
    }

    /// Opens a store for reading and writing: takes its lock, loads the newest checkpoint,
    /// replays the journal and commits the result as a new checkpoint.
    pub fn open(dir: &Path, opts: MountOptions) -> Result<Fs> {
        let host = opts.host;
        // Nothing is written into a directory that is not a store (the lock is a file); the
        // superblock is read again under the lock, where it cannot change.
        Superblock::read(&host, dir)?;
        let lock = host.lock(dir, &opts.holder)?;
        let sb = Superblock::read(&host, dir)?;
        let store = Arc::new(BlockStore::open(&host, dir, sb.pack, sb.pack_end, true)?);
        let rec = sb.checkpoint.as_ref().map(|p| read_record(&store, p)).transpose()?;
        // Recompressed blocks are read through the relocation map, which must be in place
        // before anything is read: the journal may name such a block (a copy of a snapshot's
        // file shares its blocks).
        let relocations = rec.as_ref().and_then(|r| r.relocations);
        crate::compress::load_relocations(&store, relocations.as_ref())?;
        // The journal may name blocks written ahead past the checkpoint's append position.
        // Replay stops at the first record whose block did not reach the disk (it was never
        // covered by an fsync), and appending resumes right after the last block it names.
        let mut j = journal::read(&host, dir, sb.generation, &sb.store_id, sb.version)?;
        // A journal file found here may have been created by a process that died before
        // syncing its name; the checkpoints below reuse it without syncing the directory.
        scion_store::sync_dir(&host, &dir.join("journal"))?;
        let mut resume = (sb.pack, sb.pack_end);
        let mut usable = j.records.len();
        // Blocks of `writeback` records that are not whole: their chunks keep their older
        // content, and replay goes on.
        let mut lost: HashSet<u64> = HashSet::new();
        'records: for (i, rec) in j.records.iter().enumerate() {
            let unordered = matches!(rec, Record::PutChunks { unordered: true, .. });
            if matches!(rec, Record::PutChunks { .. } | Record::PutLayer { .. }) {
                for p in &rec.blocks() {
                    match store.read(p) {
                        Ok(_) => {}
                        Err(e) if unordered => {
                            log::warn!("journal record {i} (writeback) names a block that never reached the disk ({e}): its chunk keeps its older content");
                            lost.insert(p.addr);
                            continue;
                        }
                        Err(e) => {
                            log::info!("journal record {i} names a block that never reached the disk ({e}); replay ends there");
                            usable = i;
                            break 'records;
                        }
                    }
                    resume = resume.max((p.pack(), p.offset() + p.footprint()));
                }
            }
        }
        // An operation is replayed whole or not at all.
        while usable > 0 && usable < j.records.len() && !j.op_start[usable] {
            usable -= 1;
        }
        if usable < j.records.len() {
            j.tail_reason
                .get_or_insert_with(|| "a record names a block that was never written".into());
            j.records.truncate(usable);
            j.op_start.truncate(usable);
        }
        store.resume_at(resume.0, resume.1)?;
        // Below `resume`, only the blocks the replayed records name are used.
        let named: Vec<BlockPtr> = j
            .records
            .iter()
            .flat_map(Record::blocks)
            .filter(|p| !lost.contains(&p.addr))
            .collect();
        let reclaimed = store.punch_unnamed((sb.pack, sb.pack_end), resume, &named)?;
        if reclaimed > 0 {
            log::info!("{reclaimed} bytes of pack space that nothing references (a crash left them) given back");
        }
        let mut fs = Fs::blank(Volume::new(
            dir.to_path_buf(),
            sb.store_id,
            sb.generation,
            host,
            lock,
            Forest::new(store.clone(), RefTable::default()),
        ));
        fs.replaying = true;
        match (&sb.checkpoint, rec) {
            (Some(ptr), Some(rec)) => {
                if rec.generation != sb.generation {
                    return Err(Error::corrupt(
                        "checkpoint record",
                        ptr,
                        format!(
                            "generation {} under superblock generation {}",
                            rec.generation, sb.generation
                        ),
                    ));
                }
                // Finish the space reclamation the last checkpoint may not have completed.
                if let Err(e) = store.punch_all(&rec.freed) {
                    log::warn!("{e}: some freed space stays allocated until a later open");
                }
                fs.vol.forest.refs = rec.refs;
                fs.refs_root = rec.refs_root;
                if rec.flat {
                    // A store before format 18: its first checkpoint writes the tree whole.
                    fs.vol.forest.refs.mark_all_changed();
                }
                fs.ns_root = rec.ns_root;
                fs.relocations = rec.relocations;
                fs.next_ns = rec.next_ns;
                fs.vol.meta_blocks = rec.meta;
                // Files that were open but unlinked at the crash are gone now.
                fs.orphan_releases = rec.orphans;
                fs.load_namespaces()?;
            }
            _ => {
                // A new store: namespace 1 with an empty root directory owned by the creator.
                let now = Ts::now();
                let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
                let root = Inode::new(ROOT_OID, Kind::Dir, 0o755, uid, gid, now);
                fs.nodes.insert(ROOT_INO, Box::new(Node::new_root(root, 1)));
                fs.namespaces.insert(
                    1,
                    Namespace {
                        root: ROOT_INO,
                        link_root: None,
                        links: BTreeMap::new(),
                        next_oid: 2,
                        inodes: 1,
                        dirty: true,
                        info: NsInfo::main(),
                        mounts: BTreeMap::new(),
                        mounted_at: None,
                    },
                );
                fs.next_ns = 2;
            }
        }
        if let Some(why) = &j.tail_reason {
            log::info!(
                "journal ends with {} unusable bytes ({why}): a write cut short by a crash",
                j.tail_bytes
            );
        }
        let n = j.records.len();
        // A journal with records, a torn one, or a tail of blocks nothing named: the store was
        // not closed, and a crash may have left pack space below the append position that
        // nothing references (given back below).
        let after_crash = n > 0 || j.tail_reason.is_some() || reclaimed > 0 || !was_closed(&fs.vol.host, dir);
        fs.lost_blocks = lost;
        for (i, rec) in j.records.into_iter().enumerate() {
            fs.replay(&rec).map_err(|errno| {
                Error::corrupt(
                    "journal",
                    format!("record {i} of {n}"),
                    format!("replay failed with errno {errno}: {rec:?}"),
                )
            })?;
        }
        if n > 0 {
            log::info!("replayed {n} journal records");
        }
        fs.replaying = false;
        fs.lost_blocks.clear();
        fs.vol.schedules = crate::records::schedules::load(&fs.vol.host, &fs.vol.dir).map_err(|e| {
            log::error!("snapshot schedules not run: {e}");
            e.to_string()
        });
        fs.vol.mirrors = crate::records::mirrors::load(&fs.vol.host, &fs.vol.dir).map_err(|e| {
            log::error!("mirrors not run: {e}");
            e.to_string()
        });
        // A restore --replace a crash cut short: what it left at its hidden name goes.
        fs.finish_replacements().map_err(|e| Error::Format(format!("finishing an interrupted restore --replace: {e}")))?;
        // Everything into the trees: the nodes are dropped below.
        fs.checkpoint_with(Fold::All)?;
        // The store is format 4 now: files of the one-per-generation journals (format 3 and
        // older, or left by a crash during the first checkpoint that upgraded) go.
        let jdir = dir.join("journal");
        let names = fs
            .vol
            .host
            .list_dir(&jdir)
            .map_err(|e| Error::io(format!("listing of {}", jdir.display()), e))?;
        for name in names.iter().filter(|n| journal::is_legacy_journal_name(n)) {
            if let Err(e) = fs.vol.host.remove_file(&jdir.join(name)) {
                log::warn!("could not remove old journal {name}: {e}");
            }
        }
        if after_crash {
            fs.give_back_unreferenced();
        }
        // Open: until a close marks it closed again, the next open looks for what a crash left.
        mark_closed(&fs.vol.host, dir, false)?;
        fs.take_reserve();
        // Start clean: the kernel knows no inode yet.
        fs.nodes.retain(|_, n| n.loc == Loc::Root);
        Ok(fs)
    }

    /// A filesystem over volume `vol` holding nothing yet: `open` fills it from the store,
    /// `view` from the engine's committed state.
    pub(crate) fn blank(vol: Volume) -> Fs {
        Fs {
            vol,
            nodes: Default::default(),
            namespaces: BTreeMap::new(),
            next_ns: 1,
            ns_limit: MAIN_NS_LIMIT,
            ns_root: None,
            relocations: None,
            refs_root: None,
            incompressible: Default::default(),
            io: Default::default(),
            replaying: false,
            dirty_bytes: 0,
            flushed_bytes: 0,
            pending_chunks: 0,
            orphan_releases: Vec::new(),
            last_checkpoint: Instant::now(),
            last_change: Instant::now(),
            last_repack: None,
            last_compress: None,
            dropped_ns: Vec::new(),
            replaced_ns: Default::default(),
            show_snapdir: false,
            read_only: false,
            failed_errno: crate::error::errno::EIO,
            journaled: true,
            journal_data: false,
            writeback: false,
            chunk_run: None,
            synced_at: None,
            last_attr: None,
            pieces: Default::default(),
            last_write: None,
            lost_blocks: Default::default(),
            dedup_index: Default::default(),
            hash_memo: Default::default(),
            reclaimable: Default::default(),
            dirty: Default::default(),
            idle_dirs: Vec::new(),
            idle_fresh: 0,
            whereabouts: Default::default(),
            idle_sweep_at: 1024,
            carried: Default::default(),
            carry_memo: Default::default(),
            journal_floor: 0,
            orphans: Default::default(),
            open: Default::default(),
            sweep_at: 1 << 16,
            loaded_since_sweep: 0,
            room: Default::default(),
            reserve: Default::default(),
            kernel_inval: Vec::new(),
            view: None,
            committing: None,
            handoff: None,
            background: None,
            fold_cost: Default::default(),
            background_woken: false,
            sync_owed: None,
            named_writes: 0,
            lock_stats: Default::default(),
        }
    }

    /// After a crash: gives back the pack space below the append position that nothing
    /// reachable from the checkpoint just committed names (`check::unreferenced_runs`: a walk
    /// of the whole committed state, as `scion check` does). Nothing is given back if the walk
    /// finds damage or the host cannot tell data from holes; failures are logged, not fatal.
    fn give_back_unreferenced(&mut self) {
        let t = Instant::now();
        match crate::check::unreferenced_runs(&self.vol.host, &self.vol.dir) {
            Ok(Some(runs)) if !runs.is_empty() => {
                let bytes: u64 = runs.iter().map(|(_, s, e)| e - s).sum();
                match self.vol.forest.store.punch_runs(&runs) {
                    Ok(()) => log::info!(
                        "{bytes} bytes of pack space that nothing references (a crash left them) given back ({} ms)",
                        t.elapsed().as_millis()
                    ),
                    Err(e) => log::warn!("pack space a crash left stays allocated: {e}"),
                }
            }
            Ok(_) => {}
            Err(e) => log::warn!("pack space a crash left not looked for: {e}"),
        }
    }

    fn load_namespaces(&mut self) -> Result<()> {
        let mut found = Vec::new();
        let mut err = None;
        self.vol.forest.scan(self.ns_root.as_ref(), &[], &mut |k, v| {
            match (k.try_into().map(u32::from_be_bytes), ns_from_value(v)) {
                (Ok(id), Ok(rec)) => found.push((id, rec)),
                (Err(_), _) => err = Some(Error::corrupt("namespace table", "key", "not a namespace id")),
                (_, Err(e)) => err = Some(e),
            }
            err.is_none()
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        for (id, rec) in found {
            let root = make_ino(id, rec.root.oid);
            self.nodes.insert(root, Box::new(Node::new_root(rec.root, id)));
            self.namespaces.insert(
                id,
                Namespace {
                    root,
                    link_root: rec.link_root,
                    links: BTreeMap::new(),
                    next_oid: rec.next_oid,
                    inodes: rec.inodes,
                    dirty: false,
                    info: rec.info,
                    mounts: rec.mounts,
                    mounted_at: None,
                },
            );
        }
        if !self.nodes.contains_key(&ROOT_INO) {
            return Err(Error::corrupt("namespace table", "namespace 1", "missing"));
        }
        Ok(())
    }

    fn replay(&mut self, rec: &Record) -> FsResult<()> {
        match rec {
            Record::Mknod {
                parent,
                name,
                kind,
                perm,
                uid,
                gid,
                rdev,
                target,
                xattrs,
                oid,
                time,
            } => {
                let p = self.resolve(parent)?;
                self.op_mknod(p, name, *kind, *perm, *uid, *gid, *rdev, target, xattrs, *oid, *time)
                    .map(|_| ())
            }
            Record::Link {
                ino,
                parent,
                name,
                time,
            } => {
                let i = self.resolve(ino)?;
                let p = self.resolve(parent)?;
                self.op_link(i, p, name, *time)
            }
            Record::Remove {
                parent,
                name,
                dir,
                time,
            } => {
                let p = self.resolve(parent)?;
                self.op_remove(p, name, *dir, *time)
            }
            Record::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
                time,
            } => {
                let p = self.resolve(parent)?;
                let np = self.resolve(newparent)?;
                self.op_rename(p, name, np, newname, *flags, *time)
            }
            Record::SetAttr { ino, attr, time } => {
                let i = self.resolve(ino)?;
                self.op_setattr(i, attr, *time)
            }
            Record::Write {
                ino,
                offset,
                data,
                time,
            } => {
                let i = self.resolve(ino)?;
                self.op_write(i, *offset, data, *time).map(|_| ())
            }
            Record::PutChunks {
                ino,
                first,
                chunks,
                time,
                tail,
                ..
            } => {
                let i = self.resolve(ino)?;
                let how = if *tail { crate::fs::Put::Tail } else { crate::fs::Put::Ahead };
                self.op_put_chunks(i, *first, chunks, *time, how)
            }
            Record::ShareChunks {
                ino,
                first,
                chunks,
                time,
            } => {
                let i = self.resolve(ino)?;
                self.op_put_chunks(i, *first, chunks, *time, crate::fs::Put::Shared)
            }
            Record::PutLayer { ino, idx, layer, time } => {
                let i = self.resolve(ino)?;
                self.op_put_layer(i, *idx, layer, *time)
            }
            Record::AttachChunk { ino, idx, ptr, shared, time } => {
                let i = self.resolve(ino)?;
                self.op_attach_chunk(i, *idx, *ptr, *shared, *time)
            }
            Record::Fallocate {
                ino,
                mode,
                offset,
                len,
                time,
            } => {
                let i = self.resolve(ino)?;
                self.op_fallocate(i, *mode, *offset, *len, *time)
            }
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                time,
            } => {
                let i = self.resolve(ino)?;
                self.op_setxattr(i, name, value, *flags, *time)
            }
            Record::RemoveXattr { ino, name, time } => {
                let i = self.resolve(ino)?;
                self.op_removexattr(i, name, *time)
            }
            Record::Reserve { ns, oid } => self.op_reserve(*ns, *oid).map(|_| ()),
            Record::Adopt {
                parent,
                name,
                perm,
                uid,
                gid,
                xattrs,
                oid,
                time,
            } => {
                let p = self.resolve(parent)?;
                self.replay_adopt(p, name, *perm, *uid, *gid, xattrs, *oid, *time)
            }
            Record::Carry {
                ino,
                size,
                atime,
                mtime,
                ctime,
                chunks,
            } => {
                let i = self.resolve(ino)?;
                self.op_carry(i, *size, [*atime, *mtime, *ctime], chunks)
            }
            Record::Clone {
                src,
                parent,
                name,
                excludes,
                origin,
                ns,
                oid,
                time,
                masked_for,
                top_gid,
            } => {
                let s = self.resolve(src)?;
                let p = self.resolve(parent)?;
                // The clone gets the namespace and entry it got before the crash, or the
                // journal does not describe this store's history.
                let pns = self.node(p)?.ns;
                let next_oid = self.namespaces.get(&pns).ok_or(errno::EIO)?.next_oid;
                if (self.next_ns, next_oid) != (*ns, *oid) {
                    log::error!(
                        "clone record names namespace {ns} and entry {oid}; replay is at {} and {next_oid}",
                        self.next_ns
                    );
                    return Err(errno::EIO);
                }
                // Tag 16 records (format 7-10) masked the clone but left its top the source's:
                // replayed as made, with the top's owner and group unchanged.
                let top = masked_for.zip(*top_gid).map(|(uid, gid)| crate::clone::ForUser { uid, gid });
                self.op_clone(s, p, name, excludes, origin, *time, *masked_for, top).map(|_| ())
            }
            Record::Snapshot {
                dir,
                name,
                origin,
                ns,
                time,
                scheduled,
                masked_for,
            } => {
                let d = self.resolve(dir)?;
                if self.next_ns != *ns {
                    log::error!("snapshot record names namespace {ns}; replay is at {}", self.next_ns);
                    return Err(errno::EIO);
                }
                self.op_snapshot(d, name, origin, *time, *scheduled, *masked_for).map(|_| ())
            }
        }
    }

    /// Commits everything changed since the last checkpoint. On failure the filesystem
    /// refuses further changes (the journal still holds them for the next mount).
    /// Picks the dirty files whose only changes are patches over committed chunks and new
    /// size and times, takes them out of their parents' overlays, and returns the journal
    /// record of each. BetrFS keeps such small writes as messages above the shared nodes;
    /// here they stay in memory and ride at the head of each new journal, so a clone plus a
    /// few small writes never copies the files' tree nodes (a 4 MiB file's chunk index alone
    /// is a 4 KiB node). Bounded by `CARRY_MAX`; a file changed in any other way, or lying
    /// under a directory about to be cloned (`Fold::Under`), is folded.
    fn carry(&mut self, dirty: &mut Vec<Ino>, fold: &Fold) -> Result<Vec<(Ino, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut memo: InoMap<CarryMemo> = InoMap::default();
        let mut bytes = 0;
        for &ino in dirty.iter() {
            let n = &self.nodes[&ino];
            let Loc::Entry { parent, name } = &n.loc else { continue };
            let only_patches = n.inode.kind == Kind::File
                && !n.chunks.is_empty()
                && n.chunks.values().all(|c| matches!(c, Chunk::Patched { patches, owned: false, ahead, .. } if patches.bytes() <= PATCH_MAX && ahead.is_empty()));
            let under = match fold {
                Fold::Carry => false,
                Fold::Under(dir) => self.lies_under(ino, *dir),
                Fold::All => true,
            };
            if !only_patches || under {
                continue;
            }
            // Its parent's overlay names it only because its record changed (or not at all,
            // when it was carried last time and not changed since)...
            let p = &self.nodes[parent];
            match p.entries.get(name) {
                None => {}
                Some(Some(Ent::Node(i))) if *i == ino => {}
                Some(_) => continue,
            }
            // ... and the committed record differs in size and times only.
            let p_content = p.inode.content;
            let Some(target) = self.target(ino) else { continue };
            let chunks: Vec<(u64, Patches)> = n
                .chunks
                .iter()
                .filter_map(|(i, c)| match c {
                    Chunk::Patched { patches, .. } if !patches.is_empty() => Some((*i, patches.clone())),
                    _ => None,
                })
                .collect();
            let now = &n.inode;
            let payload = match self.carry_memo.get(&ino) {
                // The same committed record (the parent's committed tree is immutable), the
                // same inode, path and patches: the same record.
                Some(m)
                    if m.parent_content == p_content && m.inode == *now && m.target == target && m.chunks == chunks =>
                {
                    m.payload.clone()
                }
                _ => {
                    let Some(v) = self.vol.forest.get(p_content.as_ref(), name)? else {
                        continue;
                    };
                    let Ok(EntryRecord::Inline(stored)) = EntryRecord::from_value(&v) else {
                        continue;
                    };
                    let same = Inode {
                        size: now.size,
                        alloc: now.alloc,
                        atime: now.atime,
                        mtime: now.mtime,
                        ctime: now.ctime,
                        ..stored.clone()
                    };
                    if same != *now {
                        continue;
                    }
                    let ts = |a: Ts, b: Ts| (a != b).then_some(a);
                    let rec = Record::Carry {
                        ino: target.clone(),
                        size: (now.size != stored.size).then_some(now.size),
                        atime: ts(now.atime, stored.atime),
                        mtime: ts(now.mtime, stored.mtime),
                        ctime: ts(now.ctime, stored.ctime),
                        chunks: chunks.clone(),
                    };
                    let payload = rec.encode();
                    memo.insert(
                        ino,
                        CarryMemo {
                            parent_content: p_content,
                            inode: now.clone(),
                            target,
                            chunks,
                            payload: payload.clone(),
                        },
                    );
                    payload
                }
            };
            bytes += payload.len();
            if bytes > CARRY_MAX {
                break;
            }
            out.push((ino, payload));
        }
        // Memos of what is carried now; the others are dropped.
        let now_carried: InoSet = out.iter().map(|(i, _)| *i).collect();
        self.carry_memo.retain(|i, _| now_carried.contains(i));
        self.carry_memo
            .extend(memo.into_iter().filter(|(i, _)| now_carried.contains(i)));
        let carried = now_carried;
        for ino in &carried {
            let Loc::Entry { parent, name } = self.nodes[ino].loc.clone() else {
                unreachable!()
            };
            self.nodes.get_mut(&parent).unwrap().entries.remove(&name);
        }
        // A file carried last time and folded now needs its parent's overlay to name it
        // again (the carry took it out), and its parent visited.
        let mut parents = Vec::new();
        for ino in std::mem::take(&mut self.carried) {
            if carried.contains(&ino) {
                continue;
            }
            if let Some(Node {
                loc: Loc::Entry { parent, name },
                ..
            }) = self.nodes.get(&ino).map(|n| &**n)
            {
                let (parent, name) = (*parent, name.clone());
                self.nodes
                    .get_mut(&parent)
                    .unwrap()
                    .entries
                    .entry(name)
                    .or_insert(Some(Ent::Node(ino)));
                parents.push(parent);
            }
        }
        dirty.retain(|i| !carried.contains(i));
        // Carried from the fold on, not from the commit: while a background checkpoint's
        // packs sync, a clone or snapshot asks `changed_below` whether a file below its
        // source is outside the trees, and these are (a snapshot taken in that window once
        // lacked a file's last small append).
        self.carried = carried;
        for p in parents {
            if !dirty.contains(&p) {
                dirty.push(p);
            }
        }
        Ok(out)
    }

    /// What file `ino`'s record holds after this checkpoint when chunk 0 is all it stores
    /// (`None`: it needs a content tree). Takes the references the result owns: a new block
    /// for bytes too long to be inline, one more on a committed block it keeps.
    fn single_chunk(&mut self, ino: Ino) -> Result<Option<OneChunk>> {
        let n = &self.nodes[&ino];
        if n.chunks.range(1..).any(|(_, c)| *c != Chunk::Hole) {
            return Ok(None);
        }
        // A committed chunk past 0 that stays (not overlaid by a hole) keeps the tree.
        let tree = n.inode.tree();
        let mut more = false;
        self.vol.forest.scan(tree, &chunk_key(1), &mut |k, _| {
            more = chunk_index(k).map_or(true, |i| !n.chunks.contains_key(&i));
            !more
        })?;
        if more {
            return Ok(None);
        }
        let one = match n.chunks.get(&0) {
            Some(Chunk::Buf(b)) if b.iter().all(|x| *x == 0) => OneChunk::Empty,
            Some(Chunk::Buf(b)) if b.len() <= INLINE_MAX => OneChunk::Inline(b.clone()),
            Some(Chunk::Buf(b)) => {
                OneChunk::Direct(self.vol.forest.store.write(BlockKind::Data, b)?, Patches::default())
            }
            // The overlay's reference moves to the record.
            Some(Chunk::Block(p) | Chunk::Shared(p)) => OneChunk::Direct(*p, Patches::default()),
            // Runs past PATCH_MAX, or layers written ahead, are kept as layers, which only a
            // content tree holds.
            Some(Chunk::Patched { patches, ahead, .. }) if patches.bytes() > PATCH_MAX || !ahead.is_empty() => return Ok(None),
            Some(Chunk::Patched { base, patches, owned, .. }) => {
                // The overlay's reference moves to the record, or the tree's is shared.
                if !owned {
                    self.vol.forest.refs.inc(base);
                }
                OneChunk::Direct(*base, patches.clone())
            }
            Some(Chunk::Hole) => OneChunk::Empty,
            None if !n.inode.inline.is_empty() => OneChunk::Inline(n.inode.inline.clone()),
            None => {
                let stored = match n.inode.direct_chunk() {
                    Some(c) => Some(c),
                    None => match self.vol.forest.get(tree, &chunk_key(0))? {
                        Some(v) => Some(StoredChunk::from_value(&v)?),
                        None => None,
                    },
                };
                match stored {
                    Some(c) if !c.layers.is_empty() => return Ok(None),
                    Some(c) => {
                        self.vol.forest.refs.inc(&c.block);
                        OneChunk::Direct(c.block, c.patches)
                    }
                    None => OneChunk::Empty,
                }
            }
        };
        Ok(Some(one))
    }

    pub fn checkpoint(&mut self) -> Result<()> {
        self.checkpoint_with(Fold::Carry)
    }

    pub(crate) fn checkpoint_with(&mut self, fold: Fold) -> Result<()> {
        if self.view.is_some() {
            // A view holds the committed state and never changes (`view.rs`).
            debug_assert!(!self.pending(), "a view with changes");
            return Ok(());
        }
        if let Some(why) = &self.vol.failed {
            return Err(Error::Format(format!("filesystem failed earlier: {why}")));
        }
        let r = self.finish_commit().and_then(|()| {
            // A host filled by others since the last look: the reserve makes room first.
            self.room_for_checkpoint();
            let f = self.fold_and_write(fold)?;
            self.vol.forest.store.sync()?;
            self.commit_tail(f)
        });
        self.checkpoint_done(r)
    }

    /// What every checkpoint does once committed, or failed.
    fn checkpoint_done(&mut self, r: Result<()>) -> Result<()> {
        if r.is_ok() {
            self.vol.forest.store.settle_streams();
        }
        if let Err(e) = &r {
            log::error!("checkpoint failed, refusing changes until remount: {e}");
            self.vol.failed = Some(format!("checkpoint failed: {e}"));
        }
        r
    }

    /// The background's checkpoint, overlapped with requests: folded and written under the
    /// engine lock, the packs synced without it (`PackSync::run`), committed under it again
    /// (`checkpoint_end`). Requests in between journal into the current journal as usual; the
    /// commit copies their records into the next one (`Journal::window`), so a crash before
    /// the superblock replays them after the old checkpoint and one after it replays them
    /// after the new. None if a commit is already in flight or the volume failed.
    pub fn checkpoint_begin(&mut self) -> Result<Option<PackSync>> {
        assert!(self.view.is_none(), "a checkpoint of a view");
        if self.vol.failed.is_some() || self.committing.is_some() {
            return Ok(None);
        }
        self.room_for_checkpoint();
        // The nodes the fold pushes out of the cache are dropped with the packs' sync, after
        // the lock (`PackSync::run`).
        self.vol.forest.defer_drops();
        let folded = self.fold_and_write(Fold::Carry);
        let dead = self.vol.forest.take_dropped();
        let f = match folded {
            Ok(f) => f,
            Err(e) => return self.checkpoint_done(Err(e)).map(|()| None),
        };
        let id = f.generation;
        self.committing = Some(f);
        if let Some(j) = &mut self.vol.journal {
            j.window = Some(Vec::new());
        }
        crate::failpoint::hit_at("commit-window", &self.vol.dir.to_string_lossy());
        Ok(Some(PackSync {
            store: self.vol.forest.store.clone(),
            generation: id,
            dead: std::sync::Mutex::new(dead),
        }))
    }

    /// Commits the checkpoint `checkpoint_begin` began, once `sync` ran (`synced`: how it
    /// went); nothing if another checkpoint finished it meanwhile.
    pub fn checkpoint_end(&mut self, sync: PackSync, synced: Result<()>) -> Result<()> {
        if self.committing.as_ref().map(|f| f.generation) != Some(sync.generation) {
            return Ok(());
        }
        let f = self.committing.take().expect("just checked");
        let r = synced.and_then(|()| self.commit_tail(f));
        self.checkpoint_done(r)
    }

    /// The inodes the checkpoint in flight folded or carried (none if there is none).
    pub(crate) fn in_flight_inos(&self) -> impl Iterator<Item = &Ino> {
        self.committing
            .iter()
            .flat_map(|f| f.dirty.iter().chain(f.carry.iter().map(|(i, _)| i)))
    }

    /// Commits the checkpoint in flight, if any, now (its packs synced here, under the lock):
    /// for a command that journals a record built on what that checkpoint folded (a clone).
    pub(crate) fn commit_in_flight(&mut self) -> Result<()> {
        let r = self.finish_commit();
        self.checkpoint_done(r)
    }

    /// Commits an in-flight checkpoint under the lock (its packs synced here): what any other
    /// checkpoint does first, so that commits stay in order.
    fn finish_commit(&mut self) -> Result<()> {
        match self.committing.take() {
            None => Ok(()),
            Some(f) => {
                self.vol.forest.store.sync()?;
                self.commit_tail(f)
            }
        }
    }

    /// A checkpoint, in its steps: what changed since the last one is folded into new
    /// tree versions bottom-up (files, directories deepest first, link tables, the namespace
    /// table) and written with the checkpoint record (this function); the packs synced; the
    /// next journal and a new superblock written (`commit_tail`); then what the old versions
    /// alone held is freed.
    fn fold_and_write(&mut self, fold: Fold) -> Result<InFlight> {
        assert!(self.committing.is_none(), "a checkpoint folded while another is in flight");
        let t0 = Instant::now();
        let tree_bytes_before = self.vol.forest.store.written().1;
        self.vol.forest.fold_begins();
        let data_bytes = self.dirty_bytes;
        let flushed_bytes = std::mem::take(&mut self.flushed_bytes);
        // What the pieces noted lay in is folded into blocks now.
        self.pieces.clear();
        self.background_woken = false;
        // Orphans closed since the last checkpoint drop their content now.
        for p in std::mem::take(&mut self.orphan_releases) {
            self.vol.forest.release(&p)?;
        }

        // Only what changed is visited (see `Fs::dirty`).
        let mut dirty: Vec<Ino> = std::mem::take(&mut self.dirty)
            .into_iter()
            .filter(|i| self.nodes.contains_key(i))
            .collect();
        // 0. Files with only small overwrites are carried, not folded.
        let carry = self.carry(&mut dirty, &fold)?;
        crate::failpoint::hit_at("checkpoint", &self.vol.dir.to_string_lossy());
        crate::failpoint::pause("fold.hold");
        let targets = self.prepass(&dirty);
        let n_dirty = dirty.len();
        self.fold_files(&dirty)?;
        self.dirty_bytes = self.orphans.iter().map(|i| chunk_bytes(&self.nodes[i])).sum();
        let t_files = t0.elapsed();
        let (fresh_roots, fresh_sums) = self.fold_dirs(&dirty)?;
        self.fold_namespaces(&fresh_roots, &fresh_sums)?;
        // The prepass references not released above now belong to the records written.
        for ino in targets.iter().chain(&dirty) {
            if let Some(n) = self.nodes.get_mut(ino) {
                n.prepass = None;
                n.prepass_sum = None;
            }
        }
        // The blocks they describe are in the trees now, with their sums.
        self.vol.fresh_sums.clear();
        self.last_checkpoint = Instant::now();
        let t_files_trees = (t_files, t0.elapsed() - t_files);
        // The tree nodes the fold made (written once the packs sync): what it cost the disk.
        let tree_bytes = self.vol.forest.store.written().1 - tree_bytes_before;
        let (made, again) = self.vol.forest.fold_rewrites();
        self.fold_cost.note(n_dirty, t0.elapsed(), made, again);
        let mut f = self.commit_head(carry, dirty, t0)?;
        f.log = format!(
            "{} MiB of buffered data ({} MiB more written behind), {} inodes changed; files {:?}, trees {:?} ({} nodes, {} KiB, {} of them replacing the last fold's)",
            data_bytes >> 20,
            flushed_bytes >> 20,
            n_dirty,
            t_files_trees.0,
            t_files_trees.1,
            made,
            tree_bytes >> 10,
            again.map_or("none".to_string(), |n| n.to_string()),
        );
        Ok(f)
    }

    /// Step 1, the prepass: a reference on the old content (and summary) of every record
    /// about to be rewritten, so that a record moving between directories in one batch
    /// (rename) is held whichever side releases first; and orphan references for files
    /// removed while open. Returns the records rewritten through their parents' overlays.
    fn prepass(&mut self, dirty: &[Ino]) -> HashSet<Ino> {
        let mut targets: HashSet<Ino> = HashSet::new();
        for dir in dirty {
            let n = &self.nodes[dir];
            if n.loc == Loc::Gone {
                continue;
            }
            for (name, e) in &n.entries {
                if let Some(Ent::Node(i)) = e {
                    // Invariant: an overlay entry names an inode that lives exactly there.
                    assert_eq!(
                        self.nodes[i].loc,
                        Loc::Entry {
                            parent: *dir,
                            name: name.clone()
                        },
                        "overlay entry of ino {i} is stale"
                    );
                    targets.insert(*i);
                }
            }
        }
        for ns in self.namespaces.values() {
            targets.extend(ns.links.values().flatten());
        }
        for ino in &targets {
            let n = self.nodes.get_mut(ino).expect("overlay names an unloaded inode");
            if let Some(c) = n.inode.content {
                self.vol.forest.refs.inc(&c);
                n.prepass = Some(c);
            }
            if let Some(c) = n.inode.summary {
                self.vol.forest.refs.inc(&c);
                n.prepass_sum = Some(c);
            }
        }
        for ino in &self.orphans {
            let n = self.nodes.get_mut(ino).expect("an orphan is loaded");
            if n.loc == Loc::Gone && n.opens > 0 && n.orphan_ref.is_none() && n.inode.kind == Kind::File {
                if let Some(c) = n.inode.content {
                    self.vol.forest.refs.inc(&c);
                    n.orphan_ref = Some(c);
                }
            }
        }

        targets
    }

    /// Step 2: file overlays become content trees (or inline bytes, or a direct chunk).
    fn fold_files(&mut self, dirty: &[Ino]) -> Result<()> {
        let files: Vec<Ino> = dirty
            .iter()
            .filter(|i| {
                let n = &self.nodes[i];
                !n.chunks.is_empty() && n.loc != Loc::Gone
            })
            .copied()
            .collect();
        for ino in files {
            self.fold_file(ino)?;
        }
        Ok(())
    }

    /// One file's overlay folded into its record: inline bytes, a direct chunk, or a new
    /// version of its content tree.
    fn fold_file(&mut self, ino: Ino) -> Result<()> {
        let n = &self.nodes[&ino];
        assert!(!n.inline_cold, "content folded without its inline bytes (inode {ino:#x})");
        // Invariant: a file folded here is named in its parent's overlay or its link table,
        // so the prepass holds a reference to its old content, released below.
        assert_eq!(
            n.prepass, n.inode.content,
            "ino {ino}: folded without a prepass reference"
        );
        // A file that stores nothing past chunk 0 keeps it in its record: inline bytes, or
        // the block (and patches) a one-entry content tree would hold.
        if let Some(one) = self.single_chunk(ino)? {
            let n = self.nodes.get_mut(&ino).unwrap();
            // Buffers are dropped; the only block the overlay may hold is chunk 0's,
            // whose reference `single_chunk` moved to the result.
            n.chunks.clear();
            let i = &mut n.inode;
            (i.inline, i.direct) = (Vec::new(), None);
            match one {
                OneChunk::Inline(bytes) => {
                    i.alloc = bytes.len() as u64;
                    i.content = None;
                    i.inline = bytes;
                }
                OneChunk::Direct(block, patches) => {
                    i.alloc = (block.len as u64).max(patches.end() as u64);
                    i.content = Some(block);
                    i.direct = Some(patches);
                }
                OneChunk::Empty => {
                    i.alloc = 0;
                    i.content = None;
                }
            }
            if let Some(p) = n.prepass.take() {
                self.vol.forest.release(&p)?;
            }
            return Ok(());
        }
        let n = self.nodes.get_mut(&ino).unwrap();
        let chunks = std::mem::take(&mut n.chunks);
        let mut ops: Vec<Op> = Vec::with_capacity(chunks.len() + 1);
        let mut alloc_fix: i64 = 0;
        // Chunk 0 kept in the record by a file that now needs a tree moves into it.
        let old_inline = std::mem::take(&mut n.inode.inline);
        let old_direct = n.inode.direct_chunk();
        n.inode.direct = None;
        let tree = if old_direct.is_some() { None } else { n.inode.content };
        if !chunks.contains_key(&0) {
            if !old_inline.is_empty() {
                let ptr = self.vol.forest.store.write(BlockKind::Data, &old_inline)?;
                ops.push((
                    chunk_key(0),
                    Some(plain_value(ptr, Some(page_sums(&old_inline).into()))),
                ));
            }
            if let Some(c) = old_direct {
                self.vol.forest.refs.inc(&c.block);
                ops.push((chunk_key(0), Some(c.to_value())));
            }
        }
        for (idx, c) in chunks {
            match c {
                Chunk::Buf(buf) if buf.iter().any(|b| *b != 0) => {
                    let ptr = self.vol.forest.store.write(BlockKind::Data, &buf)?;
                    ops.push((chunk_key(idx), Some(plain_value(ptr, Some(page_sums(&buf).into())))));
                }
                Chunk::Buf(buf) => {
                    // All zeros: stored as a hole.
                    alloc_fix -= buf.len() as i64;
                    ops.push((chunk_key(idx), None));
                }
                // Written ahead: the tree takes the block's one reference.
                Chunk::Block(ptr) | Chunk::Shared(ptr) => {
                    let sums = self.vol.fresh_sums.get(&ptr.addr).cloned();
                    ops.push((chunk_key(idx), Some(plain_value(ptr, sums))))
                }
                Chunk::Hole => ops.push((chunk_key(idx), None)),
                Chunk::Patched { base, patches, owned, ahead } => {
                    let v = self.patched_value(tree.as_ref(), idx, base, patches, owned, ahead)?;
                    ops.push((chunk_key(idx), Some(v)))
                }
            }
        }
        let new = self.vol.forest.apply(tree.as_ref(), ops)?;
        let n = self.nodes.get_mut(&ino).unwrap();
        n.inode.alloc = (n.inode.alloc as i64 + alloc_fix).max(0) as u64;
        n.inode.content = new;
        if let Some(p) = n.prepass.take() {
            self.vol.forest.release(&p)?;
        }
        Ok(())
    }

    /// The value of chunk `idx` as `base` with `patches` laid over it, owning its references
    /// (the value it replaces in the content tree `tree` drops its own). Up to `PATCH_MAX`
    /// bytes the patches go in the value; past it, or over a layered chunk, they go in layers
    /// (format 16): the committed layers and one more holding what is new since them, or, when
    /// those cannot be kept (`LAYERS_MAX` of them, past `LAYER_RUNS_MAX` runs, or a truncate
    /// cut them), all the patches as one layer. So a checkpoint writes what changed since the
    /// last one, not the whole block. `owned`: the overlay holds `base`'s reference (a block
    /// written ahead), which moves to the value. `ahead`: layers written ahead, which hold
    /// every run new since the last checkpoint (`layer_ahead.rs`): they become the chunk's
    /// newest layers where they fit, or are let go of.
    fn patched_value(
        &mut self,
        tree: Option<&BlockPtr>,
        idx: u64,
        base: BlockPtr,
        patches: Patches,
        owned: bool,
        ahead: Vec<Layer>,
    ) -> Result<Value> {
        let old = match self.vol.forest.get(tree, &chunk_key(idx))? {
            Some(v) if !owned => Some(StoredChunk::from_value(&v)?).filter(|c| c.block == base),
            _ => None,
        };
        let share = |fs: &mut Fs, p: &BlockPtr| {
            if !owned {
                fs.vol.forest.refs.inc(p);
            }
        };
        let sums = match self.vol.fresh_sums.get(&base.addr) {
            Some(s) => Some(s.clone()),
            None => old.as_ref().and_then(|c| c.sums.clone()),
        };
        if !ahead.is_empty() {
            match self.stack_ahead(old.as_ref(), owned, &ahead)? {
                Some(layers) => {
                    share(self, &base);
                    return Ok(StoredChunk { block: base, sums, layers, patches }.to_value());
                }
                // Too many to keep: the chunk's runs are written again below.
                None => self.vol.garbage.extend(ahead.iter().map(|l| l.block)),
            }
        }
        let layered = old.as_ref().is_some_and(|c| !c.layers.is_empty());
        if patches.is_empty() || (patches.bytes() <= PATCH_MAX && !layered) {
            share(self, &base);
            return Ok(StoredChunk::new(base, patches, sums).to_value());
        }
        if patches.bytes() > LAYERED_MAX || patches.run_count() > LAYER_RUNS_MAX {
            // `Fs::patched` keeps no more; rewritten whole should it happen.
            debug_assert!(false, "{} bytes of patches over chunk {idx}", patches.bytes());
            let mut b = self.vol.forest.store.read(&base)?;
            patches.apply(&mut b);
            let ptr = self.vol.forest.store.write(BlockKind::Data, &b)?;
            if owned {
                self.vol.garbage.push(base);
            }
            return Ok(plain_value(ptr, Some(page_sums(&b).into())));
        }
        let (mut layers, mut fresh) = (Vec::new(), patches.clone());
        if let Some(mut c) = old.filter(|c| layered && c.layers.len() < LAYERS_MAX) {
            c.load_layers(&self.vol.forest.store)?;
            match patches.since(&c.patches) {
                Some(new) if c.layer_runs() + new.run_count() <= LAYER_RUNS_MAX => (layers, fresh) = (c.layers, new),
                _ => {}
            }
        }
        share(self, &base);
        for l in &layers {
            self.vol.forest.refs.inc(&l.block);
        }
        if !fresh.is_empty() {
            let (runs, bytes) = fresh.to_layer();
            let block = self.vol.forest.store.write(BlockKind::Data, &bytes)?;
            layers.push(Layer { block, runs });
        }
        let c = StoredChunk {
            block: base,
            sums,
            layers,
            patches,
        };
        debug_assert!(!c.layers.is_empty(), "a layered chunk without layers");
        Ok(c.to_value())
    }

    /// Step 3: directories, deepest first, each record rewritten into its parent's overlay
    /// up to its namespace root. Returns the namespaces whose root content and summary were
    /// rewritten (their new roots carry their own references).
    fn fold_dirs(&mut self, dirty: &[Ino]) -> Result<(HashSet<u32>, HashSet<u32>)> {
        let mut heap: BinaryHeap<(usize, Ino)> = BinaryHeap::new();
        let mut queued: HashSet<Ino> = HashSet::new();
        let depth_of = |nodes: &InoMap<Box<Node>>, mut ino: Ino| {
            let mut d = 0;
            while let Some(Loc::Entry { parent, .. }) = nodes.get(&ino).map(|n| &n.loc) {
                ino = *parent;
                d += 1;
            }
            d
        };
        for ino in dirty {
            let n = &self.nodes[ino];
            if (!n.entries.is_empty() || !n.sum_delta.is_empty()) && n.loc != Loc::Gone {
                heap.push((depth_of(&self.nodes, *ino), *ino));
                queued.insert(*ino);
            }
        }
        let mut fresh_roots: HashSet<u32> = HashSet::new();
        let mut fresh_sums: HashSet<u32> = HashSet::new();
        while let Some((depth, ino)) = heap.pop() {
            let n = self.nodes.get_mut(&ino).unwrap();
            let entries = std::mem::take(&mut n.entries);
            let delta = std::mem::take(&mut n.sum_delta);
            let content = n.inode.content;
            let summary = n.inode.summary;
            let mut fresh_sum = false;
            if !delta.is_empty() {
                let mut ops: Vec<Op> = Vec::with_capacity(delta.len());
                for (k, d) in delta {
                    let cur = match self.vol.forest.get(summary.as_ref(), &k)? {
                        Some(v) => summary_count(&v)? as i64,
                        None => 0,
                    };
                    let new = cur + d;
                    if new < 0 {
                        return Err(Error::corrupt(
                            "subtree summary",
                            format!("directory ino {ino}"),
                            format!("count {cur} {d:+} below zero"),
                        ));
                    }
                    ops.push((
                        k,
                        if new == 0 {
                            None
                        } else {
                            Some(summary_value(new as u64))
                        },
                    ));
                }
                let new = self.vol.forest.apply(summary.as_ref(), ops)?;
                let n = self.nodes.get_mut(&ino).unwrap();
                n.inode.summary = new;
                if let Some(p) = n.prepass_sum.take() {
                    self.vol.forest.release(&p)?;
                }
                fresh_sum = true;
            }
            let mut ops: Vec<Op> = Vec::with_capacity(entries.len());
            for (name, e) in entries {
                let v = match e {
                    None => None,
                    Some(Ent::Node(c)) => {
                        let child = &self.nodes[&c];
                        debug_assert!(child.entries.is_empty(), "child directory applied before its parent");
                        assert!(!child.inline_cold, "a record written without its inline bytes (inode {c:#x})");
                        Some(EntryRecord::inline_value(&child.inode))
                    }
                    Some(Ent::Link { oid, kind }) => Some(EntryRecord::Linked { oid, kind }.to_value()),
                    Some(Ent::Mount { oid }) => Some(EntryRecord::Mount { oid }.to_value()),
                };
                ops.push((name, v));
            }
            let mut fresh_content = false;
            if !ops.is_empty() {
                let new = self.vol.forest.apply(content.as_ref(), ops)?;
                let n = self.nodes.get_mut(&ino).unwrap();
                n.inode.content = new;
                if let Some(p) = n.prepass.take() {
                    self.vol.forest.release(&p)?;
                }
                fresh_content = true;
            }
            let n = self.nodes.get_mut(&ino).unwrap();
            // A record rewritten here owns one reference to each pointer: fresh roots carry
            // theirs; an unchanged one takes the prepass reference, or a new one when this
            // directory was rewritten only because something below it changed.
            if let Loc::Entry { .. } = n.loc {
                if !fresh_content && n.prepass.is_none() {
                    if let Some(c) = n.inode.content {
                        self.vol.forest.refs.inc(&c);
                    }
                }
                if !fresh_sum && n.prepass_sum.is_none() {
                    if let Some(c) = n.inode.summary {
                        self.vol.forest.refs.inc(&c);
                    }
                }
            }
            let n = self.nodes.get_mut(&ino).unwrap();
            match n.loc.clone() {
                Loc::Entry { parent, name } => {
                    self.nodes
                        .get_mut(&parent)
                        .unwrap()
                        .entries
                        .insert(name, Some(Ent::Node(ino)));
                    if queued.insert(parent) {
                        heap.push((depth - 1, parent));
                    }
                }
                Loc::Root => {
                    let ns = n.ns;
                    if fresh_content {
                        fresh_roots.insert(ns);
                    }
                    if fresh_sum {
                        fresh_sums.insert(ns);
                    }
                    self.namespaces.get_mut(&ns).unwrap().dirty = true;
                }
                _ => unreachable!("a removed directory is never queued"),
            }
        }

        Ok((fresh_roots, fresh_sums))
    }

    /// Step 4: link tables and the namespace table.
    fn fold_namespaces(&mut self, fresh_roots: &HashSet<u32>, fresh_sums: &HashSet<u32>) -> Result<()> {
        let mut ns_ops: Vec<Op> = Vec::new();
        let ids: Vec<u32> = self.namespaces.keys().copied().collect();
        for id in ids {
            let ns = self.namespaces.get_mut(&id).unwrap();
            if !ns.dirty && ns.links.is_empty() {
                continue;
            }
            let links = std::mem::take(&mut ns.links);
            let mut link_root = ns.link_root;
            let mut fresh_link = false;
            if !links.is_empty() {
                let mut ops: Vec<Op> = Vec::new();
                for (oid, e) in links {
                    let v = e.map(|ino| {
                        let n = &self.nodes[&ino];
                        assert!(!n.inline_cold, "a record written without its inline bytes (inode {ino:#x})");
                        inode_to_value(&n.inode)
                    });
                    ops.push((oid_key(oid), v));
                }
                link_root = self.vol.forest.apply(link_root.as_ref(), ops)?;
                fresh_link = true;
            }
            let ns = self.namespaces.get_mut(&id).unwrap();
            ns.link_root = link_root;
            ns.dirty = false;
            let root = &self.nodes[&ns.root];
            // The new record owns one reference to each pointer; fresh roots carry theirs.
            if !fresh_roots.contains(&id) {
                if let Some(c) = root.inode.content {
                    self.vol.forest.refs.inc(&c);
                }
            }
            if !fresh_sums.contains(&id) {
                if let Some(c) = root.inode.summary {
                    self.vol.forest.refs.inc(&c);
                }
            }
            if !fresh_link {
                if let Some(l) = link_root {
                    self.vol.forest.refs.inc(&l);
                }
            }
            let rec = NsRecord {
                root: root.inode.clone(),
                link_root,
                next_oid: ns.next_oid,
                inodes: ns.inodes,
                info: ns.info.clone(),
                mounts: ns.mounts.clone(),
            };
            ns_ops.push((ns_key(id), Some(ns_to_value(&rec))));
        }
        for id in std::mem::take(&mut self.dropped_ns) {
            ns_ops.push((ns_key(id), None));
        }
        ns_ops.sort_by(|a, b| a.0.cmp(&b.0));
        if !ns_ops.is_empty() {
            let old = self.ns_root;
            self.ns_root = self.vol.forest.apply(old.as_ref(), ns_ops)?;
            if let Some(old) = old {
                self.vol.forest.release(&old)?;
            }
        }
        self.persist_relocations()?;

        Ok(())
    }

    /// The counts that changed since the last checkpoint go into the reference tree, after
    /// every other tree of this checkpoint (they change counts) and before its freed list is
    /// taken (the tree's old path is on it). The tree's own nodes have a count of one, so
    /// the counts its update touches are back where they were once the old root is released:
    /// none of them is a change for the next checkpoint.
    fn persist_refs(&mut self) -> Result<()> {
        let changes = self.vol.forest.refs.take_changes();
        if changes.is_empty() {
            return Ok(());
        }
        let ops: Vec<scion_tree::Op> = changes
            .into_iter()
            .map(|(addr, n)| {
                let (k, v) = RefTable::entry_bytes(addr, n);
                (k.to_vec(), (n > 1).then(|| scion_tree::Value::new(v.to_vec(), Vec::new())))
            })
            .collect();
        let old = self.refs_root;
        self.refs_root = self.vol.forest.apply(old.as_ref(), ops)?;
        if let Some(old) = old {
            self.vol.forest.release(&old)?;
        }
        debug_assert!(self.vol.forest.refs.take_changes().is_empty(), "the reference tree's update changed a count");
        Ok(())
    }

    /// Step 5: the reference tree's changes, the meta blocks (orphans, freed list) and the
    /// checkpoint record are written; what the commit needs is kept (`InFlight`).
    fn commit_head(&mut self, carry: Vec<(Ino, Vec<u8>)>, dirty: Vec<Ino>, t0: Instant) -> Result<InFlight> {
        let generation = self.vol.generation + 1;
        self.persist_refs()?;
        let orphans: Vec<BlockPtr> = self.orphans.iter().filter_map(|i| self.nodes[i].orphan_ref).collect();
        // Freed by this checkpoint: punched once it is committed.
        let mut freed = std::mem::take(&mut self.vol.forest.freed);
        freed.extend(std::mem::take(&mut self.vol.meta_blocks));
        freed.extend(std::mem::take(&mut self.vol.garbage));
        // Blocks an earlier checkpoint freed and nobody has punched yet stay on the record's
        // list, so that an open after a crash still punches them. They stay on
        // `vol.unpunched` too: a punch batch may be out, and finish while the packs sync.
        let listed: Vec<BlockPtr> = self.vol.unpunched.iter().chain(&freed).copied().collect();
        self.pending_chunks = 0;
        let (record, pages) = crate::records::checkpoint::write(
            &self.vol.forest.store,
            generation,
            self.ns_root.as_ref(),
            self.next_ns,
            self.relocations.as_ref(),
            self.refs_root.as_ref(),
            &orphans,
            &listed,
        )?;
        Ok(InFlight {
            generation,
            record,
            pages,
            // Everything the record names lies below: blocks written after it (data of the
            // requests in the window) are the journal's, as any written ahead.
            position: self.vol.forest.store.position(),
            freed,
            carry,
            dirty,
            t0,
            t_built: t0.elapsed(),
            log: String::new(),
        })
    }

    /// Step 6, once the packs are synced: the next journal is started (the carried records
    /// at its head, then those of the requests since the fold), and the superblock
    /// written: the commit point.
    fn commit_tail(&mut self, f: InFlight) -> Result<()> {
        let t_synced = f.t0.elapsed();
        let window = self.vol.journal.as_mut().and_then(|j| j.window.take()).unwrap_or_default();
        let head: Vec<(&[u8], bool)> = f.carry.iter().map(|(_, p)| (p.as_slice(), false)).collect();
        let rest: Vec<(&[u8], bool)> = window.iter().map(|(p, more)| (p.as_slice(), *more)).collect();
        // The packs' sync wrote out every block the fold deferred (`write_deferred`).
        assert_eq!(self.vol.forest.store.deferred_below(f.position), 0, "a commit of blocks not written");
        let journal = Journal::create_with(&self.vol.host, &self.vol.dir, f.generation, &self.vol.store_id, &head, &rest)?;
        let sb = Superblock {
            version: scion_store::FORMAT_VERSION,
            generation: f.generation,
            store_id: self.vol.store_id,
            pack: f.position.0,
            pack_end: f.position.1,
            checkpoint: Some(f.record),
        };
        sb.write(&self.vol.host, &self.vol.dir)?;

        self.vol.generation = f.generation;
        // What the host was given: not the old journal's records still in its buffer
        // (counted when appended, now never written), but all of the new one: header,
        // carried records, the window's records again, and zeros ahead of them.
        let unwritten = self.vol.journal.as_ref().map_or(0, |j| j.unwritten());
        self.io.journal = self.io.journal.saturating_sub(unwritten) + journal.len + journal.zeros_written();
        // The records of the window are changes the next checkpoint folds.
        self.journal_floor = journal.head_len;
        self.vol.journal = Some(journal);
        self.vol.meta_blocks = vec![f.record];
        self.vol.meta_blocks.extend(f.pages);
        log::debug!(
            "checkpoint {}: {}, written {:?}, pack sync {:?}, commit {:?} ({} records of requests meanwhile)",
            f.generation,
            f.log,
            f.t_built,
            t_synced - f.t_built,
            f.t0.elapsed() - t_synced,
            window.len(),
        );
        self.after_commit(f.dirty, f.freed);
        Ok(())
    }

    /// Step 6, once committed: the carried files stay dirty for the next checkpoint, the
    /// freed blocks wait for reads in flight and are punched (or left to the daemon), and
    /// what nothing holds any more leaves memory.
    fn after_commit(&mut self, dirty: Vec<Ino>, freed: Vec<BlockPtr>) {
        if !self.replaced_ns.is_empty() {
            let nodes = &self.nodes;
            self.replaced_ns.retain(|id| nodes.has_ns(*id));
        }
        // (A carried file unlinked and let go of while the commit was written has left
        // memory: nothing of it is carried on. Its records follow the carried ones in the
        // journal, so a replay removes it again.)
        // (`carried` was set from the same list at the fold, `carry`.)
        let nodes = &self.nodes;
        self.carried.retain(|i| nodes.contains_key(i));
        self.dirty.extend(self.carried.iter().copied());
        self.dirty_bytes += self.carried.iter().map(|i| chunk_bytes(&self.nodes[i])).sum::<u64>();
        // Reads planned before the commit may still be fetching freed blocks; later ones
        // cannot name them. Once these are done the blocks may be punched at any time.
        self.vol.read_gate.wait_idle();
        // After what earlier checkpoints freed: a punch batch out counts on the list's front.
        self.vol.unpunched.extend(freed);
        self.punch_now_unless_later();
        // Unpin what this checkpoint wrote and drop what nothing holds. Inodes loaded by
        // walks that take no kernel reference (a path walk, repack's) and never changed are
        // swept too, whenever as many were loaded since the last sweep as the table then held
        // (amortised: a sweep visits every loaded inode).
        let sweep = self.loaded_since_sweep > self.sweep_at;
        let candidates: Vec<Ino> = if sweep {
            self.nodes.keys().copied().collect()
        } else {
            dirty
        };
        for ino in candidates {
            // Changed again since the fold (by a request while the packs synced, or a carried
            // file): placed in an overlay, it stays pinned for the next checkpoint.
            if self.dirty.contains(&ino) {
                continue;
            }
            let Some(n) = self.nodes.get_mut(&ino) else { continue };
            n.pinned = false;
            if crate::evict::file_unheld(ino, n) {
                self.unload(ino);
            }
        }
        if sweep {
            self.sweep_unheld();
        } else {
            self.sweep_noted_if_due();
        }
    }
}

/// A checkpoint folded and written, not yet committed (`Fs::commit_head`): what its commit
/// writes and, once committed, frees.
pub(crate) struct InFlight {
    generation: u64,
    record: BlockPtr,
    pages: Vec<BlockPtr>,
    /// The packs' append position after the checkpoint's blocks (the superblock's).
    position: (u32, u64),
    freed: Vec<BlockPtr>,
    carry: Vec<(Ino, Vec<u8>)>,
    dirty: Vec<Ino>,
    t0: Instant,
    t_built: std::time::Duration,
    log: String,
}

/// The sync of a background checkpoint's packs, run without the engine lock
/// (`Fs::checkpoint_begin`).
pub struct PackSync {
    store: std::sync::Arc<scion_store::BlockStore>,
    generation: u64,
    /// Tree nodes the fold pushed out of the node cache, dropped here rather than under the
    /// lock (`Forest::defer_drops`).
    dead: std::sync::Mutex<Vec<std::sync::Arc<scion_tree::Node>>>,
}

impl PackSync {
    pub fn run(&self) -> Result<()> {
        drop(std::mem::take(&mut *self.dead.lock().unwrap()));
        self.store.sync()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

impl InFlight {
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

/// A file's content when chunk 0 is all it stores (`Fs::single_chunk`).
enum OneChunk {
    Inline(Vec<u8>),
    Direct(BlockPtr, Patches),
    Empty,
}

/// What `carry` built a file's record from, and the record (encoded).
pub(crate) struct CarryMemo {
    parent_content: Option<BlockPtr>,
    inode: Inode,
    target: crate::journal::Target,
    chunks: Vec<(u64, Patches)>,
    payload: Vec<u8>,
}

impl Node {
    pub(crate) fn new_root(inode: Inode, ns: u32) -> Node {
        Node::new(inode, ns, Loc::Root)
    }
}

/// The value of a chunk that is its block alone, with its page sums if known.
fn plain_value(block: BlockPtr, sums: Option<crate::delta::Sums>) -> Value {
    StoredChunk::new(block, Default::default(), sums).to_value()
}

/// `STORE/closed`: present while the store is closed whole (written after a close's final
/// checkpoint, removed by the next open), so that an open knows whether the store was left
/// by a crash, even one after which the journal holds nothing.
const CLOSED_MARK: &str = "closed";

fn was_closed(host: &scion_store::Host, dir: &Path) -> bool {
    host.exists(&dir.join(CLOSED_MARK))
}

/// Marks the store at `dir` closed whole, or open (durably either way).
pub(crate) fn mark_closed(host: &scion_store::Host, dir: &Path, closed: bool) -> Result<()> {
    let path = dir.join(CLOSED_MARK);
    let io = |e| Error::io(format!("{}", path.display()), e);
    if closed {
        host.open(&path, scion_store::OpenMode::Create).and_then(|f| f.sync_data()).map_err(io)?;
    } else if host.exists(&path) {
        host.remove_file(&path).map_err(io)?;
    } else {
        return Ok(());
    }
    scion_store::sync_dir(host, dir)
}
