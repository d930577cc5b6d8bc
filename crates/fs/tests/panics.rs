//! A panic in the engine (a bug) while its lock is held: the volume is marked failed
//! (changes and fsync refused, reads go on), no checkpoint is taken from the half-changed
//! state, and a remount replays everything acknowledged. Alone in its test binary: the
//! failpoint it arms is process-wide.
//!
//! Fails on 4ef7198: the poisoned lock was taken over as if nothing happened, and the next
//! checkpoint committed a state without the inodes the panicked one had taken.

use scion_fs::{failpoint, Kind};
use std::sync::{Arc, Mutex};

mod common;
use common::{committed, lookup, mkfile, new_store, open, read_all};

#[test]
fn a_panic_in_a_checkpoint_fails_the_volume_and_loses_nothing_acknowledged() {
    let (_tmp, store, fs) = new_store();
    let fs = Arc::new(Mutex::new(fs));
    {
        let mut fs = scion_fs::lock(&fs);
        let root = fs.root();
        for i in 0..10 {
            mkfile(&mut fs, root, &format!("f{i}"), format!("file {i}").as_bytes());
        }
        fs.fsync().unwrap();
    }
    failpoint::arm("checkpoint", 1);
    let t = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let _ = scion_fs::lock(&fs).checkpoint();
        })
    };
    assert!(t.join().is_err(), "the failpoint did not fire");
    failpoint::clear();
    {
        let mut fs = scion_fs::lock(&fs);
        assert!(fs.failure().is_some(), "a panic under the lock must fail the volume");
        let root = fs.root();
        // Changes (and fsync, and checkpoints) are refused; reads go on.
        assert_eq!(
            fs.mknod(root, b"late", Kind::File, 0o644, 0, 0, 0, 0, &[]).map(|_| ()),
            Err(scion_fs::errno::EIO)
        );
        assert_eq!(fs.fsync(), Err(scion_fs::errno::EIO));
        assert!(fs.checkpoint().is_err());
        let f3 = lookup(&mut fs, root, "f3").unwrap();
        assert_eq!(read_all(&mut fs, f3), b"file 3");
    }
    let fs = Arc::try_unwrap(fs).ok().unwrap().into_inner().unwrap();
    fs.close().unwrap();
    // The journal was never cut by a checkpoint of the half-taken state: all ten files are
    // back after a remount, and the store checks clean.
    let mut fs = open(&store);
    let root = fs.root();
    for i in 0..10 {
        let f = lookup(&mut fs, root, &format!("f{i}")).unwrap();
        assert_eq!(read_all(&mut fs, f), format!("file {i}").as_bytes());
    }
    assert_eq!(lookup(&mut fs, root, "late"), Err(scion_fs::errno::ENOENT));
    fs.close().unwrap();
    committed(&store);
}
