//! A clone's or a snapshot's closing fsync left to the caller (`Fs::with_sync_owed`), who
//! makes it before answering: the daemon, without the engine lock, so that requests go on
//! while the disk flushes what was written before the command (issue 38). Outside that
//! scope, or on a volume without a journal, the command syncs itself as before.

mod common;
use common::*;
use scion_fs::{Fs, Ino, Kind};

/// A directory `d` holding a file, committed; returns it.
fn base(fs: &mut Fs) -> Ino {
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(fs, d, "a", b"kept");
    fs.checkpoint().unwrap();
    d
}

/// The clone `c` and the snapshot `s1` of `d`, found after a crash or not.
fn found_after_crash(store: &std::path::Path) -> (bool, bool) {
    committed(store);
    let mut fs = open(store);
    let root = fs.root();
    let d = lookup(&mut fs, root, "d").unwrap();
    let clone = lookup(&mut fs, root, "c").ok().map(|c| {
        let a = lookup(&mut fs, c, "a").unwrap();
        assert_eq!(read_all(&mut fs, a), b"kept");
    });
    let snap = lookup(&mut fs, d | scion_fs::clone::SNAPDIR_BIT, "s1").is_ok();
    fs.close().unwrap();
    (clone.is_some(), snap)
}

#[test]
fn a_clone_and_a_snapshot_leave_their_sync_to_the_caller() {
    for synced in [false, true] {
        let (_tmp, store, mut fs) = new_store();
        let d = base(&mut fs);
        let root = fs.root();
        let (r, owed) = fs.with_sync_owed(|fs| fs.clone_dir(d, root, b"c", &[], b"d"));
        r.unwrap();
        assert!(owed, "the clone's sync is owed");
        let (r, owed) = fs.with_sync_owed(|fs| fs.snapshot(d, b"s1", b"d"));
        r.unwrap();
        assert!(owed, "the snapshot's sync is owed");
        let (r, owed) = fs.with_sync_owed(|fs| fs.getattr(root));
        r.unwrap();
        assert!(!owed, "nothing owed by a command that journals nothing");
        if synced {
            fsync(&mut fs);
        }
        drop(fs); // a crash
        // Not synced, neither was made durable by the command itself.
        assert_eq!(found_after_crash(&store), (synced, synced), "synced by the caller: {synced}");
    }
}

/// Outside `with_sync_owed`, and on a volume without a journal (a `nojournal` cube, whose
/// sync is a checkpoint), a clone and a snapshot are durable when they return.
#[test]
fn elsewhere_a_clone_and_a_snapshot_sync_themselves() {
    for journaled in [true, false] {
        let (_tmp, store, mut fs) = new_store();
        let d = base(&mut fs);
        fs.set_journaled(journaled).unwrap();
        let root = fs.root();
        if journaled {
            fs.clone_dir(d, root, b"c", &[], b"d").unwrap();
            fs.snapshot(d, b"s1", b"d").unwrap();
        } else {
            let (r, owed) = fs.with_sync_owed(|fs| fs.clone_dir(d, root, b"c", &[], b"d"));
            r.unwrap();
            assert!(!owed, "no journal: the clone's checkpoint is its sync");
            let (r, owed) = fs.with_sync_owed(|fs| fs.snapshot(d, b"s1", b"d"));
            r.unwrap();
            assert!(!owed);
        }
        drop(fs); // a crash
        assert_eq!(found_after_crash(&store), (true, true), "journaled: {journaled}");
    }
}
