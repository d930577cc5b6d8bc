//! While nobody would wait on a fold, changes pile up (`fold_policy`), because each fold
//! rewrites the leaves of the directories it touches and a larger one rewrites a leaf once
//! for many changes. But a rewrite of files spread over directories changes each leaf in one
//! fold whatever its size, and the pile it leaves only makes the next caller wait (issue 38:
//! 3,500-10,900 such rewrites held the lock 65-155 ms in `bench/latency`). So the volume
//! folds early, alone or not, while its folds replace few of the nodes the fold before made;
//! names scattered over a directory, whose leaves the next fold would rewrite again, still
//! pile up. Its own test binary: the fold batch it sets is the process's.

mod common;
use common::*;
use scion_fs::{Fs, Ino};

const BATCH: usize = 128;
const FILES: usize = 600;

/// 1,100 bytes: kept in the file's record, a dozen or so records to a leaf.
fn body(tag: &str, n: usize) -> Vec<u8> {
    format!("{tag} {n:>6}\n").repeat(100).into_bytes()
}

fn rewrite(fs: &mut Fs, dir: Ino, n: usize, tag: &str) {
    let f = lookup(fs, dir, &format!("f{n:04}")).unwrap();
    fs.write(f, 0, &body(tag, n)).unwrap();
}

#[test]
fn rewrites_spread_over_directories_fold_early_while_nobody_waits() {
    scion_fs::fold_policy::set_early_batch(BATCH);
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let dirs: Vec<Ino> = (0..3).map(|d| mkdir(&mut fs, root, &format!("d{d}"))).collect();
    for &d in &dirs {
        for n in 0..FILES {
            mkfile(&mut fs, d, &format!("f{n:04}"), &body("old", n));
        }
    }
    fs.checkpoint().unwrap();
    // A small fold in between: the next one's leaves were not made by the fold before it.
    let other = mkdir(&mut fs, root, "other");
    mkfile(&mut fs, other, "x", b"x");
    fs.checkpoint().unwrap();
    // Every third file of a directory, as a script rewriting a tree would: alone, it piles
    // up (nothing noted about this volume's folds yet).
    for n in (0..FILES).step_by(3) {
        rewrite(&mut fs, dirs[0], n, "new");
    }
    assert!(!fs.fold_due(), "200 waiting, nobody waits on them, nothing known: a pile");
    // A fold of about the early batch (as one taken while someone waits), which replaced
    // leaves no recent fold made: the next changes fold early, though nobody waits.
    fs.checkpoint().unwrap();
    let mut waiting = 0;
    for n in (0..FILES).step_by(3) {
        if fs.fold_due() {
            break;
        }
        rewrite(&mut fs, dirs[1], n, "new");
        waiting += 1;
    }
    // (The directory waits too: its leaves hold the files' records.)
    assert_eq!(waiting, BATCH - 1, "a fold due once a batch waits, though nobody waits on it");
    fs.checkpoint().unwrap();
    fs.close().unwrap();
    let mut fs = open(&store);
    for i in 0..dirs.len() {
        let d = lookup(&mut fs, root, &format!("d{i}")).unwrap();
        for n in 0..FILES {
            let f = lookup(&mut fs, d, &format!("f{n:04}")).unwrap();
            let rewritten = n % 3 == 0 && (i == 0 || (i == 1 && n / 3 < waiting));
            assert_eq!(read_all(&mut fs, f), body(if rewritten { "new" } else { "old" }, n), "d{i}/f{n:04}");
        }
    }
    fs.close().unwrap();
    committed(&store);
}

#[test]
fn names_scattered_over_a_directory_still_pile_up() {
    scion_fs::fold_policy::set_early_batch(BATCH);
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let dir = mkdir(&mut fs, root, "cache");
    // Names spread over the directory's whole range, a few at a time into each leaf.
    let name = |n: usize| format!("{:016x}", (n as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for n in 0..300 {
        mkfile(&mut fs, dir, &name(n), &body("c", n));
    }
    fs.checkpoint().unwrap();
    for n in 300..500 {
        mkfile(&mut fs, dir, &name(n), &body("c", n));
    }
    assert!(!fs.fold_due(), "a pile: nothing noted about this volume's folds yet");
    // This fold rewrites the leaves the fold before made: a larger one would have
    // rewritten each of them once for more names.
    fs.checkpoint().unwrap();
    for n in 500..900 {
        mkfile(&mut fs, dir, &name(n), &body("c", n));
        assert!(!fs.fold_due(), "{} waiting: names scattered over a directory pile up", n - 499);
    }
    fs.close().unwrap();
    let mut fs = open(&store);
    let dir = lookup(&mut fs, root, "cache").unwrap();
    for n in 0..900 {
        let f = lookup(&mut fs, dir, &name(n)).unwrap();
        assert_eq!(read_all(&mut fs, f), body("c", n));
    }
    fs.close().unwrap();
    committed(&store);
}
