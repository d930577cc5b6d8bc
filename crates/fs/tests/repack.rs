//! Repack: files written a chunk at a time beside other files are scattered in the pack; a
//! repack pass rewrites each one back to back, in directory order, without changing a byte,
//! leaves blocks shared with a clone where they are, respects its budget, and leaves a store
//! that `scion check` finds clean, before and after a remount.

use scion_fs::check::check_committed;
use scion_fs::repack::is_contiguous;
use scion_fs::{Fs, Ino, Kind};
use std::path::Path;

mod common;
use common::{new_store, open};

const CHUNK: usize = 64 << 10;
const CHUNKS: usize = 6;

fn clean(dir: &Path) {
    let rep = check_committed(&scion_store::os_host(), dir).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

fn data(file: usize, chunk: usize) -> Vec<u8> {
    (0..CHUNK)
        .map(|i| ((i * 31 + file * 7 + chunk * 13) % 251) as u8 + 1)
        .collect()
}

fn blocks(fs: &Fs, ino: Ino) -> Vec<(u64, scion_store::BlockPtr)> {
    fs.stored_chunks(ino)
        .unwrap()
        .into_iter()
        .map(|(i, c)| (i, c.block))
        .collect()
}

fn content(fs: &mut Fs, ino: Ino) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// Files `names` in `dir`, written round robin a whole chunk at a time (each chunk goes
/// straight to the pack, so the files' blocks interleave).
fn interleaved(fs: &mut Fs, dir: Ino, names: &[&str], tag: usize) -> Vec<Ino> {
    let inos: Vec<Ino> = names
        .iter()
        .map(|n| {
            fs.mknod(dir, n.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
                .unwrap()
                .ino
        })
        .collect();
    for c in 0..CHUNKS {
        for (k, ino) in inos.iter().enumerate() {
            fs.write(*ino, (c * CHUNK) as u64, &data(tag + k, c)).unwrap();
        }
    }
    inos
}

#[test]
fn repack_makes_scattered_files_contiguous() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let files = interleaved(&mut fs, d, &["a", "b", "c"], 0);
    // A scattered file shared with a clone: repack must not copy it.
    let s = fs.mknod(root, b"s", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let shared = interleaved(&mut fs, s, &["x", "y"], 10);
    fs.checkpoint().unwrap();
    fs.clone_dir(s, root, b"s2", &[], b"test").unwrap();
    let before: Vec<Vec<u8>> = files.iter().map(|i| content(&mut fs, *i)).collect();
    let shared_before: Vec<_> = shared.iter().map(|i| blocks(&fs, *i)).collect();
    for ino in files.iter().chain(&shared) {
        assert!(!is_contiguous(&blocks(&fs, *ino)), "written interleaved, so scattered");
    }

    // A budget of one byte moves one file, the first in name order.
    let r = fs.repack(root, 1).unwrap();
    assert_eq!(
        (r.moved_files, r.moved_bytes, r.budget_reached),
        (1, (CHUNKS * CHUNK) as u64, true),
        "{r:?}"
    );
    assert!(is_contiguous(&blocks(&fs, files[0])));
    assert!(!is_contiguous(&blocks(&fs, files[1])));

    let r = fs.repack(root, u64::MAX).unwrap();
    assert_eq!((r.moved_files, r.shared, r.budget_reached), (2, 2, false), "{r:?}");
    for (k, ino) in files.iter().enumerate() {
        let b = blocks(&fs, *ino);
        assert_eq!(b.len(), CHUNKS);
        assert!(is_contiguous(&b), "file {k} after repack: {b:?}");
        assert_eq!(content(&mut fs, *ino), before[k], "file {k} changed");
    }
    // Files moved by one pass follow each other in name order: c right after b (a moved
    // in the first pass, before that pass's checkpoint wrote its tree nodes).
    let (last, next) = (*blocks(&fs, files[1]).last().unwrap(), blocks(&fs, files[2])[0]);
    assert_eq!(
        (next.1.pack(), next.1.offset()),
        (last.1.pack(), last.1.offset() + last.1.footprint())
    );
    for (ino, b) in shared.iter().zip(&shared_before) {
        assert_eq!(&blocks(&fs, *ino), b, "a block shared with the clone moved");
    }
    // Nothing left to do.
    let r = fs.repack(root, u64::MAX).unwrap();
    assert_eq!((r.moved_files, r.contiguous, r.shared), (0, 3, 2), "{r:?}");
    clean(&store);

    drop(fs);
    let mut fs = open(&store);
    let root = fs.root();
    let d = fs.lookup(root, b"d").unwrap().ino;
    for (k, name) in ["a", "b", "c"].iter().enumerate() {
        let ino = fs.lookup(d, name.as_bytes()).unwrap().ino;
        assert_eq!(content(&mut fs, ino), before[k], "file {k} after remount");
        assert!(is_contiguous(&blocks(&fs, ino)));
    }
    drop(fs);
    clean(&store);
}

#[test]
fn repack_leaves_changed_files_alone() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let files = interleaved(&mut fs, root, &["a", "b"], 0);
    fs.checkpoint().unwrap();
    // A small overwrite makes `a` a patched file: its patches are carried, not folded.
    fs.write(files[0], 100, b"0123456789abcdef").unwrap();
    let mut expect = content(&mut fs, files[0]);
    let r = fs.repack(root, u64::MAX).unwrap();
    assert_eq!((r.moved_files, r.busy), (1, 1), "{r:?}");
    assert_eq!(content(&mut fs, files[0]), expect);
    // A write after the repack lands on the moved blocks as usual.
    fs.write(files[1], 5, b"after").unwrap();
    expect = content(&mut fs, files[1]);
    fs.checkpoint().unwrap();
    drop(fs);
    clean(&store);
    let mut fs = open(&store);
    let b = fs.lookup(fs.root(), b"b").unwrap().ino;
    assert_eq!(content(&mut fs, b), expect);
}

#[test]
fn repack_refuses_snapshots() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    interleaved(&mut fs, d, &["a", "b"], 0);
    fs.snapshot(d, b"s", b"test").unwrap();
    let snapdir = fs.lookup(d, b".snapshot").unwrap().ino;
    let s = fs.lookup(snapdir, b"s").unwrap().ino;
    assert_eq!(fs.repack(s, u64::MAX), Err(scion_fs::errno::EROFS));
    assert_eq!(fs.repack(snapdir, u64::MAX), Err(scion_fs::errno::EROFS));
}

