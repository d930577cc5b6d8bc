//! Copy-on-abundant-write: small overwrites of committed chunks are stored as patches beside
//! the shared block (no new data block), read back right in the source and its clones,
//! survive remounts and journal replay, and fold into a new block once a chunk's patches pass
//! PATCH_MAX. The sizes asserted are what `scion check` counts in the committed store.

use scion_fs::check::check;
use scion_fs::delta::{LAYERED_MAX, LAYERS_MAX, PATCH_MAX};
use scion_fs::{Fs, Ino, Kind};
use std::path::PathBuf;

mod common;
use common::{committed, open, read_all};

const CHUNK: usize = 64 << 10;

fn lookup(fs: &mut Fs, dir: Ino, name: &str) -> Ino {
    fs.lookup(dir, name.as_bytes()).unwrap().ino
}

fn at_root(fs: &mut Fs, name: &str) -> Ino {
    let root = fs.root();
    lookup(fs, root, name)
}

/// The store at `store` opened again (after a close or a crash) and its file `d/f`.
fn reopen(store: &std::path::Path) -> (Fs, Ino) {
    let mut fs = open(store);
    let d = at_root(&mut fs, "d");
    let f = lookup(&mut fs, d, "f");
    (fs, f)
}

/// A new store holding directory `d` with an empty file `f`: (its temporary directory, the
/// store's path, the open store, d, f).
fn store_with_file() -> (tempfile::TempDir, PathBuf, Fs, Ino, Ino) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Fs::create(&scion_store::os_host(), &store).unwrap();
    let mut fs = open(&store);
    let root = fs.root();
    let dir = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let f = fs.mknod(dir, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    (tmp, store, fs, dir, f)
}

