//! Memory in proportion (issue 39): what the kernel forgets, the engine gives back. A walk
//! loads every inode it meets (the kernel holds each: `lookup`); once the kernel forgets them
//! all (`forget`, in any order, as `drop_caches` sends them), the engine holds no more inodes
//! than before the walk, directories included.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use scion_fs::{Fs, Ino, Kind};

mod common;
use common::{mkfile, new_store, open};

const DIRS: usize = 40;
const FILES: usize = 60;

/// `DIRS` directories of `FILES` files each, two levels deep (every fourth directory holds
/// the next three).
fn tree(fs: &mut Fs) {
    let root = fs.root();
    let mut parent = root;
    for d in 0..DIRS {
        if d % 4 == 0 {
            parent = root;
        }
        let dir = fs.mknod(parent, format!("d{d}").as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for f in 0..FILES {
            mkfile(fs, dir, &format!("f{f}"), &[d as u8; 100]);
        }
        if d % 4 == 0 {
            parent = dir;
        }
    }
}

/// A store holding `tree`, opened again: only its root is loaded. (The directory lives as long
/// as the first element.)
fn reopened_tree() -> (tempfile::TempDir, Fs) {
    let (tmp, dir, mut fs) = new_store();
    tree(&mut fs);
    fs.close().unwrap();
    (tmp, open(&dir))
}

/// Looks up everything below `dir` as a walk does; returns what the kernel now holds, each
/// inode with the references it took.
fn walk(fs: &mut Fs, dir: Ino, held: &mut Vec<(Ino, u64)>) {
    for e in fs.readdir(dir).unwrap() {
        let a = fs.lookup(dir, &e.name).unwrap();
        held.push((a.ino, 1));
        if e.kind == Kind::Dir {
            walk(fs, a.ino, held);
        }
    }
}

#[test]
fn forgotten_inodes_leave_memory_directories_included() {
    let (_tmp, dir, mut fs) = new_store();
    tree(&mut fs);
    fs.close().unwrap();
    for seed in 0..3u64 {
        let mut fs = open(&dir);
        let before = fs.memory();
        let mut held = Vec::new();
        let root = fs.root();
        walk(&mut fs, root, &mut held);
        let walked = fs.memory();
        assert_eq!(held.len(), DIRS * (FILES + 1));
        assert_eq!(walked.kernel_inodes, held.len() as u64, "every inode walked is held");
        assert!(walked.inodes >= before.inodes + held.len() as u64);
        // A second walk takes more references to the same inodes.
        walk(&mut fs, root, &mut held);
        // The kernel forgets in its own order: files and directories mixed.
        held.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        for (ino, n) in held {
            fs.forget(ino, n);
        }
        fs.checkpoint().unwrap();
        let after = fs.memory();
        assert_eq!(after.kernel_inodes, 0);
        assert_eq!(
            after.inodes, before.inodes,
            "forgotten inodes stay loaded (seed {seed}): {after:?}, before the walk {before:?}"
        );
        fs.close().unwrap();
    }
}

/// A directory with changes waiting for a checkpoint, or with a child the kernel still
/// holds, stays loaded when the kernel forgets it; it leaves once neither holds.
#[test]
fn a_directory_stays_while_a_child_or_a_change_needs_it() {
    let (_tmp, mut fs) = reopened_tree();
    let root = fs.root();
    let before = fs.memory().inodes;
    let d0 = fs.lookup(root, b"d0").unwrap().ino;
    let d1 = fs.lookup(d0, b"d1").unwrap().ino;
    let f = fs.lookup(d1, b"f3").unwrap().ino;
    fs.forget(d1, 1);
    fs.forget(d0, 1);
    fs.checkpoint().unwrap();
    assert_eq!(fs.memory().inodes, before + 3, "the held file keeps its directories");
    assert_eq!(fs.read(f, 0, 100).unwrap(), vec![1u8; 100]);
    fs.forget(f, 1);
    fs.checkpoint().unwrap();
    assert_eq!(fs.memory().inodes, before);
    // A change in a directory the kernel forgot before the checkpoint folds it.
    let d0 = fs.lookup(root, b"d0").unwrap().ino;
    mkfile(&mut fs, d0, "new", b"x");
    let new = fs.lookup(d0, b"new").unwrap().ino;
    fs.forget(new, 2);
    fs.forget(d0, 1);
    assert!(fs.memory().inodes > before, "the change holds its directory until the checkpoint");
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    assert_eq!(fs.memory().inodes, before);
    let d0 = fs.lookup(root, b"d0").unwrap().ino;
    let new = fs.lookup(d0, b"new").unwrap().ino;
    assert_eq!(fs.read(new, 0, 10).unwrap(), b"x");
    fs.close().unwrap();
}

/// A repack pass looks at every file below its directory without the kernel holding any:
/// the inodes it loaded leave when it ends (on e480a24 they stayed until the inode table
/// doubled, ~1 KB per file of an idle store).
#[test]
fn a_repack_pass_leaves_no_inodes_loaded() {
    let (_tmp, mut fs) = reopened_tree();
    let before = fs.memory().inodes;
    let root = fs.root();
    let r = fs.repack(root, u64::MAX).unwrap();
    assert!(r.files >= (DIRS * FILES) as u64, "{r:?}");
    assert_eq!(fs.memory().inodes, before);
    fs.close().unwrap();
}
