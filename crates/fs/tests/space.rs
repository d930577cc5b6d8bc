//! What a store costs on disk.
//!
//! Inline data (format version 5): a file whose only bytes are its first `INLINE_MAX` keeps
//! them in its inode record, so it costs no data block and no content tree. These tests
//! follow files in and out of that form (growing, truncating, sparse extension, zeros,
//! rewrites, hard links, clones, journal replay) and check after every checkpoint what
//! `scion check` counts in the committed store, and that every byte reads back.

use scion_fs::{Fs, Ino, Kind, SetAttr, INLINE_MAX};
use std::path::Path;

mod common;
use common::{committed, new_store, open, read_all};

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn mkfile(fs: &mut Fs, dir: Ino, name: &str) -> Ino {
    fs.mknod(dir, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
        .unwrap()
        .ino
}

fn truncate(fs: &mut Fs, ino: Ino, size: u64) {
    fs.setattr(
        ino,
        SetAttr {
            size: Some(size),
            ..Default::default()
        },
    )
    .unwrap();
}

#[test]
fn small_files_live_in_their_directory() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let dir = fs.mknod(root, b"man", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..300usize {
        let data = bytes(1 + i * 37 % INLINE_MAX, i as u8);
        let f = mkfile(&mut fs, dir, &format!("page{i}.1.gz"));
        fs.write(f, 0, &data).unwrap();
        files.push((format!("page{i}.1.gz"), data));
    }
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    assert_eq!((rep.inline_files, rep.inline_bytes), (300, total as u64), "{rep}");
    // Only tree nodes: the directory's entries with the bytes in them, and the namespace
    // table. As blocks of their own, the files would have made 600.
    assert!(rep.blocks < 80, "{rep}");
    assert!(rep.block_bytes < 2 * total as u64, "{rep}");
    fs.close().unwrap();

    let mut fs = open(&store);
    let root = fs.root();
    let dir = fs.lookup(root, b"man").unwrap().ino;
    for (name, data) in &files {
        let a = fs.lookup(dir, name.as_bytes()).unwrap();
        assert_eq!(a.size, data.len() as u64);
        assert_eq!(a.blocks, (data.len() as u64).div_ceil(512), "st_blocks of {name}");
        assert_eq!(read_all(&mut fs, a.ino), *data, "{name}");
        // Reads at an offset and past the end.
        assert_eq!(
            fs.read(a.ino, 1, 10).unwrap(),
            data[1.min(data.len())..11.min(data.len())]
        );
        assert!(fs.read(a.ino, data.len() as u64, 10).unwrap().is_empty());
    }
    fs.close().unwrap();
}

/// One file through every transition, checked after each checkpoint and after a remount.
#[test]
fn files_move_in_and_out_of_their_records() {
    let (_tmp, store, fs) = new_store();
    let mut fs = fs;
    let root = fs.root();
    let f = mkfile(&mut fs, root, "f");
    let mut model: Vec<u8> = Vec::new();
    // (what to do, the file's form afterwards)
    type Step = fn(&mut Fs, Ino, &mut Vec<u8>);
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Form {
        /// Bytes in the record.
        Inline,
        /// The record names chunk 0's block.
        Direct,
        /// A content tree.
        Tree,
        /// Nothing stored.
        Empty,
    }
    use Form::*;
    let steps: Vec<(&str, Step, Form)> = vec![
        (
            "write 100 bytes",
            |fs, f, m| {
                *m = bytes(100, 1);
                fs.write(f, 0, m).unwrap();
            },
            Inline,
        ),
        (
            "overwrite 10 bytes in the middle",
            |fs, f, m| {
                let d = bytes(10, 2);
                m[40..50].copy_from_slice(&d);
                fs.write(f, 40, &d).unwrap();
            },
            Inline,
        ),
        (
            "grow to exactly INLINE_MAX",
            |fs, f, m| {
                let d = bytes(INLINE_MAX - m.len(), 3);
                fs.write(f, m.len() as u64, &d).unwrap();
                m.extend_from_slice(&d);
            },
            Inline,
        ),
        (
            "grow by one byte",
            |fs, f, m| {
                fs.write(f, m.len() as u64, b"x").unwrap();
                m.push(b'x');
            },
            Direct,
        ),
        (
            "truncate to 500",
            |fs, f, m| {
                truncate(fs, f, 500);
                m.truncate(500);
            },
            Inline,
        ),
        (
            "extend the size to 1 MiB (a hole after the bytes)",
            |fs, f, m| {
                truncate(fs, f, 1 << 20);
                m.resize(1 << 20, 0);
            },
            Inline,
        ),
        (
            "write 5 bytes at 200 KiB",
            |fs, f, m| {
                fs.write(f, 200 << 10, b"hello").unwrap();
                m[200 << 10..(200 << 10) + 5].copy_from_slice(b"hello");
            },
            Tree,
        ),
        // Chunk 0 is a committed block now, which the record then names: moving it inline
        // would mean reading it back during the checkpoint.
        (
            "punch the far bytes out again",
            |fs, f, m| {
                fs.fallocate(
                    f,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    192 << 10,
                    64 << 10,
                )
                .unwrap();
                m[192 << 10..256 << 10].fill(0);
            },
            Direct,
        ),
        (
            "truncate to 0",
            |fs, f, m| {
                truncate(fs, f, 0);
                m.clear();
            },
            Empty,
        ),
        (
            "write 3 bytes at 10",
            |fs, f, m| {
                fs.write(f, 10, b"abc").unwrap();
                *m = vec![0; 13];
                m[10..13].copy_from_slice(b"abc");
            },
            Inline,
        ),
        (
            "zero the first 500 bytes (all zeros: a hole)",
            |fs, f, m| {
                fs.write(f, 0, &[0u8; 500]).unwrap();
                *m = vec![0; 500];
            },
            Empty,
        ),
        (
            "write 70 KiB (two chunks)",
            |fs, f, m| {
                *m = bytes(70 << 10, 4);
                fs.write(f, 0, m).unwrap();
            },
            Tree,
        ),
        (
            "truncate to 2000",
            |fs, f, m| {
                truncate(fs, f, 2000);
                m.truncate(2000);
            },
            Inline,
        ),
        (
            "write 10 bytes at 100 KiB (the inline bytes move to a block)",
            |fs, f, m| {
                fs.write(f, 100 << 10, b"0123456789").unwrap();
                m.resize(100 << 10, 0);
                m.extend_from_slice(b"0123456789");
            },
            Tree,
        ),
        (
            "punch chunk 0",
            |fs, f, m| {
                fs.fallocate(f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, 64 << 10)
                    .unwrap();
                m[..64 << 10].fill(0);
            },
            Tree,
        ),
        (
            "write 100 bytes at 0 (a small chunk 0, but chunk 1 stays)",
            |fs, f, m| {
                let d = bytes(100, 9);
                m[..100].copy_from_slice(&d);
                fs.write(f, 0, &d).unwrap();
            },
            Tree,
        ),
        (
            "punch chunk 1 (the record names chunk 0's block)",
            |fs, f, m| {
                fs.fallocate(
                    f,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    64 << 10,
                    64 << 10,
                )
                .unwrap();
                let end = m.len().min(128 << 10);
                m[64 << 10..end].fill(0);
            },
            Direct,
        ),
        (
            "write 40 KiB at 4 KiB (a new block for chunk 0)",
            |fs, f, m| {
                let d = bytes(40 << 10, 10);
                m[4 << 10..44 << 10].copy_from_slice(&d);
                fs.write(f, 4 << 10, &d).unwrap();
            },
            Direct,
        ),
        (
            "write 70 KiB at 0 (chunk 1 again)",
            |fs, f, m| {
                let d = bytes(70 << 10, 11);
                m[..70 << 10].copy_from_slice(&d);
                fs.write(f, 0, &d).unwrap();
            },
            Tree,
        ),
        (
            "truncate to 3000",
            |fs, f, m| {
                truncate(fs, f, 3000);
                m.truncate(3000);
            },
            Direct,
        ),
    ];
    for (what, step, form) in steps {
        step(&mut fs, f, &mut model);
        assert_eq!(read_all(&mut fs, f), model, "{what}: before the checkpoint");
        fs.checkpoint().unwrap();
        let rep = committed(&store);
        assert_eq!(
            (rep.inline_files, rep.direct_files),
            ((form == Inline) as u64, (form == Direct) as u64),
            "{what}: {rep}"
        );
        // Nothing in packs but the root directory's node and the namespace table, and the
        // one data block of a direct file.
        match form {
            Inline | Empty => assert!(rep.blocks <= 2, "{what}: {rep}"),
            Direct => assert!(rep.blocks <= 3, "{what}: {rep}"),
            Tree => assert!(rep.blocks >= 3, "{what}: {rep}"),
        }
        assert_eq!(read_all(&mut fs, f), model, "{what}: after the checkpoint");
        fs.close().unwrap();
        fs = open(&store);
        let a = fs.lookup(fs.root(), b"f").unwrap();
        assert_eq!(a.ino, f);
        assert_eq!(read_all(&mut fs, f), model, "{what}: after a remount");
        let (lo, hi) = (fs.lseek(f, 0, libc::SEEK_DATA), fs.lseek(f, 0, libc::SEEK_HOLE));
        if model.iter().all(|b| *b == 0) {
            assert_eq!(lo, Err(scion_fs::errno::ENXIO), "{what}");
        } else if form != Tree {
            assert_eq!(lo, Ok(0), "{what}: SEEK_DATA");
            assert_eq!(hi, Ok((64u64 << 10).min(model.len() as u64)), "{what}: SEEK_HOLE");
        }
    }
    fs.close().unwrap();
}

#[test]
fn inline_files_are_shared_by_clones_and_links() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let dir = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let a = mkfile(&mut fs, dir, "a");
    let b = mkfile(&mut fs, dir, "b");
    let (da, db) = (bytes(1500, 5), bytes(700, 6));
    fs.write(a, 0, &da).unwrap();
    fs.write(b, 0, &db).unwrap();
    // A second name puts b's record in the link table.
    fs.link(b, root, b"b2").unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(committed(&store).inline_files, 2);

    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let ca = fs.lookup(c, b"a").unwrap().ino;
    let cb = fs.lookup(c, b"b").unwrap().ino;
    fs.write(ca, 3, b"CLONE").unwrap();
    fs.write(b, 0, b"SOURCE").unwrap();
    let mut ca_want = da.clone();
    ca_want[3..8].copy_from_slice(b"CLONE");
    let mut b_want = db.clone();
    b_want[..6].copy_from_slice(b"SOURCE");
    fs.checkpoint().unwrap();
    for _ in 0..2 {
        let rep = committed(&store);
        // a and b in the source, the clone's own a; its b shares the source's old record.
        assert!(rep.inline_files >= 3, "{rep}");
        let root = fs.root();
        let dir = fs.lookup(root, b"d").unwrap().ino;
        let c = fs.lookup(root, b"c").unwrap().ino;
        let get = |fs: &mut Fs, d: Ino, n: &str| {
            let i = fs.lookup(d, n.as_bytes()).unwrap().ino;
            read_all(fs, i)
        };
        assert_eq!(get(&mut fs, dir, "a"), da);
        assert_eq!(get(&mut fs, dir, "b"), b_want);
        assert_eq!(get(&mut fs, root, "b2"), b_want, "the other name sees the write");
        assert_eq!(get(&mut fs, c, "a"), ca_want);
        assert_eq!(get(&mut fs, c, "b"), db, "the clone keeps what b held when it was made");
        let _ = cb;
        fs.close().unwrap();
        fs = open(&store);
    }
    fs.close().unwrap();
}