#[test]
fn small_writes_to_clones_are_patches() {
    let (_tmp, store, mut fs, dir, f) = store_with_file();
    let root = fs.root();
    // Four chunks of data that compress badly, the last one partial.
    let mut orig: Vec<u8> = (0..3 * CHUNK + 1000).map(|i| (i * 7 % 251) as u8 + 1).collect();
    fs.write(f, 0, &orig).unwrap();
    fs.checkpoint().unwrap();
    let before = committed(&store);
    assert_eq!(before.patched_chunks, 0);

    // A clone, then 16 bytes into every chunk of the clone's file, one of them past the end
    // of the partial last chunk (a patch may lengthen its chunk).
    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let cf = lookup(&mut fs, c, "f");
    let mut cloned = orig.clone();
    for (i, at) in [100usize, CHUNK + 4096, 2 * CHUNK + 65520, 3 * CHUNK + 990]
        .into_iter()
        .enumerate()
    {
        let data = [i as u8 + 0xa0; 16];
        fs.write(cf, at as u64, &data).unwrap();
        if cloned.len() < at + 16 {
            cloned.resize(at + 16, 0);
        }
        cloned[at..at + 16].copy_from_slice(&data);
    }
    assert_eq!(read_all(&mut fs, cf), cloned, "clone before the checkpoint");
    fs.checkpoint().unwrap();
    // The checkpoint carries the file's patches at the head of the new journal instead of
    // rewriting its chunk index and its directory: no data block, no content node.
    let after = committed(&store);
    assert_eq!((after.patched_chunks, after.journal_records), (0, 1), "{after}");
    assert!(
        after.block_bytes - before.block_bytes < 8 * 4096,
        "{} new payload bytes",
        after.block_bytes - before.block_bytes
    );
    fs.checkpoint().unwrap();
    assert_eq!(committed(&store).journal_records, 1, "carried again");
    assert_eq!(read_all(&mut fs, f), orig, "source after the checkpoint");
    assert_eq!(read_all(&mut fs, cf), cloned, "clone after the checkpoint");
    // Reads that start and end inside a patch, and across a patch and its block.
    assert_eq!(fs.read(cf, 104, 8).unwrap(), cloned[104..112]);
    assert_eq!(
        fs.read(cf, CHUNK as u64 + 4000, 200).unwrap(),
        cloned[CHUNK + 4000..CHUNK + 4200]
    );
    // A clone of the directory holding a carried file folds it first, and sees the patches.
    let c2 = fs.clone_dir(c, root, b"c2", &[], b"test").unwrap();
    let c2f = lookup(&mut fs, c2, "f");
    assert_eq!(read_all(&mut fs, c2f), cloned, "clone of the clone");
    let rep = committed(&store);
    // Folded into the committed trees; the clone itself is the journal's one record.
    assert_eq!(
        (rep.patched_chunks, rep.journal_records),
        (4, 1),
        "folded for the clone: {rep}"
    );
    fs.destroy(c2).unwrap();
    // A chmod makes the file's record change in more than times: folded, not carried.
    fs.write(cf, 200, b"x").unwrap();
    cloned[200] = b'x';
    fs.setattr(
        cf,
        scion_fs::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(
        (rep.patched_chunks, rep.patch_bytes, rep.journal_records),
        (4, 65, 0),
        "{rep}"
    );

    // More small writes to a patched chunk add to its patches (journal, then remount).
    fs.write(cf, 120, b"more").unwrap();
    cloned[120..124].copy_from_slice(b"more");
    fs.fsync().unwrap();
    drop(fs); // a crash: the last write lives only in the journal
    let mut fs = open(&store);
    let c = at_root(&mut fs, "c");
    let cf = lookup(&mut fs, c, "f");
    assert_eq!(read_all(&mut fs, cf), cloned, "clone after replay");
    // Opening folds everything carried or replayed into the trees.
    let rep = committed(&store);
    assert_eq!((rep.patched_chunks, rep.patch_bytes), (4, 69), "{rep}");

    // Past PATCH_MAX bytes, a chunk of a file with a content tree keeps its runs in a layer
    // (format 16): the block stays, and the checkpoint writes the runs, not a new chunk.
    for k in 0..(PATCH_MAX / 128 + 8) {
        let at = 2000 + k * 256; // separate runs
        fs.write(cf, at as u64, &[0x55; 128]).unwrap();
        cloned[at..at + 128].copy_from_slice(&[0x55; 128]);
    }
    let before = committed(&store);
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.patched_chunks, 4, "chunk 0 layered: {rep}");
    let grown = rep.block_bytes as i64 - before.block_bytes as i64;
    assert!(grown < (PATCH_MAX as i64) * 4, "{grown} new payload bytes for a layer");
    assert_eq!(read_all(&mut fs, cf), cloned, "layered chunk");
    // Abundant writes: past LAYERED_MAX bytes the chunk becomes a block of its own again.
    let pages = LAYERED_MAX / 4096 + 1;
    fs.write(cf, 0, &vec![0x66; pages * 4096]).unwrap();
    cloned[..pages * 4096].fill(0x66);
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.patched_chunks, 3, "chunk 0 folded: {rep}");

    // The source file's own small write does not show in the clone.
    let d = at_root(&mut fs, "d");
    let f = lookup(&mut fs, d, "f");
    fs.write(f, 5, b"src").unwrap();
    orig[5..8].copy_from_slice(b"src");
    // A truncate into a patched chunk and a copy_file_range from one.
    fs.setattr(
        cf,
        scion_fs::SetAttr {
            size: Some(CHUNK as u64 + 4100),
            ..Default::default()
        },
    )
    .unwrap();
    cloned.truncate(CHUNK + 4100);
    let g = fs.mknod(c, b"g", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    assert_eq!(
        fs.copy_range(cf, 0, g, 0, cloned.len() as u64).unwrap(),
        cloned.len() as u64
    );
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
    let mut fs = open(&store);
    let (d, c) = (at_root(&mut fs, "d"), at_root(&mut fs, "c"));
    let (f, cf, g) = (
        lookup(&mut fs, d, "f"),
        lookup(&mut fs, c, "f"),
        lookup(&mut fs, c, "g"),
    );
    assert_eq!(read_all(&mut fs, f), orig);
    assert_eq!(read_all(&mut fs, cf), cloned);
    assert_eq!(read_all(&mut fs, g), cloned);
    // Destroying the clone leaves the source whole and the store clean.
    fs.destroy(c).unwrap();
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.patched_chunks, 1, "the source's own patch: {rep}");
}

