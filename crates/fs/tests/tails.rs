//! Write once for small files (issue 37): a write that gives a file its last, partial chunk
//! whole puts that chunk in a pack ahead of its journal record (format 12, record types 20
//! and 21), so the bytes are not written to the journal and again at the checkpoint. Every
//! later change to such a chunk (an append, an overwrite, a truncation) must read the same
//! before and after a crash, and the store must check clean.

use scion_fs::{Fs, Ino, SetAttr};

mod common;
use common::{committed, lookup, mkfile, new_store, open, read_all};

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed as usize * 13) % 251) as u8 + 1).collect()
}

fn journal(fs: &Fs) -> u64 {
    fs.status_facts().written.journal
}

/// Small files, each written at once, as untar writes them: their bytes go to the packs
/// once, the journal holds only records, and a crash before the checkpoint keeps them all.
#[test]
fn small_files_written_at_once_skip_the_journal_and_survive_a_crash() {
    let (_tmp, dir, mut fs) = new_store();
    let root = fs.root();
    let sizes = [2049, 3000, 4096, 10_000, 65_535, 65_537, 200_000];
    let j0 = journal(&fs);
    for (i, len) in sizes.iter().enumerate() {
        mkfile(&mut fs, root, &format!("f{i}"), &bytes(*len, i as u8));
    }
    let total: usize = sizes.iter().sum();
    let journaled = journal(&fs) - j0;
    // Each file's record names a block (and the whole chunks of the two large ones).
    assert!(journaled < 4096, "{journaled} journal bytes for {total} bytes in {} files", sizes.len());
    fs.fsync().unwrap();
    drop(fs); // a crash: the journal is replayed at the next open
    let mut fs = open(&dir);
    let root = fs.root();
    for (i, len) in sizes.iter().enumerate() {
        let f = lookup(&mut fs, root, &format!("f{i}")).unwrap();
        assert_eq!(fs.getattr(f).unwrap().size, *len as u64);
        assert!(read_all(&mut fs, f) == bytes(*len, i as u8), "f{i}");
    }
    fs.close().unwrap();
    let rep = committed(&dir);
    assert_eq!(rep.unreferenced_bytes, 0, "{rep}");
}

/// What is not a file's whole last chunk is not a tail: a small file that lives in its inode
/// record is journaled, a write into the middle of a longer file goes ahead as a layer over the
/// tail block (`layer_ahead.rs`: only its record is journaled), one that does not start its
/// last chunk is journaled.
#[test]
fn writes_that_do_not_make_the_last_chunk_whole_are_journaled() {
    let (_tmp, _dir, mut fs) = new_store();
    let root = fs.root();
    let j0 = journal(&fs);
    mkfile(&mut fs, root, "inline", &bytes(2048, 1));
    assert!(journal(&fs) - j0 >= 2048, "a file of 2 KiB lives in its record, journaled");
    let f = mkfile(&mut fs, root, "f", &bytes(100_000, 2));
    let j1 = journal(&fs);
    fs.write(f, 65_536, &bytes(8192, 3)).unwrap(); // leaves bytes of the file past it
    assert!(journal(&fs) - j1 < 1024, "a layer written ahead: {} journal bytes", journal(&fs) - j1);
    let j2 = journal(&fs);
    fs.write(f, 70_000, &bytes(40_000, 4)).unwrap(); // does not start chunk 1
    assert!(journal(&fs) - j2 >= 40_000);
}

/// A tail block changed every way a file changes, compared with a plain model, live, after a
/// checkpoint, and after a crash that replays it all.
#[test]
fn a_tail_appended_overwritten_truncated_and_extended_reads_right_after_a_crash() {
    let (_tmp, dir, mut fs) = new_store();
    let root = fs.root();
    let mut model: Vec<(String, Vec<u8>)> = Vec::new();
    let mut file = |fs: &mut Fs, name: &str, ops: &[(&str, u64, usize)]| {
        let f = fs
            .mknod(root, name.as_bytes(), scion_fs::Kind::File, 0o644, 0, 0, 0, 0, &[])
            .unwrap()
            .ino;
        let mut m: Vec<u8> = Vec::new();
        for (k, &(op, at, len)) in ops.iter().enumerate() {
            match op {
                "w" => {
                    let d = bytes(len, k as u8 + name.len() as u8);
                    fs.write(f, at, &d).unwrap();
                    let end = at as usize + len;
                    if m.len() < end {
                        m.resize(end, 0);
                    }
                    m[at as usize..end].copy_from_slice(&d);
                }
                "t" => {
                    fs.setattr(f, SetAttr { size: Some(at), ..Default::default() }).unwrap();
                    m.resize(at as usize, 0);
                }
                "c" => fs.checkpoint().unwrap(),
                _ => unreachable!(),
            }
            assert!(read_all(fs, f) == m, "{name} after op {k}");
        }
        model.push((name.to_string(), m));
        f
    };
    file(&mut fs, "append", &[("w", 0, 5000), ("w", 5000, 9000), ("w", 14_000, 70_000)]);
    file(&mut fs, "append-committed", &[("w", 0, 5000), ("c", 0, 0), ("w", 5000, 9000)]);
    file(&mut fs, "rewrite", &[("w", 0, 30_000), ("w", 4096, 100), ("w", 0, 20_000)]);
    file(&mut fs, "shrink", &[("w", 0, 30_000), ("t", 10_000, 0), ("w", 0, 12_000)]);
    file(&mut fs, "grow", &[("w", 0, 30_000), ("t", 300_000, 0), ("w", 262_144, 5000)]);
    file(&mut fs, "regrow", &[("w", 0, 70_000), ("t", 3000, 0), ("w", 65_536, 3000), ("c", 0, 0), ("w", 0, 9000)]);
    let f = file(&mut fs, "twice", &[("w", 0, 30_000), ("w", 0, 40_000)]);
    fs.fsync().unwrap();
    let _: Ino = f;
    drop(fs); // a crash
    let mut fs = open(&dir);
    let root = fs.root();
    for (name, m) in &model {
        let f = lookup(&mut fs, root, name).unwrap();
        assert!(read_all(&mut fs, f) == *m, "{name} after the crash");
    }
    fs.close().unwrap();
    let rep = committed(&dir);
    assert_eq!(rep.unreferenced_bytes, 0, "{rep}");
}