/// A daemon copies without the engine lock (`repack_begin`, `run`, `repack_end`): what
/// changed between the plan and the end keeps its change (a pending write, a write folded by
/// a checkpoint, an unlink), the untouched file is moved, and the copies nobody took are
/// freed, leaving a clean store.
#[test]
fn changes_made_during_the_copy_win() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let files = interleaved(&mut fs, root, &["a", "b", "c", "d"], 0);
    fs.checkpoint().unwrap();
    let d_before = content(&mut fs, files[3]);
    let plan = fs.repack_begin(root, u64::MAX).unwrap();
    // Meanwhile: `a` gets a pending write, `b` a write folded by a checkpoint, `c` goes.
    fs.write(files[0], 0, &data(90, 0)).unwrap();
    fs.write(files[1], CHUNK as u64, &data(91, 1)).unwrap();
    let (a_now, b_now) = (content(&mut fs, files[0]), content(&mut fs, files[1]));
    fs.unlink(root, b"c").unwrap();
    fs.checkpoint().unwrap();
    let r = fs.repack_end(plan.run()).unwrap();
    assert_eq!((r.moved_files, r.busy), (1, 3), "{r:?}");
    assert_eq!(content(&mut fs, files[0]), a_now, "a pending write was undone");
    assert_eq!(content(&mut fs, files[1]), b_now, "a committed write was undone");
    assert_eq!(content(&mut fs, files[3]), d_before);
    assert!(is_contiguous(&blocks(&fs, files[3])));
    fs.checkpoint().unwrap();
    drop(fs);
    clean(&store);
}

/// A clone taken while the blocks are copied shares them: the copies are dropped, since
/// installing them would undo the sharing.
#[test]
fn a_clone_during_the_copy_stops_the_move() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let files = interleaved(&mut fs, d, &["a", "b"], 0);
    fs.checkpoint().unwrap();
    let before: Vec<_> = files.iter().map(|i| blocks(&fs, *i)).collect();
    let plan = fs.repack_begin(d, u64::MAX).unwrap();
    fs.clone_dir(d, root, b"d2", &[], b"test").unwrap();
    let r = fs.repack_end(plan.run()).unwrap();
    assert_eq!((r.moved_files, r.busy), (0, 2), "{r:?}");
    for (ino, b) in files.iter().zip(&before) {
        assert_eq!(&blocks(&fs, *ino), b, "a block shared with the clone moved");
    }
    drop(fs);
    clean(&store);
}

/// Writes chunks `first..first + n` of `ino` as the mount does: the pack write ahead, then
/// the engine's.
fn write_run(fs: &mut Fs, ino: Ino, first: usize, n: usize, tag: usize) {
    let bytes: Vec<u8> = (first..first + n).flat_map(|c| data(tag, c)).collect();
    let off = (first * CHUNK) as u64;
    let ahead = scion_fs::write_ahead(fs.block_store(), ino, off, &bytes).unwrap();
    fs.write_with(ino, off, &bytes, ahead, scion_fs::Stamp::Now).unwrap();
}