/// The FUSE adapter reads straight into the reply buffer, which holds stale bytes: every read
/// must write all of it (zeros for holes and past a short block), whatever mix of committed
/// blocks, patches, buffered bytes and holes it spans, and match a plain model of the file.
#[test]
fn reads_fill_stale_buffers() {
    let (_tmp, _store, mut fs, dir, f) = store_with_file();
    let root = fs.root();
    let mut model = vec![0u8; 6 * CHUNK + 3000];
    let put = |fs: &mut Fs, model: &mut Vec<u8>, ino: Ino, at: usize, len: usize, seed: usize| {
        let data: Vec<u8> = (0..len).map(|i| ((i + seed) * 13 % 251) as u8 + 1).collect();
        fs.write(ino, at as u64, &data).unwrap();
        model[at..at + len].copy_from_slice(&data);
    };
    // Chunks 0 and 2-3 whole (3 adjacent to nothing before it: 1 is a hole), 4 short.
    put(&mut fs, &mut model, f, 0, CHUNK, 1);
    put(&mut fs, &mut model, f, 2 * CHUNK, 2 * CHUNK, 2);
    put(&mut fs, &mut model, f, 4 * CHUNK, 5000, 3);
    fs.checkpoint().unwrap();
    // A clone whose file gets patches in chunks 2 and 4 (past the short block's end), and
    // buffered bytes in chunk 5, then a size past all of it (a hole at the end).
    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let cf = lookup(&mut fs, c, "f");
    put(&mut fs, &mut model, cf, 2 * CHUNK + 4000, 16, 4);
    put(&mut fs, &mut model, cf, 4 * CHUNK + 6000, 10, 5);
    put(&mut fs, &mut model, cf, 5 * CHUNK + 100, 700, 6);
    fs.fallocate(cf, 0, (6 * CHUNK) as u64, 3000).unwrap();
    assert_eq!(fs.getattr(cf).unwrap().size as usize, model.len());
    let offsets = [
        0,
        1,
        4096,
        CHUNK - 7,
        CHUNK,
        2 * CHUNK,
        2 * CHUNK + 4000,
        4 * CHUNK + 4096,
        5 * CHUNK,
        6 * CHUNK + 10,
    ];
    for round in 0..2 {
        for &at in &offsets {
            for size in [1usize, 100, 4096, CHUNK, 3 * CHUNK + 5, 8 * CHUNK] {
                let plan = fs.read_plan(cf, at as u64, size as u32).unwrap();
                let want = &model[at.min(model.len())..(at + size).min(model.len())];
                assert_eq!(plan.len(), want.len(), "length of read at {at} size {size}");
                let mut buf = vec![0xa5u8; plan.len()];
                plan.fill(&mut buf).unwrap();
                assert!(buf == want, "read at {at} size {size} (round {round})");
            }
        }
        // Again with the clone's changes folded into its own committed blocks.
        fs.checkpoint().unwrap();
    }
}

/// The kernel writes whole pages back: a page that differs from a committed chunk in 16 bytes
/// puts those bytes in the journal, not the page; an identical page puts nothing but its
/// times; a page past the end of the file goes whole (it sets the size). Replay after a crash
/// rebuilds the same file.
#[test]
fn page_writes_journal_only_what_changed() {
    let (_tmp, store, mut fs, _dir, f) = store_with_file();
    let mut model: Vec<u8> = (0..2 * CHUNK + 5000).map(|i| (i * 11 % 253) as u8 + 1).collect();
    fs.write(f, 0, &model).unwrap();
    fs.checkpoint().unwrap();
    let before = fs.journal_len();
    // One page with 16 changed bytes in each of the three chunks, one page unchanged.
    for at in [4096usize, CHUNK + 8192, 2 * CHUNK] {
        let mut page = model[at..at + 4096].to_vec();
        page[100..116].copy_from_slice(&[0xee; 16]);
        fs.write(f, at as u64, &page).unwrap();
        model[at..at + 4096].copy_from_slice(&page);
    }
    let same = model[8192..12288].to_vec();
    fs.write(f, 8192, &same).unwrap();
    fs.fsync().unwrap();
    let small = fs.journal_len() - before;
    assert!(small < 1024, "{small} journal bytes for 48 changed bytes");
    // A page that runs past the end of the file, ending in zeros, sets the size.
    let at = model.len() - 1000;
    let mut page = model[at..].to_vec();
    page.resize(4096, 0);
    page[0] ^= 0xff;
    fs.write(f, at as u64, &page).unwrap();
    model.truncate(at);
    model.extend_from_slice(&page);
    fs.fsync().unwrap();
    assert!(
        fs.journal_len() - before > small + 4096,
        "the extending page is journaled whole"
    );
    assert_eq!(read_all(&mut fs, f), model);
    drop(fs); // a crash: the writes live only in the journal
    let (mut fs, f) = reopen(&store);
    assert_eq!(fs.getattr(f).unwrap().size as usize, model.len());
    assert_eq!(read_all(&mut fs, f), model, "after replay");
    fs.close().unwrap();
    committed(&store);
}