fn data_written(fs: &Fs) -> u64 {
    fs.status_facts().written.data
}

/// While callers sync, a new small file's fsync syncs the journal alone: its tail is
/// journaled rather than written ahead (`Fs::tail_ahead`), which would make the fsync sync
/// the packs before the journal (on ext4 a commit of the host's journal for the pack's new
/// block). The bytes survive a crash, and the checkpoint puts them in a pack.
#[test]
fn small_files_fsynced_one_by_one_are_journaled() {
    let (_tmp, dir, mut fs) = new_store();
    let root = fs.root();
    mkfile(&mut fs, root, "first", &bytes(4096, 9));
    assert!(data_written(&fs) >= 4096, "before any sync, a small file's tail goes ahead");
    fs.fsync().unwrap();
    let (d0, j0) = (data_written(&fs), journal(&fs));
    for i in 0..3u8 {
        mkfile(&mut fs, root, &format!("f{i}"), &bytes(4096 + i as usize * 1000, i));
        fs.fsync().unwrap();
    }
    assert_eq!(data_written(&fs), d0, "no block written for files fsynced one by one");
    assert!(journal(&fs) - j0 >= 3 * 4096, "their bytes are journaled");
    drop(fs); // a crash
    let mut fs = open(&dir);
    let root = fs.root();
    for i in 0..3u8 {
        let f = lookup(&mut fs, root, &format!("f{i}")).unwrap();
        assert!(read_all(&mut fs, f) == bytes(4096 + i as usize * 1000, i), "f{i}");
    }
    fs.close().unwrap();
    let rep = committed(&dir);
    assert_eq!(rep.unreferenced_bytes, 0, "{rep}");
}

/// A small file written in pieces becomes a tail block at its fsync (`Fs::settle_run`) only
/// when that fsync syncs the packs anyway, for a block another record names.
#[test]
fn a_small_file_written_in_pieces_settles_only_with_a_pack_sync() {
    let (_tmp, dir, mut fs) = new_store();
    let root = fs.root();
    fs.fsync().unwrap();
    let pieces = |fs: &mut Fs, name: &str, seed: u8| {
        let f = fs.mknod(root, name.as_bytes(), scion_fs::Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
        let all = bytes(10_000, seed);
        for (at, end) in [(0, 4096), (4096, 8192), (8192, 10_000)] {
            fs.write(f, at as u64, &all[at..end]).unwrap();
        }
    };
    // Nothing else to sync: the pieces stay journaled.
    pieces(&mut fs, "alone", 1);
    let d0 = data_written(&fs);
    fs.fsync().unwrap();
    assert_eq!(data_written(&fs), d0, "a tail block would have cost this fsync a pack sync");
    // A whole chunk of another file written ahead: this fsync syncs the packs, and the
    // pieces ride along as one tail block.
    mkfile(&mut fs, root, "big", &bytes(65_536, 2));
    pieces(&mut fs, "beside", 3);
    let d1 = data_written(&fs);
    fs.fsync().unwrap();
    assert!(data_written(&fs) >= d1 + 10_000, "the pieces settled into a tail block");
    drop(fs); // a crash
    let mut fs = open(&dir);
    let root = fs.root();
    for (name, seed) in [("alone", 1), ("beside", 3)] {
        let f = lookup(&mut fs, root, name).unwrap();
        assert!(read_all(&mut fs, f) == bytes(10_000, seed), "{name}");
    }
    fs.close().unwrap();
    let rep = committed(&dir);
    assert_eq!(rep.unreferenced_bytes, 0, "{rep}");
}