/// Issue 37: a file written front to back in 1 MiB WRITEs that reach the pack two at a time
/// in either order (as the kernel's writeback, served by several threads, delivers them),
/// with checkpoints and another file's writes between, lands in long runs: repack moves
/// none of it (it copied every such file whole before), and no pack space is left unnamed.
/// A file with holes written front to back is contiguous outright.
#[test]
fn a_file_written_front_to_back_is_laid_out_the_first_time() {
    let (_tmp, dir, mut fs) = new_store();
    let root = fs.root();
    let big = fs.mknod(root, b"big", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let other = fs.mknod(root, b"other", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    const RUN: usize = 16; // chunks per WRITE: 1 MiB
    const RUNS: usize = 40;
    for pair in 0..RUNS / 2 {
        let (a, b) = (2 * pair * RUN, (2 * pair + 1) * RUN);
        if pair % 2 == 1 {
            write_run(&mut fs, big, b, RUN, 1); // the later WRITE first
            write_run(&mut fs, big, a, RUN, 1);
        } else {
            write_run(&mut fs, big, a, RUN, 1);
            write_run(&mut fs, big, b, RUN, 1);
        }
        if pair % 7 == 6 {
            write_run(&mut fs, other, pair, 1, 2);
            fs.checkpoint().unwrap();
        }
    }
    // Holes inside one write keep no place.
    let sparse = fs.mknod(root, b"sparse", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let holey: Vec<u8> = (0..12).flat_map(|c| if [3, 4, 9, 10].contains(&c) { vec![0; CHUNK] } else { data(3, c) }).collect();
    let ahead = scion_fs::write_ahead(fs.block_store(), sparse, 0, &holey).unwrap();
    fs.write_with(sparse, 0, &holey, ahead, scion_fs::Stamp::Now).unwrap();
    fs.checkpoint().unwrap();
    let b = blocks(&fs, big);
    assert_eq!(b.len(), RUNS * RUN);
    assert!(scion_fs::repack::is_laid_out(&b), "{b:?}");
    assert!(is_contiguous(&blocks(&fs, sparse)));
    let expect: Vec<u8> = (0..RUNS * RUN).flat_map(|c| data(1, c)).collect();
    assert!(content(&mut fs, big) == expect);
    let rep = fs.repack(root, u64::MAX).unwrap();
    assert_eq!((rep.moved_files, rep.moved_bytes), (1, CHUNK as u64 * 2), "{rep:?}"); // `other` only
    fs.close().unwrap();
    let rep = check_committed(&scion_store::os_host(), &dir).unwrap();
    assert!(rep.is_clean() && rep.unreferenced_bytes == 0, "{rep}");
}

/// Planning a repack looks at every file below the directory but holds none of them: the
/// inodes loaded to plan are unloaded as it goes, and the scattered files it plans are still
/// moved (reloaded by name when installed). The first repack kept every file it looked at
/// loaded until the pass ended (~670 bytes each: 244 MiB for 200,000 files).
#[test]
fn planning_a_repack_holds_no_inode_per_file() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let scattered = interleaved(&mut fs, d, &["a", "b"], 0);
    for k in 0..20 {
        let sub = fs.mknod(d, format!("s{k}").as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for i in 0..100 {
            let f = fs.mknod(sub, format!("f{i}").as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
            fs.write(f, 0, b"small").unwrap();
            fs.forget(f, 1);
        }
        fs.forget(sub, 1);
    }
    scattered.iter().for_each(|f| fs.forget(*f, 1));
    fs.forget(d, 1);
    fs.checkpoint().unwrap();
    drop(fs);
    let mut fs = open(&store);
    let root = fs.root();
    let before = fs.memory().inodes;
    let plan = fs.repack_begin(root, u64::MAX).unwrap();
    let loaded = fs.memory().inodes;
    assert!(loaded < before + 40, "{before} inodes loaded before planning, {loaded} after");
    let r = fs.repack_end(plan.run()).unwrap();
    assert_eq!((r.files, r.moved_files), (2002, 2), "{r:?}");
    let d = fs.lookup(root, b"d").unwrap().ino;
    for name in ["a", "b"] {
        let ino = fs.lookup(d, name.as_bytes()).unwrap().ino;
        assert!(is_contiguous(&blocks(&fs, ino)));
    }
    drop(fs);
    clean(&store);
}
