//! Checkpoints overlapped with requests (issue 38): between `checkpoint_begin` (fold and
//! write, under the engine lock) and `checkpoint_end` (commit), requests are served, fsyncs
//! complete, a punch batch taken before may finish, and another checkpoint commits the one
//! in flight first. The crash-state harness covers crashes in that window ("overlapped
//! checkpoints"); these check what is served and kept.

mod common;
use common::*;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Requests and an fsync while the packs sync; the commit keeps them, and a crash after it
/// (or a crash before it, with the fsync done) finds every one.
#[test]
fn requests_between_fold_and_commit_are_kept() {
    for crash_before_commit in [false, true] {
        let (_tmp, store, mut fs) = new_store();
        let root = fs.root();
        let a = mkfile(&mut fs, root, "a", &bytes(3000, 1));
        fs.checkpoint().unwrap();
        fs.write(a, 10, b"folded").unwrap();
        let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
        // Served meanwhile: a write to a folded file, a new file, a rename, an fsync.
        fs.write(a, 100, b"in the window").unwrap();
        mkfile(&mut fs, root, "b", &bytes(70_000, 2));
        fs.rename(root, b"b", root, b"c", 0).unwrap();
        fsync(&mut fs);
        assert!(fs.checkpoint_begin().unwrap().is_none(), "one commit in flight at most");
        if !crash_before_commit {
            let r = sync.run();
            fs.checkpoint_end(sync, r).unwrap();
            assert!(fs.has_changes(), "the window's records are changes for the next checkpoint");
        }
        drop(fs); // a crash
        committed(&store);
        let mut fs = open(&store);
        let root = fs.root();
        let a = lookup(&mut fs, root, "a").unwrap();
        let mut want = bytes(3000, 1);
        want[10..16].copy_from_slice(b"folded");
        want[100..113].copy_from_slice(b"in the window");
        assert_eq!(read_all(&mut fs, a), want, "crash before commit: {crash_before_commit}");
        assert!(lookup(&mut fs, root, "b").is_err());
        let c = lookup(&mut fs, root, "c").unwrap();
        assert_eq!(read_all(&mut fs, c), bytes(70_000, 2));
        fs.close().unwrap();
        committed(&store);
    }
}

/// Another checkpoint while one is in flight commits that one first; its own `end` then
/// does nothing.
#[test]
fn a_checkpoint_commits_the_one_in_flight_first() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    mkfile(&mut fs, root, "a", b"one");
    let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
    mkfile(&mut fs, root, "b", b"two");
    fs.checkpoint().unwrap();
    assert!(!fs.has_changes());
    let r = sync.run();
    fs.checkpoint_end(sync, r).unwrap();
    drop(fs);
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    for (name, data) in [("a", b"one"), ("b", b"two")] {
        let i = lookup(&mut fs, root, name).unwrap();
        assert_eq!(read_all(&mut fs, i), data);
    }
    fs.close().unwrap();
}

/// A punch batch taken before a checkpoint begins and reported while its packs sync (the
/// soak test's panic: the commit had taken the waiting list out of the volume).
#[test]
fn a_punch_batch_ends_while_the_packs_sync() {
    let (_tmp, store, mut fs) = new_store();
    fs.set_punch_later(true);
    let root = fs.root();
    for i in 0..3u8 {
        mkfile(&mut fs, root, &format!("f{i}"), &bytes(1 << 20, i));
    }
    fs.checkpoint().unwrap();
    fs.unlink(root, b"f0").unwrap();
    fs.checkpoint().unwrap();
    let batch = fs.punch_begin().expect("f0's blocks wait");
    let waiting = fs.unpunched_blocks();
    fs.unlink(root, b"f1").unwrap();
    let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
    let done = batch.run();
    fs.punch_end(done);
    assert_eq!(fs.unpunched_blocks(), waiting - done);
    let r = sync.run();
    fs.checkpoint_end(sync, r).unwrap();
    assert!(fs.unpunched_blocks() > waiting - done, "f1's blocks wait after f0's");
    fs.close().unwrap();
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    let f2 = lookup(&mut fs, root, "f2").unwrap();
    assert_eq!(read_all(&mut fs, f2), bytes(1 << 20, 2));
    fs.close().unwrap();
}

/// A snapshot taken while a checkpoint is in flight holds the small overwrites that
/// checkpoint carried in the journal instead of folding (the soak test once found a paused
/// writer's snapshot with two files as they were before their last appends: `changed_below`
/// looked at `carried`, which was empty from the fold until the commit).
#[test]
fn a_snapshot_in_the_window_holds_what_the_checkpoint_carried() {
    for also_dirty in [false, true] {
        let (_tmp, _store, mut fs) = new_store();
        let root = fs.root();
        let d = fs.mknod(root, b"d", scion_fs::Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let f = mkfile(&mut fs, d, "f", &bytes(15_039, 1));
        fs.checkpoint().unwrap();
        // A small append: a patch over the committed block, which the next checkpoint carries.
        fs.write(f, 15_039, &bytes(239, 2)).unwrap();
        let want = read_all(&mut fs, f);
        let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
        if also_dirty {
            mkfile(&mut fs, d, "g", b"in the window");
        }
        fs.snapshot(d, b"s", b"/d").unwrap();
        let s = lookup(&mut fs, d | scion_fs::clone::SNAPDIR_BIT, "s").unwrap();
        let sf = lookup(&mut fs, s, "f").unwrap();
        assert_eq!(read_all(&mut fs, sf).len(), want.len(), "also_dirty {also_dirty}");
        assert!(read_all(&mut fs, sf) == want, "also_dirty {also_dirty}");
        let r = sync.run();
        fs.checkpoint_end(sync, r).unwrap();
        fs.close().unwrap();
    }
}

/// A clone made in the window of a checkpoint that folded a file below its source, then a
/// crash before that commit: the clone, replayed from its journal record over the older
/// checkpoint, still holds the file (the model test found it missing: the record had been
/// journaled over trees that were folded but not committed).
#[test]
fn a_clone_in_the_window_survives_a_crash_before_the_commit() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", scion_fs::Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, d, "old", b"committed");
    fs.checkpoint().unwrap();
    mkfile(&mut fs, d, "new", &bytes(5000, 3));
    let sync = fs.checkpoint_begin().unwrap().expect("a change waits");
    fs.clone_dir(d, root, b"c", &[], b"test").unwrap();
    drop(sync);
    drop(fs); // a crash before the commit
    committed(&store);
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c").unwrap();
    let f = lookup(&mut fs, c, "new").expect("the clone holds the file folded in the window");
    assert_eq!(read_all(&mut fs, f), bytes(5000, 3));
    fs.close().unwrap();
}