/// `list` counts the patches a checkpoint carries in the journal as the clone's own bytes:
/// a clone with small writes into every chunk of its file holds them, and destroying it
/// frees them.
#[test]
fn list_counts_carried_patches() {
    let (_tmp, store, mut fs, dir, f) = store_with_file();
    let root = fs.root();
    let orig: Vec<u8> = (0..4 * CHUNK).map(|i| (i * 7 % 251) as u8 + 1).collect();
    fs.write(f, 0, &orig).unwrap();
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let fresh = fs.list().unwrap();
    let cf = lookup(&mut fs, c, "f");
    for i in 0..4u64 {
        fs.write(cf, i * CHUNK as u64 + 8192, &[0xee; 100]).unwrap();
    }
    let listed = fs.list().unwrap(); // checkpoints: the patches are carried now
    assert_eq!(committed(&store).journal_records, 1, "the file is carried");
    let (before, after) = (&fresh[0], &listed[0]);
    assert!(
        after.exclusive >= before.exclusive + 400 && after.exclusive < before.exclusive + 8 * 4096,
        "exclusive {} -> {}",
        before.exclusive,
        after.exclusive
    );
    assert!(
        after.referenced >= before.referenced + 400,
        "referenced {} -> {}",
        before.referenced,
        after.referenced
    );
}

/// A write of at most BLIND_MAX bytes to a committed chunk is kept without reading the chunk's
/// block (a blind write: with `cache=writethrough` a 16-byte write would otherwise read 64 KiB,
/// perhaps from the disk); a page-sized write is compared with the block first. Shown on a
/// host whose every pack read fails its checksum: the small write succeeds, the page write and
/// the read get EIO, and with the fault lifted the small write is there.
#[test]
fn small_writes_do_not_read_the_block() {
    use scion_fs::delta::BLIND_MAX;
    use scion_fs::MountOptions;
    use scion_store::faults::{parse, FaultyHost};
    use scion_store::sim::SimHost;
    use std::path::Path;
    use std::sync::Arc;

    let sim = SimHost::default();
    let store = Path::new("/store");
    Fs::create(&(Arc::new(sim.clone()) as scion_store::Host), store).unwrap();
    let open_on = |host: scion_store::Host| {
        Fs::open(
            store,
            MountOptions {
                holder: "coaw test".into(),
                host,
            },
        )
        .unwrap()
    };
    let mut fs = open_on(Arc::new(sim.clone()));
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut data: Vec<u8> = (0..CHUNK).map(|i| (i * 7 % 251) as u8 + 1).collect();
    fs.write(f, 0, &data).unwrap();
    fs.close().unwrap();

    let faulty = Arc::new(FaultyHost::new(
        Arc::new(sim.clone()),
        parse("read:packs/:flip").unwrap(),
    ));
    faulty.arm(false);
    let mut fs = open_on(faulty.clone());
    let f = at_root(&mut fs, "f");
    faulty.arm(true);
    let small = [0xeeu8; BLIND_MAX];
    fs.write(f, 4096, &small).unwrap();
    data[4096..4096 + BLIND_MAX].copy_from_slice(&small);
    assert_eq!(
        fs.write(f, 8192, &[0xdd; 4096]).err(),
        Some(scion_fs::errno::EIO),
        "a page write compares"
    );
    assert_eq!(fs.read(f, 0, 100).err(), Some(scion_fs::errno::EIO));
    fs.fsync().unwrap();
    drop(fs);

    let mut fs = open_on(Arc::new(sim.clone()));
    let f = at_root(&mut fs, "f");
    assert_eq!(read_all(&mut fs, f), data);
    fs.close().unwrap();
    let rep = check(&(Arc::new(sim.clone()) as scion_store::Host), store).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.patched_chunks, 1, "{rep}");
}