/// Small files written and fsynced, then a crash before any checkpoint: the journal's replay
/// makes them inline, and a small file that had a content tree loses it.
#[test]
fn replay_after_a_crash_makes_files_inline() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let big = mkfile(&mut fs, root, "big");
    fs.write(big, 0, &bytes(100_000, 7)).unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(committed(&store).inline_files, 0);
    let mut want = Vec::new();
    for i in 0..20 {
        let f = mkfile(&mut fs, root, &format!("f{i}"));
        let d = bytes(i * 100 + 1, i as u8);
        fs.write(f, 0, &d).unwrap();
        want.push((format!("f{i}"), d));
    }
    truncate(&mut fs, big, 1000);
    fs.fsync().unwrap();
    drop(fs); // a crash: all of it lives only in the journal
    let fs = open(&store);
    fs.close().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.inline_files, 21, "the big file's too: {rep}");
    let mut fs = open(&store);
    let root = fs.root();
    want.push(("big".into(), bytes(100_000, 7)[..1000].to_vec()));
    for (name, d) in &want {
        let i = fs.lookup(root, name.as_bytes()).unwrap().ino;
        assert_eq!(read_all(&mut fs, i), *d, "{name}");
    }
    fs.close().unwrap();
}

/// A burst of journaled writes leaves long journal files (reused, up to 64 MiB each); a clean
/// close gives that space back, and the store opens and reads as before.
#[test]
fn a_closed_store_keeps_no_journal_space() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let mut want = Vec::new();
    for i in 0..3000 {
        let f = mkfile(&mut fs, root, &format!("f{i}"));
        // (At most INLINE_MAX bytes: a file's bytes live in its record, so they are journaled.)
        let d = bytes(2000 + i % 48, i as u8);
        fs.write(f, 0, &d).unwrap();
        want.push(d);
        if i == 1500 {
            fs.checkpoint().unwrap();
        }
    }
    fs.fsync().unwrap();
    let journal_bytes = |store: &Path| -> u64 {
        std::fs::read_dir(store.join("journal"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    assert!(journal_bytes(&store) > 2 << 20, "the writes went to the journal: {}", journal_bytes(&store));
    fs.close().unwrap();
    assert!(
        journal_bytes(&store) < 4096,
        "{} journal bytes at rest",
        journal_bytes(&store)
    );
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    for (i, d) in want.iter().enumerate() {
        let f = fs.lookup(root, format!("f{i}").as_bytes()).unwrap().ino;
        assert_eq!(read_all(&mut fs, f), *d);
    }
    fs.close().unwrap();
}

/// A file of one chunk names its block in its record; a clone's small write to it becomes
/// patches there (copy-on-abundant-write), with the block still shared, and a large one a
/// block of the clone's own.
#[test]
fn one_chunk_files_keep_patches_in_their_records() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let dir = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let (a, b) = (mkfile(&mut fs, dir, "a"), mkfile(&mut fs, dir, "b"));
    let (da, db) = (bytes(10_000, 1), bytes(30_000, 2));
    fs.write(a, 0, &da).unwrap();
    fs.write(b, 0, &db).unwrap();
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(
        (rep.direct_files, rep.blocks),
        (2, 5),
        "two data blocks, two directories, the namespace table: {rep}"
    );

    let c = fs.clone_dir(dir, root, b"c", &[], b"test").unwrap();
    let (ca, cb) = (fs.lookup(c, b"a").unwrap().ino, fs.lookup(c, b"b").unwrap().ino);
    fs.write(ca, 5000, b"sixteen bytes!!!").unwrap();
    fs.write(cb, 0, &bytes(20_000, 3)).unwrap();
    let mut ca_want = da.clone();
    ca_want[5000..5016].copy_from_slice(b"sixteen bytes!!!");
    let mut cb_want = db.clone();
    cb_want[..20_000].copy_from_slice(&bytes(20_000, 3));
    // The close folds everything: the patches go into the clone's record of a.
    fs.close().unwrap();
    let rep = committed(&store);
    assert_eq!((rep.direct_files, rep.patched_chunks), (4, 1), "{rep}");
    assert_eq!(rep.shared_blocks, 1, "a's block, held by both records of a: {rep}");
    let mut fs = open(&store);
    let root = fs.root();
    for (d, name, want) in [
        ("d", "a", &da),
        ("d", "b", &db),
        ("c", "a", &ca_want),
        ("c", "b", &cb_want),
    ] {
        let d = fs.lookup(root, d.as_bytes()).unwrap().ino;
        let i = fs.lookup(d, name.as_bytes()).unwrap().ino;
        assert_eq!(read_all(&mut fs, i), *want, "{name}");
    }
    fs.close().unwrap();
}

/// Bytes the host has allocated to the store's packs.
fn pack_space(store: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(store.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

/// With `punch_later` (as the daemon runs), a checkpoint leaves the blocks it freed for
/// `punch_begin`/`punch_end`, done without the engine lock. Until they are punched, every
/// checkpoint record lists them again, so an open after a crash still gives the space back;
/// a checkpoint between `punch_begin` and `punch_end` keeps the batch's blocks first.
#[test]
fn freed_space_is_punched_later_or_after_a_crash() {
    const MIB: u64 = 1 << 20;
    let (_tmp, store, mut fs) = new_store();
    fs.set_punch_later(true);
    let root = fs.root();
    for i in 0..5u8 {
        let f = mkfile(&mut fs, root, &format!("f{i}"));
        fs.write(f, 0, &bytes(4 << 20, i)).unwrap();
    }
    fs.checkpoint().unwrap();
    let full = pack_space(&store);
    assert!(full >= 20 * MIB, "{full} bytes of packs for 20 MiB of data");

    // Two files removed, two checkpoints, nothing punched: then a crash.
    for name in ["f0", "f1"] {
        fs.unlink(root, name.as_bytes()).unwrap();
        fs.checkpoint().unwrap();
    }
    assert!(fs.unpunched_blocks() >= 128, "{} blocks waiting", fs.unpunched_blocks());
    assert!(pack_space(&store) >= full - MIB, "nothing was punched yet");
    drop(fs);
    committed(&store);
    let mut fs = open(&store);
    fs.set_punch_later(true);
    let after_open = pack_space(&store);
    assert!(
        after_open <= full - 7 * MIB,
        "the open punched both files: {full} -> {after_open}"
    );
    let root = fs.root();
    let f2 = fs.lookup(root, b"f2").unwrap().ino;
    assert_eq!(read_all(&mut fs, f2), bytes(4 << 20, 2));

    // Punched in the background: a checkpoint between taking the batch and reporting it.
    fs.unlink(root, b"f2").unwrap();
    fs.checkpoint().unwrap();
    let batch = fs.punch_begin().expect("f2's blocks wait");
    fs.unlink(root, b"f3").unwrap();
    fs.checkpoint().unwrap();
    let waiting = fs.unpunched_blocks();
    let done = batch.run();
    fs.punch_end(done);
    assert!(fs.unpunched_blocks() >= 64 && fs.unpunched_blocks() < waiting);
    assert!(pack_space(&store) <= after_open - 3 * MIB, "f2 punched");
    assert!(pack_space(&store) >= after_open - 5 * MIB, "f3 not yet");
    // Closing punches what is left.
    fs.close().unwrap();
    assert!(pack_space(&store) <= after_open - 7 * MIB, "f3 punched at close");
    committed(&store);
    let mut fs = open(&store);
    let f4 = fs.lookup(fs.root(), b"f4").unwrap().ino;
    assert_eq!(read_all(&mut fs, f4), bytes(4 << 20, 4));
    fs.close().unwrap();
}
