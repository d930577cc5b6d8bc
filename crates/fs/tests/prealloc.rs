//! Preallocation and st_blocks (issue 36, xfstests generic/568 and 701): `fallocate` makes
//! `st_blocks` count the range, writing into it does not grow the count, truncating and
//! punching give it back, and all of it survives a checkpoint, a reopen and a journal replay.

mod common;
use common::{mkfile, new_store, open};
use scion_fs::{Fs, Ino, SetAttr, ROOT_INO};

const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;

fn blocks(fs: &mut Fs, ino: Ino) -> u64 {
    fs.getattr(ino).unwrap().blocks
}

fn truncate(fs: &mut Fs, ino: Ino, size: u64) {
    let attr = SetAttr { size: Some(size), ..Default::default() };
    fs.setattr(ino, attr).unwrap();
}

#[test]
fn two_preallocated_bytes_across_a_block_boundary_do_not_grow_when_written() {
    // generic/568: fallocate 2 bytes at 4095, write them: st_blocks must not grow.
    let (_t, _store, mut fs) = new_store();
    let f = mkfile(&mut fs, ROOT_INO, "f", b"");
    fs.fallocate(f, 0, 4095, 2).unwrap();
    let before = blocks(&mut fs, f);
    assert!(before > 0, "fallocate counted nothing");
    assert_eq!(fs.getattr(f).unwrap().size, 4097);
    fs.write(f, 4095, b"xy").unwrap();
    assert_eq!(blocks(&mut fs, f), before, "the write into the preallocated range grew st_blocks");
    fs.checkpoint().unwrap();
    assert_eq!(blocks(&mut fs, f), before, "after a checkpoint");
}

#[test]
fn a_large_preallocation_is_counted_and_truncating_gives_back_what_it_cuts() {
    // generic/701: 5 GiB preallocated, truncated to 4 GiB: st_blocks is 4 GiB's.
    let (_t, store, mut fs) = new_store();
    let f = mkfile(&mut fs, ROOT_INO, "big", b"");
    fs.fallocate(f, 0, 0, 5 << 30).unwrap();
    assert_eq!(blocks(&mut fs, f), (5u64 << 30) / 512);
    truncate(&mut fs, f, 4 << 30);
    assert_eq!(blocks(&mut fs, f), (4u64 << 30) / 512);
    // Survives a clean reopen (the inode record) and a crash (the journal's replay).
    fs.close().unwrap();
    let mut fs = open(&store);
    let f = fs.lookup(ROOT_INO, b"big").unwrap().ino;
    assert_eq!(blocks(&mut fs, f), (4u64 << 30) / 512);
    fs.fallocate(f, KEEP, 4 << 30, 1 << 20).unwrap();
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open(&store);
    let f = fs.lookup(ROOT_INO, b"big").unwrap().ino;
    assert_eq!(blocks(&mut fs, f), ((4u64 << 30) + (1 << 20)) / 512, "after a replay");
    assert_eq!(fs.getattr(f).unwrap().size, 4 << 30, "KEEP_SIZE changed the size");
}

#[test]
fn data_is_counted_once_and_holes_punched_free_their_preallocation() {
    let (_t, _store, mut fs) = new_store();
    let f = mkfile(&mut fs, ROOT_INO, "f", &[7u8; 100 << 10]);
    let stored = blocks(&mut fs, f);
    // Over stored data, preallocation adds only what lies past it.
    fs.fallocate(f, 0, 0, 1 << 20).unwrap();
    assert_eq!(blocks(&mut fs, f), (1u64 << 20) / 512);
    assert!(stored < (1 << 20) / 512);
    // Writing everywhere in it leaves the count as it was.
    fs.write(f, 0, &vec![1u8; 1 << 20]).unwrap();
    assert_eq!(blocks(&mut fs, f), (1u64 << 20) / 512);
    fs.checkpoint().unwrap();
    assert_eq!(blocks(&mut fs, f), (1u64 << 20) / 512);
    // A hole punched through preallocated and written bytes alike frees both.
    fs.fallocate(f, KEEP, 1 << 20, 1 << 20).unwrap();
    assert_eq!(blocks(&mut fs, f), (2u64 << 20) / 512);
    fs.fallocate(f, PUNCH, 512 << 10, 1 << 20).unwrap();
    assert_eq!(blocks(&mut fs, f), (1u64 << 20) / 512);
    let buf = fs.read(f, 600 << 10, 4096).unwrap();
    assert!(buf.len() == 4096 && buf.iter().all(|b| *b == 0), "the punched hole reads zeros");
}

#[test]
fn too_many_ranges_are_refused_and_change_nothing() {
    let (_t, _store, mut fs) = new_store();
    let f = mkfile(&mut fs, ROOT_INO, "f", b"");
    let chunk = 64u64 << 10;
    for i in 0..scion_fs::prealloc::MAX_RANGES as u64 {
        fs.fallocate(f, KEEP, i * 2 * chunk, chunk).unwrap();
    }
    let before = (blocks(&mut fs, f), fs.getattr(f).unwrap().size);
    let e = fs.fallocate(f, 0, 1 << 30, chunk).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP);
    assert_eq!((blocks(&mut fs, f), fs.getattr(f).unwrap().size), before);
}