/// copy_file_range shares whole chunks (a reflink), including those of a file written since
/// the last checkpoint when there are at least 64 of them: the copy commits the source first,
/// as btrfs writes back a range it clones, so `cp` of a file just made costs no data. Fewer
/// uncommitted chunks are copied byte for byte. Each side's later writes stay its own.
#[test]
fn copies_of_files_just_written_share_their_blocks() {
    let (_tmp, store, mut fs, dir, big) = store_with_file();
    let data: Vec<u8> = (0..128 * CHUNK).map(|i| (i * 13 % 251) as u8).collect();
    fs.write(big, 0, &data).unwrap();
    let copy = fs.mknod(dir, b"copy", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    assert_eq!(
        fs.copy_range(big, 0, copy, 0, data.len() as u64).unwrap(),
        data.len() as u64
    );
    let small = fs.mknod(dir, b"small", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.write(small, 0, &data[..16 * CHUNK]).unwrap();
    let small_copy = fs
        .mknod(dir, b"small-copy", Kind::File, 0o644, 0, 0, 0, 0, &[])
        .unwrap()
        .ino;
    assert_eq!(
        fs.copy_range(small, 0, small_copy, 0, 16 * CHUNK as u64).unwrap(),
        16 * CHUNK as u64
    );
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(
        rep.shared_blocks, 128,
        "the big file's blocks, and not the small one's:\n{rep}"
    );
    assert!(read_all(&mut fs, copy) == data);
    assert!(read_all(&mut fs, small_copy) == data[..16 * CHUNK]);

    // Writes after the copy: each side keeps its own.
    fs.write(big, 5, b"source").unwrap();
    fs.write(copy, 70 * CHUNK as u64, &[1; CHUNK]).unwrap();
    fs.close().unwrap();
    let mut fs = open(&store);
    let d = at_root(&mut fs, "d");
    let (big, copy) = (lookup(&mut fs, d, "f"), lookup(&mut fs, d, "copy"));
    let mut want_big = data.clone();
    want_big[5..11].copy_from_slice(b"source");
    let mut want_copy = data.clone();
    want_copy[70 * CHUNK..71 * CHUNK].fill(1);
    assert!(read_all(&mut fs, big) == want_big);
    assert!(read_all(&mut fs, copy) == want_copy);
    fs.close().unwrap();
    committed(&store);
}

/// A file the checkpoint in flight carries, unlinked and let go of before that checkpoint
/// commits (an overlapped checkpoint: the daemon serves requests while the packs sync): the
/// commit carries nothing of it forward, and nothing is lost. Found by the soak test (seed
/// 23): the commit looked the carried file up after it had left memory, and panicked.
#[test]
fn a_carried_file_removed_while_its_checkpoint_commits() {
    let (_tmp, store, mut fs, dir, f) = store_with_file();
    let root = fs.root();
    let orig: Vec<u8> = (0..2 * CHUNK).map(|i| (i * 7 % 251) as u8 + 1).collect();
    fs.write(f, 0, &orig).unwrap();
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let cf = lookup(&mut fs, c, "f");
    fs.write(cf, 100, b"a small overwrite").unwrap();
    fs.checkpoint().unwrap();
    fs.write(cf, CHUNK as u64 + 7, b"another").unwrap();
    // Only patches: this checkpoint carries the file rather than fold it.
    let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
    fs.forget(cf, 1);
    fs.unlink(c, b"f").unwrap();
    let r = sync.run();
    fs.checkpoint_end(sync, r).unwrap();
    assert!(lookup_err(&mut fs, c, "f"));
    fs.checkpoint().unwrap();
    drop(fs); // a crash: the journal is replayed
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c");
    assert!(lookup_err(&mut fs, c, "f"));
    let d = lookup(&mut fs, root, "d");
    let f = lookup(&mut fs, d, "f");
    assert!(read_all(&mut fs, f) == orig, "the source's file changed");
    fs.close().unwrap();
    committed(&store);
}

fn lookup_err(fs: &mut Fs, dir: Ino, name: &str) -> bool {
    fs.lookup(dir, name.as_bytes()).is_err()
}

/// 4 KiB random overwrites of a large committed file (fio's randwrite): each checkpoint writes
/// the pages changed since the last one as a layer beside the chunk's shared block, not the
/// chunk again; a chunk reaching LAYERS_MAX layers has its runs written as one; reads, a clone
/// taken before, a crash and a reopen all see the right bytes, and the store checks clean.
#[test]
fn random_page_overwrites_are_layered() {
    let (_tmp, store, mut fs, dir, f) = store_with_file();
    let root = fs.root();
    let chunks = 16;
    let orig: Vec<u8> = (0..chunks * CHUNK).map(|i| (i * 13 % 251) as u8 + 1).collect();
    fs.write(f, 0, &orig).unwrap();
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let mut model = orig.clone();
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let mut written = 0;
    let start = fs.status_facts().written.data;
    // Chunk 3 gets one page in every round, so it passes LAYERS_MAX layers.
    for round in 0..LAYERS_MAX + 4 {
        let mut pages: Vec<usize> = (0..4).map(|_| next() % (chunks * 16)).collect();
        pages.push(3 * 16 + round % 16);
        for p in pages {
            let data: Vec<u8> = (0..4096).map(|i| (i + round * 31 + p) as u8 ^ 0x5a).collect();
            fs.write(f, (p * 4096) as u64, &data).unwrap();
            model[p * 4096..(p + 1) * 4096].copy_from_slice(&data);
            written += 4096;
        }
        assert_eq!(read_all(&mut fs, f), model, "round {round}, before the checkpoint");
        fs.checkpoint().unwrap();
        assert_eq!(read_all(&mut fs, f), model, "round {round}, after the checkpoint");
        assert_eq!(fs.read(f, 3 * CHUNK as u64 + 4090, 20).unwrap(), model[3 * CHUNK + 4090..3 * CHUNK + 4110]);
        // Short reads anywhere read only the layers with runs there (`load_layers_over`).
        for _ in 0..32 {
            let (at, len) = (next() % (chunks * CHUNK - 5000), 1 + next() % 5000);
            assert_eq!(fs.read(f, at as u64, len as u32).unwrap(), model[at..at + len], "read of {len} at {at}");
        }
    }
    let rep = committed(&store);
    // Whole chunks rewritten would be 64 KiB a page (the pages fall in different chunks);
    // layers are the pages and their run headers, and chunk 3's runs written again once.
    let data = fs.status_facts().written.data - start;
    assert!(data < 3 * written as u64 / 2, "{data} data bytes written to packs for {written} written");
    assert!(rep.patched_chunks > 0, "{rep}");
    let cf = lookup(&mut fs, c, "f");
    assert_eq!(read_all(&mut fs, cf), orig, "the clone taken before");

    // The journal alone carries the last writes across a crash.
    fs.write(f, 3 * CHUNK as u64 + 8192, &[0xee; 4096]).unwrap();
    model[3 * CHUNK + 8192..3 * CHUNK + 12288].fill(0xee);
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open(&store);
    let (d, c) = (at_root(&mut fs, "d"), at_root(&mut fs, "c"));
    let (f, cf) = (lookup(&mut fs, d, "f"), lookup(&mut fs, c, "f"));
    assert_eq!(read_all(&mut fs, f), model, "after replay");
    assert_eq!(read_all(&mut fs, cf), orig, "the clone after replay");
    // A truncate into a layered chunk, then writes past the cut.
    let cut = 3 * CHUNK + 10_000;
    fs.setattr(f, scion_fs::SetAttr { size: Some(cut as u64), ..Default::default() }).unwrap();
    model.truncate(cut);
    fs.write(f, cut as u64 - 100, &[0x11; 300]).unwrap();
    model.resize(cut + 200, 0);
    model[cut - 100..cut + 200].fill(0x11);
    fs.close().unwrap();
    committed(&store);
    let (mut fs, f) = reopen(&store);
    assert_eq!(read_all(&mut fs, f), model, "after the truncate and a reopen");
    // Destroying the clone leaves the layered file whole and the store clean.
    let c = at_root(&mut fs, "c");
    fs.destroy(c).unwrap();
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// 4 KiB random overwrites of a large committed file reach the disk once: each page goes to a
/// pack as a layer written ahead and the journal names it (`PutLayer`), the checkpoint makes
/// those the chunk's layers and writes no data. A stream's write into such a chunk, the same
/// bytes again, a chunk past LAYERS_MAX layers, a crash (replay rebuilds the layers), a
/// truncate and a reopen all leave the right bytes, and the store checks clean.
#[test]
fn random_page_overwrites_are_written_once() {
    let (_tmp, store, mut fs, _dir, f) = store_with_file();
    let chunks = 32;
    let mut model: Vec<u8> = (0..chunks * CHUNK).map(|i| (i * 7 % 253) as u8 + 1).collect();
    fs.write(f, 0, &model).unwrap();
    fs.checkpoint().unwrap();
    let mut seed = 11u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let w0 = fs.status_facts().written;
    let mut written = 0;
    for round in 0..6 {
        // Pages two apart at least: none is a stream's next write.
        let mut pages: Vec<usize> = (0..24).map(|_| next() % (chunks * 8) * 2).collect();
        pages.push(5 * 16 + round * 2); // chunk 5: a layer every round, past LAYERS_MAX
        for p in pages {
            let data: Vec<u8> = (0..4096).map(|i| (i * 3 + round * 17 + p) as u8 ^ 0xa5).collect();
            fs.write(f, (p * 4096) as u64, &data).unwrap();
            model[p * 4096..(p + 1) * 4096].copy_from_slice(&data);
            written += 4096u64;
        }
        assert_eq!(read_all(&mut fs, f), model, "round {round}, before the checkpoint");
        fs.checkpoint().unwrap();
        assert_eq!(read_all(&mut fs, f), model, "round {round}, after the checkpoint");
    }
    let w = fs.status_facts().written;
    let (data, journal) = (w.data - w0.data, w.journal - w0.journal);
    // Once: the pages, a few runs written again where chunk 5 passed LAYERS_MAX, and records
    // of ~90 bytes. Journaled as bytes they were 2x.
    assert!(journal < written / 10, "{journal} journal bytes for {written} written");
    assert!(data + journal < written * 13 / 10, "{data} data and {journal} journal bytes for {written} written");
    assert!(committed(&store).patched_chunks > 0);

    // Chunk 9: a layer ahead, the same bytes again, then a stream's two writes (as bytes: the
    // chunk's layer goes), then another chunk's layer; chunk 12: layers only, left for replay.
    let at = 9 * CHUNK;
    let page = |v: u8| vec![v; 4096];
    for (off, v) in [(at + 8192, 1u8), (at + 8192, 1), (at + 20480, 2), (at + 24576, 3), (12 * CHUNK + 4096, 4), (12 * CHUNK + 40960, 5)] {
        fs.write(f, off as u64, &page(v)).unwrap();
        model[off..off + 4096].fill(v);
    }
    fs.fsync().unwrap();
    drop(fs); // a crash: the journal carries them
    let (mut fs, f) = reopen(&store);
    assert_eq!(read_all(&mut fs, f), model, "after replay");
    // More layers on the replayed ones, a truncate into chunk 12, a write past the cut.
    fs.write(f, (12 * CHUNK + 16384) as u64, &page(6)).unwrap();
    model[12 * CHUNK + 16384..12 * CHUNK + 20480].fill(6);
    let cut = 12 * CHUNK + 30_000;
    fs.setattr(f, scion_fs::SetAttr { size: Some(cut as u64), ..Default::default() }).unwrap();
    model.truncate(cut);
    fs.setattr(f, scion_fs::SetAttr { size: Some(cut as u64 + 20_000), ..Default::default() }).unwrap();
    model.resize(cut + 20_000, 0);
    assert_eq!(read_all(&mut fs, f), model, "after the truncate");
    fs.close().unwrap();
    committed(&store);
    let (mut fs, f) = reopen(&store);
    assert_eq!(read_all(&mut fs, f), model, "after a reopen");
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// A write across a chunk boundary (the kernel's write-back merges neighbouring dirty pages
/// into one) goes ahead as one layer per chunk, and both chunks go on taking layers; one whose
/// piece is too small for a layer is journaled as bytes, whole. A crash and replay rebuild the
/// same bytes, and the store checks clean.
#[test]
fn writes_across_chunks_go_ahead_piece_by_piece() {
    let (_tmp, store, mut fs, _dir, f) = store_with_file();
    let chunks = 8;
    let mut model: Vec<u8> = (0..chunks * CHUNK).map(|i| (i * 11 % 241) as u8 + 1).collect();
    fs.write(f, 0, &model).unwrap();
    fs.checkpoint().unwrap();
    let w0 = fs.status_facts().written;
    let mut written = 0u64;
    // Two pages over each boundary between chunks 0-1, 2-3, 4-5, then a page in each of
    // those chunks: all layers, none journaled as bytes.
    for (i, at) in [CHUNK - 4096, 3 * CHUNK - 4096, 5 * CHUNK - 4096, 8192, CHUNK + 16384, 4 * CHUNK + 32768]
        .into_iter()
        .enumerate()
    {
        let len = if at % CHUNK == CHUNK - 4096 { 8192 } else { 4096 };
        let data: Vec<u8> = (0..len).map(|j| (j * 13 + i * 29) as u8 ^ 0x5a).collect();
        fs.write(f, at as u64, &data).unwrap();
        model[at..at + len].copy_from_slice(&data);
        written += len as u64;
    }
    let journal = fs.status_facts().written.journal - w0.journal;
    // Records of ~100 bytes, one per piece (nine); the bytes would be 40 KiB.
    assert!(journal < 2048, "{journal} journal bytes for {written} written as layers");
    assert_eq!(read_all(&mut fs, f), model, "before a checkpoint");
    // A write whose second piece is 100 bytes: journaled as bytes, whole.
    let at = 6 * CHUNK - 4096;
    fs.write(f, at as u64, &[0x77; 4196]).unwrap();
    model[at..at + 4196].fill(0x77);
    let journal = fs.status_facts().written.journal - w0.journal;
    assert!(journal > 4196, "{journal} journal bytes: the write was not journaled as bytes");
    fs.fsync().unwrap();
    drop(fs); // a crash: the journal carries them
    let (mut fs, f) = reopen(&store);
    assert_eq!(read_all(&mut fs, f), model, "after replay");
    fs.checkpoint().unwrap();
    assert!(committed(&store).patched_chunks >= 5, "chunks 0-5 layered");
    assert_eq!(read_all(&mut fs, f), model, "after a checkpoint");
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// Layers written ahead into one chunk before an overlapped checkpoint's fold and in its
/// window, then a crash before its commit: replay applies both runs of records to one overlay,
/// which then holds more layers than any one checkpoint's (past LAYERS_MAX), and must read
/// the bytes written.
#[test]
fn layers_ahead_across_an_uncommitted_checkpoint_replay() {
    let (_tmp, store, mut fs, _dir, f) = store_with_file();
    let mut model: Vec<u8> = (0..4 * CHUNK).map(|i| (i * 5 % 249) as u8 + 1).collect();
    fs.write(f, 0, &model).unwrap();
    fs.checkpoint().unwrap();
    let page = |fs: &mut Fs, model: &mut Vec<u8>, p: usize, v: u8| {
        // Half pages: twelve stay under LAYERED_MAX, so the chunk stays layered.
        let at = CHUNK + p * 4096;
        fs.write(f, at as u64, &[v; 2048]).unwrap();
        model[at..at + 2048].fill(v);
    };
    for p in [0, 2, 4, 6, 8, 10] {
        page(&mut fs, &mut model, p, p as u8 + 1);
    }
    let sync = fs.checkpoint_begin().unwrap();
    assert!(sync.is_some(), "a checkpoint in flight");
    for p in [1, 3, 5, 7, 9, 11] {
        page(&mut fs, &mut model, p, p as u8 + 100);
    }
    fs.fsync().unwrap();
    drop(sync);
    drop(fs); // a crash before the commit: the old checkpoint and the whole journal
    let (mut fs, f) = reopen(&store);
    assert_eq!(read_all(&mut fs, f), model, "after replay");
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

/// Overwrites of a file written moments ago, before any checkpoint took its blocks (a database
/// or VM image filled, then written in places): patches over the blocks written ahead, whose
/// reference the overlay holds, then layers; a file overwritten past LAYERED_MAX, one removed
/// and one truncated before the checkpoint give their blocks back (the store checks clean,
/// nothing unreferenced left in the packs).
#[test]
fn overwrites_of_blocks_written_ahead_are_patches() {
    let (_tmp, store, mut fs, dir, f) = store_with_file();
    let chunks = 8;
    let mut model: Vec<u8> = (0..chunks * CHUNK).map(|i| (i * 17 % 251) as u8 + 1).collect();
    fs.write(f, 0, &model).unwrap();
    let g = fs.mknod(dir, b"g", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let h = fs.mknod(dir, b"h", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let k = fs.mknod(dir, b"k", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    for x in [g, h, k] {
        fs.write(x, 0, &model).unwrap();
    }
    let start = fs.status_facts().written.data;
    for (i, p) in [3usize, 17, 18, 40, 41, 42, 100, 127].into_iter().enumerate() {
        let data = vec![0x70 + i as u8; 4096];
        fs.write(f, (p * 4096) as u64, &data).unwrap();
        model[p * 4096..(p + 1) * 4096].copy_from_slice(&data);
    }
    assert_eq!(read_all(&mut fs, f), model, "before the checkpoint");
    // g: chunk 0 overwritten past LAYERED_MAX (rewritten whole); h: removed; k: truncated
    // into a patched chunk.
    for p in 0..=LAYERED_MAX / 4096 {
        fs.write(g, (p * 4096) as u64, &[0x33; 4096]).unwrap();
    }
    fs.write(h, 5 * 4096, &[0x44; 4096]).unwrap();
    fs.unlink(dir, b"h").unwrap();
    fs.forget(h, 1);
    fs.write(k, CHUNK as u64 + 8192, &[0x55; 4096]).unwrap();
    fs.setattr(k, scion_fs::SetAttr { size: Some(CHUNK as u64 + 10_000), ..Default::default() }).unwrap();
    fs.checkpoint().unwrap();
    let data = fs.status_facts().written.data - start;
    assert!(data < 4 * CHUNK as u64, "{data} data bytes for 8 pages of f, g's chunk and k's tail");
    assert_eq!(read_all(&mut fs, f), model, "after the checkpoint");
    fs.close().unwrap();
    let rep = check(&scion_store::os_host(), &store).unwrap();
    assert!(rep.is_clean(), "{rep}");
    assert_eq!(rep.unreferenced_bytes, 0, "{rep}");
    let mut fs = open(&store);
    let d = at_root(&mut fs, "d");
    let (f, g, k) = (lookup(&mut fs, d, "f"), lookup(&mut fs, d, "g"), lookup(&mut fs, d, "k"));
    assert_eq!(read_all(&mut fs, f), model, "after a reopen");
    // g was written before f's overwrites: the original bytes, chunk 0's first pages 0x33.
    let mut gm: Vec<u8> = (0..chunks * CHUNK).map(|i| (i * 17 % 251) as u8 + 1).collect();
    gm[..(LAYERED_MAX / 4096 + 1) * 4096].fill(0x33);
    assert_eq!(read_all(&mut fs, g), gm);
    assert_eq!(fs.getattr(k).unwrap().size, CHUNK as u64 + 10_000);
    let kd = read_all(&mut fs, k);
    assert_eq!(kd[CHUNK + 8192..CHUNK + 10_000], [0x55; 1808]);
    fs.close().unwrap();
    assert!(check(&scion_store::os_host(), &store).unwrap().is_clean());
}
